#!/usr/bin/env bash
# roofline.sh TSV OUT_PREFIX — draw the roofline of `kiln roofline`'s TSV with gnuplot:
# log-log axes (FLOP/byte, GFLOP/s), the bandwidth roof and the compute roof meeting at
# the ridge point, and every kernel of the GPT step as a point, the 12 costliest labelled
# with their node and op. Writes OUT_PREFIX.svg and OUT_PREFIX.png.
set -eu
tsv=$1 out=$2
if ! command -v gnuplot > /dev/null; then
    echo "roofline.sh: gnuplot is not installed (apt-get install gnuplot, or make deps): the table is $tsv, no plot drawn"
    exit 0
fi
peak=$(awk -F'\t' '$1=="# peak_gflops"{print $2}' "$tsv")
bw=$(awk -F'\t' '$1=="# triad_gbs"{print $2}' "$tsv")
ridge=$(awk -F'\t' '$1=="# ridge_flop_per_byte"{print $2}' "$tsv")
step=$(awk -F'\t' '$1=="# step_ms"{print $2}' "$tsv")
top=$(mktemp)
trap 'rm -f "$top"' EXIT
grep -v '^#' "$tsv" | tail -n +2 | sort -t$'\t' -k6,6gr | head -12 > "$top"
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
set title "GPT step on this CPU: roofline (peak $peak GFLOP/s, triad $bw GB/s, ridge $ridge FLOP/B; step $step ms)"
set grid
set key top left
set xrange [0.01:1000]
set yrange [0.001:*]
roof(x) = (x*$bw < $peak) ? x*$bw : $peak
set arrow from $ridge, graph 0 to $ridge, $peak nohead dt 2 lc rgb "#888888"
set label "ridge" at $ridge, $peak offset 1,1
set samples 400
plot roof(x) title "roof: min(peak, bandwidth x intensity)" lw 2 lc rgb "#aa3333", \
     "< grep -v '^#' $tsv | tail -n +2" using 5:7 with points pt 7 ps 0.6 lc rgb "#3366aa" title "kernels (interpreter nodes)", \
     "$top" using 5:7:(sprintf("%s %s", strcol(1), strcol(2))) with labels left offset 0.6,0.3 font ",8" notitle
GP
done
echo "wrote $out.svg $out.png"
