/* kiln/quant.h — INT8 post-training quantization: the quantizers, the int8 kernels and the
 * `quantize` pass.
 *
 * Symmetric int8: a row of values v with absmax a gets the scale s = a / 127 and the codes
 * q = round(v / s) in [-127, 127] (-128 is never made, so negation is exact); v ~ q * s with
 * an error of at most s / 2 per element. A row of zeros gets s = 0 and q = 0.
 *
 * Two products (the ops matmul_w8 and matmul_w8a8 of core/ir/ops.def, the kernels below):
 *   w8    the weight quantized per output channel (one scale per column of the product);
 *         the activations stay f32: c[i][j] = s_w[j] * sum_k x[i][k] * q_w[j][k], the int8
 *         codes widened to f32 inside the loop (dequantize in the loop, f32 accumulation).
 *   w8a8  the activations quantized too, per token (one scale per row of x, computed at run
 *         time from the row's absmax: dynamic): c[i][j] = s_x[i] s_w[j] sum_k q_x[i][k] q_w[j][k],
 *         the sum in int32 (exact: |q| <= 127, so K up to 133,000 cannot overflow), the two
 *         scales applied in the epilogue.
 *
 * w8a8-tensor (matmul_w8a8_tensor) is w8a8 with one activation scale for all of x: the naive
 * per-tensor baseline, kept to show what the per-token scales buy.
 *
 * The IR has no int8 dtype: the ops read the f32 weight and quantize it inside the kernel on
 * every run (O(K N), against the product's O(M K N)); the numbers are those of a stored int8
 * weight, the memory is not saved yet. For a few rows that dominates: on the CPU (2-core
 * AMD EPYC, 2026-11-27) quantizing a [768, 3072] weight takes 30-60 ms, the int8 product of
 * one row with it under 1 ms; a prefill's 8192 rows take ~250 ms (5x kiln's f32 GEMM, make
 * bench-int8). Storing the codes once per program is the next step.
 *
 * The CPU products (core/ir/gemm_i8.c) pack their operands and run a microkernel chosen at
 * run time for the CPU (AVX-512 VNNI, AVX-VNNI, AVX2 or plain C), all giving the same bits;
 * on CUDA (core/runtime/cuda_quant.cu) the int8 product is cuBLASLt's (IMMA), the same bits
 * again. */
#ifndef KILN_QUANT_H
#define KILN_QUANT_H

#include <stdbool.h>
#include <stdint.h>

#include "kiln/base.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KN_QMAX 127

/* Quantize each of the `rows` rows of x (row-major, `cols` floats each, row stride ld) into
 * q (rows x cols int8, contiguous) and scale[rows]. Non-finite input: scale becomes NaN
 * (the product then reads NaN, as the f32 product would). */
void kn_quant_rows_i8(const float *x, int64_t rows, int64_t cols, int64_t ld, int8_t *q, float *scale);
/* Quantize the columns of w [k, n] (row-major) into q [n][k] (each column contiguous, the
 * layout the kernels read) and scale[n]. */
void kn_quant_cols_i8(const float *w, int64_t k, int64_t n, int8_t *q, float *scale);
/* c [m, n] (f32) = sa[i] * sb[j] * sum_k a[i][k] b[j][k]: a [m][k], b [n][k] int8 codes in
 * [-127, 127] (-128 is never made; the avx2 path's sign trick relies on it), int32
 * accumulation (exact), the epilogue kn_i8_dequant; sa NULL: 1 per row. Packs b and a
 * (core/ir/gemm_i8.c), then runs the fastest microkernel this CPU has, threaded
 * (kn_k_parallel). Every path gives bitwise the same c. KN_ERR_OOM when the packed copies
 * cannot be allocated (c untouched). */
kn_status kn_gemm_i8(const int8_t *a, const int8_t *b, const float *sa, const float *sb, float *c, int64_t m, int64_t n,
                     int64_t k);
/* A weight's codes b [n][k] packed once for many products (kn_gemm_i8_packed): panels of 32
 * columns, k in groups of four (zero-padded), and 128 * each column's code sum (the
 * vpdpbusd kernels' correction). About n * k bytes. */
typedef struct kn_i8_weight {
    int64_t n, k, kg, np; /* kg = ceil(k / 4) groups, np = ceil(n / 32) panels */
    int8_t *panels;
    int32_t *comp;
} kn_i8_weight;
/* Pack b [n][k] into w (free with kn_i8_weight_free). KN_ERR_ARG / KN_ERR_OOM, w zeroed. */
kn_status kn_i8_weight_pack(const int8_t *b, int64_t n, int64_t k, kn_i8_weight *w);
void kn_i8_weight_free(kn_i8_weight *w);
/* kn_gemm_i8 with the weight packed: c [m, w->n] from a [m][w->k]. */
kn_status kn_gemm_i8_packed(const int8_t *a, const kn_i8_weight *w, const float *sa, const float *sb, float *c,
                            int64_t m);
/* The CPU paths of kn_gemm_i8: "generic" (plain C, any CPU), "avx2" (vpmaddubsw),
 * "avxvnni" and "avx512vnni" (vpdpbusd on 256/512 bits), chosen at run time. kn_gemm_i8_path:
 * the one products take now; kn_gemm_i8_set_path: force one ("auto" or NULL: the best this
 * CPU has again; KN_ERR_UNSUPPORTED when this CPU lacks it, KN_ERR_ARG for an unknown name;
 * not thread-safe against concurrent products: for tests and benchmarks);
 * kn_gemm_i8_paths: how many paths this CPU can run, their names into names[0..cap). */
const char *kn_gemm_i8_path(void);
kn_status kn_gemm_i8_set_path(const char *name);
int kn_gemm_i8_paths(const char **names, int cap);
/* The dequantizing epilogue of the int8 product, shared by every kernel that makes int32
 * sums (the CPU microkernels and, as the reference, the GPU's): rows x cols int32 sums acc
 * (row stride ldacc) become c[i][j] = (float)acc[i][j] * sa[i] * sb[j] (row stride ldc),
 * the multiplications in that order, in f32. sa NULL: 1 for every row. sa/sb are indexed
 * from the tile's first row/column (callers pass sa + i0, sb + j0). */
void kn_i8_dequant(const int32_t *acc, int64_t rows, int64_t cols, int64_t ldacc, const float *sa, const float *sb,
                   float *c, int64_t ldc);
/* c [m, n] = sb[j] * sum_k x[i][k] b[j][k]: x f32 [m][k], b [n][k] int8, f32 accumulation
 * (eight lanes of partial sums, vectorized at the baseline ISA; not tuned further). */
void kn_gemm_w8(const float *x, const int8_t *b, const float *sb, float *c, int64_t m, int64_t n, int64_t k);

/* The pass itself (kn_pass_quantize) is declared in kiln/passes.h, the held-out loss that
 * compares the programs (kn_gpt_heldout_loss) in kiln/nn.h: this header is the kernels'. */

#ifdef __cplusplus
}
#endif
#endif
