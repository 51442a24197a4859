/* cuda_flash.cu — flash attention on the GPU: the kernels of flash_attn and flash_attn_bwd
 * (contract: kn_flash_attn in kiln/ir.h; CPU reference: core/tensor/kernels_flash.inc).
 *
 * Written in the CUDA C subset the CUDA emulator runs (core/runtime/cuda_emu.h): plain C,
 * KN_KERNEL_DEF kernels taking one struct, __shared__ arrays, __syncthreads, no templates.
 * nvcc compiles this file for the GPU (the CUDA backend's column of ops.def names the host
 * entries at the bottom); core/runtime/cuda_flash_emu.c includes the same text as C, so
 * `make test` runs these very kernels on the CPU and compares them with the CPU kernels
 * (tests/core/test_flash_cuda.c; on a machine with a GPU the same tests run them natively).
 * The text is instantiated twice below, for float and for double (KNF_S names the type:
 * runtime/cuda_flash_kernel.h). The forward kernel is lab 08's unit: cuda_flash_fwd.c
 * (solutions/ or labs/lab08-memory/, the Makefile picks which) is compiled the same two ways
 * and linked beside this file; the launch below calls its entry, KNF_FWD_ENTRY.
 *
 * One algorithm, FlashAttention-2's, in its plainest form. A block of KNF_BC threads takes
 * one (batch x head, tile of KNF_BC rows); a thread owns one row and keeps it (q, its
 * accumulators) in registers; the block walks the tiles of the other operand that the
 * causal mask lets its rows reach, loading each tile into shared memory once for all its
 * threads:
 *   - forward: a thread per query row, key and value tiles in shared memory, the online
 *     softmax (running max m, sum l, accumulator rescaled by exp(m_old - m_new)); writes
 *     O = acc / l and L = m + log l (the packed row of y).
 *   - backward, dk and dv: a thread per key row, tiles of q and dO (with each row's L and
 *     delta = dO . O - dL) in shared memory, over the query tiles at or after its own:
 *     P = exp(scale q . k - L), dv += P dO, dS = P (dO . v - delta), dk += scale dS q.
 *   - backward, dq: a thread per query row over key and value tiles, recomputing P and dS
 *     the same way: dq += scale dS k.
 * Splitting the backward in two recomputes P twice, but no two blocks ever add into the
 * same element: no atomics, and the same inputs give the same bits on every run, as every
 * kiln kernel does. Per element the arithmetic is in KNF_T (the CPU kernel keeps the
 * softmax sums in double), so GPU and CPU agree to rounding.
 *
 * Limits: head dims up to KNF_DMAX (128: GPT-2's is 64) in registers, and up to 65535
 * (batch x head) pairs (the grid's y); larger is KN_ERR_UNSUPPORTED, saying which. Tiles are
 * small (32 rows in f32, 16 in f64: two [BC, 128] tiles fit the 48 KiB of static shared
 * memory) and a thread per row leaves tensor cores unused: a correct baseline, not a fast
 * one. The fast ones are cuda_flash_tc.cu's (mma.sync, FA2's warp tiling): the host entries
 * below run them for bf16 (head dims 64, 128; others are refused) and for f32 when TF32 is
 * allowed (KILN_TF32=1: head dims 32, 64), and these kernels for f64, for f32 without TF32
 * and for the head dims the tensor-core ones do not take; kn_flash_cuda_kernel() names the
 * one that ran. The [B, T, H, D] layout (perm [0, 2, 1, 3], kiln/ir.h) is native in the
 * tensor-core kernels (row strides); for these it is gathered into the [..., T, D] layout
 * and scattered back around them (knf_launch_bthd): the same bits, three copies more. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kiln/base.h"
#include "runtime/cuda_emu.h"
#include "runtime/cuda_flash_kernel.h"

#define KNF_S f32
#include "runtime/cuda_flash.inc"
#undef KNF_S
#define KNF_S f64
#include "runtime/cuda_flash.inc"
#undef KNF_S

#ifdef __CUDACC__
/* ---------------------------------------------------------------- the CUDA backend's entries */
#include "runtime/cuda_flash_tc.h"
#include "runtime/cuda_impl.h"

static const char *knf_kernel = "none yet";
static char knf_fwd_kernel[160] = "none yet"; /* the forward's kernel and variant, kn_flash_cuda_fwd_kernel */
const char *kn_flash_cuda_kernel(void) { return knf_kernel; }
const char *kn_flash_cuda_fwd_kernel(void) { return knf_fwd_kernel; }

/* The [B, T, H, D] layout (perm [0, 2, 1, 3], kiln/ir.h) for the SIMT kernels, which read
 * the [..., T, D] one: for each of bh pairs and t rows, d elements between the packed row
 * (pair t + i) ldp (+ poff) of p and the strided row (pair / nh t + i) lds + pair % nh d
 * (+ soff) of s, to_packed saying which way; a thread an element (as eval.c's flash_move). */
template <typename T>
__global__ void knf_move_k(bool to_packed, T *p, long long ldp, long long poff, T *s, long long lds, long long soff,
                           long long bh, long long nh, long long t, long long d) {
    long long n = bh * t * d;
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n; e += (long long)gridDim.x * blockDim.x) {
        long long c = e % d, r = e / d, pr = r / t, i = r % t;
        T *pk = p + r * ldp + poff + c, *st = s + (pr / nh * t + i) * lds + pr % nh * d + soff + c;
        if (to_packed) *pk = *st;
        else *st = *pk;
    }
}

template <typename T>
static int knf_move(bool to_packed, T *p, long long ldp, long long poff, const void *s, long long lds, long long soff,
                    long long bh, long long nh, long long t, long long d) {
    long long n = bh * t * d;
    if (n == 0) return 0;
    unsigned blocks = (unsigned)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
    knf_move_k<T><<<blocks, 256, 0, knc_stream>>>(to_packed, p, ldp, poff, (T *)s, lds, soff, bh, nh, t, d);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

/* The SIMT kernels in the [B, T, H, D] layout: q, k, v (and y, dy) gathered into the
 * [..., T, D] layout's buffers, the kernels, the results scattered back: the same bits. */
template <typename T>
static int knf_launch_bthd(const kn_node *n, const kn_tensor *const *in, kn_tensor *out, bool bwd, long long bh,
                           long long nh, int t, int d, int (*launch)(const T *, const T *, const T *, const T *,
                                                                     const T *, int, T *, long long, int, int, T, bool)) {
    long long rows = bh * t, m = rows * d, my = rows * (d + 1);
    bool dyl = bwd && in[4]->ndim == 1; /* dy of y's type: L's gradient too */
    int dyc = dyl ? d + 1 : d;
    int64_t total = (3 * m + (bwd ? my + rows * dyc + 3 * m : my)) * (int64_t)sizeof(T);
    kn_tensor *tmp = NULL;
    if (kn_tensor_empty_on(&tmp, out->storage->device, KN_DT_U8, 1, &total) != KN_OK) return -1;
    T *w = (T *)kn_tensor_data(tmp), *yp = w + 3 * m, *dyp = yp + my, *res = bwd ? dyp + rows * dyc : yp;
    int rc = 0;
    for (int i = 0; rc == 0 && i < 3; i++) rc = knf_move<T>(true, w + i * m, d, 0, kn_tensor_data(in[i]), nh * d, 0, bh, nh, t, d);
    for (int x = 3; bwd && x < 5; x++) { /* y, and dy: O's rows and L's column */
        T *pk = x == 3 ? yp : dyp;
        const T *src = (const T *)kn_tensor_data(in[x]);
        bool full = x == 3 || dyl;
        if (rc == 0) rc = knf_move<T>(true, pk, full ? d + 1 : d, 0, src, nh * d, 0, bh, nh, t, d);
        if (rc == 0 && full) rc = knf_move<T>(true, pk, d + 1, d, src + m, 1, 0, rows, 1, 1, 1);
    }
    if (rc == 0) rc = launch(w, w + m, w + 2 * m, yp, dyp, dyc, res, bh, t, d, (T)n->attrs.scale, bwd);
    T *o = (T *)kn_tensor_data(out);
    if (rc == 0 && !bwd) rc = knf_move<T>(false, yp, d + 1, 0, o, nh * d, 0, bh, nh, t, d);
    if (rc == 0 && !bwd) rc = knf_move<T>(false, yp, d + 1, d, o + m, 1, 0, rows, 1, 1, 1);
    for (int i = 0; rc == 0 && bwd && i < 3; i++) /* [3, bh, t, d] -> [B, T, 3, H, D] */
        rc = knf_move<T>(false, res + i * m, d, 0, o, 3 * nh * d, i * nh * d, bh, nh, t, d);
    kn_tensor_free(tmp); /* freed in stream order (kiln's CUDA allocator) */
    return rc;
}

static kn_status knf_run(const kn_node *n, const kn_tensor *const *in, kn_tensor **out, bool bwd) {
    kn_dtype dt = n->type.dtype;
    if (dt != KN_DT_F32 && dt != KN_DT_F64 && dt != KN_DT_BF16) return knc_unsupported(n, dt);
    const kn_tensor *q = in[0];
    kn_type qt = {q->dtype, q->ndim, {0}};
    memcpy(qt.shape, q->shape, sizeof(int64_t) * (size_t)q->ndim);
    int64_t t, d, bh, nh; /* bh: the batch axes' product (D may be 0: y still has L's column); nh: the layout's */
    kn_flash_dims(&qt, &n->attrs, &bh, &t, &d, &nh);
    if (d > KNF_DMAX || bh > 65535 || t > (1 << 24))
        return kn_error(KN_ERR_UNSUPPORTED, "%s: the cuda kernel takes head dims up to %d, up to 65535 batch x head "
                        "pairs and up to 2^24 rows (got D = %lld, %lld pairs, T = %lld)", kn_op_name(n->op), KNF_DMAX,
                        (long long)d, (long long)bh, (long long)t);
    KN_TRY(knc_new_out(n, knc_dev(in), out));
    const void *dy = bwd ? kn_tensor_data(in[4]) : nullptr;
    int dyc = bwd ? (int)in[4]->shape[in[4]->ndim - 1] : 0;
    /* tensor cores (cuda_flash_tc.cu) for bf16, and for f32 where TF32 is allowed */
    int tc = dt == KN_DT_BF16 ? KN_FLASH_TC_BF16 : dt == KN_DT_F32 && knc_tf32_allowed() ? KN_FLASH_TC_TF32 : -1;
    int rc = tc < 0 ? -2 : knc_flash_tc_run(tc, kn_tensor_data(in[0]), kn_tensor_data(in[1]), kn_tensor_data(in[2]),
                                              bwd ? kn_tensor_data(in[3]) : nullptr, dy, dyc, kn_tensor_data(*out), bh,
                                              (int)t, (int)d, (float)n->attrs.scale, bwd, (int)nh);
    knf_kernel = rc != -2 ? kn_flash_tc_kernel(tc, (int)d) : dt == KN_DT_F32 ? "simt f32" : "simt f64";
    if (!bwd)
        snprintf(knf_fwd_kernel, sizeof knf_fwd_kernel, "%s%s%s", knf_kernel, rc != -2 ? "; forward " : "",
                 rc != -2 ? kn_flash_tc_fwd_variant(tc, (int)d) : "");
    if (rc == -2 && dt == KN_DT_BF16) {
        kn_tensor_free(*out);
        *out = NULL;
        return kn_error(KN_ERR_UNSUPPORTED, "%s: the cuda kernels take bf16 at head dims 64 and 128 only (got D = %lld)",
                        kn_op_name(n->op), (long long)d);
    }
    if (rc == -2 && nh) rc = dt == KN_DT_F32 ? knf_launch_bthd<float>(n, in, *out, bwd, bh, nh, (int)t, (int)d, knf_launch_f32)
                                             : knf_launch_bthd<double>(n, in, *out, bwd, bh, nh, (int)t, (int)d, knf_launch_f64);
    if (rc == -2) rc = dt == KN_DT_F32
        ? knf_launch_f32((const float *)kn_tensor_data(in[0]), (const float *)kn_tensor_data(in[1]),
                         (const float *)kn_tensor_data(in[2]), bwd ? (const float *)kn_tensor_data(in[3]) : nullptr,
                         (const float *)dy, dyc, (float *)kn_tensor_data(*out), bh, (int)t, (int)d,
                         (float)n->attrs.scale, bwd)
        : knf_launch_f64((const double *)kn_tensor_data(in[0]), (const double *)kn_tensor_data(in[1]),
                         (const double *)kn_tensor_data(in[2]), bwd ? (const double *)kn_tensor_data(in[3]) : nullptr,
                         (const double *)dy, dyc, (double *)kn_tensor_data(*out), bh, (int)t, (int)d, n->attrs.scale,
                         bwd);
    if (rc != 0) {
        kn_tensor_free(*out);
        *out = NULL;
        if (rc == KNF_NOT_IMPLEMENTED) return KN_ERR_NOT_IMPLEMENTED; /* lab 08's skeleton said what */
        return kn_error(KN_ERR_DEVICE, "%s: launching the flash attention kernels failed (T = %lld, D = %lld, %lld "
                        "pairs)", kn_op_name(n->op), (long long)t, (long long)d, (long long)bh);
    }
    return KN_OK;
}

KNC_KERNEL(knc_flash_attn) { return knf_run(n, in, out, false); }
KNC_KERNEL(knc_flash_attn_bwd) { return knf_run(n, in, out, true); }

#else
/* ---------------------------------------------------------------- the emulator's entries */
int kn_flash_emu_f32(const float *q, const float *k, const float *v, const float *y, const float *dy, int dyc,
                     float *out, long long bh, int t, int d, float scale, bool bwd) {
    return knf_launch_f32(q, k, v, y, dy, dyc, out, bh, t, d, scale, bwd);
}
int kn_flash_emu_f64(const double *q, const double *k, const double *v, const double *y, const double *dy, int dyc,
                     double *out, long long bh, int t, int d, double scale, bool bwd) {
    return knf_launch_f64(q, k, v, y, dy, dyc, out, bh, t, d, scale, bwd);
}
#endif
