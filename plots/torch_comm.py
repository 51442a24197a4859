#!/usr/bin/env python3
"""torch_comm.py [ELEMENTS ...] — NCCL's own collectives through PyTorch, the reference for
`kiln bench-comm --comm nccl` (plots/dist-gpu.sh). Launch: torchrun --nproc_per_node=N.

For each size (f32 elements, a multiple of N): all_reduce, reduce_scatter_tensor and
all_gather_into_tensor, 5 warm-up runs then 20 timed, synchronized; rank 0 prints the time
per operation and nccl-tests' bus bandwidth (all_reduce 2 (N-1)/N x bytes / time, the
others (N-1)/N x bytes / time, bytes the whole buffer): the same columns as kiln's."""
import os, sys, time
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
r, n = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", r)))
sizes = [int(s) for s in sys.argv[1:]] or [1 << 20, 16 << 20, 128 << 20]
if r == 0:
    print("torch %s bench: %d ranks over NCCL, f32, 20 iterations per size" % (torch.__version__, n))
    print("%12s  %-15s %12s %10s" % ("elements", "collective", "us/op", "bus GB/s"))
for e in sizes:
    e -= e % n
    x = torch.ones(e, device="cuda")
    part = torch.empty(e // n, device="cuda")
    ops = {
        "all_reduce": (lambda: dist.all_reduce(x), 2.0 * (n - 1) / n),
        "reduce_scatter": (lambda: dist.reduce_scatter_tensor(part, x), (n - 1) / n),
        "all_gather": (lambda: dist.all_gather_into_tensor(x, part), (n - 1) / n),
    }
    for name, (op, f) in ops.items():
        for _ in range(5):
            op()
        torch.cuda.synchronize(); dist.barrier()
        t0 = time.perf_counter()
        for _ in range(20):
            op()
        torch.cuda.synchronize()
        dt = (time.perf_counter() - t0) / 20
        if r == 0:
            print("%12d  %-15s %12.1f %10.2f" % (e, name, dt * 1e6, f * e * 4 / dt / 1e9), flush=True)
dist.destroy_process_group()
