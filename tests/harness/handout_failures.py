#!/usr/bin/env python3
"""handout_failures.py TREE LAB_DIR REFERENCE_DIR — every example failure a handout shows
is one the public tests really print.

A handout (TREE/labs/LAB_DIR/README.md) introduces an example failure with a comment
naming the mistake as an exact edit of a reference unit, followed by the fenced block the
tests print for it:

    <!-- failure: rules.c: OLD TEXT => NEW TEXT -->
    ```
    FAIL lab02_rules::...
        Assertion failed: ...
    ```

(\\n in OLD/NEW stands for a newline). For each one, the reference units
(REFERENCE_DIR/*.c) are copied into TREE/labs/LAB_DIR/, the edit is made (OLD must occur
exactly once), `make test-labNN` runs in TREE, and every line of the block must appear in
its output, in order. The skeleton units are put back afterwards. Exit 0 when every
example is printed as shown (a handout with no example passes)."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

MARK = re.compile(r"<!--\s*failure:\s*([\w.-]+):\s*(.*?)\s*=>\s*(.*?)\s*-->\s*\n```[^\n]*\n(.*?)\n```", re.S)


def unescape(s):
    return s.replace("\\n", "\n")


def main():
    tree, lab_dir, ref = sys.argv[1], sys.argv[2], sys.argv[3]
    lab = re.match(r"lab(\d+)", lab_dir).group(1)
    units = os.path.join(tree, "labs", lab_dir)
    text = open(os.path.join(units, "README.md"), encoding="utf-8").read()
    examples = MARK.findall(text)
    if not examples:
        print("handout lab%s: no example failures" % lab)
        return 0
    keep = tempfile.mkdtemp()
    sources = [f for f in os.listdir(ref) if f.endswith(".c")]
    for f in sources:
        shutil.copy(os.path.join(units, f), keep)
    bad = 0
    try:
        for unit, old, new, block in examples:
            old, new = unescape(old), unescape(new)
            for f in sources:
                shutil.copy(os.path.join(ref, f), units)
            path = os.path.join(units, unit)
            src = open(path, encoding="utf-8").read()
            if src.count(old) != 1:
                print("handout lab%s: the edit of %s is stale: %r occurs %d times in the reference"
                      % (lab, unit, old, src.count(old)))
                bad += 1
                continue
            open(path, "w", encoding="utf-8").write(src.replace(old, new))
            r = subprocess.run(["make", "-C", tree, "--no-print-directory", "BUILD_ROOT=build", "test-lab" + lab],
                               capture_output=True, text=True)
            out = r.stdout + r.stderr
            pos, missing = 0, None
            for line in (l.strip() for l in block.splitlines()):
                if not line:
                    continue
                at = out.find(line, pos)
                if at < 0:
                    missing = line
                    break
                pos = at + len(line)
            if missing is None:
                print("handout lab%s: the example failure for %s (%s) is what the tests print" % (lab, unit, old.strip()[:40]))
            else:
                bad += 1
                print("handout lab%s: the tests do not print the handout's example for the edit of %s (%s);"
                      " missing line:\n    %s\nwhat they print:" % (lab, unit, old.strip()[:40], missing))
                print("\n".join("    " + l for l in out.splitlines() if l.strip().startswith(("FAIL", "Assertion", "CRASH", "    ")))[:3000])
    finally:
        for f in sources:
            shutil.copy(os.path.join(keep, f), units)
        shutil.rmtree(keep)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
