# plots/infer.mk — the inference benchmark (kiln bench-infer, core/cli/bench_infer.c) and its
# test step.
#
#   make bench-infer          kiln bench-infer on BENCH_INFER_DEVICE (cpu: the small model;
#                             cuda: GPT-2 124M), and where torch imports and a GPU is there,
#                             plots/bench_infer_torch.py eager and torch.compile on the same
#                             workloads; then the ratios (plots/bench_infer_compare.py). JSON
#                             under BENCH_INFER_OUT. BENCH_INFER_FLAGS go to both (e.g.
#                             "--scale 0.25 --requests 2"); BENCH_INFER_KILN to kiln only
#                             (e.g. "--passes autocast:bf16"), BENCH_INFER_TORCH to torch only
#                             (e.g. "--dtype bf16").
#   make test                 runs test-step-infer-cli: kiln generate and bench-infer on a
#                             tiny model (tests/core/test_cli_infer.sh)

BENCH_INFER_DEVICE ?= cpu
BENCH_INFER_OUT ?= $(BUILD)/bench-infer
BENCH_INFER_FLAGS ?=
BENCH_INFER_KILN ?=
BENCH_INFER_TORCH ?=

.PHONY: bench-infer
bench-infer: $(KILN)
	@mkdir -p $(BENCH_INFER_OUT)
	$(KILN) bench-infer --device $(BENCH_INFER_DEVICE) $(BENCH_INFER_FLAGS) $(BENCH_INFER_KILN) --json $(BENCH_INFER_OUT)/kiln.json
	@set -e; torch_py=$$(bash core/mk/python.sh torch numpy) || true; \
	  jsons="$(BENCH_INFER_OUT)/kiln.json"; \
	  if [ -n "$$torch_py" ] && [ "$(BENCH_INFER_DEVICE)" != cpu ] && \
	     $$torch_py -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then \
	    for v in eager compile; do \
	      $$torch_py plots/bench_infer_torch.py --variant $$v $(BENCH_INFER_FLAGS) $(BENCH_INFER_TORCH) \
	        --json $(BENCH_INFER_OUT)/torch-$$v.json > /dev/null; \
	      jsons="$$jsons $(BENCH_INFER_OUT)/torch-$$v.json"; \
	    done; \
	  else echo "bench-infer: no PyTorch with a GPU here (or BENCH_INFER_DEVICE=cpu): kiln's numbers only"; fi; \
	  $${PYTHON:-python3} plots/bench_infer_compare.py $$jsons

TEST_STEPS += test-step-infer-cli
.PHONY: test-step-infer-cli
test-step-infer-cli:
	@$(MAKE) --no-print-directory $(KILN) IMPL=$(DEFAULT_IMPL) >/dev/null
	@bash tests/harness/record.sh $(ALL_RESULTS) infer-cli bash tests/core/test_cli_infer.sh $(BUILD)/$(DEFAULT_IMPL)/kiln
