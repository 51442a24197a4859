/* cuda_gemv.h — the product of a few rows by a bf16 weight matrix, streamed by the kernels
 * of core/runtime/cuda_gemv.cu: on the GPU (knc_gemv, which cuda_matmul.cu and
 * cuda_matmul_lt.cu call for products of at most KN_GEMV_MAX_M rows) and, the same kernel
 * text compiled as C, under the CUDA emulator (kn_gemv_emu, for the tests).
 *
 * c [m, n] = a [m, k] op(w), then + bias [n] when bias is given, then c = gelu(x) with
 * aux = x when gelu is set (matmul_bias_gelu's two results). a is bf16 or f32 (a_f32),
 * row-major [m, k] or, with ta, stored [k, m]; w is bf16, row-major [k, n] or, with tb,
 * stored [n, k] (the GPT's tied head reads the embedding [V, D] this way); c and aux are
 * bf16 or f32 (c_f32). Every product is summed in f32 with fused multiply-adds (fmaf: the
 * same bits on the GPU and on the CPU's emulator), in an order fixed by the shape alone
 * (cuda_gemv.cu spells it out): the same bits on every run, in a CUDA graph or not. */
#ifndef KN_CUDA_GEMV_H
#define KN_CUDA_GEMV_H

#include <stdbool.h>

#include "kiln/base.h"

#define KN_GEMV_MAX_M 8

typedef struct kn_gemv_args {
    int m;                   /* rows of a and c: 1..KN_GEMV_MAX_M */
    long long n, k;          /* columns of c; the sum's length (>= 1) */
    const void *a;           /* [m, k] (ta: [k, m]), bf16 bits or f32 */
    bool a_f32, ta;
    const unsigned short *w; /* bf16 bits: [k, n] (tb: [n, k]) */
    bool tb;
    const float *bias;       /* [n] or NULL */
    bool gelu;               /* c = gelu(x), aux = x (x = a op(w) + bias) */
    void *c;                 /* [m, n], bf16 bits or f32 */
    bool c_f32;
    void *aux;               /* [m, n] of c's type when gelu, else unused */
} kn_gemv_args;

#ifdef __cplusplus
extern "C" {
#endif
/* How the kernel splits a problem: column tiles, k-splits and the rows each split sums (a
 * function of the shape alone). splits > 1 needs splits * m * n floats of workspace. */
void kn_gemv_plan(int m, long long n, long long k, bool tb, long long *tiles, long long *splits, long long *kper);
/* NULL when the kernel takes g, else why not (m out of range, an empty or too large
 * problem, a NULL pointer, no aux for gelu). */
const char *kn_gemv_refuses(const kn_gemv_args *g);
/* g's product under the CUDA emulator: KN_OK, KN_ERR_ARG with kn_gemv_refuses's reason, or
 * KN_ERR_DEVICE when a launch failed (the emulator said why on stderr). */
kn_status kn_gemv_emu(const kn_gemv_args *g);
/* Whether the CUDA backend's products of at most KN_GEMV_MAX_M rows go to the GEMV (only
 * where the environment sets KILN_GEMV=1: cuBLAS is faster inside the decode graph), and how many have gone each way in this process so
 * far (gemv, cublas; products of more rows are not counted). False and zeros in a build
 * without CUDA. */
bool kn_gemv_cuda_enabled(void);
void kn_gemv_cuda_counts(long long *gemv, long long *cublas);
/* Override the environment for this process (on 1: the GEMV, 0: cuBLAS, < 0: as
 * KILN_GEMV says), so one test can compare the two. Not thread-safe; a no-op without CUDA. */
void kn_gemv_cuda_force(int on);
#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
/* g's product on GPU dev, queued on knc_stream (a CUDA graph may capture it: no host sync,
 * and the one workspace of the device, allocated at its first use, is never moved).
 * *done false (nothing queued, KN_OK) when the GEMV is switched off or refuses g: the
 * caller runs cuBLAS. Counts the product either way. */
kn_status knc_gemv(const kn_gemv_args *g, int dev, bool *done);
/* Count a product of at most KN_GEMV_MAX_M rows that the caller sent to cuBLAS without
 * asking knc_gemv (a dtype or a batch the GEMV does not take). */
void knc_gemv_count_cublas(void);
#endif

#endif
