#!/usr/bin/env bash
# dp_overlap.sh TIMELINE OUT.svg — the lesson 10 figure: one DDP step of `make run-dist`
# as a timeline (kn_dp's KILN_DP_TIMELINE log, core/dist/dp.c): the forward+backward on
# rank 0 as one bar, and each bucket's all-reduce from its launch (when its last gradient
# exists) to its completion (seen by the next poll). What lies left of the dashed line
# (the backward's end) is hidden behind compute; what lies right of it is exposed.
# Made by `make plot-dp-overlap` (core/dist.mk); the SVG is committed in book/figures/.
set -eu
tl=$1 out=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# the last step of the log
last=$(awk '$1 == "step" { s = $2 } END { print s }' "$tl")
awk -v s="$last" '$1 == "step" && $2 == s { printf "%.3f %.3f %.3f\n", $3 * 1e3, $4 * 1e3, $5 * 1e3 }' "$tl" > "$tmp/step"
awk -v s="$last" '$1 == "bucket" && $2 == s { printf "%d %.3f %.3f %d\n", $3, $4 * 1e3, $5 * 1e3, $6 }' "$tl" > "$tmp/buckets"
read -r bwd comm_end step_end < "$tmp/step"
nb=$(wc -l < "$tmp/buckets")
head=$(sed -n 1p "$tl" | sed 's/^# kn_dp timeline (\([^)]*\)).*/\1/')
gnuplot <<GP
set terminal svg size 760,$((170 + 26 * nb)) font "sans,12" background "white"
set output "$out"
set title "One DDP step of make run-dist ($head, rank 0, step $last)"
set xlabel "milliseconds from the step's start"
set yrange [-1.5:$nb + 0.8]
set ytics ("forward + backward" -1)
set for [i=0:$((nb - 1))] ytics add (sprintf("bucket %d", i) i)
set xrange [0:$step_end * 1.05]
set grid xtics
set style fill solid 0.8 border -1
set arrow from $bwd, graph 0 to $bwd, graph 1 nohead dashtype 2 lw 2 lc rgb "#444444"
set label "backward ends" at $bwd, $nb + 0.4 offset 0.5,0
set key outside below horizontal
plot "< echo 0 $bwd" using (\$1 + \$2) / 2:(-1):(\$2 - \$1) / 2:(0.35) with boxxyerror lc rgb "#5b8fd6" title "compute", \
     "$tmp/buckets" using ((\$2 + \$3) / 2):1:((\$3 - \$2) / 2 > 0.6 ? (\$3 - \$2) / 2 : 0.6):(0.35) with boxxyerror lc rgb "#e39b3a" title "all-reduce in flight"
GP
echo "$out: step $last, backward ${bwd} ms, communication done at ${comm_end} ms, step ${step_end} ms, $nb buckets"
