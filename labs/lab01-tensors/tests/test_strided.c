/* test_strided.c — lab 01 public tests: kn_index_next (walking a shape in row-major order)
 * and kn_tensor_copy_into (copying between any two layouts and dtypes), on their own and
 * inside kn_tensor_contiguous, which turns a view into a fresh row-major tensor with them. */
#include "check.h"

/* Over [2,3] the indices come as [0,0] [0,1] [0,2] [1,0] [1,1] [1,2]: the last axis moves
 * fastest, and when it wraps around the axis before it advances (like an odometer). */
KN_TEST(lab01_strided, index_next_walks_row_major) {
    int64_t shape[] = {2, 3}, idx[] = {0, 0};
    static const int64_t want[6][2] = {{0, 0}, {0, 1}, {0, 2}, {1, 0}, {1, 1}, {1, 2}};
    for (int step = 1; step < 6; step++) {
        kn_clear_error();
        bool more = kn_index_next(2, shape, idx);
        cr_assert(more, "kn_index_next over [2,3] returned false at [%lld,%lld], expected "
                  "[%lld,%lld] next (%s)", (long long)want[step - 1][0],
                  (long long)want[step - 1][1], (long long)want[step][0],
                  (long long)want[step][1], kn_last_error());
        cr_assert(idx[0] == want[step][0] && idx[1] == want[step][1],
                  "kn_index_next over [2,3], step %d: expected [%lld,%lld], got [%lld,%lld]",
                  step, (long long)want[step][0], (long long)want[step][1], (long long)idx[0],
                  (long long)idx[1]);
    }
    cr_assert(!kn_index_next(2, shape, idx), "after [1,2], the last index of [2,3], "
              "kn_index_next must return false");
    cr_assert(idx[0] == 0 && idx[1] == 0, "after the last index the index is reset to [0,0], "
              "got [%lld,%lld]", (long long)idx[0], (long long)idx[1]);
}

/* A do/while over kn_index_next visits numel indices: the first is all zeros. */
KN_TEST(lab01_strided, index_next_visits_numel_indices) {
    int64_t shape[] = {2, 1, 3, 2}, idx[4] = {0};
    int64_t visited = 0;
    kn_clear_error();
    do visited++; while (kn_index_next(4, shape, idx) && visited <= 12);
    cr_assert(visited == 12, "a walk over [2,1,3,2] visited %lld indices, expected 12 (%s)",
              (long long)visited, kn_last_error());
    /* A 0-d shape has exactly one index (the empty one): no next. */
    cr_assert(!kn_index_next(0, NULL, idx), "kn_index_next over a 0-d shape must return false");
}

/* x = [[0,1,2],[3,4,5]] transposed is [[0,3],[1,4],[2,5]]: same storage, strides [1,3].
 * contiguous() must copy it into row-major order 0 3 1 4 2 5. */
KN_TEST(lab01_strided, contiguous_of_a_transpose) {
    int64_t xs[] = {2, 3}, ts[] = {3, 2};
    double xv[] = {0, 1, 2, 3, 4, 5};
    kn_tensor *x = lab01_make(KN_DT_F32, 2, xs, xv), *t = NULL, *c = NULL;
    KN_ASSERT_OK(kn_tensor_transpose(&t, x, 0, 1));
    cr_assert(!kn_tensor_is_contiguous(t), "a transposed [2,3] is not row-major");
    KN_ASSERT_OK(kn_tensor_contiguous(&c, t));
    cr_assert(kn_tensor_is_contiguous(c), "kn_tensor_contiguous must return a row-major tensor");
    double want[] = {0, 3, 1, 4, 2, 5};
    lab01_expect(c, KN_DT_F32, 2, ts, want, 0, "contiguous(transpose of [2,3])");
    for (int i = 0; i < 6; i++)
        cr_assert(kn_dtype_load(KN_DT_F32, kn_tensor_data(c), i) == want[i],
                  "contiguous(transpose): memory position %d holds %g, expected %g", i,
                  kn_dtype_load(KN_DT_F32, kn_tensor_data(c), i), want[i]);
    kn_tensor_free(c);
    kn_tensor_free(t);
    kn_tensor_free(x);
}

/* Every second column of [[0..4],[5..9]] from column 1: x[:, 1:5:2] is a view with offset 1
 * and strides [5,2] over the same memory; made contiguous it holds 1 3 6 8. */
KN_TEST(lab01_strided, contiguous_of_a_stepped_slice) {
    int64_t xs[] = {2, 5}, ss[] = {2, 2};
    double xv[10];
    for (int i = 0; i < 10; i++) xv[i] = i;
    kn_tensor *x = lab01_make(KN_DT_I32, 2, xs, xv), *s = NULL, *c = NULL;
    KN_ASSERT_OK(kn_tensor_slice(&s, x, 1, 1, 5, 2));
    KN_ASSERT_OK(kn_tensor_contiguous(&c, s));
    double want[] = {1, 3, 6, 8};
    lab01_expect(c, KN_DT_I32, 2, ss, want, 0, "contiguous(x[:, 1:5:2]) of i32[2,5] (mind the offset)");
    cr_assert(kn_tensor_is_contiguous(c));
    kn_tensor_free(c);
    kn_tensor_free(s);
    kn_tensor_free(x);
}

/* Copying into a transposed view writes the underlying buffer in transposed order. */
KN_TEST(lab01_strided, copy_into_a_transposed_destination) {
    int64_t ds[] = {3, 2}, ss[] = {2, 3};
    double sv[] = {1, 2, 3, 4, 5, 6};
    kn_tensor *buf = NULL, *dst = NULL, *src = lab01_make(KN_DT_F64, 2, ss, sv);
    KN_ASSERT_OK(kn_tensor_zeros(&buf, KN_DT_F64, 2, ds));
    KN_ASSERT_OK(kn_tensor_transpose(&dst, buf, 0, 1)); /* a [2,3] view of buf */
    KN_ASSERT_OK(kn_tensor_copy_into(dst, src));
    lab01_expect(dst, KN_DT_F64, 2, ss, sv, 0, "copy_into(transposed view, [2,3])");
    double want_buf[] = {1, 4, 2, 5, 3, 6};
    lab01_expect(buf, KN_DT_F64, 2, ds, want_buf, 0, "the buffer under the transposed view");
    kn_tensor_free(dst);
    kn_tensor_free(buf);
    kn_tensor_free(src);
}

/* copy_into converts: to integers it truncates toward zero and saturates; to bool it stores
 * x != 0; to f16 it rounds to nearest, ties to even. */
KN_TEST(lab01_strided, copy_into_converts_dtypes) {
    int64_t n4[] = {4};
    double sv[] = {1.7, -1.7, 300, -0.5};
    kn_tensor *src = lab01_make(KN_DT_F64, 1, n4, sv), *d = NULL;
    KN_ASSERT_OK(kn_tensor_zeros(&d, KN_DT_I32, 1, n4));
    KN_ASSERT_OK(kn_tensor_copy_into(d, src));
    double wi[] = {1, -1, 300, 0};
    lab01_expect(d, KN_DT_I32, 1, n4, wi, 0, "copy_into(i32, f64 {1.7,-1.7,300,-0.5})");
    kn_tensor_free(d);
    KN_ASSERT_OK(kn_tensor_zeros(&d, KN_DT_U8, 1, n4));
    KN_ASSERT_OK(kn_tensor_copy_into(d, src));
    double wu[] = {1, 0, 255, 0};
    lab01_expect(d, KN_DT_U8, 1, n4, wu, 0, "copy_into(u8, f64 {1.7,-1.7,300,-0.5})");
    kn_tensor_free(d);
    KN_ASSERT_OK(kn_tensor_zeros(&d, KN_DT_BOOL, 1, n4));
    KN_ASSERT_OK(kn_tensor_copy_into(d, src));
    double wb[] = {1, 1, 1, 1};
    lab01_expect(d, KN_DT_BOOL, 1, n4, wb, 0, "copy_into(bool, f64 {1.7,-1.7,300,-0.5})");
    kn_tensor_free(d);
    kn_tensor_free(src);
    /* f16 keeps 10 fraction bits: 1 + 2^-11 is halfway between 1 and 1 + 2^-10 and goes to
     * the even one, 1; 1 + 3*2^-11 is halfway between 1 + 2^-10 and 1 + 2^-9 -> 1 + 2^-9. */
    double hv[] = {1 + 0x1p-11, 1 + 3 * 0x1p-11, 65504, 1e-8};
    src = lab01_make(KN_DT_F64, 1, n4, hv);
    KN_ASSERT_OK(kn_tensor_zeros(&d, KN_DT_F16, 1, n4));
    KN_ASSERT_OK(kn_tensor_copy_into(d, src));
    /* 1e-8 is below half the smallest f16 subnormal (2^-24 ~ 6e-8): it rounds to 0. */
    double wh[] = {1, 1 + 0x1p-9, 65504, 0};
    lab01_expect(d, KN_DT_F16, 1, n4, wh, 0, "copy_into(f16, f64 {1+2^-11, 1+3*2^-11, 65504, 1e-8})");
    kn_tensor_free(d);
    kn_tensor_free(src);
}

KN_TEST(lab01_strided, copy_into_rejects_different_shapes) {
    int64_t a[] = {2, 3}, b[] = {3, 2};
    kn_tensor *d = NULL, *s = NULL;
    KN_ASSERT_OK(kn_tensor_zeros(&d, KN_DT_F32, 2, a));
    KN_ASSERT_OK(kn_tensor_zeros(&s, KN_DT_F32, 2, b));
    /* Same number of elements is not enough: shapes must be equal. */
    KN_ASSERT_ERR(kn_tensor_copy_into(d, s), KN_ERR_SHAPE);
    kn_tensor_free(s);
    kn_tensor_free(d);
}
