#!/usr/bin/env bash
# test_cli_compile.sh KILN — `kiln compile` end to end: an IR file and a small GPT through
# the passes, the JSON report and the emitted IR, and every kind of bad input with its
# exit status (2 for usage, 1 for failures) and message. Prints "ok" or what went wrong.
set -u
kiln=${1:?usage: test_cli_compile.sh PATH/TO/kiln}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# expect STATUS PATTERN ARGS...: kiln compile ARGS exits with STATUS and stderr matches PATTERN
expect() {
    local want=$1 pat=$2; shift 2
    "$kiln" compile "$@" > "$dir/out" 2> "$dir/err"; local rc=$?
    [ $rc -eq "$want" ] || fail "kiln compile $*: exit $rc, expected $want; stderr: $(cat "$dir/err")"
    grep -qF -- "$pat" "$dir/err" || fail "kiln compile $*: stderr lacks '$pat': $(cat "$dir/err")"
}

# An IR file: the golden add_zero case, through all passes.
"$kiln" compile tests/passes/mul_one.in.ir --passes all --report "$dir/r.json" --emit-ir "$dir/o.ir" > "$dir/out" \
    || fail "compile of mul_one.in.ir failed: $(cat "$dir/out")"
grep -q "max |delta| = 0" "$dir/out" || fail "no max |delta| line: $(cat "$dir/out")"
"$kiln" ir "$dir/o.ir" --verify > /dev/null || fail "emitted IR does not verify"
python3 - "$dir/r.json" <<'PY' || exit 1
import json, sys
r = json.load(open(sys.argv[1]))
names = [p["name"] for p in r["passes"]]
assert names == ["fold", "views", "algebra", "cse", "dce"], names
assert r["nodes_before"] == 8 and r["nodes_after"] == 5, (r["nodes_before"], r["nodes_after"])
alg = r["passes"][2]
assert alg["fired"] == {"mul_one": 2}, alg
assert r["passes"][4]["fired"]["dead"] == 1
assert r["max_abs_delta"] == 0 and r["verified_after_each_pass"] is True
assert r["flops_after"] < r["flops_before"] and r["bytes_after"] < r["bytes_before"], r
for k in ("passes_ms", "build_ms", "check_ms"): assert r[k] >= 0
PY

# A small GPT's joint graph and its forward graph; --passes none changes nothing.
"$kiln" compile --gpt small,layers=1,width=16,heads=2,context=8,vocab=11 --batch 2 --report "$dir/g.json" > "$dir/out" \
    || fail "compile --gpt failed: $(cat "$dir/out")"
grep -q "max |delta| = 0" "$dir/out" || fail "gpt: $(cat "$dir/out")"
"$kiln" compile --gpt layers=1,width=16,heads=2,context=8,vocab=11 --graph forward --seq 4 --passes none \
    --emit-ir "$dir/f.ir" > "$dir/out" || fail "forward graph: $(cat "$dir/out")"
"$kiln" ir "$dir/f.ir" --verify > /dev/null || fail "forward IR does not verify"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r['input'].startswith('small') and r['max_abs_delta']==0" "$dir/g.json" \
    || fail "gpt report"
"$kiln" compile --gpt layers=1,width=16,heads=2,context=8,vocab=11 --no-check --report "$dir/n.json" > /dev/null || fail "--no-check"
python3 -c "import json,sys; assert json.load(open(sys.argv[1]))['max_abs_delta'] is None" "$dir/n.json" || fail "--no-check report"

# The epilogue pass on a small GPT: what it fused is printed, and on the CPU it is exact;
# the emitted IR (with the fused ops) parses and verifies.
"$kiln" compile --gpt small,layers=1,width=16,heads=2,context=8,vocab=11 --batch 2 --passes epilogue \
    --emit-ir "$dir/e.ir" > "$dir/out" 2>&1 || fail "compile --passes epilogue failed: $(cat "$dir/out")"
grep -q "matmul + bias + gelu -> matmul_bias_gelu 1" "$dir/out" || fail "epilogue: $(cat "$dir/out")"
grep -q "max |delta| = 0" "$dir/out" || fail "epilogue is not exact on the CPU: $(cat "$dir/out")"
"$kiln" ir "$dir/e.ir" --verify > /dev/null || fail "epilogue IR does not verify"
# The hfuse pass on the same GPT: each kind of group fires once in the one layer, equal to rounding
"$kiln" compile --gpt small,layers=1,width=16,heads=2,context=8,vocab=11 --batch 2 --passes hfuse \
    --emit-ir "$dir/h.ir" > "$dir/out" 2>&1 || fail "compile --passes hfuse failed: $(cat "$dir/out")"
grep -q "input-gradient sum -> one product of a concat 1" "$dir/out" || fail "hfuse: $(cat "$dir/out")"
grep -q "concat" "$dir/h.ir" || fail "hfuse: no concat in the IR"
"$kiln" ir "$dir/h.ir" --verify > /dev/null || fail "hfuse IR does not verify"
grep -q "matmul_bgrad" "$dir/e.ir" || fail "no matmul_bgrad in the emitted IR"

# Usage errors: exit 2.
expect 2 "unknown pass 'bogus' (known: fold, views, algebra, cse, dce, remat, autocast, lowparams, lowloss, lowsave, flash, epilogue, hfuse, ddp, zero, zero3, quantize, all, none)" tests/passes/dce.in.ir --passes cse,bogus
expect 2 "unknown option '--frobnicate'" tests/passes/dce.in.ir --frobnicate
expect 2 "give one input" --passes all
expect 2 "give one input" tests/passes/dce.in.ir --gpt small
expect 2 "--passes needs a value" tests/passes/dce.in.ir --passes
expect 2 "unknown key 'depth'" --gpt depth=3
expect 2 "bad item 'layers=x'" --gpt layers=x
expect 2 "width" --gpt width=10,heads=3
expect 2 "--graph 'both'" --gpt small --graph both
expect 2 "--batch '0' is not a positive integer" --gpt small --batch 0
expect 2 "longer than the context" --gpt small,context=8 --seq 9
# Failures: exit 1.
expect 1 "cannot open $dir/missing.ir" "$dir/missing.ir"
printf '%%0 = input {name="x"} : f32[2]\n%%1 = neg %%0 f32[2]\noutput %%1\n' > "$dir/bad.ir"
expect 1 "2:13: expected" "$dir/bad.ir"
printf '%%0 = input {name="x"} : f32[2]\n%%1 = neg %%0 : f32[3]\noutput %%1\n' > "$dir/badtype.ir"
expect 1 "%1 = neg: declared type f32[3]" "$dir/badtype.ir"
"$kiln" compile tests/passes/dce.in.ir --emit-ir "$dir/no/such/dir.ir" > /dev/null 2> "$dir/err"
[ $? -eq 1 ] && grep -q "cannot write" "$dir/err" || fail "unwritable --emit-ir: $(cat "$dir/err")"
"$kiln" compile --help | grep -q "fold, views, algebra, cse, dce" || fail "--help lists the passes"

# The compile pipeline: --stages prints every stage of the table, in order, each with its
# time and what it made; --keep-loss keeps the loss as library steps (decompose:gpu), and
# KILN_KEEP_LOSS in the environment changes nothing (no environment variable decides what
# is compiled).
"$kiln" compile --gpt small,layers=1,width=16,heads=2,context=8,vocab=11 --batch 2 --no-check --stages \
    > "$dir/out" 2>&1 || fail "compile --stages: $(cat "$dir/out")"
order=$(grep -oE '^  (passes|decompose|schedule|lower|plan|render|load|total) ' "$dir/out" | tr -s ' \n' ' ')
[ "$order" = " passes decompose schedule lower plan render load total " ] \
    || fail "--stages: stages '$order' in $(cat "$dir/out")"
grep -qE '^  plan +[0-9.]+ ms  arena ' "$dir/out" || fail "--stages: no plan summary: $(cat "$dir/out")"
grep -qE '^  decompose +[0-9.]+ ms  decompose: ' "$dir/out" || fail "--stages: no decompose summary: $(cat "$dir/out")"
KILN_KEEP_LOSS=1 "$kiln" compile --gpt small,layers=1,width=16,heads=2,context=8,vocab=11 --batch 2 --no-check \
    --stages > "$dir/out2" 2>&1 || fail "compile --stages: $(cat "$dir/out2")"
grep -q "decompose:gpu" "$dir/out2" && fail "KILN_KEEP_LOSS changed what was compiled: $(cat "$dir/out2")"
"$kiln" compile --gpt small,layers=1,width=16,heads=2,context=8,vocab=11 --batch 2 --no-check --stages --keep-loss \
    > "$dir/out2" 2>&1 || fail "compile --stages --keep-loss: $(cat "$dir/out2")"
grep -q "decompose:gpu" "$dir/out2" || fail "--keep-loss: $(cat "$dir/out2")"

# Fusion and generated C: the schedule with its decisions, the kernels written out, and the
# compiled program checked against the interpreter.
export KILN_CACHE_DIR="$dir/cache"
"$kiln" compile --gpt small,layers=1,width=16,heads=2,context=8,vocab=11 --batch 2 --schedule --emit-kernels "$dir/k" \
    > "$dir/out" 2>&1 || fail "compile --schedule: $(cat "$dir/out")"
grep -q "^step .*: kernel k" "$dir/out" || fail "--schedule lists no kernel: $(head -20 "$dir/out")"
grep -q "^fuse %" "$dir/out" || fail "--schedule gives no decisions"
grep -q "^refuse %.*: " "$dir/out" || fail "--schedule gives no refusal with its reason"
grep -q "compiled: .* generated kernels" "$dir/out" || fail "no compiled summary: $(tail -3 "$dir/out")"
rel=$(sed -n 's/^compiled program against the interpreter: max |delta| \/ (1 + |ref|) = //p' "$dir/out")
python3 -c "import sys; sys.exit(0 if float('$rel') < 2e-5 else 1)" || fail "compiled program differs: $rel"
kir=$(ls "$dir"/k/k*.kir 2>/dev/null | head -1)
[ -s "$dir/k/schedule.txt" ] && [ -n "$kir" ] || fail "--emit-kernels wrote $(ls "$dir/k")"
c=${kir%.kir}.c
cc -std=c11 -O2 -fopenmp-simd -Wall -Wextra -Werror -fsyntax-only "$c" || fail "$c does not compile on its own"
grep -q "^kernel k" "$kir" || fail "$kir is not kernel IR"
expect 1 "cannot create" tests/passes/dce.in.ir --emit-kernels "$dir/no/such/dir"

# The memory plan: the arena between the lower bound and the sum of the buffers, and its plot.
"$kiln" compile --gpt small,layers=2,width=32,heads=2,context=16,vocab=11 --batch 2 --no-check --memory-plot "$dir/m.tsv" \
    > "$dir/out" 2>&1 || fail "--memory-plot: $(cat "$dir/out")"
read -r planned sum lower < <(sed -n 's/^memory plan: \([0-9.]*\) MB in one arena for buffers of \([0-9.]*\) MB in all; .* bound) \([0-9.]*\) MB$/\1 \2 \3/p' "$dir/out")
[ -n "${lower:-}" ] || fail "no memory plan line: $(cat "$dir/out")"
python3 -c "import sys; p, s, l = $planned, $sum, $lower; sys.exit(0 if 0 < l <= p < s else 1)" \
    || fail "memory plan: planned $planned, sum $sum, lower bound $lower"
[ "$(head -n 1 "$dir/m.tsv")" = "$(printf '# step\tlive_bytes\tarena_top_bytes\twhat')" ] || fail "m.tsv header"
if command -v gnuplot > /dev/null; then
    bash plots/memory.sh "$dir/m.tsv" "$dir/m.svg" > /dev/null || fail "plots/memory.sh failed"
    [ -s "$dir/m.svg" ] && [ -s "$dir/m.png" ] || fail "plots/memory.sh wrote no plot"
fi
# --dist: the data-parallel pass last; the emitted IR holds a start per bucket, each after a
# grad_store and before a later matmul, and the waits at the end; the check compares the slab
"$kiln" compile --gpt small,layers=2,width=32,heads=2,context=16,vocab=11 --batch 2 --dist ddp --bucket-mb 0.005 \
    --emit-ir "$dir/d.ir" --schedule > "$dir/out" 2>&1 || fail "--dist ddp: $(cat "$dir/out")"
grep -q "max |delta| = 0 " "$dir/out" || fail "--dist ddp: the slab differs: $(grep delta "$dir/out")"
grep -q "compiled program against the interpreter" "$dir/out" || fail "--dist ddp --schedule: $(cat "$dir/out")"
ns=$(grep -c '= all_reduce_start %' "$dir/d.ir"); nw=$(grep -c '= comm_wait %' "$dir/d.ir")
[ "$ns" -gt 3 ] && [ "$ns" = "$nw" ] || fail "--dist ddp: $ns starts, $nw waits"
awk '/= all_reduce_start %/ { if (prev !~ /= grad_store %/) bad = 1; if (!s) s = NR } /= matmul %/ { m = NR } { prev = $0 }
     /= comm_wait %/ && !w { w = NR } END { exit !(s && m > s && w > m && !bad) }' "$dir/d.ir" \
    || fail "--dist ddp: a start not right after a store, or no matmul between the first start and the waits"
"$kiln" ir "$dir/d.ir" --verify > /dev/null || fail "--dist ddp: the emitted IR does not verify"
"$kiln" compile --gpt small,layers=2,width=32,heads=2,context=16,vocab=11 --dist zero2 --emit-ir "$dir/z.ir" > /dev/null \
    && grep -q '= reduce_scatter_start %' "$dir/z.ir" || fail "--dist zero2: no reduce_scatter_start"
# --dist zero3: the params gone, every bucket gathered (forward and backward) and waited for
# right before a view of it is read; the slab equal, the compiled program too
"$kiln" compile --gpt small,layers=2,width=32,heads=2,context=16,vocab=11 --batch 2 --dist zero3 --bucket-mb 0.005 \
    --emit-ir "$dir/z3.ir" --schedule > "$dir/out" 2>&1 || fail "--dist zero3: $(cat "$dir/out")"
grep -q "max |delta| = 0 " "$dir/out" || fail "--dist zero3: the slab differs: $(grep delta "$dir/out")"
grep -q "compiled program against the interpreter" "$dir/out" || fail "--dist zero3 --schedule: $(cat "$dir/out")"
ng=$(grep -c '= all_gather_start %' "$dir/z3.ir"); nr=$(grep -c '= reduce_scatter_start %' "$dir/z3.ir")
[ "$ng" -gt "$nr" ] && [ "$ng" -le $((2 * nr)) ] && ! grep -q '= param ' "$dir/z3.ir" \
    || fail "--dist zero3: $ng gathers for $nr buckets, or params left"
awk '/= comm_wait %[0-9]* {[^}]*} : f32\[[0-9]/ { w = $1; next } /= all_gather_start %/ { next }
     w != "" { if ($0 !~ ("= slice " w " ")) bad = 1; w = "" } END { exit bad }' "$dir/z3.ir" \
    || fail "--dist zero3: a gather's wait not right before a view of it"
"$kiln" ir "$dir/z3.ir" --verify > /dev/null || fail "--dist zero3: the emitted IR does not verify"
expect 2 "expected ddp, zero1, zero2 or zero3" --gpt small --dist zero4
expect 2 "--bucket-mb '0'" --gpt small --dist ddp --bucket-mb 0
expect 1 "a joint graph has the loss" --gpt small --graph forward --dist ddp --no-check
bash plots/memory.sh "$dir/out" "$dir/x.svg" > /dev/null 2> "$dir/err" && fail "memory.sh accepted a non-plan file"
grep -q "not a kiln memory plan\|gnuplot is not installed" "$dir/err" || fail "memory.sh: $(cat "$dir/err")"
echo ok
