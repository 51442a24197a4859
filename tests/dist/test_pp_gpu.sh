#!/usr/bin/env bash
# test_pp_gpu.sh KILN [OUT_DIR] — pipeline parallelism on GPU ranks (NCCL): the issue's GPU
# checks, run by hand on a machine with 2 or 4 GPUs (make test-dist-pp-gpu); prints one line
# "skip: ..." and exits 0 where there is no GPU or too few.
#
#   equality  kiln train --pp 2 (and, with 4 GPUs, --pp 4) --comm nccl with each schedule
#             against one GPU on the same global batch, fp32 (compare.py, a summation
#             order's tolerance) and bf16 (SGD, DDP's bf16 tolerance); with 4 GPUs also
#             --mesh dp=2,pp=2 (two pipelines, each on half of the batch; also with --dist zero1)
#             and --mesh tp=2,pp=2
#             with each schedule (each stage's blocks split over two GPUs); with 8 GPUs
#             --mesh dp=2,tp=2,pp=2
#   bubble    --pp 4 --microbatches 16 (1f1b, interleaved) on a model large enough for the
#             GPU to be busy (16 layers, width 1024): the measured bubble printed beside
#             (p-1)/(m+p-1) = 15.8%, and the timelines drawn (plots/pp_timeline.sh)
set -euo pipefail
kiln=$(realpath "$1")
out=${2:-build/pp-gpu}
MPIEXEC=${MPIEXEC:-mpiexec}
here=$(cd "$(dirname "$0")" && pwd)
plots=$(cd "$here/../../plots" && pwd)
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${ngpu:-0}" -lt 2 ]; then echo "skip: pipeline parallelism on GPUs needs 2 or more (found ${ngpu:-0})"; exit 0; fi
mkdir -p "$out"
cd "$out"
run() { timeout 600 "$@"; }
ok() { # ok LABEL COMMAND...: COMMAND's output after LABEL; its failure ends the script
    local r
    if r=$("${@:2}"); then echo "$1: $r"; else echo "$1: $r"; exit 1; fi
}
A="--layers 8 --width 128 --heads 4 --context 64 --batch 16 --steps 6 --data-bytes 200000 --eval-batches 1 --sample 0 --lr 1e-3 --mode compiled"
for prec in fp32 bf16; do
    # bf16 with SGD and DDP's bf16 tolerance (test_pp.sh says why)
    tol="1e-5 1e-3"; [ $prec = bf16 ] && { tol="3e-4 4e-3"; A="$A --optimizer sgd --momentum 0.9 --lr 0.1"; }
    run "$kiln" train $A --device cuda:0 --precision $prec --out one-$prec.st --log one-$prec.log > one-$prec.txt 2>&1 \
        || { cat one-$prec.txt; exit 1; }
    for n in 2 4; do
        [ "$ngpu" -ge $n ] || continue
        for s in gpipe 1f1b interleaved; do
            tag=$prec-$n-$s
            run $MPIEXEC -n $n "$kiln" train $A --precision $prec --comm nccl --pp $n --schedule $s --microbatches 8 \
                --out $tag.st --log $tag.log > $tag.txt 2>&1 || { cat $tag.txt; exit 1; }
            ok "pp $n $s $prec" python3 "$here/compare.py" one-$prec.log $tag.log one-$prec.st $tag.st $tol
        done
    done
    if [ "$ngpu" -ge 4 ]; then # two pipelines of two GPUs, each on half of the batch (--mesh dp=2,pp=2)
        tag=$prec-dp2pp2
        run $MPIEXEC -n 4 "$kiln" train $A --precision $prec --comm nccl --mesh dp=2,pp=2 --microbatches 4 \
            --out $tag.st --log $tag.log > $tag.txt 2>&1 || { cat $tag.txt; exit 1; }
        ok "dp=2,pp=2 1f1b $prec" python3 "$here/compare.py" one-$prec.log $tag.log one-$prec.st $tag.st $tol
        # the same mesh with ZeRO-1 on the dp axis: each pipeline rank keeps half of its stage's optimizer state
        tag=$prec-dp2pp2-zero1
        run $MPIEXEC -n 4 "$kiln" train $A --precision $prec --comm nccl --mesh dp=2,pp=2 --dist zero1 --microbatches 4 \
            --out $tag.st --log $tag.log > $tag.txt 2>&1 || { cat $tag.txt; exit 1; }
        ok "dp=2,pp=2 zero1 $prec" python3 "$here/compare.py" one-$prec.log $tag.log one-$prec.st $tag.st $tol
        # tensor-parallel stages: two stages of two GPUs each (--mesh tp=2,pp=2), every schedule
        for s in gpipe 1f1b interleaved; do
            tag=$prec-tp2pp2-$s
            run $MPIEXEC -n 4 "$kiln" train $A --precision $prec --comm nccl --mesh tp=2,pp=2 --schedule $s \
                --microbatches 8 --out $tag.st --log $tag.log > $tag.txt 2>&1 || { cat $tag.txt; exit 1; }
            ok "tp=2,pp=2 $s $prec" python3 "$here/compare.py" one-$prec.log $tag.log one-$prec.st $tag.st $tol
        done
    fi
    if [ "$ngpu" -ge 8 ]; then # the three axes: two pipelines of two tensor-parallel stages
        tag=$prec-dp2tp2pp2
        run $MPIEXEC -n 8 "$kiln" train $A --precision $prec --comm nccl --mesh dp=2,tp=2,pp=2 --microbatches 4 \
            --out $tag.st --log $tag.log > $tag.txt 2>&1 || { cat $tag.txt; exit 1; }
        ok "dp=2,tp=2,pp=2 1f1b $prec" python3 "$here/compare.py" one-$prec.log $tag.log one-$prec.st $tag.st $tol
    fi
done
if [ "$ngpu" -ge 4 ]; then
    B="--layers 16 --width 1024 --heads 16 --context 256 --batch 64 --steps 4 --data-bytes 2000000 --eval-batches 1 --sample 0 --mode compiled --out none"
    for s in 1f1b interleaved; do
        run $MPIEXEC -n 4 "$kiln" train $B --comm nccl --pp 4 --schedule $s --microbatches 16 --timeline bubble-$s.tsv \
            > bubble-$s.txt 2>&1 || { cat bubble-$s.txt; exit 1; }
        echo "pp 4 $s m=16: $(grep -o 'pipeline bubble.*' bubble-$s.txt | tr -s ' ')"
        command -v gnuplot > /dev/null && bash "$plots/pp_timeline.sh" bubble-$s.tsv bubble-$s.png
    done
fi
echo "pipeline parallelism on $ngpu GPUs: ok"
