#!/usr/bin/env python3
"""listing.py - find a named symbol in a C (or CUDA) source file and return its text.

The book never quotes code by line numbers: a lesson names a file and a symbol, and this
module finds the symbol's current text, so listings follow the code as it moves.

A symbol is one of
  - a function definition (signature through the closing brace) or, when the file has no
    definition, its prototype;
  - a struct / enum / union / typedef, or a top-level variable (an op table, say);
  - a #define macro (with its backslash continuation lines);
  - "region:NAME": the lines between a line containing `kn:region NAME` and a line
    containing `kn:endregion NAME` (the marker lines themselves are not shown).
The comment block directly above a symbol (no blank line between) is part of it.

How: the text is first "masked": comments, string and character literals and preprocessor
lines are overwritten with spaces (newlines kept), so offsets stay the same and braces
inside strings or comments cannot confuse the brace matching. The masked text is split
into top-level statements (a `;` at brace depth 0, or the `}` closing a function body),
and each statement is asked which names it declares.

Usage: listing.py FILE SYMBOL   prints the listing, or the reason it was not found.
"""
import re
import sys
import textwrap

IDENT = re.compile(r"[A-Za-z_]\w*")
KEYWORDS = {
    "static", "extern", "inline", "const", "volatile", "restrict", "register", "signed",
    "unsigned", "struct", "union", "enum", "typedef", "_Noreturn", "_Thread_local",
    "_Alignas", "__attribute__", "__restrict", "__inline", "sizeof", "return", "void",
    "char", "short", "int", "long", "float", "double", "_Bool", "__global__", "__device__",
    "__host__", "__forceinline__", "__shared__", "__constant__",
}


class NotFound(Exception):
    """The symbol could not be resolved; str() says why."""


class Listing:
    """A resolved symbol: its text and the 1-based line where that text starts."""

    def __init__(self, text, first_line, kind):
        self.text, self.first_line, self.kind = text, first_line, kind


def mask(src):
    """Return (code, comments): `code` is src with comments, literals and preprocessor
    lines blanked; `comments` lists the (start, end) offsets of every comment."""
    out, comments = list(src), []
    i, n, line_start = 0, len(src), True
    while i < n:
        c = src[i]
        if line_start and c == "#":          # a preprocessor line, with its continuations
            j = i
            while j < n and src[j] != "\n":
                if src[j] == "\\" and j + 1 < n and src[j + 1] == "\n":
                    j += 1
                elif src.startswith("/*", j):   # a comment may run past the line's end
                    k = src.find("*/", j + 2)
                    k = n if k < 0 else k + 2
                    comments.append((j, k))
                    j = k - 1
                j += 1
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
            continue
        if c == "\n":
            line_start = True
            i += 1
            continue
        if c in " \t\r\f\v":
            i += 1
            continue
        line_start = False
        if src.startswith("/*", i) or src.startswith("//", i):
            if src[i + 1] == "*":
                k = src.find("*/", i + 2)
                k = n if k < 0 else k + 2
            else:
                k = src.find("\n", i)
                k = n if k < 0 else k
            comments.append((i, k))
            for m in range(i, k):
                if out[m] != "\n":
                    out[m] = " "
            i = k
            continue
        if c in "\"'":
            k = i + 1
            while k < n and src[k] != c and src[k] != "\n":
                k += 2 if src[k] == "\\" else 1
            for m in range(i + 1, min(k, n)):
                out[m] = " "
            i = k + 1
            continue
        i += 1
    return blank_cplusplus_guards("".join(out), src), comments


def blank_cplusplus_guards(masked, src):
    """Blank the bodies of `#ifdef __cplusplus` ... `#endif` blocks (the `extern "C" {`
    and its `}` in headers): they are C++-only and their braces do not balance inside
    the block, so left in they would swallow the rest of the file."""
    out = list(masked)
    for m in re.finditer(r"^[ \t]*#[ \t]*ifdef[ \t]+__cplusplus\b.*?^[ \t]*#[ \t]*endif\b", src,
                         re.M | re.S):
        for k in range(m.start(), m.end()):
            if out[k] != "\n":
                out[k] = " "
    return "".join(out)


def statements(code):
    """Split masked code into top-level statements: (start, end) offsets, end exclusive."""
    result, depth, paren, start, first_brace = [], 0, 0, None, None
    for i, c in enumerate(code):
        if c.isspace():
            continue
        if start is None:
            start, first_brace = i, None
        if c == "(":
            paren += 1
        elif c == ")":
            paren = max(0, paren - 1)
        elif c == "{":
            if depth == 0 and first_brace is None:
                first_brace = i
            depth += 1
        elif c == "}":
            depth = max(0, depth - 1)
            if depth == 0 and code[start:first_brace].rstrip().endswith(")"):
                result.append((start, i + 1))     # a function body ends the statement
                start = None
        elif c == ";" and depth == 0 and paren == 0:
            result.append((start, i + 1))
            start = None
    return result


def outside_braces(text):
    """text with everything inside {...} blanked (to read a statement's own names)."""
    out, depth = [], 0
    for c in text:
        if c == "}":
            depth -= 1
        out.append(c if depth == 0 else " ")
        if c == "{":
            depth += 1
    return "".join(out)


def declared_names(stmt):
    """Names a masked top-level statement declares, and its kind."""
    flat = outside_braces(stmt)
    has_body = "{" in stmt
    words = IDENT.findall(flat)
    if not words:
        return set(), None
    if words[0] == "typedef":
        names = set()
        m = re.match(r"typedef\s+(?:const\s+)?(?:struct|enum|union)\s+([A-Za-z_]\w*)", flat)
        if m:
            names.add(m.group(1))
        fp = re.search(r"\(\s*\*\s*([A-Za-z_]\w*)\s*\)", flat)
        if fp:
            names.add(fp.group(1))
        else:
            tail = re.sub(r"(\s*\[[^\]]*\])+\s*;$", ";", flat.rstrip())
            m = re.search(r"([A-Za-z_]\w*)\s*;$", tail)
            if m:
                names.add(m.group(1))
        return names, ("type" if has_body or not m else "declaration")
    names = set()
    m = re.match(r"(?:(?:static|const|extern|typedef)\s+)*(?:struct|enum|union)\s+([A-Za-z_]\w*)\s*\{", flat)
    if m:
        names.add(m.group(1))
    # The declarator: the first non-keyword identifier at paren depth 0 followed by
    # one of ( [ = ; , -- a function, an array, an initialised or plain variable.
    paren = 0
    for w in re.finditer(r"[A-Za-z_]\w*|[()\[\]=;,]", flat):
        tok = w.group(0)
        if tok == "(":
            paren += 1
        elif tok == ")":
            paren -= 1
        elif paren == 0 and (tok[0].isalpha() or tok[0] == "_") and tok not in KEYWORDS:
            after = flat[w.end():].lstrip()[:1]
            if after in ("(", "[", "=", ";", ","):
                names.add(tok)
                if after == "(" and stmt.rstrip().endswith("}"):
                    return names, "function"
                if after == "(" and not has_body:
                    return names, "prototype"
                break
    kind = "type" if m and not names - {m.group(1)} else "variable"
    return names, (kind if has_body else "declaration")


# When a file declares a name more than once, the most telling statement wins.
RANK = {"function": 0, "type": 1, "variable": 1, "macro": 2, "prototype": 3, "declaration": 4}


def line_of(src, offset):
    return src.count("\n", 0, offset) + 1


def with_comment(src, comments, start, end, code=None):
    """Widen [start, end) to whole lines, the comment block directly above, and a comment
    trailing on the last line (when no other code follows on that line)."""
    start = src.rfind("\n", 0, start) + 1
    nl = src.find("\n", end)
    nl = len(src) if nl < 0 else nl
    if code is None or not code[end:nl].strip():
        end = nl
    while True:
        above = [c for c in comments if c[1] <= start and src[c[1]:start].strip() == ""
                 and src[c[1]:start].count("\n") == 1]
        if not above:
            break
        c0 = max(above, key=lambda c: c[1])[0]
        line_start = src.rfind("\n", 0, c0) + 1
        if src[line_start:c0].strip():
            break                      # the comment trails code on its line: not ours
        start = line_start
    return start, end


def find_region(src, name):
    lines = src.split("\n")
    begin = [i for i, l in enumerate(lines) if re.search(r"kn:region\s+%s\b" % re.escape(name), l)]
    if not begin:
        raise NotFound("no line with 'kn:region %s'" % name)
    if len(begin) > 1:
        raise NotFound("'kn:region %s' appears %d times" % (name, len(begin)))
    ends = [i for i, l in enumerate(lines) if re.search(r"kn:endregion\s+%s\b" % re.escape(name), l)]
    ends = [i for i in ends if i > begin[0]]
    if not ends:
        raise NotFound("'kn:region %s' has no 'kn:endregion %s' after it" % (name, name))
    body = [l for l in lines[begin[0] + 1:ends[0]] if not re.search(r"kn:(end)?region\b", l)]
    return Listing(textwrap.dedent("\n".join(body)).strip("\n"), begin[0] + 2, "region")


def find_macro(src, comments, name):
    m = re.search(r"^[ \t]*#[ \t]*define[ \t]+%s\b" % re.escape(name), src, re.M)
    if not m:
        return None
    end = m.start()
    while True:
        nl = src.find("\n", end)
        if nl < 0:
            end = len(src)
            break
        if src[nl - 1] != "\\":
            end = nl
            break
        end = nl + 1
    s, e = with_comment(src, comments, m.start(), end)
    return Listing(src[s:e], line_of(src, s), "macro")


def resolve_text(src, symbol):
    """Resolve symbol in the source text src; raises NotFound."""
    if symbol.startswith("region:"):
        return find_region(src, symbol[len("region:"):])
    if not IDENT.fullmatch(symbol):
        raise NotFound("'%s' is not a C identifier or region:NAME" % symbol)
    code, comments = mask(src)
    found = []
    for s, e in statements(code):
        stmt = code[s:e]
        if symbol not in stmt:
            continue
        names, kind = declared_names(stmt)
        if symbol in names:
            found.append((RANK[kind], s, e, kind))
    macro = find_macro(src, comments, symbol)
    if macro is not None:
        found.append((RANK["macro"], None, None, macro))
    if not found:
        raise NotFound("no definition, declaration, type or #define named %s" % symbol)
    found.sort(key=lambda f: (f[0], f[1] or 0))
    rank, s, e, kind = found[0]
    if isinstance(kind, Listing):
        return kind
    s, e = with_comment(src, comments, s, e, code)
    return Listing(src[s:e], line_of(src, s), kind)


def resolve(path, symbol):
    """Resolve symbol in the file at path; raises NotFound naming the reason."""
    try:
        with open(path, encoding="utf-8") as f:
            src = f.read()
    except OSError as e:
        raise NotFound("cannot read %s: %s" % (path, e.strerror))
    return resolve_text(src, symbol)


def main(argv):
    if len(argv) != 3:
        print(__doc__.split("\n\n")[-1].strip(), file=sys.stderr)
        return 2
    try:
        lst = resolve(argv[1], argv[2])
    except NotFound as e:
        print("%s: %s: not found (%s)" % (argv[1], argv[2], e), file=sys.stderr)
        return 1
    print("/* %s:%d (%s) */" % (argv[1], lst.first_line, lst.kind))
    print(lst.text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
