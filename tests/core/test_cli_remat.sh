#!/usr/bin/env bash
# test_cli_remat.sh KILN — activation checkpointing from the command line: `kiln compile
# --passes remat:POLICY` lowers the live bytes of a small GPT's joint graph and changes no
# number; `kiln train --remat POLICY` logs the same losses, bit for bit, as without it
# (also when a resumed run turns it on); `kiln bench --remat` reports the live bytes in its
# JSON; bad policies are usage errors (exit 2) naming the policies. Prints "ok" or what failed.
set -u
kiln=${1:?usage: test_cli_remat.sh PATH/TO/kiln}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# expect STATUS PATTERN CMD ARGS...: kiln CMD ARGS exits with STATUS and its output matches PATTERN
expect() {
    local want=$1 pat=$2; shift 2
    "$kiln" "$@" > "$dir/out" 2>&1; local rc=$?
    [ $rc -eq "$want" ] || fail "kiln $*: exit $rc, expected $want: $(cat "$dir/out")"
    grep -qF -- "$pat" "$dir/out" || fail "kiln $*: output lacks '$pat': $(cat "$dir/out")"
}
gpt=layers=3,width=16,heads=2,context=8,vocab=11

# kiln compile: each policy on the joint graph; the check against the original must be exact.
for p in none selective full every:2 mincut; do
    "$kiln" compile --gpt $gpt --batch 2 --passes remat:$p --report "$dir/$p.json" > "$dir/out" 2>&1 \
        || fail "compile remat:$p: $(cat "$dir/out")"
    grep -q "max |delta| = 0 " "$dir/out" || fail "remat:$p changed the numbers: $(cat "$dir/out")"
done
"${PYTHON:-python3}" - "$dir" <<'PY' || exit 1
import json, sys
r = {p: json.load(open(f"{sys.argv[1]}/{p}.json")) for p in ("none", "selective", "full", "every:2", "mincut")}
none = r["none"]["live_bytes_before"]
assert none > 0 and r["none"]["live_bytes_after"] == none, r["none"]
for p in ("selective", "full", "mincut"):
    assert r[p]["live_bytes_after"] < none, (p, r[p]["live_bytes_after"], none)
    assert r[p]["passes"][0]["name"] == "remat" and r[p]["passes"][0]["arg"] == p, r[p]["passes"]
    assert r[p]["passes"][0]["fired"]["recomputed"] > 0 and r[p]["max_abs_delta"] == 0, r[p]
assert r["full"]["live_bytes_after"] < r["selective"]["live_bytes_after"], "full keeps less than selective"
PY
expect 2 "unknown policy 'fancy' (policies: none, selective, full, every:K" compile --gpt $gpt --passes remat:fancy
expect 2 "remat needs a policy" compile --gpt $gpt --passes cse,remat
expect 2 "pass cse takes no argument" compile --gpt $gpt --passes cse:1
# the text format carries no scopes: full needs them, the cut does not
"$kiln" compile --gpt $gpt --passes none --emit-ir "$dir/joint.ir" > /dev/null 2>&1 || fail "--emit-ir"
expect 1 "needs the layers of the forward" compile "$dir/joint.ir" --passes remat:full
expect 0 "max |delta| = 0 " compile "$dir/joint.ir" --passes remat:mincut

# kiln train: the same losses with and without recompute, compiled and node by node.
run="--layers 2 --width 32 --heads 2 --context 16 --batch 4 --steps 6 --sample 0 --eval-batches 1 --out none"
for mode in compiled interp; do
    "$kiln" train $run --mode $mode --log "$dir/none.log" > "$dir/out" 2>&1 || fail "train: $(cat "$dir/out")"
    "$kiln" train $run --mode $mode --remat full --log "$dir/full.log" > "$dir/out" 2>&1 || fail "train --remat: $(cat "$dir/out")"
    grep -q "remat full: the step's largest live set" "$dir/out" || fail "train --remat prints no live set: $(cat "$dir/out")"
    cmp -s "$dir/none.log" "$dir/full.log" || fail "--mode $mode --remat full changed the losses: $(paste "$dir/none.log" "$dir/full.log")"
done
# a run resumed with --remat continues exactly (it is an option of the invocation, not of the
# run); none.log is the interp run's, so both parts run node by node too
"$kiln" train ${run/--out none/} --mode interp --stop-after 3 --out "$dir/ck.safetensors" --log "$dir/a.log" > "$dir/out" 2>&1 \
    || fail "train --stop-after: $(cat "$dir/out")"
"$kiln" train --resume "$dir/ck.safetensors" --mode interp --remat mincut --sample 0 --eval-batches 1 --out none --log "$dir/a.log" \
    > "$dir/out" 2>&1 || fail "resume --remat: $(cat "$dir/out")"
cmp -s "$dir/none.log" "$dir/a.log" || fail "resumed with --remat mincut: $(paste "$dir/none.log" "$dir/a.log")"
expect 2 "unknown policy 'fancy'" train --remat fancy
expect 2 "every:K needs K" train --remat every:0
expect 2 "eager mode runs the model op by op" train --remat full --mode eager

# kiln bench: the live bytes in the JSON line, lower with recompute.
tiny="--vocab 64 --context 16 --layers 2 --width 32 --heads 2 --batch 2 --warmup 1 --steps 2 --device cpu"
"$kiln" bench $tiny --remat every:2 > "$dir/b.out" 2>&1 || fail "bench --remat: $(cat "$dir/b.out")"
"$kiln" bench $tiny --remat selective --passes cse > "$dir/c.out" 2>&1 || fail "bench --remat: $(cat "$dir/c.out")"
"${PYTHON:-python3}" - "$dir/b.out" "$dir/c.out" <<'PY' || exit 1
import json, sys
for path, pol in ((sys.argv[1], "every:2"), (sys.argv[2], "selective")):
    r = json.loads(open(path).read().splitlines()[-1])
    assert r["remat"] == pol and 0 < r["live_bytes"] <= r["live_bytes_none"], r
    assert r["mem_planned"] >= r["mem_lower"] > 0, r
r = json.loads(open(sys.argv[2]).read().splitlines()[-1])
assert r["live_bytes"] < r["live_bytes_none"] and r["passes"] == "cse", r
PY
grep -q "passes cse,remat:selective" "$dir/c.out" || fail "bench runs remat after the passes: $(cat "$dir/c.out")"
expect 2 "--remat: remat: unknown policy 'half'" bench --remat half
echo ok
