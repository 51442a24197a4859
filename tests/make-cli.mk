# tests/make-cli.mk — a `make test` step for the build's own behaviour
# (tests/core/test_make_cli.sh): unknown labs, make help, make mutants' usage, the Python
# interpreter kiln picks (core/mk/python.sh), stable mutant keys, Criterion carried for a
# machine without it (core/carry.mk).
TEST_STEPS += test-step-make-cli
.PHONY: test-step-make-cli
test-step-make-cli:
	@bash tests/harness/record.sh $(ALL_RESULTS) make-cli bash tests/core/test_make_cli.sh
