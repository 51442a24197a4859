/* rules.c — lab 02 unit: nine backward rules (contracts in kiln/autograd.h, "lab 02 units").
 *
 * A rule reads the forward node `id` of the builder's graph (its operands, attributes and
 * result) and emits, with ordinary builder calls, the gradient of each operand that wants
 * one. Useful facts:
 *   - kn_builder_graph(b)->nodes[id] is the node; .in[k] is operand k's id, so operand k
 *     is the value (kn_val){node.in[k]}; the node's own value (its result z) is
 *     (kn_val){id}: rules of exp and tanh reuse z instead of recomputing it;
 *   - the node array moves when nodes are added: copy what you need (a kn_node, a
 *     kn_type) before emitting, never keep a pointer across a builder call;
 *   - only answer the operands that want a gradient: if (kn_want(dx[k])) dx[k] = ...;
 *   - broadcasting ops (mul, div, matmul's batch axes) sum their gradient back to the
 *     operand's shape with kn_sum_to (backward.c);
 *   - a reduction's node keeps its axes in attrs (naxes == 0: every axis);
 *     kn_ir_reduce_mask turns them into a bitmask of reduced axes.
 * Every rule is checked against finite differences in fp64 by the tests. */
#include <string.h>

#include "ir/ir_impl.h"
#include "kiln/autograd.h"

// Helpers shared by your rules (static functions) go here.

void bw_mul(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    (void)id; (void)dy; (void)dx;
    kn_builder_fail(b, kn_not_implemented("lab02", "bw_mul: grad x = dy*y, grad y = dy*x, each summed back"), "%s",
                    kn_last_error());
}

void bw_div(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    (void)id; (void)dy; (void)dx;
    kn_builder_fail(b, kn_not_implemented("lab02", "bw_div: grad x = dy/y, grad y = -dy*z/y, each summed back"), "%s",
                    kn_last_error());
}

void bw_exp(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    (void)id; (void)dy; (void)dx;
    kn_builder_fail(b, kn_not_implemented("lab02", "bw_exp: dx = dy*exp(x), and exp(x) is the node's value"),
                    "%s", kn_last_error());
}

void bw_log(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    (void)id; (void)dy; (void)dx;
    kn_builder_fail(b, kn_not_implemented("lab02", "bw_log: dx = dy/x"), "%s", kn_last_error());
}

void bw_tanh(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    (void)id; (void)dy; (void)dx;
    kn_builder_fail(b, kn_not_implemented("lab02", "bw_tanh: dx = dy*(1 - z*z), z the node's value"), "%s",
                    kn_last_error());
}

void bw_sum(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    (void)id; (void)dy; (void)dx;
    kn_builder_fail(b, kn_not_implemented("lab02", "bw_sum: reshape dy to the keepdim shape, broadcast to x"),
                    "%s", kn_last_error());
}

void bw_mean(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    (void)id; (void)dy; (void)dx;
    kn_builder_fail(b, kn_not_implemented("lab02", "bw_mean: as bw_sum, divided by the elements per mean"),
                    "%s", kn_last_error());
}

void bw_matmul(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    (void)id; (void)dy; (void)dx;
    kn_builder_fail(b, kn_not_implemented("lab02", "bw_matmul: da = dy@b^T, db = a^T@dy (mind ta, tb and "
                                                   "the batch axes)"), "%s", kn_last_error());
}

void bw_permute(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    (void)id; (void)dy; (void)dx;
    kn_builder_fail(b, kn_not_implemented("lab02", "bw_permute: permute dy by the inverse permutation"), "%s",
                    kn_last_error());
}
