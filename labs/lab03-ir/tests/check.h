/* check.h — helpers for the lab 03 tests: parse IR text (failing the test on a syntax
 * error), and expect a verifier error with its status and a piece of its message.
 *
 * Every value a test checks that your units produced passes through kn_out
 * (tests/harness/kn_out.h) first, through the macros at the end of this file: what the
 * tests read of a builder after your kn_builder_record ran (its status and message, its
 * graph as IR text, its node count, an eager value's tensor, whether a call returned a
 * value), kn_graph_verify's status and message, kn_builder_finish's and kn_autograd's
 * graphs, and the interpreter's statuses and outputs (it verifies with your
 * kn_graph_verify). Under `make test-lab03` that does nothing; under the grader your run
 * only writes the values, and the staff's build of the same test (no code of yours in it)
 * checks them. */
#ifndef KILN_LAB03_CHECK_H
#define KILN_LAB03_CHECK_H

#include <string.h>

#include "kn_out_program.h"
#include "kn_test.h"
#include "kiln/autograd.h"
#include "kiln/ir.h"

static inline kn_graph *l3_parse(const char *text) {
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_graph_parse(text, strlen(text), &g));
    return g;
}

/* A small well-typed graph: 6 nodes, one output. */
static const char l3_good[] = "%0 = input {name=\"x\"} : f32[2,3]\n"
                              "%1 = param {name=\"w\"} : f32[3,4]\n"
                              "%2 = matmul %0, %1 : f32[2,4]\n"
                              "%3 = tanh %2 : f32[2,4]\n"
                              "%4 = add %3, %2 : f32[2,4]\n"
                              "%5 = sum %4 {axes=[1]} : f32[2]\n"
                              "output %5\n";

/* ---------------------------------------------------------------- your units, through kn_out */

/* A value the test looks at (its id), as your run had it. */
static inline kn_val l3_val(const char *what, kn_val v) {
    kn_out(what, &v, sizeof v);
    return v;
}
static inline bool l3_val_ok(kn_val v) { return l3_val("a call returned a value", v).id >= 0; }
/* A yes/no the test computed from your code's results (a pointer comparison). */
static inline bool l3_fact(const char *what, bool v) { return kn_out_i64(what, v) != 0; }

static inline kn_status l3_builder_status(const kn_builder *b) {
    return kn_out_status("the builder's status", kn_out_checking() ? KN_OK : (kn_builder_status)(b));
}
/* The builder's message (one of 8 buffers used in turn). */
static inline const char *l3_builder_error(const kn_builder *b) {
    static char ring[8][512];
    static int next;
    char *m = ring[next++ % 8];
    snprintf(m, 512, "%s", kn_out_checking() ? "" : (kn_builder_error)(b));
    kn_out_text("the builder's message", m, 512);
    return m;
}
/* The builder's node count (cheaper than its graph). */
static inline int l3_nnodes(const kn_builder *b) {
    return (int)kn_out_i64("the builder's node count", kn_out_checking() ? 0 : (kn_builder_graph)(b)->nnodes);
}
/* The builder's graph as IR text; in the checker, your run's graph parsed again (kept until
 * the process ends, as the builder's is borrowed). */
static inline const kn_graph *l3_builder_graph(const kn_builder *b) {
    kn_graph *g = kn_out_checking() ? NULL : (kn_graph *)(kn_builder_graph)(b);
    kn_out_graph("the builder's graph", &g);
    return g;
}
static inline const kn_tensor *l3_val_tensor(const kn_builder *b, kn_val v) {
    return kn_out_tensor("a value's tensor", kn_out_checking() ? NULL : (kn_val_tensor)(b, v));
}

static inline kn_status l3_builder_finish(kn_builder *b, kn_graph **out) {
    kn_status st = kn_out_status("kn_builder_finish", kn_out_checking() ? KN_OK : (kn_builder_finish)(b, out));
    if (out) {
        if (kn_out_checking()) *out = NULL;
        kn_out_graph("kn_builder_finish's graph", out);
    }
    return st;
}
static inline kn_status l3_graph_verify(const kn_graph *g) {
    return kn_out_status("kn_graph_verify", kn_out_checking() ? KN_OK : (kn_graph_verify)(g));
}
static inline kn_status l3_autograd(const kn_graph *fwd, kn_val loss, int n, const kn_val *wrt, kn_graph **joint,
                                    kn_val *grads) {
    kn_status st = kn_out_status("kn_autograd",
                                 kn_out_checking() ? KN_OK : (kn_autograd)(fwd, loss, n, wrt, joint, grads));
    if (joint) {
        if (kn_out_checking()) *joint = NULL;
        kn_out_graph("kn_autograd's graph", joint);
    }
    if (grads && n > 0 && n <= 4096) kn_out("kn_autograd's gradients", grads, (size_t)n * sizeof *grads);
    return st;
}

/* The interpreter verifies with your kn_graph_verify: it runs in your run only (in the
 * checker *out stays NULL, and every call returns your run's status and outputs). */
static inline kn_status l3_interp_new(kn_interp **out, const kn_graph *g) {
    return kn_out_status("kn_interp_new", kn_out_checking() ? KN_OK : (kn_interp_new)(out, g));
}
static inline kn_status l3_interp_bind(kn_interp *it, const char *name, const kn_tensor *t) {
    return kn_out_status("kn_interp_bind", kn_out_checking() ? KN_OK : (kn_interp_bind)(it, name, t));
}
static inline kn_status l3_interp_run(kn_interp *it) {
    return kn_out_status("kn_interp_run", kn_out_checking() ? KN_OK : (kn_interp_run)(it));
}
static inline const kn_tensor *l3_interp_output(const kn_interp *it, int i) {
    return kn_out_tensor("an interpreter's output", kn_out_checking() ? NULL : (kn_interp_output)(it, i));
}

#define kn_val_ok(...) l3_val_ok(__VA_ARGS__)
#define kn_builder_status(...) l3_builder_status(__VA_ARGS__)
#define kn_builder_error(...) l3_builder_error(__VA_ARGS__)
#define kn_builder_graph(...) l3_builder_graph(__VA_ARGS__)
#define kn_val_tensor(...) l3_val_tensor(__VA_ARGS__)
#define kn_builder_finish(...) l3_builder_finish(__VA_ARGS__)
#define kn_graph_verify(...) l3_graph_verify(__VA_ARGS__)
#define kn_autograd(...) l3_autograd(__VA_ARGS__)
#define kn_interp_new(...) l3_interp_new(__VA_ARGS__)
#define kn_interp_bind(...) l3_interp_bind(__VA_ARGS__)
#define kn_interp_run(...) l3_interp_run(__VA_ARGS__)
#define kn_interp_output(...) l3_interp_output(__VA_ARGS__)


/* kn_graph_verify(g) must fail with `code` and a message containing `part`. */
static inline void l3_expect_verify_error(const kn_graph *g, kn_status code, const char *part) {
    KN_ASSERT_ERR(kn_graph_verify(g), code);
    cr_assert(strstr(kn_last_error(), part), "verifier message \"%s\" should contain \"%s\"", kn_last_error(), part);
}

#endif /* KILN_LAB03_CHECK_H */
