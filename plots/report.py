#!/usr/bin/env python3
"""report.py OUTDIR ROOT - write the capstone report from what plots/report.sh measured.

Reads OUTDIR (setup.txt, train.tsv and logs/train.log, bench.json, remat.tsv, agree.txt,
roofline/, ablation/, scaling.tsv, infer.json, logs/quant.log) and the dated GPU runs under
ROOT/plots/results/ (their bench_summary.json), draws the figures the drivers did not
(the loss curve, the scaling bars) with gnuplot, and writes OUTDIR/report.md and
OUTDIR/report.html (pandoc, with the book's stylesheet); a PDF when weasyprint is there.
Every table is filled from those files: a missing or malformed one stops the report with
its name (exit 1), never a blank cell."""
import glob
import json
import os
import re
import shutil
import subprocess
import sys


def die(msg):
    sys.stderr.write("report.py: %s\n" % msg)
    sys.exit(1)


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        die("cannot read %s (%s): did plots/report.sh run that step?" % (path, e.strerror))


def grab(text, pattern, what):
    m = re.search(pattern, text, re.M)
    if not m:
        die("no %s in the output (pattern %r)" % (what, pattern))
    return m.group(1)


def gnuplot(script):
    r = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True)
    if r.returncode != 0:
        die("gnuplot failed: %s" % r.stderr.strip())


def table(header, rows, align=None):
    align = align or ["---"] + ["---:"] * (len(header) - 1)
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def eval_rows(text, what):
    """The rows of a `kiln eval --compare` table: (program, passes, loss, perplexity, vs fp32)."""
    rows = []
    for l in text.splitlines():
        m = re.match(r"\s+(\S+)(?: \(([^)]*)\))?\s+([0-9.]+)\s+([0-9.]+)\s*([-+0-9.%]*)\s*$", l)
        if m:
            rows.append([m.group(1), m.group(2) or "", m.group(3), m.group(4), m.group(5) or "(reference)"])
    if len(rows) < 2:
        die("%s printed no table" % what)
    return rows


def lab12(out, md, setup):
    """`make report LAB=12`: training, then the quantization measured with the student's units."""
    tlog = read(os.path.join(out, "logs", "train.log"))
    steps = [l for l in read(os.path.join(out, "train.tsv")).splitlines() if l.strip()]
    held = float(grab(tlog, r"held-out loss\s+([0-9.]+)", "held-out loss"))
    md.append("# Training\n")
    md.append("`kiln train` on the CPU, the default small GPT on the bundled grammar corpus, %d steps: held-out loss "
              "%.4f nats/token. Its checkpoint is the model quantized below.\n" % (len(steps), held))

    mine = eval_rows(read(os.path.join(out, "logs", "quant.log")), "kiln eval --compare (your units)")
    ref = eval_rows(read(os.path.join(out, "logs", "quant-ref.log")), "kiln eval --compare (reference units)")
    refd = {r[0]: r for r in ref}
    rows, same = [], True
    for r in mine:
        rr = refd.get(r[0])
        if not rr:
            die("the reference eval has no row %s" % r[0])
        ok = rr[2] == r[2] and rr[3] == r[3]
        same = same and ok
        rows.append(["`%s`" % r[0], "`%s`" % r[1] if r[1] else "", r[2], r[3], r[4], rr[2], "yes" if ok else "**NO**"])
    md.append("# Quantization with your units\n")
    md.append("Held-out loss of the checkpoint's forward program compiled with each precision (`kiln eval --compare`, "
              "kiln built with your `quant_scale.c` and `quant_epilogue.c`), beside the same run with the reference "
              "units. The quantizer and the epilogue are exact contracts (round half to even, the scales multiplied "
              "left to right), so the two must agree to the last printed digit: %s.\n\n"
              % ("they do" if same else "**they do not: run `make test-lab12`**"))
    md.append(table(["program", "passes", "loss", "perplexity", "vs fp32", "reference loss", "same"], rows,
                    ["---", "---", "---:", "---:", "---:", "---:", "---"]))

    units = [l.split("\t") for l in read(os.path.join(out, "units.tsv")).splitlines() if l.strip()]
    errs = [u for u in units if u[0] == "err"]
    prod = [u for u in units if u[0] == "prod"]
    times = [u for u in units if u[0] == "time"]
    if not errs or len(prod) != 1 or len(times) != 4:
        die("units.tsv: expected err, prod and 4 time lines from plots/quant_units.c")
    md.append("# Your units on the trained weights\n")
    md.append("Relative error $\\|W - \\hat W\\| / \\|W\\|$ of each 2-D weight after int8 quantization with your "
              "quantizer, with one scale for the whole tensor, one per input row, and one per output channel (a column "
              "of $W$ in $y = xW$: the scale kiln's int8 products use, since it factors out of each output's sum):\n\n")
    md.append(table(["weight", "shape", "per tensor", "per input row", "per output channel"],
                    [["`%s`" % e[1], e[2], "%.3f%%" % (100 * float(e[3])), "%.3f%%" % (100 * float(e[4])),
                      "%.3f%%" % (100 * float(e[5]))] for e in errs]))
    with open(os.path.join(out, "quant_err.dat"), "w") as f:
        for i, e in enumerate(errs):
            f.write("%d %s %s %s %s\n" % (i, e[1].replace("_", "\\\\_"), 100 * float(e[3]), 100 * float(e[4]),
                                         100 * float(e[5])))
    gnuplot("""set terminal pngcairo size 900,420
set output '%s/quant_err.png'
set style data histogram; set style histogram clustered gap 1; set style fill solid 0.8 border -1
set ylabel 'relative error (%%)'; set grid ytics; set yrange [0:*]; set xtics rotate by -30 font ',8'
set title 'int8 weight quantization error with your kn\\_quant\\_*\\_i8, by scale granularity'
plot '%s/quant_err.dat' using 3:xtic(2) title 'per tensor', '' using 4 title 'per input row', '' using 5 title 'per output channel'
""" % (out, out))
    md.append("![Quantization error per weight](quant_err.png)\n")
    p = prod[0]
    md.append("The MLP's first product, %s tokens x [%s, %s], the activations with an outlier channel in one token "
              "of 16: the w8a8 output's relative error is **%.2f%%** with a scale per token and **%.2f%%** with one "
              "scale for all the activations (per tensor): the outliers' tokens no longer set everyone's scale.\n\n"
              % (p[1], p[2], p[3], 100 * float(p[4]), 100 * float(p[5])))
    f32 = float(times[3][2])
    md.append(table(["piece (best of 7)", "ms", "over the f32 product"],
                    [[t[1], "%.4f" % float(t[2]), "%.2fx" % (float(t[2]) / f32 if f32 > 0 else 0)] for t in times]))
    md.append("\n# Limitations\n")
    md.append("- The CPU numbers come from %s, a machine others may share: ratios within one run carry over, absolute "
              "times do not. The int8 ops quantize the weight on every call (kiln's IR has no int8 dtype), which the "
              "table's first row costs each time.\n" % setup.get("cpu", "this CPU"))


def main():
    if len(sys.argv) != 3:
        die("usage: report.py OUTDIR ROOT")
    out, root = sys.argv[1], sys.argv[2]
    setup = dict(l.split(" ", 1) for l in read(os.path.join(out, "setup.txt")).splitlines() if " " in l)
    machine = "%s, %s" % (setup.get("cpu", "?"), setup.get("memory", "?"))
    date = setup.get("date", "?")
    md = []
    md.append("---\ntitle: \"kiln: the capstone report\"\nsubtitle: \"measured on %s, %s (commit %s)\"\n---\n"
              % (machine, date, setup.get("commit", "?")))
    md.append("Every number and figure below was measured by `make report` in the run that wrote this page, "
              "on the machine named above, except the section *On a GPU*, which quotes the dated GPU runs "
              "kept in `plots/results/` (each with its folder, card and date). Machines are shared and noisy: "
              "read ratios, not absolute times.\n")

    md.append("# Setup\n")
    md.append(table(["what", "value"], [[k, v.replace("|", "/")] for k, v in setup.items() if v.strip()],
                    ["---", "---"]))
    if os.path.exists(os.path.join(out, "lab.txt")):
        md[0] = md[0].replace("the capstone report", "lab 12, INT8 post-training quantization with your units")
        md[1] = ("Every number and figure below was measured by `make report LAB=12` in the run that wrote this page, "
                 "on the machine named above, with kiln built with your lab 12 units (`labs/lab12-capstone/`).\n")
        lab12(out, md, setup)
        return finish(out, root, md)

    # ---- training
    tlog = read(os.path.join(out, "logs", "train.log"))
    steps = [l.split() for l in read(os.path.join(out, "train.tsv")).splitlines() if l.strip()]
    if len(steps) < 2:
        die("train.tsv has fewer than two steps")
    with open(os.path.join(out, "train.dat"), "w") as f:
        for s in steps:
            f.write("%s %s\n" % (s[0], s[1]))
    held = float(grab(tlog, r"held-out loss\s+([0-9.]+)", "held-out loss"))
    unigram = float(grab(tlog, r"unigram baseline\s+([0-9.]+)", "unigram baseline"))
    rate = float(grab(tlog, r"steady rate\s+([0-9.]+) tokens/s", "steady rate"))
    gnuplot("""set terminal pngcairo size 800,400
set output '%s/train.png'
set xlabel 'step'; set ylabel 'loss (nats/token)'; set grid
set title 'kiln train: the small GPT on the bundled grammar corpus'
plot '%s/train.dat' using 1:2 with lines lw 2 title 'train loss', %g with lines dt 2 title 'unigram baseline', %g with lines dt 3 title 'held-out loss at the end'
""" % (out, out, unigram, held))
    md.append("# Training\n")
    md.append("`kiln train` on the CPU, the default small GPT on the bundled grammar corpus, %d steps: the "
              "held-out loss ends at **%.4f** nats/token against the unigram baseline's %.4f (%s), at %.0f tokens/s "
              "steady.\n" % (len(steps), held, unigram, "below it: the model learned more than letter frequencies"
                             if held < unigram else "NOT below it", rate))
    md.append("![Training loss](train.png)\n")

    # ---- latency
    b = json.loads(read(os.path.join(out, "bench.json")))
    md.append("# Latency\n")
    md.append("`kiln bench` on the CPU (compiled C, every pass, flash attention, horizontal fusion): GPT vocab %d, "
              "context %d, %d layers, width %d, %d heads, batch %d.\n\n" % (b["vocab"], b["context"], b["layers"],
                                                                             b["width"], b["heads"], b["batch"]))
    md.append(table(["median step", "tokens/s", "forward", "clip + AdamW", "compile"],
                    [["%.2f ms" % b["step_ms_median"], "%.0f" % b["tokens_per_s"], "%.2f ms" % b["fwd_ms"],
                      "%.2f ms" % b["optim_ms"], "%.0f ms" % b["compile_ms"]]]))

    # ---- memory
    md.append("# Memory\n")
    md.append("The same step's memory: its largest live set (a lower bound for any order of the same values), "
              "the compiled program's planned arena, and the measured peak of kiln's allocations: %.2f MB live, "
              "%.2f MB planned, %.1f MiB peak.\n\n" % (b["mem_lower"] / 1e6, b["mem_planned"] / 1e6, b["peak_mem_mib"]))
    rows = []
    for l in read(os.path.join(out, "remat.tsv")).splitlines():
        if l.startswith("#") or not l.strip():
            continue
        f = l.split("\t")
        rows.append(["`%s`" % f[0], "%.2f" % float(f[1]), "%.3f" % float(f[2]), "%.3f" % float(f[3])])
    md.append("Activation checkpointing, every policy (`plots/remat.sh`):\n\n")
    md.append(table(["policy", "step ms", "live MB", "arena MB"], rows))
    md.append("![Memory against time per checkpointing policy](remat.png)\n")

    # ---- correctness
    md.append("# Correctness\n")
    agree = read(os.path.join(out, "agree.txt")).strip()
    md.append("kiln's loss, every gradient and the AdamW steps against an independent float64 GPT "
              "(`plots/torch_agree.py --reference numpy`; `make torch-agree` runs the same against PyTorch on a GPU):\n\n"
              "> %s\n\n" % agree)

    # ---- roofline
    md.append("# Roofline\n")
    rt = glob.glob(os.path.join(out, "roofline", "*.tsv"))
    if not rt or not os.path.exists(os.path.join(out, "roofline.png")):
        die("no roofline table or figure")
    head = [l for l in read(rt[0]).splitlines() if l.startswith("#")]
    md.append("Each kernel of the compiled step as a point (`kiln roofline`), against the roofs measured in the same "
              "run (%s).\n\n" % "; ".join(h.lstrip("# ").replace("\t", " ") for h in head[:3]))
    md.append("![Roofline](roofline.png)\n")

    # ---- ablation
    md.append("# Ablation\n")
    md.append(read(os.path.join(out, "ablation", "ablation.md")) + "\n")
    shutil.copy(os.path.join(out, "ablation", "ablation.png"), os.path.join(out, "ablation.png"))
    md.append("![Ablation](ablation.png)\n")

    # ---- scaling
    md.append("# Scaling\n")
    sc = [l.split("\t") for l in read(os.path.join(out, "scaling.tsv")).splitlines() if l.strip()]
    if sc:
        base = float(sc[0][1]) or 1.0
        md.append("Data parallelism (DDP over MPI) on CPU ranks of this machine, the batch growing with the ranks "
                  "(weak scaling). With %s cores the ranks share them, so this checks that the job runs and what "
                  "communication costs here, not how kiln scales; `make dist-gpu` measures that on GPUs.\n\n"
                  % setup.get("cpu", "?").rsplit("(", 1)[-1].split()[0])
        md.append(table(["ranks", "tokens/s", "over 1 rank"],
                        [[r[0], "%.0f" % float(r[1]), "%.2fx" % (float(r[1]) / base)] for r in sc]))
        with open(os.path.join(out, "scaling.dat"), "w") as f:
            for r in sc:
                f.write("%s %s\n" % (r[0], r[1]))
        gnuplot("""set terminal pngcairo size 600,360
set output '%s/scaling.png'
set style fill solid 0.8; set boxwidth 0.5; set grid ytics; set yrange [0:*]
set xlabel 'ranks'; set ylabel 'tokens/s'; set title 'DDP on CPU ranks (weak scaling)'
plot '%s/scaling.dat' using 1:2:xtic(1) with boxes notitle
""" % (out, out))
        md.append("![Scaling](scaling.png)\n")
    else:
        md.append("Not measured: no `mpiexec` here (make deps installs MPICH).\n")

    # ---- inference
    inf = json.loads(read(os.path.join(out, "infer.json")))
    md.append("# Inference\n")
    md.append("`kiln bench-infer` on the trained checkpoint (%s, %s): generation with a KV cache, greedy, over the "
              "four workloads (scaled down), latency in ms as p50 / p99.\n\n" % (inf["variant"], inf["device"]))
    rows = []
    for r in inf["results"]:
        rows.append([r["workload"], r["batch"], r["prompt_tokens"], r["new_tokens"],
                     "%.3f / %.3f" % (r["ttft_ms"]["p50"], r["ttft_ms"]["p99"]),
                     "%.3f / %.3f" % (r["tpot_ms"]["p50"], r["tpot_ms"]["p99"]), "%.0f" % r["tokens_per_s"]])
    md.append(table(["workload", "batch", "prompt", "new", "TTFT ms", "TPOT ms", "tokens/s"], rows))

    # ---- quantization
    q = read(os.path.join(out, "logs", "quant.log"))
    md.append("# Quantization\n")
    rows = []
    for l in q.splitlines():
        m = re.match(r"\s+(\S+)(?: \(([^)]*)\))?\s+([0-9.]+)\s+([0-9.]+)\s*([-+0-9.%]*)\s*$", l)
        if m:
            rows.append(["`%s`" % m.group(1), "`%s`" % m.group(2) if m.group(2) else "", m.group(3), m.group(4),
                         m.group(5) or "(reference)"])
    if len(rows) < 2:
        die("kiln eval --compare printed no table")
    md.append("Held-out loss of the trained checkpoint's forward program compiled with each precision "
              "(`kiln eval --compare`):\n\n")
    md.append(table(["program", "passes", "loss", "perplexity", "vs fp32"], rows))

    # ---- GPU runs, quoted
    md.append("# On a GPU (quoted from plots/results/)\n")
    runs = sorted(glob.glob(os.path.join(root, "plots", "results", "*", "bench_summary.json")))
    quoted = []
    for path in runs:
        try:
            s = json.load(open(path))
        except (OSError, ValueError):
            continue
        k = (s.get("kiln_modes") or {}).get(s.get("fastest_kiln", ""), s.get("kiln"))  # kiln's fastest row
        if not k or "ratio_to_fastest_anchor" not in s:
            continue
        quoted.append((os.path.basename(os.path.dirname(path)), s, k))
    if quoted:
        rows = [["`%s`" % name, k["batch"], "%.2f" % k["step_ms_median"], "%.0f" % k["tokens_per_s"],
                 "%.0f" % k["peak_mem_mib"], s.get("fastest_anchor", "?"), "%.3fx" % s["ratio_to_fastest_anchor"]]
                for name, s, k in quoted[-4:]]
        md.append("GPT-2 124M training step, kiln's fastest configuration against the fastest anchor of the same "
                  "run (fused-AdamW torch.compile, llm.c): the folder names the card and the date.\n\n")
        md.append(table(["run", "B", "kiln ms", "kiln tokens/s", "peak MiB", "fastest anchor", "kiln / anchor"], rows))
    else:
        md.append("No GPU run with an anchor is kept under plots/results/.\n")

    md.append("# Limitations\n")
    if quoted and max(s["ratio_to_fastest_anchor"] for _, s, _ in quoted) < 1:
        md.append("- kiln's GPT-2 step is slower than the fastest anchor in every quoted GPU run (best %.3fx): "
                  "attention without Hopper's tensor-memory path, bias gradients outside the epilogue, no fused "
                  "classifier, a per-tensor optimizer (issue 31)." % max(s["ratio_to_fastest_anchor"] for _, s, _ in quoted))
    md.append(""
              "- INT8 runs as kernels that quantize the weights on each call: no int8 dtype in the IR, so the CPU "
              "int8 GEMM is slower than fp32 and no IMMA path exists (issue 34).\n"
              "- The CPU numbers come from %s, a machine others may share: ratios within one run carry over, "
              "absolute times do not.\n" % setup.get("cpu", "this CPU"))

    return finish(out, root, md)


def finish(out, root, md):
    """Write report.md, check its figures, and make report.html (and a PDF where weasyprint is)."""
    mdpath = os.path.join(out, "report.md")
    with open(mdpath, "w") as f:
        f.write("\n".join(md))
    for fig in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", "\n".join(md)):
        if not os.path.exists(os.path.join(out, fig)):
            die("the report shows %s, which this run did not draw" % fig)
    shutil.copy(os.path.join(root, "book", "style.css"), os.path.join(out, "style.css"))
    r = subprocess.run(["pandoc", "-s", "--toc", "-c", "style.css", "--metadata", "lang=en", "-o",
                        os.path.join(out, "report.html"), mdpath], capture_output=True, text=True)
    if r.returncode != 0:
        die("pandoc failed: %s" % r.stderr.strip())
    pdf = ""
    if shutil.which("weasyprint"):
        w = subprocess.run(["weasyprint", os.path.join(out, "report.html"), os.path.join(out, "report.pdf")],
                           capture_output=True, text=True, cwd=out)
        pdf = " and report.pdf" if w.returncode == 0 else " (weasyprint failed: no PDF)"
    else:
        pdf = " (no PDF: weasyprint is not installed)"
    print("report: %s/report.html%s" % (out, pdf))


if __name__ == "__main__":
    main()
