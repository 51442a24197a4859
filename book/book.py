#!/usr/bin/env python3
"""book.py - weave the lessons and the live code into the kiln book.

    book.py build --out DIR [--lenient] [LESSON.md ...]   the HTML book (and a PDF if a
                                                          PDF engine is installed)
    book.py check [LESSON.md ...]                         every directive, figure and
                                                          cross-reference resolves
    book.py examples --work DIR --cc CC --cflags F --lib LIB --ldlibs L [LESSON.md ...]
                                                          compile, run, compare the examples

Lessons default to lessons/NN-*.md in lab order. What a lesson may contain, besides
pandoc markdown and $math$ (rendered as MathML, so no JavaScript or network is needed):

  ```{.listing file="core/include/kiln/tensor.h" symbol="kn_tensor"}
  ```                       the current text of a symbol (see listing.py), never pasted
  ```{.c .run}              a complete C program: `make test` compiles it against libkiln,
  ```                       runs it and, when a ```{.text .expected} block follows,
                            compares its stdout with that block exactly
  ![caption](../plots/x.png)  a figure; a plot not produced yet becomes a placeholder note
  [text](02-autograd.md#id)   a cross-reference to another chapter (an error if it is missing)
  [text](lab:02)              the chapter of lab 02, or "text (coming)" until it is written

Every problem is reported as "lesson:LINE: what" so an editor can jump to it. The build
is a pure function of the lessons and the source tree: it rewrites DIR every time.
"""
import argparse
import difflib
import glob
import html
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True      # no __pycache__ in the source tree
import listing  # noqa: E402  (book/listing.py)

ROOT = os.path.dirname(HERE)
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*(.*)$")
LINK = re.compile(r'(!?)\[([^\]]*)\]\(([^)\s]+)((?:\s+"[^"]*")?)\)((?:\{[^}]*\})?)')
KN_NAME = re.compile(r"\bkn_[a-z0-9_]+\b")
LANG = {".c": "c", ".h": "c", ".cu": "cpp", ".cuh": "cpp", ".py": "python", ".sh": "bash",
        ".mk": "makefile", ".gp": "default"}


def rel(path):
    """A path as the reader knows it: relative to the repository root."""
    return os.path.relpath(os.path.abspath(path), ROOT)


def parse_attrs(info):
    """'{.c .run #id key="v"}' -> (classes, attrs); a bare 'c' info string -> (['c'], {})."""
    info = info.strip()
    if not (info.startswith("{") and info.endswith("}")):
        return (info.split()[:1], {})
    body = info[1:-1]
    attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', body))
    rest = re.sub(r'[\w-]+="[^"]*"', " ", body)
    classes = [w[1:] for w in rest.split() if w.startswith(".")]
    return classes, attrs


class Chapter:
    """One lesson file and what the book needs to know about it."""

    def __init__(self, path):
        self.path = path
        self.stem = os.path.splitext(os.path.basename(path))[0]
        m = re.match(r"(\d\d)-", self.stem)
        self.num = m.group(1) if m else None
        self.html = self.stem + ".html"
        self.title = self.stem
        with open(path, encoding="utf-8") as f:
            self.lines = f.read().split("\n")
        fence = None
        for line in self.lines:
            m = FENCE.match(line)
            if m:
                fence = None if fence else m.group(2)[0]
            elif fence is None and line.startswith("# "):
                self.title = line[2:].strip()
                break
        self.label = ("%s · %s" % (self.num, self.title)) if self.num else self.title


class Woven:
    """The result of weaving one chapter: markdown for pandoc and what was found."""

    def __init__(self):
        self.md, self.errors, self.warnings = [], [], []
        self.names = {}          # kn_* name -> anchor id of its listing (or "")
        self.examples = []       # (line, code, expected or None)
        self.listings = 0
        self.figures = []        # (source path, name in DIR/figures)


def fenced(code, lang, attrs=""):
    """A fenced code block whose fence is longer than any backtick run inside it."""
    longest = max([len(r) for r in re.findall(r"`+", code)] + [2])
    fence = "`" * (longest + 1)
    return "%s{.%s%s}\n%s\n%s" % (fence, lang, attrs, code, fence)


def anchor(symbol, used):
    base = "lst-" + re.sub(r"[^A-Za-z0-9_-]", "-", symbol)
    a, k = base, 2
    while a in used:
        a, k = "%s-%d" % (base, k), k + 1
    used.add(a)
    return a


def weave(ch, chapters, outdir=None):
    """Resolve the directives of chapter ch. outdir (the book's folder) is where figures
    are copied and links point from; None when only checking."""
    w, lines, i = Woven(), ch.lines, 0
    where = lambda n: "%s:%d" % (rel(ch.path), n)
    by_file = {os.path.basename(c.path): c for c in chapters}
    used_ids, last_run, prose_since_run = set(), None, True

    def link(m):
        bang, text, target, title, attrs = m.groups()
        lab = re.fullmatch(r"lab:(\d\d)(#.*)?", target)
        if lab:          # [text](lab:NN): chapter NN, or "coming" until it is written
            other = next((c for c in chapters if c.num == lab.group(1)), None)
            if other is None:
                return "[%s (coming)]{.coming}" % (text or "Chapter " + lab.group(1))
            return "[%s](%s%s)" % (text or "Chapter " + other.label, other.html, lab.group(2) or "")
        if re.match(r"[a-z]+:|#|/", target) or target.endswith(".html"):
            return m.group(0)
        path, _, frag = target.partition("#")
        src = os.path.normpath(os.path.join(os.path.dirname(ch.path), path))
        if bang:
            return figure(m, text, path, src, title, attrs)
        if path.endswith(".md") and re.match(r"\d\d-", os.path.basename(path)):
            other = by_file.get(os.path.basename(path))
            if other is None:
                w.errors.append("%s: cross-reference to %s: no such lesson" % (where(n), path))
                return text or path
            return "[%s](%s%s%s)" % (text or "Chapter " + other.label, other.html,
                                     "#" + frag if frag else "", title)
        if not os.path.exists(src):
            w.warnings.append("%s: link to %s: no such file (yet)" % (where(n), rel(src)))
        if outdir is None:
            return m.group(0)
        return "[%s](%s%s%s)" % (text, os.path.relpath(src, outdir), "#" + frag if frag else "", title)

    def figure(m, caption, path, src, title, attrs):
        if not os.path.exists(src) and path.startswith("plots/"):
            src = os.path.join(ROOT, path)
        if not os.path.exists(src):
            if rel(src).startswith("plots" + os.sep):
                w.warnings.append("%s: figure %s not produced yet (placeholder shown)" % (where(n), rel(src)))
                return "[Figure not produced yet: `%s`%s. `make plots` produces it.]{.placeholder}" % (
                    rel(src), (" (" + caption + ")") if caption else "")
            w.errors.append("%s: figure %s: no such file" % (where(n), rel(src)))
            return "[missing figure `%s`]{.missing}" % rel(src)
        name = rel(src).replace(os.sep, "-")
        w.figures.append((src, name))
        return "![%s](figures/%s%s)%s" % (caption, name, title, attrs)

    while i < len(lines):
        line, n = lines[i], i + 1
        m = FENCE.match(line)
        if not m:
            if line.strip():
                prose_since_run = True
            for code in re.findall(r"`([^`]+)`", line):
                for name in KN_NAME.findall(code):
                    w.names.setdefault(name, "")
            w.md.append(LINK.sub(link, line))
            i += 1
            continue
        # A fenced block: find its end. What the book adds around a block is a caption
        # span and a blank line, indented like the block, so it also works in list items.
        indent, fence, info = m.groups()
        j = i + 1
        while j < len(lines) and not re.match(r"^\s*%s%s*\s*$" % (re.escape(fence), fence[0]), lines[j]):
            j += 1
        body = "\n".join(lines[i + 1:j])
        if j == len(lines):
            w.errors.append("%s: code block is never closed" % where(n))
        classes, attrs = parse_attrs(info)
        i = j + 1
        if "listing" in classes:
            md = directive(w, where(n), body, attrs, used_ids)
            w.md.append("\n".join(indent + x if x else x for x in md.split("\n")))
            continue
        caption = lambda text: w.md.extend([indent + text, ""])
        for name in KN_NAME.findall(body):
            w.names.setdefault(name, "")
        if "run" in classes:
            w.examples.append([n, body, None])
            last_run, prose_since_run = len(w.examples) - 1, False
            caption("[Example: `make test` compiles and runs this program (%s:%d)]{.caption .example}"
                    % (rel(ch.path), n))
            w.md.extend(lines[n - 1:j + 1])
            continue
        if "expected" in classes:
            if last_run is None or prose_since_run:
                w.errors.append("%s: an {.expected} block must directly follow a {.c .run} block" % where(n))
            else:
                w.examples[last_run][2] = body
            prose_since_run = True
            caption("[Its output]{.caption .output}")
            w.md.extend(lines[n - 1:j + 1])
            continue
        prose_since_run = True
        w.md.extend(lines[n - 1:j + 1])
    return w


def directive(w, where, body, attrs, used_ids):
    """One listing directive -> markdown, or an error (and a visible box in the page)."""
    f, sym = attrs.get("file"), attrs.get("symbol")
    what = "listing file=%s symbol=%s" % (f, sym)
    if not f or not sym:
        w.errors.append('%s: %s: a listing needs file="..." and symbol="..."' % (where, what))
        return "[broken listing: %s]{.missing}" % what
    if body.strip():
        w.errors.append("%s: %s: a listing directive has an empty body (the code comes from the file)" % (where, what))
    try:
        if not os.path.isfile(os.path.join(ROOT, f)):
            raise listing.NotFound("no such file")
        lst = listing.resolve(os.path.join(ROOT, f), sym)
    except listing.NotFound as e:
        w.errors.append("%s: %s: not found (%s)" % (where, what, e))
        return "[Listing `%s: %s` not found (%s).]{.missing}" % (f, sym, e)
    w.listings += 1
    ident = anchor(sym, used_ids)
    if not sym.startswith("region:"):
        w.names[sym] = w.names.get(sym) or ident
    lang = attrs.get("lang") or LANG.get(os.path.splitext(f)[1], "default")
    return "[`%s`: `%s`]{#%s .caption .listing}\n\n%s" % (
        f, sym, ident, fenced(lst.text, lang, ' .numberLines startFrom="%d"' % lst.first_line))


# ---------------------------------------------------------------- the public API index

def api_kinds():
    """kn_* name -> (kind, header) for everything the public headers declare."""
    kinds = {}
    for h in sorted(glob.glob(os.path.join(ROOT, "core/include/kiln/*.h"))):
        with open(h, encoding="utf-8") as f:
            src = f.read()
        code, _ = listing.mask(src)
        for s, e in listing.statements(code):
            names, kind = listing.declared_names(code[s:e])
            kind = {"prototype": "function", "declaration": "type"}.get(kind, kind)
            for name in names:
                if name.startswith("kn_"):
                    kinds.setdefault(name, (kind, rel(h)))
        for name in re.findall(r"^[ \t]*#[ \t]*define[ \t]+((?:KN|kn)_\w+)", src, re.M):
            kinds.setdefault(name, ("macro", rel(h)))
    return kinds


def index_page(chapters, woven):
    """Markdown for the index of kn_* names the chapters quote, linking to the chapters."""
    kinds, seen = api_kinds(), {}
    for ch in chapters:
        for name, ident in woven[ch.path].names.items():
            seen.setdefault(name, []).append((ch, ident))
    out = ["# Index of kiln names", "",
           "Every `kn_` function and type a chapter quotes, in a listing, an example or the "
           "text; a link goes to the listing when the chapter shows the definition.", ""]
    groups = [("Functions", "function"), ("Types", "type"), ("Macros", "macro"), ("Variables", "variable"),
              ("Internal names", None)]
    for heading, kind in groups:
        names = [x for x in sorted(seen) if kinds.get(x, (None,))[0] == kind]
        if not names:
            continue
        out += ["## %s" % heading, ""]
        for name in names:
            refs = ", ".join("[%s](%s%s)" % (ch.num or ch.stem, ch.html, "#" + ident if ident else "")
                             for ch, ident in seen[name])
            where = " (%s)" % kinds[name][1] if name in kinds else " (internal: not in the public headers)"
            out.append("- `%s`%s: %s" % (name, where, refs))
        out.append("")
    if not seen:
        out.append("No chapter quotes a kiln name yet.")
    return "\n".join(out)


def toc_page(chapters, outdir):
    """Markdown for the contents page, with each chapter's sections read from its HTML."""
    out = ["# The kiln book", "",
           "A literate course in ML compilers and training at scale, in C11 and CUDA. "
           "Every listing is pulled from the source when the book is built.", ""]
    for ch in chapters:
        out.append("- [%s](%s)" % (ch.label, ch.html))
        with open(os.path.join(outdir, ch.html), encoding="utf-8") as f:
            page = f.read()
        main = page.split("<main>", 1)[-1]
        for ident, text in re.findall(r'<h2 id="([^"]+)"[^>]*>(.*?)</h2>', main, re.S):
            text = " ".join(re.sub(r"<[^>]+>", "", text).split())
            out.append("    - [%s](%s#%s)" % (html.unescape(text).replace("[", "\\[").replace("]", "\\]"),
                                              ch.html, ident))
    out += ["", "[Index of kiln names](kn-index.html): where each `kn_` function is quoted.", "",
            "Chapters of labs not written yet are marked *coming* in the course map.", ""]
    return "\n".join(out)


# ---------------------------------------------------------------- commands

def lessons(args):
    paths = args.lessons or sorted(glob.glob(os.path.join(ROOT, "lessons/[0-9][0-9]-*.md")))
    return [Chapter(p) for p in paths]


def report(woven, show_warnings=True):
    errors = [e for w in woven.values() for e in w.errors]
    for e in errors:
        print(e, file=sys.stderr)
    if show_warnings:
        for w in woven.values():
            for x in w.warnings:
                print("warning: " + x, file=sys.stderr)
    return errors


def pandoc(md_path, out_path, meta, toc=True):
    cmd = ["pandoc", md_path, "-f", "markdown", "-t", "html5", "--standalone",
           "--template", os.path.join(HERE, "template.html"), "--mathml",
           "--highlight-style", "tango", "--wrap=none", "-o", out_path]
    if toc:
        cmd += ["--toc", "--toc-depth=3"]
    for k, v in meta.items():
        cmd += ["-V", "%s=%s" % (k, v)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("book: pandoc failed on %s:\n%s" % (md_path, r.stderr))
    for warning in r.stderr.strip().splitlines():
        print("book: pandoc on %s: %s" % (rel(md_path), warning), file=sys.stderr)


def cmd_build(args):
    chapters, out = lessons(args), os.path.abspath(args.out)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.join(out, "src"))
    os.makedirs(os.path.join(out, "figures"))
    woven = {ch.path: weave(ch, chapters, out) for ch in chapters}
    errors = report(woven)
    for k, ch in enumerate(chapters):
        w = woven[ch.path]
        for src, name in w.figures:
            shutil.copy(src, os.path.join(out, "figures", name))
        md = os.path.join(out, "src", ch.stem + ".md")
        with open(md, "w", encoding="utf-8") as f:
            f.write("\n".join(w.md) + "\n")
        meta = {"pagetitle": ch.label}
        if k > 0:
            meta.update({"prev-href": chapters[k - 1].html, "prev-title": chapters[k - 1].label})
        if k + 1 < len(chapters):
            meta.update({"next-href": chapters[k + 1].html, "next-title": chapters[k + 1].label})
        pandoc(md, os.path.join(out, ch.html), meta)
    for name, text, title in (("index", toc_page(chapters, out), "Contents"),
                              ("kn-index", index_page(chapters, woven), "Index of kiln names")):
        md = os.path.join(out, "src", name + ".md")
        with open(md, "w", encoding="utf-8") as f:
            f.write(text + "\n")
        meta = {"pagetitle": title, "no-chapter": "1"}
        if chapters:
            meta.update({"next-href": chapters[0].html, "next-title": chapters[0].label})
        pandoc(md, os.path.join(out, name + ".html"), meta, toc=False)
    shutil.copy(os.path.join(HERE, "style.css"), out)
    print("book: %d chapters, %d listings -> %s/index.html" % (
        len(chapters), sum(w.listings for w in woven.values()), rel(out)))
    if not args.no_pdf:
        pdf(chapters, out)
    if errors and not args.lenient:
        print("book: %d problem(s) in the lessons (listed above)" % len(errors), file=sys.stderr)
        return 1
    return 0


def pdf(chapters, out):
    """The whole book as one PDF, with the first engine found; one line when there is none."""
    mds = [os.path.join("src", ch.stem + ".md") for ch in chapters]
    target = os.path.join(out, "kiln-book.pdf")
    if shutil.which("weasyprint"):
        whole = os.path.join(out, "kiln-book-print.html")
        # weasyprint does not typeset MathML: pandoc's plain (Unicode) math reads better.
        pandoc_all = ["pandoc", *mds, "-f", "markdown", "-t", "html5", "--standalone",
                      "--css", "style.css", "--metadata", "pagetitle=The kiln book", "-o", whole]
        steps = [pandoc_all, ["weasyprint", whole, target]]
    else:
        engine = next((e for e in ("xelatex", "lualatex", "pdflatex") if shutil.which(e)), None)
        if engine is None:
            print("book: PDF skipped (no weasyprint and no LaTeX engine installed; the HTML needs neither)")
            return
        steps = [["pandoc", *mds, "-f", "markdown", "--pdf-engine", engine,
                  "--metadata", "title=The kiln book", "--toc", "-o", target]]
    for step in steps:
        r = subprocess.run(step, cwd=out, capture_output=True, text=True)
        if r.returncode != 0:
            print("book: PDF failed (%s):\n%s" % (step[0], r.stderr[-2000:]), file=sys.stderr)
            return
    print("book: PDF -> %s" % rel(target))


def cmd_check(args):
    chapters = lessons(args)
    woven = {ch.path: weave(ch, chapters) for ch in chapters}
    errors = report(woven)
    print("book check: %d lessons, %d listings resolved, %d runnable examples, %d problem(s)" % (
        len(chapters), sum(w.listings for w in woven.values()),
        sum(len(w.examples) for w in woven.values()), len(errors)))
    return 1 if errors else 0


def cmd_examples(args):
    chapters = lessons(args)
    woven = {ch.path: weave(ch, chapters) for ch in chapters}
    os.makedirs(args.work, exist_ok=True)
    cc, cflags, ldlibs = shlex.split(args.cc), shlex.split(args.cflags), shlex.split(args.ldlibs)
    failed = total = 0
    if not os.path.exists(args.lib):
        print("book examples: the library %s is not built (make lib failed?)" % args.lib)
        return 1
    for ch in chapters:
        for line, code, expected in woven[ch.path].examples:
            total += 1
            where = "%s:%d" % (rel(ch.path), line)
            base = os.path.join(args.work, "%s-%d" % (ch.stem, line))
            with open(base + ".c", "w", encoding="utf-8") as f:     # errors name the lesson line
                f.write('#line %d "%s"\n%s\n' % (line + 1, rel(ch.path), code))
            r = subprocess.run(cc + cflags + ["-o", base, base + ".c", args.lib] + ldlibs,
                               capture_output=True, text=True, cwd=ROOT)
            if r.returncode != 0:
                failed += 1
                print("%s: example does not compile:\n%s" % (where, r.stderr.strip()))
                continue
            try:
                r = subprocess.run([base], capture_output=True, text=True, timeout=30, cwd=ROOT,
                                   stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                failed += 1
                print("%s: example ran past 30 s" % where)
                continue
            if r.returncode != 0:
                failed += 1
                how = ("was killed by signal %d (%s)" % (-r.returncode, signal.Signals(-r.returncode).name)
                       if r.returncode < 0 else "exited with status %d" % r.returncode)
                print("%s: example %s:\n%s" % (where, how, r.stderr.strip()[-2000:]))
                continue
            if expected is not None and r.stdout != expected + ("\n" if expected else ""):
                failed += 1
                diff = difflib.unified_diff((expected + "\n").splitlines(True) if expected else [],
                                            r.stdout.splitlines(True), "expected (lesson)", "actual (stdout)")
                print("%s: example output differs from its {.expected} block:\n%s" % (where, "".join(diff)))
                continue
            print("%s: example ok%s" % (where, "" if expected is not None else " (ran; no expected output given)"))
    print("book examples: %d run, %d failed" % (total, failed))
    return 1 if failed else 0


def main():
    sys.stdout.reconfigure(line_buffering=True)     # keep stdout and stderr in order in logs
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--out", required=True)
    b.add_argument("--lenient", action="store_true", help="exit 0 even when directives fail")
    b.add_argument("--no-pdf", action="store_true", help="HTML only (the tests use this)")
    c = sub.add_parser("check")
    e = sub.add_parser("examples")
    for k in ("work", "cc", "cflags", "lib", "ldlibs"):
        e.add_argument("--" + k, required=True)
    for p in (b, c, e):
        p.add_argument("lessons", nargs="*")
    args = ap.parse_args()
    return {"build": cmd_build, "check": cmd_check, "examples": cmd_examples}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
