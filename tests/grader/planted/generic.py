"""generic.py — plant the in-memory and record forgeries (forge.py) into every unit function
of a lab's SKELETON (issue 36), for the hostile self-test of a lab whose tests are all
`checked` (tests/grader/hostile-lab.sh). Each case folder OUT_DIR/<case>/ gets the lab's
units from labs/, with the forgery's code after the last #include of each unit and a call
to it at the start of every function defined on one line at the file's top level
(`TYPE name(ARGS) {`), so every test that calls one of them runs it. Cases:
  memforge        finds the record's path and token in its own process's memory and forges
                  the pass there: it beats a verdict decided inside the test's process
                  (KN_GRADE_CHECKER=0, which the self-test runs to show it), not the checker
                  (the staff's build of the test judges the results this process wrote)
  forge_record    looks for the record's path and token where earlier graders put them
"""
import os
import re
import shutil

from forge import FORGE, MEMFORGE

PLANTS = {
    "memforge": ("    planted_memforge();\n", MEMFORGE),
    "forge_record": ("    planted_forge();\n", FORGE),
}
FUNC = re.compile(r"^(?!static\b)[A-Za-z_][A-Za-z0-9_ \*]*\b[A-Za-z_][A-Za-z0-9_]*\([^;]*\) \{\n$")


def plant(skel, out):
    """Write OUT/<case>/ for each case from the units of the skeleton folder SKEL; returns
    the number of functions planted per case (asserts there is at least one)."""
    planted = 0
    for case, (call, pre) in PLANTS.items():
        d = os.path.join(out, case)
        os.makedirs(d, exist_ok=True)
        planted = 0
        for f in sorted(os.listdir(skel)):
            if not f.endswith(".c"):
                continue
            lines = open(os.path.join(skel, f)).readlines()
            last_inc = max((i for i, l in enumerate(lines) if l.startswith("#include")), default=-1)
            res = []
            for i, l in enumerate(lines):
                res.append(l)
                if i == last_inc:
                    res.append(pre)
                if FUNC.match(l):
                    res.append(call)
                    planted += 1
            open(os.path.join(d, f), "w").write("".join(res))
        assert planted > 0, (skel, "no function to plant in: update generic.py")
    return planted


if __name__ == "__main__":
    import sys
    print("planted in %d functions" % plant(sys.argv[1], sys.argv[2]))
