#!/usr/bin/env bash
# test_dist_gpu.sh KILN [OUT_DIR] — data parallelism on GPU ranks (NCCL) against one GPU: the
# cells of issue 32 that need GPUs, run by hand on a machine with 2 or more GPUs (make
# test-dist-gpu); prints one line "skip: ..." and exits 0 where there are fewer.
#
#   equality  kiln train --comm nccl on 2 GPUs (and 4 where there are 4) against one GPU on
#             the same global batch (compare.py): ZeRO-3 / FSDP (its parameter shard, gathers,
#             gradients and AdamW state in device memory), also compiled (--mode compiled),
#             and gradient accumulation (--accum 2) under DDP, ZeRO-1, ZeRO-2 and ZeRO-3; in
#             fp32 (AdamW; plots/dist-gpu.sh's equality tolerance, a summation order) and
#             bf16 (SGD with momentum and DDP's bf16 tolerance, as tests/dist/test_pp_gpu.sh:
#             Adam's update of a noise-only gradient is order-dependent at 16 bits).
#   graph     DDP and ZeRO-1 with --cuda-graph on: the compiled step and its NCCL
#             collectives captured into one CUDA graph (stream-ordered waits), against one GPU.
#   memory    DDP and ZeRO-3 on 2 GPUs, a model whose 16P bytes dwarf its activations
#             (P about 12.7M): each rank's parameter bytes are 4P/N (within one float) for
#             ZeRO-3 and 4P for DDP, and what ZeRO-3's ranks hold on the device after the
#             last step (measured: kn_device_mem_stats) is below DDP's by at least half of
#             the table's difference, 16P - 16P/N.
set -euo pipefail
kiln=$(realpath "$1")
out=${2:-build/dist-gpu-test}
MPIEXEC=${MPIEXEC:-mpiexec}
here=$(cd "$(dirname "$0")" && pwd)
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${ngpu:-0}" -lt 2 ]; then echo "skip: data parallelism on GPUs needs 2 or more (found ${ngpu:-0})"; exit 0; fi
# NVLink multicast stays off on the lent machines (their KINDS.md says why)
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 KILN_COMM_TIMEOUT=${KILN_COMM_TIMEOUT:-60}
mkdir -p "$out"
cd "$out"
run() { timeout 600 "$@"; }
failed=0
ok() { # ok LABEL COMMAND...: COMMAND's output after LABEL; a failure is counted, the next cell runs
    local r
    if r=$("${@:2}"); then echo "$1: $r"; else echo "$1: FAILED: $r"; failed=$((failed + 1)); fi
}
G=16 # the global batch: 2 ranks x 2 micro-batches x 4 rows, 4 ranks x 4 rows
A="--layers 2 --width 64 --heads 4 --context 64 --batch $G --steps 8 --data-bytes 200000 --eval-batches 1 --sample 0"
for prec in fp32 bf16; do
    if [ $prec = fp32 ]; then P="$A --lr 1e-2" tol="1e-4 1e-2"
    # bf16: compiled only; tensors to 8e-3, two bf16 ulps (2^-8 each) of the largest entry: ZeRO-3's
    # momentum differed from one GPU by 5.3e-3 on an H100 (half the rows per rank, other roundings);
    # a lost or doubled gradient sum shows in the losses (3e-4) first
    else P="$A --optimizer sgd --momentum 0.9 --lr 0.1 --mode compiled" tol="3e-4 8e-3"; fi
    run "$kiln" train $P --precision $prec --device cuda:0 --out one-$prec.st --log one-$prec.log > one-$prec.txt 2>&1 \
        || { cat one-$prec.txt; exit 1; }
    cells="zero3:2:1:nodes zero3:2:1:compiled ddp:2:2:nodes zero1:2:2:nodes zero2:2:2:nodes zero3:2:2:nodes"
    cells="$cells ddp:2:1:graph zero1:2:1:graph"
    [ "$ngpu" -ge 4 ] && cells="$cells zero3:4:1:nodes zero3:4:1:compiled ddp:4:1:graph"
    cells=${DIST_GPU_CELLS:-$cells} # e.g. DIST_GPU_CELLS="ddp:2:1:graph" for one cell
    for c in $cells; do
        IFS=: read -r s n k mode <<< "$c"
        if [ $prec = bf16 ] && [ $mode != graph ]; then [ $mode = compiled ] && continue; mode=compiled; fi
        tag=$prec-$s-$n-acc$k-$mode
        m=""; [ $mode = compiled ] && [ $prec = fp32 ] && m="--mode compiled"
        [ $mode = graph ] && m="--mode compiled --cuda-graph on"
        run $MPIEXEC -n $n "$kiln" train $P $m --precision $prec --dist $s --comm nccl --accum $k --bucket-mb 0.05 \
            --out $tag.st --log $tag.log > $tag.txt 2>&1 || { tail -n 20 $tag.txt; echo "$tag: FAILED"; failed=$((failed + 1)); continue; }
        if [ $mode = graph ] && ! grep -q 'inside the step.s CUDA graph ([1-9]' $tag.txt; then
            echo "$tag: FAILED: the step's collectives did not run inside a CUDA graph"; failed=$((failed + 1)); continue
        fi
        ok "$s on $n GPUs x $k micro-batches, $prec, $mode" python3 "$here/compare.py" one-$prec.log $tag.log \
            one-$prec.st $tag.st $tol
    done
done

[ -n "${DIST_GPU_CELLS:-}" ] && { [ $failed -eq 0 ] && echo "cells $DIST_GPU_CELLS: ok" && exit 0; exit 1; }
# memory: DDP against ZeRO-3 on 2 GPUs, P about 12.7M (16P = 203 MB against a few MB of activations)
# buckets of 4 MiB: a compiled step's arena keeps the slots of the gathered buckets (at most
# a few buckets, not the 4P bytes of the whole slab; the "+ parameters gathered" line)
M="--layers 4 --width 512 --heads 8 --context 64 --batch 8 --steps 3 --data-bytes 200000 --eval-batches 1 --sample 0 --out none --bucket-mb 4"
for s in ddp zero3; do
    run $MPIEXEC -n 2 "$kiln" train $M --dist $s --comm nccl > mem-$s.txt 2>&1 || { tail -n 20 mem-$s.txt; echo "memory: $s FAILED"; exit 1; }
    grep '^  rank .* holds\|table (fp32\|parameters gathered .* at the peak\|device memory peak' mem-$s.txt
done
awk '/table \(fp32 Adam/ { P = $(NF-1); sub(/^P=/, "", P); sub(/,$/, "", P); N = $NF; sub(/^N=/, "", N); sub(/\)$/, "", N) }
     /^  rank +[0-9]+ +holds .* parameter bytes/ {
         b = $0; sub(/.*parameter bytes /, "", b); sub(/,.*/, "", b)
         d = $0; if (!sub(/.*device bytes after the last step /, "", d)) d = -1
         s = FILENAME ~ /zero3/ ? "zero3" : "ddp"; want = s == "zero3" ? 4 * P / N : 4 * P
         if (b - want > 4 || want - b > 4) { print s ": parameter bytes " b ", want about " want; bad = 1 }
         if (d < 0) { print s ": no device bytes on a rank line"; bad = 1 }
         if (d > most[s]) most[s] = d }
     END { gap = most["ddp"] - most["zero3"]; need = (16 * P - 16 * P / N) / 2
           printf "memory on %d GPUs: zero3 rank parameter bytes 4P/N = %d; device bytes after the last step, the most of a rank: ddp %d, zero3 %d (%d less; the table: %d less)\n", N, 4 * P / N, most["ddp"], most["zero3"], gap, 16 * P - 16 * P / N
           if (bad || gap < need) { print "memory: FAILED (zero3 must hold at least " need " bytes less than ddp)"; exit 1 } }' \
    mem-ddp.txt mem-zero3.txt || failed=$((failed + 1))
[ $failed -eq 0 ] || { echo "data parallelism on $ngpu GPUs: $failed check(s) FAILED (logs in $out)"; exit 1; }
echo "data parallelism on $ngpu GPUs (zero3, accumulation, memory): ok"
