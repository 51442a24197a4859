#!/usr/bin/env python3
"""mutants.py — how strong are a lab's tests? Build and run mutants of its solution.

    mutants.py run    --lab NN [--only all|survivors|KEY...] [--record]   (make mutants LAB=NN)
    mutants.py sample --lab NN --n 5 --seed S                            (a make test step)
    mutants.py list   --lab NN                                           (keys, no build)

tests/mutants/mutate.py plants the mutants (one small change in a BEGIN/END SOLUTION region
of solutions/labNN-*/*.c; its docstring lists the kinds and how a mutant's key is made).
For each mutant this script
  1. compiles only the mutated unit, with the flags of the real build, warnings allowed
     except those that mean the code is not type-correct C (TYPE_ERRORS below);
  2. links the lab's public test binary from the already built test objects, the mutated
     object and the solution build's libkiln.a (the mutated object comes first, so the
     archive's copy of the unit is never pulled in);
  3. runs it (-j1, one test after another, stopping at the first failure); if every test
     passed, links and runs the hidden test binary the same way.
A test that fails, crashes, or ends early (exit() inside the code under test: the KN_TEST
end-of-test record is missing, as tests/harness/run-suite.sh checks) kills the mutant; a
test binary still running after the time limit (--timeout, default 30 s) is killed and so is
the mutant ("timeout"). A mutant that does not compile does not count. Mutants run in
parallel, --jobs at a time (default: the number of CPUs).

The instructor marks a surviving mutant that no test could kill (it changes nothing
observable) in tests/labNN/mutants-equivalent.txt, one "KEY<TAB>reason" a line; those are
left out of the rate. --record writes every result to tests/labNN/mutants.tsv (checked in):
the rate, then one line per mutant: key, status, kind, file:line, what changed.

The rate: killed (timeouts included) / (mutants that compiled - equivalent ones).

`sample` draws N mutants (seeded) among those that tests/labNN/mutants.tsv records as
killed and still exist, runs them, and fails when one survives: a test that got weaker.

The build variables come from the Makefile (tests/mutants.mk) as --cc, --cppflags, ... ."""

import argparse
import concurrent.futures
import difflib
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mutate  # noqa: E402

TYPE_ERRORS = ["-Werror=int-conversion", "-Werror=incompatible-pointer-types", "-Werror=int-to-pointer-cast",
               "-Werror=pointer-to-int-cast", "-Werror=implicit-function-declaration", "-Werror=return-type",
               "-Werror=discarded-qualifiers", "-Werror=pointer-sign", "-Werror=format"]
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def run(cmd, timeout, env=None, cwd=None):
    """(returncode or 'timeout', output) of cmd; on timeout the whole process group dies."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out.decode(errors="replace")
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        return "timeout", out.decode(errors="replace")


class Lab:
    def __init__(self, a):
        self.a = a
        self.lab = a.lab
        self.cc = shlex.split(a.cc)
        # Warnings are not errors here (a dropped statement leaves an unused variable: the
        # mutant is still a program a student could hand in), except the ones that mean the
        # code is not type-correct C (an argument swap that passes an int as a pointer).
        self.cflags = [f for f in shlex.split(a.cflags) if f != "-Werror"] + TYPE_ERRORS
        self.cppflags = shlex.split(a.cppflags)
        self.ldflags = shlex.split(a.ldflags)
        self.ldlibs = shlex.split(a.test_ldlibs) + shlex.split(a.ldlibs)
        self.support = shlex.split(a.support_objs)
        self.binaries = [("public", shlex.split(a.public_objs)), ("hidden", shlex.split(a.hidden_objs))]
        self.binaries = [(n, o) for n, o in self.binaries if o]
        self.lib = a.lib
        self.work = os.path.abspath(a.work)
        self.timeout = a.timeout
        self.sources = {}

    def source(self, rel):
        if rel not in self.sources:
            with open(os.path.join(ROOT, rel)) as f:
                self.sources[rel] = f.read()
        return self.sources[rel]

    def try_mutant(self, idx, rel, text):
        """Build and test one variant of unit `rel`: ('killed'|'timeout'|'survived'|'nocompile', detail)."""
        d = os.path.join(self.work, "m%d" % idx)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        src = os.path.join(d, os.path.basename(rel))
        with open(src, "w") as f:
            f.write(text)
        obj = src[:-2] + ".o"
        # -iquote: the unit's own folder, for any #include "..." next to it
        rc, out = run(self.cc + self.cppflags + ["-iquote", os.path.join(ROOT, os.path.dirname(rel))] + self.cflags
                      + ["-c", src, "-o", obj], 120, cwd=ROOT)
        if rc != 0:
            shutil.rmtree(d, ignore_errors=True)
            return "nocompile", out.strip().splitlines()[-1] if out.strip() else str(rc)
        env = dict(os.environ, KN_TEST_CPU_SECONDS=str(max(5, int(self.timeout))))
        result = ("survived", "every test passed")
        for name, objs in self.binaries:
            exe = os.path.join(d, "test-" + name)
            rc, out = run(self.cc + self.ldflags + ["-o", exe] + objs + self.support + [obj, self.lib] + self.ldlibs,
                          120, cwd=ROOT)
            if rc != 0:
                shutil.rmtree(d, ignore_errors=True)
                return "nocompile", "link: " + (out.strip().splitlines() or [str(rc)])[-1]
            done, tap = os.path.join(d, name + ".done"), os.path.join(d, name + ".tap")
            open(done, "w").close()
            env["KN_TEST_DONE"] = done
            t0 = time.time()
            rc, out = run([exe, "-j1", "--fail-fast", "--tap=" + tap, "--ascii", "--timeout", str(self.timeout)],
                          self.timeout * 2 + 10, env=env, cwd=ROOT)
            if rc == "timeout":
                result = ("timeout", "%s tests still running after %.0f s" % (name, time.time() - t0))
                break
            if rc != 0:
                result = ("killed", "%s: %s" % (name, first_failure(tap, out)))
                break
            early = ended_early(tap, done)
            if early:
                result = ("killed", "%s: %s ended early (exit() in the code under test?)" % (name, early))
                break
        shutil.rmtree(d, ignore_errors=True)
        return result


def first_failure(tap, out):
    try:
        with open(tap, errors="replace") as f:
            for line in f:
                if line.startswith("not ok"):
                    return line.strip()[len("not ok - "):][:120]
    except OSError:
        pass
    lines = [l for l in out.splitlines() if l.strip()]
    return (lines[-1] if lines else "failed")[:120]


def ended_early(tap, done):
    with open(done, errors="replace") as f:
        reached = set(l.strip() for l in f)
    try:
        with open(tap, errors="replace") as f:
            for line in f:
                if line.startswith("ok - ") and "# SKIP" not in line:
                    name = line.split()[2]
                    if name not in reached:
                        return name
    except OSError:
        return "the TAP file is missing"
    return None


def read_equivalent(lab):
    path = os.path.join(ROOT, "tests", "lab" + lab, "mutants-equivalent.txt")
    eq = {}
    if os.path.exists(path):
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if not line.strip() or line.startswith("#"):
                    continue
                key, _, reason = line.rstrip("\n").partition("\t")
                if not reason.strip():
                    sys.exit("%s:%d: %s has no reason (KEY<TAB>reason)" % (path, n, key))
                eq[key.strip()] = reason.strip()
    return eq


def read_record(lab):
    path = os.path.join(ROOT, "tests", "lab" + lab, "mutants.tsv")
    rec = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if line.startswith("#") or not line.strip():
                    continue
                cols = line.rstrip("\n").split("\t")
                rec[cols[0]] = cols[1]
    return rec


def survivor_diff(m, src):
    new = m.apply(src)
    return "".join(difflib.unified_diff(src.splitlines(True), new.splitlines(True), m.file, m.file + " (mutant)", n=1))


def rate_line(lab, counts):
    killed = counts.get("killed", 0) + counts.get("timeout", 0)
    denom = killed + counts.get("survived", 0)
    pct = 100.0 * killed / denom if denom else 0.0
    return ("lab%s: %d of %d mutants killed (%.1f%%); %d equivalent, %d did not compile, %d timed out (counted killed)"
            % (lab, killed, denom, pct, counts.get("equivalent", 0), counts.get("nocompile", 0),
               counts.get("timeout", 0))), pct


def execute(lab, muts, jobs, progress=True):
    """{key: (status, detail)} for the mutants, run `jobs` at a time."""
    results = {}
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as ex:
        futs = {ex.submit(lab.try_mutant, i, m.file, m.apply(lab.source(m.file))): m for i, m in enumerate(muts)}
        for n, fut in enumerate(concurrent.futures.as_completed(futs), 1):
            m = futs[fut]
            results[m.key] = fut.result()
            if progress and (n % 25 == 0 or n == len(muts)):
                print("  %d/%d mutants (%.0f s)" % (n, len(muts), time.time() - t0), flush=True)
    return results


def baseline(lab):
    """The unmutated units through the same pipeline must pass: else the set-up is wrong."""
    for i, rel in enumerate(mutate.lab_units(ROOT, lab.lab)):
        status, detail = lab.try_mutant(100000 + i, rel, lab.source(rel))
        if status != "survived":
            sys.exit("mutants: the unmutated %s does not pass its tests through this script (%s: %s)"
                     % (rel, status, detail))


def cmd_run(lab, a):
    muts = mutate.lab_mutants(ROOT, lab.lab)
    if not muts:
        sys.exit("mutants: lab%s has no BEGIN/END SOLUTION regions in solutions/lab%s-*/" % (lab.lab, lab.lab))
    eq = read_equivalent(lab.lab)
    rec = read_record(lab.lab)
    keys = {m.key for m in muts}
    for k in eq:
        if k not in keys:
            print("note: tests/lab%s/mutants-equivalent.txt names %s, which no longer exists" % (lab.lab, k))
    if a.only == ["survivors"]:
        chosen = [m for m in muts if rec.get(m.key, "new") in ("survived", "new") and m.key not in eq]
    elif a.only and a.only != ["all"]:
        chosen = [m for m in muts if m.key in a.only]
    else:
        chosen = [m for m in muts if m.key not in eq]
    os.makedirs(lab.work, exist_ok=True)
    print("lab%s: %d mutants in %d units (%d marked equivalent); running %d with %d jobs"
          % (lab.lab, len(muts), len(mutate.lab_units(ROOT, lab.lab)), len(eq), len(chosen), a.jobs), flush=True)
    baseline(lab)
    results = execute(lab, chosen, a.jobs)
    # merge with the record for mutants not run this time
    status = {}
    for m in muts:
        if m.key in eq:
            status[m.key] = "equivalent"
        elif m.key in results:
            status[m.key] = results[m.key][0]
        else:
            status[m.key] = rec.get(m.key, "new")
    counts = {}
    for s in status.values():
        counts[s] = counts.get(s, 0) + 1
    survivors = [m for m in muts if status[m.key] == "survived"]
    diffs = []
    for m in survivors:
        diffs.append("# %s  (%s: %s)\n%s" % (m.key, m.kind, m.what, survivor_diff(m, lab.source(m.file))))
    with open(os.path.join(lab.work, "survivors.diff"), "w") as f:
        f.write("\n".join(diffs))
    if diffs:
        print("\nsurviving mutants (mark an equivalent one in tests/lab%s/mutants-equivalent.txt: KEY<TAB>reason):\n"
              % lab.lab)
        print("\n".join(diffs))
    line, pct = rate_line(lab.lab, counts)
    if counts.get("new"):
        line += "; %d not run yet" % counts["new"]
    print(line)
    print("survivors' diffs: %s" % os.path.relpath(os.path.join(lab.work, "survivors.diff"), ROOT))
    if a.record:
        path = os.path.join(ROOT, "tests", "lab" + lab.lab, "mutants.tsv")
        with open(path, "w") as f:
            f.write("# %s\n" % line)
            f.write("# written by `make mutants LAB=%s` (tests/mutants/mutants.py); key status kind file:line what\n"
                    % lab.lab)
            for m in muts:
                f.write("%s\t%s\t%s\t%s:%d\t%s\n" % (m.key, status[m.key], m.kind, m.file, m.line, m.what))
        print("recorded in %s" % os.path.relpath(path, ROOT))
    return 0


def cmd_sample(lab, a):
    rec = read_record(lab.lab)
    if not rec:
        print("lab%s: no tests/lab%s/mutants.tsv yet (make mutants LAB=%s records one)" % (lab.lab, lab.lab, lab.lab))
        return 3
    muts = {m.key: m for m in mutate.lab_mutants(ROOT, lab.lab)}
    # timeouts are left out: each would cost the whole time limit
    killed = sorted(k for k, s in rec.items() if s == "killed" and k in muts)
    stale = sum(1 for k in rec if k not in muts)
    if not killed:
        print("lab%s: tests/lab%s/mutants.tsv records no killed mutant that still exists" % (lab.lab, lab.lab))
        return 1
    rng = random.Random("%s-lab%s" % (a.seed, lab.lab))
    chosen = [muts[k] for k in rng.sample(killed, min(a.n, len(killed)))]
    os.makedirs(lab.work, exist_ok=True)
    results = execute(lab, chosen, a.jobs, progress=False)
    bad = 0
    for m in chosen:
        st, detail = results[m.key]
        print("  %-8s %s  (%s: %s) %s" % (st, m.key, m.kind, m.what, "" if st == "survived" else "<- " + detail[:80]))
        if st == "survived":
            bad += 1
            print(survivor_diff(m, lab.source(m.file)))
    note = " (%d recorded keys no longer exist: re-run make mutants LAB=%s)" % (stale, lab.lab) if stale else ""
    print("lab%s: %d of %d sampled mutants (recorded killed) killed again, seed %s%s"
          % (lab.lab, len(chosen) - bad, len(chosen), a.seed, note))
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cmd", choices=("run", "sample", "list"))
    ap.add_argument("--lab", required=True)
    ap.add_argument("--only", nargs="*", default=None, help="all (default), survivors, or mutant keys")
    ap.add_argument("--record", action="store_true", help="write tests/labNN/mutants.tsv")
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--seed", default="kiln")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per test binary (default 30)")
    ap.add_argument("--work", default="build/mutants")
    for v in ("cc", "cppflags", "cflags", "ldflags", "ldlibs", "test-ldlibs", "lib", "support-objs", "public-objs",
              "hidden-objs"):
        ap.add_argument("--" + v, default="")
    a = ap.parse_args()
    a.lab = a.lab.removeprefix("lab")
    if a.cmd == "list":
        for m in mutate.lab_mutants(ROOT, a.lab):
            print("%s\t%s\t%s:%d\t%s" % (m.key, m.kind, m.file, m.line, m.what))
        return 0
    lab = Lab(a)
    if not os.path.exists(lab.lib):
        sys.exit("mutants: %s is not built" % lab.lib)
    return cmd_run(lab, a) if a.cmd == "run" else cmd_sample(lab, a)


if __name__ == "__main__":
    sys.exit(main())
