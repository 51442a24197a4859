/* cuda_mma.h — warp-level tensor-core products (mma.sync) and the conversions around them,
 * one spelling for nvcc and for the CUDA emulator (core/runtime/cuda_emu.h), so a kernel
 * that uses them compiles for the GPU and runs, the same text, on the CPU.
 *
 *   KN_MMA_TF32_16x8x8(d, a, b, c)    mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32
 *   KN_MMA_BF16_16x8x16(d, a, b, c)   mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
 *
 * d, c: float[4], the lane's accumulators (rows g and g + 8, columns 2t and 2t + 1 of the
 * [16, 8] tile, g = lane / 4, t = lane % 4); a: unsigned[4], b: unsigned[2], the lane's
 * A and B fragments (cuda_emu.h spells out both layouts; the PTX ISA's "Matrix Fragments
 * for mma.m16n8k8" and "...m16n8k16" are the reference). Every lane of the warp executes
 * the same call. sm_80 and later (the Makefile builds sm_80 and sm_90).
 *
 *   kn_ldmatrix_x4(r, row), kn_ldmatrix_x2(r, row), kn_ldmatrix_x4_trans(r, row), kn_ldmatrix_x2_trans(r, row)
 *
 * ldmatrix.sync.aligned.m8n8.{x4,x2,x4.trans,x2.trans}.shared.b16: lane l passes the address (shared
 * memory, 16-byte aligned) of row l % 8 of matrix l / 8; lane (g, t) gets r[i] = matrix i's
 * elements (g, 2t..2t+1), or (2t..2t+1, g) transposed: exactly an A or B fragment of the
 * bf16 mma when the rows are chosen as cuda_flash_tc.cu does.
 *
 * Conversions: kn_tf32_bits(x) rounds an f32 to tf32 (cvt.rna.tf32.f32: ties away from
 * zero) and returns its bits, the register an mma.tf32 operand is; kn_bf16x2(lo, hi)
 * packs two f32s rounded to bf16 (cvt.rn.bf16x2.f32: nearest, ties to even) with lo in the
 * low half; kn_bf16_bits(x) one bf16 as 16 bits; kn_bf16_f32(h) widens (exact).
 *
 *   kn_cp_async16(dst, src), KN_CP_ASYNC_COMMIT(), KN_CP_ASYNC_WAIT(n)
 *
 * cp.async.cg.shared.global: 16 bytes (both addresses 16-byte aligned) from global to shared
 * memory without passing through registers, the thread going on at once; commit_group closes
 * the thread's copies issued since the last commit into a group, and wait_group n (n a
 * constant) waits until at most the n most recent groups are still in flight. A thread's
 * copies are then in shared memory; a __syncthreads() after the wait shows them to the block.
 * So a kernel issues the next tile's copies and computes on the current one meanwhile. The
 * emulator copies at once (and commit and wait do nothing): its threads switch only at
 * barriers, so a kernel that overwrites a tile another thread still reads, for want of a
 * barrier between, reads the wrong tile there too. */
#ifndef KN_CUDA_MMA_H
#define KN_CUDA_MMA_H

#include "runtime/cuda_emu.h"

#ifdef __CUDACC__
#include <cuda_bf16.h>

static __device__ __forceinline__ unsigned kn_f32_bits(float x) { return __float_as_uint(x); }
static __device__ __forceinline__ float kn_bits_f32(unsigned u) { return __uint_as_float(u); }
static __device__ __forceinline__ unsigned kn_tf32_bits(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}
static __device__ __forceinline__ unsigned kn_bf16x2(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
static __device__ __forceinline__ unsigned short kn_bf16_bits(float x) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}
/* One mma.sync with f32 accumulators: d = a b + c over the warp (shape and operand types in
 * the instruction's name). */
#define KN_MMA_F32ACC(name, instr)                                                                             \
    static __device__ __forceinline__ void name(float d[4], const unsigned a[4], const unsigned b[2],             \
                                                const float c[4]) {                                             \
        asm volatile(instr " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"                        \
                     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])                                           \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), \
                       "f"(c[2]), "f"(c[3]));                                                                   \
    }
KN_MMA_F32ACC(kn_mma_tf32, "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32")
KN_MMA_F32ACC(kn_mma_bf16, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32")
#define KN_MMA_TF32_16x8x8(d, a, b, c) kn_mma_tf32((d), (a), (b), (c))
#define KN_MMA_BF16_16x8x16(d, a, b, c) kn_mma_bf16((d), (a), (b), (c))
static __device__ __forceinline__ void kn_ldmatrix_x4(unsigned r[4], const unsigned short *row) {
    unsigned a = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
static __device__ __forceinline__ void kn_ldmatrix_x2(unsigned r[2], const unsigned short *row) {
    unsigned a = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
}
static __device__ __forceinline__ void kn_ldmatrix_x4_trans(unsigned r[4], const unsigned short *row) {
    unsigned a = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
static __device__ __forceinline__ void kn_ldmatrix_x2_trans(unsigned r[2], const unsigned short *row) {
    unsigned a = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
}
static __device__ __forceinline__ void kn_cp_async16(void *dst, const void *src) {
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(__cvta_generic_to_global(src)) : "memory");
}
#define KN_CP_ASYNC_COMMIT() asm volatile("cp.async.commit_group;" ::: "memory")
#define KN_CP_ASYNC_WAIT(n) asm volatile("cp.async.wait_group %0;" ::"n"(n) : "memory")

#else /* the emulator */
#include <string.h>

static inline unsigned kn_f32_bits(float x) {
    unsigned u;
    memcpy(&u, &x, sizeof u);
    return u;
}
static inline float kn_bits_f32(unsigned u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}
static inline unsigned kn_tf32_bits(float x) {
    unsigned u = kn_f32_bits(x);
    return (u & 0x7f800000u) == 0x7f800000u ? u : (u + 0x1000u) & 0xffffe000u;
}
static inline unsigned short kn_bf16_bits(float x) {
    unsigned u = kn_f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u); /* NaN stays NaN */
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static inline unsigned kn_bf16x2(float lo, float hi) {
    return (unsigned)kn_bf16_bits(lo) | (unsigned)kn_bf16_bits(hi) << 16;
}
#define KN_MMA_TF32_16x8x8(d, a, b, c) kn_emu_mma(KN_EMU_MMA_TF32_16x8x8, (d), (a), (b), (c))
#define KN_MMA_BF16_16x8x16(d, a, b, c) kn_emu_mma(KN_EMU_MMA_BF16_16x8x16, (d), (a), (b), (c))
static inline void kn_ldmatrix_x4(unsigned r[4], const unsigned short *row) { kn_emu_ldmatrix(r, 4, 0, row); }
static inline void kn_ldmatrix_x2(unsigned r[2], const unsigned short *row) { kn_emu_ldmatrix(r, 2, 0, row); }
static inline void kn_ldmatrix_x4_trans(unsigned r[4], const unsigned short *row) { kn_emu_ldmatrix(r, 4, 1, row); }
static inline void kn_ldmatrix_x2_trans(unsigned r[2], const unsigned short *row) { kn_emu_ldmatrix(r, 2, 1, row); }
static inline void kn_cp_async16(void *dst, const void *src) { memcpy(dst, src, 16); }
#define KN_CP_ASYNC_COMMIT() ((void)0)
#define KN_CP_ASYNC_WAIT(n) ((void)(n))
#endif

static __device__ inline float kn_bf16_f32(unsigned short h) { return kn_bits_f32((unsigned)h << 16); }

#endif
