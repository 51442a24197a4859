/* graph_test_util.h — binding the same random inputs and parameters (kn_graph_random_input,
 * by name) to several interpreters of related graphs: a graph and its rewrite by a pass
 * (test_remat.c: bitwise; test_autocast.c: within a tolerance), how far their outputs are
 * apart, and a pass list's copy of a graph. Static: each test file gets its own copy. */
#ifndef KILN_TESTS_GRAPH_UTIL_H
#define KILN_TESTS_GRAPH_UTIL_H

#include <math.h>
#include <stdlib.h>

#include "kn_test.h"
#include "kiln/ir.h"
#include "kiln/passes.h"
#include "kiln/program.h"

/* The inputs and params of g, random with seed, bound in each of its[0..n); float params
 * multiplied by param_scale (1: as drawn, uniform in [-1, 1]). */
static inline void bind_same_random(const kn_graph *g, kn_interp *const *its, int n, uint64_t seed, double param_scale) {
    for (int32_t v = 0; v < g->nnodes; v++) {
        const kn_node *nd = &g->nodes[v];
        if (nd->op != KN_OP_INPUT && nd->op != KN_OP_PARAM) continue;
        kn_tensor *t;
        KN_ASSERT_OK(kn_graph_random_input(g, v, seed, &t));
        if (nd->op == KN_OP_PARAM && param_scale != 1 && kn_dtype_is_float(t->dtype))
            for (int64_t e = 0; e < kn_tensor_numel(t); e++)
                kn_dtype_store(t->dtype, kn_tensor_data(t), e, param_scale * kn_dtype_load(t->dtype, kn_tensor_data(t), e));
        for (int i = 0; i < n; i++) KN_ASSERT_OK(kn_interp_bind(its[i], nd->attrs.name, t));
        kn_tensor_free(t);
    }
}

/* A copy of g after the passes of list (report into rep, may be NULL), verified; the passes
 * know the facts of kiln's own kernels, as a program's do (kn_program_target_default). */
static inline kn_graph *graph_after_passes(const kn_graph *g, const char *list, kn_pass_report *rep) {
    kn_graph *c;
    KN_ASSERT_OK(kn_graph_copy(&c, g));
    KN_ASSERT_OK(kn_passes_run_on(c, list, kn_program_target_default(), rep));
    KN_ASSERT_OK(kn_graph_verify(c));
    return c;
}

/* a and b (graphs with the same inputs, params and outputs) run on the same random inputs,
 * weights scaled by 0.2 (tame logits): per output max |a - b| / max |b| (max |a - b| where
 * b is all 0) into err[i] (may be NULL); returns the worst. */
static inline double outputs_normwise(const kn_graph *a, const kn_graph *b, uint64_t seed, double *err) {
    kn_interp *ia, *ib;
    KN_ASSERT_OK(kn_interp_new(&ia, a));
    KN_ASSERT_OK(kn_interp_new(&ib, b));
    bind_same_random(a, (kn_interp *const[]){ia, ib}, 2, seed, 0.2);
    KN_ASSERT_OK(kn_interp_run(ia));
    KN_ASSERT_OK(kn_interp_run(ib));
    cr_assert_eq(a->noutputs, b->noutputs);
    double worst = 0;
    for (int i = 0; i < a->noutputs; i++) {
        const kn_tensor *x = kn_interp_output(ia, i), *y = kn_interp_output(ib, i);
        int64_t n = kn_tensor_numel(y);
        double *px = malloc((size_t)n * sizeof *px), *py = malloc((size_t)n * sizeof *py), d = 0, m = 0;
        KN_ASSERT_OK(kn_tensor_to_f64(x, px));
        KN_ASSERT_OK(kn_tensor_to_f64(y, py));
        for (int64_t e = 0; e < n; e++) {
            d = fmax(d, fabs(px[e] - py[e]));
            m = fmax(m, fabs(py[e]));
        }
        double r = m > 0 ? d / m : d;
        if (err) err[i] = r;
        worst = fmax(worst, r);
        free(px);
        free(py);
    }
    kn_interp_free(ia);
    kn_interp_free(ib);
    return worst;
}

#endif
