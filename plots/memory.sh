#!/usr/bin/env bash
# memory.sh MEMORY.tsv OUT.svg [TITLE] — plot a compiled program's memory plan
# (`kiln compile ... --memory-plot MEMORY.tsv`, written by kn_program_memory_tsv) with
# gnuplot: over the steps of the program, the bytes of the values live at each step (what
# any plan must hold then) and the top of the arena among them (where the plan put them).
# The arena's size is the highest point of the second curve; the lower bound, of the first.
# Writes OUT.svg and, beside it, OUT.png.
set -eu
tsv=${1:?usage: memory.sh MEMORY.tsv OUT.svg [TITLE]}
out=${2:?usage: memory.sh MEMORY.tsv OUT.svg [TITLE]}
title=${3:-kiln compiled program: memory plan}
[ -r "$tsv" ] || { echo "memory.sh: cannot read $tsv" >&2; exit 2; }
command -v gnuplot > /dev/null || { echo "memory.sh: gnuplot is not installed (apt-get install gnuplot-nox)" >&2; exit 2; }
head -n 1 "$tsv" | grep -q '^# step	live_bytes	arena_top_bytes' \
    || { echo "memory.sh: $tsv is not a kiln memory plan (first line)" >&2; exit 2; }
[ "$(wc -l < "$tsv")" -gt 1 ] || { echo "memory.sh: $tsv has no steps" >&2; exit 2; }
plot() { # plot TERMINAL FILE
    gnuplot <<GP
set terminal $1 size 900,420
set output '$2'
set title "$title"
set xlabel 'step of the program'
set ylabel 'MB'
set key top left
set grid
set datafile separator '\t'
plot '$tsv' using 1:(\$2/1e6) with steps lw 2 title 'live at the step (lower bound: its peak)', \
     '$tsv' using 1:(\$3/1e6) with steps lw 1 dt 2 title 'top of the arena among the live values'
GP
}
plot svg "$out"
plot "pngcairo" "${out%.svg}.png" 2> /dev/null || plot png "${out%.svg}.png"
echo "memory.sh: wrote $out and ${out%.svg}.png"
