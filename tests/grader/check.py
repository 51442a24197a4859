#!/usr/bin/env python3
"""check.py — the grader's own checks, used by tests/grader/selftest.sh.

  check.py schema RESULTS_JSON      RESULTS_JSON follows Gradescope's documented results
                                    format (https://gradescope-autograders.readthedocs.io/
                                    en/latest/specs/): types, allowed keys and values, and
                                    score equal to the sum of the tests' scores
  check.py junit JUNIT_XML          parses, and its counts agree with its test cases
  check.py leftovers                no live process of a sandbox user id remains
  check.py case DIR MIN MAX BUILD WHY
                                    DIR holds one grading (results.json, summary.txt):
                                    score in [MIN, MAX], build ok|failed, and unless WHY is
                                    "-", lab01_reduce::mean_max_min_prod failed with a
                                    reason matching WHY ("_" = space); plus the case's own
                                    checks (fork bomb contained, writes denied, summary line)
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
    if ok != (build == "ok"):
        fail(f"build_ok is {ok}, expected {build}")
    tests = {t["name"]: t for t in r["tests"]}
    if why != "-":
        t = tests.get("lab01_reduce::mean_max_min_prod")
        if not t or t["status"] != "failed" or not re.search(why.replace("_", " "), t["output"]):
            fail(f"lab01_reduce::mean_max_min_prod should fail with /{why}/: {t and t['output'][:300]!r}")
    with open(f"{d}/summary.txt") as f:
        last = f.read().rstrip("\n").splitlines()[-1]
    p, fl = r["extra_data"]["passed"], r["extra_data"]["failed"]
    if last != f"{p} passed, {fl} failed":
        fail(f"summary.txt ends with {last!r}, expected '{p} passed, {fl} failed'")
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
    print(f"{d}: score {r['score']:g} in [{lo:g}, {hi:g}], build {build}" + ("" if why == "-" else f", fails with /{why}/"))


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


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "schema":
        schema(sys.argv[2])
    elif len(sys.argv) >= 3 and sys.argv[1] == "junit":
        junit(sys.argv[2])
    elif len(sys.argv) == 2 and sys.argv[1] == "leftovers":
        leftovers()
    elif len(sys.argv) == 7 and sys.argv[1] == "case":
        case(*sys.argv[2:])
    else:
        fail(__doc__)


if __name__ == "__main__":
    main()
