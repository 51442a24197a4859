/* gemm_bench.c — the CPU matrix product (kn_k_matmul_f32) against Debian's OpenBLAS sgemm.
 *
 * A benchmark driver, not a test: for 1024^3 and the GPT step's matmul shapes (forward,
 * and the backward's two products per linear layer: dx = dy . w^T with a transposed b,
 * dw = x^T . dy with a transposed a) it times kiln's blocked GEMM and OpenBLAS's
 * cblas_sgemm on 1 and 2 threads, and, with --old, kiln's matmul before cache blocking
 * (old_kn_k_matmul_f32: the kernels of commit GEMM_OLD, renamed by bench/bench.mk).
 *
 * The warm-up runs check that kiln and OpenBLAS computed the same product (the largest
 * relative difference must be below 1e-3: the sums are in float, in different orders).
 * The machine it runs on may be shared, so the contestants are INTERLEAVED: after one
 * warm-up each, every repetition runs kiln, then OpenBLAS (then old), alternating which
 * goes first, so a burst of load from another process hits both; the table gives each
 * one's median and best (minimum time) GFLOP/s over --reps repetitions (default 9) and
 * the ratios kiln/OpenBLAS of the medians and of the bests. The best is the figure least
 * disturbed by other processes; the two ratios agreeing says the run was quiet.
 *
 * OpenBLAS is only a reference: it is opened at run time with dlopen (libkiln never links
 * it), and the bench says so in one line and goes on without it when it is not installed
 * (apt-get install libopenblas-dev). After a call OpenBLAS's worker threads spin for a
 * while (2^28 cycles by default) waiting for the next one, so on a machine with as many
 * cores as threads, kiln's worker, run next, would share a core with a spinning thread and
 * lose half its speed: the children run with OPENBLAS_THREAD_TIMEOUT=4 (spin 2^4 cycles,
 * then sleep, as kiln's workers do). Thread counts: KILN_THREADS is read once per process
 * by kiln, so the driver re-runs itself with KILN_THREADS=OPENBLAS_NUM_THREADS=t for each t
 * of --threads (default 1,2). --shapes NAME,NAME runs only the shapes whose names start
 * with those words (e.g. --shapes mlp-up,logits). --cpu-clock (one thread only) times with
 * the process's CPU time instead of the wall clock, for a machine so loaded that the
 * processes are descheduled mid-product. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln/base.h"
#include "kiln/kernels.h"

typedef void (*sgemm_fn)(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                         const float *b, int ldb, float beta, float *c, int ldc);
/* weak: linked only where bench/bench.mk could build it (a git checkout holding GEMM_OLD) */
__attribute__((weak)) void old_kn_k_matmul_f32(const float *a, const float *b, float *c, int64_t m, int64_t n,
                                               int64_t k, bool ta, bool tb);

/* The clock: the wall clock, or with --cpu-clock the process's CPU time (meaningful on one
 * thread only: time spent descheduled by other processes' load is then not counted). */
static clockid_t bench_clock = CLOCK_MONOTONIC;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(bench_clock, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

typedef struct shape {
    const char *name;
    int64_t m, n, k;
    bool ta, tb;
} shape;

/* The GPT step's products at plots' default size (d 768, batch x seq 4 x 256 = 1024 rows,
 * vocab 50304 cut to 8192 to keep the run short; the logits use the tied embedding, a
 * transposed b). Per linear layer x[1024, d] . w[d, n]: the forward, dx = dy . w^T
 * (m 1024, n d, k n, tb) and dw = x^T . dy (m d, n n, k 1024, ta). */
static const shape shapes[] = {
    {"1024^3", 1024, 1024, 1024, false, false},
    {"qkv", 1024, 2304, 768, false, false},
    {"qkv-dx", 1024, 768, 2304, false, true},
    {"qkv-dw", 768, 2304, 1024, true, false},
    {"proj", 1024, 768, 768, false, false},
    {"proj-dx", 1024, 768, 768, false, true},
    {"proj-dw", 768, 768, 1024, true, false},
    {"mlp-up", 1024, 3072, 768, false, false},
    {"mlp-up-dx", 1024, 768, 3072, false, true},
    {"mlp-up-dw", 768, 3072, 1024, true, false},
    {"mlp-down", 1024, 768, 3072, false, false},
    {"mlp-down-dx", 1024, 3072, 768, false, true},
    {"mlp-down-dw", 3072, 768, 1024, true, false},
    {"logits", 1024, 8192, 768, false, true},
    {"logits-dx", 1024, 768, 8192, false, false},
    {"logits-dw", 8192, 768, 1024, true, false},
};
enum { NSHAPES = sizeof shapes / sizeof shapes[0], MAXREPS = 101 };

/* Seconds of one product. which: 0 kiln, 1 OpenBLAS, 2 kiln's old matmul. */
static double run_one(int which, const shape *s, const float *a, const float *b, float *c, sgemm_fn sg) {
    double t0 = now_s();
    if (which == 1)
        sg(101, s->ta ? 112 : 111, s->tb ? 112 : 111, (int)s->m, (int)s->n, (int)s->k, 1.0f, a,
           s->ta ? (int)s->m : (int)s->k, b, s->tb ? (int)s->k : (int)s->n, 0.0f, c, (int)s->n);
    else if (which == 2) old_kn_k_matmul_f32(a, b, c, s->m, s->n, s->k, s->ta, s->tb);
    else kn_k_matmul_f32(a, b, c, s->m, s->n, s->k, s->ta, s->tb);
    return now_s() - t0;
}

/* Is name selected by the comma-separated prefixes in sel (NULL: all)? */
static bool selected(const char *name, const char *sel) {
    if (!sel) return true;
    for (const char *p = sel; *p;) {
        size_t len = strcspn(p, ",");
        if (len > 0 && strlen(name) == len && strncmp(name, p, len) == 0) return true;
        p += len + (p[len] == ',');
    }
    return false;
}

static int usage(const char *argv0) {
    fprintf(stderr,
            "usage: %s [--threads 1,2] [--reps N (1..%d)] [--shapes NAME,...] [--old] [--cpu-clock (with --threads 1)]\n"
            "shapes:",
            argv0, MAXREPS);
    for (int i = 0; i < NSHAPES; i++) fprintf(stderr, " %s", shapes[i].name);
    fprintf(stderr, "\n");
    return 2;
}

/* One thread count's table (this process runs with KILN_THREADS set). */
static int run_child(int reps, const char *sel, bool old, bool header) {
    int nt = kn_k_threads();
    void *h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    sgemm_fn sg = h ? (sgemm_fn)(uintptr_t)dlsym(h, "cblas_sgemm") : NULL;
    if (!sg) printf("# OpenBLAS not found (apt-get install libopenblas-dev): its columns are skipped\n");
    const char *(*corename)(void) = h ? (const char *(*)(void))(uintptr_t)dlsym(h, "openblas_get_corename") : NULL;
    if (header && corename) printf("# OpenBLAS core: %s\n", corename());
    if (header) {
        printf("# interleaved, %d repetitions after a warm-up; GFLOP/s as median/best (best = the fastest run)\n",
               reps);
        printf("shape\tm\tn\tk\tta\ttb\tthreads\tkiln_med\tkiln_best\topenblas_med\topenblas_best\tratio_med"
               "\tratio_best%s\n",
               old ? "\told_med\told_best" : "");
    }
    int ncont = old ? 3 : 2;
    for (int i = 0; i < NSHAPES; i++) {
        const shape *s = &shapes[i];
        if (!selected(s->name, sel)) continue;
        float *a = malloc((size_t)(s->m * s->k) * 4), *b = malloc((size_t)(s->k * s->n) * 4);
        float *c = malloc((size_t)(s->m * s->n) * 4);
        if (!a || !b || !c) { fprintf(stderr, "gemm_bench: out of memory\n"); return 1; }
        for (int64_t j = 0; j < s->m * s->k; j++) a[j] = (float)((j * 7919) % 1000) / 1000.0f - 0.5f;
        for (int64_t j = 0; j < s->k * s->n; j++) b[j] = (float)((j * 104729) % 1000) / 1000.0f - 0.5f;
        double fl = 2.0 * (double)s->m * (double)s->n * (double)s->k * 1e-9, t[3][MAXREPS];
        /* warm-up (page faults, packing buffers), checking that both computed the same product:
         * the largest |kiln - OpenBLAS| / (1 + |OpenBLAS|) */
        float *c1 = malloc((size_t)(s->m * s->n) * 4);
        if (!c1) { fprintf(stderr, "gemm_bench: out of memory\n"); return 1; }
        double diff = 0;
        run_one(0, s, a, b, c1, sg);
        if (sg) {
            run_one(1, s, a, b, c, sg);
            for (int64_t j = 0; j < s->m * s->n; j++) {
                double d = fabs((double)c1[j] - c[j]) / (1 + fabs((double)c[j]));
                if (!(d <= diff)) diff = d;
            }
        }
        free(c1);
        if (old) run_one(2, s, a, b, c, sg);
        for (int r = 0; r < reps; r++)
            for (int q = 0; q < ncont; q++) {
                int w = (q + r) % ncont; /* alternate who goes first */
                t[w][r] = w != 1 || sg ? run_one(w, s, a, b, c, sg) : 1;
            }
        double med[3], best[3];
        for (int w = 0; w < ncont; w++) {
            qsort(t[w], (size_t)reps, sizeof t[w][0], cmp_d);
            med[w] = fl / t[w][reps / 2];
            best[w] = fl / t[w][0];
        }
        if (diff > 1e-3) {
            fprintf(stderr, "gemm_bench: %s: kiln and OpenBLAS differ by %.3g (relative): not the same product\n",
                    s->name, diff);
            return 1;
        }
        printf("%s\t%lld\t%lld\t%lld\t%d\t%d\t%d\t%.1f\t%.1f\t", s->name, (long long)s->m, (long long)s->n,
               (long long)s->k, s->ta, s->tb, nt, med[0], best[0]);
        if (sg) printf("%.1f\t%.1f\t%.2f\t%.2f", med[1], best[1], med[0] / med[1], best[0] / best[1]);
        else printf("-\t-\t-\t-");
        if (old) printf("\t%.1f\t%.1f", med[2], best[2]);
        printf("\n");
        fflush(stdout);
        free(a), free(b), free(c);
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *threads = "1,2", *sel = NULL;
    int reps = 9;
    bool old = false, child = false, cpu_clock = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) threads = argv[++i];
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--shapes") == 0 && i + 1 < argc) sel = argv[++i];
        else if (strcmp(argv[i], "--old") == 0) old = true;
        else if (strcmp(argv[i], "--cpu-clock") == 0) cpu_clock = true;
        else if (strcmp(argv[i], "--child") == 0) child = true;
        else return usage(argv[0]);
    }
    if (reps < 1 || reps > MAXREPS || (cpu_clock && !child && strcmp(threads, "1") != 0)) return usage(argv[0]);
    if (cpu_clock) bench_clock = CLOCK_PROCESS_CPUTIME_ID;
    if (old && !old_kn_k_matmul_f32) {
        fprintf(stderr, "%s: --old: the old matmul is not in this build: it is compiled from a git checkout "
                "holding commit GEMM_OLD (bench/bench.mk); run without --old\n", argv[0]);
        return 2;
    }
    if (child) return run_child(reps, sel, old, getenv("KILN_BENCH_HEADER") != NULL);
    /* the parent: one child per thread count */
    bool first = true;
    for (const char *p = threads; *p;) {
        int nt = atoi(p);
        if (nt < 1 || nt > 256) return usage(argv[0]);
        char cmd[8192];
        snprintf(cmd, sizeof cmd,
                 "%sKILN_THREADS=%d OPENBLAS_NUM_THREADS=%d OPENBLAS_THREAD_TIMEOUT=4 '%s' --child --reps %d%s%s%s%s%s",
                 first ? "KILN_BENCH_HEADER=1 " : "", nt, nt, argv[0], reps, sel ? " --shapes '" : "", sel ? sel : "",
                 sel ? "'" : "", old ? " --old" : "", cpu_clock ? " --cpu-clock" : "");
        fflush(stdout);
        if (system(cmd) != 0) return 1;
        first = false;
        p += strcspn(p, ",");
        p += *p == ',';
    }
    return 0;
}
