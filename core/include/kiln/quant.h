/* kiln/quant.h — INT8 post-training quantization: the quantizers, the int8 kernels and the
 * `quantize` pass.
 *
 * Symmetric int8: a row of values v with absmax a gets the scale s = a / 127 and the codes
 * q = round(v / s) in [-127, 127] (-128 is never made, so negation is exact); v ~ q * s with
 * an error of at most s / 2 per element, the code computed as v * (127 / a) rounded half to
 * even. A row of zeros gets s = 0 and q = 0, as does a row whose 127 / a overflows (every
 * value below 127 / FLT_MAX ~ 3.7e-37). The quantizers are lab 12's units
 * (core/ir/quant_scale.c), as is the epilogue kn_i8_dequant (core/ir/quant_epilogue.c).
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
 * weight, the memory is not saved yet. */
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
/* c [m, n] (f32) = sa[i] * sb[j] * sum_k a[i][k] b[j][k]: a [m][k], b [n][k] int8 codes,
 * int32 accumulation; sa NULL: 1 per row. Threaded over rows (kn_k_parallel). */
void kn_gemm_i8(const int8_t *a, const int8_t *b, const float *sa, const float *sb, float *c, int64_t m, int64_t n,
                int64_t k);
/* The dequantizing epilogue of the int8 product, shared by every kernel that makes int32
 * sums (the CPU microkernels and, as the reference, the GPU's): rows x cols int32 sums acc
 * (row stride ldacc) become c[i][j] = (float)acc[i][j] * sa[i] * sb[j] (row stride ldc),
 * the multiplications in that order, in f32. sa NULL: 1 for every row. sa/sb are indexed
 * from the tile's first row/column (callers pass sa + i0, sb + j0). */
void kn_i8_dequant(const int32_t *acc, int64_t rows, int64_t cols, int64_t ldacc, const float *sa, const float *sb,
                   float *c, int64_t ldc);
/* c [m, n] = sb[j] * sum_k x[i][k] b[j][k]: x f32 [m][k], b [n][k] int8, f32 accumulation. */
void kn_gemm_w8(const float *x, const int8_t *b, const float *sb, float *c, int64_t m, int64_t n, int64_t k);

/* The pass itself (kn_pass_quantize) is declared in kiln/passes.h, the held-out loss that
 * compares the programs (kn_gpt_heldout_loss) in kiln/nn.h: this header is the kernels'. */

#ifdef __cplusplus
}
#endif
#endif
