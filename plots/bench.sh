#!/usr/bin/env bash
# bench.sh [FLAGS...] — kiln eager fp32 vs PyTorch eager fp32 on one GPU, in one call.
#
# Runs `kiln bench FLAGS` (core/cli/bench.c), then plots/bench_torch.py FLAGS with
# PyTorch's usual attention (sdpa) and with attention spelled out as kiln does (manual),
# each on the same GPU with the same shapes (default: GPT-2 124M, batch 8, 3 warm-up and
# 10 timed steps; FLAGS such as --layers 2 --width 128 --steps 5 shrink it for a quick
# check), and prints a table of the JSON lines they end with, with the ratio of kiln's
# tokens/s to each PyTorch run's. KILN names the kiln binary (default build/solutions/kiln);
# LOGS a folder for the full outputs (default $OUT when set, else /tmp/kiln-bench). A side
# that fails is reported as such; the others still run. PyTorch is skipped (with a line
# saying so) when no python3 can import torch. BENCH_TIMEOUT (seconds, default 0: none)
# bounds each of the three runs. --tf32 lets both sides' fp32 matmuls use TF32 tensor cores.
# The table and the ratios are also written to $LOGS/bench_summary.json.
set -u
KILN=${KILN:-build/solutions/kiln}
LOGS=${LOGS:-${OUT:-/tmp/kiln-bench}}
mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1
here=$(cd "$(dirname "$0")" && pwd)

echo "== kiln bench $*"
timeout "${BENCH_TIMEOUT:-0}" "$KILN" bench "$@" 2>&1 | tee "$LOGS/bench_kiln.log"
# PyTorch's interpreter (core/mk/python.sh torch: on the GPU machine the PATH's python3).
torch_py=$(bash "$here/../core/mk/python.sh" torch) || torch_py=
if [ -n "$torch_py" ]; then
    for attn in sdpa manual; do
        echo "== bench_torch.py --attn $attn $*"
        timeout "${BENCH_TIMEOUT:-0}" "$torch_py" "$here/bench_torch.py" --attn "$attn" "$@" 2>&1 | tee "$LOGS/bench_torch_$attn.log"
    done
else
    echo "== PyTorch: no python3 here can import torch; the PyTorch side is skipped"
fi

"${PYTHON:-python3}" - "$LOGS" <<'PY'
import json, os, sys
logs = sys.argv[1]
rows = []
for name in ("bench_kiln.log", "bench_torch_sdpa.log", "bench_torch_manual.log"):
    path = os.path.join(logs, name)
    if not os.path.exists(path):
        continue
    last = None
    for line in open(path, errors="replace"):
        if line.startswith("{"):
            try: last = json.loads(line)
            except ValueError: pass
    rows.append((name, last))
kiln = next((r for n, r in rows if n == "bench_kiln.log" and r), None)
print()
print("%-16s %10s %12s %9s %9s %11s %9s" % ("impl", "step ms", "tokens/s", "fwd ms", "optim ms", "peak MiB", "kiln/x"))
for name, r in rows:
    if not r:
        print("%-16s %s" % (name.replace(".log", ""), "FAILED (no result line; see its log)"))
        continue
    ratio = "%.3f" % (kiln["tokens_per_s"] / r["tokens_per_s"]) if kiln else "-"
    print("%-16s %10.2f %12.0f %9.2f %9.2f %11.0f %9s" % (r["impl"], r["step_ms_median"], r["tokens_per_s"],
          r["fwd_ms"], r["optim_ms"], r["peak_mem_mib"], ratio))
if kiln:
    print("shape: vocab %d, context %d, %d layers, width %d, %d heads, batch %d (%d parameters); device %s; "
          "fp32 matmuls with TF32 %s" % (kiln["vocab"], kiln["context"], kiln["layers"], kiln["width"], kiln["heads"],
          kiln["batch"], kiln["params"], kiln["device"], "on" if kiln.get("tf32") else "off"))
    summary = {"kiln": kiln, "torch": {n.replace("bench_torch_", "").replace(".log", ""): r for n, r in rows
                                       if n != "bench_kiln.log" and r}}
    for name, r in summary["torch"].items():
        summary["ratio_" + name] = round(kiln["tokens_per_s"] / r["tokens_per_s"], 4)
    with open(os.path.join(logs, "bench_summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
PY
