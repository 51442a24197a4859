/* gemm_bench.c — the CPU matrix product (kn_k_matmul_f32) against Debian's OpenBLAS sgemm.
 *
 * A benchmark driver, not a test: for 1024^3 and the GPT step's matmul shapes it times
 * kiln's blocked GEMM, kiln's matmul before cache blocking (old_kn_k_matmul_f32: the
 * kernels of commit GEMM_OLD, renamed by bench/bench.mk), and OpenBLAS's cblas_sgemm, on
 * 1 and 2 threads, with one warm-up and the median of 5 runs. OpenBLAS is only a
 * reference: it is opened at run time with dlopen (libkiln never links it), and the
 * bench says so in one line and goes on without it when it is not installed
 * (apt-get install libopenblas-dev). Thread counts: KILN_THREADS is read once per process
 * by kiln, so the driver re-runs itself with KILN_THREADS=1 and 2. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln/base.h"
#include "kiln/kernels.h"

typedef void (*sgemm_fn)(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                         const float *b, int ldb, float beta, float *c, int ldc);
void old_kn_k_matmul_f32(const float *a, const float *b, float *c, int64_t m, int64_t n, int64_t k, bool ta, bool tb);

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

typedef struct shape {
    const char *name;
    int64_t m, n, k;
    bool tb;
} shape;

/* Median seconds of 5 runs of one product after one warm-up. which: 0 kiln, 1 kiln's
 * old matmul, 2 OpenBLAS. */
static double time_one(int which, const shape *s, const float *a, const float *b, float *c, sgemm_fn sg) {
    enum { REPS = 5 };
    double t[REPS];
    for (int r = -1; r < REPS; r++) {
        double t0 = now_s();
        if (which == 2)
            sg(101, 111, s->tb ? 112 : 111, (int)s->m, (int)s->n, (int)s->k, 1.0f, a, (int)s->k, b,
               s->tb ? (int)s->k : (int)s->n, 0.0f, c, (int)s->n);
        else if (which == 1) old_kn_k_matmul_f32(a, b, c, s->m, s->n, s->k, false, s->tb);
        else kn_k_matmul_f32(a, b, c, s->m, s->n, s->k, false, s->tb);
        double dt = now_s() - t0;
        if (r >= 0) t[r] = dt;
    }
    qsort(t, REPS, sizeof t[0], cmp_d);
    return t[REPS / 2];
}

int main(int argc, char **argv) {
    if (argc < 2) { /* the parent: one child per thread count */
        for (int nt = 1; nt <= 2; nt++) {
            char cmd[4096];
            snprintf(cmd, sizeof cmd, "KILN_THREADS=%d OPENBLAS_NUM_THREADS=%d '%s' run", nt, nt, argv[0]);
            fflush(stdout);
            if (system(cmd) != 0) return 1;
        }
        return 0;
    }
    int nt = kn_k_threads();
    void *h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    sgemm_fn sg = h ? (sgemm_fn)(uintptr_t)dlsym(h, "cblas_sgemm") : NULL;
    if (!sg) printf("# OpenBLAS not found (apt-get install libopenblas-dev): its column is skipped\n");
    /* The GPT step's products (plots' default: d 768, batch x seq 4 x 256 rows, vocab 50304
     * cut to 8192 here to keep the run short): qkv, attention output, MLP up and down, and
     * the logits with a transposed b (tied embedding). */
    static const shape shapes[] = {
        {"1024^3", 1024, 1024, 1024, false},  {"qkv 1024x2304x768", 1024, 2304, 768, false},
        {"proj 1024x768x768", 1024, 768, 768, false}, {"mlp-up 1024x3072x768", 1024, 3072, 768, false},
        {"mlp-down 1024x768x3072", 1024, 768, 3072, false}, {"logits 1024x8192x768 (b^T)", 1024, 8192, 768, true},
    };
    if (nt == 1) printf("shape\tthreads\tkiln_GFLOPs\told_GFLOPs\topenblas_GFLOPs\tkiln/openblas\tkiln/old\n");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const shape *s = &shapes[i];
        float *a = malloc((size_t)(s->m * s->k) * 4), *b = malloc((size_t)(s->k * s->n) * 4);
        float *c = malloc((size_t)(s->m * s->n) * 4);
        if (!a || !b || !c) { fprintf(stderr, "gemm_bench: out of memory\n"); return 1; }
        for (int64_t j = 0; j < s->m * s->k; j++) a[j] = (float)((j * 7919) % 1000) / 1000.0f - 0.5f;
        for (int64_t j = 0; j < s->k * s->n; j++) b[j] = (float)((j * 104729) % 1000) / 1000.0f - 0.5f;
        double fl = 2.0 * (double)s->m * (double)s->n * (double)s->k * 1e-9;
        double tk = time_one(0, s, a, b, c, sg), tu = time_one(1, s, a, b, c, sg);
        double to = sg ? time_one(2, s, a, b, c, sg) : 0;
        if (sg) printf("%s\t%d\t%.1f\t%.1f\t%.1f\t%.2f\t%.2f\n", s->name, nt, fl / tk, fl / tu, fl / to, to / tk, tu / tk);
        else printf("%s\t%d\t%.1f\t%.1f\t-\t-\t%.2f\n", s->name, nt, fl / tk, fl / tu, tu / tk);
        fflush(stdout);
        free(a), free(b), free(c);
    }
    return 0;
}
