#!/usr/bin/env bash
# hostile-lab.sh NN BUILD_ROOT — the grader on a lab against the hostile submissions of
# planted/labNN/plant.py (issue 36): lab 10 (its tests run as MPI ranks) and lab 07. The
# reference units must score 100 / 100 through `make grade` (every test in the jail, with
# a user of its own, under mpiexec for lab 10; GPU tests skipped and left out of the total,
# KN_GRADE_SKIP_WEIGHT=scale), and the generated skeleton must score less and end within
# 300 s (its collectives fail or time out with a message; nothing hangs: every test runs
# twice, producer and checker, and its units once more beside the staff's). Then the hostile
# submissions, with bubblewrap and without it (KN_GRADE_JAIL=0, as in a container that
# forbids namespaces; there only the attacks isolation can change, unless
# KN_HOSTILE_NOJAIL=all): every attack scores no more than the skeleton, the vetting refuses
# the patching ones, the forgery finds nothing to forge, and lab 10's send-before-receive
# ring loses the eager-limit test with a message that says deadlock. Last, `memforge` (the
# pass forged in the test's own memory) and lab 10's `harness_counts` (the library's
# all-reduce with the harness's own message counters rewritten in the test's memory) are
# graded once more with KN_GRADE_CHECKER=0 (the verdict, and the counting, inside the test's
# process, as before the checker and the relay): there each must score MORE than the
# skeleton, which shows the attack is real and the checker (memforge) or the relay
# (harness_counts: its counts taken in another process) is what stops it.
# make test runs it (tests/grade.mk, steps grader-hostile-labNN).
set -u
lab=$1 root=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/sol" "$work/skel"
cp solutions/lab$lab-*/*.c "$work/sol/" && cp labs/lab$lab-*/*.c "$work/skel/" || exit 1
# CPU-only graders (KN_GRADE_SKIP_WEIGHT=scale, as make autograder bakes for a lab with GPU
# tests). Wider limits than the defaults (CPU 10 to 20 s, wall clock 40 s): each graded test
# starts with a cold kernel cache, and lab 07's random graphs then compile some fifty
# kernels with cc; on this machine shared by several builds (load 12 on 2 cores) that took
# the reference 19 s of wall clock, past the default floor's 6 s (the reference's timed CPU
# seconds, ref-times, come from a warm cache). Built without CUDA (KN_GRADE_CUDA=0): the
# GPU tests skip either way where there is no GPU.
export KN_GRADE_SKIP_WEIGHT=scale KN_GRADE_CPU_FLOOR=${KN_GRADE_CPU_FLOOR:-10} KN_GRADE_CPU=${KN_GRADE_CPU:-20} KN_GRADE_WALL=${KN_GRADE_WALL:-40}
export KN_GRADE_CUDA=${KN_GRADE_CUDA:-0}
grade() { make --no-print-directory grade LAB=$lab SUBMISSION="$1" GRADE_OUT="$2" BUILD_ROOT="$root" > "$2.log" 2>&1; }
grade "$work/sol" "$work/sol-out"
s=$(grep -m1 '^score:' "$work/sol-out.log")
[ "$s" = "score: 100 / 100" ] || { tail -n 40 "$work/sol-out.log"; echo "FAIL: the reference scored '$s'"; exit 1; }
echo "lab $lab reference: $s ($(grep -m1 'passed,' "$work/sol-out.log"))"
t0=$(date +%s)
timeout 400 make --no-print-directory grade LAB=$lab SUBMISSION="$work/skel" GRADE_OUT="$work/skel-out" \
    BUILD_ROOT="$root" > "$work/skel-out.log" 2>&1
t=$(( $(date +%s) - t0 )) s=$(grep -m1 '^score:' "$work/skel-out.log")
[ -n "$s" ] && [ "$s" != "score: 100 / 100" ] || { tail -n 40 "$work/skel-out.log"; echo "FAIL: the skeleton scored '$s'"; exit 1; }
[ $t -le 300 ] || { echo "FAIL: grading the skeleton took $t s"; exit 1; }
echo "lab $lab skeleton: $s in $t s"

# ------------------------------------------------------------------ hostile submissions
[ -f tests/grader/planted/lab$lab/plant.py ] || exit 0
skel=$(sed -n 's/^score: \([0-9.]*\) .*/\1/p' "$work/skel-out.log" | head -1)
python3 tests/grader/planted/lab$lab/plant.py "$work/p" || { echo "FAIL: plant.py"; exit 1; }
status=0
# Without bubblewrap, make test grades again only the attacks whose outcome isolation can
# change (forge_record reads other processes' command lines, environments and files); the
# others (vetting refusals, in-memory forgery, wrong rings) act inside the test's process
# alike in both modes, and grading them twice cost make test about a minute a lab.
# KN_HOSTILE_NOJAIL=all (make test-grader-hostile-full) grades every one in both modes.
nojail=${KN_HOSTILE_NOJAIL:-forge_record harness_counts}
mkdir -p "$work/p0"
for c in "$work"/p/*/; do
    c=$(basename "$c")
    if [ "$nojail" = all ] || [[ " $nojail " == *" $c "* ]]; then cp -r "$work/p/$c" "$work/p0/$c"; fi
done
for jail in 1 0; do
    t0=$(date +%s)
    subs=$work/p; [ $jail = 0 ] && subs=$work/p0
    KN_GRADE_UNITS=0 KN_GRADE_WALL=12 KN_GRADE_JAIL=$jail make --no-print-directory -j2 grade-all LAB=$lab SUBMISSIONS="$subs" BUILD_ROOT="$root" \
        GRADE_ALL_OUT="$work/all-$jail" > "$work/all-$jail.log" 2>&1
    echo "lab $lab hostile batch, KN_GRADE_JAIL=$jail ($(ls "$subs" | wc -l) submissions): $(( $(date +%s) - t0 )) s"
    python3 - "$work/all-$jail/students" "$skel" "$jail" <<'PY' || status=1
import json, os, sys
d, skel, jail = sys.argv[1], float(sys.argv[2]), sys.argv[3]
bad = 0
def res(c):
    return json.load(open(os.path.join(d, c, "results.json")))
for c in sorted(os.listdir(d)):
    r = res(c)
    out = "\n".join(t["output"] for t in r["tests"])
    iso = [l for l in r["output"].splitlines() if l.startswith("isolation: ")]
    ok, why = True, ""
    if c == "sendfirst":
        t = [t for t in r["tests"] if t["name"].endswith("all_reduce_above_the_eager_limit")][0]
        ok = r["score"] < 100 and t["status"] == "failed" and "deadlock" in t["output"]
        why = "must lose the eager-limit test with a deadlock message"
    else:
        ok = r["score"] <= skel
        why = "must score no more than the skeleton (%g)" % skel
        if c in ("patch_fail", "asm_syscall"):
            ok = ok and not r["extra_data"]["build_ok"] and ("may not use" in out or "system call" in out)
            why += " and be refused by the vetting"
        if c == "forge_record":
            ok = ok and "planted forge_record: found ''" in out
            why += " and find nothing to forge"
        if c == "memforge":
            ok = ok and "planted memforge: " in out
            why += " and have run its forgery"
        if c == "harness_counts":
            ok = ok and "library collectives" in out
            why += " and be caught calling the library (its counts taken in the relay)"
    ok = ok and bool(iso) and (("bwrap" in iso[0]) == (jail == "1"))
    print("%-14s %5g / 100  %s  %s" % (c, r["score"], "ok  " if ok else "FAIL", "" if ok else why), iso[0] if iso else "")
    bad += not ok
sys.exit(1 if bad else 0)
PY
done
# The in-memory forgeries against the verdict decided (and the messages counted) in the
# test's own process.
for c in memforge harness_counts; do
    [ -d "$work/p/$c" ] || continue
    KN_GRADE_CHECKER=0 KN_GRADE_UNITS=0 grade "$work/p/$c" "$work/$c-inprocess"
    m=$(sed -n 's/^score: \([0-9.]*\) .*/\1/p' "$work/$c-inprocess.log" | head -1)
    if awk -v m="${m:-0}" -v s="$skel" 'BEGIN { exit !(m > s) }'; then
        echo "lab $lab $c with KN_GRADE_CHECKER=0 (the verdict inside the test's process): $m / 100, more than the skeleton's $skel: the attack is real; the $( [ $c = memforge ] && echo checker || echo relay) stops it (above)"
    else
        echo "FAIL: $c scored ${m:-nothing} without the checker, no more than the skeleton ($skel): the planted attack no longer works, so it shows nothing"; status=1
    fi
done
[ $status = 0 ] || { echo "FAIL: a hostile lab $lab submission beat the grader (above)"; exit 1; }
echo "lab $lab: every hostile submission scored no more than the skeleton with bubblewrap; without it: $( [ "$nojail" = all ] && echo every one || echo "$nojail")"
