/* cuda_gemm_tune.cu — the GPU GEMM's autotuner (kiln/gemm.h, kn_cuda_gemm_tune): every
 * candidate configuration of the kernel core/codegen/gemm_cuda.c renders is compiled with
 * NVRTC (through the kernel cache), checked against cuBLAS fp32 (CUBLAS_COMPUTE_32F_PEDANTIC:
 * no TF32) on the same random operands, and timed with CUDA events (the median of 5 launches
 * after a warm-up); cuBLAS is timed the same way in the same run. The fastest configuration
 * is written to <cache>/gemm-cuda/<GPU name>-<m>x<n>x<k>, the same cache idea as the CPU
 * GEMM's choice and the kernels'. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wswitch-enum"
#include <cublas_v2.h>
#pragma GCC diagnostic pop

#include "runtime/cuda_impl.h"
extern "C" {
#include "kiln/codegen.h"
#include "kiln/gemm.h"
}

#define KNG_TRY(call)                                                                                       \
    do {                                                                                                    \
        if ((st = (call)) != KN_OK) goto done;                                                              \
    } while (0)

static int cmp_ms(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* A GEMM whose launches `run` queues, timed: the median of 5 after one warm-up launch. */
typedef kn_status (*kng_run_fn)(void *ctx);
static kn_status time_median(kng_run_fn run, void *ctx, cudaEvent_t e0, cudaEvent_t e1, double *ms) {
    kn_status st = KN_OK;
    float t[5];
    KNG_TRY(run(ctx));
    for (int r = 0; r < 5; r++) {
        KNC_CUDA_GOTO(cudaEventRecord(e0));
        KNG_TRY(run(ctx));
        KNC_CUDA_GOTO(cudaEventRecord(e1));
        KNC_CUDA_GOTO(cudaEventSynchronize(e1));
        KNC_CUDA_GOTO(cudaEventElapsedTime(&t[r], e0, e1));
    }
    qsort(t, 5, sizeof t[0], cmp_ms);
    *ms = t[2];
done:
    return st;
}

typedef struct kng_cublas { cublasHandle_t h; const float *a, *b; float *c; int m, n, k; } kng_cublas;
static kn_status run_cublas(void *ctx) {
    kng_cublas *g = (kng_cublas *)ctx;
    kn_status st = KN_OK;
    float one = 1.0f, zero = 0.0f;
    /* row-major C = A B is column-major C^T = B^T A^T */
    KNC_CUBLAS_GOTO(cublasGemmEx(g->h, CUBLAS_OP_N, CUBLAS_OP_N, g->n, g->m, g->k, &one, g->b, CUDA_R_32F, g->n, g->a,
                            CUDA_R_32F, g->k, &zero, g->c, CUDA_R_32F, g->n, CUBLAS_COMPUTE_32F_PEDANTIC,
                            CUBLAS_GEMM_DEFAULT));
done:
    return st;
}

typedef struct kng_kernel { void *fn; kn_cuda_launch l; void *args[6]; } kng_kernel;
static kn_status run_kernel(void *ctx) {
    kng_kernel *g = (kng_kernel *)ctx;
    return kn_cuda_launch_kernel(g->fn, "kn_sgemm", g->l, g->args);
}

/* The cache file for this GPU and shape. */
static kn_status cache_path(int device, int64_t m, int64_t n, int64_t k, const char *cache_dir, char *out, size_t cap) {
    char dir[640];
    if (cache_dir) snprintf(dir, sizeof dir, "%s", cache_dir);
    else KN_TRY(kn_gemm_cache_dir(dir, sizeof dir));
    cudaDeviceProp pr;
    KN_CUDA_TRY(cudaGetDeviceProperties(&pr, device));
    char name[sizeof pr.name + 1];
    snprintf(name, sizeof name, "%s", pr.name);
    for (char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9'))) *p = '_';
    char sub[704];
    snprintf(sub, sizeof sub, "%s/gemm-cuda", dir);
    KN_TRY(kn_cache_mkdirs(sub));
    int w = snprintf(out, cap, "%s/%s-%lldx%lldx%lld", sub, name, (long long)m, (long long)n, (long long)k);
    if (w < 0 || (size_t)w >= cap) return kn_error(KN_ERR_IO, "kn_cuda_gemm_tune: cache path longer than %zu bytes", cap);
    return KN_OK;
}

/* Time configuration c (render, compile or read the cubin, check, time) into *t. */
static kn_status try_config(int device, kn_cuda_gemm_cfg c, const float *a, const float *b, float *dc, const float *ref,
                            float *host, int m, int n, int k, cudaEvent_t e0, cudaEvent_t e1, kn_cuda_gemm_trial *t) {
    kn_status st = KN_OK;
    char *src = NULL;
    kn_cuda_module *mod = NULL;
    kng_kernel g = {NULL, kn_cuda_gemm_launch(c, m, n), {&a, &b, &dc, &m, &n, &k}};
    double worst = 0;
    KNG_TRY(kn_cuda_gemm_render(c, KN_CUDA_NVRTC, &src));
    KNG_TRY(kn_cuda_module_load(device, src, "kn_sgemm", &mod, NULL, NULL));
    KNG_TRY(kn_cuda_module_kernel(mod, "kn_sgemm", &g.fn));
    KNC_CUDA_GOTO(cudaMemset(dc, 0, (size_t)m * n * sizeof(float)));
    KNG_TRY(run_kernel(&g));
    KNC_CUDA_GOTO(cudaMemcpy(host, dc, (size_t)m * n * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < (size_t)m * n; i++) {
        double e = fabs((double)host[i] - (double)ref[i]) / (1.0 + fabs((double)ref[i]));
        if (!(e <= worst)) worst = e; /* NaN counts */
    }
    t->cfg = c;
    t->max_rel_err = worst;
    if (!(worst <= 1e-3)) {
        st = kn_error(KN_ERR_INTERNAL, "GPU GEMM %dx%dx%d/%dx%d%s differs from cuBLAS by %.3g (relative): a kiln bug",
                      c.bm, c.bn, c.bk, c.tm, c.tn, c.vec ? " vec" : "", worst);
        goto done;
    }
    KNG_TRY(time_median(run_kernel, &g, e0, e1, &t->ms));
done:
    kn_cuda_module_free(mod);
    kn_free(src);
    return st;
}

extern "C" kn_status kn_cuda_gemm_tune(int device, int64_t m, int64_t n, int64_t k, const char *cache_dir, bool force,
                                       kn_cuda_gemm_tune_result *r) {
    if (!r) return kn_error(KN_ERR_ARG, "kn_cuda_gemm_tune: NULL result");
    memset(r, 0, sizeof *r);
    if (m < 1 || n < 1 || k < 1 || m > 32768 || n > 32768 || k > 32768)
        return kn_error(KN_ERR_ARG, "kn_cuda_gemm_tune: shape %lldx%lldx%lld: each size must be in 1..32768", (long long)m,
                        (long long)n, (long long)k);
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || device < 0 || device >= count) {
        (void)cudaGetLastError();
        return kn_error(KN_ERR_DEVICE, "kn_cuda_gemm_tune: no CUDA device %d", device);
    }
    kn_status st = KN_OK;
    float *a = NULL, *b = NULL, *c = NULL, *ref = NULL, *host = NULL, *href = NULL;
    void *x = NULL, *y = NULL;
    cublasHandle_t h = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    size_t sa = (size_t)m * k, sb = (size_t)k * n, sc = (size_t)m * n;
    kn_cuda_gemm_cfg cands[KN_CUDA_GEMM_MAX_TRIALS];
    int ncand = kn_cuda_gemm_candidates(cands, KN_CUDA_GEMM_MAX_TRIALS);
    kng_cublas cb;
    float ms;
    KNC_CUDA_GOTO(cudaSetDevice(device));
    KNG_TRY(cache_path(device, m, n, k, cache_dir, r->path, sizeof r->path));
    if (!force) { /* a cached choice: "bm bn bk tm tn vec" */
        FILE *f = fopen(r->path, "r");
        int v[6];
        if (f && fscanf(f, "%d %d %d %d %d %d", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) == 6) {
            kn_cuda_gemm_cfg cc = {v[0], v[1], v[2], v[3], v[4], v[5] != 0};
            if (kn_cuda_gemm_check(cc) == KN_OK && kn_cuda_gemm_fits(cc, m, n, k)) {
                cands[0] = cc;
                ncand = 1;
                r->from_cache = true;
            } else kn_clear_error();
        }
        if (f) fclose(f);
    }
    KNC_CUDA_GOTO(cudaEventCreate(&e0));
    KNC_CUDA_GOTO(cudaEventCreate(&e1));
    { /* the copy roof of this run: 256 MiB device to device, best of 5 after a warm-up */
        const size_t bytes = (size_t)256 << 20;
        KNC_CUDA_GOTO(cudaMalloc(&x, bytes));
        KNC_CUDA_GOTO(cudaMalloc(&y, bytes));
        KNC_CUDA_GOTO(cudaMemset(x, 0, bytes));
        for (int i = 0; i < 6; i++) {
            KNC_CUDA_GOTO(cudaEventRecord(e0));
            KNC_CUDA_GOTO(cudaMemcpy(y, x, bytes, cudaMemcpyDeviceToDevice));
            KNC_CUDA_GOTO(cudaEventRecord(e1));
            KNC_CUDA_GOTO(cudaEventSynchronize(e1));
            KNC_CUDA_GOTO(cudaEventElapsedTime(&ms, e0, e1));
            double gbs = 2.0 * (double)bytes / (ms * 1e-3) * 1e-9;
            if (i > 0 && gbs > r->copy_gbs) r->copy_gbs = gbs;
        }
    }
    KNC_CUDA_GOTO(cudaMalloc(&a, sa * sizeof(float)));
    KNC_CUDA_GOTO(cudaMalloc(&b, sb * sizeof(float)));
    KNC_CUDA_GOTO(cudaMalloc(&c, sc * sizeof(float)));
    KNC_CUDA_GOTO(cudaMalloc(&ref, sc * sizeof(float)));
    host = (float *)kn_malloc((sa > sb ? (sa > sc ? sa : sc) : (sb > sc ? sb : sc)) * sizeof(float));
    href = (float *)kn_malloc(sc * sizeof(float));
    if (!host || !href) { st = kn_error(KN_ERR_OOM, "kn_cuda_gemm_tune: out of host memory"); goto done; }
    { /* random operands in [-1, 1) */
        kn_rng rng = kn_rng_new(20261125);
        for (size_t i = 0; i < sa; i++) host[i] = (float)(kn_rng_u32(&rng) * (2.0 / 4294967296.0) - 1.0);
        KNC_CUDA_GOTO(cudaMemcpy(a, host, sa * sizeof(float), cudaMemcpyHostToDevice));
        for (size_t i = 0; i < sb; i++) host[i] = (float)(kn_rng_u32(&rng) * (2.0 / 4294967296.0) - 1.0);
        KNC_CUDA_GOTO(cudaMemcpy(b, host, sb * sizeof(float), cudaMemcpyHostToDevice));
    }
    KNC_CUBLAS_GOTO(cublasCreate(&h));
    cb = {h, a, b, ref, (int)m, (int)n, (int)k};
    KNG_TRY(time_median(run_cublas, &cb, e0, e1, &r->cublas_ms));
    KNC_CUDA_GOTO(cudaMemcpy(href, ref, sc * sizeof(float), cudaMemcpyDeviceToHost));
    r->best_ms = 0;
    for (int i = 0; i < ncand && r->ntrials < KN_CUDA_GEMM_MAX_TRIALS; i++) {
        if (!kn_cuda_gemm_fits(cands[i], m, n, k)) continue;
        kn_cuda_gemm_trial *t = &r->trials[r->ntrials];
        KNG_TRY(try_config(device, cands[i], a, b, c, href, host, (int)m, (int)n, (int)k, e0, e1, t));
        r->ntrials++;
        if (r->best_ms == 0 || t->ms < r->best_ms) {
            r->best_ms = t->ms;
            r->best = t->cfg;
        }
    }
    if (r->ntrials == 0) {
        st = kn_error(KN_ERR_INTERNAL, "kn_cuda_gemm_tune: no candidate fits %lldx%lldx%lld", (long long)m, (long long)n,
                      (long long)k);
        goto done;
    }
    if (!r->from_cache) {
        FILE *f = fopen(r->path, "w");
        if (!f) { st = kn_error(KN_ERR_IO, "kn_cuda_gemm_tune: cannot write %s: %s", r->path, strerror(errno)); goto done; }
        fprintf(f, "%d %d %d %d %d %d\n", r->best.bm, r->best.bn, r->best.bk, r->best.tm, r->best.tn, (int)r->best.vec);
        fclose(f);
    }
done:
    if (h) cublasDestroy(h);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    cudaFree(ref);
    cudaFree(x);
    cudaFree(y);
    kn_free(host);
    kn_free(href);
    return st;
}
