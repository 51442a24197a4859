/* live.c — the largest live set of a graph in definition order (kiln/passes.h).
 *
 * A node-by-node run (the interpreter, a NODES program) makes each value at its node and
 * frees it after its last reader, so at node j it holds every value defined at or before
 * j and read at or after j. The most bytes held at one node is what such a run needs at
 * least, whatever its allocator does: the figure activation checkpointing lowers, and
 * the one to compare policies by without running anything (a GPT-2 step's graph is
 * measured in milliseconds, its run would take minutes on a CPU).
 *
 * One sweep: each value adds its bytes at its definition and removes them after its last
 * reader (a difference array), the running sum's maximum is the answer. A reshape (and
 * a slice that keeps one contiguous block, kn_ir_aliases) aliases its operand's storage,
 * so it adds nothing and its readers keep the storage alive. Inputs, params and outputs are not counted: they live outside the run (bound by
 * the caller, or handed back to it), and every policy has the same ones. */
#include <string.h>

#include "kiln/passes.h"

kn_status kn_graph_live_bytes(const kn_graph *g, double *bytes, int32_t *at) {
    if (!g || !bytes) return kn_error(KN_ERR_ARG, "kn_graph_live_bytes: NULL argument");
    *bytes = 0;
    if (at) *at = -1;
    int n = g->nnodes;
    if (n == 0) return KN_OK;
    int32_t *root = kn_malloc((size_t)n * sizeof *root), *last = kn_malloc((size_t)n * sizeof *last);
    double *delta = kn_calloc((size_t)n + 1, sizeof *delta);
    bool *outside = kn_calloc((size_t)n, sizeof *outside);
    if (!root || !last || !delta || !outside) {
        kn_free(root); kn_free(last); kn_free(delta); kn_free(outside);
        return kn_error(KN_ERR_OOM, "kn_graph_live_bytes: out of memory for %d nodes", n);
    }
    for (int i = 0; i < n; i++) {
        const kn_node *nd = &g->nodes[i];
        for (int k = 0; k < nd->nin; k++)
            if (nd->in[k] < 0 || nd->in[k] >= i) {
                kn_free(root); kn_free(last); kn_free(delta); kn_free(outside);
                return kn_error(KN_ERR_ARG, "kn_graph_live_bytes: %%%d = %s reads %%%d, which is not defined before "
                                "it (verify the graph first)", i, kn_op_name(nd->op), nd->in[k]);
            }
        root[i] = nd->nin == 1 && kn_ir_aliases(nd, &g->nodes[nd->in[0]].type) ? root[nd->in[0]] : i; /* a view */
        last[i] = i;
        outside[i] = nd->op == KN_OP_INPUT || nd->op == KN_OP_PARAM;
        for (int k = 0; k < nd->nin; k++)
            if (last[root[nd->in[k]]] < i) last[root[nd->in[k]]] = i;
    }
    for (int i = 0; i < g->noutputs; i++)
        if (g->outputs[i] >= 0 && g->outputs[i] < n) outside[root[g->outputs[i]]] = true;
    for (int i = 0; i < n; i++) {
        if (root[i] != i || outside[i]) continue;
        const kn_type *t = &g->nodes[i].type;
        double b = (double)kn_type_numel(t) * (double)kn_dtype_size(t->dtype);
        delta[i] += b;
        delta[last[i] + 1] -= b;
    }
    double live = 0;
    for (int i = 0; i < n; i++) {
        live += delta[i];
        if (live > *bytes) {
            *bytes = live;
            if (at) *at = i;
        }
    }
    kn_free(root);
    kn_free(last);
    kn_free(delta);
    kn_free(outside);
    return KN_OK;
}

kn_status kn_passes_live_bytes(const kn_graph *g, const char *passes, double *bytes) {
    return kn_passes_live_bytes_on(g, passes, NULL, bytes);
}

kn_status kn_passes_live_bytes_on(const kn_graph *g, const char *passes, const kn_pass_target *target, double *bytes) {
    if (!g || !bytes) return kn_error(KN_ERR_ARG, "kn_passes_live_bytes: NULL argument");
    kn_graph *c = NULL;
    KN_TRY(kn_graph_copy(&c, g));
    kn_status st = kn_passes_run_on(c, passes, target, NULL);
    if (st == KN_OK) st = kn_graph_live_bytes(c, bytes, NULL);
    kn_graph_free(c);
    return st;
}
