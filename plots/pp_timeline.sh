#!/usr/bin/env bash
# pp_timeline.sh TIMELINE OUT.png|OUT.svg — one pipeline-parallel step as a timeline: the
# TSV that `kiln train --pp N --timeline FILE` writes (kn_pp_timeline, core/dist/pp_run.c),
# ranks as rows, each action a box from the moment its input was there (t_ready) to its end,
# forwards blue and backwards orange, labelled with the micro-batch (and chunk, interleaved);
# what is blank is idle: the bubble. The title gives the measured bubble
# (1 - busy / (p x makespan)) beside (p-1)/(m+p-1) (interleaved: also (p-1)/(v m+p-1)).
# KILN_PP_SLEEP_MS=F,B on the kiln train run gives every action a fixed time: the schedule's
# shape on any machine.
set -eu
tl=$1 out=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
head=$(sed -n 1p "$tl" | sed 's/^# kiln pipeline timeline: \([^(]*\) (.*/\1/')
p=$(awk '!/^#/ { if ($1 + 1 > n) n = $1 + 1 } END { print n }' "$tl")
m=$(sed -n 1p "$tl" | sed 's/.* m \([0-9]*\),.*/\1/')
v=$(sed -n 1p "$tl" | sed 's/.* v \([0-9]*\) .*/\1/')
awk '!/^#/ { ms = 1e3; lab = ($4 > 0 || v > 1) ? $3 "." $4 : $3
             printf "%d %s %.4f %.4f %s\n", $1, $2, $6 * ms, $7 * ms, lab }' v="$v" "$tl" > "$tmp/all"
awk '$2 == "F"' "$tmp/all" > "$tmp/f"
awk '$2 == "B"' "$tmp/all" > "$tmp/b"
read -r span bubble <<<"$(awk '{ busy += $4 - $3; if ($4 > s) s = $4 } END { printf "%.4f %.1f", s, 100 * (1 - busy / (p * s)) }' p="$p" "$tmp/all")"
formula=$(awk -v p="$p" -v m="$m" -v v="$v" 'BEGIN { printf "(p-1)/(m+p-1) = %.1f%%", 100 * (p - 1) / (m + p - 1)
    if (v > 1) printf ", (p-1)/(v m+p-1) = %.1f%%", 100 * (p - 1) / (v * m + p - 1) }')
case "$out" in *.svg) term="svg size 960,$((120 + 60 * p)) font 'sans,11' background 'white'" ;;
               *) term="pngcairo size 1200,$((140 + 70 * p)) font 'sans,11'" ;; esac
gnuplot <<GP
set terminal $term
set output "$out"
set title "Pipeline step: $head — bubble ${bubble}% measured, ${formula}"
set xlabel "milliseconds from the step's start"
set yrange [$p - 0.4:-0.6]
set ytics ("rank 0" 0)
set for [r=1:$((p - 1))] ytics add (sprintf("rank %d", r) r)
set xrange [0:$span * 1.02]
set style fill solid 0.85 border -1
set key outside below horizontal
plot "$tmp/f" using ((\$3 + \$4) / 2):1:((\$4 - \$3) / 2):(0.35) with boxxyerror lc rgb "#5b8fd6" title "forward", \
     "$tmp/b" using ((\$3 + \$4) / 2):1:((\$4 - \$3) / 2):(0.35) with boxxyerror lc rgb "#e39b3a" title "backward", \
     "$tmp/all" using ((\$3 + \$4) / 2):1:5 with labels font "sans,8" notitle
GP
echo "$out: $p ranks, makespan $span ms, bubble ${bubble}% measured, ${formula}"
