#!/usr/bin/env bash
# test_report_lab12.sh — `make report LAB=12` in its quick form (REPORT_QUICK=1): with the
# reference units (IMPL=solutions) the lab report is written with its sections, the figure
# it shows drawn in this run, the units' losses equal to the reference's, and every table
# filled; with the untouched skeleton (IMPL=labs) it stops at the quantization step with
# the skeleton's "not implemented (lab12". Run from the repository root.
set -u
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
make --no-print-directory report LAB=12 IMPL=solutions REPORT_QUICK=1 REPORT_OUT="$out/sol" > "$out/sol.log" 2>&1 ||
    { tail -n 30 "$out/sol.log"; fail "make report LAB=12 IMPL=solutions failed"; }
r=$out/sol
[ -s "$r/report.html" ] || fail "no report.html"
for s in Setup Training "Quantization with your units" "Your units on the trained weights" Limitations; do
    grep -q "^# $s" "$r/report.md" || fail "no section '$s' in report.md"
done
grep -q "must agree to the last printed digit: they do\." "$r/report.md" || fail "the reference units' losses differ from themselves"
[ "$(grep -c '^| `h\.[0-9]*\.' "$r/report.md")" -ge 8 ] || fail "fewer than 8 weights in the error table"
for t in "kn_quant_cols_i8" "kn_quant_rows_i8" "kn_gemm_i8" "kn_k_matmul_f32"; do
    grep -q "^| .*($t) | [0-9.]* |" "$r/report.md" || fail "no time for $t"
done
{ [ -s "$r/quant_err.png" ] && [ "$r/quant_err.png" -nt "$r/setup.txt" ]; } || fail "quant_err.png not drawn in this run"
grep -qi "nan\b" "$r/report.md" && fail "a NaN in the report"
if make --no-print-directory report LAB=12 IMPL=labs REPORT_QUICK=1 REPORT_OUT="$out/skel" > "$out/skel.log" 2>&1; then
    fail "make report LAB=12 with the untouched skeleton succeeded"
fi
grep -q "not implemented (lab12" "$out/skel.log" || { tail -n 20 "$out/skel.log"; fail "the skeleton's report stops without its message"; }
grep -q "step 'quant' failed" "$out/skel.log" || fail "the skeleton's report does not stop at the quant step"
echo ok
