#!/usr/bin/env bash
# test_train.sh KILN — data-parallel training against one process (make test, core/dist.mk).
#
# Equality: `mpiexec -n N kiln train --dist S` on 2 and 4 CPU ranks, for DDP, ZeRO-1,
# ZeRO-2 and ZeRO-3 (small buckets, so several are in flight), with gradient accumulation,
# with kiln's ring all-reduce and with ZeRO-3 node by node (--mode interp), must give the
# losses and the final parameters and optimizer state of one process on the same global
# batch (compare.py; tolerance: a summation order), also in bf16 and fp16 (one loss-scale
# decision for all ranks: an inf on one rank skips the step on both). A checkpoint written by ZeRO-2 on 2
# ranks resumes as ZeRO-1 on 4, and one of ZeRO-3 on 2 as ZeRO-3 on 4, exactly on course.
# Then the memory table (ZeRO-3: parameters 4P/N, the gathered buckets below 4P) and the
# overlap lines (also the placement of the collective ops) are printed and checked, and bad usage gets its message: --dist without
# mpiexec, a batch the ranks do not divide, NCCL without a GPU, kiln's ring on GPUs, ZeRO-3
# with the ring, a strategy that does not exist. Each rank's parameter bytes are checked too
# (ZeRO-3: 4P/N each).
set -euo pipefail
kiln=$(realpath "$1")
MPIEXEC=${MPIEXEC:-mpiexec}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
A="--layers 2 --width 32 --heads 2 --context 16 --batch 8 --steps 5 --data-bytes 20000 --eval-batches 1 --sample 0 --device cpu --lr 1e-2"
TOL="1e-5 1e-3"  # losses, tensors (compare.py says why they differ)
run() { timeout 120 "$@"; }

run "$kiln" train $A --out one.st --log one.log > one.txt 2>&1
for n in 2 4; do
    for s in ddp zero1 zero2 zero3; do
        run $MPIEXEC -n $n "$kiln" train $A --dist $s --bucket-mb 0.01 --out $s$n.st --log $s$n.log > $s$n.txt 2>&1 \
            || { cat $s$n.txt; exit 1; }
        r=$(python3 "$here/compare.py" one.log $s$n.log one.st $s$n.st $TOL); echo "$s on $n ranks: $r"
    done
done
run $MPIEXEC -n 2 "$kiln" train $A --dist ddp --accum 2 --bucket-mb 0.01 --out acc.st --log acc.log > acc.txt 2>&1 \
    || { cat acc.txt; exit 1; }
r=$(python3 "$here/compare.py" one.log acc.log one.st acc.st $TOL); echo "ddp, 2 ranks x 2 micro-batches: $r"
run $MPIEXEC -n 2 "$kiln" train $A --dist zero2 --accum 2 --bucket-mb 0.01 --out acc2.st --log acc2.log > acc2.txt 2>&1 \
    || { cat acc2.txt; exit 1; }
r=$(python3 "$here/compare.py" one.log acc2.log one.st acc2.st $TOL); echo "zero2, 2 ranks x 2 micro-batches: $r"
run $MPIEXEC -n 2 "$kiln" train $A --dist fsdp --accum 2 --bucket-mb 0.01 --out acc3.st --log acc3.log > acc3.txt 2>&1 \
    || { cat acc3.txt; exit 1; }
r=$(python3 "$here/compare.py" one.log acc3.log one.st acc3.st $TOL); echo "zero3 (as fsdp), 2 ranks x 2 micro-batches: $r"
run $MPIEXEC -n 4 "$kiln" train $A --dist zero3 --mode interp --bucket-mb 0.01 --out in3.st --log in3.log > in3.txt 2>&1 \
    || { cat in3.txt; exit 1; }
r=$(python3 "$here/compare.py" one.log in3.log one.st in3.st $TOL); echo "zero3 node by node (--mode interp), 4 ranks: $r"
run $MPIEXEC -n 4 "$kiln" train $A --dist ddp --allreduce ring --bucket-mb 0.01 --out ring.st --log ring.log > ring.txt 2>&1 \
    || { cat ring.txt; exit 1; }
r=$(python3 "$here/compare.py" one.log ring.log one.st ring.st $TOL); echo "ddp with kiln's ring, 4 ranks: $r"
grep -Eq "gradients sent +[1-9][0-9]* bytes" ring.txt || { grep "gradients sent" ring.txt; echo "the ring's sends are not counted in 'gradients sent'"; exit 1; }

# mixed precision with data parallelism (issue 32): bf16 under DDP (the weights' low copies
# bound in the step the strategy's pass made), fp16 under DDP with its dynamic loss scale
# and an inf planted at step 2 on rank 1 ONLY: every rank skips that step, as one process
# does with the inf, and the scales stay equal (the log's scale and skipped columns).
# SGD: Adam's update of a noise-only gradient (compare.py) is order-dependent at 16 bits.
M="$A --optimizer sgd --momentum 0.9 --lr 0.1"
run "$kiln" train $M --precision bf16 --out mbf16.st --log mbf16.log > mbf16.txt 2>&1 || { cat mbf16.txt; exit 1; }
run env KILN_INJECT_INF_STEP=2 "$kiln" train $M --precision fp16 --out mfp16.st --log mfp16.log > mfp16.txt 2>&1 \
    || { cat mfp16.txt; exit 1; }
run $MPIEXEC -n 2 "$kiln" train $M --precision bf16 --dist ddp --bucket-mb 0.01 --out mb.st --log mb.log > mb.txt 2>&1 \
    || { cat mb.txt; exit 1; }
r=$(python3 "$here/compare.py" mbf16.log mb.log mbf16.st mb.st 3e-4 4e-3); echo "bf16 ddp on 2 ranks: $r"
run env KILN_INJECT_INF_STEP=2 KILN_INJECT_INF_RANK=1 $MPIEXEC -n 2 "$kiln" train $M --precision fp16 --dist ddp \
    --bucket-mb 0.01 --accum 2 --out mf.st --log mf.log > mf.txt 2>&1 || { cat mf.txt; exit 1; }
r=$(python3 "$here/compare.py" mfp16.log mf.log mfp16.st mf.st 1e-4 1e-3); echo "fp16 ddp x 2 micro-batches, inf on rank 1 only: $r"
cut -d' ' -f5,6 mfp16.log > s1.txt; cut -d' ' -f5,6 mf.log > s2.txt
cmp -s s1.txt s2.txt && grep -q "^2 .* 1$" mf.log || { paste mfp16.log mf.log; echo "fp16: the loss scale or the skip differ"; exit 1; }
echo "  the step with rank 1's inf skipped on both ranks; scales $(tr '\n' ' ' < s2.txt)"

# --compress int8 (DDP, error feedback): it trains like the uncompressed run and sends about
# a quarter of the bytes (2 ranks, 80 steps: the mean loss of the last 20 steps within 5%; +2.6% measured, and -0.3% after 150 steps)
C="--layers 2 --width 64 --heads 4 --context 32 --batch 16 --steps 80 --data-bytes 100000 --eval-batches 1 --sample 0 --device cpu --lr 1e-2 --out none"
run $MPIEXEC -n 2 "$kiln" train $C --dist ddp --log cu.log > cu.txt 2>&1 || { cat cu.txt; exit 1; }
run $MPIEXEC -n 2 "$kiln" train $C --dist ddp --compress int8 --log cc.log > cc.txt 2>&1 || { cat cc.txt; exit 1; }
python3 - cu.log cc.log cu.txt cc.txt <<'PY'
import re, sys
def last(p): l = [float(x.split()[1]) for x in open(p) if x.strip()][-20:]; return sum(l) / len(l)
def sent(p): return int(re.search(r"gradients sent +(\d+) bytes", open(p).read()).group(1))
u, c = last(sys.argv[1]), last(sys.argv[2])
r = sent(sys.argv[4]) / sent(sys.argv[3])
print("--compress int8 on 2 ranks: last-20 mean loss %.4f vs %.4f uncompressed (%+.2f%%), %.3f of the bytes" % (c, u, 100 * (c / u - 1), r))
assert abs(c / u - 1) < 0.05, "compressed training drifted from the uncompressed run"
assert r < 0.3, "int8 should send about a quarter of the bytes"
PY

# a checkpoint moves between strategies and rank counts: ZeRO-2 on 2 ranks stops at step 3
# (its sharded optimizer state gathered into the file), ZeRO-1 on 4 ranks resumes it
run $MPIEXEC -n 2 "$kiln" train $A --dist zero2 --bucket-mb 0.01 --stop-after 3 --out half.st --log res.log > res.txt 2>&1 \
    || { cat res.txt; exit 1; }
run $MPIEXEC -n 4 "$kiln" train --resume half.st --dist zero1 --bucket-mb 0.01 --device cpu --sample 0 --eval-batches 1 \
    --out res.st --log res.log > res.txt 2>&1 || { cat res.txt; exit 1; }
r=$(python3 "$here/compare.py" one.log res.log one.st res.st $TOL); echo "zero2 x 2 ranks, resumed as zero1 x 4: $r"
run $MPIEXEC -n 2 "$kiln" train $A --dist zero3 --bucket-mb 0.01 --stop-after 3 --out half3.st --log res3.log > res3.txt 2>&1 \
    || { cat res3.txt; exit 1; }
run $MPIEXEC -n 4 "$kiln" train --resume half3.st --dist zero3 --bucket-mb 0.01 --device cpu --sample 0 --eval-batches 1 \
    --out res3.st --log res3.log > res3.txt 2>&1 || { cat res3.txt; exit 1; }
r=$(python3 "$here/compare.py" one.log res3.log one.st res3.st $TOL); echo "zero3 x 2 ranks, resumed as zero3 x 4: $r"

# the schedule: the step's graph with its collectives as ops (the zero pass), a comment naming
# each bucket after its start; it parses; the first start comes before the backward's last matmul
run $MPIEXEC -n 2 "$kiln" train $A --steps 1 --dist zero1 --bucket-mb 0.01 --out none --emit-ir sched.ir > sched.txt 2>&1 \
    || { cat sched.txt; exit 1; }
nb=$(sed -n 's/.* \([0-9]*\) buckets\{0,1\} of <=.*/\1/p' sched.txt)
[ "$(grep -c '= reduce_scatter_start %' sched.ir)" = "$nb" ] && [ "$(grep -c '= comm_wait %' sched.ir)" = "$nb" ] \
    && [ "$(grep -c '^#   ^ reduce_scatter bucket' sched.ir)" = "$nb" ] || { cat sched.ir; echo "not $nb buckets in sched.ir"; exit 1; }
awk '/= reduce_scatter_start %/ && !s { s = NR } /= matmul %/ { m = NR } END { exit !(s && m > s) }' sched.ir \
    || { echo "sched.ir: no matmul after the first reduce_scatter_start"; exit 1; }
"$kiln" ir sched.ir --verify > /dev/null
echo "--emit-ir: $nb reduce_scatter_start ops, the file parses; e.g. $(grep -m1 '= reduce_scatter_start' sched.ir)"
run $MPIEXEC -n 2 "$kiln" train $A --steps 1 --dist ddp --bucket-mb 0.01 --out none --emit-ir schedd.ir > schedd.txt 2>&1 \
    || { cat schedd.txt; exit 1; }
[ "$(grep -c '= all_reduce_start %' schedd.ir)" = "$nb" ] || { cat schedd.ir; echo "ddp: not $nb all_reduce_start"; exit 1; }
# ZeRO-3's schedule (the zero3 pass): every bucket's all_gather_start, forward and backward,
# its comm_wait right before the first node that reads the bucket (a view of it), the next
# bucket's gather right after each wait (the prefetch), the buffer freed after its last reader
run $MPIEXEC -n 2 "$kiln" train $A --steps 1 --dist zero3 --bucket-mb 0.01 --out none --emit-ir sched3.ir > sched3.txt 2>&1 \
    || { cat sched3.txt; exit 1; }
"$kiln" ir sched3.ir --verify > /dev/null
nf=$(grep -c "all_gather bucket [0-9]*'s parameters (forward)" sched3.ir); nw=$(grep -c '= all_gather_start %' sched3.ir)
ng=$(grep -c '= comm_wait %[0-9]* {[^}]*} : f32\[[0-9]' sched3.ir)
[ "$nf" = "$nb" ] && [ "$nw" -gt "$nb" ] && [ "$ng" = "$nw" ] && [ "$(grep -c 'freed after %' sched3.ir)" = "$nw" ] \
    || { cat sched3.ir; echo "zero3: $nf forward gathers, $nw in all, $ng waited for, for $nb buckets"; exit 1; }
awk '/^%/ { id = $1 }
     /= comm_wait %[0-9]* {[^}]*} : f32\[[0-9]/ { w = $1; next }
     /^#/ || /= all_gather_start %/ { next }
     w != "" { if (index($0, w " ") == 0 && index($0, w ",") == 0) { print "not read right after its wait: " w ": " $0; bad = 1 } w = "" }
     END { exit bad }' sched3.ir || exit 1
awk '/= comm_wait %[0-9]* {[^}]*} : f32\[[0-9]/ { w = 1; next } /^#/ { next }
     w { if ($0 !~ /= all_gather_start %/ && !last) nope++; w = 0 } END { exit nope > 1 }' sched3.ir \
    || { echo "zero3: a wait not followed by the next gather"; exit 1; }
echo "--emit-ir zero3: $nw all_gather_start ops ($nf in the forward) for $nb buckets, each waited for right before its first reader"

# memory per rank against distributed.md's table (P = the parameter count, N = 4)
for s in ddp zero1 zero2 zero3; do
    echo "--- $s, 4 ranks:"
    sed -n '/memory per rank/,/overlap/p' ${s}4.txt
    grep -q "hidden behind the backward" ${s}4.txt
    # the collectives are IR ops; the backward's end and the starts come from their places
    grep -q "^  overlap (placement) .* bucket starts" ${s}4.txt || { cat ${s}4.txt; exit 1; }
    grep -q "^  pass  *\(ddp\|zero\|zero3\):0.01" ${s}4.txt || { echo "$s: no pass line"; exit 1; }
    # held == table for every row but ZeRO-1's gradients (the full slab plus the reduced shard)
    awk -v s=$s '/^    (parameters|optimizer state)/ { if ($(NF-1) != $NF) { print "memory row differs: " $0; bad=1 } }
                 /^    gradients/ && s != "zero1" { if ($(NF-1) != $NF) { print "memory row differs: " $0; bad=1 } }
                 END { exit bad }' ${s}4.txt
done
# ZeRO-3: the gathered buckets at their peak hold less than the whole slab (4P bytes)
awk '/table \(fp32 Adam/ { P = $(NF-1); sub(/^P=/, "", P); sub(/,$/, "", P) }
     /parameters gathered +[0-9]+ at the peak/ { g = $4 }
     END { if (!(g > 0 && g < 4 * P)) { print "zero3 gathered " g " of 4P = " 4 * P; exit 1 }
           printf "zero3 on 4 ranks: gathered buckets peak at %d bytes, %.0f%% of the slab\n", g, 100 * g / (4 * P) }' zero34.txt
grep -q "hidden by the prefetch" zero34.txt
# ... and each rank holds its own shard of them: parameter bytes within 4 of 4P/N, summing to
# 4P (the per-rank lines, as kiln train --pp prints them); DDP's ranks hold all 4P each
for s in zero3 ddp; do
    awk -v s=$s '/table \(fp32 Adam/ { P = $(NF-1); sub(/^P=/, "", P); sub(/,$/, "", P); N = $NF; sub(/^N=/, "", N); sub(/\)$/, "", N) }
         /^  rank +[0-9]+ +holds .* parameter bytes/ { b = $0; sub(/.*parameter bytes /, "", b); sub(/,.*/, "", b)
                                                       want = s == "zero3" ? 4 * P / N : 4 * P
                                                       if (b - want > 4 || want - b > 4) { print s ": " $0 " (want about " want ")"; bad = 1 }
                                                       if (!ranks || b < lo) lo = b; if (b > hi) hi = b
                                                       sum += b; ranks++ }
         END { if (bad || ranks != N || (s == "zero3" && sum != 4 * P)) { print s ": " ranks " rank lines of " N ", " sum " bytes of 4P = " 4 * P; exit 1 }
               printf "%s on %d ranks: each rank holds %d..%d parameter bytes (4P = %d)\n", s, N, lo, hi, 4 * P }' ${s}4.txt \
        || { grep '^  rank\|table' ${s}4.txt; exit 1; }
done

# bad usage: each a clear message and a nonzero exit
expect() { # expect "what" "pattern" cmd...
    local what=$1 pat=$2; shift 2
    if "$@" > out.txt 2>&1; then echo "$what: exited 0"; cat out.txt; exit 1; fi
    grep -q -- "$pat" out.txt || { echo "$what: no '$pat' in:"; cat out.txt; exit 1; }
    echo "$what: $(grep -m1 -- "$pat" out.txt)"
}
expect "--dist without mpiexec" "mpiexec -n N" env -u PMI_RANK -u PMI_FD -u PMIX_RANK "$kiln" train $A --dist ddp
expect "a batch 4 ranks do not divide" "not divisible by 4 ranks" run $MPIEXEC -n 4 "$kiln" train $A --batch 6 --dist ddp
if nvidia-smi -L > /dev/null 2>&1; then
    expect "nccl with --device cpu" "one rank per GPU" run $MPIEXEC -n 2 "$kiln" train $A --dist ddp --comm nccl
else
    expect "nccl without a GPU" "no usable GPU" run $MPIEXEC -n 2 "$kiln" train $A --dist ddp --comm nccl
fi
expect "a GPU over mpi" "add --comm nccl" run $MPIEXEC -n 2 "$kiln" train ${A/--device cpu/--device cuda} --dist ddp
expect "--compress with zero1" "compresses DDP's buckets" run $MPIEXEC -n 2 "$kiln" train $A --dist zero1 --compress int8
expect "int8 with fp16's loss scale" "cannot take back" run $MPIEXEC -n 2 "$kiln" train $A --precision fp16 --dist ddp --compress int8
if nvidia-smi -L > /dev/null 2>&1; then # kiln's ring moves host buffers; every strategy runs on GPU ranks
    expect "the ring on GPUs" "runs on CPU ranks" run $MPIEXEC -n 2 "$kiln" train ${A/--device cpu/} --dist ddp --allreduce ring --comm nccl
else # ZeRO-3 and accumulation over NCCL get as far as looking for the GPU (tests/dist/test_dist_gpu.sh runs them)
    expect "zero3 x 2 micro-batches over nccl, no GPU" "no usable GPU" run $MPIEXEC -n 2 "$kiln" train $A --dist zero3 --accum 2 --comm nccl
fi
expect "zero3 with the ring" "ring is DDP's" run $MPIEXEC -n 2 "$kiln" train $A --dist zero3 --allreduce ring
expect "a strategy that does not exist" "expected ddp, zero1, zero2 or zero3" run $MPIEXEC -n 2 "$kiln" train $A --dist zero4
echo "test_train: all passed"
