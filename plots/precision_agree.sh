#!/usr/bin/env bash
# precision_agree.sh OUT.svg [KILN TRAIN FLAGS...] — training loss against step in fp32 and bf16
# (and fp16 with PRECISIONS="fp32 bf16 fp16"): runs `kiln train FLAGS --precision P --log`
# for each precision P on the same batches and plots each log's loss with gnuplot, raw and
# as a 25-step mean. FLAGS default to the agreement test's run (tests/core/
# test_cli_precision.sh): `make run`'s model on the CPU for 300 steps at lr 0.006. Writes
# OUT.svg, OUT.png and OUT.tsv (step, then one loss column per precision). KILN names the
# kiln binary (default build/solutions/kiln).
set -eu
out=${1:?usage: precision_agree.sh OUT.svg [kiln train flags...]}
shift
KILN=${KILN:-build/solutions/kiln}
PRECISIONS=${PRECISIONS:-fp32 bf16}
[ $# -gt 0 ] || set -- --steps 300 --lr 0.006 --device cpu --out none --sample 0 --eval-batches 1
command -v gnuplot > /dev/null || { echo "precision_agree.sh: gnuplot is not installed (apt-get install gnuplot-nox)" >&2; exit 2; }
[ -x "$KILN" ] || { echo "precision_agree.sh: no kiln binary at $KILN (make kiln, or set KILN)" >&2; exit 2; }
tsv=${out%.svg}.tsv
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
header="# step"
for p in $PRECISIONS; do
    echo "== kiln train $* --precision $p" >&2
    "$KILN" train "$@" --precision "$p" --log "$logs/$p.log" > "$logs/run.out" 2>&1 \
        || { cat "$logs/run.out" >&2; echo "precision_agree.sh: --precision $p failed" >&2; exit 1; }
    grep "train loss" "$logs/run.out" | sed "s/^ */$p: /" >&2
    header="$header	$p	${p}_mean25"
done
{
    echo "$header"
    # one row per step: the step, then per precision its loss and the mean of the last 25
    # (logs are "step loss lr gradnorm")
    awk 'FNR == 1 { f++ } { loss[$1, f] = $2; if ($1 > last) last = $1 }
         END { for (s = 0; s <= last; s++) {
                   printf "%d", s
                   for (i = 1; i <= f; i++) {
                       sum[i] += loss[s, i]; if (s >= 25) sum[i] -= loss[s - 25, i]
                       printf "\t%s\t%.6f", loss[s, i], sum[i] / (s < 25 ? s + 1 : 25)
                   }
                   printf "\n" } }' \
        $(for p in $PRECISIONS; do echo "$logs/$p.log"; done)
} > "$tsv"
plot() { # plot TERMINAL FILE
    local series="" diffs="" i=2 c=1 first
    for p in $PRECISIONS; do
        [ -n "$series" ] && series="$series, "
        series="$series'$tsv' using 1:$i with lines lw 1 lc $c dt 3 notitle, '$tsv' using 1:$((i + 1)) with lines lw 2 lc $c title '$p (25-step mean)'"
        if [ $i -eq 2 ]; then first=$p; else
            [ -n "$diffs" ] && diffs="$diffs, "
            diffs="$diffs'$tsv' using 1:(\$$i - \$2) with lines lw 1 lc $c title '$p - $first'"
        fi
        i=$((i + 2)); c=$((c + 1))
    done
    gnuplot <<GP
set terminal $1 size 900,640
set output '$2'
set datafile separator '\t'
set grid
set multiplot layout 2,1 title "kiln train: loss per step by precision (dotted: each step; solid: 25-step mean)"
set size 1,0.62
set origin 0,0.36
set ylabel 'training loss (nats/token)'
set key top right
plot $series
set size 1,0.36
set origin 0,0
set xlabel 'step'
set ylabel 'difference per step'
set yrange [-0.06:0.06]
set ytics 0.025
set key top left
plot ${diffs:-0 notitle}, 0.05 with lines lc 'gray' dt 2 title 'llm.c bf16 loss tolerance', -0.05 with lines lc 'gray' dt 2 notitle
unset multiplot
GP
}
plot svg "$out"
plot "pngcairo" "${out%.svg}.png" 2> /dev/null || plot png "${out%.svg}.png"
echo "precision_agree.sh: wrote $out, ${out%.svg}.png and $tsv"
