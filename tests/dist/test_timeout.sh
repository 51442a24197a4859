#!/usr/bin/env bash
# test_timeout.sh KILN TEST_DIST — no hang without an end (kiln/dist.h, KILN_COMM_TIMEOUT).
#
# 1. One rank of four stalls before an all-reduce (test-dist stall): the other three give
#    up after KILN_COMM_TIMEOUT = 5 s, print "rank R: all_reduce #N (...) timed out after
#    S s" and abort the job.
# 2. One rank of four is killed (SIGKILL) during `kiln train --dist ddp`: the job ends.
#    The launcher reports the dead process (MPICH: its pid and signal) and kills the others
#    at once (MPICH's ch4:ucx ends the job even with -disable-auto-cleanup), so here the
#    launcher names it, not kiln.
# 3. One rank of four is stopped (SIGSTOP: alive, silent, like a rank stuck in a kernel)
#    during training: the other three time out (KILN_COMM_TIMEOUT = 10 s), name their rank
#    and the operation, and MPI_Abort ends the job, the stopped rank included.
# Each job must end within 60 s.
set -uo pipefail
kiln=$(realpath "$1") tdist=$(realpath "$2")
MPIEXEC=${MPIEXEC:-mpiexec}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAIL: $*"; exit 1; }

t0=$(date +%s)
KILN_COMM_TIMEOUT=5 timeout 90 $MPIEXEC -n 4 "$tdist" stall 2 100 > stall.txt 2>&1
rc=$? t=$(( $(date +%s) - t0 ))
[ $rc -ne 0 ] || fail "the stalled job exited 0"
[ $t -le 60 ] || fail "the stalled job took $t s"
grep -E "rank [013]: all_reduce #[0-9]+ \(-, 4 bytes\) timed out after [0-9]+ s" stall.txt > /dev/null \
    || { cat stall.txt; fail "no timeout message naming the rank and the operation"; }
echo "stall: ended in $t s: $(grep -m1 'timed out' stall.txt)"

# the rank processes of a job: the kiln processes below the launcher's pid
ranks_of() {
    local p=$1 kids
    for k in $(ps -o pid= --ppid "$p"); do
        if [ "$(ps -o comm= -p "$k")" = kiln ]; then echo "$k"; else ranks_of "$k"; fi
    done
}
kill_one() { # kill_one LABEL SIGNAL
    local label=$1 sig=$2; shift 2
    local t0 pid victims=""
    t0=$(date +%s)
    KILN_COMM_TIMEOUT=10 timeout 90 $MPIEXEC "$@" -n 4 "$kiln" train --layers 2 --width 32 --heads 2 --context 16 \
        --batch 8 --steps 100000 --data-bytes 20000 --eval-batches 1 --sample 0 --device cpu --out none \
        --dist ddp --bucket-mb 0.01 > kill.txt 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do
        victims=$(ranks_of $pid)
        [ "$(echo "$victims" | wc -w)" -eq 4 ] && grep -q "data parallel" kill.txt && break
        sleep 0.2
    done
    [ "$(echo "$victims" | wc -w)" -eq 4 ] || { kill $pid; cat kill.txt; fail "$label: the 4 ranks did not start"; }
    sleep 2
    kill -"$sig" "$(echo $victims | cut -d' ' -f3)"
    wait $pid
    local rc=$? t=$(( $(date +%s) - t0 - 2 ))
    [ $rc -ne 0 ] || fail "$label: the job exited 0"
    if [ $rc -eq 124 ]; then
        for v in $victims; do kill -9 "$v" 2>/dev/null; done
        cat kill.txt; fail "$label: the job hung (killed by timeout 90)"
    fi
    [ $t -le 60 ] || fail "$label: the job took $t s"
    echo "$label: ended $t s after the kill (exit $rc)"
}
kill_one "kill a rank" KILL
# MPICH's launcher names the dead process (its pid and signal), then kills the others
grep -E "PID [0-9]+|signal 9" kill.txt | head -2
grep -q -i -E "signal 9|killed" kill.txt || { cat kill.txt; fail "the launcher did not report the dead rank"; }
kill_one "stop a rank" STOP
grep -E "rank [0-9]: [a-z_]+ #[0-9]+ \(" kill.txt | head -3
grep -q -E "rank [013]: (all_reduce|broadcast|all_gather|barrier|reduce_scatter) #[0-9]+ \(.*timed out" kill.txt \
    || { cat kill.txt; fail "no other rank named the operation it waited in"; }
echo "test_timeout: all passed"
