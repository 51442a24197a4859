#!/usr/bin/env bash
# ablation.sh OUTDIR [--device cpu|cuda] [kiln bench size flags...] — what each of kiln's
# optimizations is worth: the training step with all of them on ("full"), then with each one
# switched off alone ("-fusion", "-flash", ...), and the two that trade time for memory or
# precision added alone ("+remat", "+bf16" on the CPU), each a `kiln bench` run of the same
# model, batch and seed in this one invocation (ratios, not absolute times, carry over).
#
#   on the CPU   full = --mode compiled --passes all --flash --hfuse (fp32); the rows off:
#                fusion (--mode interp: node by node), passes (--passes none), flash, hfuse,
#                the memory plan (--no-plan); added: +remat (selective), +bf16 (autocast);
#   on a GPU     full adds --epilogue --cuda-graph --precision bf16; the rows off add
#                epilogue, cuda-graph and autocast (fp32); added: +remat.
#
# Writes OUTDIR/ablation.tsv (variant, flags, step ms, tokens/s, peak and planned MiB, the
# last loss, time and memory over full's), OUTDIR/ablation.md (the table, with the machine and
# the date), OUTDIR/ablation.svg and .png (gnuplot: time and memory of each row over full's),
# and each run's JSON line in OUTDIR/runs.jsonl. Size flags default to a small GPT on the CPU
# (4 layers, width 256, context 128, batch 8, 2 warm-up + 8 timed steps) and GPT-2 124M at
# batch 8 on a GPU. KILN names the kiln binary (default build/solutions/kiln). Exit 2 with a
# message when kiln is missing; without gnuplot the table only (ABLATION_PLOT_ONLY=1 draws a
# table measured before, e.g. on a GPU machine without gnuplot); 1 when a run fails.
set -eu
out=${1:?usage: ablation.sh OUTDIR [--device cpu|cuda] [kiln bench flags...]}
shift
device=cpu
if [ "${1:-}" = --device ]; then device=${2:?--device needs cpu or cuda}; shift 2; fi
case $device in cpu|cuda) ;; *) echo "ablation.sh: --device must be cpu or cuda, not '$device'" >&2; exit 2 ;; esac
KILN=${KILN:-build/solutions/kiln}
plot=1
command -v gnuplot > /dev/null || { plot=0; echo "ablation.sh: gnuplot is not installed (apt-get install gnuplot-nox): the table only; draw it later with: ABLATION_PLOT_ONLY=1 bash plots/ablation.sh $out" >&2; }
[ -x "$KILN" ] || [ "${ABLATION_PLOT_ONLY:-0}" = 1 ] || { echo "ablation.sh: no kiln binary at $KILN (make kiln, or set KILN)" >&2; exit 2; }
if [ $# -eq 0 ]; then
    if [ "$device" = cpu ]; then set -- --vocab 512 --context 128 --layers 4 --width 256 --heads 4 --batch 8 --warmup 2 --steps 8
    else set -- --batch 8 --warmup 3 --steps 10; fi
fi
if [ "${ABLATION_PLOT_ONLY:-0}" = 1 ]; then # only draw a table measured before (on a machine without gnuplot)
    [ -s "$out/ablation.tsv" ] || { echo "ablation.sh: ABLATION_PLOT_ONLY=1 but no $out/ablation.tsv" >&2; exit 2; }
    [ "$plot" = 1 ] || exit 2
else
mkdir -p "$out"
: > "$out/runs.jsonl"
: > "$out/variants.tsv"

if [ "$device" = cpu ]; then
    full="--mode compiled --passes all --flash --hfuse"
    variants=(
        "full|$full"
        "-fusion|--mode interp --passes all --flash --hfuse"
        "-passes|--mode compiled --passes none --flash --hfuse"
        "-flash|--mode compiled --passes all --hfuse"
        "-hfuse|--mode compiled --passes all --flash"
        "-plan|$full --no-plan"
        "+remat|$full --remat selective"
        "+bf16|$full --precision bf16"
    )
else
    full="--mode compiled --passes all --flash --hfuse --epilogue --cuda-graph --precision bf16"
    variants=(
        "full|$full"
        "-fusion|--mode interp --passes all --flash --hfuse --epilogue --precision bf16"
        "-passes|--mode compiled --passes none --flash --hfuse --epilogue --cuda-graph --precision bf16"
        "-flash|--mode compiled --passes all --hfuse --epilogue --cuda-graph --precision bf16"
        "-hfuse|--mode compiled --passes all --flash --epilogue --cuda-graph --precision bf16"
        "-epilogue|--mode compiled --passes all --flash --hfuse --cuda-graph --precision bf16"
        "-cuda-graph|--mode compiled --passes all --flash --hfuse --epilogue --precision bf16"
        "-autocast|--mode compiled --passes all --flash --hfuse --epilogue --cuda-graph"
        "-plan|$full --no-plan"
        "+remat|$full --remat selective"
    )
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
i=0
for v in "${variants[@]}"; do
    name=${v%%|*}
    flags=${v#*|}
    i=$((i + 1))
    printf 'ablation [%d/%d] %-12s kiln bench --device %s %s %s\n' "$i" "${#variants[@]}" "$name" "$device" "$*" "$flags" >&2
    # shellcheck disable=SC2086  # the flags are words
    if ! "$KILN" bench --device "$device" "$@" $flags > "$log" 2>&1; then
        cat "$log" >&2
        echo "ablation.sh: the row '$name' failed (kiln bench --device $device $* $flags)" >&2
        exit 1
    fi
    tail -n 1 "$log" >> "$out/runs.jsonl"
    printf '%s\t%s\n' "$name" "$flags" >> "$out/variants.tsv"
done

"${PYTHON:-python3}" - "$out" "$device" <<'PY'
import json, os, platform, subprocess, sys, time
out, device = sys.argv[1], sys.argv[2]
runs = [json.loads(l) for l in open(os.path.join(out, "runs.jsonl"))]
names = [l.rstrip("\n").split("\t") for l in open(os.path.join(out, "variants.tsv"))]
full = runs[0]
def cpu_name():
    try:
        for l in open("/proc/cpuinfo"):
            if l.startswith("model name"): return l.split(":", 1)[1].strip()
    except OSError: pass
    return platform.processor() or "?"
machine = cpu_name() + " (%d cores)" % os.cpu_count()
if device == "cuda":
    try: machine = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                  text=True, timeout=30).stdout.strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired): machine = "a GPU"
date = time.strftime("%Y-%m-%d", time.gmtime())
def mem(r):  # the measured peak of kiln's allocations (the GPU's caching allocator, the CPU's kn_malloc)
    return r["peak_mem_mib"]
with open(os.path.join(out, "ablation.tsv"), "w") as f:
    f.write("# variant\tstep_ms\ttokens_per_s\tpeak_mib\tplanned_mib\tloss_last\ttime_over_full\tmem_over_full\tflags\n")
    for (name, flags), r in zip(names, runs):
        f.write("%s\t%.3f\t%.0f\t%.2f\t%.2f\t%.5f\t%.3f\t%.3f\t%s\n" % (
            name, r["step_ms_median"], r["tokens_per_s"], r["peak_mem_mib"], r["mem_planned"] / 1048576.0,
            r["loss_last"], r["step_ms_median"] / full["step_ms_median"], mem(r) / max(mem(full), 1e-9), flags))
with open(os.path.join(out, "ablation.md"), "w") as f:
    f.write("Ablation of kiln's training step on %s, %s (GPT: vocab %d, context %d, %d layers, width %d, %d heads; "
            "batch %d; %d timed steps, median). `full` has every optimization on; each `-X` row switches X off "
            "alone, each `+X` row adds X alone. Memory: %s.\n\n" % (
                machine, date, full["vocab"], full["context"], full["layers"], full["width"], full["heads"],
                full["batch"], full["steps"], "the measured peak of the GPU allocator (parameters, optimizer state "
                "and the step's activations)" if device == "cuda" else "the measured peak of kiln's allocations "
                "(parameters, optimizer state, the step's arena or, node by node, its live tensors)"))
    f.write("| variant | step ms | tokens/s | memory MiB | time / full | memory / full | last loss |\n")
    f.write("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
    for (name, flags), r in zip(names, runs):
        f.write("| `%s` | %.2f | %.0f | %.1f | %.2fx | %.2fx | %.4f |\n" % (
            name, r["step_ms_median"], r["tokens_per_s"], mem(r), r["step_ms_median"] / full["step_ms_median"],
            mem(r) / max(mem(full), 1e-9), r["loss_last"]))
print(open(os.path.join(out, "ablation.md")).read())
PY

fi
[ "$plot" = 1 ] || exit 0
gnuplot <<GP
set datafile separator "\t"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set ylabel "over full (1 = every optimization on)"
set title "kiln ablation ($device): step time and memory of each row over full's"
set xtics rotate by -30 nomirror
set grid ytics
set key top left
set yrange [0:*]
set arrow from graph 0, first 1 to graph 1, first 1 nohead dashtype 2 lc rgb "#444444"
set terminal svg size 900,480 dynamic
set output "$out/ablation.svg"
plot "$out/ablation.tsv" using 7:xtic(1) title "step time", "" using 8 title "memory"
set terminal pngcairo size 900,480
set output "$out/ablation.png"
replot
GP
echo "ablation.sh: wrote $out/ablation.tsv, ablation.md, ablation.svg, ablation.png" >&2
