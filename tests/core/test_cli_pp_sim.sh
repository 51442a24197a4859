#!/usr/bin/env bash
# test_cli_pp_sim.sh KILN — `kiln pp-sim` from the command line: 1F1B on 4 ranks and 8
# micro-batches prints rank 0's list, a step of 33 and the bubble 27.27% beside its formula;
# interleaved's timeline file holds every action (2 m v p rows) and its bubble is 15.79%;
# the committed figure book/figures/pp-schedules.svg is what plots/pp_schedules.sh draws
# from this kiln (where gnuplot is installed); bad arguments exit 2 (an unknown schedule
# names the three) and a schedule that cannot be made (interleaved with m not a multiple of
# p) exits 1 naming the problem. Prints "ok" or what failed.
set -eu
kiln=${1:?usage: test_cli_pp_sim.sh PATH/TO/kiln}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$kiln" pp-sim --schedule 1f1b --pp 4 --microbatches 8 > "$dir/1f1b.out" || fail "1f1b: $(cat "$dir/1f1b.out")"
grep -qx "rank 0: F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7" "$dir/1f1b.out" || fail "rank 0's list: $(cat "$dir/1f1b.out")"
grep -q "^step time 33 .*bubble 27.27% .*= 27.27%$" "$dir/1f1b.out" || fail "1f1b summary: $(cat "$dir/1f1b.out")"
grep -q "per rank: 4 3 2 1$" "$dir/1f1b.out" || fail "1f1b live micro-batches: $(cat "$dir/1f1b.out")"
"$kiln" pp-sim --schedule interleaved --pp 4 --microbatches 8 --quiet --timeline "$dir/tl.tsv" > "$dir/il.out" \
    || fail "interleaved: $(cat "$dir/il.out")"
grep -q "bubble 15.79% .*(p-1)/(vm+p-1) = 15.79%$" "$dir/il.out" || fail "interleaved summary: $(cat "$dir/il.out")"
rows=$(grep -vc '^#' "$dir/tl.tsv")
[ "$rows" = 128 ] || fail "the timeline has $rows actions, expected 2 m v p = 128"
awk -F'\t' '!/^#/ && ($5 > $6 || ($2 != "F" && $2 != "B")) { bad = 1 } END { exit bad }' "$dir/tl.tsv" || fail "bad timeline rows"
if command -v gnuplot > /dev/null; then
    bash plots/pp_schedules.sh "$kiln" "$dir/fig.svg" > /dev/null || fail "plots/pp_schedules.sh failed"
    cmp -s "$dir/fig.svg" book/figures/pp-schedules.svg \
        || fail "book/figures/pp-schedules.svg is stale: make plot-pp-schedules, and commit it"
fi
set +e
"$kiln" pp-sim --schedule 2f2b > "$dir/bad.out" 2>&1; rc=$?
set -e
[ $rc = 2 ] && grep -q "gpipe, 1f1b or interleaved" "$dir/bad.out" || fail "--schedule 2f2b: exit $rc: $(cat "$dir/bad.out")"
set +e
"$kiln" pp-sim --pp 0 > "$dir/bad.out" 2>&1; rc=$?
set -e
[ $rc = 2 ] && grep -q -- "--pp '0'" "$dir/bad.out" || fail "--pp 0: exit $rc: $(cat "$dir/bad.out")"
set +e
"$kiln" pp-sim --schedule interleaved --pp 4 --microbatches 6 > "$dir/bad.out" 2>&1; rc=$?
set -e
[ $rc = 1 ] && grep -q "a multiple of the stages" "$dir/bad.out" || fail "interleaved m=6 p=4: exit $rc: $(cat "$dir/bad.out")"
echo ok
