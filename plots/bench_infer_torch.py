#!/usr/bin/env python3
"""bench_infer_torch.py - the PyTorch side of `kiln bench-infer`: the same GPT (GPT-2's
architecture, plots/bench_torch.py's blocks and init, imported, as
../shared/reference/torch_gpt.py: token + position embeddings, pre-norm blocks with biases,
GELU-tanh MLP, final layernorm, output tied to the token embedding) generating greedily with
a static KV cache, on one CUDA GPU, over kiln's four workloads at the same batch sizes,
printing the same metrics in the same JSON.

The cache is static as in gpt-fast and Hugging Face's StaticCache: k and v buffers
[layers, B, H, Tmax, D/H] allocated once; the prefill writes positions 0..T0-1, each decode
step writes one position with index_copy_ and attends over the whole buffer under a mask
(F.scaled_dot_product_attention). Variants: eager, and compile (the decode step through
torch.compile(mode="reduce-overhead", fullgraph=True): a CUDA graph of fused kernels; the
prefill compiled with dynamic shapes). Each token's logits are argmaxed on the GPU and the
token read back (.item()), which synchronizes, so the host clock measures every token.

Weights: --ckpt FILE (a kiln checkpoint, by its parameter names) or GPT-2's init at the named
size (tiny, small, 124M as kiln bench-infer's --model); timings do not depend on the values.
--dtype bf16 runs the model in bfloat16 (kiln: --passes autocast:bf16); fp32 allows TF32
unless --no-tf32. Metrics as kiln's (vLLM's definitions): TTFT, TPOT, ITL, E2E (mean, p50,
p95, p99 by numpy's linear interpolation), output tokens/s, peak torch.cuda memory."""
import argparse, json, os, sys, time

import numpy as np
import torch
import torch.nn.functional as F

WORKLOADS = {"chat": (32, 64), "long": (16, 512), "mid": (64, 256), "summarize": (500, 128)}
MODELS = {"tiny": (64, 128, 2, 32, 2), "small": (256, 1024, 4, 256, 4), "124M": (50257, 1024, 12, 768, 12)}


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_torch  # noqa: E402  the same blocks, parameter names and init as the training benchmark


class Block(bench_torch.Block):
    """bench_torch's block, attending over a static KV cache."""
    def forward(self, x, pos, mask, kc, vc):
        """x [B, T, D] at positions pos [T]; kc, vc [B, H, Tmax, hd] this layer's cache."""
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln_1(x))
        kc.index_copy_(2, pos, k)
        vc.index_copy_(2, pos, v)
        y = F.scaled_dot_product_attention(q, kc, vc, attn_mask=mask)
        x = x + self.attn_proj(y.transpose(1, 2).reshape(B, T, D))
        return x + self.mlp(self.ln_2(x))


class GPT(bench_torch.GPT):
    def __init__(self, vocab, context, layers, width, heads):
        super().__init__(vocab, context, layers, width, heads, "sdpa", block=Block)
        self.context = context

    def setup_cache(self, B, dtype):
        """The static cache, as buffers (so a CUDA graph sees the same addresses every step)."""
        L, H = len(self.h), self.h[0].heads
        D = self.wte.weight.shape[1]
        dev = self.wte.weight.device
        self.register_buffer("kcache", torch.zeros(L, B, H, self.context, D // H, device=dev, dtype=dtype), False)
        self.register_buffer("vcache", torch.zeros_like(self.kcache), False)

    def forward(self, idx, pos):
        """idx [B, T] at positions pos [T]: the logits of the last position, [B, V]."""
        kcache, vcache = self.kcache, self.vcache
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(pos)
        # position t sees cache slots <= t (the cache's length is the context)
        slots = torch.arange(self.context, device=idx.device)
        mask = slots[None, :] <= pos[:, None]  # [T, Tmax], True = attend
        for l, blk in enumerate(self.h):
            x = blk(x, pos, mask, kcache[l], vcache[l])
        return self.ln_f(x[:, -1, :]) @ self.wte.weight.t()


def load_kiln(model, path):
    """Copy a kiln checkpoint's tensors into model (names as Hugging Face's GPT-2; kiln stores
    linear weights [in, out] like its Conv1D, torch's nn.Linear wants [out, in])."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gpt_numpy
    tensors, _ = gpt_numpy.read_safetensors(path)
    rename = {"attn.c_proj": "attn_proj", "mlp.c_fc": "c_fc", "mlp.c_proj": "mlp_proj", "attn.c_attn": "c_attn"}
    own = dict(model.named_parameters())
    for name, a in tensors.items():
        if name.startswith("optim."):
            continue
        tname = name
        for k, v in rename.items():
            tname = tname.replace(k, v)
        t = torch.from_numpy(a)
        if tname.endswith("weight") and t.dim() == 2 and not tname.startswith(("wte", "wpe")):
            t = t.t()
        if tname not in own or own[tname].shape != t.shape:
            raise SystemExit(f"bench_infer_torch.py: {path}: tensor {name} does not fit the model")
        with torch.no_grad():
            own[tname].copy_(t)


def pct(v):
    v = np.asarray(v, dtype=np.float64)
    if v.size == 0:
        return {"mean": None, "p50": None, "p95": None, "p99": None}
    return {"mean": float(v.mean()), "p50": float(np.percentile(v, 50)), "p95": float(np.percentile(v, 95)),
            "p99": float(np.percentile(v, 99))}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="124M", choices=sorted(MODELS))
    ap.add_argument("--ckpt", help="a kiln checkpoint (overrides --model's init)")
    ap.add_argument("--variant", default="eager", choices=["eager", "compile"])
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--no-tf32", action="store_true")
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--workloads", default="chat,long,mid,summarize")
    ap.add_argument("--requests", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--json", help="write the JSON here (it is also the last line printed)")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_infer_torch.py: no CUDA device (it runs on the GPU machine only)")
    torch.backends.cuda.matmul.allow_tf32 = not a.no_tf32
    torch.backends.cudnn.allow_tf32 = not a.no_tf32
    dev = torch.device("cuda")
    if a.ckpt:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import gpt_numpy
        _, meta = gpt_numpy.read_safetensors(a.ckpt)
        cfg = tuple(int(meta["kiln." + k]) for k in ("vocab", "context", "layers", "width", "heads"))
    else:
        cfg = MODELS[a.model]
    V, Tmax, L, D, H = cfg
    torch.manual_seed(1337)
    model = GPT(*cfg)
    if a.ckpt:
        load_kiln(model, a.ckpt)
    dt = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    model = model.to(dev, dt).eval()
    if a.variant == "compile":
        decode = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
        prefill = torch.compile(model.forward, dynamic=True, fullgraph=True)
    else:
        decode = prefill = model.forward
    results = []
    for B in [int(x) for x in a.batch.split(",")]:
        model.setup_cache(B, dt)
        for wname in a.workloads.split(","):
            p0, new = WORKLOADS[wname]
            n0, new = max(1, round(p0 * a.scale)), max(1, round(new * a.scale))
            if n0 + new > Tmax:
                raise SystemExit(f"bench_infer_torch.py: {wname}: {n0} + {new} tokens exceed the context {Tmax}")
            ttft, tpot, itl, e2e, peak, total_s = [], [], [], [], 0, 0.0
            gen = torch.Generator().manual_seed(1)
            for q in range(-a.warmup, a.requests):
                ids = torch.randint(0, V, (B, n0), generator=gen).to(dev)
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                t0 = time.perf_counter()
                times = []
                with torch.no_grad():
                    logits = prefill(ids, torch.arange(n0, device=dev))
                    tok = logits.argmax(-1)
                    tok.cpu()
                    times.append(time.perf_counter())
                    for p in range(n0, n0 + new - 1):
                        logits = decode(tok[:, None].clone(), torch.tensor([p], device=dev))
                        tok = logits.argmax(-1)
                        tok.cpu()
                        times.append(time.perf_counter())
                if q < 0:
                    continue
                peak = max(peak, torch.cuda.max_memory_allocated())
                first, last = times[0] - t0, times[-1] - t0
                for _ in range(B):
                    ttft.append(1e3 * first)
                    e2e.append(1e3 * last)
                    if len(times) > 1:
                        tpot.append(1e3 * (last - first) / (len(times) - 1))
                    itl.extend(1e3 * (times[i] - times[i - 1]) for i in range(1, len(times)))
                total_s += last
            results.append({"workload": wname, "batch": B, "prompt_tokens": n0, "new_tokens": new,
                            "requests": a.requests * B, "ttft_ms": pct(ttft), "tpot_ms": pct(tpot),
                            "itl_ms": pct(itl), "e2e_ms": pct(e2e),
                            "tokens_per_s": a.requests * B * new / total_s if total_s > 0 else None,
                            "peak_bytes": float(peak)})
            r = results[-1]
            print(f"torch {a.variant} {a.dtype} {wname:10s} B={B}: TTFT p50 {r['ttft_ms']['p50']:.3f} ms, "
                  f"TPOT p50 {r['tpot_ms']['p50']:.3f} ms, {r['tokens_per_s']:.0f} tok/s", file=sys.stderr, flush=True)
    out = {"framework": "torch", "variant": f"{a.variant}/{a.dtype}", "device": torch.cuda.get_device_name(),
           "model": a.ckpt or a.model, "config": dict(zip(("vocab", "context", "layers", "width", "heads"), cfg)),
           "results": results}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
