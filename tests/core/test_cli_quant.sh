#!/usr/bin/env bash
# test_cli_quant.sh KILN — `kiln eval` and the quantize passes from the command line, on a tiny
# model trained here on the CPU: the fp32 line of kiln eval repeats the held-out loss kiln
# train printed (same data, split and batches); --compare prints fp32, bf16, w8 and w8a8, with
# w8 within 0.5% and w8a8 within 2% of fp32; --passes quantize:w8 alone gives the w8 line's
# loss; kiln compile accepts quantize:w8a8 on a GPT forward graph; bad arguments exit 2 and a
# missing checkpoint 1, each with a message naming the problem. Prints "ok" or what failed.
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
awk -v a="$fp32" -v b="$want" 'BEGIN { d = a - b; exit !(d < 1e-3 && d > -1e-3) }' \
    || fail "kiln eval's fp32 loss $fp32 is not kiln train's held-out loss $want"
awk -v a="$w8" -v b="$fp32" 'BEGIN { d = (a - b) / b; exit !(d < 0.005 && d > -0.005) }' \
    || fail "w8 loss $w8 vs fp32 $fp32: not within 0.5% "
awk -v a="$w8a8" -v b="$fp32" 'BEGIN { d = (a - b) / b; exit !(d < 0.02 && d > -0.02) }' \
    || fail "w8a8 loss $w8a8 vs fp32 $fp32: not within 2% "
"$kiln" eval --ckpt "$dir/ck.safetensors" --passes quantize:w8 > "$dir/w8.out"
one=$(awk '$1 == "quantize:w8" { print $2 }' "$dir/w8.out")
[ "$one" = "$w8" ] || fail "--passes quantize:w8 gave '$one', --compare's w8 line $w8"
"$kiln" compile --gpt layers=1,width=32,heads=2,context=16,vocab=40 --graph forward --passes quantize:w8a8 \
    --tol 0.1 > "$dir/c.out" 2>&1 || fail "kiln compile --passes quantize:w8a8: $(cat "$dir/c.out")"
grep -q "matmul->matmul_w8a8" "$dir/c.out" || fail "kiln compile reports no quantized product: $(cat "$dir/c.out")"
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
fails 1 "missing.safetensors" --ckpt "$dir/missing.safetensors"
echo ok
