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
# KILN_MODES (default "interp compiled") lists the `kiln bench --mode` runs: the node-by-node
# program and the compiled one (generated CUDA through NVRTC), both beside PyTorch; "graph"
# is the compiled one replayed as a CUDA graph (--mode compiled --cuda-graph). The ratios
# are those of the last mode listed.
# The table and the ratios are also written to $LOGS/bench_summary.json.
set -u
KILN=${KILN:-build/solutions/kiln}
LOGS=${LOGS:-${OUT:-/tmp/kiln-bench}}
mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1
here=$(cd "$(dirname "$0")" && pwd)

export KILN_MODES=${KILN_MODES:-interp compiled}
for mode in $KILN_MODES; do
    flags="--mode $mode"
    [ "$mode" = graph ] && flags="--mode compiled --cuda-graph"
    echo "== kiln bench $flags $*"
    # shellcheck disable=SC2086
    timeout "${BENCH_TIMEOUT:-0}" "$KILN" bench $flags "$@" 2>&1 | tee "$LOGS/bench_kiln_$mode.log"
done
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
names = ["bench_kiln_%s.log" % m for m in os.environ["KILN_MODES"].split()]  # in the order run
for name in names + ["bench_torch_sdpa.log", "bench_torch_manual.log"]:
    path = os.path.join(logs, name)
    if not os.path.exists(path):
        continue
    last = None
    for line in open(path, errors="replace"):
        if line.startswith("{"):
            try: last = json.loads(line)
            except ValueError: pass
    rows.append((name, last))
kilns = [(n, r) for n, r in rows if n.startswith("bench_kiln_") and r]
kiln = kilns[-1][1] if kilns else None  # the last mode listed (compiled by default)
label = lambda r: r["mode"] + ("+graph" if r.get("cuda_graph") else "")
print()
print("%-18s %10s %12s %9s %9s %11s %10s %9s" % ("impl", "step ms", "tokens/s", "fwd ms", "optim ms", "peak MiB",
      "compile s", "kiln/x"))
for name, r in rows:
    if not r:
        print("%-18s %s" % (name.replace(".log", ""), "FAILED (no result line; see its log)"))
        continue
    impl = r["impl"] + ("-" + label(r) if r["impl"] == "kiln" else "")
    ratio = "%.3f" % (kiln["tokens_per_s"] / r["tokens_per_s"]) if kiln else "-"
    comp = "%.2f" % (r["compile_ms"] / 1e3) if "compile_ms" in r else "-"
    print("%-18s %10.2f %12.0f %9.2f %9.2f %11.0f %10s %9s" % (impl, r["step_ms_median"], r["tokens_per_s"],
          r["fwd_ms"], r["optim_ms"], r["peak_mem_mib"], comp, ratio))
print("kiln/x: the tokens/s of kiln's last mode (%s) over each row's" % (label(kiln) if kiln else "-"))
if kiln:
    print("shape: vocab %d, context %d, %d layers, width %d, %d heads, batch %d (%d parameters); device %s; "
          "fp32 matmuls with TF32 %s" % (kiln["vocab"], kiln["context"], kiln["layers"], kiln["width"], kiln["heads"],
          kiln["batch"], kiln["params"], kiln["device"], "on" if kiln.get("tf32") else "off"))
    summary = {"kiln": kiln, "kiln_modes": {label(r): r for n, r in kilns},
               "torch": {n.replace("bench_torch_", "").replace(".log", ""): r for n, r in rows
                         if n.startswith("bench_torch_") and r}}
    for name, r in summary["torch"].items():
        summary["ratio_" + name] = round(kiln["tokens_per_s"] / r["tokens_per_s"], 4)
    with open(os.path.join(logs, "bench_summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
PY
