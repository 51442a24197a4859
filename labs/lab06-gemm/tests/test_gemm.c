/* test_gemm.c — lab 06 public tests: the microkernel against its contract, the blocked
 * product on awkward shapes against a double reference, the same bits whatever the
 * blocking, the autotuner's search (its order, and ties with planted times), and the
 * speed against a naive triple loop. */
#include <stdio.h>
#include <unistd.h>

#include "check.h"

KN_TEST(lab06_micro, a_full_block_and_an_edge) {
    const int64_t k = 37;
    float *ap = l6_rand(k * KN_GEMM_MR, 3), *bp = l6_rand(k * KN_GEMM_NR, 4);
    float c[KN_GEMM_MR * 20], want[KN_GEMM_MR * 20];
    for (int i = 0; i < KN_GEMM_MR * 20; i++) c[i] = want[i] = (float)i;
    l6_micro(ap, bp, k, c, 20, KN_GEMM_MR, KN_GEMM_NR, true, KN_GEMM_MR);
    l6_micro_ref(ap, bp, k, want, 20, KN_GEMM_MR, KN_GEMM_NR, true);
    for (int i = 0; i < KN_GEMM_MR * 20; i++)
        cr_assert(fabsf(c[i] - want[i]) <= 1e-5f * (1 + fabsf(want[i])), "c[%d][%d] = %g, want %g%s", i / 20, i % 20, c[i], want[i],
                  l6_why());
    l6_micro(ap, bp, k, c, 20, 4, 9, false, KN_GEMM_MR); /* an edge block, accumulating */
    l6_micro_ref(ap, bp, k, want, 20, 4, 9, false);
    for (int i = 0; i < KN_GEMM_MR * 20; i++)
        cr_assert(fabsf(c[i] - want[i]) <= 1e-5f * (1 + fabsf(want[i])), "edge: c[%d][%d] = %g, want %g%s", i / 20,
                  i % 20, c[i], want[i], l6_why());
    free(ap), free(bp);
}

KN_TEST(lab06_blocked, awkward_shapes_match_a_reference) {
    const int64_t shapes[][3] = {{1, 1, 1}, {7, 13, 5}, {6, 16, 64}, {37, 53, 129}, {100, 17, 300}, {5, 33, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++) {
            int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
            bool ta = t & 1, tb = t & 2;
            float *a = l6_rand(m * k, 10 + (unsigned)s), *b = l6_rand(k * n, 20 + (unsigned)s);
            float *c = l6_product(a, b, m, n, k, ta, tb);
            double *ref = l6_ref(a, b, m, n, k, ta, tb);
            double e = l6_err(c, ref, m * n, k);
            cr_assert(e <= 1, "%lld x %lld x %lld (ta %d, tb %d): error %.3g of the tolerance%s", (long long)m,
                      (long long)n, (long long)k, ta, tb, e, l6_why());
            free(a), free(b), free(c), free(ref);
        }
}

KN_TEST(lab06_blocked, the_same_bits_whatever_the_blocking) {
    const int64_t m = 70, n = 45, k = 301;
    float *a = l6_rand(m * k, 5), *b = l6_rand(k * n, 6);
    const kn_gemm_config cfgs[] = {{256, 96}, {64, 24}, {7, 6}, {1000, 600}, {1, 1}};
    float *first = NULL;
    double *ref = l6_ref(a, b, m, n, k, false, false);
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        kn_k_gemm_config_set(4, -1, cfgs[i]);
        float *c = l6_product(a, b, m, n, k, false, false);
        if (!first) {
            first = c;
            cr_assert(l6_err(c, ref, m * n, k) <= 1, "the product is wrong%s", l6_why());
        } else {
            cr_assert(memcmp(first, c, (size_t)(m * n) * sizeof *c) == 0, "kc %lld, mc %lld changed the bits",
                      (long long)cfgs[i].kc, (long long)cfgs[i].mc);
            free(c);
        }
    }
    kn_k_gemm_config_set(4, -1, (kn_gemm_config){0, 0});
    free(first), free(a), free(b), free(ref);
}

KN_TEST(lab06_tune, search_times_every_candidate, .timeout = 120) {
    char dir[] = "/tmp/kiln-l6-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    kn_gemm_tune_result r;
    KN_ASSERT_OK(l6_tune(48, 48, 48, dir, true, &r));
    cr_assert_eq(r.ntrials, 25, "every kc x mc candidate timed (got %d)", r.ntrials);
    /* in the contract's order, kc outer: the trials are what kn_gemm_tune caches and prints,
     * and with equal times the order decides the winner */
    static const int64_t kcs[] = KN_GEMM_KCS, mcs[] = KN_GEMM_MCS;
    for (int i = 0; i < r.ntrials; i++)
        cr_assert(r.trials[i].cfg.kc == kcs[i / 5] && r.trials[i].cfg.mc == mcs[i % 5],
                  "trial %d is kc %lld, mc %lld; want kc %lld, mc %lld (kc outer, mc inner)", i,
                  (long long)r.trials[i].cfg.kc, (long long)r.trials[i].cfg.mc, (long long)kcs[i / 5],
                  (long long)mcs[i % 5]);
    int first_min = 0; /* the first of the fastest: a tie keeps the earlier candidate */
    for (int i = 1; i < r.ntrials; i++)
        if (r.trials[i].seconds < r.trials[first_min].seconds) first_min = i;
    cr_assert(r.best.kc == r.trials[first_min].cfg.kc && r.best.mc == r.trials[first_min].cfg.mc,
              "the best blocking (kc %lld, mc %lld) must be the first of the fastest trials, %d (kc %lld, mc %lld)",
              (long long)r.best.kc, (long long)r.best.mc, first_min, (long long)r.trials[first_min].cfg.kc,
              (long long)r.trials[first_min].cfg.mc);
    kn_gemm_tune_result again;
    KN_ASSERT_OK(l6_tune(48, 48, 48, dir, false, &again));
    cr_assert(again.from_cache && again.best.kc == r.best.kc && again.best.mc == r.best.mc);
    kn_k_gemm_config_set(4, -1, (kn_gemm_config){0, 0});
}

/* Equal times: the contract keeps the first of them. Real timings almost never tie, so
 * these are planted (kn_gemm_tune_set_timer); a search that keeps the last of equal times
 * ('<=') picks another blocking, which changes every product's speed from then on. */
KN_TEST(lab06_tune, ties_keep_the_first_candidate) {
    static const int64_t kcs[] = KN_GEMM_KCS, mcs[] = KN_GEMM_MCS;
    l6_planted p;
    kn_gemm_tune_result r;
    for (int i = 0; i < 25; i++) p.t[i] = 3.0 + 0.01 * (i % 7); /* the slow ones, ties among them */
    p.t[6] = p.t[13] = p.t[24] = 1.0;                           /* three fastest, equal */
    KN_ASSERT_OK(l6_tune_planted(40, 40, 40, &p, &r));
    cr_assert_eq(p.calls, 25, "kn_gemm_time called %d times (want one per candidate, 25)", p.calls);
    cr_assert(r.best.kc == kcs[1] && r.best.mc == mcs[1],
              "candidates 6, 13 and 24 (kc %lld mc %lld, kc %lld mc %lld, kc %lld mc %lld) have equal times; the best "
              "must be the first, kc %lld mc %lld, not kc %lld mc %lld",
              (long long)kcs[1], (long long)mcs[1], (long long)kcs[2], (long long)mcs[3], (long long)kcs[4],
              (long long)mcs[4], (long long)kcs[1], (long long)mcs[1], (long long)r.best.kc, (long long)r.best.mc);
    for (int i = 0; i < 25; i++) p.t[i] = 2.0; /* all equal: the very first candidate */
    KN_ASSERT_OK(l6_tune_planted(40, 40, 40, &p, &r));
    cr_assert(r.best.kc == kcs[0] && r.best.mc == mcs[0],
              "every candidate took the same time: the best must be the first, kc %lld mc %lld, not kc %lld mc %lld",
              (long long)kcs[0], (long long)mcs[0], (long long)r.best.kc, (long long)r.best.mc);
    kn_k_gemm_config_set(4, -1, (kn_gemm_config){0, 0});
}

KN_TEST(lab06_speed, faster_than_a_naive_loop, .timeout = 120) {
    l6_check_product(256);
    L6_SKIP_UNDER_SANITIZERS();
    double x = l6_speedup(256);
    printf("lab06: 256^3: %.1fx the naive triple loop\n", x);
    cr_assert(x >= 2.0, "kiln's product with your units is only %.2fx the naive loop at 256^3 (want >= 2: packing, "
              "blocking and a register block should give 5-20x)", x);
}
