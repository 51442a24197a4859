#!/usr/bin/env python3
"""rubric.py — read and check a lab's rubric (tests/labNN/rubric.txt).

  rubric.py check LAB [TREE]     `make rubric-check LAB=NN`, and grade.sh before grading:
                                 every entry names a test that exists (a KN_TEST(suite, name)
                                 of labs/labNN-*/tests/*.c or tests/labNN/*.c), every test
                                 has an entry (a test deliberately left unscored has one with
                                 0 points), no entry twice, points are integers >= 0, the tags
                                 are known, a `total` line is there and the points add up to
                                 it, and mpi=N is on every KN_MPI_TEST and on nothing else,
                                 once, with N the rank count the test declares
                                 (KN_MPI_TEST(suite, name, N); 2 unless it says), `relay`
                                 exactly on the KN_MPI_RELAY_TESTs (with `checked`), and every
                                 unit of the lab has at least one test. Prints every problem,
                                 naming the line; exit 1.
  rubric.py units LAB RUBRIC TREE
                                 "suite::name unit.c" for each entry that is about one unit
                                 (grade.sh: the unit-level score)

Rubric format (one entry a line, '#' comments):
    suite::name POINTS [TAGS]   POINTS an integer; TAGS: gpu, mpi=N (required on a
                                KN_MPI_TEST, N its declared rank count; refused elsewhere),
                                unit=FILE.c (a lab unit the test is about, for the
                                unit-level score, as many as it is about; by default the unit
                                whose name is a word of the suite: lab01_hidden_reduce ->
                                reduce.c), checked (the verdict is the staff's checker's,
                                on the outputs the student's run wrote: tests/harness/kn_out.h),
                                relay (required on a KN_MPI_RELAY_TEST, refused elsewhere,
                                with checked: the test's body runs in the staff's build and the
                                student's units in a worker process whose messages it carries
                                and counts: tests/harness/mpi/kn_mpi_relay.c)
    total N                     required: the points must add up to N
    scoring all|unit            which score counts: all of the student's units together
                                (default) or each unit with the staff's other units
The test names come from the sources, so the check needs no build: a rubric edit never
rebuilds the grading base (base.sh leaves the rubrics out of its stamp).
"""
import glob
import os
import re
import sys

KNOWN_TAGS = re.compile(r"^(gpu|checked|relay|mpi=[1-9][0-9]*|unit=[A-Za-z0-9_.-]+\.c)$")


class Rubric:
    def __init__(self):
        self.entries = {}      # suite::name -> (points, tags)
        self.lines = {}        # suite::name -> line number
        self.total = None
        self.scoring = "all"
        self.problems = []


def parse(path):
    """Parse a rubric; problems (naming path:line) are collected, not raised."""
    r = Rubric()
    try:
        text = open(path, encoding="utf-8", errors="replace").read()
    except OSError as e:
        r.problems.append(f"{path}: cannot read the rubric: {e.strerror}")
        return r
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        f = line.split()
        where = f"{path}:{n}"
        if f[0] == "total":
            if len(f) != 2 or not re.fullmatch(r"\d+", f[1]):
                r.problems.append(f"{where}: expected 'total N' (an integer), got {line!r}")
            elif r.total is not None:
                r.problems.append(f"{where}: a second 'total' line")
            else:
                r.total = float(f[1])
            continue
        if f[0] == "scoring":
            if len(f) != 2 or f[1] not in ("all", "unit"):
                r.problems.append(f"{where}: expected 'scoring all' or 'scoring unit', got {line!r}")
            else:
                r.scoring = f[1]
            continue
        if len(f) < 2 or not re.fullmatch(r"\w+::\w+", f[0]) or not re.fullmatch(r"\d+", f[1]):
            r.problems.append(f"{where}: expected 'suite::name points [tags]' (points an integer), got {line!r}")
            continue
        if f[0] in r.entries:
            r.problems.append(f"{where}: {f[0]} appears twice (first on line {r.lines[f[0]]})")
            continue
        bad = [t for t in f[2:] if not KNOWN_TAGS.match(t)]
        if bad:
            r.problems.append(f"{where}: {f[0]}: unknown tag(s) {' '.join(bad)} (known: gpu, checked, relay, mpi=N, unit=FILE.c)")
        dup = sorted({t for t in f[2:] if f[2:].count(t) > 1 or (t.startswith("mpi=") and
                      sum(x.startswith("mpi=") for x in f[2:]) > 1)})
        if dup:
            r.problems.append(f"{where}: {f[0]}: tag(s) given more than once: {' '.join(dup)}")
        r.entries[f[0]] = (float(f[1]), f[2:])
        r.lines[f[0]] = n
    return r


def tests_in(tree, lab, ranks=None, relays=None):
    """suite::name -> 'public'|'hidden', from the KN_TEST / KN_MPI_TEST / KN_MPI_RELAY_TEST
    lines of the lab's test sources. ranks, when a dict, gets suite::name -> declared rank
    count for each KN_MPI_TEST or KN_MPI_RELAY_TEST (its third argument, 2 without one);
    relays, when a set, gets the KN_MPI_RELAY_TESTs."""
    found = {}
    for phase, pattern in (("public", f"labs/lab{lab}-*/tests/*.c"), ("hidden", f"tests/lab{lab}/*.c")):
        for src in sorted(glob.glob(os.path.join(tree, pattern))):
            text = open(src, encoding="utf-8", errors="replace").read()
            for mpi, relay, s, nm, n in re.findall(
                    r"^\s*KN_(MPI_)?(RELAY_)?TEST\(\s*(\w+)\s*,\s*(\w+)\s*(?:,\s*(\d+)\s*)?[,)]", text, re.M):
                if relay and not mpi:
                    continue  # KN_RELAY_TEST: no such macro
                found[f"{s}::{nm}"] = phase
                if mpi and ranks is not None:
                    ranks[f"{s}::{nm}"] = int(n) if n else 2
                if relay and relays is not None:
                    relays.add(f"{s}::{nm}")
    return found


def units_of(name, tags, units):
    """The lab units a test is about: its unit= tags, else the unit whose stem is a word of
    the suite name (lab01_hidden_reduce -> reduce.c), else none."""
    tagged = [t[5:] for t in tags if t.startswith("unit=")]
    if tagged:
        return tagged
    words = name.split("::")[0].split("_")
    hits = [u for u in units if u[:-2] in words]
    return hits if len(hits) == 1 else []


def check(lab, tree="."):
    path = os.path.join(tree, f"tests/lab{lab}/rubric.txt")
    r = parse(path)
    ranks, relays = {}, set()
    tests = tests_in(tree, lab, ranks, relays)
    if r.total is None and not any("cannot read" in p for p in r.problems):
        r.problems.append(f"{path}: no 'total N' line (the points must add up to a stated total)")
    if not tests:
        r.problems.append(f"lab {lab}: no KN_TEST found in labs/lab{lab}-*/tests/ nor tests/lab{lab}/")
    units = sorted(os.path.basename(u) for u in glob.glob(os.path.join(tree, f"labs/lab{lab}-*/*.c")))
    for name, (_, tags) in r.entries.items():
        if name not in tests:
            r.problems.append(f"{path}:{r.lines[name]}: {name}: no such test in lab {lab}'s test sources")
        for u in units_of(name, tags, units):
            if u not in units:
                r.problems.append(f"{path}:{r.lines[name]}: {name}: unit={u} is not a unit of lab {lab} ({' '.join(units)})")
        mpi = [int(t[4:]) for t in tags if t.startswith("mpi=")]
        where = f"{path}:{r.lines[name]}: {name}"
        if name in ranks and not mpi:
            r.problems.append(f"{where}: a KN_MPI_TEST needs mpi={ranks[name]} (without it the grader runs it as a "
                              f"Criterion test, and it fails for everyone)")
        elif name in ranks and mpi[0] != ranks[name]:
            r.problems.append(f"{where}: mpi={mpi[0]}, but the test declares {ranks[name]} ranks "
                              f"(KN_MPI_TEST's third argument, 2 without one)")
        elif name in tests and name not in ranks and mpi:
            r.problems.append(f"{where}: mpi={mpi[0]} on a test that is not a KN_MPI_TEST")
        if name in relays and ("relay" not in tags or "checked" not in tags):
            r.problems.append(f"{where}: a KN_MPI_RELAY_TEST needs the tags relay and checked (without relay the "
                              f"student's units run in the test's own process, which counts their messages)")
        elif name in tests and name not in relays and "relay" in tags:
            r.problems.append(f"{where}: relay on a test that is not a KN_MPI_RELAY_TEST")
    mapped = {u for name, (_, tags) in r.entries.items() for u in units_of(name, tags, units)}
    for u in units:
        if r.entries and u not in mapped:
            r.problems.append(f"{path}: the unit {u} has no test (tag its tests unit={u}, or name it in their "
                              f"suite): its unit-level score would be missing")
    for name in sorted(set(tests) - set(r.entries)):
        r.problems.append(f"{path}: {name} ({tests[name]} test) has no entry "
                          f"(give it points, or '{name} 0' to leave it unscored on purpose)")
    points = sum(p for p, _ in r.entries.values())
    if r.total is not None and abs(points - r.total) > 1e-9:
        r.problems.append(f"{path}: the entries add up to {points:g} points, but the rubric says 'total {r.total:g}'")
    if r.entries and points <= 0:
        r.problems.append(f"{path}: every entry is worth 0 points")
    return r, tests, points


def main():
    if len(sys.argv) in (3, 4) and sys.argv[1] == "check":
        lab, tree = sys.argv[2], (sys.argv[3] if len(sys.argv) == 4 else ".")
        r, tests, points = check(lab, tree)
        if r.problems:
            print(f"rubric-check: lab {lab}: the rubric is refused ({len(r.problems)} problem(s)):")
            for p in r.problems:
                print("  " + p)
            return 1
        pub = sum(p for n, (p, _) in r.entries.items() if tests.get(n) == "public")
        zero = sum(1 for p, _ in r.entries.values() if p == 0)
        print(f"rubric-check: lab {lab}: {len(r.entries)} tests, {points:g} points "
              f"({pub:g} public, {points - pub:g} hidden), {zero} unscored, scoring {r.scoring}: ok")
        return 0
    if len(sys.argv) == 5 and sys.argv[1] == "units":
        lab, path, tree = sys.argv[2:]
        r = parse(path)
        units = sorted(os.path.basename(u) for u in glob.glob(os.path.join(tree, f"labs/lab{lab}-*/*.c")))
        for name, (_, tags) in r.entries.items():
            for u in units_of(name, tags, units):
                print(name, u)
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
