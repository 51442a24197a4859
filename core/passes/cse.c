/* cse.c — lab 04 unit: common-subexpression elimination (kn_pass_cse, contract in
 * kiln/passes.h).
 *
 * Two nodes with the same op, the same operands, equal attributes and the same type
 * compute the same value, so the second can use the first's. Model code and autograd
 * produce such twins often: the backward of a value used twice builds the same
 * transpose twice, every layer rebuilds the same `full` constant.
 *
 * Walk the nodes in order with a hash table of the nodes kept so far. For node i:
 *   1. redirect its operands through the merges made so far (repl[]): after merging %5
 *      into %3, a node add(%5, %1) is add(%3, %1), and may now match an earlier one;
 *   2. skip inputs and params (they are the graph's interface) and random ops
 *      (kn_op_is_random: two dropouts of the same x draw two different masks);
 *   3. look it up: hash (op, operands, type) into the table; on a hit whose node is
 *      equal (same op, operands, type, kn_attrs_equal), set repl[i] to the hit and
 *      count kn_pass_stats_fire(st, "merged", 1); otherwise insert i.
 * Finish with kn_graph_compact(g, repl, NULL), which drops the merged nodes. The table
 * makes the pass O(nodes); comparing each node with every earlier one would be
 * O(nodes^2), minutes on a large joint graph. */
#include <string.h>

#include "kiln/passes.h"

/* BEGIN SOLUTION */
static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h;
}

static uint64_t node_hash(const kn_node *n) {
    uint64_t h = mix(0, (uint64_t)n->op);
    for (int k = 0; k < n->nin; k++) h = mix(h, (uint64_t)n->in[k]);
    h = mix(h, (uint64_t)n->type.dtype);
    for (int d = 0; d < n->type.ndim; d++) h = mix(h, (uint64_t)n->type.shape[d]);
    return h;
}

static bool node_same(const kn_node *a, const kn_node *b) {
    if (a->op != b->op || a->nin != b->nin || !kn_type_equal(&a->type, &b->type)) return false;
    for (int k = 0; k < a->nin; k++)
        if (a->in[k] != b->in[k]) return false;
    return kn_attrs_equal(a->op, &a->attrs, &b->attrs);
}
/* SKELETON
// Your helpers go here (static): a hash of a node's op, operands and type, and node equality.
END SOLUTION */

kn_status kn_pass_cse(kn_graph *g, kn_pass_stats *st) {
    if (!g) return kn_error(KN_ERR_ARG, "kn_pass_cse: NULL graph");
    /* BEGIN SOLUTION */
    int n = g->nnodes;
    size_t cap = 16;
    while (cap < 2 * (size_t)n) cap *= 2;
    int32_t *repl = kn_malloc((size_t)(n ? n : 1) * sizeof *repl);
    int32_t *table = kn_malloc(cap * sizeof *table);
    if (!repl || !table) {
        kn_free(repl);
        kn_free(table);
        return kn_error(KN_ERR_OOM, "kn_pass_cse: out of memory");
    }
    for (size_t s = 0; s < cap; s++) table[s] = -1;
    int merged = 0;
    for (int i = 0; i < n; i++) {
        kn_node *nd = &g->nodes[i];
        repl[i] = i;
        for (int k = 0; k < nd->nin; k++) nd->in[k] = repl[nd->in[k]];
        if (nd->op == KN_OP_INPUT || nd->op == KN_OP_PARAM || kn_op_is_random(nd->op)) continue;
        size_t s = (size_t)node_hash(nd) & (cap - 1);
        while (table[s] >= 0 && !node_same(&g->nodes[table[s]], nd)) s = (s + 1) & (cap - 1);
        if (table[s] >= 0) {
            repl[i] = table[s];
            merged++;
        } else {
            table[s] = i;
        }
    }
    kn_free(table);
    kn_status r = merged ? kn_graph_compact(g, repl, NULL) : KN_OK;
    kn_free(repl);
    if (r == KN_OK) kn_pass_stats_fire(st, "merged", merged);
    return r;
    /* SKELETON
    (void)st;
    return kn_not_implemented("lab04", "kn_pass_cse: hash (op, operands, attributes, type), merge equal nodes");
    END SOLUTION */
}
