#!/usr/bin/env bash
# flash.sh OUT.svg [KILN BENCH-ATTN FLAGS...] — flash attention against the materialized
# form, over sequence lengths: runs `kiln bench-attn FLAGS --seq T` with and without --flash
# for each T of $SEQS (default 256 512 1024 2048 4096), and beside them PyTorch's SDPA
# (torch.nn.functional.scaled_dot_product_attention, causal, f32: plots/bench_attn_torch.py,
# the same flags, shape and protocol) when a python3 here can import torch (else a line says
# it is skipped); keeps each run's TSV row, and plots with gnuplot, against T (log-log), the
# median forward + backward time and the peak memory of the runs above the inputs (the
# device allocator's peak: kiln's own allocations on the CPU, the caching allocators' on a
# GPU; PyTorch's only on a GPU). Materialized attention's memory grows as T^2 (the
# [B, H, T, T] scores, probabilities and their gradients), flash's and SDPA's as T.
# FLAGS default to a CPU-sized shape (B 1, H 4, D 64, 1 warm-up and 3 timed runs, --device
# cpu); on a GPU pass e.g. `--device cuda --batch 8 --heads 12`. Writes OUT.svg, OUT.png and
# OUT.tsv (T, variant, ms, peak bytes, live-set bytes, B, H, D, device). KILN names the kiln
# binary (default build/solutions/kiln). PLOT_ONLY=1 plots an OUT.tsv made earlier (say on a
# GPU machine without gnuplot, where the runs write the TSV and stop before plotting; a TSV
# without PyTorch's rows plots kiln's alone). NO_TORCH=1 skips PyTorch.
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
# PyTorch's interpreter (core/mk/python.sh torch: on the GPU machine the PATH's python3).
torch_py=
[ -n "${NO_TORCH:-}" ] || torch_py=$(bash "$(dirname "$0")/../core/mk/python.sh" torch) || torch_py=
[ -n "$torch_py" ] || echo "== PyTorch: ${NO_TORCH:+NO_TORCH is set}${NO_TORCH:-no python3 here can import torch}; its SDPA is skipped" >&2
# one row per (T, variant): materialized, flash, torch-sdpa (the plot picks them by name)
printf '# T\tvariant\tms\tpeak_bytes\tlive_bytes\tB\tH\tD\tdevice\n' > "$tsv"
for t in $SEQS; do
    for f in "" --flash; do
        echo "== kiln bench-attn $* --seq $t $f" >&2
        "$KILN" bench-attn "$@" --seq "$t" $f > "$logs/run.log" 2>&1 \
            || { cat "$logs/run.log" >&2; echo "flash.sh: T=$t $f failed" >&2; exit 1; }
        sed -n 2p "$logs/run.log" >&2
        tail -n 1 "$logs/run.log" >> "$tsv"
    done
    if [ -n "$torch_py" ]; then
        echo "== bench_attn_torch.py $* --seq $t" >&2
        if "$torch_py" "$(dirname "$0")/bench_attn_torch.py" "$@" --seq "$t" > "$logs/run.log" 2>&1; then
            sed -n 2p "$logs/run.log" >&2
            tail -n 1 "$logs/run.log" >> "$tsv"
        else # out of memory, say: the row is missing, the others still plot
            tail -n 3 "$logs/run.log" >&2; echo "flash.sh: PyTorch SDPA at T=$t failed; no row for it" >&2
        fi
    fi
done
fi
[ -s "$tsv" ] || { echo "flash.sh: no $tsv to plot" >&2; exit 2; }
command -v gnuplot > /dev/null || { echo "flash.sh: wrote $tsv; gnuplot is not installed (apt-get install gnuplot-nox), so no plot" >&2; exit 2; }
shape=$(awk -F'\t' 'NR == 2 { printf "%s: B %d, H %d, D %d, f32", $9, $6, $7, $8 }' "$tsv")
# One file per variant (gnuplot draws a line through each; a variant absent from the TSV,
# say PyTorch's, is left out of the plot).
split=$(mktemp -d)
trap 'rm -rf "$split" ${logs:+"$logs"}' EXIT
series=()
for v in materialized:7:materialized flash:5:"kiln flash" torch-sdpa:9:"PyTorch SDPA"; do
    name=${v%%:*} rest=${v#*:}
    awk -F'\t' -v n="$name" '$2 == n' "$tsv" > "$split/$name.tsv"
    [ -s "$split/$name.tsv" ] && series+=("$name:$rest")
done
plots() { # plots COLUMN-EXPRESSION: the plot command's list of series
    local p="" s name pt title
    for s in "${series[@]}"; do
        name=${s%%:*} s=${s#*:} pt=${s%%:*} title=${s#*:}
        p="$p${p:+, }'$split/$name.tsv' using 1:$1 with linespoints pt $pt title '$title'"
    done
    echo "$p"
}
plot() { # plot TERMINAL FILE
    gnuplot <<GP
set terminal $1 size 1000,440
set output '$2'
set datafile separator '\t'
set multiplot layout 1,2 title "causal attention, forward + backward ($shape)"
set logscale xy 2
set xlabel 'sequence length T'
set grid
set key top left
set ylabel 'time, ms (median)'
plot $(plots 3)
set ylabel 'peak memory above the inputs, MiB'
plot $(plots '($4 / 1048576)')
unset multiplot
GP
}
plot svg "$out"
plot "pngcairo" "${out%.svg}.png" 2> /dev/null || plot png "${out%.svg}.png"
echo "flash.sh: wrote $out, ${out%.svg}.png and $tsv"
