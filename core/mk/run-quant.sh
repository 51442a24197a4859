#!/usr/bin/env bash
# run-quant.sh KILN BUILD [REF_KILN] — `make run LAB=12`: lab 12's units on a trained model.
# KILN is built with YOUR lab 12 units (the quantizer and the int8 epilogue). The model is
# make run's checkpoint, BUILD/ckpt.safetensors, when there is one; else a short run of the
# default GPT trains one into BUILD/lab12-run/ (training does not go through lab 12's units).
# Then `kiln eval --compare` evaluates its held-out loss in fp32, bf16, w8, w8a8 and
# w8a8-tensor with your units. With REF_KILN (the staff's reference build) the same eval runs
# there, and the two tables are compared: the quantizer and the epilogue are exact contracts,
# so every loss must agree to the printed digit (exit 3 otherwise). An unwritten unit stops
# the eval with the skeleton's "not implemented (lab12: ...)".
set -u
kiln=$1 build=$2 ref=${3:-}
ckpt=$build/ckpt.safetensors
if [ ! -f "$ckpt" ]; then
    ckpt=$build/lab12-run/ckpt.safetensors
    if [ ! -f "$ckpt" ]; then
        mkdir -p "$build/lab12-run"
        echo "run-quant: no $build/ckpt.safetensors (make run writes it): training a small GPT for 200 steps first"
        "$kiln" train --steps 200 --sample 0 --out "$ckpt" > "$build/lab12-run/train.log" 2>&1 ||
            { tail -n 5 "$build/lab12-run/train.log"; exit 1; }
    fi
fi
mine=$(mktemp) staff=$(mktemp); trap 'rm -f "$mine" "$staff"' EXIT
"$kiln" eval --ckpt "$ckpt" --compare 2>&1 | tee "$mine"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || exit "$rc"
[ -n "$ref" ] && [ "$ref" != "$kiln" ] || exit 0
"$ref" eval --ckpt "$ckpt" --compare > "$staff" 2>&1 || { echo "run-quant: the reference eval failed: $(tail -n 3 "$staff")"; exit 1; }
if cmp -s "$mine" "$staff"; then
    echo "  -> your lab 12 units give the staff reference's held-out losses, digit for digit"
else
    echo "  -> your lab 12 units give OTHER losses than the staff reference's (yours first, the reference's second):"
    diff "$mine" "$staff" | grep '^[<>]' | head -n 8 | sed 's/^/     /'
    echo "     Run 'make test-lab12' and check every case."
    exit 3
fi
