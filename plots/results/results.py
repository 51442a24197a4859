#!/usr/bin/env python3
"""Build plots/results/README.md, the results page, from the dated run folders beside it.

Why: a measured figure is typed once, by the tool that measured it (bench.sh writes
bench_summary.json; other runs leave a README.md and their logs). This page is generated
from those files, so a number on it is never retyped, and `make test` checks that the
committed page is what this script makes from the committed data (--check).

Per run folder (plots/results/<machine>-<date>[suffix]/): the machine and the date (from
the folder name and the first heading of its README.md), every benchmark summary JSON under
it (a file with a "kiln" result and "torch" anchors, as plots/bench.sh writes) as a table of
step time, tokens/s and peak memory, with kiln's ratios over each anchor, and the folder's
other files. Stdlib only.

    python3 plots/results/results.py            # write plots/results/README.md
    python3 plots/results/results.py --check    # exit 1 if the committed page is stale
"""
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PAGE = os.path.join(HERE, "README.md")
DATE = re.compile(r"(\d{4}-\d{2}-\d{2})")


def machine_of(name):
    """The machine, from the folder name's prefix: h100, h100x2, h200, cpu, ..."""
    prefix = name.split("-")[0]
    m = re.match(r"^(h100|h200)(?:x(\d+))?$", prefix)
    if m:
        gpu = m.group(1).upper()
        return ("%s x %s" % (gpu, m.group(2))) if m.group(2) else ("one " + gpu)
    if prefix == "cpu":
        return "the 2-core development machine (CPU)"
    if prefix == "dist":
        return "CPU ranks (MPI)"
    return prefix


def title_of(folder):
    readme = os.path.join(folder, "README.md")
    if not os.path.exists(readme):
        return None
    for line in open(readme, encoding="utf-8"):
        if line.startswith("#"):
            return line.lstrip("#").strip()
    return None


def label(r):
    """A result row's name, as plots/bench.sh labels it."""
    prec = r.get("precision", "fp32")
    if prec == "fp32":
        prec = "tf32" if r.get("tf32") else "fp32"
    if r.get("impl") == "kiln":
        flash = r.get("flash") or "flash" in str(r.get("passes", "")).split(",")
        remat = r.get("remat", "none")
        return ("kiln " + str(r.get("mode", "?")) + ("+graph" if r.get("cuda_graph") else "") +
                ("+flash" if flash else "") + ("+hfuse" if r.get("hfuse") else "") +
                ("" if remat in ("none", None) else "+remat:" + remat) + " " + prec)
    impl = str(r.get("impl", "?")).replace("-" + prec, "")
    return impl + (" (fused AdamW)" if r.get("adamw") == "fused" else "") + " " + prec


def fmt(v, f):
    return "-" if v is None else f % v


def is_result(r):
    return isinstance(r, dict) and "tokens_per_s" in r and "impl" in r


def summary_table(path, rel):
    """The markdown for one benchmark summary JSON, or None when it is not one."""
    try:
        d = json.load(open(path, encoding="utf-8"))
    except (ValueError, OSError):
        return None
    if not isinstance(d, dict) or not is_result(d.get("kiln")):
        return None
    kilns = d.get("kiln_modes") or {label(d["kiln"]): d["kiln"]}
    anchors = {k: v for k, v in (d.get("torch") or {}).items() if is_result(v)}
    k0 = d["kiln"]
    out = ["`%s`: %d layers, width %d, %d heads, batch %d x context %d (%s parameters)." % (
        rel, k0.get("layers", 0), k0.get("width", 0), k0.get("heads", 0), k0.get("batch", 0),
        k0.get("context", 0), "{:,}".format(k0.get("params", 0))), "",
        "| run | step ms | tokens/s | peak MiB |", "| --- | --- | --- | --- |"]
    rows = [r for r in kilns.values() if is_result(r)] + list(anchors.values())
    for r in rows:
        out.append("| %s | %s | %s | %s |" % (label(r), fmt(r.get("step_ms_median"), "%.2f"),
                                             fmt(r.get("tokens_per_s"), "%.0f"),
                                             fmt(r.get("peak_mem_mib"), "%.0f")))
    if anchors:
        names = list(anchors)
        out += ["", "kiln's tokens/s over each anchor's, same run:", "",
                "| kiln | " + " | ".join(label(anchors[n]) for n in names) + " |",
                "| --- |" + " --- |" * len(names)]
        for r in kilns.values():
            if is_result(r):
                out.append("| %s | " % label(r) + " | ".join(
                    "%.3fx" % (r["tokens_per_s"] / anchors[n]["tokens_per_s"]) for n in names) + " |")
    if "ratio_to_fastest_anchor" in d:
        out += ["", "kiln's fastest row (%s) over the fastest anchor (%s): **%.3fx**." % (
            d.get("fastest_kiln"), d.get("fastest_anchor"), d["ratio_to_fastest_anchor"])]
    return "\n".join(out)


def printed_tables(path):
    """The tables plots/bench.sh printed into a saved log (from its "impl" header to its
    "shape:" line), for runs whose summary JSON did not come back."""
    out, cur = [], None
    for line in open(path, encoding="utf-8", errors="replace"):
        line = line.rstrip("\n")
        if re.match(r"^impl\s+step ms", line):
            cur = [line]
        elif cur is not None:
            cur.append(line)
            if line.startswith("shape:"):
                out.append("\n".join(cur))
                cur = None
    return out


def build():
    runs = sorted((n for n in os.listdir(HERE) if os.path.isdir(os.path.join(HERE, n))),
                  key=lambda n: (DATE.search(n).group(1) if DATE.search(n) else "0000", n), reverse=True)
    out = ["# Results: every measured run", "",
           "Generated by `plots/results/results.py` from the folders beside this page (`make results`;",
           "`make test` checks it is up to date). Do not edit by hand: a figure quoted anywhere in kiln",
           "names the folder it comes from, and is quoted as a ratio with its machine and date.",
           "Newest first. A table is one benchmark summary (`bench_summary.json` as `plots/bench.sh`",
           "writes it: every row from one run); other runs are described by their folder's README.md.",
           "What README.md and the design notes once said about each run, dated, is in `history.md`.",
           "A torch.compile row not marked \"(fused AdamW)\" ran PyTorch's foreach AdamW (the default",
           "before 2026-11-27): not the anchor a practitioner runs.", ""]
    for name in runs:
        folder = os.path.join(HERE, name)
        m = DATE.search(name)
        out += ["## %s" % name, "",
                "- machine: %s" % machine_of(name), "- date: %s" % (m.group(1) if m else "not dated")]
        t = title_of(folder)
        if t:
            out.append("- notes: [%s](%s/README.md)" % (t, name))
        files = sorted(os.path.relpath(os.path.join(dp, f), folder)
                       for dp, _, fs in os.walk(folder) for f in fs)
        out.append("- files: %d (%s)" % (len(files), ", ".join("`%s`" % f for f in files[:8]) +
                                         (", ..." if len(files) > 8 else "")))
        out.append("")
        tables = 0
        for f in files:
            if f.endswith(".json"):
                t = summary_table(os.path.join(folder, f), f)
                if t:
                    out += [t, ""]
                    tables += 1
        if not tables:  # no summary JSON: the tables the benchmark printed, verbatim
            for f in files:
                if f.endswith(".txt"):
                    for t in printed_tables(os.path.join(folder, f)):
                        out += ["`%s`, as `plots/bench.sh` printed it:" % f, "", "```", t, "```", ""]
    return "\n".join(out).rstrip("\n") + "\n"


def main():
    page = build()
    if "--check" in sys.argv[1:]:
        old = open(PAGE, encoding="utf-8").read() if os.path.exists(PAGE) else ""
        if old != page:
            sys.stderr.write("plots/results/README.md is stale: run `make results` and commit it\n")
            return 1
        print("plots/results/README.md: up to date")
        return 0
    with open(PAGE, "w", encoding="utf-8") as f:
        f.write(page)
    print("wrote plots/results/README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
