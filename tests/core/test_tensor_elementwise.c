/* test_tensor_elementwise.c — every unary and binary op against a double reference on
 * random inputs (contiguous, transposed, broadcast), dtype rules, scalar ops and where. */
#include <math.h>

#include "tensor_test_util.h"

static double ref_unary(kn_unary_op op, double x) {
    switch (op) {
    case KN_UNARY_NEG: return -x;
    case KN_UNARY_ABS: return fabs(x);
    case KN_UNARY_EXP: return exp(x);
    case KN_UNARY_LOG: return log(x);
    case KN_UNARY_SQRT: return sqrt(x);
    case KN_UNARY_RSQRT: return 1 / sqrt(x);
    case KN_UNARY_RECIP: return 1 / x;
    case KN_UNARY_SQUARE: return x * x;
    case KN_UNARY_TANH: return tanh(x);
    case KN_UNARY_SIGMOID: return 1 / (1 + exp(-x));
    case KN_UNARY_RELU: return x > 0 ? x : 0;
    case KN_UNARY_GELU: return 0.5 * x * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
    case KN_UNARY_SIN: return sin(x);
    case KN_UNARY_COS: return cos(x);
    case KN_UNARY_SILU: return x / (1 + exp(-x));
    case KN_UNARY_COUNT: break;
    }
    cr_assert_fail("op %d", op);
    return 0;
}

/* Inputs where the op is defined and well conditioned. */
static void unary_domain(kn_unary_op op, double *lo, double *hi) {
    *lo = -4, *hi = 4;
    if (op == KN_UNARY_LOG || op == KN_UNARY_SQRT || op == KN_UNARY_RSQRT || op == KN_UNARY_RECIP) *lo = 0.25;
}

static double ref_binary(kn_binary_op op, double a, double b) {
    switch (op) {
    case KN_BINARY_ADD: return a + b;
    case KN_BINARY_SUB: return a - b;
    case KN_BINARY_MUL: return a * b;
    case KN_BINARY_DIV: return a / b;
    case KN_BINARY_POW: return pow(a, b);
    case KN_BINARY_MAX: return a > b ? a : b;
    case KN_BINARY_MIN: return a < b ? a : b;
    case KN_BINARY_EQ: return a == b;
    case KN_BINARY_NE: return a != b;
    case KN_BINARY_LT: return a < b;
    case KN_BINARY_LE: return a <= b;
    case KN_BINARY_GT: return a > b;
    case KN_BINARY_GE: return a >= b;
    case KN_BINARY_COUNT: break;
    }
    cr_assert_fail("op %d", op);
    return 0;
}

static const kn_dtype float_dts[4] = {KN_DT_F32, KN_DT_F64, KN_DT_F16, KN_DT_BF16};

KN_TEST(tensor_elementwise, unary_every_op_and_float_dtype) {
    int64_t shape[3] = {3, 5, 7};
    for (int op = 0; op < KN_UNARY_COUNT; op++) {
        cr_assert_str_neq(kn_unary_op_name(op), "?");
        double lo, hi;
        unary_domain(op, &lo, &hi);
        for (int k = 0; k < 4; k++) {
            kn_dtype dt = float_dts[k];
            kn_tensor *x = tt_rand(dt, 3, shape, 100 + op, lo, hi), *xt, *y, *yt;
            KN_ASSERT_OK(kn_tensor_transpose(&xt, x, 0, 2)); /* strided input: general path */
            KN_ASSERT_OK(kn_tensor_unary(&y, op, x));
            KN_ASSERT_OK(kn_tensor_unary(&yt, op, xt));
            tt_assert_shape(yt, dt, 3, xt->shape);
            double *vx = tt_values(x), *vy = tt_values(y), *vxt = tt_values(xt), *vyt = tt_values(yt);
            double rtol = 2 * tt_rtol(dt), atol = dt == KN_DT_F32 ? 1e-6 : dt == KN_DT_F64 ? 1e-14 : 1e-3;
            for (int i = 0; i < 105; i++) {
                double want = ref_unary(op, vx[i]), want_t = ref_unary(op, vxt[i]);
                cr_assert(fabs(vy[i] - want) <= atol + rtol * fabs(want), "%s %s(%.9g) = %.9g, expected %.9g",
                          kn_dtype_name(dt), kn_unary_op_name(op), vx[i], vy[i], want);
                cr_assert(fabs(vyt[i] - want_t) <= atol + rtol * fabs(want_t), "%s %s (strided)(%.9g) = %.9g, expected %.9g",
                          kn_dtype_name(dt), kn_unary_op_name(op), vxt[i], vyt[i], want_t);
            }
            free(vx); free(vy); free(vxt); free(vyt);
            kn_tensor_free(x); kn_tensor_free(xt); kn_tensor_free(y); kn_tensor_free(yt);
        }
    }
}

KN_TEST(tensor_elementwise, unary_dtype_rules) {
    int64_t n = 4;
    kn_tensor *xi, *xb, *y;
    KN_ASSERT_OK(kn_tensor_from_f64(&xi, KN_DT_I32, 1, &n, (double[]){-3, 0, 2, 7}));
    KN_ASSERT_OK(kn_tensor_unary(&y, KN_UNARY_NEG, xi));
    cr_assert_eq(y->dtype, KN_DT_I32);
    cr_assert_eq(kn_dtype_load(KN_DT_I32, y->storage->data, 0), 3.0);
    kn_tensor_free(y);
    KN_ASSERT_OK(kn_tensor_unary(&y, KN_UNARY_RELU, xi));
    cr_assert_eq(kn_dtype_load(KN_DT_I32, y->storage->data, 0), 0.0);
    cr_assert_eq(kn_dtype_load(KN_DT_I32, y->storage->data, 3), 7.0);
    kn_tensor_free(y);
    KN_ASSERT_OK(kn_tensor_unary(&y, KN_UNARY_SQUARE, xi));
    cr_assert_eq(kn_dtype_load(KN_DT_I32, y->storage->data, 3), 49.0);
    kn_tensor_free(y);
    y = NULL;
    KN_ASSERT_ERR(kn_tensor_unary(&y, KN_UNARY_EXP, xi), KN_ERR_DTYPE);
    cr_assert(strstr(kn_last_error(), "exp"), "%s", kn_last_error());
    KN_ASSERT_OK(kn_tensor_from_f64(&xb, KN_DT_BOOL, 1, &n, (double[]){1, 0, 1, 0}));
    KN_ASSERT_ERR(kn_tensor_unary(&y, KN_UNARY_ABS, xb), KN_ERR_DTYPE);
    KN_ASSERT_ERR(kn_tensor_unary(&y, KN_UNARY_COUNT, xi), KN_ERR_ARG);
    cr_assert_null(y);
    cr_assert_str_eq(kn_unary_op_name(KN_UNARY_COUNT), "?");
    kn_tensor_free(xi);
    kn_tensor_free(xb);
}

/* Check out == op(a, b) elementwise with broadcasting, by hand. */
static void check_binary(kn_binary_op op, const kn_tensor *a, const kn_tensor *b, const kn_tensor *out, double rtol) {
    int64_t idx[KN_MAX_DIMS], ia[KN_MAX_DIMS], ib[KN_MAX_DIMS];
    int64_t n = tt_numel(out->ndim, out->shape);
    for (int64_t i = 0; i < n; i++) {
        tt_unravel(i, out->ndim, out->shape, idx);
        for (int d = 0; d < a->ndim; d++) {
            int od = out->ndim - a->ndim + d;
            ia[d] = a->shape[d] == 1 ? 0 : idx[od];
        }
        for (int d = 0; d < b->ndim; d++) {
            int od = out->ndim - b->ndim + d;
            ib[d] = b->shape[d] == 1 ? 0 : idx[od];
        }
        double x = tt_at(a, ia), y = tt_at(b, ib), got = tt_at(out, idx), want = ref_binary(op, x, y);
        if (out->dtype != KN_DT_BOOL) want = tt_round(out->dtype, want);
        cr_assert(fabs(got - want) <= rtol * fabs(want), "%s(%.9g, %.9g) = %.9g, expected %.9g (out %s)",
                  kn_binary_op_name(op), x, y, got, want, kn_dtype_name(out->dtype));
    }
}

KN_TEST(tensor_elementwise, binary_every_op_broadcast_and_strided) {
    int64_t sa[3] = {4, 1, 5}, sb[2] = {3, 1}, same[3] = {4, 3, 5}, want[3] = {4, 3, 5};
    for (int op = 0; op < KN_BINARY_COUNT; op++) {
        cr_assert_str_neq(kn_binary_op_name(op), "?");
        bool cmp = op >= KN_BINARY_EQ;
        for (int k = 0; k < 4; k++) {
            kn_dtype dt = float_dts[k];
            double lo = op == KN_BINARY_POW || op == KN_BINARY_DIV ? 0.5 : -3, hi = op == KN_BINARY_POW ? 2 : 3;
            kn_tensor *a = tt_rand(dt, 3, sa, 7 * op + k, lo, hi), *b = tt_rand(dt, 2, sb, 9 * op + k + 1, lo, hi);
            kn_tensor *c = tt_rand(dt, 3, same, 11 * op + k, lo, hi), *d = tt_rand(dt, 3, same, 13 * op + k, lo, hi);
            /* Equal values now and then, so the comparisons see ties. */
            kn_dtype_store(dt, d->storage->data, 0, kn_dtype_load(dt, c->storage->data, 0));
            kn_tensor *o1, *o2, *ct, *o3;
            KN_ASSERT_OK(kn_tensor_binary(&o1, op, a, b));
            tt_assert_shape(o1, cmp ? KN_DT_BOOL : dt, 3, want);
            check_binary(op, a, b, o1, tt_rtol(dt));
            KN_ASSERT_OK(kn_tensor_binary(&o2, op, c, d)); /* same shape, contiguous: flat path */
            check_binary(op, c, d, o2, tt_rtol(dt));
            KN_ASSERT_OK(kn_tensor_transpose(&ct, c, 0, 2)); /* [5,3,4] against [3,4]: strided + broadcast */
            kn_tensor *e = tt_rand(dt, 2, (int64_t[]){3, 4}, 17 * op + k, lo, hi);
            KN_ASSERT_OK(kn_tensor_binary(&o3, op, ct, e));
            check_binary(op, ct, e, o3, tt_rtol(dt));
            kn_tensor_free(a); kn_tensor_free(b); kn_tensor_free(c); kn_tensor_free(d); kn_tensor_free(e);
            kn_tensor_free(ct); kn_tensor_free(o1); kn_tensor_free(o2); kn_tensor_free(o3);
        }
    }
}

KN_TEST(tensor_elementwise, binary_promotion_and_integers) {
    int64_t n = 4;
    kn_tensor *i, *f, *h, *bf, *o;
    KN_ASSERT_OK(kn_tensor_from_f64(&i, KN_DT_I32, 1, &n, (double[]){7, -7, 3, 0}));
    KN_ASSERT_OK(kn_tensor_from_f64(&f, KN_DT_F32, 1, &n, (double[]){0.5, 0.5, 2, 1}));
    KN_ASSERT_OK(kn_tensor_from_f64(&h, KN_DT_F16, 1, &n, (double[]){1, 2, 3, 4}));
    KN_ASSERT_OK(kn_tensor_from_f64(&bf, KN_DT_BF16, 1, &n, (double[]){1, 2, 3, 4}));
    KN_ASSERT_OK(kn_tensor_binary(&o, KN_BINARY_ADD, i, f));
    cr_assert_eq(o->dtype, KN_DT_F32);
    cr_assert_eq(kn_dtype_load(KN_DT_F32, o->storage->data, 1), -6.5);
    kn_tensor_free(o);
    KN_ASSERT_OK(kn_tensor_binary(&o, KN_BINARY_MUL, h, bf));
    cr_assert_eq(o->dtype, KN_DT_F32);
    cr_assert_eq(kn_dtype_load(KN_DT_F32, o->storage->data, 3), 16.0);
    kn_tensor_free(o);
    /* Integer division truncates toward zero (computed in double, stored as i32). */
    KN_ASSERT_OK(kn_tensor_binary_scalar(&o, KN_BINARY_DIV, i, 2));
    cr_assert_eq(o->dtype, KN_DT_I32);
    cr_assert_eq(kn_dtype_load(KN_DT_I32, o->storage->data, 0), 3.0);
    cr_assert_eq(kn_dtype_load(KN_DT_I32, o->storage->data, 1), -3.0);
    kn_tensor_free(o);
    KN_ASSERT_OK(kn_tensor_binary_scalar(&o, KN_BINARY_GE, i, 3));
    cr_assert_eq(o->dtype, KN_DT_BOOL);
    cr_assert_eq(kn_dtype_load(KN_DT_BOOL, o->storage->data, 0), 1.0);
    cr_assert_eq(kn_dtype_load(KN_DT_BOOL, o->storage->data, 1), 0.0);
    cr_assert_eq(kn_dtype_load(KN_DT_BOOL, o->storage->data, 2), 1.0);
    kn_tensor *b2;
    KN_ASSERT_OK(kn_tensor_binary(&b2, KN_BINARY_EQ, o, o)); /* bool == bool is fine */
    kn_tensor *bad = NULL;
    KN_ASSERT_ERR(kn_tensor_binary(&bad, KN_BINARY_ADD, o, b2), KN_ERR_DTYPE);
    KN_ASSERT_ERR(kn_tensor_binary(&bad, KN_BINARY_COUNT, i, h), KN_ERR_ARG);
    cr_assert_null(bad);
    kn_tensor_free(b2); kn_tensor_free(o); kn_tensor_free(i); kn_tensor_free(f); kn_tensor_free(h); kn_tensor_free(bf);
}

KN_TEST(tensor_elementwise, binary_scalar_f32_matches_binary) {
    int64_t shape[2] = {6, 9};
    kn_tensor *x = tt_rand(KN_DT_F32, 2, shape, 5, -2, 2), *s, *o1, *o2;
    KN_ASSERT_OK(kn_tensor_scalar(&s, KN_DT_F32, 0.75));
    for (int op = 0; op < KN_BINARY_COUNT; op++) {
        if (op == KN_BINARY_POW) continue; /* negative bases */
        KN_ASSERT_OK(kn_tensor_binary_scalar(&o1, op, x, 0.75));
        KN_ASSERT_OK(kn_tensor_binary(&o2, op, x, s));
        check_binary(op, x, s, o1, tt_rtol(KN_DT_F32));
        cr_assert_eq(memcmp(o1->storage->data, o2->storage->data, o1->storage->nbytes), 0, "%s",
                     kn_binary_op_name(op));
        kn_tensor_free(o1);
        kn_tensor_free(o2);
    }
    kn_tensor_free(s);
    kn_tensor_free(x);
}

KN_TEST(tensor_elementwise, where_broadcasts_three_ways) {
    kn_tensor *c, *a, *b, *o;
    KN_ASSERT_OK(kn_tensor_from_f64(&c, KN_DT_BOOL, 2, (int64_t[]){1, 3}, (double[]){1, 0, 1}));
    a = tt_rand(KN_DT_F32, 2, (int64_t[]){2, 1}, 3, -1, 1);
    KN_ASSERT_OK(kn_tensor_scalar(&b, KN_DT_F32, -INFINITY));
    KN_ASSERT_OK(kn_tensor_where(&o, c, a, b));
    tt_assert_shape(o, KN_DT_F32, 2, (int64_t[]){2, 3});
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) {
            double v = kn_dtype_load(KN_DT_F32, o->storage->data, i * 3 + j);
            if (j == 1) cr_assert(isinf(v) && v < 0);
            else cr_assert_eq(v, kn_dtype_load(KN_DT_F32, a->storage->data, i));
        }
    kn_tensor_free(o);
    kn_tensor *bi;
    KN_ASSERT_OK(kn_tensor_scalar(&bi, KN_DT_I64, 5));
    KN_ASSERT_OK(kn_tensor_where(&o, c, bi, a)); /* i64 with f32 promotes to f32 */
    cr_assert_eq(o->dtype, KN_DT_F32);
    cr_assert_eq(kn_dtype_load(KN_DT_F32, o->storage->data, 0), 5.0);
    kn_tensor_free(o);
    o = NULL;
    KN_ASSERT_ERR(kn_tensor_where(&o, a, a, b), KN_ERR_DTYPE);
    kn_tensor *c4;
    KN_ASSERT_OK(kn_tensor_zeros(&c4, KN_DT_BOOL, 2, (int64_t[]){3, 1})); /* [3,1] vs a [2,1] */
    KN_ASSERT_ERR(kn_tensor_where(&o, c4, a, b), KN_ERR_SHAPE);
    cr_assert(strstr(kn_last_error(), "kn_tensor_where"), "%s", kn_last_error());
    cr_assert_null(o);
    kn_tensor_free(c4); kn_tensor_free(bi); kn_tensor_free(c); kn_tensor_free(a); kn_tensor_free(b);
}
