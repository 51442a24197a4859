/* infer.c — the shape and dtype rule of every op (the "infer" column of ops.def).
 *
 * A rule gets the node (for its attributes) and its operand types and computes the type
 * of the value the node defines, or says precisely why it cannot: "operand shapes
 * f32[2,3] and f32[4] do not broadcast". The builder runs the rule on every call, the
 * verifier on every node, so a graph that verifies has consistent types everywhere.
 * Rules never look at data. Binary ops do not promote dtypes: the IR is explicit, a
 * mismatch asks for a cast. */
#include <stdarg.h>
#include <string.h>

#include "ir/ir_impl.h"

#define T(i) kn_type_str(in[i], tb##i, sizeof tb##i)

#define fail kn_infer_fail
#define need_float kn_infer_need_float

kn_status kn_infer_fail(char *msg, size_t msz, kn_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, msz, fmt, ap);
    va_end(ap);
    return st;
}

bool kn_ir_broadcast(int na, const int64_t *a, int nb, const int64_t *b, int *nout, int64_t *out) {
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        int64_t x = i < n - na ? 1 : a[i - (n - na)];
        int64_t y = i < n - nb ? 1 : b[i - (n - nb)];
        if (x != y && x != 1 && y != 1) return false;
        out[i] = x == 1 ? y : x;
    }
    *nout = n;
    return true;
}

void kn_ir_broadcast_strides(int ndim, const int64_t *shape, int nout, const int64_t *oshape,
                             int64_t *strides) {
    int64_t s = 1;
    for (int i = nout - 1; i >= 0; i--) {
        int j = i - (nout - ndim);
        if (j < 0) { strides[i] = 0; continue; }
        strides[i] = (shape[j] == 1 && oshape[i] != 1) ? 0 : s;
        s *= shape[j];
    }
}

void kn_ir_permute_strides(int ndim, const int64_t *shape, const int64_t *perm, int64_t *strides) {
    int64_t st[KN_MAX_DIMS], s = 1;
    for (int i = ndim - 1; i >= 0; i--) { st[i] = s; s *= shape[i]; }
    for (int i = 0; i < ndim; i++) strides[i] = st[perm[i] < 0 ? perm[i] + ndim : perm[i]];
}

void kn_ir_slice_range(int64_t dim, int64_t start, int64_t stop, int64_t step, int64_t *first,
                       int64_t *len) {
    if (start < 0) start += dim;
    if (stop < 0) stop += dim;
    if (start < 0) start = 0;
    if (start > dim) start = dim;
    if (stop < 0) stop = 0;
    if (stop > dim) stop = dim;
    *first = start;
    *len = stop > start ? (stop - start - 1) / step + 1 : 0;
}

bool kn_ir_aliases(const kn_node *n, const kn_type *x) {
    if (n->op == KN_OP_RESHAPE) return true;
    if (n->op == KN_OP_COMM_WAIT) return x->ndim == 1; /* an all_gather's buffer, given back */
    if (n->op != KN_OP_SLICE || n->attrs.step != 1 || x->ndim < 1) return false;
    int ax = (int)(n->attrs.axis < 0 ? n->attrs.axis + x->ndim : n->attrs.axis);
    for (int i = 0; i < ax && i < x->ndim; i++)
        if (x->shape[i] != 1) return false;
    return ax >= 0 && ax < x->ndim;
}

bool kn_ir_reduce_mask(const kn_attrs *a, int ndim, unsigned *mask) {
    *mask = 0;
    if (a->naxes == 0) { *mask = (1u << ndim) - 1; return true; }
    for (int i = 0; i < a->naxes; i++) {
        int64_t ax = a->axes[i] < 0 ? a->axes[i] + ndim : a->axes[i];
        if (ax < 0 || ax >= ndim || (*mask & (1u << ax))) return false;
        *mask |= 1u << ax;
    }
    return true;
}

static bool is_float(kn_dtype d) { return d == KN_DT_F32 || d == KN_DT_F64 || d == KN_DT_F16 || d == KN_DT_BF16; }
static bool is_index(kn_dtype d) { return d == KN_DT_I32 || d == KN_DT_I64; }

kn_status kn_infer_need_float(const kn_type *t, const char *what, char *msg, size_t msz) {
    char b[96];
    if (!is_float(t->dtype))
        return fail(msg, msz, KN_ERR_DTYPE, "%s %s is not of a float dtype", what, kn_type_str(t, b, sizeof b));
    return KN_OK;
}

static bool norm_axis(int64_t axis, int ndim, int *out) {
    if (axis < -ndim || axis >= ndim) return false;
    *out = (int)(axis < 0 ? axis + ndim : axis);
    return true;
}

bool kn_ir_type_ok(const kn_type *t) {
    int64_t n = 1;
    if (t->ndim < 0 || t->ndim > KN_MAX_DIMS) return false;
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] < 0 || __builtin_mul_overflow(n, t->shape[i], &n) || n > ((int64_t)1 << 48)) return false;
    return true;
}

kn_status infer_source(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    (void)in;
    if (out->ndim < 0 || out->ndim > KN_MAX_DIMS)
        return fail(msg, msz, KN_ERR_SHAPE, "rank %d is outside [0, %d]", out->ndim, KN_MAX_DIMS);
    if (!kn_dtype_valid(out->dtype)) return fail(msg, msz, KN_ERR_DTYPE, "invalid dtype %d", (int)out->dtype);
    for (int i = 0; i < out->ndim; i++)
        if (out->shape[i] < 0) return fail(msg, msz, KN_ERR_SHAPE, "dimension %d is negative", i);
    (void)n;
    return KN_OK;
}

kn_status infer_binary(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    char tb0[96], tb1[96];
    (void)n;
    if (in[0]->dtype != in[1]->dtype)
        return fail(msg, msz, KN_ERR_DTYPE, "operand dtypes differ: %s and %s (insert a cast)", T(0), T(1));
    KN_TRY(need_float(in[0], "operand", msg, msz));
    if (!kn_ir_broadcast(in[0]->ndim, in[0]->shape, in[1]->ndim, in[1]->shape, &out->ndim, out->shape))
        return fail(msg, msz, KN_ERR_SHAPE, "operand shapes %s and %s do not broadcast", T(0), T(1));
    out->dtype = in[0]->dtype;
    return KN_OK;
}

kn_status infer_compare(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    char tb0[96], tb1[96];
    (void)n;
    if (in[0]->dtype != in[1]->dtype)
        return fail(msg, msz, KN_ERR_DTYPE, "operand dtypes differ: %s and %s (insert a cast)", T(0), T(1));
    if (!kn_ir_broadcast(in[0]->ndim, in[0]->shape, in[1]->ndim, in[1]->shape, &out->ndim, out->shape))
        return fail(msg, msz, KN_ERR_SHAPE, "operand shapes %s and %s do not broadcast", T(0), T(1));
    out->dtype = KN_DT_BOOL;
    return KN_OK;
}

kn_status infer_where(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    char tb0[96], tb1[96], tb2[96];
    int nd;
    int64_t sh[KN_MAX_DIMS];
    (void)n;
    if (in[0]->dtype != KN_DT_BOOL)
        return fail(msg, msz, KN_ERR_DTYPE, "condition %s is not bool", T(0));
    if (in[1]->dtype != in[2]->dtype)
        return fail(msg, msz, KN_ERR_DTYPE, "operand dtypes differ: %s and %s (insert a cast)", T(1), T(2));
    KN_TRY(need_float(in[1], "operand", msg, msz));
    if (!kn_ir_broadcast(in[1]->ndim, in[1]->shape, in[2]->ndim, in[2]->shape, &nd, sh) ||
        !kn_ir_broadcast(in[0]->ndim, in[0]->shape, nd, sh, &out->ndim, out->shape))
        return fail(msg, msz, KN_ERR_SHAPE, "operand shapes %s, %s and %s do not broadcast", T(0), T(1), T(2));
    out->dtype = in[1]->dtype;
    return KN_OK;
}

kn_status infer_float_unary(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    (void)n;
    KN_TRY(need_float(in[0], "operand", msg, msz));
    *out = *in[0];
    return KN_OK;
}

kn_status infer_same2(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    char tb0[96], tb1[96];
    (void)n;
    if (!kn_type_equal(in[0], in[1]))
        return fail(msg, msz, KN_ERR_SHAPE, "operand types %s and %s must be equal", T(0), T(1));
    KN_TRY(need_float(in[0], "operand", msg, msz));
    *out = *in[0];
    return KN_OK;
}

kn_status infer_cast(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    (void)msg; (void)msz;
    *out = *in[0];
    out->dtype = n->attrs.dtype;
    return KN_OK;
}

kn_status infer_dropout(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    return infer_float_unary(n, in, out, msg, msz);
}

kn_status infer_causal(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    char tb0[96];
    KN_TRY(infer_float_unary(n, in, out, msg, msz));
    if (in[0]->ndim < 2) return fail(msg, msz, KN_ERR_SHAPE, "operand %s has fewer than 2 axes", T(0));
    return KN_OK;
}

/* onehot(t) with shape [..., V]: t integer of shape [..., 1]; bool, true where the last
 * axis's index equals t (cross-entropy's target, decomposed). */
kn_status infer_onehot(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    char tb0[96], sb[96];
    const kn_attrs *a = &n->attrs;
    if (in[0]->dtype != KN_DT_I32 && in[0]->dtype != KN_DT_I64)
        return fail(msg, msz, KN_ERR_DTYPE, "indices %s are not i32 or i64", T(0));
    bool ok = a->nshape == in[0]->ndim && a->nshape >= 1 && in[0]->shape[a->nshape - 1] == 1 && a->shape[a->nshape - 1] >= 1;
    for (int i = 0; ok && i + 1 < a->nshape; i++) ok = a->shape[i] == in[0]->shape[i];
    if (!ok)
        return fail(msg, msz, KN_ERR_SHAPE, "indices %s are not shape %s with the last axis 1", T(0),
                    kn_shape_str(a->nshape, a->shape, sb, sizeof sb));
    out->dtype = KN_DT_BOOL;
    out->ndim = a->nshape;
    memcpy(out->shape, a->shape, sizeof(int64_t) * (size_t)a->nshape);
    return KN_OK;
}

/* causal_softmax_bwd: dy and y of the same float type, at least 2 axes. */
kn_status infer_causal_bwd(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    KN_TRY(infer_same2(n, in, out, msg, msz));
    return infer_causal(n, in, out, msg, msz);
}

/* flash_attn: q, k, v of one float type and one shape [..., T, D] (at least 2 axes);
 * the result packs O and the logsumexp: [..., T, D + 1]. With perm [0, 2, 1, 3] (the only
 * perm taken) q is [B, T, H, D] and the result the flat [B T H D + B H T] (kiln/ir.h). */
kn_status infer_flash_attn(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    char tb0[96], tb1[96], tb2[96];
    KN_TRY(need_float(in[0], "q", msg, msz));
    if (in[0]->ndim < 2) return fail(msg, msz, KN_ERR_SHAPE, "q %s has fewer than 2 axes ([..., T, D])", T(0));
    if (!kn_type_equal(in[0], in[1]) || !kn_type_equal(in[0], in[2]))
        return fail(msg, msz, in[0]->dtype != in[1]->dtype || in[0]->dtype != in[2]->dtype ? KN_ERR_DTYPE : KN_ERR_SHAPE,
                    "q %s, k %s and v %s must have one type", T(0), T(1), T(2));
    *out = *in[0];
    if (n->attrs.nperm == 0) {
        out->shape[out->ndim - 1] += 1;
        return KN_OK;
    }
    if (!kn_flash_bthd(&n->attrs) || in[0]->ndim != 4)
        return fail(msg, msz, KN_ERR_ARG, "perm must be [0, 2, 1, 3] with q [B, T, H, D] (q %s)", T(0));
    int64_t bh, t, d, nh;
    kn_flash_dims(in[0], &n->attrs, &bh, &t, &d, &nh);
    out->ndim = 1;
    out->shape[0] = bh * t * d + bh * t; /* O [B, T, H, D], then L [B, H, T] */
    return KN_OK;
}

/* flash_attn_bwd(q, k, v, y, dy): y is flash_attn(q, k, v)'s type, dy that or q's
 * (no gradient for L); the result stacks dq, dk, dv: [3, ..., T, D], or with perm
 * [0, 2, 1, 3] [B, T, 3, H, D]. */
kn_status infer_flash_attn_bwd(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    char tb3[96], tb4[96];
    kn_type y;
    KN_TRY(infer_flash_attn(n, in, &y, msg, msz));
    if (in[0]->ndim + 1 > KN_MAX_DIMS)
        return fail(msg, msz, KN_ERR_SHAPE, "q has %d axes: the stacked gradient would have more than %d", in[0]->ndim,
                    KN_MAX_DIMS);
    if (!kn_type_equal(in[3], &y))
        return fail(msg, msz, KN_ERR_SHAPE, "y %s is not flash_attn's result for these q, k, v", T(3));
    if (!kn_type_equal(in[4], &y) && !kn_type_equal(in[4], in[0]))
        return fail(msg, msz, KN_ERR_SHAPE, "dy %s is neither y's type %s nor q's", T(4), T(3));
    out->dtype = in[0]->dtype;
    out->ndim = in[0]->ndim + 1;
    if (n->attrs.nperm) { /* [B, T, 3, H, D] */
        const int64_t *s = in[0]->shape;
        int64_t sh[5] = {s[0], s[1], 3, s[2], s[3]};
        memcpy(out->shape, sh, sizeof sh);
        return KN_OK;
    }
    out->shape[0] = 3;
    for (int i = 0; i < in[0]->ndim; i++) out->shape[i + 1] = in[0]->shape[i];
    return KN_OK;
}

kn_status infer_reduce(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    char tb0[96];
    unsigned mask;
    KN_TRY(need_float(in[0], "operand", msg, msz));
    if (!kn_ir_reduce_mask(&n->attrs, in[0]->ndim, &mask))
        return fail(msg, msz, KN_ERR_AXIS, "axes out of range or repeated for operand %s", T(0));
    out->dtype = in[0]->dtype;
    out->ndim = 0;
    for (int i = 0; i < in[0]->ndim; i++) {
        if (!(mask & (1u << i))) out->shape[out->ndim++] = in[0]->shape[i];
        else if (n->attrs.keepdim) out->shape[out->ndim++] = 1;
    }
    if (n->op == KN_OP_MAX)
        for (int i = 0; i < in[0]->ndim; i++)
            if ((mask & (1u << i)) && in[0]->shape[i] == 0)
                return fail(msg, msz, KN_ERR_SHAPE, "max over an empty axis of %s", T(0));
    return KN_OK;
}

kn_status infer_matmul(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    char tb0[96], tb1[96];
    const kn_type *a = in[0], *b = in[1];
    if (a->ndim < 2 || b->ndim < 2)
        return fail(msg, msz, KN_ERR_SHAPE, "operands %s and %s need at least 2 axes each", T(0), T(1));
    if (a->dtype != b->dtype)
        return fail(msg, msz, KN_ERR_DTYPE, "operand dtypes differ: %s and %s (insert a cast)", T(0), T(1));
    KN_TRY(need_float(a, "operand", msg, msz));
    int64_t m = a->shape[a->ndim - 2], k = a->shape[a->ndim - 1];
    int64_t k2 = b->shape[b->ndim - 2], nn = b->shape[b->ndim - 1], t;
    if (n->attrs.ta) { t = m; m = k; k = t; }
    if (n->attrs.tb) { t = k2; k2 = nn; nn = t; }
    if (k != k2)
        return fail(msg, msz, KN_ERR_SHAPE, "inner dimensions differ: %s%s @ %s%s (%lld vs %lld)", T(0),
                    n->attrs.ta ? "^T" : "", T(1), n->attrs.tb ? "^T" : "", (long long)k, (long long)k2);
    if (!kn_ir_broadcast(a->ndim - 2, a->shape, b->ndim - 2, b->shape, &out->ndim, out->shape))
        return fail(msg, msz, KN_ERR_SHAPE, "batch axes of %s and %s do not broadcast", T(0), T(1));
    out->shape[out->ndim++] = m;
    out->shape[out->ndim++] = nn;
    out->dtype = a->dtype;
    return KN_OK;
}

/* The products with an epilogue (matmul_bias, matmul_bias_gelu, matmul_dgelu, matmul_bgrad):
 * the product's rule on 2-D operands, then the epilogue's operand and the stacking. The
 * result is f32 or f64 (the epilogue computes in it): the product's dtype, or f32 for a
 * product of bf16/f16 operands (mixed precision: the cast up that followed the 16-bit matmul
 * is taken into the epilogue). The bias is [N] and the pre-activation of matmul_dgelu
 * [M, N], in the result's dtype; matmul_bgrad sums b's rows (tb = 0): b is [K, N]. */
kn_status infer_matmul_ep(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    char tb0[96], tb1[96], tb2[96];
    KN_TRY(infer_matmul(n, in, out, msg, msz));
    if (in[0]->ndim != 2 || in[1]->ndim != 2)
        return fail(msg, msz, KN_ERR_SHAPE, "operands %s and %s must be matrices (2 axes)", T(0), T(1));
    kn_dtype pd = out->dtype, rd = n->op == KN_OP_MATMUL_BGRAD ? pd : in[2]->dtype;
    bool low = pd == KN_DT_BF16 || pd == KN_DT_F16;
    if ((rd != KN_DT_F32 && rd != KN_DT_F64) || (rd != pd && !(low && rd == KN_DT_F32)))
        return fail(msg, msz, KN_ERR_DTYPE, "the result must be f32 or f64: the operands' dtype, or f32 for bf16/f16 "
                    "operands (operands %s, %s%s%s)", T(0), T(1), n->op == KN_OP_MATMUL_BGRAD ? "" : ", epilogue ",
                    n->op == KN_OP_MATMUL_BGRAD ? "" : T(2));
    int64_t m = out->shape[0], nn = out->shape[1];
    out->dtype = rd;
    if (n->op == KN_OP_MATMUL_BIAS || n->op == KN_OP_MATMUL_BIAS_GELU) {
        if (in[2]->ndim != 1 || in[2]->shape[0] != nn)
            return fail(msg, msz, KN_ERR_SHAPE, "bias %s must be [%lld], one per column of the product", T(2),
                        (long long)nn);
        if (n->op == KN_OP_MATMUL_BIAS_GELU) out->shape[0] = 2 * m;
        return KN_OK;
    }
    if (n->op == KN_OP_MATMUL_DGELU) {
        if (in[2]->ndim != 2 || in[2]->shape[0] != m || in[2]->shape[1] != nn)
            return fail(msg, msz, KN_ERR_SHAPE, "pre-activation %s must have the product's shape [%lld,%lld]", T(2),
                        (long long)m, (long long)nn);
        return KN_OK;
    }
    if (n->op != KN_OP_MATMUL_BGRAD) return fail(msg, msz, KN_ERR_ARG, "%s is not a product with an epilogue", kn_op_name(n->op));
    if (n->attrs.tb) return fail(msg, msz, KN_ERR_ARG, "tb must be 0: the bias gradient sums the rows of b %s", T(1));
    out->shape[0] = m + 1;
    return KN_OK;
}

kn_status infer_reshape(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    char tb0[96];
    const kn_attrs *a = &n->attrs;
    int64_t known = 1, numel = kn_type_numel(in[0]);
    int neg = -1;
    for (int i = 0; i < a->nshape; i++) {
        if (a->shape[i] == -1 && neg < 0) { neg = i; continue; }
        if (a->shape[i] < 0) return fail(msg, msz, KN_ERR_SHAPE, "bad target dimension %lld for %s", (long long)a->shape[i], T(0));
        if (__builtin_mul_overflow(known, a->shape[i], &known))
            return fail(msg, msz, KN_ERR_SHAPE, "the target shape of %s has too many elements", T(0));
    }
    *out = *in[0];
    out->ndim = a->nshape;
    memcpy(out->shape, a->shape, sizeof(int64_t) * (size_t)a->nshape);
    if (neg >= 0) {
        if (known == 0 || numel % known)
            return fail(msg, msz, KN_ERR_SHAPE, "cannot infer the -1 of the target shape for %s", T(0));
        out->shape[neg] = numel / known;
        known *= out->shape[neg];
    }
    if (known != numel) {
        char sb[96];
        return fail(msg, msz, KN_ERR_SHAPE, "cannot reshape %s (%lld elements) to %s", T(0), (long long)numel,
                    kn_shape_str(a->nshape, a->shape, sb, sizeof sb));
    }
    return KN_OK;
}

kn_status infer_permute(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    char tb0[96];
    const kn_attrs *a = &n->attrs;
    unsigned seen = 0;
    if (a->nperm != in[0]->ndim)
        return fail(msg, msz, KN_ERR_AXIS, "perm has %d entries for operand %s", a->nperm, T(0));
    *out = *in[0];
    for (int i = 0; i < a->nperm; i++) {
        int ax;
        if (!norm_axis(a->perm[i], in[0]->ndim, &ax) || (seen & (1u << ax)))
            return fail(msg, msz, KN_ERR_AXIS, "perm is not a permutation of the axes of %s", T(0));
        seen |= 1u << ax;
        out->shape[i] = in[0]->shape[ax];
    }
    return KN_OK;
}

kn_status infer_broadcast_to(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    char tb0[96], sb[96];
    const kn_attrs *a = &n->attrs;
    int nd;
    int64_t sh[KN_MAX_DIMS];
    bool ok = a->nshape >= in[0]->ndim &&
              kn_ir_broadcast(in[0]->ndim, in[0]->shape, a->nshape, a->shape, &nd, sh);
    for (int i = 0; ok && i < nd; i++) ok = sh[i] == a->shape[i];
    if (!ok)
        return fail(msg, msz, KN_ERR_SHAPE, "%s does not broadcast to %s", T(0),
                    kn_shape_str(a->nshape, a->shape, sb, sizeof sb));
    out->dtype = in[0]->dtype;
    out->ndim = a->nshape;
    memcpy(out->shape, a->shape, sizeof(int64_t) * (size_t)a->nshape);
    return KN_OK;
}

kn_status infer_slice(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    char tb0[96];
    int ax;
    if (!norm_axis(n->attrs.axis, in[0]->ndim, &ax))
        return fail(msg, msz, KN_ERR_AXIS, "axis %lld out of range for %s", (long long)n->attrs.axis, T(0));
    int64_t first, len;
    kn_ir_slice_range(in[0]->shape[ax], n->attrs.start, n->attrs.stop, n->attrs.step, &first, &len);
    *out = *in[0];
    out->shape[ax] = len;
    return KN_OK;
}

kn_status infer_slice_grad(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    char tb0[96], sb[96];
    kn_type x = {in[0]->dtype, n->attrs.nshape, {0}}, s;
    memcpy(x.shape, n->attrs.shape, sizeof(int64_t) * (size_t)x.ndim);
    const kn_type *xs[1] = {&x};
    for (int i = 0; i < x.ndim; i++)
        if (x.shape[i] < 0) return fail(msg, msz, KN_ERR_SHAPE, "negative dimension in shape");
    KN_TRY(infer_slice(n, xs, &s, msg, msz));
    if (!kn_type_equal(&s, in[0]))
        return fail(msg, msz, KN_ERR_SHAPE, "gradient %s does not match the slice %s of %s", T(0),
                    kn_type_str(&s, sb, sizeof sb), kn_shape_str(x.ndim, x.shape, tb0, sizeof tb0));
    *out = x;
    return KN_OK;
}

/* concat(x, y, axis): x and y of one dtype and rank, equal but along axis, where the
 * result holds x's extent followed by y's. */
kn_status infer_concat(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    char tb0[96], tb1[96];
    int ax;
    if (in[0]->dtype != in[1]->dtype)
        return fail(msg, msz, KN_ERR_DTYPE, "operands %s and %s differ in dtype (cast one first)", T(0), T(1));
    if (in[0]->ndim != in[1]->ndim || in[0]->ndim == 0)
        return fail(msg, msz, KN_ERR_SHAPE, "operands %s and %s must have the same rank, at least 1", T(0), T(1));
    if (!norm_axis(n->attrs.axis, in[0]->ndim, &ax))
        return fail(msg, msz, KN_ERR_AXIS, "axis %lld out of range for %s", (long long)n->attrs.axis, T(0));
    for (int d = 0; d < in[0]->ndim; d++)
        if (d != ax && in[0]->shape[d] != in[1]->shape[d])
            return fail(msg, msz, KN_ERR_SHAPE, "operands %s and %s differ along axis %d (only axis %d may differ)",
                        T(0), T(1), d, ax);
    *out = *in[0];
    out->shape[ax] = in[0]->shape[ax] + in[1]->shape[ax];
    return KN_OK;
}

kn_status infer_embedding(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    char tb0[96], tb1[96];
    (void)n;
    if (in[0]->ndim != 2) return fail(msg, msz, KN_ERR_SHAPE, "weight %s is not 2-D [V, D]", T(0));
    KN_TRY(need_float(in[0], "weight", msg, msz));
    if (!is_index(in[1]->dtype)) return fail(msg, msz, KN_ERR_DTYPE, "indices %s are not i32 or i64", T(1));
    if (in[1]->ndim >= KN_MAX_DIMS) return fail(msg, msz, KN_ERR_SHAPE, "indices %s have too many axes", T(1));
    *out = *in[1];
    out->dtype = in[0]->dtype;
    out->shape[out->ndim++] = in[0]->shape[1];
    return KN_OK;
}

kn_status infer_embedding_grad(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    char tb0[96], tb1[96];
    const kn_attrs *a = &n->attrs;
    if (a->nshape != 2 || a->shape[0] < 0 || a->shape[1] < 0)
        return fail(msg, msz, KN_ERR_SHAPE, "shape must be [V, D]");
    KN_TRY(need_float(in[0], "gradient", msg, msz));
    if (!is_index(in[1]->dtype)) return fail(msg, msz, KN_ERR_DTYPE, "indices %s are not i32 or i64", T(1));
    bool ok = in[0]->ndim == in[1]->ndim + 1 && in[0]->shape[in[0]->ndim - 1] == a->shape[1];
    for (int i = 0; ok && i < in[1]->ndim; i++) ok = in[0]->shape[i] == in[1]->shape[i];
    if (!ok) return fail(msg, msz, KN_ERR_SHAPE, "gradient %s does not fit indices %s and D %lld", T(0), T(1), (long long)a->shape[1]);
    out->dtype = in[0]->dtype;
    out->ndim = 2;
    out->shape[0] = a->shape[0];
    out->shape[1] = a->shape[1];
    return KN_OK;
}

kn_status infer_softmax(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    char tb0[96];
    int ax;
    KN_TRY(need_float(in[0], "operand", msg, msz));
    if (!norm_axis(n->attrs.axis, in[0]->ndim, &ax))
        return fail(msg, msz, KN_ERR_AXIS, "axis %lld out of range for %s", (long long)n->attrs.axis, T(0));
    *out = *in[0];
    return KN_OK;
}

kn_status infer_softmax_bwd(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    KN_TRY(infer_same2(n, in, out, msg, msz));
    return infer_softmax(n, in, out, msg, msz);
}

static kn_status check_row_params(const kn_type *x, const kn_type *w, const char *what, char *msg, size_t msz) {
    char tb0[96], tb1[96];
    if (w->dtype != x->dtype || w->ndim != 1 || w->shape[0] != x->shape[x->ndim - 1])
        return fail(msg, msz, KN_ERR_SHAPE, "%s %s does not match the last axis of %s",
                    what, kn_type_str(w, tb1, sizeof tb1), kn_type_str(x, tb0, sizeof tb0));
    return KN_OK;
}

kn_status infer_normalize(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    char tb0[96];
    (void)n;
    KN_TRY(need_float(in[0], "operand", msg, msz));
    if (in[0]->ndim < 1) return fail(msg, msz, KN_ERR_SHAPE, "operand %s is a scalar", T(0));
    *out = *in[0];
    return KN_OK;
}

kn_status infer_layernorm(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    KN_TRY(infer_normalize(n, in, out, msg, msz));
    KN_TRY(check_row_params(in[0], in[1], "weight", msg, msz));
    return check_row_params(in[0], in[2], "bias", msg, msz);
}

kn_status infer_layernorm_dx(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    KN_TRY(infer_same2(n, in, out, msg, msz));
    KN_TRY(infer_normalize(n, in + 1, out, msg, msz));
    return check_row_params(in[1], in[2], "weight", msg, msz);
}

static kn_status check_targets(const kn_type *lg, const kn_type *t, char *msg, size_t msz) {
    char tb0[96], tb1[96];
    if (lg->ndim < 1) return fail(msg, msz, KN_ERR_SHAPE, "logits %s are a scalar", kn_type_str(lg, tb0, sizeof tb0));
    KN_TRY(need_float(lg, "logits", msg, msz));
    if (!is_index(t->dtype))
        return fail(msg, msz, KN_ERR_DTYPE, "targets %s are not i32 or i64", kn_type_str(t, tb1, sizeof tb1));
    bool ok = t->ndim == lg->ndim - 1;
    for (int i = 0; ok && i < t->ndim; i++) ok = t->shape[i] == lg->shape[i];
    if (!ok)
        return fail(msg, msz, KN_ERR_SHAPE, "targets %s do not match logits %s without their last axis",
                    kn_type_str(t, tb1, sizeof tb1), kn_type_str(lg, tb0, sizeof tb0));
    return KN_OK;
}

kn_status infer_cross_entropy(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    (void)n;
    KN_TRY(check_targets(in[0], in[1], msg, msz));
    /* the loss of 16-bit logits is f32: computed in f32 (a mean of many terms), kept so */
    out->dtype = in[0]->dtype == KN_DT_BF16 || in[0]->dtype == KN_DT_F16 ? KN_DT_F32 : in[0]->dtype;
    out->ndim = 0;
    return KN_OK;
}

kn_status infer_cross_entropy_bwd(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    char tb0[96];
    (void)n;
    KN_TRY(check_targets(in[1], in[2], msg, msz));
    bool low = in[1]->dtype == KN_DT_BF16 || in[1]->dtype == KN_DT_F16; /* then the loss, and its gradient, may be f32 */
    if (in[0]->ndim != 0 || (in[0]->dtype != in[1]->dtype && !(low && in[0]->dtype == KN_DT_F32)))
        return fail(msg, msz, KN_ERR_SHAPE, "loss gradient %s is not a scalar of the logits' dtype%s", T(0),
                    low ? " or f32" : "");
    *out = *in[1];
    return KN_OK;
}
