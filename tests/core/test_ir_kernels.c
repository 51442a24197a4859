/* test_ir_kernels.c — the raw training kernels (kiln/kernels.h) against plain f64
 * references written from the definitions, on odd sizes that exercise the partial
 * register blocks of the matrix product, and their determinism across thread counts. */
#include <stdlib.h>

#include "test_ir_util.h"
#include "kiln/kernels.h"

static float *frand(int64_t n, uint64_t seed) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    kn_rng r = kn_rng_new(seed);
    kn_rng_normal_f32(&r, p, n);
    return p;
}

KN_TEST(ir_kernels, matmul_all_transposes_match_a_double_reference) {
    int64_t sizes[][3] = {{1, 1, 1}, {7, 13, 5}, {6, 16, 9}, {13, 33, 17}, {64, 40, 70}};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int64_t m = sizes[s][0], n = sizes[s][1], k = sizes[s][2];
        float *a = frand(m * k, 1 + s), *b = frand(k * n, 2 + s), *c = malloc((size_t)(m * n) * sizeof *c);
        double *ad = malloc((size_t)(m * k) * sizeof *ad), *bd = malloc((size_t)(k * n) * sizeof *bd), *cd = malloc((size_t)(m * n) * sizeof *cd);
        for (int t = 0; t < 4; t++) {
            bool ta = t & 1, tb = t & 2;
            kn_k_matmul_f32(a, b, c, m, n, k, ta, tb);
            for (int64_t i = 0; i < m * k; i++) ad[i] = a[i];
            for (int64_t i = 0; i < k * n; i++) bd[i] = b[i];
            kn_k_matmul_f64(ad, bd, cd, m, n, k, ta, tb);
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) {
                    double ref = 0;
                    for (int64_t q = 0; q < k; q++)
                        ref += (double)(ta ? a[q * m + i] : a[i * k + q]) * (double)(tb ? b[j * k + q] : b[q * n + j]);
                    KN_ASSERT_CLOSE(c[i * n + j], ref, 1e-4 * sqrt((double)k), 1e-4);
                    KN_ASSERT_CLOSE(cd[i * n + j], ref, 1e-12 * (double)k, 1e-12);
                }
        }
        free(a); free(b); free(c); free(ad); free(bd); free(cd);
    }
}

KN_TEST(ir_kernels, matmul_is_deterministic_across_thread_counts) {
    int64_t m = 97, n = 130, k = 300;
    float *a = frand(m * k, 5), *b = frand(k * n, 6), *c1 = malloc((size_t)(m * n) * 4), *c2 = malloc((size_t)(m * n) * 4);
    kn_k_matmul_f32(a, b, c1, m, n, k, false, false); /* large enough to be split among threads */
    /* the same rows one panel at a time (no threads) must give the same bits */
    for (int64_t i = 0; i < m; i += 6) {
        int64_t mr = m - i < 6 ? m - i : 6;
        kn_k_matmul_f32(a + i * k, b, c2 + i * n, mr, n, k, false, false);
    }
    cr_assert(!memcmp(c1, c2, (size_t)(m * n) * 4), "row blocks computed apart differ from the threaded product");
    free(a); free(b); free(c1); free(c2);
}

KN_TEST(ir_kernels, softmax_layernorm_cross_entropy_match_references) {
    int64_t rows = 5, c = 37;
    float *x = frand(rows * c, 9), *y = malloc((size_t)(rows * c) * 4), *w = frand(c, 10), *bb = frand(c, 11);
    kn_k_softmax_f32(x, y, rows, c, 1, false);
    for (int64_t r = 0; r < rows; r++) {
        double mx = -INFINITY, s = 0;
        for (int64_t j = 0; j < c; j++) mx = fmax(mx, x[r * c + j]);
        for (int64_t j = 0; j < c; j++) s += exp(x[r * c + j] - mx);
        for (int64_t j = 0; j < c; j++) KN_ASSERT_CLOSE(y[r * c + j], exp(x[r * c + j] - mx) / s, 1e-7, 1e-5);
    }
    kn_k_softmax_f32(x, y, rows, c, 1, true);
    for (int64_t r = 0; r < rows; r++) {
        double mx = -INFINITY, s = 0;
        for (int64_t j = 0; j < c; j++) mx = fmax(mx, x[r * c + j]);
        for (int64_t j = 0; j < c; j++) s += exp(x[r * c + j] - mx);
        for (int64_t j = 0; j < c; j++) KN_ASSERT_CLOSE(y[r * c + j], x[r * c + j] - mx - log(s), 1e-5, 1e-5);
    }
    kn_k_layernorm_f32(x, w, bb, y, rows, c, 1e-5);
    for (int64_t r = 0; r < rows; r++) {
        double m = 0, v = 0;
        for (int64_t j = 0; j < c; j++) m += x[r * c + j];
        m /= (double)c;
        for (int64_t j = 0; j < c; j++) v += (x[r * c + j] - m) * (x[r * c + j] - m);
        v /= (double)c;
        for (int64_t j = 0; j < c; j++)
            KN_ASSERT_CLOSE(y[r * c + j], (x[r * c + j] - m) / sqrt(v + 1e-5) * w[j] + bb[j], 1e-5, 1e-5);
    }
    int32_t t[5] = {0, 36, 5, 17, 2};
    float loss;
    int64_t bad = -1;
    cr_assert(kn_k_cross_entropy_f32(x, t, KN_DT_I32, rows, c, &loss, &bad));
    double ref = 0;
    for (int64_t r = 0; r < rows; r++) {
        double mx = -INFINITY, s = 0;
        for (int64_t j = 0; j < c; j++) mx = fmax(mx, x[r * c + j]);
        for (int64_t j = 0; j < c; j++) s += exp(x[r * c + j] - mx);
        ref += mx + log(s) - x[r * c + t[r]];
    }
    KN_ASSERT_CLOSE(loss, ref / (double)rows, 1e-5, 1e-5);
    t[3] = 37;
    cr_assert(!kn_k_cross_entropy_f32(x, t, KN_DT_I32, rows, c, &loss, &bad));
    cr_assert_eq(bad, 3);
    free(x); free(y); free(w); free(bb);
}

KN_TEST(ir_kernels, dropout_mask_is_a_pure_function_of_seed_and_offset) {
    int64_t n = 4000;
    double *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    float *xf = malloc((size_t)n * sizeof *xf), *yf = malloc((size_t)n * sizeof *yf);
    for (int64_t i = 0; i < n; i++) { x[i] = 1.0; xf[i] = 1.0f; }
    kn_k_dropout_f64(x, y, n, 0.25, 42, 17);
    kn_k_dropout_f32(xf, yf, n, 0.25, 42, 17);
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i++) {
        bool keep = kn_k_dropout_keep(0.25, 42, 17, i);
        cr_assert_eq(y[i] != 0, keep, "element %lld", (long long)i);
        cr_assert_eq(yf[i] != 0, keep, "f32 and f64 masks differ at %lld", (long long)i);
        cr_assert(!keep || fabs(y[i] - 1.0 / 0.75) < 1e-15);
        /* the same element through the stateless word: what a GPU thread computes */
        cr_assert_eq(keep, kn_u32_to_unit_f32(kn_rng_word_at(42, 0, 17 + (uint64_t)i)) >= 0.25f);
        kept += keep;
    }
    cr_assert(kept > 0.70 * (double)n && kept < 0.80 * (double)n, "kept %lld of %lld at p = 0.25", (long long)kept, (long long)n);
    /* a later offset continues the same stream */
    kn_k_dropout_f64(x + 100, y + 100, n - 100, 0.25, 42, 117);
    for (int64_t i = 100; i < n; i++) cr_assert_eq(y[i] != 0, kn_k_dropout_keep(0.25, 42, 17, i));
    free(x); free(y); free(xf); free(yf);
}

KN_TEST(ir_kernels, reductions_over_any_axes_and_strided_copies) {
    /* sum over axes {0, 2} of a [3, 4, 5] tensor, through the interpreter's kernel path */
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
    int64_t s[3] = {3, 4, 5};
    kn_tensor *x = irt_randn(KN_DT_F32, 3, s, 12);
    int ax[2] = {0, 2};
    kn_val xv = kn_input(b, "x", x);
    kn_val r = kn_sum(b, xv, 2, ax, false), mx = kn_max(b, xv, 2, ax, true), mn = kn_mean(b, xv, 1, ax + 1, false);
    int p[3] = {2, 0, 1};
    kn_val pm = kn_permute(b, xv, 3, p);
    KN_ASSERT_OK(kn_builder_status(b));
    const float *xs = kn_tensor_data(x), *rs = kn_tensor_data(kn_val_tensor(b, r)), *ms = kn_tensor_data(kn_val_tensor(b, mx));
    const float *mns = kn_tensor_data(kn_val_tensor(b, mn)), *ps = kn_tensor_data(kn_val_tensor(b, pm));
    for (int j = 0; j < 4; j++) {
        double sum = 0, m = -INFINITY;
        for (int i = 0; i < 3; i++)
            for (int k = 0; k < 5; k++) { sum += xs[(i * 4 + j) * 5 + k]; m = fmax(m, xs[(i * 4 + j) * 5 + k]); }
        KN_ASSERT_CLOSE(rs[j], sum, 1e-5, 1e-5);
        cr_assert_eq(ms[j], (float)m);
    }
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) {
            double sum = 0;
            for (int k = 0; k < 5; k++) sum += xs[(i * 4 + j) * 5 + k];
            KN_ASSERT_CLOSE(mns[i * 4 + j], sum / 5, 1e-6, 1e-5);
            for (int k = 0; k < 5; k++) cr_assert_eq(ps[(k * 3 + i) * 4 + j], xs[(i * 4 + j) * 5 + k]);
        }
    kn_builder_free(b);
    kn_tensor_free(x);
}

KN_TEST(ir_kernels, row_kernels_give_the_same_bits_split_or_not) {
    int64_t rows = 2048, c = 64, n = rows * c; /* large enough to be split among threads */
    float *x = frand(n, 31), *w = frand(c, 32), *bb = frand(c, 33), *y1 = malloc((size_t)n * 4), *y2 = malloc((size_t)n * 4);
    kn_k_softmax_f32(x, y1, rows, c, 1, false);
    for (int64_t r = 0; r < rows; r++) kn_k_softmax_f32(x + r * c, y2 + r * c, 1, c, 1, false);
    cr_assert(!memcmp(y1, y2, (size_t)n * 4), "softmax");
    kn_k_layernorm_f32(x, w, bb, y1, rows, c, 1e-5);
    for (int64_t r = 0; r < rows; r++) kn_k_layernorm_f32(x + r * c, w, bb, y2 + r * c, 1, c, 1e-5);
    cr_assert(!memcmp(y1, y2, (size_t)n * 4), "layernorm");
    kn_k_layernorm_dx_f32(x, y1, w, y2, rows, c, 1e-5);
    for (int64_t r = 0; r < rows; r++) kn_k_layernorm_dx_f32(x + r * c, y1 + r * c, w, y1 + r * c, 1, c, 1e-5);
    cr_assert(!memcmp(y1, y2, (size_t)n * 4), "layernorm_dx");
    kn_k_unary_f32(KN_UNARY_GELU, x, y1, n);
    for (int64_t r = 0; r < rows; r++) kn_k_unary_f32(KN_UNARY_GELU, x + r * c, y2 + r * c, c);
    cr_assert(!memcmp(y1, y2, (size_t)n * 4), "gelu");
    free(x); free(w); free(bb); free(y1); free(y2);
}
