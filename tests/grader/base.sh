#!/usr/bin/env bash
# base.sh LAB BASE_DIR — prepare (or reuse) the grading base of lab LAB in BASE_DIR:
#   BASE_DIR/tree   a pristine export of the repository (files.sh: git ls-files, tracked
#                   files plus untracked ones git does not ignore, or the .kiln-files
#                   manifest of the autograder's copy, which is no git checkout) with the grader's hardened KN_TEST
#                   hook (kn_test_grade.c) in place of tests/harness/kn_test.c, whose two
#                   test binaries (public, hidden) are built once with the lab's skeleton
#                   units (IMPL=labs PRIOR=solutions), so
#                   each submission only recompiles its own units and relinks;
#   BASE_DIR/view   what the student's code is compiled in: the same export without
#                   solutions/, without any hidden tests (tests/lab*/) and without the
#                   grader (tests/grader/);
#   BASE_DIR/flags  the compiler and flags the Makefile uses for lab units;
#   BASE_DIR/ref-times  each test's CPU seconds with the staff's units (reftime.py on the
#                   IMPL=solutions build in the tree), which scale the CPU limits;
#   BASE_DIR/stamp  a hash of every exported file but the rubrics: a base whose stamp matches is reused
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
bash "$repo/tests/grader/files.sh" > "$files" || {
    echo "grader: cannot list the staff tree (see above); this is not the submission's fault"; exit 2; }
# Rubrics are read from the tree at grading time (grade.sh), not built in: editing one does
# not rebuild the base.
# KN_GRADE_CUDA=0 builds without CUDA even where nvcc is (the self-test: lab 01 has no GPU
# test, and nvcc is most of the build's time); grade.sh relinks with the same make-args.
margs=(); [ "${KN_GRADE_CUDA:-1}" = 0 ] && margs=(NVCC=)
# A lab with CUDA C units (cuda_*.c, lab 08's flash kernel) is graded under the CUDA
# emulator: with nvcc, make would compile the submission's unit for the GPU itself, as this
# user and outside compile-units.sh's sandbox and checks. Its GPU tests skip (they earn
# KN_GRADE_SKIP_WEIGHT); students run them with `make test-lab08` on a GPU.
compgen -G "$repo/labs/lab$lab-*/cuda_*.c" > /dev/null && margs=(NVCC=)
# Test binaries linked with full RELRO (-z now): their tables of library addresses (the GOT)
# are read-only before any test code runs, so a unit cannot redirect the harness's or
# Criterion's calls by writing there (and may not call mprotect: grade.sh's vetting).
ld=$(make -s --no-print-directory -C "$repo" SAN=0 grade-print-ldflags 2>/dev/null)
margs+=("LDFLAGS=${ld#LDFLAGS=} -Wl,-z,relro,-z,now")
stamp=$( (tr '\0' '\n' < "$files" | grep -vE '^tests/lab[0-9]+/rubric\.txt$' | tr '\n' '\0' |
          xargs -0 -r sha256sum; echo "lab=$lab cc=${CC:-cc} ${margs[*]}") | sha256sum | cut -c1-64)
if [ -f "$base/stamp" ] && [ -d "$base/tree" ] &&
   { [ "${KN_GRADE_REUSE_BASE:-0}" = 1 ] || [ "$(cat "$base/stamp")" = "$stamp" ]; }; then
    exit 0
fi
echo "grader: preparing the grading base of lab $lab in $base (once per tree state)"
rm -rf "$base/tree" "$base/view" "$base/stamp" "$base/flags" "$base/ref-times" "$base/make-args"
mkdir -p "$base/tree"
tar --null -T "$files" -cf - | tar -xf - -C "$base/tree"
cp tests/grader/kn_test_grade.c "$base/tree/tests/harness/kn_test.c"

log=$base/build.log
if ! make -C "$base/tree" --no-print-directory -j"$(nproc)" BUILD_ROOT=build SAN=0 "${margs[@]}" \
        LAB="$lab" IMPL=labs PRIOR=solutions build/lab"$lab"-labs-solutions/test-lab"$lab" \
        build/lab"$lab"-labs-solutions/test-lab"$lab"-hidden > "$log" 2>&1; then
    echo "grader: the staff tree of lab $lab does not build; this is not the submission's fault:"
    tail -n 30 "$log"
    exit 2
fi
# The staff's build of the lab (IMPL=solutions): its objects of the lab's units are what a
# unit is graded beside (the unit-level score), and its tests' CPU times scale the limits.
if ! make -C "$base/tree" --no-print-directory -j"$(nproc)" BUILD_ROOT=build SAN=0 "${margs[@]}" \
        LAB="$lab" IMPL=solutions PRIOR=solutions build/lab"$lab"-solutions-solutions/test-lab"$lab" \
        build/lab"$lab"-solutions-solutions/test-lab"$lab"-hidden >> "$log" 2>&1; then
    echo "grader: the staff's solution of lab $lab does not build; this is not the submission's fault:"
    tail -n 30 "$log"
    exit 2
fi
(cd "$base/tree" && python3 tests/grader/reftime.py build/lab"$lab"-solutions-solutions/test-lab"$lab" \
    build/lab"$lab"-solutions-solutions/test-lab"$lab"-hidden) > "$base/ref-times" 2>> "$log" ||
    { echo "grader: could not time the reference solution's tests"; tail -n 5 "$log"; exit 2; }
for a in "${margs[@]}"; do echo "$a"; done > "$base/make-args"
make -C "$base/tree" --no-print-directory -s BUILD_ROOT=build SAN=0 "${margs[@]}" LAB="$lab" grade-print-flags \
    > "$base/flags" 2>>"$log" || { echo "grader: could not read the unit flags"; exit 2; }

mkdir -p "$base/view"
tar --null -T "$files" -cf - | tar -xf - -C "$base/view"
rm -rf "$base/view/solutions" "$base/view/tests/grader" "$base/view"/tests/lab[0-9]*
(cd "$base/view" && bash core/mk/units.sh core | xargs -r rm -f)  # the references core/ owns
echo "$stamp" > "$base/stamp"
