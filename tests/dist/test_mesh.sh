#!/usr/bin/env bash
# test_mesh.sh KILN — meshes that compose the axes against one process (make test: the step
# test-step-dist-mesh, core/dist.mk).
#
# `kiln train --mesh dp=2,pp=2` on 4 CPU ranks: two pipelines of two stages, each on half of
# the global batch, every stage's gradients summed over dp before the update. Checked against
# one process on the same global batch (compare.py: every step's loss and every tensor of
# the final checkpoint, parameters and optimizer state; tolerance: a summation order, the
# pp tests' one; AdamW's tensors 3e-3, TOL_ADAM): AdamW with 1F1B, SGD with momentum and
# GPipe, AdamW interleaved (two chunks per rank), bf16 (SGD, the pp tests' bf16 tolerance), fp16 with an overflow on one rank
# (every rank skips that step: one loss scale for the mesh), --accum 2 (two rounds of each
# pipeline's schedule per step), a checkpoint of the mesh resumed on the mesh; each rank's
# slabs are its stages' parameters only (as --pp alone); ZeRO-1 on the dp axis (--dist zero1:
# each dp rank keeps half of its stages' optimizer state).
# Tensor parallelism's step is the step runner's too: fp16 on --mesh tp=2 and dp=2,tp=2 with
# an inf planted on one rank (every rank skips that step, the scale halves, as one process
# does), and --resume onto tp meshes (a dp=2,tp=2 checkpoint resumed with ZeRO-1,
# an fp16 tp=2 run resumed with its loss scale), each equal
# to one process's uninterrupted run. tp x pp (--mesh tp=2,pp=2): each schedule, --sp, fp16
# with an overflow on one rank, a resume (below, where it says why each fails when broken).
# --remat selective on tp=2, pp=2 and tp=2,pp=2 against one process with the same --remat
# (pp: the stash smaller than without it, the same floats). Then
# what is not built or not valid is refused with its reason: a tp x pp mesh the ranks do not
# make, heads that tp does not divide, layers the stages do not share, fewer micro-batches
# than stages, --sp without a tp axis, --dist with --pp and no dp axis, ZeRO-2 on a mesh with pp, a batch the pipelines and rounds do
# not share equally, ranks that are not dp x pp.
# A broken composition fails here: without the gradients' sum over dp each pipeline updates
# from its half of the batch (the parameters leave the one process's course); with both
# pipelines on the same rows the losses differ; an overflow decided per rank or per dp group
# lets the other ranks update (their shards then leave the course, or the job stops as
# diverged); a resume that does not cut the checkpoint's optimizer state (or its step
# count) into the shards restarts AdamW's moments.
set -euo pipefail
kiln=$(realpath "$1")
MPIEXEC=${MPIEXEC:-mpiexec}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
. "$here/lib.sh"

A="--layers 4 --width 32 --heads 2 --context 16 --batch 8 --steps 4 --data-bytes 20000 --eval-batches 1 --sample 0 --device cpu"
TOL="1e-5 1e-3"
# AdamW divides by sqrt(v), so a tensor whose gradients are small magnifies a summation order:
# under the sanitizers' build (make SAN=1 test, 2026-11-27) dp=2,pp=2's h.2.mlp.c_proj.weight
# differed from one process's by 1.01e-3 relative, its losses within 1e-5. The AdamW cells
# take 3e-3 for the tensors; the losses (where a missing dp sum shows as 0.8%) keep 1e-5.
TOL_ADAM="1e-5 3e-3"
for cell in "adam --lr 1e-2" "sgd --optimizer sgd --momentum 0.9 --lr 0.1"; do
    set -- $cell
    tag=$1
    shift
    trained $tag 1 $A "$@"
done
for cell in "adam 1f1b 2" "sgd gpipe 2" "adam interleaved 2"; do
    set -- $cell
    one=$1 s=$2 m=$3 tag=mesh-$1-$2
    O="--lr 1e-2"
    [ "$one" = sgd ] && O="--optimizer sgd --momentum 0.9 --lr 0.1"
    trained $tag 4 $A $O --mesh dp=2,pp=2 --schedule $s --microbatches $m
    grep -q "data parallel: dp=2 pipelines, 4 rows each" $tag.txt || { echo "$tag: no dp axis"; cat $tag.txt; exit 1; }
    tol=$TOL
    [ "$one" = adam ] && tol=$TOL_ADAM
    ok "dp=2,pp=2 $s ($one)" same $tag $one $tol
done
# each rank's own slabs hold its stages' parameters only (the dp replicas alike): 2 stages of
# 2 blocks (12 D^2 + 13 D each), rank 0 with wte and wpe, rank 1 with ln_f and its wte copy
python3 - mesh-adam-1f1b.txt <<'PY' || { echo "dp=2,pp=2: the per-rank memory is not the stage split's"; exit 1; }
import re, sys
t = open(sys.argv[1]).read()
L, D, C, V, P = map(int, re.search(r"GPT (\d+) layers, width (\d+), \d+ heads, context (\d+), vocab (\d+): (\d+) parameters", t).groups())
p, blk = 2, 12 * D * D + 13 * D
rows = re.findall(r"rank (\d+) +holds (\d+) of P", t)
assert len(rows) == p, rows
for r, n in (map(int, row) for row in rows):
    want = (L // p) * blk + (V * D + C * D if r == 0 else 0) + (2 * D + V * D if r == p - 1 else 0)
    assert n == want, "rank %d holds %d parameters, its stages have %d" % (r, n, want)
print("dp=2,pp=2: each pipeline rank holds its stages' %s parameters of P = %d" % ([int(n) for _, n in rows], P))
PY
# ZeRO-1 on the dp axis of dp=2,pp=2 (AdamW, 1F1B): each dp rank keeps the optimizer state of
# half of its pipeline rank's slab, updates that half, and the halves are all-gathered over
# dp. Equal to one process (a half never updated, or never gathered, leaves the course; a
# checkpoint without the other half's state differs in the moments). Rank 0 reports its
# pipeline's ranks (dp rank 0): each holds AdamW's two moments of half its parameters, where
# mesh-adam-1f1b (no ZeRO) holds them of all.
trained z1 4 $A --lr 1e-2 --mesh dp=2,pp=2 --dist zero1 --microbatches 2
grep -q "ZeRO-1 on dp .*all-gathered over dp" z1.txt || { cat z1.txt; echo "dp=2,pp=2 zero1: no ZeRO-1 line"; exit 1; }
ok "dp=2,pp=2 --dist zero1 1f1b (adam)" same z1 adam $TOL_ADAM
python3 - z1.txt mesh-adam-1f1b.txt <<'PY' || { echo "dp=2,pp=2 zero1: the optimizer state is not halved"; exit 1; }
import re, sys
def ranks(path):
    t = open(path).read()
    return [tuple(map(int, r)) for r in re.findall(r"rank (\d+) +holds (\d+) of P.*optimizer-state bytes (\d+)", t)]
z, full = ranks(sys.argv[1]), ranks(sys.argv[2])
assert len(z) == 2 and len(full) == 2, (z, full)
for (r, n, b), (_, n0, b0) in zip(z, full):
    assert n == n0 and b0 == 8 * n, "rank %d without ZeRO: %d state bytes for %d parameters" % (r, b0, n)
    half = 8 * ((n + 1) // 2) # dp rank 0's share: the larger half (kn_dp_shard_ranges)
    assert abs(b - half) <= 64, "rank %d: %d optimizer-state bytes with ZeRO-1, want about %d (of %d)" % (r, b, half, b0)
print("dp=2,pp=2 zero1: dp rank 0 holds %s optimizer-state bytes, without ZeRO-1 %s" % ([b for _, _, b in z], [b for _, _, b in full]))
PY
# --resume with ZeRO-1 on dp=2,pp=2 below (the checkpoint's state gathered over dp, then cut again)
# bf16: SGD (Adam magnifies 16-bit rounding noise, compare.py), the pp tests' bf16 tolerance
B="$A --optimizer sgd --momentum 0.9 --lr 0.1 --precision bf16"
trained b1 1 $B
trained b4 4 $B --mesh dp=2,pp=2 --microbatches 2
ok "dp=2,pp=2 1f1b bf16" same b4 b1 3e-4 4e-3
# fp16: one loss scale for the whole mesh. An inf planted in one rank's gradients at step 2
# must skip that step on every rank and halve the scale (the log's step-2 row: scale 32768,
# skipped 1), as one process skips it; SGD (compare.py: Adam and rounding noise). One process
# runs the mesh's micro-batches: --accum 4 for the pipelines' 2 rows, --accum 2 for dp=2,tp=2's
# groups of 4. Rank 3 is the second stage of the second pipeline, and of dp=2,tp=2 the second
# tp rank of the second group: an inf in a shard its tp partner never sees (the norm's sum
# over tp) and the other group never sees (the flag's sum over dp). tp=2 alone: below, resumed.
F="$A --optimizer sgd --momentum 0.9 --lr 0.1 --precision fp16"
skipped2() { # skipped2 TAG: TAG.log's step 2 was skipped with the scale halved
    awk '$1 == 2 && !($5 == 32768 && $6 == 1) { print "step 2: scale " $5 ", skipped " $6 " (want 32768, 1)"; bad = 1 }
         END { exit bad }' $1.log || { echo "$1: the planted overflow did not skip step 2"; exit 1; }
}
export KILN_INJECT_INF_STEP=2
trained f1 1 $F --accum 4
trained f1a2 1 $F --accum 2
trained f1t 1 $F
KILN_INJECT_INF_RANK=3 trained f4 4 $F --mesh dp=2,pp=2 --microbatches 2
KILN_INJECT_INF_RANK=3 trained f4t 4 $F --mesh dp=2,tp=2
KILN_INJECT_INF_RANK=1 trained fr-1 2 $F --mesh tp=2 --stop-after 3
unset KILN_INJECT_INF_STEP
for t in f1 f1a2 f1t f4 f4t fr-1; do skipped2 $t; done
grep -q "an overflow on any rank skips the step on all" f4t.txt || { cat f4t.txt; echo "dp=2,tp=2 fp16: no loss-scale line"; exit 1; }
ok "dp=2,pp=2 1f1b fp16, rank 3's overflow at step 2 skipped by all" same f4 f1 $TOL
ok "dp=2,tp=2 fp16, rank 3's overflow at step 2 skipped by all" same f4t f1a2 $TOL
# --accum 2 on the mesh: each pipeline runs its schedule twice per step (batch 16: micro-batches
# of 2 rows; SGD: AdamW magnifies 1-row micro-batches' rounding, test_dist_full.sh)
S="${A/--batch 8/--batch 16} --optimizer sgd --momentum 0.9 --lr 0.1"
trained s16 1 $S
trained a4 4 $S --mesh dp=2,pp=2 --microbatches 2 --accum 2
ok "dp=2,pp=2 1f1b --accum 2" same a4 s16 $TOL
# resumed runs, each against one process's uninterrupted run (the first part's log, then the
# second's; the second's checkpoint): r1 + r2 is stopped after 2 steps and resumed
resumed() { # resumed TAG ONE RANKS1 ARGS1 -- RANKS2 ARGS2: TAG-1 stops after 2 steps, TAG-2 resumes it
    local tag=$1 one=$2 n1=$3 a1=()
    shift 3
    while [ "$1" != -- ]; do a1+=("$1"); shift; done
    shift
    local n2=$1
    shift
    trained $tag-1 $n1 "${a1[@]}" --stop-after 2
    trained $tag-2 $n2 --resume $tag-1.st "$@"
    cat $tag-1.log $tag-2.log > $tag.log
    cp $tag-2.st $tag.st
    same $tag $one $TOL_ADAM
}
# a checkpoint of the mesh (gathered from the pipeline's ranks) resumes on the mesh
ok "dp=2,pp=2 resumed after 2 steps" resumed r adam 4 $A --lr 1e-2 --mesh dp=2,pp=2 --microbatches 2 -- \
    4 --mesh dp=2,pp=2 --microbatches 2
ok "dp=2,pp=2 --dist zero1 resumed after 2 steps" resumed rz adam 4 $A --lr 1e-2 --mesh dp=2,pp=2 --dist zero1 \
    --microbatches 2 -- 4 --mesh dp=2,pp=2 --dist zero1 --microbatches 2
# tensor parallelism: the shards and their optimizer state (AdamW's m and v, its step) cut
# from the checkpoint's: a dp=2,tp=2 checkpoint resumes with ZeRO-1 (each dp rank's range of
# the state; AdamW on tp=2 alone is 2.1e-3 from one process in h.2.mlp.c_proj.weight here,
# too near TOL_ADAM, dp=2,tp=2 1.6e-4)
ok "dp=2,tp=2 resumed with --dist zero1" resumed rt adam 4 $A --lr 1e-2 --mesh dp=2,tp=2 -- \
    4 --mesh dp=2,tp=2 --dist zero1
grep -q "resumed .*optimizer step 2" rt-2.txt || { cat rt-2.txt; echo "tp resume: no resumed line"; exit 1; }
# fp16 on tp=2 (fr-1 above: rank 1's overflow at step 2 skipped by both ranks, stopped
# after step 3) resumed: the loss scale, halved at step 2, goes on at 32768
trained fr-2 2 --resume fr-1.st --mesh tp=2
cat fr-1.log fr-2.log > fr.log
cp fr-2.st fr.st
awk '$1 == 3 && $5 != 32768 { print "step 3: scale " $5 " after the resume, want 32768"; bad = 1 } END { exit bad }' fr.log \
    || { cat fr.log; exit 1; }
ok "tp=2 fp16 (rank 1's overflow at step 2 skipped by both), resumed with its loss scale" same fr f1t $TOL

# tp x pp (4 ranks): two pipeline stages, each stage's blocks split over two tp ranks
# (Megatron's split placed on each stage's graph before it is cut into forward and
# backward; each tp rank sends its 1/tp of the activation to the same tp rank of the next
# stage, which all-gathers them over tp). AdamW
# with 1F1B; SGD interleaved (two chunks per rank), the mesh written pp first; sequence
# parallelism inside the stages (--sp, SGD); fp16 with an overflow planted on rank 3 (tp rank 1 of the second stage: its tp partner sees it through
# the norm's sum over tp, the first stage through the sum over pp); a checkpoint of
# tp=2,pp=2 (1F1B) resumed with GPipe. Without the placement each stage's local graph has
# full-size weights the shards do not fill; without the norm's sum over tp the clip and the
# overflow are per rank; without the tp gather the checkpoint holds one rank's shards.
trained tp-adam 4 $A --lr 1e-2 --mesh tp=2,pp=2 --schedule 1f1b --microbatches 2 --emit-ir tp-adam.ir
grep -q "tensor parallel: tp=2 ranks per stage" tp-adam.txt || { cat tp-adam.txt; echo "tp=2,pp=2: no tp line"; exit 1; }
# the message between the stages split over tp (Megatron's scatter/gather): rank 0 receives
# its 32 of a micro-batch's 64 rows (the gradient, in its backward) and all-gathers them over tp
grep -q "= recv .*{shape=\[32,32\], dtype=f32, mesh=2, parts=2, peer=1}" tp-adam.ir &&
    grep -q "= all_gather .* {axis=0, mesh=1, parts=2} : f32\[64,32\]" tp-adam.ir ||
    { grep -n "recv\|all_gather\|send" tp-adam.ir; echo "tp=2,pp=2: the stage boundary's message is not split over tp"; exit 1; }
ok "tp=2,pp=2 1f1b (adam)" same tp-adam adam $TOL_ADAM
# each rank's slabs hold its stages' shards: per block 12 D^2 / 2 of matrices, c_attn's and
# c_fc's biases halved, the layernorms and the c_proj biases whole; wte whole (41 tokens do
# not split), wpe on the first stage, ln_f on the last
python3 - tp-adam.txt <<'PY' || { echo "tp=2,pp=2: the per-rank memory is not the stages' shards"; exit 1; }
import re, sys
t = open(sys.argv[1]).read()
L, D, C, V, P = map(int, re.search(r"GPT (\d+) layers, width (\d+), \d+ heads, context (\d+), vocab (\d+): (\d+) parameters", t).groups())
p, tp = 2, 2
blk = 12 * D * D // tp + (3 * D + 4 * D) // tp + 4 * D + 2 * D
rows = re.findall(r"rank (\d+) +holds (\d+) of P", t)
assert len(rows) == p, rows
for r, n in (map(int, row) for row in rows):
    want = (L // p) * blk + V * D + (C * D if r == 0 else 2 * D)
    assert n == want, "rank %d holds %d parameters, its stages' shards have %d" % (r, n, want)
print("tp=2,pp=2: each rank holds its stages' shards, %s of P = %d" % ([int(n) for _, n in rows], P))
PY
trained tp-sgd 4 $A --optimizer sgd --momentum 0.9 --lr 0.1 --mesh pp=2,tp=2 --schedule interleaved --microbatches 2
ok "pp=2,tp=2 interleaved (sgd)" same tp-sgd sgd $TOL
trained tp-sp 4 $A --optimizer sgd --momentum 0.9 --lr 0.1 --mesh tp=2,pp=2 --sp --microbatches 2
grep -q "reduce_scatter in rank 0's stages (sequence parallel)" tp-sp.txt || { cat tp-sp.txt; echo "tp=2,pp=2 --sp: no sp"; exit 1; }
ok "tp=2,pp=2 --sp 1f1b (sgd)" same tp-sp sgd $TOL
KILN_INJECT_INF_STEP=2 KILN_INJECT_INF_RANK=3 trained tp-f4 4 $F --mesh tp=2,pp=2 --microbatches 2
skipped2 tp-f4
ok "tp=2,pp=2 fp16, rank 3's overflow at step 2 skipped by all" same tp-f4 f1a2 $TOL
ok "tp=2,pp=2 resumed after 2 steps with gpipe" resumed rtp adam 4 $A --lr 1e-2 --mesh tp=2,pp=2 --microbatches 2 -- \
    4 --mesh tp=2,pp=2 --schedule gpipe --microbatches 2

# --remat selective with tp and with pp, against one process with the same --remat (SGD).
# tp=2: the local program is compiled with the trainer's passes, so remat runs on the
# placed local graph (its live set printed beside the one without). pp=2 (and tp=2,pp=2):
# a stage's backward is its own program, so the cut decides what it recomputes; with
# --remat selective it stashes the inputs of the cheap ops (elementwise, views, layernorms)
# instead of their outputs: rank 0's stash must be smaller than without --remat (a remat
# left to the cut programs' passes changes nothing there: the same stash).
R="$A --optimizer sgd --momentum 0.9 --lr 0.1 --remat selective"
trained rm1 1 $R
trained rm-tp 2 $R --mesh tp=2
grep -q "remat selective .*the local step's largest live set" rm-tp.txt || { cat rm-tp.txt; echo "tp=2 remat: no line"; exit 1; }
ok "tp=2 --remat selective (sgd)" same rm-tp rm1 $TOL
trained rm-pp 2 $R --pp 2 --microbatches 2
trained nr-pp 2 ${R% --remat selective} --pp 2 --microbatches 2
ok "pp=2 --remat selective 1f1b (sgd)" same rm-pp rm1 $TOL
ok "pp=2 --remat selective: the same floats as without it" same rm-pp nr-pp 0 0
stash0() { sed -n 's/^  rank 0 .*stash: .*, \([0-9.]*\) MB$/\1/p' $1.txt; }
python3 -c "import sys; a, b = map(float, sys.argv[1:]); assert a < 0.8 * b, (a, b); print('pp=2 remat: rank 0 stashes %.2f MB, without --remat %.2f MB' % (a, b))" \
    "$(stash0 rm-pp)" "$(stash0 nr-pp)" || { echo "pp=2 --remat selective: the stash is not smaller"; exit 1; }
trained rm-tpp 4 $R --mesh tp=2,pp=2 --microbatches 2
ok "tp=2,pp=2 --remat selective 1f1b (sgd)" same rm-tpp rm1 $TOL

expect() { # expect MESSAGE RANKS ARGS...: the run fails, saying MESSAGE
    local msg=$1 n=$2
    shift 2
    refused "$msg" run $MPIEXEC -n $n "$kiln" train $A "$@"
}
expect "the ranks must be dp x tp x pp = 4 (run mpiexec -n 4)" 2 --mesh tp=2,pp=2
expect "the model's heads (1) is not a multiple of tp" 4 --mesh tp=2,pp=2 --heads 1
expect "3 layers do not divide into 2 stages" 4 --mesh tp=2,pp=2 --layers 3
expect "need --microbatches >= --pp" 4 --mesh tp=2,pp=2 --microbatches 1
expect "the mesh needs a tp axis" 2 --mesh pp=2 --sp
expect "write the mesh: --mesh dp=2,pp=2" 2 --pp 2 --dist ddp
expect "only zero1 (the optimizer state sharded over dp) is combined with pp yet" 4 --mesh dp=2,pp=2 --dist zero2
expect "there is none (write --mesh dp=2,pp=2)" 2 --pp 2 --dist zero1
expect "not divisible by dp x --accum 2" 4 --mesh dp=2,pp=2 --accum 2 --batch 6
expect "not divisible by --microbatches 4 (per pipeline of dp)" 4 --mesh dp=2,pp=2 --microbatches 4 --batch 4
expect "the ranks must be dp x pp" 2 --mesh dp=2,pp=2
expect "only --remat selective (elementwise ops, views, layernorms) is built for it" 2 --pp 2 --remat every:1
echo "meshes dp x pp, dp x tp (fp16, resume), tp x pp: ok"
