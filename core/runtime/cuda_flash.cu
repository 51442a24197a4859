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
 * one (the mixed-precision issue brings the tensor-core version). */
#include <math.h>

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
#include "runtime/cuda_impl.h"

static kn_status knf_run(const kn_node *n, const kn_tensor *const *in, kn_tensor **out, bool bwd) {
    kn_dtype dt = n->type.dtype;
    if (dt != KN_DT_F32 && dt != KN_DT_F64) return knc_unsupported(n, dt);
    const kn_tensor *q = in[0];
    long long t = q->shape[q->ndim - 2], d = q->shape[q->ndim - 1];
    long long bh = 1; /* the batch axes' product (D may be 0: y still has L's column) */
    for (int i = 0; i < q->ndim - 2; i++) bh *= q->shape[i];
    if (d > KNF_DMAX || bh > 65535 || t > (1 << 24))
        return kn_error(KN_ERR_UNSUPPORTED, "%s: the cuda kernel takes head dims up to %d, up to 65535 batch x head "
                        "pairs and up to 2^24 rows (got D = %lld, %lld pairs, T = %lld)", kn_op_name(n->op), KNF_DMAX,
                        d, bh, t);
    KN_TRY(knc_new_out(n, knc_dev(in), out));
    const void *dy = bwd ? kn_tensor_data(in[4]) : nullptr;
    int dyc = bwd ? (int)in[4]->shape[in[4]->ndim - 1] : 0;
    int rc = dt == KN_DT_F32
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
                        "pairs)", kn_op_name(n->op), t, d, bh);
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
