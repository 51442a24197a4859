/* cuda_norm.cu — the CUDA kernels of the norm rows: layernorm and normalize (+ dx). Each
 * reads whole rows of the last axis, makes statistics of the row, then writes it; the work
 * is memory bound, so the design goal is to read every input byte from global memory once
 * and to keep enough loads in flight to run at the copy bandwidth. Cross-entropy's rows,
 * the same kind of work over the vocabulary, are cuda_cross_entropy.cu's.
 *
 * Layernorm, rows of c <= 1024 (the GPT has c = 768): a warp per row, KNC_NORM_WARPS rows
 * per block. Lane l keeps the row's elements l, l + 32, l + 64, ... in registers, an array
 * of K values where K (1, 2, 4, 8, 16, 24 or 32: the smallest with 32 * K >= c) is a
 * template parameter, so the loops unroll and the array never touches memory. The row is
 * loaded once (x, and dy for the gradient; each warp load is 128 adjacent bytes), then
 * statistics are made from the registers in passes: the sum (mean = sum / c), then the sum
 * of (x - mean)^2 (var = sum / c), both in double like the CPU's row_stats, then for the
 * gradient the sums of g = dy * w and g * xhat, then the output is written. A pass's lane
 * partials meet in a butterfly of __shfl_xor_sync: lanes l and l ^ o add the same two
 * numbers (in either order, which IEEE addition does not mind), so every lane ends with
 * the same bits and no broadcast is needed. Longer rows keep a block of 256 threads per
 * row, statistics through knc_block_sum, the row read from global memory in every pass.
 *
 * Numerics follow core/tensor/kernels_train.inc: statistics and sums in double, the
 * per-element formulas in the operand type, tensor/rowmath.h's, which the CPU kernels call
 * too (layernorm (x - mean) * rstd * w + b). Every output is one fixed sequence of
 * operations for a given shape: deterministic, run after run. */
#include "runtime/cuda_impl.h"

/* Blocks for one block per row (rows fit in a grid's x dimension: < 2^31). */
static inline unsigned row_blocks(int64_t rows) { return (unsigned)(rows > 0 ? rows : 1); }

static bool is_float(kn_dtype dt) { return dt == KN_DT_F32 || dt == KN_DT_F64; }

/* ---------------------------------------------------------------- layernorm, a warp per row */

#define KNC_NORM_WARPS 4     /* rows (warps) per block of the warp kernels */
#define KNC_NORM_WARP_ROW 1024 /* longest row of the warp kernels: 32 lanes x 32 values */

/* a and b summed over the warp in a butterfly; every lane returns the same bits. */
__device__ inline void knc_warp_allsum2(double &a, double &b) {
    for (int o = 16; o > 0; o >>= 1) {
        double a2 = __shfl_xor_sync(0xffffffffu, a, o), b2 = __shfl_xor_sync(0xffffffffu, b, o);
        a += a2;
        b += b2;
    }
}

__device__ inline double knc_warp_allsum(double a) {
    for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
    return a;
}

/* Mean and 1/sqrt(var + eps) of the row whose element lane + 32 k is x[k] (k < K, where
 * lane + 32 k < c), two passes over the registers in double (row_stats of the CPU). */
template <typename T, int K>
__device__ inline void knc_warp_stats(const T (&x)[K], int lane, int c, double eps, T *mean, T *rstd) {
    double s = 0, q = 0;
#pragma unroll
    for (int k = 0; k < K; k++)
        if (lane + 32 * k < c) s += (double)x[k];
    double m = kn_rm_mean(knc_warp_allsum(s), c);
#pragma unroll
    for (int k = 0; k < K; k++)
        if (lane + 32 * k < c) {
            double d = (double)x[k] - m;
            q += d * d;
        }
    *mean = (T)m;
    *rstd = knc_rm_rstd<T>(knc_warp_allsum(q), c, eps);
}

/* y = (x - mean) * rstd * w + b (w == NULL: normalize, no affine) for rows of c <= 32 K;
 * warp (threadIdx.x / 32) of block b owns row b * KNC_NORM_WARPS + warp. A warp past the
 * last row leaves whole, so the shuffles always see all 32 lanes. */
template <typename T, int K>
__global__ void __launch_bounds__(32 * KNC_NORM_WARPS)
    knc_layernorm_warp(const T *__restrict__ x, const T *__restrict__ w, const T *__restrict__ b, T *__restrict__ y,
                       int64_t rows, int c, double eps) {
    int lane = threadIdx.x & 31;
    int64_t row = (int64_t)blockIdx.x * KNC_NORM_WARPS + (threadIdx.x >> 5);
    if (row >= rows) return;
    const T *xr = x + row * c;
    T *yr = y + row * c, v[K], mean, rstd;
#pragma unroll
    for (int k = 0; k < K; k++) {
        int j = lane + 32 * k;
        v[k] = j < c ? xr[j] : (T)0;
    }
    knc_warp_stats<T, K>(v, lane, c, eps, &mean, &rstd);
#pragma unroll
    for (int k = 0; k < K; k++) {
        int j = lane + 32 * k;
        if (j < c) yr[j] = w ? knc_rm_affine(v[k], mean, rstd, w[j], b[j]) : knc_rm_normalize(v[k], mean, rstd);
    }
}

/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w, xhat = (x - mean) * rstd,
 * for rows of c <= 32 K, a warp per row as above. g and xhat replace dy and x in the
 * registers (the same values the CPU recomputes in its last loop). */
template <typename T, int K>
__global__ void __launch_bounds__(32 * KNC_NORM_WARPS)
    knc_layernorm_dx_warp(const T *__restrict__ dy, const T *__restrict__ x, const T *__restrict__ w,
                          T *__restrict__ dx, int64_t rows, int c, double eps) {
    int lane = threadIdx.x & 31;
    int64_t row = (int64_t)blockIdx.x * KNC_NORM_WARPS + (threadIdx.x >> 5);
    if (row >= rows) return;
    const T *xr = x + row * c, *gr = dy + row * c;
    T *dr = dx + row * c, xv[K], g[K], mean, rstd;
#pragma unroll
    for (int k = 0; k < K; k++) {
        int j = lane + 32 * k;
        xv[k] = j < c ? xr[j] : (T)0;
        g[k] = j < c ? gr[j] : (T)0;
    }
    knc_warp_stats<T, K>(xv, lane, c, eps, &mean, &rstd);
    double sg = 0, sgx = 0;
#pragma unroll
    for (int k = 0; k < K; k++) {
        int j = lane + 32 * k;
        if (j < c) {
            g[k] = g[k] * w[j];
            xv[k] = knc_rm_normalize(xv[k], mean, rstd);
            sg += g[k];
            sgx += (double)g[k] * xv[k];
        }
    }
    knc_warp_allsum2(sg, sgx);
    T mg = (T)kn_rm_mean(sg, c), mgx = (T)kn_rm_mean(sgx, c);
#pragma unroll
    for (int k = 0; k < K; k++) {
        int j = lane + 32 * k;
        if (j < c) dr[j] = knc_rm_layernorm_dx(g[k], xv[k], mg, mgx, rstd);
    }
}

/* which: 0 layernorm (a = x, b1 = w, b2 = b), 1 normalize (a = x), 2 layernorm_dx (a = dy,
 * b1 = x, b2 = w); rows > 0, c <= 32 K. */
template <typename T, int K>
static kn_status norm_warp_launch(int which, const T *a, const T *b1, const T *b2, T *y, int64_t rows, int c, double eps) {
    unsigned g = (unsigned)((rows + KNC_NORM_WARPS - 1) / KNC_NORM_WARPS);
    if (which == 2) knc_layernorm_dx_warp<T, K><<<g, 32 * KNC_NORM_WARPS, 0, knc_stream>>>(a, b1, b2, y, rows, c, eps);
    else knc_layernorm_warp<T, K><<<g, 32 * KNC_NORM_WARPS, 0, knc_stream>>>(a, b1, b2, y, rows, c, eps);
    KNC_LAUNCHED(knc_layernorm_warp);
    return KN_OK;
}

/* ---------------------------------------------------------------- layernorm, a block per row */

/* Mean and 1/sqrt(var + eps) of a row, two passes in double (row_stats of the CPU). */
template <typename T>
__device__ inline void knc_row_stats(const T *x, int64_t c, double eps, double *sh, T *mean, T *rstd) {
    double m = 0, v = 0;
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) m += x[j];
    m = kn_rm_mean(knc_block_sum(m, sh), c);
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) { double d = x[j] - m; v += d * d; }
    *mean = (T)m;
    *rstd = knc_rm_rstd<T>(knc_block_sum(v, sh), c, eps);
}

template <typename T>
__global__ void knc_layernorm_rows(const T *x, const T *w, const T *b, T *y, int64_t c, double eps) {
    __shared__ double sh[32];
    const T *xr = x + blockIdx.x * c;
    T *yr = y + blockIdx.x * c, mean, rstd;
    knc_row_stats(xr, c, eps, sh, &mean, &rstd);
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x)
        yr[j] = w ? knc_rm_affine(xr[j], mean, rstd, w[j], b[j]) : knc_rm_normalize(xr[j], mean, rstd);
}

template <typename T>
__global__ void knc_layernorm_dx_rows(const T *dy, const T *x, const T *w, T *dx, int64_t c, double eps) {
    __shared__ double sh[32];
    const T *xr = x + blockIdx.x * c, *gr = dy + blockIdx.x * c;
    T *dr = dx + blockIdx.x * c, mean, rstd;
    knc_row_stats(xr, c, eps, sh, &mean, &rstd);
    double sg = 0, sgx = 0;
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
        T g = gr[j] * w[j], xh = knc_rm_normalize(xr[j], mean, rstd);
        sg += g;
        sgx += (double)g * xh;
    }
    sg = knc_block_sum(sg, sh);
    sgx = knc_block_sum(sgx, sh);
    T mg = (T)kn_rm_mean(sg, c), mgx = (T)kn_rm_mean(sgx, c);
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
        T g = gr[j] * w[j], xh = knc_rm_normalize(xr[j], mean, rstd);
        dr[j] = knc_rm_layernorm_dx(g, xh, mg, mgx, rstd);
    }
}

/* which: 0 layernorm, 1 normalize, 2 layernorm_dx. Rows of at most KNC_NORM_WARP_ROW
 * elements go to the warp kernels with the smallest K that holds them. */
template <typename T>
static kn_status norm_launch(const kn_node *n, const kn_tensor *const *in, kn_tensor *out, int which) {
    int64_t c = n->type.shape[n->type.ndim - 1], rows = c ? kn_type_numel(&n->type) / c : 0;
    if (rows == 0) return KN_OK;
    const T *a = (const T *)kn_tensor_data(in[0]);
    const T *b1 = which == 1 ? nullptr : (const T *)kn_tensor_data(in[1]);
    const T *b2 = which == 1 ? nullptr : (const T *)kn_tensor_data(in[2]);
    T *y = (T *)kn_tensor_data(out);
    double eps = n->attrs.eps;
    if (c <= KNC_NORM_WARP_ROW) {
        int ci = (int)c;
        if (c <= 32) return norm_warp_launch<T, 1>(which, a, b1, b2, y, rows, ci, eps);
        if (c <= 64) return norm_warp_launch<T, 2>(which, a, b1, b2, y, rows, ci, eps);
        if (c <= 128) return norm_warp_launch<T, 4>(which, a, b1, b2, y, rows, ci, eps);
        if (c <= 256) return norm_warp_launch<T, 8>(which, a, b1, b2, y, rows, ci, eps);
        if (c <= 512) return norm_warp_launch<T, 16>(which, a, b1, b2, y, rows, ci, eps);
        if (c <= 768) return norm_warp_launch<T, 24>(which, a, b1, b2, y, rows, ci, eps);
        return norm_warp_launch<T, 32>(which, a, b1, b2, y, rows, ci, eps);
    }
    if (which == 2) knc_layernorm_dx_rows<T><<<row_blocks(rows), KNC_THREADS, 0, knc_stream>>>(a, b1, b2, y, c, eps);
    else knc_layernorm_rows<T><<<row_blocks(rows), KNC_THREADS, 0, knc_stream>>>(a, b1, b2, y, c, eps);
    KNC_LAUNCHED(knc_layernorm_rows);
    return KN_OK;
}

static kn_status norm_any(const kn_node *n, const kn_tensor *const *in, kn_tensor **out, int which) {
    kn_dtype dt = n->type.dtype;
    if (!is_float(dt)) return knc_unsupported(n, dt);
    KN_TRY(knc_new_out(n, knc_dev(in), out));
    kn_status st = dt == KN_DT_F32 ? norm_launch<float>(n, in, *out, which) : norm_launch<double>(n, in, *out, which);
    if (st != KN_OK) { kn_tensor_free(*out); *out = NULL; }
    return st;
}

KNC_KERNEL(knc_layernorm) { return norm_any(n, in, out, 0); }
KNC_KERNEL(knc_normalize) { return norm_any(n, in, out, 1); }
KNC_KERNEL(knc_layernorm_dx) { return norm_any(n, in, out, 2); }
