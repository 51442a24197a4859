# plots/agree.mk — kiln against a reference framework: `kiln dump` (core/cli/dump.c) writes
# a GPT's weights, batches, logits, loss, gradients and AdamW losses; plots/torch_agree.py
# rebuilds the same GPT and compares every tensor (norm-wise relative error, threshold
# 1e-4). Included by the top Makefile.
#
#   make torch-agree          on the GPU machine (PyTorch there): four checks, each kiln
#                             and PyTorch fp32 (TF32 off) on the same weights and batches:
#                               small   vocab 512, context 64, 2 layers, width 128, 4 heads,
#                                       batch 4, 10 AdamW steps, kiln on the GPU
#                               cpu     the same shape with kiln on the CPU (PyTorch on the GPU)
#                               gpt2    vocab 50304, context 256, 4 layers, width 768,
#                                       12 heads, batch 4, 10 steps, kiln on the GPU
#                               gpt2-compiled  the same with kiln's compiled program
#                                       (the generated CUDA kernels; logits node by node)
#                             Builds kiln first unless GPU_CHECK_BUILD=0; KILN=path picks
#                             another binary; TORCH_AGREE_FLAGS adds flags to every run
#                             (e.g. --device cuda:1). Logs go to $OUT when it is set, else to
#                             $(BUILD)/torch-agree. Fails when any check fails.
#
# Test step (make test): torch-agree-numpy, the same script without PyTorch (float64 numpy
# forward pass and finite differences) on a tiny GPT on the CPU, plus `kiln dump`'s usage
# errors (tests/core/test_nn_dump_cli.sh). Needs numpy (Debian: python3-numpy, which
# `make deps` installs); torch-agree runs the interpreter that has torch
# (core/mk/python.sh torch numpy: on the GPU machine, the python3 on the PATH).

GPU_CHECK_BUILD ?= 1
TORCH_AGREE_LOGS ?= $(if $(OUT),$(OUT),$(BUILD)/torch-agree)
TORCH_AGREE_FLAGS ?=
TORCH_AGREE_SMALL := --vocab 512 --context 64 --layers 2 --width 128 --heads 4 --batch 4 --steps 10
TORCH_AGREE_GPT2 := --vocab 50304 --context 256 --layers 4 --width 768 --heads 12 --batch 4 --steps 10

.PHONY: torch-agree test-step-torch-agree
torch-agree: $(if $(filter 1,$(GPU_CHECK_BUILD)),$(KILN))
	@mkdir -p $(TORCH_AGREE_LOGS)
	@set -u; logs=$(TORCH_AGREE_LOGS); export PYTHONUNBUFFERED=1; fails=0; summary=""; \
	 py=$$(bash core/mk/python.sh torch numpy) || py=$(PYTHON); \
	 for run in "small|$(TORCH_AGREE_SMALL)" "cpu|$(TORCH_AGREE_SMALL) --kiln-device cpu" \
	            "gpt2|$(TORCH_AGREE_GPT2)" "gpt2-compiled|$(TORCH_AGREE_GPT2) --kiln-mode compiled"; do \
	   name=$${run%%|*}; flags=$${run#*|}; \
	   echo "== torch-agree $$name: $$py plots/torch_agree.py --kiln $(KILN) $$flags $(TORCH_AGREE_FLAGS)"; \
	   $$py plots/torch_agree.py --kiln $(KILN) $$flags $(TORCH_AGREE_FLAGS) \
	     > $$logs/torch_agree_$$name.log 2>&1; rc=$$?; \
	   cat $$logs/torch_agree_$$name.log; \
	   [ $$rc -eq 0 ] || fails=$$((fails + 1)); \
	   verdict=$$(grep -E '^(PASS|FAIL)' $$logs/torch_agree_$$name.log | tail -n 1); \
	   [ -n "$$verdict" ] || verdict=$$(tail -n 1 $$logs/torch_agree_$$name.log); \
	   summary="$$summary$$(printf '  %-6s exit %d  %s' $$name $$rc "$$(echo "$$verdict" | cut -c1-150)")\n"; \
	 done; \
	 echo; echo "torch-agree (logs: $$logs)"; printf '%b' "$$summary"; [ $$fails -eq 0 ]

# $(PYTHON) is the interpreter with numpy (core/mk/python.sh); `make test` has run
# core/mk/deps.sh first, so a machine where none has numpy FAILS this step (the script
# says so) rather than skipping the float64 reference check.
test-step-torch-agree:
	@$(MAKE) --no-print-directory $(KILN) IMPL=$(DEFAULT_IMPL) >/dev/null
	@bash tests/harness/record.sh $(ALL_RESULTS) torch-agree-numpy bash tests/core/test_nn_dump_cli.sh \
	   $(BUILD)/$(DEFAULT_IMPL)/kiln

TEST_STEPS += test-step-torch-agree
