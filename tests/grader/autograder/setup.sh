#!/usr/bin/env bash
# setup.sh — Gradescope runs this once, as root, when it builds the autograder image (a
# fresh Ubuntu). It installs what grading needs and nothing else (no git: the copy of kiln
# in the zip is no git checkout, base.sh lists it from its manifest kiln/.kiln-files),
# checks the lab's rubric, builds the grading base of the lab once (the staff tree, so each
# submission only compiles its own units) and locks the staff tree away from the user the
# student's code runs as. Any failure stops here with a message: an image that cannot
# grade must not be built.
# Written by `make autograder LAB=NN` (tests/grader/autograder.sh): LAB is filled in there.
# AUTOGRADER_ROOT (default /autograder) is for trying it elsewhere.
set -eu
LAB=@LAB@
root=${AUTOGRADER_ROOT:-/autograder}
fail() { echo "setup.sh: FAILED: $*" >&2; exit 1; }
cd "$root/source/kiln" || fail "no $root/source/kiln (was the zip unpacked into $root/source?)"

# What grading needs: "probe | Ubuntu/Debian package".
NEEDS=(
    "command -v cc && command -v make && command -v readelf && command -v nm | build-essential"
    "test -f /usr/include/criterion/criterion.h | libcriterion-dev"
    "command -v python3 | python3"
    "command -v setpriv && command -v prlimit && command -v flock && command -v setsid | util-linux"
    "command -v unzip | unzip"
    "command -v bwrap | bubblewrap"
)
# MPI only for a lab whose rubric has MPI tests.
if grep -qE '^[^#]*[[:space:]]mpi=[0-9]+' "tests/lab$LAB/rubric.txt" 2>/dev/null; then
    NEEDS+=("command -v mpiexec && command -v mpicc | mpich" "command -v mpicc | libmpich-dev")
fi
missing() {
    local n
    for n in "${NEEDS[@]}"; do
        eval "${n%%|*}" > /dev/null 2>&1 || echo "${n##*| }"
    done | sort -u
}
mapfile -t miss < <(missing)
if [ ${#miss[@]} -gt 0 ]; then
    echo "setup.sh: installing ${miss[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q || fail "apt-get update failed"
    apt-get install -y -q --no-install-recommends "${miss[@]}" || fail "apt-get could not install ${miss[*]}"
    mapfile -t miss < <(missing)
    [ ${#miss[@]} -eq 0 ] || fail "still missing after apt-get: ${miss[*]}"
fi

python3 tests/grader/rubric.py check "$LAB" || fail "the rubric of lab $LAB is refused (above)"
id kiln-grader > /dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin kiln-grader ||
    fail "cannot create the user kiln-grader"
# shellcheck disable=SC1091
[ -f .kiln-grade-env ] && . ./.kiln-grade-env   # the settings make autograder baked in
bash tests/grader/base.sh "$LAB" "build/grade-base/lab$LAB" || fail "the grading base of lab $LAB does not build (above)"
# Nothing of the staff tree is readable by the user the student's code runs as.
chmod -R go-rwx "$root/source"
chmod go+x "$root" "$root/source"
echo "setup.sh: lab $LAB ready to grade"
