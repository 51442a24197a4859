#!/usr/bin/env bash
# mimic.sh — try the autograder zip as Gradescope uses it, in a scratch root (issue 20).
#   mimic.sh setup ZIP ROOT         unzip ZIP into ROOT/source and run its setup.sh
#   mimic.sh grade ROOT SUBMISSION  put SUBMISSION's files in ROOT/submission, run
#                                   run_autograder, and print ROOT/results/results.json's path
# Each step runs as root under bubblewrap in a fresh root that holds only the system (/usr,
# /etc, the /bin-/lib links), a fresh /proc, /dev and /tmp, and ROOT mounted at /autograder:
# no git checkout, no build outputs, nothing of the machine's kiln tree is there, as on
# Gradescope's image, whose setup.sh and run_autograder run as root with /autograder/source
# holding the unpacked zip. What it cannot mimic: the packages come from this machine
# (setup.sh finds them present and installs nothing; on Gradescope it runs apt-get), and
# the user kiln-grader must exist here beforehand (/etc is read-only in there), and CUDA,
# where this machine has it, is visible (KN_GRADE_CUDA=0, passed on, builds without it, as
# on Gradescope's images). KN_GRADE_WALL, _CPU, _MEM_MB are passed on too, and KN_GRADE_JAIL:
# KN_GRADE_JAIL=0 mimics a container that forbids bubblewrap's namespaces (the grader then
# isolates by user ids alone, and says so in every report).
# Needs root and bwrap; exit 2 (saying so) without them.
set -u
die() { echo "mimic: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || die "needs root (setup.sh and run_autograder run as root on Gradescope)"
command -v bwrap > /dev/null || die "needs bwrap (apt-get install bubblewrap)"
. "$(dirname "$0")/jail.sh"
id kiln-grader > /dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin kiln-grader ||
    die "cannot create the user kiln-grader"

inside() { # inside ROOT CMD...: run CMD as root in the mimicked image, /autograder = ROOT
    local root=$1; shift
    # The jail's root (jail.sh: the system only), with ROOT at /autograder.
    JAIL_OK=1 KN_GRADE_JAIL=1 jail_cmd --
    local j=("${JAIL[@]}" --dir /root --bind "$root" /autograder --chdir /autograder)
    "${j[@]}" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
        ${KN_GRADE_WALL:+KN_GRADE_WALL=$KN_GRADE_WALL} ${KN_GRADE_CPU:+KN_GRADE_CPU=$KN_GRADE_CPU} \
        ${KN_GRADE_MEM_MB:+KN_GRADE_MEM_MB=$KN_GRADE_MEM_MB} ${KN_GRADE_CUDA:+KN_GRADE_CUDA=$KN_GRADE_CUDA} \
        ${KN_GRADE_JAIL:+KN_GRADE_JAIL=$KN_GRADE_JAIL} "$@"
}

case ${1:-} in
setup)
    zip=$(realpath "$2") root=$3
    rm -rf "$root"; mkdir -p "$root/source" || die "cannot create $root"
    (cd "$root/source" && unzip -q "$zip") || die "cannot unzip $zip"
    [ ! -e "$root/source/kiln/.git" ] || die "the zip holds a .git folder"
    inside "$root" bash /autograder/source/setup.sh
    ;;
grade)
    root=$2 sub=$3
    rm -rf "$root/submission" "$root/results"; mkdir -p "$root/submission" "$root/results"
    cp -r "$sub"/. "$root/submission/" || die "cannot copy $sub"
    install -m 755 "$root/source/run_autograder" "$root/run_autograder"
    inside "$root" /autograder/run_autograder > "$root/run_autograder.log" 2>&1 ||
        { cat "$root/run_autograder.log" >&2; die "run_autograder failed (status $?)"; }
    tail -n 1 "$root/run_autograder.log" >&2
    [ -f "$root/results/results.json" ] || die "run_autograder wrote no results.json"
    echo "$root/results/results.json"
    ;;
*) die "usage: mimic.sh setup ZIP ROOT | grade ROOT SUBMISSION" ;;
esac
