#!/usr/bin/env bash
# scaling.sh OUTDIR — `make scaling` (issue 34): the scaling of every parallel strategy in one
# place, as tables and gnuplot figures (OUTDIR/scaling.md, then plots/scaling.py's figures).
#
# Two sources, never mixed in one row:
#   1. measured now, on this machine's CPU ranks (mpiexec -n 1 and 2): DDP, ZeRO-1 and ZeRO-2
#      (weak scaling: 8 sequences per rank), tensor parallelism tp=2 and pipeline parallelism
#      pp=2 with 1F1B (strong scaling: one global batch). A small GPT, a few steps each; the
#      rate is kiln train's "steady rate" line. Ranks share the cores, so this shows what
#      each strategy costs here, not how it scales on separate devices.
#   2. quoted: the GPU runs kept under plots/results/ (plots/dist-gpu.sh's summary.txt, the
#      tp and pipeline logs), each with its folder, card and date. On a GPU machine, make
#      dist-gpu measures the data-parallel set and keeps it with `make results`.
# SCALING_QUICK=1 (the make test step) runs 10 steps of a smaller model (the steady rate needs more than 8). KILN, MPIEXEC, PYTHON
# as usual.
set -eu
out=${1:?usage: scaling.sh OUTDIR}
KILN=$(realpath "${KILN:-build/solutions/kiln}")
MPIEXEC=${MPIEXEC:-mpiexec}
PY=${PYTHON:-python3}
here=$(cd "$(dirname "$0")/.." && pwd)
[ -x "$KILN" ] || { echo "scaling.sh: no kiln binary at $KILN (make kiln, or set KILN)" >&2; exit 2; }
command -v gnuplot > /dev/null || { echo "scaling.sh: gnuplot is not installed (apt-get install gnuplot-nox, or make deps)" >&2; exit 2; }
command -v "$MPIEXEC" > /dev/null || { echo "scaling.sh: $MPIEXEC not found (apt-get install mpich, or make deps)" >&2; exit 2; }
mkdir -p "$out/logs"
out=$(cd "$out" && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

if [ "${SCALING_QUICK:-0}" = 1 ]; then
    M="--layers 2 --width 32 --heads 4 --context 32 --steps 10 --data-bytes 40000"
else
    M="--layers 4 --width 128 --heads 4 --context 64 --steps 12"
fi
A="$M --device cpu --eval-batches 1 --sample 0 --out none --lr 1e-3"
echo "$(nproc) CPU cores ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n 1)), $(date -u +%Y-%m-%d)" > "$out/machine.txt"

printf '# strategy\tranks\tglobal_batch\ttok_s\n' > "$out/cpu.tsv"
measure() { # name ranks global-batch kiln-train-flags...
    local name=$1 n=$2 b=$3
    shift 3
    local log="$out/logs/$name-$n.log"
    printf 'scaling: %-6s on %d rank(s), global batch %d ... ' "$name" "$n" "$b"
    if ! timeout 300 "$MPIEXEC" -n "$n" "$KILN" train $A --batch "$b" "$@" > "$log" 2>&1; then
        echo "FAILED"; tail -n 5 "$log" >&2
        echo "scaling.sh: kiln train ($name on $n ranks) failed; log: $log" >&2
        exit 1
    fi
    local rate
    rate=$(sed -n 's/.*steady rate *\([0-9.]*\) tokens\/s.*/\1/p' "$log" | tail -n 1)
    [ -n "$rate" ] || { echo "no rate"; echo "scaling.sh: no steady rate in $log" >&2; exit 1; }
    echo "$rate tokens/s"
    printf '%s\t%d\t%d\t%s\n' "$name" "$n" "$b" "$rate" >> "$out/cpu.tsv"
}
for s in ddp zero1 zero2; do
    for n in 1 2; do measure $s $n $((8 * n)) --dist $s; done
done
measure tp 1 16
measure tp 2 16 --mesh tp=2
measure pp 1 16
measure pp 2 16 --pp 2 --schedule 1f1b --microbatches 4

"$PY" "$here/plots/scaling.py" "$out" "$here"
