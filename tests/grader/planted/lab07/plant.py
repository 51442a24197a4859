#!/usr/bin/env python3
"""plant.py OUT_DIR — the hostile lab 07 submissions of the grader's self-test (issue 36).

Run from the repository root (tests/grader/hostile-lab.sh does, into a temporary folder).
Each case folder OUT_DIR/<case>/ gets lab 07's three units: the SKELETON's (labs/), with
one attack on the grader planted in every unit function, so that each case must score no
more than the untouched skeleton. Cases:
  memforge        finds the record's path and token in its own process's memory
                  (/proc/self/maps) and forges the pass there (forge.py): it beats a
                  verdict decided inside the test's process (KN_GRADE_CHECKER=0, which the
                  self-test runs to show it), not the checker (every lab 07 test is
                  `checked`: the staff's build of the test judges the results this process
                  wrote, and it wrote none)
  forge_record    looks for the record's path and token where earlier graders put them
                  (other processes' /proc/PID/cmdline and environ, the secret files)
"""
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from forge import FORGE, MEMFORGE  # noqa: E402

SKEL = "labs/lab07-cudagen"
HOOKS = [
    ("launch.c", "kn_cuda_launch kn_cuda_launch_config(const kn_kernel *k, const kn_cuda_limits *lim) {\n"),
    ("element_loop.c", "kn_status kn_render_cuda_element_loop(const kn_kernel *k, const char *ix, char *out, size_t cap) {\n"),
    ("block_reduce.c", "const char *kn_cuda_block_reduce_source(void) {\n"),
]
PLANTS = {
    "memforge": ("    planted_memforge();\n", MEMFORGE),
    "forge_record": ("    planted_forge();\n", FORGE),
}


def main():
    out = sys.argv[1]
    for case, (code, pre) in PLANTS.items():
        d = os.path.join(out, case)
        os.makedirs(d, exist_ok=True)
        for f in os.listdir(SKEL):
            if f.endswith(".c"):
                shutil.copy(os.path.join(SKEL, f), d)
        for unit, hook in HOOKS:
            p = os.path.join(d, unit)
            src = open(p).read()
            assert hook in src, (case, unit, "hook not found: update plant.py")
            src = src.replace(hook, hook + code, 1)
            src = src.replace('#include "kiln/codegen.h"\n', '#include "kiln/codegen.h"\n' + pre, 1)
            open(p, "w").write(src)
    return 0


if __name__ == "__main__":
    sys.exit(main())
