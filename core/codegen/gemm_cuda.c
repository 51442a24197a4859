/* gemm_cuda.c — a tiled single-precision GEMM for the GPU, written by kiln's CUDA code
 * generation (kiln/gemm.h, "GPU GEMM"). A teaching kernel: kiln's training keeps cuBLAS.
 *
 * C[M, N] = A[M, K] B[K, N], row-major f32, any sizes. The kernel is a text rendered for one
 * configuration (kn_cuda_gemm_cfg), the same way the fused kernels are:
 *
 *   - a block computes a BM x BN tile of C; its K loop walks BK-wide slabs;
 *   - shared memory: the slab of A, stored transposed (As[k][m], so a thread's TM rows are
 *     contiguous), and the slab of B (Bs[k][n]); every element of A and B is read from
 *     global memory once per block instead of once per output;
 *   - registers: each thread owns a TM x TN sub-tile of C; for each k of the slab it reads
 *     TM values of A and TN of B from shared memory and does TM*TN fused multiply-adds:
 *     (TM*TN) / (TM+TN) FMAs per shared-memory load, which is what moves the kernel from
 *     the bandwidth roof towards the compute roof;
 *   - vec: 16-byte (float4) loads from global and shared memory and 16-byte stores (needs
 *     K and N multiples of 4 so that rows stay aligned; edges fall back to guarded scalars).
 *
 * Threads: (BM/TM) x (BN/TN), one dimension; blocks: one dimension over the tiles of C,
 * row-major (grid = ceil(M/BM) * ceil(N/BN)). Dialects as kn_render_cuda's: NVRTC for the
 * GPU, the emulator's C for tests on a machine without one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/render_impl.h"
#include "kiln/gemm.h"

kn_status kn_cuda_gemm_check(kn_cuda_gemm_cfg c) {
    if (c.bm <= 0 || c.bn <= 0 || c.bk <= 0 || c.tm <= 0 || c.tn <= 0)
        return kn_error(KN_ERR_ARG, "GPU GEMM config %dx%dx%d/%dx%d: every size must be positive", c.bm, c.bn, c.bk, c.tm, c.tn);
    if (c.bm % c.tm || c.bn % c.tn)
        return kn_error(KN_ERR_ARG, "GPU GEMM config %dx%dx%d/%dx%d: TM must divide BM and TN divide BN", c.bm, c.bn, c.bk,
                        c.tm, c.tn);
    int nt = (c.bm / c.tm) * (c.bn / c.tn);
    if (nt < 32 || nt > 1024)
        return kn_error(KN_ERR_ARG, "GPU GEMM config %dx%dx%d/%dx%d: %d threads a block (want 32..1024)", c.bm, c.bn, c.bk,
                        c.tm, c.tn, nt);
    if ((c.bm * c.bk) % nt || (c.bk * c.bn) % nt)
        return kn_error(KN_ERR_ARG, "GPU GEMM config %dx%dx%d/%dx%d: the %d threads must share the A slab (%d) and the B "
                        "slab (%d) evenly", c.bm, c.bn, c.bk, c.tm, c.tn, nt, c.bm * c.bk, c.bk * c.bn);
    if (c.vec && (c.bk % 4 || c.bn % 4 || c.tm % 4 || c.tn % 4 || ((c.bm * c.bk) / 4) % nt || ((c.bk * c.bn) / 4) % nt))
        return kn_error(KN_ERR_ARG, "GPU GEMM config %dx%dx%d/%dx%d vec: float4 needs BK, BN, TM, TN multiples of 4 and "
                        "whole float4s a thread", c.bm, c.bn, c.bk, c.tm, c.tn);
    if ((size_t)(c.bm + c.bn) * (size_t)c.bk * sizeof(float) > 48 * 1024)
        return kn_error(KN_ERR_ARG, "GPU GEMM config %dx%dx%d/%dx%d: %zu bytes of shared memory (at most 48 KiB)", c.bm, c.bn,
                        c.bk, c.tm, c.tn, (size_t)(c.bm + c.bn) * (size_t)c.bk * sizeof(float));
    if (c.tm * c.tn > 128)
        return kn_error(KN_ERR_ARG, "GPU GEMM config %dx%dx%d/%dx%d: %d accumulators a thread (at most 128 fit in registers)",
                        c.bm, c.bn, c.bk, c.tm, c.tn, c.tm * c.tn);
    return KN_OK;
}

bool kn_cuda_gemm_cfg_equal(kn_cuda_gemm_cfg a, kn_cuda_gemm_cfg b) {
    return a.bm == b.bm && a.bn == b.bn && a.bk == b.bk && a.tm == b.tm && a.tn == b.tn && a.vec == b.vec;
}

kn_cuda_launch kn_cuda_gemm_launch(kn_cuda_gemm_cfg c, int64_t m, int64_t n) {
    int64_t tiles = ((m + c.bm - 1) / c.bm) * ((n + c.bn - 1) / c.bn);
    return (kn_cuda_launch){(unsigned)(tiles > 0 ? tiles : 1), (unsigned)((c.bm / c.tm) * (c.bn / c.tn))};
}

bool kn_cuda_gemm_fits(kn_cuda_gemm_cfg c, int64_t m, int64_t n, int64_t k) {
    int64_t tiles = ((m + c.bm - 1) / c.bm) * ((n + c.bn - 1) / c.bn);
    if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX || tiles > INT32_MAX) return false;
    return !c.vec || (k % 4 == 0 && n % 4 == 0);
}

int kn_cuda_gemm_candidates(kn_cuda_gemm_cfg *out, int max) {
    static const int tiles[][3] = {{64, 64, 8},    {64, 64, 16},   {128, 64, 8},  {128, 64, 16}, {64, 128, 16},
                                   {128, 128, 8},  {128, 128, 16}, {64, 128, 8},  {128, 128, 32}, {256, 128, 8},
                                   {256, 128, 16}, {128, 256, 16}};
    static const int regs[][2] = {{4, 4}, {8, 4}, {4, 8}, {8, 8}, {16, 4}};
    int n = 0;
    for (size_t t = 0; t < sizeof tiles / sizeof tiles[0]; t++)
        for (size_t r = 0; r < sizeof regs / sizeof regs[0]; r++)
            for (int v = 1; v >= 0; v--) {
                kn_cuda_gemm_cfg c = {tiles[t][0], tiles[t][1], tiles[t][2], regs[r][0], regs[r][1], v == 1};
                if (kn_cuda_gemm_check(c) != KN_OK) { kn_clear_error(); continue; }
                if (v == 0 && n > 0) continue; /* the scalar loads once (for sizes not multiples of 4) */
                if (n < max && out) out[n] = c;
                n++;
            }
    return n;
}

kn_status kn_cuda_gemm_render(kn_cuda_gemm_cfg c, kn_cuda_dialect d, char **src) {
    if (!src) return kn_error(KN_ERR_ARG, "kn_cuda_gemm_render: NULL argument");
    *src = NULL;
    KN_TRY(kn_cuda_gemm_check(c));
    if (d != KN_CUDA_NVRTC && d != KN_CUDA_EMU) return kn_error(KN_ERR_ARG, "kn_cuda_gemm_render: unknown dialect %d", (int)d);
    size_t len = 0, cap = 0;
    kn_rout o = {src, &len, &cap, KN_OK};
    int nt = (c.bm / c.tm) * (c.bn / c.tn);
    if (d == KN_CUDA_NVRTC)
        kn_remit(&o, "/* generated by kiln (core/codegen/gemm_cuda.c): do not edit */\n"
                     "#define KN_KERNEL extern \"C\" __global__ void __launch_bounds__(%d)\n"
                     "#define KN_SHARED __shared__ __align__(16)\n"
                     "#define KN_UNROLL _Pragma(\"unroll\")\n"
                     "#define KN_FMA(a, b, c) fmaf(a, b, c)\n", nt);
    else
        kn_remit(&o, "/* generated by kiln (core/codegen/gemm_cuda.c, emulator dialect): do not edit */\n"
                     "#include <math.h>\n#include <stddef.h>\n"
                     "typedef struct { unsigned x, y, z; } kn_dim3;\n"
                     "typedef struct { float x, y, z, w; } float4;\n"
                     "extern kn_dim3 kn_emu_thread_idx, kn_emu_block_idx;\n"
                     "void kn_emu_syncthreads(void);\n"
                     "#define threadIdx kn_emu_thread_idx\n#define blockIdx kn_emu_block_idx\n"
                     "#define __syncthreads() kn_emu_syncthreads()\n"
                     "#define KN_KERNEL void\n"
                     "#define KN_SHARED static _Alignas(16)\n"
                     "#define KN_UNROLL\n"
                     "#define KN_FMA(a, b, c) fmaf(a, b, c)\n");
    kn_remit(&o, "#define BM %d\n#define BN %d\n#define BK %d\n#define TM %d\n#define TN %d\n#define NT %d\n\n", c.bm, c.bn, c.bk,
             c.tm, c.tn, nt);
    kn_remit(&o, "/* C[M, N] = A[M, K] B[K, N], row-major f32; %s loads */\n"
                 "KN_KERNEL kn_sgemm(const float *A, const float *B, float *C, int M, int N, int K)\n{\n"
                 "    KN_SHARED float As[BK][BM]; /* the A slab, transposed */\n"
                 "    KN_SHARED float Bs[BK][BN];\n"
                 "    const int tid = threadIdx.x, ntc = (N + BN - 1) / BN;\n"
                 "    const int row0 = (int)(blockIdx.x / ntc) * BM, col0 = (int)(blockIdx.x %% ntc) * BN;\n"
                 "    const int tr = tid / (BN / TN), tc = tid %% (BN / TN); /* this thread's sub-tile */\n"
                 "    float acc[TM][TN], ra[TM], rb[TN];\n"
                 "    KN_UNROLL for (int i = 0; i < TM; i++) KN_UNROLL for (int j = 0; j < TN; j++) acc[i][j] = 0.0f;\n"
                 "    for (int k0 = 0; k0 < K; k0 += BK) {\n",
             c.vec ? "float4" : "scalar");
    if (c.vec) {
        kn_remit(&o, "        KN_UNROLL for (int q = 0; q < BM * BK / 4 / NT; q++) { /* A: float4 along k */\n"
                     "            int e = tid + q * NT, r = e / (BK / 4), kk = (e %% (BK / 4)) * 4, gr = row0 + r, gk = k0 + kk;\n"
                     "            float4 v;\n"
                     "            /* K is a multiple of 4: a float4 lies all inside A or all outside */\n"
                     "            if (gr < M && gk < K) v = *(const float4 *)&A[(size_t)gr * K + gk];\n"
                     "            else v.x = v.y = v.z = v.w = 0.0f;\n"
                     "            As[kk][r] = v.x; As[kk + 1][r] = v.y; As[kk + 2][r] = v.z; As[kk + 3][r] = v.w;\n"
                     "        }\n"
                     "        KN_UNROLL for (int q = 0; q < BK * BN / 4 / NT; q++) { /* B: float4 along n */\n"
                     "            int e = tid + q * NT, r = e / (BN / 4), cc = (e %% (BN / 4)) * 4, gk = k0 + r, gc = col0 + cc;\n"
                     "            float4 v;\n"
                     "            if (gk < K && gc < N) v = *(const float4 *)&B[(size_t)gk * N + gc]; /* N: a multiple of 4 */\n"
                     "            else v.x = v.y = v.z = v.w = 0.0f;\n"
                     "            *(float4 *)&Bs[r][cc] = v;\n"
                     "        }\n");
    } else {
        kn_remit(&o, "        KN_UNROLL for (int q = 0; q < BM * BK / NT; q++) {\n"
                     "            int e = tid + q * NT, r = e / BK, kk = e %% BK, gr = row0 + r, gk = k0 + kk;\n"
                     "            As[kk][r] = gr < M && gk < K ? A[(size_t)gr * K + gk] : 0.0f;\n"
                     "        }\n"
                     "        KN_UNROLL for (int q = 0; q < BK * BN / NT; q++) {\n"
                     "            int e = tid + q * NT, r = e / BN, cc = e %% BN, gk = k0 + r, gc = col0 + cc;\n"
                     "            Bs[r][cc] = gk < K && gc < N ? B[(size_t)gk * N + gc] : 0.0f;\n"
                     "        }\n");
    }
    kn_remit(&o, "        __syncthreads();\n"
                 "        KN_UNROLL for (int kk = 0; kk < BK; kk++) {\n");
    if (c.vec)
        kn_remit(&o, "            KN_UNROLL for (int i = 0; i < TM; i += 4) {\n"
                     "                float4 v = *(const float4 *)&As[kk][tr * TM + i];\n"
                     "                ra[i] = v.x; ra[i + 1] = v.y; ra[i + 2] = v.z; ra[i + 3] = v.w;\n"
                     "            }\n"
                     "            KN_UNROLL for (int j = 0; j < TN; j += 4) {\n"
                     "                float4 v = *(const float4 *)&Bs[kk][tc * TN + j];\n"
                     "                rb[j] = v.x; rb[j + 1] = v.y; rb[j + 2] = v.z; rb[j + 3] = v.w;\n"
                     "            }\n");
    else
        kn_remit(&o, "            KN_UNROLL for (int i = 0; i < TM; i++) ra[i] = As[kk][tr * TM + i];\n"
                     "            KN_UNROLL for (int j = 0; j < TN; j++) rb[j] = Bs[kk][tc * TN + j];\n");
    kn_remit(&o, "            KN_UNROLL for (int i = 0; i < TM; i++)\n"
                 "                KN_UNROLL for (int j = 0; j < TN; j++) acc[i][j] = KN_FMA(ra[i], rb[j], acc[i][j]);\n"
                 "        }\n"
                 "        __syncthreads();\n"
                 "    }\n"
                 "    KN_UNROLL for (int i = 0; i < TM; i++) {\n"
                 "        int gr = row0 + tr * TM + i;\n"
                 "        if (gr >= M) break;\n");
    if (c.vec)
        kn_remit(&o, "        KN_UNROLL for (int j = 0; j < TN; j += 4) {\n"
                     "            int gc = col0 + tc * TN + j;\n"
                     "            if (gc < N) {\n"
                     "                float4 v;\n"
                     "                v.x = acc[i][j]; v.y = acc[i][j + 1]; v.z = acc[i][j + 2]; v.w = acc[i][j + 3];\n"
                     "                *(float4 *)&C[(size_t)gr * N + gc] = v;\n"
                     "            }\n"
                     "        }\n");
    else
        kn_remit(&o, "        KN_UNROLL for (int j = 0; j < TN; j++) {\n"
                     "            int gc = col0 + tc * TN + j;\n"
                     "            if (gc < N) C[(size_t)gr * N + gc] = acc[i][j];\n"
                     "        }\n");
    kn_remit(&o, "    }\n}\n");
    if (d == KN_CUDA_EMU)
        kn_remit(&o, "void kn_sgemm__emu(void *args)\n{\n    void **a = (void **)args;\n"
                     "    kn_sgemm(*(const float **)a[0], *(const float **)a[1], *(float **)a[2], *(int *)a[3], *(int *)a[4], "
                     "*(int *)a[5]);\n}\n");
    if (o.st != KN_OK) {
        kn_free(*src);
        *src = NULL;
    }
    return o.st;
}

#if !KN_HAVE_CUDA
kn_status kn_cuda_gemm_tune(int device, int64_t m, int64_t n, int64_t k, const char *cache_dir, bool force,
                            kn_cuda_gemm_tune_result *r) {
    (void)device; (void)m; (void)n; (void)k; (void)cache_dir; (void)force;
    if (r) memset(r, 0, sizeof *r);
    return kn_error(KN_ERR_UNSUPPORTED, "kn_cuda_gemm_tune: this build has no CUDA (nvcc was not found at build time)");
}
#endif
