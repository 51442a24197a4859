/* test_hidden_reduce.c — hidden tests of lab 01's kn_tensor_reduce.
 *
 * Random shapes up to 6-D (size-0 and size-1 axes), random layouts (stride-0 included), every
 * dtype where the op means something, random axis subsets written with negative axes now and
 * then, keepdim on and off; compared with a reduction written by hand that walks every input
 * element once and accumulates in fp64. Tolerances: the result dtype's rounding, plus the
 * order-of-summation error of fp64 accumulation. Then the properties and the error cases. */
#include <string.h>

#include "../../labs/lab01-tensors/tests/check.h"
#include "hidden_ref.h"

#define CASES 1500

typedef struct reduce_case {
    kn_reduce_op op;
    kn_dtype dt;
    int ndim;
    int64_t shape[KN_MAX_DIMS];
    int naxes;
    int axes[KN_MAX_DIMS];
    bool keepdim;
} reduce_case;

/* The output shape and, per input axis, whether it is reduced. */
static int out_shape(const reduce_case *rc, bool *reduced, int64_t *os) {
    for (int k = 0; k < rc->ndim; k++) reduced[k] = rc->naxes == 0;
    for (int j = 0; j < rc->naxes; j++) reduced[(rc->axes[j] + rc->ndim) % rc->ndim] = true;
    int no = 0;
    for (int k = 0; k < rc->ndim; k++) {
        if (!reduced[k]) os[no++] = rc->shape[k];
        else if (rc->keepdim) os[no++] = 1;
    }
    return no;
}

static kn_dtype out_dtype(kn_reduce_op op, kn_dtype dt) {
    return op == KN_REDUCE_MEAN && !kn_dtype_is_float(dt) ? KN_DT_F32 : dt;
}

/* Run one case against the hand-written reduction; x has rc's shape and dtype. */
static void check_reduce(const reduce_case *rc, const kn_tensor *x, int case_no) {
    bool reduced[KN_MAX_DIMS];
    int64_t os[KN_MAX_DIMS];
    int no = out_shape(rc, reduced, os);
    int64_t nout = href_numel(no, os), nin = href_numel(rc->ndim, rc->shape);
    int64_t count = 1;
    for (int k = 0; k < rc->ndim; k++) if (reduced[k]) count *= rc->shape[k];
    double *acc = kn_calloc((size_t)nout + 1, sizeof *acc), *mag = kn_calloc((size_t)nout + 1, sizeof *mag);
    cr_assert(acc && mag);
    for (int64_t o = 0; o < nout; o++) {
        acc[o] = rc->op == KN_REDUCE_PROD ? 1 : rc->op == KN_REDUCE_MAX ? -INFINITY
               : rc->op == KN_REDUCE_MIN ? INFINITY : 0;
        mag[o] = rc->op == KN_REDUCE_PROD ? 1 : 0;
    }
    for (int64_t i = 0; i < nin; i++) {
        int64_t idx[KN_MAX_DIMS], o = 0;
        href_unravel(i, rc->ndim, rc->shape, idx);
        for (int k = 0; k < rc->ndim; k++) if (!reduced[k]) o = o * rc->shape[k] + idx[k];
        double v = href_at(x, idx);
        switch (rc->op) {
        case KN_REDUCE_SUM: case KN_REDUCE_MEAN: acc[o] += v; mag[o] += fabs(v); break;
        case KN_REDUCE_PROD: acc[o] *= v; mag[o] *= fabs(v); break;
        case KN_REDUCE_MAX: if (v > acc[o]) acc[o] = v; break;
        case KN_REDUCE_MIN: if (v < acc[o]) acc[o] = v; break;
        case KN_REDUCE_COUNT: cr_assert_fail("not a reduction"); break;
        }
    }
    char sx[96], so[96], axes[64] = "all";
    href_shape_str(rc->ndim, rc->shape, sx, sizeof sx);
    href_shape_str(no, os, so, sizeof so);
    for (int j = 0, n = 0; j < rc->naxes; j++)
        n += snprintf(axes + n, sizeof axes - (size_t)n, j ? ",%d" : "%d", rc->axes[j]);
    kn_tensor *out = NULL;
    KN_ASSERT_OK(kn_tensor_reduce(&out, rc->op, x, rc->naxes, rc->naxes ? rc->axes : NULL,
                                  rc->keepdim));
    kn_dtype odt = out_dtype(rc->op, rc->dt);
    char what[256];
    snprintf(what, sizeof what, "case %d: %s of %s %s over axes {%s}, keepdim %d", case_no,
             kn_reduce_op_name(rc->op), kn_dtype_name(rc->dt), sx, axes, rc->keepdim);
    href_expect_shape(out, odt, no, os, what);
    for (int64_t o = 0; o < nout; o++) {
        double want = acc[o], scale = mag[o];
        if (rc->op == KN_REDUCE_MEAN) { want /= (double)count; scale /= (double)count; }
        want = href_roundtrip(odt, want);
        double tol = href_eps(odt) * fabs(want) + (double)(count + 1) * 0x1p-50 * scale;
        int64_t oi[KN_MAX_DIMS];
        href_unravel(o, no, os, oi);
        double got = href_at(out, oi);
        cr_assert(href_close(got, want, tol), "%s -> %s: output element %lld expected %.10g, "
                  "got %.10g (tolerance %.3g)", what, so, (long long)o, want, got, tol);
    }
    kn_tensor_free(out);
    kn_free(mag);
    kn_free(acc);
}

/* A random case; the ops that need it avoid empty reductions. */
static void rand_case(kn_rng *r, int c, reduce_case *rc) {
    static const kn_reduce_op ops[] = {KN_REDUCE_SUM, KN_REDUCE_MEAN, KN_REDUCE_MAX,
                                       KN_REDUCE_MIN, KN_REDUCE_PROD};
    rc->dt = href_all_dtypes[c % KN_DT_COUNT];
    rc->op = ops[href_randint(r, 0, 4)];
    if (rc->dt == KN_DT_BOOL) rc->op = href_randint(r, 0, 1) ? KN_REDUCE_MAX : KN_REDUCE_MIN;
    rc->ndim = href_rand_shape(r, 6, true, rc->shape);
    rc->keepdim = href_randint(r, 0, 1);
    rc->naxes = 0;
    if (rc->ndim > 0 && href_randint(r, 0, 4) != 0) {
        int perm[KN_MAX_DIMS];
        href_rand_perm(r, rc->ndim, perm);
        rc->naxes = (int)href_randint(r, 1, rc->ndim);
        for (int j = 0; j < rc->naxes; j++)
            rc->axes[j] = perm[j] - (href_randint(r, 0, 2) == 0 ? rc->ndim : 0);
    }
    bool reduced[KN_MAX_DIMS];
    int64_t os[KN_MAX_DIMS], count = 1;
    out_shape(rc, reduced, os);
    for (int k = 0; k < rc->ndim; k++) if (reduced[k]) count *= rc->shape[k];
    if (count > 0) return;
    if (rc->dt == KN_DT_BOOL) { rc->ndim = 0; rc->naxes = 0; }  /* bool: max/min only */
    else if (rc->op == KN_REDUCE_MEAN || rc->op == KN_REDUCE_MAX || rc->op == KN_REDUCE_MIN)
        rc->op = KN_REDUCE_SUM; /* max/min of nothing is an error, tested on its own */
}

KN_TEST(lab01_hidden_reduce, random_against_reference) {
    kn_rng r = kn_rng_new(301);
    for (int c = 0; c < CASES; c++) {
        reduce_case rc;
        rand_case(&r, c, &rc);
        href_values v = rc.op == KN_REDUCE_PROD ? HREF_VALUES_NEAR_ONE : HREF_VALUES_ANY;
        kn_tensor *x = href_rand_layout(&r, rc.dt, rc.ndim, rc.shape, true, v);
        check_reduce(&rc, x, c);
        kn_tensor_free(x);
    }
}

/* Reducing every axis at once equals reducing them one at a time (keepdim keeps the axis
 * numbers still), in any order. */
KN_TEST(lab01_hidden_reduce, all_axes_equals_one_at_a_time) {
    static const kn_reduce_op ops[] = {KN_REDUCE_SUM, KN_REDUCE_MEAN, KN_REDUCE_MAX, KN_REDUCE_MIN};
    static const kn_dtype dts[] = {KN_DT_F64, KN_DT_I64, KN_DT_F32};
    kn_rng r = kn_rng_new(302);
    for (int c = 0; c < 150; c++) {
        kn_reduce_op op = ops[c % 4];
        kn_dtype dt = dts[(c / 4) % 3];
        if (op == KN_REDUCE_MEAN && dt == KN_DT_I64) dt = KN_DT_F64;
        int64_t shape[KN_MAX_DIMS];
        int nd = href_rand_shape(&r, 6, false, shape), perm[KN_MAX_DIMS];
        kn_tensor *x = href_rand_layout(&r, dt, nd, shape, true, HREF_VALUES_ANY);
        kn_tensor *all = NULL, *step = NULL;
        KN_ASSERT_OK(kn_tensor_reduce(&all, op, x, 0, NULL, true));
        KN_ASSERT_OK(kn_tensor_alias(&step, x));
        href_rand_perm(&r, nd, perm);
        for (int j = 0; j < nd; j++) {
            kn_tensor *next = NULL;
            KN_ASSERT_OK(kn_tensor_reduce(&next, op, step, 1, &perm[j], true));
            kn_tensor_free(step);
            step = next;
        }
        char ss[96];
        href_shape_str(nd, shape, ss, sizeof ss);
        href_expect_shape(step, all->dtype, all->ndim, all->shape, "one axis at a time");
        int64_t zero[KN_MAX_DIMS] = {0};
        double a = href_at(all, zero), s = href_at(step, zero);
        /* Each step rounds to dt: up to ndim roundings of partial sums of |x| < 2 each. */
        double tol = (href_eps(dt) * (nd + 1) + 1e-13) * 2.0 * (double)(href_numel(nd, shape) + 1);
        cr_assert(href_close(s, a, tol),
                  "%s of %s %s: all axes at once gives %.12g, one axis at a time %.12g",
                  kn_reduce_op_name(op), kn_dtype_name(dt), ss, a, s);
        kn_tensor_free(step);
        kn_tensor_free(all);
        kn_tensor_free(x);
    }
}

KN_TEST(lab01_hidden_reduce, axis_errors) {
    int64_t shape[] = {2, 3, 4};
    kn_tensor *x = NULL, *o = NULL, *s = NULL;
    KN_ASSERT_OK(kn_tensor_zeros(&x, KN_DT_F32, 3, shape));
    int rep1[] = {1, 1}, rep2[] = {0, -1, 2}, big[] = {3}, neg[] = {-4}, ok_then_bad[] = {0, 5};
    KN_ASSERT_ERR(kn_tensor_reduce(&o, KN_REDUCE_SUM, x, 2, rep1, false), KN_ERR_AXIS);
    KN_ASSERT_ERR(kn_tensor_reduce(&o, KN_REDUCE_SUM, x, 3, rep2, true), KN_ERR_AXIS);
    KN_ASSERT_ERR(kn_tensor_reduce(&o, KN_REDUCE_MAX, x, 1, big, false), KN_ERR_AXIS);
    KN_ASSERT_ERR(kn_tensor_reduce(&o, KN_REDUCE_MEAN, x, 1, neg, false), KN_ERR_AXIS);
    KN_ASSERT_ERR(kn_tensor_reduce(&o, KN_REDUCE_PROD, x, 2, ok_then_bad, false), KN_ERR_AXIS);
    KN_ASSERT_OK(kn_tensor_scalar(&s, KN_DT_F64, 1.5));
    /* A 0-d tensor has no axis 0. The handout allows KN_ERR_AXIS (the axis is out of range)
     * or KN_ERR_ARG (naxes 1 is more than ndim 0), with a message either way. */
    int zero[] = {0};
    kn_clear_error();
    kn_status st = kn_tensor_reduce(&o, KN_REDUCE_SUM, s, 1, zero, false);
    cr_assert((st == KN_ERR_AXIS || st == KN_ERR_ARG) && kn_last_error()[0],
              "sum over axis 0 of a 0-d tensor: expected KN_ERR_AXIS or KN_ERR_ARG with a "
              "message, got %s: %s", kn_status_name(st), kn_last_error());
    cr_assert(o == NULL, "kn_tensor_reduce must leave *out untouched when it fails");
    kn_tensor_free(s);
    kn_tensor_free(x);
}

KN_TEST(lab01_hidden_reduce, empty_reductions) {
    int64_t shape[] = {3, 0, 2};
    kn_tensor *x = NULL, *o = NULL;
    KN_ASSERT_OK(kn_tensor_zeros(&x, KN_DT_F32, 3, shape));
    int ax1[] = {1}, axm2[] = {-2}, ax02[] = {0, 2};
    KN_ASSERT_ERR(kn_tensor_reduce(&o, KN_REDUCE_MAX, x, 1, ax1, false), KN_ERR_SHAPE);
    KN_ASSERT_ERR(kn_tensor_reduce(&o, KN_REDUCE_MIN, x, 1, axm2, true), KN_ERR_SHAPE);
    KN_ASSERT_ERR(kn_tensor_reduce(&o, KN_REDUCE_MAX, x, 0, NULL, false), KN_ERR_SHAPE);
    cr_assert(o == NULL);
    /* Sum and prod of nothing are 0 and 1. */
    for (int op = 0; op < 2; op++) {
        kn_reduce_op rop = op ? KN_REDUCE_PROD : KN_REDUCE_SUM;
        KN_ASSERT_OK(kn_tensor_reduce(&o, rop, x, 1, ax1, false));
        int64_t want_shape[] = {3, 2};
        href_expect_shape(o, KN_DT_F32, 2, want_shape, kn_reduce_op_name(rop));
        for (int64_t i = 0; i < 6; i++) {
            int64_t idx[2] = {i / 2, i % 2};
            cr_assert(href_at(o, idx) == (op ? 1.0 : 0.0), "%s over an empty axis: expected %g, got %g",
                      kn_reduce_op_name(rop), op ? 1.0 : 0.0, href_at(o, idx));
        }
        kn_tensor_free(o);
        o = NULL;
    }
    /* Max over non-empty axes of a tensor with no elements: an empty result, no error. */
    KN_ASSERT_OK(kn_tensor_reduce(&o, KN_REDUCE_MAX, x, 2, ax02, true));
    int64_t want_shape[] = {1, 0, 1};
    href_expect_shape(o, KN_DT_F32, 3, want_shape, "max over axes {0,2} of [3,0,2], keepdim");
    kn_tensor_free(o);
    kn_tensor_free(x);
}

KN_TEST(lab01_hidden_reduce, zero_d_bool_and_integer_mean) {
    kn_tensor *s = NULL, *o = NULL;
    KN_ASSERT_OK(kn_tensor_scalar(&s, KN_DT_BF16, -3.0));
    KN_ASSERT_OK(kn_tensor_reduce(&o, KN_REDUCE_SUM, s, 0, NULL, true));
    href_expect_shape(o, KN_DT_BF16, 0, NULL, "sum of a 0-d tensor");
    cr_assert(href_at(o, NULL) == -3.0, "sum of a 0-d -3: got %g", href_at(o, NULL));
    kn_tensor_free(o);
    kn_tensor_free(s);

    double bits[] = {0, 1, 0, 0, 0, 0};
    int64_t shape[] = {2, 3};
    KN_ASSERT_OK(kn_tensor_from_f64(&s, KN_DT_BOOL, 2, shape, bits));
    int ax1[] = {-1};
    KN_ASSERT_OK(kn_tensor_reduce(&o, KN_REDUCE_MAX, s, 1, ax1, false));
    int64_t two[] = {2};
    href_expect_shape(o, KN_DT_BOOL, 1, two, "max (any) of bool [2,3] over axis -1");
    int64_t i0[] = {0}, i1[] = {1};
    cr_assert(href_at(o, i0) == 1 && href_at(o, i1) == 0, "any of rows {0,1,0} {0,0,0}: got %g %g",
              href_at(o, i0), href_at(o, i1));
    kn_tensor_free(o);
    kn_tensor_free(s);

    double ints[] = {1, 2, 4, 7};
    int64_t four[] = {4};
    KN_ASSERT_OK(kn_tensor_from_f64(&s, KN_DT_I32, 1, four, ints));
    KN_ASSERT_OK(kn_tensor_reduce(&o, KN_REDUCE_MEAN, s, 0, NULL, false));
    href_expect_shape(o, KN_DT_F32, 0, NULL, "mean of i32 [4]");
    cr_assert(href_at(o, NULL) == 3.5, "mean of {1,2,4,7}: expected 3.5, got %g", href_at(o, NULL));
    kn_tensor_free(o);
    kn_tensor_free(s);
}
