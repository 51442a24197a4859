#!/usr/bin/env bash
# run-suite.sh NAME BINARY RESULTS_DIR — run one Criterion test binary and judge it.
#
# A test passes when Criterion reports it ok AND its KN_TEST .fini hook recorded that it
# reached its end (see kn_test.h). A test that skips itself (cr_skip_test: a GPU test on a
# machine without a GPU) counts as skipped and its reason is printed on one line.
# Writes RESULTS_DIR/NAME.{tap,log,done,count}; NAME.count holds
# "passed failed abnormal skipped" where abnormal counts crashes and timeouts (a subset of
# failed). Prints failures with their messages, then "NAME: N passed, N failed[, N skipped]".
# Exit status: 0 when nothing failed.
set -u
name=$1 bin=$2 dir=$3
mkdir -p "$dir"
tap=$dir/$name.tap done=$dir/$name.done log=$dir/$name.log count=$dir/$name.count
rm -f "$tap" "$log" "$count"; : > "$done"
if [ ! -x "$bin" ]; then
    echo "$name: test binary $bin was not built (see the build errors above)"
    echo "0 1 1 0" > "$count"; exit 1
fi
KN_TEST_DONE=$(realpath "$done") timeout --kill-after=10 "${KN_SUITE_TIMEOUT:-900}" \
    "$bin" --tap="$tap" -j"${KN_TEST_JOBS:-$(nproc)}" --timeout "${KN_TEST_TIMEOUT:-120}" \
    --ascii --short-filename >"$log" 2>&1
rc=$?
awk -v donef="$done" -v name="$name" -v rc="$rc" -v countf="$count" '
BEGIN { while ((getline l < donef) > 0) reached[l] = 1; pass = fail = abn = skip = 0; detail = 0 }
/^ok - .* # SKIP/ {
    skip++; line = $0; sub(/^.* # SKIP */, "", line); printf "  SKIP %s: %s\n", $3, line
    detail = 0; next
}
/^ok - / {
    t = $3
    if (t in reached) pass++
    else { fail++; printf "  FAIL %s: the test ended early (exit() called inside the code under test?)\n", t }
    detail = 0; next
}
/^not ok - / {
    t = $4; fail++; detail = 1; line = $0; sub(/^not ok - [^ ]+ */, "", line)
    if (line ~ /signal|crash|timed out/) { abn++; printf "  CRASH %s: %s\n", t, line }
    else printf "  FAIL %s\n", t
    next
}
detail && /^  \.\.\./ { detail = 0; next }
detail && /^  (---|assertions:|failures:)/ { next }
detail {   # Criterion writes the location as "- file.c:83: |+" (a YAML block header)
    sub(/^ +/, "    ")
    if ($0 ~ /^    - [^ ]+:[0-9]+: *\|[+-]?$/) { sub(/^    - /, "    at "); sub(/: *\|[+-]?$/, "") }
    print; next
}
END {
    if (pass + fail == 0 && rc != 0) { fail = 1; abn = 1; printf "  CRASH %s: the test binary exited with status %s before reporting\n", name, rc }
    printf "%d %d %d %d\n", pass, fail, abn, skip > countf
    printf "%s: %d passed, %d failed%s\n", name, pass, fail, skip ? sprintf(", %d skipped", skip) : ""
}' "$tap"
if [ ! -s "$tap" ] || [ "$(cut -d" " -f1-2 "$count")" = "0 0" ]; then
    echo "  (last lines of $log:)"; tail -n 15 "$log" | sed 's/^/    /'
fi
read -r p f _ < "$count"
[ "$f" -eq 0 ] && [ "$p" -gt 0 ]
