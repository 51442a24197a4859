#!/usr/bin/env bash
# test_offload_cli.sh KILN — `kiln train --offload` on a machine without a GPU (make test:
# "offload-cli"): every combination ZeRO-Offload cannot serve is refused up front (exit 2,
# before MPI starts) with its reason, a bad value names the flag, --offload none is the run
# without the flag, and the offload's wiring (run on the CPU with KILN_OFFLOAD_ON_CPU=1, plain
# copies) is the run without it byte for byte: one process (AdamW, SGD, bf16, --accum 2),
# --dist ddp, zero1, zero2 on 2 CPU ranks (mpiexec), resume. Its speed and memory need a GPU:
# tests/dist/test_offload_gpu.sh (make test-offload-gpu) on the lent machine; its host step
# is checked on the CPU by tests/core/test_offload.c.
set -uo pipefail
kiln=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
A="--layers 1 --width 16 --heads 2 --context 16 --batch 4 --steps 3 --data-bytes 20000 --eval-batches 1 --sample 0 --out none"

# refused KEYWORD ARGS...: exit 2 and a message holding KEYWORD
refused() {
    local want=$1
    shift
    "$kiln" train $A "$@" > "$tmp/out" 2>&1
    local rc=$?
    if [ $rc -ne 2 ] || ! grep -q -- "$want" "$tmp/out"; then
        echo "FAIL: kiln train $* exited $rc (want 2) without '$want':"
        sed 's/^/    /' "$tmp/out" | head -5
        fails=$((fails + 1))
    else
        echo "ok: $* -> $(grep -o -- "$want" "$tmp/out" | head -1)"
    fi
}

refused "expected none or optimizer" --offload bogus
refused "CPU training (--device cpu" --offload optimizer --device cpu
refused "has them there already" --offload optimizer --mode eager
refused "has them there already" --offload optimizer --dist ddp --comm mpi
refused "pipeline and tensor parallel meshes" --offload optimizer --device cuda --mesh tp=2
refused "pipeline and tensor parallel meshes" --offload optimizer --device cuda --pp 2
refused "ZeRO-3's update writes the parameter shard" --offload optimizer --device cuda --dist zero3 --comm nccl
refused "ZeRO-3's update writes the parameter shard" --offload optimizer --device cuda --dist fsdp --comm nccl
# where no GPU is usable, auto means the CPU
if ! nvidia-smi -L > /dev/null 2>&1; then refused "auto without a GPU" --offload optimizer; fi

# --offload none: the same run as without the flag
"$kiln" train $A --device cpu --log "$tmp/a.log" > /dev/null 2>&1 || { echo "FAIL: the plain run"; fails=$((fails + 1)); }
"$kiln" train $A --device cpu --offload none --log "$tmp/b.log" > /dev/null 2>&1 || { echo "FAIL: --offload none"; fails=$((fails + 1)); }
if cmp -s "$tmp/a.log" "$tmp/b.log" && [ -s "$tmp/a.log" ]; then echo "ok: --offload none is the run without it"
else echo "FAIL: --offload none changed the run"; fails=$((fails + 1)); fi
# the usage text lists the flag
"$kiln" train --help > "$tmp/help" 2>&1
if grep -q -- "--offload  *none or optimizer" "$tmp/help"; then echo "ok: --help lists --offload"
else echo "FAIL: --help does not list --offload"; fails=$((fails + 1)); fi

# The wiring, bit for bit, without a GPU: KILN_OFFLOAD_ON_CPU=1 lets CPU training offload (the
# same arithmetic, plain copies), so every hook a GPU run goes through (the trainer's update,
# DDP's, ZeRO-1/2's shard, the state's way back for the checkpoint, resume) is checked here
# against the run without --offload: the same losses and the same checkpoint, byte for byte.
MPIEXEC=${MPIEXEC:-mpiexec}
same() { # same TAG PREFIX ARGS...: the run with and without --offload optimizer
    local tag=$1 pre=$2
    shift 2
    $pre "$kiln" train $A "$@" --log "$tmp/$tag-a.log" --out "$tmp/$tag-a.st" > "$tmp/$tag-a.txt" 2>&1 \
        || { echo "FAIL: $tag without offload:"; tail -n 5 "$tmp/$tag-a.txt"; fails=$((fails + 1)); return; }
    KILN_OFFLOAD_ON_CPU=1 $pre "$kiln" train $A "$@" --offload optimizer --log "$tmp/$tag-b.log" --out "$tmp/$tag-b.st" \
        > "$tmp/$tag-b.txt" 2>&1 || { echo "FAIL: $tag with offload:"; tail -n 5 "$tmp/$tag-b.txt"; fails=$((fails + 1)); return; }
    if ! grep -q "offload optimizer .* bytes of pinned host memory" "$tmp/$tag-b.txt"; then
        echo "FAIL: $tag: no offload line"; fails=$((fails + 1))
    elif cmp -s "$tmp/$tag-a.log" "$tmp/$tag-b.log" && cmp -s "$tmp/$tag-a.st" "$tmp/$tag-b.st"; then
        echo "ok: $tag offloaded = not offloaded (log and checkpoint byte for byte)"
    else
        echo "FAIL: $tag: the offloaded run differs"; diff "$tmp/$tag-a.log" "$tmp/$tag-b.log" | head -4; fails=$((fails + 1))
    fi
}
same one-adamw "" --device cpu
same one-sgd "" --device cpu --optimizer sgd --momentum 0.9
same one-bf16 "" --device cpu --precision bf16
same one-accum2 "" --device cpu --accum 2
for s in ddp zero1 zero2; do same $s-2ranks "$MPIEXEC -n 2" --device cpu --dist $s --comm mpi; done
# resume: two offloaded halves are the offloaded whole (the state went out with the checkpoint)
KILN_OFFLOAD_ON_CPU=1 "$kiln" train $A --device cpu --offload optimizer --stop-after 1 --out "$tmp/half.st" > /dev/null 2>&1 &&
KILN_OFFLOAD_ON_CPU=1 "$kiln" train --device cpu --sample 0 --eval-batches 1 --offload optimizer --resume "$tmp/half.st" --out "$tmp/whole.st" \
    > /dev/null 2>&1 && cmp -s "$tmp/whole.st" "$tmp/one-adamw-b.st" && echo "ok: an offloaded run resumes exactly" \
    || { echo "FAIL: the offloaded run did not resume exactly"; fails=$((fails + 1)); }

[ $fails -eq 0 ] && echo "offload-cli: all passed" && exit 0
echo "offload-cli: $fails failed"
exit 1
