# core/gpu.mk — the CUDA backend's build additions and `make gpu-check`.
#
#   make gpu-check            on the lent GPU machine (core/mk/gpu-check.sh): build (unless
#                             GPU_CHECK_BUILD=0, for a build carried from elsewhere), run the
#                             core test suite (every GPU test runs there), check kiln against
#                             PyTorch (make torch-agree, plots/agree.mk), run the benchmark
#                             against PyTorch eager with TF32 off and on (plots/bench.sh; the
#                             GPT-2 124M shape unless GPU_BENCH_FLAGS shrinks it), then
#                             compute-sanitizer memcheck and racecheck over the GPU tests
#                             (slowest, so last), and print a short table last.
#                             Logs go to $OUT when it is set, else to $(BUILD)/gpu-check.
#
# The machine has no Criterion (neither headers nor library): carry both from here first,
#   bash core/mk/carry-criterion.sh          (writes .carry/include and .carry/lib)
# with .carry travelling with the tree; core/carry.mk builds the tests with them. The CUDA
# kernels use cuBLAS for matmul, so every CUDA build links it.
#
# memcheck runs the Criterion binary, which forks one child per test: compute-sanitizer
# follows forked children (checked on an H100, 2026-11-22: an out-of-bounds write in a
# forked child was reported) and prints one ERROR SUMMARY for the whole process tree.
# (cuBLAS is linked into every CUDA build by the top Makefile.)


GPU_CHECK_BUILD ?= 1
GPU_CHECK_LOGS ?= $(if $(OUT),$(OUT),$(BUILD)/gpu-check)
COMPUTE_SANITIZER ?= $(firstword $(wildcard $(CUDA_HOME)/bin/compute-sanitizer) compute-sanitizer)
GPU_TEST_FILTER ?= cuda_*/*
GPU_MEMCHECK_TIMEOUT ?= 240
GPU_BENCH_FLAGS ?=

.PHONY: gpu-check
gpu-check:
	@GPU_CHECK_BUILD=$(GPU_CHECK_BUILD) GPU_TEST_FILTER='$(GPU_TEST_FILTER)' GPU_MEMCHECK_TIMEOUT=$(GPU_MEMCHECK_TIMEOUT) \
	 GPU_BENCH_FLAGS='$(GPU_BENCH_FLAGS)' COMPUTE_SANITIZER=$(COMPUTE_SANITIZER) MAKE='$(MAKE)' \
	 bash core/mk/gpu-check.sh $(GPU_CHECK_LOGS) $(CFG) $(KILN)

# make bench-gpu [BENCH_FLAGS="--layers 2 --steps 5"]: the full table on the lent GPU, in one
# call (plots/bench.sh): kiln node by node (TF32), kiln compiled in fp32, TF32 and bf16,
# kiln's best configuration (compiled, flash attention, the q/k/v products merged by hfuse,
# one CUDA graph) in TF32 and bf16, the same with --remat selective in bf16 ("lean": the
# memory-saving row),
# PyTorch eager (SDPA) in TF32 and bf16, torch.compile bf16, all with fused AdamW, and llm.c's train_gpt2cu in bf16 when
# LLMC_DIR names its checkouts (plots/bench_llmc.sh), each row with its tokens/s, peak memory
# and compile seconds, then the ratio of every kiln row to every anchor row and kiln's
# fastest over the fastest anchor, by name.
# Default shape: GPT-2 124M, batch 8. BENCH_RUNS picks other rows (plots/bench.sh says how);
# KILN_MODES / TORCH_RUNS set in the environment keep the older two-list form. Builds kiln
# first unless GPU_CHECK_BUILD=0; logs go where gpu-check's go.
BENCH_FLAGS ?=
BENCH_FULL := kiln/interp/tf32 kiln/compiled/fp32 kiln/compiled/tf32 kiln/best/tf32 kiln/compiled/bf16 \
              kiln/lean/bf16 kiln/best/bf16 torch/sdpa/tf32 torch/sdpa/bf16 torch/compile/bf16 \
              llmc/cudnn/bf16
# torch.compile's max-autotune-no-cudagraphs mode (torch/compile-autotune/bf16) is not in the
# default table: on an H100 (2026-11-27) its autotuning ran past 300 s without reaching a step.
# Add it with BENCH_RUNS='... torch/compile-autotune/bf16' and BENCH_TIMEOUT of 900 or more.
LLMC_DIR ?=
BENCH_RUNS ?= $(if $(KILN_MODES)$(TORCH_RUNS),,$(BENCH_FULL))
.PHONY: bench-gpu
bench-gpu: $(if $(filter 1,$(GPU_CHECK_BUILD)),$(KILN))
	@mkdir -p $(GPU_CHECK_LOGS)
	@KILN=$(KILN) LOGS=$(GPU_CHECK_LOGS) LLMC_DIR='$(LLMC_DIR)' BENCH_RUNS='$(BENCH_RUNS)' bash plots/bench.sh $(BENCH_FLAGS)

# `kiln bench` on the CPU at a tiny shape, in `make test` (the GPU side runs in gpu-check).
TEST_STEPS += test-step-bench-cli
.PHONY: test-step-bench-cli
test-step-bench-cli:
	@$(MAKE) --no-print-directory $(KILN) IMPL=$(DEFAULT_IMPL) >/dev/null
	@bash tests/harness/record.sh $(ALL_RESULTS) bench-cli bash tests/core/test_cli_bench.sh $(BUILD)/$(DEFAULT_IMPL)/kiln

# plots/profile.sh on the H100 profile kept under plots/results, in `make test`.
TEST_STEPS += test-step-profile-plot
.PHONY: test-step-profile-plot
test-step-profile-plot:
	@bash tests/harness/record.sh $(ALL_RESULTS) profile-plot bash tests/core/test_plot_profile.sh

# plots/maxbatch.sh's doubling and bisection with a stand-in for kiln, in `make test` (the
# real search runs on the lent GPU: `bash plots/maxbatch.sh`).
TEST_STEPS += test-step-maxbatch
.PHONY: test-step-maxbatch
test-step-maxbatch:
	@bash tests/harness/record.sh $(ALL_RESULTS) maxbatch bash tests/core/test_maxbatch.sh
