#!/usr/bin/env bash
# test_plot_profile.sh — plots/profile.sh draws a real profile (the H100 run kept under
# plots/results) into an SVG naming the ops and the panels, and refuses a missing file,
# a file that is not a kiln profile and one with no groups (exit 2, one line). Prints "ok".
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
tsv=$here/plots/results/h100-2026-11-22/profile-fp32.tsv
bash "$here/plots/profile.sh" "$tsv" "$dir/p.svg" "a test title" > /dev/null
for want in '<svg' 'a test title' 'GPU time per op other than matmul (matmul: ' 'costliest memory-bound kernels' \
            'causal_softmax_bwd' 'cross_entropy' 'measured copy bandwidth'; do
    grep -q -- "$want" "$dir/p.svg" || { echo "FAIL: no '$want' in the SVG"; exit 1; }
done
refuse() { # refuse WORD FILE: exit 2 and WORD in the message
    local rc=0
    bash "$here/plots/profile.sh" "$2" "$dir/x.svg" > "$dir/out" 2>&1 || rc=$?
    [ $rc -eq 2 ] || { echo "FAIL: profile.sh $2: exit $rc, expected 2"; cat "$dir/out"; exit 1; }
    grep -q -- "$1" "$dir/out" || { echo "FAIL: profile.sh $2: no '$1' in:"; cat "$dir/out"; exit 1; }
}
refuse "cannot read" "$dir/missing.tsv"
echo "step,ms" > "$dir/csv.tsv"
refuse "not a kiln per-op profile" "$dir/csv.tsv"
head -n 2 "$tsv" > "$dir/empty.tsv"
refuse "has no groups" "$dir/empty.tsv"
echo ok
