/* test_ring.c — lab 10 public tests: the ring all-reduce (ring.c).
 *
 * These run as MPI ranks: `make test-lab10` starts the test program, which runs itself
 * under `mpiexec -n 2` and `mpiexec -n 4` (tests/harness/mpi/kn_mpi_test.c). In every test,
 * `c` is the world communicator; every rank runs the same code. The all-reduce tests are
 * KN_MPI_RELAY_TEST: your kn_ring_all_reduce runs in a process of its own, and the test's
 * process carries and counts every message it sends (outputs.h). */
#include <stdlib.h>

#include "mpi/kn_mpi_test.h"
#include "outputs.h"

/* The value rank r contributes at element i: small integers, so float sums are exact. */
static double contrib(int r, int64_t i) { return (double)((r * 7 + i * 3) % 11) - 5; }

KN_MPI_TEST(lab10_ring, chunks_tile_the_buffer) {
    (void)c;
    /* 10 elements in 4 chunks: 3 3 2 2 */
    int64_t want[5] = {0, 3, 6, 8, 10}, lo = -1, hi = -1;
    for (int i = 0; i < 4; i++) {
        if (KN_MOK(out_ring_chunk(10, 4, i, &lo, &hi)))
            KN_MCHECK(lo == want[i] && hi == want[i + 1], "chunk %d of 10 in 4 is [%lld, %lld), expected [%lld, %lld)",
                      i, (long long)lo, (long long)hi, (long long)want[i], (long long)want[i + 1]);
    }
    /* fewer elements than chunks: the last chunks are empty */
    if (KN_MOK(out_ring_chunk(2, 4, 3, &lo, &hi)))
        KN_MCHECK(lo == 2 && hi == 2, "chunk 3 of 2 in 4 is [%lld, %lld), expected [2, 2)", (long long)lo, (long long)hi);
}

KN_MPI_TEST(lab10_ring, send_chunk_walks_backwards) {
    (void)c;
    int k = -1;
    /* 4 ranks: at step 0 rank r sends chunk r; at step 1 chunk r-1, wrapping around */
    if (KN_MOK(out_ring_send_chunk(2, 4, 0, &k))) KN_MCHECK(k == 2, "rank 2, step 0: chunk %d, expected 2", k);
    if (KN_MOK(out_ring_send_chunk(0, 4, 1, &k))) KN_MCHECK(k == 3, "rank 0, step 1: chunk %d, expected 3", k);
    /* the all-gather phase starts one step earlier: step -1 */
    if (KN_MOK(out_ring_send_chunk(3, 4, -1, &k))) KN_MCHECK(k == 0, "rank 3, step -1: chunk %d, expected 0", k);
}

/* The messages a ring all-reduce sent since `a` (kn_mpi_test_sent: counted by the test
 * harness, where MPI is called, not by the communicator): 2 (N-1) sends on N > 1 ranks and no
 * collective of the library (kn_comm_all_reduce would give the right sums without a ring). */
static void check_ring_traffic(kn_comm *c, kn_mpi_sent a) {
    kn_mpi_sent b = kn_mpi_test_sent();
    int64_t want = c->size > 1 ? 2 * (int64_t)(c->size - 1) : 0;
    KN_MCHECK(b.messages - a.messages == want && b.collectives == a.collectives,
              "ring of %d: %lld messages sent and %lld library collectives called; a ring sends 2 (N-1) = %lld "
              "with kn_comm_isend and calls no collective", c->size, (long long)(b.messages - a.messages),
              (long long)(b.collectives - a.collectives), (long long)want);
}

/* Every rank's n floats (contrib) summed by kn_ring_all_reduce: each sum exact, and sent
 * as a ring (check_ring_traffic). */
static void ring_sums_exactly(kn_comm *c, int64_t n) {
    float *buf = malloc((size_t)n * sizeof(float)), *scratch = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) buf[i] = (float)contrib(c->rank, i);
    kn_mpi_sent sent = kn_mpi_test_sent();
    if (KN_MOK(out_ring_all_reduce(c, buf, n, KN_DT_F32, scratch, 0))) {
        check_ring_traffic(c, sent);
        int64_t bad = 0, first = -1;
        for (int64_t i = 0; i < n; i++) {
            double want = 0;
            for (int r = 0; r < c->size; r++) want += contrib(r, i);
            if (buf[i] != (float)want && bad++ == 0) first = i;
        }
        KN_MCHECK(bad == 0, "%lld of %lld sums are wrong, the first at element %lld", (long long)bad, (long long)n,
                  (long long)first);
    }
    free(buf);
    free(scratch);
}

KN_MPI_RELAY_TEST(lab10_ring, all_reduce_sums_exactly, 4) { ring_sums_exactly(c, 1000); }

KN_MPI_RELAY_TEST(lab10_ring, all_reduce_fewer_elements_than_ranks, 4) {
    /* 3 elements on 4 ranks: one chunk is empty; 0 elements: nothing to do */
    double buf[3], scratch[3];
    for (int i = 0; i < 3; i++) buf[i] = c->rank + 10.0 * i;
    kn_mpi_sent sent = kn_mpi_test_sent();
    if (KN_MOK(out_ring_all_reduce(c, buf, 3, KN_DT_F64, scratch, 0))) {
        check_ring_traffic(c, sent);
        double n = c->size, ranks = n * (n - 1) / 2;
        for (int i = 0; i < 3; i++)
            KN_MCHECK(buf[i] == ranks + 10.0 * i * n, "element %d: %g, expected %g", i, buf[i], ranks + 10.0 * i * n);
    }
    KN_MOK(out_ring_all_reduce(c, NULL, 0, KN_DT_F32, NULL, 0));
}

KN_MPI_TEST(lab10_ring, all_reduce_rejects_other_dtypes, 4) {
    int32_t x[4] = {1, 2, 3, 4}, s[4];
    KN_MERR(out_ring_all_reduce(c, x, 4, KN_DT_I32, s, 0), KN_ERR_DTYPE);
}

KN_MPI_RELAY_TEST(lab10_ring, all_reduce_above_the_eager_limit) {
    /* Chunks of 1 MiB: above MPI's eager limit (a few KiB to 64 KiB), a send completes only
     * once the receiver posts its receive. A ring whose ranks all send before they receive
     * waits forever here (the model's gradients are such messages: `make run-dist LAB=10`
     * hangs), so this test ends by KILN_COMM_TIMEOUT (10 s in `make test-lab10`) instead;
     * the small buffers above pass either way. Post both, then wait (kn_comm_isend,
     * kn_comm_irecv, kn_comm_wait_all). */
    ring_sums_exactly(c, (int64_t)c->size * (1 << 18)); /* 2^18 floats = 1 MiB a chunk */
}
