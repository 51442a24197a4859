#!/usr/bin/env python3
"""test_listing.py - the listing resolver (book/listing.py) on book/tests/fixture.c.

Each case names a symbol and the exact text the book must show for it; the not-found
cases check the reason given. Run: python3 book/tests/test_listing.py"""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.dont_write_bytecode = True      # no __pycache__ in the source tree
import listing  # noqa: E402

FIXTURE = os.path.join(HERE, "fixture.c")


def text(symbol):
    return listing.resolve(FIXTURE, symbol).text


class Resolve(unittest.TestCase):
    def test_function_with_braces_in_strings_chars_and_comments(self):
        got = listing.resolve(FIXTURE, "fix_braces")
        self.assertEqual(got.kind, "function")
        self.assertTrue(got.text.startswith("// Counts braces, but not the ones in this comment: { { {\n"
                                            "// and not those in strings or characters.\n"
                                            "int fix_braces(const char *s) {"), got.text)
        self.assertTrue(got.text.endswith("    return n;\n}"), got.text)
        with open(FIXTURE) as f:
            lines = f.read().split("\n")
        self.assertEqual(lines[got.first_line - 1], "// Counts braces, but not the ones in this comment: { { {")

    def test_definition_wins_over_prototype(self):
        self.assertIn("return n;", text("fix_braces"))

    def test_one_line_function_keeps_trailing_comment(self):
        self.assertEqual(text("fix_after"), 'int fix_after(void) { return fix_braces("{"); } /* trailing */')

    def test_struct_with_comment(self):
        self.assertEqual(text("fix_pair"), "/* A pair of ints. */\nstruct fix_pair {\n"
                         "    int a; /* the { first } */\n    int b;\n};")

    def test_typedef_enum_by_tag_or_name(self):
        want = "typedef enum fix_kind { FIX_A, FIX_B } fix_kind;"
        self.assertEqual(text("fix_kind"), want)

    def test_function_pointer_typedef(self):
        self.assertEqual(text("fix_fn"), "typedef int (*fix_fn)(const fix_pair *p);")

    def test_variable(self):
        self.assertEqual(text("fix_names"), 'static const char *const fix_names[] = {"{", "}", "\\"}\\""};')

    def test_macros(self):
        self.assertEqual(text("FIX_TRY"), "#define FIX_TRY(x) do { if (!(x)) { return -1; } } while (0)")
        self.assertEqual(text("FIX_MAX"), "/* FIX_MAX: a macro with\n * a two-line comment. */\n"
                         "#define FIX_MAX(a, b) \\\n    ((a) > (b) ? (a) : (b))")

    def test_region_hides_markers_and_dedents(self):
        self.assertEqual(text("region:core-loop"), "for (int i = 0; i < 3; i++) {\n    y += i;\n}")
        self.assertEqual(text("region:inner"), "y += i;")

    def test_not_found_reasons(self):
        cases = {"fix_nothing": "no definition, declaration, type or #define named fix_nothing",
                 "region:nowhere": "no line with 'kn:region nowhere'",
                 "region:dangling": "'kn:region dangling' has no 'kn:endregion dangling' after it",
                 "n": "no definition, declaration, type or #define named n"}
        for sym, why in cases.items():
            with self.assertRaises(listing.NotFound) as e:
                listing.resolve(FIXTURE, sym)
            self.assertEqual(str(e.exception), why)
        with self.assertRaises(listing.NotFound) as e:
            listing.resolve(os.path.join(HERE, "no-such-file.c"), "x")
        self.assertIn("cannot read", str(e.exception))


if __name__ == "__main__":
    unittest.main(verbosity=2)
