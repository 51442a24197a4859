#!/usr/bin/env bash
# bench_llmc.sh DIR [FLAGS...] — llm.c's GPT-2 training step as an anchor row of plots/bench.sh.
#
# llm.c (karpathy/llm.c, `train_gpt2cu`: GPT-2 in hand-written C/CUDA, bf16, cuDNN flash
# attention, fused classifier, fused AdamW, GELU recomputed in the backward by default) is the
# C/CUDA bar a compiler has to clear. Its code never enters this repository: DIR holds, on the
# GPU machine, a checkout of llm.c (DIR/llm.c) and the include/ folder of NVIDIA's
# cudnn-frontend (DIR/cudnn-frontend/include), copied there from the development machine
# (the GPU machine has no internet), e.g. from the repository root:
#     echo /.anchors/ >> .git/info/exclude; mkdir -p .anchors/llmc/cudnn-frontend
#     git -C <llm.c checkout> archive HEAD | tar -x -C .anchors/llmc --one-top-level=llm.c
#     git -C <cudnn-frontend checkout> archive HEAD include | tar -x -C .anchors/llmc/cudnn-frontend
# and then `make bench-gpu LLMC_DIR=.anchors/llmc` there (the device call carries .anchors).
#
# What it does: takes cuDNN from the machine's pip package (nvidia-cudnn, which PyTorch
# brings), builds train_gpt2cu once (USE_CUDNN=1, one GPU; two edits CUDA 13 needs: the
# cudaMemAdvise location is a struct, and the newer cudnn-frontend links NVRTC and the driver),
# writes random uint16 tokens in llm.c's data format, runs WARMUP + STEPS steps at the
# shape FLAGS give (--batch, --context, --layers: llm.c's GPT-2 depths fix width and heads;
# --warmup, --steps as kiln bench's), and prints a JSON line in bench.sh's format: the median
# of the timed steps' ms (llm.c times each step with CUDA events, from the batch's upload to
# the AdamW update), tokens/s from that median, and peak_mem_mib = llm.c's own "device
# memory usage" (cudaMemGetInfo after its allocations: CUDA context and cuDNN workspace
# included, so a little above an allocator's peak). Exits 2 with a line saying why when a
# shape is one llm.c cannot build.
set -eu
[ $# -ge 1 ] || { echo "usage: bench_llmc.sh DIR [--batch B --context T --layers L --width W --steps N --warmup N]" >&2; exit 2; }
dir=$(cd "$1" && pwd) || exit 2; shift
B=8 T=1024 L=12 W=768 STEPS=10 WARMUP=3 PREC=bf16
while [ $# -gt 0 ]; do
    case "$1" in
        --batch) B=$2; shift ;;
        --context) T=$2; shift ;;
        --layers) L=$2; shift ;;
        --width) W=$2; shift ;;
        --steps) STEPS=$2; shift ;;
        --warmup) WARMUP=$2; shift ;;
        --precision) PREC=$2; shift ;;
        --tf32 | --flash | --hfuse | --cuda-graph) ;;
        --heads | --vocab | --seed | --mode | --remat | --profile) shift ;;
        *) ;;
    esac
    shift
done
[ "$PREC" = bf16 ] || { echo "bench_llmc.sh: llm.c trains in bf16 only (asked: $PREC)" >&2; exit 2; }
case "$L:$W" in
    6:384 | 12:768 | 24:1024 | 36:1280 | 48:1600) ;;
    *) echo "bench_llmc.sh: llm.c builds GPT-2 depths 6/12/24/36/48 with widths 384/768/1024/1280/1600; asked $L layers, width $W" >&2; exit 2 ;;
esac
[ "$T" -le 1024 ] || { echo "bench_llmc.sh: llm.c's GPT-2 context is 1024 (asked $T)" >&2; exit 2; }
[ -f "$dir/llm.c/train_gpt2.cu" ] && [ -d "$dir/cudnn-frontend/include" ] ||
    { echo "bench_llmc.sh: $dir needs llm.c/ and cudnn-frontend/include/ (see this script's header)" >&2; exit 2; }

if [ ! -x "$dir/llm.c/train_gpt2cu" ]; then
    cudnn=$(python3 -c "import nvidia.cudnn as m; print(list(m.__path__)[0])") ||
        { echo "bench_llmc.sh: no cuDNN: pip's nvidia-cudnn is not importable" >&2; exit 2; }
    cuda=${CUDA_HOME:-/usr/local/cuda}
    ln -sf "$cudnn"/include/cudnn*.h "$cuda/include/"
    for f in "$cudnn"/lib/libcudnn*.so.*; do ln -sf "$f" "$cuda/lib64/"; done
    ln -sf "$cudnn/lib/libcudnn.so.9" "$cuda/lib64/libcudnn.so"
    echo "$cuda/lib64" > /etc/ld.so.conf.d/zz-kiln-cudnn.conf && ldconfig
    (
        cd "$dir/llm.c"
        sed -i 's|cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)|cudaMemAdviseSetPreferredLocation, cudaMemLocation{cudaMemLocationTypeHost, 0})|' llmc/cuda_utils.cuh
        sed -i 's|^    NVCC_LDFLAGS += -lcudnn$|    NVCC_LDFLAGS += -lcudnn -lnvrtc -lcuda|' Makefile
        ln -sfn ../cudnn-frontend cudnn-frontend
        make train_gpt2cu USE_CUDNN=1 NO_MULTI_GPU=1 -j"$(nproc)" > ../build.log 2>&1
    ) || { tail -20 "$dir/build.log"; echo "bench_llmc.sh: building train_gpt2cu failed ($dir/build.log)" >&2; exit 1; }
fi

# Random tokens in llm.c's format: a 256-int32 header (magic 20240520, version 1, count), uint16s.
python3 - "$dir" <<'PY'
import os, sys
import numpy as np
d = os.path.join(sys.argv[1], "data"); os.makedirs(d, exist_ok=True)
rng = np.random.default_rng(0)
for name, n in (("train", 20_000_000), ("val", 1_000_000)):
    path = os.path.join(d, name + ".bin")
    if os.path.exists(path):
        continue
    h = np.zeros(256, dtype=np.int32); h[0] = 20240520; h[1] = 1; h[2] = n
    with open(path, "wb") as f:
        f.write(h.tobytes()); f.write(rng.integers(0, 50257, n, dtype=np.uint16).tobytes())
PY

log="$dir/run_b${B}_t${T}_l${L}.log"
echo "== llm.c train_gpt2cu -e d$L -b $B -t $T -x $((WARMUP + STEPS)) (bf16, cuDNN attention)"
(cd "$dir/llm.c" && ./train_gpt2cu -i ../data/train.bin -j ../data/val.bin -e "d$L" -b "$B" -t "$T" \
    -x $((WARMUP + STEPS)) -v 100000 -s 0 > "$log" 2>&1) ||
    { tail -20 "$log"; echo "bench_llmc.sh: train_gpt2cu failed ($log)" >&2; exit 1; }
grep -E "^step" "$log" | tail -3
python3 - "$log" "$B" "$T" "$L" "$W" "$WARMUP" "$STEPS" <<'PY'
import json, re, statistics, sys
log, B, T, L, W, warmup, steps = sys.argv[1], *map(int, sys.argv[2:])
ms, mem, gpu, nparams = [], None, "", 0
for line in open(log, errors="replace"):
    m = re.match(r"step\s+(\d+)/\d+ \|.*\| ([0-9.]+) ms \|", line)
    if m:
        ms.append(float(m.group(2)))
    m = re.search(r"device memory usage: (\d+) MiB", line)
    if m:
        mem = int(m.group(1))
    m = re.match(r"\| device\s+\| (.*?)\s*\|", line)
    if m:
        gpu = m.group(1)
    m = re.match(r"\| num_parameters\s+\| (\d+)", line)
    if m:
        nparams = int(m.group(1))
timed = ms[warmup:]
if not timed:
    sys.exit("bench_llmc.sh: no timed step lines in " + log)
med = statistics.median(timed)
res = {"impl": "llm.c-bf16", "device": gpu, "vocab": 50304, "context": T, "layers": L, "width": W,
       "heads": W // 64, "batch": B, "params": nparams, "warmup": warmup, "steps": len(timed),
       "step_ms_median": round(med, 3), "step_ms_min": round(min(timed), 3), "step_ms_max": round(max(timed), 3),
       "tokens_per_s": round(B * T / (med / 1e3), 1), "fwd_ms": None, "optim_ms": None,
       "peak_mem_mib": mem, "peak_mem_note": "cudaMemGetInfo after llm.c's allocations (context included)",
       "precision": "bf16", "recompute": "gelu (llm.c's default)", "attention": "cuDNN"}
print(f"  llm.c: step {med:.2f} ms median of {len(timed)} -> {res['tokens_per_s']:.0f} tokens/s; memory {mem} MiB")
print(json.dumps(res), flush=True)
PY
