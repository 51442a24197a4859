#!/usr/bin/env bash
# test_mesh.sh KILN — meshes that compose pipeline parallelism with data parallelism against
# one process (make test: the step test-step-dist-mesh, core/dist.mk).
#
# `kiln train --mesh dp=2,pp=2` on 4 CPU ranks: two pipelines of two stages, each on half of
# the global batch, every stage's gradients summed over dp before the update. Checked against
# one process on the same global batch (compare.py: every step's loss and every tensor of
# the final checkpoint, parameters and optimizer state; tolerance: a summation order, the
# pp tests' one; AdamW's tensors 3e-3, TOL_ADAM): AdamW with 1F1B, SGD with momentum and
# GPipe, AdamW interleaved (two chunks per rank), bf16 (SGD, the pp tests' bf16 tolerance), fp16 with an overflow on one rank
# (every rank skips that step: one loss scale for the mesh), --accum 2 (two rounds of each
# pipeline's schedule per step), a checkpoint of the mesh resumed on the mesh; each rank's
# slabs are its stages' parameters only (as --pp alone). Then what is not built is refused
# with its reason: tp x pp, --dist with --pp, a batch the pipelines and rounds do not share
# equally, ranks that are not dp x pp.
# A broken composition fails here: without the gradients' sum over dp each pipeline updates
# from its half of the batch (the parameters leave the one process's course); with both
# pipelines on the same rows the losses differ.
set -euo pipefail
kiln=$(realpath "$1")
MPIEXEC=${MPIEXEC:-mpiexec}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
run() { timeout 120 "$@"; }
ok() { # ok LABEL COMMAND...: COMMAND's output after LABEL; its failure ends the script
    local r
    if r=$("${@:2}"); then echo "$1: $r"; else echo "$1: $r"; exit 1; fi
}
same() { # same TAG ONE_TAG LOSS_TOL TENSOR_TOL: TAG's log and checkpoint against ONE_TAG's
    python3 "$here/compare.py" $2.log $1.log $2.st $1.st $3 $4
}

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
    run "$kiln" train $A "$@" --out $tag.st --log $tag.log > $tag.txt 2>&1 || { cat $tag.txt; exit 1; }
done
for cell in "adam 1f1b 2" "sgd gpipe 2" "adam interleaved 2"; do
    set -- $cell
    one=$1 s=$2 m=$3 tag=mesh-$1-$2
    O="--lr 1e-2"
    [ "$one" = sgd ] && O="--optimizer sgd --momentum 0.9 --lr 0.1"
    run $MPIEXEC -n 4 "$kiln" train $A $O --mesh dp=2,pp=2 --schedule $s --microbatches $m --out $tag.st \
        --log $tag.log > $tag.txt 2>&1 || { cat $tag.txt; exit 1; }
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
# bf16: SGD (Adam magnifies 16-bit rounding noise, compare.py), the pp tests' bf16 tolerance
B="$A --optimizer sgd --momentum 0.9 --lr 0.1 --precision bf16"
run "$kiln" train $B --out b1.st --log b1.log > b1.txt 2>&1 || { cat b1.txt; exit 1; }
run $MPIEXEC -n 4 "$kiln" train $B --mesh dp=2,pp=2 --microbatches 2 --out b4.st --log b4.log > b4.txt 2>&1 \
    || { cat b4.txt; exit 1; }
ok "dp=2,pp=2 1f1b bf16" python3 "$here/compare.py" b1.log b4.log b1.st b4.st 3e-4 4e-3
# fp16: one loss scale for the whole mesh. An inf planted in one rank's gradients at step 2
# (rank 3: the second stage of the second pipeline) must skip that step on every rank and
# halve the scale, as one process (with micro-batches of the pipelines' 2 rows: --accum 4)
# skips it; SGD (compare.py: Adam and rounding noise)
F="$A --optimizer sgd --momentum 0.9 --lr 0.1 --precision fp16"
KILN_INJECT_INF_STEP=2 run "$kiln" train $F --accum 4 --out f1.st --log f1.log > f1.txt 2>&1 || { cat f1.txt; exit 1; }
KILN_INJECT_INF_STEP=2 KILN_INJECT_INF_RANK=3 run $MPIEXEC -n 4 "$kiln" train $F --mesh dp=2,pp=2 --microbatches 2 \
    --out f4.st --log f4.log > f4.txt 2>&1 || { cat f4.txt; exit 1; }
awk '$1 == 2 && !($5 == 32768 && $6 == 1) { print "step 2: scale " $5 ", skipped " $6 " (want 32768, 1)"; bad = 1 }
     END { exit bad }' f4.log || { echo "dp=2,pp=2 fp16: rank 3's overflow did not skip the step"; exit 1; }
ok "dp=2,pp=2 1f1b fp16, rank 3's overflow at step 2 skipped by all" python3 "$here/compare.py" f1.log f4.log f1.st f4.st $TOL
# --accum 2 on the mesh: each pipeline runs its schedule twice per step (batch 16: micro-batches
# of 2 rows; SGD: AdamW magnifies 1-row micro-batches' rounding, test_dist_full.sh)
S="${A/--batch 8/--batch 16} --optimizer sgd --momentum 0.9 --lr 0.1"
run "$kiln" train $S --out s16.st --log s16.log > s16.txt 2>&1 || { cat s16.txt; exit 1; }
run $MPIEXEC -n 4 "$kiln" train $S --mesh dp=2,pp=2 --microbatches 2 --accum 2 --out a4.st --log a4.log > a4.txt 2>&1 \
    || { cat a4.txt; exit 1; }
ok "dp=2,pp=2 1f1b --accum 2" python3 "$here/compare.py" s16.log a4.log s16.st a4.st $TOL
# a checkpoint of the mesh (gathered from the pipeline's ranks) resumes on the mesh
run $MPIEXEC -n 4 "$kiln" train $A --lr 1e-2 --mesh dp=2,pp=2 --microbatches 2 --stop-after 2 --out r.st \
    --log r1.log > r1.txt 2>&1 || { cat r1.txt; exit 1; }
run $MPIEXEC -n 4 "$kiln" train --resume r.st --mesh dp=2,pp=2 --microbatches 2 --out r2.st --log r2.log > r2.txt \
    2>&1 || { cat r2.txt; exit 1; }
cat r1.log r2.log > r.log
cp r2.st r.st
ok "dp=2,pp=2 resumed after 2 steps" same r adam $TOL_ADAM

expect() { # expect MESSAGE RANKS ARGS...: the run fails, saying MESSAGE
    local msg=$1 n=$2
    shift 2
    if run $MPIEXEC -n $n "$kiln" train $A "$@" > bad.txt 2>&1; then echo "accepted: $*"; exit 1; fi
    grep -q -- "$msg" bad.txt || { echo "no \"$msg\" for: $*"; cat bad.txt; exit 1; }
    echo "refused: $* ($msg)"
}
expect "not yet combined with tp" 4 --mesh tp=2,pp=2
expect "write the mesh: --mesh dp=2,pp=2" 2 --pp 2 --dist ddp
expect "not divisible by dp x --accum 2" 4 --mesh dp=2,pp=2 --accum 2 --batch 6
expect "not divisible by --microbatches 4 (per pipeline of dp)" 4 --mesh dp=2,pp=2 --microbatches 4 --batch 4
expect "the ranks must be dp x pp" 2 --mesh dp=2,pp=2
echo "meshes dp x pp: ok"
