#!/usr/bin/env bash
# test_offload_gpu.sh KILN [OUT_DIR] — ZeRO-Offload (`kiln train --offload optimizer`,
# kiln/offload.h) on GPUs, run by hand on the lent machine (make test-offload-gpu); prints one
# line "skip: ..." and exits 0 without a GPU.
#
#   equality  one GPU, each cell run twice, without and with --offload optimizer, on the same
#             batches: fp32 AdamW (node by node), fp32 SGD with momentum, bf16 AdamW
#             (compiled: the weights' bf16 copies rounded again after the host step), and
#             fp32 with --cuda-graph on (the graph holds the forward and backward; the host
#             step runs after its launch). Losses and every tensor of the checkpoints
#             (parameters and optimizer state) compared by compare.py, which must find
#             them EQUAL (tolerance 0): the host's update and the GPU's kernel do the same
#             double operations in the same order, none fused (cuda_optim.cu's products are
#             __dmul_rn; tests/dist/test_optim_ptx.sh checks the PTX), the bf16 weight copies
#             are rounded alike (the kernel's store, the cast after the host step), and every
#             other kernel of the step is deterministic. So any difference is a bug of the
#             offload (a copy racing a kernel, a refresh missed), not rounding. With nvcc's
#             fused multiply-adds in the kernel (before issue 32's fix) the runs differed by
#             3.7% of a bias in bf16 and 2.9e-4 of a weight under DDP (Adam turns a
#             last-bit change of a gradient that is pure rounding noise into a step of up
#             to lr), and no tolerance could tell that from a race.
#   memory    the fp32 cell: the offload gives back 8 bytes a parameter (AdamW's m and v),
#             and rank 0's device peak during the steps (to the byte) drops by at least that
#             (99%); the host holds 16 bytes a parameter (master, gradients, m, v).
#   ranks     with 2 or more GPUs: --dist ddp, zero1, zero2 over NCCL on 2 GPUs, each with
#             and without --offload (equality as above; the peak drops by what the rank
#             gave back: 8P for DDP, 8P/N for ZeRO-1/2's shard).
#   speed     GPT-2 124M shape (B=8, T=1024, bf16, compiled, flash, hfuse, CUDA graph) on one
#             GPU with and without offload: the steady tokens/s of both, the peaks and the
#             offload's own times (D2H waits, the host's update, H2D). Printed, not judged
#             (OFFLOAD_GPU_SPEED=0 leaves it out).
set -euo pipefail
kiln=$(realpath "$1")
out=${2:-build/offload-gpu-test}
MPIEXEC=${MPIEXEC:-mpiexec}
here=$(cd "$(dirname "$0")" && pwd)
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${ngpu:-0}" -lt 1 ]; then echo "skip: ZeRO-Offload moves a GPU's optimizer to the host: no GPU here"; exit 0; fi
# NVLink multicast stays off on the lent machines (their KINDS.md says why)
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 KILN_COMM_TIMEOUT=${KILN_COMM_TIMEOUT:-60}
mkdir -p "$out"
cd "$out"
run() { timeout 600 "$@"; }
failed=0
fail() { echo "$1: FAILED: $2"; failed=$((failed + 1)); }
params() { sed -n 's/^kiln train: GPT .*: \([0-9]*\) parameters$/\1/p' "$1"; }
peak() { sed -n 's/.*device peak (bytes) *\([0-9]*\).*/\1/p' "$1"; }
freed() { sed -n 's/.*; \([0-9]*\) bytes of optimizer state given back by the GPU.*/\1/p' "$1"; }
held() { sed -n 's/.*offload optimizer *\([0-9]*\) bytes of pinned host memory held.*/\1/p' "$1"; }
rate() { sed -n 's/.*steady rate *\([0-9]*\) tokens.*/\1/p' "$1"; }

# pair TAG TOLS MPI_PREFIX WANT ARGS...: the run without and with --offload optimizer, compared;
# then the memory: the offload gave back WANT bytes (an awk expression of P, the parameters,
# or S, rank 0's optimizer-state bytes in the run without offload) and the peak fell by that
pair() {
    local tag=$1 tol=$2 pre=$3 want=$4
    shift 4
    run $pre "$kiln" train "$@" --out base-$tag.st --log base-$tag.log > base-$tag.txt 2>&1 \
        || { tail -n 15 base-$tag.txt; fail "$tag" "the run without offload"; return; }
    run $pre "$kiln" train "$@" --offload optimizer --out off-$tag.st --log off-$tag.log > off-$tag.txt 2>&1 \
        || { tail -n 15 off-$tag.txt; fail "$tag" "the run with --offload optimizer"; return; }
    local r
    if r=$(python3 "$here/compare.py" base-$tag.log off-$tag.log base-$tag.st off-$tag.st $tol); then
        echo "$tag: offloaded = on the GPU: $r"
    else
        fail "$tag" "$r"
        return
    fi
    local P S b o f h
    P=$(params base-$tag.txt) b=$(peak base-$tag.txt) o=$(peak off-$tag.txt) f=$(freed off-$tag.txt) h=$(held off-$tag.txt)
    S=$(sed -n 's/^  rank 0 .*optimizer-state bytes \([0-9]*\).*/\1/p' base-$tag.txt) # --dist: rank 0's state on the GPU
    if [ -z "$P" ] || [ -z "$b" ] || [ -z "$o" ] || [ -z "$f" ]; then fail "$tag" "no parameter count, peak or offload line"; return; fi
    awk -v P="$P" -v S="${S:-0}" -v b="$b" -v o="$o" -v f="$f" -v h="$h" -v tag="$tag" "BEGIN {
        want = $want
        printf \"%s: P=%d, given back %d bytes (want %d), host holds %d; device peak %d -> %d bytes (-%d, %.1f%% of what was given back)\n\",
               tag, P, f, want, h, b, o, b - o, 100 * (b - o) / (f > 0 ? f : 1)
        if (f != want) { print tag \": FAILED: the offload gave back \" f \" bytes, not \" want; exit 1 }
        if (b - o < 0.99 * f) { print tag \": FAILED: the device peak fell by less than the optimizer state\"; exit 1 }
    }" || failed=$((failed + 1))
}

M="--layers 4 --width 512 --heads 8 --context 64 --batch 8 --steps 8 --data-bytes 200000 --eval-batches 1 --sample 0 --lr 1e-3"
pair fp32-adamw "0 0" "" "8 * P" $M --device cuda:0
pair fp32-sgd "0 0" "" "4 * P" $M --device cuda:0 --optimizer sgd --momentum 0.9
pair bf16-adamw "0 0" "" "8 * P" $M --device cuda:0 --precision bf16 --mode compiled
pair fp32-graph "0 0" "" "8 * P" $M --device cuda:0 --mode compiled --cuda-graph on
if ! grep -q 'offload (last step)' off-fp32-adamw.txt 2>/dev/null; then fail fp32-adamw "no 'offload (last step)' line"; fi
grep -h 'offload' off-fp32-adamw.txt || true

if [ "$ngpu" -ge 2 ]; then
    for s in ddp zero1 zero2; do
        # what rank 0 held of optimizer state without offload (its report): 8P for DDP, its shard's for ZeRO
        pair $s-2gpu "0 0" "$MPIEXEC -n 2" "S" $M --dist $s --comm nccl --bucket-mb 4
    done
else
    echo "skip: --dist ddp/zero1/zero2 with --offload needs 2 GPUs (found $ngpu)"
fi

if [ "${OFFLOAD_GPU_SPEED:-1}" != 0 ]; then
    python3 - gpt2.kntk <<'PY'
import struct, sys, random
random.seed(0)
n, V = 1 << 21, 50304  # GPT-2's 50257 padded to a multiple of 64 (plots/dist-gpu.sh, llm.c)
with open(sys.argv[1], "wb") as f:
    f.write(b"KNTK" + struct.pack("<IIIQII", 1, 4, V, n, 0, 0))
    f.write(struct.pack("<%di" % n, *[random.randrange(V) for _ in range(n)]))
PY
    S="--data gpt2.kntk --layers 12 --width 768 --heads 12 --context 1024 --batch 8 --steps 12 --lr 3e-4 --eval-batches 1 --sample 0 --out none"
    BEST="--precision bf16 --mode compiled --flash --hfuse --cuda-graph on"
    for v in none optimizer; do
        run "$kiln" train $S $BEST --device cuda:0 --offload $v > speed-$v.txt 2>&1 \
            || { tail -n 15 speed-$v.txt; fail "speed --offload $v" "the run"; continue; }
    done
    if [ -f speed-none.txt ] && [ -f speed-optimizer.txt ]; then
        a=$(rate speed-none.txt) b=$(rate speed-optimizer.txt)
        echo "speed (GPT-2 124M, B=8, T=1024, bf16 best step, one GPU): $a tokens/s on the GPU, $b tokens/s offloaded" \
             "($(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", b / a }')x); device peak $(peak speed-none.txt) -> $(peak speed-optimizer.txt) bytes"
        grep -h 'offload' speed-optimizer.txt || true
    fi
fi

[ $failed -eq 0 ] && echo "offload on GPUs: all cells passed" && exit 0
echo "offload on GPUs: $failed cell(s) FAILED"
exit 1
