#!/usr/bin/env bash
# setup.sh — Gradescope runs this once, as root, when it builds the autograder image
# (Ubuntu). It installs what kiln's grading needs and prepares the grading base of the lab
# (the staff tree built once), so each submission only compiles its own units.
# Written by `make autograder LAB=NN` (tests/grader/autograder.sh): LAB is filled in there.
set -eu
LAB=@LAB@
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends build-essential libcriterion-dev python3 \
    util-linux coreutils tar gzip unzip make git ca-certificates mpich libmpich-dev
cd /autograder/source/kiln
if [ -f core/mk/deps.sh ]; then bash core/mk/deps.sh || true; fi
id kiln-grader >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin kiln-grader
bash tests/grader/base.sh "$LAB" build/grade-base/lab"$LAB"
# Nothing of the staff tree is readable by the user the student's code runs as.
chmod -R go-rwx /autograder/source
chmod go+x /autograder /autograder/source
