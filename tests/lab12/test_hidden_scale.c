/* test_hidden_scale.c — lab 12 hidden tests of the quantizer (quant_scale.c): hundreds of
 * random rows and columns of every magnitude, with row strides, outliers at either end and
 * guard values around the buffers, compared bit for bit with the contract written as a plain
 * loop (quant_check.h); every tie of the code range; a NaN or an infinity at each position;
 * negative extremes; rows and columns agreeing on a transposed weight. */
#include "../../labs/lab12-capstone/tests/quant_check.h"

#define GUARD 1.0e6f /* what the buffers hold outside the values: larger than any of them */

/* One random case of kn_quant_rows_i8: rows x cols at row stride ld, values scaled by `mag`,
 * with the largest magnitude planted at column `at` of each row (-1: none). */
static void rows_case(int64_t rows, int64_t cols, int64_t ld, float mag, int64_t at, unsigned seed) {
    int64_t nx = rows * ld + 8;
    float *x = malloc(nx * sizeof *x), *s = malloc((rows + 2) * sizeof *s);
    int8_t *q = malloc(rows * cols + 16), want[256];
    for (int64_t i = 0; i < nx; i++) x[i] = GUARD;
    for (int64_t i = 0; i < rows; i++) {
        l12_fill(x + i * ld, cols, seed + 7 * (unsigned)i);
        for (int64_t j = 0; j < cols; j++) x[i * ld + j] *= mag;
        if (at >= 0) x[i * ld + at] = (i % 2 ? -3.0f : 3.0f) * mag;
    }
    memset(q, 0x55, rows * cols + 16);
    for (int64_t i = 0; i < rows + 2; i++) s[i] = -1;
    kn_quant_rows_i8(x, rows, cols, ld, q, s);
    for (int64_t i = 0; i < rows; i++) {
        float ws = l12_ref_quant(x + i * ld, cols, 1, want);
        cr_assert(l12_same(s[i], ws), "%lld x %lld (ld %lld, values ~%g): scale of row %lld is %.9g, expected %.9g%s",
                  (long long)rows, (long long)cols, (long long)ld, mag, (long long)i, s[i], ws, l12_why());
        for (int64_t j = 0; j < cols; j++)
            cr_assert(q[i * cols + j] == want[j],
                      "%lld x %lld (ld %lld, values ~%g): row %lld, column %lld: %.9g -> %d, expected %d%s",
                      (long long)rows, (long long)cols, (long long)ld, mag, (long long)i, (long long)j,
                      x[i * ld + j], q[i * cols + j], want[j], l12_why());
    }
    for (int64_t t = rows * cols; t < rows * cols + 16; t++)
        cr_assert(q[t] == 0x55, "%lld x %lld: a code written past the last row (q[%lld])", (long long)rows,
                  (long long)cols, (long long)t);
    cr_assert(s[rows] == -1 && s[rows + 1] == -1, "%lld x %lld: a scale written past the last row", (long long)rows,
              (long long)cols);
    free(x), free(s), free(q);
}

KN_TEST(lab12_hidden_quant_scale, random_rows_bit_exact) {
    const float mags[] = {1, 1e-3f, 37.5f, 1e-30f, 3e30f, 1e-36f};
    unsigned seed = 11;
    for (int mi = 0; mi < 6; mi++)
        for (int64_t rows = 1; rows <= 5; rows += 2)
            for (int64_t cols = 1; cols <= 200; cols = cols * 2 + 3) {
                rows_case(rows, cols, cols, mags[mi], -1, seed++);
                rows_case(rows, cols, cols + 3, mags[mi], cols - 1, seed++); /* the largest last */
                rows_case(rows, cols, cols + 1, mags[mi], 0, seed++);        /* the largest first */
            }
}

/* One random case of kn_quant_cols_i8: w [k, n] followed by guard rows. */
static void cols_case(int64_t k, int64_t n, float mag, int64_t at, unsigned seed) {
    float *w = malloc((k + 2) * n * sizeof *w), *s = malloc((n + 2) * sizeof *s), *col = malloc(k * sizeof *col);
    int8_t *q = malloc(n * k + 16), want[256];
    for (int64_t i = 0; i < (k + 2) * n; i++) w[i] = GUARD;
    l12_fill(w, k * n, seed);
    for (int64_t i = 0; i < k * n; i++) w[i] *= mag;
    if (at >= 0)
        for (int64_t j = 0; j < n; j++) w[at * n + j] = (j % 2 ? 2.0f : -2.0f) * mag;
    memset(q, 0x55, n * k + 16);
    for (int64_t j = 0; j < n + 2; j++) s[j] = -1;
    kn_quant_cols_i8(w, k, n, q, s);
    for (int64_t j = 0; j < n; j++) {
        for (int64_t i = 0; i < k; i++) col[i] = w[i * n + j];
        float ws = l12_ref_quant(col, k, 1, want);
        cr_assert(l12_same(s[j], ws), "w [%lld, %lld] (values ~%g): scale of column %lld is %.9g, expected %.9g%s",
                  (long long)k, (long long)n, mag, (long long)j, s[j], ws, l12_why());
        for (int64_t i = 0; i < k; i++)
            cr_assert(q[j * k + i] == want[i],
                      "w [%lld, %lld] (values ~%g): column %lld, row %lld: %.9g -> q[%lld] = %d, expected %d%s",
                      (long long)k, (long long)n, mag, (long long)j, (long long)i, col[i], (long long)(j * k + i),
                      q[j * k + i], want[i], l12_why());
    }
    for (int64_t t = n * k; t < n * k + 16; t++)
        cr_assert(q[t] == 0x55, "w [%lld, %lld]: a code written past the last column", (long long)k, (long long)n);
    cr_assert(s[n] == -1 && s[n + 1] == -1, "w [%lld, %lld]: a scale written past the last column", (long long)k,
              (long long)n);
    free(w), free(s), free(col), free(q);
}

KN_TEST(lab12_hidden_quant_scale, random_columns_bit_exact) {
    const float mags[] = {1, 2e-4f, 55, 1e-25f, 1e32f};
    unsigned seed = 101;
    for (int mi = 0; mi < 5; mi++)
        for (int64_t k = 1; k <= 130; k = k * 2 + 1)
            for (int64_t n = 1; n <= 9; n += 4) {
                cols_case(k, n, mags[mi], -1, seed++);
                cols_case(k, n, mags[mi], k - 1, seed++);
                cols_case(k, n, mags[mi], 0, seed++);
            }
}

KN_TEST(lab12_hidden_quant_scale, every_tie) {
    /* absmax 127 (scale 1): v = t + 0.5 for every t in [-127, 126] is a tie */
    float x[256];
    int8_t q[256];
    float s;
    x[0] = -127;
    for (int t = -127; t <= 126; t++) x[t + 128] = (float)t + 0.5f;
    kn_quant_rows_i8(x, 1, 255, 255, q, &s);
    cr_assert(l12_same(s, 1.0f), "scale %.9g, expected 1%s", s, l12_why());
    for (int t = -127; t <= 126; t++) {
        int want = (t % 2 == 0) ? t : t + 1; /* the even neighbour of t + 0.5 */
        cr_assert(q[t + 128] == want, "%g -> %d, expected %d (half to even)%s", x[t + 128], q[t + 128], want, l12_why());
    }
    /* the same through a scale of 2: v = 2 (t + 0.5) */
    for (int i = 0; i < 255; i++) x[i] *= 2;
    kn_quant_cols_i8(x, 255, 1, q, &s);
    cr_assert(l12_same(s, 2.0f), "columns: scale %.9g, expected 2%s", s, l12_why());
    for (int t = -127; t <= 126; t++) {
        int want = (t % 2 == 0) ? t : t + 1;
        cr_assert(q[t + 128] == want, "columns: %g -> %d, expected %d%s", x[t + 128], q[t + 128], want, l12_why());
    }
}

KN_TEST(lab12_hidden_quant_scale, non_finite_at_every_position) {
    const float bad[3] = {NAN, INFINITY, -INFINITY};
    for (int b = 0; b < 3; b++)
        for (int at = 0; at < 6; at++) {
            /* rows: 3 rows of 6, the middle one poisoned at `at` */
            float x[18];
            int8_t q[18], want[6];
            float s[3];
            l12_fill(x, 18, 5 + at);
            x[6 + at] = bad[b];
            memset(q, 0x55, sizeof q);
            kn_quant_rows_i8(x, 3, 6, 6, q, s);
            cr_assert(isnan(s[1]), "a row with %g at %d: scale %g, expected NaN%s", bad[b], at, s[1], l12_why());
            for (int j = 0; j < 6; j++) cr_assert(q[6 + j] == 0, "a row with %g at %d: code %d is %d, expected 0%s", bad[b], at, j, q[6 + j], l12_why());
            for (int r = 0; r < 3; r += 2) {
                float ws = l12_ref_quant(x + 6 * r, 6, 1, want);
                cr_assert(l12_same(s[r], ws) && !memcmp(q + 6 * r, want, 6),
                          "row %d (finite) beside a row with %g: scale %.9g, expected %.9g, or its codes differ%s", r,
                          bad[b], s[r], ws, l12_why());
            }
            /* columns: w [6, 3], column 2 poisoned at row `at` */
            float w[18];
            l12_fill(w, 18, 9 + at);
            w[at * 3 + 2] = bad[b];
            memset(q, 0x55, sizeof q);
            kn_quant_cols_i8(w, 6, 3, q, s);
            cr_assert(isnan(s[2]) && !isnan(s[0]) && !isnan(s[1]), "a column with %g at row %d: scales %g %g %g%s",
                      bad[b], at, s[0], s[1], s[2], l12_why());
            for (int i = 0; i < 6; i++) cr_assert(q[12 + i] == 0, "a column with %g: code %d is %d, expected 0%s", bad[b], i, q[12 + i], l12_why());
        }
}

KN_TEST(lab12_hidden_quant_scale, negative_extremes_and_zeros) {
    const float x[12] = {-5, 1, 2.5f, -1, /* */ 0, 0, 0, 0, /* */ -0.0f, -0.0f, -0.0f, -0.0f};
    int8_t q[12];
    float s[3];
    memset(q, 0x55, sizeof q);
    kn_quant_rows_i8(x, 3, 4, 4, q, s);
    cr_assert(l12_same(s[0], 5.0f / 127), "row (-5 1 2.5 -1): scale %.9g, expected 5/127 (the absmax is |-5|)%s", s[0], l12_why());
    cr_assert(q[0] == -127 && q[1] == 25 && q[2] == 64 && q[3] == -25, "row (-5 1 2.5 -1): codes %d %d %d %d, expected -127 25 64 -25%s",
              q[0], q[1], q[2], q[3], l12_why());
    cr_assert(s[1] == 0 && s[2] == 0 && !isnan(s[1]) && !isnan(s[2]), "rows of zeros: scales %g %g, expected 0%s", s[1], s[2], l12_why());
    for (int i = 4; i < 12; i++) cr_assert(q[i] == 0, "rows of zeros: code %d is %d%s", i, q[i], l12_why());
    /* a column of zeros beside a negative one */
    const float w[6] = {0, -8, 0, 4, 0, 1};
    kn_quant_cols_i8(w, 3, 2, q, s);
    cr_assert(s[0] == 0 && q[0] == 0 && q[1] == 0 && q[2] == 0, "a column of zeros: scale %g codes %d %d %d%s", s[0], q[0], q[1], q[2], l12_why());
    cr_assert(l12_same(s[1], 8.0f / 127) && q[3] == -127 && q[4] == 64 && q[5] == 16,
              "column (-8 4 1): scale %.9g codes %d %d %d, expected 8/127, -127 64 16%s", s[1], q[3], q[4], q[5], l12_why());
}

KN_TEST(lab12_hidden_quant_scale, rows_and_columns_agree) {
    /* quantizing w's columns is quantizing w^T's rows */
    enum { K = 37, N = 11 };
    float w[K * N], wt[N * K], sc[N], sr[N];
    int8_t qc[N * K], qr[N * K];
    l12_fill(w, K * N, 77);
    for (int i = 0; i < K; i++)
        for (int j = 0; j < N; j++) wt[j * K + i] = w[i * N + j] * (1 + j);
    for (int i = 0; i < K * N; i++) w[i] *= 1 + i % N;
    kn_quant_cols_i8(w, K, N, qc, sc);
    kn_quant_rows_i8(wt, N, K, K, qr, sr);
    for (int j = 0; j < N; j++) {
        int8_t want[K];
        float ws = l12_ref_quant(wt + j * K, K, 1, want);
        cr_assert(l12_same(sc[j], ws) && l12_same(sr[j], ws), "channel %d: column scale %.9g, row scale %.9g, expected %.9g%s", j,
                  sc[j], sr[j], ws, l12_why());
    }
    cr_assert(!memcmp(qc, qr, sizeof qc), "the codes of w's columns differ from those of w^T's rows%s", l12_why());
}

KN_TEST(lab12_hidden_quant_scale, tiny_rows_are_zero_rows) {
    /* 127 / a overflows below 127 / FLT_MAX ~ 3.7e-37: such a row is a row of zeros */
    const float x[8] = {1e-38f, -2e-38f, 0, 1e-40f, /* */ 1e-36f, 0, -4e-37f, 2e-37f};
    int8_t q[8];
    float s[2];
    memset(q, 0x55, sizeof q);
    kn_quant_rows_i8(x, 2, 4, 4, q, s);
    cr_assert(s[0] == 0 && !isnan(s[0]), "a row below 3.7e-37: scale %g, expected 0 (127 / a overflows)%s", s[0], l12_why());
    for (int j = 0; j < 4; j++) cr_assert(q[j] == 0, "a row below 3.7e-37: code %d is %d, expected 0%s", j, q[j], l12_why());
    cr_assert(l12_same(s[1], 1e-36f / 127) && q[4] == 127 && q[5] == 0 && q[6] == -51 && q[7] == 25,
              "the row 1e-36 0 -4e-37 2e-37: scale %g codes %d %d %d %d, expected 1e-36/127, 127 0 -51 25%s", s[1], q[4],
              q[5], q[6], q[7], l12_why());
    const float w[4] = {3e-38f, 1, -1e-39f, 0.5f}; /* w [2, 2]: column 0 tiny */
    kn_quant_cols_i8(w, 2, 2, q, s);
    cr_assert(s[0] == 0 && q[0] == 0 && q[1] == 0, "a tiny column: scale %g codes %d %d, expected 0 0 0%s", s[0], q[0], q[1], l12_why());
    cr_assert(l12_same(s[1], 1.0f / 127) && q[2] == 127 && q[3] == 64, "column (1 0.5): scale %g codes %d %d%s", s[1], q[2], q[3], l12_why());
}
