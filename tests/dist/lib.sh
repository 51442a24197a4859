# lib.sh — the helpers the distributed tests share (sourced by test_tp.sh, test_pp.sh and
# test_mesh.sh after they set kiln (the binary), here (tests/dist) and MPIEXEC, in their
# scratch directory):
#   run CMD...                 CMD under a timeout (RUN_TIMEOUT, default 120 s): a hung job
#                              ends the test instead of the suite
#   ok LABEL CMD...            CMD's output after LABEL; CMD's failure ends the script
#   trained TAG RANKS ARGS...  `kiln train ARGS --out TAG.st --log TAG.log`, one process
#                              (RANKS 1) or under `mpiexec -n RANKS`, its output in TAG.txt,
#                              shown when it fails (which ends the script)
#   same TAG ONE LTOL TTOL     compare.py: TAG's losses and checkpoint against ONE's (losses
#                              to LTOL relative, every tensor to TTOL: compare.py says why)
#   refused MESSAGE CMD...     CMD must fail and print MESSAGE (a fixed string)
# Every function ends the script (exit 1) on a failure, with what went wrong printed.
# shellcheck shell=bash
# shellcheck disable=SC2154  # kiln and here: set by the sourcing script

run() { timeout "${RUN_TIMEOUT:-120}" "$@"; }

ok() {
    local r
    if r=$("${@:2}"); then echo "$1: $r"; else echo "$1: $r"; exit 1; fi
}

trained() {
    local tag=$1 n=$2
    shift 2
    local launch=()
    # shellcheck disable=SC2206  # MPIEXEC may carry flags (Open MPI's --oversubscribe): split
    [ "$n" = 1 ] || launch=($MPIEXEC -n "$n")
    run "${launch[@]}" "$kiln" train "$@" --out "$tag.st" --log "$tag.log" > "$tag.txt" 2>&1 \
        || { cat "$tag.txt"; echo "FAIL: $tag (kiln train on $n rank(s))"; exit 1; }
}

same() {
    python3 "$here/compare.py" "$2.log" "$1.log" "$2.st" "$1.st" "$3" "$4"
}

refused() {
    local want=$1
    shift
    if "$@" > bad.txt 2>&1; then cat bad.txt; echo "accepted, expected a failure: $*"; exit 1; fi
    grep -qF -- "$want" bad.txt || { cat bad.txt; echo "no \"$want\" from: $*"; exit 1; }
    echo "refused: $want"
}
