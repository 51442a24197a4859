# core/docs.mk — checks that keep the code's own documentation honest. Included by the top
# Makefile.
#
#   make opening-comments     every core/ file with its opening comment (core/mk/opening-comments.py),
#                             to read them against the code; OC_FLAGS=--refs lists what the
#                             comments name that the tree no longer has
#
# Test step (make test): opening-comments, which fails when a core/ source file has no
# opening comment (every file opens with one saying what it does and why).

OPENING_PY := $(or $(PYTHON),python3) core/mk/opening-comments.py

.PHONY: opening-comments test-step-opening-comments
opening-comments:
	@$(OPENING_PY) $(OC_FLAGS) core

TEST_STEPS += test-step-opening-comments
test-step-opening-comments:
	@bash tests/harness/record.sh $(ALL_RESULTS) opening-comments $(OPENING_PY) --missing core
