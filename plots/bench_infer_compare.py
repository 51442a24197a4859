#!/usr/bin/env python3
"""bench_infer_compare.py KILN.json [TORCH.json ...] - the ratios of `make bench-infer`: for
every workload and batch size that kiln's run (kiln bench-infer --json) shares with a
PyTorch run (plots/bench_infer_torch.py --json), TPOT and TTFT (p50) as torch / kiln (above 1:
kiln is faster) and output tokens/s as kiln / torch."""
import json, sys


def key(r):
    return (r["workload"], r["batch"], r["prompt_tokens"], r["new_tokens"])


def main():
    if len(sys.argv) < 2:
        raise SystemExit("usage: bench_infer_compare.py KILN.json [TORCH.json ...]")
    runs = [json.load(open(p)) for p in sys.argv[1:]]
    base = runs[0]
    if len(runs) == 1:
        print(f"\n{base['framework']} {base['variant']} on {base['device']}: no other run to compare with")
        return
    print(f"\n{base['framework']} {base['variant']} on {base['device']} ({base['model']}) against:")
    for other in runs[1:]:
        theirs = {key(r): r for r in other["results"]}
        print(f"\n  {other['framework']} {other['variant']} ({other['device']}): ratios above 1 favour kiln")
        print(f"  {'workload':10s} {'B':>3s} | {'TPOT p50 ms':>19s} {'x':>6s} | {'TTFT p50 ms':>19s} {'x':>6s} | "
              f"{'tokens/s':>19s} {'x':>6s}")
        for r in base["results"]:
            t = theirs.get(key(r))
            if not t:
                continue
            def pair(k):
                a, b = r[k]["p50"], t[k]["p50"]
                return f"{a:8.3f} /{b:9.3f} {b / a if a and b else float('nan'):6.2f}"
            a, b = r["tokens_per_s"], t["tokens_per_s"]
            print(f"  {r['workload']:10s} {r['batch']:3d} | {pair('tpot_ms')} | {pair('ttft_ms')} | "
                  f"{a:8.0f} /{b:9.0f} {a / b if a and b else float('nan'):6.2f}")


if __name__ == "__main__":
    main()
