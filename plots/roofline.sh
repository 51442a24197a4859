#!/usr/bin/env bash
# roofline.sh TSV OUT_PREFIX — draw the roofline of `kiln roofline`'s TSV with gnuplot:
# log-log axes (FLOP/byte, GFLOP/s), the bandwidth roof and the compute roof meeting at
# the ridge point, and every kernel of the GPT step as a point, the 12 costliest labelled
# with their node and op. Writes OUT_PREFIX.svg and OUT_PREFIX.png.
# It reads the TSV alone, so a TSV written on a GPU machine without gnuplot (`make roofline`
# there) is plotted here later: `make roofline PLOT_ONLY=1 ROOFLINE_DIR=DIR`, or this script.
# A CPU TSV's roofs are the FMA peak and the triad bandwidth (# peak_gflops, # triad_gbs); a
# GPU's cuBLAS's fp32 peak and the copy bandwidth (# copy_gbs), with bf16's peak as a
# second, dashed roof (# peak2_gflops).
set -eu
tsv=${1:?usage: roofline.sh TSV OUT_PREFIX} out=${2:?usage: roofline.sh TSV OUT_PREFIX}
[ -s "$tsv" ] || { echo "roofline.sh: no table at $tsv (run kiln roofline first)" >&2; exit 2; }
if ! command -v gnuplot > /dev/null; then
    echo "roofline.sh: gnuplot is not installed (apt-get install gnuplot, or make deps): the table is $tsv, no plot drawn"
    exit 0
fi
meta() { awk -F'\t' -v k="# $1" '$1==k{print $2; exit}' "$tsv"; }
peak=$(meta peak_gflops) ridge=$(meta ridge_flop_per_byte) step=$(meta step_ms) dev=$(meta device)
bw=$(meta triad_gbs) bwname=triad
[ -n "$bw" ] || { bw=$(meta copy_gbs); bwname=copy; }
peak2=$(meta peak2_gflops) peak2name=$(meta peak2_name) peakname=$(meta peak_name)
[ -n "$peak" ] && [ -n "$bw" ] && [ -n "$ridge" ] || { echo "roofline.sh: $tsv has no # peak_gflops, bandwidth or ridge line" >&2; exit 2; }
dev=${dev:-cpu} peakname=${peakname:-FMA peak}
where=$dev
[ "$dev" = cpu ] && where="this CPU"
pts="kernels (interpreter nodes)"
grep -q '^# steps' "$tsv" && pts="kernels (compiled program steps)"
top=$(mktemp) rows=$(mktemp)
trap 'rm -f "$top" "$rows"' EXIT
grep -v '^#' "$tsv" | tail -n +2 > "$rows"
sort -t$'\t' -k6,6gr "$rows" | head -12 > "$top"
xmax=1000
[ -n "$peak2" ] && xmax=100000
roof2=""
[ -n "$peak2" ] && roof2=", ((x*$bw < $peak2) ? x*$bw : $peak2) title \"roof: $peak2name ($peak2 GFLOP/s)\" lw 1 dt 2 lc rgb \"#cc8833\""
for term in svg png; do
    if [ $term = svg ]; then t='svg size 1100,700 dynamic noenhanced font "DejaVu Sans,11" background "#ffffff"'
    else t='pngcairo size 1100,700 noenhanced font "DejaVu Sans,10" background "#ffffff"'; fi
    gnuplot <<GP
set terminal $t
set output "$out.$term"
set datafile separator "\t"
set logscale xy
set xlabel "arithmetic intensity (FLOP / byte, cost model)"
set ylabel "GFLOP/s (measured)"
set title "GPT step on $where: roofline ($peakname $peak GFLOP/s, $bwname $bw GB/s, ridge $ridge FLOP/B; step $step ms)"
set grid
set key top left
set xrange [0.01:$xmax]
set yrange [0.001:*]
roof(x) = (x*$bw < $peak) ? x*$bw : $peak
set arrow from $ridge, graph 0 to $ridge, $peak nohead dt 2 lc rgb "#888888"
set label "ridge" at $ridge, $peak offset 1,1
set samples 400
plot roof(x) title "roof: min($peakname, $bwname bandwidth x intensity)" lw 2 lc rgb "#aa3333"$roof2, \
     "$rows" using 5:7 with points pt 7 ps 0.6 lc rgb "#3366aa" title "$pts", \
     "$top" using 5:7:(sprintf("%s %s", strcol(1), strcol(2))) with labels left offset 0.6,0.3 font ",8" notitle
GP
done
echo "wrote $out.svg $out.png"
