/* cuda_flash.h — the flash attention kernels of core/runtime/cuda_flash.cu as the CUDA
 * emulator runs them (compiled as C by core/runtime/cuda_flash_emu.c), for the tests: the
 * same kernel text nvcc compiles for the GPU, run on the CPU.
 *
 * kn_flash_emu_S(q, k, v, y, dy, dyc, out, bh, t, d, scale, bwd): bh [t, d] matrices.
 * bwd false: out = y [bh, t, d + 1] (flash_attn; y and dy unused, may be NULL). bwd true:
 * out = [3, bh, t, d] (flash_attn_bwd from y and dy [bh, t, dyc], dyc d or d + 1). Returns
 * 0, -1 when a launch failed (the emulator printed why), -2 for sizes the kernels do not
 * take (d > KN_FLASH_CUDA_DMAX, bh > 65535, t > 2^24), -3 when the forward kernel is lab
 * 08's skeleton (labs/lab08-memory/cuda_flash_fwd.c untouched; kn_last_error says so). */
#ifndef KN_CUDA_FLASH_H
#define KN_CUDA_FLASH_H

#include <stdbool.h>

#define KN_FLASH_CUDA_DMAX 128 /* the largest head dim the kernels keep in registers */

#ifndef __CUDACC__
int kn_flash_emu_f32(const float *q, const float *k, const float *v, const float *y, const float *dy, int dyc,
                     float *out, long long bh, int t, int d, float scale, bool bwd);
int kn_flash_emu_f64(const double *q, const double *k, const double *v, const double *y, const double *dy, int dyc,
                     double *out, long long bh, int t, int d, double scale, bool bwd);
#endif

#endif
