/* test_gemm.c — kiln's CPU GEMM (kn_k_matmul_f32 / _f64): every transpose combination on
 * awkward shapes (1, primes, sizes that are not multiples of the micro-tile or of the
 * cache blocks) against a double-precision triple loop, and the determinism promise:
 * any cache blocking (kn_k_gemm_config_set) gives bitwise the same result, because each
 * element is summed over k in the same order whatever the blocks (the thread split only
 * assigns row panels, so the same argument covers the thread count); the autotuner
 * searches, writes its cache file under build/, and reads it back. */
#include <math.h>
#include <string.h>

#include "kn_test.h"
#include "kiln/gemm.h"

static uint64_t lcg(uint64_t *s) { return *s = *s * 6364136223846793005ull + 1442695040888963407ull; }

static void fill(float *x, int64_t n, uint64_t seed) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)((lcg(&seed) >> 40) % 2001) / 1000.0f - 1.0f;
}

/* c = op(a) @ op(b) in double, then checked elementwise against got. */
static void check_ref(const float *a, const float *b, const float *got, int64_t m, int64_t n, int64_t k, bool ta, bool tb) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0, sa = 0;
            for (int64_t p = 0; p < k; p++) {
                double x = ta ? a[p * m + i] : a[i * k + p], y = tb ? b[j * k + p] : b[p * n + j];
                s += x * y, sa += fabs(x * y);
            }
            double tol = 1e-5 * (sa + 1);
            cr_assert(fabs(got[i * n + j] - s) <= tol, "m %lld n %lld k %lld ta %d tb %d: c[%lld,%lld] = %.9g, want %.9g",
                      (long long)m, (long long)n, (long long)k, ta, tb, (long long)i, (long long)j, got[i * n + j], s);
        }
}

KN_TEST(gemm, awkward_shapes_all_transposes) {
    static const int64_t sizes[] = {1, 2, 5, 7, 13, 16, 17, 31, 97};
    uint64_t seed = 7;
    for (int si = 0; si < 9; si++)
        for (int sj = 0; sj < 9; sj += 2)
            for (int sk = 0; sk < 9; sk += 3) {
                int64_t m = sizes[si], n = sizes[(sj + si) % 9], k = sizes[(sk + 2 * si) % 9];
                float *a = kn_malloc((size_t)(m * k) * 4), *b = kn_malloc((size_t)(k * n) * 4), *c = kn_malloc((size_t)(m * n) * 4);
                cr_assert(a && b && c);
                fill(a, m * k, lcg(&seed)), fill(b, k * n, lcg(&seed));
                for (int t = 0; t < 4; t++) {
                    memset(c, 0xff, (size_t)(m * n) * 4); /* NaN: every element must be written */
                    kn_k_matmul_f32(a, b, c, m, n, k, t & 1, t >> 1);
                    check_ref(a, b, c, m, n, k, t & 1, t >> 1);
                }
                kn_free(a), kn_free(b), kn_free(c);
            }
}

KN_TEST(gemm, zero_depth_gives_zeros) {
    float a[1] = {1}, b[1] = {1}, c[6];
    memset(c, 0xff, sizeof c);
    kn_k_matmul_f32(a, b, c, 2, 3, 0, false, false);
    for (int i = 0; i < 6; i++) cr_assert_eq(c[i], 0.0f);
}

/* Blocks far smaller and larger than the default, and ones that split the micro-tile's
 * panels unevenly: the bits must not move. */
KN_TEST(gemm, blocking_does_not_change_bits) {
    int64_t m = 131, n = 77, k = 300;
    float *a = kn_malloc((size_t)(m * k) * 4), *b = kn_malloc((size_t)(k * n) * 4);
    float *c0 = kn_malloc((size_t)(m * n) * 4), *c1 = kn_malloc((size_t)(m * n) * 4);
    cr_assert(a && b && c0 && c1);
    fill(a, m * k, 1), fill(b, k * n, 2);
    kn_k_matmul_f32(a, b, c0, m, n, k, false, true);
    static const kn_gemm_config cfgs[] = {{1, 1}, {7, 6}, {64, 12}, {299, 200}, {1000, 1000}, {33, 30}};
    for (int i = 0; i < 6; i++) {
        kn_k_gemm_config_set(4, -1, cfgs[i]);
        kn_k_matmul_f32(a, b, c1, m, n, k, false, true);
        cr_assert(memcmp(c0, c1, (size_t)(m * n) * 4) == 0, "kc %lld mc %lld changed the bits", (long long)cfgs[i].kc,
                  (long long)cfgs[i].mc);
    }
    kn_k_gemm_config_set(4, -1, (kn_gemm_config){0, 0});
    kn_gemm_config d = kn_k_gemm_config(4, m, n, k);
    cr_assert(d.kc > 0 && d.mc > 0, "the default blocking is back");
    kn_free(a), kn_free(b), kn_free(c0), kn_free(c1);
}

KN_TEST(gemm, f64_against_reference) {
    int64_t m = 23, n = 19, k = 41;
    double a[23 * 41], b[41 * 19], c[23 * 19];
    uint64_t s = 3;
    for (int i = 0; i < m * k; i++) a[i] = (double)((lcg(&s) >> 40) % 1000) / 500.0 - 1;
    for (int i = 0; i < k * n; i++) b[i] = (double)((lcg(&s) >> 40) % 1000) / 500.0 - 1;
    kn_k_gemm_config_set(8, -1, (kn_gemm_config){5, 8});
    kn_k_matmul_f64(a, b, c, m, n, k, true, false);
    kn_k_gemm_config_set(8, -1, (kn_gemm_config){0, 0});
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double r = 0;
            for (int64_t p = 0; p < k; p++) r += a[p * m + i] * b[p * n + j];
            cr_assert(fabs(c[i * n + j] - r) < 1e-12, "c[%lld,%lld] = %.17g, want %.17g", (long long)i, (long long)j, c[i * n + j], r);
        }
}

/* A small tune (class 0) into a cache dir under the build tree: 25 candidates timed, the
 * winner the fastest of them, the file written; a second call reads it without timing. */
KN_TEST(gemm, tune_searches_caches_and_reloads) {
    const char *dir = "build/test-cache/gemm-tune";
    kn_gemm_tune_result r;
    KN_ASSERT_OK(kn_gemm_tune(40, 33, 50, dir, true, &r));
    cr_assert_eq(r.cls, 0);
    cr_assert(!r.from_cache && r.ntrials == 25, "ntrials %d", r.ntrials);
    double best = r.trials[0].seconds;
    for (int i = 0; i < r.ntrials; i++) {
        cr_assert(r.trials[i].seconds > 0);
        if (r.trials[i].seconds < best) best = r.trials[i].seconds;
    }
    bool found = false;
    for (int i = 0; i < r.ntrials; i++)
        if (r.trials[i].seconds == best && r.trials[i].cfg.kc == r.best.kc && r.trials[i].cfg.mc == r.best.mc) found = true;
    cr_assert(found, "the winner kc %lld mc %lld is the fastest trial", (long long)r.best.kc, (long long)r.best.mc);
    kn_gemm_config now = kn_k_gemm_config(4, 40, 33, 50);
    cr_assert(now.kc == r.best.kc && now.mc == r.best.mc, "the choice is in use");
    cr_assert(strstr(r.path, "build/test-cache/gemm-tune/gemm-f32-c0-") == r.path, "path %s", r.path);
    kn_gemm_tune_result r2;
    KN_ASSERT_OK(kn_gemm_tune(60, 20, 30, dir, false, &r2));
    cr_assert(r2.from_cache && r2.ntrials == 0 && r2.best.kc == r.best.kc && r2.best.mc == r.best.mc);
    cr_assert_str_eq(r2.key, r.key);
    kn_k_gemm_config_set(4, -1, (kn_gemm_config){0, 0});
    cr_assert_neq(kn_gemm_tune(0, 3, 3, dir, false, &r2), KN_OK, "a zero side is an error");
    cr_assert(strstr(kn_last_error(), "kn_gemm_tune") != NULL, "%s", kn_last_error());
}
