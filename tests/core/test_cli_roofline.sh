#!/usr/bin/env bash
# test_cli_roofline.sh KILN — `kiln roofline` at a tiny GPT: the TSV has positive ceilings,
# and one row per placed kernel with finite positive FLOPs, bytes, time and fraction of
# the roof, matmuls among them with 2*m*n*k FLOPs (checked against one shape); the plot
# script writes a non-empty SVG and PNG. --mode compiled (what --device cuda runs) places the
# compiled program's steps: generated kernels and library matmuls. `kiln tune-gemm`
# searches, caches its winner in a temporary dir and reads it back; bad flags are usage
# errors (exit 2). Prints "ok".
set -eu
kiln=${1:?usage: test_cli_roofline.sh PATH/TO/kiln}
here=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$kiln" roofline --out "$dir" --layers 1 --width 32 --heads 2 --vocab 64 --batch 2 --seq 16 --steps 2 > "$dir/out"
grep -q "kernels placed" "$dir/out"
awk -F'\t' '
  $1=="# peak_gflops" || $1=="# triad_gbs" { if ($2 <= 0) { print "bad ceiling " $0; exit 1 } ; next }
  /^#/ || $1=="node" { next }
  { n++; for (i = 3; i <= 9; i++) if (!($i > 0) || $i == "inf" || $i == "nan") { print "bad row " $0; exit 1 }
    if ($2 == "matmul") mm++
    if ($2 == "matmul" && $3 == 2*32*32*32) sq++ }
  END { if (n < 10 || mm < 4 || sq < 1) { print "rows " n " matmuls " mm " 32x32x32 " sq; exit 1 } }' "$dir/roofline.tsv"
bash "$here/plots/roofline.sh" "$dir/roofline.tsv" "$dir/plot" > /dev/null
test -s "$dir/plot.svg" && test -s "$dir/plot.png"
# the compiled program (the GPU's path, here on the CPU): generated kernels ("fused:...")
# and library matmuls placed, FLOPs summed over a kernel's members, the copies summed apart
"$kiln" roofline --out "$dir/c" --mode compiled --layers 1 --width 32 --heads 2 --vocab 64 --batch 2 --seq 16 --steps 2 > "$dir/outc"
grep -q "kernels placed" "$dir/outc"
awk -F'\t' '
  $1=="# steps" { st++ ; next }
  $1=="# unplaced" { un++ ; next }
  /^#/ || $1=="node" { next }
  { n++; for (i = 3; i <= 9; i++) if (!($i > 0) || $i == "inf" || $i == "nan") { print "bad row " $0; exit 1 }
    if ($2 ~ /^fused:/) fu++
    if ($2 ~ /^fused:.*exp/) sm++
    if ($2 == "matmul" && $3 == 2*32*32*32) sq++ }
  END { if (st != 1 || un != 1 || n < 10 || fu < 4 || sm < 1 || sq < 1) { print "compiled: rows " n " fused " fu " softmax " sm " 32x32x32 " sq " steps " st " unplaced " un; exit 1 } }' "$dir/c/roofline.tsv"
bash "$here/plots/roofline.sh" "$dir/c/roofline.tsv" "$dir/plotc" > /dev/null
test -s "$dir/plotc.svg"
"$kiln" tune-gemm --shape 24x20x30 --cache-dir "$dir/cache" --force > "$dir/t1"
grep -q "winner: kc" "$dir/t1"
test "$(grep -c '^ *[0-9]' "$dir/t1")" -eq 25
"$kiln" tune-gemm --shape 24x20x30 --cache-dir "$dir/cache" > "$dir/t2"
grep -q "cached choice" "$dir/t2"
set +e
"$kiln" roofline --layers 0 2> "$dir/e1"; r1=$?
"$kiln" tune-gemm --shape 3x3 2> "$dir/e2"; r2=$?
"$kiln" roofline --mode fast 2> "$dir/e3"; r3=$?
"$kiln" roofline --flash 2> "$dir/e4"; r4=$?
set -e
[ $r3 -eq 2 ] && grep -q "interp or compiled" "$dir/e3" || { echo "roofline --mode fast: exit $r3: $(cat "$dir/e3")"; exit 1; }
[ $r4 -eq 2 ] && grep -q -- "--mode compiled" "$dir/e4" || { echo "roofline --flash: exit $r4: $(cat "$dir/e4")"; exit 1; }
[ $r1 -eq 2 ] && grep -q -- "--layers" "$dir/e1" || { echo "roofline --layers 0: exit $r1: $(cat "$dir/e1")"; exit 1; }
[ $r2 -eq 2 ] && grep -q "MxNxK" "$dir/e2" || { echo "tune-gemm --shape 3x3: exit $r2: $(cat "$dir/e2")"; exit 1; }
echo ok
