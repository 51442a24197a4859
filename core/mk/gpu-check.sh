#!/usr/bin/env bash
# gpu-check.sh LOGS CFG KILN — the body of `make gpu-check` (core/gpu.mk) on the lent GPU
# machine: the core test suite (every GPU test runs there), kiln against PyTorch
# (make torch-agree), the benchmark against PyTorch eager with TF32 off and on
# (plots/bench.sh, with a per-op profile of one more kiln step written to
# LOGS/profile-MODE.tsv, plotted by plots/profile.sh where gnuplot exists), then
# compute-sanitizer memcheck and racecheck over the GPU tests; a short table last. Each
# part appends its row to LOGS/table.txt as soon as it ends, so a run cut short still
# leaves the rows it finished (the slow sanitizers go last).
# Environment: GPU_CHECK_BUILD (1: build first), GPU_TEST_FILTER, GPU_MEMCHECK_TIMEOUT,
# GPU_BENCH_FLAGS, COMPUTE_SANITIZER, MAKE.
set -u
logs=$1 cfg=$2 kiln=$3
mkdir -p "$logs"
table=$logs/table.txt
: > "$table"
# Criterion: this machine has none; `bash core/mk/carry-criterion.sh` run where it is
# installed put its headers and libraries in .carry/ (core/carry.mk builds with them and
# gives the test binaries an RPATH there). LD_LIBRARY_PATH is kept for the test binaries
# only, for binaries built elsewhere (GPU_CHECK_BUILD=0); PyTorch never sees the copies.
carried=$PWD/.carry/lib
if ! echo '#include <criterion/criterion.h>' | ${CC:-cc} -E -x c - > /dev/null 2>&1 &&
   [ ! -f .carry/include/criterion/criterion.h ]; then
    echo "gpu-check: no Criterion here and none carried: where it is installed, run"
    echo "    bash core/mk/carry-criterion.sh"
    echo "and carry .carry with the tree (README.md, GPU)."
    exit 1
fi
row() { printf '  %-22s %-66s %5ss\n' "$1" "$2" "$3" | tee -a "$table" > /dev/null; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$logs/gpu.txt" 2>&1 \
    || echo "no nvidia-smi" > "$logs/gpu.txt"
date -u +%Y-%m-%dT%H:%MZ >> "$logs/gpu.txt"

t=$(date +%s)
if [ "${GPU_CHECK_BUILD:-1}" = 1 ]; then
    if ${MAKE:-make} --no-print-directory "$cfg/test-core" "$kiln" > "$logs/build.log" 2>&1; then b=ok; else b=FAILED; fi
    row build "$b" $(( $(date +%s) - t ))
fi

t=$(date +%s)
LD_LIBRARY_PATH=$carried:${LD_LIBRARY_PATH:-} KN_TEST_JOBS=${KN_TEST_JOBS:-8} KN_SUITE_TIMEOUT=${KN_SUITE_TIMEOUT:-300} \
    bash tests/harness/run-suite.sh core "$cfg/test-core" "$logs" > "$logs/suite.txt" 2>&1
row "core suite" "$(tail -n 1 "$logs/suite.txt")" $(( $(date +%s) - t ))
row "GPU tests (cuda_*)" "$(awk '/^ok - cuda_/ { if (/# SKIP/) s++; else p++ } /^not ok - cuda_/ { f++ }
    END { printf "%d passed, %d failed, %d skipped", p, f, s }' "$logs/core.tap")" ""

t=$(date +%s)
if ${MAKE:-make} --no-print-directory torch-agree GPU_CHECK_BUILD=0 KILN="$kiln" TORCH_AGREE_LOGS="$logs/agree" \
        > "$logs/agree.log" 2>&1; then
    a="$(grep -l '^PASS' "$logs"/agree/torch_agree_*.log | wc -l) of 4 passed;"
    a="$a $(grep -h '^PASS' "$logs/agree/torch_agree_gpt2.log" | grep -o "worst '[^']*' relative error [^ ]*")"
else
    a="FAILED: $(grep -h -E '^(FAIL|torch_agree)' "$logs"/agree/torch_agree_*.log | head -n 1 | cut -c1-52)"
fi
row "PyTorch agreement" "$a" $(( $(date +%s) - t ))

for mode in fp32 tf32; do
    t=$(date +%s)
    KILN=$kiln LOGS=$logs/bench-$mode BENCH_TIMEOUT=300 bash plots/bench.sh $([ $mode = tf32 ] && echo --tf32) \
        --profile 30 --profile-out "$logs/profile-$mode.tsv" ${GPU_BENCH_FLAGS:-} > "$logs/bench-$mode.log" 2>&1
    if command -v gnuplot > /dev/null && [ -s "$logs/profile-$mode.tsv" ]; then
        bash plots/profile.sh "$logs/profile-$mode.tsv" "$logs/profile-$mode.svg" \
            "kiln eager GPT-2 124M training step, fp32 ($mode matmuls), per-op GPU time" > /dev/null 2>&1 || true
    fi
    r=$("${PYTHON:-python3}" - "$logs/bench-$mode/bench_summary.json" <<'PY' 2>/dev/null || echo "FAILED (see bench-$mode.log)"
import json, sys
d = json.load(open(sys.argv[1]))
k, t = d["kiln"], d["torch"].get("sdpa")
m = d.get("kiln_modes", {})
modes = ", ".join("%s %.0f" % (n, r["tokens_per_s"]) for n, r in m.items())
print("kiln tok/s %s; PyTorch eager %s: ratio %s" % (modes or "%.0f" % k["tokens_per_s"],
      "%.0f" % t["tokens_per_s"] if t else "-", d.get("ratio_sdpa", "-")))
PY
)
    row "bench $mode" "$r" $(( $(date +%s) - t ))
done

# data parallelism over NCCL on this machine's GPUs (one rank per GPU): equality with one
# GPU, the scaling row, kiln's collectives against NCCL's own, faults (plots/dist-gpu.sh)
# (GPU_CHECK_DIST=0 leaves it out)
if [ "${GPU_CHECK_DIST:-1}" = 1 ]; then
    t=$(date +%s)
    KILN=$kiln STEPS=20 timeout 400 bash plots/dist-gpu.sh "$logs/dist" > "$logs/dist.log" 2>&1
    d="$(grep -c '^equality.*: same' "$logs/dist/summary.txt" 2>/dev/null) same, $(grep -c '^equality.*FAILED' "$logs/dist/summary.txt" 2>/dev/null) failed"
    row "data parallel (NCCL)" "equality runs: $d; $(grep -o 'DDP on [0-9]* GPU(s) [0-9]* tokens/s, efficiency [0-9.]*' "$logs/dist/summary.txt" | tail -n 1)" $(( $(date +%s) - t ))
fi
san=${COMPUTE_SANITIZER:-compute-sanitizer}
for tool in memcheck racecheck; do
    t=$(date +%s)
    if [ -x "$san" ] || command -v "$san" > /dev/null 2>&1; then
        LD_LIBRARY_PATH=$carried:${LD_LIBRARY_PATH:-} timeout "${GPU_MEMCHECK_TIMEOUT:-240}" "$san" --tool $tool --target-processes all --error-exitcode 99 \
            --print-limit 20 "$cfg/test-core" --filter "${GPU_TEST_FILTER:-cuda_*/*}" -j1 > "$logs/$tool.log" 2>&1
        rc=$?
        n=$(grep -E 'ERROR SUMMARY' "$logs/$tool.log" | awk '{s += $4} END {print s + 0}')
        r="exit $rc, $n $([ $tool = memcheck ] && echo errors || echo hazards)"
        [ $rc -eq 124 ] && r="$r (timed out after ${GPU_MEMCHECK_TIMEOUT:-240} s)"
    else
        r="compute-sanitizer not found"
    fi
    row "$tool (GPU tests)" "$r" $(( $(date +%s) - t ))
done

cat "$logs/suite.txt"; echo
tail -n 5 "$logs/agree.log"
for mode in fp32 tf32; do echo; echo "bench $mode:"; tail -n 6 "$logs/bench-$mode.log"; done
echo; echo "gpu-check ($(head -n 1 "$logs/gpu.txt"); $(tail -n 1 "$logs/gpu.txt"))"
cat "$table"
echo "  logs: $logs"
