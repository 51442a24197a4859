#!/usr/bin/env python3
"""List every core/ source file with its opening comment, to read them against the code.

Why: every kiln file opens with a comment saying what it does and why, and such comments
drift as the code moves (issue 30 sampled 15 and found 4 wrong). This prints, per file, the
first comment block (C's /* ... */ or // lines; # lines for shell and make), so a reviewer
reads them all in one sitting; --first prints only its first sentence-line (what the per-
folder READMEs list); --missing lists the files with no opening comment and exits 1 if any.

    python3 core/mk/opening-comments.py [--first|--missing] [DIR...]   (default: core)
"""
import os
import sys

EXTS = (".c", ".h", ".cu", ".inc", ".def", ".sh", ".mk", ".py")


def opening_comment(path):
    """The file's first comment block as a list of lines (markers stripped), or []."""
    lines = open(path, encoding="utf-8", errors="replace").read().split("\n")
    i = 0
    while i < len(lines) and (not lines[i].strip() or lines[i].startswith("#!")):
        i += 1
    out = []
    if i < len(lines) and lines[i].lstrip().startswith("/*"):
        while i < len(lines):
            s = lines[i].strip()
            end = "*/" in s
            s = s.split("*/")[0].lstrip("/").lstrip("*").strip()
            out.append(s)
            i += 1
            if end:
                break
    elif i < len(lines) and lines[i].lstrip().startswith("//"):
        while i < len(lines) and lines[i].lstrip().startswith("//"):
            out.append(lines[i].strip()[2:].strip())
            i += 1
    elif i < len(lines) and lines[i].lstrip().startswith("#") and not lines[i].lstrip().startswith("#include"):
        while i < len(lines) and lines[i].lstrip().startswith("#") and not lines[i].lstrip().startswith(("#include", "#ifndef", "#define", "#if")):
            out.append(lines[i].strip()[1:].strip())
            i += 1
    elif i < len(lines) and lines[i].lstrip().startswith('"""'):
        while i < len(lines):
            out.append(lines[i].strip().strip('"'))
            i += 1
            if i > 1 and lines[i - 1].rstrip().endswith('"""') and len(out) > 1:
                break
    while out and not out[-1]:
        out.pop()
    return out


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    first = "--first" in sys.argv
    missing = "--missing" in sys.argv
    bad = 0
    for root in args or ["core"]:
        for dp, dns, fns in sorted(os.walk(root)):
            dns.sort()
            for fn in sorted(fns):
                if not fn.endswith(EXTS):
                    continue
                p = os.path.join(dp, fn)
                c = opening_comment(p)
                if missing:
                    if not c:
                        print(p)
                        bad += 1
                elif first:
                    print("%s: %s" % (p, c[0] if c else "(no opening comment)"))
                else:
                    print("== %s" % p)
                    print("\n".join("   " + l for l in c) if c else "   (no opening comment)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
