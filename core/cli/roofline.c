/* roofline.c — `kiln roofline`: place every kernel of the GPT training step on the roofline
 * of this CPU or of a GPU.
 *
 * The roofline model says a kernel of arithmetic intensity I (FLOPs per byte moved) can
 * run no faster than min(peak FLOP/s, bandwidth x I). On the CPU (the default) this driver
 * measures both roofs — the peak with a microbenchmark of independent vector FMA chains on
 * every thread, the bandwidth with a STREAM-style triad over arrays far larger than the
 * caches — then runs the GPT step's joint graph (forward + backward, kn_gpt_graph) in the
 * IR interpreter with a per-node hook that timestamps each node, and takes each node's
 * FLOPs and bytes from the cost model (kn_node_cost, core/ir/cost.c). Output: a TSV of the
 * ceilings and one line per kernel (op, FLOPs, bytes, intensity, time, GFLOP/s, the roof
 * there and the fraction of it reached), and a gnuplot script that draws the roofs, the
 * ridge point and each kernel as a point, the costliest ones labelled (`make roofline`
 * renders SVG and PNG). Where kiln is built with CUDA and a GPU is present it also
 * measures the GPU ceilings (kn_cuda_ceilings: copy bandwidth, cuBLAS fp32 and bf16
 * peaks) and prints them; without a GPU it says in one line that they were skipped.
 *
 * --mode compiled (the default on a GPU) runs the step as a compiled program instead
 * (kn_program_compile: fused generated kernels plus library steps — cuBLAS GEMMs, the
 * attention kernels, cross-entropy) with its step profile on (kn_program_set_profile: on a
 * GPU two CUDA events around every step) and writes one line per step that computes
 * (kn_program_roofline_tsv: a generated kernel's FLOPs are its members', its bytes its
 * buffers). With --device cuda the roofs are the GPU's: the device-to-device copy
 * bandwidth and cuBLAS's fp32 peak (TF32 off; the bf16 peak is a second, dashed roof).
 *
 *   kiln roofline [--out DIR] [--device cpu|cuda|cuda:N|auto] [--mode interp|compiled]
 *                 [--passes LIST] [--flash] [--layers L] [--width D] [--heads H] [--batch B]
 *                 [--seq T] [--vocab V] [--steps N] */
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
#include "kiln/program.h"
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
    fprintf(stderr, "usage: kiln roofline [--out DIR] [--device cpu|cuda|cuda:N|auto] [--mode interp|compiled] "
                    "[--passes LIST] [--flash] [--layers L] [--width D] [--heads H] [--batch B] [--seq T] [--vocab V] "
                    "[--steps N]\n"
                    "  the CPU runs the interpreter by default, a GPU the compiled program\n");
    return 2;
}

/* Bind every input and param of g: floats to a small constant, integers (token ids,
 * targets) uniform over the range their users accept (kn_graph_random_input). The kernels'
 * times do not depend on float values, but they do on indices: with every token 0, the
 * embedding gradient's one row of 8192 occurrences took 6 ms on an H100 instead of 0.1
 * (a block per table row sums its positions in order). bind is kn_interp_bind or
 * kn_program_bind. */
static kn_status rl_bind_all(const kn_graph *g, kn_status (*bind)(void *, const char *, const kn_tensor *), void *obj) {
    for (int i = 0; i < g->nnodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->op != KN_OP_INPUT && n->op != KN_OP_PARAM) continue;
        kn_tensor *t = NULL;
        if (kn_dtype_is_float(n->type.dtype))
            KN_TRY(kn_tensor_full(&t, n->type.dtype, n->type.ndim, n->type.shape, 0.01 * (double)(i % 7 + 1)));
        else
            KN_TRY(kn_graph_random_input(g, i, 1, &t));
        kn_status st = bind(obj, n->attrs.name, t);
        kn_tensor_free(t);
        KN_TRY(st);
    }
    return KN_OK;
}
static kn_status rl_bind_interp(void *it, const char *name, const kn_tensor *t) { return kn_interp_bind(it, name, t); }
static kn_status rl_bind_program(void *p, const char *name, const kn_tensor *t) { return kn_program_bind(p, name, t); }

/* The compiled step on dev (CPU or GPU): compile with passes, bind, one warm-up run, then
 * `steps` profiled runs, and the TSV under the roofs peak / bw (ceiling lines in head). */
static int rl_compiled(const kn_graph *g, kn_device dev, const char *passes, int steps, double peak, double bw,
                       const char *head, const char *path, const char *what) {
    kn_program *p = NULL;
    kn_program_opts o = {.device = dev, .passes = passes, .mode = KN_PROGRAM_COMPILED};
    kn_status st = kn_program_compile(&p, g, &o);
    if (st == KN_OK) st = rl_bind_all(g, rl_bind_program, p);
    if (st == KN_OK) st = kn_program_run(p); /* warm-up: cuBLAS handles, the kernel cache, allocators */
    if (st == KN_OK) st = kn_device_synchronize(dev);
    double t0 = rl_now(), step_ms = 0;
    if (st == KN_OK) kn_program_set_profile(p, true);
    for (int s = 0; st == KN_OK && s < steps; s++) st = kn_program_run(p);
    if (st == KN_OK) st = kn_device_synchronize(dev);
    step_ms = (rl_now() - t0) / steps * 1e3;
    FILE *f = st == KN_OK ? fopen(path, "w") : NULL;
    if (st == KN_OK && !f) st = kn_error(KN_ERR_IO, "cannot write %s", path);
    int nk = 0;
    double placed = 0;
    if (st == KN_OK) {
        kn_program_stats ps = kn_program_get_stats(p);
        fprintf(f, "%s# step_ms\t%.3f\n# steps\t%d (%d generated kernels) of the compiled program, passes %s; "
                   "%d profiled runs\n",
                head, step_ms, ps.nsteps, ps.nkernels, passes && passes[0] ? passes : "none", steps);
        st = kn_program_roofline_tsv(f, p, peak, bw, &nk, &placed);
    }
    if (f && fclose(f) != 0 && st == KN_OK) st = kn_error(KN_ERR_IO, "cannot write %s", path);
    if (st == KN_OK)
        printf("%s: %.2f ms per profiled step (events between the steps); %d kernels placed (%.2f ms of them) -> %s\n",
               what, step_ms, nk, placed, path);
    else fprintf(stderr, "kiln roofline: %s\n", kn_last_error());
    kn_program_free(p);
    return st == KN_OK ? 0 : 1;
}

/* The compiled step on GPU dev under its roofs: copy bandwidth and cuBLAS's fp32 peak
 * (bf16's as a second roof). */
static int rl_gpu(const kn_gpt_config *cfg, int B, int T, kn_device dev, const char *passes, int steps,
                  const char *path, const char *what) {
#if KN_HAVE_CUDA
    double copy = 0, f32 = 0, bf16 = 0;
    char dn[128], head[768];
    kn_device_str(dev, dn, sizeof dn);
    if (kn_cuda_ceilings(dev.index, &copy, &f32, &bf16) != KN_OK) {
        fprintf(stderr, "kiln roofline: the ceilings of %s: %s\n", dn, kn_last_error());
        return 1;
    }
    const char *tf32 = getenv("KILN_TF32");
    bool tf = tf32 && strcmp(tf32, "1") == 0;
    printf("kiln roofline: %s: copy %.0f GB/s (device to device, read + write), cuBLAS fp32 (TF32 off) %.1f TFLOP/s, "
           "bf16 %.1f TFLOP/s; ridge at %.1f FLOP/byte%s\n",
           dn, copy, f32, bf16, f32 * 1e3 / copy, tf ? "; KILN_TF32=1: the matmuls may pass the fp32 roof" : "");
    snprintf(head, sizeof head,
             "# device\t%s\n# peak_gflops\t%.1f\n# peak_name\tcuBLAS fp32, TF32 off\n# copy_gbs\t%.1f\n"
             "# ridge_flop_per_byte\t%.3f\n# peak2_gflops\t%.1f\n# peak2_name\tcuBLAS bf16\n# matmuls\t%s\n",
             dn, f32 * 1e3, copy, f32 * 1e3 / copy, bf16 * 1e3, tf ? "TF32 (KILN_TF32=1)" : "fp32 (TF32 off)");
    kn_graph *g = NULL;
    if (kn_gpt_graph(cfg, B, T, true, &g) != KN_OK) {
        fprintf(stderr, "kiln roofline: %s\n", kn_last_error());
        return 1;
    }
    int rc = rl_compiled(g, dev, passes, steps, f32 * 1e3, copy, head, path, what);
    kn_graph_free(g);
    return rc;
#else
    (void)cfg, (void)B, (void)T, (void)dev, (void)passes, (void)steps, (void)path, (void)what;
    fprintf(stderr, "kiln roofline: kiln was built without CUDA\n");
    return 1;
#endif
}

int kn_cli_roofline(int argc, char **argv) {
    const char *out = "build/roofline", *devs = "cpu", *mode = NULL, *passes_arg = NULL;
    kn_gpt_config cfg = {.vocab = 4096, .context = 128, .layers = 2, .width = 256, .heads = 4};
    int B = 4, T = 128, steps = 3;
    bool flash = false;
    for (int i = 1; i < argc; i++) {
        int *iv = NULL;
        if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) { out = argv[++i]; continue; }
        if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) { devs = argv[++i]; continue; }
        if (strcmp(argv[i], "--mode") == 0 && i + 1 < argc) { mode = argv[++i]; continue; }
        if (strcmp(argv[i], "--passes") == 0 && i + 1 < argc) { passes_arg = argv[++i]; continue; }
        if (strcmp(argv[i], "--flash") == 0) { flash = true; continue; }
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
    kn_device dev;
    if (kn_gpt_config_check(&cfg) != KN_OK || kn_device_parse(devs, &dev) != KN_OK) {
        fprintf(stderr, "kiln roofline: %s\n", kn_last_error());
        return 2;
    }
    if (mode && strcmp(mode, "interp") != 0 && strcmp(mode, "compiled") != 0) {
        fprintf(stderr, "kiln roofline: --mode %s: expected interp or compiled\n", mode);
        return 2;
    }
    bool gpu_run = dev.type != KN_DEVICE_CPU, compiled = mode ? strcmp(mode, "compiled") == 0 : gpu_run;
    if (gpu_run && !compiled) {
        fprintf(stderr, "kiln roofline: --mode interp runs on the CPU only (the GPU places the compiled program's "
                        "kernels)\n");
        return 2;
    }
    char passes[256];
    snprintf(passes, sizeof passes, "%s%s%s", passes_arg ? passes_arg : "",
             passes_arg && passes_arg[0] && flash ? "," : "", flash ? "flash" : "");
    if ((passes_arg || flash) && !compiled) {
        fprintf(stderr, "kiln roofline: --passes and --flash compile the step: add --mode compiled\n");
        return 2;
    }
    if (passes[0] && kn_passes_check(passes, NULL) != KN_OK) {
        fprintf(stderr, "kiln roofline: --passes: %s\n", kn_last_error());
        return 2;
    }
    if (gpu_run && kn_device_check("kiln roofline --device", dev) != KN_OK) {
        fprintf(stderr, "%s\n", kn_last_error());
        return 1;
    }
    if (mkdir(out, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "kiln roofline: cannot create %s\n", out);
        return 1;
    }
    char path[1200], what[256];
    snprintf(path, sizeof path, "%s/roofline.tsv", out);
    snprintf(what, sizeof what, "GPT step (L %d, D %d, H %d, V %d, B %d, T %d)", cfg.layers, cfg.width, cfg.heads,
             cfg.vocab, B, T);
    if (gpu_run) return rl_gpu(&cfg, B, T, dev, passes, steps, path, what);
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
    if (kn_gpt_graph(&cfg, B, T, true, &g) != KN_OK) goto fail;
    if (compiled) { /* the compiled program on this CPU, under the same roofs */
        char head[512];
        snprintf(head, sizeof head,
                 "# device\tcpu\n# peak_gflops\t%.2f\n# triad_gbs\t%.2f\n# ridge_flop_per_byte\t%.3f\n", peak, bw,
                 peak / bw);
        rc = rl_compiled(g, dev, passes, steps, peak, bw, head, path, what);
        goto done;
    }
    if (kn_interp_new(&it, g) != KN_OK || rl_bind_all(g, rl_bind_interp, it) != KN_OK) goto fail;
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
    FILE *f = fopen(path, "w");
    if (!f) { fprintf(stderr, "kiln roofline: cannot write %s\n", path); goto done; }
    fprintf(f, "# device\tcpu\n# peak_gflops\t%.2f\n# triad_gbs\t%.2f\n# ridge_flop_per_byte\t%.3f\n# step_ms\t%.2f\n",
            peak, bw, peak / bw, step_ms);
    if (gpu) fprintf(f, "# gpu_copy_gbs\t%.1f\n# gpu_f32_tflops\t%.2f\n# gpu_bf16_tflops\t%.2f\n", gcopy, gf32, gbf16);
    fprintf(f, "node\top\tflops\tbytes\tintensity\tms\tgflops\troof_gflops\tof_roof\tbound\n");
    int nk = 0;
    double tot = 0;
    for (int i = 0; i < g->nnodes; i++) {
        kn_cost c = kn_node_cost(g, i);
        double s = sec[i] / steps;
        if (c.flops <= 0 || c.bytes <= 0 || s <= 0) continue; /* sources, views: nothing to place */
        double ai = c.flops / c.bytes, gf = c.flops / s * 1e-9, roof = ai * bw < peak ? ai * bw : peak;
        fprintf(f, "%%%d\t%s\t%.0f\t%.0f\t%.4g\t%.4g\t%.4g\t%.4g\t%.4g\t%s\n", i, kn_op_name(g->nodes[i].op), c.flops,
                c.bytes, ai, s * 1e3, gf, roof, gf / roof, ai < peak / bw ? "memory" : "compute");
        nk++, tot += s;
    }
    fclose(f);
    printf("%s: %.1f ms per step in the interpreter; %d kernels placed (%.1f ms of them) -> %s\n", what, step_ms, nk,
           tot * 1e3, path);
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
