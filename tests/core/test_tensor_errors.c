/* test_tensor_errors.c — bad input for every public tensor function: each returns the
 * exact status with a message, never crashes, and leaves its out pointer alone; and
 * allocation-failure sweeps: making the 1st, 2nd, ... allocation of an operation fail
 * must give KN_ERR_OOM cleanly (ASan reports any leak or bad access on those paths). */
#include "tensor_test_util.h"

#define BAD_DT ((kn_dtype)99)

/* Fixtures: a good f32 [2,3] tensor, a malformed one, an i64 index tensor. */
static kn_tensor *good(void) {
    return tt_rand(KN_DT_F32, 2, (int64_t[]){2, 3}, 1, -1, 1);
}

KN_TEST(tensor_errors, creation) {
    kn_tensor *o = NULL;
    int64_t shape[2] = {2, 3}, neg[2] = {2, -1}, huge[3] = {INT64_C(1) << 40, INT64_C(1) << 40, 4};
    int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    kn_rng r = kn_rng_new(1);
    KN_ASSERT_ERR(kn_tensor_empty(NULL, KN_DT_F32, 2, shape), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_empty(&o, BAD_DT, 2, shape), KN_ERR_DTYPE);
    KN_ASSERT_ERR(kn_tensor_empty(&o, KN_DT_F32, -1, shape), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_empty(&o, KN_DT_F32, 9, nine), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_empty(&o, KN_DT_F32, 2, NULL), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_empty(&o, KN_DT_F32, 2, neg), KN_ERR_SHAPE);
    cr_assert(strstr(kn_last_error(), "[2,-1]") && strstr(kn_last_error(), "kn_tensor_empty"), "%s", kn_last_error());
    KN_ASSERT_ERR(kn_tensor_empty(&o, KN_DT_F32, 3, huge), KN_ERR_SHAPE);
    KN_ASSERT_ERR(kn_tensor_empty(&o, KN_DT_F64, 2, (int64_t[]){INT64_C(1) << 31, INT64_C(1) << 31}), KN_ERR_SHAPE);
    KN_ASSERT_ERR(kn_tensor_empty(&o, KN_DT_U8, 2, (int64_t[]){INT64_C(1) << 31, INT64_C(1) << 20}), KN_ERR_OOM);
    KN_ASSERT_ERR(kn_tensor_empty_on(&o, (kn_device){KN_DEVICE_TYPE_COUNT, 0}, KN_DT_F32, 2, shape), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_empty_on(&o, (kn_device){KN_DEVICE_CPU, 3}, KN_DT_F32, 2, shape), KN_ERR_DEVICE);
    KN_ASSERT_ERR(kn_tensor_empty_on(NULL, KN_CPU, KN_DT_F32, 2, shape), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_zeros(&o, KN_DT_F32, 2, neg), KN_ERR_SHAPE);
    KN_ASSERT_ERR(kn_tensor_zeros(NULL, KN_DT_F32, 2, shape), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_full(&o, BAD_DT, 2, shape, 1), KN_ERR_DTYPE);
    KN_ASSERT_ERR(kn_tensor_full(NULL, KN_DT_F32, 2, shape, 1), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_scalar(&o, BAD_DT, 1), KN_ERR_DTYPE);
    KN_ASSERT_ERR(kn_tensor_scalar(NULL, KN_DT_F32, 1), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_from_data(&o, KN_DT_F32, 2, shape, NULL), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_from_data(&o, KN_DT_F32, 2, neg, shape), KN_ERR_SHAPE);
    KN_ASSERT_ERR(kn_tensor_from_data(NULL, KN_DT_F32, 2, shape, shape), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_from_f64(&o, KN_DT_F32, 2, shape, NULL), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_from_f64(&o, BAD_DT, 2, shape, (double[6]){0}), KN_ERR_DTYPE);
    KN_ASSERT_ERR(kn_tensor_from_f64(NULL, KN_DT_F32, 2, shape, (double[6]){0}), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_arange(&o, BAD_DT, 0, 1, 1), KN_ERR_DTYPE);
    KN_ASSERT_ERR(kn_tensor_arange(NULL, KN_DT_F32, 0, 1, 1), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_rand(&o, KN_DT_F32, 2, neg, &r), KN_ERR_SHAPE);
    KN_ASSERT_ERR(kn_tensor_rand(NULL, KN_DT_F32, 2, shape, &r), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_randn(&o, KN_DT_BOOL, 2, shape, &r), KN_ERR_DTYPE);
    KN_ASSERT_ERR(kn_tensor_randn(&o, KN_DT_F32, -2, shape, &r), KN_ERR_ARG);
    cr_assert_null(o);
}

KN_TEST(tensor_errors, inspection) {
    kn_tensor *x = good();
    kn_tensor bad = *x;
    bad.ndim = 12;
    double v;
    cr_assert_eq(kn_tensor_numel(NULL), 0);
    cr_assert(!kn_tensor_is_contiguous(NULL));
    cr_assert_null(kn_tensor_data(NULL));
    KN_ASSERT_ERR(kn_tensor_get(NULL, (int64_t[]){0, 0}, &v), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_get(x, NULL, &v), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_get(x, (int64_t[]){0, 0}, NULL), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_get(x, (int64_t[]){2, 0}, &v), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "index 2") && strstr(kn_last_error(), "[2,3]"), "%s", kn_last_error());
    KN_ASSERT_ERR(kn_tensor_get(x, (int64_t[]){0, -4}, &v), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_get(&bad, (int64_t[]){0, 0}, &v), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_set(NULL, (int64_t[]){0, 0}, 1), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_set(x, (int64_t[]){0, 3}, 1), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_item(x, &v), KN_ERR_SHAPE);
    KN_ASSERT_ERR(kn_tensor_item(NULL, &v), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_to_f64(NULL, &v), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_to_f64(x, NULL), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_axis_normalize("f", 0, 0, NULL), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_axis_normalize("f", 0, -1, (int[1]){0}), KN_ERR_ARG);
    char buf[32];
    cr_assert_str_eq(kn_tensor_str(NULL, buf, sizeof buf), "(null)");
    cr_assert_str_eq(kn_shape_str(-1, NULL, buf, sizeof buf), "[?ndim=-1]");
    cr_assert_null(kn_shape_str(1, (int64_t[]){1}, NULL, 4));
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    kn_tensor_print(f, NULL, 3);
    kn_tensor_print(NULL, x, 3);
    fclose(f);
    cr_assert(strstr(text, "cannot print"), "%s", text);
    free(text);
    kn_tensor_free(x);
}

KN_TEST(tensor_errors, views) {
    kn_tensor *x = good(), *o = NULL;
    kn_tensor bad = *x;
    bad.dtype = BAD_DT;
    KN_ASSERT_ERR(kn_tensor_view(NULL, x, 1, (int64_t[]){6}), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_view(&o, NULL, 1, (int64_t[]){6}), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_view(&o, &bad, 1, (int64_t[]){6}), KN_ERR_DTYPE);
    KN_ASSERT_ERR(kn_tensor_view(&o, x, 1, (int64_t[]){7}), KN_ERR_SHAPE);
    cr_assert(strstr(kn_last_error(), "[7]") && strstr(kn_last_error(), "f32[2,3]"), "%s", kn_last_error());
    KN_ASSERT_ERR(kn_tensor_view(&o, x, 9, (int64_t[9]){1}), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_view(&o, x, 1, NULL), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_view(&o, x, 2, (int64_t[]){-2, -3}), KN_ERR_SHAPE);
    KN_ASSERT_ERR(kn_tensor_reshape(&o, x, 2, (int64_t[]){4, -1}), KN_ERR_SHAPE);
    KN_ASSERT_ERR(kn_tensor_reshape(NULL, x, 1, (int64_t[]){6}), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_reshape(&o, NULL, 1, (int64_t[]){6}), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_permute(&o, x, (int[]){0, 0}), KN_ERR_AXIS);
    KN_ASSERT_ERR(kn_tensor_permute(&o, x, (int[]){0, 2}), KN_ERR_AXIS);
    KN_ASSERT_ERR(kn_tensor_permute(&o, x, NULL), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_permute(NULL, x, (int[]){1, 0}), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_transpose(&o, x, 0, 2), KN_ERR_AXIS);
    KN_ASSERT_ERR(kn_tensor_transpose(&o, x, -3, 0), KN_ERR_AXIS);
    KN_ASSERT_ERR(kn_tensor_transpose(&o, NULL, 0, 1), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_slice(&o, x, 0, 0, 1, -2), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_slice(&o, x, 5, 0, 1, 1), KN_ERR_AXIS);
    KN_ASSERT_ERR(kn_tensor_slice(NULL, x, 0, 0, 1, 1), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_squeeze(&o, x, 0), KN_ERR_SHAPE);
    KN_ASSERT_ERR(kn_tensor_squeeze(&o, x, 2), KN_ERR_AXIS);
    KN_ASSERT_ERR(kn_tensor_squeeze(&o, NULL, 0), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_unsqueeze(&o, x, 3), KN_ERR_AXIS);
    KN_ASSERT_ERR(kn_tensor_unsqueeze(&o, x, -4), KN_ERR_AXIS);
    KN_ASSERT_ERR(kn_tensor_unsqueeze(NULL, x, 0), KN_ERR_ARG);
    kn_tensor full8 = *x;
    full8.ndim = KN_MAX_DIMS;
    for (int i = 0; i < KN_MAX_DIMS; i++) full8.shape[i] = 1, full8.strides[i] = 1;
    KN_ASSERT_ERR(kn_tensor_unsqueeze(&o, &full8, 0), KN_ERR_SHAPE);
    KN_ASSERT_ERR(kn_tensor_alias(&o, NULL), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_alias(NULL, x), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_expand(&o, NULL, 2, (int64_t[]){2, 3}), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_expand(NULL, x, 2, (int64_t[]){2, 3}), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_expand(&o, x, 2, NULL), KN_ERR_ARG);
    cr_assert_null(o);
    kn_tensor_free(x);
}

KN_TEST(tensor_errors, copies_and_lab_units) {
    kn_tensor *x = good(), *o = NULL, *y;
    KN_ASSERT_ERR(kn_tensor_contiguous(NULL, x), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_contiguous(&o, NULL), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_clone(&o, NULL), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_clone(NULL, x), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_cast(&o, x, BAD_DT), KN_ERR_DTYPE);
    KN_ASSERT_ERR(kn_tensor_cast(&o, NULL, KN_DT_F32), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_cast(NULL, x, KN_DT_F32), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_to(&o, NULL, KN_CPU), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_to(NULL, x, KN_CPU), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_to(&o, x, (kn_device){KN_DEVICE_CPU, -1}), KN_ERR_ARG);
    KN_ASSERT_OK(kn_tensor_zeros(&y, KN_DT_F64, 2, (int64_t[]){3, 2}));
    KN_ASSERT_ERR(kn_tensor_copy_into(y, x), KN_ERR_SHAPE);
    cr_assert(strstr(kn_last_error(), "[3,2]") && strstr(kn_last_error(), "[2,3]"), "%s", kn_last_error());
    KN_ASSERT_ERR(kn_tensor_copy_into(NULL, x), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_copy_into(y, NULL), KN_ERR_ARG);
    /* kn_index_next: false for nonsense instead of touching memory. */
    int64_t idx[2] = {0, 0};
    cr_assert(!kn_index_next(-1, (int64_t[]){2}, idx));
    cr_assert(!kn_index_next(2, NULL, idx));
    cr_assert(!kn_index_next(2, (int64_t[]){2, 2}, NULL));
    cr_assert(!kn_index_next(0, NULL, NULL));
    cr_assert_null(o);
    kn_tensor_free(y);
    kn_tensor_free(x);
}

KN_TEST(tensor_errors, kernels) {
    kn_tensor *x = good(), *o = NULL, *i64;
    kn_tensor bad = *x;
    bad.ndim = -1;
    KN_ASSERT_OK(kn_tensor_zeros(&i64, KN_DT_I64, 1, (int64_t[]){2}));
    KN_ASSERT_ERR(kn_tensor_unary(NULL, KN_UNARY_EXP, x), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_unary(&o, KN_UNARY_EXP, NULL), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_unary(&o, (kn_unary_op)-1, x), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_unary(&o, KN_UNARY_EXP, &bad), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_binary(NULL, KN_BINARY_ADD, x, x), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_binary(&o, KN_BINARY_ADD, NULL, x), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_binary(&o, KN_BINARY_ADD, x, NULL), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_binary(&o, KN_BINARY_ADD, x, i64), KN_ERR_SHAPE);
    cr_assert(strstr(kn_last_error(), "kn_tensor_binary(add)") && strstr(kn_last_error(), "[2,3]"), "%s", kn_last_error());
    KN_ASSERT_ERR(kn_tensor_binary_scalar(&o, KN_BINARY_COUNT, x, 1), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_binary_scalar(&o, KN_BINARY_ADD, NULL, 1), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_binary_scalar(NULL, KN_BINARY_ADD, x, 1), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_where(&o, NULL, x, x), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_where(NULL, x, x, x), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_where(&o, x, x, x), KN_ERR_DTYPE);
    KN_ASSERT_ERR(kn_tensor_argmax(&o, NULL, 0, false), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_argmax(NULL, x, 0, false), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_argmax(&o, x, 2, false), KN_ERR_AXIS);
    KN_ASSERT_ERR(kn_tensor_matmul(&o, x, NULL), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_matmul(NULL, x, x), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_matmul(&o, i64, i64), KN_ERR_SHAPE);
    KN_ASSERT_ERR(kn_tensor_softmax(&o, x, 2), KN_ERR_AXIS);
    KN_ASSERT_ERR(kn_tensor_softmax(&o, NULL, 0), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_softmax(NULL, x, 0), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_log_softmax(&o, x, -3), KN_ERR_AXIS);
    KN_ASSERT_ERR(kn_tensor_log_softmax(&o, i64, 0), KN_ERR_DTYPE);
    KN_ASSERT_ERR(kn_tensor_embedding(&o, NULL, i64), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_embedding(&o, x, NULL), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_embedding(NULL, x, i64), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_cat(&o, 1, NULL, 0), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_cat(NULL, 1, (const kn_tensor *const[]){x}, 0), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_cat(&o, -1, (const kn_tensor *const[]){x}, 0), KN_ERR_ARG);
    double a, r;
    KN_ASSERT_ERR(kn_tensor_max_diff(NULL, x, &a, &r), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_max_diff(x, x, &a, NULL), KN_ERR_ARG);
    cr_assert_null(o);
    kn_tensor_free(i64);
    kn_tensor_free(x);
}

/* Make the 1st, 2nd, ... allocation inside `call` fail until it succeeds; every failure
 * must be KN_ERR_OOM with a message and must leave *out alone. */
#define OOM_SWEEP(out, call)                                                                          \
    do {                                                                                              \
        bool ok_ = false;                                                                             \
        for (long n_ = 0; n_ < 64 && !ok_; n_++) {                                                    \
            (out) = NULL;                                                                             \
            kn_clear_error();                                                                         \
            kn_alloc_fail_after(n_);                                                                  \
            kn_status st_ = (call);                                                                   \
            kn_alloc_fail_after(-1);                                                                  \
            if (st_ == KN_OK) {                                                                       \
                ok_ = true;                                                                           \
                cr_assert((out), "%s: succeeded without a result", #call);                            \
                kn_tensor_free(out);                                                                  \
            } else {                                                                                  \
                cr_assert_eq(st_, KN_ERR_OOM, "%s with allocation %ld failing: %s: %s", #call, n_,      \
                             kn_status_name(st_), kn_last_error());                                   \
                cr_assert(kn_last_error()[0], "%s: no message", #call);                               \
                cr_assert_null((out), "%s: out was set on failure", #call);                          \
            }                                                                                         \
        }                                                                                             \
        cr_assert(ok_, "%s never succeeded", #call);                                                  \
    } while (0)

KN_TEST(tensor_errors, allocation_failure_sweeps) {
    kn_tensor *a = tt_rand(KN_DT_F32, 3, (int64_t[]){2, 3, 4}, 1, -1, 1), *b = tt_rand(KN_DT_F32, 2, (int64_t[]){3, 1}, 2, -1, 1);
    kn_tensor *h = tt_rand(KN_DT_BF16, 2, (int64_t[]){4, 5}, 3, -1, 1), *at, *idx, *o;
    KN_ASSERT_OK(kn_tensor_transpose(&at, a, 1, 2)); /* [2,4,3] */
    KN_ASSERT_OK(kn_tensor_from_f64(&idx, KN_DT_I64, 1, (int64_t[]){3}, (double[]){0, 3, 1}));
    kn_rng r = kn_rng_new(4);
    const kn_tensor *xs[2] = {a, a};
    kn_tensor *cond;
    KN_ASSERT_OK(kn_tensor_binary_scalar(&cond, KN_BINARY_GT, b, 0.0));
    OOM_SWEEP(o, kn_tensor_empty(&o, KN_DT_F32, 2, (int64_t[]){3, 3}));
    OOM_SWEEP(o, kn_tensor_randn(&o, KN_DT_F16, 2, (int64_t[]){3, 3}, &r));
    OOM_SWEEP(o, kn_tensor_binary(&o, KN_BINARY_ADD, a, b));
    OOM_SWEEP(o, kn_tensor_binary_scalar(&o, KN_BINARY_MUL, at, 2.0));
    OOM_SWEEP(o, kn_tensor_where(&o, cond, a, b));
    OOM_SWEEP(o, kn_tensor_unary(&o, KN_UNARY_TANH, at));
    OOM_SWEEP(o, kn_tensor_matmul(&o, at, a));
    kn_tensor *ht;
    KN_ASSERT_OK(kn_tensor_transpose(&ht, h, 0, 1));
    OOM_SWEEP(o, kn_tensor_matmul(&o, h, ht));
    OOM_SWEEP(o, kn_tensor_reduce(&o, KN_REDUCE_MEAN, at, 1, (int[]){1}, true));
    OOM_SWEEP(o, kn_tensor_argmax(&o, at, 1, false));
    OOM_SWEEP(o, kn_tensor_softmax(&o, at, 1));
    OOM_SWEEP(o, kn_tensor_embedding(&o, h, idx));
    OOM_SWEEP(o, kn_tensor_cat(&o, 2, xs, 1));
    OOM_SWEEP(o, kn_tensor_reshape(&o, at, 1, (int64_t[]){24}));
    OOM_SWEEP(o, kn_tensor_view(&o, a, 1, (int64_t[]){24}));
    OOM_SWEEP(o, kn_tensor_expand(&o, b, 3, (int64_t[]){5, 3, 2}));
    OOM_SWEEP(o, kn_tensor_contiguous(&o, at));
    OOM_SWEEP(o, kn_tensor_cast(&o, at, KN_DT_F16));
    OOM_SWEEP(o, kn_tensor_to(&o, at, KN_CPU));
    kn_tensor_free(a); kn_tensor_free(b); kn_tensor_free(h); kn_tensor_free(at); kn_tensor_free(idx); kn_tensor_free(cond);
    kn_tensor_free(ht);
}
