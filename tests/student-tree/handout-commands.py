#!/usr/bin/env python3
"""handout-commands.py TREE RESULTS [DOC...] — every shell command the handouts, the lessons and
the README quote works in the student tree (make test, tests/student.mk; the book's listings are
checked the same way). DOC...: only those documents (paths in the tree), for a quick check.

TREE is `make dist-student`'s tree, after tests/student-tree/run-skeletons.sh built every lab
there (so ./kiln, the root's wrapper, runs the last lab build). Commands come from
labs/*/README.md, lessons/*.md and README.md: the lines of ``` code blocks (sh, bash, console or no
language) and of 4-space indented blocks that start with make, ./kiln, kiln, build/,
mpiexec, bash or python3 (after VAR=value prefixes; a trailing backslash joins lines), and
inline `make ...`, `./kiln ...`, `kiln SUB ...` and `build/...` spans in the prose.

What is checked, cheapest first (nothing here trains or builds):
  - a code block's `kiln ...`: kiln is not on the PATH, so it must be ./kiln (prose may name
    `kiln train ...` as the command it is, and is only resolved);
  - make: the tree's Makefile parses with the command's variables ($(error) for a PRIOR=
    solutions in a tree without solutions/ fails here) and every goal is a target of it
    (`make -pq`, which runs no recipe); `make labNN` and `make run LAB=NN` themselves run in
    run-skeletons.sh, and the tests in dist-student.sh check;
  - ./kiln SUB: SUB is a kiln command and every --option is in `./kiln SUB --help`; the cheap
    ones RUN for real: `./kiln compile` whose input exists (a --gpt graph), without --device
    cuda (the expensive ones, train, tune-gemm, bench, resolve only);
  - build/PATH: a folder the tree's make writes (build/labNN-labs-staff/..., build/book/...),
    or build/ckpt.safetensors, the checkpoint `make run` writes (the tree's Makefile must say
    so), never one named for solutions/ (the student tree has staff/);
  - mpiexec, bash, python3: on the PATH (bash SCRIPT: the script is in the tree).
A line whose comment says it is for the staff (`# staff: ...`), an inline span on a line
that names the staff, and a section whose heading names the staff or instructors (README.md's
"For instructors") are not checked (hidden tests and the grader are not in the tree). One recorded test per document (student-commands-<name>): passed =
commands that work, failed = the others, each printed with its reason.
"""
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys

tree, results = sys.argv[1], sys.argv[2]
os.makedirs(results, exist_ok=True)
STARTS = ("make", "./kiln", "kiln", "mpiexec", "bash", "python3")
help_cache = {}


def run(cmd, timeout=120, cwd=None):
    try:
        p = subprocess.run(cmd, cwd=cwd or tree, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired:
        return 124, "timed out after %d s" % timeout
    except OSError as e:  # ./kiln missing (a tree without the wrapper)
        return 127, "cannot run %s: %s" % (cmd[0], e)


def strip_env(words):
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        words = words[1:]
    return words


def extract(path):
    """(line number, command, where) for every quoted command: where is 'block' or 'inline'."""
    out, fence, lang, pending, staff = [], False, "", None, False
    lines = open(path).read().split("\n")
    for i, line in enumerate(lines):
        h = None if fence else re.match(r"^#{1,6}\s+(.*)", line)
        if h:  # a section for the staff or instructors: its commands run in the repository
            staff = re.search(r"\b(staff|instructors?)\b", h.group(1), re.I) is not None
        if staff:
            continue
        m = re.match(r"^\s*```(\w*)", line)
        if m:
            fence, lang = not fence, m.group(1)
            continue
        block = (fence and lang in ("", "sh", "bash", "shell", "console")) or (
            not fence and re.match(r"^    \S", line) and (i == 0 or lines[i - 1].strip() == "" or lines[i - 1].startswith("    ")))
        if block:
            text = re.sub(r"^\s*\$ ", "", line.strip())
            if pending is not None:
                pending = (pending[0], pending[1] + " " + text.rstrip("\\").strip())
                if not text.endswith("\\"):
                    out.append((pending[0], pending[1], "block"))
                    pending = None
                continue
            words = strip_env(text.split())
            if words and (words[0] in STARTS or words[0].startswith("build/")):
                if text.endswith("\\"):
                    pending = (i + 1, text.rstrip("\\").strip())
                else:
                    out.append((i + 1, text, "block"))
            continue
        if fence:
            continue
        for span in re.findall(r"`([^`]+)`", line):
            words = strip_env(span.split())
            if not words:
                continue
            if words[0] in ("make", "./kiln") or words[0].startswith("build/") or (
                    words[0] == "kiln" and len(words) > 1 and re.match(r"^[a-z][a-z-]*$", words[1])):
                # prose naming a staff command ("the staff repository's `make grade ...`")
                out.append((i + 1, span + ("  # staff" if re.search(r"\bstaff\b", line) else ""), "inline"))
    return out


def kiln_help(sub):
    if sub not in help_cache:
        help_cache[sub] = run(["./kiln", sub, "--help"], timeout=60)
    return help_cache[sub]


def check_kiln(words, where, cmd):
    if len(words) < 2:
        return "no kiln command named"
    sub = words[1]
    rc, out = kiln_help(sub)
    if (rc != 0 and not re.search(r"usage: kiln %s\b" % re.escape(sub), out)) or "unknown command" in out:
        return "'kiln %s' is not a kiln command (./kiln %s --help: exit %d)" % (sub, sub, rc)
    for w in words[2:]:
        opt = w.split("=")[0]
        if opt.startswith("--") and len(opt) > 2 and not re.search(re.escape(opt) + r"\b", out):
            return "%s is not an option of 'kiln %s' (./kiln %s --help)" % (opt, sub, sub)
    # the cheap ones run: kiln compile of a built-in graph, on the CPU
    if where == "block" and sub == "compile" and "--gpt" in words and "cuda" not in cmd:
        rc, out = run(["bash", "-c", "./kiln " + " ".join(shlex.quote(w) for w in words[1:])], timeout=300)
        if rc != 0:
            return "ran it: exit %d:\n%s" % (rc, "\n".join(out.strip().split("\n")[-15:]))
    return None


def check_make(words):
    args = words[1:]
    goals = [a for a in args if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", a) and not a.startswith("-")]
    vars_ = [a for a in args if re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", a)]
    rc, out = run(["make", "-pq", "--no-print-directory", "CUDA=0"] + vars_ + ["__kn_no_such_goal__"], timeout=120)
    stop = [l for l in out.split("\n") if "***" in l and "__kn_no_such_goal__" not in l]
    if stop:
        return "make with %s: %s" % (" ".join(vars_) or "no variables", stop[0].strip())
    targets = set(re.findall(r"^([^\s#:=][^:=]*?):(?!=)", out, re.M))
    names = set()
    for t in targets:
        names.update(t.split())
    for g in goals:
        if g not in names:
            return "make %s: no such target in the tree's Makefile" % g
    return None


def check_path(words):
    p = words[0]
    if p == "build/":
        return None
    if p == "build/ckpt.safetensors":  # make run's checkpoint (RUN_ARGS ?= --out $(BUILD)/ckpt.safetensors)
        mk = open(os.path.join(tree, "Makefile")).read()
        return None if re.search(r"--out \$\(BUILD\)/ckpt\.safetensors", mk) else (
            "%s: the tree's Makefile no longer writes it (make run's --out)" % p)
    if "solutions" in p:
        return "%s: the student tree has no solutions/ (its builds are build/labNN-labs-staff/...): use ./kiln" % p
    m = re.match(r"^build/(report|ablation-cpu|ablation-cuda)(/|$)", p)
    if m:  # make report's and make ablation's folders (plots/report.mk: $(BUILD)/report, $(BUILD)/ablation-DEVICE)
        mk = open(os.path.join(tree, "plots", "report.mk")).read() if os.path.exists(os.path.join(tree, "plots", "report.mk")) else ""
        want = "REPORT_OUT ?= $(BUILD)/report" if m.group(1) == "report" else "ABLATION_OUT ?= $(BUILD)/ablation-"
        return None if want in mk else "%s: the tree's plots/report.mk no longer writes it" % p
    if re.match(r"^build/scaling(/|$)", p):  # make scaling's folder (plots/scaling.mk: $(BUILD)/scaling)
        mk = os.path.join(tree, "plots", "scaling.mk")
        return None if os.path.exists(mk) and "SCALING_OUT ?= $(BUILD)/scaling" in open(mk).read() else (
            "%s: the tree's plots/scaling.mk no longer writes it" % p)
    if not re.match(r"^build/(lab\d\d-labs-staff|staff|book)(/|$)", p):
        return "%s: not a folder the tree's make writes (build/labNN-labs-staff/, build/staff/, build/book/, build/report/, build/scaling/)" % p
    m = re.match(r"^build/(lab\d\d)-labs-staff/(kiln|test-lab\d\d)$", p)
    if m and not os.path.exists(os.path.join(tree, p)):
        return "%s: not there after make %s" % (p, m.group(1))
    return None


def check(cmd, where):
    if re.search(r"#\s*staff\b", cmd):
        return "skip"
    body = re.sub(r"NN\b", "01", cmd.split(" #")[0].strip())  # make labNN: a lab's number
    for part in re.split(r"\s*(?:&&|\|\||;)\s*", body)[1:]:
        why = check(part, where)
        if why not in (None, "skip"):
            return why
    body = re.split(r"\s*(?:&&|\|\||;)\s*", body)[0]
    try:
        words = strip_env(shlex.split(body))
    except ValueError as e:
        return "cannot parse: %s" % e
    if not words:
        return "skip"
    w0 = words[0]
    if w0 == "kiln":
        if where == "block":
            return "kiln is not on the PATH in the student tree: write ./kiln (the last make labNN's kiln)"
        return check_kiln(words, where, body)
    if w0 == "./kiln":
        return check_kiln(words, where, body)
    if w0 == "make":
        return check_make(words)
    if w0.startswith("build/"):
        return check_path(words)
    if shutil.which(w0) is None:
        return "%s is not on the PATH" % w0
    if w0 in ("bash", "python3") and len(words) > 1 and not words[1].startswith("-"):
        if not os.path.exists(os.path.join(tree, words[1])):
            return "%s: no such file in the tree" % words[1]
    return None


# ./kiln runs the last `make labNN`'s kiln, else build/staff/kiln: the staff's, so that a
# command is checked against the reference (a skeleton's kiln stops, as the handouts say).
if os.path.exists(os.path.join(tree, "build/last-kiln")):
    os.remove(os.path.join(tree, "build/last-kiln"))
if not os.path.exists(os.path.join(tree, "build/staff/kiln")):
    rc, out = run(["make", "--no-print-directory", "CUDA=0", "kiln"], timeout=900)
    if rc != 0:
        print(out[-3000:])
        print("student-commands: make kiln failed in %s" % tree)
docs = sorted(glob.glob(os.path.join(tree, "labs/*/README.md"))) + sorted(glob.glob(os.path.join(tree, "lessons/*.md")))
docs += [os.path.join(tree, "README.md")] if os.path.exists(os.path.join(tree, "README.md")) else []
if len(sys.argv) > 3:
    docs = [os.path.join(tree, d) for d in sys.argv[3:]]
status = 0
for doc in docs:
    rel = os.path.relpath(doc, tree)
    name = "student-commands-" + (rel.split("/")[1] if rel.startswith("labs/") else os.path.basename(rel)[:-3])
    if rel == "README.md":
        name = "student-commands-readme"
    ok = bad = 0
    fails = []
    for line, cmd, where in extract(doc):
        why = check(cmd, where)
        if why == "skip":
            continue
        if why is None:
            ok += 1
        else:
            bad += 1
            fails.append("  FAIL %s:%d: %s\n    %s" % (rel, line, cmd, why.replace("\n", "\n    ")))
    if ok + bad == 0:
        continue
    with open(os.path.join(results, name + ".count"), "w") as f:
        f.write("%d %d 0 0\n" % (ok, bad))
    for f in fails:
        print(f)
    print("%s: %d passed, %d failed" % (name, ok, bad))
    if bad:
        status = 1
sys.exit(status)
