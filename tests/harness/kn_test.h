/* kn_test.h — what every kiln test file includes: Criterion plus kiln's assertions.
 *
 * Tests are Criterion tests declared with KN_TEST(suite, name) instead of Test(...). The
 * difference: KN_TEST registers a .fini hook that records "suite::name" as having reached
 * its end. tests/harness/run-suite.sh counts a test as passed only when Criterion says ok
 * AND the record is there, so code under test that calls exit(0) or _exit(0) halfway
 * through a test cannot pass it (Criterion alone would count a clean exit as a pass).
 *
 * Assertions print the failing expression, the status name and kiln's error message, so a
 * skeleton's failure reads "returned KN_ERR_NOT_IMPLEMENTED: not implemented (lab01: ...)". */
#ifndef KN_TEST_H
#define KN_TEST_H

#include <criterion/criterion.h>
#include <math.h>

#include "kiln/base.h"
#include "kn_out.h"

void kn_test_init(void);
void kn_test_done(void);

/* kn_out.h under Criterion: a checker failure is a failed assertion of the test. */
static inline void kn_test_out_fail_(const char *msg) { cr_assert_fail("%s", msg); }
/* What kn_test_init calls first (both hooks: kn_test.c, tests/grader/kn_test_grade.c). */
static inline void kn_test_out_begin_(void) {
    kn_out_begin(criterion_current_test->category, criterion_current_test->name, kn_test_out_fail_);
}

/* .init caps the test's CPU time (Criterion's --timeout does not stop a test that spins
 * without sleeping; RLIMIT_CPU does, with SIGXCPU, which the runner reports as a crash). */
#define KN_TEST(suite, name, ...) \
    Test(suite, name, .init = kn_test_init, .fini = kn_test_done, ##__VA_ARGS__)

/* The call must succeed. */
#define KN_ASSERT_OK(expr)                                                              \
    do {                                                                                \
        kn_status kn_st_ = (expr);                                                      \
        cr_assert(kn_st_ == KN_OK, "%s\n    returned %s: %s", #expr,                    \
                  kn_status_name(kn_st_), kn_last_error());                            \
    } while (0)

/* The call must fail with `code` and leave a non-empty message. */
#define KN_ASSERT_ERR(expr, code)                                                       \
    do {                                                                                \
        kn_clear_error();                                                               \
        kn_status kn_st_ = (expr);                                                      \
        cr_assert(kn_st_ == (code), "%s\n    expected %s, returned %s: %s", #expr,      \
                  kn_status_name(code), kn_status_name(kn_st_), kn_last_error());      \
        cr_assert(kn_last_error()[0] != '\0', "%s\n    returned %s with no message", #expr, \
                  kn_status_name(kn_st_));                                             \
    } while (0)

/* |got - want| <= atol + rtol * |want|, NaN never passes. */
#define KN_ASSERT_CLOSE(got, want, atol, rtol)                                          \
    do {                                                                                \
        double kn_g_ = (double)(got), kn_w_ = (double)(want);                           \
        cr_assert(!isnan(kn_g_) && fabs(kn_g_ - kn_w_) <= (atol) + (rtol) * fabs(kn_w_), \
                  "%s = %.9g, expected %s = %.9g (atol %g, rtol %g)", #got, kn_g_,      \
                  #want, kn_w_, (double)(atol), (double)(rtol));                        \
    } while (0)

#endif /* KN_TEST_H */
