# book/book.mk — the book: lessons/NN-*.md woven with live code listings -> HTML (and a PDF
# when weasyprint or LaTeX is installed). Included by the top Makefile.
#
#   make book                 build $(BUILD)/book/ (index.html); fails, after building,
#                             when a listing directive, figure or cross-reference is broken
#   make book-check           only resolve every directive in lessons/ (fast)
#   make book-examples        compile and run every {.c .run} example against $(LIB)
#
# Test steps (make test): book-listings, book-examples, book-resolver, book-broken-directive,
# book-html, book-render. See book/README.md.

BOOK_DIR := $(BUILD)/book
BOOK_PY := $(PYTHON) book/book.py

.PHONY: book book-check book-examples
book:
	@$(BOOK_PY) build --out $(BOOK_DIR)

book-check:
	@$(BOOK_PY) check

book-examples: $(LIB)
	@$(BOOK_PY) examples --work $(BUILD)/book-examples --cc="$(CC)" \
	  --cflags="$(CPPFLAGS) $(CFLAGS)" --lib $(LIB) --ldlibs="$(LDFLAGS) $(LDLIBS)"

TEST_STEPS += test-step-book-listings test-step-book-examples test-step-book-resolver \
  test-step-book-broken test-step-book-html test-step-book-render
.PHONY: test-step-book-listings test-step-book-examples test-step-book-resolver \
  test-step-book-broken test-step-book-html test-step-book-render

test-step-book-listings:
	@bash tests/harness/record.sh $(ALL_RESULTS) book-listings $(BOOK_PY) check
test-step-book-examples:
	@bash tests/harness/record.sh $(ALL_RESULTS) book-examples $(MAKE) --no-print-directory book-examples
test-step-book-resolver:
	@bash tests/harness/record.sh $(ALL_RESULTS) book-resolver $(PYTHON) book/tests/test_listing.py
test-step-book-broken:
	@bash tests/harness/record.sh $(ALL_RESULTS) book-broken-directive bash book/tests/broken.sh
test-step-book-html:
	@bash tests/harness/record.sh $(ALL_RESULTS) book-html bash book/tests/html.sh $(BUILD)/book-test
test-step-book-render:
	@bash tests/harness/record.sh $(ALL_RESULTS) book-render bash book/tests/render.sh $(BUILD)/book-test
