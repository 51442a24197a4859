/* test_comm.c — the communicator tests, one program run under `mpiexec -n N` (N = 1, 2, 4
 * in make test; tests/dist/test_comm.sh).
 *
 * Not a Criterion suite: Criterion forks a child per test, and an MPI rank must not fork
 * and re-initialize. Each check prints "ok" or "not ok" on its rank; at the end the ranks
 * sum their failures and every rank exits 1 when any rank failed.
 *
 *   test-dist              every check below, and ZeRO-3 against one process (test_dp.c)
 *   test-dist nccl         the NCCL backend: a world communicator and an all-reduce on the
 *                          GPU; skips with one line where there is no GPU (or no NCCL)
 *   test-dist stall R S    rank R sleeps S seconds before an all-reduce the others wait in
 *                          (the timeout test: they must end the job, naming the operation) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist_test.h"
#include "kiln/device.h"

int g_fail, g_checks, g_rank;

static float val(int rank, int64_t i) { return (float)((rank * 31 + i * 7) % 13); }

static void test_all_reduce(kn_comm *c) {
    int64_t ns[] = {0, 1, 3, 1000, 4097};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        int64_t n = ns[k];
        float *a = kn_malloc((size_t)(n + 1) * sizeof(float)), *b = kn_malloc((size_t)(n + 1) * sizeof(float));
        float *s = kn_malloc((size_t)(n / c->size + 2) * sizeof(float));
        for (int algo = 0; algo < 3; algo++) {
            for (int64_t i = 0; i < n; i++) a[i] = val(c->rank, i);
            kn_status st = algo == 0 ? kn_comm_all_reduce(c, a, b, n, KN_DT_F32)
                           : algo == 1 ? kn_comm_all_reduce(c, a, a, n, KN_DT_F32)
                                       : kn_ring_all_reduce(c, a, n, KN_DT_F32, s);
            CHECK(st == KN_OK, "all_reduce algo %d of %lld", algo, (long long)n);
            const float *out = algo == 0 ? b : a;
            int bad = 0;
            for (int64_t i = 0; i < n; i++) {
                float want = 0;
                for (int r = 0; r < c->size; r++) want += val(r, i);
                bad += out[i] != want;
            }
            CHECK(bad == 0, "all_reduce algo %d of %lld: %d wrong sums", algo, (long long)n, bad);
        }
        kn_free(a);
        kn_free(b);
        kn_free(s);
    }
    /* MPI has no device stream: a stream-ordered wait is a plain wait, nothing pending */
    float one = 1.0f;
    kn_comm_req r;
    CHECK(kn_comm_iall_reduce(c, &one, &one, 1, KN_DT_F32, "host", &r) == KN_OK && kn_comm_wait_device(&r) == KN_OK &&
              c->npending == 0 && one == (float)c->size && kn_comm_drain(c) == KN_OK,
          "wait_device over MPI: %g, %d pending", one, c->npending);
    double d = c->rank + 0.5;
    CHECK(kn_comm_all_reduce(c, &d, &d, 1, KN_DT_F64) == KN_OK && d == c->size * (c->size - 1) / 2.0 + 0.5 * c->size,
          "f64 all_reduce gave %g", d);
}

static void test_async_many(kn_comm *c) {
    /* several collectives in flight at once, finished in the reverse order */
    enum { K = 6, N = 257 };
    float buf[K][N];
    kn_comm_req r[K];
    for (int k = 0; k < K; k++) {
        for (int i = 0; i < N; i++) buf[k][i] = (float)(k + c->rank);
        CHECK(kn_comm_iall_reduce(c, buf[k], buf[k], N, KN_DT_F32, "many", &r[k]) == KN_OK, "iall_reduce %d", k);
    }
    for (int k = K - 1; k >= 0; k--) CHECK(kn_comm_wait(&r[k]) == KN_OK, "wait %d", k);
    int bad = 0;
    for (int k = 0; k < K; k++)
        for (int i = 0; i < N; i++) bad += buf[k][i] != (float)(k * c->size + c->size * (c->size - 1) / 2);
    CHECK(bad == 0, "async all_reduces: %d wrong", bad);
    CHECK(r[0].seq + K - 1 == r[K - 1].seq, "sequence numbers %lld..%lld", (long long)r[0].seq, (long long)r[K - 1].seq);
}

static void test_scatter_gather(kn_comm *c) {
    int64_t counts[64], total = 0;
    for (int r = 0; r < c->size; r++) total += counts[r] = r + 2 * (r % 2); /* unequal, rank 0 gets none */
    float *full = kn_malloc((size_t)total * sizeof(float)), *mine = kn_malloc((size_t)(counts[c->rank] + 1) * sizeof(float));
    for (int64_t i = 0; i < total; i++) full[i] = val(c->rank, i);
    CHECK(kn_comm_reduce_scatter(c, full, mine, counts, KN_DT_F32) == KN_OK, "reduce_scatter");
    int64_t off = 0;
    for (int r = 0; r < c->rank; r++) off += counts[r];
    int bad = 0;
    for (int64_t i = 0; i < counts[c->rank]; i++) {
        float want = 0;
        for (int r = 0; r < c->size; r++) want += val(r, off + i);
        bad += mine[i] != want;
    }
    CHECK(bad == 0, "reduce_scatter: %d wrong", bad);
    /* all_gather: out of place, then in place (this rank's block already inside recv) */
    for (int inplace = 0; inplace < 2; inplace++) {
        for (int64_t i = 0; i < total; i++) full[i] = -1;
        for (int64_t i = 0; i < counts[c->rank]; i++) mine[i] = (float)(1000 * c->rank + i);
        if (inplace) memcpy(full + off, mine, (size_t)counts[c->rank] * sizeof(float));
        CHECK(kn_comm_all_gather(c, inplace ? full + off : mine, full, counts, KN_DT_F32) == KN_OK, "all_gather");
        bad = 0;
        for (int r = 0, o = 0; r < c->size; o += (int)counts[r], r++)
            for (int64_t i = 0; i < counts[r]; i++) bad += full[o + i] != (float)(1000 * r + i);
        CHECK(bad == 0, "all_gather (in place %d): %d wrong", inplace, bad);
    }
    kn_free(full);
    kn_free(mine);
}

static void test_p2p_bcast_barrier(kn_comm *c) {
    int32_t token = c->rank == 0 ? 42 : -1;
    /* a token around the ring: 0 -> 1 -> ... -> 0, each adds 1 */
    if (c->size > 1) {
        if (c->rank == 0) {
            CHECK(kn_comm_send(c, &token, 1, KN_DT_I32, 1) == KN_OK, "send");
            CHECK(kn_comm_recv(c, &token, 1, KN_DT_I32, c->size - 1) == KN_OK, "recv");
            CHECK(token == 42 + c->size - 1, "the token came back as %d", token);
        } else {
            CHECK(kn_comm_recv(c, &token, 1, KN_DT_I32, c->rank - 1) == KN_OK, "recv");
            token++;
            CHECK(kn_comm_send(c, &token, 1, KN_DT_I32, (c->rank + 1) % c->size) == KN_OK, "send");
        }
    }
    int64_t b[3] = {c->rank, c->rank, c->rank};
    CHECK(kn_comm_broadcast(c, b, 3, KN_DT_I64, c->size - 1) == KN_OK && b[0] == c->size - 1 && b[2] == c->size - 1,
          "broadcast from the last rank gave %lld", (long long)b[0]);
    CHECK(kn_comm_barrier(c) == KN_OK, "barrier");
}

static void test_errors(kn_comm *c) {
    float x = 1;
    CHECK(kn_comm_send(c, &x, 1, KN_DT_F32, c->size) == KN_ERR_ARG && strstr(kn_last_error(), "peer"),
          "send to a rank outside the communicator");
    CHECK(kn_comm_all_reduce(c, &x, &x, -1, KN_DT_F32) == KN_ERR_ARG, "negative count");
    CHECK(kn_comm_all_reduce(c, NULL, NULL, 4, KN_DT_F32) == KN_ERR_ARG, "NULL buffer");
    uint16_t h = 0;
    CHECK(kn_comm_all_reduce(c, &h, &h, 1, KN_DT_F16) == KN_ERR_DTYPE && strstr(kn_last_error(), "f16"),
          "f16 sums are refused by the MPI backend");
    CHECK(kn_ring_all_reduce(c, &h, 1, KN_DT_I32, &h) == KN_ERR_DTYPE, "the ring sums floats only");
    kn_comm *sub = NULL;
    CHECK(kn_comm_split(c, -1, 0, &sub) == KN_ERR_ARG, "negative color");
    kn_comm *axes[2];
    int dims[2] = {c->size + 1, 1};
    CHECK(kn_comm_mesh(c, 2, dims, axes, NULL) == KN_ERR_ARG && strstr(kn_last_error(), "mesh"),
          "a mesh that does not match the ranks");
}

static void test_split_mesh(kn_comm *c) {
    kn_comm *half = NULL;
    CHECK(kn_comm_split(c, c->rank % 2, c->rank, &half) == KN_OK, "split");
    if (half) {
        int32_t v = c->rank, want = 0;
        for (int r = c->rank % 2; r < c->size; r += 2) want += r;
        CHECK(kn_comm_all_reduce(half, &v, &v, 1, KN_DT_I32) == KN_OK && v == want, "split all_reduce %d, want %d",
              v, want);
        CHECK(half->size == (c->size + 1 - c->rank % 2) / 2, "split size %d", half->size);
        kn_comm_free(half);
    }
    /* a (size/2) x 2 mesh: data x tensor */
    if (c->size % 2 == 0) {
        int dims[2] = {c->size / 2, 2}, co[2];
        kn_comm *axes[2] = {0};
        CHECK(kn_comm_mesh(c, 2, dims, axes, co) == KN_OK, "mesh");
        if (axes[0] && axes[1]) {
            CHECK(co[0] == c->rank / 2 && co[1] == c->rank % 2, "coords %d,%d of rank %d", co[0], co[1], c->rank);
            CHECK(axes[0]->size == c->size / 2 && axes[1]->size == 2, "axis sizes %d, %d", axes[0]->size, axes[1]->size);
            CHECK(axes[0]->rank == co[0] && axes[1]->rank == co[1], "axis ranks");
            int32_t v = c->rank, w = c->rank;
            kn_comm_all_reduce(axes[0], &v, &v, 1, KN_DT_I32); /* the ranks with my tensor coordinate */
            kn_comm_all_reduce(axes[1], &w, &w, 1, KN_DT_I32); /* my data row: 2 co[0] + {0, 1} */
            int32_t want = 0;
            for (int r = co[1]; r < c->size; r += 2) want += r;
            CHECK(v == want && w == 4 * co[0] + 1, "mesh sums %d (want %d), %d (want %d)", v, want, w, 4 * co[0] + 1);
        }
        kn_comm_free(axes[0]);
        kn_comm_free(axes[1]);
    }
}

static void test_units(void) {
    /* chunks tile [0, n) in order and differ by at most one */
    for (int64_t n = 0; n < 40; n++)
        for (int parts = 1; parts < 6; parts++) {
            int64_t prev = 0, lo, hi, mn = n, mx = 0;
            for (int i = 0; i < parts; i++) {
                CHECK(kn_ring_chunk(n, parts, i, &lo, &hi) == KN_OK, "chunk");
                CHECK(lo == prev && hi >= lo, "chunk %d of %lld in %d", i, (long long)n, parts);
                prev = hi;
                mn = hi - lo < mn ? hi - lo : mn;
                mx = hi - lo > mx ? hi - lo : mx;
            }
            CHECK(prev == n && mx - mn <= 1, "chunks of %lld in %d", (long long)n, parts);
        }
    /* the ring: rank r receives at step s what rank r-1 sends, the chunk r-1-s */
    for (int size = 2; size < 6; size++)
        for (int s = 0; s < size - 1; s++)
            for (int r = 0; r < size; r++) {
                int k = -1;
                CHECK(kn_ring_send_chunk(r, size, s, &k) == KN_OK && k == ((r - s) % size + size) % size, "send chunk");
            }
    int64_t lo[5];
    CHECK(kn_dp_shard_ranges(10, 4, lo) == KN_OK, "shards");
    CHECK(lo[0] == 0 && lo[1] == 3 && lo[2] == 6 && lo[3] == 8 && lo[4] == 10, "shards %lld %lld %lld %lld %lld",
          (long long)lo[0], (long long)lo[1], (long long)lo[2], (long long)lo[3], (long long)lo[4]);
    /* buckets: contiguous, covering the slab, whole parameters, closed at the size */
    kn_gpt g = {0};
    kn_gpt_config cfg = {.vocab = 11, .context = 8, .layers = 2, .width = 16, .heads = 2};
    CHECK(kn_gpt_new(&g, &cfg) == KN_OK, "gpt");
    kn_dp_bucket *b = NULL;
    int nb = 0;
    CHECK(kn_dp_param_buckets(&g.p, 4096, &b, &nb) == KN_OK && nb > 1, "buckets: %d", nb);
    int64_t at = 0;
    for (int i = 0; b && i < nb; i++) {
        CHECK(b[i].lo == at && b[i].hi > b[i].lo && b[i].lo == g.p.info[b[i].first_param].offset, "bucket %d", i);
        /* every bucket but the slab's first holds >= 4096 bytes, and less once its first parameter is gone */
        bool closes_early = b[i].first_param == 0 || b[i].hi == g.p.n_decay ||
                            g.p.info[b[i].first_param - 1].decay != g.p.info[b[i].first_param].decay;
        if (!closes_early)
            CHECK((b[i].hi - b[i].lo) * 4 >= 4096, "bucket %d holds %lld floats", i, (long long)(b[i].hi - b[i].lo));
        CHECK(g.p.info[b[i].first_param].decay == g.p.info[b[i].last_param].decay, "bucket %d mixes decay", i);
        at = b[i].hi;
    }
    CHECK(at == g.p.n, "buckets end at %lld of %lld", (long long)at, (long long)g.p.n);
    kn_free(b);
    /* a huge size: two buckets, the matrices and the undecayed tensors */
    CHECK(kn_dp_param_buckets(&g.p, 1ull << 30, &b, &nb) == KN_OK && nb == 2 && b[0].hi == g.p.n_decay, "big buckets: %d", nb);
    kn_free(b);
    kn_gpt_free(&g);
    kn_dp_strategy s;
    CHECK(kn_dp_strategy_parse("zero2", &s) == KN_OK && s == KN_DP_ZERO2, "parse zero2");
    CHECK(kn_dp_strategy_parse("zero3", &s) == KN_OK && s == KN_DP_ZERO3, "parse zero3");
    CHECK(kn_dp_strategy_parse("fsdp", &s) == KN_OK && s == KN_DP_ZERO3, "fsdp is zero3");
    CHECK(kn_dp_strategy_parse("dpp", &s) == KN_ERR_ARG && strstr(kn_last_error(), "ddp"), "a typo lists the choices");
}

static int finish(kn_comm *c) {
    int fails = g_fail;
    if (c) kn_comm_all_reduce(c, &fails, &fails, 1, KN_DT_I32);
    if (g_rank == 0) printf("test-dist: %d ranks, %d checks on rank 0, %d failed on all ranks\n", kn_dist_size(),
                            g_checks, fails);
    kn_comm_free(c);
    kn_dist_finalize();
    return fails ? 1 : 0;
}

static int test_nccl(void) {
    kn_comm *c = NULL;
    kn_status st = kn_comm_world(&c, KN_COMM_NCCL);
    if (st == KN_ERR_UNSUPPORTED || st == KN_ERR_DEVICE) {
        if (g_rank == 0) printf("skip: nccl: %s\n", kn_last_error());
        kn_dist_finalize();
        return 0;
    }
    CHECK(st == KN_OK, "nccl world");
    if (st != KN_OK) return finish(NULL);
    /* a device buffer through the device table, all-reduced and read back */
    kn_device dev = {KN_DEVICE_CUDA, kn_dist_local_rank()}; /* the GPU the communicator took */
    int64_t n = 1 << 20;
    int64_t shape[1] = {n};
    kn_tensor *t = NULL;
    float *h = kn_malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) h[i] = val(c->rank, i);
    CHECK(kn_tensor_empty_on(&t, dev, KN_DT_F32, 1, shape) == KN_OK, "device buffer");
    if (t) {
        CHECK(kn_device_memcpy(dev, kn_tensor_data(t), KN_CPU, h, (size_t)n * 4) == KN_OK, "upload");
        CHECK(kn_comm_all_reduce(c, kn_tensor_data(t), kn_tensor_data(t), n, KN_DT_F32) == KN_OK, "nccl all_reduce");
        CHECK(kn_comm_barrier(c) == KN_OK, "nccl barrier");
        CHECK(kn_device_memcpy(KN_CPU, h, dev, kn_tensor_data(t), (size_t)n * 4) == KN_OK, "download");
        int bad = 0;
        for (int64_t i = 0; i < n; i++) {
            float want = 0;
            for (int r = 0; r < c->size; r++) want += val(r, i);
            bad += h[i] != want;
        }
        CHECK(bad == 0, "nccl all_reduce: %d wrong sums", bad);
        /* stream-ordered waits (tensor parallelism's): three in-place all-reduces, each
         * read by the next through the compute stream, the host never waiting in between;
         * what the host reads after kn_comm_drain is size^3 times the start */
        CHECK(kn_device_memcpy(dev, kn_tensor_data(t), KN_CPU, h, (size_t)n * 4) == KN_OK, "upload");
        for (int k = 0; k < 3; k++) {
            kn_comm_req r;
            CHECK(kn_comm_iall_reduce(c, kn_tensor_data(t), kn_tensor_data(t), n, KN_DT_F32, "ordered", &r) == KN_OK,
                  "ordered all_reduce %d", k);
            CHECK(kn_comm_wait_device(&r) == KN_OK, "wait_device %d", k);
            CHECK(!r.active, "wait_device %d: the caller's request is handed over", k);
        }
        CHECK(c->npending <= 3, "pending %d", c->npending);
        CHECK(kn_comm_drain(c) == KN_OK && c->npending == 0, "drain: %d left", c->npending);
        CHECK(kn_device_memcpy(KN_CPU, h, dev, kn_tensor_data(t), (size_t)n * 4) == KN_OK, "download");
        bad = 0;
        for (int64_t i = 0; i < n; i++) {
            float want = 0;
            for (int r = 0; r < c->size; r++) want += val(r, i);
            bad += h[i] != want * (float)(c->size * c->size * c->size);
        }
        CHECK(bad == 0, "stream-ordered all_reduces: %d wrong values", bad);
        kn_tensor_free(t);
    }
    kn_free(h);
    if (g_rank == 0) printf("nccl: %d rank(s), all_reduce of %lld floats, a barrier and three stream-ordered all_reduces on the GPU\n", c->size, (long long)n);
    int fails = g_fail;
    kn_comm_free(c);
    kn_dist_finalize();
    return fails ? 1 : 0;
}

int main(int argc, char **argv) {
    if (kn_dist_init("test-dist") != KN_OK) {
        fprintf(stderr, "test-dist: %s\n", kn_last_error());
        return 2;
    }
    g_rank = kn_dist_rank();
    if (argc > 1 && !strcmp(argv[1], "nccl")) return test_nccl();
    kn_comm *c = NULL;
    if (kn_comm_world(&c, KN_COMM_MPI) != KN_OK) {
        fprintf(stderr, "test-dist: %s\n", kn_last_error());
        return 1;
    }
    if (argc > 3 && !strcmp(argv[1], "stall")) {
        /* the timeout test: one rank stalls, the others must give up on their own */
        float x = 1;
        if (c->rank == atoi(argv[2])) sleep((unsigned)atoi(argv[3]));
        kn_comm_all_reduce(c, &x, &x, 1, KN_DT_F32);
        kn_comm_all_reduce(c, &x, &x, 1, KN_DT_F32);
        return finish(c);
    }
    if (argc > 1 && !strcmp(argv[1], "tp")) {
        test_tp(c, argc > 2 && !strcmp(argv[2], "sp"));
        return finish(c);
    }
    if (argc > 1 && !strcmp(argv[1], "pp")) {
        test_pp(c);
        return finish(c);
    }
    if (argc > 1 && !strcmp(argv[1], "matrix")) {
        test_matrix(c);
        return finish(c);
    }
    test_units();
    test_all_reduce(c);
    test_async_many(c);
    test_scatter_gather(c);
    test_p2p_bcast_barrier(c);
    test_split_mesh(c);
    test_errors(c);
    test_zero3(c);
    return finish(c);
}

void dist_test_batch(int32_t *x, int32_t *y, int rows, int T, int vocab, int step) {
    for (int i = 0; i < rows * T; i++) {
        x[i] = (i * 7 + step * 3 + i / T) % vocab;
        y[i] = (i * 5 + step + 1) % vocab;
    }
}

double dist_test_param_diff(const kn_params *a, const kn_params *b) {
    double worst = 0;
    for (int i = 0; i < a->count; i++) {
        const float *x = a->data + a->info[i].offset, *y = b->data + b->info[i].offset;
        double scale = 1e-30, d = 0;
        for (int64_t j = 0; j < a->info[i].numel; j++) scale = fmax(scale, fabs(x[j]));
        for (int64_t j = 0; j < a->info[i].numel; j++) d = fmax(d, fabs((double)x[j] - y[j]));
        worst = fmax(worst, d / scale);
    }
    return worst;
}
