#!/usr/bin/env bash
# units.sh list|core|move|check — the lab units that core/ owns (core/mk/units.list).
#
#   list    "lab/unit core/file" per unit
#   core    the core files, one a line (what the Makefile, make dist-student and the
#           grader's student view leave out of the core's own sources)
#   move    make core/ own the units: each solutions/<lab>/<unit> that is still a file is
#           moved (git mv) to its core file and replaced by a relative symbolic link to it
#           (git add). Idempotent: a unit that is a link already is left alone. Run from
#           the repository root; the lead re-runs it after merging edits to solutions/.
#   check   every unit of the list is such a link to an existing core file, and every
#           file in solutions/lab*/ is in the list (exit 1, naming each problem)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
list=$here/units.list
sol=solutions
entries() { grep -vE '^\s*(#|$)' "$list"; }
case ${1:-} in
list) entries ;;
core) entries | awk '{print $2}' ;;
move)
    entries | while read -r unit core; do
        link=$sol/$unit
        [ -L "$link" ] && continue
        [ -f "$link" ] || { echo "units.sh: $link: no such unit" >&2; exit 1; }
        if [ -e "$core" ]; then echo "units.sh: $core exists already: pick another name in units.list" >&2; exit 1; fi
        git mv "$link" "$core"
        ln -s "../../$core" "$link"
        git add "$link"
        echo "moved $link -> $core"
    done ;;
check)
    bad=0
    while read -r unit core; do
        link=$sol/$unit
        [ -d "$sol" ] || break  # the student tree has no solutions/
        if [ ! -L "$link" ]; then echo "$link: not a link to $core (core/mk/units.sh move)"; bad=1
        elif [ "$(readlink "$link")" != "../../$core" ]; then echo "$link: links to $(readlink "$link"), not ../../$core"; bad=1
        elif [ ! -f "$core" ]; then echo "$link: $core is missing"; bad=1
        fi
    done < <(entries)
    for f in "$sol"/lab[0-9][0-9]-*/*.c; do
        [ -e "$f" ] || [ -L "$f" ] || continue
        entries | awk '{print "'"$sol"'/" $1}' | grep -qxF "$f" || { echo "$f: a unit missing from core/mk/units.list"; bad=1; }
    done
    [ $bad = 0 ] && echo "units: every reference unit is a core file, re-exported to solutions/"
    exit $bad ;;
*) echo "usage: units.sh list|core|move|check" >&2; exit 2 ;;
esac
