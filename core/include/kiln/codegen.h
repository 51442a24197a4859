/* kiln/codegen.h — code generation: how the kernel IR of a schedule (kiln/schedule.h)
 * becomes C and CUDA source, compiled and loaded; the pipeline from a graph:
 *
 *   graph ──kn_schedule_build──► groups (fused kernels, library steps), in run order
 *         ──kn_kernel_lower────► kernel IR, one per fused group (printable, verified)
 *         ──kn_render_c────────► C11 source, one function per kernel
 *         ──kn_cc_compile──────► a shared object (cc -O3 -march=native, cached on disk
 *                                 by a hash of source and flags), dlopen'ed
 *
 * The schedule and the kernel IR (kn_schedule_build, kn_kernel_lower: core/schedule/) are
 * declared in kiln/schedule.h, which this header includes.
 *
 * The compiled program (kiln/program.h, KN_PROGRAM_COMPILED) uses all of this: on the CPU
 * the C renderer and kn_cc_compile; on a GPU the CUDA renderer below (lab 07's block
 * reduction among its parts), compiled by NVRTC (kiln/cuda.h); and with the CUDA emulator
 * the same CUDA text in its C dialect, compiled by kn_cc_compile. */
#ifndef KILN_CODEGEN_H
#define KILN_CODEGEN_H

#include "kiln/schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- C code */

/* Append the C11 definition of k to *src (a growing NUL-terminated string, kn_realloc'ed):
 *     void <name>(void *ctx, int64_t lo, int64_t hi)
 * where ctx is an array of the buffers' base pointers (k->bufs order) and [lo, hi) a
 * range of outer indices: the signature kn_k_parallel calls. */
kn_status kn_render_c(const kn_kernel *k, char **src, size_t *len, size_t *cap);
/* The lines every generated file starts with (includes): with vector_math, the SIMD
 * variants of exp, log and tanh declared where the machine has them (kn_cc_vector_math);
 * without, the scalar functions only (kn_program_opts.scalar_math). kn_render_c_prelude()
 * is kn_render_c_prelude_math(true). */
const char *kn_render_c_prelude(void);
const char *kn_render_c_prelude_math(bool vector_math);
/* ---------------------------------------------------------------- CUDA code
 *
 * The same kernel as CUDA C (core/codegen/render_cuda.c):
 *     KN_KERNEL [__launch_bounds__(block)] <name>(float *__restrict__ p0, const float *__restrict__ p1, ...)
 * one pointer per buffer (k->bufs order) of the type the buffer stores (unsigned short for
 * f16 and bf16; const for a buffer the kernel only reads), __launch_bounds__ when l gives
 * the block size, launched as kn_cuda_launch_config says. A kernel
 * without a reduction runs a thread per element of its space (grid-stride); one with a
 * reduction runs a block per row (grid-stride over rows), the block's threads striding
 * over the row and combining their partial sums with warp shuffles and shared memory.
 * Dialects: KN_CUDA_NVRTC for the GPU; KN_CUDA_EMU, the same text as C11 for the host
 * compiler, run by the CUDA emulator (core/runtime/cuda_emu.h), with, per kernel, an entry
 * `void <name>__emu(void *args)` taking the arguments as cudaLaunchKernel does (an array of
 * pointers to each argument). A file starts with kn_render_cuda_prelude(dialect). l: the
 * launch the kernel is rendered for (kn_cuda_launch_config), or NULL for any launch. With
 * the block size known, a row of at most 8 blocks' width is unrolled into slots and the
 * values a row's later loops need again stay in registers (one pass over memory for a
 * softmax, not three). A kernel with column sums (k->ncolsums) maps its points differently
 * (a block per tile of 32 columns and group of rows, or per group of rows of a row kernel),
 * keeps partial sums in a module-scope scratch and also defines <name>_fin (below). */

typedef struct kn_cuda_limits {
    int sm_count;        /* multiprocessors (132 on an H100 SXM) */
    int max_threads;     /* most threads a block may have (1024 on every GPU kiln builds for) */
    int threads_per_sm;  /* most resident threads per multiprocessor (2048 on an H100) */
} kn_cuda_limits;
typedef struct kn_cuda_launch { unsigned grid, block; } kn_cuda_launch;
/* Grid and block for k. A reduction: one block per row, of the fewest whole warps that
 * give each thread at most 8 of the row's elements (32 <= block <= max_threads). An
 * elementwise kernel: 256 threads a block (max_threads when smaller), one element a
 * thread. Either way at most as many blocks as fit on the GPU at once (sm_count *
 * threads_per_sm / block): the grid-stride loops take the rest. */
kn_cuda_launch kn_cuda_launch_config(const kn_kernel *k, const kn_cuda_limits *lim);
/* A kernel with column sums (k->ncolsums): its source also defines <name>_fin (same
 * arguments; <name>_fin__emu in the emulator dialect), which adds the kernel's partial
 * column sums in a fixed order and stores them; the program launches it right after the
 * kernel, with this launch. */
kn_cuda_launch kn_cuda_colsum_finish_launch(const kn_kernel *k);

/* ---------------------------------------------------------------- lab 07 units
 * Declared here, called by the CUDA renderer (core/codegen/render_cuda.c), written by
 * students in labs/lab07-cudagen/ (the staff's units are linked for every other lab):
 *   kn_cuda_launch_config (launch.c), above;
 *   kn_cuda_block_reduce_source (block_reduce.c): the CUDA C text (which must also compile
 *     as C11 for the emulator, with KN_DEVICE for __device__) defining
 *         double kn_max2(double a, double b);   (the max of two that keeps a NaN: the row
 *                                                kernels the renderer writes call it too)
 *         double kn_block_sum(double v, double *sh);   double kn_block_max(double v, double *sh);
 *     called by every thread of a block (blockDim.x a multiple of 32, at most 1024) with its
 *     partial v and a __shared__ double sh[32]; each returns the block's total (max: NaN if
 *     any v is NaN), the same bits in every thread, and leaves sh free for the next call.
 *     NULL (the skeleton): row kernels cannot be rendered.
 *   kn_render_cuda_element_loop (element_loop.c): the head of an elementwise kernel's
 *     thread loop, into out: a grid-stride loop over e, one point of the flattened space
 *     (outer_n * inner_n points) a thread, opening a brace, then the definitions of
 *         const <ix> o = <row of e>, r = <inner index of e>;
 *     ix is "int" or "int64_t" (then the grid arithmetic is done in 64 bits). KN_ERR_ARG
 *     when it does not fit in cap bytes. */
const char *kn_cuda_block_reduce_source(void);
kn_status kn_render_cuda_element_loop(const kn_kernel *k, const char *ix, char *out, size_t cap);

typedef enum kn_cuda_dialect { KN_CUDA_NVRTC = 0, KN_CUDA_EMU = 1 } kn_cuda_dialect;
kn_status kn_render_cuda(const kn_kernel *k, kn_cuda_dialect d, const kn_cuda_launch *l, char **src, size_t *len,
                         size_t *cap);
const char *kn_render_cuda_prelude(kn_cuda_dialect d);

/* A compiled shared object. kn_cc_compile writes src to the kernel cache directory
 * ($KILN_CACHE_DIR, $XDG_CACHE_HOME/kiln or ~/.cache/kiln; then kernels/) as <hash>.c,
 * compiles it with $KILN_CC (default cc) into <hash>.so unless that file exists (the hash
 * covers the source, the flags and the machine), and dlopens it. KN_ERR_UNSUPPORTED when
 * there is no C compiler (the message says so); the generated file's
 * path and the compiler's message on a compile error (KN_ERR_INTERNAL: generated code that does
 * not compile is a kiln bug, or a $KILN_CC that is not a C11 compiler). */
typedef struct kn_cc_module kn_cc_module;
typedef struct kn_cc_info {
    bool cached;                 /* the .so was already there */
    double ms;                   /* compile (or load) time */
    char path[768];              /* the generated .c */
} kn_cc_info;
kn_status kn_cc_compile(const char *src, kn_cc_module **out, kn_cc_info *info);
void *kn_cc_symbol(const kn_cc_module *m, const char *name); /* NULL when absent */
void kn_cc_free(kn_cc_module *m);
/* Whether a C compiler can be run ($KILN_CC or cc); the answer is cached. */
bool kn_cc_available(void);
/* Whether glibc's vector math library (libmvec, glibc >= 2.35 on x86-64) is there: the
 * prelude then declares the SIMD variants of exp, log and tanh, so loops calling them
 * vectorize (a few ulp from the scalar functions, like any libm), unless the program asks
 * for the scalar ones (kn_program_opts.scalar_math). */
bool kn_cc_vector_math(void);
/* A file in the kernel cache: <cache>/kernels/<hash of keys>.<ext> (the directory is made).
 * What the CUDA module cache (cubins) shares with the C one. */
kn_status kn_cc_cache_path(const char *ext, const char *const *keys, int nkeys, char *out, size_t cap);

/* ---------------------------------------------------------------- GPU GEMM
 * A tiled f32 GEMM rendered by kiln's CUDA code generation (core/codegen/gemm_cuda.c): a
 * teaching kernel, compared with cuBLAS fp32 (TF32 off); kiln's training keeps cuBLAS.
 * C[M, N] = A[M, K] B[K, N], row-major. A block computes a bm x bn tile of C over bk-wide
 * slabs of K staged in shared memory; each of its (bm/tm) * (bn/tn) threads keeps a
 * tm x tn sub-tile in registers; vec: float4 loads and stores (K and N multiples of 4). */
typedef struct kn_cuda_gemm_cfg {
    int bm, bn, bk, tm, tn;
    bool vec;
} kn_cuda_gemm_cfg;
/* KN_ERR_ARG saying what is wrong with c (divisibility, 32..1024 threads, 48 KiB of shared
 * memory, at most 128 accumulators a thread). */
kn_status kn_cuda_gemm_check(kn_cuda_gemm_cfg c);
bool kn_cuda_gemm_cfg_equal(kn_cuda_gemm_cfg a, kn_cuda_gemm_cfg b); /* field by field (not memcmp: padding) */
/* The kernel kn_sgemm(const float *A, const float *B, float *C, int M, int N, int K) for c,
 * in dialect d (kn_free *src); the emulator dialect also has kn_sgemm__emu(void **args). */
kn_status kn_cuda_gemm_render(kn_cuda_gemm_cfg c, kn_cuda_dialect d, char **src);
/* Its launch for an m x n product (one-dimensional grid and block), and whether c can run
 * an m x n x k product (sizes in int; vec: k and n multiples of 4). */
kn_cuda_launch kn_cuda_gemm_launch(kn_cuda_gemm_cfg c, int64_t m, int64_t n);
bool kn_cuda_gemm_fits(kn_cuda_gemm_cfg c, int64_t m, int64_t n, int64_t k);
/* The autotuner's candidates (at most max written to out; returns how many there are). */
int kn_cuda_gemm_candidates(kn_cuda_gemm_cfg *out, int max);

#define KN_CUDA_GEMM_MAX_TRIALS 64
typedef struct kn_cuda_gemm_trial {
    kn_cuda_gemm_cfg cfg;
    double ms;          /* median of the timed launches */
    double max_rel_err; /* against cuBLAS fp32: max |c - ref| / (1 + |ref|) */
} kn_cuda_gemm_trial;
typedef struct kn_cuda_gemm_tune_result {
    int ntrials;
    kn_cuda_gemm_trial trials[KN_CUDA_GEMM_MAX_TRIALS];
    kn_cuda_gemm_cfg best;
    double best_ms, cublas_ms;  /* the winner's and cuBLAS fp32's (TF32 off), same run */
    double copy_gbs;            /* device-to-device copy bandwidth, same run */
    bool from_cache;            /* the choice was read (only cuBLAS and the winner timed) */
    char path[768];             /* the cache file */
} kn_cuda_gemm_tune_result;
/* On GPU `device`: time every candidate that fits m x n x k (each checked against cuBLAS
 * fp32 on the same random operands; a wrong one is an error), and cuBLAS; the fastest is
 * written to the cache (<cache>/gemm-cuda/<device name>-<m>x<n>x<k>) unless it was there
 * already (force: search again). KN_ERR_UNSUPPORTED in a build without CUDA. */
kn_status kn_cuda_gemm_tune(int device, int64_t m, int64_t n, int64_t k, const char *cache_dir, bool force,
                            kn_cuda_gemm_tune_result *r);

/* ---------------------------------------------------------------- lab 05 units (the renderer)
 * Declared here, called by the C renderer, written by students in labs/lab05-fusion/
 * (kn_fuse_refusal, the scheduler's, is in kiln/schedule.h).
 *
 * kn_render_c_row_offset, kn_render_c_index, kn_render_c_bind (render_index.c): the index
 * arithmetic and expressions of the C renderer. See each below. */

/* The row offset of buffer b of k as a C expression: its offset, then " + cA * sA" for each
 * outer axis A (ascending) whose stride sA is not 0 ("12 + c0 * 40 + c2 * 5"). Writes at
 * most cap bytes (NUL included); KN_ERR_ARG when it does not fit, and then out is "". */
kn_status kn_render_c_row_offset(const kn_kernel *k, int b, char *out, size_t cap);
/* Buffer b's element index inside the loops: "o<b>" (its row offset), then, when `inner`,
 * " + X" or " + X * s" for each inner axis (ascending) with a stride s not 0, where X is
 * "r" when k has exactly one inner axis and "r<axis>" otherwise ("o1 + r", "o0 + r2 * 3 +
 * r3"). KN_ERR_ARG when it does not fit, and then out is "". */
kn_status kn_render_c_index(const kn_kernel *k, int b, bool inner, char *out, size_t cap);
/* Bind a kiln/scalar.h expression template: every identifier of one letter that is in
 * `names` is replaced by "(" args[its position in names] ")"; when f32, the math functions
 * exp, log, sqrt, tanh, fabs, sin, cos, pow get an "f" (expf) and every floating literal
 * (a number with '.' or an exponent) an "f" suffix, so float code computes in float.
 * false when the result does not fit in cap bytes. */
bool kn_render_c_bind(const char *tmpl, const char *const *args, const char *names, bool f32, char *out, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* KILN_CODEGEN_H */
