/* gemm.h — the CPU GEMM's autotuner (core/tensor/gemm_tune.c): time candidate cache
 * blockings of kn_k_matmul_f32 for a shape class on this machine and cache the choice on
 * disk, keyed by the shape class, the CPU and the code version. */
#ifndef KILN_GEMM_H
#define KILN_GEMM_H

#include "kiln/base.h"
#include "kiln/kernels.h"

#define KN_GEMM_MAX_TRIALS 32

typedef struct kn_gemm_trial {
    kn_gemm_config cfg;
    double seconds; /* median of 3 runs after a warm-up */
} kn_gemm_trial;

typedef struct kn_gemm_tune_result {
    int cls;           /* the shape class tuned (kn_k_gemm_class) */
    char key[160];     /* f32-c<class>-<isa>-<cpu model hash>-v<code version> */
    char path[1024];   /* the cache file */
    bool from_cache;   /* true: read from path, nothing timed (ntrials 0) */
    int ntrials;
    kn_gemm_trial trials[KN_GEMM_MAX_TRIALS];
    kn_gemm_config best; /* now set for that class (kn_k_gemm_config_set) */
} kn_gemm_tune_result;

/* The cache directory: $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln. */
kn_status kn_gemm_cache_dir(char *buf, size_t cap);
/* This machine's part of the key: the vector ISA and a hash of the CPU model name. */
void kn_gemm_machine(char *buf, size_t cap);
/* mkdir -p path (the kernel cache, kiln/codegen.h, uses it too). */
kn_status kn_cache_mkdirs(const char *path);
/* Tune the f32 GEMM's blocking for the class of m x n x k (each 1..8192) by timing the
 * candidates on that product, or read the cached choice (unless force); cache_dir NULL:
 * kn_gemm_cache_dir. The choice is set for the class either way. */
kn_status kn_gemm_tune(int64_t m, int64_t n, int64_t k, const char *cache_dir, bool force, kn_gemm_tune_result *r);

#endif
