#!/usr/bin/env bash
# test_scaling.sh KILN — `make scaling`'s driver (plots/scaling.sh, plots/scaling.py):
#   1. plots/scaling.py on a planted results tree (one dist-gpu summary, a tp pair, a
#      pipeline log, with known numbers): every row in the tables with its folder and card,
#      the tp efficiency computed (speed-up / N), the figures drawn;
#   2. on a tree with no kept results: each section says so, nothing invented;
#   3. the quick driver end to end on CPU ranks (SCALING_QUICK=1): ten CPU rows (ddp, zero1,
#      zero2, tp, pp on 1 and 2 ranks) with positive rates, and a kiln that fails stops it
#      with the failing run named.
set -eu
kiln=$(realpath "${1:?usage: test_scaling.sh KILN}")
here=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# 1. a planted tree
r=$tmp/root/plots/results/h100x4-2030-01-02
mkdir -p "$r" "$tmp/o1"
cat > "$r/summary.txt" <<'EOF'
dist-gpu: 4 GPU(s): 4 NVIDIA H100 80GB HBM3; 2030-01-02T10:00Z
scaling: 1 GPU alone 100000 tokens/s, peak 15.08 GB (B=8, T=1024, TF32)
scaling: DDP on 2 GPU(s) 190000 tokens/s, efficiency 0.950, peak 15.08 GB on rank 0; 0.60 ms of communication after the backward
scaling: DDP on 4 GPU(s) 360000 tokens/s, efficiency 0.900, peak 15.08 GB on rank 0; 1.23 ms of communication after the backward
scaling: zero2 on 4 GPU(s) 350000 tokens/s, peak 13.96 GB on rank 0
memory per GPU, zero2 on 4 GPU(s) (held / distributed.md's table, bytes): parameters 1/1; gradients 2/2; optimizer state 3/3; total 871078656/871078656
comm: 1048576 floats all_reduce: kiln 50.00 GB/s, NCCL via PyTorch 100.00 GB/s, ratio 0.500
EOF
printf 'kiln train: GPT 12 layers, width 768, 12 heads\n  steady rate           300000 tokens/s over the last 27 steps\n' > "$r/tp_eff1.txt"
printf '  tensor parallel: tp=2 ranks (nccl)\nkiln train: GPT 12 layers, width 768, 12 heads\n  steady rate           450000 tokens/s over the last 27 steps\n' > "$r/tp_eff2.txt"
printf '  pipeline bubble       20.0%% measured in the last step (1 - busy / (p x makespan)); (p-1)/(m+p-1) = 15.8%%\n' > "$r/bubble-1f1b.txt"
printf '# strategy\tranks\tglobal_batch\ttok_s\nddp\t1\t8\t1000\nddp\t2\t16\t1500\n' > "$tmp/o1/cpu.tsv"
python3 "$here/plots/scaling.py" "$tmp/o1" "$tmp/root" > "$tmp/o1.log" 2>&1 || { cat "$tmp/o1.log"; fail "scaling.py failed on the planted tree"; }
md=$tmp/o1/scaling.md
want() { grep -qF -- "$1" "$md" || fail "scaling.md lacks: $1"; }
want '| `h100x4-2030-01-02` (4 NVIDIA H100 80GB HBM3, 2030-01-02) | DDP | 4 | 360000 | 0.900 |'
want '| `h100x4-2030-01-02` (4 NVIDIA H100 80GB HBM3, 2030-01-02) | zero2 | 4 | 350000 | - |'
want '| zero2 | 4 | 871.1 | 871.1 |'
want '| 1048576 | all_reduce | 50.0 | 100.0 | 0.50 |'
want '| 12 layers x 768 | 2 | 300000 | 450000 | 0.75 |'
want '| 1f1b | 20.0% | 15.8% |'
want '| ddp | 2 | 16 | 1500 | 1.50 |'
for f in dp.png memory.png comm.png; do [ -s "$tmp/o1/$f" ] || fail "no $f drawn from the planted tree"; done
echo "scaling.py: the planted tree's rows, efficiencies and figures"

# 2. no kept results: said, not invented; no CPU table: refused
mkdir -p "$tmp/empty/plots/results" "$tmp/o2"
cp "$tmp/o1/cpu.tsv" "$tmp/o2/"
python3 "$here/plots/scaling.py" "$tmp/o2" "$tmp/empty" > /dev/null 2>&1 || fail "scaling.py failed with no kept results"
for s in "No data-parallel GPU run" "No memory accounting" "No collective measurement" "No tensor-parallel GPU run" "No pipeline GPU run"; do
    grep -q "$s" "$tmp/o2/scaling.md" || fail "an empty results tree does not say: $s"
done
rm "$tmp/o2/cpu.tsv"
if python3 "$here/plots/scaling.py" "$tmp/o2" "$tmp/empty" > "$tmp/o2.log" 2>&1; then fail "scaling.py passed without a CPU measurement"; fi
grep -q "no CPU measurement" "$tmp/o2.log" || fail "no clear message without cpu.tsv: $(cat "$tmp/o2.log")"
echo "scaling.py: an empty tree says so; a missing CPU measurement is refused"

# 3. the quick driver on CPU ranks
SCALING_QUICK=1 KILN=$kiln bash "$here/plots/scaling.sh" "$tmp/o3" > "$tmp/o3.log" 2>&1 || { cat "$tmp/o3.log"; fail "scaling.sh failed"; }
python3 - "$tmp/o3/cpu.tsv" <<'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if not l.startswith("#")]
got = [(r[0], r[1]) for r in rows]
want = [(s, n) for s in ("ddp", "zero1", "zero2", "tp", "pp") for n in ("1", "2")]
assert got == want, "rows %s, want %s" % (got, want)
for r in rows:
    assert float(r[3]) > 0, r
PY
grep -q "^| pp | 2 | 16 |" "$tmp/o3/scaling.md" || fail "the CPU table lacks pp on 2 ranks"
printf '#!/bin/sh\necho "kiln: planted failure" >&2\nexit 1\n' > "$tmp/badkiln"
chmod +x "$tmp/badkiln"
if SCALING_QUICK=1 KILN=$tmp/badkiln bash "$here/plots/scaling.sh" "$tmp/o4" > "$tmp/o4.log" 2>&1; then fail "a failing kiln passed"; fi
grep -q "kiln train (ddp on 1 ranks) failed" "$tmp/o4.log" || fail "the failing run is not named: $(cat "$tmp/o4.log")"
echo "scaling.sh: ten CPU rows measured; a failing run is named"
