/* cuda_reduce.cu — the CUDA kernels that reduce: sum/mean/max over axes, softmax and
 * log_softmax (+ backward), layernorm / normalize (+ dx), cross_entropy (+ backward).
 *
 * Layout: like the CPU, every op sees its operand as [outer, n, inner] around the reduced
 * axis (or as rows of the last axis). When inner == 1 (the reduced elements are adjacent:
 * softmax over the last axis, layernorm, a reduction over trailing axes) one block of 256
 * threads owns a row: each thread sums a fixed, strided subset, then knc_block_sum adds the
 * partials with warp shuffles in a fixed tree. Otherwise the reduced axis has a stride:
 * a reduction gives each 32 adjacent columns a block whose thread rows split the column and
 * add their partials in order; softmax gives one thread a column, walked sequentially
 * (adjacent threads read adjacent addresses: coalesced either way).
 * Either way each output is one fixed sequence of operations: deterministic.
 *
 * Precision follows the CPU template: sums, statistics and log-sum-exps accumulate in
 * double; the per-element arithmetic is done in the operand's type. The max of softmax
 * and cross_entropy skips NaN (a `>` comparison, as on the CPU); the max reduction lets
 * NaN win. Reductions over axes that are not one adjacent block are first moved to the end
 * by a strided copy. */
#include "runtime/cuda_impl.h"

#define KNC_FOR(i, total) \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (total); i += (int64_t)gridDim.x * blockDim.x)

/* Blocks for one block per row (rows fit in a grid's x dimension: < 2^31). */
static inline unsigned row_blocks(int64_t rows) { return (unsigned)(rows > 0 ? rows : 1); }

static bool is_float(kn_dtype dt) { return dt == KN_DT_F32 || dt == KN_DT_F64; }

/* ---------------------------------------------------------------- sum / mean / max */

template <typename T>
__global__ void knc_reduce_rows(int op, const T *x, T *y, int64_t r) {
    __shared__ double sh[32];
    const T *row = x + blockIdx.x * r;
    bool is_max = op == KN_OP_MAX;
    double acc = is_max ? -INFINITY : 0.0;
    for (int64_t q = threadIdx.x; q < r; q += blockDim.x) acc = is_max ? knc_max2(acc, (double)row[q]) : acc + row[q];
    acc = is_max ? knc_block_max(acc, sh) : knc_block_sum(acc, sh);
    if (threadIdx.x == 0) y[blockIdx.x] = (T)(op == KN_OP_MEAN ? acc / (double)r : acc);
}

/* Columns: block (32, by) covers 32 adjacent columns of one outer index; thread row ty
 * sums rows ty, ty + by, ... of its column, then thread row 0 adds the by partials in
 * order. Fixed shapes, fixed order: deterministic. */
template <typename T>
__global__ void knc_reduce_cols(int op, const T *x, T *y, int64_t outer, int64_t r, int64_t inner) {
    __shared__ double sh[32][33];
    bool is_max = op == KN_OP_MAX;
    int64_t i = blockIdx.x * (int64_t)32 + threadIdx.x;
    for (int64_t o = blockIdx.y; o < outer; o += gridDim.y) {
        double acc = is_max ? -INFINITY : 0.0;
        if (i < inner) {
            const T *col = x + o * r * inner + i;
            for (int64_t q = threadIdx.y; q < r; q += blockDim.y) {
                T v = col[q * inner];
                if (is_max) { if (v > acc || v != v) acc = v; }
                else acc += v;
            }
        }
        sh[threadIdx.y][threadIdx.x] = acc;
        __syncthreads();
        if (threadIdx.y == 0 && i < inner) {
            double a = sh[0][threadIdx.x];
            for (unsigned k = 1; k < blockDim.y; k++) a = is_max ? knc_max2(a, sh[k][threadIdx.x]) : a + sh[k][threadIdx.x];
            y[o * inner + i] = (T)(op == KN_OP_MEAN ? a / (double)r : a);
        }
        __syncthreads();
    }
}

template <typename T>
static kn_status reduce_launch(int op, const void *x, void *y, int64_t outer, int64_t r, int64_t inner) {
    if (inner == 1) {
        knc_reduce_rows<T><<<row_blocks(outer), KNC_THREADS>>>(op, (const T *)x, (T *)y, r);
        KNC_LAUNCHED(knc_reduce_rows);
    } else {
        unsigned by = r >= 256 ? 32 : r >= 32 ? 8 : 1;
        dim3 grid((unsigned)((inner + 31) / 32), (unsigned)(outer < 65535 ? outer : 65535)), block(32, by);
        knc_reduce_cols<T><<<grid, block>>>(op, (const T *)x, (T *)y, outer, r, inner);
        KNC_LAUNCHED(knc_reduce_cols);
    }
    return KN_OK;
}

KNC_KERNEL(knc_reduce) {
    const kn_tensor *x = in[0];
    if (!is_float(x->dtype)) return knc_unsupported(n, x->dtype);
    unsigned mask;
    kn_ir_reduce_mask(&n->attrs, x->ndim, &mask);
    int first = -1, last = -1;
    bool block = true;
    for (int i = 0; i < x->ndim; i++)
        if (mask & (1u << i)) { if (first < 0) first = i; else if (last != i - 1) block = false; last = i; }
    if (first < 0) first = last = x->ndim;
    int64_t outer = 1, r = 1, inner = 1;
    const void *src = kn_tensor_data(x);
    kn_tensor *tmp = NULL;
    if (block) {
        for (int i = 0; i < first; i++) outer *= x->shape[i];
        for (int i = first; i <= last && i < x->ndim; i++) r *= x->shape[i];
        for (int i = last + 1; i < x->ndim; i++) inner *= x->shape[i];
    } else { /* move the reduced axes last with a copy, then reduce rows */
        int64_t st[KN_MAX_DIMS], pst[KN_MAX_DIMS], psh[KN_MAX_DIMS], dst[KN_MAX_DIMS], s = 1;
        int k = 0;
        for (int i = x->ndim - 1; i >= 0; i--) { st[i] = s; s *= x->shape[i]; }
        for (int i = 0; i < x->ndim; i++) if (!(mask & (1u << i))) { psh[k] = x->shape[i]; pst[k++] = st[i]; outer *= x->shape[i]; }
        for (int i = 0; i < x->ndim; i++) if (mask & (1u << i)) { psh[k] = x->shape[i]; pst[k++] = st[i]; r *= x->shape[i]; }
        s = 1;
        for (int i = x->ndim - 1; i >= 0; i--) { dst[i] = s; s *= psh[i]; }
        KN_TRY(kn_tensor_empty_on(&tmp, knc_dev(in), x->dtype, x->ndim, psh));
        kn_status st2 = knc_strided_copy(kn_dtype_size(x->dtype), x->ndim, psh, src, pst, kn_tensor_data(tmp), dst);
        if (st2 != KN_OK) { kn_tensor_free(tmp); return st2; }
        src = kn_tensor_data(tmp);
    }
    kn_status st = knc_new_out(n, knc_dev(in), out);
    if (st == KN_OK && outer * inner > 0)
        st = x->dtype == KN_DT_F32 ? reduce_launch<float>((int)n->op, src, kn_tensor_data(*out), outer, r, inner)
                                   : reduce_launch<double>((int)n->op, src, kn_tensor_data(*out), outer, r, inner);
    if (st != KN_OK && *out) { kn_tensor_free(*out); *out = NULL; }
    kn_tensor_free(tmp); /* stream order: the kernel reading it runs before any reuse */
    return st;
}

/* ---------------------------------------------------------------- softmax */

template <typename T>
__global__ void knc_softmax_rows(const T *x, T *y, int64_t n, bool is_log) {
    __shared__ double sh[32];
    const T *xr = x + blockIdx.x * n;
    T *yr = y + blockIdx.x * n;
    double m = -INFINITY;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = fmax(m, (double)xr[j]); /* NaN skipped */
    for (int o = 16; o > 0; o >>= 1) m = fmax(m, __shfl_down_sync(0xffffffffu, m, o));
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    if (lane == 0) sh[w] = m;
    __syncthreads();
    if (w == 0) {
        m = lane < nw ? sh[lane] : -INFINITY;
        for (int o = 16; o > 0; o >>= 1) m = fmax(m, __shfl_down_sync(0xffffffffu, m, o));
        if (lane == 0) sh[0] = m;
    }
    __syncthreads();
    T mx = (T)sh[0];
    if (mx == -INFINITY) { /* a fully masked row */
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) yr[j] = is_log ? (T)-INFINITY : (T)0;
        return;
    }
    double s = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += knc_exp(xr[j] - mx);
    s = knc_block_sum(s, sh);
    if (is_log) {
        T lse = mx + (T)knc_log((T)s);
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) yr[j] = xr[j] - lse;
    } else {
        T inv = (T)(1.0 / s);
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) yr[j] = knc_exp(xr[j] - mx) * inv;
    }
}

template <typename T>
__global__ void knc_softmax_cols(const T *x, T *y, int64_t outer, int64_t n, int64_t inner, bool is_log) {
    KNC_FOR(e, outer * inner) {
        int64_t o = e / inner, i = e - o * inner, base = o * n * inner + i;
        T mx = -INFINITY;
        for (int64_t j = 0; j < n; j++) if (x[base + j * inner] > mx) mx = x[base + j * inner];
        if (mx == -INFINITY) {
            for (int64_t j = 0; j < n; j++) y[base + j * inner] = is_log ? (T)-INFINITY : (T)0;
            continue;
        }
        double s = 0;
        for (int64_t j = 0; j < n; j++) s += knc_exp(x[base + j * inner] - mx);
        if (is_log) {
            T lse = mx + (T)knc_log((T)s);
            for (int64_t j = 0; j < n; j++) y[base + j * inner] = x[base + j * inner] - lse;
        } else {
            T inv = (T)(1.0 / s);
            for (int64_t j = 0; j < n; j++) y[base + j * inner] = knc_exp(x[base + j * inner] - mx) * inv;
        }
    }
}

template <typename T>
__global__ void knc_softmax_bwd_rows(const T *dy, const T *y, T *dx, int64_t n, bool is_log) {
    __shared__ double sh[32];
    int64_t base = blockIdx.x * n;
    double s = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += is_log ? (double)dy[base + j] : (double)dy[base + j] * y[base + j];
    s = knc_block_sum(s, sh);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        dx[base + j] = is_log ? dy[base + j] - knc_exp(y[base + j]) * (T)s : y[base + j] * (dy[base + j] - (T)s);
}

template <typename T>
__global__ void knc_softmax_bwd_cols(const T *dy, const T *y, T *dx, int64_t outer, int64_t n, int64_t inner, bool is_log) {
    KNC_FOR(e, outer * inner) {
        int64_t o = e / inner, i = e - o * inner, base = o * n * inner + i;
        double s = 0;
        for (int64_t j = 0; j < n; j++) {
            int64_t k = base + j * inner;
            s += is_log ? (double)dy[k] : (double)dy[k] * y[k];
        }
        for (int64_t j = 0; j < n; j++) {
            int64_t k = base + j * inner;
            dx[k] = is_log ? dy[k] - knc_exp(y[k]) * (T)s : y[k] * (dy[k] - (T)s);
        }
    }
}

static void axis_split(const kn_type *t, int64_t axis, int64_t *outer, int64_t *len, int64_t *inner) {
    int ax = (int)(axis < 0 ? axis + t->ndim : axis);
    *outer = *inner = 1;
    for (int i = 0; i < ax; i++) *outer *= t->shape[i];
    for (int i = ax + 1; i < t->ndim; i++) *inner *= t->shape[i];
    *len = t->shape[ax];
}

template <typename T>
static kn_status softmax_launch(const kn_node *n, const kn_tensor *const *in, kn_tensor *out, bool bwd) {
    int64_t o, l, i;
    axis_split(&n->type, n->attrs.axis, &o, &l, &i);
    if (o * l * i == 0) return KN_OK;
    bool lg = n->op == KN_OP_LOG_SOFTMAX || n->op == KN_OP_LOG_SOFTMAX_BWD;
    const T *a = (const T *)kn_tensor_data(in[0]);
    T *y = (T *)kn_tensor_data(out);
    if (!bwd && i == 1) knc_softmax_rows<T><<<row_blocks(o), KNC_THREADS>>>(a, y, l, lg);
    else if (!bwd) knc_softmax_cols<T><<<knc_blocks(o * i), KNC_THREADS>>>(a, y, o, l, i, lg);
    else if (i == 1) knc_softmax_bwd_rows<T><<<row_blocks(o), KNC_THREADS>>>(a, (const T *)kn_tensor_data(in[1]), y, l, lg);
    else knc_softmax_bwd_cols<T><<<knc_blocks(o * i), KNC_THREADS>>>(a, (const T *)kn_tensor_data(in[1]), y, o, l, i, lg);
    KNC_LAUNCHED(knc_softmax);
    return KN_OK;
}

static kn_status softmax_any(const kn_node *n, const kn_tensor *const *in, kn_tensor **out, bool bwd) {
    kn_dtype dt = n->type.dtype;
    if (!is_float(dt)) return knc_unsupported(n, dt);
    KN_TRY(knc_new_out(n, knc_dev(in), out));
    kn_status st = dt == KN_DT_F32 ? softmax_launch<float>(n, in, *out, bwd) : softmax_launch<double>(n, in, *out, bwd);
    if (st != KN_OK) { kn_tensor_free(*out); *out = NULL; }
    return st;
}

KNC_KERNEL(knc_softmax) { return softmax_any(n, in, out, false); }
KNC_KERNEL(knc_softmax_bwd) { return softmax_any(n, in, out, true); }

/* ---------------------------------------------------------------- layernorm */

/* Mean and 1/sqrt(var + eps) of a row, two passes in double (row_stats of the CPU). */
template <typename T>
__device__ inline void knc_row_stats(const T *x, int64_t c, double eps, double *sh, T *mean, T *rstd) {
    double m = 0, v = 0;
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) m += x[j];
    m = knc_block_sum(m, sh) / (double)c;
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) { double d = x[j] - m; v += d * d; }
    v = knc_block_sum(v, sh) / (double)c;
    *mean = (T)m;
    *rstd = (T)(1.0 / sqrt(v + eps));
}

template <typename T>
__global__ void knc_layernorm_rows(const T *x, const T *w, const T *b, T *y, int64_t c, double eps) {
    __shared__ double sh[32];
    const T *xr = x + blockIdx.x * c;
    T *yr = y + blockIdx.x * c, mean, rstd;
    knc_row_stats(xr, c, eps, sh, &mean, &rstd);
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x)
        yr[j] = w ? (xr[j] - mean) * rstd * w[j] + b[j] : (xr[j] - mean) * rstd;
}

template <typename T>
__global__ void knc_layernorm_dx_rows(const T *dy, const T *x, const T *w, T *dx, int64_t c, double eps) {
    __shared__ double sh[32];
    const T *xr = x + blockIdx.x * c, *gr = dy + blockIdx.x * c;
    T *dr = dx + blockIdx.x * c, mean, rstd;
    knc_row_stats(xr, c, eps, sh, &mean, &rstd);
    double sg = 0, sgx = 0;
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
        T g = gr[j] * w[j], xh = (xr[j] - mean) * rstd;
        sg += g;
        sgx += (double)g * xh;
    }
    sg = knc_block_sum(sg, sh);
    sgx = knc_block_sum(sgx, sh);
    T mg = (T)(sg / (double)c), mgx = (T)(sgx / (double)c);
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
        T g = gr[j] * w[j], xh = (xr[j] - mean) * rstd;
        dr[j] = rstd * (g - mg - xh * mgx);
    }
}

/* which: 0 layernorm, 1 normalize, 2 layernorm_dx. */
template <typename T>
static kn_status norm_launch(const kn_node *n, const kn_tensor *const *in, kn_tensor *out, int which) {
    int64_t c = n->type.shape[n->type.ndim - 1], rows = c ? kn_type_numel(&n->type) / c : 0;
    if (rows == 0) return KN_OK;
    const T *a = (const T *)kn_tensor_data(in[0]);
    T *y = (T *)kn_tensor_data(out);
    if (which == 2)
        knc_layernorm_dx_rows<T><<<row_blocks(rows), KNC_THREADS>>>(a, (const T *)kn_tensor_data(in[1]), (const T *)kn_tensor_data(in[2]),
                                                                     y, c, n->attrs.eps);
    else
        knc_layernorm_rows<T><<<row_blocks(rows), KNC_THREADS>>>(a, which ? nullptr : (const T *)kn_tensor_data(in[1]),
                                                                  which ? nullptr : (const T *)kn_tensor_data(in[2]), y, c, n->attrs.eps);
    KNC_LAUNCHED(knc_layernorm);
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

/* ---------------------------------------------------------------- cross_entropy */

/* log(sum(exp(row - max))) + max in double, max skipping NaN; all threads get it. */
template <typename T>
__device__ inline double knc_row_lse(const T *row, int64_t v, double *sh) {
    double m = -INFINITY;
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) m = fmax(m, (double)row[j]);
    for (int o = 16; o > 0; o >>= 1) m = fmax(m, __shfl_down_sync(0xffffffffu, m, o));
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    __syncthreads();
    if (lane == 0) sh[w] = m;
    __syncthreads();
    if (w == 0) {
        m = lane < nw ? sh[lane] : -INFINITY;
        for (int o = 16; o > 0; o >>= 1) m = fmax(m, __shfl_down_sync(0xffffffffu, m, o));
        if (lane == 0) sh[0] = m;
    }
    __syncthreads();
    T mx = (T)sh[0];
    double s = 0;
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) s += knc_exp(row[j] - mx);
    s = knc_block_sum(s, sh);
    return log(s) + (double)mx;
}

__device__ inline int64_t knc_target(const void *t, bool i32, int64_t r) {
    return i32 ? (int64_t)((const int32_t *)t)[r] : ((const int64_t *)t)[r];
}

template <typename T>
__global__ void knc_ce_rows(const T *logits, const void *t, bool i32, int64_t v, double *term) {
    __shared__ double sh[32];
    const T *row = logits + blockIdx.x * v;
    double lse = knc_row_lse(row, v, sh);
    if (threadIdx.x == 0) term[blockIdx.x] = lse - (double)row[knc_target(t, i32, blockIdx.x)];
}

template <typename T>
__global__ void knc_ce_total(const double *term, int64_t rows, T *loss) {
    __shared__ double sh[32];
    double s = 0;
    for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) s += term[r];
    s = knc_block_sum(s, sh);
    if (threadIdx.x == 0) *loss = (T)(rows > 0 ? s / (double)rows : 0.0);
}

template <typename T>
__global__ void knc_ce_bwd_rows(const T *dloss, const T *logits, const void *t, bool i32, int64_t rows, int64_t v, T *dlogits) {
    __shared__ double sh[32];
    const T *row = logits + blockIdx.x * v;
    T *dr = dlogits + blockIdx.x * v;
    T scale = (T)((double)*dloss / (double)rows);
    T lse = (T)knc_row_lse(row, v, sh);
    int64_t tg = knc_target(t, i32, blockIdx.x);
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
        T g = knc_exp(row[j] - lse) * scale;
        dr[j] = j == tg ? g - scale : g;
    }
}

/* Targets checked on the host (KN_ERR_ARG naming the first bad one, as the CPU does). */
static kn_status check_targets(const kn_node *n, const kn_tensor *t, int64_t v) {
    int64_t *h = NULL, cnt = kn_tensor_numel(t);
    KN_TRY(knc_indices_to_host(t, &h));
    kn_status st = KN_OK;
    for (int64_t i = 0; i < cnt; i++)
        if (h[i] < 0 || h[i] >= v) {
            st = kn_error(KN_ERR_ARG, "%s: index %lld at position %lld is outside [0, %lld)", kn_op_name(n->op),
                          (long long)h[i], (long long)i, (long long)v);
            break;
        }
    kn_free(h);
    return st;
}

template <typename T>
static kn_status ce_launch(const kn_tensor *const *in, kn_tensor *out, bool bwd) {
    const kn_tensor *lg = bwd ? in[1] : in[0], *t = bwd ? in[2] : in[1];
    int64_t v = lg->shape[lg->ndim - 1], rows = kn_tensor_numel(t);
    bool i32 = t->dtype == KN_DT_I32;
    if (bwd) {
        if (rows * v == 0) return KN_OK;
        knc_ce_bwd_rows<T><<<row_blocks(rows), KNC_THREADS>>>((const T *)kn_tensor_data(in[0]), (const T *)kn_tensor_data(lg),
                                                              kn_tensor_data(t), i32, rows, v, (T *)kn_tensor_data(out));
        KNC_LAUNCHED(knc_ce_bwd_rows);
        return KN_OK;
    }
    kn_tensor *term = NULL;
    int64_t tshape[1] = {rows};
    KN_TRY(kn_tensor_empty_on(&term, knc_dev(in), KN_DT_F64, 1, tshape));
    kn_status st = KN_OK;
    if (rows > 0) {
        knc_ce_rows<T><<<row_blocks(rows), KNC_THREADS>>>((const T *)kn_tensor_data(lg), kn_tensor_data(t), i32, v,
                                                           (double *)kn_tensor_data(term));
        st = knc_check_launch("knc_ce_rows", __FILE__, __LINE__);
    }
    if (st == KN_OK) {
        knc_ce_total<T><<<1, KNC_THREADS>>>((const double *)kn_tensor_data(term), rows, (T *)kn_tensor_data(out));
        st = knc_check_launch("knc_ce_total", __FILE__, __LINE__);
    }
    kn_tensor_free(term);
    return st;
}

static kn_status ce_any(const kn_node *n, const kn_tensor *const *in, kn_tensor **out, bool bwd) {
    const kn_tensor *lg = bwd ? in[1] : in[0], *t = bwd ? in[2] : in[1];
    if (!is_float(lg->dtype)) return knc_unsupported(n, lg->dtype);
    if (bwd && in[0]->dtype != lg->dtype) return knc_unsupported(n, in[0]->dtype);
    KN_TRY(check_targets(n, t, lg->shape[lg->ndim - 1]));
    KN_TRY(knc_new_out(n, knc_dev(in), out));
    kn_status st = lg->dtype == KN_DT_F32 ? ce_launch<float>(in, *out, bwd) : ce_launch<double>(in, *out, bwd);
    if (st != KN_OK) { kn_tensor_free(*out); *out = NULL; }
    return st;
}

KNC_KERNEL(knc_cross_entropy) { return ce_any(n, in, out, false); }
KNC_KERNEL(knc_cross_entropy_bwd) { return ce_any(n, in, out, true); }
