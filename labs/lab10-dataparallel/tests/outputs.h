/* outputs.h — lab 10's units as its tests call them: each call's results pass through
 * kn_out (tests/harness/kn_out.h) before any check reads them.
 *
 * Why: under the grader a test runs twice. Your units run in the first run, which only
 * writes these results; the second run is the staff's build of the same test (no code of
 * yours in it), where each wrapper below hands back YOUR run's results in place of the
 * staff's, and the checks that follow decide the grade there. Under `make test-lab10` the
 * wrappers just call your units. */
#ifndef LAB10_OUTPUTS_H
#define LAB10_OUTPUTS_H

#include "kn_out.h"
#include "mpi/kn_mpi_test.h"

static inline kn_status out_ring_chunk(int64_t n, int parts, int i, int64_t *lo, int64_t *hi) {
    kn_status st = kn_out_status("kn_ring_chunk", kn_ring_chunk(n, parts, i, lo, hi));
    if (lo) kn_out("lo", lo, sizeof *lo);
    if (hi) kn_out("hi", hi, sizeof *hi);
    return st;
}

static inline kn_status out_ring_send_chunk(int rank, int size, int step, int *chunk) {
    kn_status st = kn_out_status("kn_ring_send_chunk", kn_ring_send_chunk(rank, size, step, chunk));
    if (chunk) kn_out("chunk", chunk, sizeof *chunk);
    return st;
}

/* The all-reduce, then (after a success) the buffer (count elements) and the scratch
 * (scratch_n elements, guards included: what the test inspects) as the call left them. */
static inline kn_status out_ring_all_reduce(kn_comm *c, void *buf, int64_t count, kn_dtype dt, void *scratch,
                                            int64_t scratch_n) {
    kn_status st = kn_out_status("kn_ring_all_reduce", kn_ring_all_reduce(c, buf, count, dt, scratch));
    if (st != KN_OK) return st; /* the buffers are only read after a success */
    size_t es = kn_dtype_size(dt);
    if (buf && count > 0) kn_out("buf", buf, (size_t)count * es);
    if (scratch && scratch_n > 0) kn_out("scratch", scratch, (size_t)scratch_n * es);
    return st;
}

/* lo[0..parts] (parts + 1 values) when parts >= 0 and lo is given. */
static inline kn_status out_dp_shard_ranges(int64_t n, int parts, int64_t *lo) {
    kn_status st = kn_out_status("kn_dp_shard_ranges", kn_dp_shard_ranges(n, parts, lo));
    if (lo && parts >= 0 && parts < 4096) kn_out("lo", lo, (size_t)(parts + 1) * sizeof *lo);
    return st;
}

/* The buckets: *n, then the *n buckets. A count outside [0, 65536] is refused here (in
 * the checker it came from the other run: never allocate what it says unchecked). */
static inline kn_status out_dp_buckets(const kn_slab_layout *p, size_t bytes, kn_dp_bucket **out, int *n) {
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
