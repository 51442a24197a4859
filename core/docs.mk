# core/docs.mk — checks that keep the code's own documentation honest. Included by the top
# Makefile.
#
#   make opening-comments     every core/ file with its opening comment (core/mk/opening-comments.py),
#                             to read them against the code; OC_FLAGS=--refs lists what the
#                             comments name that the tree no longer has
#   make folder-readmes       rewrite the "## Files" list of each core/<folder>/README.md from
#                             the files' opening comments (after adding, removing or
#                             re-describing a file)
#
# Test steps (make test): opening-comments, which fails when a core/ source file has no
# opening comment; folder-readmes, which fails when a folder README's Files list is not what
# `make folder-readmes` would write.

OPENING_PY := $(or $(PYTHON),python3) core/mk/opening-comments.py

.PHONY: opening-comments folder-readmes test-step-opening-comments test-step-folder-readmes
opening-comments:
	@$(OPENING_PY) $(OC_FLAGS) core
folder-readmes:
	@$(OPENING_PY) --readmes

TEST_STEPS += test-step-opening-comments test-step-folder-readmes
test-step-opening-comments:
	@bash tests/harness/record.sh $(ALL_RESULTS) opening-comments $(OPENING_PY) --missing core
test-step-folder-readmes:
	@bash tests/harness/record.sh $(ALL_RESULTS) folder-readmes $(OPENING_PY) --check-readmes
