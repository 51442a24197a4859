#!/usr/bin/env bash
# test_pp.sh KILN TEST_DIST — pipeline parallelism against one process (make test: the step
# test-step-dist-pp, core/dist.mk).
#
# 1. test-dist pp (tests/dist/test_pp.c) under mpiexec -n 1, 2 and 4: every schedule's
#    losses, gradient norms and final parameters against one process, the tied wte's two
#    copies bitwise equal, each rank's slabs exactly its stages' parameters (the trainer's
#    whole-model slabs freed), the stash's peak, the timeline's order, the bubble with every action
#    sleeping a fixed time (within 6 points of (p-1)/(v m+p-1)), kn_pp_check's refusals.
# 2. `kiln train --pp N --schedule S` on 2 and 4 CPU ranks gives one process's losses and
#    final parameters and optimizer state (compare.py; tolerance: a summation order), and its
#    --timeline has every rank's 2 m v actions, in order, each computing after its input came;
#    plots/pp_timeline.sh draws it (where gnuplot is); --accum 2 (two rounds of the schedule
#    per step); --pp 4's ranks each hold only their
#    stages' parameters, gradients and AdamW state (the printed counts and bytes against the
#    GPT's shapes); a checkpoint resumes on another mesh and schedule; bf16 (its low copies
#    per rank too); --mode emu (the CUDA code under the emulator); --emit-ir shows the
#    stages' send and recv.
# 3. Bad usage gets its message: ranks != --pp, layers not divisible into stages, fewer
#    micro-batches than stages, a batch the micro-batches do not divide, interleaved with m
#    not a multiple of p, --pp with --dist.
# kiln train's measured bubble is printed, not checked: 4 ranks on 2 loaded cores time tiny
# stages badly (test-dist pp checks the bubble with sleeps instead).
set -euo pipefail
kiln=$(realpath "$1")
dist=$(realpath "$2")
MPIEXEC=${MPIEXEC:-mpiexec}
here=$(cd "$(dirname "$0")" && pwd)
plots=$(cd "$here/../../plots" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
. "$here/lib.sh"

for n in 1 2 4; do
    echo "== test-dist pp, mpiexec -n $n"
    run $MPIEXEC -n $n "$dist" pp
done

A="--layers 8 --width 32 --heads 2 --context 16 --batch 8 --steps 4 --data-bytes 20000 --eval-batches 1 --sample 0 --device cpu --lr 1e-2"
TOL="1e-5 1e-3"  # losses, tensors (compare.py says why they differ)
trained one 1 $A
for cell in "2 gpipe" "2 1f1b" "2 interleaved" "4 1f1b" "4 interleaved"; do
    set -- $cell
    n=$1 s=$2 tag=$1$2
    trained $tag $n $A --pp $n --schedule $s --microbatches 4 --timeline $tag.tsv
    r=$(python3 "$here/compare.py" one.log $tag.log one.st $tag.st $TOL)
    echo "pp $n, $s: $r; $(grep -o 'pipeline bubble.*' $tag.txt | tr -s " ")"
    v=1; [ "$s" = interleaved ] && v=2
    # the timeline: p x 2 m v rows; per rank in order, t0 <= t_ready <= t1 <= the next t0
    awk -v p="$n" -v want=$((2 * 4 * v)) '
        /^#/ { next }
        { rows[$1]++; if (!($5 <= $6 && $6 <= $7)) { print "row " NR ": t0 " $5 " ready " $6 " t1 " $7; bad = 1 }
          if (($1 in last) && last[$1] > $5 + 1e-9) { print "rank " $1 ": an action starts before the one before it ended"; bad = 1 }
          last[$1] = $7 }
        END { for (r = 0; r < p; r++) if (rows[r] != want) { print "rank " r ": " rows[r] " actions, not " want; bad = 1 }
              exit bad }' $tag.tsv || { echo "pp $n, $s: the timeline is malformed"; exit 1; }
done
# memory per rank: kiln train --pp 4 prints each rank's own slabs; every rank holds its two
# blocks (12 D^2 + 13 D each) plus, rank 0, wte and wpe, rank 3, ln_f and its wte copy: the
# counts exact, the bytes 4 (parameters), 4 (gradients), 8 (AdamW's two moments) per
# parameter, and each share within the embeddings' (V D + C D) of P/p
python3 - 41f1b.txt <<'PY' || { echo "pp 4: the per-rank memory is not the stage split's"; exit 1; }
import re, sys
t = open(sys.argv[1]).read()
L, D, C, V, P = map(int, re.search(r"GPT (\d+) layers, width (\d+), \d+ heads, context (\d+), vocab (\d+): (\d+) parameters", t).groups())
p, blk = 4, 12 * D * D + 13 * D
rows = re.findall(r"rank (\d+) +holds (\d+) of P = (\d+) parameters .*?parameter bytes (\d+), gradient bytes (\d+), optimizer-state bytes (\d+), low-copy bytes (\d+)", t)
assert len(rows) == p, "%d ranks' memory printed, not %d" % (len(rows), p)
for r, n, pp_, pb, gb, sb, lb in (map(int, row) for row in rows):
    want = (L // p) * blk + (V * D + C * D if r == 0 else 0) + (2 * D + V * D if r == p - 1 else 0)
    assert n == want, "rank %d holds %d parameters, its stages have %d" % (r, n, want)
    assert (pb, gb, sb, lb) == (4 * n, 4 * n, 8 * n, 0), "rank %d's bytes %s for %d parameters" % (r, (pb, gb, sb, lb), n)
    assert abs(n - P / p) <= V * D + C * D, "rank %d holds %d, P/p = %g" % (r, n, P / p)
    print("rank %d holds %d parameters (%.1f%% of P; P/p 25%%), %d bytes with gradients and AdamW state" % (r, n, 100 * n / P, pb + gb + sb))
PY
# --accum 2: two rounds of the schedule per step, their gradients summed (one process's step)
trained acc 2 $A --pp 2 --microbatches 2 --accum 2
grep -q "2 rounds of the schedule per step" acc.txt || { echo "--pp 2 --accum 2: no rounds"; cat acc.txt; exit 1; }
ok "pp 2, 1f1b, --accum 2" python3 "$here/compare.py" one.log acc.log one.st acc.st $TOL
# a checkpoint of --pp 4 1f1b (its every rank's parameters and optimizer state gathered)
# resumes as --pp 2 gpipe with other micro-batches, on one process's course
run $MPIEXEC -n 4 "$kiln" train $A --pp 4 --microbatches 4 --stop-after 2 --out r.st --log r1.log > r1.txt 2>&1 \
    || { cat r1.txt; exit 1; }
trained r2 2 --resume r.st --pp 2 --schedule gpipe --microbatches 2
cat r1.log r2.log > r.log
ok "pp 4 1f1b, resumed as pp 2 gpipe" python3 "$here/compare.py" one.log r.log one.st r2.st $TOL
# the GPU's code path without a GPU: the stages' programs rendered as CUDA and run by the
# CUDA emulator (--mode emu)
E="--layers 2 --width 16 --heads 2 --context 8 --batch 4 --steps 2 --data-bytes 20000 --eval-batches 1 --sample 0 --lr 1e-2 --mode emu"
trained e1 1 $E
trained e2 2 $E --pp 2 --microbatches 2
ok "pp 2, 1f1b, --mode emu" python3 "$here/compare.py" e1.log e2.log e1.st e2.st $TOL
# bf16 (the weights' low copies bound in every stage's programs), SGD: Adam's update of a
# noise-only gradient is order-dependent at 16 bits (compare.py); the tolerance is DDP's bf16 one
M="--layers 4 --width 32 --heads 2 --context 16 --batch 8 --steps 4 --data-bytes 20000 --eval-batches 1 --sample 0 --device cpu --optimizer sgd --momentum 0.9 --lr 0.1 --precision bf16"
trained b1 1 $M
trained b2 2 $M --pp 2 --schedule interleaved --microbatches 4 --emit-ir stages.ir
ok "pp 2, interleaved, bf16" python3 "$here/compare.py" b1.log b2.log b1.st b2.st 3e-4 4e-3
# ... and each rank's bf16 copies are of its own parameters only: 2 bytes per held parameter
grep -o "holds [0-9]* of P.*low-copy bytes [0-9]*" b2.txt | awk '{ n++; if ($NF != 2 * $2) { print "bf16: " $0; bad = 1 } }
    END { if (n != 2) { print "bf16: " n " ranks print their memory, not 2"; bad = 1 } exit bad }' \
    || { echo "pp 2, bf16: the low copies are not per rank"; exit 1; }
# --emit-ir: rank 0's stage programs, with their send and recv ops on mesh axis 2
for op in "recv %" "send %"; do
    grep -q "= $op" stages.ir || { echo "--emit-ir: no $op in the stages' graphs"; exit 1; }
done
grep -q "mesh=2, parts=2, peer=1" stages.ir || { echo "--emit-ir: no send/recv to peer 1 on the pp axis"; exit 1; }
if command -v gnuplot > /dev/null; then
    bash "$plots/pp_timeline.sh" 41f1b.tsv tl.png > plot.txt && test -s tl.png && cat plot.txt
fi

expect() { # expect MESSAGE RANKS ARGS...: the run fails, saying MESSAGE
    local msg=$1 n=$2
    shift 2
    refused "$msg" run $MPIEXEC -n $n "$kiln" train $A "$@"
}
expect "one rank per stage" 2 --pp 4
expect "do not divide into 3 stages" 1 --pp 1 --schedule interleaved --chunks 3 --microbatches 2
expect "do not divide into 8 stages" 4 --pp 4 --schedule interleaved --microbatches 4 --layers 6
expect "need --microbatches >= --pp" 4 --pp 4 --schedule 1f1b --microbatches 2
expect "not divisible by --microbatches" 2 --pp 2 --microbatches 3
expect "not a multiple of --pp" 2 --pp 2 --schedule interleaved --batch 6 --layers 4 --microbatches 3
expect "not combined yet" 2 --pp 2 --dist ddp
expect "use gpipe, 1f1b or interleaved" 2 --pp 2 --schedule zigzag
echo "pipeline parallelism: ok"
