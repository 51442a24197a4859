/* autocast.c — lab 09 unit: the autocast pass's decisions (kn_autocast_policy and
 * kn_autocast_decide; contract in kiln/passes.h, "lab 09 units").
 *
 * Low precision pays where the arithmetic is: a matrix product reads and writes half the
 * bytes and, on a GPU, runs on tensor cores. It costs where values are summed or
 * normalized: a sum of many bf16 terms loses the small ones, a softmax or a layernorm
 * amplifies an error in its input, the loss is a small difference of large logs. So one
 * table says per op which it is (PyTorch's autocast lists are the same idea):
 *
 *   LOW    matrix products (the model's linear layers, both attention products, and their
 *          backwards, which are matmuls too; flash attention and its backward, products
 *          inside, which the core's pass keeps f32 where the GPU has no bf16 kernel for
 *          the head dim, core/passes/autocast.c);
 *   F32    reductions (sum, mean, max), softmaxes, norms, the loss, their backwards, the
 *          embedding gradient (a scatter-add: a sum per table row);
 *   KEEP   everything else (elementwise ops, views, the embedding gather, sources): the
 *          op follows its operands.
 *
 * A pointwise function's IR op (exp, gelu, ...) takes its class from its row of the table
 * kiln/pointwise.def (its autocast column), answered before your part: a new row states
 * its precision where it is added.
 *
 * The pass (core/passes/autocast.c) asks kn_autocast_decide about each node in order,
 * then rebuilds the graph with one cast per (value, dtype). Deciding node i:
 *
 *   - only f32 computations change: a source (input, param, full) and a cast keep their
 *     dtype, and so does a node whose own dtype is not f32 (an f64 graph; bool results,
 *     eq, are allowed: they follow their operands);
 *   - LOW: the node becomes low; F32: nothing changes (its low operands will be cast up
 *     right before it, by the rebuild); KEEP: low when its float operands are all low
 *     after the pass and there is at least one (a `full` constant does not count: the
 *     rebuild makes it in whatever dtype its reader needs), else it stays f32;
 *   - a node that becomes low reads its float operands low, and every operand not
 *     already low gets a low copy **right after the operand** (early): the fusion
 *     scheduler grows kernels in definition order, so a cast right after its value joins
 *     the kernel that computes the value (which then stores both), and a weight's copy is
 *     made once, at the start of the step, not before each reader.
 *
 * No cast chain can form: a copy is always made from the value itself, in its own
 * dtype, so a value is cast at most once per dtype. */
#include "kiln/passes.h"

kn_autocast_class kn_autocast_policy(kn_op op) {
    kn_unary_op f; /* a pointwise function's op: its row's column of kiln/pointwise.def */
    if (kn_op_unary(op, &f)) return kn_autocast_pointwise(f);
    /* BEGIN SOLUTION */
    switch (op) {
    case KN_OP_MATMUL:
    case KN_OP_FLASH_ATTN: case KN_OP_FLASH_ATTN_BWD:
        return KN_AUTOCAST_LOW;
    case KN_OP_SUM: case KN_OP_MEAN: case KN_OP_MAX:
    case KN_OP_SOFTMAX: case KN_OP_SOFTMAX_BWD: case KN_OP_LOG_SOFTMAX: case KN_OP_LOG_SOFTMAX_BWD:
    case KN_OP_CAUSAL_SOFTMAX: case KN_OP_CAUSAL_SOFTMAX_BWD:
    case KN_OP_LAYERNORM: case KN_OP_LAYERNORM_DX: case KN_OP_NORMALIZE:
    case KN_OP_CROSS_ENTROPY: case KN_OP_CROSS_ENTROPY_BWD:
    case KN_OP_EMBEDDING_GRAD:
    case KN_OP_MATMUL_W8: case KN_OP_MATMUL_W8A8: case KN_OP_MATMUL_W8A8_TENSOR:
    case KN_OP_MATMUL_W8A8_STATIC: /* int8 inside, f32 at the edges */
    case KN_OP_ATTN_DECODE: /* a softmax inside, over the f32 KV cache */
        return KN_AUTOCAST_F32;
    /* Every other op keeps its operands' dtype. Listed one by one (-Wswitch-enum): a new op
     * is a compile error here until someone decides its class, never silently KEEP. */
    case KN_OP_INPUT: case KN_OP_PARAM: case KN_OP_FULL:
    case KN_OP_ADD: case KN_OP_SUB: case KN_OP_MUL: case KN_OP_DIV: case KN_OP_EQ: case KN_OP_WHERE:
    /* the pointwise functions' IR ops (answered above, from their rows; their cases come
     * from the table, so a new row needs no line here) and their gradient op */
#include "kiln/pointwise_cases.inc"
    case KN_OP_UNARY_GRAD:
    case KN_OP_CAST: case KN_OP_DROPOUT: case KN_OP_CAUSAL_FILL: case KN_OP_ONEHOT:
    case KN_OP_RESHAPE: case KN_OP_PERMUTE: case KN_OP_BROADCAST_TO: case KN_OP_SLICE: case KN_OP_SLICE_GRAD:
    case KN_OP_CONCAT: case KN_OP_EMBEDDING:
    case KN_OP_MATMUL_BIAS: case KN_OP_MATMUL_BIAS_GELU: case KN_OP_MATMUL_DGELU: case KN_OP_MATMUL_BGRAD:
    case KN_OP_GRAD_STORE: case KN_OP_ALL_REDUCE_START: case KN_OP_REDUCE_SCATTER_START:
    case KN_OP_ALL_GATHER_START: case KN_OP_COMM_WAIT:
    case KN_OP_ALL_REDUCE: case KN_OP_ALL_GATHER: case KN_OP_REDUCE_SCATTER: case KN_OP_SEND: case KN_OP_RECV:
    case KN_OP_COUNT:
        return KN_AUTOCAST_KEEP;
    }
    return KN_AUTOCAST_KEEP; /* not a kn_op */
    /* SKELETON
    // LOW: matmul, flash attention and its backward. F32: the reductions, softmaxes
    // (plain, log, causal) and their backwards, the norms and layernorm's input gradient,
    // the loss and its backward, the embedding gradient, the int8 products (quantize:...),
    // decode attention (a softmax over the f32 KV cache).
    // KEEP: every other op.
    (void)op;
    kn_not_implemented("lab09", "kn_autocast_policy: which ops run low, which stay f32");
    return KN_AUTOCAST_KEEP;
    END SOLUTION */
}

kn_status kn_autocast_decide(const kn_graph *g, int32_t i, kn_dtype low, kn_dtype *dt, bool *reads_low,
                             bool *early) {
    if (!g || !dt || !reads_low || !early) return kn_error(KN_ERR_ARG, "kn_autocast_decide: NULL argument");
    if (i < 0 || i >= g->nnodes)
        return kn_error(KN_ERR_ARG, "kn_autocast_decide: node %d outside the graph's %d nodes", (int)i, (int)g->nnodes);
    if (low != KN_DT_BF16 && low != KN_DT_F16)
        return kn_error(KN_ERR_ARG, "kn_autocast_decide: the low dtype must be bf16 or f16 (got %s)",
                        kn_dtype_name(low));
    /* BEGIN SOLUTION */
    const kn_node *n = &g->nodes[i];
    kn_dtype t = n->type.dtype;
    dt[i] = t;
    reads_low[i] = false;
    if (n->op == KN_OP_CAST) return KN_OK; /* a source has no operands: `any` below stays false */
    bool eligible = t == KN_DT_F32 || t == KN_DT_BOOL, any = false, all_low = true;
    for (int k = 0; k < n->nin; k++) { /* an f64 or other-16-bit operand is never low: all_low fails */
        const kn_node *a = &g->nodes[n->in[k]];
        if (!kn_dtype_is_float(a->type.dtype) || a->op == KN_OP_FULL) continue;
        any = true;
        all_low = all_low && dt[n->in[k]] == low;
    }
    kn_autocast_class c = kn_autocast_policy(n->op);
    bool goes_low = c == KN_AUTOCAST_LOW ? t == KN_DT_F32 : c == KN_AUTOCAST_KEEP && any && all_low;
    if (!eligible || !goes_low) return KN_OK;
    reads_low[i] = true;
    if (t == KN_DT_F32) dt[i] = low;
    for (int k = 0; k < n->nin; k++) {
        int32_t v = n->in[k];
        if (kn_dtype_is_float(g->nodes[v].type.dtype) && dt[v] != low) early[v] = true;
    }
    return KN_OK;
    /* SKELETON
    // dt[i] = node i's dtype after the pass, reads_low[i] = whether it reads its float
    // operands low, early[v] = true for each float operand v that then needs a low copy
    // right after it. Sources and casts stay; only f32 (or bool) nodes over f32/low
    // operands change; LOW -> low; KEEP -> low when every float operand but a `full` is
    // low (dt[] of the operands) and there is one; F32 -> stays.
    (void)g, (void)i, (void)dt, (void)reads_low, (void)early;
    return kn_not_implemented("lab09", "kn_autocast_decide: a node's dtype and where its casts go");
    END SOLUTION */
}
