#!/usr/bin/env bash
# selftest.sh BUILD_ROOT RESULTS — the grader's tests, run by `make test` (step "grader").
# Each check is one recorded test in RESULTS (tests/harness/record.sh: a .count file):
#   rubric-refused                a rubric with a renamed entry, a bogus one and a wrong
#                                 total is refused by rubric-check, naming each
#   grader-gradescope-setup       make autograder's zip, unpacked into a scratch root that
#                                 mimics Gradescope's /autograder (mimic.sh: bwrap, no git,
#                                 no checkout), builds from scratch through its own setup.sh
#                                 (its base is then the base of every check below); without
#                                 root or bwrap it is skipped, saying so, and base.sh builds
#                                 the base (so does a failed setup, after the failure)
#   grader-gradescope-CASE        run_autograder in that root grades planted submissions
#   grader-planted-CASE           each planted submission (made by tests/grader/planted/lab01/plant.py) is
#                                 graded to its expected score range, build state and reason
#                                 (expected.txt), with valid results.json and junit.xml
#   grader-gradebook              make grade-all wrote one row per planted submission
#   grader-no-leftovers           no process of the sandbox's user ids survived grading
#   grader-mpi-gpu                an MPI test on 2 ranks and a GPU test that skips itself,
#                                 run by the same runner (tests/grader/demo/run-demo.sh)
#   grader-archive-tgz/-zip       make grade on a .tar.gz (wrapped, with extra files, which
#                                 are ignored and listed) and a .zip (files at the root)
#   grader-vetting                constructors, replaced libc functions, calls of the hook,
#                                 includes/.incbin of files outside the student view refused,
#                                 also a file under a 0700 folder (as a checkout cloned into
#                                 `mktemp -d` is: the compile user cannot even open it)
#   grader-warnings               a compiler warning costs nothing (reported in 'build')
#   grader-unit-level             a correct unit scores in full beside the staff's other
#                                 units when the others are the skeleton's (scoring unit)
#   grader-hidden-brief           KN_GRADE_HIDDEN_DETAILS=brief shows no hidden assertion
#   grader-link-escape            unit files that are links to the solutions are not taken
#   grader-refuses-out-in-sub     GRADE_OUT inside the submission is refused
#   grader-dist-student           make dist-student leaks nothing, builds from its own
#                                 folder, and its public tests run and fail on the skeleton
# Short limits keep it fast (a hanging test costs KN_GRADE_WALL seconds), and the base is
# built without CUDA (KN_GRADE_CUDA=0: lab 01 has no GPU test): about 3 minutes on 2 cores,
# most of it the two builds (the grading base and the student tree).
set -u
broot=$1 results=$2
rec=tests/harness/record.sh
here=tests/grader expected=tests/grader/planted/lab01/expected.txt
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
planted=$tmp/planted
python3 $here/planted/lab01/plant.py "$planted" || { echo "plant.py failed"; exit 1; }
export KN_GRADE_WALL=${KN_GRADE_WALL:-3} KN_GRADE_CPU=${KN_GRADE_CPU:-2} KN_GRADE_MEM_MB=${KN_GRADE_MEM_MB:-512}
export KN_GRADE_CUDA=${KN_GRADE_CUDA:-0}
base=$broot/grade-base/lab01
mkdir -p "$results"

# A broken rubric is refused, naming the entries: its first entry renamed, a bogus entry,
# a total that no longer adds up (in a copy of lab 01's test folder).
rubric_refused() {
    local d=$tmp/rub first
    mkdir -p "$d/tests/lab01" && ln -s "$(realpath labs)" "$d/labs" &&
    for f in tests/lab01/*; do ln -s "$(realpath "$f")" "$d/$f"; done &&
    rm "$d/tests/lab01/rubric.txt" &&
    first=$(awk '!/^#/ && $1 ~ /::/ { print $1; exit }' tests/lab01/rubric.txt) &&
    sed "s/^$first /${first}_renamed /" tests/lab01/rubric.txt > "$d/tests/lab01/rubric.txt" &&
    echo "lab01_reduce::planted_bogus_entry 3" >> "$d/tests/lab01/rubric.txt" || return 1
    python3 $here/rubric.py check 01 "$d" > "$tmp/rub.log"; local rc=$?
    cat "$tmp/rub.log"
    [ $rc = 1 ] && grep -q "${first}_renamed: no such test" "$tmp/rub.log" &&
        grep -q "planted_bogus_entry: no such test" "$tmp/rub.log" &&
        grep -q "$first (.*) has no entry" "$tmp/rub.log" && grep -q "but the rubric says 'total" "$tmp/rub.log"
}
bash $rec "$results" rubric-refused bash -c "$(declare -f rubric_refused); tmp=$tmp here=$here rubric_refused"
bash $rec "$results" rubric-refused-cases python3 $here/check.py rubric-cases

# The autograder zip, built from scratch as Gradescope builds it: its own setup.sh in a
# scratch root that mimics /autograder. Its grading base is the one every check below uses.
agroot=$tmp/agroot
gs_setup() {
    make --no-print-directory autograder LAB=01 BUILD_ROOT="$tmp/ag-build" || return 1
    unzip -l "$tmp/ag-build/autograder-lab01.zip" > "$tmp/zip.list"
    for f in setup.sh run_autograder kiln/Makefile kiln/.kiln-files kiln/tests/grader/grade.sh kiln/tests/lab01/rubric.txt; do
        grep -q " $f\$" "$tmp/zip.list" || { echo "missing $f in the zip"; return 1; }
    done
    ! grep -qE ' kiln/(tests/grader/planted|build|\.git)/' "$tmp/zip.list" || { echo "planted submissions, build outputs or .git in the zip"; return 1; }
    bash $here/mimic.sh setup "$tmp/ag-build/autograder-lab01.zip" "$agroot" &&
        [ -f "$agroot/source/kiln/build/grade-base/lab01/stamp" ]
}
if [ "$(id -u)" != 0 ] || ! command -v bwrap > /dev/null; then
    # mimic.sh needs root (setup.sh and run_autograder run as root) and bwrap: say so.
    echo "0 0 0 1" > "$results/grader-gradescope-setup.count"
    echo "grader-gradescope-setup: skipped (the mimicked Gradescope root needs root and bwrap)"
    bash $rec "$results" grader-base bash $here/base.sh 01 "$base" || exit 1
elif bash $rec "$results" grader-gradescope-setup bash -c "$(declare -f gs_setup); tmp=$tmp here=$here agroot=$agroot gs_setup"; then
    rm -rf "$base"; mkdir -p "$(dirname "$base")" && cp -a "$agroot/source/kiln/build/grade-base/lab01" "$base" || exit 1
else
    bash $rec "$results" grader-base bash $here/base.sh 01 "$base" || exit 1
fi
export KN_GRADE_REUSE_BASE=1

# The student tree builds while the planted submissions are graded (two cores: the build
# is CPU-bound, grading mostly waits on limits).
( bash $here/dist-student.sh make "$tmp/dist/kiln" > "$tmp/dist.log" 2>&1 &&
  bash $here/dist-student.sh check "$tmp/dist/kiln" >> "$tmp/dist.log" 2>&1; echo $? > "$tmp/dist.rc" ) &
dist_pid=$!

# The other checks run beside the batch too (each grades one submission; their output is
# shown after the batch's).
extras() {
    bash $rec "$results" grader-mpi-gpu bash $here/demo/run-demo.sh

    # Archives, through make grade.
    mkdir -p "$tmp/tgz/alice/labs/lab01-tensors/tests" "$tmp/zip"
    cp $planted/correct/*.c "$tmp/tgz/alice/labs/lab01-tensors/"
    echo 'all: ; @echo 100 passed, 0 failed' > "$tmp/tgz/alice/Makefile"
    echo 'int not_a_unit;' > "$tmp/tgz/alice/labs/lab01-tensors/tests/test_reduce.c"
    tar -czf "$tmp/alice.tar.gz" -C "$tmp/tgz" alice
    (cd $planted/correct && zip -q "$tmp/bob.zip" ./*.c)
    check_archive() { # check_archive ARCHIVE OUT: full score, and extra files listed as ignored
        make --no-print-directory grade LAB=01 SUBMISSION="$1" GRADE_OUT="$2" BUILD_ROOT="$broot" &&
            python3 $here/check.py case "$2" 100 100 ok - &&
            if [ "$(basename "$1")" = alice.tar.gz ]; then
                grep -q 'ignored 2 other file' "$2/summary.txt" && grep -q 'alice/Makefile' "$2/summary.txt"
            fi
    }
    bash $rec "$results" grader-archive-tgz bash -c "$(declare -f check_archive); broot=$broot here=$here planted=$planted check_archive $tmp/alice.tar.gz $tmp/out-alice"
    bash $rec "$results" grader-archive-zip bash -c "$(declare -f check_archive); broot=$broot here=$here planted=$planted check_archive $tmp/bob.zip $tmp/out-bob"
    # Units that try to get around the build rules are refused at build time (score 0, the
    # reason in the test "build"): a constructor, a libc function replaced, the hook called, an
    # #include of the reference solution by absolute path, an .incbin of it.
    vet() { # vet NAME 'C code appended to reduce.c' 'regex the build output must match'
        mkdir -p "$tmp/vet/$1" && cp $planted/correct/*.c "$tmp/vet/$1/" && printf '%s\n' "$2" >> "$tmp/vet/$1/reduce.c" &&
        make --no-print-directory grade LAB=01 SUBMISSION="$tmp/vet/$1" GRADE_OUT="$tmp/vet-out/$1" BUILD_ROOT="$broot" \
            > /dev/null 2>&1 && python3 $here/check.py case "$tmp/vet-out/$1" 0 0 failed - > /dev/null &&
        grep -qE "$3" "$tmp/vet-out/$1/build.log" && echo "refused $1: $(grep -m1 -E "$3" "$tmp/vet-out/$1/build.log")"
    }
    vet_all() {
        local sol; sol=$(realpath solutions/lab01-tensors/reduce.c)
        vet ctor 'volatile int planted_flag;
    __attribute__((constructor)) static void planted(void) { planted_flag = 1; }' 'constructors' &&
        vet interpose '#include <stdio.h>
    int fputs(const char *s, FILE *f) { (void)s; (void)f; return 0; }' 'replace the C library' &&
        vet hook 'void kn_test_done(void); void planted(void); void planted(void) { kn_test_done(); }' 'may not use: kn_test_done' &&
        vet include "#include \"$sol\"" 'outside the lab' &&
        mkdir -p "$tmp/locked/kiln/solutions/lab01-tensors" && cp "$sol" "$tmp/locked/kiln/solutions/lab01-tensors/" &&
        chmod 700 "$tmp/locked" &&
        vet include_0700 "#include \"$tmp/locked/kiln/solutions/lab01-tensors/reduce.c\"" 'outside the lab' &&
        vet incbin "__asm__(\".incbin \\\"$sol\\\"\");" 'incbin' &&
        vet mprotect '#include <stdint.h>
    #include <sys/mman.h>
    void planted(void); void planted(void) { mprotect((void *)((uintptr_t)&planted & ~(uintptr_t)4095), 4096, 7); }' 'may not use: .*mprotect' &&
        vet asm_syscall 'void planted(void); void planted(void) { long r; __asm__ volatile("syscall" : "=a"(r) : "0"(39L) : "rcx", "r11", "memory"); (void)r; }' 'system call instructions' &&
        vet harness_fail 'void kn_mpi_test_fail(const char *, int, const char *, ...); void planted(void); void planted(void) { kn_mpi_test_fail("", 0, ""); }' 'may not use: kn_mpi_test_fail'
    }
    bash $rec "$results" grader-vetting bash -c "$(declare -f vet vet_all); tmp=$tmp broot=$broot here=$here planted=$planted vet_all"

    # A submission whose unit files are links into the staff tree (the reference solution) must
    # be graded as if they were missing: the skeleton, score 0.
    mkdir -p "$tmp/eve/labs"
    ln -s "$(realpath solutions/lab01-tensors)" "$tmp/eve/labs/lab01-tensors"
    ln -s "$(realpath solutions/lab01-tensors/reduce.c)" "$tmp/eve/reduce.c"
    tar -czf "$tmp/eve.tar.gz" -C "$tmp/eve" labs reduce.c
    bash $rec "$results" grader-link-escape bash -c "make --no-print-directory grade LAB=01 SUBMISSION=$tmp/eve.tar.gz \
        GRADE_OUT=$tmp/out-eve BUILD_ROOT=$broot && python3 $here/check.py case $tmp/out-eve 0 0 ok - &&
        grep -q 'no reduce.c in the submission' $tmp/out-eve/summary.txt"
    bash $rec "$results" grader-refuses-out-in-sub bash -c \
        "cp -r $planted/correct $tmp/carol && ! make --no-print-directory grade LAB=01 SUBMISSION=$tmp/carol GRADE_OUT=$tmp/carol/out BUILD_ROOT=$broot && [ ! -e $tmp/carol/out ]"

    # Warnings are reported, not scored: an unused variable still scores 100.
    mkdir -p "$tmp/warn" && cp $planted/correct/*.c "$tmp/warn/" &&
        printf 'int planted_warning(void);\nint planted_warning(void) { int unused = 1; return 0; }\n' >> "$tmp/warn/reduce.c"
    bash $rec "$results" grader-warnings bash -c "make --no-print-directory grade LAB=01 SUBMISSION=$tmp/warn \
        GRADE_OUT=$tmp/out-warn BUILD_ROOT=$broot && python3 $here/check.py case $tmp/out-warn 100 100 ok - &&
        grep -q 'unused variable' $tmp/out-warn/build.log && grep -q 'warnings cost no points' $tmp/out-warn/summary.txt"
    # Unit level: correct broadcast.c and reduce.c beside the skeleton's strided.c (whose
    # unfinished kn_index_next the reductions call). With `scoring unit`, reduce.c's tests
    # pass beside the staff's strided.c, and reduce.c scores in full.
    mkdir -p "$tmp/units" && cp $planted/correct/broadcast.c $planted/correct/reduce.c "$tmp/units/" &&
        cp labs/lab01-tensors/strided.c "$tmp/units/"
    bash $rec "$results" grader-unit-level bash -c "KN_GRADE_SCORING=unit make --no-print-directory grade LAB=01 \
        SUBMISSION=$tmp/units GRADE_OUT=$tmp/out-units BUILD_ROOT=$broot && python3 $here/check.py units $tmp/out-units"
    # Hidden tests' assertions (which quote their source) can be left out of the report.
    bash $rec "$results" grader-hidden-brief bash -c "KN_GRADE_HIDDEN_DETAILS=brief make --no-print-directory grade LAB=01 \
        SUBMISSION=$planted/partly_wrong GRADE_OUT=$tmp/out-brief BUILD_ROOT=$broot &&
        python3 $here/check.py case $tmp/out-brief 50 99 ok - && python3 $here/check.py brief $tmp/out-brief"

    # The autograder, run by Gradescope's rules in the mimicked root (mimic.sh grade): a
    # correct submission, a partly wrong one, one that does not compile.
    # The record forgery without bubblewrap (as in a container that forbids namespaces):
    # no process's command line or environment, and no file it can open, holds the secret.
    bash $rec "$results" grader-forge-nojail bash -c "KN_GRADE_JAIL=0 make --no-print-directory grade LAB=01 \
        SUBMISSION=$planted/forge_record GRADE_OUT=$tmp/out-forge-nojail BUILD_ROOT=$broot &&
        python3 $here/check.py case $tmp/out-forge-nojail 60 99 ok ended_before_reaching_its_end"

    gs() { # gs CASE MIN MAX BUILD
        local r; r=$(bash $here/mimic.sh grade "$agroot" "$planted/$1") || return 1
        mkdir -p "$tmp/gs-$1" && cp "$r" "$tmp/gs-$1/results.json" &&
            python3 $here/check.py schema "$tmp/gs-$1/results.json" &&
            python3 - "$tmp/gs-$1/results.json" "$2" "$3" "$4" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert float(sys.argv[2]) <= d["score"] <= float(sys.argv[3]), d["score"]
assert d["extra_data"]["build_ok"] == (sys.argv[4] != "failed"), d["extra_data"]
print("gradescope:", d["output"].splitlines()[0], "score", d["score"])
PY
    }
    if [ -f "$agroot/source/kiln/build/grade-base/lab01/stamp" ]; then
        while read -r c lo hi b; do
            bash $rec "$results" "grader-gradescope-$c" bash -c "$(declare -f gs); tmp=$tmp here=$here agroot=$agroot planted=$planted gs $c $lo $hi $b"
        done <<< "correct 100 100 ok
partly_wrong 50 99 ok
compile_error_all 0 0 failed"
    fi
}
extras > "$tmp/extras.log" 2>&1 &
extras_pid=$!

all=$tmp/all
make --no-print-directory -j2 grade-all LAB=01 SUBMISSIONS=$planted BUILD_ROOT="$broot" \
    GRADE_ALL_OUT="$all" > "$tmp/grade-all.log" 2>&1
grep -v '^#' $expected | while read -r c lo hi build why _; do
    [ -n "$c" ] || continue
    bash $rec "$results" "grader-planted-$c" python3 $here/check.py case "$all/students/$c" "$lo" "$hi" "$build" "$why"
done
n_cases=$(grep -cvE '^(#|$)' $expected)
bash $rec "$results" grader-gradebook python3 - "$all/gradebook.csv" "$n_cases" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
names = [r["submission"] for r in rows]
print("gradebook rows:", names)
assert len(rows) == int(sys.argv[2]) == len(set(names)), "one row per submission"
assert all(r["score"] != "" and r["error"] == "" for r in rows), "every submission graded"
EOF


wait "$extras_pid"
cat "$tmp/extras.log"
wait "$dist_pid"
bash $rec "$results" grader-dist-student bash -c "cat $tmp/dist.log; [ \"\$(cat $tmp/dist.rc)\" = 0 ]"
bash $rec "$results" grader-no-leftovers python3 $here/check.py leftovers
