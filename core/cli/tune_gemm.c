/* tune_gemm.c — `kiln tune-gemm`: run the CPU GEMM's autotuner (kiln/gemm.h) for a problem
 * shape and print the search: every candidate blocking with its median time and GFLOP/s,
 * the winner, the cache key and file. With a cached choice it says so and times nothing
 * (--force searches again). With --device cuda[:N], the GPU GEMM that kiln's CUDA code
 * generation renders (core/codegen/gemm_cuda.c): every tile configuration against cuBLAS
 * fp32 (TF32 off) in the same run.
 *
 *   kiln tune-gemm [--shape MxNxK] [--force] [--cache-dir DIR] [--device cpu|cuda[:N]] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "kiln/device.h"
#include "kiln/codegen.h"
#include "kiln/gemm.h"

/* The GPU search: every configuration with its time, GFLOP/s, share of cuBLAS and error. */
static int tune_gpu(int device, long long m, long long n, long long k, const char *dir, bool force) {
    kn_cuda_gemm_tune_result r;
    if (kn_cuda_gemm_tune(device, m, n, k, dir, force, &r) != KN_OK) {
        fprintf(stderr, "kiln tune-gemm: %s\n", kn_last_error());
        return 1;
    }
    double fl = 2.0 * (double)m * (double)n * (double)k;
    printf("kiln tune-gemm: f32 %lldx%lldx%lld on cuda:%d (the kernel kiln's CUDA code generation renders, "
           "core/codegen/gemm_cuda.c)\nfile  %s%s\n", m, n, k, device, r.path,
           r.from_cache ? "  (cached choice: only it and cuBLAS timed; --force to search again)" : "");
    printf("%4s %4s %3s %3s %3s %4s %10s %10s %8s %10s\n", "BM", "BN", "BK", "TM", "TN", "vec", "median_ms", "GFLOP/s",
           "/cuBLAS", "max_err");
    for (int i = 0; i < r.ntrials; i++) {
        const kn_cuda_gemm_trial *t = &r.trials[i];
        bool win = kn_cuda_gemm_cfg_equal(t->cfg, r.best);
        printf("%4d %4d %3d %3d %3d %4s %10.3f %10.0f %8.3f %10.2e%s\n", t->cfg.bm, t->cfg.bn, t->cfg.bk, t->cfg.tm,
               t->cfg.tn, t->cfg.vec ? "yes" : "no", t->ms, fl / (t->ms * 1e-3) * 1e-9, r.cublas_ms / t->ms,
               t->max_rel_err, win ? "  <- winner" : "");
    }
    printf("cuBLAS fp32 (TF32 off): %.3f ms, %.0f GFLOP/s\n", r.cublas_ms, fl / (r.cublas_ms * 1e-3) * 1e-9);
    printf("winner: BM %d BN %d BK %d TM %d TN %d%s: %.3f ms, %.0f GFLOP/s = %.3f x cuBLAS (copy bandwidth this run %.0f GB/s)\n",
           r.best.bm, r.best.bn, r.best.bk, r.best.tm, r.best.tn, r.best.vec ? " vec" : "", r.best_ms,
           fl / (r.best_ms * 1e-3) * 1e-9, r.cublas_ms / r.best_ms, r.copy_gbs);
    printf("{\"gemm\": \"cuda\", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"best\": [%d, %d, %d, %d, %d, %d], "
           "\"best_ms\": %.4f, \"cublas_ms\": %.4f, \"ratio\": %.4f, \"copy_gbs\": %.1f, \"cached\": %s}\n", m, n, k,
           r.best.bm, r.best.bn, r.best.bk, r.best.tm, r.best.tn, (int)r.best.vec, r.best_ms, r.cublas_ms,
           r.cublas_ms / r.best_ms, r.copy_gbs, r.from_cache ? "true" : "false");
    return 0;
}

int kn_cli_tune_gemm(int argc, char **argv) {
    long long m = 512, n = 512, k = 512;
    bool force = false;
    const char *dir = NULL, *device = "cpu";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--force") == 0) force = true;
        else if (strcmp(argv[i], "--shape") == 0 && i + 1 < argc) {
            if (sscanf(argv[++i], "%lldx%lldx%lld", &m, &n, &k) != 3) {
                fprintf(stderr, "kiln tune-gemm: --shape %s: want MxNxK, e.g. 512x512x512\n", argv[i]);
                return 2;
            }
        } else if (strcmp(argv[i], "--cache-dir") == 0 && i + 1 < argc) dir = argv[++i];
        else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) device = argv[++i];
        else {
            fprintf(stderr, "usage: kiln tune-gemm [--shape MxNxK] [--force] [--cache-dir DIR] [--device cpu|cuda[:N]]\n");
            return strcmp(argv[i], "--help") == 0 ? 0 : 2;
        }
    }
    kn_device dev;
    if (kn_device_parse(device, &dev) != KN_OK) {
        fprintf(stderr, "kiln tune-gemm: --device: %s\n", kn_last_error());
        return 2;
    }
    if (dev.type == KN_DEVICE_CUDA) return tune_gpu(dev.index, m, n, k, dir, force);
    kn_gemm_tune_result r;
    if (kn_gemm_tune(m, n, k, dir, force, &r) != KN_OK) {
        fprintf(stderr, "kiln tune-gemm: %s\n", kn_last_error());
        return 1;
    }
    printf("kiln tune-gemm: f32 %lldx%lldx%lld, shape class %d, %d threads\nkey   %s\nfile  %s\n", m, n, k, r.cls,
           kn_k_threads(), r.key, r.path);
    if (r.from_cache) {
        printf("cached choice (nothing timed; --force to search again): kc %lld mc %lld\n", (long long)r.best.kc,
               (long long)r.best.mc);
        return 0;
    }
    double fl = 2.0 * (double)m * (double)n * (double)k;
    printf("%6s %6s %12s %10s\n", "kc", "mc", "median_ms", "GFLOP/s");
    for (int i = 0; i < r.ntrials; i++)
        printf("%6lld %6lld %12.3f %10.2f%s\n", (long long)r.trials[i].cfg.kc, (long long)r.trials[i].cfg.mc,
               r.trials[i].seconds * 1e3, fl / r.trials[i].seconds * 1e-9,
               r.trials[i].cfg.kc == r.best.kc && r.trials[i].cfg.mc == r.best.mc ? "  <- winner" : "");
    printf("winner: kc %lld mc %lld (written to the cache)\n", (long long)r.best.kc, (long long)r.best.mc);
    return 0;
}
