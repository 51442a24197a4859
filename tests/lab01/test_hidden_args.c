/* test_hidden_args.c — lab 01 hidden tests: every argument check of the five units, at
 * its edges (ndim -1 and KN_MAX_DIMS + 1 rejected, KN_MAX_DIMS and 0 accepted; NULL
 * pointers where they matter and not where they do not; a negative size first or last),
 * with the exact status the contract names; outputs written only on success and only as
 * far as their length; and the value cases the random tests meet too rarely (a 1-element
 * or 0-element reduction, a strided destination, 8-d views). Written from the survivors of
 * `make mutants LAB=01`. */
#include <string.h>

#include "../../labs/lab01-tensors/tests/check.h"
#include "hidden_ref.h"

#define ERR(expr, code) KN_ASSERT_ERR(expr, code)

static kn_tensor *full(kn_dtype dt, int nd, const int64_t *s, double v) {
    kn_tensor *t = NULL;
    KN_ASSERT_OK(kn_tensor_full(&t, dt, nd, s, v));
    return t;
}

static double at(const kn_tensor *t, int64_t i0, int64_t i1) {
    int64_t idx[2] = {i0, i1};
    double v = 0;
    KN_ASSERT_OK(kn_tensor_get(t, idx, &v));
    return v;
}

KN_TEST(lab01_hidden_args, broadcast_arguments) {
    int64_t a[KN_MAX_DIMS + 2] = {2, 1, 3, 1, 1, 1, 1, 4, -7}, b[KN_MAX_DIMS + 2] = {1, 5, 3, 1, 1, 1, 1, 1, -7};
    int64_t out[KN_MAX_DIMS + 2];
    int n = 99;
    for (int i = 0; i < KN_MAX_DIMS + 2; i++) out[i] = 77;
    KN_ASSERT_OK(kn_shape_broadcast(KN_MAX_DIMS, a, KN_MAX_DIMS, b, &n, out)); /* size -7 lies past the ends */
    cr_assert(n == KN_MAX_DIMS && out[0] == 2 && out[1] == 5 && out[2] == 3 && out[7] == 4);
    kn_out("out past its end", out + KN_MAX_DIMS, 2 * sizeof *out); /* the wrapper passes out[0..KN_MAX_DIMS) */
    cr_assert(out[KN_MAX_DIMS] == 77 && out[KN_MAX_DIMS + 1] == 77, "wrote past out[nout - 1]");
    for (int i = 0; i < KN_MAX_DIMS + 2; i++) out[i] = 77;
    KN_ASSERT_OK(kn_shape_broadcast(2, a, 1, b, &n, out));
    cr_assert(n == 2 && out[0] == 2 && out[1] == 1 && out[2] == 77, "[2,1] with [1]: n %d [%lld,%lld] then %lld", n,
              (long long)out[0], (long long)out[1], (long long)out[2]);
    KN_ASSERT_OK(kn_shape_broadcast(0, NULL, 0, NULL, &n, out)); /* two scalars: no arrays needed */
    cr_assert(n == 0);
    KN_ASSERT_OK(kn_shape_broadcast(0, NULL, 1, b, &n, out));
    cr_assert(n == 1 && out[0] == 1);
    KN_ASSERT_OK(kn_shape_broadcast(1, a, 0, NULL, &n, out));
    cr_assert(n == 1 && out[0] == 2);
    n = 99;
    ERR(kn_shape_broadcast(-1, a, 1, b, &n, out), KN_ERR_ARG);
    ERR(kn_shape_broadcast(1, a, -1, b, &n, out), KN_ERR_ARG);
    ERR(kn_shape_broadcast(KN_MAX_DIMS + 1, a, 1, b, &n, out), KN_ERR_ARG);
    ERR(kn_shape_broadcast(1, a, KN_MAX_DIMS + 1, b, &n, out), KN_ERR_ARG);
    ERR(kn_shape_broadcast(1, NULL, 1, b, &n, out), KN_ERR_ARG);
    ERR(kn_shape_broadcast(1, a, 1, NULL, &n, out), KN_ERR_ARG);
    ERR(kn_shape_broadcast(1, a, 1, b, NULL, out), KN_ERR_ARG);
    ERR(kn_shape_broadcast(1, a, 1, b, &n, NULL), KN_ERR_ARG);
    int64_t neg_first[] = {-1, 2}, neg_last[] = {2, -1};
    ERR(kn_shape_broadcast(2, neg_first, 1, b, &n, out), KN_ERR_SHAPE);
    ERR(kn_shape_broadcast(2, neg_last, 1, b, &n, out), KN_ERR_SHAPE);
    ERR(kn_shape_broadcast(1, b, 2, neg_first, &n, out), KN_ERR_SHAPE);
    ERR(kn_shape_broadcast(1, b, 2, neg_last, &n, out), KN_ERR_SHAPE);
    KN_ASSERT_OK(kn_shape_broadcast(1, neg_last, 1, neg_last, &n, out)); /* the -1 is past na */
    cr_assert(n == 1 && out[0] == 2);
    cr_assert(n == 1, "outputs written on failure");
}

KN_TEST(lab01_hidden_args, expand_arguments) {
    int64_t s2[] = {2, 3}, tgt[KN_MAX_DIMS + 1] = {2, 1, 1, 1, 1, 1, 2, 3, 5}; /* tgt[8]: past the end */
    kn_tensor *x = full(KN_DT_F32, 2, s2, 1.5), *o = NULL;
    ERR(kn_tensor_expand(NULL, x, 2, s2), KN_ERR_ARG);
    ERR(kn_tensor_expand(&o, NULL, 2, s2), KN_ERR_ARG);
    ERR(kn_tensor_expand(&o, x, -1, s2), KN_ERR_ARG);
    ERR(kn_tensor_expand(&o, x, KN_MAX_DIMS + 1, tgt), KN_ERR_ARG);
    ERR(kn_tensor_expand(&o, x, 2, NULL), KN_ERR_ARG);
    ERR(kn_tensor_expand(&o, x, 1, NULL), KN_ERR_ARG);
    /* a negative target size where x has size 1 or no axis at all: only the size check sees it */
    int64_t s13[] = {1, 3}, s21[] = {2, 1}, s3[] = {3}, n13[] = {-1, 3}, n21[] = {2, -3}, n3[] = {-2, 3};
    kn_tensor *x13 = full(KN_DT_F32, 2, s13, 1.0), *x21 = full(KN_DT_F32, 2, s21, 1.0), *x3 = full(KN_DT_F32, 1, s3, 1.0);
    ERR(kn_tensor_expand(&o, x13, 2, n13), KN_ERR_SHAPE);
    ERR(kn_tensor_expand(&o, x21, 2, n21), KN_ERR_SHAPE);
    ERR(kn_tensor_expand(&o, x3, 2, n3), KN_ERR_SHAPE);
    kn_tensor_free(x13);
    kn_tensor_free(x21);
    kn_tensor_free(x3);
    /* an 8-d x is valid */
    int64_t s8[KN_MAX_DIMS] = {1, 2, 1, 1, 1, 1, 1, 2};
    kn_tensor *x8 = full(KN_DT_F32, KN_MAX_DIMS, s8, 1.0);
    KN_ASSERT_OK(kn_tensor_expand(&o, x8, KN_MAX_DIMS, s8));
    kn_tensor_free(o);
    o = NULL;
    kn_tensor_free(x8);
    int64_t neg_first[] = {-1, 3}, neg_last[] = {2, -3};
    ERR(kn_tensor_expand(&o, x, 2, neg_first), KN_ERR_SHAPE);
    ERR(kn_tensor_expand(&o, x, 2, neg_last), KN_ERR_SHAPE);
    int keep = x->ndim;
    x->ndim = KN_MAX_DIMS + 1;
    ERR(kn_tensor_expand(&o, x, 2, s2), KN_ERR_ARG);
    x->ndim = -1;
    ERR(kn_tensor_expand(&o, x, 2, s2), KN_ERR_ARG);
    x->ndim = keep;
    cr_assert(o == NULL, "an output written on failure");
    /* 8-d: new leading axes get stride 0, the old ones keep theirs; nothing past ndim read */
    KN_ASSERT_OK(kn_tensor_expand(&o, x, KN_MAX_DIMS, tgt));
    cr_assert(o->ndim == KN_MAX_DIMS && o->offset == x->offset);
    for (int i = 0; i < KN_MAX_DIMS; i++) {
        cr_assert(o->shape[i] == tgt[i], "shape[%d] %lld", i, (long long)o->shape[i]);
        int64_t want = i < KN_MAX_DIMS - 2 ? 0 : x->strides[i - (KN_MAX_DIMS - 2)];
        cr_assert(o->strides[i] == want, "strides[%d] %lld, expected %lld", i, (long long)o->strides[i], (long long)want);
    }
    kn_tensor_free(o);
    o = NULL;
    /* a 0-d x to 0-d: shape may be NULL */
    kn_tensor *s = full(KN_DT_F64, 0, NULL, 4.0);
    KN_ASSERT_OK(kn_tensor_expand(&o, s, 0, NULL));
    cr_assert(o->ndim == 0);
    kn_tensor_free(o);
    kn_tensor_free(s);
    kn_tensor_free(x);
}

KN_TEST(lab01_hidden_args, index_next_arguments) {
    int64_t shape[KN_MAX_DIMS] = {2, 2}, idx[KN_MAX_DIMS] = {0};
    kn_clear_error();
    cr_assert(!kn_index_next(0, NULL, NULL), "0-d: one index only, and NULL arrays are fine");
    cr_assert(kn_last_error()[0] == '\0', "0-d is not an error: %s", kn_last_error());
    kn_clear_error();
    cr_assert(!kn_index_next(-1, shape, idx));
    cr_assert(strstr(kn_last_error(), "kn_index_next"), "ndim -1: message \"%s\"", kn_last_error());
    kn_clear_error();
    cr_assert(!kn_index_next(KN_MAX_DIMS + 1, shape, idx));
    cr_assert(strstr(kn_last_error(), "kn_index_next"), "ndim 9: message \"%s\"", kn_last_error());
    kn_clear_error();
    cr_assert(!kn_index_next(2, NULL, idx) && strstr(kn_last_error(), "kn_index_next"));
    kn_clear_error();
    cr_assert(!kn_index_next(2, shape, NULL) && strstr(kn_last_error(), "kn_index_next"));
    kn_clear_error();
    cr_assert(!kn_index_next(1, NULL, idx) && strstr(kn_last_error(), "kn_index_next"));
    kn_clear_error();
    cr_assert(!kn_index_next(1, shape, NULL) && strstr(kn_last_error(), "kn_index_next"));
    int64_t s8[KN_MAX_DIMS] = {1, 1, 1, 1, 1, 1, 1, 2}, i8[KN_MAX_DIMS] = {0};
    cr_assert(kn_index_next(KN_MAX_DIMS, s8, i8) && i8[7] == 1, "8-d is valid");
    cr_assert(!kn_index_next(KN_MAX_DIMS, s8, i8) && i8[7] == 0);
}

KN_TEST(lab01_hidden_args, copy_into_arguments_and_layouts) {
    int64_t s34[] = {3, 4}, s43[] = {4, 3};
    kn_tensor *src = NULL, *d = full(KN_DT_F32, 2, s34, 0.0), *big = full(KN_DT_F32, 2, s43, -1.0), *dt = NULL;
    KN_ASSERT_OK(kn_tensor_arange(&src, KN_DT_F32, 0, 12, 1));
    kn_tensor *s2 = NULL;
    KN_ASSERT_OK(kn_tensor_reshape(&s2, src, 2, s34));
    ERR(kn_tensor_copy_into(NULL, s2), KN_ERR_ARG);
    ERR(kn_tensor_copy_into(d, NULL), KN_ERR_ARG);
    kn_tensor fake = *d;
    fake.storage = NULL;
    ERR(kn_tensor_copy_into(&fake, s2), KN_ERR_ARG);
    ERR(kn_tensor_copy_into(d, &fake), KN_ERR_ARG);
    fake = *d;
    fake.ndim = KN_MAX_DIMS + 1;
    ERR(kn_tensor_copy_into(&fake, s2), KN_ERR_ARG);
    fake.ndim = -1;
    ERR(kn_tensor_copy_into(d, &fake), KN_ERR_ARG);
    fake = *d;
    fake.dtype = (kn_dtype)99;
    ERR(kn_tensor_copy_into(&fake, s2), KN_ERR_ARG);
    kn_device_type keep = d->storage->device.type;
    d->storage->device.type = KN_DEVICE_CUDA; /* only looked at, never used */
    ERR(kn_tensor_copy_into(d, s2), KN_ERR_DEVICE);
    d->storage->device.type = keep;
    s2->storage->device.type = KN_DEVICE_CUDA;
    ERR(kn_tensor_copy_into(d, s2), KN_ERR_DEVICE);
    s2->storage->device.type = keep;
    /* contiguous to contiguous: the values move, the source stays */
    KN_ASSERT_OK(kn_tensor_copy_into(d, s2));
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) {
            KN_ASSERT_CLOSE(at(d, i, j), 4 * i + j, 0, 0);
            KN_ASSERT_CLOSE(at(s2, i, j), 4 * i + j, 0, 0);
        }
    /* a destination strided along its last axis (a transpose), f32 to f32 */
    KN_ASSERT_OK(kn_tensor_transpose(&dt, big, 0, 1));
    cr_assert(dt->strides[1] != 1);
    KN_ASSERT_OK(kn_tensor_copy_into(dt, s2));
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) KN_ASSERT_CLOSE(at(big, j, i), 4 * i + j, 0, 0);
    kn_tensor_free(dt);
    /* 8-d tensors are valid */
    int64_t s8[KN_MAX_DIMS] = {1, 2, 1, 1, 1, 1, 1, 3};
    kn_tensor *a8 = full(KN_DT_F64, KN_MAX_DIMS, s8, 2.5), *b8 = full(KN_DT_F32, KN_MAX_DIMS, s8, 0.0);
    KN_ASSERT_OK(kn_tensor_copy_into(b8, a8));
    KN_ASSERT_CLOSE(((float *)kn_tensor_data(b8))[5], 2.5, 0, 0);
    kn_tensor_free(a8);
    kn_tensor_free(b8);
    kn_tensor_free(s2);
    kn_tensor_free(src);
    kn_tensor_free(d);
    kn_tensor_free(big);
}

KN_TEST(lab01_hidden_args, reduce_arguments_and_edges) {
    int64_t s23[] = {2, 3}, s03[] = {0, 3}, s00[] = {0, 0}, s1[] = {1};
    kn_tensor *x = full(KN_DT_F32, 2, s23, 2.0), *o = NULL;
    int ax1[] = {1}, ax0[] = {0};
    ERR(kn_tensor_reduce(NULL, KN_REDUCE_SUM, x, 1, ax1, false), KN_ERR_ARG);
    ERR(kn_tensor_reduce(&o, KN_REDUCE_SUM, NULL, 1, ax1, false), KN_ERR_ARG);
    kn_tensor fake = *x;
    fake.storage = NULL;
    ERR(kn_tensor_reduce(&o, KN_REDUCE_SUM, &fake, 1, ax1, false), KN_ERR_ARG);
    fake = *x;
    fake.ndim = KN_MAX_DIMS + 1;
    ERR(kn_tensor_reduce(&o, KN_REDUCE_SUM, &fake, 1, ax1, false), KN_ERR_ARG);
    ERR(kn_tensor_reduce(&o, KN_REDUCE_SUM, &fake, 0, NULL, false), KN_ERR_ARG);
    fake.ndim = -1;
    ERR(kn_tensor_reduce(&o, KN_REDUCE_SUM, &fake, 0, NULL, false), KN_ERR_ARG);
    fake = *x;
    fake.dtype = (kn_dtype)99;
    ERR(kn_tensor_reduce(&o, KN_REDUCE_SUM, &fake, 1, ax1, false), KN_ERR_ARG);
    kn_device_type keep = x->storage->device.type;
    x->storage->device.type = KN_DEVICE_CUDA;
    ERR(kn_tensor_reduce(&o, KN_REDUCE_SUM, x, 1, ax1, false), KN_ERR_DEVICE);
    x->storage->device.type = keep;
    ERR(kn_tensor_reduce(&o, (kn_reduce_op)-1, x, 1, ax1, false), KN_ERR_ARG);
    ERR(kn_tensor_reduce(&o, KN_REDUCE_COUNT, x, 1, ax1, false), KN_ERR_ARG);
    ERR(kn_tensor_reduce(&o, KN_REDUCE_SUM, x, -1, ax1, false), KN_ERR_ARG);
    int ax3[] = {0, 1, 0};
    ERR(kn_tensor_reduce(&o, KN_REDUCE_SUM, x, 3, ax3, false), KN_ERR_ARG);
    ERR(kn_tensor_reduce(&o, KN_REDUCE_SUM, x, 1, NULL, false), KN_ERR_ARG);
    cr_assert(o == NULL, "an output written on failure");
    /* exact output shapes */
    KN_ASSERT_OK(kn_tensor_reduce(&o, KN_REDUCE_SUM, x, 1, ax1, false));
    cr_assert(o->ndim == 1 && o->shape[0] == 2, "sum over axis 1 of [2,3]: ndim %d", o->ndim);
    KN_ASSERT_CLOSE(((float *)kn_tensor_data(o))[1], 6.0, 0, 0);
    kn_tensor_free(o);
    int both[] = {0, 1};
    KN_ASSERT_OK(kn_tensor_reduce(&o, KN_REDUCE_MAX, x, 2, both, true));
    cr_assert(o->ndim == 2 && o->shape[0] == 1 && o->shape[1] == 1, "keepdim over both: ndim %d", o->ndim);
    kn_tensor_free(o);
    /* an 8-d x is valid */
    int64_t s8[KN_MAX_DIMS] = {1, 2, 1, 1, 1, 1, 1, 3};
    kn_tensor *x8 = full(KN_DT_F32, KN_MAX_DIMS, s8, 1.0);
    KN_ASSERT_OK(kn_tensor_reduce(&o, KN_REDUCE_SUM, x8, 0, NULL, false));
    KN_ASSERT_CLOSE(((float *)kn_tensor_data(o))[0], 6.0, 0, 0);
    kn_tensor_free(o);
    kn_tensor_free(x8);
    /* one element: the accumulator sees it */
    kn_tensor *one = full(KN_DT_F64, 1, s1, -3.0), *zd = full(KN_DT_F64, 0, NULL, 7.0);
    KN_ASSERT_OK(kn_tensor_reduce(&o, KN_REDUCE_MAX, one, 0, NULL, false));
    cr_assert(o->ndim == 0);
    KN_ASSERT_CLOSE(((double *)kn_tensor_data(o))[0], -3.0, 0, 0);
    kn_tensor_free(o);
    KN_ASSERT_OK(kn_tensor_reduce(&o, KN_REDUCE_SUM, zd, 0, NULL, false));
    KN_ASSERT_CLOSE(((double *)kn_tensor_data(o))[0], 7.0, 0, 0);
    kn_tensor_free(o);
    /* no elements: [0,3] summed over axis 0 is [3] zeros; max over an empty reduction of
     * an empty output is fine (nothing to be undefined) */
    kn_tensor *e = full(KN_DT_F32, 2, s03, 0.0), *ee = full(KN_DT_F32, 2, s00, 0.0);
    KN_ASSERT_OK(kn_tensor_reduce(&o, KN_REDUCE_SUM, e, 1, ax0, false));
    cr_assert(o->ndim == 1 && o->shape[0] == 3);
    for (int i = 0; i < 3; i++) KN_ASSERT_CLOSE(((float *)kn_tensor_data(o))[i], 0.0, 0, 0);
    kn_tensor_free(o);
    KN_ASSERT_OK(kn_tensor_reduce(&o, KN_REDUCE_MAX, ee, 1, ax1, false));
    cr_assert(o->ndim == 1 && o->shape[0] == 0);
    kn_tensor_free(o);
    ERR(kn_tensor_reduce(&o, KN_REDUCE_MAX, e, 1, ax0, false), KN_ERR_SHAPE);
    /* out of memory anywhere: KN_ERR_OOM, nothing leaked into *out */
    int oom = 0;
    for (long k = 0; k < 8; k++) {
        o = NULL;
        if (!kn_out_checking()) kn_alloc_fail_after(k); /* the checker only reads your run's results */
        kn_status st = kn_tensor_reduce(&o, KN_REDUCE_SUM, x, 1, ax1, false);
        kn_alloc_fail_after(-1);
        if (st == KN_OK) { kn_tensor_free(o); continue; }
        cr_assert(st == KN_ERR_OOM && o == NULL, "allocation %ld failing: %s", k, kn_status_name(st));
        oom++;
    }
    cr_assert(oom >= 2, "the sweep reached %d allocations", oom);
    kn_tensor_free(e);
    kn_tensor_free(ee);
    kn_tensor_free(one);
    kn_tensor_free(zd);
    kn_tensor_free(x);
}
