/* check.h — helpers for the lab 03 tests: parse IR text (failing the test on a syntax
 * error), and expect a verifier error with its status and a piece of its message. */
#ifndef KILN_LAB03_CHECK_H
#define KILN_LAB03_CHECK_H

#include <string.h>

#include "kn_test.h"
#include "kiln/ir.h"

static inline kn_graph *l3_parse(const char *text) {
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_graph_parse(text, strlen(text), &g));
    return g;
}

/* kn_graph_verify(g) must fail with `code` and a message containing `part`. */
static inline void l3_expect_verify_error(const kn_graph *g, kn_status code, const char *part) {
    KN_ASSERT_ERR(kn_graph_verify(g), code);
    cr_assert(strstr(kn_last_error(), part), "verifier message \"%s\" should contain \"%s\"", kn_last_error(), part);
}

/* A small well-typed graph: 6 nodes, one output. */
static const char l3_good[] = "%0 = input {name=\"x\"} : f32[2,3]\n"
                              "%1 = param {name=\"w\"} : f32[3,4]\n"
                              "%2 = matmul %0, %1 : f32[2,4]\n"
                              "%3 = tanh %2 : f32[2,4]\n"
                              "%4 = add %3, %2 : f32[2,4]\n"
                              "%5 = sum %4 {axes=[1]} : f32[2]\n"
                              "output %5\n";

#endif /* KILN_LAB03_CHECK_H */
