#!/usr/bin/env bash
# grade.sh LAB SUBMISSION OUTDIR — grade one submission of lab LAB (make grade calls it).
#
# SUBMISSION is a folder, a .tar.gz/.tgz or a .zip holding the lab's unit files, either at
# its root or under labs/labNN-*/ (one wrapping folder is allowed). Only the files named
# like the lab's units (labs/labNN-*/*.c) are taken; everything else is listed as ignored.
# Steps (tests/grader/README.md has the reasoning):
#   1. base.sh prepares the pristine, prebuilt staff tree once per tree state;
#   2. a private copy of it in a fresh folder (mode 0700, root's when run as root);
#   3. the units are compiled as an unprivileged user in the student view (compile-units.sh)
#      and vetted: no constructors/destructors, no references to the test harness or to
#      Criterion, no global symbol that would replace a C library or Criterion function;
#   4. the staff tree links them into its two test binaries (IMPL=labs PRIOR=solutions);
#      a failure in 3 or 4 is the failed test "build" carrying the messages, and every
#      rubric test scores 0;
#   5. every test runs alone under limits and its own user id (run-one.sh), public tests
#      first while the hidden binary is unreadable, then the hidden ones; a test tagged
#      `checked` is then judged by the staff's build of it (the checker), on the outputs
#      the student's run wrote, outside the student's process;
#   6. report.py writes OUTDIR/results.json (Gradescope), junit.xml and summary.txt.
# Knobs (environment): KN_GRADE_JOBS, KN_GRADE_WALL (s per test, at most), KN_GRADE_CPU (s,
# at most), KN_GRADE_CPU_FACTOR, KN_GRADE_CPU_FLOOR (the CPU limit: FACTOR x the reference
# solution's time, at least FLOOR), KN_GRADE_WERROR, KN_GRADE_HIDDEN_DETAILS, KN_GRADE_JAIL,
# KN_GRADE_ISOLATION,
# KN_GRADE_MEM_MB, KN_GRADE_NPROC, KN_GRADE_NOFILE, KN_GRADE_FSIZE_MB,
# KN_GRADE_HIDDEN_VISIBILITY, KN_GRADE_SKIP_WEIGHT, KN_GRADE_BASE, MPIEXEC, KN_GRADE_CHECKER (0: ignore
# the rubric's checked tags; the self-test only).
# Exit 0 when graded (whatever the score), 2 when the grader itself could not run.
set -u
# Nothing the grader writes is readable by other users unless it says so (install -m, chmod):
# without bubblewrap the student's code could otherwise read the manifest, the lists of
# hidden tests and the logs.
umask 077
lab=$1 sub=$2 out=$3
G=$(pwd)/tests/grader
export KN_GRADE_WALL=${KN_GRADE_WALL:-20} KN_GRADE_CPU=${KN_GRADE_CPU:-10}
export KN_GRADE_MEM_MB=${KN_GRADE_MEM_MB:-2048} KN_GRADE_NPROC=${KN_GRADE_NPROC:-64}
export KN_GRADE_NOFILE=${KN_GRADE_NOFILE:-256} KN_GRADE_FSIZE_MB=${KN_GRADE_FSIZE_MB:-16}
# MPICH: PMI over a port reaches Criterion's re-executed workers (a PMI fd does not), and
# UCX shared memory without /proc/PID/fd links (the hook makes processes non-dumpable).
export MPIEXEC=${MPIEXEC:-mpiexec -pmi-port -genv UCX_POSIX_USE_PROC_LINK n}
jobs=${KN_GRADE_JOBS:-$(nproc)}
base=${KN_GRADE_BASE:-build/grade-base/lab$lab}
die() { echo "grade: $*" >&2; exit 2; }

[ -e "$sub" ] || die "SUBMISSION=$sub does not exist"
sub=$(realpath "$sub")
out=$(realpath -m "$out")
case $out/ in "$sub"/*) die "GRADE_OUT=$out is inside the submission; choose another folder" ;; esac
[ "$out" = / ] && die "GRADE_OUT=/ is not a results folder"
mkdir -p "$out" || die "cannot create GRADE_OUT=$out"
rm -f "$out"/results.json "$out"/junit.xml "$out"/summary.txt "$out"/build.log
# A broken rubric is the staff's mistake: refuse before grading anyone (rubric.py names the
# entry). The rubric is read from the tree now, not from the base: editing it rebuilds nothing.
python3 "$G/rubric.py" check "$lab" > "$out/rubric-check.log" 2>&1 || {
    cat "$out/rubric-check.log" >&2; die "the rubric of lab $lab is refused (make rubric-check LAB=$lab)"; }
bash "$G/base.sh" "$lab" "$base" >&2 || exit 2
base=$(realpath "$base")
t0=$(date +%s.%N)

# Each grading gets its own block of 256 user ids (our pid is unique while we run).
export KN_GRADE_UID_BASE=$((2000000000 + $$ * 256))
root=0; [ "$(id -u)" = 0 ] && root=1
if [ $root = 1 ]; then
    id kiln-grader >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin \
        kiln-grader 2>/dev/null || true
    KN_GRADE_GID=$(id -g kiln-grader 2>/dev/null || echo 65534); export KN_GRADE_GID
fi
cuid=$((KN_GRADE_UID_BASE + 255))   # compiling and listing tests

work=$(mktemp -d /tmp/kiln-grade.XXXXXX) || die "no temporary folder"
chmod 711 "$work"
kill_sandbox() { # every process left by this grading's user ids (by pid, never by name)
    [ $root = 1 ] || return 0
    # (the checkers' ids are the tests' + 1100000000: run-one.sh)
    local lo=$KN_GRADE_UID_BASE hi=$((KN_GRADE_UID_BASE + 256)) c=1100000000 i pids
    for i in 1 2 3 4 5 6 7 8 9 10; do
        pids=$(awk -v lo="$lo" -v hi="$hi" -v c="$c" '/^State:/ { z = $2 == "Z" } /^Uid:/ { if (!z && (($2 >= lo && $2 < hi) || ($2 >= lo + c && $2 < hi + c))) { split(FILENAME, p, "/"); print p[3] } nextfile }' /proc/[0-9]*/status 2>/dev/null)
        [ -z "$pids" ] && return 0
        # shellcheck disable=SC2086
        kill -KILL $pids 2>/dev/null; sleep 0.2
    done
}
# Criterion's worker maps (/dev/shm/bxfi_PID) of sandboxed workers that were killed stay
# behind, owned by a sandbox user id: sweep those of dead processes (files of other users
# are left alone).
[ $root = 1 ] && find /dev/shm -maxdepth 1 -name 'bxfi_*' -printf '%U %p\n' 2>/dev/null |
    awk '$1 >= 2000000000 { print $2 }' | while read -r f; do
        kill -0 "${f##*_}" 2>/dev/null || rm -f -- "$f"
    done
# The same for Criterion runners' sockets /tmp/criterion_PID.sock of dead processes, which
# make a sandboxed runner that gets that pid abort (it cannot remove another user's file).
[ $root = 1 ] && find /tmp -maxdepth 1 -type s -name 'criterion_*.sock' 2>/dev/null | while read -r f; do
    p=${f##*_}; p=${p%.sock}
    [[ $p =~ ^[0-9]+$ ]] && ! kill -0 "$p" 2>/dev/null && rm -f -- "$f"
done
cleanup() { kill_sandbox; [ "${KN_GRADE_KEEP:-0}" = 1 ] && echo "grade: kept $work" >&2 || rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 2' INT TERM
mkdir -p "$work"/{sub,out,v,t,obj} "$work/rec"
install -m 600 "tests/lab$lab/rubric.txt" "$work/rubric.txt"; rm -f "$out/rubric-check.log"
chmod 711 "$work/rec" "$work/t"; chmod 700 "$work"/{sub,out,v}   # t/: each test's own folder is 0700, its user's
notes=$work/notes; : > "$notes"
# Isolation: the jail (jail.sh, bwrap) hides every file but the student view; separate user
# ids (as root) keep tests apart. Without the jail the student's code could read whatever
# this machine lets its user read: refuse (KN_GRADE_ISOLATION=require), or say so at the
# top of the report. On Gradescope (run_autograder sets KN_GRADE_AUTOGRADER=1) setup.sh has
# locked the staff tree away from other users and there is one submission per machine, so
# separate user ids are enough there.
. "$G/jail.sh"
jail_probe
if [ "$JAIL_OK" = 1 ]; then
    isolation="bwrap (a private root holding only the student view, its own pid namespace)"
    [ $root = 1 ] && isolation="$isolation, a user id of its own per test" || isolation="$isolation, the grader's own user id"
elif [ "${KN_GRADE_ISOLATION:-warn}" = require ]; then
    die "KN_GRADE_ISOLATION=require, but $JAIL_WHY"
elif [ $root = 1 ] && [ "${KN_GRADE_AUTOGRADER:-0}" = 1 ]; then
    isolation="separate user ids (no bwrap: $JAIL_WHY); the staff tree is locked by setup.sh"
else
    isolation="none: $JAIL_WHY"
    [ $root = 1 ] && isolation="separate user ids only ($JAIL_WHY)"
    echo "WARNING: the student's code was NOT isolated ($JAIL_WHY): it could read any file $(id -un)'s tests can (hidden tests, rubrics, solutions, other submissions). Install bubblewrap, or grade on Gradescope." >> "$notes"
fi
[ $root = 1 ] || echo "note: not running as root, so the student's code runs as $(id -un), not as a separate user" >> "$notes"
export JAIL_OK

# ------------------------------------------------------------------ 1. the submission
sandbox() { # sandbox UID CPU WALL CMD... : run CMD as UID under limits, in the jail with
    local u=$1 cpu=$2 wall=$3; shift 3   # the paths of the array JB (jail_cmd's RW/RO PATH)
    local drop=()
    [ $root = 1 ] && drop=(setpriv --reuid="$u" --regid="${KN_GRADE_GID:-65534}" --clear-groups --no-new-privs)
    jail_cmd "${JB[@]}" --
    timeout -s KILL "$wall" prlimit --cpu="$cpu" --as=$((4096 * 1048576)) --nproc=256 --nofile=256 \
        --fsize=$((64 * 1048576)) --core=0 -- "${JAIL[@]}" "${drop[@]}" "$@"
}
# Archives are unpacked by the compile user, inside its own folder: whatever the archive
# holds (links, "..", huge files) lands there or nowhere. Links are never followed later.
case $sub in
    *.tar.gz|*.tgz|*.zip)
        install -m 644 "$sub" "$work/sub.archive"
        [ $root = 1 ] && chown "$cuid:${KN_GRADE_GID:-65534}" "$work/sub"
        case $sub in *.zip) x=(unzip -qq -o ../sub.archive) ;; *) x=(tar --no-same-owner --no-same-permissions -xzf ../sub.archive) ;; esac
        JB=(RW "$work/sub" RO "$work/sub.archive")
        (cd "$work/sub" && sandbox "$cuid" 60 120 env -i PATH=/usr/bin:/bin "${x[@]}") > "$work/extract.log" 2>&1 ;;
    *)  [ -d "$sub" ] || die "SUBMISSION=$sub is neither a folder nor a .tar.gz/.tgz/.zip"
        cp -r --no-dereference --no-preserve=all "$sub"/. "$work/sub" > "$work/extract.log" 2>&1 ;;
esac || echo "note: unpacking the submission reported: $(head -c 500 "$work/extract.log")" >> "$notes"
kill_sandbox
cp -a "$base/tree" "$work/tree" && cp -a "$base/view" "$work/view" || die "cannot copy the base"
chmod 700 "$work/tree"
labdir=$(basename "$(ls -d "$work/tree/labs/lab$lab"-* | head -1)")
mapfile -t units < <(cd "$work/tree/labs/$labdir" && ls -- *.c)
taken=()
for u in "${units[@]}"; do
    f=""
    for c in "labs/$labdir/$u" "$u" */"labs/$labdir/$u" */"$u"; do
        for m in "$work/sub"/$c; do
            r=$(realpath -e -- "$m" 2>/dev/null) || continue
            # A regular file inside the submission: no link anywhere on the way out of it.
            [[ $r == "$work/sub/"* ]] && [ -f "$r" ] && [ ! -L "$m" ] && { f=$r; break 2; }
        done
    done
    if [ -n "$f" ]; then
        cp -- "$f" "$work/view/labs/$labdir/$u"; taken+=("$u"); echo "${f#"$work/sub/"}" >> "$work/used"
    else
        echo "note: no $u in the submission: graded with the skeleton's $u" >> "$notes"
    fi
done
find "$work/sub" -mindepth 1 \( -type f -o -type l \) | sed "s|^$work/sub/||" | sort |
    grep -vxF -f <(cat "$work/used" 2>/dev/null; echo /) > "$work/ignored"
if [ -s "$work/ignored" ]; then
    echo "note: only the unit files (${units[*]}) are graded; ignored $(wc -l < "$work/ignored") other file(s):" >> "$notes"
    head -20 "$work/ignored" | sed 's/^/    /' >> "$notes"
fi

# ------------------------------------------------------------------ 2. compile and vet
build_ok=1 blog=$work/build.log; : > "$blog"
printf '%s\n' "${taken[@]}" > "$work/taken"
if [ ${#taken[@]} -gt 0 ]; then
    mkdir -p "$work/view/.obj"
    [ $root = 1 ] && chown -R "$cuid:${KN_GRADE_GID:-65534}" "$work/view"
    mapfile -t flagenv < "$base/flags"
    install -m 644 "$G/compile-units.sh" "$work/compile-units.sh"
    JB=(RW "$work/view" RO "$work/compile-units.sh")
    sandbox "$cuid" 120 300 env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/tmp LANG=C.UTF-8 "${flagenv[@]}" \
        KN_GRADE_WERROR="${KN_GRADE_WERROR:-0}" \
        bash "$work/compile-units.sh" "$work/view" "$labdir" "$work/view/.obj" "${taken[@]}" >> "$blog" 2>&1 || build_ok=0
    kill_sandbox   # nothing of the compile user may change the files read below
    # A unit that does not compile is graded as the skeleton's (its tests fail), the others
    # as given: one broken unit does not zero the rest. A unit refused for what it tried
    # (an include outside the lab, .incbin: compile-units.sh says "refused"), like the
    # vetting below, still fails it all.
    if [ $build_ok = 0 ] && ! grep -q 'refused' "$blog"; then
        ok=() broken=()
        for u in "${taken[@]}"; do
            o=$work/view/.obj/${u%.c}.o
            if [ -f "$o" ] && [ ! -L "$o" ]; then ok+=("$u"); else broken+=("$u"); fi
        done
        if [ ${#ok[@]} -gt 0 ] && [ ${#broken[@]} -gt 0 ]; then
            build_ok=1 taken=("${ok[@]}")
            printf '%s\n' "${broken[@]}" > "$work/units-broken"
            printf '%s\n' "${taken[@]}" > "$work/taken"
            echo "note: ${broken[*]} did not compile (see the test 'build'): graded with the skeleton's version; ${ok[*]} graded as given" >> "$notes"
        fi
    fi
fi
# The object files are vetted as root before anything links them.
vet_forbidden='kn_test_.*|kn_mpi_test_.*|kn_mpi_relay_.*|kn_cc_.*|criterion_.*|cr_.*|MPI_.*|PMPI_.*|ptrace|process_vm_readv|process_vm_writev|prctl|setrlimit|prlimit(64)?|mprotect|pkey_mprotect|mmap(64)?|mremap|syscall|dlopen|dlmopen|dlsym|dlvsym|dladdr1?|dl_iterate_phdr|system|popen|execl[ep]?|execv[pe]?|execvpe|fexecve|posix_spawnp?|kn_dist_init|kn_dist_finalize|kn_dist_local_rank|kn_comm_world|kn_comm_backend_get|socket|socketpair|connect|bind|listen|accept4?'
dynsyms=$work/dynsyms
ldd "$base/tree/build/lab$lab-labs-solutions/test-lab$lab" | awk '$3 ~ /^\// { print $3 }' |
    xargs -r nm -D --defined-only 2>/dev/null | awk '{ sub(/@.*/, "", $NF); print $NF }' | sort -u > "$dynsyms"
if [ $build_ok = 1 ]; then
    for u in "${taken[@]}"; do
        o=$work/view/.obj/${u%.c}.o
        [ -f "$o" ] && [ ! -L "$o" ] || { echo "$u: no object file was produced" >> "$blog"; build_ok=0; continue; }
        cp -- "$o" "$work/obj/${u%.c}.o"; o=$work/obj/${u%.c}.o
        secs=$(readelf -SW "$o" | grep -oE '\.(init_array|fini_array|preinit_array|ctors|dtors)\b' | sort -u | tr '\n' ' ')
        [ -z "$secs" ] || { echo "$u: constructors/destructors ($secs) are not allowed in a lab unit" >> "$blog"; build_ok=0; }
        # The harness (its hooks, its failure counters), Criterion, MPI itself (a unit talks
        # through kn_comm_*, where the harness observes the messages), and whatever rewrites
        # the process's memory, code or limits or runs other programs. Also what starts MPI
        # or a world communicator (kn_dist_init, kn_comm_world, the backend table) and
        # sockets: a relay test's worker (tests/harness/mpi/kn_mpi_relay.c) is no MPI process
        # and must reach the other ranks only through the relay, not through the launcher's
        # PMI port or a socket of its own.
        refs=$(nm -u "$o" | awk '{ print $2 }' | sed 's/@.*//' | grep -E "^($vet_forbidden)\$" | sort -u | tr '\n' ' ')
        [ -z "$refs" ] || { echo "$u: uses what a lab unit may not use: $refs" >> "$blog"; build_ok=0; }
        # System calls made directly (inline assembly) would bypass the list above.
        insn=$(objdump -d --no-show-raw-insn "$o" 2>/dev/null | grep -cE '[[:space:]](syscall|sysenter|int[[:space:]]+\$0x80)\b')
        [ "${insn:-0}" = 0 ] || { echo "$u: system call instructions (inline assembly) are not allowed in a lab unit" >> "$blog"; build_ok=0; }
        defs=$(nm -g --defined-only "$o" | awk '{ print $3 }' | grep -v '^kn_' | grep -xF -f "$dynsyms" | tr '\n' ' ')
        [ -z "$defs" ] || { echo "$u: defines global functions that would replace the C library's or Criterion's: $defs(make your helpers static)" >> "$blog"; build_ok=0; }
    done
fi
cfg=$work/tree/build/lab$lab-labs-solutions
if [ $build_ok = 1 ] && grep -q 'warning:' "$blog"; then
    echo "note: the compiler warned (see the test 'build'); warnings cost no points" >> "$notes"
fi
if [ $build_ok = 1 ]; then
    for u in "${taken[@]}"; do
        cp --no-dereference -- "$work/view/labs/$labdir/$u" "$work/tree/labs/$labdir/$u"
        touch -d @946684800 "$work/tree/labs/$labdir/$u"
        cp -- "$work/obj/${u%.c}.o" "$work/tree/build/obj/labs/$labdir/${u%.c}.o"
    done
    margs=(); [ -f "$base/make-args" ] && mapfile -t margs < "$base/make-args"
    if ! make -C "$work/tree" --no-print-directory BUILD_ROOT=build SAN=0 "${margs[@]}" LAB="$lab" IMPL=labs PRIOR=solutions \
            "build/lab$lab-labs-solutions/test-lab$lab" "build/lab$lab-labs-solutions/test-lab$lab-hidden" \
            > "$work/link.log" 2>&1; then
        grep -vE '^(make|  (CC|AR|LINK) )' "$work/link.log" | tail -n 40 >> "$blog"; build_ok=0
    fi
    for u in "${taken[@]}"; do
        cmp -s "$work/obj/${u%.c}.o" "$work/tree/build/obj/labs/$labdir/${u%.c}.o" ||
            die "make recompiled $u as root; the grader's staging is broken"
    done
fi

# ------------------------------------------------------------------ 3. run the tests
rubric=$work/rubric.txt
manifest=$work/manifest; : > "$manifest"
if [ $build_ok = 1 ]; then
    run=$work/run; mkdir -p "$run"; chmod 711 "$run"
    pub=$run/p-$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')
    hid=$run/h-$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')
    install -m 755 "$cfg/test-lab$lab" "$pub"; install -m 700 "$cfg/test-lab$lab-hidden" "$hid"
    # Without their symbol tables: code looking for the harness's functions or counters in
    # its own process (to patch them) has no names to go by.
    strip --strip-all "$pub" "$hid" 2>/dev/null
    # The checkers (rubric tag `checked`, run-one.sh): the same tests built with the staff's
    # units only (the base's IMPL=solutions build), which judge the outputs the student's
    # run wrote. Random names like the binaries'; the hidden one is unreadable until the
    # hidden phase.
    scfg=$work/tree/build/lab$lab-solutions-solutions
    cpub=$run/c-$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')
    chid=$run/c-$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')
    install -m 755 "$scfg/test-lab$lab" "$cpub" && install -m 700 "$scfg/test-lab$lab-hidden" "$chid" ||
        die "the staff's build has no test binaries in $scfg"
    list() { # list BIN -> suite::name per line (Criterion --list, as the compile user)
        JB=(RO "$1")
        (cd / && sandbox "$cuid" 10 30 env -i PATH=/usr/bin:/bin "$1" --list 2>/dev/null) |
            awk '/^[A-Za-z_][A-Za-z0-9_]*: [0-9]+ tests?$/ { s = $1; sub(/:$/, "", s); next }
                 /^(├── |└── |\|-- |`-- )/ { n = $0; sub(/^(├── |└── |\|-- |`-- )/, "", n); print s "::" n }'
    }
    chmod 755 "$hid"; list "$pub" > "$work/pub.list"; list "$hid" > "$work/hid.list"; chmod 700 "$hid"
    kill_sandbox
    i=0
    while read -r t; do echo "$i public $pub $t" >> "$manifest"; i=$((i + 1)); done < "$work/pub.list"
    while read -r t; do echo "$i hidden $hid $t" >> "$manifest"; i=$((i + 1)); done < "$work/hid.list"
    [ "$i" -lt 255 ] || die "more than 254 tests in lab $lab: widen the user id blocks"
    np_of() { awk -v t="$1" '!/^#/ && $1 == t { for (i = 3; i <= NF; i++) if ($i ~ /^mpi=[0-9]+$/) { sub(/mpi=/, "", $i); print $i; exit } }' "$rubric"; }
    # checker_of TEST PHASE -> the checker binary of a `checked` test, else "-"
    # KN_GRADE_CHECKER=0 ignores the tags (the old in-process verdict: the self-test shows
    # with it that its in-memory forgery is real; never for real grading).
    # A `relay` test (KN_MPI_RELAY_TEST): "relay:CHECKER", and run-one.sh runs the checker
    # binary as the relay, the student's build as its worker (tests/harness/mpi/kn_mpi_relay.c).
    checker_of() {
        if [ "${KN_GRADE_CHECKER:-1}" != 0 ] && awk -v t="$1" '!/^#/ && $1 == t { for (i = 3; i <= NF; i++) if ($i == "checked") f = 1 } END { exit !f }' "$rubric"; then
            awk -v t="$1" '!/^#/ && $1 == t { for (i = 3; i <= NF; i++) if ($i == "relay") f = 1 } END { exit !f }' "$rubric" && printf relay:
            [ "$2" = public ] && echo "$cpub" || echo "$chid"
        else echo -; fi
    }
    # Limits per test, from the reference solution's CPU time (base.sh: ref-times): a small
    # multiple with a floor, capped by KN_GRADE_CPU; the wall clock follows. An infinite loop
    # then costs a couple of seconds per test, and the message names the limit.
    factor=${KN_GRADE_CPU_FACTOR:-10} floor=${KN_GRADE_CPU_FLOOR:-2}
    echo "cpu ${factor}x the reference solution's time, at least ${floor}s, at most ${KN_GRADE_CPU}s" > "$work/limits.txt"
    reft=$base/ref-times; [ -f "$reft" ] || reft=/dev/null
    limits_of() { # limits_of TEST -> "CPU WALL"
        awk -v t="$1" -v f="$factor" -v lo="$floor" -v hi="$KN_GRADE_CPU" -v w="$KN_GRADE_WALL" '
            $1 == t { r = $2 } END {
                c = (r == "") ? hi : f * r; if (c < lo) c = lo; if (c > hi) c = hi
                c = int(c) + (c > int(c)); wl = 2 * c + 2; if (wl > w) wl = w
                print c, wl }' "$reft"
    }
    for phase in public hidden; do
        [ $phase = hidden ] && chmod 755 "$hid" "$chid"
        awk -v p=$phase '$2 == p { print $1, $3, $4 }' "$manifest" | while read -r n b t; do
            np=$(np_of "$t"); echo "$n $b $t ${np:-0} $(limits_of "$t") $(checker_of "$t" $phase)"
        done | xargs -r -P "$jobs" -n 7 bash "$G/run-one.sh" "$work"
        kill_sandbox
        [ $phase = hidden ] && chmod 700 "$hid" "$chid"
    done

    # ------------------------------------------------------------------ 3b. unit level
    # Each unit the student gave, beside the staff's versions of the lab's other units (the
    # IMPL=solutions objects of the base): a unit's score then does not depend on the
    # student's other units. A test of unit U (rubric.py units: its unit= tag or its suite
    # name) that passed with all the student's units counts as passed at unit level; the
    # others run again with U's build. KN_GRADE_UNITS=0 turns this off.
    staff=$work/tree/build/obj/solutions/$labdir
    python3 "$G/rubric.py" units "$lab" "$rubric" "$work/tree" > "$work/units.map"
    if [ "${KN_GRADE_UNITS:-1}" = 1 ] && [ ${#units[@]} -gt 1 ] && [ -d "$staff" ] && [ -s "$work/units.map" ]; then
        for u in "${taken[@]}"; do
            # The tests of u that did not pass with all of the student's units.
            redo=$(awk -v u="$u" 'NR == FNR { if ($2 == u) of[$1] = 1; next }
                                  FILENAME ~ /manifest$/ && ($4 in of) { print $1, $2, $4 }' "$work/units.map" "$manifest" |
                   while read -r n ph t; do grep -q '^passed' "$work/v/$n" 2>/dev/null || echo "$ph $t"; done)
            [ -n "$redo" ] || continue
            for v in "${units[@]}"; do
                if [ "$v" = "$u" ]; then o=$work/obj/${v%.c}.o; else o=$staff/${v%.c}.o; fi
                [ -f "$o" ] || { echo "unit $u: no staff object for $v" >> "$notes"; continue 2; }
                cp -- "$o" "$work/tree/build/obj/labs/$labdir/${v%.c}.o"
            done
            if ! make -C "$work/tree" --no-print-directory BUILD_ROOT=build SAN=0 "${margs[@]}" LAB="$lab" IMPL=labs PRIOR=solutions \
                    "build/lab$lab-labs-solutions/test-lab$lab" "build/lab$lab-labs-solutions/test-lab$lab-hidden" \
                    > "$work/link-$u.log" 2>&1; then
                echo "unit $u: does not link beside the staff's other units:" >> "$notes"
                grep -vE '^(make|  (CC|AR|LINK) )' "$work/link-$u.log" | tail -n 5 | sed 's/^/    /' >> "$notes"
                continue
            fi
            cmp -s "$work/obj/${u%.c}.o" "$work/tree/build/obj/labs/$labdir/${u%.c}.o" ||
                die "make recompiled $u as root; the grader's staging is broken"
            upub=$run/p-$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')
            uhid=$run/h-$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')
            install -m 755 "$cfg/test-lab$lab" "$upub"; install -m 700 "$cfg/test-lab$lab-hidden" "$uhid"
            strip --strip-all "$upub" "$uhid" 2>/dev/null
            while read -r ph t; do
                [ "$i" -lt 255 ] || die "too many test runs for one block of user ids"
                [ "$ph" = public ] && b=$upub || b=$uhid
                echo "$i $ph $b $t $u" >> "$work/manifest-units"; i=$((i + 1))
            done <<< "$redo"
            for phase in public hidden; do
                [ $phase = hidden ] && chmod 755 "$uhid" "$chid"
                awk -v p=$phase -v u="$u" '$2 == p && $5 == u { print $1, $3, $4 }' "$work/manifest-units" | while read -r n b t; do
                    np=$(np_of "$t"); echo "$n $b $t ${np:-0} $(limits_of "$t") $(checker_of "$t" $phase)"
                done | xargs -r -P "$jobs" -n 7 bash "$G/run-one.sh" "$work"
                kill_sandbox
                [ $phase = hidden ] && chmod 700 "$uhid" "$chid"
            done
        done
    fi
fi

# ------------------------------------------------------------------ 4. report
elapsed=$(echo "$t0 $(date +%s.%N)" | awk '{ printf "%.1f", $2 - $1 }')
python3 "$G/report.py" --lab "$lab" --name "$(basename "$sub")" --rubric "$rubric" \
    --manifest "$manifest" --work "$work" --build-ok "$build_ok" --build-log "$blog" \
    --notes "$notes" --elapsed "$elapsed" --out "$out" \
    --hidden-visibility "${KN_GRADE_HIDDEN_VISIBILITY:-after_due_date}" \
    --skip-weight "${KN_GRADE_SKIP_WEIGHT:-0}" --scoring "${KN_GRADE_SCORING:-}" --hidden-details "${KN_GRADE_HIDDEN_DETAILS:-full}" \
    --isolation "$isolation" $([ "${KN_GRADE_RELEASE:-0}" = 1 ] && echo --release) ||
    die "report.py failed"
cp "$blog" "$out/build.log"
echo "grade: results.json, junit.xml, summary.txt in $out"
cat "$out/summary.txt"
