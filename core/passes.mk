# core/passes.mk — test steps of the graph passes (core/passes/, lab 04).
#
#   make test runs "compile-cli": tests/core/test_cli_compile.sh drives `kiln compile` on
#   an IR file and a small GPT, checks its JSON report and emitted IR, and every bad-input
#   error with its exit status. The C tests of the passes are in the core suite
#   (tests/core/test_passes.c; golden files in tests/passes/).

TEST_STEPS += test-step-compile-cli
.PHONY: test-step-compile-cli
test-step-compile-cli:
	@$(MAKE) --no-print-directory $(BUILD)/$(DEFAULT_IMPL)/kiln IMPL=$(DEFAULT_IMPL) >/dev/null
	@bash tests/harness/record.sh $(ALL_RESULTS) compile-cli bash tests/core/test_cli_compile.sh $(BUILD)/$(DEFAULT_IMPL)/kiln

#   make test also runs "remat-cli": tests/core/test_cli_remat.sh drives activation
#   checkpointing through `kiln compile --passes remat:POLICY`, `kiln train --remat` and
#   `kiln bench --remat` (the C tests: tests/core/test_remat.c).
TEST_STEPS += test-step-remat-cli
.PHONY: test-step-remat-cli
test-step-remat-cli:
	@$(MAKE) --no-print-directory $(BUILD)/$(DEFAULT_IMPL)/kiln IMPL=$(DEFAULT_IMPL) >/dev/null
	@bash tests/harness/record.sh $(ALL_RESULTS) remat-cli bash tests/core/test_cli_remat.sh $(BUILD)/$(DEFAULT_IMPL)/kiln

#   make test also runs "precision-cli": tests/core/test_cli_precision.sh drives mixed
#   precision through `kiln train --precision` (errors, tf32 on the CPU, bf16 compiled and
#   interpreted, fp16, resume) and checks that bf16 training follows fp32 for 300 steps (the
#   C tests: tests/core/test_autocast.c, test_ir_lowp.c).
TEST_STEPS += test-step-precision-cli
.PHONY: test-step-precision-cli
test-step-precision-cli:
	@$(MAKE) --no-print-directory $(BUILD)/$(DEFAULT_IMPL)/kiln IMPL=$(DEFAULT_IMPL) >/dev/null
	@bash tests/harness/record.sh $(ALL_RESULTS) precision-cli bash tests/core/test_cli_precision.sh $(BUILD)/$(DEFAULT_IMPL)/kiln

# The lab 04 hidden tests embed the golden files (the grading sandbox cannot read the tree).
LAB04_GOLDEN_H := $(BUILD)/gen/lab04_golden.h
$(LAB04_GOLDEN_H): tests/lab04/golden.sh $(wildcard tests/passes/*.ir)
	@mkdir -p $(@D)
	@bash tests/lab04/golden.sh $@
$(BUILD)/obj/tests/lab04/test_hidden_passes.o: $(LAB04_GOLDEN_H)
$(BUILD)/obj/tests/lab04/test_hidden_passes.o: CPPFLAGS += -I$(BUILD)/gen
