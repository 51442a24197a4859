#!/usr/bin/env bash
# dist-student.sh make OUT     write the student tree to OUT/ and OUT.tar.gz (make dist-student)
# dist-student.sh check OUT    check a student tree: nothing that must stay with the staff is
#                              in it, it builds from its own folder, and every lab's public
#                              tests run and fail cleanly on the skeleton (no crash, the
#                              failures say "not implemented")
# The student tree is the repository's files (git ls-files: tracked plus untracked ones git
# does not ignore) without solutions/, without the hidden tests and rubrics (tests/labNN/),
# without the grader (tests/grader/ with its planted submissions, tests/grade.mk). The labs'
# units in labs/ are the generated skeletons (make skeletons; make test checks they are
# fresh). Run from the repository root.
set -u
mode=$1 out=$2
case $mode in
make)
    rm -rf "$out" "$out.tar.gz"; mkdir -p "$out"
    git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
        [ -f "$f" ] && [ ! -L "$f" ] || continue
        case $f in
            solutions/*|tests/lab[0-9]*|tests/grader/*|tests/grade.mk) continue ;;
        esac
        printf '%s\0' "$f"
    done | tar --null -T - -cf - | tar -xf - -C "$out"
    tar -czf "$out.tar.gz" -C "$(dirname "$out")" "$(basename "$out")"
    echo "dist-student: $(find "$out" -type f | wc -l) files in $out and $out.tar.gz"
    ;;
check)
    why=""
    [ -e "$out/solutions" ] && why="$why solutions/ is present;"
    compgen -G "$out/tests/lab[0-9]*" > /dev/null && why="$why hidden tests (tests/labNN/) are present;"
    [ -e "$out/tests/grader" ] && why="$why the grader is present;"
    leak=$(grep -rlE 'BEGIN SOLUTION|END SOLUTION' "$out" --include='*.c' --include='*.h' --include='*.cu' | head -3)
    [ -n "$leak" ] && why="$why solution regions in: $leak;"
    [ -n "$why" ] && { echo "dist-student: leaks:$why"; exit 1; }
    tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
    cp -a "$out" "$tmp/tree"
    labs=$(cd "$tmp/tree/labs" && ls -d lab[0-9][0-9]-* 2>/dev/null | sed 's/^lab\([0-9]*\)-.*/\1/')
    [ -n "$labs" ] || { echo "dist-student: no labs in the student tree"; exit 1; }
    status=0
    for l in $labs; do
        if ! make -C "$tmp/tree" --no-print-directory -j"$(nproc)" BUILD_ROOT=build lab"$l" > "$tmp/build-$l.log" 2>&1; then
            echo "dist-student: lab$l does not build from the student tree:"; tail -n 20 "$tmp/build-$l.log"
            status=1; continue
        fi
        if ! compgen -G "$tmp/tree/labs/lab$l-*/tests/*.c" > /dev/null; then
            echo "dist-student: lab$l builds from the student tree (it has no public tests yet)"; continue
        fi
        (cd "$tmp/tree" && make --no-print-directory BUILD_ROOT=build test-lab"$l") > "$tmp/test-$l.log" 2>&1
        rc=$?
        last=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$tmp/test-$l.log" | tail -n 1)
        if [ $rc -eq 0 ]; then
            echo "dist-student: lab$l's public tests pass on the skeleton"; status=1
        elif ! grep -q "not implemented (lab$l" "$tmp/test-$l.log" || grep -q 'CRASH' "$tmp/test-$l.log"; then
            echo "dist-student: lab$l's public tests did not fail cleanly on the skeleton:"; tail -n 20 "$tmp/test-$l.log"
            status=1
        else
            echo "dist-student: lab$l builds from the student tree; its public tests run and fail on the skeleton ($last)"
        fi
    done
    exit $status
    ;;
*) echo "usage: dist-student.sh make|check OUT"; exit 2 ;;
esac
