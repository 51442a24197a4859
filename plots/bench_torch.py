#!/usr/bin/env python3
"""bench_torch.py - the PyTorch side of plots/bench.sh: the same GPT as `kiln bench`
(GPT-2 architecture: token + position embeddings, pre-norm blocks with biases, GELU-tanh
MLP of width 4D, final layernorm, output tied to the token embedding), fp32 with TF32 off,
AdamW (betas 0.9/0.95, eps 1e-8, weight decay 0.1 on matrices and embeddings; fused, as a
practitioner runs it: --foreach keeps the slower foreach variant, labelled so), global-norm
clip 1.0 (clip_grad_norm_, PyTorch's multi-tensor norm, as kiln's one-pass clip), trained eagerly on fresh random tokens each step, on one CUDA GPU. --tf32 lets
matmuls use TF32 tensor cores, as `kiln bench --tf32` does.

Protocol, as kiln's: warm-up steps, then timed steps, each timed with CUDA events around
(batch upload, forward, backward, clip, AdamW step, loss read-back); median step ms,
tokens/s from the median, the median forward-only ms and clip+AdamW ms, and the peak of
torch.cuda.max_memory_allocated. The last line printed is one JSON object.

--attn sdpa (default) uses F.scaled_dot_product_attention (PyTorch's usual eager path);
--attn manual spells attention out as kiln's graph does (matmul, causal mask, softmax,
matmul), materializing the [B, H, T, T] scores."""
import argparse, json, math, statistics, sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, width, heads, attn):
        super().__init__()
        self.heads, self.attn = heads, attn
        self.ln_1, self.ln_2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.c_attn, self.attn_proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.c_fc, self.mlp_proj = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def qkv(self, x):
        """q, k, v of x [B, T, D], each [B, H, T, D/H] (plots/bench_infer_torch.py too)."""
        B, T, D = x.shape
        H = self.heads
        q, k, v = self.c_attn(x).split(D, dim=2)
        return [t.view(B, T, H, D // H).transpose(1, 2) for t in (q, k, v)]

    def mlp(self, x):
        return self.mlp_proj(F.gelu(self.c_fc(x), approximate="tanh"))

    def attention(self, x):
        B, T, D = x.shape
        H = self.heads
        q, k, v = self.qkv(x)
        if self.attn == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D // H))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            y = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1) @ v
        return self.attn_proj(y.transpose(1, 2).reshape(B, T, D))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """block: the block class (plots/bench_infer_torch.py passes its KV-cache block)."""
    def __init__(self, vocab, context, layers, width, heads, attn, block=Block):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(context, width)
        self.h = nn.ModuleList([block(width, heads, attn) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(width)
        resid = 0.02 / math.sqrt(2 * layers)
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, 0.0, resid if name.endswith("proj.weight") else 0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
            else:
                nn.init.ones_(p)

    def forward(self, idx, targets=None):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied output layer
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name, default in [("vocab", 50304), ("context", 1024), ("layers", 12), ("width", 768), ("heads", 12),
                          ("batch", 8), ("warmup", 3), ("steps", 10), ("seed", 1)]:
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--attn", choices=["sdpa", "manual"], default="sdpa")
    ap.add_argument("--device", default="cuda", help="a CUDA device (cpu is refused: this benchmark is GPU-only)")
    ap.add_argument("--fused", action="store_true", default=True, help="AdamW(fused=True): the default, as a "
                    "practitioner runs it (nanoGPT and every serious recipe)")
    ap.add_argument("--foreach", dest="fused", action="store_false", help="AdamW's foreach variant instead of "
                    "the fused one (slower; its rows are labelled foreach)")
    ap.add_argument("--tf32", action="store_true", help="let fp32 matmuls use TF32 tensor cores (kiln bench --tf32)")
    ap.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32",
                    help="bf16/fp16: torch.autocast around the forward (kiln bench --precision)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (the time includes no compile: "
                    "it happens in the warm-up steps, reported as compile_s)")
    ap.add_argument("--compile-mode", default="default", choices=["default", "max-autotune-no-cudagraphs"],
                    help="torch.compile's mode (max-autotune-no-cudagraphs autotunes its matmuls and Triton "
                    "kernels: minutes of compile, sometimes a faster step)")
    ap.add_argument("--flash", action="store_true", help="accepted for kiln bench's sake: --attn sdpa is PyTorch's "
                    "flash attention already")
    ap.add_argument("--profile", type=int, default=0, help="accepted for kiln bench's sake and ignored")
    ap.add_argument("--profile-out", default="", help="accepted for kiln bench's sake and ignored")
    a = ap.parse_args()
    if not torch.cuda.is_available() or not a.device.startswith("cuda"):
        print(f"bench_torch.py: --device {a.device}: needs a CUDA device", file=sys.stderr)
        return 1
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.allow_tf32 = a.tf32
    torch.manual_seed(a.seed)
    dev = torch.device(a.device if ":" in a.device else "cuda:0")
    torch.cuda.set_device(dev)
    model = GPT(a.vocab, a.context, a.layers, a.width, a.heads, a.attn).to(dev)
    run_model = model
    if a.compile:
        run_model = torch.compile(model) if a.compile_mode == "default" else torch.compile(model, mode=a.compile_mode)
    low = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.precision)
    scaler = torch.amp.GradScaler("cuda") if a.precision == "fp16" else None

    def forward(x, y):
        if low is None:
            return run_model(x, y)
        with torch.autocast(device_type="cuda", dtype=low):
            return run_model(x, y)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8, fused=a.fused)
    nparams = sum(p.numel() for p in model.parameters())
    gen = torch.Generator().manual_seed(a.seed + 1000)
    B, T = a.batch, a.context

    def batch():
        return (torch.randint(0, a.vocab, (B, T), generator=gen, dtype=torch.long),
                torch.randint(0, a.vocab, (B, T), generator=gen, dtype=torch.long))

    def timed(fn):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        e0.record()
        out = fn()
        e1.record()
        e1.synchronize()
        return e0.elapsed_time(e1), out

    def step(x, y):
        loss = forward(x.to(dev, non_blocking=False), y.to(dev, non_blocking=False))
        if scaler:
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    print(f"bench_torch: GPT vocab {a.vocab}, context {T}, {a.layers} layers, width {a.width}, {a.heads} heads: "
          f"{nparams} parameters; batch {B}; {a.precision} (TF32 {'on' if a.tf32 else 'off'}) AdamW "
          f"({'fused' if a.fused else 'foreach'}), attention {a.attn}{', torch.compile' if a.compile else ''}, on "
          f"{torch.cuda.get_device_name()}; torch {torch.__version__}", flush=True)
    ms, losses, warm_ms = [], [], 0.0
    for s in range(a.warmup + a.steps):
        x, y = batch()
        t, loss = timed(lambda: step(x, y))
        losses.append(loss)
        if s >= a.warmup:
            ms.append(t)
        else:
            warm_ms += t
        print(f"  step {s + 1:3d}  {'warm-up' if s < a.warmup else 'timed  '}  {t:9.2f} ms  loss {loss:.4f}", flush=True)
    fwd, opt_ms = [], []
    for _ in range(3):
        x, y = batch()
        with torch.no_grad():
            fwd.append(timed(lambda: forward(x.to(dev), y.to(dev)).item())[0])
    loss = forward(*[t.to(dev) for t in batch()])
    loss.backward()
    for _ in range(3):
        opt_ms.append(timed(lambda: (torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0), opt.step()))[0])
    med = statistics.median(ms)
    how = ("compile" + ("" if a.compile_mode == "default" else "-autotune")) if a.compile else a.attn
    impl = "pytorch-" + how + ("" if a.fused else "-foreach") + ("" if a.precision == "fp32" else "-" + a.precision)
    res = {"impl": impl, "device": torch.cuda.get_device_name(), "vocab": a.vocab, "context": T,
           "layers": a.layers, "width": a.width, "heads": a.heads, "batch": B, "params": nparams,
           "warmup": a.warmup, "steps": a.steps, "step_ms_median": round(med, 3), "step_ms_min": round(min(ms), 3),
           "step_ms_max": round(max(ms), 3), "tokens_per_s": round(B * T / (med / 1e3), 1),
           "fwd_ms": round(statistics.median(fwd), 3), "optim_ms": round(statistics.median(opt_ms), 3),
           "peak_mem_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1),
           "peak_reserved_mib": round(torch.cuda.max_memory_reserved() / 2**20, 1),
           "loss_first": round(losses[0], 5), "loss_last": round(losses[-1], 5), "tf32": a.tf32,
           "precision": a.precision, "compile": a.compile, "compile_mode": a.compile_mode,
           "adamw": "fused" if a.fused else "foreach",
           # the warm-up steps less as many timed ones: what compiling (and first-use setup) cost
           "compile_ms": round(max(0.0, warm_ms - a.warmup * med), 1) if a.compile else 0.0}
    print(f"  step {med:.2f} ms median -> {res['tokens_per_s']:.0f} tokens/s; forward {res['fwd_ms']:.2f} ms; "
          f"clip + AdamW {res['optim_ms']:.2f} ms; peak {res['peak_mem_mib']:.0f} MiB")
    print(json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
