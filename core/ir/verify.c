/* verify.c — the verifier: is this graph well formed and well typed?
 *
 * Checked for every node, in order: a known op; the op's arity; operands defined before
 * use (SSA: an operand id is smaller than the node's id, which also rules out cycles);
 * attributes (only those the op takes, values in range); the declared type equals the
 * type the op's shape rule infers from the operand types (sources: a valid declared
 * type); input and param names unique. Then every output is a defined value. The first
 * problem is reported, naming the node: "%7 = add: operand shapes f32[2,3] and f32[4] do
 * not broadcast". Passes run the verifier between stages, so a pass that breaks the IR
 * is caught where it did so. */
#include <string.h>

#include "ir/ir_impl.h"

kn_status kn_node_infer(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    if (!n || !out || !msg) return kn_error(KN_ERR_ARG, "kn_node_infer: NULL argument");
    if ((unsigned)n->op >= KN_OP_COUNT) { snprintf(msg, msz, "invalid op %d", (int)n->op); return KN_ERR_ARG; }
    kn_type t = n->type;
    kn_status st = kn_op_impls[n->op].infer(n, in, &t, msg, msz);
    if (st == KN_OK) *out = t;
    return st;
}

kn_status kn_graph_verify(const kn_graph *g) {
    if (!g) return kn_error(KN_ERR_ARG, "kn_graph_verify: graph is NULL");
    char msg[400], lb[64], t0[160], t1[160];
    for (int32_t i = 0; i < g->nnodes; i++) {
        const kn_node *n = &g->nodes[i];
        const kn_op_info *info = kn_op_get(n->op);
        if (!info) return kn_error(KN_ERR_FORMAT, "%%%d: invalid op %d", i, (int)n->op);
        kn_node_label(g, i, lb, sizeof lb);
        if (n->nin != info->arity)
            return kn_error(KN_ERR_FORMAT, "%s: takes %d operand%s, got %d", lb, info->arity, info->arity == 1 ? "" : "s", n->nin);
        const kn_type *in[KN_MAX_OPERANDS];
        for (int k = 0; k < n->nin; k++) {
            if (n->in[k] < 0 || n->in[k] >= i)
                return kn_error(KN_ERR_FORMAT, "%s: operand %%%d is not defined before use", lb, n->in[k]);
            in[k] = &g->nodes[n->in[k]].type;
        }
        kn_status st = kn_node_check_attrs(n, msg, sizeof msg);
        if (st != KN_OK) return kn_error(st, "%s: %s", lb, msg);
        if (n->type.ndim < 0 || n->type.ndim > KN_MAX_DIMS || !kn_dtype_valid(n->type.dtype))
            return kn_error(KN_ERR_SHAPE, "%s: declared type is invalid (rank %d, dtype %d)", lb, n->type.ndim, (int)n->type.dtype);
        if (!kn_ir_type_ok(&n->type))
            return kn_error(KN_ERR_SHAPE, "%s: declared type %s has a negative dimension or too many elements", lb,
                            kn_type_str(&n->type, t0, sizeof t0));
        kn_type t;
        st = kn_node_infer(n, in, &t, msg, sizeof msg);
        if (st != KN_OK) return kn_error(st, "%s: %s", lb, msg);
        if (!kn_type_equal(&t, &n->type))
            return kn_error(t.dtype != n->type.dtype ? KN_ERR_DTYPE : KN_ERR_SHAPE,
                            "%s: declared type %s but the operands give %s", lb,
                            kn_type_str(&n->type, t0, sizeof t0), kn_type_str(&t, t1, sizeof t1));
        if (n->op == KN_OP_INPUT || n->op == KN_OP_PARAM) {
            int32_t j = kn_graph_find(g, n->attrs.name);
            if (j != i) return kn_error(KN_ERR_ARG, "%s: name \"%s\" is already used by %%%d", lb, n->attrs.name, j);
        }
    }
    for (int i = 0; i < g->noutputs; i++)
        if (g->outputs[i] < 0 || g->outputs[i] >= g->nnodes)
            return kn_error(KN_ERR_FORMAT, "output %d: %%%d is not defined", i, g->outputs[i]);
    return KN_OK;
}
