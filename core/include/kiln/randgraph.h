/* kiln/randgraph.h — random verified graphs and a numeric before/after check: how the
 * passes (and the fusion, codegen and memory work after them) are tested on hundreds of
 * graphs no one wrote by hand. kn_randgraph draws a graph from a seed, planting rewrite
 * opportunities; kn_graph_compare runs two graphs on the same random inputs and gives the
 * largest difference of their outputs. Implemented in core/passes/ (randgraph.c, check.c);
 * kiln/passes.h includes this header. */
#ifndef KILN_RANDGRAPH_H
#define KILN_RANDGRAPH_H

#include "kiln/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kn_randgraph_opts {
    int nodes;          /* ops to draw (besides sources), default 24 */
    int max_dim;        /* largest dimension, default 4 */
    int max_ndim;       /* most axes, default 3 */
    int noutputs;       /* outputs, default 2 */
    kn_dtype dtype;     /* float dtype of the graph, default f64 */
    /* 0..100: how often to plant a rewrite opportunity (x*1, x+0, neg neg, a duplicate,
     * a view chain, a constant subgraph, ...) instead of a plain random op; default 35. */
    int plant;
} kn_randgraph_opts;

/* The defaults above. */
kn_randgraph_opts kn_randgraph_defaults(void);
/* A random verified graph from seed: inputs and params of random shapes, then random
 * elementwise ops (with broadcasting), reductions, matmuls, views (reshape, permute,
 * broadcast_to, slice), softmax, casts, dropout and `full` constants, some of them left
 * unused (dead). The same seed gives the same graph. o may be NULL (defaults). Every
 * value stays finite on inputs in [-1, 1] (no log or sqrt of a raw input; exp of tanh). */
kn_status kn_randgraph(kn_graph **out, uint64_t seed, const kn_randgraph_opts *o);

/* Run a and b on the same random inputs (every input and param of a, bound by name in
 * both; floats uniform in [-1, 1) from seed; integer inputs in the range their users
 * accept) and set *maxdiff to the largest |a_i - b_i| over all outputs (NaN against NaN
 * and equal infinities count 0; NaN against a number counts +inf). The graphs must have
 * the same output types (KN_ERR_ARG otherwise). */
kn_status kn_graph_compare(const kn_graph *a, const kn_graph *b, uint64_t seed, double *maxdiff);
/* The random tensor kn_graph_compare binds to input or param v of g (a new CPU tensor). */
kn_status kn_graph_random_input(const kn_graph *g, int32_t v, uint64_t seed, kn_tensor **out);

#ifdef __cplusplus
}
#endif

#endif
