/* cuda_cross_entropy.cu — the CUDA kernels of cross_entropy (+ backward) and the fused
 * pair (kn_cuda_cross_entropy_fused, kiln/cuda.h: each row's loss term and its gradient
 * from one read of the logits). A block reads a whole row of the logits, makes its
 * statistics, then writes; the work is memory bound, so the design goal is to read every
 * input byte from global memory once (twice for the gradient) and to keep enough loads in
 * flight to run at the copy bandwidth. A file of its own, beside the norms' rows
 * (cuda_norm.cu): these rows are the vocabulary's, tens of thousands long, a block each,
 * with their one-pass log-sum-exp, the 16-byte loads and the fused pair.
 *
 * Cross entropy: a block per row (v = 50304 for the GPT). The statistics of a row are its
 * max m and s = sum(exp(x - m)); both come from ONE pass by keeping a running pair per
 * thread: when an element exceeds m, s is rescaled by exp(m_old - m_new). The pairs meet
 * in a fixed tree (warp shuffles, then the warps' pairs by warp 0), merged as m = max(m1,
 * m2), s = s1 * exp(m1 - m) + s2 * exp(m2 - m), and lse = log(s) + m. The forward then needs
 * no second pass (term = lse - row[target]); the backward reads the row a second time to
 * write softmax - onehot, scaled. Threads take the row in groups of 16 bytes (4 floats or
 * 2 doubles): thread t groups t, t + 256, ... (two in flight), read with one 16-byte load
 * when the rows are 16-byte aligned (v a multiple of the group and the base aligned), else
 * element by element (the same groups in the same order, so both compute the same
 * sums).
 *
 * Numerics follow core/tensor/kernels_train.inc: statistics and sums in double, the
 * per-element formulas in the operand type, tensor/rowmath.h's, which the CPU kernels call
 * too (each exp(x - m) of the log-sum-exp, added to a double; the gradient exp(x - lse) * scale; in f32
 * that exp is the special function unit's, knc_ce_exp, where the CPU's is expf). The max skips NaN (a `>` comparison), a NaN element makes
 * the sum NaN, and a row with no element above -inf (all -inf or NaN) has lse NaN, as the
 * CPU's exp(-inf - -inf) makes it; a -inf element otherwise adds exactly 0, and the merge
 * never subtracts two equal infinities (equal maxima get the factor 1). Every output is
 * one fixed sequence of operations for a given shape: deterministic, run after run. */
#include "runtime/cuda_impl.h"

/* Blocks for one block per row (rows fit in a grid's x dimension: < 2^31). */
static inline unsigned row_blocks(int64_t rows) { return (unsigned)(rows > 0 ? rows : 1); }

static bool is_float(kn_dtype dt) { return dt == KN_DT_F32 || dt == KN_DT_F64; }

/* ---------------------------------------------------------------- cross_entropy */

/* A row of storage type S (f32, f64, or bf16/f16 logits, whose math is f32:
 * knc_math) is read in groups of KNC_CE_V(S) elements (16 bytes): group g is elements
 * [g V, g V + V) clipped to the row. */
#define KNC_CE_V(S) ((int)(16 / sizeof(S)))

/* Group g of a row of v elements, widened to the math type T: one 16-byte load (VEC: v %
 * V == 0, row 16-byte aligned), else element by element with -inf past the end (-inf adds
 * nothing to the statistics). */
template <typename S, bool VEC, typename T = typename knc_math<S>::type>
__device__ inline knc_pack<T, KNC_CE_V(S)> knc_ce_load(const S *row, int64_t g, int64_t v) {
    constexpr int V = KNC_CE_V(S);
    knc_pack<T, V> p;
    if constexpr (VEC) {
        knc_pack<S, V> q = *(const knc_pack<S, V> *)(row + g * V);
#pragma unroll
        for (int i = 0; i < V; i++) p.v[i] = knc_widen(q.v[i]);
    } else {
#pragma unroll
        for (int i = 0; i < V; i++) p.v[i] = g * V + i < v ? knc_widen(row[g * V + i]) : (T)-INFINITY;
    }
    return p;
}

/* exp for the loss's rows. f32 (and the 16-bit logits, whose math is f32): 2^(x log2 e)
 * on the special function unit (ex2.approx.ftz: one multiply and one MUFU instruction
 * where expf takes about ten), since ncu showed the forward compute-bound (H200,
 * 2026-11-27: SM 86-88% busy, DRAM 63% for f32 logits, 32% for bf16, 540 us for
 * [8192, 50304] either way). Its relative error is about 2^-22 plus the rounding of the
 * product, x log2 e, which every argument here keeps small where it matters (x - max <= 0;
 * the terms that carry the sum are near exp(0)); a result below 2^-126 flushes to 0, where
 * the CPU keeps a subnormal that adds nothing to a sum >= 1. The f32 kernels agree with the
 * CPU to the tests' 1e-4 normwise (measured ~1e-6). f64 keeps exp. ex2.approx(-inf) = 0 and
 * NaN stays NaN, as exp. */
__device__ inline float knc_ce_exp(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
    return y;
}
__device__ inline double knc_ce_exp(double x) { return exp(x); }

/* Fold a group into a thread's running pair: m, the max of the elements seen (NaN never
 * wins a `>`), and s, the sum of exp(x - m) over them, in double (each group's terms summed
 * in the math type first). m first rises to the
 * group's max (s rescaled by exp(m_old - m_new), never inf - inf: m_new > m_old), so every
 * x - m <= 0 and no exp overflows. A -inf element adds exactly 0 (exp(-inf - m) for every
 * m > -inf; m == -inf at the end is settled by knc_block_lse); NaN makes s NaN; an element
 * +inf makes m = +inf and adds exp(inf - inf) = NaN, as on the CPU. */
template <typename T, int V>
__device__ inline void knc_lse_fold(const knc_pack<T, V> &p, T &m, double &s) {
    T pm = m;
#pragma unroll
    for (int i = 0; i < V; i++)
        if (p.v[i] > pm) pm = p.v[i];
    if (pm > m) {
        s *= exp((double)m - (double)pm);
        m = pm;
    }
    T part = 0; /* the group's V terms (each <= 1) in T, then one widening add: a double add and a
                 * conversion per element made the bf16 scan compute-bound on the H100 */
#pragma unroll
    for (int i = 0; i < V; i++) part += p.v[i] == (T)-INFINITY ? (T)0 : knc_ce_exp(p.v[i] - m);
    s += (double)part;
}

/* The running pair of thread threadIdx.x over its groups threadIdx.x, + blockDim.x, ...
 * of a row of v elements, four groups in flight (then two, then one), folded in group
 * order: the same pair, bit for bit, however many are in flight. */
template <typename S, bool VEC, typename T = typename knc_math<S>::type>
__device__ inline void knc_lse_scan(const S *row, int64_t v, T &m, double &s) {
    constexpr int V = KNC_CE_V(S);
    int64_t ng = (v + V - 1) / V, step = blockDim.x, g = threadIdx.x;
    m = (T)-INFINITY;
    s = 0;
    for (; g + 3 * step < ng; g += 4 * step) {
        knc_pack<T, V> a = knc_ce_load<S, VEC>(row, g, v), b = knc_ce_load<S, VEC>(row, g + step, v),
                       c = knc_ce_load<S, VEC>(row, g + 2 * step, v), d = knc_ce_load<S, VEC>(row, g + 3 * step, v);
        knc_lse_fold<T, V>(a, m, s);
        knc_lse_fold<T, V>(b, m, s);
        knc_lse_fold<T, V>(c, m, s);
        knc_lse_fold<T, V>(d, m, s);
    }
    for (; g + step < ng; g += 2 * step) {
        knc_pack<T, V> a = knc_ce_load<S, VEC>(row, g, v), b = knc_ce_load<S, VEC>(row, g + step, v);
        knc_lse_fold<T, V>(a, m, s);
        knc_lse_fold<T, V>(b, m, s);
    }
    if (g < ng) knc_lse_fold<T, V>(knc_ce_load<S, VEC>(row, g, v), m, s);
}

/* (m, s) += (m2, s2): the max, and both sums taken to it; equal maxima (two -inf, two
 * +inf) take the factor 1 rather than exp(inf - inf). m and m2 are never NaN. */
__device__ inline void knc_lse_merge(double &m, double &s, double m2, double s2) {
    double mm = m2 > m ? m2 : m;
    s = (m == mm ? s : s * exp(m - mm)) + (m2 == mm ? s2 : s2 * exp(m2 - mm));
    m = mm;
}

/* The row's log(sum(exp(x - max))) + max from every thread's pair: shuffles within each
 * warp, then warp 0 merges the warps' pairs, always in the same tree. NaN when the max is
 * -inf (no element above -inf), as on the CPU. Every thread of the block calls it once;
 * all get the result. */
__device__ inline double knc_block_lse(double m, double s, double *shm, double *shs) {
    for (int o = 16; o > 0; o >>= 1) {
        double m2 = __shfl_down_sync(0xffffffffu, m, o), s2 = __shfl_down_sync(0xffffffffu, s, o);
        knc_lse_merge(m, s, m2, s2);
    }
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    if (lane == 0) {
        shm[w] = m;
        shs[w] = s;
    }
    __syncthreads();
    if (w == 0) {
        m = lane < nw ? shm[lane] : -INFINITY;
        s = lane < nw ? shs[lane] : 0.0;
        for (int o = 16; o > 0; o >>= 1) {
            double m2 = __shfl_down_sync(0xffffffffu, m, o), s2 = __shfl_down_sync(0xffffffffu, s, o);
            knc_lse_merge(m, s, m2, s2);
        }
        if (lane == 0) shm[0] = m == -INFINITY ? (double)NAN : kn_rm_lse(s, m);
    }
    __syncthreads();
    return shm[0];
}

__device__ inline int64_t knc_target(const void *t, bool i32, int64_t r) {
    return i32 ? (int64_t)((const int32_t *)t)[r] : ((const int64_t *)t)[r];
}

/* term[r] = lse(row r) - row r[target r], a block per row, one pass over the row. */
template <typename S, bool VEC>
__global__ void __launch_bounds__(KNC_THREADS)
    knc_ce_rows(const S *__restrict__ logits, const void *__restrict__ t, bool i32, int64_t v, double *__restrict__ term) {
    __shared__ double shm[32], shs[32];
    const S *row = logits + blockIdx.x * v;
    typename knc_math<S>::type m;
    double s;
    knc_lse_scan<S, VEC>(row, v, m, s);
    double lse = knc_block_lse((double)m, s, shm, shs);
    /* a target outside the row (only possible in a captured graph, where the host does not
     * check them first) gives NaN, never a read outside the row */
    int64_t tg = knc_target(t, i32, blockIdx.x);
    if (threadIdx.x == 0) term[blockIdx.x] = tg >= 0 && tg < v ? lse - (double)knc_widen(row[tg]) : (double)NAN;
}

/* loss = the mean of the rows' terms, one block, in a fixed order. */
template <typename T>
__global__ void knc_ce_total(const double *term, int64_t rows, T *loss) {
    __shared__ double sh[32];
    double s = 0;
    for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) s += term[r];
    s = knc_block_sum(s, sh);
    if (threadIdx.x == 0) *loss = (T)(rows > 0 ? s / (double)rows : 0.0);
}

/* Group g of dlogits: exp(x - lse) * scale, less scale at the target (element tg). */
template <typename T, int V>
__device__ inline knc_pack<T, V> knc_ce_grad(const knc_pack<T, V> &p, int64_t g, T lse, T scale, int64_t tg) {
    knc_pack<T, V> o;
#pragma unroll
    for (int i = 0; i < V; i++) {
        T e = knc_ce_exp(p.v[i] - lse) * scale;
        o.v[i] = g * V + i == tg ? e - scale : e;
    }
    return o;
}

/* Group g of a dlogits row, narrowed to the storage type S (rounded once, as a cast). */
template <typename S, bool VEC, typename T, int V>
__device__ inline void knc_ce_store(S *row, int64_t g, int64_t v, const knc_pack<T, V> &o) {
    if constexpr (VEC) {
        knc_pack<S, V> q;
#pragma unroll
        for (int i = 0; i < V; i++) q.v[i] = knc_narrow<S>(o.v[i]);
        *(knc_pack<S, V> *)(row + g * V) = q;
    } else {
#pragma unroll
        for (int i = 0; i < V; i++)
            if (g * V + i < v) row[g * V + i] = knc_narrow<S>(o.v[i]);
    }
}

/* dlogits = (softmax(row) - onehot(target)) * dloss / rows for row r (KNC_CE_ROWS): the
 * one-pass statistics, then a second pass that writes (VEC: dlogits rows 16-byte aligned
 * too). logits and dlogits may be one buffer (knc_ce_bwd_rows_inplace): the block reads
 * only its own row; every thread's first pass ends in knc_block_lse's __syncthreads before
 * any thread stores; in the second pass a thread stores a group only after loading it, and
 * no other thread touches that group. With term (the fused forward and backward,
 * knc_ce_fused_rows), thread 0 also writes the row's loss term as knc_ce_rows does, from
 * the same statistics (so the same bits), the target's logit read before that barrier. */
template <typename S, bool VEC>
__device__ __forceinline__ void knc_ce_bwd_row(const typename knc_math<S>::type *dloss, const S *logits,
                                               const void *t, bool i32, int64_t rows, int64_t v, S *dlogits,
                                               double *term, int64_t r) {
    typedef typename knc_math<S>::type T;
    constexpr int V = KNC_CE_V(S);
    __shared__ double shm[32], shs[32];
    const S *row = logits + r * v;
    S *dr = dlogits + r * v;
    T m;
    T scale = knc_rm_ce_scale(*dloss, rows); /* rows > r >= 0 */
    double s;
    int64_t tg = knc_target(t, i32, r), ng = (v + V - 1) / V, step = blockDim.x, g = threadIdx.x;
    bool tg_in = tg >= 0 && tg < v;
    double xt = term && threadIdx.x == 0 && tg_in ? (double)knc_widen(row[tg]) : 0.0;
    knc_lse_scan<S, VEC>(row, v, m, s);
    double lse_d = knc_block_lse((double)m, s, shm, shs);
    T lse = (T)lse_d;
    if (term && threadIdx.x == 0) term[r] = tg_in ? lse_d - xt : (double)NAN; /* as knc_ce_rows */
    for (; g + step < ng; g += 2 * step) {
        knc_pack<T, V> a = knc_ce_load<S, VEC>(row, g, v), b = knc_ce_load<S, VEC>(row, g + step, v);
        knc_ce_store<S, VEC>(dr, g, v, knc_ce_grad<T, V>(a, g, lse, scale, tg));
        knc_ce_store<S, VEC>(dr, g + step, v, knc_ce_grad<T, V>(b, g + step, lse, scale, tg));
    }
    if (g < ng) knc_ce_store<S, VEC>(dr, g, v, knc_ce_grad<T, V>(knc_ce_load<S, VEC>(row, g, v), g, lse, scale, tg));
}

/* The rows of a gradient launch: row r by block r % gridDim.x, in turn (a grid of a block
 * per row, or fewer: ce_grid). A barrier between a block's rows: knc_block_lse's shared
 * words are written again only once every thread has read the last row's result. */
#define KNC_CE_ROWS(...)                                                      \
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {                  \
        if (r != (int64_t)blockIdx.x) __syncthreads();                        \
        __VA_ARGS__;                                                          \
    }

/* Tried and not kept (H200, 2026-11-27): a backward that copies the row into shared memory
 * during the statistics pass and writes the gradient from there (one global read, not
 * two; a block of 1024 threads a row, one or two rows an SM). ncu: f32 1.18 ms against this
 * kernel's 1.21, bf16 1.17 ms against 0.79; the GPT-2 bf16 step 0.3-0.4 ms slower. With one
 * block an SM its load phase and its store phase no longer overlap other blocks' work. */

/* Two buffers: __restrict__ lets the compiler take the logits through the read-only path. */
template <typename S, bool VEC>
__global__ void __launch_bounds__(KNC_THREADS)
    knc_ce_bwd_rows(const typename knc_math<S>::type *__restrict__ dloss, const S *__restrict__ logits,
                    const void *__restrict__ t, bool i32, int64_t rows, int64_t v, S *__restrict__ dlogits) {
    KNC_CE_ROWS(knc_ce_bwd_row<S, VEC>(dloss, logits, t, i32, rows, v, dlogits, nullptr, r));
}

/* The gradient written over the logits (the memory plan's in place, kn_op_inplace_operand):
 * one pointer, never restrict, so no load may be moved past a store to the same bytes nor
 * served from a cache the stores bypass. */
template <typename S, bool VEC>
__global__ void __launch_bounds__(KNC_THREADS)
    knc_ce_bwd_rows_inplace(const typename knc_math<S>::type *__restrict__ dloss, S *x, const void *__restrict__ t,
                            bool i32, int64_t rows, int64_t v) {
    KNC_CE_ROWS(knc_ce_bwd_row<S, VEC>(dloss, x, t, i32, rows, v, x, nullptr, r));
}

/* The fused forward and backward (knc_cross_entropy_fused): each row's loss term and its
 * gradient from one read of the row from memory (the second pass, over the block's own
 * 100 KB row, is served from L2), the gradient written over the logits (x == dx, one
 * pointer as above) or into its own buffer; knc_ce_total then makes the loss. */
template <typename S, bool VEC>
__global__ void __launch_bounds__(KNC_THREADS)
    knc_ce_fused_rows(const typename knc_math<S>::type *__restrict__ dloss, const S *x, const void *__restrict__ t,
                      bool i32, int64_t rows, int64_t v, S *dx, double *__restrict__ term) {
    KNC_CE_ROWS(knc_ce_bwd_row<S, VEC>(dloss, x, t, i32, rows, v, dx, term, r));
}

/* The grid of the gradient kernels (the backward and the fused pair): a block per row, or,
 * with KILN_CE_BLOCKS_PER_SM=K (read once; 0 or unset: a block per row), K blocks per SM,
 * each taking rows in turn. A block reads its row twice (statistics, then the gradient);
 * the second read comes from L2 only while the rows in flight fit there: a block per row
 * keeps up to 8 blocks (256 threads) an SM resident, 1056 rows of 100 KB on an H100
 * (GPT-2's bf16 vocabulary) against a 50 MB L2, where K = 2 keeps 264 (26 MB). A knob so
 * both can be timed on one machine; the results are the same bits either way (a row's
 * arithmetic does not depend on which block takes it). */
static unsigned ce_grid(int64_t rows) {
    static int k = -1;
    if (k < 0) {
        const char *s = getenv("KILN_CE_BLOCKS_PER_SM");
        k = s && atoi(s) > 0 && atoi(s) <= 64 ? atoi(s) : 0;
    }
    int dev = 0, sms = 0;
    if (k > 0 && cudaGetDevice(&dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess && sms > 0 &&
        (int64_t)k * sms < rows)
        return (unsigned)(k * sms);
    return row_blocks(rows);
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

static bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* S: the logits' storage type (the loss and its gradient are in knc_math<S>: f32 for
 * 16-bit logits; the logits' gradient in S). */
template <typename S>
static kn_status ce_launch(const kn_tensor *const *in, kn_tensor *out, bool bwd) {
    typedef typename knc_math<S>::type T;
    const kn_tensor *lg = bwd ? in[1] : in[0], *t = bwd ? in[2] : in[1];
    int64_t v = lg->shape[lg->ndim - 1], rows = kn_tensor_numel(t);
    bool i32 = t->dtype == KN_DT_I32;
    const S *x = (const S *)kn_tensor_data(lg);
    bool vec = v % KNC_CE_V(S) == 0 && aligned16(x);
    if (bwd) {
        if (rows * v == 0) return KN_OK;
        const T *dl = (const T *)kn_tensor_data(in[0]);
        S *dx = (S *)kn_tensor_data(out);
        if ((const S *)dx == x) { /* in place (the memory plan): a partial overlap is never planned */
            if (vec) knc_ce_bwd_rows_inplace<S, true><<<ce_grid(rows), KNC_THREADS, 0, knc_stream>>>(dl, dx, kn_tensor_data(t), i32, rows, v);
            else knc_ce_bwd_rows_inplace<S, false><<<ce_grid(rows), KNC_THREADS, 0, knc_stream>>>(dl, dx, kn_tensor_data(t), i32, rows, v);
            KNC_LAUNCHED(knc_ce_bwd_rows_inplace);
            return KN_OK;
        }
        if (vec && aligned16(dx))
            knc_ce_bwd_rows<S, true><<<ce_grid(rows), KNC_THREADS, 0, knc_stream>>>(dl, x, kn_tensor_data(t), i32, rows, v, dx);
        else knc_ce_bwd_rows<S, false><<<ce_grid(rows), KNC_THREADS, 0, knc_stream>>>(dl, x, kn_tensor_data(t), i32, rows, v, dx);
        KNC_LAUNCHED(knc_ce_bwd_rows);
        return KN_OK;
    }
    kn_tensor *term = NULL;
    int64_t tshape[1] = {rows};
    KN_TRY(kn_tensor_empty_on(&term, knc_dev(in), KN_DT_F64, 1, tshape));
    kn_status st = KN_OK;
    double *tp = (double *)kn_tensor_data(term);
    if (rows > 0) {
        if (vec) knc_ce_rows<S, true><<<row_blocks(rows), KNC_THREADS, 0, knc_stream>>>(x, kn_tensor_data(t), i32, v, tp);
        else knc_ce_rows<S, false><<<row_blocks(rows), KNC_THREADS, 0, knc_stream>>>(x, kn_tensor_data(t), i32, v, tp);
        st = knc_check_launch("knc_ce_rows", __FILE__, __LINE__);
    }
    if (st == KN_OK) {
        knc_ce_total<T><<<1, KNC_THREADS, 0, knc_stream>>>(tp, rows, (T *)kn_tensor_data(out));
        st = knc_check_launch("knc_ce_total", __FILE__, __LINE__);
    }
    kn_tensor_free(term); /* stream order: the kernels reading it run before any reuse */
    return st;
}

static kn_status ce_any(const kn_node *n, const kn_tensor *const *in, kn_tensor **out, bool bwd) {
    const kn_tensor *lg = bwd ? in[1] : in[0], *t = bwd ? in[2] : in[1];
    kn_dtype dt = lg->dtype;
    bool low = dt == KN_DT_BF16 || dt == KN_DT_F16; /* 16-bit logits: an f32 loss and loss gradient */
    if (!is_float(dt) && !low) return knc_unsupported(n, dt);
    if (bwd && in[0]->dtype != (low ? KN_DT_F32 : dt)) return knc_unsupported(n, in[0]->dtype);
    if (!knc_capturing()) KN_TRY(check_targets(n, t, lg->shape[lg->ndim - 1])); /* a sync: not in a graph */
    KN_TRY(knc_new_out(n, knc_dev(in), out));
    kn_status st = dt == KN_DT_F32    ? ce_launch<float>(in, *out, bwd)
                   : dt == KN_DT_F64  ? ce_launch<double>(in, *out, bwd)
                   : dt == KN_DT_BF16 ? ce_launch<knc_bf16>(in, *out, bwd)
                                      : ce_launch<knc_f16>(in, *out, bwd);
    if (st != KN_OK) { kn_tensor_free(*out); *out = NULL; }
    return st;
}

KNC_KERNEL(knc_cross_entropy) { return ce_any(n, in, out, false); }
KNC_KERNEL(knc_cross_entropy_bwd) { return ce_any(n, in, out, true); }

/* S: as ce_launch. One knc_ce_fused_rows launch (a block per row) and knc_ce_total. */
template <typename S>
static kn_status ce_fused_launch(const kn_tensor *dl, const kn_tensor *lg, const kn_tensor *t, kn_tensor *loss,
                                 kn_tensor *dlogits) {
    typedef typename knc_math<S>::type T;
    int64_t v = lg->shape[lg->ndim - 1], rows = kn_tensor_numel(t);
    bool i32 = t->dtype == KN_DT_I32;
    const S *x = (const S *)kn_tensor_data(lg);
    S *dx = (S *)kn_tensor_data(dlogits);
    bool vec = v % KNC_CE_V(S) == 0 && aligned16(x) && aligned16(dx);
    kn_tensor *term = NULL;
    int64_t tshape[1] = {rows};
    KN_TRY(kn_tensor_empty_on(&term, lg->storage->device, KN_DT_F64, 1, tshape));
    kn_status st = KN_OK;
    double *tp = (double *)kn_tensor_data(term);
    if (rows > 0) { /* v == 0: NaN terms, as knc_ce_rows gives, and an empty gradient */
        const T *d = (const T *)kn_tensor_data(dl);
        if (vec) knc_ce_fused_rows<S, true><<<ce_grid(rows), KNC_THREADS, 0, knc_stream>>>(d, x, kn_tensor_data(t), i32, rows, v, dx, tp);
        else knc_ce_fused_rows<S, false><<<ce_grid(rows), KNC_THREADS, 0, knc_stream>>>(d, x, kn_tensor_data(t), i32, rows, v, dx, tp);
        st = knc_check_launch("knc_ce_fused_rows", __FILE__, __LINE__);
    }
    if (st == KN_OK) {
        knc_ce_total<T><<<1, KNC_THREADS, 0, knc_stream>>>(tp, rows, (T *)kn_tensor_data(loss));
        st = knc_check_launch("knc_ce_total", __FILE__, __LINE__);
    }
    kn_tensor_free(term); /* stream order, as in ce_launch */
    return st;
}

/* The fused cross-entropy (kiln/cuda.h): operands as cross_entropy_bwd's (dloss, logits,
 * targets), the results as cross_entropy's loss and cross_entropy_bwd's gradient. */
kn_status kn_cuda_cross_entropy_fused(const kn_tensor *const *in, kn_tensor **loss, kn_tensor **dlogits) {
    if (!in || !in[0] || !in[1] || !in[2] || !loss || !dlogits)
        return kn_error(KN_ERR_ARG, "kn_cuda_cross_entropy_fused: NULL argument");
    kn_node n = {};
    n.op = KN_OP_CROSS_ENTROPY_BWD;
    n.nin = 3;
    kn_type ty[3], lt;
    const kn_type *tp[3] = {&ty[0], &ty[1], &ty[2]};
    for (int i = 0; i < 3; i++) {
        ty[i].dtype = in[i]->dtype;
        ty[i].ndim = in[i]->ndim;
        for (int d = 0; d < in[i]->ndim; d++) ty[i].shape[d] = in[i]->shape[d];
    }
    char msg[256];
    kn_node ln = n;
    ln.op = KN_OP_CROSS_ENTROPY;
    ln.nin = 2;
    if (kn_node_infer(&n, tp, &n.type, msg, sizeof msg) != KN_OK || kn_node_infer(&ln, tp + 1, &lt, msg, sizeof msg) != KN_OK)
        return kn_error(KN_ERR_SHAPE, "kn_cuda_cross_entropy_fused: %s", msg);
    ln.type = lt;
    const kn_tensor *lg = in[1], *t = in[2];
    kn_dtype dt = lg->dtype;
    bool low = dt == KN_DT_BF16 || dt == KN_DT_F16;
    if (!is_float(dt) && !low) return knc_unsupported(&n, dt);
    if (in[0]->dtype != (low ? KN_DT_F32 : dt)) return knc_unsupported(&n, in[0]->dtype);
    if (*dlogits && kn_tensor_data(*dlogits) != kn_tensor_data(lg)) {
        /* a buffer of its own must not overlap the logits: only exactly over them is planned */
        const char *a = (const char *)kn_tensor_data(*dlogits), *b = (const char *)kn_tensor_data(lg);
        size_t bytes = (size_t)kn_tensor_numel(lg) * kn_dtype_size(dt);
        if (a < b + bytes && b < a + bytes)
            return kn_error(KN_ERR_ARG, "kn_cuda_cross_entropy_fused: dlogits overlap the logits without being them");
    }
    if (!knc_capturing()) KN_TRY(check_targets(&n, t, lg->shape[lg->ndim - 1])); /* a sync: not in a graph */
    for (int i = 0; i < 3; i++)
        if (in[i]->storage->device.type != KN_DEVICE_CUDA || in[i]->storage->device.index != lg->storage->device.index ||
            !kn_tensor_is_contiguous(in[i]))
            return kn_error(KN_ERR_ARG, "kn_cuda_cross_entropy_fused: operand %d is not a contiguous tensor on the "
                            "logits' GPU", i);
    kn_tensor *l = *loss;
    bool made_dx = !*dlogits, made_l = !l;
    KN_TRY(knc_new_out(&n, lg->storage->device, dlogits));
    kn_status st = knc_new_out(&ln, lg->storage->device, &l);
    bool prof = st == KN_OK && knc_profile_on();
    if (prof) st = knc_profile_begin();
    if (st == KN_OK)
        st = dt == KN_DT_F32    ? ce_fused_launch<float>(in[0], lg, t, l, *dlogits)
             : dt == KN_DT_F64  ? ce_fused_launch<double>(in[0], lg, t, l, *dlogits)
             : dt == KN_DT_BF16 ? ce_fused_launch<knc_bf16>(in[0], lg, t, l, *dlogits)
                                : ce_fused_launch<knc_f16>(in[0], lg, t, l, *dlogits);
    if (st == KN_OK && prof) st = knc_profile_end_as("cross_entropy_fused", &n, in, *dlogits);
    if (st == KN_OK) st = knc_after_op(&n);
    if (st != KN_OK) {
        if (made_l) kn_tensor_free(l);
        if (made_dx) { kn_tensor_free(*dlogits); *dlogits = NULL; }
        return st;
    }
    *loss = l;
    return KN_OK;
}
