/* test_tensor_nn.c — matmul (broadcast batches, transposed operands, every float dtype)
 * against a naive fp64 product; softmax/log_softmax; embedding; cat; max_diff. */
#include <math.h>

#include "tensor_test_util.h"

/* out == a @ b with broadcast batch axes, checked against fp64 sums of the stored inputs. */
static void check_matmul(const kn_tensor *a, const kn_tensor *b, const kn_tensor *out, double rtol) {
    int nd = out->ndim;
    int64_t m = out->shape[nd - 2], n = out->shape[nd - 1], k = a->shape[a->ndim - 1];
    int64_t idx[KN_MAX_DIMS], ia[KN_MAX_DIMS], ib[KN_MAX_DIMS];
    int64_t total = tt_numel(nd, out->shape);
    for (int64_t e = 0; e < total; e++) {
        tt_unravel(e, nd, out->shape, idx);
        for (int d = 0; d < a->ndim - 2; d++) {
            int od = nd - a->ndim + d;
            ia[d] = a->shape[d] == 1 ? 0 : idx[od];
        }
        for (int d = 0; d < b->ndim - 2; d++) {
            int od = nd - b->ndim + d;
            ib[d] = b->shape[d] == 1 ? 0 : idx[od];
        }
        double want = 0, mag = 0;
        for (int64_t p = 0; p < k; p++) {
            ia[a->ndim - 2] = idx[nd - 2], ia[a->ndim - 1] = p;
            ib[b->ndim - 2] = p, ib[b->ndim - 1] = idx[nd - 1];
            double t = tt_at(a, ia) * tt_at(b, ib);
            want += t;
            mag += fabs(t);
        }
        double got = tt_at(out, idx);
        cr_assert(fabs(got - want) <= rtol * mag + 1e-300, "%s out[%lld] = %.9g, expected %.9g (m %lld n %lld k %lld)",
                  kn_dtype_name(out->dtype), (long long)e, got, want, (long long)m, (long long)n, (long long)k);
    }
}

KN_TEST(tensor_nn, matmul_broadcast_batches_every_float_dtype) {
    kn_dtype dts[4] = {KN_DT_F32, KN_DT_F64, KN_DT_F16, KN_DT_BF16};
    for (int q = 0; q < 4; q++) {
        kn_dtype dt = dts[q];
        double rtol = dt == KN_DT_F64 ? 1e-13 : dt == KN_DT_F32 ? 1e-5 : 2 * tt_rtol(dt);
        /* [2,1,5,7] @ [3,7,6] -> [2,3,5,6] */
        kn_tensor *a = tt_rand(dt, 4, (int64_t[]){2, 1, 5, 7}, 31 + q, -1, 1);
        kn_tensor *b = tt_rand(dt, 3, (int64_t[]){3, 7, 6}, 41 + q, -1, 1), *o;
        KN_ASSERT_OK(kn_tensor_matmul(&o, a, b));
        tt_assert_shape(o, dt, 4, (int64_t[]){2, 3, 5, 6});
        check_matmul(a, b, o, rtol);
        kn_tensor_free(o);
        /* Transposed operands (packed), and sizes that leave remainder rows/columns. */
        kn_tensor *at, *bt, *a2 = tt_rand(dt, 3, (int64_t[]){3, 9, 11}, 51 + q, -1, 1);
        kn_tensor *b2 = tt_rand(dt, 2, (int64_t[]){13, 9}, 61 + q, -1, 1);
        KN_ASSERT_OK(kn_tensor_transpose(&at, a2, 1, 2)); /* [3,11,9] */
        KN_ASSERT_OK(kn_tensor_transpose(&bt, b2, 0, 1)); /* [9,13] */
        KN_ASSERT_OK(kn_tensor_matmul(&o, at, bt));
        tt_assert_shape(o, dt, 3, (int64_t[]){3, 11, 13});
        check_matmul(at, bt, o, rtol);
        kn_tensor_free(o);
        kn_tensor_free(a); kn_tensor_free(b); kn_tensor_free(a2); kn_tensor_free(b2); kn_tensor_free(at); kn_tensor_free(bt);
    }
}

KN_TEST(tensor_nn, matmul_larger_f32_and_edge_sizes) {
    /* Wider than one column block (512) and an odd number of rows. */
    kn_tensor *a = tt_rand(KN_DT_F32, 2, (int64_t[]){7, 33}, 3, -1, 1);
    kn_tensor *b = tt_rand(KN_DT_F32, 2, (int64_t[]){33, 530}, 4, -1, 1), *o;
    KN_ASSERT_OK(kn_tensor_matmul(&o, a, b));
    check_matmul(a, b, o, 1e-5);
    kn_tensor_free(o);
    kn_tensor *z1, *z2;
    KN_ASSERT_OK(kn_tensor_zeros(&z1, KN_DT_F32, 2, (int64_t[]){3, 0}));
    KN_ASSERT_OK(kn_tensor_zeros(&z2, KN_DT_F32, 2, (int64_t[]){0, 4}));
    KN_ASSERT_OK(kn_tensor_matmul(&o, z1, z2)); /* k = 0: all zeros */
    tt_assert_shape(o, KN_DT_F32, 2, (int64_t[]){3, 4});
    for (int i = 0; i < 12; i++) cr_assert_eq(((float *)o->storage->data)[i], 0.0f);
    kn_tensor_free(o);
    o = NULL;
    KN_ASSERT_ERR(kn_tensor_matmul(&o, a, a), KN_ERR_SHAPE);
    cr_assert(strstr(kn_last_error(), "[7,33]"), "%s", kn_last_error());
    kn_tensor *v, *d;
    KN_ASSERT_OK(kn_tensor_arange(&v, KN_DT_F32, 0, 33, 1));
    KN_ASSERT_ERR(kn_tensor_matmul(&o, a, v), KN_ERR_SHAPE);
    KN_ASSERT_OK(kn_tensor_cast(&d, b, KN_DT_F64));
    KN_ASSERT_ERR(kn_tensor_matmul(&o, a, d), KN_ERR_DTYPE);
    kn_tensor *bb = tt_rand(KN_DT_F32, 3, (int64_t[]){2, 33, 4}, 5, -1, 1), *aa = tt_rand(KN_DT_F32, 3, (int64_t[]){3, 7, 33}, 6, -1, 1);
    KN_ASSERT_ERR(kn_tensor_matmul(&o, aa, bb), KN_ERR_SHAPE);
    cr_assert_null(o);
    kn_tensor_free(aa); kn_tensor_free(bb); kn_tensor_free(v); kn_tensor_free(d);
    kn_tensor_free(z1); kn_tensor_free(z2); kn_tensor_free(a); kn_tensor_free(b);
}

KN_TEST(tensor_nn, softmax_rows_sum_to_one_and_are_stable) {
    kn_dtype dts[4] = {KN_DT_F32, KN_DT_F64, KN_DT_F16, KN_DT_BF16};
    for (int q = 0; q < 4; q++) {
        kn_dtype dt = dts[q];
        kn_tensor *x = tt_rand(dt, 3, (int64_t[]){3, 4, 6}, 90 + q, -5, 5);
        for (int axis = -3; axis < 3; axis++) {
            kn_tensor *s, *l;
            KN_ASSERT_OK(kn_tensor_softmax(&s, x, axis));
            KN_ASSERT_OK(kn_tensor_log_softmax(&l, x, axis));
            int ax = axis < 0 ? axis + 3 : axis;
            int64_t idx[3];
            for (int64_t e = 0; e < 72; e++) {
                tt_unravel(e, 3, x->shape, idx);
                if (idx[ax] != 0) continue;
                double mx = -INFINITY, sum = 0, total = 0;
                for (int64_t j = 0; j < x->shape[ax]; j++) idx[ax] = j, mx = fmax(mx, tt_at(x, idx));
                for (int64_t j = 0; j < x->shape[ax]; j++) idx[ax] = j, sum += exp(tt_at(x, idx) - mx);
                for (int64_t j = 0; j < x->shape[ax]; j++) {
                    idx[ax] = j;
                    double want = exp(tt_at(x, idx) - mx) / sum, got = tt_at(s, idx);
                    total += got;
                    KN_ASSERT_CLOSE(got, want, 1e-7, 2 * tt_rtol(dt));
                    KN_ASSERT_CLOSE(tt_at(l, idx), log(want), 1e-7, 2 * tt_rtol(dt));
                }
                KN_ASSERT_CLOSE(total, 1.0, 0, 8 * tt_rtol(dt));
            }
            kn_tensor_free(s);
            kn_tensor_free(l);
        }
        kn_tensor_free(x);
    }
    /* Large inputs: no overflow, no NaN. */
    kn_tensor *big, *s, *l;
    KN_ASSERT_OK(kn_tensor_from_f64(&big, KN_DT_F32, 2, (int64_t[]){2, 3}, (double[]){1000, 1001, 1002, -1e30, 0, -1e30}));
    KN_ASSERT_OK(kn_tensor_softmax(&s, big, 1));
    KN_ASSERT_OK(kn_tensor_log_softmax(&l, big, 1));
    double e2 = exp(-2), e1 = exp(-1), z = 1 + e1 + e2;
    KN_ASSERT_CLOSE(kn_dtype_load(KN_DT_F32, s->storage->data, 2), 1 / z, 0, 1e-6);
    KN_ASSERT_CLOSE(kn_dtype_load(KN_DT_F32, s->storage->data, 0), e2 / z, 0, 1e-6);
    KN_ASSERT_CLOSE(kn_dtype_load(KN_DT_F32, l->storage->data, 0), -2 - log(z), 0, 1e-6);
    KN_ASSERT_CLOSE(kn_dtype_load(KN_DT_F32, s->storage->data, 4), 1.0, 0, 1e-7);
    cr_assert_eq(kn_dtype_load(KN_DT_F32, s->storage->data, 3), 0.0);
    KN_ASSERT_CLOSE(kn_dtype_load(KN_DT_F32, l->storage->data, 3), -1e30, 0, 1e-6);
    kn_tensor_free(s); kn_tensor_free(l); kn_tensor_free(big);
    kn_tensor *i = NULL;
    KN_ASSERT_OK(kn_tensor_zeros(&big, KN_DT_I32, 1, (int64_t[]){3}));
    KN_ASSERT_ERR(kn_tensor_softmax(&i, big, 0), KN_ERR_DTYPE);
    kn_tensor_free(big);
    cr_assert_null(i);
}

KN_TEST(tensor_nn, embedding_picks_rows) {
    kn_tensor *w = tt_rand(KN_DT_F32, 2, (int64_t[]){5, 3}, 8, -1, 1), *idx, *o;
    kn_dtype its[3] = {KN_DT_I64, KN_DT_I32, KN_DT_U8};
    for (int q = 0; q < 3; q++) {
        KN_ASSERT_OK(kn_tensor_from_f64(&idx, its[q], 2, (int64_t[]){2, 2}, (double[]){4, 0, 2, 4}));
        KN_ASSERT_OK(kn_tensor_embedding(&o, w, idx));
        tt_assert_shape(o, KN_DT_F32, 3, (int64_t[]){2, 2, 3});
        int rows[4] = {4, 0, 2, 4};
        for (int r = 0; r < 4; r++)
            for (int c = 0; c < 3; c++)
                cr_assert_eq(((float *)o->storage->data)[r * 3 + c], ((float *)w->storage->data)[rows[r] * 3 + c]);
        kn_tensor_free(o);
        kn_tensor_free(idx);
    }
    /* A transposed weight (strided rows). */
    kn_tensor *wt, *w2 = tt_rand(KN_DT_F64, 2, (int64_t[]){3, 5}, 9, -1, 1);
    KN_ASSERT_OK(kn_tensor_transpose(&wt, w2, 0, 1)); /* [5,3] */
    KN_ASSERT_OK(kn_tensor_from_f64(&idx, KN_DT_I32, 1, (int64_t[]){2}, (double[]){3, 1}));
    KN_ASSERT_OK(kn_tensor_embedding(&o, wt, idx));
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 3; c++) cr_assert_eq(tt_at(o, (int64_t[]){r, c}), tt_at(wt, (int64_t[]){r ? 1 : 3, c}));
    kn_tensor_free(o);
    kn_tensor_free(idx);
    o = NULL;
    KN_ASSERT_OK(kn_tensor_from_f64(&idx, KN_DT_I64, 1, (int64_t[]){3}, (double[]){0, 5, 1}));
    KN_ASSERT_ERR(kn_tensor_embedding(&o, w, idx), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "index 5"), "%s", kn_last_error());
    kn_tensor_free(idx);
    KN_ASSERT_OK(kn_tensor_from_f64(&idx, KN_DT_I64, 1, (int64_t[]){1}, (double[]){-1}));
    KN_ASSERT_ERR(kn_tensor_embedding(&o, w, idx), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_embedding(&o, w, w), KN_ERR_DTYPE);
    KN_ASSERT_ERR(kn_tensor_embedding(&o, idx, idx), KN_ERR_SHAPE);
    cr_assert_null(o);
    kn_tensor_free(idx); kn_tensor_free(wt); kn_tensor_free(w2); kn_tensor_free(w);
}

KN_TEST(tensor_nn, cat_along_any_axis) {
    kn_tensor *a = tt_rand(KN_DT_F32, 3, (int64_t[]){2, 3, 4}, 1, -1, 1);
    kn_tensor *b = tt_rand(KN_DT_F32, 3, (int64_t[]){2, 1, 4}, 2, -1, 1), *bt0, *bt;
    kn_tensor *c = tt_rand(KN_DT_F32, 3, (int64_t[]){4, 2, 2}, 3, -1, 1);
    KN_ASSERT_OK(kn_tensor_transpose(&bt0, c, 0, 2)); /* [2,2,4], strided */
    KN_ASSERT_OK(kn_tensor_alias(&bt, bt0));
    const kn_tensor *xs[3] = {a, b, bt};
    kn_tensor *o;
    KN_ASSERT_OK(kn_tensor_cat(&o, 3, xs, -2));
    tt_assert_shape(o, KN_DT_F32, 3, (int64_t[]){2, 6, 4});
    for (int64_t i = 0; i < 2; i++)
        for (int64_t j = 0; j < 6; j++)
            for (int64_t k = 0; k < 4; k++) {
                double want = j < 3 ? tt_at(a, (int64_t[]){i, j, k})
                            : j < 4 ? tt_at(b, (int64_t[]){i, 0, k})
                                    : tt_at(bt, (int64_t[]){i, j - 4, k});
                cr_assert_eq(tt_at(o, (int64_t[]){i, j, k}), want);
            }
    kn_tensor_free(o);
    o = NULL;
    KN_ASSERT_ERR(kn_tensor_cat(&o, 3, xs, 0), KN_ERR_SHAPE);
    KN_ASSERT_ERR(kn_tensor_cat(&o, 0, xs, 0), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_cat(&o, 3, xs, 3), KN_ERR_AXIS);
    kn_tensor *d;
    KN_ASSERT_OK(kn_tensor_cast(&d, b, KN_DT_F64));
    const kn_tensor *ys[2] = {a, d};
    KN_ASSERT_ERR(kn_tensor_cat(&o, 2, ys, 1), KN_ERR_DTYPE);
    const kn_tensor *zs[2] = {a, NULL};
    KN_ASSERT_ERR(kn_tensor_cat(&o, 2, zs, 1), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "xs[1]"), "%s", kn_last_error());
    cr_assert_null(o);
    kn_tensor_free(d); kn_tensor_free(a); kn_tensor_free(b); kn_tensor_free(c); kn_tensor_free(bt0); kn_tensor_free(bt);
}

KN_TEST(tensor_nn, max_diff) {
    kn_tensor *a, *b;
    KN_ASSERT_OK(kn_tensor_from_f64(&a, KN_DT_F32, 1, (int64_t[]){4}, (double[]){1, 2, 0, NAN}));
    KN_ASSERT_OK(kn_tensor_from_f64(&b, KN_DT_F64, 1, (int64_t[]){4}, (double[]){1, 2.5, 0, NAN}));
    double ea, er;
    KN_ASSERT_OK(kn_tensor_max_diff(a, b, &ea, &er));
    cr_assert_eq(ea, 0.5);
    cr_assert_eq(er, 0.2);
    kn_tensor_free(b);
    KN_ASSERT_OK(kn_tensor_from_f64(&b, KN_DT_F64, 1, (int64_t[]){4}, (double[]){1, 2, 0, 1}));
    KN_ASSERT_OK(kn_tensor_max_diff(a, b, &ea, &er));
    cr_assert(isinf(ea) && isinf(er), "NaN against a number is an infinite error");
    kn_tensor_free(b);
    KN_ASSERT_OK(kn_tensor_zeros(&b, KN_DT_F32, 1, (int64_t[]){5}));
    KN_ASSERT_ERR(kn_tensor_max_diff(a, b, &ea, &er), KN_ERR_SHAPE);
    KN_ASSERT_ERR(kn_tensor_max_diff(a, a, NULL, &er), KN_ERR_ARG);
    kn_tensor_free(a); kn_tensor_free(b);
}
