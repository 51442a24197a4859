/* micro.c — lab 06 unit: the microkernel of the CPU GEMM (kn_gemm_micro_f32; contract in
 * kiln/gemm.h).
 *
 * Everything else in a fast GEMM exists to feed this function. It computes a 6 x 16 block
 * of c from a packed panel of a (6 rows, k-major) and a packed panel of b (16 columns,
 * k-major): at each depth kk, 6 numbers of a and 16 of b make 96 multiply-adds, all on
 * registers. With AVX2 a register holds 8 floats, so the 6 x 16 block is 12 vector
 * accumulators; the 16 floats of b are 2 vector loads, each a of the column is a broadcast:
 *
 *     acc[r][v] += bv[v] * a[r]          (r < 6, v < 2: 12 vector multiply-adds per kk)
 *
 * 96 flops for 22 floats loaded (88 bytes): the ratio that keeps the arithmetic units busy
 * instead of waiting for memory. The accumulators must stay in registers for the whole k
 * loop: write them as local arrays of GCC vector types (`float __attribute__((vector_size(32)))`)
 * with loops the compiler fully unrolls, and load c only before the loop and store it
 * only after.
 *
 * Each c element must be summed in increasing kk order, starting from 0 when first, else
 * from c: the blocked GEMM splits k into blocks and calls you once per block, and that
 * order makes the result independent of the block sizes and of the thread count.
 * KN_GEMM_CLONES compiles `micro` for AVX2 + FMA as well as the baseline. */
#include <string.h>

#include "kiln/gemm.h"

#define VW 8 /* floats per vector (AVX2) */
#define NV (KN_GEMM_NR / VW)
typedef float kn_v8 __attribute__((vector_size(VW * sizeof(float))));

/* The body, compiled twice (KN_GEMM_CLONES); the exported function below calls it. (A
 * target_clones function that is only called from other files is not exported by every
 * compiler: clang emits the dispatching symbol only where the function is used.) */
KN_GEMM_CLONES static void micro(const float *ap, const float *bp, int64_t k, float *c, int64_t ldc, int mr, int nr,
                                 bool first) {
    /* BEGIN SOLUTION */
    kn_v8 acc[KN_GEMM_MR][NV];
    if (first) {
        for (int r = 0; r < KN_GEMM_MR; r++)
            for (int v = 0; v < NV; v++) acc[r][v] = (kn_v8){0};
    } else if (mr == KN_GEMM_MR && nr == KN_GEMM_NR) {
        for (int r = 0; r < KN_GEMM_MR; r++) memcpy(acc[r], c + r * ldc, sizeof acc[r]);
    } else { /* a partial block: the rows and columns past c's edge start (and stay) unused */
        float tmp[KN_GEMM_MR][KN_GEMM_NR] = {{0}};
        for (int r = 0; r < mr; r++)
            for (int j = 0; j < nr; j++) tmp[r][j] = c[r * ldc + j];
        memcpy(acc, tmp, sizeof tmp);
    }
    for (int64_t kk = 0; kk < k; kk++) {
        kn_v8 bv[NV];
        _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++) memcpy(&bv[v], bp + kk * KN_GEMM_NR + v * VW, sizeof bv[v]);
        const float *a = ap + kk * KN_GEMM_MR;
        _Pragma("GCC unroll 8") for (int r = 0; r < KN_GEMM_MR; r++) {
            float ar = a[r];
            _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++) acc[r][v] += bv[v] * ar;
        }
    }
    if (mr == KN_GEMM_MR && nr == KN_GEMM_NR) {
        for (int r = 0; r < KN_GEMM_MR; r++) memcpy(c + r * ldc, acc[r], sizeof acc[r]);
    } else {
        float tmp[KN_GEMM_MR][KN_GEMM_NR];
        memcpy(tmp, acc, sizeof tmp);
        for (int r = 0; r < mr; r++)
            for (int j = 0; j < nr; j++) c[r * ldc + j] = tmp[r][j];
    }
    /* SKELETON
    // c[mr x nr] = (first ? 0 : c) + sum over kk of ap[kk * MR + r] * bp[kk * NR + j],
    // accumulated in increasing kk order, the accumulators in registers (see above).
    (void)ap, (void)bp, (void)k, (void)c, (void)ldc, (void)mr, (void)nr, (void)first;
    kn_not_implemented("lab06", "kn_gemm_micro_f32: the 6 x 16 register block");
    END SOLUTION */
}

void kn_gemm_micro_f32(const float *ap, const float *bp, int64_t k, float *c, int64_t ldc, int mr, int nr, bool first) {
    micro(ap, bp, k, c, ldc, mr, nr, first);
}
