/* verify.c — lab 03 unit: the verifier (kn_graph_verify, contract in kiln/ir.h).
 *
 * Is this graph well formed and well typed? Check every node, in order, and report the
 * FIRST problem with kn_error(status, ...), naming the node as kn_node_label writes it
 * ("%7 = add"):
 *   1. a known op (kn_op_get not NULL), else KN_ERR_FORMAT "%3: invalid op 99";
 *   2. the op's arity: "%7 = add: takes 2 operands, got 1" ("takes 1 operand, got 2" for
 *      an arity of 1) (KN_ERR_FORMAT);
 *   3. operands defined before use: 0 <= in[k] < i, else KN_ERR_FORMAT
 *      "%7 = add: operand %9 is not defined before use". This is SSA: because an operand
 *      id is always smaller than the node's id, no graph can have a cycle;
 *   4. attributes: kn_node_check_attrs (its status, "%7 = sum: " + its message);
 *   5. a valid declared type: rank in [0, KN_MAX_DIMS] and a valid dtype, else
 *      KN_ERR_SHAPE "%0 = input: declared type is invalid (rank 9, dtype 2)"; then
 *      kn_ir_type_ok, else KN_ERR_SHAPE "%0 = input: declared type f32[-1] has a negative
 *      dimension or too many elements";
 *   6. the declared type equals what the op's shape rule infers from the operand types
 *      (kn_node_infer: its status and "%7 = add: " + its message when it fails;
 *      KN_ERR_DTYPE when the dtypes differ, else KN_ERR_SHAPE, with
 *      "%7 = add: declared type f32[2] but the operands give f32[2,3]");
 *   7. input and param names unique: KN_ERR_ARG "%4 = param: name "w" is already used
 *      by %1" (kn_graph_find returns the first node of that name).
 * Then every output must be a defined value: KN_ERR_FORMAT "output 0: %12 is not defined".
 * Passes run the verifier between stages, so a pass that breaks the IR is caught where it
 * did so; kn_builder_finish and kn_interp_new run it too. */
#include <string.h>

#include "ir/ir_impl.h"

kn_status kn_graph_verify(const kn_graph *g) {
    if (!g) return kn_error(KN_ERR_ARG, "kn_graph_verify: graph is NULL");
    /* BEGIN SOLUTION */
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
    /* SKELETON
    return kn_not_implemented("lab03", "kn_graph_verify: check each node (op, arity, operands defined before "
                                       "use, attributes, declared type = inferred type, unique names), then outputs");
    END SOLUTION */
}
