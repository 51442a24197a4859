/* cuda_embedding.h — embedding_grad's kernels (core/runtime/cuda_embedding.cu) as the CUDA
 * emulator runs them (compiled as C by core/runtime/cuda_embedding_emu.c), for the tests:
 * the same kernel text nvcc compiles for the GPU, run on the CPU.
 *
 * kn_embedding_grad_emu(dt, dy, idx, i32, n, v, d, dw): dw [v, d] (dt f32 or f64) = the
 * sum, per table row r, of the rows i of dy [n, d] whose index idx[i] (i32 when i32, else
 * i64) is r; an index outside [0, v) adds nowhere. The order of each sum is the GPU's
 * (see cuda_embedding.cu): a row named at most KN_EMBEDDING_CHUNK times is summed in
 * position order, as the CPU kernel sums it, bit for bit. The sort the GPU does with CUB
 * is a counting sort on the host here. KN_OK, or an error naming what failed (sizes the
 * kernels do not take, memory, a launch). */
#ifndef KN_CUDA_EMBEDDING_H
#define KN_CUDA_EMBEDDING_H

#include <stdbool.h>

#include "kiln/base.h"

/* Positions one thread sums in a row before its sum becomes a partial. */
#define KN_EMBEDDING_CHUNK 64

#ifndef __CUDACC__
kn_status kn_embedding_grad_emu(kn_dtype dt, const void *dy, const void *idx, bool i32, long long n, long long v,
                                long long d, void *dw);
#endif

#endif
