/* test_hidden_ring.c — lab 10 hidden tests: the ring all-reduce and its chunk indexing
 * (ring.c), checked exhaustively against independent formulas, with guard elements around
 * every buffer, on rings of every size from 1 to the job's (sub-communicators), in f32 and
 * f64. Run as MPI ranks under mpiexec -n 2 and -n 4 (tests/harness/mpi/kn_mpi_test.h); the
 * all-reduce tests are relay tests (KN_MPI_RELAY_TEST): the unit runs in a process of its own
 * and its messages are counted in the test's process, where it cannot change the counts. */
#include <stdlib.h>
#include <string.h>

#include "mpi/kn_mpi_test.h"
#include "../../labs/lab10-dataparallel/tests/outputs.h"

/* chunk i of n in parts: sizes q+1 for the first n % parts chunks, q for the rest; the
 * bounds are the running sum of the sizes (a different computation from the unit's) */
static void ref_chunk(int64_t n, int parts, int i, int64_t *lo, int64_t *hi) {
    int64_t at = 0;
    for (int k = 0; k < i; k++) at += n / parts + (k < n % parts);
    *lo = at;
    *hi = at + n / parts + (i < n % parts);
}

KN_MPI_TEST(lab10_hidden_ring, chunk_bounds_exhaustive) {
    (void)c;
    int bad = 0;
    for (int64_t n = 0; n <= 60; n++)
        for (int parts = 1; parts <= 9; parts++)
            for (int i = 0; i < parts; i++) {
                int64_t lo = -7, hi = -7, wl, wh;
                ref_chunk(n, parts, i, &wl, &wh);
                kn_status st = out_ring_chunk(n, parts, i, &lo, &hi);
                if ((st != KN_OK || lo != wl || hi != wh) && bad++ < 3)
                    KN_MCHECK(0, "out_ring_chunk(%lld, %d, %d): %s [%lld, %lld), expected [%lld, %lld)", (long long)n,
                              parts, i, kn_status_name(st), (long long)lo, (long long)hi, (long long)wl, (long long)wh);
            }
    /* large counts: no overflow in the arithmetic */
    int64_t lo = 0, hi = 0, big = (int64_t)3 << 40;
    if (KN_MOK(out_ring_chunk(big + 5, 8, 7, &lo, &hi)))
        KN_MCHECK(hi == big + 5 && hi - lo == big / 8, "last chunk of 3<<40 + 5 in 8: [%lld, %lld)", (long long)lo,
                  (long long)hi);
}

KN_MPI_TEST(lab10_hidden_ring, chunk_errors) {
    (void)c;
    int64_t lo, hi;
    KN_MERR(out_ring_chunk(10, 0, 0, &lo, &hi), KN_ERR_ARG);
    KN_MERR(out_ring_chunk(10, 4, 4, &lo, &hi), KN_ERR_ARG);
    KN_MERR(out_ring_chunk(10, 4, -1, &lo, &hi), KN_ERR_ARG);
    KN_MERR(out_ring_chunk(-1, 4, 0, &lo, &hi), KN_ERR_ARG);
    KN_MERR(out_ring_chunk(10, 4, 0, NULL, &hi), KN_ERR_ARG);
}

KN_MPI_TEST(lab10_hidden_ring, send_chunk_exhaustive) {
    (void)c;
    int bad = 0;
    for (int size = 1; size <= 9; size++)
        for (int rank = 0; rank < size; rank++)
            for (int step = -2 * size; step <= 2 * size; step++) {
                int want = rank - step;
                while (want < 0) want += size;
                while (want >= size) want -= size;
                int k = -1;
                kn_status st = out_ring_send_chunk(rank, size, step, &k);
                if ((st != KN_OK || k != want) && bad++ < 3)
                    KN_MCHECK(0, "out_ring_send_chunk(%d, %d, %d): %s %d, expected %d", rank, size, step,
                              kn_status_name(st), k, want);
            }
}

KN_MPI_TEST(lab10_hidden_ring, send_chunk_errors) {
    (void)c;
    int k;
    KN_MERR(out_ring_send_chunk(0, 0, 0, &k), KN_ERR_ARG);
    KN_MERR(out_ring_send_chunk(4, 4, 0, &k), KN_ERR_ARG);
    KN_MERR(out_ring_send_chunk(-1, 4, 0, &k), KN_ERR_ARG);
    KN_MERR(out_ring_send_chunk(1, 4, 0, NULL), KN_ERR_ARG);
}

/* rank r's value at i: distinct per rank and element, exact in f32 */
static double val(int r, int64_t i) { return (double)(((r + 1) * 37 + i * 11) % 101) - 50 + 0.25 * r; }

#define GUARD 1e30

/* All-reduce n elements on c in dtype dt, with a guard element on each side of buf and
 * after a scratch of exactly the largest chunk; checks every sum and every guard. */
static void ring_case(kn_comm *c, int64_t n, kn_dtype dt, const char *where) {
    size_t es = kn_dtype_size(dt);
    int64_t most = n / c->size + (n % c->size != 0);
    char *buf = calloc((size_t)n + 2, es), *scratch = calloc((size_t)most + 1, es);
    for (int64_t i = -1; i <= n; i++) {
        double v = i < 0 || i == n ? GUARD : val(c->rank, i);
        if (dt == KN_DT_F32) ((float *)buf)[i + 1] = (float)v;
        else ((double *)buf)[i + 1] = v;
    }
    if (dt == KN_DT_F32) ((float *)scratch)[most] = (float)GUARD;
    else ((double *)scratch)[most] = GUARD;
    kn_mpi_sent a = kn_mpi_test_sent();
    if (KN_MOK(out_ring_all_reduce_g(c, buf + es, 1, n, dt, scratch, most + 1))) {
        kn_out("guard before", buf, es); /* the guards too (kn_out.h): a write past buf shows there */
        kn_out("guard after", buf + (n + 1) * (int64_t)es, es);
        /* the harness's count of what was sent, in the relay (not c->seq, which the unit
         * could change, nor a counter in the unit's process) */
        kn_mpi_sent b = kn_mpi_test_sent();
        int64_t want_msgs = c->size > 1 ? 2 * (int64_t)(c->size - 1) : 0;
        KN_MCHECK(b.messages - a.messages == want_msgs && b.collectives == a.collectives,
                  "%s: ring of %d, %lld elements: %lld messages and %lld library collectives, expected %lld and 0",
                  where, c->size, (long long)n, (long long)(b.messages - a.messages),
                  (long long)(b.collectives - a.collectives), (long long)want_msgs);
        int64_t bad = 0, first = -1;
        double got1 = 0, want1 = 0;
        for (int64_t i = -1; i <= n; i++) {
            double want = 0;
            if (i < 0 || i == n) want = GUARD;
            else
                for (int r = 0; r < c->size; r++) want += val(r, i);
            double got = dt == KN_DT_F32 ? ((float *)buf)[i + 1] : ((double *)buf)[i + 1];
            if (dt == KN_DT_F32) want = (float)want;
            if (got != want && bad++ == 0) first = i, got1 = got, want1 = want;
        }
        KN_MCHECK(bad == 0, "%s: ring of %d, %lld %s elements: %lld wrong (element %lld is %g, expected %g; -1 and "
                  "n are guards outside the buffer)", where, c->size, (long long)n, kn_dtype_name(dt), (long long)bad,
                  (long long)first, got1, want1);
        double g = dt == KN_DT_F32 ? ((float *)scratch)[most] : ((double *)scratch)[most];
        KN_MCHECK(g == (dt == KN_DT_F32 ? (float)GUARD : GUARD),
                  "%s: ring of %d, %lld elements: written past the scratch's %lld elements (the largest chunk)", where,
                  c->size, (long long)n, (long long)most);
    }
    free(buf);
    free(scratch);
}

KN_MPI_RELAY_TEST(lab10_hidden_ring, all_reduce_many_sizes_f32, 4) {
    int64_t ns[] = {0, 1, 2, 3, 5, 7, 8, 64, 999, 4097};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) ring_case(c, ns[k], KN_DT_F32, "world");
}

KN_MPI_RELAY_TEST(lab10_hidden_ring, all_reduce_many_sizes_f64, 4) {
    int64_t ns[] = {1, 3, 6, 1001};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) ring_case(c, ns[k], KN_DT_F64, "world");
}

KN_MPI_RELAY_TEST(lab10_hidden_ring, all_reduce_on_every_ring_size, 4) {
    /* rings of 1 .. size ranks: split the world into the first k ranks and the rest */
    for (int k = 1; k <= c->size; k++) {
        kn_comm *sub = NULL;
        if (!KN_MOK(kn_comm_split(c, c->rank < k ? 0 : 1, c->rank, &sub))) continue;
        char where[48];
        snprintf(where, sizeof where, "split %d+%d", k, c->size - k);
        ring_case(sub, 11, KN_DT_F32, where);
        ring_case(sub, 2, KN_DT_F64, where);
        kn_comm_free(sub);
    }
}

KN_MPI_RELAY_TEST(lab10_hidden_ring, all_reduce_twice_in_a_row, 4) {
    /* the second call must start from the first's result: every rank holds the sum, so the
     * second sum is size times the first */
    float x[10], s[10];
    for (int i = 0; i < 10; i++) x[i] = (float)val(c->rank, i);
    kn_mpi_sent a = kn_mpi_test_sent();
    if (KN_MOK(out_ring_all_reduce(c, x, 10, KN_DT_F32, s, 0)) && KN_MOK(out_ring_all_reduce(c, x, 10, KN_DT_F32, s, 0))) {
        kn_mpi_sent b = kn_mpi_test_sent();
        KN_MCHECK(b.messages - a.messages == 4 * (int64_t)(c->size - 1) && b.collectives == a.collectives,
                  "two all-reduces on a ring of %d: %lld messages and %lld library collectives, expected %d and 0",
                  c->size, (long long)(b.messages - a.messages), (long long)(b.collectives - a.collectives),
                  4 * (c->size - 1));
        for (int i = 0; i < 10; i++) {
            double want = 0;
            for (int r = 0; r < c->size; r++) want += val(r, i);
            KN_MCHECK(x[i] == (float)(want * c->size), "element %d after two all-reduces: %g, expected %g", i, x[i],
                      want * c->size);
        }
    }
}

KN_MPI_TEST(lab10_hidden_ring, all_reduce_argument_errors, 4) {
    float x[4] = {0}, s[4];
    KN_MERR(out_ring_all_reduce(NULL, x, 4, KN_DT_F32, s, 0), KN_ERR_ARG);
    KN_MERR(out_ring_all_reduce(c, NULL, 4, KN_DT_F32, s, 0), KN_ERR_ARG);
    KN_MERR(out_ring_all_reduce(c, x, 4, KN_DT_F32, NULL, 0), KN_ERR_ARG);
    KN_MERR(out_ring_all_reduce(c, x, -1, KN_DT_F32, s, 0), KN_ERR_ARG);
    KN_MERR(out_ring_all_reduce(c, x, 4, KN_DT_I64, s, 0), KN_ERR_DTYPE);
}

/* The messages this rank sent during one call, as the harness saw them (kn_mpi_test_sent:
 * MPI's profiling interface in the relay, a process the unit never runs in:
 * tests/harness/mpi/kn_mpi_relay.c), summed over the ranks with the library's all-reduce. */
static void ring_traffic(kn_comm *c, int64_t n, kn_mpi_sent *mine, int64_t *all_bytes) {
    float *x = calloc((size_t)n + 1, sizeof(float)), *s = calloc((size_t)n / c->size + 2, sizeof(float));
    kn_mpi_test_sent_mark();
    kn_mpi_sent a = kn_mpi_test_sent(), b = a;
    if (KN_MOK(out_ring_all_reduce(c, x, n, KN_DT_F32, s, 0))) b = kn_mpi_test_sent();
    *mine = (kn_mpi_sent){b.messages - a.messages, b.bytes - a.bytes, b.largest, b.collectives - a.collectives};
    *all_bytes = mine->bytes;
    if (!KN_MOK(kn_comm_all_reduce(c, all_bytes, all_bytes, 1, KN_DT_I64))) *all_bytes = -1;
    free(x);
    free(s);
}

KN_MPI_RELAY_TEST(lab10_hidden_ring, all_reduce_sends_2_n_minus_1_messages, 4) {
    /* the ring's cost: 2 (N-1) messages per rank, each of one chunk (at most the largest),
     * no collective of the library, and every chunk sent N-1 times per phase, so all ranks
     * together send 2 (N-1) times the buffer. Counted by the harness, not the communicator. */
    int64_t n = 1000, all = 0, most = (n / c->size + (n % c->size != 0)) * (int64_t)sizeof(float);
    kn_mpi_sent m;
    ring_traffic(c, n, &m, &all);
    int64_t want = 2 * (int64_t)(c->size - 1), want_all = want * n * (int64_t)sizeof(float);
    KN_MCHECK(m.messages == want && m.collectives == 0,
              "ring of %d: %lld messages and %lld library collectives; expected %lld and 0", c->size,
              (long long)m.messages, (long long)m.collectives, (long long)want);
    KN_MCHECK(all == want_all && m.largest <= most,
              "ring of %d, %lld floats: the ranks sent %lld bytes in all (expected 2 (N-1) x the buffer = %lld), the "
              "largest message %lld bytes (a chunk is at most %lld)", c->size, (long long)n, (long long)all,
              (long long)want_all, (long long)m.largest, (long long)most);
}

KN_MPI_RELAY_TEST(lab10_hidden_ring, all_reduce_above_the_eager_limit, 4) {
    /* chunks of 1 MiB: far above MPI's eager limit, so a send completes only once its
     * receive is posted. A ring that sends (blocking) before it receives waits forever on
     * every rank; kn_comm's KILN_COMM_TIMEOUT then ends the job naming the send. */
    int64_t n = (int64_t)c->size << 18;
    ring_case(c, n, KN_DT_F32, "1 MiB chunks");
    int64_t all = 0;
    kn_mpi_sent m;
    ring_traffic(c, n, &m, &all);
    int64_t want_all = 2 * (int64_t)(c->size - 1) * n * (int64_t)sizeof(float);
    KN_MCHECK(all == want_all && m.collectives == 0,
              "ring of %d, %lld floats: %lld bytes sent in all (expected %lld) and %lld library collectives", c->size,
              (long long)n, (long long)all, (long long)want_all, (long long)m.collectives);
}
