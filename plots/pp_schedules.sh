#!/usr/bin/env bash
# pp_schedules.sh KILN OUT.svg [P M] — lesson 11's figure: one step of GPipe, 1F1B and
# interleaved 1F1B (2 chunks per rank) on P ranks with M micro-batches (default 4 and 8),
# as `kiln pp-sim --timeline` replays them (a stage's forward 1, backward 2, communication
# free): one row per rank, a box per forward (blue) or backward (orange), light for chunk 0
# and dark for chunk 1 (interleaved), labelled with its micro-batch; the white between
# boxes is the bubble. Each panel's title gives the simulated bubble beside its formula.
# Made by `make plot-pp-schedules` (core/ppsim.mk); the SVG is committed in book/figures/.
# The measured timelines of real ranks (kiln train --pp) are drawn by the pipeline
# runner's own plot, not here.
set -eu
kiln=${1:?usage: pp_schedules.sh KILN OUT.svg [P M]} out=${2:?usage: pp_schedules.sh KILN OUT.svg [P M]}
p=${3:-4} m=${4:-8}
command -v gnuplot > /dev/null || { echo "pp_schedules.sh: gnuplot is not installed (apt-get install gnuplot-nox)" >&2; exit 2; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
declare -A title
for s in gpipe 1f1b interleaved; do
    "$kiln" pp-sim --schedule "$s" --pp "$p" --microbatches "$m" --quiet --timeline "$tmp/$s.tsv" > "$tmp/$s.out"
    title[$s]=$(sed -n 's/^step time \([0-9.]*\) .*bubble \([0-9.]*%\) of the ranks.*= \([0-9.]*%\)$/step \1, bubble \2 (formula \3)/p' "$tmp/$s.out")
    [ -n "${title[$s]}" ] || { echo "pp_schedules.sh: no summary from kiln pp-sim --schedule $s:" >&2; cat "$tmp/$s.out" >&2; exit 1; }
done
end=$(awk '!/^#/ && $6 > e { e = $6 } END { print e }' "$tmp/gpipe.tsv")
gnuplot <<GP
set terminal svg size 900,$((150 + 3 * (40 + 26 * p))) font "sans,11" background "white"
set output "$out"
set multiplot layout 3,1 title "One step on $p ranks, $m micro-batches: forward 1, backward 2 per stage (kiln pp-sim)"
set style fill solid 0.85 border rgb "#333333"
set xrange [0:$end]
set yrange [$p - 0.5:-0.5]
set ytics 1
set ylabel "rank"
set grid xtics
unset key
do for [s in "gpipe 1f1b interleaved"] {
    f = "$tmp/" . s . ".tsv"
    t = s eq "gpipe" ? "GPipe: ${title[gpipe]}" : s eq "1f1b" ? "1F1B: ${title[1f1b]}" : "interleaved 1F1B, 2 chunks per rank: ${title[interleaved]}"
    set title t
    if (s eq "interleaved") { set xlabel "time" } else { unset xlabel }
    plot f using ((\$5 + \$6) / 2):1:((\$6 - \$5) / 2):(0.38):(strcol(2) eq "F" ? (\$4 == 0 ? 0x7aa6e0 : 0x2f5fa8) : (\$4 == 0 ? 0xf0b36a : 0xc8702a)) \
           with boxxyerror lc rgb variable, \
         f using ((\$5 + \$6) / 2):1:(sprintf("%d", \$3)) with labels font ",8"
}
unset multiplot
GP
echo "$out: gpipe ${title[gpipe]}; 1f1b ${title[1f1b]}; interleaved ${title[interleaved]}"
