"""mutate.py — plant mutants in a lab solution's BEGIN/END SOLUTION regions.

How strong are a lab's tests? Change the reference solution in one small way (a mutant)
and run the tests: a test that fails "kills" the mutant; a mutant that passes every test
"survives", and shows a behaviour no test looks at. This module only FINDS the mutants;
tests/mutants/mutants.py builds and runs them.

Where: only the code a student writes, the lines between /* BEGIN SOLUTION */ and
/* SKELETON (or END SOLUTION */) of every solutions/labNN-*/*.c. Messages are left alone:
the arguments of a call from its format string on (kn_error(KN_ERR_SHAPE, "%s: ...", fn,
...)) are never mutated, since the tests check error codes and that a message names the
function, not every word of it.

The mutation kinds (one change per mutant):
    cmp     a comparison flipped: < <=, <= <, > >=, >= >, == !=, != ==
    cond    && ||, || &&, a logical ! removed
    arith   + -, - +, * /, / *, % *, and the compound assignments += -=, -= +=, *= /=, /= *=
    bound   a for/while loop bound moved by one: `i < n` -> `i < (n) + 1` and `(n) - 1`
    drop    an expression statement (a call, an assignment, break, continue) replaced by `;`
    swap    two neighbouring arguments of a call swapped (before any format string)
    const   a constant changed: integer k -> k+1 (1 -> 0), a float x -> x+1, true/false
            flipped, a KN_ERR_* status replaced by another

Every mutant has a KEY that survives edits elsewhere in the file:
    FILE:HASH:KIND:N
where HASH is the first 10 hex digits of the SHA-1 of the mutated line's text (stripped of
surrounding blanks; for a statement spanning lines, its first line) and N numbers the
mutants of that kind on lines of that text, in file order. Editing line 40 leaves the keys
of line 80's mutants as they were; editing line 80 itself retires its keys (they get new
ones), which is right: its old mutants no longer exist."""

import hashlib
import os
import re

PUNCT = sorted(""">>= <<= ... -> ++ -- << >> <= >= == != && || += -= *= /= %= &= |= ^= ##
    { } [ ] ( ) ; : , . ? ~ ! + - * / % < > = & | ^ #""".split(), key=len, reverse=True)
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "do", "else", "case", "default",
            "break", "continue", "goto", "static", "const", "struct", "enum", "union", "typedef",
            "_Alignof", "_Static_assert"}
TYPE_WORDS = {"void", "char", "short", "int", "long", "float", "double", "signed", "unsigned",
              "bool", "_Bool", "size_t", "ssize_t", "const", "static", "struct", "enum", "union",
              "volatile", "register", "inline"}
CMP_FLIP = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "=="}
LOGIC_FLIP = {"&&": "||", "||": "&&"}
ARITH_FLIP = {"+": "-", "-": "+", "*": "/", "/": "*", "%": "*",
              "+=": "-=", "-=": "+=", "*=": "/=", "/=": "*="}
ERR_SWAP = {"KN_ERR_ARG": "KN_ERR_SHAPE"}  # any other KN_ERR_* becomes KN_ERR_ARG


class Tok:
    __slots__ = ("kind", "text", "start", "end")

    def __init__(self, kind, text, start, end):
        self.kind, self.text, self.start, self.end = kind, text, start, end

    def __repr__(self):
        return "Tok(%s %r)" % (self.kind, self.text)


NUM_RE = re.compile(r"(?:0[xX][0-9a-fA-F]+|\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)[uUlLfF]*")
IDENT_RE = re.compile(r"[A-Za-z_]\w*")


def tokenize(src):
    """C tokens of src (comments, blanks and preprocessor lines dropped)."""
    toks, i, n, bol = [], 0, len(src), True
    while i < n:
        c = src[i]
        if c == "\n":
            bol = True
            i += 1
            continue
        if c in " \t\r\f\v":
            i += 1
            continue
        if bol and c == "#":  # a preprocessor line, with its continuations
            while i < n and src[i] != "\n":
                i += 2 if src[i] == "\\" else 1
            continue
        bol = False
        if src.startswith("/*", i):
            j = src.find("*/", i + 2)
            i = n if j < 0 else j + 2
            continue
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
            continue
        if c in "\"'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            toks.append(Tok("str" if c == '"' else "chr", src[i:j + 1], i, j + 1))
            i = j + 1
            continue
        m = NUM_RE.match(src, i) if (c.isdigit() or (c == "." and i + 1 < n and src[i + 1].isdigit())) else None
        if m:
            toks.append(Tok("num", m.group(), i, m.end()))
            i = m.end()
            continue
        m = IDENT_RE.match(src, i)
        if m:
            toks.append(Tok("id", m.group(), i, m.end()))
            i = m.end()
            continue
        for p in PUNCT:
            if src.startswith(p, i):
                toks.append(Tok("p", p, i, i + len(p)))
                i += len(p)
                break
        else:
            toks.append(Tok("p", c, i, i + 1))
            i += 1
    return toks


def regions(src):
    """(start, end) character spans of the compiled part of each BEGIN SOLUTION region."""
    out, pos = [], 0
    while True:
        b = src.find("BEGIN SOLUTION", pos)
        if b < 0:
            return out
        b = src.find("\n", b) + 1
        e = src.find("END SOLUTION", b)
        s = src.find("/* SKELETON", b)
        stop = s if 0 <= s < e else e
        if stop < 0:
            return out
        stop = src.rfind("\n", b, stop) + 1  # the marker's line is not code
        out.append((b, stop))
        pos = e if e >= 0 else stop


def match_close(toks, i):
    """Index of the bracket closing toks[i] ('(' '[' or '{')."""
    pair = {"(": ")", "[": "]", "{": "}"}[toks[i].text]
    depth = 0
    for j in range(i, len(toks)):
        t = toks[j].text if toks[j].kind == "p" else None
        if t == toks[i].text:
            depth += 1
        elif t == pair:
            depth -= 1
            if depth == 0:
                return j
    return len(toks) - 1


def operand_end(t):
    return t is not None and (t.kind in ("id", "num", "str", "chr") and t.text not in KEYWORDS
                              or t.kind == "p" and t.text in (")", "]"))


class Mutant:
    __slots__ = ("file", "kind", "start", "end", "repl", "what", "line", "key", "line_text")

    def __init__(self, file, kind, start, end, repl, what):
        self.file, self.kind, self.start, self.end, self.repl, self.what = file, kind, start, end, repl, what

    def apply(self, src):
        return src[:self.start] + self.repl + src[self.end:]


def find_protected(toks):
    """Token indices not to mutate: string literals and a call's arguments from its format
    string on (the message), and the sizes in declarations such as `char buf[128]`."""
    prot = set()
    for i, t in enumerate(toks):
        if t.kind == "str":
            prot.add(i)
        if t.kind == "p" and t.text == "(" and i > 0 and toks[i - 1].kind == "id" and toks[i - 1].text not in KEYWORDS:
            close = match_close(toks, i)
            depth, fmt_at = 0, None
            for j in range(i + 1, close):
                tj = toks[j]
                if tj.kind == "p" and tj.text in "([{":
                    depth += 1
                elif tj.kind == "p" and tj.text in ")]}":
                    depth -= 1
                elif tj.kind == "str" and depth == 0 and fmt_at is None:
                    # a string argument on its own: the format (or a message)
                    fmt_at = j
            if fmt_at is not None:
                # from the start of the format argument to the closing parenthesis
                k = fmt_at
                while k > i + 1 and not (toks[k - 1].kind == "p" and toks[k - 1].text == ","):
                    k -= 1
                prot.update(range(k, close))
        if (t.kind == "num" and i >= 2 and toks[i - 1].text == "[" and i + 1 < len(toks) and toks[i + 1].text == "]"
                and toks[i - 2].kind == "id" and i >= 3 and (toks[i - 3].kind == "id" or toks[i - 3].text in ("*", ","))
                and _int_value(t.text) is not None and _int_value(t.text) >= 16):
            prot.add(i)
    return prot


def _int_value(text):
    m = re.fullmatch(r"(0[xX][0-9a-fA-F]+|\d+)([uUlL]*)", text)
    if not m:
        return None
    digits = m.group(1)
    if digits[:2] in ("0x", "0X"):
        return int(digits, 16)
    return int(digits, 8) if len(digits) > 1 and digits[0] == "0" else int(digits)


def mutate_const(t):
    v = _int_value(t.text)
    if v is not None:
        suffix = re.match(r"(0[xX][0-9a-fA-F]+|\d+)([uUlL]*)", t.text).group(2)
        nv = 0 if v == 1 else v + 1
        return str(nv) + suffix
    m = re.fullmatch(r"([0-9.eE+-]+)([fFlL]?)", t.text)
    if m:
        try:
            x = float(m.group(1))
        except ValueError:
            return None
        return repr(x + 1.0) + m.group(2)
    return None


def split_args(toks, open_i, close_i):
    """[(first, last)] token index spans of the top-level arguments between the brackets."""
    args, depth, first = [], 0, open_i + 1
    for j in range(open_i + 1, close_i):
        tj = toks[j]
        if tj.kind == "p" and tj.text in "([{":
            depth += 1
        elif tj.kind == "p" and tj.text in ")]}":
            depth -= 1
        elif tj.kind == "p" and tj.text == "," and depth == 0:
            args.append((first, j - 1))
            first = j + 1
    if first <= close_i - 1:
        args.append((first, close_i - 1))
    return args


def find_mutants(path, src):
    """Every mutant of one solution file, in file order, keys assigned."""
    toks = tokenize(src)
    spans = regions(src)

    def inside(t):
        return any(a <= t.start and t.end <= b for a, b in spans)

    prot = find_protected(toks)
    muts = []
    add = lambda kind, a, b, repl, what: muts.append(Mutant(path, kind, a, b, repl, what))
    for i, t in enumerate(toks):
        if not inside(t) or i in prot:
            continue
        prev = toks[i - 1] if i > 0 else None
        nxt = toks[i + 1] if i + 1 < len(toks) else None
        if t.kind == "p":
            if t.text in CMP_FLIP:
                add("cmp", t.start, t.end, CMP_FLIP[t.text], "%s -> %s" % (t.text, CMP_FLIP[t.text]))
            elif t.text in LOGIC_FLIP:
                add("cond", t.start, t.end, LOGIC_FLIP[t.text], "%s -> %s" % (t.text, LOGIC_FLIP[t.text]))
            elif t.text == "!" and nxt is not None:
                add("cond", t.start, t.end, "", "! removed")
            elif t.text in ARITH_FLIP and (len(t.text) == 2 or operand_end(prev)):
                add("arith", t.start, t.end, ARITH_FLIP[t.text], "%s -> %s" % (t.text, ARITH_FLIP[t.text]))
        elif t.kind == "num":
            r = mutate_const(t)
            if r is not None and r != t.text:
                add("const", t.start, t.end, r, "%s -> %s" % (t.text, r))
        elif t.kind == "id":
            if t.text in ("true", "false"):
                r = "false" if t.text == "true" else "true"
                add("const", t.start, t.end, r, "%s -> %s" % (t.text, r))
            elif t.text.startswith("KN_ERR_") and t.text != "KN_ERR_COUNT":
                r = ERR_SWAP.get(t.text, "KN_ERR_ARG")
                add("const", t.start, t.end, r, "%s -> %s" % (t.text, r))
            elif t.text in ("for", "while") and nxt is not None and nxt.text == "(":
                close = match_close(toks, i + 1)
                cond = (i + 2, close - 1)
                if t.text == "for":
                    semis = [j for j in range(i + 2, close) if toks[j].text == ";"]
                    if len(semis) != 2:
                        continue
                    cond = (semis[0] + 1, semis[1] - 1)
                _bound_mutants(toks, cond, prot, src, add)
            elif nxt is not None and nxt.text == "(" and t.text not in KEYWORDS and i + 1 not in prot:
                close = match_close(toks, i + 1)
                args = [a for a in split_args(toks, i + 1, close) if not any(k in prot for k in range(a[0], a[1] + 1))]
                for (a0, a1), (b0, b1) in zip(args, args[1:]):
                    if b0 != a1 + 2:  # not neighbours (a protected argument between)
                        continue
                    ta, tb = src[toks[a0].start:toks[a1].end], src[toks[b0].start:toks[b1].end]
                    if ta == tb:
                        continue
                    add("swap", toks[a0].start, toks[b1].end, tb + ", " + ta, "%s(.. %s, %s ..) -> (.. %s, %s ..)"
                        % (t.text, ta, tb, tb, ta))
    _drop_mutants(toks, inside, src, add)
    muts.sort(key=lambda m: (m.start, m.end, m.kind, m.repl))
    _assign_keys(path, src, muts)
    return muts


def _bound_mutants(toks, cond, prot, src, add):
    """The right-hand side of the last top-level comparison of a loop condition, +1 and -1."""
    lo, hi = cond
    depth, cmp_at = 0, None
    for j in range(lo, hi + 1):
        tj = toks[j]
        if tj.kind == "p" and tj.text in "([":
            depth += 1
        elif tj.kind == "p" and tj.text in ")]":
            depth -= 1
        elif depth == 0 and tj.kind == "p" and tj.text in ("<", "<=", ">", ">=", "!="):
            cmp_at = j
        elif depth == 0 and tj.kind == "p" and tj.text in ("&&", "||", "?", ","):
            if cmp_at is not None:
                hi = j - 1
                break
    if cmp_at is None or cmp_at + 1 > hi or any(k in prot for k in range(cmp_at, hi + 1)):
        return
    a, b = toks[cmp_at + 1].start, toks[hi].end
    rhs = src[a:b]
    for d in ("+", "-"):
        add("bound", a, b, "(%s) %s 1" % (rhs, d), "loop bound %s -> (%s) %s 1" % (rhs, rhs, d))


def _drop_mutants(toks, inside, src, add):
    """Expression statements (calls, assignments, break, continue) replaced by `;`."""
    i, n = 0, len(toks)
    start = True  # at the start of a statement
    while i < n:
        t = toks[i]
        if t.kind == "p" and t.text in ("{", "}", ";"):
            start = True
            i += 1
            continue
        if t.kind == "id" and t.text in ("if", "for", "while", "switch") and i + 1 < n and toks[i + 1].text == "(":
            i = match_close(toks, i + 1) + 1
            start = True
            continue
        if t.kind == "id" and t.text in ("else", "do"):
            i += 1
            start = True
            continue
        if t.kind == "id" and t.text in ("case", "default"):
            while i < n and toks[i].text != ":":
                i += 1
            i += 1
            start = True
            continue
        if not start:
            i += 1
            continue
        start = False
        # find the end of this statement (a function's body ends its header: go inside)
        j, depth = i, 0
        while j < n:
            tj = toks[j]
            if tj.kind == "p" and tj.text == "{" and depth == 0 and j > i and toks[j - 1].text == ")":
                break
            if tj.kind == "p" and tj.text in "([{":
                depth += 1
            elif tj.kind == "p" and tj.text in ")]}":
                depth -= 1
                if depth < 0:
                    break
            elif tj.kind == "p" and tj.text == ";" and depth == 0:
                break
            j += 1
        if j >= n or toks[j].text != ";":
            i = max(j, i + 1)
            continue
        if inside(t) and inside(toks[j]) and not _is_declaration(toks, i, j) and t.text != "return":
            text = " ".join(src[toks[i].start:toks[j].end].split())
            add("drop", toks[i].start, toks[j].end, ";", "dropped: " + (text if len(text) <= 70 else text[:67] + "..."))
        i = j  # the ';' is handled at the top of the loop


def _is_declaration(toks, i, j):
    t = toks[i]
    if t.kind != "id":
        return False
    if t.text in TYPE_WORDS or t.text.endswith("_t"):
        return True
    # `kn_val x = ...`, `kn_tensor *t;`, `kn_type at = ..., bt = ...`
    k = i + 1
    while k < j and toks[k].text == "*":
        k += 1
    return k < j and toks[k].kind == "id" and toks[k].text not in KEYWORDS and k > i


def _assign_keys(path, src, muts):
    starts = [0] + [m.end() for m in re.finditer(r"\n", src)]
    import bisect
    seen = {}
    for m in muts:
        line = bisect.bisect_right(starts, m.start) - 1
        m.line = line + 1
        text = src[starts[line]:(starts[line + 1] - 1 if line + 1 < len(starts) else len(src))].strip()
        m.line_text = text
        h = hashlib.sha1(text.encode()).hexdigest()[:10]
        k = (h, m.kind)
        seen[k] = seen.get(k, 0) + 1
        m.key = "%s:%s:%s:%d" % (path, h, m.kind, seen[k])


def lab_units(root, lab):
    """The solution files of lab `lab` ("01"), relative to root."""
    out = []
    for d in sorted(os.listdir(os.path.join(root, "solutions"))):
        if re.fullmatch(r"lab%s-.*" % re.escape(lab), d):
            for f in sorted(os.listdir(os.path.join(root, "solutions", d))):
                if f.endswith(".c"):
                    out.append("solutions/%s/%s" % (d, f))
    return out


def lab_mutants(root, lab):
    muts = []
    for rel in lab_units(root, lab):
        with open(os.path.join(root, rel)) as f:
            muts += find_mutants(rel, f.read())
    return muts
