/* record.c — lab 03 unit: the builder's record path (capture).
 *
 * Every builder call (kn_add, kn_matmul, kn_input, ...) is a thin wrapper that fills in
 * an op, operands and attributes and calls kn_builder_record (contract in kiln/ir.h,
 * "lab 03 units"). This one function is where eager mode and graph mode part ways:
 *
 *              check operands and attributes, infer the type
 *                                 |
 *              EAGER: run the kernel now    GRAPH: run nothing
 *                                 |
 *              append the node (kn_builder_push) and return its value
 *
 * Both modes append the same node, and the interpreter later runs the same kernel on it
 * (kn_node_eval), so a model function run eagerly and the same function captured and
 * interpreted give bitwise identical results. That is capture in the torch.fx sense:
 * the model is ordinary code; the builder's mode decides whether calling it computes
 * or records.
 *
 * Invariant you keep: when the builder's status is KN_OK, every node of its graph has a
 * valid inferred type, and in EAGER mode node i's tensor is kn_val_tensor(b, %i). So
 * check everything BEFORE computing or appending anything; on the first problem call
 * kn_builder_fail(b, status, "%s: ...", fn, ...) and return KN_VAL_NONE.
 * Useful: kn_op_get, kn_val_type, kn_node_check_attrs, kn_node_infer, kn_ir_type_ok,
 * kn_graph_find, kn_ir_contiguous, kn_node_eval, kn_builder_push (core/ir/ir_impl.h). */
#include <string.h>

#include "ir/ir_impl.h"

kn_val kn_builder_record(kn_builder *b, const char *fn, kn_op op, int nin, const kn_val *in,
                         const kn_attrs *attrs, const kn_type *type, const kn_tensor *data) {
    /* BEGIN SOLUTION */
    if (!b || kn_builder_status(b) != KN_OK) return KN_VAL_NONE;
    const kn_op_info *info = kn_op_get(op);
    char msg[400];
    if (!info) {
        kn_builder_fail(b, KN_ERR_ARG, "%s: invalid op %d", fn, (int)op);
        return KN_VAL_NONE;
    }
    if (nin != info->arity || nin < 0 || nin > KN_MAX_OPERANDS || (nin > 0 && !in)) {
        kn_builder_fail(b, KN_ERR_ARG, "%s: %s takes %d operands, got %d", fn, info->name, info->arity, nin);
        return KN_VAL_NONE;
    }
    kn_node n;
    memset(&n, 0, sizeof n);
    n.op = op;
    n.nin = nin;
    n.attrs = attrs ? *attrs : kn_attrs_default();
    kn_type tin_copy[KN_MAX_OPERANDS];
    const kn_type *tin[KN_MAX_OPERANDS];
    for (int i = 0; i < nin; i++) {
        const kn_type *t = kn_val_type(b, in[i]);
        if (!t) {
            kn_builder_fail(b, KN_ERR_ARG, "%s: operand %d is not a value of this builder (id %d)", fn, i,
                            (int)in[i].id);
            return KN_VAL_NONE;
        }
        n.in[i] = in[i].id;
        tin_copy[i] = *t;
        tin[i] = &tin_copy[i];
    }
    kn_status st = kn_node_check_attrs(&n, msg, sizeof msg);
    if (st != KN_OK) {
        kn_builder_fail(b, st, "%s: %s", fn, msg);
        return KN_VAL_NONE;
    }
    if (info->category == KN_CAT_SOURCE) {
        if (!type) {
            kn_builder_fail(b, KN_ERR_ARG, "%s: a source needs its type", fn);
            return KN_VAL_NONE;
        }
        n.type = *type;
    }
    st = kn_node_infer(&n, tin, &n.type, msg, sizeof msg);
    if (st != KN_OK) {
        kn_builder_fail(b, st, "%s: %s", fn, msg);
        return KN_VAL_NONE;
    }
    if (!kn_ir_type_ok(&n.type)) {
        kn_builder_fail(b, KN_ERR_SHAPE, "%s: result %s has a negative dimension or too many elements", fn,
                        kn_type_str(&n.type, msg, sizeof msg));
        return KN_VAL_NONE;
    }
    bool named = op == KN_OP_INPUT || op == KN_OP_PARAM;
    if (named && kn_graph_find(kn_builder_graph(b), n.attrs.name) >= 0) {
        kn_builder_fail(b, KN_ERR_ARG, "%s: the name \"%s\" is already used in this graph", fn, n.attrs.name);
        return KN_VAL_NONE;
    }
    kn_tensor *t = NULL;
    if (kn_builder_mode(b) == KN_MODE_EAGER) {
        if (named) {
            if (!data) {
                kn_builder_fail(b, KN_ERR_ARG, "%s: eager mode needs data for \"%s\" (use kn_input/kn_param with a tensor)",
                                fn, n.attrs.name);
                return KN_VAL_NONE;
            }
            st = kn_ir_contiguous(fn, data, &t);
        } else {
            const kn_tensor *targs[KN_MAX_OPERANDS];
            for (int i = 0; i < nin; i++) targs[i] = kn_val_tensor(b, in[i]);
            st = kn_node_eval(&n, targs, &t);
        }
        if (st != KN_OK) {
            kn_tensor_free(t);
            kn_builder_fail(b, st, "%s: %s", fn, kn_last_error());
            return KN_VAL_NONE;
        }
    }
    int32_t id;
    st = kn_builder_push(b, &n, t, &id); /* takes t */
    if (st != KN_OK) {
        kn_builder_fail(b, st, "%s: %s", fn, kn_last_error());
        return KN_VAL_NONE;
    }
    return (kn_val){id};
    /* SKELETON
    (void)op; (void)nin; (void)in; (void)attrs; (void)type; (void)data;
    if (b) kn_builder_fail(b, kn_not_implemented("lab03", "kn_builder_record: check, infer the type, run it "
                                                          "when eager, append the node"), "%s: %s", fn, kn_last_error());
    return KN_VAL_NONE;
    END SOLUTION */
}
