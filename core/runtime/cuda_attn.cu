/* cuda_attn.cu — attention's fused softmax on the GPU: causal_softmax and its backward
 * (contract: kn_causal_softmax in kiln/ir.h; CPU reference: core/tensor/kernels_train.inc).
 *
 * The scores are batch matrices [Tq, Tk], one row per query. Row r keeps the columns
 * j < keep = r + 1 + Tk - Tq (clamped to [0, Tk]), causal_fill's mask; masked columns are
 * never read, and their probability (forward) or gradient (backward) is written as exactly
 * 0. Skipping them saves about half the reads of a square causal matrix.
 *
 * Rows of up to 1024 columns (GPT-2's context and below) take a warp each, four rows to a
 * block: lane t owns the columns t, t + 32, t + 64, ... (a warp reads 32 adjacent
 * elements at a time) and keeps them in registers, so the forward reads x once and writes y
 * once (max, exp-and-sum and write passes all run on registers) and the backward reads dy
 * and y once and writes dx once; the reductions are warp shuffles, with no block-wide
 * barrier, so many rows are in flight on each SM (latency, not bandwidth, limits a kernel
 * made of short dependent passes). Longer rows take a block of 256 threads each, the
 * reductions through knc_block_sum, with registers up to 2048 columns and re-reading the
 * row (from L1/L2) beyond.
 *
 * Precision and determinism follow the CPU template: the maximum is exact in any order
 * (NaN skipped, as the CPU's `>` does); the sums of exp and of dy * y accumulate in double,
 * per thread in column order, then in a fixed tree (a warp's xor butterfly, which gives
 * every lane the same bits, or knc_block_sum): the same inputs give the same bits.
 * Per-element arithmetic is in the operand's type, with x * scale rounded before the max
 * is subtracted (no fused multiply-add), as on the CPU. GPU and CPU differ only by the
 * rounding of exp and the order of the sums. */
#include "runtime/cuda_impl.h"

/* Columns a thread of the block-per-row kernels keeps in registers. */
#define KNC_ATTN_REG 8

/* x * s rounded to the type: keeps the compiler from fusing it into the next subtraction. */
__device__ inline float knc_mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double knc_mul_rn(double a, double b) { return __dmul_rn(a, b); }

/* Number of leading columns row `row` (of any matrix) keeps. */
__device__ inline int64_t knc_causal_keep(int64_t row, int64_t tq, int64_t tk) {
    int64_t keep = row % tq + 1 + tk - tq;
    return keep < 0 ? 0 : keep > tk ? tk : keep;
}

/* Maximum of v over the block with NaN skipped (fmax); every thread gets it. */
__device__ inline double knc_block_fmax(double v, double *sh) {
    for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_down_sync(0xffffffffu, v, o));
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    __syncthreads(); /* sh may still be read from the previous row */
    if (lane == 0) sh[w] = v;
    __syncthreads();
    if (w == 0) {
        v = lane < nw ? sh[lane] : -INFINITY;
        for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_down_sync(0xffffffffu, v, o));
        if (lane == 0) sh[0] = v;
    }
    __syncthreads();
    return sh[0];
}

/* ---------------------------------------------------------------- a warp per row */

/* Sum and NaN-skipping max over a warp, in a fixed butterfly: every lane gets the result. */
__device__ inline double knc_warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
template <typename T>
__device__ inline T knc_warp_fmax(T v) {
    for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* y = causal softmax of x * scale; warp w of the grid takes rows w, w + warps, ...
 * NREG: columns per lane, Tk <= 32 * NREG. */
template <typename T, int NREG>
__global__ void knc_causal_softmax_warp(const T *x, T *y, int64_t rows, int64_t tq, int64_t tk, T scale) {
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
    for (int64_t row = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5); row < rows; row += warps) {
        const T *xr = x + row * tk;
        T *yr = y + row * tk;
        const int64_t keep = knc_causal_keep(row, tq, tk);
        T v[NREG], m = (T)-INFINITY;
#pragma unroll
        for (int k = 0; k < NREG; k++) {
            int64_t j = lane + 32 * k;
            v[k] = j < keep ? knc_mul_rn(xr[j], scale) : (T)-INFINITY;
            m = fmax(m, v[k]);
        }
        const T mx = knc_warp_fmax(m);
        if (mx == (T)-INFINITY) { /* nothing unmasked (or all -inf): a row of zeros */
#pragma unroll
            for (int k = 0; k < NREG; k++) if (lane + 32 * k < tk) yr[lane + 32 * k] = (T)0;
            continue;
        }
        double s = 0;
#pragma unroll
        for (int k = 0; k < NREG; k++)
            if (lane + 32 * k < keep) { v[k] = knc_exp(v[k] - mx); s += v[k]; }
        const T inv = (T)(1.0 / knc_warp_sum(s));
#pragma unroll
        for (int k = 0; k < NREG; k++) {
            int64_t j = lane + 32 * k;
            if (j < tk) yr[j] = j < keep ? v[k] * inv : (T)0;
        }
    }
}

template <typename T, int NREG>
__global__ void knc_causal_softmax_bwd_warp(const T *dy, const T *y, T *dx, int64_t rows, int64_t tq, int64_t tk,
                                            T scale) {
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
    for (int64_t row = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5); row < rows; row += warps) {
        const T *dr = dy + row * tk, *yr = y + row * tk;
        T *xr = dx + row * tk;
        const int64_t keep = knc_causal_keep(row, tq, tk);
        T g[NREG], p[NREG];
        double s = 0;
#pragma unroll
        for (int k = 0; k < NREG; k++) {
            int64_t j = lane + 32 * k;
            g[k] = j < keep ? dr[j] : (T)0;
            p[k] = j < keep ? yr[j] : (T)0;
            s += (double)g[k] * (double)p[k]; /* +0 past keep */
        }
        const T dot = (T)knc_warp_sum(s);
#pragma unroll
        for (int k = 0; k < NREG; k++) {
            int64_t j = lane + 32 * k;
            if (j < tk) xr[j] = j < keep ? p[k] * (g[k] - dot) * scale : (T)0;
        }
    }
}

/* ---------------------------------------------------------------- a block per row */

/* y = causal softmax of x * scale, rows [blockIdx.x, rows) in steps of gridDim.x.
 * CACHED: Tk <= KNC_ATTN_REG * blockDim.x (the row lives in registers). */
template <typename T, bool CACHED>
__global__ void knc_causal_softmax_rows(const T *x, T *y, int64_t rows, int64_t tq, int64_t tk, T scale) {
    __shared__ double sh[32];
    const int t = threadIdx.x, nt = blockDim.x;
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) { /* block-uniform loop */
        const T *xr = x + row * tk;
        T *yr = y + row * tk;
        int64_t keep = knc_causal_keep(row, tq, tk);
        T v[CACHED ? KNC_ATTN_REG : 1];
        double m = -INFINITY;
        if (CACHED) {
#pragma unroll
            for (int k = 0; k < KNC_ATTN_REG; k++) {
                int64_t j = t + (int64_t)k * nt;
                v[k] = j < keep ? knc_mul_rn(xr[j], scale) : (T)-INFINITY;
                m = fmax(m, (double)v[k]);
            }
        } else {
            for (int64_t j = t; j < keep; j += nt) m = fmax(m, (double)knc_mul_rn(xr[j], scale));
        }
        const T mx = (T)knc_block_fmax(m, sh);
        if (mx == (T)-INFINITY) { /* nothing unmasked (or all -inf): a row of zeros */
            for (int64_t j = t; j < tk; j += nt) yr[j] = (T)0;
            continue;
        }
        double s = 0;
        if (CACHED) {
#pragma unroll
            for (int k = 0; k < KNC_ATTN_REG; k++)
                if (t + (int64_t)k * nt < keep) { v[k] = knc_exp(v[k] - mx); s += v[k]; }
        } else {
            for (int64_t j = t; j < keep; j += nt) s += knc_exp(knc_mul_rn(xr[j], scale) - mx);
        }
        const T inv = (T)(1.0 / knc_block_sum(s, sh));
        if (CACHED) {
#pragma unroll
            for (int k = 0; k < KNC_ATTN_REG; k++) {
                int64_t j = t + (int64_t)k * nt;
                if (j < tk) yr[j] = j < keep ? v[k] * inv : (T)0;
            }
        } else {
            for (int64_t j = t; j < tk; j += nt) yr[j] = j < keep ? knc_exp(knc_mul_rn(xr[j], scale) - mx) * inv : (T)0;
        }
    }
}

/* dx = y * (dy - sum(dy * y)) * scale over the kept columns, 0 at the masked ones. */
template <typename T, bool CACHED>
__global__ void knc_causal_softmax_bwd_rows(const T *dy, const T *y, T *dx, int64_t rows, int64_t tq, int64_t tk,
                                            T scale) {
    __shared__ double sh[32];
    const int t = threadIdx.x, nt = blockDim.x;
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const T *dr = dy + row * tk, *yr = y + row * tk;
        T *xr = dx + row * tk;
        int64_t keep = knc_causal_keep(row, tq, tk);
        T g[CACHED ? KNC_ATTN_REG : 1], p[CACHED ? KNC_ATTN_REG : 1];
        double s = 0;
        if (CACHED) {
#pragma unroll
            for (int k = 0; k < KNC_ATTN_REG; k++) {
                int64_t j = t + (int64_t)k * nt;
                g[k] = j < keep ? dr[j] : (T)0;
                p[k] = j < keep ? yr[j] : (T)0;
                if (j < keep) s += (double)g[k] * (double)p[k];
            }
        } else {
            for (int64_t j = t; j < keep; j += nt) s += (double)dr[j] * (double)yr[j];
        }
        const T dot = (T)knc_block_sum(s, sh);
        if (CACHED) {
#pragma unroll
            for (int k = 0; k < KNC_ATTN_REG; k++) {
                int64_t j = t + (int64_t)k * nt;
                if (j < tk) xr[j] = j < keep ? p[k] * (g[k] - dot) * scale : (T)0;
            }
        } else {
            for (int64_t j = t; j < tk; j += nt) xr[j] = j < keep ? yr[j] * (dr[j] - dot) * scale : (T)0;
        }
    }
}

/* Rows per 128-thread block on the warp path. */
#define KNC_ATTN_WARPS 4

/* Launch the warp kernels for the smallest NREG that holds Tk (<= 1024) columns. */
template <typename T>
static void launch_warp(bool bwd, const T *a, const T *b, T *o, int64_t rows, int64_t tq, int64_t tk, T s) {
    int64_t nb = (rows + KNC_ATTN_WARPS - 1) / KNC_ATTN_WARPS;
    unsigned blocks = (unsigned)(nb < (1 << 30) ? nb : (1 << 30)), nt = 32 * KNC_ATTN_WARPS;
#define KNC_ATTN_WARP_CASE(R)                                                                           \
    if (tk <= 32 * (R)) {                                                                               \
        if (bwd) knc_causal_softmax_bwd_warp<T, R><<<blocks, nt, 0, knc_stream>>>(a, b, o, rows, tq, tk, s);          \
        else knc_causal_softmax_warp<T, R><<<blocks, nt, 0, knc_stream>>>(a, o, rows, tq, tk, s);                      \
        return;                                                                                         \
    }
    KNC_ATTN_WARP_CASE(1) KNC_ATTN_WARP_CASE(4) KNC_ATTN_WARP_CASE(8) KNC_ATTN_WARP_CASE(16) KNC_ATTN_WARP_CASE(32)
#undef KNC_ATTN_WARP_CASE
}

template <typename T>
static kn_status causal_launch(const kn_node *n, const kn_tensor *const *in, kn_tensor *out, bool bwd) {
    const kn_type *ty = &n->type;
    int64_t tq = ty->shape[ty->ndim - 2], tk = ty->shape[ty->ndim - 1];
    int64_t rows = tk ? kn_type_numel(ty) / tk : 0;
    if (rows == 0) return KN_OK;
    T s = (T)n->attrs.scale; /* rounded to the type, as on the CPU */
    const T *a = (const T *)kn_tensor_data(in[0]), *yv = bwd ? (const T *)kn_tensor_data(in[1]) : nullptr;
    T *o = (T *)kn_tensor_data(out);
    if (tk <= 1024) {
        launch_warp<T>(bwd, a, yv, o, rows, tq, tk, s);
        KNC_LAUNCHED(knc_causal_softmax_warp);
        return KN_OK;
    }
    unsigned nt = KNC_THREADS, blocks = (unsigned)(rows < (1 << 30) ? rows : (1 << 30));
    bool cached = tk <= (int64_t)KNC_ATTN_REG * nt;
    if (!bwd) {
        if (cached) knc_causal_softmax_rows<T, true><<<blocks, nt, 0, knc_stream>>>(a, o, rows, tq, tk, s);
        else knc_causal_softmax_rows<T, false><<<blocks, nt, 0, knc_stream>>>(a, o, rows, tq, tk, s);
    } else {
        if (cached) knc_causal_softmax_bwd_rows<T, true><<<blocks, nt, 0, knc_stream>>>(a, yv, o, rows, tq, tk, s);
        else knc_causal_softmax_bwd_rows<T, false><<<blocks, nt, 0, knc_stream>>>(a, yv, o, rows, tq, tk, s);
    }
    KNC_LAUNCHED(knc_causal_softmax_rows);
    return KN_OK;
}

static kn_status causal_any(const kn_node *n, const kn_tensor *const *in, kn_tensor **out, bool bwd) {
    kn_dtype dt = n->type.dtype;
    if (dt != KN_DT_F32 && dt != KN_DT_F64) return knc_unsupported(n, dt);
    KN_TRY(knc_new_out(n, knc_dev(in), out));
    kn_status st = dt == KN_DT_F32 ? causal_launch<float>(n, in, *out, bwd) : causal_launch<double>(n, in, *out, bwd);
    if (st != KN_OK) { kn_tensor_free(*out); *out = NULL; }
    return st;
}

KNC_KERNEL(knc_causal_softmax) { return causal_any(n, in, out, false); }
KNC_KERNEL(knc_causal_softmax_bwd) { return causal_any(n, in, out, true); }
