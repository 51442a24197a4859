#!/usr/bin/env python3
"""torch_agree.py - check kiln's training math against PyTorch: same weights, same batches.

Runs `kiln dump` (core/cli/dump.c), which initializes a GPT, draws random batches and
writes one safetensors file: the initial weights under their checkpoint names, the
batches, kiln's logits, loss and (unclipped) gradient of every parameter on batch 0, and
the losses of N AdamW steps on batches 1..N. This script then builds the same GPT in
PyTorch fp32 from that file's weights (TF32 off for matmuls and cuDNN), runs batch 0 and
compares logits, loss and every gradient, then takes the same N AdamW steps
(torch.optim.AdamW with the hyperparameters and weight-decay groups from the file's
metadata, and the same global-norm clip) and compares the N losses and gradient norms.

Error measure: for each tensor, the largest relative error is NORM-WISE,
    rel = max|a - b| / max|b|        (a: kiln, b: the reference),
because an element-wise ratio |a - b| / |b| explodes where b is near zero (a gradient of
1e-12 computed in another summation order can differ by 100%). The element-wise ratio
is printed beside it for information, regularized as |a - b| / (|b| + 1e-6 max|b|).

Tolerances: the same fp32 math in the same order agrees to ~1e-6 relative; a different
summation order in matrix products and reductions (cuBLAS against kiln's CPU kernels,
or two GPU libraries) gives up to ~1e-4 on GPT-2-shaped models. So the default threshold
is 1e-4 norm-wise for logits and gradients (--tol) and 1e-4 relative for the losses of
the steps (--loss-tol; AdamW divides by sqrt(v), which magnifies the rounding of small
gradients a little with every step). Exit 0 with one "PASS ..." line when every tensor
is within its threshold, 1 naming the worst tensor otherwise, 2 when the check cannot run
(PyTorch missing, kiln failing, a bad file).

--reference numpy checks without PyTorch (plots/gpt_numpy.py): the forward pass in
float64 numpy (logits and loss, not the steps) and central finite differences of the loss
for a few gradient entries of every parameter (the largest and a random one): what the
test suite runs on a machine without torch.

Usage, on the GPU machine:
    python3 plots/torch_agree.py --kiln build/solutions/kiln --layers 2 --width 128
    python3 plots/torch_agree.py --dump FILE.safetensors        (a dump made earlier)
Config flags (--vocab --context --layers --width --heads --batch --steps --seed --lr
--clip) are passed to `kiln dump`; --kiln-device picks where kiln runs (default: the
same kind of device as --device)."""
import argparse
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_numpy  # noqa: E402

PROG = "torch_agree.py"


def fail_setup(msg):
    """A check that cannot run: one line, exit 2."""
    print(f"{PROG}: {msg}", file=sys.stderr)
    sys.exit(2)


def errors(a, b):
    """(max abs error, norm-wise relative error, regularized element-wise relative error)."""
    a = np.asarray(a, np.float64).reshape(-1)
    b = np.asarray(b, np.float64).reshape(-1)
    if a.shape != b.shape:
        return math.inf, math.inf, math.inf
    if a.size == 0:
        return 0.0, 0.0, 0.0
    d = np.abs(a - b)
    if not np.all(np.isfinite(d)):
        return math.inf, math.inf, math.inf
    m = float(np.abs(b).max())
    rel = float(d.max()) / m if m > 0 else float(d.max())
    elem = float((d / (np.abs(b) + 1e-6 * m + 1e-300)).max())
    return float(d.max()), rel, elem


class Table:
    """Rows of (name, shape, errors, tolerance); the worst relative error against its tolerance."""

    def __init__(self):
        self.rows = []

    def add(self, name, a, b, tol):
        e = errors(a, b)
        self.rows.append((name, tuple(np.shape(b)), e, tol))
        print(f"{name:34s} {str(list(np.shape(b))):>16s} {e[0]:12.3e} {e[1]:12.3e} {e[2]:12.3e} "
              f"{'ok' if e[1] <= tol else 'OVER ' + format(tol, 'g')}", flush=True)

    @staticmethod
    def header(what):
        print(f"\n== {what}")
        print(f"{'tensor':34s} {'shape':>16s} {'max abs err':>12s} {'rel (norm)':>12s} {'rel (elem)':>12s}")

    def verdict(self, what):
        if not self.rows:
            fail_setup("nothing was compared")
        worst = max(self.rows, key=lambda r: r[2][1] / r[3])
        over = [r for r in self.rows if not r[2][1] <= r[3]]
        name, shape, e, tol = worst
        if over:
            print(f"FAIL {what}: {len(over)} of {len(self.rows)} tensors over their threshold; worst '{name}' "
                  f"{list(shape)}: relative error {e[1]:.3e} > {tol:g} (max abs {e[0]:.3e})")
            return 1
        print(f"PASS {what}: {len(self.rows)} tensors agree; worst '{name}' relative error {e[1]:.3e} "
              f"(threshold {tol:g})")
        return 0


def run_kiln(a, path):
    dev = a.kiln_device or ("cpu" if a.device == "cpu" or a.reference == "numpy" else a.device)
    cmd = [a.kiln, "dump", "--out", path, "--device", dev]
    if a.kiln_mode:
        cmd += ["--mode", a.kiln_mode]
    for k in ("vocab", "context", "layers", "width", "heads", "batch", "steps", "seed", "lr", "clip"):
        v = getattr(a, k)
        if v is not None:
            cmd += ["--" + k, str(v)]
    print("$ " + " ".join(cmd), flush=True)
    try:
        r = subprocess.run(cmd)
    except OSError as e:
        fail_setup(f"cannot run kiln ({a.kiln}): {e.strerror}; build it (make) or pass --kiln PATH")
    if r.returncode != 0:
        fail_setup(f"'kiln dump' failed with exit status {r.returncode} (its message is above)")


def load(path):
    try:
        T, meta = gpt_numpy.read_safetensors(path)
        cfg = gpt_numpy.config_of(meta)
    except (OSError, ValueError, KeyError) as e:
        fail_setup(f"{path}: not a kiln dump ({e})")
    names = gpt_numpy.param_names(cfg)
    missing = [n for n in names + ["grad." + n for n in names] + ["x", "y", "logits", "loss", "losses"]
               if n not in T]
    if missing:
        fail_setup(f"{path}: not a kiln dump (missing {', '.join(missing[:4])})")
    return T, meta, cfg, names


def check_numpy(a, T, meta, cfg, names):
    """logits and loss in float64 numpy, and finite differences of a few gradient entries."""
    P = {n: T[n] for n in names}
    x0, y0 = T["x"][0].astype(np.int64), T["y"][0].astype(np.int64)
    tab = Table()
    Table.header("batch 0: forward in float64 numpy")
    logits = gpt_numpy.forward(P, cfg, x0)
    tab.add("logits", T["logits"], logits, a.tol)
    tab.add("loss", T["loss"], [gpt_numpy.cross_entropy(logits, y0)], a.tol)
    Table.header(f"gradients: central differences in float64 at {a.fd} entries per tensor (largest |grad| first)")
    rng = np.random.default_rng(0)
    for n in names:
        g = T["grad." + n]
        flat = np.argsort(-np.abs(g).reshape(-1), kind="stable")[:max(1, a.fd - 1)].tolist()
        if a.fd > 1:
            flat.append(int(rng.integers(g.size)))
        picks = [np.unravel_index(i, g.shape) for i in flat]
        fd = [gpt_numpy.finite_difference(P, cfg, x0, y0, n, ix) for ix in picks]
        # relative to the tensor's largest gradient: the norm-wise measure on the sampled entries
        kiln = [g[ix] for ix in picks]
        e = errors(kiln, fd)
        scale = float(np.abs(g).max())
        rel = e[0] / scale if scale > 0 else e[0]
        tab.rows.append(("grad." + n, g.shape, (e[0], rel, e[2]), a.fd_tol))
        print(f"{'grad.' + n:34s} {str(list(g.shape)):>16s} {e[0]:12.3e} {rel:12.3e} {e[2]:12.3e} "
              f"{'ok' if rel <= a.fd_tol else 'OVER ' + format(a.fd_tol, 'g')}", flush=True)
    return tab.verdict(f"kiln against float64 numpy ({cfg_str(cfg)}; device {meta.get('kiln.device', '?')})")


def cfg_str(cfg):
    return ", ".join(f"{k} {cfg[k]}" for k in gpt_numpy.CONFIG_KEYS)


def check_torch(a, torch, T, meta, cfg, names):
    import torch.nn.functional as F
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device(a.device if a.device != "cuda" else "cuda:0")
    if dev.type == "cuda" and not torch.cuda.is_available():
        fail_setup(f"--device {a.device}: PyTorch sees no CUDA device (use --device cpu)")
    D, H, L = cfg["width"], cfg["heads"], cfg["layers"]
    hd = D // H
    P = {n: torch.nn.Parameter(torch.from_numpy(np.ascontiguousarray(T[n], np.float32)).to(dev)) for n in names}

    def model(idx):
        B, Tn = idx.shape
        x = (P["wte.weight"][idx] + P["wpe.weight"][:Tn]).reshape(B * Tn, D)
        mask = torch.ones(Tn, Tn, dtype=torch.bool, device=dev).triu(1)
        for l in range(L):
            p = lambda s: P[f"h.{l}.{s}"]
            h = F.layer_norm(x, (D,), p("ln_1.weight"), p("ln_1.bias"), eps=1e-5)
            qkv = (h @ p("attn.c_attn.weight") + p("attn.c_attn.bias")).view(B, Tn, 3, H, hd)
            q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))       # [B, H, T, hd]
            s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
            y = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1) @ v
            y = y.transpose(1, 2).reshape(B * Tn, D)
            x = x + y @ p("attn.c_proj.weight") + p("attn.c_proj.bias")
            h = F.layer_norm(x, (D,), p("ln_2.weight"), p("ln_2.bias"), eps=1e-5)
            h = F.gelu(h @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias"), approximate="tanh")
            x = x + h @ p("mlp.c_proj.weight") + p("mlp.c_proj.bias")
        x = F.layer_norm(x, (D,), P["ln_f.weight"], P["ln_f.bias"], eps=1e-5)
        return x @ P["wte.weight"].t()                                        # tied output layer

    def batch(k):
        return tuple(torch.from_numpy(T[n][k].astype(np.int64)).to(dev) for n in ("x", "y"))

    tab = Table()
    Table.header(f"batch 0: forward and backward in PyTorch {torch.__version__} fp32 on {dev} (TF32 off)")
    x0, y0 = batch(0)
    logits = model(x0)
    loss = F.cross_entropy(logits, y0.reshape(-1))
    loss.backward()
    tab.add("logits", T["logits"], logits.detach().cpu().numpy(), a.tol)
    tab.add("loss", T["loss"], [loss.item()], a.tol)
    for n in names:
        tab.add("grad." + n, T["grad." + n], P[n].grad.detach().cpu().numpy(), a.tol)
    for n in names:
        P[n].grad = None

    decay_names = [s for s in meta.get("kiln.optim.decay", "").split(",") if s]
    unknown = [n for n in decay_names if n not in P]
    if unknown:
        fail_setup(f"metadata kiln.optim.decay names unknown parameters: {', '.join(unknown[:3])}")
    decay = [P[n] for n in names if n in decay_names]
    rest = [P[n] for n in names if n not in decay_names]
    lr, clip = float(meta["kiln.lr"]), float(meta["kiln.clip"])
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": float(meta["kiln.optim.weight_decay"])},
                             {"params": rest, "weight_decay": 0.0}], lr=lr,
                            betas=(float(meta["kiln.optim.beta1"]), float(meta["kiln.optim.beta2"])),
                            eps=float(meta["kiln.optim.eps"]), foreach=False)
    N = T["losses"].shape[0]
    losses, norms = [], []
    for k in range(1, N + 1):
        xk, yk = batch(k)
        loss = F.cross_entropy(model(xk), yk.reshape(-1))
        loss.backward()
        grads = [p.grad for p in P.values()]
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g, dtype=torch.float64) for g in grads]))
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(list(P.values()), clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        norms.append(norm.item())
    if N:
        Table.header(f"{N} AdamW steps (lr {lr:g}, {len(decay)} decayed tensors, clip {clip:g}) on batches 1..{N}")
        for k in range(N):
            print(f"  step {k + 1:2d}: loss kiln {T['losses'][k]:.9f}  torch {losses[k]:.9f}  "
                  f"gradient norm kiln {T['gnorms'][k]:.6f}  torch {norms[k]:.6f}")
        tab.add("losses", T["losses"], losses, a.loss_tol)
        tab.add("gnorms", T["gnorms"], norms, a.tol)
    return tab.verdict(f"kiln ({meta.get('kiln.device', '?')}) against PyTorch ({dev}); {cfg_str(cfg)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--kiln", default="build/solutions/kiln", help="the kiln binary (default %(default)s)")
    ap.add_argument("--dump", help="check this dump instead of running kiln")
    ap.add_argument("--out", help="where kiln writes its dump (default: a temporary file, removed afterwards)")
    for k in ("vocab", "context", "layers", "width", "heads", "batch", "steps", "seed"):
        ap.add_argument("--" + k, type=int, help="passed to kiln dump")
    for k in ("lr", "clip"):
        ap.add_argument("--" + k, type=float, help="passed to kiln dump")
    ap.add_argument("--device", default="cuda", help="where PyTorch runs: cuda, cuda:N or cpu (default %(default)s)")
    ap.add_argument("--kiln-device", help="where kiln runs (default: cpu with --device cpu or --reference numpy, "
                    "else --device)")
    ap.add_argument("--kiln-mode", choices=["interp", "compiled"], help="kiln's program: node by node (the "
                    "default) or compiled (fused, generated kernels: C on the CPU, CUDA on a GPU)")
    ap.add_argument("--reference", choices=["torch", "numpy"], default="torch")
    ap.add_argument("--tol", type=float, default=1e-4, help="norm-wise relative threshold for logits, loss, "
                    "gradients and gradient norms (default %(default)g)")
    ap.add_argument("--loss-tol", type=float, default=1e-4, help="relative threshold for the steps' losses "
                    "(default %(default)g)")
    ap.add_argument("--fd", type=int, default=3, help="numpy: finite-difference entries per parameter (default 3)")
    ap.add_argument("--fd-tol", type=float, default=1e-4, help="numpy: finite differences' threshold, relative to "
                    "the tensor's largest gradient (default %(default)g)")
    a = ap.parse_args()
    torch = None
    if a.reference == "torch":
        try:
            import torch
        except ImportError:
            fail_setup("PyTorch is not installed (python3 cannot import torch); "
                       "--reference numpy checks the forward pass without it")
    tmp = None
    path = a.dump
    if not path:
        if a.out:
            path = a.out
        else:
            tmp = tempfile.TemporaryDirectory(prefix="kiln-agree-")
            path = os.path.join(tmp.name, "dump.safetensors")
        run_kiln(a, path)
    T, meta, cfg, names = load(path)
    print(f"{path}: {cfg_str(cfg)}; batch {T['x'].shape[1]}, {T['losses'].shape[0]} steps; kiln ran on "
          f"{meta.get('kiln.device', '?')}")
    if a.reference == "numpy":
        rc = check_numpy(a, T, meta, cfg, names)
    else:
        rc = check_torch(a, torch, T, meta, cfg, names)
    if tmp:
        tmp.cleanup()
    return rc


if __name__ == "__main__":
    sys.exit(main())
