/* test_tensor_reduce.c — kn_tensor_reduce over every subset of axes, with and without
 * keepdim, on contiguous and strided inputs, against a by-hand reference; argmax. */
#include <math.h>

#include "tensor_test_util.h"

/* Reference reduction of x over the axes in mask (bit d = axis d) at output index oidx
 * (keepdim layout: reduced axes have index 0). */
static double ref_reduce(kn_reduce_op op, const kn_tensor *x, unsigned mask, const int64_t *oidx) {
    double acc = op == KN_REDUCE_PROD ? 1 : op == KN_REDUCE_MAX ? -INFINITY : op == KN_REDUCE_MIN ? INFINITY : 0;
    int64_t n = tt_numel(x->ndim, x->shape), count = 0, idx[KN_MAX_DIMS];
    for (int64_t i = 0; i < n; i++) {
        tt_unravel(i, x->ndim, x->shape, idx);
        bool mine = true;
        for (int d = 0; d < x->ndim; d++)
            if (!(mask >> d & 1) && idx[d] != oidx[d]) mine = false;
        if (!mine) continue;
        double v = tt_at(x, idx);
        count++;
        if (op == KN_REDUCE_SUM || op == KN_REDUCE_MEAN) acc += v;
        else if (op == KN_REDUCE_PROD) acc *= v;
        else if (op == KN_REDUCE_MAX) acc = v > acc ? v : acc;
        else acc = v < acc ? v : acc;
    }
    return op == KN_REDUCE_MEAN ? acc / (double)count : acc;
}

static void check_all_subsets(const kn_tensor *x, double rtol) {
    int nd = x->ndim;
    for (int op = 0; op < KN_REDUCE_COUNT; op++) {
        cr_assert_str_neq(kn_reduce_op_name(op), "?");
        for (unsigned mask = 0; mask < (1u << nd); mask++) {
            for (int keep = 0; keep < 2; keep++) {
                int axes[KN_MAX_DIMS], naxes = 0;
                for (int d = 0; d < nd; d++)
                    if (mask >> d & 1) axes[naxes++] = (d % 2) ? d - nd : d; /* mix negative axes in */
                unsigned eff = naxes == 0 ? (1u << nd) - 1 : mask;   /* naxes == 0: all axes */
                kn_tensor *y;
                KN_ASSERT_OK(kn_tensor_reduce(&y, op, x, naxes, axes, keep));
                int64_t oshape[KN_MAX_DIMS];
                int ond = 0;
                for (int d = 0; d < nd; d++)
                    if (!(eff >> d & 1) || keep) oshape[ond++] = (eff >> d & 1) ? 1 : x->shape[d];
                kn_dtype odt = op == KN_REDUCE_MEAN && !kn_dtype_is_float(x->dtype) ? KN_DT_F32 : x->dtype;
                tt_assert_shape(y, odt, ond, oshape);
                /* Walk the keepdim-shaped output space. */
                int64_t kshape[KN_MAX_DIMS], kidx[KN_MAX_DIMS];
                for (int d = 0; d < nd; d++) kshape[d] = (eff >> d & 1) ? 1 : x->shape[d];
                int64_t on = tt_numel(nd, kshape);
                for (int64_t i = 0; i < on; i++) {
                    tt_unravel(i, nd, kshape, kidx);
                    double want = tt_round(odt, ref_reduce(op, x, eff, kidx));
                    double got = kn_dtype_load(odt, y->storage->data, y->offset + i);
                    cr_assert(fabs(got - want) <= rtol * fabs(want) + 1e-12,
                              "%s %s mask %u keepdim %d element %lld: %.9g, expected %.9g", kn_dtype_name(x->dtype),
                              kn_reduce_op_name(op), mask, keep, (long long)i, got, want);
                }
                kn_tensor_free(y);
            }
        }
    }
}

KN_TEST(tensor_reduce, every_axes_subset_contiguous_and_strided) {
    int64_t shape[3] = {3, 4, 5};
    kn_dtype dts[4] = {KN_DT_F32, KN_DT_F64, KN_DT_BF16, KN_DT_I32};
    for (int k = 0; k < 4; k++) {
        kn_dtype dt = dts[k];
        kn_tensor *x = tt_rand(dt, 3, shape, 21 + k, dt == KN_DT_I32 ? -9 : 0.5, dt == KN_DT_I32 ? 9 : 1.5), *xt;
        check_all_subsets(x, 2 * tt_rtol(dt) + 1e-15);
        KN_ASSERT_OK(kn_tensor_permute(&xt, x, (int[]){2, 0, 1}));
        check_all_subsets(xt, 2 * tt_rtol(dt) + 1e-15);
        kn_tensor_free(xt);
        kn_tensor_free(x);
    }
}

KN_TEST(tensor_reduce, scalars_empty_and_errors) {
    kn_tensor *s, *y;
    KN_ASSERT_OK(kn_tensor_scalar(&s, KN_DT_F32, 3.5));
    KN_ASSERT_OK(kn_tensor_reduce(&y, KN_REDUCE_SUM, s, 0, NULL, false));
    cr_assert_eq(y->ndim, 0);
    double v;
    KN_ASSERT_OK(kn_tensor_item(y, &v));
    cr_assert_eq(v, 3.5);
    kn_tensor_free(y);
    kn_tensor *e;
    KN_ASSERT_OK(kn_tensor_zeros(&e, KN_DT_F32, 2, (int64_t[]){0, 3}));
    KN_ASSERT_OK(kn_tensor_reduce(&y, KN_REDUCE_SUM, e, 1, (int[]){0}, false));
    tt_assert_shape(y, KN_DT_F32, 1, (int64_t[]){3});
    cr_assert_eq(kn_dtype_load(KN_DT_F32, y->storage->data, 2), 0.0);
    kn_tensor_free(y);
    KN_ASSERT_OK(kn_tensor_reduce(&y, KN_REDUCE_PROD, e, 1, (int[]){0}, true));
    cr_assert_eq(kn_dtype_load(KN_DT_F32, y->storage->data, 0), 1.0);
    kn_tensor_free(y);
    KN_ASSERT_OK(kn_tensor_reduce(&y, KN_REDUCE_MAX, e, 1, (int[]){1}, false)); /* no outputs: fine */
    cr_assert_eq(kn_tensor_numel(y), 0);
    kn_tensor_free(y);
    y = NULL;
    KN_ASSERT_ERR(kn_tensor_reduce(&y, KN_REDUCE_MAX, e, 1, (int[]){0}, false), KN_ERR_SHAPE);
    KN_ASSERT_ERR(kn_tensor_reduce(&y, KN_REDUCE_SUM, e, 2, (int[]){0, -2}, false), KN_ERR_AXIS);
    KN_ASSERT_ERR(kn_tensor_reduce(&y, KN_REDUCE_SUM, e, 1, (int[]){2}, false), KN_ERR_AXIS);
    KN_ASSERT_ERR(kn_tensor_reduce(&y, KN_REDUCE_SUM, e, 3, (int[]){0, 1, 1}, false), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_reduce(&y, KN_REDUCE_SUM, e, 1, NULL, false), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_reduce(&y, KN_REDUCE_COUNT, e, 0, NULL, false), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_reduce(&y, KN_REDUCE_SUM, NULL, 0, NULL, false), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_reduce(NULL, KN_REDUCE_SUM, e, 0, NULL, false), KN_ERR_ARG);
    cr_assert_null(y);
    kn_tensor_free(e);
    kn_tensor_free(s);
}

KN_TEST(tensor_reduce, max_min_propagate_nan) {
    kn_tensor *x, *y;
    KN_ASSERT_OK(kn_tensor_from_f64(&x, KN_DT_F32, 2, (int64_t[]){2, 3}, (double[]){1, NAN, 3, 4, 5, 6}));
    KN_ASSERT_OK(kn_tensor_reduce(&y, KN_REDUCE_MAX, x, 1, (int[]){1}, false));
    cr_assert(isnan(kn_dtype_load(KN_DT_F32, y->storage->data, 0)));
    cr_assert_eq(kn_dtype_load(KN_DT_F32, y->storage->data, 1), 6.0);
    kn_tensor_free(y);
    KN_ASSERT_OK(kn_tensor_reduce(&y, KN_REDUCE_MIN, x, 1, (int[]){-1}, true));
    cr_assert(isnan(kn_dtype_load(KN_DT_F32, y->storage->data, 0)));
    cr_assert_eq(kn_dtype_load(KN_DT_F32, y->storage->data, 1), 4.0);
    kn_tensor_free(y);
    kn_tensor_free(x);
}

KN_TEST(tensor_reduce, argmax_first_on_ties_any_axis) {
    kn_tensor *x, *y, *xt;
    KN_ASSERT_OK(kn_tensor_from_f64(&x, KN_DT_F32, 2, (int64_t[]){3, 4},
                                    (double[]){1, 7, 7, 2, -1, -3, -2, -1, 0, 0, 5, 5}));
    KN_ASSERT_OK(kn_tensor_argmax(&y, x, -1, false));
    tt_assert_shape(y, KN_DT_I64, 1, (int64_t[]){3});
    cr_assert_eq(((int64_t *)y->storage->data)[0], 1);
    cr_assert_eq(((int64_t *)y->storage->data)[1], 0);
    cr_assert_eq(((int64_t *)y->storage->data)[2], 2);
    kn_tensor_free(y);
    KN_ASSERT_OK(kn_tensor_argmax(&y, x, 0, true));
    tt_assert_shape(y, KN_DT_I64, 2, (int64_t[]){1, 4});
    int64_t want[4] = {0, 0, 0, 2};
    for (int j = 0; j < 4; j++) cr_assert_eq(((int64_t *)y->storage->data)[j], want[j], "column %d", j);
    kn_tensor_free(y);
    KN_ASSERT_OK(kn_tensor_transpose(&xt, x, 0, 1));
    KN_ASSERT_OK(kn_tensor_argmax(&y, xt, 1, false)); /* the same as argmax(x, 0) */
    for (int j = 0; j < 4; j++) cr_assert_eq(((int64_t *)y->storage->data)[j], want[j], "column %d", j);
    kn_tensor_free(y);
    /* Random: matches a by-hand scan. */
    kn_tensor *r = tt_rand(KN_DT_F64, 3, (int64_t[]){4, 6, 5}, 77, -1, 1);
    KN_ASSERT_OK(kn_tensor_argmax(&y, r, 1, false));
    for (int64_t i = 0; i < 4; i++)
        for (int64_t k = 0; k < 5; k++) {
            int64_t best = 0;
            for (int64_t j = 1; j < 6; j++)
                if (tt_at(r, (int64_t[]){i, j, k}) > tt_at(r, (int64_t[]){i, best, k})) best = j;
            cr_assert_eq(((int64_t *)y->storage->data)[i * 5 + k], best);
        }
    kn_tensor_free(y);
    y = NULL;
    KN_ASSERT_ERR(kn_tensor_argmax(&y, r, 3, false), KN_ERR_AXIS);
    kn_tensor *e;
    KN_ASSERT_OK(kn_tensor_empty(&e, KN_DT_F32, 2, (int64_t[]){2, 0}));
    KN_ASSERT_ERR(kn_tensor_argmax(&y, e, 1, false), KN_ERR_SHAPE);
    cr_assert_null(y);
    kn_tensor_free(e); kn_tensor_free(r); kn_tensor_free(xt); kn_tensor_free(x);
}
