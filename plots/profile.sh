#!/usr/bin/env bash
# profile.sh PROFILE.tsv OUT.svg [TITLE] — plot a per-op profile (`kiln bench --profile N
# --profile-out PROFILE.tsv`, written by kn_cuda_profile_report) with gnuplot:
#   left:  GPU time per op over one training step (ms, the sum of its groups), largest
#          first, matmul (usually most of it) named in the panel's title instead of drawn,
#          so the rest stays readable: where the step goes besides the matrix products;
#   right: the 12 costliest memory-bound groups (op and operand shapes) as a share of the
#          copy bandwidth measured in the same run (100% = as fast as cudaMemcpy moving
#          the same bytes): how far each kernel is from its ceiling.
# Matmuls are compute-bound and left out of the right panel; their GFLOP/s are in the TSV.
# The bytes of a group are its operands' and result's sizes, so a kernel that skips part of
# an operand (causal_softmax never reads the masked half) can show more than 100%.
set -eu
tsv=${1:?usage: profile.sh PROFILE.tsv OUT.svg [TITLE]}
out=${2:?usage: profile.sh PROFILE.tsv OUT.svg [TITLE]}
title=${3:-kiln eager training step, per-op GPU time}
[ -r "$tsv" ] || { echo "profile.sh: cannot read $tsv" >&2; exit 2; }
command -v gnuplot > /dev/null || { echo "profile.sh: gnuplot is not installed (apt-get install gnuplot-nox)" >&2; exit 2; }
head -n 1 "$tsv" | grep -q '^# kiln per-op profile; copy bandwidth ' \
    || { echo "profile.sh: $tsv is not a kiln per-op profile (first line)" >&2; exit 2; }
bw=$(head -n 1 "$tsv" | sed 's/.*copy bandwidth \([0-9.]*\) GB.*/\1/')
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# per op: op \t ms (descending); memory-bound groups: label \t percent of copy (by ms, top 12)
awk -F'\t' 'NR > 2 { ms[$2] += $4 } END { for (o in ms) printf "%s\t%.4f\n", o, ms[o] }' "$tsv" \
    | sort -t$'\t' -k2,2 -g -r > "$tmp/all.tsv"
grep -v $'^matmul\t' "$tmp/all.tsv" | head -n 16 > "$tmp/ops.tsv" || true
awk -F'\t' 'NR > 2 && $6 == 0 && $4 > 0 { printf "%s\t%.2f\t%.4f\n", $1, 100 * $9, $4 }' "$tsv" \
    | sort -t$'\t' -k3,3 -g -r | head -n 12 > "$tmp/mem.tsv"
[ -s "$tmp/all.tsv" ] || { echo "profile.sh: $tsv has no groups" >&2; exit 2; }
total=$(awk -F'\t' '{ s += $2 } END { printf "%.1f", s }' "$tmp/all.tsv")
mm=$(awk -F'\t' '$1 == "matmul" { printf "%.1f", $2 }' "$tmp/all.tsv")
[ -s "$tmp/ops.tsv" ] || printf 'none\t0\n' > "$tmp/ops.tsv"
[ -s "$tmp/mem.tsv" ] || printf 'none\t0\t0\n' > "$tmp/mem.tsv"
gnuplot <<GP
set terminal svg size 1200,600 dynamic noenhanced font "DejaVu Sans,11" background "#ffffff"
set output "$out"
set datafile separator "\t"
set multiplot layout 1,2 title "$title ($total ms in ops; copy bandwidth $bw GB/s)"
set style fill solid 0.8 border -1
set boxwidth 0.7
set grid ytics
set xtics rotate by 40 right scale 0 font ",9"
set bmargin 15
set yrange [0:*]
set ylabel "ms per step"
set title "GPU time per op other than matmul (matmul: ${mm:-0} ms)"
plot "$tmp/ops.tsv" using 0:2:xtic(1) with boxes lc rgb "#4a7ab5" notitle
set ylabel "% of measured copy bandwidth"
set title "costliest memory-bound kernels"
set arrow from graph 0, first 100 to graph 1, first 100 nohead dt 2 lc rgb "#aa3333"
plot "$tmp/mem.tsv" using 0:2:xtic(1) with boxes lc rgb "#d08a3c" notitle
unset multiplot
GP
echo "profile.sh: wrote $out"
