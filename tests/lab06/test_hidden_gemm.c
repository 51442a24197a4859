/* test_hidden_gemm.c — lab 06 hidden tests: every partial block of the microkernel, the
 * packed layouts and their zero padding, the loop nest's corner cases (k = 0, k blocks that
 * do not divide k, one panel per group, threads), many shapes and transposes, the
 * search's order and its ties (planted times), and speed at 512^3. */
#include <stdio.h>
#include <unistd.h>

#include "../../labs/lab06-gemm/tests/check.h"

KN_TEST(lab06_hidden_micro, every_partial_block_touches_only_its_part) {
    const int64_t k = 19, ldc = 23;
    float *ap = l6_rand(k * KN_GEMM_MR, 7), *bp = l6_rand(k * KN_GEMM_NR, 8);
    for (int mr = 1; mr <= KN_GEMM_MR; mr++)
        for (int nr = 1; nr <= KN_GEMM_NR; nr++)
            for (int first = 0; first < 2; first++) {
                float c[KN_GEMM_MR * 23], want[KN_GEMM_MR * 23];
                for (int i = 0; i < KN_GEMM_MR * 23; i++) c[i] = want[i] = (float)(i % 11) - 5;
                l6_micro(ap, bp, k, c, ldc, mr, nr, first, KN_GEMM_MR);
                l6_micro_ref(ap, bp, k, want, ldc, mr, nr, first);
                for (int i = 0; i < KN_GEMM_MR * 23; i++)
                    cr_assert(fabsf(c[i] - want[i]) <= 1e-5f * (1 + fabsf(want[i])), "mr %d nr %d first %d: c[%d][%d] = %g, "
                              "want %g", mr, nr, first, i / 23, i % 23, c[i], want[i]);
            }
    free(ap), free(bp);
}

KN_TEST(lab06_hidden_micro, zero_depth_and_accumulation_order) {
    float ap[KN_GEMM_MR] = {0}, bp[KN_GEMM_NR] = {0};
    float c[KN_GEMM_MR * KN_GEMM_NR];
    for (int i = 0; i < KN_GEMM_MR * KN_GEMM_NR; i++) c[i] = 3;
    l6_micro(ap, bp, 0, c, KN_GEMM_NR, KN_GEMM_MR, KN_GEMM_NR, false, KN_GEMM_MR);
    for (int i = 0; i < KN_GEMM_MR * KN_GEMM_NR; i++) cr_assert_eq(c[i], 3.0f, "k = 0, not first: c unchanged");
    l6_micro(ap, bp, 0, c, KN_GEMM_NR, KN_GEMM_MR, KN_GEMM_NR, true, KN_GEMM_MR);
    for (int i = 0; i < KN_GEMM_MR * KN_GEMM_NR; i++) cr_assert_eq(c[i], 0.0f, "k = 0, first: c zero");
    /* 1e8 + 1 - 1e8 in float is 0 in increasing kk order, 1 in another: the order shows */
    const int64_t k = 3;
    float a3[3 * KN_GEMM_MR], b3[3 * KN_GEMM_NR];
    for (int kk = 0; kk < 3; kk++) {
        for (int r = 0; r < KN_GEMM_MR; r++) a3[kk * KN_GEMM_MR + r] = 1;
        for (int j = 0; j < KN_GEMM_NR; j++) b3[kk * KN_GEMM_NR + j] = kk == 0 ? 1e8f : kk == 1 ? 1 : -1e8f;
    }
    l6_micro(a3, b3, k, c, KN_GEMM_NR, KN_GEMM_MR, KN_GEMM_NR, true, KN_GEMM_MR);
    for (int i = 0; i < KN_GEMM_MR * KN_GEMM_NR; i++) cr_assert_eq(c[i], 0.0f, "sums in increasing kk order: got %g", c[i]);
}

KN_TEST(lab06_hidden_pack, layouts_and_zero_padding) {
    const int64_t m = 8, n = 19, k = 5;
    for (int t = 0; t < 2; t++) {
        float *a = l6_rand(m * k, 31), *b = l6_rand(k * n, 32);
        int64_t mp = (m + KN_GEMM_MR - 1) / KN_GEMM_MR, np = (n + KN_GEMM_NR - 1) / KN_GEMM_NR;
        /* one panel more than the product has, on each side: it must stay untouched */
        float *ap = malloc((size_t)((mp + 1) * KN_GEMM_MR * k) * 4), *bp = malloc((size_t)((np + 1) * KN_GEMM_NR * k) * 4);
        for (int64_t i = 0; i < (mp + 1) * KN_GEMM_MR * k; i++) ap[i] = NAN;
        for (int64_t i = 0; i < (np + 1) * KN_GEMM_NR * k; i++) bp[i] = NAN;
        kn_gemm_f32 x = {.a = a, .b = b, .ap = ap, .bp = bp, .m = m, .n = n, .k = k, .kc = 1, .mcp = 1, .ta = t, .tb = t};
        kn_gemm_pack_a_f32(&x, 1, mp); /* only the second panel */
        kn_gemm_pack_b_f32(&x, 0, np);
        kn_out("the packed a", ap, (size_t)((mp + 1) * KN_GEMM_MR * k) * 4);
        kn_out("the packed b", bp, (size_t)((np + 1) * KN_GEMM_NR * k) * 4);
        for (int64_t i = 0; i < KN_GEMM_MR * k; i++) cr_assert(isnan(ap[i]), "panel 0 was not asked for");
        for (int64_t i = mp * KN_GEMM_MR * k; i < (mp + 1) * KN_GEMM_MR * k; i++)
            cr_assert(isnan(ap[i]), "a: element %lld of panel %lld, past the panels asked for, was written", (long long)i,
                      (long long)mp);
        for (int64_t i = np * KN_GEMM_NR * k; i < (np + 1) * KN_GEMM_NR * k; i++)
            cr_assert(isnan(bp[i]), "b: element %lld of panel %lld, past the panels asked for, was written", (long long)i,
                      (long long)np);
        for (int64_t kk = 0; kk < k; kk++)
            for (int r = 0; r < KN_GEMM_MR; r++) {
                int64_t i = KN_GEMM_MR + r;
                float want = i < m ? (t ? a[kk * m + i] : a[i * k + kk]) : 0.0f;
                cr_assert_eq(ap[(1 * k + kk) * KN_GEMM_MR + r], want, "ta %d: a panel 1, kk %lld, row %d", t, (long long)kk, r);
            }
        for (int64_t jp = 0; jp < np; jp++)
            for (int64_t kk = 0; kk < k; kk++)
                for (int j = 0; j < KN_GEMM_NR; j++) {
                    int64_t col = jp * KN_GEMM_NR + j;
                    float want = col < n ? (t ? b[col * k + kk] : b[kk * n + col]) : 0.0f;
                    cr_assert_eq(bp[(jp * k + kk) * KN_GEMM_NR + j], want, "tb %d: b panel %lld, kk %lld, col %d", t,
                                 (long long)jp, (long long)kk, j);
                }
        free(a), free(b), free(ap), free(bp);
    }
}

/* kn_gemm_rows_f32 directly: a part of the row panels, blockings that do not divide. */
KN_TEST(lab06_hidden_blocked, the_loop_nest_over_a_range_of_panels) {
    const int64_t m = 20, n = 35, k = 50;
    float *a = l6_rand(m * k, 41), *b = l6_rand(k * n, 42);
    int64_t mp = (m + KN_GEMM_MR - 1) / KN_GEMM_MR, np = (n + KN_GEMM_NR - 1) / KN_GEMM_NR;
    float *ap = malloc((size_t)(mp * KN_GEMM_MR * k) * 4), *bp = malloc((size_t)(np * KN_GEMM_NR * k) * 4);
    float *c = malloc((size_t)(m * n) * 4);
    double *ref = l6_ref(a, b, m, n, k, false, false);
    const int64_t kcs[] = {7, 50, 64, 1}, mcps[] = {1, 2, 100, 3};
    for (int v = 0; v < 4; v++) {
        for (int64_t i = 0; i < m * n; i++) c[i] = NAN;
        kn_gemm_f32 x = {.a = a, .b = b, .ap = ap, .bp = bp, .c = c, .m = m, .n = n, .k = k, .kc = kcs[v], .mcp = mcps[v]};
        kn_gemm_pack_b_f32(&x, 0, np);
        kn_gemm_rows_f32(&x, 1, 3); /* rows 6..17 only */
        kn_out("kn_gemm_rows_f32's c", c, (size_t)(m * n) * 4);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                bool mine = i >= 6 && i < 18;
                if (!mine) cr_assert(isnan(c[i * n + j]), "row %lld is outside panels 1..2 but was written", (long long)i);
                else
                    cr_assert(fabs(c[i * n + j] - ref[i * n + j]) <= 1e-4 * (1 + fabs(ref[i * n + j])),
                              "kc %lld mcp %lld: c[%lld][%lld] = %g, want %g", (long long)kcs[v], (long long)mcps[v],
                              (long long)i, (long long)j, c[i * n + j], ref[i * n + j]);
            }
    }
    kn_gemm_f32 z = {.a = a, .b = b, .ap = ap, .bp = bp, .c = c, .m = m, .n = n, .k = 0, .kc = 4, .mcp = 1};
    for (int64_t i = 0; i < m * n; i++) c[i] = NAN;
    kn_gemm_pack_b_f32(&z, 0, np);
    kn_gemm_rows_f32(&z, 0, mp);
    kn_out("kn_gemm_rows_f32's c", c, (size_t)(m * n) * 4);
    for (int64_t i = 0; i < m * n; i++) cr_assert_eq(c[i], 0.0f, "k = 0: c is all zeros (got %g at %lld)", c[i], (long long)i);
    free(a), free(b), free(ap), free(bp), free(c), free(ref);
}

KN_TEST(lab06_hidden_blocked, many_shapes_and_transposes, .timeout = 120) {
    const int64_t sides[] = {1, 2, 5, 6, 7, 16, 17, 31, 97, 130};
    unsigned seed = 100;
    for (int i = 0; i < 10; i++)
        for (int j = 0; j < 10; j += 3)
            for (int q = 0; q < 10; q += 4) {
                int64_t m = sides[i], n = sides[(j + i) % 10], k = sides[q];
                bool ta = (i + j) & 1, tb = (i + q) & 1;
                float *a = l6_rand(m * k, seed++), *b = l6_rand(k * n, seed++);
                float *c = l6_product(a, b, m, n, k, ta, tb);
                double *ref = l6_ref(a, b, m, n, k, ta, tb);
                cr_assert(l6_err(c, ref, m * n, k) <= 1, "%lld x %lld x %lld (ta %d tb %d)", (long long)m, (long long)n,
                          (long long)k, ta, tb);
                free(a), free(b), free(c), free(ref);
            }
    /* large enough to split over threads */
    float *a = l6_rand(300 * 200, 1), *b = l6_rand(200 * 260, 2);
    float *c = l6_product(a, b, 300, 260, 200, false, true);
    double *ref = l6_ref(a, b, 300, 260, 200, false, true);
    cr_assert(l6_err(c, ref, 300 * 260, 200) <= 1);
    free(a), free(b), free(c), free(ref);
}

KN_TEST(lab06_hidden_tune, candidates_in_order_and_the_minimum, .timeout = 120) {
    char dir[] = "/tmp/kiln-l6h-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    kn_gemm_tune_result r;
    KN_ASSERT_OK(l6_tune(32, 40, 24, dir, true, &r));
    static const int64_t kcs[] = KN_GEMM_KCS, mcs[] = KN_GEMM_MCS;
    cr_assert_eq(r.ntrials, 25);
    for (int i = 0; i < 25; i++) {
        cr_assert(r.trials[i].cfg.kc == kcs[i / 5] && r.trials[i].cfg.mc == mcs[i % 5], "trial %d: kc %lld mc %lld", i,
                  (long long)r.trials[i].cfg.kc, (long long)r.trials[i].cfg.mc);
        cr_assert(r.trials[i].seconds > 0 && r.trials[i].seconds < 10, "trial %d took %g s", i, r.trials[i].seconds);
    }
    int first_min = 0;
    for (int i = 1; i < 25; i++)
        if (r.trials[i].seconds < r.trials[first_min].seconds) first_min = i;
    cr_assert(r.best.kc == r.trials[first_min].cfg.kc && r.best.mc == r.trials[first_min].cfg.mc,
              "best: the first of the fastest trials (%d)", first_min);
    kn_k_gemm_config_set(4, -1, (kn_gemm_config){0, 0});
}

/* Planted times: the search times this product (its m, n, k, not another shape), keeps the
 * first of equal times wherever they fall, and keeps a later, strictly faster one. */
KN_TEST(lab06_hidden_tune, planted_times_shape_ties_and_the_last) {
    static const int64_t kcs[] = KN_GEMM_KCS, mcs[] = KN_GEMM_MCS;
    l6_planted p;
    kn_gemm_tune_result r;
    for (int i = 0; i < 25; i++) p.t[i] = 10.0 - 0.25 * i; /* strictly decreasing: the last wins */
    KN_ASSERT_OK(l6_tune_planted(24, 56, 40, &p, &r));
    cr_assert(p.calls == 25 && p.bad == 0, "%d of %d kn_gemm_time calls had a shape other than 24 x 56 x 40", p.bad,
              p.calls);
    cr_assert(r.best.kc == kcs[4] && r.best.mc == mcs[4], "decreasing times: best kc %lld mc %lld, want the last",
              (long long)r.best.kc, (long long)r.best.mc);
    for (int i = 0; i < 25; i++) cr_assert(r.trials[i].seconds == p.t[i], "trial %d: %g s, planted %g", i, r.trials[i].seconds, p.t[i]);
    for (int i = 0; i < 25; i++) p.t[i] = 5.0;
    p.t[0] = p.t[1] = 0.5; /* a tie at the very front */
    KN_ASSERT_OK(l6_tune_planted(24, 56, 40, &p, &r));
    cr_assert(r.best.kc == kcs[0] && r.best.mc == mcs[0], "tie of trials 0 and 1: best kc %lld mc %lld", (long long)r.best.kc,
              (long long)r.best.mc);
    for (int i = 0; i < 25; i++) p.t[i] = 5.0 + i;
    p.t[19] = p.t[20] = 0.5; /* across a kc boundary */
    KN_ASSERT_OK(l6_tune_planted(24, 56, 40, &p, &r));
    cr_assert(r.best.kc == kcs[3] && r.best.mc == mcs[4], "tie of trials 19 and 20: best kc %lld mc %lld",
              (long long)r.best.kc, (long long)r.best.mc);
    kn_k_gemm_config_set(4, -1, (kn_gemm_config){0, 0});
}

KN_TEST(lab06_hidden_speed, faster_than_a_naive_loop_at_512, .timeout = 180) {
    l6_check_product(512);
    L6_SKIP_UNDER_SANITIZERS();
    double x = l6_speedup(512);
    printf("lab06: 512^3: %.1fx the naive triple loop\n", x);
    cr_assert(x >= 3.0, "only %.2fx the naive loop at 512^3 (want >= 3)", x);
}
