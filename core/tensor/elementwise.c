/* elementwise.c — unary, binary, scalar and where kernels on the CPU.
 *
 * Each op is one row of a table (name, which dtypes it takes); the per-element functions
 * are kiln/scalar.h's, the same ones the interpreter's kernels and the GPU compute, and a
 * contiguous f32/f64 unary op runs the interpreter's kernel itself (kn_k_unary). The tables follow the order of the enums in kiln/tensor.h:
 * the ORDER comments mark them; adding an op is an enum entry plus a table row.
 *
 * How a binary op runs: kn_shape_broadcast gives the output shape, kn_tensor_expand views
 * both operands at it (stride 0 where they repeat), and knt_iter walks the output row by
 * row with one stride per operand (tensor_impl.h). Those three are lab 01 units, so a
 * student's broadcasting and iteration run every elementwise op in kiln.
 *
 * Precision: the general path loads every element as a double (kn_dtype_load), computes in
 * double and stores in the output dtype (kn_dtype_store: rounds to nearest for floats,
 * truncates toward zero and saturates for integers). f32 has its own paths, computing in
 * float: a flat loop when every operand is contiguous with the output's shape, else typed
 * rows. These are the kernels the CPU training of
 * later labs uses, so f32 speed matters here more than elegance. */
#include <math.h>

#include "kiln/kernels.h"
#include "kiln/scalar.h"
#include "tensor/tensor_impl.h"

/* ---------------------------------------------------------------- unary table */

/* The functions themselves are kiln/scalar.h's, shared with the interpreter's kernels and
 * the GPU; this table only names them and says which dtypes they take. */
typedef struct knt_unary_info {
    const char *name;
    bool float_only; /* needs a float dtype; the others take any dtype but bool */
} knt_unary_info;

/* kiln/pointwise.def's rows: their names, and which need a float dtype. */
#define KNT_DT_FLOAT true
#define KNT_DT_ANY false
static const knt_unary_info knt_unary[KN_UNARY_COUNT] = {
#define KN_PW(E, name, dtypes, f, grad, ir, autocast) {#name, KNT_DT_##dtypes},
#include "kiln/pointwise.def"
};
#undef KNT_DT_FLOAT
#undef KNT_DT_ANY

const char *kn_unary_op_name(kn_unary_op op) {
    if ((int)op < 0 || op >= KN_UNARY_COUNT) return "?";
    return knt_unary[op].name;
}

/* ---------------------------------------------------------------- binary table */

typedef struct knt_binary_info {
    const char *name;
    bool compare; /* result is bool */
} knt_binary_info;

/* ORDER BINARY */
static const knt_binary_info knt_binary[KN_BINARY_COUNT] = {
    {"add", false}, {"sub", false}, {"mul", false}, {"div", false}, {"pow", false},
    {"max", false}, {"min", false}, {"eq", true},   {"ne", true},   {"lt", true},
    {"le", true},   {"gt", true},   {"ge", true},
};

const char *kn_binary_op_name(kn_binary_op op) {
    if ((int)op < 0 || op >= KN_BINARY_COUNT) return "?";
    return knt_binary[op].name;
}

/* ---------------------------------------------------------------- unary */

kn_status kn_tensor_unary(kn_tensor **out, kn_unary_op op, const kn_tensor *x) {
    const char *fn = "kn_tensor_unary";
    KN_TRY(knt_check_ptr(fn, "out", out));
    if ((int)op < 0 || op >= KN_UNARY_COUNT)
        return kn_error(KN_ERR_ARG, "%s: op %d is not a kn_unary_op (0..%d)", fn, (int)op, KN_UNARY_COUNT - 1);
    KN_TRY(knt_check_cpu(fn, "x", x));
    const knt_unary_info *u = &knt_unary[op];
    if (x->dtype == KN_DT_BOOL || (u->float_only && !kn_dtype_is_float(x->dtype))) {
        char ts[KNT_STR];
        return kn_error(KN_ERR_DTYPE, "%s(%s): x is %s; %s needs %s", fn, u->name, kn_tensor_str(x, ts, sizeof ts),
                        u->name, u->float_only ? "a float dtype" : "a numeric dtype (not bool)");
    }
    kn_tensor *t;
    KN_TRY(knt_empty(fn, x->dtype, x->ndim, x->shape, &t));
    int64_t n = kn_tensor_numel(x);
    if (n > 0 && kn_tensor_is_contiguous(x) && (x->dtype == KN_DT_F32 || x->dtype == KN_DT_F64)) {
        /* the interpreter's kernel (kiln/kernels.h): one family of CPU kernels */
        if (x->dtype == KN_DT_F32) kn_k_unary_f32(op, kn_tensor_data(x), KNT_PTR(float, t), n);
        else kn_k_unary_f64(op, kn_tensor_data(x), KNT_PTR(double, t), n);
    } else if (n > 0) {
        const kn_tensor *ops[2] = {t, x};
        knt_iter it;
        knt_iter_init(&it, x->ndim, x->shape, 2, ops);
        do {
            int64_t o = it.base[0], xo = it.base[1], xs = it.inner_stride[1];
            if (x->dtype == KN_DT_F32) {
                const float *px = KNT_PTR(const float, x) + xo;
                float *po = KNT_PTR(float, t) + o;
                for (int64_t j = 0; j < it.inner; j++) po[j] = kn_sc_unary_f32(op, px[j * xs]);
            } else {
                for (int64_t j = 0; j < it.inner; j++)
                    kn_dtype_store(t->dtype, t->storage->data, o + j,
                                   kn_sc_unary_f64(op, kn_dtype_load(x->dtype, x->storage->data, xo + j * xs)));
            }
        } while (knt_iter_next(&it));
        kn_status st = knt_iter_finish(fn, &it);
        if (st != KN_OK) {
            kn_tensor_free(t);
            return st;
        }
    }
    *out = t;
    return KN_OK;
}

/* ---------------------------------------------------------------- broadcasting helpers */

/* Re-record the current error (from a lab unit) prefixed by fn and the op name. */
static kn_status knt_prefix(const char *fn, const char *op, kn_status st) {
    char why[512];
    snprintf(why, sizeof why, "%s", kn_last_error());
    return kn_error(st, "%s(%s): %s", fn, op, why);
}

/* Broadcast the shapes of n tensors into (ndim, shape), then expand each into views[i]
 * (the caller frees them; all NULL on failure). */
static kn_status knt_broadcast_n(const char *fn, const char *op, int n, const kn_tensor *const *xs, int *ndim,
                                 int64_t *shape, kn_tensor **views) {
    int nd = xs[0]->ndim;
    int64_t sh[KN_MAX_DIMS];
    for (int i = 0; i < nd; i++) sh[i] = xs[0]->shape[i];
    for (int k = 1; k < n; k++) {
        kn_status st = kn_shape_broadcast(nd, sh, xs[k]->ndim, xs[k]->shape, &nd, sh);
        if (st != KN_OK) return knt_prefix(fn, op, st);
    }
    int64_t numel;
    KN_TRY(knt_check_shape(fn, nd, sh, 8, &numel));
    for (int k = 0; k < n; k++) views[k] = NULL;
    for (int k = 0; k < n; k++) {
        kn_status st = kn_tensor_expand(&views[k], xs[k], nd, sh);
        if (st != KN_OK) {
            for (int j = 0; j < k; j++) kn_tensor_free(views[j]), views[j] = NULL;
            return knt_prefix(fn, op, st);
        }
    }
    *ndim = nd;
    for (int i = 0; i < nd; i++) shape[i] = sh[i];
    return KN_OK;
}

static bool knt_same_layout_contiguous(const kn_tensor *x, int ndim, const int64_t *shape) {
    if (x->ndim != ndim || !kn_tensor_is_contiguous(x)) return false;
    for (int i = 0; i < ndim; i++)
        if (x->shape[i] != shape[i]) return false;
    return true;
}

/* ---------------------------------------------------------------- binary */

/* One f32 row: o[j] = EXPR(x = a[j*sa], y = b[j*sb]); unit strides get their own loop so
 * the compiler can vectorize it. */
#define KNT_F32_ROW(EXPR)                                                              \
    do {                                                                               \
        if (sa == 1 && sb == 1) {                                                      \
            for (int64_t j = 0; j < n; j++) { float x = pa[j], y = pb[j]; po[j] = (EXPR); } \
        } else {                                                                       \
            for (int64_t j = 0; j < n; j++) { float x = pa[j * sa], y = pb[j * sb]; po[j] = (EXPR); } \
        }                                                                              \
    } while (0)

/* Returns false when op has no f32 row (the caller falls back to doubles). */
static bool knt_binary_f32_row(kn_binary_op op, float *restrict po, const float *pa, int64_t sa, const float *pb,
                               int64_t sb, int64_t n) {
    switch (op) {
    case KN_BINARY_ADD: KNT_F32_ROW(x + y); return true;
    case KN_BINARY_SUB: KNT_F32_ROW(x - y); return true;
    case KN_BINARY_MUL: KNT_F32_ROW(x * y); return true;
    case KN_BINARY_DIV: KNT_F32_ROW(x / y); return true;
    case KN_BINARY_POW: KNT_F32_ROW(kn_sc_binary_f32(KN_BINARY_POW, x, y)); return true;
    case KN_BINARY_MAX: KNT_F32_ROW(kn_sc_binary_f32(KN_BINARY_MAX, x, y)); return true;
    case KN_BINARY_MIN: KNT_F32_ROW(kn_sc_binary_f32(KN_BINARY_MIN, x, y)); return true;
    case KN_BINARY_EQ: case KN_BINARY_NE: case KN_BINARY_LT: case KN_BINARY_LE: case KN_BINARY_GT:
    case KN_BINARY_GE: case KN_BINARY_COUNT: return false; /* bool results: the double path */
    }
    return false;
}

static kn_status knt_binary_run(const char *fn, kn_tensor **out, kn_binary_op op, const kn_tensor *a,
                                const kn_tensor *b) {
    KN_TRY(knt_check_ptr(fn, "out", out));
    if ((int)op < 0 || op >= KN_BINARY_COUNT)
        return kn_error(KN_ERR_ARG, "%s: op %d is not a kn_binary_op (0..%d)", fn, (int)op, KN_BINARY_COUNT - 1);
    const knt_binary_info *bi = &knt_binary[op];
    KN_TRY(knt_check_cpu(fn, "a", a));
    KN_TRY(knt_check_cpu(fn, "b", b));
    kn_dtype cdt = kn_dtype_promote(a->dtype, b->dtype);
    if (!bi->compare && cdt == KN_DT_BOOL)
        return kn_error(KN_ERR_DTYPE, "%s(%s): both operands are bool; arithmetic needs a numeric dtype (cast first)",
                        fn, bi->name);
    kn_dtype odt = bi->compare ? KN_DT_BOOL : cdt;
    int nd;
    int64_t shape[KN_MAX_DIMS];
    kn_tensor *v[2];
    const kn_tensor *in[2] = {a, b};
    KN_TRY(knt_broadcast_n(fn, bi->name, 2, in, &nd, shape, v));
    kn_tensor *t = NULL;
    kn_status st = knt_empty(fn, odt, nd, shape, &t);
    if (st != KN_OK) goto done;
    int64_t numel = knt_numel(nd, shape);
    bool f32 = a->dtype == KN_DT_F32 && b->dtype == KN_DT_F32 && odt == KN_DT_F32;
    if (numel == 0) {
        /* nothing to compute */
    } else if (f32 && knt_same_layout_contiguous(a, nd, shape) && knt_same_layout_contiguous(b, nd, shape)) {
        bool ok = knt_binary_f32_row(op, KNT_PTR(float, t), kn_tensor_data(a), 1, kn_tensor_data(b), 1, numel);
        KN_CHECK(ok);
    } else {
        const kn_tensor *ops[3] = {t, v[0], v[1]};
        knt_iter it;
        knt_iter_init(&it, nd, shape, 3, ops);
        do {
            int64_t o = it.base[0], ao = it.base[1], bo = it.base[2];
            int64_t sa = it.inner_stride[1], sb = it.inner_stride[2], n = it.inner;
            if (f32 && knt_binary_f32_row(op, KNT_PTR(float, t) + o, KNT_PTR(const float, a) + ao, sa,
                                          KNT_PTR(const float, b) + bo, sb, n))
                continue;
            for (int64_t j = 0; j < n; j++) {
                double x = kn_dtype_load(a->dtype, a->storage->data, ao + j * sa);
                double y = kn_dtype_load(b->dtype, b->storage->data, bo + j * sb);
                kn_dtype_store(odt, t->storage->data, o + j, kn_sc_binary_f64(op, x, y));
            }
        } while (knt_iter_next(&it));
        st = knt_iter_finish(fn, &it);
    }
    if (st == KN_OK) *out = t;
    else kn_tensor_free(t);
done:
    kn_tensor_free(v[0]);
    kn_tensor_free(v[1]);
    return st;
}

kn_status kn_tensor_binary(kn_tensor **out, kn_binary_op op, const kn_tensor *a, const kn_tensor *b) {
    return knt_binary_run("kn_tensor_binary", out, op, a, b);
}

kn_status kn_tensor_binary_scalar(kn_tensor **out, kn_binary_op op, const kn_tensor *x, double s) {
    const char *fn = "kn_tensor_binary_scalar";
    KN_TRY(knt_check_ptr(fn, "out", out));
    KN_TRY(knt_check_cpu(fn, "x", x));
    kn_tensor *sc;
    KN_TRY(knt_empty(fn, x->dtype, 0, NULL, &sc));
    kn_dtype_store(x->dtype, sc->storage->data, 0, s);
    kn_status st = knt_binary_run(fn, out, op, x, sc);
    kn_tensor_free(sc);
    return st;
}

/* ---------------------------------------------------------------- where */

kn_status kn_tensor_where(kn_tensor **out, const kn_tensor *cond, const kn_tensor *a, const kn_tensor *b) {
    const char *fn = "kn_tensor_where";
    KN_TRY(knt_check_ptr(fn, "out", out));
    KN_TRY(knt_check_cpu(fn, "cond", cond));
    KN_TRY(knt_check_cpu(fn, "a", a));
    KN_TRY(knt_check_cpu(fn, "b", b));
    if (cond->dtype != KN_DT_BOOL) {
        char ts[KNT_STR];
        return kn_error(KN_ERR_DTYPE, "%s: cond is %s; it must be bool", fn, kn_tensor_str(cond, ts, sizeof ts));
    }
    kn_dtype odt = kn_dtype_promote(a->dtype, b->dtype);
    int nd;
    int64_t shape[KN_MAX_DIMS];
    kn_tensor *v[3];
    const kn_tensor *in[3] = {cond, a, b};
    KN_TRY(knt_broadcast_n(fn, "where", 3, in, &nd, shape, v));
    kn_tensor *t = NULL;
    kn_status st = knt_empty(fn, odt, nd, shape, &t);
    if (st == KN_OK && knt_numel(nd, shape) > 0) {
        const kn_tensor *ops[4] = {t, v[0], v[1], v[2]};
        knt_iter it;
        knt_iter_init(&it, nd, shape, 4, ops);
        bool f32 = odt == KN_DT_F32 && a->dtype == KN_DT_F32 && b->dtype == KN_DT_F32;
        do {
            int64_t o = it.base[0], co = it.base[1], ao = it.base[2], bo = it.base[3];
            int64_t sc = it.inner_stride[1], sa = it.inner_stride[2], sb = it.inner_stride[3];
            for (int64_t j = 0; j < it.inner; j++) {
                bool c = kn_dtype_load(KN_DT_BOOL, cond->storage->data, co + j * sc) != 0;
                if (f32) {
                    KNT_PTR(float, t)[o + j] = c ? KNT_PTR(const float, a)[ao + j * sa] : KNT_PTR(const float, b)[bo + j * sb];
                } else {
                    double x = c ? kn_dtype_load(a->dtype, a->storage->data, ao + j * sa)
                                 : kn_dtype_load(b->dtype, b->storage->data, bo + j * sb);
                    kn_dtype_store(odt, t->storage->data, o + j, x);
                }
            }
        } while (knt_iter_next(&it));
        st = knt_iter_finish(fn, &it);
    }
    if (st == KN_OK) *out = t;
    else kn_tensor_free(t);
    for (int k = 0; k < 3; k++) kn_tensor_free(v[k]);
    return st;
}
