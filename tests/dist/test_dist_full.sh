#!/usr/bin/env bash
# test_dist_full.sh KILN — the 8-rank meshes of issue 33, against one process (`make
# test-dist-full`; not in `make test`: 8 ranks on a 2-core machine take minutes).
#
# Each run is `mpiexec -n 8 kiln train` on CPU ranks, compared with one process on the same
# global batch by tests/dist/compare.py (every loss, the final parameters and optimizer
# state, to the tolerance of a different summation order, as test_tp.sh and test_pp.sh;
# SGD with momentum, see below); a failed comparison fails the run:
#   --mesh tp=8 (8 heads), --mesh dp=2,tp=4, --mesh dp=4,tp=2,
#   --pp 8 with gpipe and 1f1b (8 layers, 8 micro-batches), --pp 8 interleaved (16 layers,
#   2 chunks a rank, 8 micro-batches), --mesh dp=2,pp=4 and dp=4,pp=2 (pipelines on shares
#   of the batch), --mesh dp=2,tp=4 --dist zero1, --mesh dp=2,tp=2,pp=2 with each schedule
#   (two pipelines of two tensor-parallel stages), --mesh dp=2,pp=4 and dp=2,tp=2,pp=2 with
#   --dist zero1 (the optimizer state of each pipeline rank sharded over dp).
# The 2- and 4-rank cases of the same meshes run in make test (test-step-dist-tp, -pp, -mesh).
set -euo pipefail
kiln=$(realpath "${1:?usage: test_dist_full.sh KILN}")
MPIEXEC=${MPIEXEC:-mpiexec}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
run() { timeout 600 "$@"; }
TOL="1e-5 1e-3"
same() { # same NAME ONE_FLAGS -- RANKS FLAGS...: one process against mpiexec -n RANKS, same batch
    local name=$1 one=$2 n=$3; shift 3
    [ -f "one-$one.st" ] || run "$kiln" train ${ONE[$one]} --out one-$one.st --log one-$one.log > one-$one.txt 2>&1 \
        || { cat one-$one.txt; exit 1; }
    run $MPIEXEC -n "$n" "$kiln" train ${ONE[$one]} "$@" --out $name.st --log $name.log > $name.txt 2>&1 \
        || { tail -n 30 $name.txt; echo "FAIL: $name"; exit 1; }
    local r
    r=$(python3 "$here/compare.py" one-$one.log $name.log one-$one.st $name.st $TOL) || { echo "$r"; echo "FAIL: $name"; exit 1; }
    echo "$name: $r"
}
# SGD with momentum: its update is linear in the gradient, so a different summation order
# stays at rounding size (AdamW divides near-zero gradients by their own size and magnifies
# it: 2e-3 on pp=8's one-row micro-batches, where the 2- and 4-rank tests stay under 1e-3)
base="--width 64 --context 16 --batch 8 --steps 3 --data-bytes 20000 --eval-batches 1 --sample 0 --device cpu --lr 1e-2 --optimizer sgd --momentum 0.9"
declare -A ONE
ONE[tp]="$base --layers 2 --heads 8"
ONE[pp]="$base --layers 8 --heads 4"
ONE[ppi]="$base --layers 16 --heads 4"
same "tp8" tp 8 --mesh tp=8
same "dp2tp4" tp 8 --mesh dp=2,tp=4
same "dp4tp2" tp 8 --mesh dp=4,tp=2
same "pp8-gpipe" pp 8 --pp 8 --schedule gpipe --microbatches 8
same "pp8-1f1b" pp 8 --pp 8 --schedule 1f1b --microbatches 8
same "pp8-interleaved" ppi 8 --pp 8 --schedule interleaved --chunks 2 --microbatches 8
same "dp2pp4" pp 8 --mesh dp=2,pp=4 --microbatches 4
same "dp4pp2" pp 8 --mesh dp=4,pp=2 --microbatches 2
same "dp2tp4-zero1" tp 8 --mesh dp=2,tp=4 --dist zero1
# the three axes at once: two pipelines of two stages, each stage's blocks split over two tp
# ranks, with each schedule (interleaved: two chunks of two blocks per rank)
for s in 1f1b gpipe interleaved; do
    same "dp2tp2pp2-$s" pp 8 --mesh dp=2,tp=2,pp=2 --schedule $s --microbatches 2
done
# ZeRO-1 on the dp axis of a mesh with pp: each dp rank keeps the optimizer state of half of
# its pipeline rank's (tp shard's) slab, the halves all-gathered after the update
same "dp2pp4-zero1" pp 8 --mesh dp=2,pp=4 --dist zero1 --microbatches 4
same "dp2tp2pp2-zero1" pp 8 --mesh dp=2,tp=2,pp=2 --dist zero1 --microbatches 2
echo "dist-full: every 8-rank mesh gives one process's losses and parameters"
