#!/usr/bin/env bash
# remat.sh OUT.svg [KILN BENCH FLAGS...] — memory against time for every activation
# checkpointing policy: runs `kiln bench FLAGS --remat P` for each policy P of $POLICIES
# (default: none selective mincut every:2 full), keeps each run's JSON line, and plots with
# gnuplot one point per policy: the step's median time against
#   - the largest live set of the step graph in node order (kn_graph_live_bytes: what a
#     node-by-node run must hold at least, the figure the policy lowers);
#   - the compiled program's memory plan (its arena), when the step is compiled C;
#   - the measured peak of the device's allocator, on a GPU (on the CPU the arena is
#     allocated before the steps, so the allocations during them say little).
# FLAGS default to `make run`'s model on the CPU (vocab 41, context 64, 2 layers, width 64,
# 4 heads, batch 8) with 3 warm-up and 30 timed steps; pass the GPT-2 shape's flags on a
# GPU. Writes OUT.svg, OUT.png and OUT.tsv (policy, step ms, live, arena and peak MB). KILN
# names the kiln binary (default build/solutions/kiln).
set -eu
out=${1:?usage: remat.sh OUT.svg [kiln bench flags...]}
shift
KILN=${KILN:-build/solutions/kiln}
POLICIES=${POLICIES:-none selective mincut every:2 full}
[ $# -gt 0 ] || set -- --vocab 41 --context 64 --layers 2 --width 64 --heads 4 --batch 8 --device cpu --warmup 3 --steps 30
command -v gnuplot > /dev/null || { echo "remat.sh: gnuplot is not installed (apt-get install gnuplot-nox)" >&2; exit 2; }
[ -x "$KILN" ] || { echo "remat.sh: no kiln binary at $KILN (make kiln, or set KILN)" >&2; exit 2; }
tsv=${out%.svg}.tsv
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
for p in $POLICIES; do
    echo "== kiln bench $* --remat $p" >&2
    "$KILN" bench "$@" --remat "$p" > "$logs/run.log" 2>&1 || { cat "$logs/run.log" >&2; echo "remat.sh: --remat $p failed" >&2; exit 1; }
    tail -n 1 "$logs/run.log" >> "$logs/runs.jsonl"
done
"${PYTHON:-python3}" - "$logs/runs.jsonl" "$tsv" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
with open(sys.argv[2], "w") as f:
    f.write("# policy\tstep_ms\tlive_mb\tarena_mb\tpeak_mb\tdevice\tlayers\twidth\tbatch\tcontext\n")
    for r in rows:
        peak = r["peak_mem_mib"] * 1.048576 if not r["device"].startswith("cpu") else 0
        f.write("%s\t%.3f\t%.4f\t%.4f\t%.4f\t%s\t%d\t%d\t%d\t%d\n" % (r["remat"], r["step_ms_median"], r["live_bytes"] / 1e6,
                r["mem_planned"] / 1e6, peak, r["device"], r["layers"], r["width"], r["batch"], r["context"]))
        print("%-10s %9.2f ms  live %9.3f MB  arena %9.3f MB%s" % (r["remat"], r["step_ms_median"], r["live_bytes"] / 1e6,
              r["mem_planned"] / 1e6, "  peak %.1f MB" % peak if peak else ""))
PY
shape=$(awk -F'\t' 'NR == 2 { printf "%s: %d layers, width %d, batch %d x %d", $6, $7, $8, $9, $10 }' "$tsv")
arena=$(awk -F'\t' 'NR > 1 && $4 > 0 { n++ } END { print n + 0 }' "$tsv")
peak=$(awk -F'\t' 'NR > 1 && $5 > 0 { n++ } END { print n + 0 }' "$tsv")
plot() { # plot TERMINAL FILE
    local series="'$tsv' using 2:3 with points pt 7 ps 1.5 title 'largest live set (node order)', \
'$tsv' using 2:3:1 with labels offset 1.2,0.6 left notitle"
    [ "$arena" -gt 0 ] && series="$series, '$tsv' using 2:(\$4 > 0 ? \$4 : 1/0) with points pt 5 ps 1.2 title 'memory plan (arena)'"
    [ "$peak" -gt 0 ] && series="$series, '$tsv' using 2:(\$5 > 0 ? \$5 : 1/0) with points pt 9 ps 1.4 title 'measured peak'"
    gnuplot <<GP
set terminal $1 size 900,480
set output '$2'
set title "kiln activation checkpointing: memory against time per step ($shape)"
set xlabel 'step time, ms (median)'
set ylabel 'MB'
set key below
set grid
set offsets graph 0.15, graph 0.25, 0, 0
set yrange [0:*]
set datafile separator '\t'
plot $series
GP
}
plot svg "$out"
plot "pngcairo" "${out%.svg}.png" 2> /dev/null || plot png "${out%.svg}.png"
echo "remat.sh: wrote $out, ${out%.svg}.png and $tsv"
