#!/usr/bin/env python3
"""check.py — the grader's own checks, used by tests/grader/selftest.sh.

  check.py schema RESULTS_JSON      RESULTS_JSON follows Gradescope's documented results
                                    format (https://gradescope-autograders.readthedocs.io/
                                    en/latest/specs/): types, allowed keys and values, and
                                    score equal to the sum of the tests' scores
  check.py junit JUNIT_XML          parses, and its counts agree with its test cases
  check.py brief DIR                no failing hidden test of DIR's results.json quotes its
                                    source (KN_GRADE_HIDDEN_DETAILS=brief)
  check.py units DIR                unit-level scoring of a submission with the skeleton's
                                    strided.c (selftest.sh: grader-unit-level)
  check.py leftovers                no live process of a sandbox user id remains
  check.py case DIR MIN MAX BUILD WHY
                                    DIR holds one grading (results.json, summary.txt):
                                    score in [MIN, MAX], build ok|failed, and unless WHY is
                                    "-", lab01_reduce::mean_max_min_prod failed with a
                                    reason matching WHY ("_" = space); plus the case's own
                                    checks (fork bomb contained, writes denied, snooping
                                    found nothing, summary line)
Prints what it checked; exit 1 on the first violation.
"""
import json
import math
import re
import sys
import xml.etree.ElementTree as ET

VIS = {"hidden", "after_due_date", "after_published", "visible"}
FMT = {"text", "html", "simple_format", "md", "ansi"}
TOP = {"score": (int, float), "execution_time": (int, float), "output": str, "output_format": str,
       "test_output_format": str, "test_name_format": str, "visibility": str, "stdout_visibility": str,
       "extra_data": dict, "tests": list, "leaderboard": list}
TEST = {"score": (int, float), "max_score": (int, float), "status": str, "name": str, "name_format": str,
        "number": str, "output": str, "output_format": str, "tags": list, "visibility": str, "extra_data": dict}


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def schema(path):
    with open(path) as f:
        d = json.load(f)
    if not isinstance(d, dict):
        fail("the top level is not an object")
    for k, v in d.items():
        if k not in TOP:
            fail(f"unknown top-level key {k!r}")
        if not isinstance(v, TOP[k]) or (TOP[k] == (int, float) and not num(v)):
            fail(f"{k} has the wrong type ({type(v).__name__})")
    if "score" not in d and not all("score" in t for t in d.get("tests", [])):
        fail("no score: neither a top-level score nor one on every test")
    for k in ("visibility", "stdout_visibility"):
        if k in d and d[k] not in VIS:
            fail(f"{k}={d[k]!r} is not one of {sorted(VIS)}")
    for k in ("output_format", "test_output_format", "test_name_format"):
        if k in d and d[k] not in FMT:
            fail(f"{k}={d[k]!r} is not one of {sorted(FMT)}")
    total = 0.0
    for i, t in enumerate(d.get("tests", [])):
        if not isinstance(t, dict):
            fail(f"tests[{i}] is not an object")
        for k, v in t.items():
            if k not in TEST:
                fail(f"tests[{i}]: unknown key {k!r}")
            if not isinstance(v, TEST[k]) or (TEST[k] == (int, float) and not num(v)):
                fail(f"tests[{i}].{k} has the wrong type")
        if "status" in t and t["status"] not in ("passed", "failed"):
            fail(f"tests[{i}].status={t['status']!r}")
        if "visibility" in t and t["visibility"] not in VIS:
            fail(f"tests[{i}].visibility={t['visibility']!r}")
        if "tags" in t and not all(isinstance(x, str) for x in t["tags"]):
            fail(f"tests[{i}].tags holds a non-string")
        if "score" in t and "max_score" in t and not (0 <= t["score"] <= t["max_score"] + 1e-9):
            fail(f"tests[{i}] scores {t['score']} of {t['max_score']}")
        total += t.get("score", 0)
    if "score" in d and abs(d["score"] - total) > 1e-6:
        fail(f"score {d['score']} is not the sum of the tests' scores {total}")
    print(f"{path}: valid Gradescope results ({len(d.get('tests', []))} tests, score {d.get('score')})")
    return d


def junit(path):
    root = ET.parse(path).getroot()
    if root.tag != "testsuites":
        fail(f"root element is {root.tag}")
    cases = failures = skipped = 0
    for s in root.findall("testsuite"):
        tc = s.findall("testcase")
        nf = sum(c.find("failure") is not None for c in tc)
        ns = sum(c.find("skipped") is not None for c in tc)
        if int(s.get("tests")) != len(tc) or int(s.get("failures")) != nf or int(s.get("skipped")) != ns:
            fail(f"suite {s.get('name')}: counts disagree with its test cases")
        for c in tc:
            if not c.get("name") or not c.get("classname"):
                fail("a testcase without name or classname")
            float(c.get("time"))
        cases, failures, skipped = cases + len(tc), failures + nf, skipped + ns
    if int(root.get("tests")) != cases or int(root.get("failures")) != failures:
        fail("testsuites counts disagree with the suites")
    print(f"{path}: parses, {cases} test cases, {failures} failures, {skipped} skipped")


def case(d, lo, hi, build, why):
    r = schema(f"{d}/results.json")
    junit(f"{d}/junit.xml")
    lo, hi = float(lo), float(hi)
    if not lo <= r["score"] <= hi:
        fail(f"score {r['score']} outside the expected [{lo:g}, {hi:g}]")
    ok = r["extra_data"]["build_ok"]
    tests = {t["name"]: t for t in r["tests"]}
    if ok != (build in ("ok", "partial")):
        fail(f"build_ok is {ok}, expected {build}")
    if build != "failed" and (tests["build"]["status"] == "failed") != (build == "partial"):
        fail(f"the test 'build' is {tests['build']['status']}, expected {build}")
    if not r["output"].splitlines() or not any(l.startswith("isolation: ") for l in r["output"].splitlines()):
        fail("the report does not say which isolation was used")
    if d.rstrip("/").endswith("forge_record") and "planted forge_record: found '' " not in "\n".join(
            t["output"] for t in r["tests"]):
        fail("the planted forgery found something to forge (or never ran)")
    if why != "-":
        t = tests.get("lab01_reduce::mean_max_min_prod")
        if not t or t["status"] != "failed" or not re.search(why.replace("_", " "), t["output"]):
            fail(f"lab01_reduce::mean_max_min_prod should fail with /{why}/: {t and t['output'][:300]!r}")
    with open(f"{d}/summary.txt") as f:
        last = f.read().rstrip("\n").splitlines()[-1]
    p, fl = r["extra_data"]["passed"], r["extra_data"]["failed"]
    if last != f"{p} passed, {fl} failed":
        fail(f"summary.txt ends with {last!r}, expected '{p} passed, {fl} failed'")
    with open(f"{d}/public.txt") as f:
        public = f.read()
    leaked = [t["name"] for t in r["tests"] if "hidden" in t.get("tags", []) and t["name"] in public]
    if leaked or "public tests:" not in public:
        fail(f"public.txt names hidden tests {leaked}" if leaked else "public.txt has no public total")
    outputs = "\n".join(t["output"] for t in r["tests"])
    if "fork bomb" in d or d.rstrip("/").endswith("fork_bomb"):
        m = re.search(r"planted fork bomb: (\d+) children", outputs)
        if m and int(m.group(1)) >= 200:
            fail("the fork bomb was not contained (200 children)")
        print(f"fork bomb contained: {m.group(1) if m else 'no'} children")
    if d.rstrip("/").endswith("writes_tests"):
        if "WROTE" in outputs or "planted write" not in outputs:
            fail("a planted write got through (or the planted code never ran)")
        if "SEEN" in outputs or "planted env: KN_GRADE_DONE=wiped CRITERION_OUTPUTS=wiped /proc/self/environ=wiped" not in outputs:
            fail("the test code could read the record's or the TAP report's location from its environment")
        print("every planted write was denied; the grader's variables were wiped before the test ran")
    if d.rstrip("/").endswith("snoop"):
        got = re.findall(r"planted snoop (\S+): (READ|OPENED)", outputs)
        if "planted snoop" not in outputs:
            fail("the planted snoop never ran (or its output was not kept)")
        warned = r["output"].splitlines()[1:2] and r["output"].splitlines()[1].startswith("WARNING: the student's code was NOT isolated")
        if got and not warned:
            fail("the planted snoop read " + ", ".join(p for p, _ in got) + " and the report gives no warning")
        print("the planted snoop found nothing" if not got else "not isolated here, and the report warns at the top")
    print(f"{d}: score {r['score']:g} in [{lo:g}, {hi:g}], build {build}" + ("" if why == "-" else f", fails with /{why}/"))


def brief(d):
    """KN_GRADE_HIDDEN_DETAILS=brief: no failing hidden test quotes its source."""
    r = schema(f"{d}/results.json")
    hid = [t for t in r["tests"] if "hidden" in t.get("tags", []) and t["status"] == "failed"]
    if not hid:
        fail("no hidden test failed: nothing to check")
    for t in hid:
        msg = t["output"].split("\n--- output of the test")[0]
        if re.search(r"\.c:\d+", msg) or "its assertion is not shown" not in msg:
            fail(f"{t['name']} shows its assertion: {msg[:300]!r}")
    print(f"{len(hid)} failing hidden test(s), none quotes its source")


def units(d):
    """Unit-level scoring (KN_GRADE_SCORING=unit) of a submission whose strided.c is the
    skeleton's: reduce.c and broadcast.c score in full, thanks to tests that failed with all
    of the student's units and passed beside the staff's."""
    r = schema(f"{d}/results.json")
    u = r["extra_data"].get("units", {})
    if r["extra_data"].get("scoring") != "unit":
        fail("the scoring is not 'unit'")
    for name in ("reduce.c", "broadcast.c"):
        if name not in u or not 0 < u[name]["score"] == u[name]["max_score"]:
            fail(f"{name} should score in full at unit level: {u}")
    if "strided.c" in u and u["strided.c"]["score"] >= u["strided.c"]["max_score"]:
        fail(f"the skeleton's strided.c scores in full: {u}")
    rescued = [t["name"] for t in r["tests"] if t["output"].startswith("passed beside the staff's")]
    if not rescued or "unit-level scores" not in r["output"]:
        fail("no test passed beside the staff's units, or no unit-level line in the output")
    print(f"unit level {u}; {len(rescued)} test(s) pass beside the staff's other units")


def leftovers():
    """No live process of a sandbox user id (>= 2000000000) remains; zombies (already dead,
    waiting for init to reap them) do not count. Processes being killed get 5 s to go."""
    import glob
    import time
    for _ in range(20):
        alive = []
        for st in glob.glob("/proc/[0-9]*/status"):
            try:
                f = dict(l.split(":", 1) for l in open(st).read().splitlines() if ":" in l)
            except OSError:
                continue
            if int(f["Uid"].split()[0]) >= 2000000000 and not f["State"].strip().startswith("Z"):
                alive.append(st.split("/")[2] + " " + f["Name"].strip())
        if not alive:
            print("no process of the sandbox's user ids is left")
            return
        time.sleep(0.25)
    fail("processes of sandbox user ids are still alive: " + ", ".join(alive))


def rubric_cases():
    """The rubric mistakes issue 36 found accepted, each on a scratch copy of a lab's rubric:
    rubric.py check must refuse every one, naming it."""
    import os
    import shutil
    import subprocess
    import tempfile
    cases = []  # (lab, name, edit, what the refusal must say)
    for lab, name, old, new, says in (
            ("10", "no total", "total 100\n", "", "no 'total N' line"),
            ("10", "101 points", "ranges_of_ten_over_four 4 ", "ranges_of_ten_over_four 5 ", "add up to 101"),
            ("10", "fractional points", "ranges_of_ten_over_four 4 ", "ranges_of_ten_over_four 3.5 ", "points an integer"),
            ("10", "two mpi= tags", "ranges_of_ten_over_four 4 mpi=2", "ranges_of_ten_over_four 4 mpi=2 mpi=4",
             "more than once"),
            ("10", "a dropped mpi=4", "all_reduce_sums_exactly 5 mpi=4", "all_reduce_sums_exactly 5", "needs mpi=4"),
            ("10", "a rank count the test does not declare", "all_reduce_sums_exactly 5 mpi=4",
             "all_reduce_sums_exactly 5 mpi=2", "declares 4 ranks"),
            ("10", "a dropped relay tag", "all_reduce_sums_exactly 5 mpi=4 checked relay",
             "all_reduce_sums_exactly 5 mpi=4 checked", "needs the tags relay and checked"),
            ("10", "relay on a test that is not a relay test", "ranges_of_ten_over_four 4 mpi=2 checked",
             "ranges_of_ten_over_four 4 mpi=2 checked relay", "not a KN_MPI_RELAY_TEST"),
            ("01", "mpi= on a Criterion test", None, " mpi=2", "not a KN_MPI_TEST")):
        cases.append((lab, name, old, new, says))
    bad = 0
    for lab, name, old, new, says in cases:
        t = tempfile.mkdtemp()
        try:
            os.symlink(os.path.abspath("labs"), os.path.join(t, "labs"))
            os.makedirs(os.path.join(t, "tests", "lab" + lab))
            for f in os.listdir("tests/lab" + lab):
                if f.endswith(".c"):
                    os.symlink(os.path.abspath(os.path.join("tests/lab" + lab, f)), os.path.join(t, "tests/lab" + lab, f))
            text = open(f"tests/lab{lab}/rubric.txt").read()
            if old is None:  # append the tag to the first entry
                lines = text.split("\n")
                k = next(i for i, l in enumerate(lines) if "::" in l and not l.startswith("#"))
                lines[k] += new
                edited = "\n".join(lines)
            else:
                edited = text.replace(old, new, 1)
            assert edited != text, f"{name}: the edit did not apply (the rubric changed?)"
            open(os.path.join(t, "tests", "lab" + lab, "rubric.txt"), "w").write(edited)
            p = subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "rubric.py"), "check", lab, t],
                               capture_output=True, text=True)
            ok = p.returncode == 1 and says in p.stdout
            print(f"{'refused' if ok else 'ACCEPTED'}: lab {lab}, {name}")
            bad += not ok
        finally:
            shutil.rmtree(t)
    if bad:
        fail(f"{bad} bad rubric(s) were not refused")


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "schema":
        schema(sys.argv[2])
    elif len(sys.argv) >= 3 and sys.argv[1] == "junit":
        junit(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "brief":
        brief(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "units":
        units(sys.argv[2])
    elif len(sys.argv) == 2 and sys.argv[1] == "rubric-cases":
        rubric_cases()
    elif len(sys.argv) == 2 and sys.argv[1] == "leftovers":
        leftovers()
    elif len(sys.argv) == 7 and sys.argv[1] == "case":
        case(*sys.argv[2:])
    else:
        fail(__doc__)


if __name__ == "__main__":
    main()
