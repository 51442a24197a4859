/* test_cuda_colsum.c — the GPU's column reduction (core/runtime/cuda_colsum.cu: sum, mean,
 * max over a strided axis, the bias gradient) under the CUDA emulator (the very kernel
 * text nvcc compiles, core/runtime/cuda_colsum_emu.c), against a sequential sum in double:
 * strips of whole and partial width, one pass and rows split over chunks whose partials the
 * last block to finish combines, several outer indices, NaN in a max. Run twice, a
 * reduction gives the same bits, and the tickets are zero again. (On a GPU the backend's
 * reduce runs it: the tensor_reduce and cuda suites compare it with the CPU kernels.) */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kn_test.h"
#include "runtime/cuda_colsum.h"

static double ref(const double *x, long long r, long long inner, long long o, long long i, int is_max, int mean) {
    double a = is_max ? -INFINITY : 0.0;
    for (long long q = 0; q < r; q++) {
        double v = x[(o * r + q) * inner + i];
        if (is_max) a = a != a ? a : v != v ? v : a > v ? a : v;
        else a += v;
    }
    return mean ? a / (double)r : a;
}

KN_TEST(colsum_emu, columns_against_a_sequential_sum, .timeout = 240) {
    struct { long long outer, r, inner; } sh[] = {
        {1, 1000, 37},  /* one partial strip, rows split in 15 chunks */
        {3, 500, 200},  /* 3 outer x 2 strips, split */
        {1, 4096, 768}, /* the bias gradient's width: 6 strips, 64 chunks */
        {2, 50, 300},   /* too few rows to split: one pass */
        {40, 3, 2},     /* many outer indices, one strip each */
        {1, 129, 128},  /* two chunks, whole strip */
    };
    unsigned *ticket = calloc(KNR_TICKETS, sizeof *ticket);
    for (size_t c = 0; c < sizeof sh / sizeof sh[0]; c++) {
        long long o = sh[c].outer, r = sh[c].r, in = sh[c].inner, n = o * r * in, m = o * in;
        knr_plan pl = knr_cols_plan(o, r, in);
        if (c != 3 && c != 4) cr_assert_gt(pl.nchunk, 1, "case %zu splits its rows", c);
        else cr_assert_eq(pl.nchunk, 1, "case %zu: one pass", c);
        double *xd = malloc(sizeof *xd * (size_t)n), *yd = malloc(sizeof *yd * (size_t)m), *y2 = malloc(sizeof *y2 * (size_t)m);
        float *xf = malloc(sizeof *xf * (size_t)n), *yf = malloc(sizeof *yf * (size_t)m), *yf2 = malloc(sizeof *yf2 * (size_t)m);
        double *part = malloc(sizeof *part * (size_t)(o * pl.nchunk * in));
        uint64_t s = 99 + c;
        for (long long k = 0; k < n; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            xf[k] = (float)(2.0 * (double)(s >> 11) / 9007199254740992.0 - 1.0);
            xd[k] = xf[k];
        }
        if (c == 1) xf[5 * in + 7] = xd[5 * in + 7] = NAN; /* outer 0, column 7: a NaN the max keeps */
        for (int op = 0; op < 3; op++) { /* sum, mean, max */
            int is_max = op == 2, mean = op == 1;
            cr_assert_eq(kn_colsum_emu_f32(xf, yf, part, ticket, o, r, in, is_max, mean), 0);
            cr_assert_eq(kn_colsum_emu_f64(xd, yd, part, ticket, o, r, in, is_max, mean), 0);
            for (long long e = 0; e < m; e++) {
                double w = ref(xd, r, in, e / in, e % in, is_max, mean);
                if (isnan(w)) {
                    cr_assert(isnan(yd[e]) && isnan(yf[e]), "case %zu op %d: NaN at %lld", c, op, e);
                    continue;
                }
                cr_assert(fabs(yd[e] - w) <= 1e-12 * (1 + fabs(w)), "case %zu op %d f64 at %lld: %.17g vs %.17g", c, op, e, yd[e], w);
                cr_assert(fabs((double)yf[e] - w) <= 1e-6 * (1 + fabs(w)), "case %zu op %d f32 at %lld: %.9g vs %.9g", c,
                          op, e, (double)yf[e], w);
            }
            cr_assert_eq(kn_colsum_emu_f32(xf, yf2, part, ticket, o, r, in, is_max, mean), 0);
            cr_assert_eq(kn_colsum_emu_f64(xd, y2, part, ticket, o, r, in, is_max, mean), 0);
            cr_assert(!memcmp(yf, yf2, sizeof *yf * (size_t)m) && !memcmp(yd, y2, sizeof *yd * (size_t)m),
                      "case %zu op %d: the same bits twice", c, op);
            for (int t = 0; t < KNR_TICKETS; t++) cr_assert_eq(ticket[t], 0u, "case %zu: ticket %d left at %u", c, t, ticket[t]);
        }
        free(xd), free(yd), free(y2), free(xf), free(yf), free(yf2), free(part);
    }
    free(ticket);
}
