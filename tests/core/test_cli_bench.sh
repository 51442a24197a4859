#!/usr/bin/env bash
# test_cli_bench.sh KILN — `kiln bench` on the CPU at a tiny shape: it prints its step
# lines and ends with one JSON object holding the fields plots/bench.sh reads (finite,
# positive times and tokens/s; the loss of random tokens near ln(vocab); the tf32 flag as
# asked; --tokens as asked); bad flags are usage errors (exit 2) with a message naming the flag. The GPU side
# (timing, --profile, --tf32 on cuBLAS) runs in `make gpu-check`. Prints "ok" or what failed.
set -eu
kiln=${1:?usage: test_cli_bench.sh PATH/TO/kiln}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
tiny="--vocab 64 --context 16 --layers 1 --width 32 --heads 2 --batch 2 --warmup 1 --steps 3 --device cpu"
"$kiln" bench $tiny > "$dir/a.out"
"$kiln" bench $tiny --tf32 --profile 5 > "$dir/b.out"
"${PYTHON:-python3}" - "$dir/a.out" "$dir/b.out" <<'PY'
import json, math, sys
for path, tf32 in ((sys.argv[1], False), (sys.argv[2], True)):
    lines = open(path).read().splitlines()
    r = json.loads(lines[-1])
    steps = [l for l in lines if l.lstrip().startswith("step ") and "ms" in l and "loss" in l]
    assert len(steps) == 4, f"{path}: expected 4 step lines, got {len(steps)}"
    for k in ("step_ms_median", "tokens_per_s", "fwd_ms", "optim_ms"):
        assert math.isfinite(r[k]) and r[k] > 0, f"{path}: {k} = {r[k]}"
    assert r["step_ms_min"] <= r["step_ms_median"] <= r["step_ms_max"], path
    # tokens/s comes from the unrounded median; the JSON rounds ms to 3 decimals (a step
    # of this tiny model takes ~0.2 ms, where that rounding alone is 2.5e-3 relative)
    assert abs(32e3 / r["tokens_per_s"] - r["step_ms_median"]) <= 5e-4 + 1e-9, path
    assert abs(r["loss_first"] - math.log(64)) < 0.5, f"{path}: first loss {r['loss_first']} vs ln 64"
    assert (r["impl"], r["device"], r["vocab"], r["batch"], r["tf32"]) == ("kiln", "cpu", 64, 2, tf32), r
    assert r["params"] > 0 and r["warmup"] == 1 and r["steps"] == 3, r
PY
bad() { # bad EXPECTED_WORD FLAGS...: exit 2 and the word in the message
    local want=$1; shift
    local rc=0
    "$kiln" bench "$@" > "$dir/bad.out" 2>&1 || rc=$?
    [ $rc -eq 2 ] || { echo "FAIL: kiln bench $*: exit $rc, expected 2"; cat "$dir/bad.out"; exit 1; }
    grep -q -- "$want" "$dir/bad.out" || { echo "FAIL: kiln bench $*: no '$want' in:"; cat "$dir/bad.out"; exit 1; }
}
bad "--steps" --steps 0
bad "--width" --width 30 --heads 4 --device cpu
bad "--device" --device gpu
bad "--tokens" --tokens text
"$kiln" bench $tiny --tokens same | tail -1 | grep -qF '"tokens": "same"' || { echo "FAIL: bench --tokens same"; exit 1; }
bad "unknown option" --fast
bad "needs a value" --batch
bad "needs a value" --profile-out
bad "--seed" --seed x1
bad "--mode 'fused'" --mode fused
bad "unknown pass 'bogus'" --passes bogus
# The compiled CPU step with its per-step profile against the copy bandwidth, and the
# ablation fields of the JSON line.
KILN_CACHE_DIR="$dir/cache" "$kiln" bench --device cpu --vocab 64 --context 16 --layers 1 --width 32 --heads 2 --batch 2 \
    --warmup 1 --steps 2 --mode compiled --passes all --profile 1000 > "$dir/prof.out" 2>&1 \
    || { echo "FAIL: bench --profile on the CPU"; cat "$dir/prof.out"; exit 1; }
for want in "copy bandwidth" "step profile over 3 runs" "of copy" "kernel k" '"mode": "compiled"' '"passes": "all"'; do
    grep -qF -- "$want" "$dir/prof.out" || { echo "FAIL: bench --profile: no '$want' in:"; cat "$dir/prof.out"; exit 1; }
done
# plots/bench.sh's run list (make bench-gpu's full table) on the CPU: every kiln row in the
# table and in bench_summary.json, labelled by mode and precision; a bad run word is refused.
here=$(cd "$(dirname "$0")/../.." && pwd)
KILN=$kiln LOGS="$dir/bench" KILN_CACHE_DIR="$dir/cache" BENCH_RUNS="kiln/interp/fp32 kiln/compiled/bf16" \
    bash "$here/plots/bench.sh" $tiny > "$dir/bench.out" 2>&1 || { echo "FAIL: plots/bench.sh"; cat "$dir/bench.out"; exit 1; }
for want in "kiln-interp fp32" "kiln-compiled bf16" "kiln's last run (kiln-compiled bf16)"; do
    grep -qF -- "$want" "$dir/bench.out" || { echo "FAIL: plots/bench.sh: no '$want' in:"; cat "$dir/bench.out"; exit 1; }
done
"${PYTHON:-python3}" -c 'import json, sys; d = json.load(open(sys.argv[1])); assert sorted(d["kiln_modes"]) == ["kiln-compiled bf16", "kiln-interp fp32"], d["kiln_modes"].keys(); assert d["kiln"]["precision"] == "bf16"' "$dir/bench/bench_summary.json" \
    || { echo "FAIL: plots/bench.sh: bench_summary.json"; exit 1; }
rc=0; KILN=$kiln LOGS="$dir/bench" BENCH_RUNS="kiln/interp/fp33" bash "$here/plots/bench.sh" $tiny > "$dir/bad.out" 2>&1 || rc=$?
[ $rc -eq 2 ] && grep -q "precision must be" "$dir/bad.out" || { echo "FAIL: plots/bench.sh with fp33: exit $rc"; cat "$dir/bad.out"; exit 1; }
# kiln bench-attn: the TSV row names variant and precision (bf16: autocast after flash,
# compiled); a bad precision is a usage error.
for args in "" "--flash" "--precision bf16" "--flash --precision bf16" "--flash --precision bf16 --bthd"; do
    KILN_CACHE_DIR="$dir/cache" "$kiln" bench-attn --device cpu --batch 1 --heads 2 --head-dim 64 --seq 33 --warmup 0 \
        --steps 1 $args > "$dir/attn.out" 2>&1 || { echo "FAIL: bench-attn $args"; cat "$dir/attn.out"; exit 1; }
    want=$(case "$args" in *bthd*) printf flash-bthd;; *flash*) printf flash;; *) printf materialized;; esac)
    want="$want	$(case "$args" in *bf16*) printf '[0-9.]*	[0-9]*	[0-9]*	1	2	64	cpu	bf16';; *) printf '[0-9.]*	[0-9]*	[0-9]*	1	2	64	cpu	f32';; esac)"
    tail -n 1 "$dir/attn.out" | grep -q "^33	$want\$" || { echo "FAIL: bench-attn $args: last line"; cat "$dir/attn.out"; exit 1; }
done
rc=0
"$kiln" bench-attn --precision fp16 > "$dir/bad.out" 2>&1 || rc=$?
[ $rc -eq 2 ] && grep -q -- "--precision 'fp16'" "$dir/bad.out" || { echo "FAIL: bench-attn --precision fp16: exit $rc"; exit 1; }
echo ok
