# core/quant.mk — the test step of INT8 quantization's command line (kiln eval, the quantize
# passes; tests/core/test_cli_quant.sh). The C tests are tests/core/test_quantize.c (test-core).
#
#   make test                 runs test-step-quant-cli

TEST_STEPS += test-step-quant-cli
.PHONY: test-step-quant-cli
test-step-quant-cli:
	@$(MAKE) --no-print-directory $(KILN) IMPL=$(DEFAULT_IMPL) >/dev/null
	@bash tests/harness/record.sh $(ALL_RESULTS) quant-cli bash tests/core/test_cli_quant.sh $(BUILD)/$(DEFAULT_IMPL)/kiln
