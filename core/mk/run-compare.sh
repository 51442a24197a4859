#!/usr/bin/env bash
# run-compare.sh LAB KILN REF_KILN CACHE_DIR [kiln train args...] — `make run LAB=NN`.
# LAUNCH (environment, may be empty) goes before both runs: lab 10's `mpiexec -n 2`.
#
# Trains with KILN (built with YOUR units of lab LAB), then puts the held-out loss of the
# staff's reference build (REF_KILN: every unit the staff's) for the same settings beside
# it, and says plainly whether the two agree. The reference run is done once per settings
# and reference binary (cached in CACHE_DIR), with --out none.
#
# Agreement: kiln's training is deterministic for given settings, but a unit that sums in
# another order legitimately changes the last bits, and over 1200 steps that drifts like a
# different seed. The run-to-run spread is therefore the spread over seeds, measured with
# the reference on the default run (2-core machine, 2026-11-23: held-out loss 0.8109,
# 0.7977, 0.7991 for --seed 1, 2, 3: a range of 0.013 nats/token). TOL (default 0.05,
# about 4 times that range) is the difference above which the units are called wrong; a
# wrong backward rule costs far more (a wrong matmul tb trained to 1.87 against 0.81, as
# reported in issue 19; that one is now also refused as an error). For settings far from
# the default the spread may differ: compare a few --seed values too.
set -u
LAUNCH=${LAUNCH:-}
lab=$1 kiln=$2 ref=$3 cache=$4
shift 4
tol=${TOL:-0.05}
log=$(mktemp); trap 'rm -f "$log"' EXIT
$LAUNCH "$kiln" train "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
# a launch that printed nothing at all (seen once from mpiexec under make test, 2026-11-27,
# not reproduced) says so, rather than leave an empty log
[ "$rc" -eq 0 ] || [ -s "$log" ] || echo "run-compare: '${LAUNCH:+$LAUNCH }$kiln train' exited with status $rc without any output"
[ "$rc" -eq 0 ] || exit "$rc"
held() { sed -n 's/^ *held-out loss *\([0-9.naif-]*\) .*/\1/p' "$1" | tail -n 1; }
mine=$(held "$log")
[ -n "$mine" ] || { echo "run-compare: no held-out loss in kiln train's output"; exit 1; }
mkdir -p "$cache"
key=$( (sha256sum < "$ref"; printf '%s\n' "$LAUNCH" "$@") | sha256sum | cut -c1-16)
if [ ! -s "$cache/$key" ]; then
    echo
    echo "  training the staff reference with the same settings for comparison (once; cached in $cache/$key)"
    $LAUNCH "$ref" train "$@" --out none > "$cache/$key.log" 2>&1 || { echo "run-compare: the reference run failed:"; tail -n 5 "$cache/$key.log"; exit 1; }
    held "$cache/$key.log" > "$cache/$key"
fi
staff=$(cat "$cache/$key")
echo
echo "  held-out loss, your lab $lab units: $mine nats/token; the staff reference, same settings: $staff"
if awk -v a="$mine" -v b="$staff" -v t="$tol" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a == a && d <= t) }'; then
    echo "  -> they agree (within $tol nats/token, several times the run-to-run spread over seeds)"
else
    echo "  -> they DIFFER by more than the run-to-run spread ($tol nats/token): something in your lab $lab"
    echo "     units is wrong even if the loss went down. Run 'make test-lab$lab' and check every case."
    exit 3
fi
