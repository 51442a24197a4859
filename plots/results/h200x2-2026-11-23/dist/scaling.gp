# gnuplot scaling.gp — kiln DDP over NCCL on 2 H200s (plots/dist-gpu.sh), with PyTorch DDP
# (the reference script, bf16 autocast) from the same machine: scaling.svg and scaling.png.
set terminal svg size 760,460 dynamic font "sans,12"
set output "scaling.svg"
set title "GPT-2 124M shape, B=8 per GPU, T=1024: tokens/s on 1 and 2 H200s (2026-11-23)"
set xlabel "GPUs"; set ylabel "tokens/s"; set key left top; set grid
set xtics 1; set xrange [0.7:2.3]; set yrange [0:*]
set datafile separator "\t"
plot "scaling.tsv" using 1:2 with linespoints lw 2 pt 7 title "kiln DDP, fp32 with TF32", \
     "scaling.tsv" using 1:($1 * 129096) with lines dt 2 lc rgb "gray" title "kiln linear (N x 1 GPU)", \
     "torch.tsv" using 1:2 with linespoints lw 2 pt 5 title "PyTorch DDP eager, bf16 autocast", \
     "torch.tsv" using 1:3 with linespoints lw 2 pt 9 title "PyTorch DDP torch.compile, bf16 autocast"
set terminal pngcairo size 760,460 font "sans,11"
set output "scaling.png"
replot
