/* check.h — helpers for lab 06's tests (public and hidden): random matrices, a reference
 * product in double, the microkernel's reference, a timer, and planted search times.
 *
 * Every value a test checks that your units produced passes through kn_out
 * (tests/harness/kn_out.h) first: the microkernel's and the loop nest's c, the packed
 * panels, the products, the search's result and its calls of the timer, the speedup.
 * Under `make test-lab06` that does nothing; under the grader your run only writes them,
 * and the staff's build of the same test (no code of yours in it) checks them. */
#ifndef LAB06_CHECK_H
#define LAB06_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kn_test.h"
#include "kiln/gemm.h"

/* The GEMM's units return nothing (void): a skeleton records "not implemented (lab06: ...)"
 * process-wide (kn_not_implemented_seen) and leaves garbage; appended to a wrong result's
 * message ("" when every unit called is written). */
static inline const char *l6_why(void) {
    static char w[1100];
    const char *m = kn_not_implemented_seen();
    snprintf(w, sizeof w, "%s%s", m ? ": " : "", m ? m : "");
    return w;
}

static inline float *l6_rand(int64_t n, unsigned seed) {
    float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof *x);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        x[i] = (float)((seed >> 8) % 2001) / 1000.0f - 1.0f;
    }
    return x;
}

/* op(a) . op(b) in double, m x n. */
static inline double *l6_ref(const float *a, const float *b, int64_t m, int64_t n, int64_t k, bool ta, bool tb) {
    double *c = calloc((size_t)(m * n > 0 ? m * n : 1), sizeof *c);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t kk = 0; kk < k; kk++) s += (double)(ta ? a[kk * m + i] : a[i * k + kk]) * (tb ? b[j * k + kk] : b[kk * n + j]);
            c[i * n + j] = s;
        }
    return c;
}

/* The worst |c - ref| / (sqrt(k) * 1e-6 * (1 + |ref|)): <= 1 passes (float sums of k terms of size ~1). */
static inline double l6_err(const float *c, const double *ref, int64_t n, int64_t k) {
    double worst = 0, scale = 1e-6 * sqrt((double)(k > 1 ? k : 1)) * 4;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(c[i] - ref[i]) / (scale * (1 + fabs(ref[i])));
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

/* The microkernel's contract, as a plain loop: float sums in kk order. */
static inline void l6_micro_ref(const float *ap, const float *bp, int64_t k, float *c, int64_t ldc, int mr, int nr,
                                bool first) {
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < nr; j++) {
            float s = first ? 0.0f : c[r * ldc + j];
            for (int64_t kk = 0; kk < k; kk++) s += ap[kk * KN_GEMM_MR + r] * bp[kk * KN_GEMM_NR + j];
            c[r * ldc + j] = s;
        }
}

/* c = op(a) . op(b) through kiln's f32 product (your units inside). */
static inline float *l6_product(const float *a, const float *b, int64_t m, int64_t n, int64_t k, bool ta, bool tb) {
    float *c = malloc((size_t)(m * n > 0 ? m * n : 1) * sizeof *c);
    for (int64_t i = 0; i < m * n; i++) c[i] = NAN;
    kn_k_matmul_f32(a, b, c, m, n, k, ta, tb);
    kn_out("the product", c, (size_t)(m * n > 0 ? m * n : 0) * sizeof *c);
    return c;
}

/* kn_gemm_micro_f32 on c (rows of ldc floats, `rows` of them), c through kn_out. */
static inline void l6_micro(const float *ap, const float *bp, int64_t k, float *c, int64_t ldc, int mr, int nr,
                            bool first, int rows) {
    kn_gemm_micro_f32(ap, bp, k, c, ldc, mr, nr, first);
    kn_out("kn_gemm_micro_f32's c", c, (size_t)(rows * ldc) * sizeof *c);
}

/* kn_gemm_tune, its status and result through kn_out. */
static inline kn_status l6_tune(int64_t m, int64_t n, int64_t k, const char *dir, bool force, kn_gemm_tune_result *r) {
    kn_status st = kn_out_status("kn_gemm_tune", kn_gemm_tune(m, n, k, dir, force, r));
    kn_out("kn_gemm_tune's result", r, sizeof *r);
    return st;
}

static inline double l6_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The textbook triple loop, i-j-k, as a student writes it first: the speed reference. */
static inline void l6_naive(const float *a, const float *b, float *c, int64_t m, int64_t n, int64_t k) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float s = 0;
            for (int64_t kk = 0; kk < k; kk++) s += a[i * k + kk] * b[kk * n + j];
            c[i * n + j] = s;
        }
}

/* Speed means nothing under AddressSanitizer (make SAN=1: every access checked, no AVX2
 * clone): the speed tests skip there, with one line. */
#if defined(__SANITIZE_ADDRESS__)
#define L6_SKIP_UNDER_SANITIZERS() cr_skip_test("speed is not measured under the sanitizers")
#else
#define L6_SKIP_UNDER_SANITIZERS() ((void)0)
#endif

/* kiln's s^3 product against the naive loop's: a fast wrong product is not fast, so the
 * speed tests check this first (also where they then skip, so that a skeleton fails the
 * same way in every build). */
static inline void l6_check_product(int64_t s) {
    float *a = l6_rand(s * s, 1), *b = l6_rand(s * s, 2), *c = malloc((size_t)(s * s) * sizeof *c);
    float *want = malloc((size_t)(s * s) * sizeof *want);
    l6_naive(a, b, want, s, s, s);
    kn_k_matmul_f32(a, b, c, s, s, s, false, false);
    kn_out("the product", c, (size_t)(s * s) * sizeof *c);
    for (int64_t i = 0; i < s * s; i++)
        cr_assert(fabsf(c[i] - want[i]) <= 1e-3f * (1 + fabsf(want[i])), "the %lld^3 product is wrong at %lld: %g, want %g%s",
                  (long long)s, (long long)i, c[i], want[i], l6_why());
    free(a), free(b), free(c), free(want);
}

/* (Call l6_check_product(s) first.) Median of 5 timed runs (after one warm-up) of kiln's product and of the naive loop,
 * interleaved so that a noisy neighbour slows both: returns naive / kiln, through kn_out
 * (the checker times nothing: the speed is your run's). */
static inline double l6_speedup(int64_t s) {
    if (kn_out_checking()) return kn_out_f64("the speedup", 0);
    /* the fastest of 7 interleaved runs of each: on a shared machine another process can
     * stall the threaded product's workers (a median of 5 once read 0.76x under load), and
     * the fastest run is the one least disturbed */
    float *a = l6_rand(s * s, 1), *b = l6_rand(s * s, 2), *c = malloc((size_t)(s * s) * sizeof *c);
    double tk = 1e30, tn = 1e30;
    kn_k_matmul_f32(a, b, c, s, s, s, false, false); /* warm-up */
    for (int r = 0; r < 7; r++) {
        double t0 = l6_now();
        kn_k_matmul_f32(a, b, c, s, s, s, false, false);
        double t1 = l6_now();
        l6_naive(a, b, c, s, s, s);
        double t2 = l6_now();
        if (t1 - t0 < tk) tk = t1 - t0;
        if (t2 - t1 < tn) tn = t2 - t1;
    }
    free(a), free(b), free(c);
    return kn_out_f64("the speedup", tn / tk);
}

/* Planted times for the search (kn_gemm_tune_set_timer): real timings almost never tie,
 * so the rule for equal times is tested with these. t[i] is the time of candidate i in the
 * contract's order (kc outer: KN_GEMM_KCS[i / 5], KN_GEMM_MCS[i % 5]); the time is looked up
 * by the blocking, not by the call's position, so a wrong order is not hidden. Every call's
 * shape must be want_m x want_n x want_k (calls counts the calls, bad those with another). */
typedef struct l6_planted {
    double t[25];
    int64_t want_m, want_n, want_k;
    int calls, bad;
} l6_planted;

static inline double l6_planted_time(int64_t m, int64_t n, int64_t k, kn_gemm_config cfg, void *ctx) {
    l6_planted *p = ctx;
    static const int64_t kcs[] = KN_GEMM_KCS, mcs[] = KN_GEMM_MCS;
    p->calls++;
    if (m != p->want_m || n != p->want_n || k != p->want_k) p->bad++;
    for (int i = 0; i < 25; i++)
        if (cfg.kc == kcs[i / 5] && cfg.mc == mcs[i % 5]) return p->t[i];
    return 1e9; /* not a candidate: never the fastest */
}

/* Tune m x n x k (forced, in a fresh cache directory) with the planted times p->t; the clock
 * is restored before anything is checked. Returns kn_gemm_tune's status. */
static inline kn_status l6_tune_planted(int64_t m, int64_t n, int64_t k, l6_planted *p, kn_gemm_tune_result *r) {
    char dir[] = "/tmp/kiln-l6t-XXXXXX";
    if (!mkdtemp(dir)) return kn_error(KN_ERR_IO, "l6_tune_planted: mkdtemp failed");
    p->want_m = m, p->want_n = n, p->want_k = k, p->calls = p->bad = 0;
    kn_gemm_tune_set_timer(l6_planted_time, p);
    kn_status st = kn_out_status("kn_gemm_tune", kn_gemm_tune(m, n, k, dir, true, r));
    kn_gemm_tune_set_timer(NULL, NULL);
    kn_out("kn_gemm_tune's result", r, sizeof *r);
    kn_out("the timer's calls", &p->calls, sizeof p->calls);
    kn_out("the timer's calls with another shape", &p->bad, sizeof p->bad);
    return st;
}

#endif
