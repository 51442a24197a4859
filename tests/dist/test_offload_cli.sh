#!/usr/bin/env bash
# test_offload_cli.sh KILN — `kiln train --offload` on a machine without a GPU (make test:
# "offload-cli"): every combination ZeRO-Offload cannot serve is refused up front (exit 2,
# before MPI starts) with its reason, a bad value names the flag, and --offload none is the
# run without the flag, bit for bit. The offload itself needs a GPU:
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

[ $fails -eq 0 ] && echo "offload-cli: all passed" && exit 0
echo "offload-cli: $fails failed"
exit 1
