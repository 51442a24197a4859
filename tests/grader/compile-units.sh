#!/usr/bin/env bash
# compile-units.sh VIEW LABDIR OUTDIR UNIT... — compile the student's units, run by grade.sh
# as an unprivileged user inside the student view (no solutions/, no hidden tests), with
# the compiler and flags the Makefile uses ($CC, $CPPFLAGS, $CFLAGS from the base's flags).
# Compiling runs none of the student's code, but the compiler reads whatever the source
# names, so before anything reaches the compiler's messages:
#   1. the preprocessor lists every file the unit includes (-M); each, with its links and
#      ".." resolved, must lie inside the view or under /usr/; anything else (an absolute path into the instructor's
#      checkout, /autograder/source, ...) is refused without compiling, and so is an
#      include the preprocessor could not open that lies outside the view (this user
#      cannot read the instructor's checkout, e.g. one under a 0700 home folder);
#   2. the unit is compiled to assembly (-S); the assembler directives that read other files
#      (.incbin, .include) are refused;
#   3. the assembly is assembled into OUTDIR/UNIT.o.
# Prints the compiler's messages (warnings included); exit 1 when any unit fails.
set -u
view=$1 labdir=$2 outdir=$3; shift 3
# Warnings are reported, not scored: the grading compiler (another gcc on Gradescope's image)
# may warn where the student's did not. KN_GRADE_WERROR=1 keeps the Makefile's -Werror.
if [ "${KN_GRADE_WERROR:-0}" != 1 ]; then
    f=(); for w in $CFLAGS; do [ "$w" = -Werror ] || f+=("$w"); done; CFLAGS=${f[*]}
fi
cd "$view" || exit 1
here=$(pwd -P)
status=0
for u in "$@"; do
    src=labs/$labdir/$u obj=$outdir/${u%.c}
    # shellcheck disable=SC2086
    if ! deps=$($CC $CPPFLAGS -M -MT x "$src" 2>&1); then
        # An include this user cannot open (a path outside the view: missing here, or
        # unreadable because the staff checkout lies under a 0700 folder) is refused by the
        # same rule, whichever of the two the compiler ran into.
        far=$(sed -nE 's/^.*fatal error: (.+): (No such file or directory|Permission denied)$/\1/p' <<< "$deps" |
            while read -r f; do
                r=$(cd "$(dirname "$src")" && realpath -m -- "$f")
                [[ $r == "$here"/* || $r == /usr/* ]] || echo "$f"
            done)
        if [ -n "$far" ]; then
            echo "$src: includes files outside the lab's headers, refused:"; sed 's/^/    /' <<< "$far"
        else
            echo "$deps"
        fi
        status=1; continue
    fi
    bad=$(sed 's/^x://; s/\\$//' <<< "$deps" | tr ' ' '\n' | sed '/^$/d' | while read -r f; do
        r=$(realpath -m -- "$f")
        [[ $r == "$here"/* || $r == /usr/* ]] || echo "$f"
    done)
    if [ -n "$bad" ]; then
        echo "$src: includes files outside the lab's headers, refused:"; sed 's/^/    /' <<< "$bad"
        status=1; continue
    fi
    # shellcheck disable=SC2086
    if ! $CC $CPPFLAGS $CFLAGS -S "$src" -o "$obj.s" 2>&1; then status=1; continue; fi
    if grep -nE '\.(incbin|include)\b' "$obj.s" | head -3 | grep .; then
        echo "$src: assembler directives that read other files (.incbin/.include) are refused"
        status=1; continue
    fi
    $CC -c "$obj.s" -o "$obj.o" 2>&1 || status=1
done
exit $status
