#!/usr/bin/env bash
# test_tp_gpu.sh KILN — tensor parallelism on GPUs: `mpiexec -n 2 kiln train --mesh tp=2
# --comm nccl` (one GPU per rank, the local graph's all_reduce/all_gather over NCCL, the
# gathers along dim 1 rearranged on the device) against one GPU on the same global batch,
# fp32 (compiled, SGD + momentum: a summation order's tolerance, looser for the GPU's other
# product shapes) and bf16 (a bf16 tolerance); with 4 GPUs also dp=2 x tp=2 with ZeRO-1 and
# --accum 2. Skips (exit 0, one line) without 2 GPUs.
# Run on the lent 2-GPU machine after `make kiln`: bash tests/dist/test_tp_gpu.sh build/solutions/kiln
set -euo pipefail
kiln=$(realpath "$1")
MPIEXEC=${MPIEXEC:-mpiexec}
here=$(cd "$(dirname "$0")" && pwd)
ngpu=$( (nvidia-smi -L 2> /dev/null || true) | wc -l)
[ "$ngpu" -ge 2 ] || { echo "skip: tensor parallelism on GPUs needs 2 GPUs (nvidia-smi -L lists $ngpu)"; exit 0; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
run() { timeout 300 "$@"; }
A="--layers 2 --width 64 --heads 4 --context 32 --batch 8 --steps 5 --eval-batches 1 --sample 0 --lr 1e-2 --mode compiled --optimizer sgd --momentum 0.9"
for p in fp32 bf16; do
    run "$kiln" train $A --precision $p --device cuda:0 --out one$p.st --log one$p.log > one$p.txt 2>&1 || { cat one$p.txt; exit 1; }
    run $MPIEXEC -n 2 "$kiln" train $A --precision $p --mesh tp=2 --comm nccl --out tp$p.st --log tp$p.log > tp$p.txt 2>&1 \
        || { cat tp$p.txt; exit 1; }
    tol="1e-5 1e-4"; [ $p = bf16 ] && tol="1e-3 2e-2"
    r=$(python3 "$here/compare.py" one$p.log tp$p.log one$p.st tp$p.st $tol); echo "$p, --mesh tp=2 on 2 GPUs (NCCL): $r"
    [ "$ngpu" -ge 4 ] || continue
    # 4 GPUs: dp=2 x tp=2, with ZeRO-1 on the dp axis and --accum 2 (the dp all-reduce, the
    # state's all-gather and the accumulation's adds on the device)
    run $MPIEXEC -n 4 "$kiln" train $A --precision $p --mesh dp=2,tp=2 --dist zero1 --accum 2 --comm nccl \
        --out m$p.st --log m$p.log > m$p.txt 2>&1 || { cat m$p.txt; exit 1; }
    r=$(python3 "$here/compare.py" one$p.log m$p.log one$p.st m$p.st $tol)
    echo "$p, --mesh dp=2,tp=2 --dist zero1 --accum 2 on 4 GPUs (NCCL): $r"
done
