#!/usr/bin/env bash
# run-one.sh WORK IDX BIN TEST NP CPU WALL [CHECKER] — run one test of a submission, alone, in the
# sandbox, with CPU seconds and WALL seconds as its limits (grade.sh scales them to the
# reference solution's time), and write its verdict to WORK/v/IDX ("passed|failed|skipped
# SECONDS [assert]": assert when the reason is the test's own assertion text, which quotes
# its source) with the reasons in WORK/v/IDX.msg. WORK/t/IDX belongs to the test's user and nothing there is read.
#
# TEST is "suite::name"; NP > 0 launches the binary under $MPIEXEC with NP ranks (an MPI
# test: it passes when every rank passes). The command runs
#   timeout (wall clock)  ->  prlimit (CPU seconds, address space, processes, open files,
#   file size, no core)   ->  bwrap (jail.sh: a private root holding only the system, this
#   test's folder, the records folder and the binary)  ->  setpriv (its own user id KN_GRADE_UID_BASE+IDX, no groups,
#   no new privileges)    ->  env -i (a clean environment)  ->  the Criterion binary with
#   --filter for this one test; its TAP report goes to a root-owned file whose name only the
#   runner process knows (from a secret file it deletes: kn_test_grade.c).
# With CHECKER (the staff's build of the same test binary: no student code in it; rubric tag
# `checked`), BIN is only the producer: its test writes its outputs (tests/harness/kn_out.h)
# to a root-owned file named in its secret file, and its own verdict is never read. Then
# CHECKER runs the same test under the same limits, as the compile user id (never the
# test's), on a root-made copy of those outputs: the verdict below is the checker's, and
# BIN's own failure message only explains a checker failure ("ended before it produced").
# With CHECKER given as relay:PATH (rubric tag `relay`, a KN_MPI_RELAY_TEST), the student's run
# is PATH's (the staff's build) with --relay-worker BIN: each rank runs the test's body in the
# staff's process and the student's units in a worker process of BIN that it starts, whose every
# message passes through the rank and is counted there (tests/harness/mpi/kn_mpi_relay.c). That
# run writes the outputs (the worker's results, the relay's counts); the checker then judges
# them as for any checked test.
# Verdict (grade.sh prints the rules): passed only when the TAP line of this test says ok
# (not a skip), the run exited 0, and the completion record the hardened hook writes
# (kn_test_grade.c) holds "suite::name TOKEN" with the random token the runner chose, once
# per rank. Stdout and stderr never decide anything; they are only kept, truncated, as the
# test's output.
set -u
work=$1 idx=$2 bin=$3 test=$4 np=${5:-0}
cpu=${6:-$KN_GRADE_CPU} wall=${7:-$KN_GRADE_WALL} checker=${8:-}; [ "$checker" = - ] && checker=""
worker=""   # set for the relay's run: the student's binary, started by the relay
relay=0; case $checker in relay:*) checker=${checker#relay:} relay=1 ;; esac
lim=$work/limits.txt   # how grade.sh chose the limits, for the messages
why_cpu=$(sed -n 's/^cpu //p' "$lim" 2>/dev/null)
d=$work/t/$idx
mkdir -p "$d/scratch"
uid=$((KN_GRADE_UID_BASE + idx)) gid=${KN_GRADE_GID:-65534}
rnd() { head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
suite=${test%%::*} name=${test#*::}
ranks=$((np > 0 ? np : 1))
. "$(dirname "$0")/jail.sh"
[ -n "${JAIL_OK:-}" ] || jail_probe   # grade.sh probes once; other callers (demo/) here
root=0; [ "$(id -u)" = 0 ] && root=1
[ $root = 1 ] && { chown -R "$uid:$gid" "$d"; chmod 700 "$d"; }

# launch BIN AS_UID HOME OUTFILE RESULTS [VAR=VALUE...] — run BIN's test under the limits,
# in the jail, as AS_UID, and set rc, secs, taps (every rank's TAP report) and nrec (the
# ranks whose completion record carries this run's token). RESULTS: the producer's outputs
# file prefix (kn_out.h), "" for none; it is a secret like the others.
launch() {
    local lbin=$1 luid=$2 lhome=$3 lout=$4 lres=$5; shift 5
    # The record and the TAP files are root's, in rec/ (0711: not listable), with random
    # names given to the test only through its secret files, read and deleted before main.
    local token rec tap sec r drop=() envs cmd run attempt start
    token=$(rnd) rec=$work/rec/$(rnd) tap=$work/rec/$(rnd)
    install -m 622 /dev/null "$rec"
    for ((r = 0; r < ranks; r++)); do install -m 622 /dev/null "$tap.$r"; done
    [ $root = 1 ] && drop=(setpriv --reuid="$luid" --regid="$gid" --clear-groups --no-new-privs)
    cmd=("$lbin" --filter "$suite/$name" -j1 --timeout "$wall" --short-filename)
    [ -n "$worker" ] && cmd+=(--relay-worker "$worker")
    # The secrets (the record's path and token, the TAP report's path, the outputs' path) go
    # in files of a folder of AS_UID's, one per rank (sec/RANK: "RECORD TOKEN", the TAP path,
    # then the outputs' prefix), which the runner (Criterion) or each rank (kn_mpi_test.c)
    # reads and deletes before main(): they are on no command line and in no environment
    # (/proc/PID/cmdline is readable by everyone).
    sec=$lhome/sec; rm -rf "$sec"; mkdir -p "$sec"
    for ((r = 0; r < ranks; r++)); do printf '%s %s\n%s\n%s\n' "$rec" "$token" "$tap.$r" "$lres" > "$sec/$r"; done
    [ $root = 1 ] && chown -R "$luid:$gid" "$sec"
    chmod 700 "$sec"; chmod 600 "$sec"/*
    envs=(PATH=/usr/local/bin:/usr/bin:/bin HOME="$lhome/scratch" TMPDIR="$lhome/scratch" LANG=C.UTF-8
          KN_GRADE_SECRET="$sec" "$@")
    if [ "$np" -gt 0 ]; then
        # mpiexec runs as root; each rank drops to the test's user. A send or receive nobody
        # answers ends the job after KILN_COMM_TIMEOUT seconds with a message naming it
        # (core/dist/comm.c), well before the wall clock kills the test without one.
        local ct=$(( wall / 2 )); [ "$ct" -lt 2 ] && ct=2
        # UCX: shared memory only (posix, sysv). Graded ranks are non-dumpable, so cross-memory
        # attach (process_vm_readv, for large messages) fails, and with UCX's other transports
        # a job that sent megabyte messages hung at exit about every other run (measured here).
        envs+=(KILN_COMM_TIMEOUT="$ct" MPIR_CVAR_POLLS_BEFORE_YIELD=1 MPIR_CVAR_CH4_OFI_ENABLE_PROGRESS_THREAD=0
               UCX_TLS=self,posix,sysv)
        local genv=() e; for e in "${envs[@]}"; do genv+=(-genv "${e%%=*}" "${e#*=}"); done
        # shellcheck disable=SC2206  # MPIEXEC is a command line: split it into words
        run=($MPIEXEC -genvnone "${genv[@]}" -n "$np" "${drop[@]}" "${cmd[@]}")
    else
        run=("${drop[@]}" env -i "${envs[@]}" "${cmd[@]}")
    fi
    # The jail (jail.sh): this run's folder, the records folder (0711: the random names stay
    # secret) and the binary; nothing else of the machine's files.
    local wbind=(); [ -n "$worker" ] && wbind=(RO "$worker")
    jail_cmd RW "$lhome" RW "$work/rec" RO "$lbin" "${wbind[@]}" --
    run=("${JAIL[@]}" "${run[@]}")
    cd "$lhome/scratch" || exit 1
    start=$(date +%s.%N)
    # Its own session and process group: without root (no user of its own) the group is what
    # the leftovers are killed by.
    # Criterion's runner binds /tmp/criterion_PID.sock (a fixed path): a stale socket of another
    # user with the same pid makes it abort before any test starts. That is the machine, not the
    # submission: such a run (SIGABRT, no TAP report at all) is retried once, under a new pid.
    for attempt in 1 2; do
        setsid -w bash -c 'echo $$ > "$0"; exec "$@"' "$work/v/$idx.pgid" \
        timeout -k 2 "$wall" \
            prlimit --cpu="$cpu" --as=$((KN_GRADE_MEM_MB * 1048576)) --nproc="$KN_GRADE_NPROC" \
                    --nofile="$KN_GRADE_NOFILE" --fsize=$((KN_GRADE_FSIZE_MB * 1048576)) --core=0 -- \
            "${run[@]}" > "$lout" 2>&1 < /dev/null
        rc=$?
        [ "$rc" -eq 134 ] && [ "$attempt" = 1 ] && ! grep -q '^1\.\.' "$tap".* 2>/dev/null || break
    done
    secs=$(echo "$start $(date +%s.%N)" | awk '{printf "%.3f", $2 - $1}')
    cd "$work" || exit 1
    leftovers "$luid"
    nrec=0
    [ -f "$rec" ] && nrec=$(grep -cFx -- "$test $token" "$rec")
    taps=$(cat -- "$tap".*)
}

# leftovers UID — what a run left behind: its processes (a fork bomb's children) and its
# files outside its folder (Criterion's /dev/shm/bxfi_PID maps of killed workers, which would
# make a later worker that gets the same pid abort).
leftovers() {
    if [ $root = 1 ]; then
        local pids
        for _ in 1 2 3 4 5 6 7 8 9 10; do
            pids=$(awk -v u="$1" '/^State:/ { z = $2 == "Z" } /^Uid:/ { if (!z && $2 == u) { split(FILENAME, p, "/"); print p[3] } nextfile }' /proc/[0-9]*/status 2>/dev/null)
            [ -z "$pids" ] && break
            # shellcheck disable=SC2086
            kill -KILL $pids 2>/dev/null; sleep 0.1
        done
        find /dev/shm /tmp /var/tmp -maxdepth 1 -mindepth 1 -uid "$1" -exec rm -rf --one-file-system -- {} + 2>/dev/null
    else
        local pg; pg=$(cat "$work/v/$idx.pgid" 2>/dev/null) && [ -n "$pg" ] && kill -KILL -- "-$pg" 2>/dev/null
    fi
}

# judge OUTFILE — the verdict of the run launch just made: sets verdict, msg, kind.
judge() {
    local lout=$1 lines nok nskip sig tmo
    # Which limit bit. The CPU time of the jailed processes cannot be read from out here (bwrap
    # does not pass their usage up), but CPU time never exceeds wall time: a test stopped by a
    # signal after running at least its CPU limit's seconds was, most likely, stopped by it.
    local cpu_hit cpu_msg
    cpu_hit=$(awk -v t="$secs" -v c="$cpu" 'BEGIN { print (t >= c - 0.05) ? 1 : 0 }')
    cpu_msg="the test ran for ${secs}s and was stopped, most likely by its CPU limit of ${cpu}s${why_cpu:+ ($why_cpu)}: an infinite loop, or far too slow?"
    verdict=failed msg="" kind=""
    lines=$(grep -E "^(not )?ok - $suite::$name( |$)" <<< "$taps")
    nok=$(grep -c '^ok - ' <<< "$lines")
    nskip=$(grep -c '^ok - .* # SKIP' <<< "$lines")
    if [ "$rc" -eq 137 ] || [ "$rc" -eq 124 ]; then
        msg="killed: the test ran past its ${wall}s wall-clock limit (an infinite loop, or waiting forever?)"
    elif [ -z "$lines" ] && [ "$np" -gt 0 ]; then
        # An MPI job that ended before any rank reported. Its own words (kn_comm's timeout
        # message, MPI_Abort) are quoted from the output; they explain, never decide.
        tmo=$(grep -m1 -E '^rank [0-9]+: .* timed out after ' "$lout" | head -c 400)
        if [ -n "$tmo" ]; then
            msg="a send or receive was never answered, and the job was stopped:
    $tmo
a deadlock? Above MPI's eager limit a send completes only once its receive is posted, so a ring where every rank sends (blocking) before it receives waits forever: post the receive first, or use kn_comm_isend/kn_comm_irecv and wait for both."
        elif grep -q 'MPI_Abort' "$lout"; then
            msg="the job was aborted (MPI_Abort) before this test reported: $(grep -m1 -oE 'MPI_Abort\([^)]*\)' "$lout")"
        elif [ "$rc" -eq 0 ]; then
            msg="a rank ended (exit status 0) before this test reported: the code under test called exit() or returned from main's path early"
        else
            msg="the MPI job ended before this test reported (exit status $rc)"
            [ "$rc" -gt 128 ] && msg="$msg: a rank was killed by SIG$(kill -l $((rc - 128)) 2>/dev/null)"
        fi
    elif [ -z "$lines" ]; then
        msg="the test binary stopped before it reported this test (exit status $rc)"
        if [ "$rc" -gt 128 ]; then
            sig=$(kill -l $((rc - 128)) 2>/dev/null)
            case $sig in
                XFSZ) msg="killed by SIGXFSZ: the test wrote more than ${KN_GRADE_FSIZE_MB} MiB of output" ;;
                XCPU) msg="killed by SIGXCPU: the test used its CPU limit of ${cpu}s${why_cpu:+ ($why_cpu)}: an infinite loop, or far too slow?" ;;
                KILL) msg="killed by SIGKILL"; [ "$cpu_hit" = 1 ] && msg="$msg: $cpu_msg" ;;
                *) msg="the test binary was killed by SIG$sig before it reported this test" ;;
            esac
        fi
    elif grep -q '^not ok' <<< "$lines"; then
        msg=$(awk -v t="$suite::$name" '
            $0 ~ "^not ok - " t "( |$)" { on = 1; sub(/^not ok - [^ ]+ */, ""); if ($0 != "") print; next }
            on && /^(ok|not ok) - / { on = 0 }
            on && /^  (---|\.\.\.|assertions:|failures:)/ { next }
            on && /^# / { next }
            on && /^(TAP version [0-9]+|1\.\.[0-9]+)$/ { next }
            on { sub(/^ +/, ""); sub(/^- /, ""); sub(/: \|\+$/, ":"); print }' <<< "$taps" |
            sed -E '/^\([0-9.]+s\)$/d; /^#$/d; /^kn_test\.h:[0-9]+:$/d' |
            sed -E "s/^Assertion failed: (your code's run)/\1/; s/kn_mpi_test\.c:[0-9]+: (your code's run)/\1/" | head -c 4000)
        [ -n "$msg" ] || msg="the test failed"
        kind=assert
        if grep -qE 'signal|crash|CRASH' <<< "$msg$lines"; then
            msg="$msg
the test crashed (a segmentation fault, an abort, or a resource limit: CPU ${cpu}s, memory ${KN_GRADE_MEM_MB} MiB, ${KN_GRADE_NPROC} processes, output ${KN_GRADE_FSIZE_MB} MiB)"
            [ "$cpu_hit" = 1 ] && msg="$msg
it ran for ${secs}s, at least its CPU limit of ${cpu}s${why_cpu:+ ($why_cpu)}: most likely it hit that limit (an infinite loop, or far too slow?)"
        fi
    elif [ "$nskip" -eq "$ranks" ]; then
        verdict=skipped msg="skipped: $(grep -m1 -o '# SKIP.*' <<< "$lines" | sed 's/^# SKIP *//')"
    elif [ "$nok" -ne "$ranks" ] || [ "$rc" -ne 0 ]; then
        msg="not every rank reported ok (exit status $rc)"
    elif [ "$nrec" -ne "$ranks" ]; then
        msg="the test ended before reaching its end: the code under test called exit() or _exit(), or a rank left early"
    else
        verdict=passed
    fi
}

# ------------------------------------------------------------------ the student's run
res=""
if [ -n "$checker" ]; then
    # The producer's outputs: root's files in rec/ (0711) with a random name, writable by
    # the test (622); the test learns the name only from its secret file.
    res=$work/rec/$(rnd)
    for ((r = 0; r < ranks; r++)); do install -m 622 /dev/null "$res.$r"; done
fi
if [ $relay = 1 ]; then
    # The staff's build runs the test's body as the test's user; the student's build is its
    # worker (same user, no MPI, no secret: the relay reads and deletes its secret file and
    # is non-dumpable before the worker starts)
    worker=$bin
    launch "$checker" "$uid" "$d" "$work/out/$idx" "$res"
    worker=""
else
    launch "$bin" "$uid" "$d" "$work/out/$idx" "$res"
fi
judge "$work/out/$idx"
secs_all=$secs

# ------------------------------------------------------------------ the checker's run
if [ -n "$checker" ]; then
    own_verdict=$verdict own_msg=$msg own_kind=$kind
    # The checker runs as a user id of its own (the test's + 1100000000: above every test's
    # id, never the test's, whose leftovers could otherwise be waiting for it; not shared
    # with another checker, since what a run leaves is killed by id), in a folder of its own, on a root-made copy of the
    # outputs (the test could not have replaced the files, but it wrote their contents:
    # kn_out.c reads them as hostile input). A checked test that read nothing of the
    # producer's marks unchecked.RANK: a staff error, which fails the test saying so.
    cuid=$((uid + 1100000000)) cd_=$work/ck/$idx
    mkdir -p "$work/ck"; chmod 711 "$work/ck"; rm -rf "$cd_"; mkdir -p "$cd_/scratch" "$cd_/in"
    for ((r = 0; r < ranks; r++)); do
        cp --no-dereference -- "$res.$r" "$cd_/in/res.$r" 2>/dev/null || : > "$cd_/in/res.$r"
        : > "$cd_/in/res.unchecked.$r"
    done
    chmod 644 "$cd_/in"/res.*; chmod 622 "$cd_/in"/res.unchecked.*; chmod 711 "$cd_/in"
    [ $root = 1 ] && chown -R "$cuid:$gid" "$cd_" && chown root:root "$cd_/in" "$cd_/in"/res.[0-9]*
    chmod 700 "$cd_"
    launch "$checker" "$cuid" "$cd_" "$work/out/$idx.check" "" KN_RESULTS_IN="$cd_/in/res" KILN_CACHE_DIR="$cd_/scratch/cache"
    judge "$work/out/$idx.check"
    secs_all=$(awk -v a="$secs_all" -v b="$secs" 'BEGIN { printf "%.3f", a + b }')
    late=$(cat "$cd_/in"/res.unchecked.* 2>/dev/null | head -c 1000)
    if grep -q '^unchecked: ' <<< "$late"; then
        verdict=failed kind="" msg="grader: this test is tagged checked in the rubric but read none of the results of your code's run (a staff error: tell the course staff)"
    elif grep -q '^failed: ' <<< "$late"; then
        verdict=failed kind="" msg=$(sed -n '1s/^failed: //p' <<< "$late")
    elif [ "$verdict" = failed ] && [ "$own_verdict" != passed ] && [ -n "$own_msg" ] &&
         grep -qE "your code's run of this test (ended|wrote no results)" <<< "$msg"; then
        # The checker saw the producer stop: its own failure (a check of its own, a limit, a
        # signal: never what decides) says why.
        msg="$msg
your code's run said: $own_msg"
        [ "$own_kind" = assert ] || kind=""
    fi
    {   echo "--- the checker (the staff's build of this test, judging your code's results):"
        cat "$work/out/$idx.check"; } >> "$work/out/$idx" 2>/dev/null
    rm -f "$work/out/$idx.check"
fi
printf '%s %s %s\n' "$verdict" "$secs_all" "${kind:-}" > "$work/v/$idx"
printf '%s\n' "$msg" > "$work/v/$idx.msg"
