#!/usr/bin/env bash
# precision.sh KILN OUTDIR CC "CFLAGS" LIBKILN "LDLIBS" — lesson 09's figures, from kiln:
#   loss-scale.svg  `kiln train --loss-scale dynamic:1024:50` for 300 steps with overflows
#                   injected (KILN_INJECT_INF_STEP) at steps 60-61, 150 and 220-222: the
#                   scale on a log axis, the skipped steps marked, the training loss beside;
#   rounding.svg    the relative rounding error of bf16 and f16 for magnitudes 2^-32..2^20,
#                   measured with kiln's conversions (plots/precision_error.c).
# Writes OUTDIR/{loss-scale,rounding}.{tsv,svg,png}; `make plot-precision` runs it.
set -eu
kiln=${1:?usage: precision.sh KILN OUTDIR CC CFLAGS LIBKILN LDLIBS}
out=${2:?usage: precision.sh KILN OUTDIR CC CFLAGS LIBKILN LDLIBS}
cc=${3:-cc} cflags=${4:-} lib=${5:-} ldlibs=${6:-}
command -v gnuplot > /dev/null || { echo "precision.sh: gnuplot is not installed (apt-get install gnuplot-nox)" >&2; exit 2; }
mkdir -p "$out"
inject=60,61,150,220,221,222
KILN_INJECT_INF_STEP=$inject KILN_PROGRESS=0 "$kiln" train --steps 300 --loss-scale dynamic:1024:50 --sample 0 \
    --eval-batches 1 --out none --log "$out/loss-scale.tsv" > "$out/loss-scale.out" 2>&1 \
    || { cat "$out/loss-scale.out" >&2; exit 1; }
# shellcheck disable=SC2086
"$cc" $cflags -o "$out/precision_error" plots/precision_error.c "$lib" $ldlibs
"$out/precision_error" > "$out/rounding.tsv"
rm -f "$out/precision_error"
# one gnuplot script for both figures, run once per terminal (ext: the file ending)
cat > "$out/precision.gp" <<GP
set output '$out/loss-scale.'.ext
set title "kiln train --loss-scale dynamic:1024:50, overflows injected at steps $inject"
set xlabel 'step'
set ylabel 'loss scale'
set logscale y 2
set format y '2^{%L}'
set y2label 'training loss (nats/token)'
set y2tics
set ytics nomirror
set key top right
set grid
plot '$out/loss-scale.tsv' using 1:5 with steps lw 2 title 'loss scale', \
     '$out/loss-scale.tsv' using (\$6 == 1 ? \$1 : 1/0):5 with points pt 7 ps 1 title 'skipped step (inf in the gradients)', \
     '$out/loss-scale.tsv' using 1:2 axes x1y2 with lines lw 1 lc rgb '#999999' title 'training loss'
set output '$out/rounding.'.ext
set title 'relative rounding error of an f32 rounded to bf16 and f16 (kiln, round to nearest even)'
set xlabel '|x|'
set ylabel 'relative error |round(x) - x| / |x|'
set logscale x 2
set format x '2^{%L}'
set logscale y 2
set format y '2^{%L}'
unset y2label
unset y2tics
set yrange [2**-14:2]
set key at 2**9, 2**0 right top box opaque
set arrow from 2**-14, graph 0 to 2**-14, graph 1 nohead dt 2
set arrow from 65504, graph 0 to 65504, graph 1 nohead dt 2
set label 'f16: subnormals below 2^{-14}' at 2**-24, 2**-2
set label 'f16 overflows past 65504' at 2**16.6, 2**-7 rotate by 90
plot '$out/rounding.tsv' using 1:(\$2 > 1 ? 1 : \$2) with lines lw 2 title 'bf16, worst', \
     '$out/rounding.tsv' using 1:3 with lines lw 1 dt 2 title 'bf16, mean', \
     '$out/rounding.tsv' using 1:(\$4 > 1 ? 1 : \$4) with lines lw 2 title 'f16, worst (1: zero or inf)', \
     '$out/rounding.tsv' using 1:(\$5 > 1 ? 1 : \$5) with lines lw 1 dt 2 title 'f16, mean'
GP
gnuplot -e "set terminal svg size 900,420; ext = 'svg'" "$out/precision.gp"
gnuplot -e "set terminal pngcairo size 900,420; ext = 'png'" "$out/precision.gp" 2> /dev/null \
    || gnuplot -e "set terminal png size 900,420; ext = 'png'" "$out/precision.gp"
rm -f "$out/precision.gp"
echo "precision.sh: wrote $out/loss-scale.svg and $out/rounding.svg (and .png, .tsv)"
