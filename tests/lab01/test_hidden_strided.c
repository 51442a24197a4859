/* test_hidden_strided.c — hidden tests of lab 01's strided units: kn_index_next and
 * kn_tensor_copy_into, directly and through kn_tensor_contiguous.
 *
 * kn_index_next must visit exactly numel multi-indices, in row-major order, then say false
 * and leave the index at zeros. kn_tensor_copy_into must copy between any two layouts (both
 * random: permuted, stepped, gapped; the source also stride-0) and any two dtypes, writing
 * every element of the destination view and nothing outside it. */
#include <string.h>

#include "../../labs/lab01-tensors/tests/check.h"
#include "hidden_ref.h"

#define CASES 1000

KN_TEST(lab01_hidden_strided, index_next_row_major_random) {
    kn_rng r = kn_rng_new(201);
    for (int c = 0; c < CASES; c++) {
        int64_t shape[KN_MAX_DIMS], idx[KN_MAX_DIMS] = {0}, want[KN_MAX_DIMS];
        int nd = href_rand_shape(&r, 6, false, shape);
        int64_t n = href_numel(nd, shape), seen = 1;
        char ss[96];
        href_shape_str(nd, shape, ss, sizeof ss);
        kn_clear_error();
        while (seen <= n) {
            bool more = kn_index_next(nd, shape, idx);
            if (!more) break;
            href_unravel(seen, nd, shape, want);
            cr_assert(seen < n, "kn_index_next over %s still returned true after all %lld "
                      "indices", ss, (long long)n);
            for (int k = 0; k < nd; k++)
                cr_assert(idx[k] == want[k], "kn_index_next over %s, step %lld: axis %d is %lld, "
                          "expected %lld (row-major: the last axis moves fastest)", ss,
                          (long long)seen, k, (long long)idx[k], (long long)want[k]);
            seen++;
        }
        cr_assert(seen == n, "kn_index_next over %s visited %lld indices, expected numel = %lld "
                  "(last error: %s)", ss, (long long)seen, (long long)n, kn_last_error());
        for (int k = 0; k < nd; k++)
            cr_assert(idx[k] == 0, "kn_index_next over %s: after the last index it must reset "
                      "the index to zeros; axis %d is %lld", ss, k, (long long)idx[k]);
    }
}

KN_TEST(lab01_hidden_strided, index_next_zero_d_and_size_one) {
    int64_t idx[KN_MAX_DIMS] = {0};
    cr_assert(!kn_index_next(0, NULL, idx), "a 0-d shape has one index: the first call says false");
    int64_t ones[] = {1, 1, 1, 1, 1, 1};
    cr_assert(!kn_index_next(6, ones, idx), "[1,1,1,1,1,1] has one index: the first call says false");
    for (int k = 0; k < 6; k++) cr_assert(idx[k] == 0);
    /* Starting from an index in the middle continues from there. */
    int64_t shape[] = {2, 3, 4}, mid[] = {0, 2, 3};
    cr_assert(kn_index_next(3, shape, mid), "[0,2,3] in [2,3,4] is not the last index (last "
              "error: %s)", kn_last_error());
    cr_assert(mid[0] == 1 && mid[1] == 0 && mid[2] == 0,
              "after [0,2,3] in [2,3,4] comes [1,0,0], got [%lld,%lld,%lld]",
              (long long)mid[0], (long long)mid[1], (long long)mid[2]);
}

/* Random source and destination layouts and dtypes: every destination element equals the
 * source converted, and the destination's storage outside the view is left alone. */
KN_TEST(lab01_hidden_strided, copy_into_random_layouts_and_dtypes) {
    kn_rng r = kn_rng_new(202);
    for (int c = 0; c < CASES; c++) {
        kn_dtype sdt = href_all_dtypes[c % KN_DT_COUNT];
        kn_dtype ddt = href_all_dtypes[(c / KN_DT_COUNT) % KN_DT_COUNT];
        int64_t shape[KN_MAX_DIMS];
        int nd = href_rand_shape(&r, 6, true, shape);
        kn_tensor *src = href_rand_layout(&r, sdt, nd, shape, true, HREF_VALUES_ANY);
        kn_tensor *dst = href_rand_layout(&r, ddt, nd, shape, false, HREF_VALUES_ANY);
        size_t esz = kn_dtype_size(ddt), nbytes = dst->storage->nbytes;
        unsigned char *before = kn_malloc(nbytes), *inside = kn_calloc(nbytes / esz + 1, 1);
        cr_assert(before && inside);
        memcpy(before, dst->storage->data, nbytes);
        int64_t n = href_numel(nd, shape);
        char ss[96];
        href_shape_str(nd, shape, ss, sizeof ss);
        KN_ASSERT_OK(kn_tensor_copy_into(dst, src));
        for (int64_t i = 0; i < n; i++) {
            int64_t idx[KN_MAX_DIMS], pos = dst->offset;
            href_unravel(i, nd, shape, idx);
            for (int k = 0; k < nd; k++) pos += idx[k] * dst->strides[k];
            inside[pos] = 1;
            double want = href_roundtrip(ddt, href_at(src, idx)), got = href_at(dst, idx);
            cr_assert(href_close(got, want, href_eps(ddt) * fabs(want)),
                      "copy_into %s %s <- %s %s, element %lld: expected %.9g, got %.9g",
                      kn_dtype_name(ddt), ss, kn_dtype_name(sdt), ss, (long long)i, want, got);
        }
        for (size_t p = 0; p < nbytes / esz; p++)
            cr_assert(inside[p] || memcmp(before + p * esz, (char *)dst->storage->data + p * esz,
                                          esz) == 0,
                      "copy_into %s %s: storage element %zu is outside the destination view but "
                      "was written", kn_dtype_name(ddt), ss, p);
        kn_free(inside);
        kn_free(before);
        kn_tensor_free(dst);
        kn_tensor_free(src);
    }
}

KN_TEST(lab01_hidden_strided, copy_into_shape_mismatch) {
    static const struct { int nd, ns; int64_t d[3], s[3]; } cases[] = {
        {2, 2, {2, 3}, {3, 2}}, {1, 2, {6}, {2, 3}}, {2, 1, {1, 3}, {3}}, {2, 2, {2, 3}, {2, 1}},
        {1, 1, {0}, {1}},       {0, 1, {0}, {1}},    {3, 3, {2, 2, 2}, {2, 2, 3}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        kn_tensor *d = NULL, *s = NULL;
        KN_ASSERT_OK(kn_tensor_full(&d, KN_DT_F32, cases[c].nd, cases[c].d, 5.0));
        KN_ASSERT_OK(kn_tensor_zeros(&s, KN_DT_F32, cases[c].ns, cases[c].s));
        KN_ASSERT_ERR(kn_tensor_copy_into(d, s), KN_ERR_SHAPE);
        int64_t n = href_numel(cases[c].nd, cases[c].d);
        for (int64_t i = 0; i < n; i++)
            cr_assert(kn_dtype_load(KN_DT_F32, kn_tensor_data(d), i) == 5.0,
                      "a failed copy_into must not write the destination");
        kn_tensor_free(d);
        kn_tensor_free(s);
    }
}

/* kn_tensor_contiguous of random non-contiguous layouts and of views made by kiln's own
 * permute and slice. */
KN_TEST(lab01_hidden_strided, contiguous_of_random_views) {
    kn_rng r = kn_rng_new(203);
    for (int c = 0; c < CASES; c++) {
        kn_dtype dt = href_all_dtypes[c % KN_DT_COUNT];
        int64_t shape[KN_MAX_DIMS];
        int nd = href_rand_shape(&r, 6, true, shape);
        kn_tensor *x = href_rand_layout(&r, dt, nd, shape, true, HREF_VALUES_ANY);
        kn_tensor *v = x;
        int perm[KN_MAX_DIMS];
        if (nd > 0 && c % 2) { /* and through kiln's own views */
            href_rand_perm(&r, nd, perm);
            KN_ASSERT_OK(kn_tensor_permute(&v, x, perm));
            kn_tensor *s = NULL;
            int axis = (int)href_randint(&r, 0, nd - 1);
            KN_ASSERT_OK(kn_tensor_slice(&s, v, axis, href_randint(&r, 0, 1), v->shape[axis],
                                         href_randint(&r, 1, 3)));
            kn_tensor_free(v);
            v = s;
        }
        kn_tensor *d = NULL;
        KN_ASSERT_OK(kn_tensor_contiguous(&d, v));
        href_expect_shape(d, dt, v->ndim, v->shape, "kn_tensor_contiguous");
        cr_assert(kn_tensor_is_contiguous(d));
        int64_t n = href_numel(v->ndim, v->shape);
        for (int64_t i = 0; i < n; i++) {
            int64_t idx[KN_MAX_DIMS];
            href_unravel(i, v->ndim, v->shape, idx);
            double want = href_at(v, idx), got = kn_dtype_load(dt, kn_tensor_data(d), i);
            char ss[96];
            cr_assert(got == want || (isnan(got) && isnan(want)),
                      "contiguous(%s %s) row-major element %lld: expected %.9g, got %.9g",
                      kn_dtype_name(dt), href_shape_str(v->ndim, v->shape, ss, sizeof ss),
                      (long long)i, want, got);
        }
        kn_tensor_free(d);
        if (v != x) kn_tensor_free(v);
        kn_tensor_free(x);
    }
}

KN_TEST(lab01_hidden_strided, copy_into_zero_d_and_empty) {
    kn_tensor *d = NULL, *s = NULL;
    KN_ASSERT_OK(kn_tensor_scalar(&d, KN_DT_I32, 0));
    KN_ASSERT_OK(kn_tensor_scalar(&s, KN_DT_F64, -2.75));
    KN_ASSERT_OK(kn_tensor_copy_into(d, s));
    cr_assert(kn_dtype_load(KN_DT_I32, kn_tensor_data(d), 0) == -2,
              "copy_into i32[] <- f64[] -2.75 truncates toward zero to -2, got %g",
              kn_dtype_load(KN_DT_I32, kn_tensor_data(d), 0));
    kn_tensor_free(d);
    kn_tensor_free(s);
    int64_t shape[] = {3, 0, 2};
    KN_ASSERT_OK(kn_tensor_empty(&d, KN_DT_BF16, 3, shape));
    KN_ASSERT_OK(kn_tensor_empty(&s, KN_DT_U8, 3, shape));
    KN_ASSERT_OK(kn_tensor_copy_into(d, s));
    kn_tensor_free(d);
    kn_tensor_free(s);
}
