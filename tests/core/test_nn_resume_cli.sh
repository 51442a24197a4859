#!/usr/bin/env bash
# test_nn_resume_cli.sh KILN — `kiln train --resume` continues bit-identically.
#
# Trains a tiny GPT for 16 steps straight, and again as 8 steps (--stop-after 8) plus a
# resumed run of 8; the per-step log (step, loss, lr, gradient norm, all with 17 digits)
# must be identical, and the two final checkpoints must hold the same bytes for every
# tensor (parameters and optimizer state) and the same metadata. Also checks that bad
# flags are usage errors (exit 2). Prints "ok" and exits 0, or says what differs.
set -eu
kiln=${1:?usage: test_nn_resume_cli.sh PATH/TO/kiln}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export KILN_PROGRESS=0
args="--layers 1 --width 16 --heads 2 --context 16 --batch 4 --steps 16 --data-bytes 20000 --sample 0 --eval-batches 1"
"$kiln" train $args --out "$dir/full.st" --log "$dir/full.log" > "$dir/full.out"
"$kiln" train $args --stop-after 8 --out "$dir/half.st" --log "$dir/resumed.log" > "$dir/half.out"
"$kiln" train --resume "$dir/half.st" --out "$dir/resumed.st" --log "$dir/resumed.log" > "$dir/resumed.out"
cmp "$dir/full.log" "$dir/resumed.log" || { echo "FAIL: loss sequences differ"; diff "$dir/full.log" "$dir/resumed.log" | head; exit 1; }
[ "$(wc -l < "$dir/full.log")" -eq 16 ] || { echo "FAIL: expected 16 logged steps"; exit 1; }
"${PYTHON:-python3}" - "$dir/full.st" "$dir/resumed.st" <<'PY'
import json, struct, sys
def load(p):
    raw = open(p, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    h = json.loads(raw[8:8 + n]); d = raw[8 + n:]
    meta = h.pop("__metadata__")
    return {k: d[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in h.items()}, meta
(a, ma), (b, mb) = load(sys.argv[1]), load(sys.argv[2])
bad = [k for k in a if a[k] != b.get(k)] + [k for k in mb if mb[k] != ma.get(k)]
if bad or set(a) != set(b):
    sys.exit("FAIL: checkpoints differ in " + ", ".join(bad or ["tensor names"]))
PY
for bad in "--nope 1" "--lr abc" "--width 30" "--steps" "stray"; do
    rc=0; "$kiln" train $bad > /dev/null 2>&1 || rc=$?
    [ "$rc" -eq 2 ] || { echo "FAIL: 'kiln train $bad' exited $rc, expected 2"; exit 1; }
done
rc=0; "$kiln" train --resume "$dir/half.st" --lr 1 > /dev/null 2>&1 || rc=$?
[ "$rc" -eq 2 ] || { echo "FAIL: --resume with --lr exited $rc, expected 2"; exit 1; }
echo ok
