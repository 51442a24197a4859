#!/usr/bin/env bash
# autograder.sh LAB ZIP — write the Gradescope autograder ZIP of lab LAB (make autograder):
#   setup.sh         installs the build dependencies on Gradescope's Ubuntu image, builds
#                    the grading base once, and locks the staff tree away from the
#                    student's user
#   run_autograder   grades /autograder/submission with tests/grader/grade.sh and writes
#                    /autograder/results/results.json
#   kiln/            the pristine tree (git ls-files), without build outputs and without the
#                    grader's planted submissions
# Run from the repository root.
set -eu
lab=$1 zip=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/kiln" "$(dirname "$zip")"
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
    [ -f "$f" ] && [ ! -L "$f" ] || continue
    case $f in tests/grader/planted/*) continue ;; esac
    printf '%s\0' "$f"
done | tar --null -T - -cf - | tar -xf - -C "$tmp/kiln"
for f in setup.sh run_autograder; do
    sed "s/@LAB@/$lab/" "tests/grader/autograder/$f" > "$tmp/$f"; chmod 755 "$tmp/$f"
done
zip="$(realpath "$(dirname "$zip")")/$(basename "$zip")"
rm -f "$zip"
(cd "$tmp" && zip -qr "$zip" setup.sh run_autograder kiln)
echo "autograder: $zip (lab $lab: upload it as the assignment's autograder on Gradescope)"
