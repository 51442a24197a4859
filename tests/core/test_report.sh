#!/usr/bin/env bash
# test_report.sh KILN — `make report`'s driver in its quick form (REPORT_QUICK=1): the
# HTML report is written with every section, every figure it shows exists and was drawn in
# this run, the training section says the model beat the unigram baseline, the correctness
# line is a PASS, and report.py refuses, by name, to write a report with a measurement
# missing.
set -eu
kiln=${1:?usage: test_report.sh KILN}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
REPORT_QUICK=1 KILN=$kiln bash plots/report.sh "$out/r" > "$out/run.log" 2>&1 || { cat "$out/run.log"; fail "report.sh failed"; }
r=$out/r
[ -s "$r/report.html" ] || fail "no report.html"
for s in Setup Training Latency Memory Correctness Roofline Ablation Scaling Inference Quantization Limitations; do
    grep -q "^# $s" "$r/report.md" || fail "no section $s in report.md"
done
for fig in $(grep -o '<img src="[^"]*"' "$r/report.html" | sed 's/<img src="//; s/"$//'); do
    [ -s "$r/$fig" ] || fail "the HTML shows $fig, which is not there"
    [ "$r/$fig" -nt "$r/setup.txt" ] || fail "$fig is older than this run"
done
[ "$(grep -c '<img' "$r/report.html")" -ge 5 ] || fail "fewer than 5 figures in the report"
grep -q "below it: the model learned" "$r/report.md" || fail "the quick training run did not beat the unigram baseline"
grep -q "^> PASS kiln against float64 numpy" "$r/report.md" || fail "no PASS line in the correctness section"
grep -qi "nan\b" "$r/report.md" && fail "a NaN in the report"
rm "$r/infer.json"
if python3 plots/report.py "$r" "$PWD" > "$out/missing.log" 2>&1; then fail "report.py wrote a report without infer.json"; fi
grep -q "infer.json" "$out/missing.log" || fail "the refusal does not name infer.json: $(cat "$out/missing.log")"
echo ok
