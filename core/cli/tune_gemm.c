/* tune_gemm.c — `kiln tune-gemm`: run the CPU GEMM's autotuner (kiln/gemm.h) for a problem
 * shape and print the search: every candidate blocking with its median time and GFLOP/s,
 * the winner, the cache key and file. With a cached choice it says so and times nothing
 * (--force searches again).
 *
 *   kiln tune-gemm [--shape MxNxK] [--force] [--cache-dir DIR] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "kiln/gemm.h"

int kn_cli_tune_gemm(int argc, char **argv) {
    long long m = 512, n = 512, k = 512;
    bool force = false;
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--force") == 0) force = true;
        else if (strcmp(argv[i], "--shape") == 0 && i + 1 < argc) {
            if (sscanf(argv[++i], "%lldx%lldx%lld", &m, &n, &k) != 3) {
                fprintf(stderr, "kiln tune-gemm: --shape %s: want MxNxK, e.g. 512x512x512\n", argv[i]);
                return 2;
            }
        } else if (strcmp(argv[i], "--cache-dir") == 0 && i + 1 < argc) dir = argv[++i];
        else {
            fprintf(stderr, "usage: kiln tune-gemm [--shape MxNxK] [--force] [--cache-dir DIR]\n");
            return strcmp(argv[i], "--help") == 0 ? 0 : 2;
        }
    }
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
