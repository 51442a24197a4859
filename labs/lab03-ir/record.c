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
    (void)op; (void)nin; (void)in; (void)attrs; (void)type; (void)data;
    if (b) kn_builder_fail(b, kn_not_implemented("lab03", "kn_builder_record: check, infer the type, run it "
                                                          "when eager, append the node"), "%s: %s", fn, kn_last_error());
    return KN_VAL_NONE;
}
