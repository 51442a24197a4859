#!/usr/bin/env bash
# checked-cover.sh NN PRODUCER_DIR CHECKER_DIR — does every `checked` test of lab NN pass
# each value of the student's code through kn_out before it checks it? (issue 36)
#
# Why: under the grader the checker is the staff's build of the test (the staff's units);
# a value the test checks without passing it through kn_out is the STAFF's value there, so
# a wrong student value passes that check unseen. This runs each checked Criterion test
# (rubric tag `checked`, not mpi=) as the grader does, one test a process: the producer
# from PRODUCER_DIR's test binaries (build it with the reference: IMPL=solutions) writes
# its results, and the checker from CHECKER_DIR's (build it with the SKELETON: IMPL=labs
# PRIOR=solutions) judges them. Every test must pass: a skeleton unit's "not implemented"
# can only be hidden from a check by the reference's value, that is by kn_out. A test that
# fails names the value the test checked without kn_out (or a check of the staff's own code
# that the checker should skip, kn_out_checking()). Also: a test that read nothing.
#
#   make build-lab LAB=NN IMPL=solutions PRIOR=solutions HIDDEN=1
#   make build-lab LAB=NN IMPL=labs PRIOR=solutions HIDDEN=1
#   bash tests/grader/checked-cover.sh NN build/labNN-solutions-solutions build/labNN-labs-solutions
set -u
lab=$1 prod=$2 chk=$3
rubric=tests/lab$lab/rubric.txt
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bad=0 n=0 skipped=0
for b in test-lab$lab test-lab$lab-hidden; do
    [ -x "$prod/$b" ] && [ -x "$chk/$b" ] || { echo "checked-cover: $prod/$b or $chk/$b is missing"; exit 2; }
    # suite::name of every test in the binary
    "$prod/$b" --list | awk '/^[^ ├└│]/ { s = $1; sub(/:$/, "", s) } /[├└]── / { print s "::" $2 }' > "$work/list"
    while read -r t; do
        awk -v t="$t" '!/^#/ && $1 == t { for (i = 3; i <= NF; i++) { if ($i == "checked") c = 1; if ($i ~ /^mpi=/) m = 1 } }
                       END { exit !(c && !m) }' "$rubric" || continue
        n=$((n + 1))
        rm -f "$work"/res*; : > "$work/res.0"
        KN_RESULTS_OUT=$work/res KN_TEST_CPU_SECONDS=300 timeout 600 "$prod/$b" --filter "${t/::/\/}" -j1 > "$work/p.log" 2>&1
        out=$(KN_RESULTS_IN=$work/res KN_TEST_CPU_SECONDS=300 timeout 600 "$chk/$b" --filter "${t/::/\/}" -j1 2>&1)
        rc=$?
        late=$(cat "$work"/res.unchecked.* 2>/dev/null)
        if [ $rc = 0 ] && grep -q 'Tested: 0 ' <<< "$out"; then
            echo "skipped here: $t (a GPU test without a GPU?)"; skipped=$((skipped + 1)); continue
        fi
        if [ $rc != 0 ] || [ -n "$late" ] || ! grep -q 'Passing: 1 ' <<< "$out"; then
            bad=$((bad + 1))
            echo "NOT COVERED: $t (rc $rc) ${late}"
            grep -v '^\[----\]\|^\[====\]\|^$' <<< "$out" | head -n 8 | sed 's/^/    /'
        fi
    done < "$work/list"
done
echo "lab $lab: $((n - bad - skipped)) of $n checked tests judge only the producer's values (reference producer, skeleton checker), $skipped skipped"
[ $bad = 0 ]
