/* bench_comm.c — `kiln bench-comm`: kiln's ring all-reduce against the library's own, under
 * mpiexec; with --comm nccl, kiln's collectives on GPU buffers (one GPU per rank).
 *
 *   mpiexec -n 4 kiln bench-comm [--sizes 1k,64k,1m] [--iters 20] [--comm mpi|nccl]
 *
 * NCCL: all_reduce, reduce_scatter and all_gather through kiln's communicator (kn_comm_i*
 * and the polled, deadline-bounded wait: what DDP and ZeRO call), each checked once and
 * then timed; the bus bandwidth is nccl-tests' (all_reduce 2 (N-1)/N x bytes / time, the
 * other two (N-1)/N x bytes / time, bytes being the whole buffer), so the figures compare
 * directly with nccl-tests' or PyTorch's at the same sizes (plots/torch_comm.py).
 *
 * For each size (f32 elements) both algorithms sum the same buffer, first checked against
 * the exact answer (every rank fills its buffer with small integers, so any summation order
 * gives the same floats), then timed over --iters runs. Printed per size: the time per
 * all-reduce and the "bus bandwidth" 2 (N-1)/N x bytes / time, the figure nccl-tests uses,
 * which compares algorithms at any rank count. Rank 0 prints. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "kiln/dist.h"

static int64_t parse_size(const char *s, bool *ok) {
    char *end = NULL;
    double v = strtod(s, &end);
    int64_t mul = 1;
    if (end && (*end == 'k' || *end == 'K')) mul = 1024, end++;
    else if (end && (*end == 'm' || *end == 'M')) mul = 1024 * 1024, end++;
    *ok = end != s && end && !*end && v >= 1 && v * (double)mul <= 1e9;
    return (int64_t)(v * (double)mul);
}

static void fill(float *b, int64_t n, int rank) {
    for (int64_t i = 0; i < n; i++) b[i] = (float)((i + rank) % 7);
}

static bool check(const float *b, int64_t n, int size) {
    for (int64_t i = 0; i < n; i++) {
        double want = 0;
        for (int r = 0; r < size; r++) want += (double)((i + r) % 7);
        if (b[i] != (float)want) return false;
    }
    return true;
}

static int usage(FILE *f, int rc) {
    fprintf(f, "usage: mpiexec -n N kiln bench-comm [--sizes 1k,64k,1m] [--iters 20] [--comm mpi|nccl]\n"
               "  mpi:  times kiln's ring all-reduce (kn_ring_all_reduce) against MPI_Iallreduce on f32 buffers\n"
               "  nccl: times kiln's all_reduce, reduce_scatter and all_gather on GPU buffers (one GPU per rank)\n");
    return rc;
}

/* The value element j of the reduced buffer must hold: the sum over ranks of fill(). */
static bool check_sum(const float *b, int64_t lo, int64_t n, int size) {
    for (int64_t i = 0; i < n; i++) {
        double want = 0;
        for (int r = 0; r < size; r++) want += (double)((lo + i + r) % 7);
        if (b[i] != (float)want) return false;
    }
    return true;
}

enum { NC_ALL_REDUCE, NC_REDUCE_SCATTER, NC_ALL_GATHER, NC_COUNT };
static const char *const nc_names[NC_COUNT] = {"all_reduce", "reduce_scatter", "all_gather"};

/* Start one collective of kind k over n floats (n a multiple of the rank count) through
 * kiln's communicator. */
static kn_status nc_start(kn_comm *c, int k, float *send, float *recv, int64_t n, int64_t *counts, kn_comm_req *r) {
    int64_t m = n / c->size;
    if (k == NC_ALL_REDUCE) return kn_comm_iall_reduce(c, send, send, n, KN_DT_F32, "bench", r);
    if (k == NC_REDUCE_SCATTER) return kn_comm_ireduce_scatter(c, send, recv, counts, KN_DT_F32, "bench", r);
    return kn_comm_iall_gather(c, send + (int64_t)c->rank * m, recv, counts, KN_DT_F32, "bench", r);
}

/* Fill, run once, check on the host (every rank), then time `iters` runs. */
static kn_status nc_bench(kn_comm *c, kn_device dev, int k, int64_t n, int iters, float *host, float *send,
                          float *recv, double *dt, double *enq) {
    int N = c->size;
    int64_t m = n / N, counts[1024];
    if (N > 1024) return kn_error(KN_ERR_ARG, "bench-comm: more than 1024 ranks");
    for (int r = 0; r < N; r++) counts[r] = m;
    fill(host, n, c->rank);
    /* all_gather: rank r's block holds what the reduced buffer would hold there, so one check fits all */
    if (k == NC_ALL_GATHER)
        for (int64_t i = 0; i < m; i++) {
            double v = 0;
            for (int r = 0; r < N; r++) v += (double)(((int64_t)c->rank * m + i + r) % 7);
            host[(int64_t)c->rank * m + i] = (float)v;
        }
    KN_TRY(kn_device_memcpy(dev, send, KN_CPU, host, (size_t)n * sizeof(float)));
    kn_comm_req one;
    KN_TRY(nc_start(c, k, send, recv, n, counts, &one));
    KN_TRY(kn_comm_wait(&one));
    const float *out = k == NC_ALL_REDUCE ? send : recv;
    int64_t len = k == NC_REDUCE_SCATTER ? m : n, lo = k == NC_REDUCE_SCATTER ? (int64_t)c->rank * m : 0;
    KN_TRY(kn_device_memcpy(KN_CPU, host, dev, out, (size_t)len * sizeof(float)));
    if (!check_sum(host, lo, len, N))
        return kn_error(KN_ERR_INTERNAL, "bench-comm: %s of %lld floats over NCCL gave a wrong result on rank %d",
                        nc_names[k], (long long)n, c->rank);
    /* timed back to back, as DDP's buckets run and as nccl-tests and PyTorch time them:
     * all started, then all waited for */
    kn_comm_req *reqs = kn_calloc((size_t)iters, sizeof *reqs);
    if (!reqs) return kn_error(KN_ERR_OOM, "bench-comm: out of memory for %d requests", iters);
    kn_status st = kn_comm_barrier(c);
    double t0 = kn_time_now();
    for (int it = 0; st == KN_OK && it < iters; it++) st = nc_start(c, k, send, recv, n, counts, &reqs[it]);
    *enq = (kn_time_now() - t0) / iters; /* the host's share: enqueueing, before any wait */
    if (st == KN_OK) st = kn_comm_wait_all(iters, reqs);
    *dt = (kn_time_now() - t0) / iters;
    kn_free(reqs);
    return st;
}

/* The comma-separated --sizes list into sizes[0..*count) (at most KN_BENCH_SIZES). */
#define KN_BENCH_SIZES 32
static kn_status parse_sizes(const char *list, int64_t *sizes, int *count) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    *count = 0;
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        bool ok;
        int64_t n = parse_size(tok, &ok);
        if (!ok) return kn_error(KN_ERR_ARG, "--sizes: '%s' is not a count like 4096, 64k or 1m", tok);
        if (*count == KN_BENCH_SIZES) return kn_error(KN_ERR_ARG, "--sizes: more than %d sizes", KN_BENCH_SIZES);
        sizes[(*count)++] = n;
    }
    return KN_OK;
}

static int bench_nccl(const char *sizes, int iters) {
    kn_comm *c = NULL;
    int rc = 1;
    int64_t list[KN_BENCH_SIZES];
    int nsizes = 0;
    kn_device dev = {KN_DEVICE_CUDA, kn_dist_local_rank()};
    if (kn_comm_world(&c, KN_COMM_NCCL) != KN_OK) goto out;
    if (c->rank == 0)
        printf("kiln bench-comm: %d ranks over NCCL (one GPU each), f32, %d iterations per size\n"
               "%12s  %-15s %12s %10s %12s\n", c->size, iters, "elements", "collective", "us/op", "bus GB/s",
               "enqueue us");
    if (parse_sizes(sizes, list, &nsizes) != KN_OK) goto out;
    for (int si = 0; si < nsizes; si++) {
        int64_t n = list[si];
        n -= n % c->size;
        if (n < c->size) n = c->size;
        size_t bytes = (size_t)n * sizeof(float);
        float *host = kn_malloc(bytes);
        void *send = NULL, *recv = NULL;
        kn_status st = host ? KN_OK : kn_error(KN_ERR_OOM, "out of memory for %lld floats", (long long)n);
        if (st == KN_OK) st = kn_device_alloc(dev, bytes, &send);
        if (st == KN_OK) st = kn_device_alloc(dev, bytes, &recv);
        for (int k = 0; st == KN_OK && k < NC_COUNT; k++) {
            double dt = 0, enq = 0;
            st = nc_bench(c, dev, k, n, iters, host, send, recv, &dt, &enq);
            double f = k == NC_ALL_REDUCE ? 2.0 * (c->size - 1) / c->size : (double)(c->size - 1) / c->size;
            if (st == KN_OK && c->rank == 0)
                printf("%12lld  %-15s %12.1f %10.2f %12.1f\n", (long long)n, nc_names[k], dt * 1e6,
                       f * (double)bytes / dt / 1e9, enq * 1e6);
        }
        kn_free(host);
        if (send) kn_device_free(dev, send, bytes);
        if (recv) kn_device_free(dev, recv, bytes);
        if (st != KN_OK) goto out;
    }
    rc = 0;
out:
    if (rc) fprintf(stderr, "kiln bench-comm: rank %d: %s\n", kn_dist_rank(), kn_last_error());
    kn_comm_free(c);
    if (rc) kn_dist_abort(rc);
    kn_dist_finalize();
    return rc;
}

int kn_cli_bench_comm(int argc, char **argv) {
    const char *sizes = NULL, *comm = "mpi";
    int iters = 20;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return usage(stdout, 0);
        if (!strcmp(argv[i], "--sizes") && i + 1 < argc) sizes = argv[++i];
        else if (!strcmp(argv[i], "--comm") && i + 1 < argc) {
            comm = argv[++i];
            if (strcmp(comm, "mpi") != 0 && strcmp(comm, "nccl") != 0) {
                fprintf(stderr, "kiln bench-comm: --comm '%s': expected mpi or nccl\n", comm);
                return 2;
            }
        }
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
            iters = atoi(argv[++i]);
            if (iters < 1 || iters > 100000) {
                fprintf(stderr, "kiln bench-comm: --iters %s: need 1..100000\n", argv[i]);
                return 2;
            }
        } else {
            fprintf(stderr, "kiln bench-comm: unknown argument '%s'\n", argv[i]);
            return usage(stderr, 2);
        }
    }
    {   /* a bad --sizes is a usage error on every rank alike, before MPI starts */
        int64_t probe[KN_BENCH_SIZES];
        int np = 0;
        if (sizes && parse_sizes(sizes, probe, &np) != KN_OK) {
            fprintf(stderr, "kiln bench-comm: %s\n", kn_last_error());
            return 2;
        }
    }
    if (kn_dist_init("kiln bench-comm") != KN_OK) {
        fprintf(stderr, "kiln bench-comm: %s\n", kn_last_error());
        return 2;
    }
    if (!strcmp(comm, "nccl")) return bench_nccl(sizes ? sizes : "1m,16m,128m", iters);
    if (!sizes) sizes = "1k,16k,256k,1m";
    kn_comm *c = NULL;
    int rc = 1;
    if (kn_comm_world(&c, KN_COMM_MPI) != KN_OK) goto out;
    if (c->rank == 0)
        printf("kiln bench-comm: %d ranks, f32 sum, %d iterations per size\n%10s  %-8s %12s %14s\n", c->size, iters,
               "elements", "algo", "us/op", "bus GB/s");
    int64_t list[KN_BENCH_SIZES];
    int nsizes = 0;
    if (parse_sizes(sizes, list, &nsizes) != KN_OK) goto out;
    for (int si = 0; si < nsizes; si++) {
        int64_t n = list[si];
        float *b = kn_malloc((size_t)n * sizeof(float)), *scratch = kn_malloc((size_t)(n / c->size + 1) * sizeof(float));
        if (!b || !scratch) {
            kn_free(b); kn_free(scratch);
            kn_error(KN_ERR_OOM, "out of memory for %lld floats", (long long)n);
            goto out;
        }
        for (int algo = 0; algo < 2; algo++) {
            kn_status st;
            fill(b, n, c->rank);
            st = algo ? kn_ring_all_reduce(c, b, n, KN_DT_F32, scratch) : kn_comm_all_reduce(c, b, b, n, KN_DT_F32);
            if (st == KN_OK && !check(b, n, c->size))
                st = kn_error(KN_ERR_INTERNAL, "%s all-reduce of %lld floats gave a wrong sum", algo ? "ring" : "mpi",
                              (long long)n);
            if (st == KN_OK) st = kn_comm_barrier(c);
            double t0 = kn_time_now();
            for (int it = 0; st == KN_OK && it < iters; it++)
                st = algo ? kn_ring_all_reduce(c, b, n, KN_DT_F32, scratch) : kn_comm_all_reduce(c, b, b, n, KN_DT_F32);
            double dt = (kn_time_now() - t0) / iters;
            if (st != KN_OK) {
                kn_free(b); kn_free(scratch);
                goto out;
            }
            double bus = 2.0 * (c->size - 1) / c->size * (double)n * sizeof(float) / dt / 1e9;
            if (c->rank == 0) printf("%10lld  %-8s %12.1f %14.3f\n", (long long)n, algo ? "ring" : "mpi", dt * 1e6, bus);
        }
        kn_free(b);
        kn_free(scratch);
    }
    rc = 0;
out:
    if (rc) fprintf(stderr, "kiln bench-comm: rank %d: %s\n", kn_dist_rank(), kn_last_error());
    kn_comm_free(c);
    if (rc) kn_dist_abort(rc);
    kn_dist_finalize();
    return rc;
}
