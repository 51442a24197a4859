#!/usr/bin/env python3
"""report.py — turn one grading's verdicts into results.json, junit.xml and summary.txt.

grade.sh calls it after the tests ran. Inputs (all written by the grader as root, never by
the student's code): the manifest ("IDX public|hidden BINARY suite::name" per test), the
verdicts WORK/v/IDX ("passed|failed|skipped SECONDS") and reasons WORK/v/IDX.msg, the
student's output WORK/out/IDX (only ever shown, truncated, never parsed), the rubric.

Scoring: a test scores its rubric points when passed, points * skip-weight when skipped
(skip-weight "scale": the fraction of the points of the tests that ran which the submission
earned, so skipped GPU tests are in effect left out of the total and the score still reads
out of the rubric's total: the reference scores 100, the skeleton what it earned)
(a GPU test where there is no GPU), 0 otherwise. Tests that ran but are not in the rubric
are listed with 0 points; rubric tests that were never reported fail with that reason.
When the build failed, the failed test "build" carries the compiler's messages and every
rubric test fails with "not run". public.txt holds only the build and the public tests (safe
to send before the deadline); --hidden-details brief replaces a failing hidden test's
assertion text (which quotes its source) with one line. results.json follows Gradescope's documented format
(https://gradescope-autograders.readthedocs.io/en/latest/specs/); totals that format has no
top-level key for (max_score, counts) sit in extra_data.
"""
import argparse
import json
import os
import re
import sys
import xml.etree.ElementTree as ET

import rubric as rubric_mod

OUT_LIMIT = 2000  # characters of the student's own output kept per failing test


def read(path, limit=None):
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1 if limit else -1)
    except OSError:
        return ""
    text = data.decode("utf-8", "replace")
    text = "".join(c if c in "\n\t" or c.isprintable() else "?" for c in text)
    if limit and len(text) > limit:
        text = text[:limit] + "\n[... output truncated ...]"
    return text


def parse_rubric(path):
    """suite::name -> (points, tags), and the rubric (rubric.py); raises ValueError naming
    the bad lines (grade.sh has run `rubric.py check` before: this is a last guard)."""
    r = rubric_mod.parse(path)
    if r.problems:
        raise ValueError("\n".join(r.problems))
    return r.entries, r


def public_tests(tree, lab):
    """Names of the public tests, read from labs/labNN-*/tests/*.c (used when nothing ran)."""
    names = set()
    labs = os.path.join(tree, "labs")
    for d in sorted(os.listdir(labs)) if os.path.isdir(labs) else []:
        if d.startswith(f"lab{lab}-"):
            tdir = os.path.join(labs, d, "tests")
            for fn in sorted(os.listdir(tdir)) if os.path.isdir(tdir) else []:
                if fn.endswith(".c"):
                    src = read(os.path.join(tdir, fn))
                    names.update(f"{s}::{n}" for s, n in re.findall(r"KN_(?:MPI_)?TEST\(\s*(\w+)\s*,\s*(\w+)", src))
    return names


def main():
    ap = argparse.ArgumentParser()
    for a in ("lab", "name", "rubric", "manifest", "work", "build-log", "notes", "out"):
        ap.add_argument("--" + a, required=True)
    ap.add_argument("--build-ok", type=int, required=True)
    ap.add_argument("--elapsed", type=float, default=0.0)
    ap.add_argument("--hidden-visibility", default="after_due_date",
                    choices=["hidden", "after_due_date", "after_published", "visible"])
    ap.add_argument("--skip-weight", default="0", help="a number in [0, 1], or 'scale'")
    ap.add_argument("--hidden-details", default="full", choices=["full", "brief"])
    ap.add_argument("--scoring", default="", choices=["", "all", "unit"])
    ap.add_argument("--isolation", default="unknown")
    # Before the deadline the unit-level lines count public tests only (hidden ones would
    # leak through them); --release (after the deadline) counts every test.
    ap.add_argument("--release", action="store_true")
    a = ap.parse_args()
    rubric, rub = parse_rubric(a.rubric)
    scale_skips = a.skip_weight == "scale"
    a.skip_weight = 0.0 if scale_skips else float(a.skip_weight)
    pub = public_tests(os.path.join(a.work, "tree"), a.lab)

    ran = []  # (idx, phase, name)
    for line in read(a.manifest).splitlines():
        f = line.split()
        if len(f) == 4:
            ran.append((f[0], f[1], f[3]))
    def verdict(idx, phase):
        v = read(os.path.join(a.work, "v", idx)).split()
        status = v[0] if v and v[0] in ("passed", "failed", "skipped") else "failed"
        secs = float(v[1]) if len(v) > 1 else 0.0
        msg = read(os.path.join(a.work, "v", idx + ".msg")).strip() if v else "the grader lost this test's verdict"
        if phase == "hidden" and status == "failed" and a.hidden_details == "brief" and v[2:] == ["assert"]:
            # The assertion text quotes the hidden test's source: keep the tests reusable.
            msg = "\n".join(["the hidden test failed (its assertion is not shown)"] +
                            [l for l in msg.splitlines() if l.startswith("the test crashed")])
        so = read(os.path.join(a.work, "out", idx), OUT_LIMIT).strip() if status == "failed" else ""
        return dict(phase=phase, status=status, secs=secs, msg=msg, so=so)

    tests = []
    seen = set()
    for idx, phase, name in ran:
        seen.add(name)
        tests.append(dict(name=name, **verdict(idx, phase)))
    for name in rubric:
        if name not in seen:
            why = ("not run: the submission did not build (see the test 'build')" if not a.build_ok
                   else "this rubric test was not found in the test binaries")
            tests.append(dict(name=name, phase="public" if name in pub else "hidden",
                              status="failed", secs=0.0, msg=why, so=""))

    if scale_skips:  # the share of the points that ran which were earned
        ran_pts = sum(rubric.get(t["name"], (0.0, []))[0] for t in tests if t["status"] != "skipped")
        won_pts = sum(rubric.get(t["name"], (0.0, []))[0] for t in tests if t["status"] == "passed")
        a.skip_weight = won_pts / ran_pts if ran_pts > 0 else 0.0
    # Unit level (grade.sh 3b): each unit the student gave, beside the staff's other units.
    # A test of unit U passes at unit level when it passed with all of the student's units
    # or with U's build; the rubric's `scoring unit` (or --scoring) makes that what counts.
    units_of = {}
    for l in read(os.path.join(a.work, "units.map")).splitlines():
        if len(l.split()) == 2:
            units_of.setdefault(l.split()[0], []).append(l.split()[1])
    taken = set(read(os.path.join(a.work, "taken")).split())
    rerun = {}
    for line in read(os.path.join(a.work, "manifest-units")).splitlines():
        f = line.split()
        if len(f) == 5:
            rerun[(f[3], f[4])] = verdict(f[0], f[1])
    scoring = a.scoring or rub.scoring
    units = {}  # unit -> [points passed, points]: every test (results.json's extra_data, after the deadline)
    units_pub = {}  # the same over public tests only (what the student sees before the deadline)
    unit_built = set(read(os.path.join(a.work, "units-built")).split())  # compiled alone when the build failed
    for t in tests:
        us = [u for u in units_of.get(t["name"], []) if u in taken and (a.build_ok or u in unit_built)]
        if not us:
            continue
        pts = rubric.get(t["name"], (0.0, []))[0]
        r = {u: rerun.get((t["name"], u)) for u in us}
        t["unit_passed"] = any(t["status"] == "passed" or bool(r[u] and r[u]["status"] == "passed") for u in us)
        for u in us:
            ok = t["status"] == "passed" or bool(r[u] and r[u]["status"] == "passed")
            # a skipped test (a GPU test without a GPU) counts as it does in the score
            got = pts if ok else pts * a.skip_weight if t["status"] == "skipped" else 0.0
            for d in ([units, units_pub] if t["phase"] == "public" else [units]):
                d.setdefault(u, [0.0, 0.0])
                d[u][0] += got
                d[u][1] += pts
        if not a.build_ok:
            continue
        if scoring == "unit" and t["status"] != "passed" and t["unit_passed"]:
            t["msg"] = ("passed beside the staff's versions of the other units (the lab scores units one "
                        "by one); with all of your units it fails:\n" + t["msg"])
            t["status"], t["so"] = "passed", ""
        elif len(us) == 1 and r[us[0]] and r[us[0]]["status"] != "passed" and t["status"] == "failed":
            t["msg"] += "\n(it fails beside the staff's versions of the other units too: the problem is in %s)" % us[0]

    gs_tests, total, max_total = [], 0.0, 0.0
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    build_msg = read(a.build_log, 20000).strip()
    broken = read(os.path.join(a.work, "units-broken")).split()
    gs_tests.append({"name": "build", "number": "0", "score": 0.0, "max_score": 0.0,
                     "status": "passed" if a.build_ok and not broken else "failed",
                     "output": build_msg or ("the units compiled and linked" if a.build_ok else "the build failed"),
                     "visibility": "visible", "tags": ["build"]})
    for n, t in enumerate(tests, 1):
        pts, tags = rubric.get(t["name"], (0.0, []))
        score = pts if t["status"] == "passed" else pts * a.skip_weight if t["status"] == "skipped" else 0.0
        t["score"], t["max"] = score, pts
        total += score
        max_total += pts
        counts[t["status"]] += 1
        out = t["msg"] or "passed"
        if t.get("so"):
            out += "\n--- output of the test (shown as is, never used for grading) ---\n" + t["so"]
        if t["name"] not in rubric:
            out += "\n(not in the rubric: worth 0 points)"
        gs_tests.append({"name": t["name"], "number": str(n), "score": round(score, 4), "max_score": pts,
                         "status": "passed" if t["status"] == "passed" or (t["status"] == "skipped" and score >= pts)
                         else "failed",
                         "output": out,
                         "visibility": "visible" if t["phase"] == "public" else a.hidden_visibility,
                         "tags": [t["phase"]] + (["skipped"] if t["status"] == "skipped" else []) + tags})
    notes = read(a.notes).strip()
    pub_t = [t for t in tests if t["phase"] == "public"]
    lines = [f"kiln lab {a.lab}: {a.name}"]
    if notes:
        lines.append(notes)
    lines.append("isolation: " + a.isolation)
    lines.append("build: " + ("ok" if a.build_ok else "FAILED (see the test 'build')"))
    shown = units if a.release else units_pub
    if shown:
        lines.append("unit-level scores, %s (each of your units beside the staff's other units): " % (
                     "all tests" if a.release else "public tests only") +
                     ", ".join("%s %g/%g" % (u, p, m) for u, (p, m) in sorted(shown.items())) +
                     ("; the score counts units one by one" if scoring == "unit" else
                      "; the score counts all of your units together"))
    lines.append("public tests: %d of %d passed, %g of %g points" % (
        sum(t["status"] == "passed" for t in pub_t), len(pub_t),
        sum(t["score"] for t in pub_t), sum(t["max"] for t in pub_t)))
    results = {
        "score": round(total, 4),
        "execution_time": int(round(a.elapsed)),
        "output": "\n".join(lines),
        "output_format": "text",
        "test_output_format": "text",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "extra_data": {"lab": a.lab, "submission": a.name, "max_score": max_total, "build_ok": bool(a.build_ok),
                       "isolation": a.isolation,
                       "scoring": scoring, "units": {u: {"score": p, "max_score": m} for u, (p, m) in shown.items()},
                       "units_count": "all tests" if a.release else "public tests only",
                       "passed": counts["passed"], "failed": counts["failed"], "skipped": counts["skipped"]},
        "tests": gs_tests,
    }
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
        f.write("\n")

    suites = ET.Element("testsuites", name=f"kiln-lab{a.lab}", tests=str(len(tests) + 1),
                        failures=str(counts["failed"] + (0 if a.build_ok else 1)), skipped=str(counts["skipped"]), time="%.3f" % a.elapsed)
    groups = [("build", [dict(name="build::build", status="passed" if a.build_ok else "failed", secs=0.0,
                              msg=build_msg, score=0.0, max=0.0)])]
    groups += [(f"lab{a.lab}-{p}", [t for t in tests if t["phase"] == p]) for p in ("public", "hidden")]
    for gname, ts in groups:
        s = ET.SubElement(suites, "testsuite", name=gname, tests=str(len(ts)),
                          failures=str(sum(t["status"] == "failed" for t in ts)),
                          skipped=str(sum(t["status"] == "skipped" for t in ts)),
                          time="%.3f" % sum(t["secs"] for t in ts))
        for t in ts:
            cls, _, nm = t["name"].partition("::")
            c = ET.SubElement(s, "testcase", classname=cls, name=nm or cls, time="%.3f" % t["secs"])
            ET.SubElement(c, "properties")
            ET.SubElement(c.find("properties"), "property", name="points", value="%g/%g" % (t["score"], t["max"]))
            if t["status"] == "failed":
                first = (t["msg"].splitlines() or ["failed"])[0][:200]
                ET.SubElement(c, "failure", message=first).text = t["msg"]
                if t.get("so"):
                    ET.SubElement(c, "system-out").text = t["so"]
            elif t["status"] == "skipped":
                ET.SubElement(c, "skipped", message=t["msg"][:200])
    ET.ElementTree(suites).write(os.path.join(a.out, "junit.xml"), encoding="utf-8", xml_declaration=True)

    with open(os.path.join(a.out, "summary.txt"), "w") as f:
        f.write("\n".join(lines) + "\n\n")
        if not a.build_ok:
            f.write("FAIL build\n" + "".join("    " + l + "\n" for l in build_msg.splitlines()[:40]))
        for t in tests:
            word = {"passed": "PASS", "failed": "FAIL", "skipped": "SKIP"}[t["status"]]
            f.write("%s %-60s %g/%g  [%s]\n" % (word, t["name"], t["score"], t["max"], t["phase"]))
            if t["status"] != "passed":
                for l in t["msg"].splitlines()[:6]:
                    f.write("    " + l + "\n")
        f.write("\nscore: %g / %g\n" % (total, max_total))
        if counts["skipped"]:
            f.write("%d skipped (each worth %g of its points%s)\n" % (
                counts["skipped"], a.skip_weight, ": the share of the other tests' points earned" if scale_skips else ""))
        f.write("%d passed, %d failed\n" % (counts["passed"], counts["failed"]))
    # public.txt: safe to send before the deadline: the build and the public tests only
    # (no hidden test's name, score or message, no total).
    with open(os.path.join(a.out, "public.txt"), "w") as f:
        f.write("\n".join(lines) + "\n\n")
        if not a.build_ok:
            f.write("FAIL build\n" + "".join("    " + l + "\n" for l in build_msg.splitlines()[:40]))
        for t in pub_t:
            word = {"passed": "PASS", "failed": "FAIL", "skipped": "SKIP"}[t["status"]]
            f.write("%s %-60s %g/%g\n" % (word, t["name"], t["score"], t["max"]))
            if t["status"] != "passed":
                for l in t["msg"].splitlines()[:6]:
                    f.write("    " + l + "\n")
        f.write("\npublic tests: %g / %g points (hidden tests are graded after the deadline)\n" % (
            sum(t["score"] for t in pub_t), sum(t["max"] for t in pub_t)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
