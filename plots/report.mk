# plots/report.mk — the capstone's evaluation drivers (issue 34). Included by the top Makefile.
#
#   make ablation [DEVICE=cpu|cuda] [ABLATION_OUT=DIR] [ABLATION_FLAGS="kiln bench size flags"]
#       kiln's training step with every optimization on, then each switched off alone
#       (plots/ablation.sh): DIR/ablation.md (the table, machine and date), .tsv, .svg, .png.
#       DEVICE defaults to cuda when nvidia-smi sees a GPU, else cpu; DIR to build/ablation-DEVICE.
#
# Test step (make test): "ablation", tests/core/test_ablation.sh: the driver on a tiny GPT,
# checking its rows, that no optimization changes the loss beyond rounding, that the memory
# plan saves memory, and that the figure is drawn.

ABLATION_DEVICE := $(or $(DEVICE),$(if $(shell nvidia-smi -L 2>/dev/null | grep -m1 GPU),cuda,cpu))
ABLATION_OUT ?= $(BUILD)/ablation-$(ABLATION_DEVICE)
ABLATION_FLAGS ?=

.PHONY: ablation test-step-ablation
ablation: $(KILN)
	KILN=$(KILN) bash plots/ablation.sh $(ABLATION_OUT) --device $(ABLATION_DEVICE) $(ABLATION_FLAGS)

TEST_STEPS += test-step-ablation
test-step-ablation:
	@$(MAKE) --no-print-directory $(BUILD)/$(DEFAULT_IMPL)/kiln IMPL=$(DEFAULT_IMPL) >/dev/null
	@bash tests/harness/record.sh $(ALL_RESULTS) ablation bash tests/core/test_ablation.sh $(BUILD)/$(DEFAULT_IMPL)/kiln
