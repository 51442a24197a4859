#!/usr/bin/env bash
# test_cli_loss_scale.sh KILN — loss scaling from the command line: `kiln train
# --loss-scale` with a power-of-two scale (fixed, or dynamic and growing) logs the same
# losses, learning rates and gradient norms, bit for bit, as without it (compiled and node
# by node); overflows injected with KILN_INJECT_INF_STEP are skipped, logged, halve the
# scale, which grows back after the growth interval; a run stopped and resumed after the
# skips continues exactly; bad values are usage errors. Prints "ok" or what failed.
set -u
kiln=${1:?usage: test_cli_loss_scale.sh PATH/TO/kiln}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
run="--layers 1 --width 16 --heads 2 --context 16 --batch 4 --steps 12 --sample 0 --eval-batches 1"

# the same numbers with and without a power-of-two scale
for mode in compiled interp; do
    "$kiln" train $run --mode $mode --out none --log "$dir/plain.log" > "$dir/out" 2>&1 || fail "train: $(cat "$dir/out")"
    for ls in 1024 dynamic:65536:3; do
        "$kiln" train $run --mode $mode --out none --loss-scale $ls --log "$dir/scaled.log" > "$dir/out" 2>&1 \
            || fail "train --loss-scale $ls: $(cat "$dir/out")"
        grep -q "loss scale .*$(echo "${ls%%:*}" | sed 's/1024/fixed 1024/')" "$dir/out" || fail "--loss-scale $ls not reported: $(cat "$dir/out")"
        cut -d' ' -f1-4 "$dir/scaled.log" | cmp -s - "$dir/plain.log" \
            || fail "--mode $mode --loss-scale $ls changed the numbers: $(diff "$dir/plain.log" "$dir/scaled.log" | head -4)"
    done
    [ "$(awk '{print $5}' "$dir/scaled.log" | tr '\n' ' ')" = "65536 65536 131072 131072 131072 262144 262144 262144 524288 524288 524288 1048576 " ] \
        || fail "the dynamic scale did not double every 3 clean steps: $(cat "$dir/scaled.log")"
done

# injected overflows at steps 3 and 4: skipped, logged, the scale halves twice and regrows
KILN_INJECT_INF_STEP=3,4 "$kiln" train $run --loss-scale dynamic:1024:3 --out none --log "$dir/inj.log" > "$dir/out" 2>&1 \
    || fail "injected run: $(cat "$dir/out")"
[ "$(grep -c 'step skipped' "$dir/out")" = 2 ] || fail "two skips should be logged: $(cat "$dir/out")"
grep -q "2 steps skipped" "$dir/out" || fail "the summary lacks the skips: $(cat "$dir/out")"
[ "$(awk '{print $5 ":" $6}' "$dir/inj.log" | tr '\n' ' ')" = \
  "1024:0 1024:0 2048:0 1024:1 512:1 512:0 512:0 1024:0 1024:0 1024:0 2048:0 2048:0 " ] \
    || fail "scale and skips per step: $(cat "$dir/inj.log")"
awk '$6 == 1 && $4 != "inf" { exit 1 }' "$dir/inj.log" || fail "a skipped step's norm should be inf"
awk '$6 == 0 && ($2 != $2 + 0 || $4 == "inf" || $4 == "nan") { exit 1 }' "$dir/inj.log" || fail "non-finite clean step"

# stopped after the skips and resumed: the same log as the straight run
KILN_INJECT_INF_STEP=3,4 "$kiln" train $run --loss-scale dynamic:1024:3 --stop-after 6 --out "$dir/ck.safetensors" \
    --log "$dir/res.log" > "$dir/out" 2>&1 || fail "stop: $(cat "$dir/out")"
"$kiln" train --resume "$dir/ck.safetensors" --loss-scale dynamic:1024:3 --sample 0 --eval-batches 1 --out none \
    --log "$dir/res.log" > "$dir/out" 2>&1 || fail "resume: $(cat "$dir/out")"
cmp -s "$dir/inj.log" "$dir/res.log" || fail "the resumed run differs: $(diff "$dir/inj.log" "$dir/res.log" | head -4)"

# without a scaler an overflow is a divergence; bad values are usage errors
KILN_INJECT_INF_STEP=1 "$kiln" train $run --out none > "$dir/out" 2>&1
[ $? -eq 1 ] && grep -q "diverged" "$dir/out" || fail "an unscaled overflow: $(cat "$dir/out")"
for bad in fancy dynamic:0 dynamic:8:0 -2; do
    "$kiln" train $run --loss-scale=$bad > "$dir/out" 2>&1
    [ $? -eq 2 ] && grep -qF -- "--loss-scale" "$dir/out" || fail "--loss-scale $bad: $(cat "$dir/out")"
done
"$kiln" train --help | grep -q -- "--loss-scale" || fail "--help lacks --loss-scale"
echo ok
