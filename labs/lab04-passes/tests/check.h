/* check.h — helpers for the lab 04 tests: parse IR text, run one pass, and check both
 * the text it gives and that the numbers did not change (kn_graph_compare on random
 * inputs: these rewrites are exact, so the difference must be 0).
 *
 * Every value a test checks that your passes produced passes through kn_out
 * (tests/harness/kn_out.h) first: the passes' status, the graph they left (as its text),
 * the rules' counts, the allocations left live. Under `make test-lab04` that does nothing;
 * under the grader your run only writes them, and the staff's build of the same test (no
 * code of yours in it) checks them. */
#ifndef KILN_LAB04_CHECK_H
#define KILN_LAB04_CHECK_H

#include <string.h>

#include "kn_out_program.h"
#include "kn_test.h"
#include "kiln/passes.h"

static inline kn_graph *l4_parse(const char *text) {
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_graph_parse(text, strlen(text), &g));
    KN_ASSERT_OK(kn_graph_verify(g));
    return g;
}

/* Run `list` (e.g. "algebra,dce") on a copy of g: it must verify, compute what g does,
 * and print as `want` (NULL: do not compare the text). Returns the copy. */
static inline kn_graph *l4_run(const kn_graph *g, const char *list, const char *want, kn_pass_report *rep) {
    kn_graph *c = NULL;
    KN_ASSERT_OK(kn_graph_copy(&c, g));
    KN_ASSERT_OK(kn_out_status("kn_passes_run", kn_passes_run(c, list, rep)));
    kn_out_graph("the graph after the passes", &c);
    KN_ASSERT_OK(kn_graph_verify(c));
    double d = -1;
    KN_ASSERT_OK(kn_graph_compare(g, c, 7, &d));
    cr_assert(d == 0, "%s changed the numbers: max |delta| %g", list, d);
    if (want) {
        char *got = NULL;
        KN_ASSERT_OK(kn_graph_to_string(c, &got));
        cr_assert_str_eq(got, want, "after %s:\n%s\nexpected:\n%s", list, got, want);
        kn_free(got);
    }
    return c;
}

/* Parse `in`, run `list`, expect `want`; free everything. */
static inline void l4_expect(const char *in, const char *list, const char *want) {
    kn_graph *g = l4_parse(in);
    kn_graph_free(l4_run(g, list, want, NULL));
    kn_graph_free(g);
}

/* How many times rule `name` fired in pass i of the report (0 when it did not), through
 * kn_out. */
static inline int64_t l4_fired(const kn_pass_report *rep, int i, const char *name) {
    int64_t n = 0;
    for (int r = 0; r < rep->pass[i].nfired; r++)
        if (!strcmp(rep->pass[i].rule[r], name)) {
            n = rep->pass[i].count[r];
            break;
        }
    return kn_out_i64(name, n);
}

#endif /* KILN_LAB04_CHECK_H */
