/* roofline.c — `kiln roofline`: place every kernel of the GPT training step on this CPU's
 * roofline.
 *
 * The roofline model says a kernel of arithmetic intensity I (FLOPs per byte moved) can
 * run no faster than min(peak FLOP/s, bandwidth x I). This driver measures both roofs on
 * this machine — the peak with a microbenchmark of independent vector FMA chains on every
 * thread, the bandwidth with a STREAM-style triad over arrays far larger than the caches —
 * then runs the GPT step's joint graph (forward + backward, kn_gpt_graph) in the IR
 * interpreter with a per-node hook that timestamps each node, and takes each node's FLOPs
 * and bytes from the cost model (kn_node_cost, core/ir/cost.c). Output: a TSV of the
 * ceilings and one line per kernel (op, FLOPs, bytes, intensity, time, GFLOP/s, the roof
 * there and the fraction of it reached), and a gnuplot script that draws the roofs, the
 * ridge point and each kernel as a point, the costliest ones labelled (`make roofline`
 * renders SVG and PNG). Where kiln is built with CUDA and a GPU is present it also
 * measures the GPU ceilings (kn_cuda_ceilings: copy bandwidth, cuBLAS fp32 and bf16
 * peaks) and prints them; without a GPU it says in one line that they were skipped.
 *
 *   kiln roofline [--out DIR] [--layers L] [--width D] [--batch B] [--seq T] [--vocab V] */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli/cli.h"
#include "kiln/cuda.h"
#include "kiln/ir.h"
#include "kiln/kernels.h"
#include "kiln/nn.h"
#include "kiln/passes.h"
#include "kiln/tensor.h"

static double rl_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---------------------------------------------------------------- peak FLOP/s */
/* 12 independent accumulators hide the FMA latency (4-5 cycles x 2 pipes). The x86-64-v3
 * clone uses 256-bit FMA; the default clone 128-bit SSE (mul + add). */
typedef float rl_v8 __attribute__((vector_size(32)));
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__SANITIZE_ADDRESS__)
#define RL_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define RL_CLONES
#endif
RL_CLONES static float rl_fma_loop(long iters, float s) {
    rl_v8 acc[12], m = (rl_v8){0} + 0.999999f, a = (rl_v8){0} + s * 1e-7f;
    for (int i = 0; i < 12; i++) acc[i] = (rl_v8){0} + (float)i;
    for (long it = 0; it < iters; it++)
        _Pragma("GCC unroll 12") for (int i = 0; i < 12; i++) acc[i] = acc[i] * m + a;
    float r = 0;
    for (int i = 0; i < 12; i++)
        for (int j = 0; j < 8; j++) r += acc[i][j];
    return r;
}

typedef struct rl_job {
    long iters;
    double flops, seconds;
    float sink;
    float *a, *b, *c;
    int64_t n;
} rl_job;

static void *rl_fma_job(void *p) {
    rl_job *j = p;
    double t0 = rl_now();
    j->sink = rl_fma_loop(j->iters, 1.0f);
    j->seconds = rl_now() - t0;
    j->flops = (double)j->iters * 12 * 8 * 2;
    return NULL;
}

static void *rl_triad_job(void *p) {
    rl_job *j = p;
    for (int64_t i = 0; i < j->n; i++) j->a[i] = j->b[i] + 3.0f * j->c[i];
    return NULL;
}

/* Run fn on nt threads (job t on thread t); wall seconds. */
static double rl_parallel(int nt, void *(*fn)(void *), rl_job *jobs) {
    pthread_t th[16];
    double t0 = rl_now();
    for (int t = 1; t < nt; t++)
        if (pthread_create(&th[t], NULL, fn, &jobs[t]) != 0) { fn(&jobs[t]); th[t] = 0; }
    fn(&jobs[0]);
    for (int t = 1; t < nt; t++)
        if (th[t]) pthread_join(th[t], NULL);
    return rl_now() - t0;
}

/* Best of 5: peak GFLOP/s over nt threads. */
static double rl_peak_gflops(int nt) {
    rl_job jobs[16];
    double best = 0;
    for (int r = 0; r < 5; r++) {
        memset(jobs, 0, sizeof jobs);
        for (int t = 0; t < nt; t++) jobs[t].iters = 4000000;
        double s = rl_parallel(nt, rl_fma_job, jobs), f = 0;
        for (int t = 0; t < nt; t++) f += jobs[t].flops;
        if (f / s > best) best = f / s;
    }
    return best * 1e-9;
}

/* Best of 5 triads a = b + 3c over 3 x 24M floats (288 MB): GB/s counting 12 bytes per
 * element (STREAM's convention: no write-allocate traffic). */
static double rl_triad_gbs(int nt) {
    int64_t n = 24 << 20;
    float *a = kn_malloc((size_t)n * 4), *b = kn_malloc((size_t)n * 4), *c = kn_malloc((size_t)n * 4);
    if (!a || !b || !c) { kn_free(a), kn_free(b), kn_free(c); return 0; }
    for (int64_t i = 0; i < n; i++) a[i] = 0, b[i] = 1, c[i] = 2; /* touch every page */
    rl_job jobs[16];
    double best = 0;
    for (int r = 0; r < 5; r++) {
        for (int t = 0; t < nt; t++) {
            int64_t lo = n * t / nt, hi = n * (t + 1) / nt;
            jobs[t] = (rl_job){.a = a + lo, .b = b + lo, .c = c + lo, .n = hi - lo};
        }
        double s = rl_parallel(nt, rl_triad_job, jobs);
        if (12.0 * (double)n / s > best) best = 12.0 * (double)n / s;
    }
    kn_free(a), kn_free(b), kn_free(c);
    return best * 1e-9;
}

/* ---------------------------------------------------------------- the GPT step */
typedef struct rl_prof {
    double last, *sec;
} rl_prof;

static kn_status rl_hook(void *ctx, int32_t node, const kn_tensor *value) {
    (void)value;
    rl_prof *p = ctx;
    double t = rl_now();
    p->sec[node] += t - p->last;
    p->last = rl_now();
    return KN_OK;
}

static int rl_usage(void) {
    fprintf(stderr, "usage: kiln roofline [--out DIR] [--layers L] [--width D] [--heads H] [--batch B] [--seq T] "
                    "[--vocab V] [--steps N]\n");
    return 2;
}

int kn_cli_roofline(int argc, char **argv) {
    const char *out = "build/roofline";
    kn_gpt_config cfg = {.vocab = 4096, .context = 128, .layers = 2, .width = 256, .heads = 4};
    int B = 4, T = 128, steps = 3;
    for (int i = 1; i < argc; i++) {
        int *iv = NULL;
        if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) { out = argv[++i]; continue; }
        if (strcmp(argv[i], "--layers") == 0) iv = &cfg.layers;
        else if (strcmp(argv[i], "--width") == 0) iv = &cfg.width;
        else if (strcmp(argv[i], "--heads") == 0) iv = &cfg.heads;
        else if (strcmp(argv[i], "--vocab") == 0) iv = &cfg.vocab;
        else if (strcmp(argv[i], "--batch") == 0) iv = &B;
        else if (strcmp(argv[i], "--seq") == 0) iv = &T;
        else if (strcmp(argv[i], "--steps") == 0) iv = &steps;
        else return rl_usage();
        if (i + 1 >= argc || (*iv = atoi(argv[++i])) < 1) {
            fprintf(stderr, "kiln roofline: %s needs a positive integer\n", argv[i - 1]);
            return 2;
        }
    }
    cfg.context = T;
    if (kn_gpt_config_check(&cfg) != KN_OK) {
        fprintf(stderr, "kiln roofline: %s\n", kn_last_error());
        return 2;
    }
    if (mkdir(out, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "kiln roofline: cannot create %s\n", out);
        return 1;
    }
    int nt = kn_k_threads();
    double peak = rl_peak_gflops(nt), bw = rl_triad_gbs(nt);
    printf("kiln roofline: %d threads; peak %.1f GFLOP/s (vector FMA microbenchmark), triad bandwidth %.1f GB/s, "
           "ridge at %.2f FLOP/byte\n",
           nt, peak, bw, peak / bw);
    double gcopy = 0, gf32 = 0, gbf16 = 0;
#if KN_HAVE_CUDA
    bool gpu = kn_cuda_ceilings(0, &gcopy, &gf32, &gbf16) == KN_OK;
    if (gpu) printf("GPU 0: copy %.0f GB/s, cuBLAS fp32 (TF32 off) %.1f TFLOP/s, bf16 %.1f TFLOP/s\n", gcopy, gf32, gbf16);
    else printf("GPU ceilings skipped: %s\n", kn_last_error());
#else
    bool gpu = false;
    printf("GPU ceilings skipped: kiln built without CUDA\n");
#endif
    kn_graph *g = NULL;
    kn_interp *it = NULL;
    double *sec = NULL;
    int rc = 1;
    if (kn_gpt_graph(&cfg, B, T, true, &g) != KN_OK || kn_interp_new(&it, g) != KN_OK) goto fail;
    for (int i = 0; i < g->nnodes; i++) { /* small values; token ids and targets 0 */
        const kn_node *n = &g->nodes[i];
        if (n->op != KN_OP_INPUT && n->op != KN_OP_PARAM) continue;
        kn_tensor *t = NULL;
        double v = kn_dtype_is_float(n->type.dtype) ? 0.01 * (double)(i % 7 + 1) : 0;
        if (kn_tensor_full(&t, n->type.dtype, n->type.ndim, n->type.shape, v) != KN_OK) goto fail;
        kn_status st = kn_interp_bind(it, n->attrs.name, t);
        kn_tensor_free(t);
        if (st != KN_OK) goto fail;
    }
    sec = calloc((size_t)g->nnodes, sizeof *sec);
    if (!sec) goto fail;
    rl_prof prof = {0, sec};
    if (kn_interp_run(it) != KN_OK) goto fail; /* warm-up, not timed */
    kn_interp_set_hook(it, rl_hook, &prof);
    double t0 = rl_now();
    for (int s = 0; s < steps; s++) {
        prof.last = rl_now();
        if (kn_interp_run(it) != KN_OK) goto fail;
    }
    double step_ms = (rl_now() - t0) / steps * 1e3;
    char path[1200];
    snprintf(path, sizeof path, "%s/roofline.tsv", out);
    FILE *f = fopen(path, "w");
    if (!f) { fprintf(stderr, "kiln roofline: cannot write %s\n", path); goto done; }
    fprintf(f, "# peak_gflops\t%.2f\n# triad_gbs\t%.2f\n# ridge_flop_per_byte\t%.3f\n# step_ms\t%.2f\n", peak, bw, peak / bw,
            step_ms);
    if (gpu) fprintf(f, "# gpu_copy_gbs\t%.1f\n# gpu_f32_tflops\t%.2f\n# gpu_bf16_tflops\t%.2f\n", gcopy, gf32, gbf16);
    fprintf(f, "node\top\tflops\tbytes\tintensity\tms\tgflops\troof_gflops\tof_roof\tbound\n");
    int nk = 0;
    double tot = 0;
    for (int i = 0; i < g->nnodes; i++) {
        kn_cost c = kn_node_cost(g, i);
        double s = sec[i] / steps;
        if (c.flops <= 0 || c.bytes <= 0 || s <= 0) continue; /* sources, views: nothing to place */
        double ai = c.flops / c.bytes, gf = c.flops / s * 1e-9, roof = ai * bw < peak ? ai * bw : peak;
        fprintf(f, "%%%d\t%s\t%.0f\t%.0f\t%.4f\t%.4f\t%.3f\t%.3f\t%.3f\t%s\n", i, kn_op_name(g->nodes[i].op), c.flops,
                c.bytes, ai, s * 1e3, gf, roof, gf / roof, ai < peak / bw ? "memory" : "compute");
        nk++, tot += s;
    }
    fclose(f);
    printf("GPT step (L %d, D %d, H %d, V %d, B %d, T %d): %.1f ms per step in the interpreter; %d kernels placed "
           "(%.1f ms of them) -> %s\n",
           cfg.layers, cfg.width, cfg.heads, cfg.vocab, B, T, step_ms, nk, tot * 1e3, path);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "kiln roofline: %s\n", kn_last_error());
done:
    free(sec);
    kn_interp_free(it);
    kn_graph_free(g);
    return rc;
}
