#!/usr/bin/env bash
# skeleton-check.sh labNN CFG_DIR RESULTS — the untouched skeleton must fail its tests
# cleanly: at least one failure, no crash or timeout, and the failures must say
# "not implemented". Counts as one test in RESULTS.
set -u
lab=$1 cfg=$2 results=$3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# KN_DETAIL_MAX=0: no failing test run again alone for its output (nobody reads it here)
KN_DETAIL_MAX=0 bash tests/harness/run-suite.sh "$lab" "$cfg/test-$lab" "$tmp" > "$tmp/out" 2>&1
KN_DETAIL_MAX=0 bash tests/harness/run-suite.sh "$lab-hidden" "$cfg/test-$lab-hidden" "$tmp" >> "$tmp/out" 2>&1
read -r p1 f1 a1 _ < "$tmp/$lab.count"; read -r p2 f2 a2 _ < "$tmp/$lab-hidden.count"
p=$((p1 + p2)) f=$((f1 + f2)) a=$((a1 + a2))
why=""
[ "$f1" -gt 0 ] || why="its public tests did not fail"
[ "$f2" -gt 0 ] || why="${why:+$why; }its hidden tests did not fail"
[ "$a" -eq 0 ] || why="${why:+$why; }$a tests crashed or timed out"
grep -q "not implemented ($lab" "$tmp/out" || why="${why:+$why; }no 'not implemented ($lab: ...)' message"
mkdir -p "$results"
if [ -z "$why" ]; then
    echo "1 0 0 0" > "$results/skeleton-$lab.count"
    echo "skeleton-$lab: fails cleanly ($f failed, $p passed, 0 crashed): 1 passed, 0 failed"
else
    echo "0 1 0 0" > "$results/skeleton-$lab.count"
    echo "skeleton-$lab: $why: 0 passed, 1 failed"
    grep -E 'CRASH' "$tmp/out" | head -20
    exit 1
fi
