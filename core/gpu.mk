# core/gpu.mk — the CUDA backend's build additions and `make gpu-check`.
#
#   make gpu-check            on the lent GPU machine: build (unless GPU_CHECK_BUILD=0, for
#                             a build carried from elsewhere), run the core test suite (every
#                             GPU test runs there), run compute-sanitizer memcheck and
#                             racecheck over the CUDA tests, check kiln against PyTorch
#                             (make torch-agree, plots/agree.mk), run the benchmark against
#                             PyTorch eager with TF32 off and on (plots/bench.sh; shape
#                             GPT-2 124M unless GPU_BENCH_FLAGS shrinks it), and print a short
#                             table last.
#                             Logs go to $OUT when it is set, else to $(BUILD)/gpu-check.
#
# The machine has no Criterion: carry its libraries from here first with
#   bash core/mk/carry-criterion.sh .carry/lib
# and the test binaries run with LD_LIBRARY_PATH=.carry/lib (set below). The CUDA kernels
# use cuBLAS for matmul, so every CUDA build links it.
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
	@mkdir -p $(GPU_CHECK_LOGS)
	@set -u; logs=$(GPU_CHECK_LOGS); export LD_LIBRARY_PATH=$(CURDIR)/.carry/lib:$${LD_LIBRARY_PATH:-}; \
	 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $$logs/gpu.txt 2>&1 || echo "no nvidia-smi" > $$logs/gpu.txt; \
	 date -u +%Y-%m-%dT%H:%MZ >> $$logs/gpu.txt; \
	 t0=$$(date +%s); build=skipped; \
	 if [ "$(GPU_CHECK_BUILD)" = 1 ]; then \
	   if $(MAKE) --no-print-directory $(CFG)/test-core $(KILN) > $$logs/build.log 2>&1; then build=ok; else build=FAILED; fi; \
	 fi; t1=$$(date +%s); \
	 KN_TEST_JOBS=$${KN_TEST_JOBS:-8} KN_SUITE_TIMEOUT=$${KN_SUITE_TIMEOUT:-300} bash tests/harness/run-suite.sh core $(CFG)/test-core $$logs > $$logs/suite.txt 2>&1; \
	 suite=$$(tail -n 1 $$logs/suite.txt); t2=$$(date +%s); \
	 gpu=$$(awk '/^ok - cuda_/ { if (/# SKIP/) s++; else p++ } /^not ok - cuda_/ { f++ } END { printf "%d passed, %d failed, %d skipped", p, f, s }' $$logs/core.tap); \
	 if [ -x "$(COMPUTE_SANITIZER)" ] || command -v $(COMPUTE_SANITIZER) >/dev/null 2>&1; then \
	   timeout $(GPU_MEMCHECK_TIMEOUT) $(COMPUTE_SANITIZER) --tool memcheck --target-processes all --error-exitcode 99 --print-limit 20 \
	     $(CFG)/test-core --filter '$(GPU_TEST_FILTER)' -j1 > $$logs/memcheck.log 2>&1; mc=$$?; \
	   mcsum=$$(grep -E 'ERROR SUMMARY' $$logs/memcheck.log | awk '{s += $$4} END {print s + 0}'); \
	   memcheck="exit $$mc, $$mcsum errors"; \
	   timeout $(GPU_MEMCHECK_TIMEOUT) $(COMPUTE_SANITIZER) --tool racecheck --target-processes all --error-exitcode 99 --print-limit 20 \
	     $(CFG)/test-core --filter '$(GPU_TEST_FILTER)' -j1 > $$logs/racecheck.log 2>&1; rc=$$?; \
	   rcsum=$$(grep -E 'ERROR SUMMARY' $$logs/racecheck.log | awk '{s += $$4} END {print s + 0}'); \
	   racecheck="exit $$rc, $$rcsum hazards"; \
	 else memcheck="compute-sanitizer not found"; racecheck=$$memcheck; fi; t3=$$(date +%s); \
	 $(MAKE) --no-print-directory torch-agree GPU_CHECK_BUILD=0 TORCH_AGREE_LOGS=$$logs/agree > $$logs/agree.log 2>&1 \
	   && agree=$$(grep -c '^PASS' $$logs/agree/torch_agree_*.log | awk -F: '{p += $$2} END {printf "%d of 3 checks passed", p}') \
	   || agree="FAILED ($$(grep -h -E '^(FAIL|torch_agree)' $$logs/agree/torch_agree_*.log | head -n 1 | cut -c1-50))"; \
	 worst=$$(grep -h '^PASS' $$logs/agree/torch_agree_gpt2.log 2>/dev/null | grep -o 'worst [^;]*' | head -n 1); \
	 t4=$$(date +%s); \
	 for mode in fp32 tf32; do \
	   KILN=$(KILN) LOGS=$$logs/bench-$$mode BENCH_TIMEOUT=300 bash plots/bench.sh $$([ $$mode = tf32 ] && echo --tf32) \
	     $(GPU_BENCH_FLAGS) > $$logs/bench-$$mode.log 2>&1; \
	 done; t5=$$(date +%s); \
	 cat $$logs/suite.txt; echo; cat $$logs/agree.log | tail -n 5; \
	 for mode in fp32 tf32; do echo; echo "bench $$mode:"; tail -n 5 $$logs/bench-$$mode.log; done; \
	 echo; echo "gpu-check ($$(head -n 1 $$logs/gpu.txt); $$(tail -n 1 $$logs/gpu.txt))"; \
	 printf '  %-22s %-60s %5ss\n' build "$$build" $$((t1 - t0)); \
	 printf '  %-22s %-60s %5ss\n' "core suite" "$$suite" $$((t2 - t1)); \
	 printf '  %-22s %-60s\n' "GPU tests (cuda_*)" "$$gpu"; \
	 printf '  %-22s %-60s %5ss\n' "memcheck (GPU tests)" "$$memcheck" $$((t3 - t2)); \
	 printf '  %-22s %-60s\n' "racecheck (GPU tests)" "$$racecheck"; \
	 printf '  %-22s %-60s %5ss\n' "PyTorch agreement" "$$agree $$worst" $$((t4 - t3)); \
	 for mode in fp32 tf32; do \
	   r=$$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); k=d["kiln"]; t=d["torch"].get("sdpa"); print("kiln %.0f tok/s, PyTorch eager %s tok/s: ratio %s" % (k["tokens_per_s"], "%.0f" % t["tokens_per_s"] if t else "-", d.get("ratio_sdpa", "-")))' \
	       $$logs/bench-$$mode/bench_summary.json 2>/dev/null || echo "FAILED (see $$logs/bench-$$mode.log)"); \
	   printf '  %-22s %-60s\n' "bench $$mode" "$$r"; \
	 done; \
	 printf '  %-22s %-60s %5ss\n' "" "(both benches)" $$((t5 - t4)); \
	 echo "  logs: $$logs"

# make bench-gpu [BENCH_FLAGS="--layers 2 --steps 5"]: kiln eager fp32 against PyTorch eager
# fp32 on the lent GPU (plots/bench.sh: `kiln bench` and plots/bench_torch.py in one call,
# a table with the tokens/s ratio last). Default shape: GPT-2 124M, batch 8. Builds kiln
# first unless GPU_CHECK_BUILD=0; logs go where gpu-check's go.
BENCH_FLAGS ?=
.PHONY: bench-gpu
bench-gpu: $(if $(filter 1,$(GPU_CHECK_BUILD)),$(KILN))
	@mkdir -p $(GPU_CHECK_LOGS)
	@KILN=$(KILN) LOGS=$(GPU_CHECK_LOGS) bash plots/bench.sh $(BENCH_FLAGS)

# `kiln bench` on the CPU at a tiny shape, in `make test` (the GPU side runs in gpu-check).
TEST_STEPS += test-step-bench-cli
.PHONY: test-step-bench-cli
test-step-bench-cli:
	@$(MAKE) --no-print-directory $(KILN) IMPL=$(DEFAULT_IMPL) >/dev/null
	@bash tests/harness/record.sh $(ALL_RESULTS) bench-cli bash tests/core/test_cli_bench.sh $(BUILD)/$(DEFAULT_IMPL)/kiln
