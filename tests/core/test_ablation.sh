#!/usr/bin/env bash
# test_ablation.sh KILN — plots/ablation.sh on a tiny GPT on the CPU: eight rows in the
# table, each optimization leaves the loss where full puts it (fp32 rows to 1e-4 relative,
# bf16 to 2%), the run without a memory plan takes more memory than full, remat less or
# the same, the table and both figures are written, and a bad --device is refused.
set -eu
kiln=${1:?usage: test_ablation.sh KILN}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
if bash plots/ablation.sh "$out/bad" --device tpu > "$out/bad.log" 2>&1; then fail "--device tpu was accepted"; fi
grep -q "must be cpu or cuda" "$out/bad.log" || fail "no clear message for --device tpu: $(cat "$out/bad.log")"
KILN=$kiln bash plots/ablation.sh "$out/a" --device cpu --vocab 128 --context 32 --layers 2 --width 64 --heads 4 \
    --batch 4 --warmup 1 --steps 2 > "$out/run.log" 2>&1 || { cat "$out/run.log"; fail "ablation.sh failed"; }
for f in ablation.tsv ablation.md ablation.svg ablation.png; do [ -s "$out/a/$f" ] || fail "no $f"; done
python3 - "$out/a/ablation.tsv" <<'PY'
import sys
rows = {}
for l in open(sys.argv[1]):
    if l.startswith("#"): continue
    f = l.rstrip("\n").split("\t")
    rows[f[0]] = dict(ms=float(f[1]), peak=float(f[3]), loss=float(f[5]))
want = ["full", "-fusion", "-passes", "-flash", "-hfuse", "-plan", "+remat", "+bf16"]
assert list(rows) == want, "rows %s, want %s" % (list(rows), want)
full = rows["full"]
for k, r in rows.items():
    tol = 2e-2 if k == "+bf16" else 1e-4
    assert abs(r["loss"] - full["loss"]) <= tol * abs(full["loss"]), "%s: last loss %g, full's %g" % (k, r["loss"], full["loss"])
    assert r["ms"] > 0, k
assert rows["-plan"]["peak"] > full["peak"], "no memory plan: %g MiB, not above full's %g" % (rows["-plan"]["peak"], full["peak"])
assert rows["+remat"]["peak"] <= full["peak"] * 1.01, "remat: %g MiB above full's %g" % (rows["+remat"]["peak"], full["peak"])
print("ablation: %d rows, losses agree, -plan %.2f MiB > full %.2f MiB" % (len(rows), rows["-plan"]["peak"], full["peak"]))
PY
grep -q "| \`-plan\` |" "$out/a/ablation.md" || fail "the markdown table has no -plan row"
echo "ok"
