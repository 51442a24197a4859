#!/usr/bin/env bash
# skeleton.sh generate|check — lab skeletons are generated from the solutions.
#
# Every C file directly in solutions/labNN-*/ is a lab unit. Its reference code sits in
# regions
#       /* BEGIN SOLUTION */
#       ... reference code (dropped from the skeleton) ...
#       /* SKELETON
#       ... text the skeleton gets instead (a comment to the student and a
#           `return kn_not_implemented("labNN", "...");`) ...
#       END SOLUTION */
# In the solution the SKELETON text is inside a comment, so it is never compiled there.
# `generate` writes labs/labNN-*/<same name>.c; `check` fails when labs/ is stale.
set -eu
mode=${1:-check}
gen_one() { # gen_one SOLUTION_FILE -> stdout
    awk -v f="$1" '
    /BEGIN SOLUTION/ { if (inr) { printf "%s:%d: nested BEGIN SOLUTION\n", f, NR > "/dev/stderr"; bad = 1 }
                       inr = 1; sk = 0; start = NR; next }
    inr && /\/\* SKELETON/ { sk = 1; next }
    inr && /END SOLUTION/ { inr = 0; sk = 0; next }
    inr && !sk { next }
    { print }
    END { if (inr) { printf "%s:%d: BEGIN SOLUTION without END SOLUTION\n", f, start > "/dev/stderr"; bad = 1 }
          exit bad }' "$1"
}
status=0
out_root=labs
if [ "$mode" = check ]; then out_root=$(mktemp -d); trap 'rm -rf "$out_root"' EXIT; fi
for sol in solutions/lab[0-9][0-9]-*/*.c; do
    [ -e "$sol" ] || continue
    lab=$(basename "$(dirname "$sol")")
    mkdir -p "$out_root/$lab"
    gen_one "$sol" > "$out_root/$lab/$(basename "$sol")" || status=1
    if grep -q 'SOLUTION' "$out_root/$lab/$(basename "$sol")"; then
        echo "$sol: a stray SOLUTION marker would leak into the skeleton"; status=1
    fi
done
if [ "$mode" = check ]; then
    for gen in "$out_root"/*/*.c; do
        [ -e "$gen" ] || continue
        rel=${gen#"$out_root"/}
        if ! cmp -s "$gen" "labs/$rel"; then
            echo "labs/$rel is stale or missing: run 'make skeletons' and commit the result"
            diff -u "labs/$rel" "$gen" 2>/dev/null | head -20 || true
            status=1
        fi
    done
    [ $status -eq 0 ] && echo "lab skeletons match their solutions"
else
    echo "skeletons written to labs/"
fi
exit $status
