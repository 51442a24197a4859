/* builder_ops.c — the named builder calls (kn_add, kn_matmul, kn_softmax, ...).
 *
 * Each is a thin wrapper that packs its arguments into operands and attributes and calls
 * kn_builder_op, which does all the checking, type inference and (eager) execution. The
 * wrappers only validate what kn_attrs cannot hold (list lengths, NULL lists). */
#include <string.h>

#include "ir/ir_impl.h"

static kn_val op1(kn_builder *b, const char *fn, kn_op op, kn_val x, const kn_attrs *a) {
    return kn_builder_op(b, fn, op, 1, &x, a, NULL);
}
static kn_val op2(kn_builder *b, const char *fn, kn_op op, kn_val x, kn_val y, const kn_attrs *a) {
    kn_val in[2] = {x, y};
    return kn_builder_op(b, fn, op, 2, in, a, NULL);
}
static kn_val op3(kn_builder *b, const char *fn, kn_op op, kn_val x, kn_val y, kn_val z, const kn_attrs *a) {
    kn_val in[3] = {x, y, z};
    return kn_builder_op(b, fn, op, 3, in, a, NULL);
}

kn_val kn_add(kn_builder *b, kn_val x, kn_val y) { return op2(b, "kn_add", KN_OP_ADD, x, y, NULL); }
kn_val kn_sub(kn_builder *b, kn_val x, kn_val y) { return op2(b, "kn_sub", KN_OP_SUB, x, y, NULL); }
kn_val kn_mul(kn_builder *b, kn_val x, kn_val y) { return op2(b, "kn_mul", KN_OP_MUL, x, y, NULL); }
kn_val kn_div(kn_builder *b, kn_val x, kn_val y) { return op2(b, "kn_div", KN_OP_DIV, x, y, NULL); }
kn_val kn_eq(kn_builder *b, kn_val x, kn_val y) { return op2(b, "kn_eq", KN_OP_EQ, x, y, NULL); }
kn_val kn_where(kn_builder *b, kn_val c, kn_val x, kn_val y) { return op3(b, "kn_where", KN_OP_WHERE, c, x, y, NULL); }

static kn_val with_scalar(kn_builder *b, const char *fn, kn_op op, kn_val x, double s) {
    const kn_type *t = kn_val_type(b, x);
    if (!t) {
        if (kn_builder_status(b) == KN_OK) kn_builder_fail(b, KN_ERR_ARG, "%s: operand is not a value of this builder", fn);
        return KN_VAL_NONE;
    }
    kn_val c = kn_scalar(b, t->dtype, s);
    return op2(b, fn, op, x, c, NULL);
}
kn_val kn_add_scalar(kn_builder *b, kn_val x, double s) { return with_scalar(b, "kn_add_scalar", KN_OP_ADD, x, s); }
kn_val kn_mul_scalar(kn_builder *b, kn_val x, double s) { return with_scalar(b, "kn_mul_scalar", KN_OP_MUL, x, s); }

kn_val kn_neg(kn_builder *b, kn_val x) { return op1(b, "kn_neg", KN_OP_NEG, x, NULL); }
kn_val kn_exp(kn_builder *b, kn_val x) { return op1(b, "kn_exp", KN_OP_EXP, x, NULL); }
kn_val kn_ln(kn_builder *b, kn_val x) { return op1(b, "kn_ln", KN_OP_LOG, x, NULL); }
kn_val kn_sqrt(kn_builder *b, kn_val x) { return op1(b, "kn_sqrt", KN_OP_SQRT, x, NULL); }
kn_val kn_rsqrt(kn_builder *b, kn_val x) { return op1(b, "kn_rsqrt", KN_OP_RSQRT, x, NULL); }
kn_val kn_tanh(kn_builder *b, kn_val x) { return op1(b, "kn_tanh", KN_OP_TANH, x, NULL); }
kn_val kn_gelu(kn_builder *b, kn_val x) { return op1(b, "kn_gelu", KN_OP_GELU, x, NULL); }
kn_val kn_relu(kn_builder *b, kn_val x) { return op1(b, "kn_relu", KN_OP_RELU, x, NULL); }
kn_val kn_unary(kn_builder *b, kn_unary_op f, kn_val x) {
    kn_op op = kn_unary_ir_op(f);
    if (op == KN_OP_COUNT) {
        if (kn_builder_status(b) == KN_OK)
            kn_builder_fail(b, KN_ERR_ARG, "kn_unary: %s (%d) is not a pointwise function with an IR op "
                            "(kiln/pointwise.def, its rows marked IR)", kn_unary_op_name(f), (int)f);
        return KN_VAL_NONE;
    }
    return op1(b, "kn_unary", op, x, NULL);
}
kn_val kn_unary_grad(kn_builder *b, kn_unary_op f, kn_val dy, kn_val x) {
    kn_attrs a = kn_attrs_default();
    a.fn = (int32_t)f; /* checked by the op's attribute check: a row with a gradient */
    return op2(b, "kn_unary_grad", KN_OP_UNARY_GRAD, dy, x, &a);
}

kn_val kn_cast(kn_builder *b, kn_val x, kn_dtype dt) {
    kn_attrs a = kn_attrs_default();
    a.dtype = dt;
    return op1(b, "kn_cast", KN_OP_CAST, x, &a);
}

kn_val kn_dropout(kn_builder *b, kn_val x, double p, uint64_t seed, uint64_t offset) {
    kn_attrs a = kn_attrs_default();
    if (seed > INT64_MAX || offset > INT64_MAX) {
        kn_builder_fail(b, KN_ERR_ARG, "kn_dropout: seed and offset must be below 2^63");
        return KN_VAL_NONE;
    }
    a.p = p;
    a.seed = (int64_t)seed;
    a.offset = (int64_t)offset;
    return op1(b, "kn_dropout", KN_OP_DROPOUT, x, &a);
}

kn_val kn_causal_fill(kn_builder *b, kn_val x, double value) {
    kn_attrs a = kn_attrs_default();
    a.value = value;
    return op1(b, "kn_causal_fill", KN_OP_CAUSAL_FILL, x, &a);
}

static kn_val reduce(kn_builder *b, const char *fn, kn_op op, kn_val x, int naxes, const int *axes, bool keepdim) {
    kn_attrs a = kn_attrs_default();
    if (naxes < 0 || naxes > KN_MAX_DIMS || (naxes > 0 && !axes)) {
        kn_builder_fail(b, KN_ERR_AXIS, "%s: %d axes (at most %d, and a non-NULL list)", fn, naxes, KN_MAX_DIMS);
        return KN_VAL_NONE;
    }
    a.naxes = naxes;
    for (int i = 0; i < naxes; i++) a.axes[i] = axes[i];
    a.keepdim = keepdim;
    return op1(b, fn, op, x, &a);
}
kn_val kn_sum(kn_builder *b, kn_val x, int naxes, const int *axes, bool keepdim) { return reduce(b, "kn_sum", KN_OP_SUM, x, naxes, axes, keepdim); }
kn_val kn_mean(kn_builder *b, kn_val x, int naxes, const int *axes, bool keepdim) { return reduce(b, "kn_mean", KN_OP_MEAN, x, naxes, axes, keepdim); }
kn_val kn_max(kn_builder *b, kn_val x, int naxes, const int *axes, bool keepdim) { return reduce(b, "kn_max", KN_OP_MAX, x, naxes, axes, keepdim); }

kn_val kn_matmul_t(kn_builder *b, kn_val x, kn_val y, bool ta, bool tb) {
    kn_attrs a = kn_attrs_default();
    a.ta = ta;
    a.tb = tb;
    return op2(b, "kn_matmul", KN_OP_MATMUL, x, y, &a);
}
kn_val kn_matmul(kn_builder *b, kn_val x, kn_val y) { return kn_matmul_t(b, x, y, false, false); }

static bool shape_attr(kn_builder *b, const char *fn, int ndim, const int64_t *shape, kn_attrs *a) {
    if (ndim < 0 || ndim > KN_MAX_DIMS || (ndim > 0 && !shape)) {
        kn_builder_fail(b, KN_ERR_SHAPE, "%s: rank %d is outside [0, %d] (or shape is NULL)", fn, ndim, KN_MAX_DIMS);
        return false;
    }
    a->nshape = ndim;
    for (int i = 0; i < ndim; i++) a->shape[i] = shape[i];
    return true;
}

kn_val kn_reshape(kn_builder *b, kn_val x, int ndim, const int64_t *shape) {
    kn_attrs a = kn_attrs_default();
    return shape_attr(b, "kn_reshape", ndim, shape, &a) ? op1(b, "kn_reshape", KN_OP_RESHAPE, x, &a) : KN_VAL_NONE;
}

kn_val kn_broadcast_to(kn_builder *b, kn_val x, int ndim, const int64_t *shape) {
    kn_attrs a = kn_attrs_default();
    return shape_attr(b, "kn_broadcast_to", ndim, shape, &a) ? op1(b, "kn_broadcast_to", KN_OP_BROADCAST_TO, x, &a) : KN_VAL_NONE;
}

kn_val kn_permute(kn_builder *b, kn_val x, int ndim, const int *perm) {
    kn_attrs a = kn_attrs_default();
    if (ndim < 0 || ndim > KN_MAX_DIMS || (ndim > 0 && !perm)) {
        kn_builder_fail(b, KN_ERR_AXIS, "kn_permute: %d entries (at most %d, and a non-NULL list)", ndim, KN_MAX_DIMS);
        return KN_VAL_NONE;
    }
    a.nperm = ndim;
    for (int i = 0; i < ndim; i++) a.perm[i] = perm[i];
    return op1(b, "kn_permute", KN_OP_PERMUTE, x, &a);
}

kn_val kn_transpose(kn_builder *b, kn_val x, int axis0, int axis1) {
    int nd = kn_val_ndim(b, x), perm[KN_MAX_DIMS];
    if (kn_builder_status(b) != KN_OK) return KN_VAL_NONE;
    if (nd < 0) { kn_builder_fail(b, KN_ERR_ARG, "kn_transpose: operand is not a value of this builder"); return KN_VAL_NONE; }
    int a0 = axis0 < 0 ? axis0 + nd : axis0, a1 = axis1 < 0 ? axis1 + nd : axis1;
    if (a0 < 0 || a0 >= nd || a1 < 0 || a1 >= nd) {
        kn_builder_fail(b, KN_ERR_AXIS, "kn_transpose: axes %d and %d out of range for rank %d", axis0, axis1, nd);
        return KN_VAL_NONE;
    }
    for (int i = 0; i < nd; i++) perm[i] = i;
    perm[a0] = a1;
    perm[a1] = a0;
    return kn_permute(b, x, nd, perm);
}

kn_val kn_slice(kn_builder *b, kn_val x, int axis, int64_t start, int64_t stop, int64_t step) {
    kn_attrs a = kn_attrs_default();
    a.axis = axis;
    a.start = start;
    a.stop = stop;
    a.step = step;
    return op1(b, "kn_slice", KN_OP_SLICE, x, &a);
}

kn_val kn_concat(kn_builder *b, kn_val x, kn_val y, int axis) {
    kn_attrs a = kn_attrs_default();
    a.axis = axis;
    return op2(b, "kn_concat", KN_OP_CONCAT, x, y, &a);
}

kn_val kn_embedding(kn_builder *b, kn_val w, kn_val idx) { return op2(b, "kn_embedding", KN_OP_EMBEDDING, w, idx, NULL); }

kn_val kn_softmax(kn_builder *b, kn_val x, int axis) {
    kn_attrs a = kn_attrs_default();
    a.axis = axis;
    return op1(b, "kn_softmax", KN_OP_SOFTMAX, x, &a);
}
kn_val kn_log_softmax(kn_builder *b, kn_val x, int axis) {
    kn_attrs a = kn_attrs_default();
    a.axis = axis;
    return op1(b, "kn_log_softmax", KN_OP_LOG_SOFTMAX, x, &a);
}

/* Attention's scale, causal mask and softmax in one op; the scale is checked (positive,
 * finite) with the other attributes by kn_builder_op. */
kn_val kn_causal_softmax(kn_builder *b, kn_val x, double scale) {
    kn_attrs a = kn_attrs_default();
    a.scale = scale;
    return op1(b, "kn_causal_softmax", KN_OP_CAUSAL_SOFTMAX, x, &a);
}

kn_val kn_attn_decode(kn_builder *b, kn_val qkv, kn_val kc, kn_val vc, kn_val len, double scale) {
    kn_attrs a = kn_attrs_default();
    a.scale = scale;
    kn_val in[4] = {qkv, kc, vc, len};
    return kn_builder_op(b, "kn_attn_decode", KN_OP_ATTN_DECODE, 4, in, &a, NULL);
}

/* Flash attention: O and the logsumexp packed in one value (kiln/ir.h says why). */
kn_val kn_flash_attn(kn_builder *b, kn_val q, kn_val k, kn_val v, double scale) {
    kn_attrs a = kn_attrs_default();
    a.scale = scale;
    return op3(b, "kn_flash_attn", KN_OP_FLASH_ATTN, q, k, v, &a);
}

kn_val kn_layernorm(kn_builder *b, kn_val x, kn_val w, kn_val bias, double eps) {
    kn_attrs a = kn_attrs_default();
    a.eps = eps;
    return op3(b, "kn_layernorm", KN_OP_LAYERNORM, x, w, bias, &a);
}

kn_val kn_cross_entropy(kn_builder *b, kn_val logits, kn_val targets) {
    return op2(b, "kn_cross_entropy", KN_OP_CROSS_ENTROPY, logits, targets, NULL);
}
