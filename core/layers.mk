# core/layers.mk — the layering check (core/mk/layers.py) in `make test`.
#
#   make layers               check that no include and no call goes up the stack
#                             base -> storage -> tensor -> ir -> autograd -> passes ->
#                             schedule -> codegen -> runtime -> program -> data -> nn ->
#                             dist -> cli,
#                             over the sources and the objects of the reference build
#   make test runs "layers" (the check, after building libkiln), "units" (below) and
#   "layers-selftest" (tests/core/test_layers.sh: an upward include and an upward call
#   planted in copies must fail it).

.PHONY: layers test-step-layers test-step-layers-selftest
layers:
	@$(MAKE) --no-print-directory lib IMPL=$(DEFAULT_IMPL) LAB= >/dev/null
	@$(PYTHON) core/mk/layers.py --objects $(BUILD)/obj

TEST_STEPS += test-step-layers test-step-layers-selftest
test-step-layers:
	@$(MAKE) --no-print-directory lib IMPL=$(DEFAULT_IMPL) >/dev/null
	@bash tests/harness/record.sh $(ALL_RESULTS) layers $(PYTHON) core/mk/layers.py --objects $(BUILD)/obj
test-step-layers-selftest:
	@bash tests/harness/record.sh $(ALL_RESULTS) layers-selftest bash tests/core/test_layers.sh

# "units": every lab unit's reference is a core file that solutions/ links to
# (core/mk/units.list, core/mk/units.sh check).
TEST_STEPS += test-step-units
.PHONY: test-step-units
test-step-units:
	@bash tests/harness/record.sh $(ALL_RESULTS) units bash core/mk/units.sh check
