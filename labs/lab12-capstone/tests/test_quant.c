/* test_quant.c — lab 12 public tests: the int8 quantizer (quant_scale.c) on rows and columns
 * worked by hand (the lesson's outlier token, ties, zeros, non-finite values), and the
 * dequantizing epilogue (quant_epilogue.c) on a tile by hand and inside kiln's int8 product,
 * whose error must stay within what the two scales allow. */
#include "quant_check.h"

/* The lesson's two tokens: the second carries an outlier (40). */
static const float tokens[6] = {0.1f, 0.2f, -0.3f, 40.0f, 1.0f, 2.0f};

KN_TEST(lab12_quant_scale, a_token_by_hand) {
    int8_t q[6];
    float s[2];
    kn_quant_rows_i8(tokens, 2, 3, 3, q, s); /* per token: a scale per row */
    const int8_t want[6] = {42, 85, -127, 127, 3, 6};
    cr_assert(l12_same(s[0], 0.3f / 127) && l12_same(s[1], 40.0f / 127),
              "per token: scales %.9g %.9g, expected 0.3/127 = %.9g and 40/127 = %.9g%s", s[0], s[1], 0.3f / 127,
              40.0f / 127, l12_why());
    for (int i = 0; i < 6; i++)
        cr_assert(q[i] == want[i], "per token: code %d is %d, expected %d%s", i, q[i], want[i], l12_why());
    kn_quant_rows_i8(tokens, 1, 6, 6, q, s); /* per tensor: one scale for both */
    const int8_t want1[6] = {0, 1, -1, 127, 3, 6};
    cr_assert(l12_same(s[0], 40.0f / 127), "per tensor: scale %.9g, expected 40/127%s", s[0], l12_why());
    for (int i = 0; i < 6; i++)
        cr_assert(q[i] == want1[i], "per tensor: code %d is %d, expected %d%s", i, q[i], want1[i], l12_why());
}

KN_TEST(lab12_quant_scale, ties_go_to_even) {
    /* absmax 127: the scale is 1 and every x.5 is a tie */
    const float x[8] = {127, 0.5f, 1.5f, 2.5f, -0.5f, -2.5f, 3.5f, -126.5f};
    const int8_t want[8] = {127, 0, 2, 2, 0, -2, 4, -126};
    int8_t q[8];
    float s;
    kn_quant_rows_i8(x, 1, 8, 8, q, &s);
    cr_assert(l12_same(s, 1.0f), "scale %.9g, expected 1%s", s, l12_why());
    for (int i = 0; i < 8; i++)
        cr_assert(q[i] == want[i], "%g -> %d, expected %d (round half to even)%s", x[i], q[i], want[i], l12_why());
}

KN_TEST(lab12_quant_scale, zeros_and_non_finite) {
    const float x[12] = {0, 0, -0.0f, 0, 1, NAN, 2, 3, -INFINITY, 4, 5, 6};
    int8_t q[12];
    float s[4];
    memset(q, 99, sizeof q);
    kn_quant_rows_i8(x, 4, 3, 3, q, s);
    cr_assert(l12_same(s[0], 0.0f), "a row of zeros: scale %.9g, expected 0%s", s[0], l12_why());
    cr_assert(isnan(s[1]) && isnan(s[2]), "rows with NaN / -inf: scales %g %g, expected NaN%s", s[1], s[2], l12_why());
    for (int i = 0; i < 9; i++) cr_assert(q[i] == 0, "code %d is %d, expected 0 (zero or non-finite row)%s", i, q[i], l12_why());
    cr_assert(l12_same(s[3], 6.0f / 127) && q[9] == 85 && q[10] == 106 && q[11] == 127,
              "the last row (4 5 6): scale %.9g codes %d %d %d, expected 6/127, 85 106 127%s", s[3], q[9], q[10], q[11],
              l12_why());
}

KN_TEST(lab12_quant_scale, columns_are_output_channels) {
    /* w [3, 2]: column 0 = (1, -2, 0.5), column 1 = (0.01, 0.02, -0.04) */
    const float w[6] = {1, 0.01f, -2, 0.02f, 0.5f, -0.04f};
    int8_t q[6], want[6];
    float s[2];
    kn_quant_cols_i8(w, 3, 2, q, s);
    for (int j = 0; j < 2; j++) {
        float ws = l12_ref_quant(w + j, 3, 2, want + j * 3);
        cr_assert(l12_same(s[j], ws), "column %d: scale %.9g, expected %.9g%s", j, s[j], ws, l12_why());
    }
    for (int i = 0; i < 6; i++)
        cr_assert(q[i] == want[i], "q[%d] (column %d, row %d) is %d, expected %d (q is [n][k])%s", i, i / 3, i % 3, q[i],
                  want[i], l12_why());
    cr_assert(want[0] == 64 && want[1] == -127 && want[3] == 32 && want[5] == -127, "the reference itself");
}

KN_TEST(lab12_quant_epilogue, a_tile_by_hand) {
    /* a 2 x 3 tile of a 4-wide register tile, written into an output 5 wide */
    const int32_t acc[8] = {10, -20, 30, 777, 4, 8, -12, 777};
    const float sa[2] = {0.5f, 2.0f}, sb[3] = {1.0f, 0.25f, -3.0f};
    float c[10];
    for (int i = 0; i < 10; i++) c[i] = -7;
    kn_i8_dequant(acc, 2, 3, 4, sa, sb, c, 5);
    const float want[10] = {5, -2.5f, -45, -7, -7, 8, 4, 72, -7, -7};
    for (int i = 0; i < 10; i++)
        cr_assert(l12_same(c[i], want[i]), "c[%d] = %g, expected %g%s%s", i, c[i], want[i],
                  want[i] == -7 ? " (outside the tile: must be left alone)" : "", l12_why());
    kn_i8_dequant(acc + 4, 1, 3, 4, NULL, sb, c, 5); /* sa NULL: 1 per row */
    cr_assert(l12_same(c[0], 4) && l12_same(c[1], 2) && l12_same(c[2], 36),
              "sa NULL: %g %g %g, expected 4 2 36%s", c[0], c[1], c[2], l12_why());
}

/* Quantize x [m, k] per row and w [k, n] per column with your units, multiply with kiln's
 * int8 product (your epilogue inside), and compare with the f32 product in double: each
 * element within the error the two scales allow. */
static void product_case(int64_t m, int64_t n, int64_t k, unsigned seed) {
    float *x = malloc(m * k * sizeof *x), *w = malloc(k * n * sizeof *w), *c = malloc(m * n * sizeof *c);
    float *sx = malloc(m * sizeof *sx), *sw = malloc(n * sizeof *sw);
    int8_t *qx = malloc(m * k), *qw = malloc(n * k);
    double *ref = malloc(m * n * sizeof *ref);
    l12_fill(x, m * k, seed);
    l12_fill(w, k * n, seed + 1);
    x[k + 1] = 25; /* an outlier in token 1 */
    kn_quant_rows_i8(x, m, k, k, qx, sx);
    kn_quant_cols_i8(w, k, n, qw, sw);
    kn_gemm_i8(qx, qw, sx, sw, c, m, n, k);
    l12_matmul_ref(x, w, ref, m, n, k);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            /* |x w - dq(x) dq(w)| <= sum |x| sw/2 + |w| sx/2 + sx sw/4, plus f32 rounding */
            double bound = 0;
            for (int64_t t = 0; t < k; t++)
                bound += fabs(x[i * k + t]) * sw[j] / 2 + fabs(w[t * n + j]) * sx[i] / 2 + (double)sx[i] * sw[j] / 4;
            bound = bound * (1 + 1e-5) + 1e-6 * fabs(ref[i * n + j]);
            double e = fabs(c[i * n + j] - ref[i * n + j]);
            cr_assert(e <= bound, "[%lld x %lld] x [%lld x %lld]: y[%lld][%lld] = %.7g, f32 product %.7g: error %.3g above "
                                  "the quantization bound %.3g%s",
                      (long long)m, (long long)k, (long long)k, (long long)n, (long long)i, (long long)j, c[i * n + j],
                      ref[i * n + j], e, bound, l12_why());
        }
    free(x), free(w), free(c), free(sx), free(sw), free(qx), free(qw), free(ref);
}

KN_TEST(lab12_quant_epilogue, the_int8_product) {
    product_case(3, 5, 7, 1);
    product_case(8, 12, 64, 2);
}
