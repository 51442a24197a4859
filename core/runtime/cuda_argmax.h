/* cuda_argmax.h — greedy decoding's argmax over rows of logits (core/runtime/cuda_argmax.cu):
 * on the GPU (knc_argmax_rows, the CUDA backend's argmax_rows, kiln/device.h) and, the same
 * kernel text compiled as C, under the CUDA emulator (kn_argmax_rows_emu, for the tests).
 *
 * out[r] = the index of the largest of x[r n .. r n + n), the first one where several are
 * equal, NaN never chosen, unless x[r n] itself is NaN, then 0: exactly the CPU's scan
 * `best = 0; for v: if (row[v] > row[best]) best = v` (kn_sample_row at temperature 0,
 * kiln/infer.h), whose comparisons with a NaN are all false. */
#ifndef KN_CUDA_ARGMAX_H
#define KN_CUDA_ARGMAX_H

#include <stdint.h>

#include "kiln/base.h"

#ifdef __cplusplus
extern "C" {
#endif
/* x [rows, n] f32 and out [rows] in host memory. KN_ERR_ARG for NULL arrays or sizes
 * outside rows in [0, 2^31), n in [1, 2^31); KN_ERR_DEVICE when the launch failed. */
kn_status kn_argmax_rows_emu(const float *x, int64_t rows, int64_t n, int32_t *out);
#ifdef __cplusplus
}
#endif
#ifdef __CUDACC__
/* The same on the GPU, x and out in its memory, queued on knc_stream. */
kn_status knc_argmax_rows(const float *x, int64_t rows, int64_t n, int32_t *out);
#endif

#endif
