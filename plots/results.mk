# plots/results.mk — the results page: plots/results/README.md is generated from the dated run
# folders in plots/results/ (their bench_summary.json and README.md) by plots/results/results.py,
# so a measured figure is never retyped. Included by the top Makefile.
#
#   make results              rewrite plots/results/README.md from the run folders
#
# Test step (make test): results-page, which fails when the committed page differs from what
# the script makes from the committed data (run `make results` and commit the page).

RESULTS_PY := $(or $(PYTHON),python3) plots/results/results.py

.PHONY: results test-step-results-page
results:
	@$(RESULTS_PY)

TEST_STEPS += test-step-results-page
test-step-results-page:
	@bash tests/harness/record.sh $(ALL_RESULTS) results-page $(RESULTS_PY) --check
