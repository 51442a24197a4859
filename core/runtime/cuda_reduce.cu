/* cuda_reduce.cu — the CUDA kernels that reduce: sum/mean/max over axes, softmax and
 * log_softmax (+ backward). (layernorm, normalize and cross_entropy, which also make
 * statistics of rows, live in cuda_norm.cu and cuda_cross_entropy.cu.)
 *
 * Layout: like the CPU, every op sees its operand as [outer, n, inner] around the reduced
 * axis (or as rows of the last axis). When inner == 1 (the reduced elements are adjacent:
 * softmax over the last axis, a reduction over trailing axes) one block of 256
 * threads owns a row: each thread sums a fixed, strided subset, then knc_block_sum adds the
 * partials with warp shuffles in a fixed tree (a sum/mean/max over rows of at most 1024
 * elements gives a warp a row instead). Otherwise the reduced axis has a stride: a
 * reduction gives each 32 adjacent columns (or 32 groups of 4 floats or 2 doubles, read
 * with 16-byte loads) a block whose thread rows split the columns and add their partials
 * in a fixed tree; softmax gives one thread a column, walked sequentially (adjacent
 * threads read adjacent addresses: coalesced either way). A sum/mean/max that would
 * launch too few blocks to fill the GPU (the bias gradient [8192,768] summed over rows:
 * 6 blocks of 128 columns) splits the reduced axis into chunks and adds the chunks'
 * partials in a second pass (see red_chunks).
 * Either way each output is one fixed sequence of operations: deterministic.
 *
 * The backwards' per-element formulas are tensor/rowmath.h's, the CPU kernels' own.
 * Precision follows the CPU template: sums and softmax's sum of exponentials
 * accumulate in double; the per-element arithmetic is done in the operand's type. The max
 * of softmax skips NaN (a `>` comparison, as on the CPU); the max reduction lets NaN win. Reductions over axes that are not one adjacent block are first moved to the end
 * by a strided copy. */
#include "runtime/cuda_impl.h"

#define KNC_FOR(i, total) \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (total); i += (int64_t)gridDim.x * blockDim.x)

/* Blocks for one block per row (rows fit in a grid's x dimension: < 2^31). */
static inline unsigned row_blocks(int64_t rows) { return (unsigned)(rows > 0 ? rows : 1); }

static bool is_float(kn_dtype dt) { return dt == KN_DT_F32 || dt == KN_DT_F64; }

/* ---------------------------------------------------------------- sum / mean / max */

/* Splitting the reduced axis: when one pass would launch fewer than KNC_RED_TARGET blocks
 * (about 4 per SM of a 132-SM H100), the reduced axis is cut into nchunk chunks of
 * `chunk` elements, pass 1 writes each chunk's partial (a sum or a max, in double) to a
 * temporary [outer, nchunk, inner], and pass 2 (knc_reduce_parts) combines each output's
 * partials in a fixed order (a warp per output). The split depends on the shape alone (constants, not the
 * GPU's SM count), so a given reduction is the same sequence of additions on every run
 * and every GPU. Chunks are at least KNC_RED_COL_CHUNK rows of a column reduction and
 * KNC_RED_ROW_CHUNK elements of a row. */
#define KNC_RED_TARGET 512
#define KNC_RED_COL_CHUNK 64
#define KNC_RED_ROW_CHUNK 8192
/* Rows up to this length get one warp each (8 rows per block) instead of a block. */
#define KNC_RED_WARP_ROW 1024

__device__ inline double knc_red_add(bool is_max, double acc, double v) { return is_max ? knc_max2(acc, v) : acc + v; }

/* The output value of a finished sum or max over r elements. */
template <typename T>
__device__ inline T knc_red_final(int op, double acc, int64_t r) {
    return (T)(op == KN_OP_MEAN ? acc / (double)r : acc);
}

/* Rows (inner == 1), a block per (row, chunk): block b takes chunk b % nchunk of row
 * b / nchunk; each thread sums a fixed strided subset, knc_block_sum / knc_block_max
 * combine them in a fixed tree. part == NULL (nchunk == 1): the final value goes to y. */
template <typename T>
__global__ void knc_reduce_rows(int op, const T *x, T *y, double *part, int64_t r, int64_t chunk, int64_t nchunk) {
    __shared__ double sh[32];
    int64_t row = blockIdx.x / nchunk, c = blockIdx.x - row * nchunk;
    int64_t q0 = c * chunk, q1 = q0 + chunk < r ? q0 + chunk : r;
    const T *p = x + row * r;
    bool is_max = op == KN_OP_MAX;
    double acc = is_max ? -INFINITY : 0.0;
    for (int64_t q = q0 + threadIdx.x; q < q1; q += blockDim.x) acc = knc_red_add(is_max, acc, (double)p[q]);
    acc = is_max ? knc_block_max(acc, sh) : knc_block_sum(acc, sh);
    if (threadIdx.x != 0) return;
    if (part) part[blockIdx.x] = acc;
    else y[row] = knc_red_final<T>(op, acc, r);
}

/* Short rows: a warp per row (rows, blockDim.x / 32 per block); lane l sums elements l,
 * l + 32, ..., then the lanes' sums meet in a fixed shuffle tree. A warp's row is the same
 * for all its lanes, so whole warps leave together and the shuffles see all 32 lanes. */
template <typename T>
__global__ void knc_reduce_rows_warp(int op, const T *x, T *y, int64_t rows, int64_t r) {
    int lane = threadIdx.x & 31;
    int64_t row = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= rows) return;
    const T *p = x + row * r;
    bool is_max = op == KN_OP_MAX;
    double acc = is_max ? -INFINITY : 0.0;
    for (int64_t q = lane; q < r; q += 32) acc = knc_red_add(is_max, acc, (double)p[q]);
    for (int o = 16; o > 0; o >>= 1) acc = knc_red_add(is_max, acc, __shfl_down_sync(0xffffffffu, acc, o));
    if (lane == 0) y[row] = knc_red_final<T>(op, acc, r);
}

/* Columns (inner > 1): block (bx, by, c) covers 32 * V adjacent columns of chunk c (rows
 * [c * chunk, min(r, (c + 1) * chunk))) for outer indices by, by + gridDim.y, ...; each
 * thread owns V adjacent columns (V = 16 bytes / element size when inner is a multiple of
 * it and x is 16-byte aligned: one 16-byte load per row, else V = 1). Thread row ty sums
 * rows q0 + ty, q0 + ty + blockDim.y, ... of its columns, four loads in flight, added in
 * row order; then the blockDim.y partials (a power of 2) meet in a fixed tree in shared
 * memory. Fixed shapes, fixed order: deterministic. part == NULL (one chunk): final values to y; else partials
 * to part[o][c][i]. */
template <typename T, int V>
__global__ void knc_reduce_cols(int op, const T *x, T *y, double *part, int64_t outer, int64_t r, int64_t inner,
                                int64_t chunk) {
    typedef knc_pack<T, V> P;
    __shared__ double sh[32][32 * V + 1];
    bool is_max = op == KN_OP_MAX;
    int64_t i = (blockIdx.x * (int64_t)32 + threadIdx.x) * V, c = blockIdx.z, nchunk = gridDim.z;
    int64_t q0 = c * chunk, q1 = q0 + chunk < r ? q0 + chunk : r;
    for (int64_t o = blockIdx.y; o < outer; o += gridDim.y) {
        double acc[V];
        for (int j = 0; j < V; j++) acc[j] = is_max ? -INFINITY : 0.0;
        if (i < inner) { /* i + V <= inner: inner is a multiple of V */
            const T *col = x + o * r * inner + i;
            int64_t q = q0 + threadIdx.y, step = blockDim.y;
            for (; q + 3 * step < q1; q += 4 * step) {
                P v0 = *(const P *)(col + q * inner), v1 = *(const P *)(col + (q + step) * inner),
                  v2 = *(const P *)(col + (q + 2 * step) * inner), v3 = *(const P *)(col + (q + 3 * step) * inner);
                for (int j = 0; j < V; j++) {
                    acc[j] = knc_red_add(is_max, acc[j], (double)v0.v[j]);
                    acc[j] = knc_red_add(is_max, acc[j], (double)v1.v[j]);
                    acc[j] = knc_red_add(is_max, acc[j], (double)v2.v[j]);
                    acc[j] = knc_red_add(is_max, acc[j], (double)v3.v[j]);
                }
            }
            for (; q < q1; q += step) {
                P v0 = *(const P *)(col + q * inner);
                for (int j = 0; j < V; j++) acc[j] = knc_red_add(is_max, acc[j], (double)v0.v[j]);
            }
        }
        for (int j = 0; j < V; j++) sh[threadIdx.y][j * 32 + threadIdx.x] = acc[j];
        for (unsigned h = blockDim.y / 2; h > 0; h >>= 1) { /* blockDim.y is a power of 2 */
            __syncthreads();
            if (threadIdx.y < h)
                for (int j = 0; j < V; j++)
                    sh[threadIdx.y][j * 32 + threadIdx.x] =
                        knc_red_add(is_max, sh[threadIdx.y][j * 32 + threadIdx.x], sh[threadIdx.y + h][j * 32 + threadIdx.x]);
        }
        __syncthreads();
        if (threadIdx.y == 0 && i < inner) {
            for (int j = 0; j < V; j++) {
                double a = sh[0][j * 32 + threadIdx.x];
                if (part) part[(o * nchunk + c) * inner + i + j] = a;
                else y[o * inner + i + j] = knc_red_final<T>(op, a, r);
            }
        }
        __syncthreads();
    }
}

/* Pass 2: a warp per output e = (o, i) of the nout = outer * inner; lane l combines the
 * partials of chunks l, l + 32, ... in order, then the lanes meet in a fixed shuffle tree
 * (whole warps leave together, as in knc_reduce_rows_warp). */
template <typename T>
__global__ void knc_reduce_parts(int op, const double *part, T *y, int64_t nout, int64_t nchunk, int64_t inner, int64_t r) {
    bool is_max = op == KN_OP_MAX;
    int lane = threadIdx.x & 31;
    int64_t e = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
    if (e >= nout) return;
    int64_t o = e / inner, i = e - o * inner;
    const double *p = part + o * nchunk * inner + i;
    double a = is_max ? -INFINITY : 0.0;
    for (int64_t c = lane; c < nchunk; c += 32) a = knc_red_add(is_max, a, p[c * inner]);
    for (int d = 16; d > 0; d >>= 1) a = knc_red_add(is_max, a, __shfl_down_sync(0xffffffffu, a, d));
    if (lane == 0) y[e] = knc_red_final<T>(op, a, r);
}

/* How many chunks a reduction of r elements (pieces of at least min_chunk) gets when one
 * pass would have `blocks` blocks; *chunk is the chunk length (nchunk * chunk >= r and no
 * chunk is empty). */
static int64_t red_chunks(int64_t blocks, int64_t r, int64_t min_chunk, int64_t *chunk) {
    int64_t nchunk = 1;
    if (blocks < KNC_RED_TARGET && r >= 2 * min_chunk) {
        int64_t most = r / min_chunk;
        nchunk = (KNC_RED_TARGET + blocks - 1) / blocks;
        if (nchunk > most) nchunk = most;
    }
    *chunk = (r + nchunk - 1) / nchunk;
    return *chunk > 0 ? (r + *chunk - 1) / *chunk : 1;
}

/* [outer, r, inner] -> y[outer, inner] (outer * inner > 0), through a temporary of
 * partials on dev when the reduced axis is split. */
template <typename T>
static kn_status reduce_launch(int op, kn_device dev, const T *x, T *y, int64_t outer, int64_t r, int64_t inner) {
    constexpr int W = 16 / sizeof(T);
    int64_t chunk, nchunk, v = inner % W == 0 && ((uintptr_t)x & 15u) == 0 ? W : 1;
    unsigned gy = (unsigned)(outer < 65535 ? outer : 65535), gx = (unsigned)((inner + 32 * v - 1) / (32 * v));
    if (inner == 1 && r <= KNC_RED_WARP_ROW) {
        knc_reduce_rows_warp<T><<<(unsigned)((outer + 7) / 8), KNC_THREADS, 0, knc_stream>>>(op, x, y, outer, r);
        KNC_LAUNCHED(knc_reduce_rows_warp);
        return KN_OK;
    }
    if (inner == 1) nchunk = red_chunks(outer, r, KNC_RED_ROW_CHUNK, &chunk);
    else nchunk = red_chunks((int64_t)gx * gy, r, KNC_RED_COL_CHUNK, &chunk);
    kn_tensor *tmp = NULL;
    double *part = NULL;
    if (nchunk > 1) {
        int64_t pshape[1] = {outer * nchunk * inner};
        KN_TRY(kn_tensor_empty_on(&tmp, dev, KN_DT_F64, 1, pshape));
        part = (double *)kn_tensor_data(tmp);
    }
    kn_status st;
    if (inner == 1) {
        knc_reduce_rows<T><<<(unsigned)(outer * nchunk), KNC_THREADS, 0, knc_stream>>>(op, x, y, part, r, chunk, nchunk);
        st = knc_check_launch("knc_reduce_rows", __FILE__, __LINE__);
    } else {
        unsigned by = chunk >= 256 ? 32 : chunk >= 128 ? 16 : chunk >= 32 ? 8 : 1;
        dim3 grid(gx, gy, (unsigned)nchunk), block(32, by);
        if (v > 1) knc_reduce_cols<T, W><<<grid, block, 0, knc_stream>>>(op, x, y, part, outer, r, inner, chunk);
        else knc_reduce_cols<T, 1><<<grid, block, 0, knc_stream>>>(op, x, y, part, outer, r, inner, chunk);
        st = knc_check_launch("knc_reduce_cols", __FILE__, __LINE__);
    }
    if (st == KN_OK && part) {
        unsigned g = (unsigned)((outer * inner + KNC_THREADS / 32 - 1) / (KNC_THREADS / 32));
        knc_reduce_parts<T><<<g, KNC_THREADS, 0, knc_stream>>>(op, part, y, outer * inner, nchunk, inner, r);
        st = knc_check_launch("knc_reduce_parts", __FILE__, __LINE__);
    }
    kn_tensor_free(tmp); /* stream order: the kernels reading it run before any reuse */
    return st;
}

KNC_KERNEL(knc_reduce) {
    const kn_tensor *x = in[0];
    kn_reduce_op rop;
    if (!kn_op_reduce(n->op, &rop) || (rop != KN_REDUCE_SUM && rop != KN_REDUCE_MEAN && rop != KN_REDUCE_MAX))
        return knc_no_kernel(n, "knc_reduce");
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
    int op = (int)n->op;
    if (st == KN_OK && outer * inner > 0)
        st = x->dtype == KN_DT_F32
                 ? reduce_launch<float>(op, knc_dev(in), (const float *)src, (float *)kn_tensor_data(*out), outer, r, inner)
                 : reduce_launch<double>(op, knc_dev(in), (const double *)src, (double *)kn_tensor_data(*out), outer, r, inner);
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
        dx[base + j] = is_log ? knc_rm_log_softmax_dx(dy[base + j], knc_exp(y[base + j]), (T)s)
                              : knc_rm_softmax_dx(y[base + j], dy[base + j], (T)s);
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
            dx[k] = is_log ? knc_rm_log_softmax_dx(dy[k], knc_exp(y[k]), (T)s) : knc_rm_softmax_dx(y[k], dy[k], (T)s);
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
    if (!bwd && i == 1) knc_softmax_rows<T><<<row_blocks(o), KNC_THREADS, 0, knc_stream>>>(a, y, l, lg);
    else if (!bwd) knc_softmax_cols<T><<<knc_blocks(o * i), KNC_THREADS, 0, knc_stream>>>(a, y, o, l, i, lg);
    else if (i == 1) knc_softmax_bwd_rows<T><<<row_blocks(o), KNC_THREADS, 0, knc_stream>>>(a, (const T *)kn_tensor_data(in[1]), y, l, lg);
    else knc_softmax_bwd_cols<T><<<knc_blocks(o * i), KNC_THREADS, 0, knc_stream>>>(a, (const T *)kn_tensor_data(in[1]), y, o, l, i, lg);
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

KNC_KERNEL(knc_softmax) {
    if (n->op != KN_OP_SOFTMAX && n->op != KN_OP_LOG_SOFTMAX) return knc_no_kernel(n, "knc_softmax");
    return softmax_any(n, in, out, false);
}
KNC_KERNEL(knc_softmax_bwd) {
    if (n->op != KN_OP_SOFTMAX_BWD && n->op != KN_OP_LOG_SOFTMAX_BWD) return knc_no_kernel(n, "knc_softmax_bwd");
    return softmax_any(n, in, out, true);
}
