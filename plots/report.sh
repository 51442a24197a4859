#!/usr/bin/env bash
# report.sh OUTDIR — the capstone report, measured and written in one run (`make report`).
#
# Every number and figure of the report comes from this run, on this machine, except the
# GPU section, which quotes the dated GPU runs kept under plots/results/ (each with its
# folder, machine and date). The steps, each logged under OUTDIR/logs/:
#   1 train      kiln train: the default small GPT on the bundled grammar corpus (loss curve,
#                held-out loss against the unigram baseline, tokens/s), its checkpoint
#   2 latency    kiln bench of a small GPT (median step, tokens/s, forward/optimizer split)
#   3 memory     plots/remat.sh: every activation checkpointing policy's memory against time
#   4 correct    plots/torch_agree.py --reference numpy: kiln's loss, gradients and AdamW
#                steps against a float64 numpy GPT (PyTorch's too when it is installed)
#   5 roofline   kiln roofline + plots/roofline.sh
#   6 ablation   plots/ablation.sh: each optimization switched off alone
#   7 scaling    data parallelism on CPU ranks (mpiexec -n 1, 2): tokens/s of DDP
#   8 inference  kiln bench-infer on the trained checkpoint: TTFT, TPOT, tokens/s
#   9 quant      kiln eval --compare: fp32, bf16, w8, w8a8, w8a8-tensor held-out loss
# then plots/report.py writes OUTDIR/report.md and OUTDIR/report.html (pandoc, the book's
# stylesheet; a PDF beside it when weasyprint is installed).
# REPORT_QUICK=1 shrinks every step (the `make test` check); KILN, MPIEXEC, PYTHON as usual.
#
# REPORT_LAB=12 (`make report LAB=12`): lab 12's report instead, on KILN built with the
# student's lab 12 units: 1 train; 2 quant, kiln eval --compare with those units; 3 quant-ref,
# the same checkpoint through REF_KILN (the staff's units): the losses must agree to the
# digit; 4 units, plots/quant_units.c compiled against LIBKILN (the student's units) with
# CC, QCFLAGS and QLDLIBS: each weight's quantization error per tensor, per input row and
# per output channel, the w8a8 product's error with per-token and per-tensor activation
# scales, and the time of each piece against the f32 product. An unwritten unit stops the
# report at its step with the skeleton's "not implemented (lab12: ...)".
set -eu
out=${1:?usage: report.sh OUTDIR}
KILN=$(realpath "${KILN:-build/solutions/kiln}")
[ -z "${REF_KILN:-}" ] || REF_KILN=$(realpath "$REF_KILN")
[ -z "${LIBKILN:-}" ] || LIBKILN=$(realpath "$LIBKILN")
MPIEXEC=${MPIEXEC:-mpiexec}
PY=${PYTHON:-python3}
quick=${REPORT_QUICK:-0}
here=$(cd "$(dirname "$0")/.." && pwd)
[ -x "$KILN" ] || { echo "report.sh: no kiln binary at $KILN (make kiln, or set KILN)" >&2; exit 2; }
for t in gnuplot pandoc; do
    command -v $t > /dev/null || { echo "report.sh: $t is not installed (apt-get install gnuplot-nox pandoc, or make deps)" >&2; exit 2; }
done
mkdir -p "$out/logs"
out=$(cd "$out" && pwd)
logs=$out/logs
npy=$(bash "$here/core/mk/python.sh" numpy 2> /dev/null) || npy=""
total=9
step() { printf 'report [%d/%d] %s\n' "$1" "$total" "$2" >&2; }
run() { # run NAME CMD...: its output to logs/NAME.log; on failure show it and stop
    local name=$1; shift
    if ! "$@" > "$logs/$name.log" 2>&1; then
        tail -n 30 "$logs/$name.log" >&2
        echo "report.sh: step '$name' failed: $*" >&2
        exit 1
    fi
}
if [ "$quick" = 1 ]; then
    train_args="--steps 60 --sample 100"
    bench_args="--vocab 128 --context 32 --layers 2 --width 64 --heads 4 --batch 4 --warmup 1 --steps 3"
    agree_args="--vocab 61 --context 12 --layers 2 --width 24 --heads 3 --batch 2 --steps 3 --seed 7"
    roof_args="--layers 2 --width 64 --heads 4 --batch 2 --seq 32 --vocab 128 --steps 1"
    scale_steps=20 infer_scale=0.05 remat_steps=3
else
    train_args="--steps 1200 --sample 300"
    bench_args="--vocab 512 --context 128 --layers 4 --width 256 --heads 4 --batch 8 --warmup 2 --steps 10"
    agree_args="--vocab 512 --context 64 --layers 2 --width 128 --heads 4 --batch 4 --steps 10"
    roof_args="--layers 4 --width 256 --heads 4 --batch 8 --seq 128 --vocab 512 --steps 3"
    scale_steps=200 infer_scale=0.25 remat_steps=20
fi
cd "$out"
{
    echo "date $(date -u +%Y-%m-%dT%H:%MZ)"
    echo "commit $(git -C "$here" rev-parse --short HEAD 2> /dev/null || echo '?')"
    echo "kernel $(uname -srm)"
    echo "cpu $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //') ($(nproc) cores)"
    echo "memory $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
    echo "cc $(${CC:-cc} --version 2> /dev/null | head -n 1)"
    echo "gpu $(nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null | head -n 1 || true)"
} > setup.txt

if [ "${REPORT_LAB:-}" = 12 ]; then
    total=4
    echo "lab 12" > lab.txt
    step 1 "train: kiln train $train_args"
    # shellcheck disable=SC2086
    run train "$KILN" train $train_args --device cpu --log "$out/train.tsv" --out "$out/ckpt.safetensors"
    step 2 "quantization with your lab 12 units: kiln eval --compare"
    run quant "$KILN" eval --ckpt "$out/ckpt.safetensors" --compare
    step 3 "the same with the reference units"
    run quant-ref "${REF_KILN:?REPORT_LAB=12 needs REF_KILN}" eval --ckpt "$out/ckpt.safetensors" --compare
    step 4 "your units on the trained weights: plots/quant_units.c"
    run units-build bash -c "cd '$here' && ${CC:-cc} ${QCFLAGS:-} -o '$out/quant_units' plots/quant_units.c \
        '${LIBKILN:?REPORT_LAB=12 needs LIBKILN}' ${QLDLIBS:--lm -ldl -lpthread}"
    run units "$out/quant_units" "$out/ckpt.safetensors"
    cp "$logs/units.log" units.tsv
    rm -f "$out/quant_units"
    exec "$PY" "$here/plots/report.py" "$out" "$here"
fi
rm -f lab.txt

step 1 "train: kiln train $train_args"
# shellcheck disable=SC2086
run train "$KILN" train $train_args --device cpu --log "$out/train.tsv" --out "$out/ckpt.safetensors"

step 2 "latency: kiln bench $bench_args"
# shellcheck disable=SC2086
run bench "$KILN" bench --device cpu $bench_args --mode compiled --passes all --flash --hfuse
tail -n 1 "$logs/bench.log" > bench.json

step 3 "memory: plots/remat.sh (every checkpointing policy)"
# shellcheck disable=SC2086
run remat env KILN="$KILN" bash "$here/plots/remat.sh" "$out/remat.svg" $bench_args --device cpu --steps $remat_steps

step 4 "correctness: torch_agree.py --reference numpy"
if [ -n "$npy" ]; then
    # shellcheck disable=SC2086
    run agree "$npy" "$here/plots/torch_agree.py" --reference numpy --kiln "$KILN" $agree_args --out "$out/agree.safetensors"
    grep -E '^(PASS|FAIL)' "$logs/agree.log" | tail -n 1 > agree.txt
else
    echo "SKIPPED: no python3 here imports numpy (make deps installs python3-numpy)" > agree.txt
fi

step 5 "roofline: kiln roofline $roof_args"
# shellcheck disable=SC2086
run roofline "$KILN" roofline --out "$out/roofline" --device cpu --mode compiled $roof_args
tsv=$(ls "$out"/roofline/*.tsv 2> /dev/null | head -n 1)
[ -n "$tsv" ] || { echo "report.sh: kiln roofline wrote no TSV" >&2; exit 1; }
run roofline-plot bash "$here/plots/roofline.sh" "$tsv" "$out/roofline"

step 6 "ablation: plots/ablation.sh"
# shellcheck disable=SC2086
run ablation env KILN="$KILN" bash "$here/plots/ablation.sh" "$out/ablation" --device cpu $bench_args

step 7 "scaling: DDP on 1 and 2 CPU ranks"
: > scaling.tsv
if command -v "$MPIEXEC" > /dev/null; then
    for n in 1 2; do
        run "scaling-$n" env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$MPIEXEC" -n $n "$KILN" train \
            --dist ddp --device cpu --batch $((8 * n)) --steps $scale_steps --sample 0 --out none --eval-batches 1
        rate=$(sed -n 's/.*steady rate *\([0-9.]*\) tokens\/s.*/\1/p' "$logs/scaling-$n.log" | tail -n 1)
        printf '%d\t%s\n' "$n" "${rate:-0}" >> scaling.tsv
    done
fi

step 8 "inference: kiln bench-infer --scale $infer_scale"
run infer "$KILN" bench-infer --ckpt "$out/ckpt.safetensors" --device cpu --scale "$infer_scale" --json "$out/infer.json"

step 9 "quantization: kiln eval --compare"
run quant "$KILN" eval --ckpt "$out/ckpt.safetensors" --compare

"$PY" "$here/plots/report.py" "$out" "$here"
