#!/usr/bin/env bash
# test_cli_quant.sh KILN — `kiln eval` and the quantize passes from the command line, on a tiny
# model trained here on the CPU: the fp32 line of kiln eval repeats the held-out loss kiln
# train printed (same data, split and batches); --compare prints fp32, bf16, w8, w8a8, the
# naive per-tensor w8a8, static w8a8 with each calibration observer and SmoothQuant's, with w8
# within 0.5% and w8a8 (and each calibrated one) within 2% of fp32; --passes quantize:w8 alone
# gives the w8 line's loss, --passes quantize:w8a8-static:mse the mse line's; --outliers F keeps
# the fp32 line and hurts the naive per-tensor line far more than the smoothed one; kiln
# compile accepts quantize:w8a8 on a GPT forward graph and refuses the calibrated schemes
# (no data); bad arguments (an unknown observer, alpha outside [0, 1], --calib-batches 0,
# --outliers below 1) exit 2 and a missing checkpoint 1, each with a message naming the
# problem. Prints "ok" or what failed.
set -eu
kiln=${1:?usage: test_cli_quant.sh PATH/TO/kiln}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export KILN_PROGRESS=0
fail() { echo "FAIL: $*"; exit 1; }
"$kiln" train --steps 120 --layers 1 --width 32 --heads 2 --context 32 --batch 8 --sample 0 \
    --device cpu --out "$dir/ck.safetensors" > "$dir/train.out"
want=$(sed -n 's/^ *held-out loss *\([0-9.]*\) nats.*/\1/p' "$dir/train.out")
[ -n "$want" ] || fail "kiln train printed no held-out loss: $(cat "$dir/train.out")"
"$kiln" eval --ckpt "$dir/ck.safetensors" --compare > "$dir/cmp.out" || fail "kiln eval --compare: $(cat "$dir/cmp.out")"
loss() { awk -v k="$1" '$1 == k { print $(NF - (k == "fp32" ? 1 : 2)) }' "$dir/cmp.out"; }
fp32=$(loss fp32); bf16=$(loss bf16); w8=$(loss w8); w8a8=$(loss w8a8)
[ -n "$fp32" ] && [ -n "$bf16" ] && [ -n "$w8" ] && [ -n "$w8a8" ] || fail "missing lines in: $(cat "$dir/cmp.out")"
for v in w8a8-tensor w8a8-minmax w8a8-pct w8a8-mse w8a8-smooth; do
    l=$(loss $v)
    [ -n "$l" ] || fail "no $v line in: $(cat "$dir/cmp.out")"
    awk -v a="$l" -v b="$fp32" 'BEGIN { d = (a - b) / b; exit !(d < 0.02 && d > -0.02) }' \
        || fail "$v loss $l vs fp32 $fp32: not within 2% "
done
mse=$(loss w8a8-mse)
awk -v a="$fp32" -v b="$want" 'BEGIN { d = a - b; exit !(d < 1e-3 && d > -1e-3) }' \
    || fail "kiln eval's fp32 loss $fp32 is not kiln train's held-out loss $want"
awk -v a="$w8" -v b="$fp32" 'BEGIN { d = (a - b) / b; exit !(d < 0.005 && d > -0.005) }' \
    || fail "w8 loss $w8 vs fp32 $fp32: not within 0.5% "
awk -v a="$w8a8" -v b="$fp32" 'BEGIN { d = (a - b) / b; exit !(d < 0.02 && d > -0.02) }' \
    || fail "w8a8 loss $w8a8 vs fp32 $fp32: not within 2% "
"$kiln" eval --ckpt "$dir/ck.safetensors" --passes quantize:w8 > "$dir/w8.out"
one=$(awk '$1 == "quantize:w8" { print $2 }' "$dir/w8.out")
[ "$one" = "$w8" ] || fail "--passes quantize:w8 gave '$one', --compare's w8 line $w8"
"$kiln" eval --ckpt "$dir/ck.safetensors" --passes quantize:w8a8-static:mse > "$dir/mse.out"
one=$(awk '$1 == "quantize:w8a8-static:mse" { print $2 }' "$dir/mse.out")
[ "$one" = "$mse" ] || fail "--passes quantize:w8a8-static:mse gave '$one', --compare's w8a8-mse line $mse"
# outlier channels (x 300 on 3 channels of each MLP's layernorm): fp32 as before, the naive
# per-tensor scale spent on them, SmoothQuant moving them into the weights
"$kiln" eval --ckpt "$dir/ck.safetensors" --compare --outliers 300 > "$dir/cmp.out" \
    || fail "kiln eval --compare --outliers 300: $(cat "$dir/cmp.out")"
grep -q "note: outliers: 3 channels" "$dir/cmp.out" || fail "no note on the outliers in: $(cat "$dir/cmp.out")"
[ "$(loss fp32)" = "$fp32" ] || fail "--outliers changed the fp32 loss: $(loss fp32) vs $fp32"
tensor=$(loss w8a8-tensor); smooth=$(loss w8a8-smooth)
awk -v t="$tensor" -v s="$smooth" -v b="$fp32" 'BEGIN { exit !((t - b) / b > 0.01 && (s - b) / b < 0.005 && (s - b) / b > -0.005) }' \
    || fail "with outliers: per-tensor $tensor, smoothed $smooth, fp32 $fp32: expected per-tensor > +1%, smoothed within 0.5%"
"$kiln" compile --gpt layers=1,width=32,heads=2,context=16,vocab=40 --graph forward --passes quantize:w8a8 \
    --tol 0.1 > "$dir/c.out" 2>&1 || fail "kiln compile --passes quantize:w8a8: $(cat "$dir/c.out")"
grep -q "matmul->matmul_w8a8" "$dir/c.out" || fail "kiln compile reports no quantized product: $(cat "$dir/c.out")"
rc=0
"$kiln" compile --gpt layers=1,width=32,heads=2,context=16,vocab=40 --graph forward --passes quantize:w8a8-static \
    > "$dir/c.out" 2>&1 || rc=$?
[ $rc -ne 0 ] && grep -q "needs calibration data" "$dir/c.out" \
    || fail "kiln compile --passes quantize:w8a8-static (no data): exit $rc: $(cat "$dir/c.out")"
fails() { # fails EXIT WORD ARGS...: kiln eval ARGS exits EXIT with WORD in its message
    local want=$1 word=$2; shift 2
    local rc=0
    "$kiln" eval "$@" > "$dir/bad.out" 2>&1 || rc=$?
    [ $rc -eq "$want" ] || fail "kiln eval $*: exit $rc, expected $want: $(cat "$dir/bad.out")"
    grep -q -- "$word" "$dir/bad.out" || fail "kiln eval $*: no '$word' in: $(cat "$dir/bad.out")"
}
fails 2 "required" --compare
fails 2 "unknown option 'w5'" --ckpt "$dir/ck.safetensors" --passes quantize:w5
fails 2 "exclude" --ckpt "$dir/ck.safetensors" --passes quantize:w8 --compare
fails 2 "unknown option" --ckpt "$dir/ck.safetensors" --frobnicate
fails 2 "unknown calibration observer 'foo'" --ckpt "$dir/ck.safetensors" --passes quantize:w8a8-static:foo
fails 2 "(0, 100]" --ckpt "$dir/ck.safetensors" --passes quantize:w8a8-static:percentile:150
fails 2 "alpha must be a number in \[0, 1\]" --ckpt "$dir/ck.safetensors" --passes quantize:w8a8-smooth:1.5
fails 2 "calib-batches" --ckpt "$dir/ck.safetensors" --compare --calib-batches 0
fails 2 "outliers" --ckpt "$dir/ck.safetensors" --compare --outliers 0.5
fails 1 "missing.safetensors" --ckpt "$dir/missing.safetensors"
echo ok
