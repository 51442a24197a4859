#!/usr/bin/env bash
# mpi-lab.sh NN BUILD_ROOT — the grader on a lab whose tests run as MPI ranks (lab 10):
# the reference units must score 100 / 100 through `make grade` (every test under
# mpiexec in the jail, with the grader's launch: -pmi-port, a cleared environment, a user
# of its own per test), and the generated skeleton must score less and end within 120 s
# (its collectives fail or time out with a message; nothing hangs). make test runs it
# (tests/grade.mk, step grader-mpi-labNN).
set -u
lab=$1 root=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/sol" "$work/skel"
cp solutions/lab$lab-*/*.c "$work/sol/" && cp labs/lab$lab-*/*.c "$work/skel/" || exit 1
grade() { make --no-print-directory grade LAB=$lab SUBMISSION="$1" GRADE_OUT="$2" BUILD_ROOT="$root" > "$2.log" 2>&1; }
grade "$work/sol" "$work/sol-out"
s=$(grep -m1 '^score:' "$work/sol-out.log")
[ "$s" = "score: 100 / 100" ] || { tail -n 40 "$work/sol-out.log"; echo "FAIL: the reference scored '$s'"; exit 1; }
echo "lab $lab reference: $s ($(grep -m1 'passed,' "$work/sol-out.log"))"
t0=$(date +%s)
timeout 300 make --no-print-directory grade LAB=$lab SUBMISSION="$work/skel" GRADE_OUT="$work/skel-out" \
    BUILD_ROOT="$root" > "$work/skel-out.log" 2>&1
t=$(( $(date +%s) - t0 )) s=$(grep -m1 '^score:' "$work/skel-out.log")
[ -n "$s" ] && [ "$s" != "score: 100 / 100" ] || { tail -n 40 "$work/skel-out.log"; echo "FAIL: the skeleton scored '$s'"; exit 1; }
[ $t -le 120 ] || { echo "FAIL: grading the skeleton took $t s"; exit 1; }
echo "lab $lab skeleton: $s in $t s"
