# core/precision.mk — test steps and the figure of mixed precision (core/nn/loss_scale.c,
# lab 09).
#
#   make test runs "loss-scale-cli": tests/core/test_cli_loss_scale.sh drives `kiln train
#   --loss-scale` (the same bits with a power-of-two scale, injected overflows skipped and
#   the scale regrown, exact resume after skips, usage errors). The C tests are in the core
#   suite (tests/core/test_loss_scale.c).
#   make plot-precision draws lesson 09's figures (plots/precision.sh): the loss scale
#   over a run with injected overflows, and the rounding error of bf16 and f16, into
#   plots/results/precision/, and copies the two SVGs into book/figures/.

TEST_STEPS += test-step-loss-scale-cli
.PHONY: test-step-loss-scale-cli plot-precision
test-step-loss-scale-cli:
	@$(MAKE) --no-print-directory $(BUILD)/$(DEFAULT_IMPL)/kiln IMPL=$(DEFAULT_IMPL) >/dev/null
	@bash tests/harness/record.sh $(ALL_RESULTS) loss-scale-cli bash tests/core/test_cli_loss_scale.sh $(BUILD)/$(DEFAULT_IMPL)/kiln

plot-precision:
	@$(MAKE) --no-print-directory $(BUILD)/$(DEFAULT_IMPL)/kiln IMPL=$(DEFAULT_IMPL) >/dev/null
	@$(MAKE) --no-print-directory $(BUILD)/$(DEFAULT_IMPL)/libkiln.a IMPL=$(DEFAULT_IMPL) >/dev/null
	@bash plots/precision.sh $(BUILD)/$(DEFAULT_IMPL)/kiln plots/results/precision "$(CC)" "$(CPPFLAGS) $(CFLAGS)" \
	  $(BUILD)/$(DEFAULT_IMPL)/libkiln.a "$(LDFLAGS) $(LDLIBS)"
	@cp plots/results/precision/loss-scale.svg book/figures/precision-loss-scale.svg
	@cp plots/results/precision/rounding.svg book/figures/precision-rounding.svg
