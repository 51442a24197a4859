#!/usr/bin/env bash
# test_tp.sh TEST_DIST KILN — tensor parallelism (make test's test-step-dist-tp).
#
# 1. tests/dist/test_tp.c under mpiexec with 2 and 4 ranks: the placement pass's local
#    graphs (tp=2, tp=4; plain and sequence-parallel) trained by hand against one process
#    (losses, gradients, final parameters) and the pass's collective count.
# 2. `mpiexec -n N kiln train --mesh tp=N` (N = 2, 4; 4 ranks oversubscribe 2 cores, kiln's
#    waits sleep) against one process on the same global batch: the per-step losses and the
#    checkpoint (parameters and AdamW state gathered from the shards), compare.py with
#    data-parallel's tolerance (a summation order). --emit-ir writes rank 0's local graph.
#    The same in bf16 (to a bf16 tolerance), with a vocabulary that splits (the
#    vocabulary-parallel embedding and cross-entropy), with sequence parallelism (--sp: the
#    activation memory per rank below plain tp's), dp=2 x tp=2 on 4 ranks, --accum 2 (tp=2
#    and dp=2 x tp=2), ZeRO-1 on the dp axis (--dist zero1: half the optimizer state), the
#    vocabulary split across two pipeline stages (--mesh tp=2,pp=2). kiln compile --mesh tp=2 shows Megatron's
#    collectives in rank 1's local graph.
# 3. Every bad mesh gets its message: sizes that do not multiply to the ranks, an unknown or
#    repeated axis, heads not divisible by tp (train and compile), layers the stages of a tp
#    x pp mesh do not share, no tp axis, a batch dp (or dp x --accum) does not divide, zero1 without a dp axis,
#    no mpiexec. (fp16 and --resume under tp, once refused here, are test_mesh.sh's cells.)
set -euo pipefail
bin=$(realpath "$1")
kiln=$(realpath "$2")
MPIEXEC=${MPIEXEC:-mpiexec}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
. "$here/lib.sh"
for n in 2 4; do
    echo "== mpiexec -n $n test-dist tp (and with sequence parallelism)"
    run $MPIEXEC -n $n "$bin" tp
    run $MPIEXEC -n $n "$bin" tp sp
done

A="--layers 2 --width 32 --heads 4 --context 16 --batch 4 --steps 4 --data-bytes 20000 --eval-batches 1 --sample 0 --device cpu --lr 1e-2"
TOL="1e-5 1e-3"
trained one 1 $A
for n in 2 4; do
    trained tp$n $n $A --mesh tp=$n --emit-ir tp$n.ir
    r=$(python3 "$here/compare.py" one.log tp$n.log one.st tp$n.st $TOL); echo "kiln train --mesh tp=$n on $n ranks: $r"
    grep -q "tensor parallel: tp=$n ranks" tp$n.txt || { cat tp$n.txt; echo "no tensor-parallel line"; exit 1; }
    grep -q "all_reduce.*inserted" tp$n.ir || { echo "--emit-ir: no inserted all_reduce in tp$n.ir"; exit 1; }
done

# SGD + momentum in fp32: no Adam to amplify the rounding noise of near-zero gradients, so
# the tolerance is a summation order's (seen: losses equal, tensors 1.5e-7 relative)
G="$A --optimizer sgd --momentum 0.9"
trained g1 1 $G
for n in 2 4; do
    trained g$n $n $G --mesh tp=$n
    r=$(python3 "$here/compare.py" g1.log g$n.log g1.st g$n.st 1e-6 1e-5); echo "SGD, --mesh tp=$n on $n ranks: $r"
done

# bf16 (autocast; the weights cast in the step, the sums of 16-bit partials made in f32 over
# MPI) against one process in bf16, with SGD + momentum (Adam turns the rounding noise of a
# gradient that is zero in exact arithmetic, the key bias, into +-lr: compare.py), to a
# bf16 tolerance: one rounding of a partial sum before its all-reduce (seen: losses 1.6e-5,
# tensors 2.1e-3 relative)
S="$A --precision bf16 --optimizer sgd --momentum 0.9"
trained b1 1 $S
for n in 2 4; do
    trained b$n $n $S --mesh tp=$n
    r=$(python3 "$here/compare.py" b1.log b$n.log b1.st b$n.st 1e-4 1e-2); echo "bf16, --mesh tp=$n on $n ranks: $r"
done

# The vocabulary split too (the bundled grammar's 41 tokens do not split, so the runs above
# keep the embedding replicated): a text of 32 distinct bytes, so wte is S(0), the embedding
# and the cross-entropy vocabulary-parallel; fp32 to a summation order, bf16 to bf16's
python3 -c "
import random
random.seed(1)
words = [''.join(random.choice('abcdefghijklmnopqrstuvwxyz') for _ in range(random.randint(2, 7))) for _ in range(300)]
out, n = [], 0
while n < 30000:
    w = random.choice(words) + random.choice(' .,;!?'); out.append(w); n += len(w) + 1
open('v32.txt', 'w').write(' '.join(out))"
V="--layers 2 --width 32 --heads 4 --context 16 --batch 4 --steps 4 --data v32.txt --eval-batches 1 --sample 0 --device cpu --lr 1e-2 --optimizer sgd --momentum 0.9"
for p in fp32 bf16; do
    tol="1e-6 1e-5"; [ $p = bf16 ] && tol="1e-4 1e-2"
    trained v1$p 1 $V --precision $p
    for n in 2 4; do
        trained v$n$p $n $V --precision $p --mesh tp=$n
        grep -q "vocab 32" v$n$p.txt && ! grep -q "stay replicated" v$n$p.txt || { cat v$n$p.txt; echo "the vocabulary did not split"; exit 1; }
        r=$(python3 "$here/compare.py" v1$p.log v$n$p.log v1$p.st v$n$p.st $tol); echo "$p, vocabulary-parallel, --mesh tp=$n: $r"
    done
done
# and across pipeline stages (tp x pp): wte S(0) on the first stage (the embedding) and the
# last (the logits, the vocabulary-parallel cross-entropy), its two copies' gradients summed
# per tp coordinate (the embedding group is the pp axis's ends)
trained vpp 4 $V --mesh tp=2,pp=2 --microbatches 2
grep -q "tensor parallel: tp=2 ranks per stage" vpp.txt && ! grep -q "stay replicated" vpp.txt \
    || { cat vpp.txt; echo "tp=2,pp=2: the vocabulary did not split"; exit 1; }
r=$(python3 "$here/compare.py" v1fp32.log vpp.log v1fp32.st vpp.st 1e-6 1e-5); echo "fp32, vocabulary-parallel, --mesh tp=2,pp=2: $r"

# sequence parallelism (--sp): the layernorms and residual adds on the rank's rows, the
# all-reduces of activations replaced by reduce-scatter + all-gather; to a summation order,
# and the activation memory per rank reported below the tensor-parallel one's
for n in 2 4; do
    trained sp$n $n $V --mesh tp=$n --sp
    grep -q "activation memory .*sequence parallel; [1-9][0-9]* reduce_scatter" sp$n.txt || { cat sp$n.txt; echo "no sequence-parallel line"; exit 1; }
    r=$(python3 "$here/compare.py" v1fp32.log sp$n.log v1fp32.st sp$n.st 1e-6 1e-5); echo "--mesh tp=$n --sp: $r"
done
mb() { sed -n 's/.*activation memory *\([0-9.]*\) MB per rank.*/\1/p' "$1"; }
awk -v a="$(mb sp2.txt)" -v b="$(mb v2fp32.txt)" 'BEGIN { exit !(a < b) }' \
    || { echo "sequence parallelism's activations ($(mb sp2.txt) MB) not below tensor parallelism's ($(mb v2fp32.txt) MB)"; exit 1; }
echo "ok: activation memory per rank, tp=2: $(mb v2fp32.txt) MB, with --sp: $(mb sp2.txt) MB"

# the trainer's passes run on each rank's local graph after the placement: flash attention
# (heads local), activation checkpointing
for x in "--flash" "--remat selective"; do
    trained x1 1 $V $x
    trained x2 2 $V $x --mesh tp=2
    r=$(python3 "$here/compare.py" x1.log x2.log x1.st x2.st 1e-6 1e-5); echo "$x, --mesh tp=2: $r"
done

# dp x tp on 4 ranks (either order of the axes): the data-parallel groups' gradients
# averaged, against one process to a summation order
for m in dp=2,tp=2 tp=2,dp=2; do
    trained m 4 $V --mesh $m
    grep -q "data parallel: dp=2 groups" m.txt || { cat m.txt; echo "no data-parallel line"; exit 1; }
    r=$(python3 "$here/compare.py" v1fp32.log m.log v1fp32.st m.st 1e-6 1e-5); echo "--mesh $m on 4 ranks: $r"
done

# --accum 2: two micro-batches per step, their gradients summed in a local slab (tp=2 on 2
# ranks, dp=2 x tp=2 on 4: each group's two), against one process on the whole batch
for m in tp=2 dp=2,tp=2; do
    n=2; [ $m = tp=2 ] || n=4
    trained acc $n $A --batch 8 --mesh $m --accum 2
    grep -q "accumulation          2 micro-batches" acc.txt || { cat acc.txt; echo "no accumulation line"; exit 1; }
    [ -f one8.log ] || run "$kiln" train $A --batch 8 --out one8.st --log one8.log > one8.txt 2>&1 || { cat one8.txt; exit 1; }
    r=$(python3 "$here/compare.py" one8.log acc.log one8.st acc.st $TOL); echo "--mesh $m --accum 2 on $n ranks: $r"
done

# ZeRO-1 on the mesh's dp axis: each dp rank keeps the optimizer state of half the local
# slab (the printed count: half of it, rounded), the same course as one process
trained z1 4 $A --batch 8 --mesh dp=2,tp=2 --dist zero1
grep -o "optimizer state of [0-9]* of the [0-9]* local parameters on this rank ([0-9]* bytes; without ZeRO-1 [0-9]*" z1.txt \
    | awk '{ n++; if ($4 != int($7 / 2) && $4 != int(($7 + 1) / 2)) bad = 1; if ($13 * 2 > $17 + 16) bad = 1 }
           END { if (n != 1 || bad) { print "ZeRO-1: not half of the local optimizer state"; exit 1 } }' \
    || { cat z1.txt; exit 1; }
r=$(python3 "$here/compare.py" one8.log z1.log one8.st z1.st $TOL); echo "--mesh dp=2,tp=2 --dist zero1 on 4 ranks: $r"

# kiln compile --mesh: the collectives of rank 1's local graph (2 layers: 4 all-reduces per
# block; vocabulary-parallel: the embedding's, the logits' gradient's, the cross-entropy's
# two, and its row max gathered), shown in --emit-ir
"$kiln" compile --gpt layers=2,width=32,heads=4,context=16,vocab=64 --mesh tp=2 --rank 1 --emit-ir c.ir > c.txt
grep -q "12 all_reduce, 1 all_gather" c.txt || { cat c.txt; echo "kiln compile --mesh: not Megatron's collectives"; exit 1; }
[ "$(grep -c '= all_reduce .*# R of .* inserted' c.ir)" = 12 ] || { echo "--emit-ir: not 12 all_reduce lines"; exit 1; }
grep -q "embedding_grad .*# S(0) of f32\[64,32\]  vocabulary-parallel" c.ir || { echo "--emit-ir: no vocabulary-parallel embedding_grad"; exit 1; }
grep -q "# S(1,3) of f32\[32,96\]" c.ir || { echo "--emit-ir: c_attn's placement missing"; exit 1; }
echo "ok: kiln compile --mesh tp=2 --emit-ir"
"$kiln" compile --gpt layers=2,width=32,heads=4,context=16,vocab=64 --batch 2 --mesh tp=2 --sp --no-check > c.txt
grep -q "10 reduce_scatter" c.txt || { cat c.txt; echo "kiln compile --mesh tp=2 --sp: no reduce_scatters"; exit 1; }
echo "ok: kiln compile --mesh tp=2 --sp"

# bad meshes: each must fail with its message
B="--layers 1 --width 32 --heads 4 --context 16 --batch 4 --steps 1 --data-bytes 20000 --sample 0 --out none --device cpu"
refused "4 ranks, but the job has 2" run $MPIEXEC -n 2 "$kiln" train $B --mesh tp=4
refused "unknown axis 'xp'" run $MPIEXEC -n 2 "$kiln" train $B --mesh xp=2
refused "axis tp given twice" run $MPIEXEC -n 2 "$kiln" train $B --mesh tp=2,tp=1
refused "the size of tp must be an integer >= 1" run $MPIEXEC -n 2 "$kiln" train $B --mesh tp=two
refused "no tensor parallelism (tp=1)" run $MPIEXEC -n 2 "$kiln" train $B --mesh dp=2,tp=1
# a diverging run stops on every rank, as one process's does (it once went on with NaN losses;
# the loss prints as nan or -nan, so the message is matched by its advice)
refused "(diverged: lower the learning rate)" run $MPIEXEC -n 2 "$kiln" train --layers 2 --width 64 --heads 4 --context 32 --batch 8 \
    --steps 60 --sample 0 --out none --device cpu --data-bytes 20000 --mesh tp=2 --lr 10 --clip 0 --optimizer sgd --momentum 0.99
# --mesh pp=N alone is --pp N: the pipeline's own checks answer (here: 1 layer, 2 stages)
refused "--pp 2: 1 layers do not divide into 2 stages" run $MPIEXEC -n 2 "$kiln" train $B --mesh pp=2
# and with tp beside it (tp x pp: test_mesh.sh), the stages' check still answers first
refused "--pp 2: 1 layers do not divide into 2 stages" run $MPIEXEC -n 4 "$kiln" train $B --mesh tp=2,pp=2
refused "--batch 3 is not divisible by dp=2" run $MPIEXEC -n 4 "$kiln" train $B --batch 3 --mesh dp=2,tp=2
refused "not divisible by dp=2 x --accum 2" run $MPIEXEC -n 4 "$kiln" train $B --batch 6 --accum 2 --mesh dp=2,tp=2
refused "and it has none" run $MPIEXEC -n 2 "$kiln" train $B --mesh tp=2 --dist zero1
refused "heads (3) is not a multiple of tp" run $MPIEXEC -n 2 "$kiln" train $B --heads 3 --width 48 --mesh tp=2
refused "mpiexec" run "$kiln" train $B --mesh tp=2
refused "give --mesh tp=N" run "$kiln" train $B --sp
refused "write the data-parallel axis in the mesh" run "$kiln" train $B --mesh tp=2 --dist ddp
refused "heads (2) is not a multiple of tp" "$kiln" compile --gpt layers=1,width=32,heads=2,context=8,vocab=8 --mesh tp=4
