#!/usr/bin/env bash
# files.sh — print the files of the kiln tree in the current folder, NUL-separated, that
# grading is built from (used by base.sh and autograder.sh): regular files, and links to
# regular files inside the tree (solutions/ links to the units core/ owns, core/mk/units.list;
# any other link is left out), without the grader's planted submissions (tests/grader/planted/, self-test material).
#   - in a git checkout: git ls-files (tracked files plus untracked ones git does not ignore);
#   - elsewhere (the autograder's copy on Gradescope, a tarball): the manifest .kiln-files
#     (one path a line) that autograder.sh writes into the zip's copy of the tree.
# Exit 1, saying why, when it is neither.
set -u
here=$(pwd -P)
inside() { local t; t=$(realpath -e -- "$1" 2>/dev/null) && [ -f "$t" ] && [[ $t == "$here"/* ]]; }
if top=$(git rev-parse --show-toplevel 2>/dev/null) && [ "$(cd "$top" && pwd -P)" = "$(pwd -P)" ]; then
    git ls-files -z --cached --others --exclude-standard
elif [ -f .kiln-files ]; then
    tr '\n' '\0' < .kiln-files
else
    echo "files.sh: $(pwd) is neither a git checkout nor a tree with a .kiln-files manifest" >&2
    exit 1
fi | while IFS= read -r -d '' f; do
    case $f in tests/grader/planted/*|.kiln-files) continue ;; esac
    [ -f "$f" ] && { [ ! -L "$f" ] || inside "$f"; } && printf '%s\0' "$f"
done
# The pipeline's status is the loop's: report a failed listing by the first command's.
exit "${PIPESTATUS[0]}"
