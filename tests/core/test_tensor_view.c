/* test_tensor_view.c — views share storage and refcounts; reshape, permute, transpose,
 * slicing (negative indices, steps), squeeze/unsqueeze, expand and broadcasting. */
#include "tensor_test_util.h"

/* x is arange(0, n) viewed as shape: element value == its row-major position. */
static kn_tensor *iota(int ndim, const int64_t *shape) {
    kn_tensor *a, *v;
    KN_ASSERT_OK(kn_tensor_arange(&a, KN_DT_F64, 0, (double)tt_numel(ndim, shape), 1));
    KN_ASSERT_OK(kn_tensor_view(&v, a, ndim, shape));
    kn_tensor_free(a);
    return v;
}

KN_TEST(tensor_view, views_share_storage_and_refcount) {
    int64_t shape[2] = {4, 6};
    kn_tensor *x = iota(2, shape);
    cr_assert_eq(x->storage->refcount, 1);
    kn_tensor *v, *p, *s;
    KN_ASSERT_OK(kn_tensor_view(&v, x, 3, (int64_t[]){2, 2, 6}));
    KN_ASSERT_OK(kn_tensor_transpose(&p, x, 0, 1));
    KN_ASSERT_OK(kn_tensor_slice(&s, p, 0, 1, 5, 2));
    cr_assert_eq(x->storage->refcount, 4);
    cr_assert(v->storage == x->storage && p->storage == x->storage && s->storage == x->storage);
    /* A write through the slice of the transpose is seen by x: s[0][3] = p[1][3] = x[3][1]. */
    KN_ASSERT_OK(kn_tensor_set(s, (int64_t[]){0, 3}, -1.0));
    double val;
    KN_ASSERT_OK(kn_tensor_get(x, (int64_t[]){3, 1}, &val));
    cr_assert_eq(val, -1.0);
    kn_tensor_free(x);
    kn_tensor_free(v);
    cr_assert_eq(s->storage->refcount, 2);
    kn_tensor_free(p);
    KN_ASSERT_OK(kn_tensor_get(s, (int64_t[]){1, 0}, &val)); /* p[3][0] = x[0][3] = 3 */
    cr_assert_eq(val, 3.0);
    kn_tensor_free(s);
}

KN_TEST(tensor_view, view_needs_compatible_strides) {
    int64_t shape[3] = {2, 3, 4};
    kn_tensor *x = iota(3, shape), *v, *t, *r;
    KN_ASSERT_OK(kn_tensor_view(&v, x, 2, (int64_t[]){-1, 4}));
    cr_assert_eq(v->shape[0], 6);
    kn_tensor_free(v);
    KN_ASSERT_ERR(kn_tensor_view(&v, x, 2, (int64_t[]){-1, -1}), KN_ERR_SHAPE);
    KN_ASSERT_ERR(kn_tensor_view(&v, x, 2, (int64_t[]){5, 5}), KN_ERR_SHAPE);
    KN_ASSERT_ERR(kn_tensor_view(&v, x, 2, (int64_t[]){-1, 5}), KN_ERR_SHAPE);
    /* A transpose of the first two axes: [3,2,4] with strides [4,12,1]. Splitting the
     * last axis is still a view; merging the first two is not. */
    KN_ASSERT_OK(kn_tensor_transpose(&t, x, 0, 1));
    KN_ASSERT_OK(kn_tensor_view(&v, t, 4, (int64_t[]){3, 2, 2, 2}));
    cr_assert_eq(v->strides[2], 2);
    kn_tensor_free(v);
    KN_ASSERT_ERR(kn_tensor_view(&v, t, 2, (int64_t[]){6, 4}), KN_ERR_SHAPE);
    KN_ASSERT_OK(kn_tensor_view(&v, t, 4, (int64_t[]){3, 1, 2, 4}));
    cr_assert_eq(v->storage, x->storage);
    kn_tensor_free(v);
    /* reshape copies when a view is impossible, and the values follow t's order. */
    KN_ASSERT_OK(kn_tensor_reshape(&r, t, 2, (int64_t[]){6, 4}));
    cr_assert_neq(r->storage, x->storage);
    double val;
    KN_ASSERT_OK(kn_tensor_get(r, (int64_t[]){1, 2}, &val)); /* t[0][1][2] = x[1][0][2] = 14 */
    cr_assert_eq(val, 14.0);
    kn_tensor_free(r);
    KN_ASSERT_OK(kn_tensor_reshape(&r, x, 1, (int64_t[]){24}));
    cr_assert_eq(r->storage, x->storage);
    kn_tensor_free(r);
    kn_tensor_free(t);
    kn_tensor_free(x);
}

KN_TEST(tensor_view, non_contiguous_views_of_views) {
    int64_t shape[3] = {4, 5, 6};
    kn_tensor *x = iota(3, shape), *a, *b, *c, *d, *e;
    int perm[3] = {2, 0, -2};
    KN_ASSERT_OK(kn_tensor_permute(&a, x, perm));            /* [6,4,5] */
    KN_ASSERT_OK(kn_tensor_slice(&b, a, 0, -5, 100, 2));     /* rows 1,3,5 of axis 0 */
    KN_ASSERT_OK(kn_tensor_slice(&c, b, -1, 1, 100, 3));     /* axis 2: 1, 4 */
    KN_ASSERT_OK(kn_tensor_unsqueeze(&d, c, 1));             /* [3,1,4,2] */
    KN_ASSERT_OK(kn_tensor_squeeze(&e, d, -3));              /* [3,4,2] */
    int64_t want[3] = {3, 4, 2};
    tt_assert_shape(e, KN_DT_F64, 3, want);
    for (int64_t i = 0; i < 3; i++)
        for (int64_t j = 0; j < 4; j++)
            for (int64_t k = 0; k < 2; k++) {
                double val;
                KN_ASSERT_OK(kn_tensor_get(e, (int64_t[]){i, j, k}, &val));
                /* e[i][j][k] = a[1+2i][j][1+3k] = x[j][1+3k][1+2i] */
                cr_assert_eq(val, (double)(j * 30 + (1 + 3 * k) * 6 + (1 + 2 * i)));
            }
    kn_tensor *cc;
    KN_ASSERT_OK(kn_tensor_contiguous(&cc, e));
    double *ve = tt_values(e), *vc = tt_values(cc);
    for (int i = 0; i < 24; i++) cr_assert_eq(ve[i], vc[i]);
    free(ve);
    free(vc);
    kn_tensor_free(cc);
    kn_tensor_free(a); kn_tensor_free(b); kn_tensor_free(c); kn_tensor_free(d); kn_tensor_free(e);
    kn_tensor_free(x);
}

KN_TEST(tensor_view, slice_clamps_like_python) {
    int64_t n = 10;
    kn_tensor *x = iota(1, &n), *s;
    struct { int64_t start, stop, step, len, first; } cases[] = {
        {0, 10, 1, 10, 0}, {-3, 10, 1, 3, 7}, {2, -2, 3, 2, 2}, {-100, 100, 4, 3, 0},
        {5, 5, 1, 0, 0},   {8, 2, 1, 0, 0},   {9, 10, 5, 1, 9},  {12, 20, 1, 0, 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        KN_ASSERT_OK(kn_tensor_slice(&s, x, 0, cases[k].start, cases[k].stop, cases[k].step));
        cr_assert_eq(s->shape[0], cases[k].len, "case %zu: len %lld", k, (long long)s->shape[0]);
        if (cases[k].len > 0) {
            double v;
            KN_ASSERT_OK(kn_tensor_get(s, (int64_t[]){0}, &v));
            cr_assert_eq(v, (double)cases[k].first, "case %zu", k);
        }
        kn_tensor_free(s);
    }
    s = NULL;
    KN_ASSERT_ERR(kn_tensor_slice(&s, x, 0, 0, 10, 0), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_slice(&s, x, 0, 10, 0, -1), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_tensor_slice(&s, x, 1, 0, 10, 1), KN_ERR_AXIS);
    cr_assert_null(s);
    kn_tensor_free(x);
}

KN_TEST(tensor_view, squeeze_unsqueeze_alias) {
    int64_t shape[2] = {3, 1};
    kn_tensor *x = iota(2, shape), *s, *u, *a;
    KN_ASSERT_ERR(kn_tensor_squeeze(&s, x, 0), KN_ERR_SHAPE);
    KN_ASSERT_OK(kn_tensor_squeeze(&s, x, 1));
    cr_assert_eq(s->ndim, 1);
    KN_ASSERT_OK(kn_tensor_unsqueeze(&u, s, -1)); /* append: [3,1] */
    cr_assert_eq(u->ndim, 2);
    cr_assert_eq(u->shape[1], 1);
    cr_assert(kn_tensor_is_contiguous(u));
    kn_tensor_free(u);
    KN_ASSERT_OK(kn_tensor_unsqueeze(&u, s, 0));
    cr_assert_eq(u->shape[0], 1);
    cr_assert_eq(u->shape[1], 3);
    KN_ASSERT_ERR(kn_tensor_unsqueeze(&a, s, 2), KN_ERR_AXIS);
    KN_ASSERT_OK(kn_tensor_alias(&a, u));
    cr_assert_eq(a->storage, x->storage);
    cr_assert_eq(x->storage->refcount, 4);
    cr_assert_eq(memcmp(a->shape, u->shape, sizeof a->shape), 0);
    kn_tensor_free(a); kn_tensor_free(u); kn_tensor_free(s); kn_tensor_free(x);
}

KN_TEST(tensor_view, broadcast_shapes) {
    struct { int na; int64_t a[4]; int nb; int64_t b[4]; int nout; int64_t out[4]; } ok[] = {
        {4, {8, 1, 6, 1}, 3, {7, 1, 5}, 4, {8, 7, 6, 5}},
        {1, {3}, 0, {0}, 1, {3}},
        {2, {0, 1}, 1, {4}, 2, {0, 4}},
        {2, {1, 1}, 2, {1, 1}, 2, {1, 1}},
        {3, {2, 1, 3}, 2, {4, 1}, 3, {2, 4, 3}},
    };
    for (size_t k = 0; k < sizeof ok / sizeof ok[0]; k++) {
        int n = -1;
        int64_t out[KN_MAX_DIMS];
        KN_ASSERT_OK(kn_shape_broadcast(ok[k].na, ok[k].a, ok[k].nb, ok[k].b, &n, out));
        cr_assert_eq(n, ok[k].nout, "case %zu", k);
        for (int i = 0; i < n; i++) cr_assert_eq(out[i], ok[k].out[i], "case %zu axis %d", k, i);
        /* symmetric */
        KN_ASSERT_OK(kn_shape_broadcast(ok[k].nb, ok[k].b, ok[k].na, ok[k].a, &n, out));
        for (int i = 0; i < n; i++) cr_assert_eq(out[i], ok[k].out[i], "case %zu swapped, axis %d", k, i);
    }
    int n;
    int64_t out[KN_MAX_DIMS];
    KN_ASSERT_ERR(kn_shape_broadcast(1, (int64_t[]){3}, 1, (int64_t[]){4}, &n, out), KN_ERR_SHAPE);
    cr_assert(strstr(kn_last_error(), "[3]") && strstr(kn_last_error(), "[4]"), "%s", kn_last_error());
    KN_ASSERT_ERR(kn_shape_broadcast(2, (int64_t[]){0, 3}, 1, (int64_t[]){2}, &n, out), KN_ERR_SHAPE);
    KN_ASSERT_ERR(kn_shape_broadcast(1, (int64_t[]){-1}, 1, (int64_t[]){2}, &n, out), KN_ERR_SHAPE);
    KN_ASSERT_ERR(kn_shape_broadcast(9, out, 1, (int64_t[]){2}, &n, out), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_shape_broadcast(1, (int64_t[]){2}, 1, (int64_t[]){2}, NULL, out), KN_ERR_ARG);
}

KN_TEST(tensor_view, expand_repeats_with_stride_zero) {
    kn_tensor *x = iota(2, (int64_t[]){3, 1}), *e;
    KN_ASSERT_OK(kn_tensor_expand(&e, x, 3, (int64_t[]){2, 3, 4}));
    cr_assert_eq(e->storage, x->storage);
    cr_assert_eq(e->strides[0], 0);
    cr_assert_eq(e->strides[2], 0);
    cr_assert_eq(e->strides[1], 1);
    double v;
    KN_ASSERT_OK(kn_tensor_get(e, (int64_t[]){1, 2, 3}, &v));
    cr_assert_eq(v, 2.0);
    kn_tensor *c;
    KN_ASSERT_OK(kn_tensor_contiguous(&c, e));
    cr_assert_eq(kn_tensor_numel(c), 24);
    kn_tensor_free(c);
    kn_tensor_free(e);
    KN_ASSERT_OK(kn_tensor_expand(&e, x, 2, (int64_t[]){3, 2}));
    kn_tensor_free(e);
    KN_ASSERT_ERR(kn_tensor_expand(&e, x, 2, (int64_t[]){4, 2}), KN_ERR_SHAPE);
    KN_ASSERT_ERR(kn_tensor_expand(&e, x, 1, (int64_t[]){3}), KN_ERR_SHAPE);
    KN_ASSERT_ERR(kn_tensor_expand(&e, x, 2, (int64_t[]){3, -1}), KN_ERR_SHAPE);
    KN_ASSERT_ERR(kn_tensor_expand(&e, x, KN_MAX_DIMS + 1, (int64_t[9]){0}), KN_ERR_ARG);
    kn_tensor_free(x);
}
