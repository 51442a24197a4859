/* verify.c — kn_node_infer, the entry to the shape rules, used by the verifier and the
 * builder. The verifier itself (kn_graph_verify) is a lab 03 unit:
 * labs/lab03-ir/verify.c.
 *
 * The verifier checks for every node, in order: a known op; the op's arity; operands defined before
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
