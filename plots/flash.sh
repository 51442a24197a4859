#!/usr/bin/env bash
# flash.sh OUT.svg [KILN BENCH-ATTN FLAGS...] — flash attention against the materialized
# form, over sequence lengths: runs `kiln bench-attn FLAGS --seq T` with and without --flash
# for each T of $SEQS (default 256 512 1024 2048 4096), keeps each run's TSV row, and plots
# with gnuplot, against T (log-log), the median forward + backward time and the peak memory
# of the runs above the inputs (the device allocator's peak: kiln's own allocations on the
# CPU, the caching allocator's on a GPU). Materialized attention's memory grows as T^2
# (the [B, H, T, T] scores, probabilities and their gradients), flash's as T.
# FLAGS default to a CPU-sized shape (B 1, H 4, D 64, 1 warm-up and 3 timed runs, --device
# cpu); on a GPU pass e.g. `--device cuda --batch 8 --heads 12`. Writes OUT.svg, OUT.png and
# OUT.tsv (T, variant, ms, peak bytes, live-set bytes, B, H, D, device, precision). KILN names the kiln
# binary (default build/solutions/kiln). PLOT_ONLY=1 plots an OUT.tsv made earlier (say on a
# GPU machine without gnuplot, where the runs write the TSV and stop before plotting).
set -eu
out=${1:?usage: flash.sh OUT.svg [kiln bench-attn flags...]}
shift
KILN=${KILN:-build/solutions/kiln}
SEQS=${SEQS:-256 512 1024 2048 4096}
[ $# -gt 0 ] || set -- --batch 1 --heads 4 --head-dim 64 --warmup 1 --steps 3 --device cpu
tsv=${out%.svg}.tsv
if [ -z "${PLOT_ONLY:-}" ]; then
[ -x "$KILN" ] || { echo "flash.sh: no kiln binary at $KILN (make kiln, or set KILN)" >&2; exit 2; }
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
# rows alternate materialized, flash (the plot reads them with `every 2`)
printf '# T\tvariant\tms\tpeak_bytes\tlive_bytes\tB\tH\tD\tdevice\tprecision\n' > "$tsv"
for t in $SEQS; do
    for f in "" --flash; do
        echo "== kiln bench-attn $* --seq $t $f" >&2
        "$KILN" bench-attn "$@" --seq "$t" $f > "$logs/run.log" 2>&1 \
            || { cat "$logs/run.log" >&2; echo "flash.sh: T=$t $f failed" >&2; exit 1; }
        grep '^  ' "$logs/run.log" >&2 || true
        tail -n 1 "$logs/run.log" >> "$tsv"
    done
done
fi
[ -s "$tsv" ] || { echo "flash.sh: no $tsv to plot" >&2; exit 2; }
command -v gnuplot > /dev/null || { echo "flash.sh: wrote $tsv; gnuplot is not installed (apt-get install gnuplot-nox), so no plot" >&2; exit 2; }
shape=$(awk -F'\t' 'NR == 2 { printf "%s: B %d, H %d, D %d, %s", $9, $6, $7, $8, $10 == "" ? "f32" : $10 }' "$tsv")
plot() { # plot TERMINAL FILE
    gnuplot <<GP
set terminal $1 size 1000,440
set output '$2'
set datafile separator '\t'
set multiplot layout 1,2 title "kiln causal attention, forward + backward ($shape)"
set logscale xy 2
set xlabel 'sequence length T'
set grid
set key top left
set ylabel 'time, ms (median)'
plot '$tsv' every 2 using 1:3 with linespoints pt 7 title 'materialized', \
     '$tsv' every 2::1 using 1:3 with linespoints pt 5 title 'flash'
set ylabel 'peak memory above the inputs, MiB'
plot '$tsv' every 2 using 1:(\$4 / 1048576) with linespoints pt 7 title 'materialized', \
     '$tsv' every 2::1 using 1:(\$4 / 1048576) with linespoints pt 5 title 'flash'
unset multiplot
GP
}
plot svg "$out"
plot "pngcairo" "${out%.svg}.png" 2> /dev/null || plot png "${out%.svg}.png"
echo "flash.sh: wrote $out, ${out%.svg}.png and $tsv"
