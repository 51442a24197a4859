#!/usr/bin/env bash
# run-pp-sim.sh KILN [REF_KILN] — `make run LAB=11`: lab 11's schedule unit on a clock.
# Runs `kiln pp-sim` (KILN: built with YOUR lab 11 units) for GPipe and 1F1B on 4 ranks
# and 8 micro-batches and for interleaved 1F1B with 2 chunks: each rank's list, the step's
# time and the bubble beside its formula. With REF_KILN (the staff's reference build), the
# same runs there, and the two outputs compared line by line: equal, or the first lines
# that differ and exit 3. The placement units are not run here (their callers are the
# tensor-parallel pass and training; make test-lab11 tests them).
set -u
kiln=$1 ref=${2:-}
runs=("--schedule gpipe --pp 4 --microbatches 8" "--schedule 1f1b --pp 4 --microbatches 8"
      "--schedule interleaved --pp 4 --microbatches 8 --chunks 2")
mine=$(mktemp) staff=$(mktemp); trap 'rm -f "$mine" "$staff"' EXIT
for r in "${runs[@]}"; do
    # shellcheck disable=SC2086
    "$kiln" pp-sim $r 2>&1 | tee -a "$mine"
    rc=${PIPESTATUS[0]}
    [ "$rc" -eq 0 ] || exit "$rc"
    echo | tee -a "$mine"
done
[ -n "$ref" ] && [ "$ref" != "$kiln" ] || exit 0
for r in "${runs[@]}"; do
    # shellcheck disable=SC2086
    "$ref" pp-sim $r >> "$staff" 2>&1 || { echo "run-pp-sim: the reference run failed: $(tail -n 3 "$staff")"; exit 1; }
    echo >> "$staff"
done
if cmp -s "$mine" "$staff"; then
    echo "  -> your lab 11 schedules are the staff reference's, action for action"
else
    echo "  -> your lab 11 schedules DIFFER from the staff reference's (yours first, the reference's second):"
    diff "$mine" "$staff" | grep '^[<>]' | head -n 8 | sed 's/^/     /'
    echo "     Run 'make test-lab11' and check every case."
    exit 3
fi
