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

--readmes rewrites the "## Files" list of every core/<folder>/README.md from the files'
opening comments (their first sentence), --check-readmes exits 1 when a list is not what
--readmes would write (a file added, removed or re-described: run `make folder-readmes`).

    python3 core/mk/opening-comments.py [--first|--missing|--refs] [DIR...]   (default: core)
    python3 core/mk/opening-comments.py --readmes|--check-readmes
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


def summary(path):
    """A file's opening comment as one line: its first sentence, its name dropped, cut near
    160 characters (parentheses first, then at a comma, semicolon or colon)."""
    text = " ".join(l for l in opening_comment(path) if l).strip()
    text = re.sub(r"^[\w./]+(\s*\[[^\]]*\])?\s*(\u2014|:|-)\s*", "", text, count=1)
    m = re.search(r"\.(\s|$)", text)
    s = text[:m.start() + 1] if m else text
    if len(s) > 160:  # drop parentheses past the first words, which name the thing
        head, rest = s[:60], s[60:]
        while True:
            n = re.sub(r" ?\([^()]*\)", "", rest)
            if n == rest:
                break
            rest = n
        s = head + rest
    if len(s) > 160:
        cut = max(s.rfind(", ", 0, 160), s.rfind("; ", 0, 160), s.rfind(": ", 0, 160))
        s = (s[:cut] if cut > 60 else s[:157].rsplit(" ", 1)[0]) + " ..."
    return s


def files_block(folder):
    return "\n".join("- `%s`: %s" % (fn, summary(os.path.join(folder, fn)))
                      for fn in sorted(os.listdir(folder))
                      if fn.endswith(EXTS) and os.path.isfile(os.path.join(folder, fn)))


def readmes(check):
    """Rewrite (or check) the Files list of each core/<folder>/README.md."""
    stale = []
    for d in sorted(os.listdir("core")):
        readme = os.path.join("core", d, "README.md")
        if not os.path.isfile(readme):
            continue
        t = open(readme, encoding="utf-8").read()
        m = re.search(r"(## Files\n\n)(.*?)(\n\n## |\Z)", t, flags=re.S)
        if not m:
            continue
        new = t[:m.start(2)] + files_block(os.path.join("core", d)) + t[m.end(2):]
        if new != t:
            stale.append(readme)
            if not check:
                open(readme, "w", encoding="utf-8").write(new)
    for r in stale:
        print(("%s: its Files list is stale (run `make folder-readmes`)" if check else "rewrote %s") % r)
    return 1 if (check and stale) else 0


def main():
    if "--readmes" in sys.argv or "--check-readmes" in sys.argv:
        return readmes("--check-readmes" in sys.argv)
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
