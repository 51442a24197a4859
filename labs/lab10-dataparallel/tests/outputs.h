/* outputs.h — lab 10's units as its tests call them: each call's results pass through
 * kn_out (tests/harness/kn_out.h) before any check reads them.
 *
 * Why: under the grader a test runs twice. Your units run in the first run, which only
 * writes these results; the second run is the staff's build of the same test (no code of
 * yours in it), where each wrapper below hands back YOUR run's results in place of the
 * staff's, and the checks that follow decide the grade there. Under `make test-lab10` the
 * wrappers just call your units.
 *
 * The ring's tests (KN_MPI_RELAY_TEST) go one step further: there your kn_ring_all_reduce
 * runs in a process of its own (the relay's worker, tests/harness/mpi/kn_mpi_relay.c),
 * and every message it sends passes through the test's process, which counts it: the
 * message counts the tests check are taken where your code cannot reach them. Only
 * kn_comm_isend / kn_comm_irecv / kn_comm_test / kn_comm_wait (and the library's
 * all-reduce, broadcast and barrier, which the tests then count as collectives) work there. */
#ifndef LAB10_OUTPUTS_H
#define LAB10_OUTPUTS_H

#include <stdlib.h>
#include <string.h>

#include "kn_out.h"
#include "mpi/kn_mpi_test.h"

/* A unit this header cannot forward to the relay's worker, called from a relay test: the
 * test's mistake (the relay may hold the staff's units), reported as a failure. */
static inline bool out_not_in_relay(const char *unit) {
    if (!kn_mpi_relay_active()) return false;
    KN_MCHECK(0, "test harness: %s called in a KN_MPI_RELAY_TEST (outputs.h forwards only kn_ring_all_reduce)", unit);
    return true;
}

static inline kn_status out_ring_chunk(int64_t n, int parts, int i, int64_t *lo, int64_t *hi) {
    if (out_not_in_relay("kn_ring_chunk")) return KN_ERR_INTERNAL;
    kn_status st = kn_out_status("kn_ring_chunk", kn_ring_chunk(n, parts, i, lo, hi));
    if (lo) kn_out("lo", lo, sizeof *lo);
    if (hi) kn_out("hi", hi, sizeof *hi);
    return st;
}

static inline kn_status out_ring_send_chunk(int rank, int size, int step, int *chunk) {
    if (out_not_in_relay("kn_ring_send_chunk")) return KN_ERR_INTERNAL;
    kn_status st = kn_out_status("kn_ring_send_chunk", kn_ring_send_chunk(rank, size, step, chunk));
    if (chunk) kn_out("chunk", chunk, sizeof *chunk);
    return st;
}

/* The worker's side of kn_ring_all_reduce (kn_mpi_relay.c): a[] = {count, dtype, guard,
 * scratch_n}; buf[0] holds guard elements, the buffer, guard elements; buf[1] the scratch
 * the test gave (scratch_n elements), run here in a scratch of at least the largest chunk. */
static kn_status out_relay_ring_all_reduce(kn_comm *c, const int64_t *a, void **b, const int64_t *len) {
    int64_t count = a[0], guard = a[2];
    kn_dtype dt = (kn_dtype)a[1];
    size_t es = kn_dtype_size(dt);
    char *buf = b[0] ? (char *)b[0] + guard * (int64_t)es : NULL;
    void *s = b[1];
    int64_t most = c && c->size > 0 && count > 0 ? (count / c->size + 1) * (int64_t)es : 0;
    if (s && most > len[1]) { /* the test gave no scratch, or a smaller one: room for a chunk */
        if (!(s = calloc(1, (size_t)most))) return kn_error(KN_ERR_OOM, "relay worker: out of memory");
        memcpy(s, b[1], (size_t)len[1]);
    }
    kn_status st = kn_ring_all_reduce(c, buf, count, dt, s);
    if (s != b[1]) {
        memcpy(b[1], s, (size_t)len[1]);
        free(s);
    }
    return st;
}
__attribute__((constructor)) static void out_relay_register(void) {
    kn_mpi_relay_unit("kn_ring_all_reduce", out_relay_ring_all_reduce);
}

/* The all-reduce (in a relay test, in the relay's worker: its messages counted here), then
 * (after a success) the buffer (count elements) and the scratch (scratch_n elements, guards
 * included: what the test inspects) as the call left them. out_ring_all_reduce_g: with
 * `guard` elements before and after buf that the test inspects too (the worker gets them). */
static inline kn_status out_ring_all_reduce_g(kn_comm *c, void *buf, int64_t guard, int64_t count, kn_dtype dt,
                                              void *scratch, int64_t scratch_n) {
    kn_status st;
    if (kn_mpi_relay_active()) {
        size_t es = kn_dtype_size(dt);
        int64_t a[4] = {count, (int64_t)dt, guard, scratch_n};
        void *b[2] = {buf ? (char *)buf - guard * (int64_t)es : NULL, scratch};
        int64_t len[2] = {(count > 0 ? count + 2 * guard : 2 * guard) * (int64_t)es, scratch_n * (int64_t)es};
        st = kn_mpi_relay_call("kn_ring_all_reduce", c, a, b, len);
    } else {
        st = kn_ring_all_reduce(c, buf, count, dt, scratch);
    }
    st = kn_out_status("kn_ring_all_reduce", st);
    if (st != KN_OK) return st; /* the buffers are only read after a success */
    size_t es = kn_dtype_size(dt);
    if (buf && count > 0) kn_out("buf", buf, (size_t)count * es);
    if (scratch && scratch_n > 0) kn_out("scratch", scratch, (size_t)scratch_n * es);
    return st;
}
static inline kn_status out_ring_all_reduce(kn_comm *c, void *buf, int64_t count, kn_dtype dt, void *scratch,
                                            int64_t scratch_n) {
    return out_ring_all_reduce_g(c, buf, 0, count, dt, scratch, scratch_n);
}

/* lo[0..parts] (parts + 1 values) when parts >= 0 and lo is given. */
static inline kn_status out_dp_shard_ranges(int64_t n, int parts, int64_t *lo) {
    if (out_not_in_relay("kn_dp_shard_ranges")) return KN_ERR_INTERNAL;
    kn_status st = kn_out_status("kn_dp_shard_ranges", kn_dp_shard_ranges(n, parts, lo));
    if (lo && parts >= 0 && parts < 4096) kn_out("lo", lo, (size_t)(parts + 1) * sizeof *lo);
    return st;
}

/* The buckets: *n, then the *n buckets. A count outside [0, 65536] is refused here (in
 * the checker it came from the other run: never allocate what it says unchecked). */
static inline kn_status out_dp_buckets(const kn_slab_layout *p, size_t bytes, kn_dp_bucket **out, int *n) {
    if (out_not_in_relay("kn_dp_buckets")) return KN_ERR_INTERNAL;
    kn_status st = kn_out_status("kn_dp_buckets", kn_dp_buckets(p, bytes, out, n));
    if (st != KN_OK || !out || !n) return st;
    int was = *n;
    kn_out("n", n, sizeof *n);
    if (*n < 0 || *n > 65536) {
        KN_MCHECK(0, "kn_dp_buckets returned %d buckets", *n);
        if (was >= 0 && was <= 65536) kn_free(*out);
        *out = NULL;
        return KN_ERR_INTERNAL;
    }
    if (kn_out_checking() && *n != was) {
        kn_dp_bucket *b = kn_realloc(*out, (size_t)(*n > 0 ? *n : 1) * sizeof *b);
        if (!b) return KN_ERR_OOM;
        *out = b;
    }
    if (*n > 0 && *out) kn_out("buckets", *out, (size_t)*n * sizeof **out);
    return st;
}

#endif
