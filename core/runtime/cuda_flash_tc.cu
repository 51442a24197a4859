/* cuda_flash_tc.cu — flash attention on tensor cores: FlashAttention-2's kernels with the
 * two products of each step on warp-level mma.sync, in TF32 (f32 operands, where kiln
 * allows TF32: KILN_TF32=1, `--tf32`, `--precision tf32`) and in bf16 (bf16 operands and
 * results, f32 accumulators and softmax). Same contract as the SIMT kernels of
 * cuda_flash.cu (kn_flash_attn in kiln/ir.h: y [.., T, D + 1] = O and the logsumexp L;
 * the backward's [3, .., T, D] = dq, dk, dv), which remain for f64, for f32 without
 * TF32 and for shapes these refuse; cuda_flash.cu's host entries pick (knc_flash_tc_run).
 *
 * Written, like cuda_flash.cu, in the subset the CUDA emulator runs (core/runtime/cuda_emu.h),
 * with the tensor-core products spelled KN_MMA_TF32_16x8x8 / KN_MMA_BF16_16x8x16
 * (core/runtime/cuda_mma.h: inline PTX under nvcc, the emulator's warp-collective
 * kn_emu_mma on the CPU), so cuda_flash_tc_emu.c runs these very kernels in `make test`
 * (tests/core/test_flash_tc.c). The text (cuda_flash_tc.inc; its forward,
 * cuda_flash_tc_fwd.inc) is instantiated per operand type and head dim, a compile-time
 * constant so every fragment array is registers: tf32 at D 32 and 64, bf16 at D 64 and 128
 * (anything else falls back, or is refused in bf16).
 *
 * The tiling (FA2): a block is 4 warps (128 threads); a warp owns 16 rows, the m of the
 * m16n8 products, or 32 (two m16 tiles, KNT_MT 2: 128-row blocks, so each B fragment read
 * from shared memory serves two products, at the price of registers: the forward of tf32 D
 * 32 and D 64 (with 32-key tiles) by default, of bf16 D 64 with KILN_FLASH_TC_ROWS=128; the
 * defaults are what timed faster on the H100, 2026-11-25: bf16 D 64's 64-row forward 113.5
 * against 123.8 us, tf32 D 64's 128-row one 206.8 against 218.6). Forward: Q's rows are staged through shared memory
 * once into A fragments held in registers; per key tile of KNT_BC rows, S = Q K^T lands in
 * accumulator fragments (each lane: 2 rows x 2 columns of each 8-column slice), scaled in
 * registers and masked only in the tile that straddles the diagonal (the others lie wholly
 * at or before every row of the warp; 8-key slices past all of the warp's rows are not
 * multiplied at all); the row max and (at the end) the row sum meet over the 4 lanes of a
 * row with __shfl_xor_sync(1, 2); the online softmax rescales the O accumulators; P goes
 * from accumulator to A fragments without shared memory or shuffles (bf16: the layouts
 * line up, two f32 pack into one register; tf32: the S product's key columns are permuted
 * so that they do, see knt_ldbn_tf32) and O += P V. Exponentials are exp2 of
 * log2(e)-scaled scores, one ex2.approx.ftz each (knt_ex2), 2^-inf = 0 standing in for
 * every masked or missing term. The blocks of the forward and of dq are numbered from the
 * last query tile, so the longest start first. Backward (no atomics, deterministic, as
 * cuda_flash.cu): (1) delta = dO . O - dL per row, parked as an f32 in dq's row; (2) dk,
 * dv: a warp owns 16 keys, K and V stay in shared memory as A operands, per query tile
 * S^T = K Q^T and dP^T = V dO^T, P^T and dS^T in registers, dV += P^T dO and dK += dS^T Q
 * with Q and dO read column-major (B "k-major"); (3) dq: a warp owns 16 query rows (Q and
 * dO as register A fragments), per key tile S, dP, dS, dQ += dS K. P is recomputed twice,
 * as in the SIMT version and FA2's deterministic mode. bf16 D 64 (GPT-2's) has a second
 * forward, the default (v2, cuda_flash_tc_fwd2.inc, whose top comment says what it changes:
 * 128-row blocks of 8 warps of 16 rows, K and V both double-buffered with one barrier a tile,
 * the softmax a 32-key half-tile at a time so 16 warps an SM fit the registers);
 * KILN_FLASH_FWD=v1 runs the one described here, v2-64 v2 in 64-row blocks of 4 warps.
 *
 * Loads overlap products: tiles go global -> shared by cp.async (kn_cp_async16, 16 bytes,
 * no registers; a plain copy under the emulator). The forward has one K and one V buffer
 * and orders its two products so that one operand's next tile lands while the other is
 * read: V(j) during S = Q K(j)^T, K(j + 1) during softmax and P V(j); where a third 64-row
 * tile fits the 48 KiB (KNT_TILE3: bf16 D 64, tf32 D 32) V has two buffers, so V(j + 1) is
 * copied from the start of tile j. dq (32-key tiles, KNT_BCQ) and dk/dv (32-query tiles,
 * KNT_BQ; 16 at bf16 D 128) have two buffers of each operand they stream (K and V; Q, dO
 * and the rows' L and delta): tile j + 1's are copied from the start of tile j, one barrier
 * a tile. A barrier separates a buffer's last read from its next copy. The tiles hold the
 * operands as they are in memory; tf32 fragments are rounded (cvt.rna) as they are loaded
 * from them. Every operand is read and written through row strides (the args' ld*, and
 * KNT_ROW for a pair's first row), so the same kernels serve both layouts of kn_flash_attn:
 * [..., T, D] (y's rows [O | L]) and the GPT's [B, T, H, D] (q, k, v read in place from the
 * projections, O written where the next product reads it, L after O, the gradient stacked
 * [B, T, 3, H, D]), with the same sums in the same order: the same bits.
 *
 * Shared tiles: rows padded to KNT_P = D + 8 (bf16) or D + 4 (f32) elements, so the 32
 * lanes of a fragment load hit 32 banks (row-major "n-major" loads: lane (g, t) reads
 * word g * P/wordsize + t); tf32's column-major loads (B k-major) keep a 2-way conflict at
 * pitch D + 4, which D + 8 would remove at the price of the row-major ones. Every kernel
 * fits the 48 KiB of static shared memory but the dk/dv of tf32 D 64 and bf16 D 128
 * (KNT_DYN): 128 K/V rows and two 32-row (16-row) Q/dO tiles take 68 (52) KiB, declared as
 * dynamic shared memory under nvcc and asked for at the launch
 * (cudaFuncAttributeMaxDynamicSharedMemorySize); under the emulator the same arrays are
 * static, which has no such limit there. With 16-row tiles (one buffer) tf32 took 11.3 ms of
 * a 1024-token attention on the H100, with 64 9.15 (2026-11-25).
 * Fragments come from shared memory by ldmatrix (x4 for A; x4 and x4.trans for the B of two
 * 8-column slices), except
 * tf32's k-major B (32-bit loads). __launch_bounds__ (KNT_MB_*) holds each kernel to the
 * registers of its blocks an SM, without spills (ptxas -v). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda_flash_tc.h"
#include "runtime/cuda_mma.h"

#define KNT_NT 128 /* threads a block: 4 warps of 16 rows */
#define KNT_FN_(name, s) name##_##s
#define KNT_FN(name, s) KNT_FN_(name, s)
#ifdef __CUDACC__
/* minb blocks of KNT_NT threads an SM: ptxas keeps the registers under 65536 / (minb KNT_NT) */
#define KNT_KERNEL(name, args, minb) __global__ void __launch_bounds__(KNT_NT, minb) name(args a)
#else
#define KNT_KERNEL(name, args, minb) KN_KERNEL_DEF(name, args)
#endif
#ifdef __CUDACC__
#include "runtime/cuda_impl.h"
#define KN_UNROLL _Pragma("unroll")
#define KNT_ALIGN __align__(16)
#else
#define KN_UNROLL
#define KNT_ALIGN _Alignas(16)
#endif
#define KNT_LAUNCH KN_LAUNCH /* on knc_stream under nvcc */

static inline int knt_aligned(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* The forward's rows a block where an instance has both (KNT_MT2): KILN_FLASH_TC_ROWS=64 or
 * 128, read once; else 0, the instance's default (KNT_MT2 2: 128, 1: 64). 128: each warp
 * owns two m16 tiles, so each B fragment loaded from shared memory serves two products, at
 * the price of registers (2 blocks an SM instead of 3). A knob so both can be timed on one
 * machine. */
static int knt_fwd_rows(void) {
    static int v = -1;
    if (v < 0) {
        const char *s = getenv("KILN_FLASH_TC_ROWS");
        v = s && atoi(s) == 64 ? 64 : s && atoi(s) == 128 ? 128 : 0;
    }
    return v;
}

/* The forward where an instance has a second one (KNT_FWD2: bf16 D 64): KILN_FLASH_FWD=v1
 * (cuda_flash_tc_fwd.inc), v2-64 (cuda_flash_tc_fwd2.inc in 64-row blocks of 4 warps), else
 * (unset, v2, anything else) v2 in 128-row blocks of 8 warps; read once. 1, 3 or 2. A knob so
 * one run on one machine can time each; kn_flash_tc_fwd_variant names the one that runs. */
static int knt_fwd_version(void) {
    static int v = 0;
    if (v == 0) {
        const char *s = getenv("KILN_FLASH_FWD");
        v = s && !strcmp(s, "v1") ? 1 : s && !strcmp(s, "v2-64") ? 3 : 2;
    }
    return v;
}

/* 2^x for the softmax: one ex2.approx.ftz under nvcc (2 ulp; results below 2^-126 flush to
 * 0, where p is negligible next to the row's max term 1 anyway; 2^-inf = 0, which the masks
 * and the +inf stand-in for a missing L rely on), exp2f on the CPU. exp2f under nvcc
 * without --use_fast_math is ex2.approx without .ftz plus a rescaling around it. */
#ifdef __CUDACC__
static __device__ __forceinline__ float knt_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
#else
static inline float knt_ex2(float x) { return exp2f(x); }
#endif

/* ---------------------------------------------------------------- fragments, tf32 (float tiles)
 * A [16, 8] at s (pitch p): a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4).
 * B [8, 8] "n-major" (B[k][n] = s[n p + k], rows of K as columns): b0 (t, g), b1 (t + 4, g).
 * B "k-major" (B[k][n] = s[k p + n], V as it lies): the same elements, transposed address.
 * A and n-major B are ldmatrix loads too: a row of 4 floats is a row of 8 16-bit halves, and
 * lane (g, t)'s pair (g, 2t..2t+1) of halves is float (g, t). k-major B would need a 32-bit
 * transpose, which ldmatrix lacks: two 32-bit loads (a 2-way bank conflict at pitch D + 4).
 *
 * The accumulators of S = Q K^T sit at columns 2t and 2t + 1 of lane (g, t); the A fragment
 * of P V wants columns t and t + 4. So the n-major B load permutes its 8 columns: column c
 * holds row (key) c / 2 + 4 (c % 2) of the tile, and lane (g, t)'s accumulators are then keys
 * t and t + 4, exactly its A fragment (a0 = c0, a1 = c2, a2 = c1, a3 = c3): P never moves
 * between lanes. KNT_SCOL names the key (or, in dk/dv, the query) of accumulator e. */
#define KNT_SCOL_TF32(t, e) ((t) + 4 * ((e) & 1))
/* The tiles hold the f32 operands as they are in memory (cp.async copies them verbatim), so
 * each fragment is rounded to tf32 as it is loaded (cvt.rna, which mma.tf32 would not do:
 * it reads the top 19 bits of whatever it gets). */
static __device__ inline unsigned knt_rna(unsigned u) { return kn_tf32_bits(kn_bits_f32(u)); }
static __device__ inline void knt_lda_tf32(unsigned a[4], const float *s, int p, int g, int t) {
    int l = 4 * g + t;
    kn_ldmatrix_x4(a, (const unsigned short *)(s + l % 16 * p + l / 16 * 4));
    KN_UNROLL for (int i = 0; i < 4; i++) a[i] = knt_rna(a[i]);
}
/* B fragments come two at a time, for the 8-column slices n (b[0], b[1]) and n + 1 (b[2],
 * b[3]) from s at slice n: one ldmatrix.x4 (lanes 16-31 address slice n + 1's rows). */
static __device__ inline void knt_ldbn_tf32(unsigned b[4], const float *s, int p, int g, int t) {
    int l = 4 * g + t, c = l % 8;
    kn_ldmatrix_x4(b, (const unsigned short *)(s + (l / 16 * 8 + c / 2 + 4 * (c % 2)) * p + (l >> 3 & 1) * 4));
    KN_UNROLL for (int i = 0; i < 4; i++) b[i] = knt_rna(b[i]);
}
static __device__ inline void knt_ldbk_tf32(unsigned b[4], const float *s, int p, int g, int t) {
    KN_UNROLL for (int i = 0; i < 4; i++) b[i] = kn_tf32_bits(s[(t + 4 * (i & 1)) * p + 8 * (i >> 1) + g]);
}

/* Accumulators c (one [16, 8] tile, columns permuted as above) to the A fragment of the
 * next product: the same lane's values, rounded to tf32. */
static __device__ inline void knt_c2a_tf32(unsigned a[4], const float *c, int lane) {
    (void)lane;
    a[0] = kn_tf32_bits(c[0]);
    a[1] = kn_tf32_bits(c[2]);
    a[2] = kn_tf32_bits(c[1]);
    a[3] = kn_tf32_bits(c[3]);
}

/* ---------------------------------------------------------------- fragments, bf16 (16-bit tiles)
 * A [16, 16]: a0 (g, 2t..2t+1), a1 (g + 8, 2t..), a2 (g, 2t+8..), a3 (g + 8, 2t+8..), two
 * elements a register, the lower column in the low half. B [16, 8]: b0 (2t..2t+1, g),
 * b1 (2t+8..2t+9, g). Each is one ldmatrix (cuda_mma.h), lane 4g + t naming one row of 8
 * elements: A's four 8 x 8 quarters (rows 0-7 and 8-15 at column 0, then at column 8);
 * n-major B's two (columns k 0-7 and 8-15 of rows n 0-7); k-major B's two transposed
 * (rows k 0-7 and 8-15). B is loaded for two 8-column slices at once, as the tf32 B is: the
 * same two matrices for the next slice in r[2], r[3] (x4, x4.trans). Rows of 16 bytes at a
 * pitch of D + 8 elements: the 8 rows of one matrix fall in 8 distinct 4-bank groups. */
static __device__ inline void knt_lda_bf16(unsigned a[4], const unsigned short *s, int p, int g, int t) {
    int l = 4 * g + t;
    kn_ldmatrix_x4(a, s + l % 16 * p + l / 16 * 8);
}
static __device__ inline void knt_ldbn_bf16(unsigned b[4], const unsigned short *s, int p, int g, int t) {
    int l = 4 * g + t;
    kn_ldmatrix_x4(b, s + (l / 16 * 8 + l % 8) * p + (l >> 3 & 1) * 8);
}
static __device__ inline void knt_ldbk_bf16(unsigned b[4], const unsigned short *s, int p, int g, int t) {
    int l = 4 * g + t;
    kn_ldmatrix_x4_trans(b, s + l % 16 * p + l / 16 * 8);
}
/* Two accumulator tiles (16 columns) are exactly one A fragment: pack them. */
static __device__ inline void knt_c2a_bf16(unsigned a[4], const float *c, int lane) {
    (void)lane;
    a[0] = kn_bf16x2(c[0], c[1]);
    a[1] = kn_bf16x2(c[2], c[3]);
    a[2] = kn_bf16x2(c[4], c[5]);
    a[3] = kn_bf16x2(c[6], c[7]);
}

/* ---------------------------------------------------------------- the instances */
#define KNT_E float
#define KNT_KK 8
#define KNT_VEC 4
#define KNT_LDA knt_lda_tf32
#define KNT_SCOL KNT_SCOL_TF32
#define KNT_LDBN knt_ldbn_tf32
#define KNT_LDBK knt_ldbk_tf32
#define KNT_C2A knt_c2a_tf32
#define KNT_MMA KN_MMA_TF32_16x8x8
#define KNT_TOF(x) (x)
#define KNT_FROMF(x) (x)

#define KNT_S tf32_32
#define KNT_D 32
#define KNT_P 36
#define KNT_BC 64
#define KNT_BCQ 32 /* dq's key tile */
#define KNT_BQ 32
#define KNT_DYN 0
#define KNT_MT2 2 /* and a forward of 128-row blocks, the default (KILN_FLASH_TC_ROWS) */
#define KNT_TILE3 1 /* a third 64-row tile fits: the forward's V double-buffered */
#define KNT_MB_FWD 3 /* blocks an SM (the registers' bound): fwd, dk/dv, dq */
#define KNT_MB_DKDV 4
#define KNT_MB_DQ 4
#define KNT_FWD2 0
#include "runtime/cuda_flash_tc.inc"

#define KNT_S tf32_64
#define KNT_D 64
#define KNT_P 68
#define KNT_BC 64
#define KNT_BCQ 32
#define KNT_BQ 32 /* 64 keys' K and V (34 KiB) + two 32-row tiles of Q and dO: 68 KiB, dynamic shared memory */
#define KNT_DYN 1
#define KNT_MT2 2 /* and a 128-row forward, the default: 206.8 against 218.6 us for 64 rows (H100, B 8, H 12, T 1024, 2026-11-25) */
#define KNT_BC_MT2 32 /* its key tile */
#define KNT_TILE3 0
#define KNT_MB_FWD 3 /* blocks an SM (the registers' bound): fwd, dk/dv, dq */
#define KNT_MB_DKDV 3
#define KNT_MB_DQ 3
#define KNT_FWD2 0
#include "runtime/cuda_flash_tc.inc"

#undef KNT_E
#undef KNT_KK
#undef KNT_VEC
#undef KNT_LDA
#undef KNT_SCOL
#undef KNT_LDBN
#undef KNT_LDBK
#undef KNT_C2A
#undef KNT_MMA
#undef KNT_TOF
#undef KNT_FROMF

#define KNT_E unsigned short
#define KNT_KK 16
#define KNT_VEC 8
#define KNT_LDA knt_lda_bf16
#define KNT_SCOL(t, e) (2 * (t) + ((e) & 1))
#define KNT_LDBN knt_ldbn_bf16
#define KNT_LDBK knt_ldbk_bf16
#define KNT_C2A knt_c2a_bf16
#define KNT_MMA KN_MMA_BF16_16x8x16
#define KNT_TOF(x) kn_bf16_f32(x)
#define KNT_FROMF(x) kn_bf16_bits(x)

#define KNT_S bf16_64
#define KNT_D 64
#define KNT_P 72
#define KNT_BC 64
#define KNT_BCQ 32
#define KNT_BQ 32
#define KNT_DYN 0
#define KNT_MT2 1 /* and a 128-row forward, not the default: 123.8 against 113.5 us for 64 rows (H100, B 8, H 12, T 1024, 2026-11-25) */
#define KNT_TILE3 1
#define KNT_MB_FWD 3 /* blocks an SM (the registers' bound): fwd, dk/dv, dq */
#define KNT_MB_DKDV 3
#define KNT_MB_DQ 4
#define KNT_FWD2 1 /* and the forward v2 (cuda_flash_tc_fwd2.inc), the default */
#include "runtime/cuda_flash_tc.inc"

#define KNT_S bf16_128
#define KNT_D 128
#define KNT_P 136
#define KNT_BC 64
#define KNT_BCQ 32
#define KNT_BQ 16 /* K and V (34 KiB) + two 16-row tiles of Q and dO: 52 KiB, dynamic */
#define KNT_DYN 1
#define KNT_MT2 0
#define KNT_TILE3 0
#define KNT_MB_FWD 2 /* blocks an SM (the registers' bound): fwd, dk/dv, dq */
#define KNT_MB_DKDV 2
#define KNT_MB_DQ 2
#define KNT_FWD2 0
#include "runtime/cuda_flash_tc.inc"

/* ---------------------------------------------------------------- the entry */
#ifdef __CUDACC__
#define KNT_ENTRY knc_flash_tc_run
#else
#define KNT_ENTRY kn_flash_tc_emu
#endif

int KNT_ENTRY(int kind, const void *q, const void *k, const void *v, const void *y, const void *dy, int dyc,
              void *out, long long bh, int t, int d, float scale, bool bwd, int nh) {
    if (kn_flash_tc_kernel(kind, d) == NULL || bh < 0 || bh > 65535 || t < 0 || t > (1 << 24)) return -2;
    if (nh < 0 || (nh > 0 && bh % nh != 0)) return -2;
    if (kind == KN_FLASH_TC_TF32)
        return d == 32 ? knt_launch_tf32_32(q, k, v, y, dy, dyc, out, bh, t, scale, bwd, nh)
                       : knt_launch_tf32_64(q, k, v, y, dy, dyc, out, bh, t, scale, bwd, nh);
    return d == 64 ? knt_launch_bf16_64(q, k, v, y, dy, dyc, out, bh, t, scale, bwd, nh)
                   : knt_launch_bf16_128(q, k, v, y, dy, dyc, out, bh, t, scale, bwd, nh);
}

#ifndef __CUDACC__
/* Defined once, in the emulator's build of this text (the GPU's reads the same variable). */
const char *kn_flash_tc_fwd_variant(int kind, int d) {
    if (kn_flash_tc_kernel(kind, d) == NULL) return NULL;
    if (kind == KN_FLASH_TC_BF16 && d == 64 && knt_fwd_version() != 1)
        return knt_fwd_version() == 2 ? "v2, 128-row blocks of 8 warps, K and V double-buffered"
                                      : "v2-64, 64-row blocks of 4 warps, K and V double-buffered";
    int mt2 = kind == KN_FLASH_TC_TF32 ? 2 : d == 64 ? 1 : 0; /* the instances' KNT_MT2 */
    bool r128 = mt2 && (knt_fwd_rows() == 128 || (knt_fwd_rows() == 0 && mt2 == 2));
    return r128 ? "v1, 128-row blocks of 4 warps" : "v1, 64-row blocks of 4 warps";
}
#if !KN_HAVE_CUDA
const char *kn_flash_cuda_kernel(void) { return "none (no CUDA in this build)"; } /* cuda_flash.cu's otherwise */
const char *kn_flash_cuda_fwd_kernel(void) { return "none (no CUDA in this build)"; }
#endif
#endif
