/* cuda_impl.h — what the CUDA files of core/runtime share (C++, nvcc only).
 *
 *   - KN_CUDA_TRY / KN_CUDA_WARN / KNC_LAUNCHED: every CUDA runtime call and kernel
 *     launch checked, a failure turned into KN_ERR_DEVICE with the call, file:line and the
 *     driver's message;
 *   - knc_*: helpers for the op kernels (output allocation, launch shapes, strided index
 *     arithmetic, warp/block reductions in a fixed order), and the per-op entry points the
 *     op table in cuda_ops.cu points at.
 * Internal names carry the prefix knc_. */
#ifndef KILN_CUDA_IMPL_H
#define KILN_CUDA_IMPL_H

#include <cuda_runtime.h>

#include "kiln/cuda.h"
extern "C" {
#include "ir/ir_impl.h"
}

/* Run a CUDA runtime call; on failure record KN_ERR_DEVICE and return it. */
#define KN_CUDA_TRY(call)                                                                          \
    do {                                                                                           \
        cudaError_t kn_cu_e_ = (call);                                                             \
        if (kn_cu_e_ != cudaSuccess) {                                                             \
            (void)cudaGetLastError();                                                              \
            return kn_error(KN_ERR_DEVICE, "%s failed at %s:%d: %s (%s)", #call, __FILE__, __LINE__, \
                            cudaGetErrorString(kn_cu_e_), cudaGetErrorName(kn_cu_e_));             \
        }                                                                                          \
    } while (0)

/* The same for calls whose failure can only be reported (in free paths). */
#define KN_CUDA_WARN(call)                                                                            \
    do {                                                                                              \
        cudaError_t kn_cu_e_ = (call);                                                                \
        if (kn_cu_e_ != cudaSuccess) {                                                                \
            (void)cudaGetLastError();                                                                 \
            kn_log(KN_LOG_WARN, "%s failed at %s:%d: %s (%s)", #call, __FILE__, __LINE__,             \
                   cudaGetErrorString(kn_cu_e_), cudaGetErrorName(kn_cu_e_));                         \
        }                                                                                             \
    } while (0)

/* After a kernel launch: KN_ERR_DEVICE naming the kernel when the launch failed (bad
 * configuration, no kernel image for this GPU) or an earlier asynchronous error surfaced. */
kn_status knc_check_launch(const char *kernel, const char *file, int line);
#define KNC_LAUNCHED(kernel) KN_TRY(knc_check_launch(#kernel, __FILE__, __LINE__))

#define KNC_THREADS 256

/* Blocks for a grid-stride loop over n elements. */
static inline unsigned knc_blocks(int64_t n) {
    int64_t b = (n + KNC_THREADS - 1) / KNC_THREADS;
    if (b < 1) b = 1;
    return (unsigned)(b > (1 << 20) ? (1 << 20) : b);
}

/* Shapes and strides (in elements) by value, for index arithmetic in kernels. */
struct knc_strides {
    int nd;
    int64_t shape[KN_MAX_DIMS];
    int64_t st[KN_MAX_DIMS][3]; /* up to three operands' strides per axis */
};

/* Element offsets of operands 0..nops-1 for flat row-major index i of s.shape. */
template <int NOPS>
__device__ inline void knc_offsets(const knc_strides &s, int64_t i, int64_t *off) {
    for (int k = 0; k < NOPS; k++) off[k] = 0;
    for (int d = s.nd - 1; d >= 0; d--) {
        int64_t q = i / s.shape[d], r = i - q * s.shape[d];
        for (int k = 0; k < NOPS; k++) off[k] += r * s.st[d][k];
        i = q;
    }
}

/* Sum of v over the block in a fixed order (warp shuffles, then the warps' partials by
 * warp 0): the same inputs give the same bits. Every thread of the block must call it;
 * the result is returned to all threads. `sh` holds >= 32 doubles. */
__device__ inline double knc_block_sum(double v, double *sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    __syncthreads(); /* sh may still be read from a previous call */
    if (lane == 0) sh[w] = v;
    __syncthreads();
    if (w == 0) {
        v = lane < nw ? sh[lane] : 0.0;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
        if (lane == 0) sh[0] = v;
    }
    __syncthreads();
    return sh[0];
}

/* The same for a maximum with NaN propagation (NaN wins, as on the CPU). */
__device__ inline double knc_max2(double a, double b) { return (a != a) ? a : (b != b) ? b : (a > b ? a : b); }
__device__ inline double knc_block_max(double v, double *sh) {
    for (int o = 16; o > 0; o >>= 1) v = knc_max2(v, __shfl_down_sync(0xffffffffu, v, o));
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    if (w == 0) {
        v = lane < nw ? sh[lane] : -INFINITY;
        for (int o = 16; o > 0; o >>= 1) v = knc_max2(v, __shfl_down_sync(0xffffffffu, v, o));
        if (lane == 0) sh[0] = v;
    }
    __syncthreads();
    return sh[0];
}

/* Math by type, the same functions the CPU template uses. */
__device__ inline float knc_exp(float x) { return expf(x); }
__device__ inline double knc_exp(double x) { return exp(x); }
__device__ inline float knc_log(float x) { return logf(x); }
__device__ inline double knc_log(double x) { return log(x); }
__device__ inline float knc_sqrt(float x) { return sqrtf(x); }
__device__ inline double knc_sqrt(double x) { return sqrt(x); }
__device__ inline float knc_tanh(float x) { return tanhf(x); }
__device__ inline double knc_tanh(double x) { return tanh(x); }

/* A new contiguous tensor of n->type on dev. */
kn_status knc_new_out(const kn_node *n, kn_device dev, kn_tensor **out);
/* KN_ERR_UNSUPPORTED: "<op>: no CUDA kernel for dtype <dt> ...". */
kn_status knc_unsupported(const kn_node *n, kn_dtype dt);
/* KILN_CUDA_SYNC=1: synchronize and check (after each op). */
kn_status knc_after_op(const kn_node *n);
/* The per-op profile (cuda_profile.cu): on between kn_cuda_profile_start and _report;
 * begin/end bracket one op's kernel with events and wait for it. */
bool knc_profile_on(void);
kn_status knc_profile_begin(void);
kn_status knc_profile_end(const kn_node *n, const kn_tensor *const *in, const kn_tensor *out);
/* Strided copy of es-byte elements on the device: dst (contiguous strides dstr) from src
 * (strides sstr, 0 where broadcast), over shape. Pointers already include offsets. */
kn_status knc_strided_copy(size_t es, int ndim, const int64_t *shape, const void *src, const int64_t *sstr,
                           void *dst, const int64_t *dstr);
/* Copy of an index tensor (i32 or i64) to a host array of int64 (kn_malloc'd). */
kn_status knc_indices_to_host(const kn_tensor *idx, int64_t **out);

/* Per-op CUDA kernels (the same contract as the CPU kern_* of eval.c; operands on the
 * device, contiguous). */
#define KNC_KERNEL(name) kn_status name(const kn_node *n, const kn_tensor *const *in, kn_tensor **out)
KNC_KERNEL(knc_binary);
KNC_KERNEL(knc_eq);
KNC_KERNEL(knc_where);
KNC_KERNEL(knc_unary);
KNC_KERNEL(knc_act_bwd);
KNC_KERNEL(knc_cast);
KNC_KERNEL(knc_dropout);
KNC_KERNEL(knc_causal_fill);
KNC_KERNEL(knc_reduce);
KNC_KERNEL(knc_matmul);
KNC_KERNEL(knc_reshape);
KNC_KERNEL(knc_permute);
KNC_KERNEL(knc_broadcast_to);
KNC_KERNEL(knc_slice);
KNC_KERNEL(knc_slice_grad);
KNC_KERNEL(knc_embedding);
KNC_KERNEL(knc_embedding_grad);
KNC_KERNEL(knc_softmax);
KNC_KERNEL(knc_softmax_bwd);
KNC_KERNEL(knc_layernorm);
KNC_KERNEL(knc_layernorm_dx);
KNC_KERNEL(knc_normalize);
KNC_KERNEL(knc_cross_entropy);
KNC_KERNEL(knc_cross_entropy_bwd);

/* The device a node runs on (that of its first operand). */
static inline kn_device knc_dev(const kn_tensor *const *in) { return in[0]->storage->device; }

#endif /* KILN_CUDA_IMPL_H */
