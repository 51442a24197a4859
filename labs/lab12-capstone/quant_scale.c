/* quant_scale.c — lab 12 unit: the symmetric int8 quantizer's observer and scales
 * (kn_quant_rows_i8, kn_quant_cols_i8; contracts in kiln/quant.h).
 *
 * Post-training quantization maps a group of f32 values onto int8 codes with one f32 scale
 * per group. kiln's quantizer is symmetric and absmax-calibrated: the *observer* finds the
 * group's largest magnitude a, the scale is s = a / 127, and each value v becomes the code
 * q = round(v / s), rounded to the nearest integer with ties to even (the rounding mode of
 * the FPU, nearbyintf; the GPU kernels of cuda_quant.cu round the same way), in [-127, 127]:
 * -128 is never made, so a code's negation is a code and the range is symmetric.
 * v ~ q * s, with an error of at most s / 2 per element.
 *
 * The code is computed as v * (127 / a), one multiplication by the reciprocal, not a
 * division by s per element: every kernel of kiln (CPU and GPU) does the same, so their
 * codes agree bit for bit. No clamp is needed in the code: |v| <= a, so |v * (127 / a)| is
 * at most 127 (1 + 2^-23)^2 < 127.5, which rounds to 127; the codes are in [-127, 127]
 * because the scale comes from the group's own absmax (a calibrated scale, taken from other
 * data, would need the clamp). Edge cases, part of the contract:
 *   - a group of zeros (a = 0) has the scale 0 and the codes 0 (no division by zero); so
 *     does a group whose values are all below 127 / FLT_MAX ~ 3.7e-37, where 127 / a
 *     overflows to infinity (its values are zero to f32's precision of anything near 1);
 *   - a group with a NaN or an infinity has the scale NaN and the codes 0: the product then
 *     reads NaN, as the f32 product would, instead of silently clamping an infinity to 127.
 *
 * Which values share a scale is the caller's choice, made through the layout: rows of x
 * (kn_quant_rows_i8: per token for activations, per output channel for a weight stored
 * [N, K]; per tensor by passing the whole tensor as one row) or columns of w
 * (kn_quant_cols_i8: per output channel of a weight stored [K, N], written transposed so
 * that each channel's codes are contiguous, the layout the int8 kernels read).
 *
 * kiln calls these for every int8 product (the ops matmul_w8, matmul_w8a8 and
 * matmul_w8a8_tensor on the CPU: core/ir/quant.c), so `kiln eval --compare` measures them. */
#include <math.h>
#include <stdbool.h>

#include "kiln/quant.h"


void kn_quant_rows_i8(const float *x, int64_t rows, int64_t cols, int64_t ld, int8_t *q, float *scale) {
    // For each row i (it starts at x + i * ld): the observer (the row's largest |v|, and
    // whether every value is finite), then scale[i] and the codes q[i * cols + j], as the
    // comment above says (the reciprocal 127 / a, nearbyintf; a row of zeros or of tiny
    // values -> scale 0 and codes 0; a non-finite value -> scale NaN and codes 0).
    // Until then: zeros and NaN scales, and the skeleton's message for whoever checks.
    for (int64_t i = 0; i < rows; i++) {
        scale[i] = NAN;
        for (int64_t j = 0; j < cols; j++) q[i * cols + j] = 0;
    }
    (void)x, (void)ld;
    kn_not_implemented("lab12", "kn_quant_rows_i8: the absmax observer and the codes of each row (quant_scale.c)");
}

void kn_quant_cols_i8(const float *w, int64_t k, int64_t n, int8_t *q, float *scale) {
    // For each column j of w [k, n] (w[i * n + j], i = 0..k-1): the same observer and
    // codes as a row's, the codes written transposed: q[j * k + i] (column j contiguous).
    for (int64_t j = 0; j < n; j++) {
        scale[j] = NAN;
        for (int64_t i = 0; i < k; i++) q[j * k + i] = 0;
    }
    (void)w;
    kn_not_implemented("lab12", "kn_quant_cols_i8: the absmax observer and the codes of each column (quant_scale.c)");
}
