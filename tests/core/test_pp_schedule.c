/* test_pp_schedule.c — lab 11's schedule unit (kn_pp_schedule, kiln/pipeline.h) against its
 * contract and hand-written lists, and the staff simulator (kn_pp_simulate) replaying them:
 * GPipe and 1F1B idle exactly (p-1)/(m+p-1) of a step, interleaving idles less, 1F1B keeps
 * at most p - rank micro-batches alive where GPipe keeps m, no schedule deadlocks, and a
 * list that would hang real ranks is reported as a deadlock. */
#include <stdio.h>
#include <string.h>

#include "kn_test.h"
#include "kiln/pipeline.h"

/* A rank's list as text: "F0 F1 B0 ..." (v = 1) or "F0.1 ..." (micro-batch.chunk). */
static const char *list_text(kn_pp_kind k, int p, int m, int v, int rank) {
    static char buf[4096];
    kn_pp_action a[512];
    int n = -1, len = 0;
    KN_ASSERT_OK(kn_pp_schedule(k, p, m, v, rank, a, 512, &n));
    cr_assert_eq(n, 2 * m * v);
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        len += snprintf(buf + len, sizeof buf - len, "%s%c%d", i ? " " : "", a[i].op == KN_PP_FWD ? 'F' : 'B', a[i].micro);
        if (v > 1) len += snprintf(buf + len, sizeof buf - len, ".%d", a[i].chunk);
        else cr_assert_eq(a[i].chunk, 0);
    }
    return buf;
}

#define ASSERT_LIST(k, p, m, v, rank, want) \
    cr_assert_str_eq(list_text(k, p, m, v, rank), want, "%s p=%d m=%d v=%d rank %d", kn_pp_kind_name(k), p, m, v, rank)

KN_TEST(pp_schedule, gpipe_and_1f1b_lists) {
    ASSERT_LIST(KN_PP_GPIPE, 2, 3, 1, 1, "F0 F1 F2 B0 B1 B2");
    ASSERT_LIST(KN_PP_1F1B, 4, 8, 1, 0, "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
    ASSERT_LIST(KN_PP_1F1B, 4, 8, 1, 2, "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
    ASSERT_LIST(KN_PP_1F1B, 4, 8, 1, 3, "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
    ASSERT_LIST(KN_PP_1F1B, 4, 2, 1, 0, "F0 F1 B0 B1"); /* fewer micro-batches than warm-up */
    ASSERT_LIST(KN_PP_1F1B, 1, 3, 1, 0, "F0 B0 F1 B1 F2 B2");
}

KN_TEST(pp_schedule, interleaved_lists) {
    /* p = 2, m = 4, v = 2: rank 0 warms up 2 + 2 = 4 forwards, rank 1 two */
    ASSERT_LIST(KN_PP_INTERLEAVED, 2, 4, 2, 0,
                "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0");
    ASSERT_LIST(KN_PP_INTERLEAVED, 2, 4, 2, 1,
                "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0");
    /* m = p: rank 0's warm-up (2 + 2) covers all 4 forwards */
    ASSERT_LIST(KN_PP_INTERLEAVED, 2, 2, 2, 0, "F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0");
}

KN_TEST(pp_schedule, bad_arguments) {
    kn_pp_action a[64];
    int n;
    KN_ASSERT_ERR(kn_pp_schedule(KN_PP_1F1B, 0, 4, 1, 0, a, 64, &n), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_pp_schedule(KN_PP_1F1B, 2, 0, 1, 0, a, 64, &n), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_pp_schedule(KN_PP_1F1B, 2, 4, 0, 0, a, 64, &n), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_pp_schedule(KN_PP_1F1B, 2, 4, 1, 2, a, 64, &n), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_pp_schedule(KN_PP_1F1B, 2, 4, 1, -1, a, 64, &n), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_pp_schedule(KN_PP_GPIPE, 2, 4, 2, 0, a, 64, &n), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_pp_schedule(KN_PP_INTERLEAVED, 2, 4, 1, 0, a, 64, &n), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_pp_schedule(KN_PP_INTERLEAVED, 2, 5, 2, 0, a, 64, &n), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_pp_schedule(KN_PP_1F1B, 2, 4, 1, 0, a, 7, &n), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_pp_schedule(KN_PP_1F1B, 2, 4, 1, 0, NULL, 64, &n), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_pp_schedule(KN_PP_1F1B, 2, 4, 1, 0, a, 64, NULL), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_pp_schedule(KN_PP_KIND_COUNT, 2, 4, 1, 0, a, 64, &n), KN_ERR_ARG);
    KN_ASSERT_OK(kn_pp_schedule(KN_PP_1F1B, 2, 4, 1, 0, a, 8, &n));
}

KN_TEST(pp_schedule, kind_names) {
    kn_pp_kind k;
    for (int i = 0; i < KN_PP_KIND_COUNT; i++) {
        KN_ASSERT_OK(kn_pp_kind_parse(kn_pp_kind_name((kn_pp_kind)i), &k));
        cr_assert_eq((int)k, i);
    }
    cr_assert_str_eq(kn_pp_kind_name(KN_PP_1F1B), "1f1b");
    KN_ASSERT_ERR(kn_pp_kind_parse("1F1B", &k), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "gpipe, 1f1b or interleaved"), "%s", kn_last_error());
    KN_ASSERT_ERR(kn_pp_kind_parse(NULL, &k), KN_ERR_ARG);
}

/* ---------------------------------------------------------------- the simulator */

KN_TEST(pp_simulate, gpipe_and_1f1b_bubble_is_the_formula) {
    double busy[8];
    int live[8];
    for (int p = 1; p <= 8; p++)
        for (int m = 1; m <= 4 * p; m++)
            for (int k = KN_PP_GPIPE; k <= KN_PP_1F1B; k++) {
                kn_pp_sim s = {.busy = busy, .peak_live = live};
                KN_ASSERT_OK(kn_pp_simulate((kn_pp_kind)k, p, m, 1, 1.0, 2.0, &s));
                cr_assert_float_eq(s.makespan, 3.0 * (m + p - 1), 1e-9, "%s p=%d m=%d", kn_pp_kind_name(k), p, m);
                cr_assert_float_eq(s.bubble, (double)(p - 1) / (m + p - 1), 1e-12, "%s p=%d m=%d: bubble %g",
                                   kn_pp_kind_name(k), p, m, s.bubble);
                for (int r = 0; r < p; r++) {
                    cr_assert_float_eq(busy[r], 3.0 * m, 1e-9);
                    int want = k == KN_PP_GPIPE ? m : (p - r < m ? p - r : m);
                    cr_assert_eq(live[r], want, "%s p=%d m=%d rank %d keeps %d alive", kn_pp_kind_name(k), p, m, r,
                                 live[r]);
                }
            }
}

KN_TEST(pp_simulate, interleaving_shrinks_the_bubble) {
    for (int p = 2; p <= 8; p++)
        for (int m = p; m <= 4 * p; m += p) {
            kn_pp_sim one = {0};
            KN_ASSERT_OK(kn_pp_simulate(KN_PP_1F1B, p, m, 1, 1.0, 2.0, &one));
            double prev = one.bubble;
            for (int v = 2; v <= 4; v++) {
                kn_pp_sim s = {0};
                /* a chunk is 1/v of a stage: the same step's work */
                KN_ASSERT_OK(kn_pp_simulate(KN_PP_INTERLEAVED, p, m, v, 1.0 / v, 2.0 / v, &s));
                /* v chunks of 1/v the work: the fill and drain shrink by v */
                cr_assert_float_eq(s.bubble, (double)(p - 1) / (v * m + p - 1), 1e-12, "p=%d m=%d v=%d: %g", p, m, v,
                                   s.bubble);
                cr_assert_lt(s.bubble, one.bubble, "p=%d m=%d v=%d: %g >= 1F1B's %g", p, m, v, s.bubble, one.bubble);
                cr_assert(v > 2 || s.bubble < prev, "p=%d m=%d v=%d", p, m, v);
                prev = s.bubble;
            }
        }
}

KN_TEST(pp_simulate, no_schedule_deadlocks) {
    kn_pp_event ev[2 * 32 * 4 * 8];
    for (int p = 1; p <= 8; p++)
        for (int m = 1; m <= 4 * p; m++)
            for (int k = 0; k < KN_PP_KIND_COUNT; k++)
                for (int v = (k == KN_PP_INTERLEAVED ? 2 : 1); v <= (k == KN_PP_INTERLEAVED ? 4 : 1); v++) {
                    if (k == KN_PP_INTERLEAVED && m % p) continue;
                    kn_pp_sim s = {.events = ev};
                    kn_status st = kn_pp_simulate((kn_pp_kind)k, p, m, v, 1.0, 2.0, &s);
                    cr_assert(st == KN_OK, "%s p=%d m=%d v=%d: %s", kn_pp_kind_name(k), p, m, v, kn_last_error());
                    cr_assert_eq(s.nevents, 2 * m * v * p);
                    /* each rank's actions never overlap */
                    for (int e = 1; e < s.nevents; e++)
                        if (ev[e].rank == ev[e - 1].rank) cr_assert_geq(ev[e].start, ev[e - 1].end - 1e-12);
                }
}

KN_TEST(pp_simulate, a_hanging_list_is_a_deadlock) {
    /* p = 2, m = 1: rank 0 wants its backward before its forward */
    kn_pp_action r0[2] = {{KN_PP_BWD, 0, 0}, {KN_PP_FWD, 0, 0}}, r1[2] = {{KN_PP_FWD, 0, 0}, {KN_PP_BWD, 0, 0}};
    const kn_pp_action *lists[2] = {r0, r1};
    int counts[2] = {2, 2};
    kn_pp_sim s = {0};
    KN_ASSERT_ERR(kn_pp_simulate_lists(2, 1, 1, lists, counts, 1, 2, &s), KN_ERR_UNSUPPORTED);
    cr_assert(strstr(kn_last_error(), "deadlock") && strstr(kn_last_error(), "rank 0 waits at B0"), "%s",
              kn_last_error());
    /* a list that runs one action twice or misses one is refused */
    kn_pp_action twice[2] = {{KN_PP_FWD, 0, 0}, {KN_PP_FWD, 0, 0}};
    lists[0] = twice;
    KN_ASSERT_ERR(kn_pp_simulate_lists(2, 1, 1, lists, counts, 1, 2, &s), KN_ERR_ARG);
    counts[0] = 1;
    lists[0] = r1;
    KN_ASSERT_ERR(kn_pp_simulate_lists(2, 1, 1, lists, counts, 1, 2, &s), KN_ERR_ARG);
}
