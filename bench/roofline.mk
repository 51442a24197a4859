# bench/roofline.mk — make roofline: kiln roofline (CPU ceilings, the GPT step's kernels
# timed in the interpreter, FLOPs and bytes from the cost model) to
# $(BUILD)/roofline/roofline.tsv, then plots/roofline.sh draws roofline.svg and .png.
.PHONY: roofline
ROOFLINE_ARGS ?=
roofline: $(KILN)
	$(KILN) roofline --out $(BUILD)/roofline $(ROOFLINE_ARGS)
	bash plots/roofline.sh $(BUILD)/roofline/roofline.tsv $(BUILD)/roofline/roofline

# kiln roofline and kiln tune-gemm at tiny shapes, in `make test`.
TEST_STEPS += test-step-roofline-cli
.PHONY: test-step-roofline-cli
test-step-roofline-cli:
	@$(MAKE) --no-print-directory $(KILN) IMPL=$(DEFAULT_IMPL) >/dev/null
	@bash tests/harness/record.sh $(ALL_RESULTS) roofline-cli bash tests/core/test_cli_roofline.sh $(BUILD)/$(DEFAULT_IMPL)/kiln
