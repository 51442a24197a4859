/* kn_mpi_test.h — tests that run as MPI ranks (lab 10): KN_MPI_TEST instead of KN_TEST.
 *
 * Criterion cannot run them: it forks a process per test, and an MPI rank must not fork.
 * So a lab 10 test program is plain C with its own main (kn_mpi_test.c) in two modes:
 *   - launched by hand or by tests/harness/run-suite.sh (not under mpiexec), it starts
 *     itself under `$MPIEXEC -n 2` and `-n 4` (KN_MPI_TEST_RANKS changes the list) and
 *     writes the TAP file and the KN_TEST_DONE record run-suite.sh reads, like Criterion;
 *   - under mpiexec (--rank-mode FILE), every rank runs every test in order on a world
 *     communicator; after each test the ranks add up their failures, and rank 0 writes
 *     one result line.
 * A test passes when it passes on every rank of every rank count. A job that dies (a
 * collective that timed out: KILN_COMM_TIMEOUT, 10 s unless set, ends it with a message
 * naming the operation) fails its unreported tests as "timed out", which the runner counts
 * as abnormal.
 *
 * Checks never return early: every rank must reach the same collectives whatever failed,
 * or the next collective waits for a rank that left. A check that fails records the first
 * message of the test and prints every failure on stderr with the rank. */
#ifndef KN_MPI_TEST_H
#define KN_MPI_TEST_H

#include <math.h>
#include <stdio.h>

#include "kiln/dist.h"

typedef void (*kn_mpi_test_fn)(kn_comm *c);
/* ranks: the rank count the test is graded on (0: the default, 2); relay: the test runs its
 * units through the relay (KN_MPI_RELAY_TEST). */
void kn_mpi_test_register(const char *suite, const char *name, kn_mpi_test_fn fn, int ranks, int relay);
/* Record a failure of the running test (printf-style message). */
void kn_mpi_test_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* KN_MPI_TEST(suite, name) or KN_MPI_TEST(suite, name, N): N is the rank count the test
 * is graded on (2 unless given); the rubric's mpi=N tag must say the same (make
 * rubric-check), and under the grader a test run on another count fails saying so.
 * `make test` runs every test on 2 and 4 ranks whatever N is. */
#define KN_MPI_TEST(suite, name, ...)                                              \
    static void suite##__##name(kn_comm *c);                                       \
    __attribute__((constructor)) static void suite##__##name##__reg(void) {        \
        kn_mpi_test_register(#suite, #name, suite##__##name, (__VA_ARGS__ + 0), 0); \
    }                                                                              \
    static void suite##__##name(kn_comm *c)

/* KN_MPI_RELAY_TEST(suite, name[, N]): the same, but the lab's units run in a process of
 * their own, the relay's worker, and every message they send passes through this process,
 * which counts it (kn_mpi_relay.c says why and how): the counts of kn_mpi_test_sent() are
 * then out of the units' reach. The test must call every unit through a relay-aware
 * wrapper (kn_mpi_relay_call; lab 10's outputs.h); the rubric tags such a test `relay`
 * (make rubric-check), and the grader then runs the test's body in the staff's build with
 * the student's build as the worker. `make test` runs it the same way, the test program
 * being both. */
#define KN_MPI_RELAY_TEST(suite, name, ...)                                        \
    static void suite##__##name(kn_comm *c);                                       \
    __attribute__((constructor)) static void suite##__##name##__reg(void) {        \
        kn_mpi_test_register(#suite, #name, suite##__##name, (__VA_ARGS__ + 0), 1); \
    }                                                                              \
    static void suite##__##name(kn_comm *c)

/* A unit call forwarded to the relay's worker: `name` names a function the worker
 * registered (kn_mpi_relay_unit), a[] are its integer arguments, buf[i] (NULL allowed) len[i]
 * bytes that travel to the worker and come back as the unit left them. Returns the unit's
 * status, with its error message set again here. c is the communicator the unit runs on:
 * the worker gets one whose every message goes through this process. */
typedef kn_status (*kn_mpi_unit_fn)(kn_comm *c, const int64_t *a, void **buf, const int64_t *len);
kn_status kn_mpi_relay_call(const char *name, kn_comm *c, const int64_t a[4], void *buf[2], const int64_t len[2]);
/* Register a unit the worker runs (a constructor of the wrapper's header; names up to 31 bytes). */
void kn_mpi_relay_unit(const char *name, kn_mpi_unit_fn fn);
/* True while a KN_MPI_RELAY_TEST runs with a worker: unit calls must go through
 * kn_mpi_relay_call (this process may hold the staff's units, not the ones under test). */
bool kn_mpi_relay_active(void);

/* The condition must hold. */
#define KN_MCHECK(cond, ...)                                                       \
    do {                                                                           \
        if (!(cond)) kn_mpi_test_fail(__FILE__, __LINE__, __VA_ARGS__);            \
    } while (0)

/* The call must succeed; evaluates to true when it did. */
#define KN_MOK(expr) kn_mpi_test_ok_((expr), #expr, __FILE__, __LINE__)
/* The call must fail with `code` and leave a message. */
#define KN_MERR(expr, code)                                                        \
    do {                                                                           \
        kn_clear_error();                                                          \
        kn_status kn_st_ = (expr);                                                 \
        if (kn_st_ != (code) || !kn_last_error()[0])                               \
            kn_mpi_test_fail(__FILE__, __LINE__, "%s\n    expected %s, returned %s: %s", #expr, \
                             kn_status_name(code), kn_status_name(kn_st_), kn_last_error()); \
    } while (0)

/* What this rank asked MPI to do, counted by the harness (kn_mpi_test.c wraps MPI_Isend and
 * the nonblocking collectives through MPI's profiling interface): its counters are the
 * harness's, not the communicator's (c->seq, which any unit that holds the communicator can
 * change). In a KN_MPI_RELAY_TEST they live in the relay, a process the units never run
 * in, which carries out every message they send; in a KN_MPI_TEST they share the units'
 * process, which could rewrite them. A test takes one before and one after the call it
 * checks. Without MPI every field stays 0. */
typedef struct {
    int64_t messages;    /* MPI_Isend calls */
    int64_t bytes;       /* their bytes in all */
    int64_t largest;     /* the largest one since kn_mpi_test_sent_mark(), in bytes */
    int64_t collectives; /* MPI_Iallreduce, _Ireduce_scatter, _Iallgatherv, _Ibcast, _Ibarrier */
} kn_mpi_sent;
kn_mpi_sent kn_mpi_test_sent(void);
/* Start the count of `largest` again (the other counts only grow: take differences). */
void kn_mpi_test_sent_mark(void);

static inline int kn_mpi_test_ok_(kn_status st, const char *expr, const char *file, int line) {
    if (st == KN_OK) return 1;
    kn_mpi_test_fail(file, line, "%s\n    returned %s: %s", expr, kn_status_name(st), kn_last_error());
    return 0;
}

#endif /* KN_MPI_TEST_H */
