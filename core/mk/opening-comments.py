#!/usr/bin/env python3
"""List every core/ source file with its opening comment, to read them against the code.

Why: every kiln file opens with a comment saying what it does and why, and such comments
drift as the code moves (issue 30 sampled 15 and found 4 wrong). This prints, per file, the
first comment block (C's /* ... */ or // lines; # lines for shell and make), so a reviewer
reads them all in one sitting; --first prints only its first sentence-line (what the per-
folder READMEs list); --missing lists the files with no opening comment and exits 1 if any;
--refs lists what an opening comment names that the tree no longer has (a kn_/KILN_ name
defined or used nowhere in core/, tests/, solutions/ or plots/ but in comments, a path that
does not exist, an ARCHITECTURE.md section that is not there) and exits 1 if any: the
cheap half of reading them, the rest is a person reading comment against code.

    python3 core/mk/opening-comments.py [--first|--missing|--refs] [DIR...]   (default: core)
"""
import os
import re
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


NAME = re.compile(r"\b(kn_[A-Za-z0-9_]+|KN_[A-Z0-9_]+|KILN_[A-Z0-9_]+)\b")
PATH = re.compile(r"\b((?:core|tests|plots|solutions|labs|lessons|book|datasets)/[A-Za-z0-9_./<>*-]+[A-Za-z0-9_])")
SECTION = re.compile(r'ARCHITECTURE\.md,?\s+"([^"]+)"')
_code = None


def code_text():
    """Every source file's text with its comments removed, joined: where names are used."""
    global _code
    if _code is None:
        parts = []
        for root in ("core", "tests", "solutions", "plots", "Makefile", "book"):
            for dp, _, fns in os.walk(root) if os.path.isdir(root) else [("", [], [root])]:
                for fn in fns:
                    if fn.endswith(EXTS) or fn == "Makefile":
                        s = open(os.path.join(dp, fn), encoding="utf-8", errors="replace").read()
                        s = re.sub(r"/\*.*?\*/", " ", s, flags=re.S)
                        s = re.sub(r"//[^\n]*", " ", s)
                        parts.append(s)
        _code = "\n".join(parts)
    return _code


def stale_refs(path, comment):
    """What the comment names that the tree does not have."""
    text = " ".join(comment)
    out = []
    code = code_text()
    for n in sorted(set(NAME.findall(text))):
        if n.endswith("_") or n.endswith(("_S", "_T")) or re.search(r"\b%s\*" % re.escape(n), text):
            continue  # a prefix, a family (kn_comm_i*) or a type-template name (kn_sc_unary_S)
        if not re.search(r"\b%s\b" % re.escape(n), code) and not (
                n.endswith("s") and re.search(r"\b%s\b" % re.escape(n[:-1]), code)):
            out.append("name %s" % n)
    for p in sorted(set(PATH.findall(text))):
        if any(c in p for c in "<>*") or "NN" in p:
            continue
        if not os.path.exists(p) and not os.path.exists(p.rstrip(".")):
            out.append("path %s" % p)
    arch = open("ARCHITECTURE.md", encoding="utf-8").read() if os.path.exists("ARCHITECTURE.md") else ""
    for s in sorted(set(SECTION.findall(text))):
        if s not in arch:
            out.append('section ARCHITECTURE.md, "%s"' % s)
    return out


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    first = "--first" in sys.argv
    missing = "--missing" in sys.argv
    refs = "--refs" in sys.argv
    bad = 0
    for root in args or ["core"]:
        walk = [(os.path.dirname(root), [], [os.path.basename(root)])] if os.path.isfile(root) else os.walk(root)
        for dp, dns, fns in sorted(walk):
            dns.sort()
            for fn in sorted(fns):
                if not fn.endswith(EXTS) and not os.path.isfile(root):
                    continue
                p = os.path.join(dp, fn)
                c = opening_comment(p)
                if refs:
                    for r in stale_refs(p, c):
                        print("%s: %s" % (p, r))
                        bad += 1
                elif missing:
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
