/* test_hidden_epilogue.c — lab 12 hidden tests of the dequantizing epilogue
 * (quant_epilogue.c): random tiles of every shape and stride with sums beyond f32's exact
 * integers, compared bit for bit with ((float)acc * sa) * sb (the order is the contract:
 * a case where the other order differs is checked), guard values around the tile, NULL and
 * NaN scales; then kiln's int8 product, whose every element must be the epilogue of the
 * exact integer sums of your codes. */
#include <stdint.h>

#include "../../labs/lab12-capstone/tests/quant_check.h"

#define SENT 12345.0f

static void tile_case(int64_t rows, int64_t cols, int64_t ldacc, int64_t ldc, bool with_sa, unsigned seed) {
    int32_t *acc = malloc((rows + 1) * ldacc * sizeof *acc);
    float *sa = malloc((rows + 1) * sizeof *sa), *sb = malloc((cols + 1) * sizeof *sb);
    float *c = malloc((rows + 1) * ldc * sizeof *c);
    for (int64_t t = 0; t < (rows + 1) * ldacc; t++) {
        seed = seed * 1103515245u + 12345u;
        acc[t] = (int32_t)(seed >> 1) - (int32_t)(1u << 30); /* beyond 2^24: (float)acc rounds */
        if (t % 5 == 0) acc[t] >>= 12;
    }
    l12_fill(sa, rows + 1, seed + 1);
    l12_fill(sb, cols + 1, seed + 2);
    for (int64_t t = 0; t < (rows + 1) * ldc; t++) c[t] = SENT;
    kn_i8_dequant(acc, rows, cols, ldacc, with_sa ? sa : NULL, sb, c, ldc);
    for (int64_t i = 0; i < rows + 1; i++)
        for (int64_t j = 0; j < ldc; j++) {
            float got = c[i * ldc + j];
            if (i < rows && j < cols) {
                float want = l12_ref_dequant(acc[i * ldacc + j], with_sa ? sa : NULL, i, sb[j]);
                cr_assert(l12_same(got, want),
                          "tile %lld x %lld (ldacc %lld, ldc %lld%s): c[%lld][%lld] = %.9g, expected "
                          "(float)%d * %.9g * %.9g = %.9g%s",
                          (long long)rows, (long long)cols, (long long)ldacc, (long long)ldc, with_sa ? "" : ", sa NULL",
                          (long long)i, (long long)j, got, acc[i * ldacc + j], with_sa ? sa[i] : 1.0f, sb[j], want, l12_why());
            } else {
                cr_assert(got == SENT, "tile %lld x %lld (ldc %lld): c[%lld][%lld] outside the tile was written (%g)",
                          (long long)rows, (long long)cols, (long long)ldc, (long long)i, (long long)j, got);
            }
        }
    free(acc), free(sa), free(sb), free(c);
}

KN_TEST(lab12_hidden_quant_epilogue, random_tiles_bit_exact) {
    unsigned seed = 3;
    for (int64_t rows = 1; rows <= 6; rows++)
        for (int64_t cols = 1; cols <= 9; cols += 2) {
            tile_case(rows, cols, cols, cols, true, seed++);
            tile_case(rows, cols, cols + 3, cols + 1, true, seed++);
            tile_case(rows, cols, 4 + cols, 2 * cols + 5, false, seed++);
        }
}

KN_TEST(lab12_hidden_quant_epilogue, left_to_right) {
    /* find sums and scales where (acc * sa) * sb and acc * (sa * sb) differ, then ask for the first */
    int found = 0;
    unsigned seed = 9;
    for (int t = 0; t < 2000 && found < 20; t++) {
        seed = seed * 1103515245u + 12345u;
        int32_t acc = (int32_t)(seed % 2000001) - 1000000;
        float sa, sb;
        l12_fill(&sa, 1, seed + 1);
        l12_fill(&sb, 1, seed + 2);
        float left = (float)acc * sa * sb, other = (float)acc * (sa * sb);
        if (l12_same(left, other)) continue;
        found++;
        float c = SENT;
        kn_i8_dequant(&acc, 1, 1, 1, &sa, &sb, &c, 1);
        cr_assert(l12_same(c, left), "acc %d, sa %.9g, sb %.9g: %.9g, expected (acc * sa) * sb = %.9g "
                                     "(acc * (sa * sb) = %.9g is another rounding)%s",
                  acc, sa, sb, c, left, other, l12_why());
    }
    cr_assert(found >= 20, "the test found only %d cases where the order matters", found);
}

KN_TEST(lab12_hidden_quant_epilogue, nan_scales_and_zero_sums) {
    const int32_t acc[4] = {0, 5, -7, 3};
    const float sa[2] = {NAN, 0.5f}, sb[2] = {2.0f, NAN};
    float c[4];
    kn_i8_dequant(acc, 2, 2, 2, sa, sb, c, 2);
    cr_assert(isnan(c[0]) && isnan(c[1]) && isnan(c[3]) && l12_same(c[2], -7.0f),
              "NaN scales: %g %g %g %g, expected NaN NaN -7 NaN%s", c[0], c[1], c[2], c[3], l12_why());
    const float sa1[1] = {3.0f}, sb1[2] = {4.0f, -1.0f};
    kn_i8_dequant(acc, 1, 2, 2, sa1, sb1, c, 2);
    cr_assert(l12_same(c[0], 0.0f) && l12_same(c[1], -15.0f), "acc 0 5: %g %g, expected 0 -15%s", c[0], c[1], l12_why());
}

/* kn_gemm_i8 (kiln's int8 product, your epilogue applied to its int32 sums): every element
 * must be the reference epilogue of the exact integer sums of the reference codes. */
static void product_case(int64_t m, int64_t n, int64_t k, bool with_sa, unsigned seed) {
    float *x = malloc(m * k * sizeof *x), *w = malloc(k * n * sizeof *w), *c = malloc(m * n * sizeof *c);
    float *sx = malloc(m * sizeof *sx), *sw = malloc(n * sizeof *sw), *col = malloc(k * sizeof *col);
    int8_t *qx = malloc(m * k), *qw = malloc(n * k);
    l12_fill(x, m * k, seed);
    l12_fill(w, k * n, seed + 1);
    for (int64_t i = 0; i < m; i++) sx[i] = l12_ref_quant(x + i * k, k, 1, qx + i * k);
    for (int64_t j = 0; j < n; j++) {
        for (int64_t i = 0; i < k; i++) col[i] = w[i * n + j];
        sw[j] = l12_ref_quant(col, k, 1, qw + j * k);
    }
    kn_gemm_i8(qx, qw, with_sa ? sx : NULL, sw, c, m, n, k);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            int32_t s = 0;
            for (int64_t t = 0; t < k; t++) s += qx[i * k + t] * qw[j * k + t];
            float want = l12_ref_dequant(s, with_sa ? sx : NULL, i, sw[j]);
            cr_assert(l12_same(c[i * n + j], want), "int8 product %lld x %lld x %lld%s: c[%lld][%lld] = %.9g, expected %.9g%s",
                      (long long)m, (long long)n, (long long)k, with_sa ? "" : " (sa NULL)", (long long)i, (long long)j,
                      c[i * n + j], want, l12_why());
        }
    free(x), free(w), free(c), free(sx), free(sw), free(col), free(qx), free(qw);
}

KN_TEST(lab12_hidden_quant_epilogue, inside_the_int8_product) {
    product_case(1, 1, 1, true, 1);
    product_case(5, 7, 33, true, 2);  /* a short block of columns */
    product_case(6, 5, 40, false, 3); /* the weight-only scales */
    product_case(96, 130, 200, true, 4); /* large enough to run on the worker threads */
}
