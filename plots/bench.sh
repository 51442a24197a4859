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
# bounds each run. --tf32 lets both sides' fp32 matmuls use TF32 tensor cores.
# KILN_MODES (default "interp compiled") lists the `kiln bench --mode` runs: the node-by-node
# program and the compiled one (generated CUDA through NVRTC), both beside PyTorch; "graph"
# is the compiled one replayed as a CUDA graph (--mode compiled --cuda-graph); "best" is
# kiln's fastest configuration, the graph with flash attention and the q/k/v products merged
# (--mode compiled --cuda-graph --flash --hfuse); "lean" is best with --remat selective (norms
# and elementwise ops recomputed in the backward: less memory for a little time). The ratios are those of the last mode listed.
# TORCH_RUNS (default "sdpa manual") lists the PyTorch runs: eager with SDPA, eager with
# attention spelled out, "compile" (torch.compile, SDPA) and "compile-autotune" (its
# max-autotune-no-cudagraphs mode); every PyTorch run uses fused AdamW, as a practitioner
# would ("sdpa-foreach" and "compile-foreach" keep the slower foreach AdamW, labelled so).
# --precision bf16 or fp16 runs kiln's autocast pass and torch.autocast.
# BENCH_RUNS, when set, replaces both lists: words SIDE/HOW/PRECISION, with SIDE kiln (HOW a
# mode as above), torch (HOW a PyTorch run as above) or llmc (llm.c's train_gpt2cu through
# plots/bench_llmc.sh, when LLMC_DIR names its checkouts; HOW is a free word, PRECISION
# bf16) and PRECISION fp32, tf32, bf16, fp16 or "-" (as FLAGS say), run in that order; e.g.
# `make bench-gpu`'s full table (core/gpu.mk, BENCH_FULL). The table then ends with the ratio
# of every kiln row to every anchor row (PyTorch and llm.c), and with the one ratio the
# README quotes: kiln's fastest row over the fastest anchor row, both named.
# The table and the ratios are also written to $LOGS/bench_summary.json.
set -u
KILN=${KILN:-build/solutions/kiln}
LOGS=${LOGS:-${OUT:-/tmp/kiln-bench}}
mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1
here=$(cd "$(dirname "$0")" && pwd)

export KILN_MODES=${KILN_MODES:-interp compiled} TORCH_RUNS=${TORCH_RUNS:-sdpa manual}
# The list of runs, SIDE/HOW/PRECISION each; PRECISION "-" takes FLAGS as they are.
if [ -z "${BENCH_RUNS:-}" ]; then
    BENCH_RUNS=
    for mode in $KILN_MODES; do BENCH_RUNS="$BENCH_RUNS kiln/$mode/-"; done
    for run in $TORCH_RUNS; do BENCH_RUNS="$BENCH_RUNS torch/$run/-"; done
fi
export BENCH_RUNS
# PyTorch's interpreter (core/mk/python.sh torch: on the GPU machine the PATH's python3).
torch_py=$(bash "$here/../core/mk/python.sh" torch) || torch_py=
case " $BENCH_RUNS" in *" torch/"*) [ -n "$torch_py" ] ||
    echo "== PyTorch: no python3 here can import torch; the PyTorch side is skipped" ;; esac
for spec in $BENCH_RUNS; do
    IFS=/ read -r side how prec <<< "$spec"
    case "$prec" in
        -) pflags= ;;
        fp32) pflags= ;;
        tf32) pflags=--tf32 ;;
        bf16 | fp16) pflags="--precision $prec" ;;
        *) echo "bench.sh: run '$spec': the precision must be fp32, tf32, bf16, fp16 or -" >&2; exit 2 ;;
    esac
    log="$LOGS/bench_${side}_$how$([ "$prec" = - ] || echo "_$prec").log"
    case "$side" in
        kiln)
            flags="--mode $how"
            [ "$how" = graph ] && flags="--mode compiled --cuda-graph"
            [ "$how" = best ] && flags="--mode compiled --cuda-graph --flash --hfuse"
            [ "$how" = lean ] && flags="--mode compiled --cuda-graph --flash --hfuse --remat selective"
            echo "== kiln bench $flags $pflags $*"
            # shellcheck disable=SC2086
            timeout "${BENCH_TIMEOUT:-0}" "$KILN" bench $flags $pflags "$@" 2>&1 | tee "$log" ;;
        torch)
            [ -n "$torch_py" ] || continue
            flags="--attn $how"
            [ "$how" = compile ] && flags="--attn sdpa --compile"
            [ "$how" = compile-autotune ] && flags="--attn sdpa --compile --compile-mode max-autotune-no-cudagraphs"
            [ "$how" = compile-foreach ] && flags="--attn sdpa --compile --foreach"
            [ "$how" = sdpa-foreach ] && flags="--attn sdpa --foreach"
            echo "== bench_torch.py $flags $pflags $*"
            # shellcheck disable=SC2086
            timeout "${BENCH_TIMEOUT:-0}" "$torch_py" "$here/bench_torch.py" $flags $pflags "$@" 2>&1 | tee "$log" ;;
        llmc)
            if [ -z "${LLMC_DIR:-}" ]; then
                echo "== llm.c: LLMC_DIR is not set; the llm.c row is skipped (plots/bench_llmc.sh says how)"
                continue
            fi
            # shellcheck disable=SC2086
            timeout "${BENCH_TIMEOUT:-0}" bash "$here/bench_llmc.sh" "$LLMC_DIR" $pflags "$@" 2>&1 | tee "$log" ;;
        *) echo "bench.sh: run '$spec': the side must be kiln, torch or llmc" >&2; exit 2 ;;
    esac
done

"${PYTHON:-python3}" - "$LOGS" <<'PY'
import json, os, sys
logs = sys.argv[1]
rows = []  # (side, log name, result line or None), in the order run
for spec in os.environ["BENCH_RUNS"].split():
    side, how, prec = spec.split("/")
    name = "bench_%s_%s%s" % (side, how, "" if prec == "-" else "_" + prec)
    path = os.path.join(logs, name + ".log")
    if not os.path.exists(path):
        continue
    last = None
    for line in open(path, errors="replace"):
        if line.startswith("{"):  # the run's result line (other tools print JSON too: keep only results)
            try: r = json.loads(line)
            except ValueError: continue
            if isinstance(r, dict) and "impl" in r and "tokens_per_s" in r: last = r
    rows.append((side, name, last))
def label(r):
    prec = r.get("precision", "fp32")
    if prec == "fp32":
        prec = "tf32" if r.get("tf32") else "fp32"
    if r["impl"] == "kiln":
        flash = r.get("flash") or "flash" in r.get("passes", "").split(",")
        remat = r.get("remat", "none")
        return ("kiln-" + r["mode"] + ("+graph" if r.get("cuda_graph") else "") + ("+flash" if flash else "") +
                ("+hfuse" if r.get("hfuse") else "") +
                ("" if remat == "none" else "+remat:" + remat) + " " + prec)
    return r["impl"].replace("-" + prec, "") + (" (fused AdamW)" if r.get("adamw") == "fused" else "") + " " + prec
kilns = [(n, r) for s, n, r in rows if s == "kiln" and r]
torches = [(n, r) for s, n, r in rows if s in ("torch", "llmc") and r]  # the anchor rows
kiln = kilns[-1][1] if kilns else None  # the last kiln run listed (compiled by default)
print()
print("%-44s %10s %12s %9s %9s %11s %10s %9s" % ("impl", "step ms", "tokens/s", "fwd ms", "optim ms", "peak MiB",
      "compile s", "kiln/x"))
for side, name, r in rows:
    if not r:
        print("%-44s %s" % (name, "FAILED (no result line; see its log)"))
        continue
    ratio = "%.3f" % (kiln["tokens_per_s"] / r["tokens_per_s"]) if kiln else "-"
    comp = "%.2f" % (r["compile_ms"] / 1e3) if "compile_ms" in r else "-"
    opt = lambda v, f: "-" if v is None else f % v
    print("%-44s %10.2f %12.0f %9s %9s %11s %10s %9s" % (label(r), r["step_ms_median"], r["tokens_per_s"],
          opt(r.get("fwd_ms"), "%.2f"), opt(r.get("optim_ms"), "%.2f"), opt(r.get("peak_mem_mib"), "%.0f"), comp,
          ratio))
print("kiln/x: the tokens/s of kiln's last run (%s) over each row's" % (label(kiln) if kiln else "-"))
if len(kilns) > 1 and torches:
    print()
    print("tokens/s ratios, kiln (rows) over each anchor (columns), from this one run:")
    short = lambda r: r["impl"].replace("pytorch-", "torch-")[:18]  # the anchor's name, prec. dropped below
    print("%-44s" % "" + "".join(" %18s" % short(r) for n, r in torches))
    for n, k in kilns:
        print("%-44s" % label(k) + "".join(" %18.3f" % (k["tokens_per_s"] / r["tokens_per_s"]) for m, r in torches))
if kiln:
    print("shape: vocab %d, context %d, %d layers, width %d, %d heads, batch %d (%d parameters); device %s" %
          (kiln["vocab"], kiln["context"], kiln["layers"], kiln["width"], kiln["heads"], kiln["batch"],
           kiln["params"], kiln["device"]))
    tname = lambda n: n.replace("bench_torch_", "")
    summary = {"kiln": kiln, "kiln_modes": {label(r): r for n, r in kilns},
               "torch": {tname(n): r for n, r in torches}}
    for n, r in torches:
        summary["ratio_" + tname(n)] = round(kiln["tokens_per_s"] / r["tokens_per_s"], 4)
    if torches:
        # The line the README and lessons quote: kiln's fastest row against the fastest anchor, by name.
        kbest = max((r for n, r in kilns), key=lambda r: r["tokens_per_s"])
        abest = max((r for n, r in torches), key=lambda r: r["tokens_per_s"])
        summary["fastest_kiln"], summary["fastest_anchor"] = label(kbest), label(abest)
        summary["ratio_to_fastest_anchor"] = round(kbest["tokens_per_s"] / abest["tokens_per_s"], 4)
        print()
        print("kiln's fastest row (%s, %.0f tokens/s, %s MiB) over the fastest anchor row (%s, %.0f tokens/s, "
              "%s MiB): %.3fx" % (label(kbest), kbest["tokens_per_s"], kbest.get("peak_mem_mib"), label(abest),
                                  abest["tokens_per_s"], abest.get("peak_mem_mib"),
                                  summary["ratio_to_fastest_anchor"]))
    summary["ratios"] = {label(k): {label(r): round(k["tokens_per_s"] / r["tokens_per_s"], 4) for n, r in torches}
                         for n, k in kilns}
    with open(os.path.join(logs, "bench_summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
PY
