/* int8_bench.c — the INT8 GEMM against kiln's f32 GEMM (CPU) and against cuBLAS's bf16 GEMM
 * (GPU), in one run: issue 34's targets (CPU int8 >= 1.5x kiln's f32 GEMM; GPU int8 >= 1.6x
 * bf16 at [8192, 768] x [768, 3072]).
 *
 * A benchmark driver, not a test (`make bench-int8`; BENCH_INT8_ARGS passes options). For
 * each shape [M, K] x [K, N] it times, interleaved (one warm-up each, then every repetition
 * runs each contestant once, so a burst of load from other processes hits them all):
 *
 *   f32        kn_k_matmul_f32, kiln's cache-blocked f32 GEMM (the baseline ISA, as built)
 *   i8         kn_gemm_i8_packed: int8 codes in (the weight packed beforehand, as a program
 *              that keeps its packed weight would), f32 out including the epilogue
 *              (kn_i8_dequant with both scales); ops counted as 2 M N K
 *   i8+pack    kn_gemm_i8: the same with the weight packed on every call
 *   i8+quant   kn_quant_rows_i8 of the f32 activations (per token) then kn_gemm_i8_packed:
 *              what matmul_w8a8 costs besides the weight's quantization
 *   w8         with --w8: kn_gemm_w8, f32 activations times the weight's codes (f32 sums)
 *
 * and prints each one's median and best GFLOP/s (GOP/s for int8) and the ratios of i8 and
 * i8+quant to f32 (medians). The first run checks the int8 product against the f32 one
 * (relative error of the largest output below 3%: quantization, not a bug) and stops
 * otherwise. Options: --reps N (default 5), --shapes NAME,... (prefixes of the shape
 * names), --m M (the rows of every shape; default 8192 for mlp-up, 2048 for the others: on
 * a 2-core machine f32 at 8192 rows takes seconds), --path P (force kn_gemm_i8's path:
 * generic, avx2, avxvnni, avx512vnni), --all-paths (one i8 column per path this CPU has),
 * --device cuda (the GPU part only: kn_cuda_bench_int8, cuBLASLt int8 IMMA against cuBLAS
 * bf16 at the same shapes, CUDA events; in a build without CUDA, or with no GPU, it says so
 * in one line). Threads: KILN_THREADS (kiln's pool, read once). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln/base.h"
#include "kiln/kernels.h"
#include "kiln/quant.h"
#if KN_HAVE_CUDA
#include "kiln/cuda.h"
#endif

typedef struct shape {
    const char *name;
    int64_t m, k, n;
} shape;

static const shape shapes[] = {
    {"mlp-up", 8192, 768, 3072},   /* the shape: GPT-2 small's MLP up projection */
    {"mlp-down", 2048, 3072, 768}, /* its down projection */
    {"attn-qkv", 2048, 768, 2304}, /* the fused q, k, v projection */
    {"decode", 8, 768, 3072},      /* a few tokens: the panel-parallel path */
};
#define NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static void fill(float *x, int64_t n, uint32_t seed, float a) {
    uint32_t s = seed * 2654435761u + 1;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = a * ((float)(s >> 8) / (float)(1u << 24) * 2.0f - 1.0f);
    }
}

static bool wanted(const char *list, const char *name) {
    if (!list) return true;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ","))
        if (*t && !strncmp(name, t, strlen(t))) return true;
    return false;
}

#define MAXC 8
typedef struct contest {
    char name[32];
    const char *path; /* the int8 path forced for it (NULL: f32 or the current one) */
    int kind;         /* 0 f32, 1 i8, 2 i8+pack, 3 i8+quant, 4 w8 */
    double t[64];
} contest;

typedef struct bufs {
    const shape *s;
    float *x, *w, *wt, *c, *sx, *sw;
    int8_t *qx, *qw;
    kn_i8_weight pw;
} bufs;

static int run_one(bufs *B, const contest *ct, double *sec) {
    const int64_t m = B->s->m, k = B->s->k, n = B->s->n;
    if (ct->path && kn_gemm_i8_set_path(ct->path) != KN_OK) return 1;
    double t0 = now_s();
    kn_status st = KN_OK;
    switch (ct->kind) {
    case 0: kn_k_matmul_f32(B->x, B->w, B->c, m, n, k, false, false); break;
    case 1: st = kn_gemm_i8_packed(B->qx, &B->pw, B->sx, B->sw, B->c, m); break;
    case 2: st = kn_gemm_i8(B->qx, B->qw, B->sx, B->sw, B->c, m, n, k); break;
    case 4: kn_gemm_w8(B->x, B->qw, B->sw, B->c, m, n, k); break;
    default:
        kn_quant_rows_i8(B->x, m, k, k, B->qx, B->sx);
        st = kn_gemm_i8_packed(B->qx, &B->pw, B->sx, B->sw, B->c, m);
    }
    *sec = now_s() - t0;
    if (ct->path) kn_gemm_i8_set_path("auto");
    if (st != KN_OK) {
        fprintf(stderr, "bench-int8: %s: %s\n", ct->name, kn_last_error());
        return 1;
    }
    return 0;
}

static int bench_cpu(const shape *s, int reps, const char *force, bool all_paths, bool with_w8) {
    const int64_t m = s->m, k = s->k, n = s->n;
    bufs B = {.s = s};
    B.x = kn_malloc((size_t)(m * k) * 4), B.w = kn_malloc((size_t)(k * n) * 4), B.wt = kn_malloc((size_t)(k * n) * 4);
    B.c = kn_malloc((size_t)(m * n) * 4), B.sx = kn_malloc((size_t)m * 4), B.sw = kn_malloc((size_t)n * 4);
    B.qx = kn_malloc((size_t)(m * k)), B.qw = kn_malloc((size_t)(k * n));
    float *ref = kn_malloc((size_t)(m * n) * 4);
    if (!B.x || !B.w || !B.wt || !B.c || !B.sx || !B.sw || !B.qx || !B.qw || !ref) {
        fprintf(stderr, "bench-int8: out of memory for %s\n", s->name);
        return 1;
    }
    fill(B.x, m * k, 1, 1.0f);
    fill(B.w, k * n, 2, 0.05f);
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = 0; j < n; j++) B.wt[j * k + i] = B.w[i * n + j];
    kn_quant_rows_i8(B.wt, n, k, k, B.qw, B.sw); /* per output channel: rows of W^T */
    kn_quant_rows_i8(B.x, m, k, k, B.qx, B.sx);
    if (kn_i8_weight_pack(B.qw, n, k, &B.pw) != KN_OK) {
        fprintf(stderr, "bench-int8: %s\n", kn_last_error());
        return 1;
    }
    contest cs[MAXC];
    int nc = 0;
    cs[nc++] = (contest){.name = "f32", .kind = 0};
    const char *paths[8];
    int np = all_paths ? kn_gemm_i8_paths(paths, 8) : 1;
    if (!all_paths) paths[0] = force;
    for (int p = 0; p < np && nc < MAXC - 2; p++) {
        contest c = {.kind = 1, .path = paths[p]};
        snprintf(c.name, sizeof c.name, "i8%s%s", paths[p] ? ":" : "", paths[p] ? paths[p] : "");
        cs[nc++] = c;
    }
    cs[nc++] = (contest){.name = "i8+pack", .kind = 2, .path = force};
    cs[nc++] = (contest){.name = "i8+quant", .kind = 3, .path = force};
    if (with_w8) cs[nc++] = (contest){.name = "w8 (f32 x int8)", .kind = 4, .path = force};
    /* warm-up, and the check: int8 against f32 */
    double sec;
    for (int c = 0; c < nc; c++) {
        if (run_one(&B, &cs[c], &sec)) return 1;
        if (c == 0) { memcpy(ref, B.c, (size_t)(m * n) * 4); continue; }
        double emax = 0, rmax = 0;
        for (int64_t i = 0; i < m * n; i++) {
            double e = fabs((double)B.c[i] - ref[i]);
            if (e > emax || isnan(e)) emax = e;
            if (fabs(ref[i]) > rmax) rmax = fabs(ref[i]);
        }
        if (!(emax <= 0.03 * rmax)) {
            fprintf(stderr, "bench-int8: %s: %s differs from f32 by %g (largest |c| %g): wrong product\n", s->name,
                    cs[c].name, emax, rmax);
            return 1;
        }
    }
    if (reps > 64) reps = 64;
    for (int r = 0; r < reps; r++)
        for (int q = 0; q < nc; q++) {
            int c = (r % 2) ? nc - 1 - q : q; /* alternate the order */
            if (run_one(&B, &cs[c], &cs[c].t[r])) return 1;
        }
    const double ops = 2.0 * (double)m * (double)n * (double)k;
    printf("%-9s [%lld, %lld] x [%lld, %lld], %d reps (path %s)\n", s->name, (long long)m, (long long)k, (long long)k,
           (long long)n, reps, force ? force : kn_gemm_i8_path());
    double med_f32 = 0;
    for (int c = 0; c < nc; c++) {
        qsort(cs[c].t, (size_t)reps, sizeof(double), cmp_d);
        const double med = cs[c].t[reps / 2], best = cs[c].t[0];
        if (c == 0) med_f32 = med;
        printf("  %-18s median %8.2f ms %8.1f GOP/s   best %8.1f GOP/s", cs[c].name, med * 1e3, ops / med * 1e-9,
               ops / best * 1e-9);
        if (c > 0) printf("   x%.2f of f32", med_f32 / med);
        printf("\n");
    }
    kn_i8_weight_free(&B.pw);
    kn_free(B.x), kn_free(B.w), kn_free(B.wt), kn_free(B.c), kn_free(B.sx), kn_free(B.sw), kn_free(B.qx), kn_free(B.qw);
    kn_free(ref);
    return 0;
}

static int bench_gpu(const shape *s, int reps) {
#if KN_HAVE_CUDA
    kn_int8_gpu_times t;
    if (kn_cuda_bench_int8(0, s->m, s->n, s->k, reps, &t) != KN_OK) {
        printf("%-9s GPU part skipped: %s\n", s->name, kn_last_error());
        return 0;
    }
    const double ops = 2.0 * (double)s->m * (double)s->n * (double)s->k;
    printf("%-9s [%lld, %lld] x [%lld, %lld] on %s, best of %d (CUDA events)\n", s->name, (long long)s->m,
           (long long)s->k, (long long)s->k, (long long)s->n, t.device, reps);
    printf("  %-30s %8.3f ms %8.1f TFLOP/s\n", "cuBLAS bf16 (bf16 out)", t.bf16_ms, ops / t.bf16_ms * 1e-9);
    printf("  %-30s %8.3f ms %8.1f TFLOP/s\n", "cuBLAS bf16 (f32 out)", t.bf16_f32out_ms, ops / t.bf16_f32out_ms * 1e-9);
    if (t.i8_core_ms > 0)
        printf("  %-30s %8.3f ms %8.1f TOP/s   x%.2f of bf16\n", "cuBLASLt int8, int32 out", t.i8_core_ms,
               ops / t.i8_core_ms * 1e-9, t.bf16_ms / t.i8_core_ms);
    else printf("  cuBLASLt int8: no algorithm for this shape (the dp4a kernel runs)\n");
    printf("  %-30s %8.3f ms %8.1f TOP/s   x%.2f of bf16  (%s)\n", "int8 GEMM + dequant epilogue", t.i8_ms,
           ops / t.i8_ms * 1e-9, t.bf16_ms / t.i8_ms, t.i8_lt ? "cuBLASLt IMMA" : "dp4a fallback");
    printf("  %-30s %8.3f ms %8.1f TOP/s   x%.2f of bf16\n", "int8 + activation quantization", t.i8_quant_ms,
           ops / t.i8_quant_ms * 1e-9, t.bf16_ms / t.i8_quant_ms);
    if (t.i8_fused_ms > 0)
        printf("  %-30s %8.3f ms %8.1f TOP/s   x%.2f of bf16  (max diff from unfused %.2g of max |c|; "
               "KILN_I8_FUSED=1 uses it)\n",
               "int8, cuBLASLt-fused scales", t.i8_fused_ms, ops / t.i8_fused_ms * 1e-9, t.bf16_ms / t.i8_fused_ms,
               t.i8_fused_maxrel);
    else printf("  int8 with cuBLASLt-fused scales (OUTER_VEC_32F): not offered by this cuBLASLt\n");
    return 0;
#else
    (void)reps;
    printf("%-9s GPU part skipped: kiln was built without CUDA\n", s->name);
    return 0;
#endif
}

int main(int argc, char **argv) {
    int reps = 5;
    const char *only = NULL, *force = NULL;
    int64_t m_all = 0;
    bool all_paths = false, gpu = false, with_w8 = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--shapes") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--m") && i + 1 < argc) m_all = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--path") && i + 1 < argc) force = argv[++i];
        else if (!strcmp(argv[i], "--all-paths")) all_paths = true;
        else if (!strcmp(argv[i], "--w8")) with_w8 = true;
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) {
            const char *d = argv[++i];
            if (strcmp(d, "cpu") && strcmp(d, "cuda")) {
                fprintf(stderr, "bench-int8: --device cpu or cuda (got %s)\n", d);
                return 2;
            }
            gpu = !strcmp(d, "cuda");
        } else {
            fprintf(stderr, "usage: bench-int8 [--reps N] [--shapes NAME,...] [--m M] [--path P | --all-paths] "
                            "[--w8] [--device cpu|cuda]\n");
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    if (force && kn_gemm_i8_set_path(force) != KN_OK) {
        fprintf(stderr, "bench-int8: %s\n", kn_last_error());
        return 2;
    }
    kn_gemm_i8_set_path("auto");
    if (!gpu) {
        const char *p[8];
        int np = kn_gemm_i8_paths(p, 8);
        printf("bench-int8: CPU, %d threads; int8 paths here:", kn_k_threads());
        for (int i = 0; i < np; i++) printf(" %s", p[i]);
        printf(" (auto: %s)\n", kn_gemm_i8_path());
    }
    for (int i = 0; i < NSHAPES; i++) {
        if (!wanted(only, shapes[i].name)) continue;
        shape s = shapes[i];
        if (m_all > 0) s.m = m_all;
        else if (gpu && s.m > 8) s.m = 8192; /* a GPU needs no smaller M */
        if (gpu ? bench_gpu(&s, reps) : bench_cpu(&s, reps, force, all_paths, with_w8)) return 1;
    }
    return 0;
}
