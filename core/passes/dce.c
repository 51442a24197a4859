/* dce.c — lab 04 unit: dead-code elimination (kn_pass_dce, contract in kiln/passes.h).
 *
 * A value is worth computing only if an output depends on it. Autograd and the rewrite
 * passes leave many values nobody reads (a forward value the backward does not need, the
 * x*1 node after x*1 -> x), and each costs a kernel launch and memory.
 *
 * Liveness flows backwards: the outputs are live; the operands of a live node are live.
 * Because a graph is in definition order (every operand id is smaller than its user's
 * id), ONE walk from the last node to the first sees every user before the values it
 * uses, so it needs no worklist. `input` and `param` nodes always stay: they are the
 * graph's interface, bound by name.
 *
 * Then kn_graph_compact(g, NULL, live) drops the rest and renumbers. Count the removed
 * nodes: kn_pass_stats_fire(st, "dead", removed). */
#include "kiln/passes.h"

kn_status kn_pass_dce(kn_graph *g, kn_pass_stats *st) {
    if (!g) return kn_error(KN_ERR_ARG, "kn_pass_dce: NULL graph");
    /* BEGIN SOLUTION */
    bool *live = kn_calloc((size_t)(g->nnodes ? g->nnodes : 1), sizeof *live);
    if (!live) return kn_error(KN_ERR_OOM, "kn_pass_dce: out of memory");
    for (int i = 0; i < g->noutputs; i++)
        if (g->outputs[i] >= 0 && g->outputs[i] < g->nnodes) live[g->outputs[i]] = true;
    int removed = 0;
    for (int i = g->nnodes - 1; i >= 0; i--) {
        const kn_node *n = &g->nodes[i];
        if (n->op == KN_OP_INPUT || n->op == KN_OP_PARAM) live[i] = true;
        if (!live[i]) {
            removed++;
            continue;
        }
        for (int k = 0; k < n->nin; k++) live[n->in[k]] = true;
    }
    kn_status s = removed ? kn_graph_compact(g, NULL, live) : KN_OK;
    kn_free(live);
    if (s == KN_OK) kn_pass_stats_fire(st, "dead", removed);
    return s;
    /* SKELETON
    (void)st;
    return kn_not_implemented("lab04", "kn_pass_dce: mark live values from the outputs back, drop the rest");
    END SOLUTION */
}
