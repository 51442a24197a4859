/* graph_test_util.h — binding the same random inputs and parameters (kn_graph_random_input,
 * by name) to several interpreters of related graphs: a graph and its rewrite by a pass
 * (test_remat.c: bitwise; test_autocast.c: within a tolerance). Static: each test file
 * gets its own copy. */
#ifndef KILN_TESTS_GRAPH_UTIL_H
#define KILN_TESTS_GRAPH_UTIL_H

#include "kn_test.h"
#include "kiln/ir.h"
#include "kiln/passes.h"

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

#endif
