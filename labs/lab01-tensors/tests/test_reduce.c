/* test_reduce.c — lab 01 public tests: kn_tensor_reduce (sum, mean, max, min, prod over any
 * set of axes, with or without keepdim), also on views, and the keepdim pattern that lets a
 * reduced tensor broadcast back against its input (how softmax subtracts the row maximum).
 *
 * Most cases use x = [[1, 2, 3], [4, 5, 6]] (shape [2,3]): summing over axis 0 adds the
 * rows (-> [5, 7, 9]), over axis 1 adds within each row (-> [6, 15]). */
#include "check.h"

static kn_tensor *x23(kn_dtype dt) {
    int64_t s[] = {2, 3};
    double v[] = {1, 2, 3, 4, 5, 6};
    return lab01_make(dt, 2, s, v);
}

KN_TEST(lab01_reduce, sum_over_one_axis) {
    kn_tensor *x = x23(KN_DT_F32), *o = NULL;
    int ax0[] = {0}, ax1[] = {1}, axm1[] = {-1};
    int64_t s3[] = {3}, s2[] = {2};
    double w0[] = {5, 7, 9}, w1[] = {6, 15};
    KN_ASSERT_OK(kn_tensor_reduce(&o, KN_REDUCE_SUM, x, 1, ax0, false));
    lab01_expect(o, KN_DT_F32, 1, s3, w0, 0, "sum of [2,3] over axis 0");
    kn_tensor_free(o);
    KN_ASSERT_OK(kn_tensor_reduce(&o, KN_REDUCE_SUM, x, 1, ax1, false));
    lab01_expect(o, KN_DT_F32, 1, s2, w1, 0, "sum of [2,3] over axis 1");
    kn_tensor_free(o);
    KN_ASSERT_OK(kn_tensor_reduce(&o, KN_REDUCE_SUM, x, 1, axm1, false)); /* -1: the last axis */
    lab01_expect(o, KN_DT_F32, 1, s2, w1, 0, "sum of [2,3] over axis -1");
    kn_tensor_free(o);
    kn_tensor_free(x);
}

/* keepdim leaves a size-1 axis where a reduced one was; naxes == 0 reduces every axis. */
KN_TEST(lab01_reduce, keepdim_and_all_axes) {
    kn_tensor *x = x23(KN_DT_F64), *o = NULL;
    int ax1[] = {1};
    int64_t s21[] = {2, 1}, s11[] = {1, 1};
    double w1[] = {6, 15}, wall[] = {21};
    KN_ASSERT_OK(kn_tensor_reduce(&o, KN_REDUCE_SUM, x, 1, ax1, true));
    lab01_expect(o, KN_DT_F64, 2, s21, w1, 0, "sum of [2,3] over axis 1, keepdim");
    kn_tensor_free(o);
    KN_ASSERT_OK(kn_tensor_reduce(&o, KN_REDUCE_SUM, x, 0, NULL, true));
    lab01_expect(o, KN_DT_F64, 2, s11, wall, 0, "sum of [2,3] over all axes, keepdim");
    kn_tensor_free(o);
    KN_ASSERT_OK(kn_tensor_reduce(&o, KN_REDUCE_SUM, x, 0, NULL, false));
    lab01_expect(o, KN_DT_F64, 0, NULL, wall, 0, "sum of [2,3] over all axes (a 0-d result)");
    kn_tensor_free(o);
    kn_tensor_free(x);
}

/* x[i][j][k] = 12i + 4j + k of shape [2,3,4]; summing over axes {0,2} leaves axis 1:
 * sum_{i,k} (12i + 4j + k) = 60 + 32j. The order and sign of the axes do not matter. */
KN_TEST(lab01_reduce, several_axes_at_once) {
    int64_t s[] = {2, 3, 4}, s3[] = {3};
    double v[24];
    for (int i = 0; i < 24; i++) v[i] = i;
    kn_tensor *x = lab01_make(KN_DT_F32, 3, s, v), *o = NULL;
    int axes_a[] = {0, 2}, axes_b[] = {-1, 0};
    double want[] = {60, 92, 124};
    KN_ASSERT_OK(kn_tensor_reduce(&o, KN_REDUCE_SUM, x, 2, axes_a, false));
    lab01_expect(o, KN_DT_F32, 1, s3, want, 0, "sum of [2,3,4] over axes {0,2}");
    kn_tensor_free(o);
    KN_ASSERT_OK(kn_tensor_reduce(&o, KN_REDUCE_SUM, x, 2, axes_b, false));
    lab01_expect(o, KN_DT_F32, 1, s3, want, 0, "sum of [2,3,4] over axes {-1,0}");
    kn_tensor_free(o);
    kn_tensor_free(x);
}

KN_TEST(lab01_reduce, mean_max_min_prod) {
    int64_t s[] = {2, 3}, s2[] = {2}, s3[] = {3};
    /* Column 0 is all negative and column 2 all positive: a max that starts from 0 instead
     * of -infinity (or a min that starts from 0) gets them wrong. */
    double v[] = {-1, -2, 3, -4, 5, 6};
    kn_tensor *x = lab01_make(KN_DT_F64, 2, s, v), *o = NULL;
    int ax0[] = {0}, ax1[] = {1};
    double wmean[] = {0, 7.0 / 3.0}, wmax[] = {-1, 5, 6}, wmin[] = {-4, -2, 3}, wprod[] = {6, -120};
    KN_ASSERT_OK(kn_tensor_reduce(&o, KN_REDUCE_MEAN, x, 1, ax1, false));
    lab01_expect(o, KN_DT_F64, 1, s2, wmean, 1e-15, "mean of [[-1,-2,3],[-4,5,6]] over axis 1");
    kn_tensor_free(o);
    KN_ASSERT_OK(kn_tensor_reduce(&o, KN_REDUCE_MAX, x, 1, ax0, false));
    lab01_expect(o, KN_DT_F64, 1, s3, wmax, 0, "max of [[-1,-2,3],[-4,5,6]] over axis 0");
    kn_tensor_free(o);
    KN_ASSERT_OK(kn_tensor_reduce(&o, KN_REDUCE_MIN, x, 1, ax0, false));
    lab01_expect(o, KN_DT_F64, 1, s3, wmin, 0, "min of [[-1,-2,3],[-4,5,6]] over axis 0");
    kn_tensor_free(o);
    KN_ASSERT_OK(kn_tensor_reduce(&o, KN_REDUCE_PROD, x, 1, ax1, false));
    lab01_expect(o, KN_DT_F64, 1, s2, wprod, 0, "prod of [[-1,-2,3],[-4,5,6]] over axis 1");
    kn_tensor_free(o);
    kn_tensor_free(x);
}

/* The mean of integers is not an integer: it comes back as f32. */
KN_TEST(lab01_reduce, mean_of_integers_is_f32) {
    int64_t s[] = {4};
    double v[] = {1, 2, 4, 7}, want[] = {3.5};
    kn_tensor *x = lab01_make(KN_DT_I32, 1, s, v), *o = NULL;
    KN_ASSERT_OK(kn_tensor_reduce(&o, KN_REDUCE_MEAN, x, 0, NULL, false));
    lab01_expect(o, KN_DT_F32, 0, NULL, want, 0, "mean of i32 {1,2,4,7}");
    kn_tensor_free(o);
    kn_tensor_free(x);
}

/* Reducing a view reads through its strides and offset: the transpose of x is
 * [[1,4],[2,5],[3,6]]; the slice x[1:2, :] is [[4,5,6]], starting at element 3. */
KN_TEST(lab01_reduce, reduce_views) {
    kn_tensor *x = x23(KN_DT_F32), *t = NULL, *row = NULL, *o = NULL;
    KN_ASSERT_OK(kn_tensor_transpose(&t, x, 0, 1));
    int ax1[] = {1};
    int64_t s3[] = {3}, s1[] = {1};
    double want[] = {5, 7, 9}, want_row[] = {15};
    KN_ASSERT_OK(kn_tensor_reduce(&o, KN_REDUCE_SUM, t, 1, ax1, false));
    lab01_expect(o, KN_DT_F32, 1, s3, want, 0, "sum over axis 1 of the transpose of [2,3]");
    kn_tensor_free(o);
    KN_ASSERT_OK(kn_tensor_slice(&row, x, 0, 1, 2, 1));
    KN_ASSERT_OK(kn_tensor_reduce(&o, KN_REDUCE_SUM, row, 1, ax1, false));
    lab01_expect(o, KN_DT_F32, 1, s1, want_row, 0, "sum over axis 1 of x[1:2, :] (offset 3)");
    kn_tensor_free(o);
    kn_tensor_free(row);
    kn_tensor_free(t);
    kn_tensor_free(x);
}

/* x - max(x, axis=1, keepdim): the [2,1] maximum broadcasts back against [2,3]. Without
 * keepdim the [2] result would line up with the wrong axis ([2] vs [3]: an error). */
KN_TEST(lab01_reduce, keepdim_result_broadcasts_back) {
    kn_tensor *x = x23(KN_DT_F32), *m = NULL, *flat = NULL, *o = NULL, *bad = NULL;
    int ax1[] = {1};
    int64_t s[] = {2, 3};
    KN_ASSERT_OK(kn_tensor_reduce(&m, KN_REDUCE_MAX, x, 1, ax1, true));
    KN_ASSERT_OK(kn_tensor_binary(&o, KN_BINARY_SUB, x, m));
    double want[] = {-2, -1, 0, -2, -1, 0};
    lab01_expect(o, KN_DT_F32, 2, s, want, 0, "x - max(x, axis 1, keepdim) for x = [[1,2,3],[4,5,6]]");
    KN_ASSERT_OK(kn_tensor_reduce(&flat, KN_REDUCE_MAX, x, 1, ax1, false));
    KN_ASSERT_ERR(kn_tensor_binary(&bad, KN_BINARY_SUB, x, flat), KN_ERR_SHAPE);
    kn_tensor_free(flat);
    kn_tensor_free(o);
    kn_tensor_free(m);
    kn_tensor_free(x);
}

KN_TEST(lab01_reduce, errors_and_empty_axes) {
    kn_tensor *x = x23(KN_DT_F32), *o = NULL;
    int twice[] = {1, -1}, out_of_range[] = {2};
    /* Axis 1 and axis -1 are the same axis of a 2-D tensor: reducing it twice is an error. */
    KN_ASSERT_ERR(kn_tensor_reduce(&o, KN_REDUCE_SUM, x, 2, twice, false), KN_ERR_AXIS);
    KN_ASSERT_ERR(kn_tensor_reduce(&o, KN_REDUCE_SUM, x, 1, out_of_range, false), KN_ERR_AXIS);
    cr_assert(o == NULL, "a failing kn_tensor_reduce must leave *out untouched");
    kn_tensor_free(x);
    /* [2,0]: every row is empty. Their sums are 0; their maximum does not exist. */
    int64_t s20[] = {2, 0}, s2[] = {2};
    int ax1[] = {1};
    double zeros[] = {0, 0};
    KN_ASSERT_OK(kn_tensor_zeros(&x, KN_DT_F32, 2, s20));
    KN_ASSERT_OK(kn_tensor_reduce(&o, KN_REDUCE_SUM, x, 1, ax1, false));
    lab01_expect(o, KN_DT_F32, 1, s2, zeros, 0, "sum of [2,0] over axis 1");
    kn_tensor_free(o);
    o = NULL;
    KN_ASSERT_ERR(kn_tensor_reduce(&o, KN_REDUCE_MAX, x, 1, ax1, false), KN_ERR_SHAPE);
    kn_tensor_free(x);
}
