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

/* BEGIN SOLUTION */
static kn_node node_of(kn_builder *b, int32_t id) { return kn_builder_graph(b)->nodes[id]; }
static kn_val operand(kn_builder *b, int32_t id, int k) { return (kn_val){kn_builder_graph(b)->nodes[id].in[k]}; }
static kn_type type_of(kn_builder *b, kn_val v) { return *kn_val_type(b, v); }

/* dy of a reduction reshaped to its keepdim form (size 1 on every reduced axis), so that
 * it broadcasts back against x; *xt receives x's type. */
static kn_val unreduce(kn_builder *b, int32_t id, kn_val dy, kn_type *xt) {
    kn_node n = node_of(b, id);
    *xt = type_of(b, operand(b, id, 0));
    unsigned mask;
    kn_ir_reduce_mask(&n.attrs, xt->ndim, &mask);
    int64_t kshape[KN_MAX_DIMS];
    for (int i = 0; i < xt->ndim; i++) kshape[i] = (mask & (1u << i)) ? 1 : xt->shape[i];
    return kn_reshape(b, dy, xt->ndim, kshape);
}
/* SKELETON
// Helpers shared by your rules (static functions) go here.
END SOLUTION */

void bw_mul(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    /* BEGIN SOLUTION */
    kn_val x = operand(b, id, 0), y = operand(b, id, 1);
    if (kn_want(dx[0])) dx[0] = kn_sum_to(b, kn_mul(b, dy, y), x);
    if (kn_want(dx[1])) dx[1] = kn_sum_to(b, kn_mul(b, dy, x), y);
    /* SKELETON
    (void)id; (void)dy; (void)dx;
    kn_builder_fail(b, kn_not_implemented("lab02", "bw_mul: grad x = dy*y, grad y = dy*x, each summed back"), "%s",
                    kn_last_error());
    END SOLUTION */
}

void bw_div(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    /* BEGIN SOLUTION */
    kn_val x = operand(b, id, 0), y = operand(b, id, 1), z = {id};
    if (kn_want(dx[0])) dx[0] = kn_sum_to(b, kn_div(b, dy, y), x);
    if (kn_want(dx[1])) dx[1] = kn_sum_to(b, kn_neg(b, kn_div(b, kn_mul(b, dy, z), y)), y);
    /* SKELETON
    (void)id; (void)dy; (void)dx;
    kn_builder_fail(b, kn_not_implemented("lab02", "bw_div: grad x = dy/y, grad y = -dy*z/y, each summed back"), "%s",
                    kn_last_error());
    END SOLUTION */
}

void bw_exp(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    /* BEGIN SOLUTION */
    dx[0] = kn_mul(b, dy, (kn_val){id});
    /* SKELETON
    (void)id; (void)dy; (void)dx;
    kn_builder_fail(b, kn_not_implemented("lab02", "bw_exp: dx = dy*exp(x), and exp(x) is the node's value"),
                    "%s", kn_last_error());
    END SOLUTION */
}

void bw_log(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    /* BEGIN SOLUTION */
    dx[0] = kn_div(b, dy, operand(b, id, 0));
    /* SKELETON
    (void)id; (void)dy; (void)dx;
    kn_builder_fail(b, kn_not_implemented("lab02", "bw_log: dx = dy/x"), "%s", kn_last_error());
    END SOLUTION */
}

void bw_tanh(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    /* BEGIN SOLUTION */
    kn_val z = {id};
    dx[0] = kn_sub(b, dy, kn_mul(b, dy, kn_mul(b, z, z)));
    /* SKELETON
    (void)id; (void)dy; (void)dx;
    kn_builder_fail(b, kn_not_implemented("lab02", "bw_tanh: dx = dy*(1 - z*z), z the node's value"), "%s",
                    kn_last_error());
    END SOLUTION */
}

void bw_sum(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    /* BEGIN SOLUTION */
    kn_type xt;
    kn_val k = unreduce(b, id, dy, &xt);
    dx[0] = kn_broadcast_to(b, k, xt.ndim, xt.shape);
    /* SKELETON
    (void)id; (void)dy; (void)dx;
    kn_builder_fail(b, kn_not_implemented("lab02", "bw_sum: reshape dy to the keepdim shape, broadcast to x"),
                    "%s", kn_last_error());
    END SOLUTION */
}

void bw_mean(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    /* BEGIN SOLUTION */
    kn_type xt;
    kn_val k = unreduce(b, id, dy, &xt);
    kn_type zt = node_of(b, id).type;
    int64_t in_n = kn_type_numel(&xt), out_n = kn_type_numel(&zt);
    double scale = in_n ? (double)out_n / (double)in_n : 0.0; /* 1 / (elements per mean) */
    dx[0] = kn_broadcast_to(b, kn_mul_scalar(b, k, scale), xt.ndim, xt.shape);
    /* SKELETON
    (void)id; (void)dy; (void)dx;
    kn_builder_fail(b, kn_not_implemented("lab02", "bw_mean: as bw_sum, divided by the elements per mean"),
                    "%s", kn_last_error());
    END SOLUTION */
}

void bw_matmul(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    /* BEGIN SOLUTION */
    kn_node n = node_of(b, id);
    bool ta = n.attrs.ta, tb = n.attrs.tb;
    kn_val A = operand(b, id, 0), B = operand(b, id, 1);
    kn_type at = type_of(b, A), bt = type_of(b, B), gt = type_of(b, dy);
    if (kn_want(dx[0])) /* z = a@b: da = dy@b^T; z = a^T@b: da = (dy@b^T)^T = b@dy^T */
        dx[0] = kn_sum_to(b, ta ? kn_matmul_t(b, B, dy, tb, true) : kn_matmul_t(b, dy, B, false, !tb), A);
    if (kn_want(dx[1])) {
        if (bt.ndim == 2 && at.ndim > 2 && !ta) {
            /* [.., m, k] @ [k, n]: fold the batch into rows, one matmul instead of a
             * batch of them summed afterwards. */
            int64_t a2[2] = {-1, at.shape[at.ndim - 1]}, g2[2] = {-1, gt.shape[gt.ndim - 1]};
            kn_val ar = kn_reshape(b, A, 2, a2), gr = kn_reshape(b, dy, 2, g2);
            dx[1] = tb ? kn_matmul_t(b, gr, ar, true, false) : kn_matmul_t(b, ar, gr, true, false);
        } else {
            dx[1] = kn_sum_to(b, tb ? kn_matmul_t(b, dy, A, true, ta) : kn_matmul_t(b, A, dy, !ta, false), B);
        }
    }
    /* SKELETON
    (void)id; (void)dy; (void)dx;
    kn_builder_fail(b, kn_not_implemented("lab02", "bw_matmul: da = dy@b^T, db = a^T@dy (mind ta, tb and "
                                                   "the batch axes)"), "%s", kn_last_error());
    END SOLUTION */
}

void bw_permute(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    /* BEGIN SOLUTION */
    kn_node n = node_of(b, id);
    int inv[KN_MAX_DIMS], nd = n.attrs.nperm;
    for (int i = 0; i < nd; i++) {
        int p = (int)(n.attrs.perm[i] < 0 ? n.attrs.perm[i] + nd : n.attrs.perm[i]);
        inv[p] = i;
    }
    dx[0] = kn_permute(b, dy, nd, inv);
    /* SKELETON
    (void)id; (void)dy; (void)dx;
    kn_builder_fail(b, kn_not_implemented("lab02", "bw_permute: permute dy by the inverse permutation"), "%s",
                    kn_last_error());
    END SOLUTION */
}
