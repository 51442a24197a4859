/* gemm.h — the CPU GEMM: its f32 building blocks (lab 06's units) and its autotuner
 * (core/tensor/gemm_tune.c: time candidate cache blockings of kn_k_matmul_f32 for a shape
 * class on this machine and cache the choice on disk, keyed by the shape class, the CPU and
 * the code version).
 *
 * kn_k_matmul_f32 (core/tensor/kernels_matmul.inc) computes c = op(a) . op(b), m x n x k,
 * the GotoBLAS way: it allocates the packed panels, packs b (kn_gemm_pack_b_f32, split
 * over threads by column panels) and runs kn_gemm_rows_f32 over the row panels (split over
 * threads), which packs its panels of a and calls the microkernel on every MR x NR block of
 * c, block of k by block of k. The f64 product is the same template with its own, core,
 * building blocks. */
#ifndef KILN_GEMM_H
#define KILN_GEMM_H

#include "kiln/base.h"
#include "kiln/kernels.h"

#define KN_GEMM_MAX_TRIALS 32

/* The register block of the f32 microkernel: MR rows x NR columns of c (12 vectors of 8
 * floats with AVX2: 12 accumulators, 2 of b, 1 broadcast of a fit in 16 registers). */
#define KN_GEMM_MR 6
#define KN_GEMM_NR 16

/* Compile a hot function twice on x86-64, for the baseline and for AVX2 + FMA (x86-64-v3);
 * the loader picks the clone the CPU runs. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__SANITIZE_ADDRESS__)
#define KN_GEMM_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define KN_GEMM_CLONES
#endif

/* One f32 product in flight: what every thread's part reads. */
typedef struct kn_gemm_f32 {
    const float *a, *b;  /* op(a) is m x k, op(b) k x n: a is k x m when ta, b is n x k when tb */
    float *ap, *bp, *c;  /* packed panels (sized by the caller), c: m x n row-major */
    int64_t m, n, k;
    int64_t kc;          /* the k block (> 0) */
    int64_t mcp;         /* row panels per L2 block (> 0) */
    bool ta, tb;
} kn_gemm_f32;

/* ---------------------------------------------------------------- lab 06 units
 * Declared here, called by kn_k_matmul_f32 and the autotuner, written by students in
 * labs/lab06-gemm/ (the staff's units are linked for every other lab).
 *
 * kn_gemm_micro_f32 (micro.c): c[mr x nr] (row stride ldc) = (first ? 0 : c) + ap . bp, where
 *   ap is a packed panel of a, k-major: ap[kk * KN_GEMM_MR + r] is row r at depth kk; bp a
 *   packed panel of b: bp[kk * KN_GEMM_NR + j] is column j at depth kk; 1 <= mr <= MR,
 *   1 <= nr <= NR (a partial block at the edge of c: only those rows and columns of c are
 *   touched). Each c element is accumulated in float in increasing kk order, starting from
 *   0 (first) or from c: that order is what makes kiln's products bitwise independent of
 *   the blocking and the thread count.
 * kn_gemm_pack_a_f32 (blocked.c): pack row panels [p0, p1) of op(a) into x->ap: panel ip
 *   at x->ap + ip * MR * k, k-major (ap[(ip * k + kk) * MR + r] = op(a)[ip * MR + r][kk]),
 *   rows past m zero.
 * kn_gemm_pack_b_f32 (blocked.c): the same for column panels [p0, p1) of op(b) into x->bp
 *   (bp[(jp * k + kk) * NR + j] = op(b)[kk][jp * NR + j], columns past n zero). ctx is the
 *   kn_gemm_f32 (the kn_k_parallel signature).
 * kn_gemm_rows_f32 (blocked.c): c's row panels [p0, p1): pack them (kn_gemm_pack_a_f32),
 *   then for each k block of x->kc (the last may be shorter; k == 0: one empty block), each
 *   group of x->mcp row panels, each column panel, each row panel of the group: one
 *   microkernel call on that MR x NR block of c (partial at the edges), first for the
 *   first k block.
 * kn_gemm_search (tune.c): time every candidate blocking (kc from KN_GEMM_KCS, mc from
 *   KN_GEMM_MCS, kc outer) with kn_gemm_time on this product, record each in r->trials
 *   (r->ntrials of them, in that order), and set r->best to the fastest (the first of
 *   equal times). */
#define KN_GEMM_KCS {64, 128, 256, 384, 512}
#define KN_GEMM_MCS {24, 48, 96, 192, 384}
void kn_gemm_micro_f32(const float *ap, const float *bp, int64_t k, float *c, int64_t ldc, int mr, int nr, bool first);
void kn_gemm_pack_a_f32(const kn_gemm_f32 *x, int64_t p0, int64_t p1);
void kn_gemm_pack_b_f32(void *ctx, int64_t p0, int64_t p1);
void kn_gemm_rows_f32(void *ctx, int64_t p0, int64_t p1);

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
/* Seconds of one m x n x k f32 product (a, b, c given) with blocking cfg for shape class
 * cls: the median of 3 runs after a warm-up. Leaves cfg set for the class. */
kn_status kn_gemm_time(int64_t m, int64_t n, int64_t k, int cls, kn_gemm_config cfg, const float *a, const float *b,
                       float *c, double *sec);
/* Test hook: while fn is set, kn_gemm_time runs the product once and reports
 * fn(m, n, k, cfg, ctx) seconds instead of the clock's median, so a test can plant equal
 * times (real ones rarely tie); fn NULL restores the clock. Process-wide, not thread-safe:
 * for tests only. */
typedef double (*kn_gemm_timer)(int64_t m, int64_t n, int64_t k, kn_gemm_config cfg, void *ctx);
void kn_gemm_tune_set_timer(kn_gemm_timer fn, void *ctx);
/* lab 06 (see above): the search over the candidates; r->cls is set by the caller. */
kn_status kn_gemm_search(int64_t m, int64_t n, int64_t k, const float *a, const float *b, float *c,
                         kn_gemm_tune_result *r);

#endif
