/* kn_out.h — a test's outputs, for the grader's checker outside the student's process.
 *
 * Why: a test process linked with a student's units runs the student's code in its own
 * address space, so whatever it reports (Criterion's "ok", the completion record, the MPI
 * harness's counters) can in the end be forged by that code. Under the grader a test that
 * calls these functions is run twice (tests/grader/README.md, "The checker"):
 *   - the producer: the test binary linked with the student's units, with
 *     $KN_RESULTS_OUT=PREFIX (the grader passes it in the test's secret file). Every kn_out call
 *     appends the value (a name, a length, the bytes) to PREFIX.RANK (the MPI rank, 0
 *     outside MPI) and returns it unchanged. Its
 *     pass/fail is never read;
 *   - the checker: the SAME test compiled into the staff's binary (the staff's units, no
 *     student code), with $KN_RESULTS_IN=PREFIX naming a copy of the producer's files. Every kn_out
 *     call replaces the value the staff's code computed by the one the producer wrote under
 *     the same name, so the test's checks that follow run on the student's values, in a
 *     process the student's code never touched. A missing value (the producer crashed,
 *     exited, failed a check first or wrote nothing), another name or another length fails
 *     the test there. The checker's verdict is the test's.
 * Without either variable (make test, a test run by hand) kn_out does nothing.
 *
 * Rule for a test moved to the checker (tagged `checked` in the rubric): every value that
 * depends on the student's code and that the test checks must pass through kn_out before
 * it is checked; anything else the checker checks is the staff's own value. Values that
 * only the staff's code computes (the interpreter, expected sums) need not. */
#ifndef KN_OUT_H
#define KN_OUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kiln/base.h"

/* Start test suite::name in this process (the harness calls it before the test body):
 * the producer writes a header naming the test; the checker reads the producer's header
 * and remembers a mismatch. fail(msg) reports a checker failure (Criterion: cr_fail;
 * MPI: kn_mpi_test_fail); it may not return. */
void kn_out_begin(const char *suite, const char *name, void (*fail)(const char *msg));
/* End the test (the harness calls it after the body): in the checker, a test that read
 * no value of the producer is a staff error (a `checked` test that checks nothing of the
 * student's), and a mismatch found but never reported (the header named another test,
 * and no kn_out call followed) fails the test; either is written to PREFIX.unchecked.RANK
 * ("unchecked: ..." or "failed: ...") for the grader. */
void kn_out_end(void);
/* True in the checker: the student's values will come from the producer's file, so a test
 * may skip computing them (expensive runs) before kn_out fills them in. */
bool kn_out_checking(void);
/* The value at p (n bytes), named `what` (unique within the test, the same in both runs):
 * written (producer), replaced by the producer's (checker), or left alone. */
void kn_out(const char *what, void *p, size_t n);
/* A NUL-terminated text in a buffer of cap bytes, the same way. */
void kn_out_text(const char *what, char *s, size_t cap);

/* A status, and when it is an error, the message kn_last_error() held (the checker sets it
 * again, so a failed KN_ASSERT_OK there quotes the student's own message). */
static inline kn_status kn_out_status(const char *what, kn_status st) {
    int32_t v = (int32_t)st;
    kn_out(what, &v, sizeof v);
    if (v != (int32_t)KN_OK) {
        char m[512];
        snprintf(m, sizeof m, "%s", kn_out_checking() ? "" : kn_last_error());
        kn_out_text("kn_last_error", m, sizeof m);
        if (kn_out_checking()) kn_error((kn_status)v, "%s", m);
    }
    return (kn_status)v;
}
/* A status (kn_out_status) and then the text a function wrote to out (cap bytes). */
static inline kn_status kn_out_status_text(const char *what, kn_status st, char *out, size_t cap) {
    st = kn_out_status(what, st);
    if (out && cap) kn_out_text(what, out, cap);
    return st;
}
static inline int64_t kn_out_i64(const char *what, int64_t v) {
    kn_out(what, &v, sizeof v);
    return v;
}
static inline double kn_out_f64(const char *what, double v) {
    kn_out(what, &v, sizeof v);
    return v;
}

/* KN_OUT(lvalue): the variable itself, named by its text. */
#define KN_OUT(x) kn_out(#x, &(x), sizeof(x))
/* KN_OUT_N(p, n): n elements at p. */
#define KN_OUT_N(p, n) kn_out(#p, (p), (size_t)(n) * sizeof *(p))

#endif /* KN_OUT_H */
