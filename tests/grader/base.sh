#!/usr/bin/env bash
# base.sh LAB BASE_DIR — prepare (or reuse) the grading base of lab LAB in BASE_DIR:
#   BASE_DIR/tree   a pristine export of the repository (git ls-files: tracked files plus
#                   untracked ones git does not ignore) with the grader's hardened KN_TEST
#                   hook (kn_test_grade.c) in place of tests/harness/kn_test.c, whose two
#                   test binaries (public, hidden) are built once with the lab's skeleton
#                   units (IMPL=labs PRIOR=solutions), so
#                   each submission only recompiles its own units and relinks;
#   BASE_DIR/view   what the student's code is compiled in: the same export without
#                   solutions/, without any hidden tests (tests/lab*/) and without the
#                   grader (tests/grader/);
#   BASE_DIR/flags  the compiler and flags the Makefile uses for lab units;
#   BASE_DIR/stamp  a hash of every exported file: a base whose stamp matches is reused
#                   (KN_GRADE_REUSE_BASE=1: reuse any complete base, for batch runs).
# Run from the repository root. Concurrent callers (make -j grade-all) serialise on a lock.
# Exit 0 with the base ready; otherwise the staff tree does not build (not the student's
# fault): the messages are printed and the exit status is 2.
set -u
lab=$1 base=$2
repo=$(pwd)
mkdir -p "$base"
exec 9>"$base.lock"
flock 9

files=$(mktemp); trap 'rm -f "$files"' EXIT
git -C "$repo" ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
    [ -f "$f" ] && [ ! -L "$f" ] && printf '%s\0' "$f"
done > "$files"
stamp=$( (xargs -0 sha256sum < "$files"; echo "lab=$lab cc=${CC:-cc}") | sha256sum | cut -c1-64)
if [ -f "$base/stamp" ] && [ -d "$base/tree" ] &&
   { [ "${KN_GRADE_REUSE_BASE:-0}" = 1 ] || [ "$(cat "$base/stamp")" = "$stamp" ]; }; then
    exit 0
fi
echo "grader: preparing the grading base of lab $lab in $base (once per tree state)"
rm -rf "$base/tree" "$base/view" "$base/stamp" "$base/flags"
mkdir -p "$base/tree"
tar --null -T "$files" -cf - | tar -xf - -C "$base/tree"
cp tests/grader/kn_test_grade.c "$base/tree/tests/harness/kn_test.c"

log=$base/build.log
if ! make -C "$base/tree" --no-print-directory -j"$(nproc)" BUILD_ROOT=build SAN=0 \
        LAB="$lab" IMPL=labs PRIOR=solutions build/lab"$lab"-labs-solutions/test-lab"$lab" \
        build/lab"$lab"-labs-solutions/test-lab"$lab"-hidden > "$log" 2>&1; then
    echo "grader: the staff tree of lab $lab does not build; this is not the submission's fault:"
    tail -n 30 "$log"
    exit 2
fi
make -C "$base/tree" --no-print-directory -s BUILD_ROOT=build SAN=0 LAB="$lab" grade-print-flags \
    > "$base/flags" 2>>"$log" || { echo "grader: could not read the unit flags"; exit 2; }

mkdir -p "$base/view"
tar --null -T "$files" -cf - | tar -xf - -C "$base/view"
rm -rf "$base/view/solutions" "$base/view/tests/grader" "$base/view"/tests/lab[0-9]*
echo "$stamp" > "$base/stamp"
