/* cuda_flash_tc.h — the tensor-core flash attention kernels of core/runtime/cuda_flash_tc.cu:
 * on the GPU (knc_flash_tc_run, called by cuda_flash.cu's host entries) and, the same text
 * compiled as C, under the CUDA emulator (kn_flash_tc_emu, for the tests).
 *
 * kind KN_FLASH_TC_TF32: q, k, v, y, dy, out are float (products in TF32, the rest f32);
 * KN_FLASH_TC_BF16: all are bf16 bits (uint16_t; products in bf16, accumulators and the
 * softmax in f32, results rounded to bf16, the logsumexp column too). Shapes as
 * kn_flash_emu_f32 in cuda_flash.h: bh [t, d] matrices; bwd false: out = y [bh, t, d + 1];
 * bwd true: out = [3, bh, t, d] from y and dy [bh, t, dyc] (dyc d or d + 1). nh > 0 asks
 * for the [B, T, H, D] layout (perm [0, 2, 1, 3] of kn_flash_attn in kiln/ir.h, H = nh,
 * bh = B H): q, k, v [B, T, H, D]; y the flat [B T H D + B H T] (O, then L); dy [B, T, H, D]
 * (dyc d) or y's type (dyc d + 1); the backward's out [B, T, 3, H, D]; the same bits as the
 * [..., T, D] layout (nh 0) on the permuted operands. Returns 0, -1 when a launch failed, -2
 * for what the kernels do not take: d other than those kn_flash_tc_kernel names,
 * bh > 65535, t > 2^24, bh not a multiple of nh. */
#ifndef KN_CUDA_FLASH_TC_H
#define KN_CUDA_FLASH_TC_H

#include <stdbool.h>

#include "kiln/ir.h" /* KN_FLASH_TC_TF32, KN_FLASH_TC_BF16, kn_flash_tc_kernel */

#ifdef __cplusplus
extern "C" {
#endif
/* The kernel the CUDA backend's flash_attn / flash_attn_bwd ran last ("simt f32",
 * "mma.m16n8k8 tf32, D 64", ...; defined in cuda_flash.cu, a stub in builds without CUDA). */
const char *kn_flash_cuda_kernel(void);
/* The forward that kind at head dim d runs now ("v2, 128-row blocks of 8 warps, ..." or
 * "v1, ..."; KILN_FLASH_FWD and KILN_FLASH_TC_ROWS pick), NULL where there is no such
 * kernel; and the one the CUDA backend's flash_attn ran last, the kernel and the variant
 * ("none yet" before any; a stub in builds without CUDA). */
const char *kn_flash_tc_fwd_variant(int kind, int d);
const char *kn_flash_cuda_fwd_kernel(void);
int kn_flash_tc_emu(int kind, const void *q, const void *k, const void *v, const void *y, const void *dy, int dyc,
                    void *out, long long bh, int t, int d, float scale, bool bwd, int nh);
#ifdef __cplusplus
}
#endif
#ifdef __CUDACC__
int knc_flash_tc_run(int kind, const void *q, const void *k, const void *v, const void *y, const void *dy, int dyc,
                     void *out, long long bh, int t, int d, float scale, bool bwd, int nh);
#endif

#endif
