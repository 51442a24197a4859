/* bench_comm.c — `kiln bench-comm`: kiln's ring all-reduce against the library's own, under
 * mpiexec.
 *
 *   mpiexec -n 4 kiln bench-comm [--sizes 1k,64k,1m] [--iters 20] [--comm mpi|nccl]
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
    fprintf(f, "usage: mpiexec -n N kiln bench-comm [--sizes 1k,64k,1m] [--iters 20]\n"
               "  times kiln's ring all-reduce (kn_ring_all_reduce) against MPI_Iallreduce on f32 buffers\n");
    return rc;
}

int kn_cli_bench_comm(int argc, char **argv) {
    const char *sizes = "1k,16k,256k,1m";
    int iters = 20;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return usage(stdout, 0);
        if (!strcmp(argv[i], "--sizes") && i + 1 < argc) sizes = argv[++i];
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
    if (kn_dist_init("kiln bench-comm") != KN_OK) {
        fprintf(stderr, "kiln bench-comm: %s\n", kn_last_error());
        return 2;
    }
    kn_comm *c = NULL;
    int rc = 1;
    if (kn_comm_world(&c, KN_COMM_MPI) != KN_OK) goto out;
    if (c->rank == 0)
        printf("kiln bench-comm: %d ranks, f32 sum, %d iterations per size\n%10s  %-8s %12s %14s\n", c->size, iters,
               "elements", "algo", "us/op", "bus GB/s");
    char list[256];
    snprintf(list, sizeof list, "%s", sizes);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        bool ok;
        int64_t n = parse_size(tok, &ok);
        if (!ok) {
            kn_error(KN_ERR_ARG, "--sizes: '%s' is not a count like 4096, 64k or 1m", tok);
            goto out;
        }
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
