/* dist_test.h — the check macro of test-dist (test_comm.c, test_dp.c): each failed check
 * prints "not ok" with its rank; main sums the failures over the ranks at the end. */
#ifndef KILN_TESTS_DIST_TEST_H
#define KILN_TESTS_DIST_TEST_H

#include <stdio.h>

#include "kiln/dist.h"

extern int g_fail, g_checks, g_rank;

#define CHECK(cond, ...)                                                            \
    do {                                                                            \
        g_checks++;                                                                 \
        if (!(cond)) {                                                              \
            g_fail++;                                                               \
            fprintf(stderr, "rank %d: not ok: %s:%d: ", g_rank, __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                           \
            fprintf(stderr, " (%s)\n", kn_last_error());                           \
        }                                                                           \
    } while (0)

/* test_comm.c. The batch of step `step` (rows x T ids below vocab, targets likewise): the
 * same on every rank and in the one-process reference. */
void dist_test_batch(int32_t *x, int32_t *y, int rows, int T, int vocab, int step);
/* The largest |a - b| of a parameter of a and b (laid out alike), relative to that
 * parameter's largest |a| (as compare.py measures). */
double dist_test_param_diff(const kn_params *a, const kn_params *b);

/* test_dp.c: ZeRO-3 through the library against one process on every rank. */
void test_zero3(kn_comm *c);
/* test_matrix.c: every precision x strategy x mode x accumulation cell against one process
 * (`test-dist matrix`). */
void test_matrix(kn_comm *c);
/* test_tp.c: tensor parallelism (tp = the job's size) against one process (`test-dist tp`;
 * sp: with sequence parallelism, `test-dist tp sp`). */
void test_tp(kn_comm *c, bool sp);
/* test_pp.c: pipeline parallelism, every schedule against one process (`test-dist pp`). */
void test_pp(kn_comm *c);

#endif /* KILN_TESTS_DIST_TEST_H */
