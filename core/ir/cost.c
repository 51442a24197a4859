/* cost.c — the cost model of every op (the "cost" column of ops.def).
 *
 * A cost is (floating-point operations, bytes moved): the bytes are what a kernel that
 * reads each operand once and writes its result once moves, at the dtype sizes. That is
 * the roofline's view of a kernel: its arithmetic intensity is flops / bytes. The model
 * is deliberately simple (a transcendental counts as one flop); passes compare costs,
 * they do not predict time. */
#include "ir/ir_impl.h"

static double type_bytes(const kn_type *t) { return (double)kn_type_numel(t) * (double)kn_dtype_size(t->dtype); }

static double io_bytes(const kn_graph *g, const kn_node *n) {
    double b = type_bytes(&n->type);
    for (int i = 0; i < n->nin; i++) b += type_bytes(&g->nodes[n->in[i]].type);
    return b;
}

kn_cost cost_zero(const kn_graph *g, const kn_node *n) { (void)g; (void)n; return (kn_cost){0, 0}; }

kn_cost cost_write(const kn_graph *g, const kn_node *n) { (void)g; return (kn_cost){0, type_bytes(&n->type)}; }

kn_cost cost_copy(const kn_graph *g, const kn_node *n) { return (kn_cost){0, io_bytes(g, n)}; }

kn_cost cost_pointwise(const kn_graph *g, const kn_node *n) {
    return (kn_cost){(double)kn_type_numel(&n->type), io_bytes(g, n)};
}

kn_cost cost_reduce(const kn_graph *g, const kn_node *n) {
    return (kn_cost){(double)kn_type_numel(&g->nodes[n->in[0]].type), io_bytes(g, n)};
}

kn_cost cost_matmul(const kn_graph *g, const kn_node *n) {
    const kn_type *a = &g->nodes[n->in[0]].type;
    int64_t k = n->attrs.ta ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1];
    return (kn_cost){2.0 * (double)kn_type_numel(&n->type) * (double)k, io_bytes(g, n)};
}

/* A product with an epilogue: the product's flops (from the operands: the result stacks
 * two values for matmul_bias_gelu and matmul_bgrad) plus one per element of the epilogue;
 * bytes are operands and result, read and written once (no product stored in between). */
kn_cost cost_matmul_ep(const kn_graph *g, const kn_node *n) {
    const kn_type *a = &g->nodes[n->in[0]].type, *b = &g->nodes[n->in[1]].type;
    double m = (double)(n->attrs.ta ? a->shape[1] : a->shape[0]), k = (double)(n->attrs.ta ? a->shape[0] : a->shape[1]);
    double nn = (double)(n->attrs.tb ? b->shape[0] : b->shape[1]);
    return (kn_cost){2.0 * m * nn * k + (double)kn_type_numel(&n->type), io_bytes(g, n)};
}

/* softmax-like: max, exp, sum, scale: about 5 flops per element of the widest operand. */
kn_cost cost_softmax(const kn_graph *g, const kn_node *n) {
    double e = (double)kn_type_numel(&n->type);
    for (int i = 0; i < n->nin; i++) {
        double k = (double)kn_type_numel(&g->nodes[n->in[i]].type);
        if (k > e) e = k;
    }
    return (kn_cost){5.0 * e, io_bytes(g, n)};
}

/* flash attention: per (query, key) pair the causal mask keeps (T (T + 1) / 2 of each
 * [T, T] matrix; the kernels skip the rest), the forward's two dot products of length D
 * (q . k and the p v update: 4 D) plus ~5 for the online softmax; the backward's five
 * (the recomputed scores, dp, and the dv, dk, dq updates: 10 D) plus ~5. Bytes are the
 * operands and the result only: the scores never reach memory. */
kn_cost cost_flash_attn(const kn_graph *g, const kn_node *n) {
    int64_t bh, tt, dd, nh;
    kn_flash_dims(&g->nodes[n->in[0]].type, &n->attrs, &bh, &tt, &dd, &nh);
    double t = (double)tt, d = (double)dd, heads = (double)bh;
    double per = n->op == KN_OP_FLASH_ATTN_BWD ? 10.0 * d + 5.0 : 4.0 * d + 5.0;
    return (kn_cost){heads * t * (t + 1) / 2 * per, io_bytes(g, n)};
}

kn_cost cost_norm(const kn_graph *g, const kn_node *n) {
    return (kn_cost){8.0 * (double)kn_type_numel(&n->type), io_bytes(g, n)};
}

kn_cost kn_node_cost(const kn_graph *g, int32_t id) {
    if (!g || id < 0 || id >= g->nnodes || (unsigned)g->nodes[id].op >= KN_OP_COUNT) return (kn_cost){0, 0};
    return kn_op_impls[g->nodes[id].op].cost(g, &g->nodes[id]);
}

kn_cost kn_graph_cost(const kn_graph *g) {
    kn_cost c = {0, 0};
    for (int32_t i = 0; g && i < g->nnodes; i++) {
        kn_cost k = kn_node_cost(g, i);
        c.flops += k.flops;
        c.bytes += k.bytes;
    }
    return c;
}
