/* cuda_elementwise.cu — the CUDA kernels of the elementwise ops: add/sub/mul/div with
 * broadcasting, eq, where, the unary maps, gelu/relu backward, cast, dropout and
 * causal_fill.
 *
 * One thread per output element, or per pack of W elements (grid-stride loops). Broadcasting
 * passes each operand's element strides over the output shape (0 on broadcast axes); the
 * host first collapses that layout (knc_collapse: size-1 axes dropped, axes contiguous for
 * every operand merged), so same-shape operands are 1-D, a bias add [N,C]+[C] 2-D and a
 * scalar operand 1-D with stride 0. A thread turns its flat index into operand offsets
 * (knc_offsets: one division per axis but the first), in 32-bit arithmetic whenever every
 * index and offset fits (knc_fits_u32), in 64-bit otherwise.
 *
 * Packs (W = 16 bytes / element size: float4-like loads and stores) are used when
 * can_pack says every access of a pack is one aligned 16-byte access or one repeated
 * value: the contiguous output and each operand stepping by 1 along the last axis are
 * 16-byte aligned, such an operand's other strides are multiples of W, and the last axis
 * holds a multiple of W elements, except in a 1-D layout, where the threads of block 0
 * finish the last total % W elements one by one. Otherwise W = 1. Either way every output
 * element is the same single operation as on the CPU: the results do not depend on the
 * path. The formulas are those of the CPU template (kernels_train.inc), in the operand's
 * own type.
 *
 * Dropout's Philox4x32-10 below is the CPU's kn_philox4x32_10 (core/base/rng.c) line for
 * line: element i of a dropout node uses word offset + i of stream 0 of key seed, so the
 * CPU and the GPU drop the same elements. */
#include <stdint.h>
#include <string.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "runtime/cuda_impl.h"

#define KNC_FOR(i, total) \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (total); i += (int64_t)gridDim.x * blockDim.x)

/* Strides of the nops inputs over the output type (0 where broadcast), then those of the
 * contiguous output as operand nops when there is room (< 3), collapsed. */
static knc_strides bcast_layout(const kn_node *n, int nops, const kn_tensor *const *in) {
    knc_strides s;
    int64_t st[KN_MAX_DIMS];
    memset(&s, 0, sizeof s);
    s.nd = n->type.ndim;
    for (int d = 0; d < s.nd; d++) s.shape[d] = n->type.shape[d];
    for (int k = 0; k < nops; k++) {
        kn_ir_broadcast_strides(in[k]->ndim, in[k]->shape, n->type.ndim, n->type.shape, st);
        for (int d = 0; d < s.nd; d++) s.st[d][k] = st[d];
    }
    if (nops < 3) {
        int64_t c = 1;
        for (int d = s.nd - 1; d >= 0; d--) { s.st[d][nops] = c; c *= s.shape[d]; }
    }
    knc_collapse(&s, nops < 3 ? nops + 1 : nops);
    return s;
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* Whether W-element packs work for the collapsed layout s of the nops inputs p[k] and the
 * contiguous output o (see the overview). */
static bool can_pack(const knc_strides &s, int nops, const void *const *p, const void *o, int64_t w) {
    int last = s.nd - 1;
    if (!aligned16(o) || (s.nd > 1 && s.shape[last] % w != 0)) return false;
    for (int k = 0; k < nops; k++) {
        if (s.st[last][k] == 0) continue; /* one value repeated along the pack */
        if (s.st[last][k] != 1 || !aligned16(p[k])) return false;
        for (int d = 0; d < last; d++)
            if (s.st[d][k] % w != 0) return false;
    }
    return true;
}

/* Pack at p: W contiguous elements (16-byte aligned) or, when splat, p[0] W times. */
template <typename T, int W>
__device__ inline knc_pack<T, W> knc_ld(const T *p, bool splat) {
    knc_pack<T, W> r;
    if (W > 1 && splat) {
        T v = *p;
        for (int j = 0; j < W; j++) r.v[j] = v;
    } else {
        r = *(const knc_pack<T, W> *)p;
    }
    return r;
}

/* ---------------------------------------------------------------- binary */

/* op: the kn_binary_op of the node (kn_op_binary), checked on the host. */
template <typename T>
__device__ inline T knc_arith(int op, T x, T y) { return knc_sc_binary((kn_binary_op)op, x, y); }

/* o = a op b over layout s (operands 0, 1; total elements), W elements per step. */
template <typename T, typename I, int W>
__global__ void knc_binary_kernel(int op, knc_layout<I> s, I total, const T *a, const T *b, T *o) {
    I npack = total / W;
    bool sa = s.st[s.nd - 1][0] == 0, sb = s.st[s.nd - 1][1] == 0;
    KNC_FOR_I(I, v, npack) {
        I off[2];
        knc_offsets<2>(s, v * W, off);
        knc_pack<T, W> x = knc_ld<T, W>(a + off[0], sa), y = knc_ld<T, W>(b + off[1], sb), r;
        for (int j = 0; j < W; j++) r.v[j] = knc_arith(op, x.v[j], y.v[j]);
        *(knc_pack<T, W> *)(o + v * W) = r;
    }
    if (W > 1) { /* the last total % W elements (only a 1-D layout has any) */
        I t = npack * W + (I)(blockIdx.x * blockDim.x + threadIdx.x);
        if (t < total) o[t] = knc_arith(op, a[t * s.st[0][0]], b[t * s.st[0][1]]);
    }
}

template <typename T>
static kn_status binary_launch(int op, const knc_strides &s, int64_t total, const T *a, const T *b, T *o) {
    constexpr int W = 16 / sizeof(T);
    const void *p[2] = {a, b};
    bool pack = can_pack(s, 2, p, o, W), u32 = knc_fits_u32(s, 3, total);
    unsigned g = knc_blocks(pack ? total / W : total);
    if (pack && u32) knc_binary_kernel<T, uint32_t, W><<<g, KNC_THREADS, 0, knc_stream>>>(op, knc_narrow(s), (uint32_t)total, a, b, o);
    else if (pack) knc_binary_kernel<T, int64_t, W><<<g, KNC_THREADS, 0, knc_stream>>>(op, s, total, a, b, o);
    else if (u32) knc_binary_kernel<T, uint32_t, 1><<<g, KNC_THREADS, 0, knc_stream>>>(op, knc_narrow(s), (uint32_t)total, a, b, o);
    else knc_binary_kernel<T, int64_t, 1><<<g, KNC_THREADS, 0, knc_stream>>>(op, s, total, a, b, o);
    KNC_LAUNCHED(knc_binary_kernel);
    return KN_OK;
}

KNC_KERNEL(knc_binary) {
    kn_dtype dt = n->type.dtype;
    kn_binary_op bop;
    if (!kn_op_binary(n->op, &bop) || kn_sc_binary_is_compare(bop)) return knc_no_kernel(n, "knc_binary");
    if (dt != KN_DT_F32 && dt != KN_DT_F64) return knc_unsupported(n, dt);
    KN_TRY(knc_new_out(n, knc_dev(in), out));
    int64_t total = kn_tensor_numel(*out);
    if (total == 0) return KN_OK;
    knc_strides s = bcast_layout(n, 2, in);
    kn_status st = dt == KN_DT_F32
                       ? binary_launch<float>((int)bop, s, total, (const float *)kn_tensor_data(in[0]),
                                              (const float *)kn_tensor_data(in[1]), (float *)kn_tensor_data(*out))
                       : binary_launch<double>((int)bop, s, total, (const double *)kn_tensor_data(in[0]),
                                               (const double *)kn_tensor_data(in[1]), (double *)kn_tensor_data(*out));
    if (st != KN_OK) { kn_tensor_free(*out); *out = NULL; }
    return st;
}

/* ---------------------------------------------------------------- generic loads/stores */

/* An element of any kiln dtype as a double (what kn_dtype_load does on the CPU). */
__device__ inline double knc_load(int dt, const void *p, int64_t i) {
    switch (dt) {
    case KN_DT_F32: return ((const float *)p)[i];
    case KN_DT_F64: return ((const double *)p)[i];
    case KN_DT_F16: return __half2float(((const __half *)p)[i]);
    case KN_DT_BF16: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    case KN_DT_I32: return ((const int32_t *)p)[i];
    case KN_DT_I64: return (double)((const int64_t *)p)[i];
    case KN_DT_U8: return ((const uint8_t *)p)[i];
    default: return ((const uint8_t *)p)[i] != 0;
    }
}

/* Float -> integer: truncate toward zero, saturate, NaN -> 0 (kn_dtype_store's rules). */
__device__ inline int64_t knc_sat(double x, double lo, double hi_excl, int64_t lo_i, int64_t hi_i) {
    if (x != x) return 0;
    if (x >= hi_excl) return hi_i;
    if (x <= lo - 1.0) return lo_i;
    return (int64_t)x;
}

__device__ inline void knc_store(int dt, void *p, int64_t i, double x) {
    switch (dt) {
    case KN_DT_F32: ((float *)p)[i] = (float)x; break;
    case KN_DT_F64: ((double *)p)[i] = x; break;
    case KN_DT_F16: ((__half *)p)[i] = __double2half(x); break;
    case KN_DT_BF16: ((__nv_bfloat16 *)p)[i] = __double2bfloat16(x); break;
    case KN_DT_I32: ((int32_t *)p)[i] = (int32_t)knc_sat(x, -2147483648.0, 2147483648.0, INT32_MIN, INT32_MAX); break;
    case KN_DT_I64: ((int64_t *)p)[i] = knc_sat(x, -9223372036854775808.0, 9223372036854775808.0, INT64_MIN, INT64_MAX); break;
    case KN_DT_U8: ((uint8_t *)p)[i] = (uint8_t)knc_sat(x, 0.0, 256.0, 0, 255); break;
    default: ((uint8_t *)p)[i] = x != 0.0; break;
    }
}

/* cast: integer -> integer keeps exact values (no double in between); i64 -> f32/f16/bf16
 * rounds once (the native conversion); everything else goes through a double, which holds
 * every other source value exactly. Operand and result are contiguous: a flat loop. */
template <typename I>
__global__ void knc_cast_kernel(int sdt, const void *src, int ddt, void *dst, I total) {
    KNC_FOR_I(I, i, total) {
        if (sdt == KN_DT_I64 && (ddt == KN_DT_I32 || ddt == KN_DT_U8 || ddt == KN_DT_I64)) {
            int64_t v = ((const int64_t *)src)[i];
            if (ddt == KN_DT_I64) ((int64_t *)dst)[i] = v;
            else if (ddt == KN_DT_I32) ((int32_t *)dst)[i] = (int32_t)(v < INT32_MIN ? INT32_MIN : v > INT32_MAX ? INT32_MAX : v);
            else ((uint8_t *)dst)[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        } else if (sdt == KN_DT_I64 && ddt == KN_DT_F32) {
            ((float *)dst)[i] = __ll2float_rn(((const int64_t *)src)[i]);
        } else {
            knc_store(ddt, dst, i, knc_load(sdt, src, i));
        }
    }
}

/* Whether a flat loop over total elements may count in uint32_t. */
static bool flat_u32(int64_t total) { return total < ((int64_t)1 << 31); }

KNC_KERNEL(knc_cast) {
    KN_TRY(knc_new_out(n, knc_dev(in), out));
    int64_t total = kn_tensor_numel(*out);
    if (total == 0) return KN_OK;
    int sdt = (int)in[0]->dtype, ddt = (int)n->type.dtype;
    const void *src = kn_tensor_data(in[0]);
    void *dst = kn_tensor_data(*out);
    if (flat_u32(total)) knc_cast_kernel<uint32_t><<<knc_blocks(total), KNC_THREADS, 0, knc_stream>>>(sdt, src, ddt, dst, (uint32_t)total);
    else knc_cast_kernel<int64_t><<<knc_blocks(total), KNC_THREADS, 0, knc_stream>>>(sdt, src, ddt, dst, total);
    kn_status st = knc_check_launch("knc_cast_kernel", __FILE__, __LINE__);
    if (st != KN_OK) { kn_tensor_free(*out); *out = NULL; }
    return st;
}

/* eq (nops 2) and where (nops 3), any dtypes, through doubles as on the CPU. */
template <typename I>
__global__ void knc_select_kernel(int nops, knc_layout<I> s, I total, int d0, const void *p0, int d1, const void *p1,
                                  int d2, const void *p2, int dout, void *o) {
    KNC_FOR_I(I, i, total) {
        I off[3];
        knc_offsets<3>(s, i, off);
        double r;
        if (nops == 2) r = knc_load(d0, p0, off[0]) == knc_load(d1, p1, off[1]);
        else r = knc_load(KN_DT_BOOL, p0, off[0]) != 0 ? knc_load(d1, p1, off[1]) : knc_load(d2, p2, off[2]);
        knc_store(dout, o, i, r);
    }
}

static kn_status select_op(const kn_node *n, const kn_tensor *const *in, kn_tensor **out, int nops) {
    KN_TRY(knc_new_out(n, knc_dev(in), out));
    int64_t total = kn_tensor_numel(*out);
    if (total == 0) return KN_OK;
    knc_strides s = bcast_layout(n, nops, in);
    const kn_tensor *c = nops == 3 ? in[2] : in[1];
    int d0 = (int)in[0]->dtype, d1 = (int)in[1]->dtype, d2 = (int)c->dtype, dout = (int)n->type.dtype;
    const void *p0 = kn_tensor_data(in[0]), *p1 = kn_tensor_data(in[1]), *p2 = kn_tensor_data(c);
    void *o = kn_tensor_data(*out);
    unsigned g = knc_blocks(total);
    if (knc_fits_u32(s, nops, total))
        knc_select_kernel<uint32_t><<<g, KNC_THREADS, 0, knc_stream>>>(nops, knc_narrow(s), (uint32_t)total, d0, p0, d1, p1, d2, p2, dout, o);
    else
        knc_select_kernel<int64_t><<<g, KNC_THREADS, 0, knc_stream>>>(nops, s, total, d0, p0, d1, p1, d2, p2, dout, o);
    kn_status st = knc_check_launch("knc_select_kernel", __FILE__, __LINE__);
    if (st != KN_OK) { kn_tensor_free(*out); *out = NULL; }
    return st;
}

KNC_KERNEL(knc_eq) { return select_op(n, in, out, 2); }
KNC_KERNEL(knc_where) { return select_op(n, in, out, 3); }

/* ---------------------------------------------------------------- unary and activations */

/* op: the node's kn_unary_op (kn_op_unary), checked on the host; the functions are
 * kiln/scalar.h's, the CPU's own. */
template <typename T>
__device__ inline T knc_unary_of(int op, T v) { return knc_sc_unary((kn_unary_op)op, v); }

/* op: a kn_unary_op with a gradient column (unary_grad's fn), checked on the host. */
template <typename T>
__device__ inline T knc_unary_grad_of(int op, T g, T v) { return knc_sc_unary_grad((kn_unary_op)op, g, v); }

/* Contiguous operands: packs of W (all pointers 16-byte aligned when W > 1), the last
 * total % W elements by the first threads. y = f(x) (unary) or dx = f'(x) dy (unary_grad;
 * dy = NULL for unary). */
template <typename T, typename I, int W>
__global__ void knc_map_kernel(int op, const T *dy, const T *x, T *y, I total) {
    I npack = total / W;
    KNC_FOR_I(I, v, npack) {
        knc_pack<T, W> a = *(const knc_pack<T, W> *)(x + v * W), r;
        if (dy) {
            knc_pack<T, W> g = *(const knc_pack<T, W> *)(dy + v * W);
            for (int j = 0; j < W; j++) r.v[j] = knc_unary_grad_of(op, g.v[j], a.v[j]);
        } else {
            for (int j = 0; j < W; j++) r.v[j] = knc_unary_of(op, a.v[j]);
        }
        *(knc_pack<T, W> *)(y + v * W) = r;
    }
    if (W > 1) {
        I t = npack * W + (I)(blockIdx.x * blockDim.x + threadIdx.x);
        if (t < total) y[t] = dy ? knc_unary_grad_of(op, dy[t], x[t]) : knc_unary_of(op, x[t]);
    }
}

template <typename T>
static kn_status map_launch(int op, const T *dy, const T *x, T *y, int64_t total) {
    constexpr int W = 16 / sizeof(T);
    bool pack = aligned16(x) && aligned16(y) && (!dy || aligned16(dy)), u32 = flat_u32(total);
    unsigned g = knc_blocks(pack ? total / W : total);
    if (pack && u32) knc_map_kernel<T, uint32_t, W><<<g, KNC_THREADS, 0, knc_stream>>>(op, dy, x, y, (uint32_t)total);
    else if (pack) knc_map_kernel<T, int64_t, W><<<g, KNC_THREADS, 0, knc_stream>>>(op, dy, x, y, total);
    else if (u32) knc_map_kernel<T, uint32_t, 1><<<g, KNC_THREADS, 0, knc_stream>>>(op, dy, x, y, (uint32_t)total);
    else knc_map_kernel<T, int64_t, 1><<<g, KNC_THREADS, 0, knc_stream>>>(op, dy, x, y, total);
    KNC_LAUNCHED(knc_map_kernel);
    return KN_OK;
}

/* unary (bwd false: y = f(in[0])) and unary_grad {fn=f} (bwd: dx = f'(in[1]) * in[0]). */
static kn_status map_op(const kn_node *n, const kn_tensor *const *in, kn_tensor **out, bool bwd) {
    kn_dtype dt = n->type.dtype;
    kn_unary_op uop = KN_UNARY_COUNT;
    if (bwd ? !knc_unary_grad_fn(n, &uop) : !kn_op_unary(n->op, &uop))
        return knc_no_kernel(n, bwd ? "knc_unary_grad" : "knc_unary");
    int op = (int)uop;
    if (dt != KN_DT_F32 && dt != KN_DT_F64) return knc_unsupported(n, dt);
    KN_TRY(knc_new_out(n, knc_dev(in), out));
    int64_t total = kn_tensor_numel(*out);
    if (total == 0) return KN_OK;
    const void *dy = bwd ? kn_tensor_data(in[0]) : NULL, *x = kn_tensor_data(in[bwd ? 1 : 0]);
    void *y = kn_tensor_data(*out);
    kn_status st = dt == KN_DT_F32 ? map_launch<float>(op, (const float *)dy, (const float *)x, (float *)y, total)
                                   : map_launch<double>(op, (const double *)dy, (const double *)x, (double *)y, total);
    if (st != KN_OK) { kn_tensor_free(*out); *out = NULL; }
    return st;
}

KNC_KERNEL(knc_unary) { return map_op(n, in, out, false); }
KNC_KERNEL(knc_unary_grad) { return map_op(n, in, out, true); }

/* ---------------------------------------------------------------- dropout (Philox) */

/* kn_philox4x32_10 of core/base/rng.c, on the device. */
__device__ inline void knc_philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1,
                                         uint32_t out[4]) {
    uint32_t c[4] = {c0, c1, c2, c3};
    for (int round = 0; round < 10; round++) {
        if (round > 0) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
        uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0, hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        uint32_t n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
        c[0] = n0; c[1] = lo1; c[2] = n2; c[3] = lo0;
    }
    for (int w = 0; w < 4; w++) out[w] = c[w];
}

/* Word `pos` of stream 0 of key seed, as kn_rng_word_at(seed, 0, pos). */
__device__ inline uint32_t knc_rng_word(uint64_t seed, uint64_t pos) {
    uint32_t w[4];
    uint64_t block = pos / 4;
    knc_philox4x32_10((uint32_t)block, (uint32_t)(block >> 32), 0, 0, (uint32_t)seed, (uint32_t)(seed >> 32), w);
    return w[pos % 4];
}

template <typename T>
__global__ void knc_dropout_kernel(const T *x, T *y, int64_t total, double p, uint64_t seed, uint64_t offset) {
    T scale = (T)(1.0 / (1.0 - p));
    KNC_FOR(i, total) {
        float u = (float)(knc_rng_word(seed, offset + (uint64_t)i) >> 8) * 0x1p-24f; /* kn_u32_to_unit_f32 */
        y[i] = (double)u >= p ? x[i] * scale : (T)0;
    }
}

KNC_KERNEL(knc_dropout) {
    kn_dtype dt = n->type.dtype;
    if (dt != KN_DT_F32 && dt != KN_DT_F64) return knc_unsupported(n, dt);
    KN_TRY(knc_new_out(n, knc_dev(in), out));
    int64_t total = kn_tensor_numel(*out);
    if (total == 0) return KN_OK;
    const kn_attrs *a = &n->attrs;
    if (dt == KN_DT_F32)
        knc_dropout_kernel<float><<<knc_blocks(total), KNC_THREADS, 0, knc_stream>>>((const float *)kn_tensor_data(in[0]), (float *)kn_tensor_data(*out),
                                                                      total, a->p, (uint64_t)a->seed, (uint64_t)a->offset);
    else
        knc_dropout_kernel<double><<<knc_blocks(total), KNC_THREADS, 0, knc_stream>>>((const double *)kn_tensor_data(in[0]), (double *)kn_tensor_data(*out),
                                                                       total, a->p, (uint64_t)a->seed, (uint64_t)a->offset);
    KNC_LAUNCHED(knc_dropout_kernel);
    return KN_OK;
}

/* ---------------------------------------------------------------- causal_fill */

/* Element i of [..., rows, cols] is masked when its column c exceeds r + cols - rows. */
template <typename T, typename I>
__global__ void knc_causal_fill_kernel(const T *x, T *y, I total, I rows, I cols, T value) {
    KNC_FOR_I(I, i, total) {
        I q = i / cols, c = i - q * cols, r = q % rows;
        y[i] = c + rows > r + cols ? value : x[i];
    }
}

template <typename T>
static void causal_fill_launch(const void *x, void *y, int64_t total, int64_t rows, int64_t cols, double value) {
    unsigned g = knc_blocks(total);
    if (flat_u32(total))
        knc_causal_fill_kernel<T, uint32_t><<<g, KNC_THREADS, 0, knc_stream>>>((const T *)x, (T *)y, (uint32_t)total, (uint32_t)rows,
                                                                (uint32_t)cols, (T)value);
    else
        knc_causal_fill_kernel<T, int64_t><<<g, KNC_THREADS, 0, knc_stream>>>((const T *)x, (T *)y, total, rows, cols, (T)value);
}

KNC_KERNEL(knc_causal_fill) {
    kn_dtype dt = n->type.dtype;
    if (dt != KN_DT_F32 && dt != KN_DT_F64) return knc_unsupported(n, dt);
    KN_TRY(knc_new_out(n, knc_dev(in), out));
    int64_t total = kn_tensor_numel(*out);
    if (total == 0) return KN_OK;
    int64_t rows = n->type.shape[n->type.ndim - 2], cols = n->type.shape[n->type.ndim - 1];
    if (dt == KN_DT_F32)
        causal_fill_launch<float>(kn_tensor_data(in[0]), kn_tensor_data(*out), total, rows, cols, n->attrs.value);
    else
        causal_fill_launch<double>(kn_tensor_data(in[0]), kn_tensor_data(*out), total, rows, cols, n->attrs.value);
    kn_status st = knc_check_launch("knc_causal_fill_kernel", __FILE__, __LINE__);
    if (st != KN_OK) { kn_tensor_free(*out); *out = NULL; }
    return st;
}

/* ---------------------------------------------------------------- onehot */

/* Element i of [rows, v] is 1 where its column is row i / v's index (i32 or i64). */
template <typename I>
__global__ void knc_onehot_kernel(const void *t, bool i32, unsigned char *y, I total, I v) {
    KNC_FOR_I(I, i, total) {
        I r = i / v;
        long long tg = i32 ? (long long)((const int32_t *)t)[r] : (long long)((const int64_t *)t)[r];
        y[i] = (unsigned char)((long long)(i - r * v) == tg);
    }
}

KNC_KERNEL(knc_onehot) {
    const kn_tensor *t = in[0];
    int64_t v = n->type.shape[n->type.ndim - 1], rows = kn_tensor_numel(t);
    if (!knc_capturing()) { /* the interpreter's check, on a host copy (a sync: not in a graph) */
        int64_t *h = NULL;
        KN_TRY(knc_indices_to_host(t, &h));
        kn_status bad = KN_OK;
        for (int64_t r = 0; r < rows && bad == KN_OK; r++)
            if (h[r] < 0 || h[r] >= v)
                bad = kn_error(KN_ERR_ARG, "%s: index %lld at position %lld is outside [0, %lld)", kn_op_name(n->op),
                               (long long)h[r], (long long)r, (long long)v);
        kn_free(h);
        KN_TRY(bad);
    }
    KN_TRY(knc_new_out(n, knc_dev(in), out));
    int64_t total = rows * v;
    if (total == 0) return KN_OK;
    unsigned g = knc_blocks(total);
    bool i32 = t->dtype == KN_DT_I32;
    unsigned char *y = (unsigned char *)kn_tensor_data(*out);
    if (flat_u32(total))
        knc_onehot_kernel<uint32_t><<<g, KNC_THREADS, 0, knc_stream>>>(kn_tensor_data(t), i32, y, (uint32_t)total, (uint32_t)v);
    else knc_onehot_kernel<int64_t><<<g, KNC_THREADS, 0, knc_stream>>>(kn_tensor_data(t), i32, y, total, v);
    kn_status st = knc_check_launch("knc_onehot_kernel", __FILE__, __LINE__);
    if (st != KN_OK) { kn_tensor_free(*out); *out = NULL; }
    return st;
}
