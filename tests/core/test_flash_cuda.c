/* test_flash_cuda.c — the GPU's flash attention kernels (core/runtime/cuda_flash.cu)
 * against the CPU kernels (core/tensor/kernels_flash.inc).
 *
 * flash_emu: the very kernel text nvcc compiles, run on the CPU under the CUDA emulator
 * (core/runtime/cuda_flash_emu.c), at awkward sizes: T = 1, primes, one less and one more
 * than a tile (32 rows in f32, 16 in f64), D = 1, odd, and the largest (128); dy with
 * and without the logsumexp's column. cuda_flash: the same through the CUDA backend on a
 * GPU (kn_node_eval on device tensors, poisoned outputs), skipped without one. Both
 * require max|gpu - cpu| / max|cpu| < 2e-5 in f32 (different summation orders; the CPU
 * keeps the softmax sums in double) and 1e-12 in f64. */
#include <math.h>
#include <string.h>

#include "cuda_test_util.h"
#include "kiln/kernels.h"
#include "runtime/cuda_flash.h"

/* max |got - want| / max(0.1, max |want|): a result that is 0 in exact arithmetic (dq and
 * dk at T = 1, where dS = P (dP - delta) = 0) is rounding noise on both sides. */
static double rel(const void *got, const void *want, kn_dtype dt, int64_t n) {
    double e = 0, m = 0.1;
    for (int64_t i = 0; i < n; i++) {
        double g = kn_dtype_load(dt, got, i), w = kn_dtype_load(dt, want, i);
        if (isinf(w) && g == w) continue;
        if (!(fabs(g - w) <= e)) e = isnan(g) || isinf(g) ? INFINITY : fabs(g - w);
        if (fabs(w) > m) m = fabs(w);
    }
    return e / m;
}

static void fill(kn_dtype dt, void *x, int64_t n, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        double v = 2.0 * (double)(s >> 11) / 9007199254740992.0 - 1.0;
        if (dt == KN_DT_F32) ((float *)x)[i] = (float)v;
        else ((double *)x)[i] = v;
    }
}

/* Forward and backward of one case on the emulator and the CPU kernel. */
static void emu_case(kn_dtype dt, int64_t bh, int t, int d, int dyc, uint64_t seed) {
    const size_t es = kn_dtype_size(dt);
    const int64_t n = bh * t * d, ny = bh * t * (d + 1), ndy = bh * t * dyc;
    const double scale = 1.0 / sqrt((double)d), tol = dt == KN_DT_F32 ? 2e-5 : 1e-12;
    char *buf = malloc((size_t)(3 * n + 2 * ny + ndy + 6 * n) * es + 64);
    char *q = buf, *k = q + n * es, *v = k + n * es, *y = v + n * es, *ye = y + ny * es, *dy = ye + ny * es;
    char *g = dy + ndy * es, *ge = g + 3 * n * es;
    fill(dt, q, 3 * n, seed);
    fill(dt, dy, ndy, seed + 1);
    memset(ye, 0xFF, (size_t)ny * es); /* NaN: an element the kernel forgets shows */
    memset(ge, 0xFF, (size_t)(3 * n) * es);
    int rc;
    if (dt == KN_DT_F32) {
        cr_assert(kn_k_flash_attn_f32((float *)q, (float *)k, (float *)v, (float *)y, bh, t, d, (float)scale));
        rc = kn_flash_emu_f32((float *)q, (float *)k, (float *)v, NULL, NULL, 0, (float *)ye, bh, t, d, (float)scale,
                              false);
    } else {
        cr_assert(kn_k_flash_attn_f64((double *)q, (double *)k, (double *)v, (double *)y, bh, t, d, scale));
        rc = kn_flash_emu_f64((double *)q, (double *)k, (double *)v, NULL, NULL, 0, (double *)ye, bh, t, d, scale,
                              false);
    }
    cr_assert(rc == 0, "forward launch: %d", rc);
    double e = rel(ye, y, dt, ny);
    cr_assert(e < tol, "%s bh=%lld T=%d D=%d: forward off by %.3g", kn_dtype_name(dt), (long long)bh, t, d, e);
    if (dt == KN_DT_F32) {
        cr_assert(kn_k_flash_attn_bwd_f32((float *)q, (float *)k, (float *)v, (float *)y, (float *)dy, dyc, (float *)g,
                                          bh, t, d, (float)scale));
        rc = kn_flash_emu_f32((float *)q, (float *)k, (float *)v, (float *)y, (float *)dy, dyc, (float *)ge, bh, t, d,
                              (float)scale, true);
    } else {
        cr_assert(kn_k_flash_attn_bwd_f64((double *)q, (double *)k, (double *)v, (double *)y, (double *)dy, dyc,
                                          (double *)g, bh, t, d, scale));
        rc = kn_flash_emu_f64((double *)q, (double *)k, (double *)v, (double *)y, (double *)dy, dyc, (double *)ge, bh,
                              t, d, scale, true);
    }
    cr_assert(rc == 0, "backward launch: %d", rc);
    for (int w = 0; w < 3; w++) {
        e = rel(ge + w * n * es, g + w * n * es, dt, n);
        cr_assert(e < tol, "%s bh=%lld T=%d D=%d dy cols %d: d%c off by %.3g", kn_dtype_name(dt), (long long)bh, t, d,
                  dyc, "qkv"[w], e);
    }
    free(buf);
}

KN_TEST(flash_emu, kernels_match_the_cpu_at_awkward_sizes, .timeout = 240) {
    static const int ts[] = {1, 2, 15, 16, 17, 31, 33, 70};
    static const int ds[] = {1, 5, 16};
    uint64_t seed = 1;
    for (int dt = 0; dt < 2; dt++)
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
            for (size_t j = 0; j < sizeof ds / sizeof ds[0]; j++) {
                int d = ds[j];
                emu_case(dt ? KN_DT_F64 : KN_DT_F32, 1 + (int64_t)((i + j) % 3), ts[i], d, (i + j) % 2 ? d + 1 : d,
                         seed++);
            }
}

KN_TEST(flash_emu, the_largest_head_dim_and_the_refusals, .timeout = 120) {
    emu_case(KN_DT_F32, 1, 37, KN_FLASH_CUDA_DMAX, KN_FLASH_CUDA_DMAX + 1, 7);
    emu_case(KN_DT_F64, 2, 19, 64, 65, 8);
    float x[8] = {0};
    cr_assert(kn_flash_emu_f32(x, x, x, NULL, NULL, 0, x, 1, 1, KN_FLASH_CUDA_DMAX + 1, 1.0f, false) == -2);
    cr_assert(kn_flash_emu_f32(x, x, x, NULL, NULL, 0, x, 70000, 1, 1, 1.0f, false) == -2);
    cr_assert(kn_flash_emu_f32(x, x, x, NULL, NULL, 0, x, 0, 5, 3, 1.0f, false) == 0, "no pairs: nothing to do");
}

/* n on the GPU operands d (copies of h where d[i] is NULL) against its CPU kernel on h;
 * returns the CPU result (the caller frees it). */
static kn_tensor *gpu_vs_cpu(kn_node *n, int nin, kn_tensor **h, kn_tensor **d) {
    kn_tensor *want = NULL;
    gpu_operands(n, nin, h, d, d);
    KN_ASSERT_OK(kn_node_eval(n, (const kn_tensor *const *)h, &want));
    kn_tensor *got = on_gpu(n, d);
    compare(n, got, want, TOL_REDUCE);
    kn_tensor_free(got);
    return want;
}

/* On a GPU: the ops through the CUDA backend, against the CPU kernels of the same node,
 * the backward with dy carrying L's column. */
KN_TEST(cuda_flash, ops_match_the_cpu, .timeout = 120) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(5);
    static const int64_t shapes[][4] = {{1, 1, 1, 8}, {2, 3, 33, 17}, {1, 12, 257, 64}, {2, 2, 100, 128}};
    for (int dt = 0; dt < 2; dt++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            kn_dtype t = dt ? KN_DT_F64 : KN_DT_F32;
            kn_tensor *h[5] = {randn(&r, t, 4, shapes[s]), randn(&r, t, 4, shapes[s]), randn(&r, t, 4, shapes[s])};
            kn_tensor *d[5] = {NULL};
            kn_node n = node(KN_OP_FLASH_ATTN), b = node(KN_OP_FLASH_ATTN_BWD);
            n.attrs.scale = b.attrs.scale = 0.125;
            h[3] = gpu_vs_cpu(&n, 3, h, d);
            h[4] = randn(&r, t, 4, h[3]->shape);
            kn_tensor_free(gpu_vs_cpu(&b, 5, h, d));
            for (int i = 0; i < 5; i++) {
                kn_tensor_free(h[i]);
                kn_tensor_free(d[i]);
            }
        }
}

/* permute(x, perm) made contiguous (host). */
static kn_tensor *host_permuted(const kn_tensor *x, const int *perm) {
    kn_tensor *v = NULL, *c = NULL;
    KN_ASSERT_OK(kn_tensor_permute(&v, x, perm));
    KN_ASSERT_OK(kn_tensor_contiguous(&c, v));
    kn_tensor_free(v);
    return c;
}

/* On a GPU: the [B, T, H, D] layout (perm [0, 2, 1, 3]; the flash pass's on the GPT). f32
 * (the SIMT kernels, gathered and scattered around: knf_launch_bthd; TF32's tensor cores
 * where KILN_TF32=1) and f64 against the CPU kernels of the same nodes; bf16 (the tensor-core
 * kernels, strided) bit for bit against the GPU's [B, H, T, D] layout on the permuted
 * operands. dy of y's type (L's gradient) and [B, T, H, D]. */
KN_TEST(cuda_flash, bthd_layout_matches, .timeout = 120) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(6);
    static const int64_t shapes[][4] = {{2, 33, 3, 64}, {1, 130, 2, 17}};
    const int p0213[4] = {0, 2, 1, 3}, to_bt3hd[5] = {1, 3, 0, 2, 4};
    for (int dt = 0; dt < 3; dt++)
        for (size_t s = 0; s < 2; s++)
            for (int dl = 0; dl < 2; dl++) {
                kn_dtype t = dt == 0 ? KN_DT_F32 : dt == 1 ? KN_DT_F64 : KN_DT_BF16;
                if (t == KN_DT_BF16 && shapes[s][3] != 64) continue;
                kn_tensor *h[5] = {randn(&r, t, 4, shapes[s]), randn(&r, t, 4, shapes[s]), randn(&r, t, 4, shapes[s])};
                kn_tensor *d[5] = {NULL};
                kn_node n = node(KN_OP_FLASH_ATTN), b = node(KN_OP_FLASH_ATTN_BWD);
                n.attrs.scale = b.attrs.scale = 0.125;
                n.attrs.nperm = b.attrs.nperm = 4;
                for (int i = 0; i < 4; i++) n.attrs.perm[i] = b.attrs.perm[i] = p0213[i];
                if (t != KN_DT_BF16) {
                    h[3] = gpu_vs_cpu(&n, 3, h, d);
                    h[4] = dl ? randn(&r, t, 1, h[3]->shape) : randn(&r, t, 4, shapes[s]);
                    kn_tensor_free(gpu_vs_cpu(&b, 5, h, d));
                } else { /* the GPU in both layouts: the same bits */
                    gpu_operands(&n, 3, h, NULL, d);
                    kn_tensor *y = on_gpu(&n, d);
                    kn_tensor *hp[5], *dp[5] = {NULL};
                    for (int i = 0; i < 3; i++) hp[i] = host_permuted(h[i], p0213);
                    kn_node n0 = node(KN_OP_FLASH_ATTN), b0 = node(KN_OP_FLASH_ATTN_BWD);
                    n0.attrs.scale = b0.attrs.scale = 0.125;
                    gpu_operands(&n0, 3, hp, NULL, dp);
                    kn_tensor *y0 = on_gpu(&n0, dp), *o0 = NULL;
                    KN_ASSERT_OK(kn_tensor_slice(&o0, y0, 3, 0, shapes[s][3], 1));
                    kn_tensor *o0p = host_permuted(o0, p0213);
                    cr_assert(!memcmp(kn_tensor_data(y), kn_tensor_data(o0p), (size_t)kn_tensor_numel(o0p) * 2), "bf16 O");
                    h[3] = y, hp[3] = y0;
                    h[4] = randn(&r, t, 4, shapes[s]);
                    hp[4] = host_permuted(h[4], p0213);
                    for (int i = 3; i < 5; i++) KN_ASSERT_OK(kn_tensor_to(&d[i], h[i], CUDA0));
                    for (int i = 3; i < 5; i++) KN_ASSERT_OK(kn_tensor_to(&dp[i], hp[i], CUDA0));
                    gpu_operands(&b, 5, h, d, d);
                    gpu_operands(&b0, 5, hp, dp, dp);
                    kn_tensor *g = on_gpu(&b, d), *g0 = on_gpu(&b0, dp), *g0p = host_permuted(g0, to_bt3hd);
                    cr_assert(!memcmp(kn_tensor_data(g), kn_tensor_data(g0p), (size_t)kn_tensor_numel(g) * 2), "bf16 dq, dk, dv");
                    kn_tensor *rest[] = {o0, o0p, g, g0, g0p};
                    for (size_t i = 0; i < 5; i++) kn_tensor_free(rest[i]);
                    for (int i = 0; i < 5; i++) {
                        kn_tensor_free(hp[i]);
                        kn_tensor_free(dp[i]);
                    }
                }
                for (int i = 0; i < 5; i++) {
                    kn_tensor_free(h[i]);
                    kn_tensor_free(d[i]);
                }
            }
}
