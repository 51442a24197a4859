#!/usr/bin/env python3
"""rubric.py — read and check a lab's rubric (tests/labNN/rubric.txt).

  rubric.py check LAB [TREE]     `make rubric-check LAB=NN`, and grade.sh before grading:
                                 every entry names a test that exists (a KN_TEST(suite, name)
                                 of labs/labNN-*/tests/*.c or tests/labNN/*.c), every test
                                 has an entry (a test deliberately left unscored has one with
                                 0 points), no entry twice, points are numbers >= 0, the tags
                                 are known, and the points add up to the `total` line when
                                 there is one. Prints every problem, naming the line; exit 1.
  rubric.py units LAB RUBRIC TREE
                                 "suite::name unit.c" for each entry that is about one unit
                                 (grade.sh: the unit-level score)

Rubric format (one entry a line, '#' comments):
    suite::name POINTS [TAGS]   TAGS: gpu, mpi=N, unit=FILE.c (the lab unit the test is
                                about, for the unit-level score; by default the unit whose
                                name is a word of the suite: lab01_hidden_reduce -> reduce.c)
    total N                     the points must add up to N
    scoring all|unit            which score counts: all of the student's units together
                                (default) or each unit with the staff's other units
The test names come from the sources, so the check needs no build: a rubric edit never
rebuilds the grading base (base.sh leaves the rubrics out of its stamp).
"""
import glob
import os
import re
import sys

KNOWN_TAGS = re.compile(r"^(gpu|mpi=[1-9][0-9]*|unit=[A-Za-z0-9_.-]+\.c)$")


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
            if len(f) != 2 or not re.fullmatch(r"\d+(\.\d+)?", f[1]):
                r.problems.append(f"{where}: expected 'total N', got {line!r}")
            else:
                r.total = float(f[1])
            continue
        if f[0] == "scoring":
            if len(f) != 2 or f[1] not in ("all", "unit"):
                r.problems.append(f"{where}: expected 'scoring all' or 'scoring unit', got {line!r}")
            else:
                r.scoring = f[1]
            continue
        if len(f) < 2 or not re.fullmatch(r"\w+::\w+", f[0]) or not re.fullmatch(r"\d+(\.\d+)?", f[1]):
            r.problems.append(f"{where}: expected 'suite::name points [tags]', got {line!r}")
            continue
        if f[0] in r.entries:
            r.problems.append(f"{where}: {f[0]} appears twice (first on line {r.lines[f[0]]})")
            continue
        bad = [t for t in f[2:] if not KNOWN_TAGS.match(t)]
        if bad:
            r.problems.append(f"{where}: {f[0]}: unknown tag(s) {' '.join(bad)} (known: gpu, mpi=N, unit=FILE.c)")
        r.entries[f[0]] = (float(f[1]), f[2:])
        r.lines[f[0]] = n
    return r


def tests_in(tree, lab):
    """suite::name -> 'public'|'hidden', from the KN_TEST lines of the lab's test sources."""
    found = {}
    for phase, pattern in (("public", f"labs/lab{lab}-*/tests/*.c"), ("hidden", f"tests/lab{lab}/*.c")):
        for src in sorted(glob.glob(os.path.join(tree, pattern))):
            text = open(src, encoding="utf-8", errors="replace").read()
            for s, nm in re.findall(r"^\s*KN_(?:MPI_)?TEST\(\s*(\w+)\s*,\s*(\w+)", text, re.M):
                found[f"{s}::{nm}"] = phase
    return found


def unit_of(name, tags, units):
    """The lab unit a test is about: its unit= tag, else the unit whose stem is a word of
    the suite name (lab01_hidden_reduce -> reduce.c), else None."""
    for t in tags:
        if t.startswith("unit="):
            return t[5:]
    words = name.split("::")[0].split("_")
    hits = [u for u in units if u[:-2] in words]
    return hits[0] if len(hits) == 1 else None


def check(lab, tree="."):
    path = os.path.join(tree, f"tests/lab{lab}/rubric.txt")
    r = parse(path)
    tests = tests_in(tree, lab)
    if not tests:
        r.problems.append(f"lab {lab}: no KN_TEST found in labs/lab{lab}-*/tests/ nor tests/lab{lab}/")
    units = sorted(os.path.basename(u) for u in glob.glob(os.path.join(tree, f"labs/lab{lab}-*/*.c")))
    for name, (_, tags) in r.entries.items():
        if name not in tests:
            r.problems.append(f"{path}:{r.lines[name]}: {name}: no such test in lab {lab}'s test sources")
        u = unit_of(name, tags, units)
        if any(t.startswith("unit=") for t in tags) and u not in units:
            r.problems.append(f"{path}:{r.lines[name]}: {name}: unit={u} is not a unit of lab {lab} ({' '.join(units)})")
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
            u = unit_of(name, tags, units)
            if u:
                print(name, u)
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
