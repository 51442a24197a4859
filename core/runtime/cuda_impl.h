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
#include "kiln/scalar.h"
#include "tensor/rowmath.h"
#include "storage/cuda_check.h" /* KN_CUDA_TRY, KN_CUDA_WARN, KNC_CUDA_GOTO */
extern "C" {
#include "ir/ir_impl.h"
}

/* The same for cuBLAS, in the files that use it (they include cublas_v2.h first):
 * KN_CUBLAS_TRY returns the error, KNC_CUBLAS_GOTO sets `st` and jumps to `done:`. */
#ifdef CUBLAS_V2_H_
static inline kn_status knc_cublas_check(cublasStatus_t s, const char *call, const char *file, int line) {
    if (s == CUBLAS_STATUS_SUCCESS) return KN_OK;
    return kn_error(KN_ERR_DEVICE, "%s failed at %s:%d: %s (%s)", call, file, line, cublasGetStatusString(s),
                    cublasGetStatusName(s));
}
#define KN_CUBLAS_TRY(call) KN_TRY(knc_cublas_check((call), #call, __FILE__, __LINE__))
#define KNC_CUBLAS_GOTO(call)                                                                         \
    do {                                                                                              \
        if ((st = knc_cublas_check((call), #call, __FILE__, __LINE__)) != KN_OK) goto done;           \
    } while (0)
#endif

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

/* Shapes and strides (in elements) by value, for index arithmetic in kernels, with the
 * index type I of the kernel: int64_t always works; uint32_t is used when knc_fits_u32
 * says every index and offset fits (32-bit division is several times cheaper than 64-bit
 * division, which the GPU emulates). Up to three operands' strides per axis. */
template <typename I>
struct knc_layout {
    int nd; /* >= 1 once collapsed */
    I shape[KN_MAX_DIMS];
    I st[KN_MAX_DIMS][3];
};
typedef knc_layout<int64_t> knc_strides;

/* Collapse s for its first nops operands in place: size-1 axes are dropped, and an axis
 * merges into the next one when it is contiguous with it for every operand (st[d][k] ==
 * st[d+1][k] * shape[d+1], which a stride-0 broadcast axis next to another one also
 * satisfies). Every element keeps its offsets, so kernels see the same tensor with fewer
 * axes: same-shape contiguous operands become 1-D, a bias add [N,C]+[C] 2-D, a scalar
 * broadcast 1-D with stride 0. Afterwards nd >= 1 (shape {1}, strides 0 when no axis is
 * left). */
static inline void knc_collapse(knc_strides *s, int nops) {
    int m = 0;
    for (int d = 0; d < s->nd; d++) {
        if (s->shape[d] == 1) continue;
        bool merge = m > 0;
        for (int k = 0; k < nops && merge; k++) merge = s->st[m - 1][k] == s->st[d][k] * s->shape[d];
        if (merge) {
            s->shape[m - 1] *= s->shape[d];
            for (int k = 0; k < nops; k++) s->st[m - 1][k] = s->st[d][k];
        } else {
            s->shape[m] = s->shape[d];
            for (int k = 0; k < nops; k++) s->st[m][k] = s->st[d][k];
            m++;
        }
    }
    if (m == 0) {
        s->shape[0] = 1;
        for (int k = 0; k < 3; k++) s->st[0][k] = 0;
        m = 1;
    }
    s->nd = m;
}

/* Whether a kernel over s (total elements, first nops operands) may use uint32_t indices:
 * total < 2^31 and every operand's strides >= 0 with its largest offset < 2^31. */
static inline bool knc_fits_u32(const knc_strides &s, int nops, int64_t total) {
    const int64_t lim = (int64_t)1 << 31;
    if (total >= lim) return false;
    for (int k = 0; k < nops; k++) {
        int64_t mx = 0; /* each term < 2^31 * 2^31, the sum stays below 2^63 */
        for (int d = 0; d < s.nd; d++) {
            if (s.st[d][k] < 0 || s.st[d][k] >= lim) return false;
            mx += (s.shape[d] - 1) * s.st[d][k];
            if (mx >= lim) return false;
        }
    }
    return true;
}

/* s with uint32_t indices (only when knc_fits_u32(s, ...)). */
static inline knc_layout<uint32_t> knc_narrow(const knc_strides &s) {
    knc_layout<uint32_t> r;
    r.nd = s.nd;
    for (int d = 0; d < s.nd; d++) {
        r.shape[d] = (uint32_t)s.shape[d];
        for (int k = 0; k < 3; k++) r.st[d][k] = (uint32_t)s.st[d][k];
    }
    return r;
}

/* Element offsets of operands 0..nops-1 for flat row-major index i of s.shape: one
 * division per axis but the first (none for a 1-D layout). */
template <int NOPS, typename I>
__device__ inline void knc_offsets(const knc_layout<I> &s, I i, I *off) {
    for (int k = 0; k < NOPS; k++) off[k] = 0;
    for (int d = s.nd - 1; d > 0; d--) {
        I q = i / s.shape[d], r = i - q * s.shape[d];
        for (int k = 0; k < NOPS; k++) off[k] += r * s.st[d][k];
        i = q;
    }
    for (int k = 0; k < NOPS; k++) off[k] += i * s.st[0][k];
}

/* Grid-stride loop with index type I (a grid has at most 2^20 blocks of KNC_THREADS, so
 * i + the grid's size never wraps a uint32_t while i < 2^31). */
#define KNC_FOR_I(I, i, total) \
    for (I i = (I)(blockIdx.x * blockDim.x + threadIdx.x); i < (total); i += (I)(gridDim.x * blockDim.x))

/* 16-bit floats in hand-written kernels: kn_lowp_source's bit-level conversions (round
 * to nearest even, NaN kept quiet, overflow to Inf, f16 subnormals exact), so a kernel
 * that stores a 16-bit result stores what a generated kernel's cast would. knc_bf16 and
 * knc_f16 are the storage types (distinct, so templates tell them apart). */
struct knc_bf16 { unsigned short u; };
struct knc_f16 { unsigned short u; };
__device__ inline unsigned short knc_bf16_bits(float x) {
    unsigned int u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
__device__ inline unsigned short knc_f16_bits(float x) {
    unsigned int u = __float_as_uint(x), s = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (unsigned short)(s | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) return (unsigned short)(s | 0x7c00u);
    if (a >= 0x38800000u) return (unsigned short)(s | ((a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13));
    if (a <= 0x33000000u) return (unsigned short)s;
    unsigned int sh = 126u - (a >> 23), m = (a & 0x7fffffu) | 0x800000u, q = m >> sh, r = m & ((1u << sh) - 1u);
    unsigned int half = 1u << (sh - 1u);
    if (r > half || (r == half && (q & 1u))) q++;
    return (unsigned short)(s | q);
}
__device__ inline float knc_widen(knc_bf16 h) {
    unsigned int u = (unsigned int)h.u << 16;
    if ((u & 0x7fffffffu) > 0x7f800000u) u |= 0x400000u;
    return __uint_as_float(u);
}
__device__ inline float knc_widen(knc_f16 h) {
    unsigned int s = (unsigned int)(h.u & 0x8000u) << 16, e = (h.u >> 10) & 0x1fu, m = h.u & 0x3ffu;
    if (e == 0x1fu) return __uint_as_float(s | 0x7f800000u | (m ? 0x400000u | (m << 13) : 0u));
    if (e == 0u) return __uint_as_float(__float_as_uint((float)m * 5.9604644775390625e-8f) | s);
    return __uint_as_float(s | ((e + 112u) << 23) | (m << 13));
}
__device__ inline float knc_widen(float x) { return x; }
__device__ inline double knc_widen(double x) { return x; }
/* The math type of a storage type: float for the 16-bit ones. */
template <typename S> struct knc_math { typedef S type; };
template <> struct knc_math<knc_bf16> { typedef float type; };
template <> struct knc_math<knc_f16> { typedef float type; };
/* x stored as S (rounded once for the 16-bit types). */
template <typename S> __device__ inline S knc_narrow(typename knc_math<S>::type x) { return x; }
template <> __device__ inline knc_bf16 knc_narrow<knc_bf16>(float x) { return knc_bf16{knc_bf16_bits(x)}; }
template <> __device__ inline knc_f16 knc_narrow<knc_f16>(float x) { return knc_f16{knc_f16_bits(x)}; }

/* W elements of T loaded or stored as one access (16 bytes for W = 16 / sizeof(T)). */
template <typename T, int W>
struct alignas(sizeof(T) * W) knc_pack {
    T v[W];
};

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
/* kiln/scalar.h's pointwise functions by type (the CPU kernels call the same ones). */
__device__ inline float knc_sc_unary(kn_unary_op op, float x) { return kn_sc_unary_f32(op, x); }
__device__ inline double knc_sc_unary(kn_unary_op op, double x) { return kn_sc_unary_f64(op, x); }
__device__ inline float knc_sc_binary(kn_binary_op op, float a, float b) { return kn_sc_binary_f32(op, a, b); }
__device__ inline double knc_sc_binary(kn_binary_op op, double a, double b) { return kn_sc_binary_f64(op, a, b); }
__device__ inline float knc_sc_unary_grad(kn_unary_op op, float d, float x) { return kn_sc_unary_grad_f32(op, d, x); }
__device__ inline double knc_sc_unary_grad(kn_unary_op op, double d, double x) { return kn_sc_unary_grad_f64(op, d, x); }
/* Whether n is unary_grad of a function with a gradient column (*f: that function). */
static inline bool knc_unary_grad_fn(const kn_node *n, kn_unary_op *f) {
    if (n->op != KN_OP_UNARY_GRAD || n->attrs.fn < 0 || n->attrs.fn >= KN_UNARY_COUNT) return false;
    *f = (kn_unary_op)n->attrs.fn;
    return kn_sc_unary_has_grad(*f);
}

/* tensor/rowmath.h's row formulas by type (the CPU kernels call the same ones). */
template <typename T> __device__ inline T knc_rm_rstd(double sqdev, int64_t c, double eps);
template <> __device__ inline float knc_rm_rstd<float>(double sqdev, int64_t c, double eps) { return kn_rm_rstd_f32(sqdev, c, eps); }
template <> __device__ inline double knc_rm_rstd<double>(double sqdev, int64_t c, double eps) { return kn_rm_rstd_f64(sqdev, c, eps); }
__device__ inline float knc_rm_normalize(float x, float m, float r) { return kn_rm_normalize_f32(x, m, r); }
__device__ inline double knc_rm_normalize(double x, double m, double r) { return kn_rm_normalize_f64(x, m, r); }
__device__ inline float knc_rm_affine(float x, float m, float r, float w, float b) { return kn_rm_affine_f32(x, m, r, w, b); }
__device__ inline double knc_rm_affine(double x, double m, double r, double w, double b) { return kn_rm_affine_f64(x, m, r, w, b); }
__device__ inline float knc_rm_layernorm_dx(float g, float xh, float mg, float mgx, float r) {
    return kn_rm_layernorm_dx_f32(g, xh, mg, mgx, r);
}
__device__ inline double knc_rm_layernorm_dx(double g, double xh, double mg, double mgx, double r) {
    return kn_rm_layernorm_dx_f64(g, xh, mg, mgx, r);
}
__device__ inline float knc_rm_softmax_dx(float y, float dy, float s) { return kn_rm_softmax_dx_f32(y, dy, s); }
__device__ inline double knc_rm_softmax_dx(double y, double dy, double s) { return kn_rm_softmax_dx_f64(y, dy, s); }
__device__ inline float knc_rm_log_softmax_dx(float dy, float ey, float s) { return kn_rm_log_softmax_dx_f32(dy, ey, s); }
__device__ inline double knc_rm_log_softmax_dx(double dy, double ey, double s) { return kn_rm_log_softmax_dx_f64(dy, ey, s); }
__device__ inline float knc_rm_ce_scale(float dloss, int64_t rows) { return kn_rm_ce_scale_f32(dloss, rows); }
__device__ inline double knc_rm_ce_scale(double dloss, int64_t rows) { return kn_rm_ce_scale_f64(dloss, rows); }

/* A new contiguous tensor of n->type on dev. */
kn_status knc_new_out(const kn_node *n, kn_device dev, kn_tensor **out);
/* The stream every kiln kernel, memset and cuBLAS call is queued on: the legacy default
 * stream, except while a CUDA graph is being captured (then the capture's stream; see
 * kn_cuda_graph_begin in core/storage/storage_cuda.cu). Launch as k<<<grid, block, 0, knc_stream>>>. */
extern cudaStream_t knc_stream;
/* Whether the work queued now is being captured into a CUDA graph (nothing runs: kernels
 * must not read device results on the host, e.g. to check indices). */
static inline bool knc_capturing(void) { return knc_stream != 0; }
/* Whether f32 products may use TF32 tensor cores (KILN_TF32=1, read once: kiln's --tf32
 * and --precision tf32 set it): cuBLAS's f32 GEMMs and the flash attention kernels. */
bool knc_tf32_allowed(void);
/* KN_ERR_UNSUPPORTED: "<op>: no CUDA kernel for dtype <dt> ...". */
kn_status knc_unsupported(const kn_node *n, kn_dtype dt);
/* KN_ERR_UNSUPPORTED: "<op>: the cuda backend's <kernel> does not compute this op" (an op
 * routed to a shared kernel that does not know it: never another op's math). */
kn_status knc_no_kernel(const kn_node *n, const char *kernel);
/* KILN_CUDA_SYNC=1: synchronize and check (after each op). */
kn_status knc_after_op(const kn_node *n);
/* The per-op profile (cuda_profile.cu): on between kn_cuda_profile_start and _report;
 * begin/end bracket one op's kernel with events and wait for it. */
bool knc_profile_on(void);
kn_status knc_profile_begin(void);
kn_status knc_profile_end(const kn_node *n, const kn_tensor *const *in, const kn_tensor *out);
/* The same under another name than n's op (name: a string that outlives the profile; the
 * fused cross-entropy, kn_cuda_cross_entropy_fused, is profiled as "cross_entropy_fused"). */
kn_status knc_profile_end_as(const char *name, const kn_node *n, const kn_tensor *const *in, const kn_tensor *out);
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
KNC_KERNEL(knc_unary_grad);
KNC_KERNEL(knc_cast);
KNC_KERNEL(knc_dropout);
KNC_KERNEL(knc_causal_fill);
KNC_KERNEL(knc_onehot);
KNC_KERNEL(knc_reduce);
KNC_KERNEL(knc_matmul);
KNC_KERNEL(knc_matmul_ep);       /* cuda_matmul_lt.cu */
KNC_KERNEL(knc_matmul_q);        /* cuda_quant.cu: matmul_w8, matmul_w8a8, matmul_w8a8_tensor */
KNC_KERNEL(knc_matmul_q_static); /* cuda_quant_static.cu: matmul_w8a8_static */
/* The matmul op's product, autotuned (cuda_matmul_lt.cu): cuBLAS's own choice (base, which
 * queues cublasGemmStridedBatchedEx on ctx) against cuBLASLt's candidates for the problem,
 * timed once per problem and remembered (in memory and in the kernel cache), then run.
 * a, b, c as knc_matmul passes them: batch products, sa/sb the operands' batch strides
 * (0: shared), c contiguous. KILN_MATMUL_TUNE=0 turns it off (knc_matmul_tune_on). */
bool knc_matmul_tune_on(void);
kn_status knc_matmul_tuned(int dev, kn_dtype dt, bool ta, bool tb, int64_t m, int64_t nn, int64_t k, int64_t batch,
                           int64_t sa, int64_t sb, const void *a, const void *b, void *c,
                           kn_status (*base)(void *ctx), void *ctx);
KNC_KERNEL(knc_reshape);
KNC_KERNEL(knc_permute);
KNC_KERNEL(knc_broadcast_to);
KNC_KERNEL(knc_slice);
KNC_KERNEL(knc_slice_grad);
KNC_KERNEL(knc_concat);
KNC_KERNEL(knc_embedding);
KNC_KERNEL(knc_embedding_grad);
/* cuda_embedding.cu: dw (zeroed here) = embedding_grad of dy and idx, on dw's GPU (dy, idx contiguous there). */
kn_status knc_embedding_grad_sum(const kn_tensor *dy, const kn_tensor *idx, kn_tensor *dw);
KNC_KERNEL(knc_softmax);
KNC_KERNEL(knc_softmax_bwd);
KNC_KERNEL(knc_causal_softmax);     /* cuda_attn.cu */
KNC_KERNEL(knc_causal_softmax_bwd);
KNC_KERNEL(knc_layernorm);
KNC_KERNEL(knc_layernorm_dx);
KNC_KERNEL(knc_normalize);
KNC_KERNEL(knc_cross_entropy);
KNC_KERNEL(knc_cross_entropy_bwd);
KNC_KERNEL(knc_flash_attn);         /* cuda_flash.cu */
KNC_KERNEL(knc_attn_decode);        /* cuda_attn_decode.cu */
/* cuda_quant.cu: row r of a [rows, cols] view (element (r, c) at x[r * rs + c * cs]) quantized
 * symmetrically into q[r * cols + c] and s[r], as lab 12's kn_quant_rows_i8 (one block a row) */
__global__ void knc_quant_rows_kernel(const float *x, int64_t rows, int64_t cols, int64_t rs, int64_t cs, int8_t *q,
                                      float *s);
KNC_KERNEL(knc_flash_attn_bwd);

/* The device a node runs on (that of its first operand). */
static inline kn_device knc_dev(const kn_tensor *const *in) { return in[0]->storage->device; }

#endif /* KILN_CUDA_IMPL_H */
