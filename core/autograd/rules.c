/* rules.c — the backward rules of the differentiable ops (the "backward" column of
 * ops.def) that are not lab 02 units: mul, div, exp, log, tanh, sum, mean, matmul and
 * permute are lab 02 units (labs/lab02-autograd/rules.c) (contracts in kiln/autograd.h).
 *
 * A rule sees the forward node (its operands, attributes and result, all values of the
 * builder) and the gradient dy of its result, and emits the gradients of the operands
 * that want one, using ordinary builder calls. Rules for broadcasting ops sum the
 * gradient back to the operand's shape (kn_sum_to, a lab 02 unit); views apply their inverse;
 * the pointwise functions with a gradient column share bw_unary (kiln/pointwise.def); fused ops
 * have fused backward ops (softmax_bwd, causal_softmax_bwd, layernorm_dx, ...). Every rule
 * is checked against finite differences in fp64 (tests/core/test_autograd_*.c). */
#include <string.h>

#include "ir/ir_impl.h"
#include "kiln/autograd.h"

static const kn_node *node(kn_builder *b, int32_t id) { return &kn_builder_graph(b)->nodes[id]; }
static kn_val in_(kn_builder *b, int32_t id, int k) { return (kn_val){node(b, id)->in[k]}; }
static kn_type type_of(kn_builder *b, kn_val v) { return *kn_val_type(b, v); }

static void set(kn_val *dx, int k, kn_val v) { if (kn_want(dx[k])) dx[k] = v; }

void bw_add(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    if (kn_want(dx[0])) dx[0] = kn_sum_to(b, dy, in_(b, id, 0));
    if (kn_want(dx[1])) dx[1] = kn_sum_to(b, dy, in_(b, id, 1));
}

void bw_sub(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    if (kn_want(dx[0])) dx[0] = kn_sum_to(b, dy, in_(b, id, 0));
    if (kn_want(dx[1])) dx[1] = kn_sum_to(b, kn_neg(b, dy), in_(b, id, 1));
}

void bw_where(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    kn_val c = in_(b, id, 0), zero = kn_scalar(b, type_of(b, dy).dtype, 0.0);
    set(dx, 0, KN_VAL_NONE);
    if (kn_want(dx[1])) dx[1] = kn_sum_to(b, kn_where(b, c, dy, zero), in_(b, id, 1));
    if (kn_want(dx[2])) dx[2] = kn_sum_to(b, kn_where(b, c, zero, dy), in_(b, id, 2));
}

void bw_neg(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) { (void)id; dx[0] = kn_neg(b, dy); }
void bw_sqrt(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    dx[0] = kn_div(b, kn_mul_scalar(b, dy, 0.5), (kn_val){id});
}

void bw_rsqrt(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    kn_val y = {id};
    dx[0] = kn_mul(b, kn_mul_scalar(b, dy, -0.5), kn_mul(b, y, kn_mul(b, y, y)));
}

static kn_val two(kn_builder *b, kn_op op, kn_val x, kn_val y, const kn_attrs *a) {
    kn_val in[2] = {x, y};
    return kn_builder_op(b, "kn_backward", op, 2, in, a, NULL);
}

/* The rule of every pointwise function with a gradient column (kiln/pointwise.def, ir
 * column IR(bw_unary)): dx = unary_grad {fn=f}(dy, x), the column's formula. */
void bw_unary(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    kn_unary_op f;
    if (!kn_op_unary(node(b, id)->op, &f)) {
        kn_builder_fail(b, KN_ERR_INTERNAL, "bw_unary: %%%d = %s is not a pointwise function", (int)id,
                        kn_op_name(node(b, id)->op));
        return;
    }
    kn_attrs a = kn_attrs_default();
    a.fn = (int32_t)f;
    dx[0] = two(b, KN_OP_UNARY_GRAD, dy, in_(b, id, 0), &a);
}

void bw_cast(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    kn_dtype from = type_of(b, in_(b, id, 0)).dtype;
    dx[0] = kn_dtype_is_float(from) && kn_dtype_is_float(type_of(b, dy).dtype) ? kn_cast(b, dy, from) : KN_VAL_NONE;
}

void bw_dropout(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    kn_attrs a = node(b, id)->attrs; /* the same seed and offset: the same mask */
    dx[0] = kn_builder_op(b, "kn_backward", KN_OP_DROPOUT, 1, &dy, &a, NULL);
}

void bw_causal_fill(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    (void)id;
    dx[0] = kn_causal_fill(b, dy, 0.0); /* filled positions do not depend on x */
}

/* dy of a reduction brought back to x's shape (keepdim form, then broadcast). */
static kn_val unreduce(kn_builder *b, int32_t id, kn_val dy, kn_type *xt) {
    const kn_node *n = node(b, id);
    *xt = type_of(b, in_(b, id, 0));
    unsigned mask;
    kn_ir_reduce_mask(&n->attrs, xt->ndim, &mask);
    int64_t kshape[KN_MAX_DIMS];
    for (int i = 0; i < xt->ndim; i++) kshape[i] = (mask & (1u << i)) ? 1 : xt->shape[i];
    return kn_reshape(b, dy, xt->ndim, kshape);
}

/* The gradient goes to every position equal to the maximum (all of them on ties). */
void bw_max(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    kn_type xt;
    kn_val x = in_(b, id, 0);
    kn_val k = unreduce(b, id, dy, &xt);
    kn_val m = unreduce(b, id, (kn_val){id}, &xt);
    kn_val mask = kn_cast(b, kn_eq(b, x, m), xt.dtype);
    dx[0] = kn_mul(b, mask, k);
}

void bw_reshape(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    kn_type xt = type_of(b, in_(b, id, 0));
    dx[0] = kn_reshape(b, dy, xt.ndim, xt.shape);
}

void bw_broadcast_to(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) { dx[0] = kn_sum_to(b, dy, in_(b, id, 0)); }

void bw_slice(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    kn_attrs a = node(b, id)->attrs;
    kn_type xt = type_of(b, in_(b, id, 0));
    a.nshape = xt.ndim;
    memcpy(a.shape, xt.shape, sizeof(int64_t) * (size_t)xt.ndim);
    dx[0] = kn_builder_op(b, "kn_backward", KN_OP_SLICE_GRAD, 1, &dy, &a, NULL);
}

void bw_slice_grad(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    kn_attrs a = node(b, id)->attrs;
    dx[0] = kn_slice(b, dy, (int)a.axis, a.start, a.stop, a.step);
}

/* Each operand's gradient is its block of dy: two slices along the axis. */
void bw_concat(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    kn_type xt = type_of(b, in_(b, id, 0)), yt = type_of(b, (kn_val){id});
    int ax = (int)(node(b, id)->attrs.axis < 0 ? node(b, id)->attrs.axis + yt.ndim : node(b, id)->attrs.axis);
    int64_t n0 = xt.shape[ax];
    if (kn_want(dx[0])) dx[0] = kn_slice(b, dy, ax, 0, n0, 1);
    if (kn_want(dx[1])) dx[1] = kn_slice(b, dy, ax, n0, yt.shape[ax], 1);
}

void bw_embedding(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    kn_attrs a = kn_attrs_default();
    kn_type wt = type_of(b, in_(b, id, 0));
    a.nshape = 2;
    a.shape[0] = wt.shape[0];
    a.shape[1] = wt.shape[1];
    set(dx, 1, KN_VAL_NONE);
    if (kn_want(dx[0])) dx[0] = two(b, KN_OP_EMBEDDING_GRAD, dy, in_(b, id, 1), &a);
}

void bw_softmax(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    kn_attrs a = node(b, id)->attrs;
    dx[0] = two(b, KN_OP_SOFTMAX_BWD, dy, (kn_val){id}, &a);
}

void bw_log_softmax(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    kn_attrs a = node(b, id)->attrs;
    dx[0] = two(b, KN_OP_LOG_SOFTMAX_BWD, dy, (kn_val){id}, &a);
}

/* Like softmax's, the backward of the fused attention softmax needs only its output y
 * (masked entries are 0 there, so no gradient reaches them) and the scale. */
void bw_causal_softmax(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    kn_attrs a = node(b, id)->attrs;
    dx[0] = two(b, KN_OP_CAUSAL_SOFTMAX_BWD, dy, (kn_val){id}, &a);
}

/* flash_attn: one fused backward op recomputes the probabilities from the saved logsumexp
 * (y's last column) and returns dq, dk, dv stacked; each wanted one is a slice of it. */
void bw_flash_attn(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    kn_attrs a = node(b, id)->attrs;
    kn_val in[5] = {in_(b, id, 0), in_(b, id, 1), in_(b, id, 2), (kn_val){id}, dy};
    kn_val g = kn_builder_op(b, "kn_backward", KN_OP_FLASH_ATTN_BWD, 5, in, &a, NULL);
    kn_type q = type_of(b, in[0]);
    for (int k = 0; k < 3; k++)
        if (kn_want(dx[k])) dx[k] = kn_reshape(b, kn_slice(b, g, 0, k, k + 1, 1), q.ndim, q.shape);
}

/* Sum over every axis but the last (a [..., C] value to [C]). */
static kn_val sum_rows(kn_builder *b, kn_val v) {
    int nd = kn_val_ndim(b, v), axes[KN_MAX_DIMS];
    if (nd <= 1) return v;
    for (int i = 0; i < nd - 1; i++) axes[i] = i;
    return kn_sum(b, v, nd - 1, axes, false);
}

void bw_layernorm(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    kn_attrs a = node(b, id)->attrs;
    kn_val x = in_(b, id, 0), w = in_(b, id, 1);
    if (kn_want(dx[0])) {
        kn_val in[3] = {dy, x, w};
        dx[0] = kn_builder_op(b, "kn_backward", KN_OP_LAYERNORM_DX, 3, in, &a, NULL);
    }
    if (kn_want(dx[1])) {
        kn_val xhat = kn_builder_op(b, "kn_backward", KN_OP_NORMALIZE, 1, &x, &a, NULL);
        dx[1] = sum_rows(b, kn_mul(b, dy, xhat));
    }
    if (kn_want(dx[2])) dx[2] = sum_rows(b, dy);
}

void bw_cross_entropy(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    set(dx, 1, KN_VAL_NONE);
    if (kn_want(dx[0])) {
        kn_val in[3] = {dy, in_(b, id, 0), in_(b, id, 1)};
        dx[0] = kn_builder_op(b, "kn_backward", KN_OP_CROSS_ENTROPY_BWD, 3, in, NULL, NULL);
    }
}
