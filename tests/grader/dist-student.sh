#!/usr/bin/env bash
# dist-student.sh make OUT           write the student tree to OUT/ and OUT.tar.gz (make dist-student)
# dist-student.sh check OUT [RESULTS] check a student tree (make test: tests/student.mk)
#
# The student tree is the repository's TRACKED files as staged in the index (git
# checkout-index: an untracked or ignored file is never shipped, nor an unstaged edit),
# without solutions/, the hidden tests and rubrics (tests/labNN/), the grader
# (tests/grader/, tests/grade.mk) and this check's make fragment (tests/student.mk); plus
# staff/: every lab's reference units compiled for this machine, without source or debug
# information (staff/labNN-x/unit.o, staff/README.md). With staff/ there, the Makefile's
# default is PRIOR=staff, so `make labNN && make test-labNN` works for any lab in any
# order: the other labs' units are the staff's, never the student's unfinished skeletons.
#
# `make` refuses when labs/ (in the index) is not what `make skeletons` generates from
# solutions/ (an instructor's solved unit in labs/ would otherwise ship). Nothing
# lab-specific is written here: every labs/labNN-x/ with a solutions/labNN-x/ is treated
# alike, so new labs get the same treatment.
#
# `check` verifies, one recorded test each (in RESULTS when given; without RESULTS, as the
# grader's self-test calls it, only the leaks and each skeleton):
#   dist-leaks        no solutions/, hidden tests, grader, SOLUTION region, or pointer to
#                     solutions/labNN in a file a student sees; every lab has staff units
#   labNN-skeleton    the untouched skeleton builds from the tree's own folder (PRIOR=staff)
#                     and its public tests fail cleanly: "not implemented (labNN", no crash
#   labNN-solution    the reference units (from the index) copied into labs/ pass the
#                     public tests there
#   labNN-handout     every example failure in the handout is printed by the public tests
#                     for the mistake it names (tests/harness/handout_failures.py)
#   labNN-same        both give, test by test, the results they give in the repository
#                     (IMPL=labs|solutions PRIOR=solutions)
# Object files of the repository's build ($BUILD_ROOT/obj, default build/obj) whose
# sources and headers are byte-identical in the tree are reused (copied) so that the tree
# does not recompile the core; everything else compiles in the tree itself.
# Run from the repository root.
set -u
mode=${1:-} out=${2:-}
repo=$(pwd)
broot=${BUILD_ROOT:-build}

# Tracked files that a student may see (NUL-separated paths on stdout).
shipped_files() {
    local units; units=$(bash core/mk/units.sh core)  # the references core/ owns (solutions/ links to them)
    git ls-files -z --cached | while IFS= read -r -d '' f; do
        case $f in
            solutions/*|tests/lab[0-9]*|tests/grader/*|tests/grade.mk|tests/student.mk|tests/student-tree/*) continue ;;
        esac
        grep -qxF -- "$f" <<< "$units" && continue
        printf '%s\0' "$f"
    done
}

# The labs that have a reference: lab directory names (labNN-x), one a line.
solution_labs() { (cd "$1/solutions" 2>/dev/null && ls -d lab[0-9][0-9]-* 2>/dev/null); }

# seed_objects TREE: copy the repository's up-to-date objects whose every dependency is
# byte-identical in TREE, then make them newer than TREE's sources.
seed_objects() {
    local tree=$1 d o rel deps ok f n=0
    [ -d "$broot/obj" ] && cmp -s Makefile "$tree/Makefile" || return 0
    while IFS= read -r -d '' d; do
        o=${d%.d}.o; [ -f "$o" ] || continue
        deps=$(sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$d" | head -n 1 | cut -d: -f2-)
        ok=1
        for f in $deps; do
            case $f in /*) continue ;; esac  # system headers
            if [ ! -f "$tree/$f" ] || ! cmp -s "$f" "$tree/$f" || [ "$f" -nt "$o" ]; then ok=0; break; fi
        done
        [ $ok = 1 ] || continue
        rel=${o#"$broot"/obj/}
        mkdir -p "$tree/build/obj/$(dirname "$rel")"
        cp "$o" "$d" "$tree/build/obj/$(dirname "$rel")/" && n=$((n + 1))
    done < <(find "$broot/obj" -path "$broot/obj/solutions" -prune -o -name '*.d' -print0)
    [ -d "$tree/build/obj" ] && find "$tree/build/obj" -type f -exec touch {} +
    # The Makefile's flags stamp (CUDA on or off): the same as the objects', and older.
    for f in "$broot"/obj/.flags-cuda*; do
        [ -f "$f" ] && [ -d "$tree/build/obj" ] && cp "$f" "$tree/build/obj/" && touch -d @1 "$tree/build/obj/$(basename "$f")"
    done
    echo "dist-student: reused $n object files of the repository's build"
}

# outcomes TAP: "name ok|fail" per test, sorted.
outcomes() {
    awk '/^ok - /{print $3, "ok"} /^not ok - /{print $4, "fail"}' "$1" | sort
}

case $mode in
make)
    [ -n "$out" ] || { echo "usage: dist-student.sh make OUT"; exit 2; }
    idx=$(mktemp -d); trap 'rm -rf "$idx"' EXIT
    git checkout-index -a --prefix="$idx/" || { echo "dist-student: git checkout-index failed"; exit 1; }
    if ! (cd "$idx" && bash core/mk/skeleton.sh check > "$idx.skel.log" 2>&1); then
        echo "dist-student: refused: the units in labs/ (as staged) are not the skeletons that"
        echo "  'make skeletons' generates from solutions/; a solved or stale unit would ship:"
        sed 's/^/  /' "$idx.skel.log" | head -n 30; rm -f "$idx.skel.log"; exit 1
    fi
    rm -f "$idx.skel.log"
    dirty=$(git diff --name-only | wc -l) untracked=$(git ls-files --others --exclude-standard | wc -l)
    [ "$dirty$untracked" = 00 ] ||
        echo "dist-student: note: $dirty unstaged edits and $untracked untracked files are not shipped (the index is)"
    # The staff units: the references compiled by the Makefile's own rule, debug info stripped.
    objs=()
    for lab in $(solution_labs "$idx"); do
        for c in "$idx"/solutions/"$lab"/*.c; do objs+=("build/obj/solutions/$lab/$(basename "${c%.c}").o"); done
    done
    if [ ${#objs[@]} -gt 0 ] &&
       ! make -C "$idx" --no-print-directory -j"$(nproc)" BUILD_ROOT=build SAN=0 CUDA=0 NVCC= "${objs[@]}" > "$idx/staff.log" 2>&1; then
        echo "dist-student: the reference units do not compile:"; tail -n 20 "$idx/staff.log"; exit 1
    fi
    # CUDA C units (cuda_*.c, lab 08's flash kernel): nvcc's build too, where nvcc is, so a
    # student tree built with CUDA links the staff's GPU kernel (without it, such a build
    # stops with a line saying so).
    gobjs=()
    if [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ] || command -v nvcc > /dev/null; then
        for o in "${objs[@]}"; do [[ $(basename "$o") == cuda_*.o ]] && gobjs+=("${o%.o}.gpu.o"); done
    fi
    if [ ${#gobjs[@]} -gt 0 ] &&
       ! make -C "$idx" --no-print-directory -j"$(nproc)" BUILD_ROOT=build SAN=0 CUDA=1 "${gobjs[@]}" >> "$idx/staff.log" 2>&1; then
        echo "dist-student: the reference CUDA units do not compile with nvcc:"; tail -n 20 "$idx/staff.log"; exit 1
    fi
    objs+=("${gobjs[@]}")
    rm -rf "$out" "$out.tar.gz"; mkdir -p "$out"
    shipped_files > "$idx.list"
    (cd "$idx" && tar --null -T "$idx.list" -cf -) | tar -xf - -C "$out"; rm -f "$idx.list"
    for o in "${objs[@]}"; do
        rel=${o#build/obj/solutions/}
        mkdir -p "$out/staff/$(dirname "$rel")"
        strip --strip-debug -o "$out/staff/$rel" "$idx/$o" || exit 1
    done
    cat > "$out/staff/README.md" <<EOF
# staff/ — the reference units, compiled

Every lab's reference units as object files, without source or debug information, built by
\`make dist-student\` on $(uname -m) with $("${CC:-cc}" --version | head -n 1) and the Makefile's flags.
The Makefile links them for every lab you are not building (PRIOR=staff, the default
here), so each lab can be done alone and in any order. \`make labNN PRIOR=labs\` uses
your own units of the other labs instead. If your machine cannot link them (another
architecture), ask the staff for a tree built there.
EOF
    tar -czf "$out.tar.gz" -C "$(dirname "$out")" "$(basename "$out")"
    echo "dist-student: $(find "$out" -type f | wc -l) files ($(find "$out/staff" -name '*.o' | wc -l) staff objects) in $out and $out.tar.gz"
    ;;
check)
    [ -n "$out" ] || { echo "usage: dist-student.sh check OUT [RESULTS]"; exit 2; }
    results=${3:-}
    tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
    rdir=${results:-$tmp/results}; mkdir -p "$rdir"
    status=0
    record() { # record NAME OK|FAIL MESSAGE
        if [ "$2" = OK ]; then echo "1 0 0 0" > "$rdir/student-$1.count"; echo "student-$1: $3: 1 passed, 0 failed"
        else echo "0 1 0 0" > "$rdir/student-$1.count"; echo "student-$1: $3: 0 passed, 1 failed"; status=1; fi
    }
    why=""
    [ -e "$out/solutions" ] && why="$why solutions/ is present;"
    compgen -G "$out/tests/lab[0-9]*" > /dev/null && why="$why hidden tests (tests/labNN/) are present;"
    [ -e "$out/tests/grader" ] && why="$why the grader is present;"
    leak=$(grep -rlE 'BEGIN SOLUTION|END SOLUTION' "$out" --include='*.c' --include='*.h' --include='*.cu' | head -3)
    [ -n "$leak" ] && why="$why solution regions in: $leak;"
    # test_make_cli.sh checks the mutants tool's keys on a solution file: staff tooling
    # that names the path as data, not a pointer for students.
    ptr=$(cd "$out" && grep -rlE 'solutions/lab[0-9]' --exclude=ARCHITECTURE.md --exclude=skeleton.sh --exclude=test_make_cli.sh . | head -5)
    [ -n "$ptr" ] && why="$why files point students at solutions/labNN, which they do not have: $ptr;"
    for lab in $(solution_labs "$repo"); do
        compgen -G "$out/staff/$lab/*.o" > /dev/null || why="$why no staff units for $lab;"
    done
    if [ -n "$why" ]; then record leaks FAIL "leaks:$why"; else record leaks OK "nothing of the staff's leaks"; fi

    cp -a "$out" "$tmp/tree"
    git checkout-index --prefix="$tmp/idx/" -- $(git ls-files solutions $(bash core/mk/units.sh core)) 2>/dev/null
    seed_objects "$tmp/tree"
    labs=$(cd "$tmp/tree/labs" && ls -d lab[0-9][0-9]-* 2>/dev/null)
    [ -n "$labs" ] || { record labs FAIL "no labs in the student tree"; exit 1; }
    # SAN=0: the student tree is checked as a student builds it, also under `make SAN=1 test`
    # (whose SAN=1 reaches this script through the environment and MAKEFLAGS).
    tmake() { make -C "$tmp/tree" --no-print-directory -j"$(nproc)" BUILD_ROOT=build SAN=0 "$@"; }
    for lab in $labs; do
        l=${lab#lab}; l=${l%%-*}
        if ! tmake lab"$l" > "$tmp/build-$l.log" 2>&1; then
            record "lab$l-skeleton" FAIL "lab$l does not build from the student tree"; tail -n 20 "$tmp/build-$l.log"; continue
        fi
        if ! compgen -G "$tmp/tree/labs/$lab/tests/*.c" > /dev/null; then
            record "lab$l-skeleton" OK "lab$l builds from the student tree (no public tests yet)"; continue
        fi
        # 1. the untouched skeleton, with the staff's units of the other labs
        tmake test-lab"$l" RESULTS="$tmp/tree/build/r-$l-skel" > "$tmp/skel-$l.log" 2>&1
        rc=$?
        last=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$tmp/skel-$l.log" | tail -n 1)
        if [ $rc -eq 0 ]; then
            record "lab$l-skeleton" FAIL "lab$l's public tests pass on the skeleton"
        elif ! grep -q "not implemented (lab$l" "$tmp/skel-$l.log" || grep -q 'CRASH' "$tmp/skel-$l.log"; then
            record "lab$l-skeleton" FAIL "lab$l's public tests did not fail cleanly on the skeleton"; tail -n 20 "$tmp/skel-$l.log"
        else
            record "lab$l-skeleton" OK "lab$l's skeleton builds with the staff units and fails cleanly ($last)"
        fi
        # 2. the reference units copied in (the full check: make test's, with RESULTS)
        [ -n "$results" ] || continue
        if ! compgen -G "$tmp/idx/solutions/$lab/*.c" > /dev/null; then continue; fi
        mkdir -p "$tmp/skel-units-$l" && cp "$tmp/tree/labs/$lab/"*.c "$tmp/skel-units-$l/"
        cp -L "$tmp/idx/solutions/$lab/"*.c "$tmp/tree/labs/$lab/"
        tmake test-lab"$l" RESULTS="$tmp/tree/build/r-$l-sol" > "$tmp/sol-$l.log" 2>&1
        rc=$?
        cp "$tmp/skel-units-$l/"*.c "$tmp/tree/labs/$lab/"
        if [ $rc -eq 0 ]; then
            record "lab$l-solution" OK "lab$l's reference units pass the public tests in the student tree ($(grep -E '^[0-9]+ passed' "$tmp/sol-$l.log" | tail -n 1))"
        else
            record "lab$l-solution" FAIL "lab$l's reference units fail the public tests in the student tree"; tail -n 30 "$tmp/sol-$l.log"
        fi
        # 3. every example failure in the handout is one the public tests print
        if python3 "$tmp/tree/tests/harness/handout_failures.py" "$tmp/tree" "$lab" "$tmp/idx/solutions/$lab" \
               > "$tmp/handout-$l.log" 2>&1; then
            record "lab$l-handout" OK "lab$l's handout shows failures the tests really print ($(grep -c 'is what the tests print' "$tmp/handout-$l.log") examples)"
        else
            record "lab$l-handout" FAIL "lab$l's handout shows a failure the tests do not print"; tail -n 30 "$tmp/handout-$l.log"
        fi
        # 4. the same results as in the repository, test by test
        same=1 diffs=""
        for impl in labs solutions; do
            tag=$([ $impl = labs ] && echo skel || echo sol)
            make --no-print-directory -j"$(nproc)" test-lab"$l" IMPL=$impl PRIOR=solutions \
                RESULTS="$tmp/repo-$l-$tag" > "$tmp/repo-$l-$tag.log" 2>&1
            if ! diff <(outcomes "$tmp/repo-$l-$tag/lab$l.tap" 2>/dev/null) \
                      <(outcomes "$tmp/tree/build/r-$l-$tag/lab$l.tap" 2>/dev/null) > "$tmp/diff-$l-$tag"; then
                same=0; diffs="$diffs $tag:$(grep -c '^[<>]' "$tmp/diff-$l-$tag")"
            fi
            [ -s "$tmp/repo-$l-$tag/lab$l.tap" ] || { same=0; diffs="$diffs $tag:no-repository-results"; }
        done
        if [ $same = 1 ]; then
            record "lab$l-same" OK "lab$l: skeleton and reference give the same results, test by test, as in the repository"
        else
            record "lab$l-same" FAIL "lab$l: results differ from the repository's ($diffs; < repository, > student tree)"
            cat "$tmp"/diff-"$l"-* | head -n 20
        fi
    done
    exit $status
    ;;
*) echo "usage: dist-student.sh make OUT | check OUT [RESULTS]"; exit 2 ;;
esac
