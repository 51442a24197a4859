/* test_tensor_create.c — creation, lifetime, inspection, printing and copies of tensors. */
#include <math.h>
#include <stdio.h>

#include "tensor_test_util.h"

KN_TEST(tensor_create, empty_zeros_full_scalar) {
    int64_t shape[3] = {2, 3, 4};
    kn_tensor *e, *z, *f, *s;
    KN_ASSERT_OK(kn_tensor_empty(&e, KN_DT_F32, 3, shape));
    tt_assert_shape(e, KN_DT_F32, 3, shape);
    cr_assert_eq(e->strides[0], 12);
    cr_assert_eq(e->strides[1], 4);
    cr_assert_eq(e->strides[2], 1);
    cr_assert_eq(e->offset, 0);
    cr_assert_eq(e->storage->refcount, 1);
    cr_assert_eq(e->storage->nbytes, 24 * sizeof(float));
    cr_assert(e->storage->owns_data);
    cr_assert_eq(e->storage->device.type, KN_DEVICE_CPU);
    cr_assert_eq(kn_tensor_numel(e), 24);
    cr_assert(kn_tensor_is_contiguous(e));
    KN_ASSERT_OK(kn_tensor_zeros(&z, KN_DT_I64, 3, shape));
    KN_ASSERT_OK(kn_tensor_full(&f, KN_DT_BF16, 3, shape, 1.5));
    KN_ASSERT_OK(kn_tensor_scalar(&s, KN_DT_F64, -2.25));
    cr_assert_eq(s->ndim, 0);
    cr_assert_eq(kn_tensor_numel(s), 1);
    for (int64_t i = 0; i < 24; i++) {
        cr_assert_eq(kn_dtype_load(KN_DT_I64, z->storage->data, i), 0.0);
        cr_assert_eq(kn_dtype_load(KN_DT_BF16, f->storage->data, i), 1.5);
    }
    double v;
    KN_ASSERT_OK(kn_tensor_item(s, &v));
    cr_assert_eq(v, -2.25);
    kn_tensor_free(e);
    kn_tensor_free(z);
    kn_tensor_free(f);
    kn_tensor_free(s);
    kn_tensor_free(NULL);
}

KN_TEST(tensor_create, zero_size_and_from_data) {
    int64_t shape[2] = {0, 5};
    kn_tensor *t;
    KN_ASSERT_OK(kn_tensor_empty(&t, KN_DT_F32, 2, shape));
    cr_assert_eq(kn_tensor_numel(t), 0);
    cr_assert(kn_tensor_is_contiguous(t));
    kn_tensor_free(t);
    float data[6] = {1, 2, 3, 4, 5, 6};
    int64_t s2[2] = {2, 3};
    KN_ASSERT_OK(kn_tensor_from_data(&t, KN_DT_F32, 2, s2, data));
    data[0] = 100; /* a copy: the tensor keeps 1 */
    double v;
    KN_ASSERT_OK(kn_tensor_get(t, (int64_t[]){0, 0}, &v));
    cr_assert_eq(v, 1.0);
    KN_ASSERT_OK(kn_tensor_get(t, (int64_t[]){-1, -1}, &v));
    cr_assert_eq(v, 6.0);
    KN_ASSERT_OK(kn_tensor_set(t, (int64_t[]){1, -3}, 42.0));
    KN_ASSERT_OK(kn_tensor_get(t, (int64_t[]){1, 0}, &v));
    cr_assert_eq(v, 42.0);
    double all[6];
    KN_ASSERT_OK(kn_tensor_to_f64(t, all));
    cr_assert_eq(all[3], 42.0);
    cr_assert_eq(all[5], 6.0);
    cr_assert_eq(*(float *)kn_tensor_data(t), 1.0f);
    kn_tensor_free(t);
}

KN_TEST(tensor_create, from_f64_rounds_per_dtype) {
    double src[4] = {1.0 / 3.0, -2.7, 300.0, 1e6};
    int64_t n = 4;
    kn_dtype dts[6] = {KN_DT_F32, KN_DT_F16, KN_DT_BF16, KN_DT_I32, KN_DT_U8, KN_DT_BOOL};
    for (int k = 0; k < 6; k++) {
        kn_tensor *t;
        KN_ASSERT_OK(kn_tensor_from_f64(&t, dts[k], 1, &n, src));
        for (int64_t i = 0; i < n; i++)
            cr_assert_eq(kn_dtype_load(dts[k], t->storage->data, i), tt_round(dts[k], src[i]), "%s element %lld",
                         kn_dtype_name(dts[k]), (long long)i);
        kn_tensor_free(t);
    }
}

KN_TEST(tensor_create, arange) {
    kn_tensor *t;
    KN_ASSERT_OK(kn_tensor_arange(&t, KN_DT_F32, 0, 5, 1));
    cr_assert_eq(kn_tensor_numel(t), 5);
    for (int i = 0; i < 5; i++) cr_assert_eq(kn_dtype_load(KN_DT_F32, t->storage->data, i), (double)i);
    kn_tensor_free(t);
    KN_ASSERT_OK(kn_tensor_arange(&t, KN_DT_I64, 10, 0, -3)); /* 10 7 4 1 */
    cr_assert_eq(kn_tensor_numel(t), 4);
    cr_assert_eq(kn_dtype_load(KN_DT_I64, t->storage->data, 3), 1.0);
    kn_tensor_free(t);
    KN_ASSERT_OK(kn_tensor_arange(&t, KN_DT_F64, 0, 1, 0.25));
    cr_assert_eq(kn_tensor_numel(t), 4);
    kn_tensor_free(t);
    KN_ASSERT_OK(kn_tensor_arange(&t, KN_DT_F64, 3, 3, 1));
    cr_assert_eq(kn_tensor_numel(t), 0);
    kn_tensor_free(t);
    KN_ASSERT_ERR(kn_tensor_arange(&t, KN_DT_F32, 0, 1, 0), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_arange(&t, KN_DT_F32, 0, INFINITY, 1), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_arange(&t, KN_DT_F32, 0, 1e300, 1e-300), KN_ERR_SHAPE);
}

KN_TEST(tensor_create, rand_and_randn_follow_the_rng) {
    int64_t shape[2] = {64, 32};
    kn_rng r1 = kn_rng_new(7), r2 = kn_rng_new(7);
    kn_tensor *u, *g, *h;
    KN_ASSERT_OK(kn_tensor_rand(&u, KN_DT_F32, 2, shape, &r1));
    float ref[2048];
    kn_rng_uniform_f32(&r2, ref, 2048);
    cr_assert_eq(r1.offset, r2.offset);
    double mean = 0;
    for (int i = 0; i < 2048; i++) {
        cr_assert_eq(((float *)u->storage->data)[i], ref[i]);
        cr_assert(ref[i] >= 0 && ref[i] < 1);
        mean += ref[i] / 2048;
    }
    cr_assert(fabs(mean - 0.5) < 0.05, "uniform mean %g", mean);
    KN_ASSERT_OK(kn_tensor_randn(&g, KN_DT_F64, 2, shape, &r1));
    double m = 0, v = 0;
    for (int i = 0; i < 2048; i++) m += ((double *)g->storage->data)[i] / 2048;
    for (int i = 0; i < 2048; i++) v += pow(((double *)g->storage->data)[i] - m, 2) / 2048;
    cr_assert(fabs(m) < 0.1 && fabs(v - 1) < 0.15, "normal mean %g var %g", m, v);
    KN_ASSERT_OK(kn_tensor_randn(&h, KN_DT_BF16, 2, shape, &r1));
    cr_assert_eq(h->dtype, KN_DT_BF16);
    kn_tensor *bad = NULL;
    KN_ASSERT_ERR(kn_tensor_rand(&bad, KN_DT_I32, 2, shape, &r1), KN_ERR_DTYPE);
    KN_ASSERT_ERR(kn_tensor_randn(&bad, KN_DT_F32, 2, shape, NULL), KN_ERR_ARG);
    cr_assert_null(bad);
    kn_tensor_free(u);
    kn_tensor_free(g);
    kn_tensor_free(h);
}

KN_TEST(tensor_create, strings_and_print) {
    char buf[64];
    int64_t shape[3] = {2, 3, 4};
    cr_assert_str_eq(kn_shape_str(3, shape, buf, sizeof buf), "[2,3,4]");
    cr_assert_str_eq(kn_shape_str(0, NULL, buf, sizeof buf), "[]");
    char small[5];
    kn_shape_str(3, shape, small, sizeof small);
    cr_assert_eq(strlen(small), 4, "truncated and terminated");
    kn_tensor *t;
    KN_ASSERT_OK(kn_tensor_arange(&t, KN_DT_F32, 0, 24, 1));
    kn_tensor *v;
    KN_ASSERT_OK(kn_tensor_view(&v, t, 3, shape));
    cr_assert_str_eq(kn_tensor_str(v, buf, sizeof buf), "f32[2,3,4]");
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    kn_tensor_print(f, v, 1); /* elided: 1 item on each side */
    fclose(f);
    cr_assert(strstr(text, "tensor f32[2,3,4]"), "%s", text);
    cr_assert(strstr(text, "[[[0, ..., 3]"), "%s", text);
    cr_assert(strstr(text, "23]]]"), "%s", text);
    free(text);
    kn_tensor_free(v);
    kn_tensor_free(t);
    int ax;
    KN_ASSERT_OK(kn_axis_normalize("f", -1, 3, &ax));
    cr_assert_eq(ax, 2);
    KN_ASSERT_ERR(kn_axis_normalize("my_fn", 3, 3, &ax), KN_ERR_AXIS);
    cr_assert(strstr(kn_last_error(), "my_fn"), "%s", kn_last_error());
    KN_ASSERT_ERR(kn_axis_normalize("my_fn", -4, 3, &ax), KN_ERR_AXIS);
}

KN_TEST(tensor_create, clone_cast_contiguous) {
    int64_t shape[2] = {3, 4};
    kn_tensor *x = tt_rand(KN_DT_F32, 2, shape, 1, -4, 4);
    kn_tensor *c, *xt, *ct, *al;
    KN_ASSERT_OK(kn_tensor_clone(&c, x));
    cr_assert_neq(c->storage, x->storage);
    cr_assert_eq(memcmp(c->storage->data, x->storage->data, 12 * sizeof(float)), 0);
    KN_ASSERT_OK(kn_tensor_contiguous(&al, x)); /* already contiguous: an alias */
    cr_assert_eq(al->storage, x->storage);
    cr_assert_eq(x->storage->refcount, 2);
    KN_ASSERT_OK(kn_tensor_transpose(&xt, x, 0, 1));
    cr_assert(!kn_tensor_is_contiguous(xt));
    KN_ASSERT_OK(kn_tensor_contiguous(&ct, xt));
    cr_assert(kn_tensor_is_contiguous(ct));
    cr_assert_neq(ct->storage, x->storage);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            cr_assert_eq(kn_dtype_load(KN_DT_F32, ct->storage->data, j * 3 + i),
                         kn_dtype_load(KN_DT_F32, x->storage->data, i * 4 + j));
    /* Cast round trips: f32 -> f64 -> f32 exact; f32 -> bf16 -> f32 within bf16 precision;
     * f32 -> i32 truncates toward zero. */
    kn_dtype wide[3] = {KN_DT_F64, KN_DT_BF16, KN_DT_I32};
    for (int k = 0; k < 3; k++) {
        kn_tensor *y, *back;
        KN_ASSERT_OK(kn_tensor_cast(&y, xt, wide[k]));
        cr_assert_eq(y->dtype, wide[k]);
        KN_ASSERT_OK(kn_tensor_cast(&back, y, KN_DT_F32));
        double *a = tt_values(xt), *b = tt_values(back);
        for (int i = 0; i < 12; i++) {
            if (wide[k] == KN_DT_F64) cr_assert_eq(a[i], b[i]);
            else if (wide[k] == KN_DT_BF16) KN_ASSERT_CLOSE(b[i], a[i], 0, 4e-3);
            else cr_assert_eq(b[i], trunc(a[i]), "%g -> %g", a[i], b[i]);
        }
        free(a);
        free(b);
        kn_tensor_free(y);
        kn_tensor_free(back);
    }
    kn_tensor_free(c);
    kn_tensor_free(al);
    kn_tensor_free(ct);
    kn_tensor_free(xt);
    kn_tensor_free(x);
}

KN_TEST(tensor_create, to_same_device_is_an_alias) {
    kn_tensor *x, *y;
    KN_ASSERT_OK(kn_tensor_zeros(&x, KN_DT_F32, 1, (int64_t[]){4}));
    KN_ASSERT_OK(kn_tensor_to(&y, x, KN_CPU));
    cr_assert_eq(y->storage, x->storage);
    cr_assert_eq(x->storage->refcount, 2);
    kn_tensor_free(x); /* the storage lives on through y */
    cr_assert_eq(y->storage->refcount, 1);
    cr_assert_eq(((float *)y->storage->data)[3], 0.0f);
    kn_tensor_free(y);
}
