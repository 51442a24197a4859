#!/usr/bin/env python3
"""layers.py — the layering of core/ as a check: no include and no call goes up.

kiln's folders form one stack; each may use itself and the folders below it, never one
above:

    base -> storage -> tensor -> ir -> autograd -> passes -> schedule -> codegen
         -> runtime -> program -> data -> nn -> dist -> cli (and fuzz/, a tool beside cli)

What the code teaches about the order: storage/ (device memory, copies, streams, events:
kiln/storage.h) is all a tensor's bytes need, so it sits below tensor; the compute
backends (runtime/: the CPU and CUDA kernels of every op, the CUDA modules, the emulator,
the optimizer kernels) call the ir kernels and codegen's renderers, never a program; a program (program/) compiles a graph
for a device and runs it through the backends, so runtime sits below program. data/
(corpus, tokens, safetensors) needs only tensors; the trainer and checkpoints in nn/ use
it, so it sits below nn.

A public header core/include/kiln/X.h belongs to the folder that implements it
(HEADER_LAYER below); a private header (ir/ir_impl.h) to its folder; a lab unit
(solutions/labNN-*/FILE.c, labs/labNN-*/FILE.c) to the folder of the core file that holds
its reference (core/mk/units.list).

Two graphs are checked:
  includes  every `#include "..."` of core/ (C, CUDA, .inc, .def, .h) and of the lab
            units: the included file's layer must not be above the includer's;
  calls     with --objects DIR (the build's object folder, e.g. build/solutions/../obj):
            `nm` over each object of core/ and of the lab units; a symbol an object uses
            (U) must not be defined only by objects of higher layers.

An edge that goes up fails the check, unless ALLOWED lists it: a known cycle with the
helper who removes it (issue 30), so the list only shrinks. An ALLOWED entry that no
longer matches anything fails too (delete it: that cycle is gone).

Usage: layers.py [--root DIR] [--objects DIR] [--quiet] [--partial]   exit 0 clean, 1 violations
Test: tests/core/test_layers.sh (plants an upward include and an upward call).
"""
import argparse
import os
import re
import subprocess
import sys

ORDER = ["base", "storage", "tensor", "ir", "autograd", "passes", "schedule", "codegen", "runtime",
         "program", "data", "nn", "dist", "cli", "fuzz"]
RANK = {name: i for i, name in enumerate(ORDER)}

# Public headers: the folder that implements them.
HEADER_LAYER = {
    "base.h": "base",
    "storage.h": "storage",
    "tensor.h": "tensor", "kernels.h": "tensor", "scalar.h": "tensor", "gemm.h": "tensor",
    "pointwise.def": "tensor", "scalar_type.inc": "tensor",
    "ir.h": "ir", "ops.def": "ir", "pointwise_cases.inc": "ir",
    "quant.h": "ir",  # the int8 kernels (ir/quant.c); the pass and the eval declared beside them
    "autograd.h": "autograd",
    "passes.h": "passes", "placement.h": "passes", "remat.h": "passes",
    "randgraph.h": "passes",
    "schedule.h": "schedule",
    "codegen.h": "codegen",
    "device.h": "runtime", "cuda.h": "runtime", "optim.h": "runtime",
    "program.h": "program",
    "data.h": "data",
    "nn.h": "nn", "step.h": "nn", "infer.h": "nn",
    "offload.h": "nn",  # the host step (nn/offload.c); kn_offload_dp and kn_offload_sync in dist/offload_dp.c
    "dist.h": "dist", "mesh.h": "dist", "pipeline.h": "dist",
}

# Lab units (solutions/labNN-*/FILE.c, labs/labNN-*/FILE.c): the layer of the core file
# that holds their reference (core/mk/units.list: "labNN-x/FILE.c core/FOLDER/NAME.c").
def unit_layers(root):
    out = {}
    try:
        with open(os.path.join(root, "core/mk/units.list")) as fh:
            for line in fh:
                f = line.split()
                if len(f) == 2 and not f[0].startswith("#"):
                    out[f[0]] = f[1].split("/")[1]
    except OSError:
        pass
    return out


UNIT_LAYER = {}

# Known upward edges: (kind, file regex, target regex, owner and plan). kind "include":
# the target is the included file's path; "call": the symbol. This list only shrinks; it
# is empty since issue 30 removed its last four edges (codegen -> runtime, ir -> runtime,
# ir <-> autograd, passes -> dist), so any edge that goes up fails the check.
ALLOWED = []

INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCE_EXT = (".c", ".h", ".cu", ".inc", ".def")


def layer_of(path):
    """The layer of a repository-relative path, or None when it is outside the stack."""
    parts = path.split("/")
    if parts[:3] == ["core", "include", "kiln"]:
        return HEADER_LAYER.get(parts[3])
    if parts[0] == "core" and len(parts) > 2:
        return parts[1] if parts[1] in RANK else None
    if parts[0] in ("solutions", "labs") and len(parts) == 3 and parts[2].endswith(".c"):
        return UNIT_LAYER.get(parts[1] + "/" + parts[2])
    return None


def sources(root):
    out = []
    for top in ("core", "solutions", "labs"):
        for d, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                rel = os.path.relpath(os.path.join(d, f), root)
                if rel.endswith(SOURCE_EXT) and layer_of(rel) is not None:
                    if top != "core" and "/tests/" in rel:
                        continue
                    out.append(rel)
    return sorted(out)


def resolve(root, includer, name):
    """The repository path an include names (search order: includer's folder, then -I)."""
    for base in (os.path.dirname(includer), "core/include", "core"):
        cand = os.path.normpath(os.path.join(base, name))
        if os.path.exists(os.path.join(root, cand)):
            return cand
    return None


def allowed(kind, src, dst, used):
    for i, (k, f, pat, _) in enumerate(ALLOWED):
        if k == kind and re.search(f, src) and re.search(pat, dst):
            used.add(i)
            return True
    return False


def check_includes(root, used):
    bad = []
    for src in sources(root):
        with open(os.path.join(root, src), errors="replace") as fh:
            text = fh.read()
        for m in INCLUDE_RE.finditer(text):
            dst = resolve(root, src, m.group(1))
            if dst is None:
                continue
            if src.startswith("core/include/") and not dst.startswith("core/include/"):
                line = text.count("\n", 0, m.start()) + 1
                bad.append(f"{src}:{line}: a public header includes the private {dst}")
                continue
            ls, ld = layer_of(src), layer_of(dst)
            if ld is None:
                if dst.startswith("core/"):
                    bad.append(f"{src}: includes {dst}, which has no layer (add it to layers.py)")
                continue
            if RANK[ld] > RANK[ls] and not allowed("include", src, dst, used):
                line = text.count("\n", 0, m.start()) + 1
                bad.append(f"{src}:{line}: [{ls}] includes {dst} [{ld}]: an include that goes up")
    return bad


def nm(path):
    """(defined, undefined) global symbols of one object file."""
    res = subprocess.run(["nm", "-g", "--defined-only", path], capture_output=True, text=True)
    defined = {l.split()[-1] for l in res.stdout.splitlines() if len(l.split()) >= 3}
    res = subprocess.run(["nm", "-g", "--undefined-only", path], capture_output=True, text=True)
    undefined = {l.split()[-1] for l in res.stdout.splitlines() if l.split()}
    return defined, undefined


def check_calls(root, objdir, used):
    objs = {}
    for d, _, files in os.walk(objdir):
        for f in files:
            if not f.endswith(".o") or f.endswith(".gpu.o"):
                continue
            full = os.path.join(d, f)
            rel = os.path.relpath(full, objdir)
            src = rel[:-2]
            src = src[:-3] if src.endswith(".cu") else src
            cand = [src + ext for ext in (".c", ".cu")]
            src = next((c for c in cand if os.path.exists(os.path.join(root, c))), None)
            if src is None or layer_of(src) is None:
                continue  # an object whose source moved or went away, or outside the stack
            objs[src] = nm(full)
    definer = {}
    for src, (defined, _) in objs.items():
        for s in defined:
            definer.setdefault(s, []).append(src)
    bad = []
    for src, (_, undefined) in sorted(objs.items()):
        ls = layer_of(src)
        for s in sorted(undefined):
            where = definer.get(s)
            if not where:
                continue
            # a symbol defined at some allowed layer (e.g. a lab unit and its core twin) is fine
            if any(RANK[layer_of(w)] <= RANK[ls] for w in where):
                continue
            if not allowed("call", src, s, used):
                bad.append(f"{src}: [{ls}] calls {s}, defined in {where[0]} [{layer_of(where[0])}]: "
                           "a call that goes up")
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=".")
    ap.add_argument("--objects")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--partial", action="store_true",
                    help="the tree or objects are a part (the self-test): an unused ALLOWED entry is fine")
    a = ap.parse_args()
    UNIT_LAYER.update(unit_layers(a.root))
    used = set()
    bad = check_includes(a.root, used)
    kinds = {"include"}
    if a.objects:
        if not os.path.isdir(a.objects):
            print(f"layers.py: {a.objects}: no such folder (build first)", file=sys.stderr)
            return 2
        bad += check_calls(a.root, a.objects, used)
        kinds.add("call")
    for i, (k, f, pat, owner) in enumerate(ALLOWED):
        if k in kinds and i not in used and not a.partial:
            bad.append(f"layers.py: allowed {k} {f} -> {pat} ({owner}) no longer happens: delete the entry")
    for b in bad:
        print(b)
    if not a.quiet or bad:
        print(f"layers: {len(bad)} upward edge(s); stack: {' -> '.join(ORDER)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
