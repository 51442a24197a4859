/* test_hidden_schedule.c — lab 11 hidden tests of pp_schedule.c.
 *
 * Every list for p = 1..8 stages, m = 1..24 micro-batches (interleaved: v = 2..4, m a
 * multiple of p), every rank, against an oracle written the way Megatron-LM's loop runs:
 * warm-up forwards, then forward/backward pairs, then the cool-down; the model chunk of
 * the k-th forward (backward) from get_model_chunk_id, and its micro-batch the number of
 * forwards (backwards) that chunk has run so far. Hand-derived lists for the corner cases
 * (fewer micro-batches than the warm-up, m = p interleaved, three chunks). Then the staff's
 * simulator replays the lists: no schedule deadlocks, GPipe's and 1F1B's bubble is exactly
 * (p-1)/(m+p-1), interleaving's (p-1)/(vm+p-1) with chunks of 1/v the work, and 1F1B keeps
 * at most p - rank micro-batches alive where GPipe keeps m. */
#include <stdio.h>
#include <string.h>

#include "../../labs/lab11-parallel/tests/check.h"
#include "kn_test.h"
#include "kiln/pipeline.h"

enum { CAP = 2 * 32 * 4 + 8 };

static const char *text_of(const kn_pp_action *a, int n, int v) {
    static char buf[4096];
    int len = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && len < (int)sizeof buf - 16; i++) {
        len += snprintf(buf + len, sizeof buf - len, "%s%c%d", i ? " " : "", a[i].op == KN_PP_FWD ? 'F' : 'B', a[i].micro);
        if (v > 1) len += snprintf(buf + len, sizeof buf - len, ".%d", a[i].chunk);
    }
    return buf;
}

/* Megatron's order, step by step (forward_backward_pipelining_with_interleaving; v = 1 is
 * forward_backward_pipelining_without_interleaving, GPipe all warm-up). */
static int oracle(kn_pp_kind k, int p, int m, int v, int rank, kn_pp_action *out) {
    int total = m * v, warm;
    if (k == KN_PP_GPIPE) warm = total;
    else if (k == KN_PP_1F1B) warm = p - rank - 1;
    else warm = (p - rank - 1) * 2 + (v - 1) * p;
    if (warm > total) warm = total;
    int fdone[8] = {0}, bdone[8] = {0}, n = 0;
#define FWD(id)                                                       \
    do {                                                              \
        int c_ = (id) % (p * v) / p;                                  \
        out[n++] = (kn_pp_action){KN_PP_FWD, fdone[c_]++, c_};        \
    } while (0)
#define BWD(id)                                                       \
    do {                                                              \
        int c_ = v - 1 - (id) % (p * v) / p;                          \
        out[n++] = (kn_pp_action){KN_PP_BWD, bdone[c_]++, c_};        \
    } while (0)
    for (int i = 0; i < warm; i++) FWD(i);
    for (int i = 0; i < total - warm; i++) {
        FWD(warm + i);
        BWD(i);
    }
    for (int i = total - warm; i < total; i++) BWD(i);
#undef FWD
#undef BWD
    return n;
}

static void check_against_oracle(kn_pp_kind k, int p, int m, int v) {
    kn_pp_action got[CAP], want[CAP];
    for (int r = 0; r < p; r++) {
        for (int i = 0; i < CAP; i++) got[i] = (kn_pp_action){KN_PP_BWD, -5, -5};
        int n = -1, nw = oracle(k, p, m, v, r, want);
        kn_status st = kn_pp_schedule(k, p, m, v, r, got, CAP, &n);
        cr_assert(st == KN_OK, "%s p=%d m=%d v=%d rank %d: %s: %s", kn_pp_kind_name(k), p, m, v, r, kn_status_name(st),
                  kn_last_error());
        cr_assert_eq(n, nw, "%s p=%d m=%d v=%d rank %d: %d actions, expected %d", kn_pp_kind_name(k), p, m, v, r, n, nw);
        for (int i = 0; i < n; i++)
            if (got[i].op != want[i].op || got[i].micro != want[i].micro || got[i].chunk != want[i].chunk) {
                char g[4096];
                snprintf(g, sizeof g, "%s", text_of(got, n, v));
                cr_assert_fail("%s p=%d m=%d v=%d rank %d: action %d differs\n    got      %s\n    expected %s",
                               kn_pp_kind_name(k), p, m, v, r, i, g, text_of(want, nw, v));
            }
        cr_assert(got[n].micro == -5 && got[CAP - 1].micro == -5, "wrote past the list's end");
    }
}

KN_TEST(lab11_hidden_pp_schedule, gpipe_exhaustive) {
    for (int p = 1; p <= 8; p++)
        for (int m = 1; m <= 24; m++) check_against_oracle(KN_PP_GPIPE, p, m, 1);
}

KN_TEST(lab11_hidden_pp_schedule, one_f_one_b_exhaustive) {
    for (int p = 1; p <= 8; p++)
        for (int m = 1; m <= 24; m++) check_against_oracle(KN_PP_1F1B, p, m, 1);
}

KN_TEST(lab11_hidden_pp_schedule, interleaved_exhaustive) {
    for (int p = 1; p <= 8; p++)
        for (int m = p; m <= 4 * p && m * 4 <= 32 * 4; m += p)
            for (int v = 2; v <= 4; v++) check_against_oracle(KN_PP_INTERLEAVED, p, m, v);
}

#define HAND(k, p, m, v, rank, want)                                                                           \
    do {                                                                                                       \
        kn_pp_action a_[CAP];                                                                                  \
        int n_ = -1;                                                                                           \
        KN_ASSERT_OK(kn_pp_schedule(k, p, m, v, rank, a_, CAP, &n_));                                          \
        cr_assert_str_eq(text_of(a_, n_, v), want, "%s p=%d m=%d v=%d rank %d", kn_pp_kind_name(k), p, m, v, rank); \
    } while (0)

KN_TEST(lab11_hidden_pp_schedule, one_f_one_b_by_hand) {
    HAND(KN_PP_1F1B, 4, 2, 1, 0, "F0 F1 B0 B1");
    HAND(KN_PP_1F1B, 4, 2, 1, 1, "F0 F1 B0 B1");
    HAND(KN_PP_1F1B, 4, 2, 1, 2, "F0 F1 B0 B1");
    HAND(KN_PP_1F1B, 4, 2, 1, 3, "F0 B0 F1 B1");
    HAND(KN_PP_1F1B, 4, 1, 1, 0, "F0 B0");
    HAND(KN_PP_1F1B, 3, 5, 1, 0, "F0 F1 F2 B0 F3 B1 F4 B2 B3 B4");
    HAND(KN_PP_1F1B, 3, 5, 1, 1, "F0 F1 B0 F2 B1 F3 B2 F4 B3 B4");
    HAND(KN_PP_1F1B, 3, 5, 1, 2, "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4");
    HAND(KN_PP_GPIPE, 1, 2, 1, 0, "F0 F1 B0 B1");
}

KN_TEST(lab11_hidden_pp_schedule, interleaved_by_hand) {
    /* p = 4, m = 4, v = 2: ranks 0 and 1 warm up everything (10 and 8 >= 8) */
    HAND(KN_PP_INTERLEAVED, 4, 4, 2, 0, "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 B0.1 B1.1 B2.1 B3.1 B0.0 B1.0 B2.0 B3.0");
    HAND(KN_PP_INTERLEAVED, 4, 4, 2, 1, "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 B0.1 B1.1 B2.1 B3.1 B0.0 B1.0 B2.0 B3.0");
    HAND(KN_PP_INTERLEAVED, 4, 4, 2, 2, "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 B0.1 F3.1 B1.1 B2.1 B3.1 B0.0 B1.0 B2.0 B3.0");
    HAND(KN_PP_INTERLEAVED, 4, 4, 2, 3, "F0.0 F1.0 F2.0 F3.0 F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 F3.1 B3.1 B0.0 B1.0 B2.0 B3.0");
    /* three chunks */
    HAND(KN_PP_INTERLEAVED, 2, 2, 3, 0, "F0.0 F1.0 F0.1 F1.1 F0.2 F1.2 B0.2 B1.2 B0.1 B1.1 B0.0 B1.0");
    HAND(KN_PP_INTERLEAVED, 2, 2, 3, 1, "F0.0 F1.0 F0.1 F1.1 F0.2 B0.2 F1.2 B1.2 B0.1 B1.1 B0.0 B1.0");
    /* m = 3p: groups of p micro-batches go through the chunks in turn */
    HAND(KN_PP_INTERLEAVED, 2, 6, 2, 0,
         "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 F4.0 B2.1 F5.0 B3.1 F4.1 B2.0 F5.1 B3.0 "
         "B4.1 B5.1 B4.0 B5.0");
    /* one stage: groups of one micro-batch, each through the chunks in turn */
    HAND(KN_PP_INTERLEAVED, 1, 2, 2, 0, "F0.0 F0.1 B0.1 F1.0 B0.0 F1.1 B1.1 B1.0");
}

KN_TEST(lab11_hidden_pp_schedule, exact_capacity) {
    kn_pp_action a[40];
    int n = -1;
    for (int i = 0; i < 40; i++) a[i] = (kn_pp_action){KN_PP_FWD, -3, -3};
    KN_ASSERT_OK(kn_pp_schedule(KN_PP_INTERLEAVED, 2, 4, 2, 1, a, 16, &n));
    cr_assert_eq(n, 16);
    for (int i = 16; i < 40; i++) cr_assert(a[i].micro == -3, "wrote a[%d] past cap 16", i);
    KN_ASSERT_OK(kn_pp_schedule(KN_PP_1F1B, 3, 7, 1, 1, a, 14, &n));
    cr_assert_eq(n, 14);
}

KN_TEST(lab11_hidden_pp_schedule, argument_errors) {
    kn_pp_action a[CAP];
    int n = 77;
    KN_ASSERT_ERR(kn_pp_schedule(KN_PP_GPIPE, 3, 3, 1, 3, a, CAP, &n), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_pp_schedule(KN_PP_1F1B, 3, 3, 2, 0, a, CAP, &n), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_pp_schedule(KN_PP_INTERLEAVED, 3, 4, 2, 0, a, CAP, &n), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_pp_schedule(KN_PP_INTERLEAVED, 3, 3, 1, 0, a, CAP, &n), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_pp_schedule(KN_PP_INTERLEAVED, 3, 3, 2, 0, a, 11, &n), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_pp_schedule((kn_pp_kind)-1, 3, 3, 1, 0, a, CAP, &n), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_pp_schedule(KN_PP_1F1B, -2, 3, 1, 0, a, CAP, &n), KN_ERR_ARG);
    cr_assert_eq(n, 77, "*n written on an error");
}

/* ---------------------------------------------------------------- replayed */

KN_TEST(lab11_hidden_pp_schedule, simulated_bubbles_and_memory) {
    int live[8];
    for (int p = 1; p <= 8; p++)
        for (int m = 1; m <= 4 * p; m++) {
            for (int k = KN_PP_GPIPE; k <= KN_PP_1F1B; k++) {
                kn_pp_sim s = {.peak_live = live};
                kn_status st = kn_pp_simulate((kn_pp_kind)k, p, m, 1, 1.0, 2.0, &s);
                cr_assert(st == KN_OK, "%s p=%d m=%d: %s", kn_pp_kind_name(k), p, m, kn_last_error());
                cr_assert_float_eq(s.bubble, (double)(p - 1) / (m + p - 1), 1e-12, "%s p=%d m=%d: bubble %g",
                                   kn_pp_kind_name(k), p, m, s.bubble);
                for (int r = 0; r < p; r++) {
                    int want = k == KN_PP_GPIPE ? m : (p - r < m ? p - r : m);
                    cr_assert_eq(live[r], want, "%s p=%d m=%d: rank %d keeps %d micro-batches alive, expected %d",
                                 kn_pp_kind_name(k), p, m, r, live[r], want);
                }
            }
            if (m % p) continue;
            for (int v = 2; v <= 4; v++) {
                kn_pp_sim s = {.peak_live = live};
                kn_status st = kn_pp_simulate(KN_PP_INTERLEAVED, p, m, v, 1.0 / v, 2.0 / v, &s);
                cr_assert(st == KN_OK, "interleaved p=%d m=%d v=%d: %s", p, m, v, kn_last_error());
                cr_assert_float_eq(s.bubble, (double)(p - 1) / (v * m + p - 1), 1e-12,
                                   "interleaved p=%d m=%d v=%d: bubble %g", p, m, v, s.bubble);
                int w0 = 2 * (p - 1) + (v - 1) * p + 1;
                cr_assert_eq(live[0], w0 < m * v ? w0 : m * v, "interleaved p=%d m=%d v=%d: rank 0 keeps %d alive", p,
                             m, v, live[0]);
            }
        }
}

KN_TEST(lab11_hidden_pp_schedule, a_step_of_p4_m16_by_the_clock) {
    /* the target: p = 4, m = 16, 1F1B: 3/19 = 15.8% of the step idle; the last
     * rank's first backward starts as soon as its first forward ends */
    kn_pp_event ev[2 * 16 * 4];
    kn_pp_sim s = {.events = ev};
    KN_ASSERT_OK(kn_pp_simulate(KN_PP_1F1B, 4, 16, 1, 1.0, 2.0, &s));
    cr_assert_float_eq(s.makespan, 57.0, 1e-12);
    cr_assert_float_eq(s.bubble, 3.0 / 19.0, 1e-12);
    const kn_pp_event *last = ev + 3 * 32;
    cr_assert(last[0].a.op == KN_PP_FWD && last[0].start == 3.0 && last[1].a.op == KN_PP_BWD && last[1].start == 4.0,
              "rank 3 starts F0 at %g and its next action (op %d) at %g", last[0].start, (int)last[1].a.op, last[1].start);
    /* rank 0's last action is the step's: B15 ends at 57 */
    cr_assert(ev[31].a.op == KN_PP_BWD && ev[31].a.micro == 15 && ev[31].end == 57.0);
}
