#!/usr/bin/env bash
# autograder.sh LAB ZIP — write the Gradescope autograder ZIP of lab LAB (make autograder):
#   setup.sh         installs what grading needs on Gradescope's Ubuntu image (and nothing
#                    else), builds the grading base once, and locks the staff tree away
#                    from the student's user; any failure fails the image build, loudly
#   run_autograder   grades /autograder/submission with tests/grader/grade.sh and writes
#                    /autograder/results/results.json
#   kiln/.kiln-grade-env  the KN_GRADE_* settings baked in (below), read by run_autograder
#   kiln/            the pristine tree (tests/grader/files.sh), without build outputs and
#                    without the grader's planted submissions, with the manifest
#                    kiln/.kiln-files listing it (the copy is no git checkout)
# Run from the repository root.
set -eu
lab=$1 zip=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 tests/grader/rubric.py check "$lab"
mkdir -p "$tmp/kiln" "$(dirname "$zip")"
bash tests/grader/files.sh > "$tmp/files"
[ -s "$tmp/files" ] || { echo "autograder: no files listed"; exit 1; }
# The manifest: Gradescope's copy is no git checkout, and base.sh lists the tree from it.
# (A path holding a newline could not be listed one a line: refuse it.)
tr -d '\n' < "$tmp/files" | cmp -s - "$tmp/files" || { echo "autograder: a file name holds a newline"; exit 1; }
tar --null -T "$tmp/files" -cf - | tar -xf - -C "$tmp/kiln"
tr '\0' '\n' < "$tmp/files" > "$tmp/kiln/.kiln-files"
# The grading settings, baked in (Gradescope's zip has no other way to set them): every
# KN_GRADE_* variable of this command's environment (or make's command line), plus
# KN_GRADE_SKIP_WEIGHT=scale for a lab with GPU tests unless given: Gradescope's machines
# have no GPU, so a skipped GPU test must not cost the reference its points (lab 07 would
# score 90 otherwise) nor give the skeleton free ones (weight 1 would): "scale" pays each
# skipped test the share of the other tests' points the submission earned, which leaves the
# GPU tests out of the total in effect. run_autograder reads kiln/.kiln-grade-env.
env | grep -E '^KN_GRADE_[A-Z0-9_]+=' | grep -vE '^KN_GRADE_(BASE|REUSE_BASE|AUTOGRADER|UID_BASE|GID|KEEP)=' |
    sort > "$tmp/env" || true
if grep -qE '^[^#]*[[:space:]]gpu([[:space:]]|$)|^lab[0-9]+_(hidden_)?gpu::' "tests/lab$lab/rubric.txt" &&
        ! grep -q '^KN_GRADE_SKIP_WEIGHT=' "$tmp/env"; then
    echo "KN_GRADE_SKIP_WEIGHT=scale" >> "$tmp/env"
fi
while IFS= read -r kv; do printf 'export %s=%q\n' "${kv%%=*}" "${kv#*=}"; done < "$tmp/env" > "$tmp/kiln/.kiln-grade-env"
echo "autograder: baked settings: $(tr '\n' ' ' < "$tmp/env")"
for f in setup.sh run_autograder; do
    sed "s/@LAB@/$lab/" "tests/grader/autograder/$f" > "$tmp/$f"; chmod 755 "$tmp/$f"
done
zip="$(realpath "$(dirname "$zip")")/$(basename "$zip")"
rm -f "$zip"
(cd "$tmp" && zip -qr "$zip" setup.sh run_autograder kiln)
echo "autograder: $zip (lab $lab: upload it as the assignment's autograder on Gradescope)"
