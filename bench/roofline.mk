# bench/roofline.mk — make roofline: kiln roofline to $(ROOFLINE_DIR)/roofline.tsv, then
# plots/roofline.sh draws roofline.svg and .png from that TSV alone. ROOFLINE_DEVICE auto
# (default): on a machine with a usable GPU the compiled GPT step's kernels (generated
# kernels, cuBLAS GEMMs, attention) under the GPU's roofs; else the CPU ceilings and the
# step's nodes timed in the interpreter (FLOPs and bytes from the cost model either way).
# PLOT_ONLY=1 only plots a TSV made earlier (a GPU machine without gnuplot writes it;
# copy ROOFLINE_DIR back and plot here; ROOFLINE_PLOT, the plot's path without .svg/.png,
# may point elsewhere when ROOFLINE_DIR is read-only). ROOFLINE_ARGS passes options (kiln
# roofline --help).
.PHONY: roofline
ROOFLINE_ARGS ?=
ROOFLINE_DEVICE ?= auto
ROOFLINE_DIR ?= $(BUILD)/roofline
ROOFLINE_PLOT ?= $(ROOFLINE_DIR)/roofline
roofline: $(if $(filter 1,$(PLOT_ONLY)),,$(KILN))
ifneq ($(PLOT_ONLY),1)
	$(KILN) roofline --out $(ROOFLINE_DIR) --device $(ROOFLINE_DEVICE) $(ROOFLINE_ARGS)
endif
	bash plots/roofline.sh $(ROOFLINE_DIR)/roofline.tsv $(ROOFLINE_PLOT)

# kiln roofline and kiln tune-gemm at tiny shapes, in `make test`.
TEST_STEPS += test-step-roofline-cli
.PHONY: test-step-roofline-cli
test-step-roofline-cli:
	@$(MAKE) --no-print-directory $(KILN) IMPL=$(DEFAULT_IMPL) >/dev/null
	@bash tests/harness/record.sh $(ALL_RESULTS) roofline-cli bash tests/core/test_cli_roofline.sh $(BUILD)/$(DEFAULT_IMPL)/kiln
