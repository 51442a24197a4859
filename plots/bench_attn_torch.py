#!/usr/bin/env python3
"""bench_attn_torch.py - the PyTorch side of plots/flash.sh: causal attention alone, forward
and backward, with torch.nn.functional.scaled_dot_product_attention (SDPA), measured the way
`kiln bench-attn` measures kiln's (core/cli/bench_attn.c): q, k, v [B, H, T, D] f32 that need
gradients, o = SDPA(q, k, v, is_causal=True), loss = sum(o * r) with a random r (so dO = r),
loss.backward(). TF32 is off unless --tf32 (as kiln's); in f32 PyTorch picks its
memory-efficient SDPA kernel on a GPU (the flash one takes only 16-bit types).

Protocol, as kiln's: warm-up runs, then timed runs (CUDA events around forward + backward on
a GPU, the wall clock on the CPU); the gradients are dropped before every run, so each run
allocates them as kiln's program does. Reported: the median run, and the peak of
torch.cuda.max_memory_allocated during the timed runs above what was allocated before them
(the inputs), on a GPU only (NaN on the CPU). The last line printed is one TSV row in
`kiln bench-attn`'s columns: T, variant (torch-sdpa), median ms, peak bytes, live-set bytes
(NaN: PyTorch has no such number), B, H, D, device, precision. --tf32 allows TF32 (as kiln's
--tf32); --precision bf16 makes q, k, v bf16 (PyTorch's flash SDPA kernel then runs).

Usage: bench_attn_torch.py [--batch B] [--heads H] [--head-dim D] [--seq T] [--warmup N]
       [--steps N] [--device auto|cpu|cuda|cuda:N] [--tf32] [--precision fp32|bf16]
       (kiln bench-attn's flags and defaults)"""
import argparse, statistics, sys, time

import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name, default in (("batch", 8), ("heads", 12), ("head-dim", 64), ("seq", 1024), ("warmup", 2), ("steps", 5)):
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--tf32", action="store_true")
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    a = ap.parse_args()
    dev = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device)
    gpu = dev.type == "cuda"
    if gpu and not torch.cuda.is_available():
        sys.exit("bench_attn_torch.py: --device %s, but torch sees no CUDA device" % a.device)
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.allow_tf32 = a.tf32
    dt = torch.bfloat16 if a.precision == "bf16" else torch.float32
    prec = "bf16" if a.precision == "bf16" else "tf32" if a.tf32 and gpu else "f32"
    torch.manual_seed(7)
    shape = (a.batch, a.heads, a.seq, a.head_dim)
    q, k, v = [torch.randn(shape, device=dev, dtype=dt, requires_grad=True) for _ in range(3)]
    r = torch.randn(shape, device=dev, dtype=dt)

    def run():
        for t in (q, k, v):
            t.grad = None
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        (o * r).sum().backward()

    ms, m0 = [], 0
    for i in range(a.warmup + a.steps):
        if i == a.warmup and gpu:
            torch.cuda.synchronize(dev)
            for t in (q, k, v):
                t.grad = None
            torch.cuda.reset_peak_memory_stats(dev)
            m0 = torch.cuda.memory_allocated(dev)
        if gpu:
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            stop.record()
            stop.synchronize()
            t = start.elapsed_time(stop)
        else:
            t0 = time.perf_counter()
            run()
            t = (time.perf_counter() - t0) * 1e3
        if i >= a.warmup:
            ms.append(t)
    med = statistics.median(ms)
    peak = float(torch.cuda.max_memory_allocated(dev) - m0) if gpu else float("nan")
    name = "cuda:%d" % (dev.index or 0) if gpu else "cpu"
    print("bench_attn_torch.py: causal attention, B %d, H %d, T %d, D %d, %s, forward + backward, torch %s SDPA, on %s"
          % (a.batch, a.heads, a.seq, a.head_dim, prec, torch.__version__, name))
    print("  %.3f ms median of %d runs; peak %.2f MiB above the inputs" % (med, a.steps, peak / 1048576.0))
    print("%d\ttorch-sdpa\t%.4f\t%.0f\tnan\t%d\t%d\t%d\t%s\t%s" % (a.seq, med, peak, a.batch, a.heads, a.head_dim, name, prec))


if __name__ == "__main__":
    main()
