/* recompute.c — lab 08 unit: what selective activation checkpointing recomputes
 * (kn_remat_selective, contract in kiln/passes.h).
 *
 * Recomputing a forward value in the backward trades its bytes (held from the forward to
 * the backward) for the time of running its op again. The trade is good when the op is
 * cheap against the memory it frees: an elementwise op or a norm reads and writes each
 * element once, at memory speed, and a view costs nothing; a matmul does O(k) arithmetic
 * per element it writes, and a softmax or a reduction is several passes. Megatron-LM's
 * "selective" checkpointing is this rule (Korthikanti et al., "Reducing activation
 * recomputation in large transformer models", 2022, recompute the attention's cheap
 * parts); kiln's remat pass then keeps, of the values the rule allows it to drop, the
 * set of least bytes (the min cut, core/passes/mincut.c).
 *
 * Dropout is elementwise and recomputable: its mask is Philox of the node's (seed,
 * offset), so the clone draws the same mask. Inputs and params are never recomputed:
 * they are not computed at all. */
#include "kiln/passes.h"

kn_status kn_remat_selective(const kn_graph *g, bool *recompute) {
    if (!g || !recompute) return kn_error(KN_ERR_ARG, "kn_remat_selective: NULL argument");
    /* BEGIN SOLUTION */
    for (int i = 0; i < g->nnodes; i++) {
        kn_op op = g->nodes[i].op;
        kn_op_category c = kn_op_get(op)->category;
        recompute[i] = c == KN_CAT_ELEMENTWISE || c == KN_CAT_VIEW || op == KN_OP_FULL || op == KN_OP_LAYERNORM ||
                       op == KN_OP_NORMALIZE;
    }
    return KN_OK;
    /* SKELETON
    // recompute[i]: elementwise ops, views, full, layernorm and normalize; nothing else.
    return kn_not_implemented("lab08", "kn_remat_selective: which ops selective remat recomputes");
    END SOLUTION */
}
