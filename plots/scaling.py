#!/usr/bin/env python3
"""scaling.py OUTDIR ROOT — `make scaling`'s tables and figures (issue 34).

Collects the scaling measurements into one place, each row with the run it comes from:
  * the GPU runs kept under ROOT/plots/results/ (read, never re-measured here; each folder
    names its card and date, e.g. h100x4-2026-11-27b):
      - plots/dist-gpu.sh's summary.txt (or dist-summary.txt): data parallelism, the
        "scaling:" lines (strategy, GPUs, tokens/s, efficiency, peak memory), the
        "memory per GPU" lines (held against distributed.md's table) and the "comm:" lines
        (kiln's collectives against NCCL's own through PyTorch);
      - tensor parallelism logs (`kiln train ... --mesh tp=N`, files tp_eff*.txt): a
        "tensor parallel: tp=N" line, the model line and the "steady rate"; a log without
        the tp line is the same model on one GPU;
      - pipeline logs (bubble-SCHEDULE.txt): the measured bubble beside its formula;
  * the CPU ranks measured by plots/scaling.sh in this run (OUTDIR/cpu.tsv).
Writes OUTDIR/scaling.md and the TSVs and figures it names (gnuplot: tokens/s and
efficiency against GPUs per strategy, memory per GPU per strategy, collective bandwidth
against size). A kept folder that parses to nothing is skipped; no kept run at all is
said in the table, not invented. Exit status 1 when the CPU measurement is missing."""
import os
import re
import subprocess
import sys


def folder_card(name):
    """('H100 x4', '2026-11-27') from a results folder name like h100x4-2026-11-27b."""
    m = re.match(r"([a-z]+\d+)(?:x(\d+))?-(\d{4}-\d\d-\d\d)", name)
    if not m:
        return name, "?"
    return m.group(1).upper() + (" x" + m.group(2) if m.group(2) else ""), m.group(3)


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def parse_dist(text, src):
    rows, mem, comm = [], [], []
    head = re.search(r"dist-gpu: (\d+) GPU\(s\): (.*?); (\S+)", text)
    card = head.group(2).strip() if head else src["card"]
    for m in re.finditer(r"^scaling: 1 GPU alone (\d+) tokens/s", text, re.M):
        rows.append(dict(src, card=card, strategy="one GPU", gpus=1, tok=float(m.group(1)), eff=1.0))
    for m in re.finditer(r"^scaling: (\w+) on (\d+) GPU\(s\) (\d+) tokens/s(?:, efficiency ([0-9.]+))?", text, re.M):
        rows.append(dict(src, card=card, strategy=m.group(1).upper() if m.group(1) == "DDP" else m.group(1),
                         gpus=int(m.group(2)), tok=float(m.group(3)),
                         eff=float(m.group(4)) if m.group(4) else None))
    for m in re.finditer(r"^memory per GPU, (\w+) on (\d+) GPU\(s\).*?total (\d+)/(\d+)", text, re.M):
        mem.append(dict(src, card=card, strategy=m.group(1), gpus=int(m.group(2)), held=int(m.group(3)),
                        table=int(m.group(4))))
    for m in re.finditer(r"^comm: (\d+) floats (\w+): kiln ([0-9.]+) GB/s, NCCL via PyTorch ([0-9.]+) GB/s", text, re.M):
        comm.append(dict(src, card=card, floats=int(m.group(1)), op=m.group(2), kiln=float(m.group(3)),
                         nccl=float(m.group(4))))
    return rows, mem, comm


def parse_tp(folder, src):
    """Pairs of (one GPU, tp=N) runs of the same model in one folder."""
    runs = []
    for name in sorted(os.listdir(folder)):
        if not re.match(r"tp_eff.*\.txt$", name):
            continue
        t = read(os.path.join(folder, name))
        model = re.search(r"GPT (\d+) layers, width (\d+)", t)
        rate = re.findall(r"steady rate\s+(\d+) tokens/s", t)
        tp = re.search(r"tensor parallel: tp=(\d+)", t)
        if model and rate:
            runs.append(("%s layers x %s" % model.groups(), int(tp.group(1)) if tp else 1, float(rate[-1])))
    rows = []
    for model in sorted({r[0] for r in runs}):
        one = [r for r in runs if r[0] == model and r[1] == 1]
        for r in runs:
            if r[0] == model and r[1] > 1 and one:
                # strong scaling: the same global batch on N GPUs; efficiency = speed-up / N
                rows.append(dict(src, model=model, tp=r[1], tok1=one[0][2], tok=r[2], eff=r[2] / one[0][2] / r[1]))
    return rows


def parse_pp(folder, src):
    rows = []
    for name in sorted(os.listdir(folder)):
        m = re.match(r"bubble-(\w+)\.txt$", name)
        if not m:
            continue
        t = read(os.path.join(folder, name))
        b = re.search(r"pipeline bubble\s+([0-9.]+)% measured.*?= ([0-9.]+)%(?:, interleaved .*?= ([0-9.]+)%)?", t)
        if b:
            formula = b.group(3) or b.group(2)
            rows.append(dict(src, schedule=m.group(1), bubble=float(b.group(1)), formula=float(formula)))
    return rows


def gnuplot(script):
    try:
        subprocess.run(["gnuplot"], input=script, text=True, check=True, capture_output=True)
        return True
    except (OSError, subprocess.CalledProcessError) as e:
        sys.stderr.write("scaling.py: gnuplot failed: %s\n" % getattr(e, "stderr", e))
        return False


def table(md, head, rows):
    """A markdown table: the header names, then one row of strings per item; a blank line after."""
    md.append("| " + " | ".join(head) + " |\n|" + " --- |" * len(head))
    md.extend("| " + " | ".join(r) + " |" for r in rows)
    md.append("")


def newest(rows):
    """The folder of the newest run among rows (by date, then name): the one the figure draws."""
    return max(rows, key=lambda r: (r["date"], r["folder"]))["folder"]


def fmt_src(r):
    return "`%s` (%s, %s)" % (r["folder"], r["card"], r["date"])


def main():
    out, root = sys.argv[1], sys.argv[2]
    res = os.path.join(root, "plots", "results")
    dp, mem, comm, tp, pp = [], [], [], [], []
    for name in sorted(os.listdir(res)) if os.path.isdir(res) else []:
        folder = os.path.join(res, name)
        if not os.path.isdir(folder):
            continue
        card, date = folder_card(name)
        src = dict(folder=name, card=card, date=date)
        for sub in ("", "dist", "final"):
            for f in ("summary.txt", "dist-summary.txt"):
                p = os.path.join(folder, sub, f)
                if os.path.isfile(p):
                    a, b, c = parse_dist(read(p), dict(src, folder=os.path.join(name, sub) if sub else name))
                    dp += a
                    mem += b
                    comm += c
        tp += parse_tp(folder, src)
        pp += parse_pp(folder, src)

    md = ["# Scaling\n",
          "Data, tensor and pipeline parallelism, collected by `make scaling` (plots/scaling.sh). "
          "GPU rows are quoted from the runs kept under `plots/results/`, each with its folder, card and date; "
          "the CPU rows were measured in this run. Compare ratios within one row's run, not across runs: "
          "the machines are shared and noisy.\n"]

    md.append("## Data parallelism on GPUs (weak scaling: B per GPU fixed)\n")
    if dp:
        table(md, ["run", "strategy", "GPUs", "tokens/s", "efficiency"],
              [[fmt_src(r), r["strategy"], "%d" % r["gpus"], "%.0f" % r["tok"],
                "%.3f" % r["eff"] if r["eff"] is not None else "-"] for r in dp])
        with open(os.path.join(out, "dp.tsv"), "w") as f:
            f.write("# folder\tstrategy\tgpus\ttok_s\tefficiency\n")
            for r in dp:
                f.write("%s\t%s\t%d\t%.0f\t%s\n" % (r["folder"], r["strategy"], r["gpus"], r["tok"],
                                                    r["eff"] if r["eff"] is not None else "NaN"))
        # the newest folder with a DDP curve: tokens/s and efficiency against GPUs, per strategy
        ddp = [r for r in dp if r["strategy"] == "DDP"]
        if ddp:
            fold = newest(ddp)
            last = [r for r in ddp if r["folder"] == fold][0]
            strategies = sorted({r["strategy"] for r in dp if r["folder"] == fold and r["strategy"] != "one GPU"})
            for s in strategies:
                with open(os.path.join(out, "dp-%s.dat" % s), "w") as f:
                    for r in sorted((r for r in dp if r["folder"] == fold and r["strategy"] == s), key=lambda r: r["gpus"]):
                        f.write("%d %.0f %s\n" % (r["gpus"], r["tok"], r["eff"] if r["eff"] is not None else "NaN"))
            one = [r["tok"] for r in dp if r["folder"] == fold and r["strategy"] == "one GPU"]
            plots = ", ".join("'%s/dp-%s.dat' using 1:2 with linespoints lw 2 pt 7 title '%s'" % (out, s, s)
                              for s in strategies)
            if one:
                plots += ", x * %.0f with lines dt 2 title 'linear (N x one GPU alone)'" % one[0]
            if gnuplot("set terminal pngcairo noenhanced size 720,440 font 'sans,11'\nset output '%s/dp.png'\n"
                       "set key left top\nset xlabel 'GPUs'\nset ylabel 'tokens/s'\nset xtics 1\n"
                       "set title 'data parallelism, %s, %s (%s)'\nplot [0.8:%d] %s\n"
                       % (out, last["card"], last["date"], fold,
                          max(r["gpus"] for r in dp if r["folder"] == fold) + 0.2, plots)):
                md.append("![Data parallel tokens/s against GPUs (%s)](dp.png)\n" % fold)
    else:
        md.append("No data-parallel GPU run is kept under `plots/results/` (run `make dist-gpu` on a GPU machine).\n")

    md.append("## Memory per GPU, by strategy\n")
    if mem:
        table(md, ["run", "strategy", "GPUs", "held (MB)", "distributed.md's table (MB)"],
              [[fmt_src(r), r["strategy"], "%d" % r["gpus"], "%.1f" % (r["held"] / 1e6), "%.1f" % (r["table"] / 1e6)]
               for r in mem])
        fold = newest(mem)
        with open(os.path.join(out, "memory.dat"), "w") as f:
            for r in (r for r in mem if r["folder"] == fold):
                f.write("%s %.1f %.1f\n" % (r["strategy"], r["held"] / 1e6, r["table"] / 1e6))
        if gnuplot("set terminal pngcairo noenhanced size 640,400 font 'sans,11'\nset output '%s/memory.png'\n"
                   "set style data histograms\nset style fill solid 0.8 border -1\nset ylabel 'MB per GPU (weights, "
                   "gradients, optimizer state)'\nset yrange [0:*]\nset title 'memory per GPU (%s)'\n"
                   "plot '%s/memory.dat' using 2:xtic(1) title 'held', '' using 3 title \"distributed.md's table\"\n"
                   % (out, fold, out)):
            md.append("![Memory per GPU by strategy (%s)](memory.png)\n" % fold)
    else:
        md.append("No memory accounting is kept under `plots/results/`.\n")

    md.append("## Collectives: kiln's communicator against NCCL's own (through PyTorch)\n")
    if comm:
        table(md, ["run", "floats", "collective", "kiln GB/s", "NCCL GB/s", "ratio"],
              [[fmt_src(r), "%d" % r["floats"], r["op"], "%.1f" % r["kiln"], "%.1f" % r["nccl"],
                "%.2f" % (r["kiln"] / r["nccl"] if r["nccl"] else 0)] for r in comm])
        fold = newest(comm)
        ops = sorted({r["op"] for r in comm if r["folder"] == fold})
        for o in ops:
            with open(os.path.join(out, "comm-%s.dat" % o), "w") as f:
                for r in sorted((r for r in comm if r["folder"] == fold and r["op"] == o), key=lambda r: r["floats"]):
                    f.write("%d %.3f\n" % (r["floats"] * 4, r["kiln"] / r["nccl"] if r["nccl"] else 0))
        plots = ", ".join("'%s/comm-%s.dat' using 1:2 with linespoints lw 2 pt 7 title '%s'" % (out, o, o) for o in ops)
        if gnuplot("set terminal pngcairo noenhanced size 640,400 font 'sans,11'\nset output '%s/comm.png'\n"
                   "set logscale x 2\nset format x '%%.0s %%cB'\n"
                   "set xlabel 'bytes'\nset ylabel 'kiln / NCCL bus bandwidth'\nset yrange [0:*]\nset key right bottom\n"
                   "set title 'collectives (%s)'\nplot %s, 1 with lines dt 2 title 'NCCL'\n" % (out, fold, plots)):
            md.append("![Collective bandwidth against NCCL's (%s)](comm.png)\n" % fold)
    else:
        md.append("No collective measurement is kept under `plots/results/`.\n")

    md.append("## Tensor parallelism on GPUs (strong scaling: the same global batch)\n")
    if tp:
        table(md, ["run", "model", "tp", "one GPU tokens/s", "tp tokens/s", "efficiency"],
              [[fmt_src(r), r["model"], "%d" % r["tp"], "%.0f" % r["tok1"], "%.0f" % r["tok"], "%.2f" % r["eff"]]
               for r in tp])
    else:
        md.append("No tensor-parallel GPU run is kept under `plots/results/`.\n")

    md.append("## Pipeline bubble on GPUs\n")
    if pp:
        table(md, ["run", "schedule", "bubble measured", "formula"],
              [[fmt_src(r), r["schedule"], "%.1f%%" % r["bubble"], "%.1f%%" % r["formula"]] for r in pp])
    else:
        md.append("No pipeline GPU run is kept under `plots/results/`.\n")

    md.append("## CPU ranks, measured in this run\n")
    cpu = [l.split("\t") for l in read(os.path.join(out, "cpu.tsv")).splitlines() if l.strip() and not l.startswith("#")]
    if not cpu:
        sys.stderr.write("scaling.py: no CPU measurement in %s/cpu.tsv (plots/scaling.sh makes it)\n" % out)
        return 1
    machine = read(os.path.join(out, "machine.txt")).strip()
    md.append("%s. The ranks share the machine's cores, so these rows check that every strategy runs and what "
              "it costs here, not how it scales on separate devices.\n" % machine)
    md.append("| strategy | ranks | global batch | tokens/s | vs one process |\n| --- | --- | --- | --- | --- |")
    base = {}
    for s, n, b, t in cpu:
        if n == "1":
            base[s] = float(t)
    for s, n, b, t in cpu:
        one = base.get(s) or base.get("ddp")
        md.append("| %s | %s | %s | %s | %s |" % (s, n, b, t, "%.2f" % (float(t) / one) if one else "-"))
    md.append("")
    with open(os.path.join(out, "scaling.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("scaling: %d data-parallel, %d memory, %d collective, %d tensor-parallel, %d pipeline GPU rows; %d CPU rows -> %s"
          % (len(dp), len(mem), len(comm), len(tp), len(pp), len(cpu), os.path.join(out, "scaling.md")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
