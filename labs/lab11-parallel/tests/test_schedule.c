/* test_schedule.c — lab 11 public tests: the pipeline schedules (pp_schedule.c). Each rank's
 * list is compared as text ("F0 F1 B0 ...", "F0.1" = micro-batch 0 of chunk 1) with the
 * handout's examples, and the staff's simulator (kn_pp_simulate) replays your lists with
 * the dependencies between stages: GPipe's and 1F1B's bubble must be (p-1)/(m+p-1). */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "kn_test.h"
#include "kiln/pipeline.h"

/* Rank `rank`'s list as text; "" after a failure (the assertion says why). */
static const char *list_of(kn_pp_kind k, int p, int m, int v, int rank) {
    static char buf[2048];
    kn_pp_action a[256];
    int n = -1, len = 0;
    kn_status st = kn_pp_schedule(k, p, m, v, rank, a, 256, &n);
    cr_assert(st == KN_OK, "%s p=%d m=%d v=%d rank %d: %s: %s", kn_pp_kind_name(k), p, m, v, rank, kn_status_name(st),
              kn_last_error());
    cr_assert(n == 2 * m * v, "%s p=%d m=%d v=%d rank %d: %d actions, expected %d", kn_pp_kind_name(k), p, m, v, rank,
              n, 2 * m * v);
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        len += snprintf(buf + len, sizeof buf - len, "%s%c%d", i ? " " : "", a[i].op == KN_PP_FWD ? 'F' : 'B', a[i].micro);
        if (v > 1) len += snprintf(buf + len, sizeof buf - len, ".%d", a[i].chunk);
    }
    return buf;
}

/* The list, then each action against the expected one: the message names both lists. */
static void expect_list(kn_pp_kind k, int p, int m, int v, int rank, const char *want) {
    const char *got = list_of(k, p, m, v, rank);
    cr_assert(!strcmp(got, want), "%s p=%d m=%d v=%d rank %d:\n      got      %s\n      expected %s", kn_pp_kind_name(k),
              p, m, v, rank, got, want);
}
#define EXPECT_LIST(k, p, m, v, rank, want) expect_list(k, p, m, v, rank, want)

KN_TEST(lab11_pp_schedule, gpipe) {
    EXPECT_LIST(KN_PP_GPIPE, 4, 3, 1, 0, "F0 F1 F2 B0 B1 B2");
    EXPECT_LIST(KN_PP_GPIPE, 4, 3, 1, 3, "F0 F1 F2 B0 B1 B2");
}

KN_TEST(lab11_pp_schedule, one_f_one_b_p4_m8) {
    EXPECT_LIST(KN_PP_1F1B, 4, 8, 1, 0, "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
    EXPECT_LIST(KN_PP_1F1B, 4, 8, 1, 1, "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7");
    EXPECT_LIST(KN_PP_1F1B, 4, 8, 1, 3, "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
}

KN_TEST(lab11_pp_schedule, interleaved_p2_m4_v2) {
    EXPECT_LIST(KN_PP_INTERLEAVED, 2, 4, 2, 0,
                "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0");
    EXPECT_LIST(KN_PP_INTERLEAVED, 2, 4, 2, 1,
                "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0");
}

KN_TEST(lab11_pp_schedule, the_bubble_of_p4_m8) {
    int live[4];
    for (int k = KN_PP_GPIPE; k <= KN_PP_1F1B; k++) {
        kn_pp_sim s = {.peak_live = live};
        kn_status st = kn_pp_simulate((kn_pp_kind)k, 4, 8, 1, 1.0, 2.0, &s);
        cr_assert(st == KN_OK, "%s: %s: %s", kn_pp_kind_name(k), kn_status_name(st), kn_last_error());
        cr_assert_float_eq(s.bubble, 3.0 / 11.0, 1e-12, "%s: bubble %g, expected 3/11", kn_pp_kind_name(k), s.bubble);
        cr_assert_eq(live[0], k == KN_PP_GPIPE ? 8 : 4, "%s: rank 0 keeps %d micro-batches alive", kn_pp_kind_name(k),
                     live[0]);
    }
}

KN_TEST(lab11_pp_schedule, bad_arguments) {
    kn_pp_action a[64];
    int n;
    KN_ASSERT_ERR(kn_pp_schedule(KN_PP_1F1B, 2, 4, 1, 2, a, 64, &n), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_pp_schedule(KN_PP_INTERLEAVED, 2, 3, 2, 0, a, 64, &n), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_pp_schedule(KN_PP_1F1B, 2, 4, 1, 0, a, 7, &n), KN_ERR_ARG);
}
