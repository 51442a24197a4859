#!/usr/bin/env bash
# python.sh [MODULE...] — print the Python interpreter kiln's Python steps use: the first of
# /usr/bin/python3 and every python3 on the PATH (in PATH order) that can import every
# MODULE. Exit 1 (printing nothing) when none can.
#
# Why not plain `python3`: on many machines `python3` on the PATH is a version manager's
# shim or a virtual environment, while `make deps` installs python3-numpy for the system
# interpreter; the first one on the PATH is then the wrong one, and a numeric check would
# be skipped or fail for a reason that has nothing to do with kiln. The system interpreter
# comes first because that is where `make deps` installs; on the lent GPU machine PyTorch
# lives in the python3 on the PATH, and steps that need torch ask for it by name
# (`python.sh torch`), so they find that one.
#
# The Makefile runs this once (PYTHON, exported to every recipe and sub-make); scripts run
# standalone fall back to it: py=${PYTHON:-$(bash core/mk/python.sh numpy)}.
set -u
mods=$(IFS=,; echo "$*")
seen=" "
for py in /usr/bin/python3 $(type -ap python3 2>/dev/null); do
    [ -x "$py" ] || continue
    case $seen in *" $py "*) continue ;; esac
    seen="$seen$py "
    if "$py" -c "import sys; ${mods:+import $mods}" > /dev/null 2>&1; then
        echo "$py"; exit 0
    fi
done
exit 1
