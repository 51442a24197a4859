#!/usr/bin/env python3
"""reftime.py BIN... — the CPU time of every test of the reference solution, one line each:
"suite::name SECONDS". base.sh runs it once per grading base on the test binaries built with
the staff's units (IMPL=solutions); grade.sh scales each test's CPU limit from it (a small
multiple, with a floor), so an infinite loop costs seconds, not the generous fixed limit.
Each test runs alone (--filter, -j1) and is timed by the CPU time of its processes (the
runner and its worker), which the machine's load changes far less than wall-clock time."""
import re
import resource
import subprocess
import sys


def tests_of(binary):
    out = subprocess.run([binary, "--list"], capture_output=True, text=True, timeout=60).stdout
    suite, names = None, []
    for line in out.splitlines():
        m = re.match(r"^(\w+): \d+ tests?$", line)
        if m:
            suite = m.group(1)
            continue
        m = re.match(r"^(?:├── |└── |\|-- |`-- )(\w+)", line)
        if m and suite:
            names.append(f"{suite}::{m.group(1)}")
    return names


def cpu_children():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main(bins):
    for b in bins:
        for t in tests_of(b):
            suite, name = t.split("::")
            c0 = cpu_children()
            subprocess.run([b, "--filter", f"{suite}/{name}", "-j1"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=600)
            print(f"{t} {cpu_children() - c0:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
