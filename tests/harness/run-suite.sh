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
# A failing test's own output (what it printed on stderr: per-thread values, the emulator's
# report, a glibc abort, a sanitizer's report) is in the log, interleaved with the other
# tests' (they run in parallel): the first KN_DETAIL_MAX (3) failures that did not time out
# are run again alone (Criterion's --filter) and their last KN_DETAIL_LINES (40) lines of
# output, less Criterion's own lines (the message above), are shown. The MPI lab tests run
# their ranks under mpiexec and have no --filter: their log's last lines are shown instead.
if [ "$f" -gt 0 ] && [ -s "$tap" ]; then
    shown=0
    if grep -q "mpiexec" "$log" 2>/dev/null || [ "${KN_DETAIL_MAX:-3}" = 0 ]; then
        echo "  (last lines of $log:)"; tail -n "${KN_DETAIL_LINES:-40}" "$log" | sed 's/^/    /'
    else
        while read -r t; do
            [ "$shown" -lt "${KN_DETAIL_MAX:-3}" ] || break
            shown=$((shown + 1))
            out=$(KN_TEST_DONE=/dev/null timeout --kill-after=5 60 "$bin" --filter "${t/::/\/}" -j1 --timeout 50 \
                  --short-filename 2>&1 | grep -v '^\[\(----\|FAIL\|PASS\|RUN \|====\|SKIP\|WARN\)\]' |
                  grep -v '^[[:space:]]*$' | tail -n "${KN_DETAIL_LINES:-40}")
            [ -n "$out" ] && { echo "  output of $t (run again alone; last ${KN_DETAIL_LINES:-40} lines):"; printf '%s\n' "$out" | sed 's/^/    /'; }
        done < <(awk '/^not ok - / && !/timed out/ {print $4}' "$tap")
    fi
    echo "  every test's output: $log"
fi
[ "$f" -eq 0 ] && [ "$p" -gt 0 ]
