/* cuda_elementwise.cu — the CUDA kernels of the elementwise ops: add/sub/mul/div with
 * broadcasting, eq, where, the unary maps, gelu/relu backward, cast, dropout and
 * causal_fill.
 *
 * One thread per output element (grid-stride loops, 64-bit indices). Broadcasting passes
 * each operand's element strides over the output shape (0 on broadcast axes), and a thread
 * turns its flat index into operand offsets (knc_offsets). The formulas are those of the
 * CPU template (kernels_train.inc), in the operand's own type.
 *
 * Dropout's Philox4x32-10 below is the CPU's kn_philox4x32_10 (core/base/rng.c) line for
 * line: element i of a dropout node uses word offset + i of stream 0 of key seed, so the
 * CPU and the GPU drop the same elements. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "runtime/cuda_impl.h"

#define KNC_FOR(i, total) \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (total); i += (int64_t)gridDim.x * blockDim.x)

/* Strides of operands over the output type (0 where broadcast). */
static knc_strides bcast_strides(const kn_node *n, int nops, const kn_tensor *const *in) {
    knc_strides s;
    int64_t st[KN_MAX_DIMS];
    s.nd = n->type.ndim;
    for (int d = 0; d < s.nd; d++) s.shape[d] = n->type.shape[d];
    for (int k = 0; k < nops; k++) {
        kn_ir_broadcast_strides(in[k]->ndim, in[k]->shape, n->type.ndim, n->type.shape, st);
        for (int d = 0; d < s.nd; d++) s.st[d][k] = st[d];
    }
    return s;
}

/* ---------------------------------------------------------------- binary */

template <typename T>
__global__ void knc_binary_kernel(int op, knc_strides s, int64_t total, const T *a, const T *b, T *o) {
    KNC_FOR(i, total) {
        int64_t off[2];
        knc_offsets<2>(s, i, off);
        T x = a[off[0]], y = b[off[1]];
        o[i] = op == KN_OP_ADD ? x + y : op == KN_OP_SUB ? x - y : op == KN_OP_MUL ? x * y : x / y;
    }
}

KNC_KERNEL(knc_binary) {
    kn_dtype dt = n->type.dtype;
    if (dt != KN_DT_F32 && dt != KN_DT_F64) return knc_unsupported(n, dt);
    KN_TRY(knc_new_out(n, knc_dev(in), out));
    int64_t total = kn_tensor_numel(*out);
    if (total == 0) return KN_OK;
    knc_strides s = bcast_strides(n, 2, in);
    if (dt == KN_DT_F32)
        knc_binary_kernel<float><<<knc_blocks(total), KNC_THREADS>>>((int)n->op, s, total, (const float *)kn_tensor_data(in[0]),
                                                                     (const float *)kn_tensor_data(in[1]), (float *)kn_tensor_data(*out));
    else
        knc_binary_kernel<double><<<knc_blocks(total), KNC_THREADS>>>((int)n->op, s, total, (const double *)kn_tensor_data(in[0]),
                                                                      (const double *)kn_tensor_data(in[1]), (double *)kn_tensor_data(*out));
    KNC_LAUNCHED(knc_binary_kernel);
    return KN_OK;
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
 * every other source value exactly. */
__global__ void knc_cast_kernel(int sdt, const void *src, int ddt, void *dst, int64_t total) {
    KNC_FOR(i, total) {
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

KNC_KERNEL(knc_cast) {
    KN_TRY(knc_new_out(n, knc_dev(in), out));
    int64_t total = kn_tensor_numel(*out);
    if (total == 0) return KN_OK;
    knc_cast_kernel<<<knc_blocks(total), KNC_THREADS>>>((int)in[0]->dtype, kn_tensor_data(in[0]), (int)n->type.dtype,
                                                        kn_tensor_data(*out), total);
    KNC_LAUNCHED(knc_cast_kernel);
    return KN_OK;
}

/* eq (nops 2) and where (nops 3), any dtypes, through doubles as on the CPU. */
__global__ void knc_select_kernel(int nops, knc_strides s, int64_t total, int d0, const void *p0, int d1, const void *p1,
                                  int d2, const void *p2, int dout, void *o) {
    KNC_FOR(i, total) {
        int64_t off[3];
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
    knc_strides s = bcast_strides(n, nops, in);
    const kn_tensor *c = nops == 3 ? in[2] : in[1];
    knc_select_kernel<<<knc_blocks(total), KNC_THREADS>>>(nops, s, total, (int)in[0]->dtype, kn_tensor_data(in[0]),
                                                          (int)in[1]->dtype, kn_tensor_data(in[1]), (int)c->dtype,
                                                          kn_tensor_data(c), (int)n->type.dtype, kn_tensor_data(*out));
    KNC_LAUNCHED(knc_select_kernel);
    return KN_OK;
}

KNC_KERNEL(knc_eq) { return select_op(n, in, out, 2); }
KNC_KERNEL(knc_where) { return select_op(n, in, out, 3); }

/* ---------------------------------------------------------------- unary and activations */

template <typename T>
__device__ inline T knc_gelu(T v) {
    const T k = (T)0.7978845608028654, c = (T)0.044715;
    return (T)0.5 * v * ((T)1 + knc_tanh(k * (v + c * v * v * v)));
}

template <typename T>
__global__ void knc_unary_kernel(int op, const T *x, T *y, int64_t total) {
    KNC_FOR(i, total) {
        T v = x[i], r;
        switch (op) {
        case KN_OP_NEG: r = -v; break;
        case KN_OP_EXP: r = knc_exp(v); break;
        case KN_OP_LOG: r = knc_log(v); break;
        case KN_OP_SQRT: r = knc_sqrt(v); break;
        case KN_OP_RSQRT: r = (T)1 / knc_sqrt(v); break;
        case KN_OP_TANH: r = knc_tanh(v); break;
        case KN_OP_GELU: r = knc_gelu(v); break;
        default: r = v > 0 ? v : (T)0; break; /* relu */
        }
        y[i] = r;
    }
}

template <typename T>
__global__ void knc_act_bwd_kernel(int op, const T *dy, const T *x, T *dx, int64_t total) {
    const T k = (T)0.7978845608028654, c = (T)0.044715;
    KNC_FOR(i, total) {
        T v = x[i];
        if (op == KN_OP_GELU_BWD) {
            T t = knc_tanh(k * (v + c * v * v * v));
            T d = (T)0.5 * ((T)1 + t) + (T)0.5 * v * ((T)1 - t * t) * k * ((T)1 + (T)3 * c * v * v);
            dx[i] = dy[i] * d;
        } else {
            dx[i] = v > 0 ? dy[i] : (T)0;
        }
    }
}

KNC_KERNEL(knc_unary) {
    kn_dtype dt = n->type.dtype;
    if (dt != KN_DT_F32 && dt != KN_DT_F64) return knc_unsupported(n, dt);
    KN_TRY(knc_new_out(n, knc_dev(in), out));
    int64_t total = kn_tensor_numel(*out);
    if (total == 0) return KN_OK;
    if (dt == KN_DT_F32)
        knc_unary_kernel<float><<<knc_blocks(total), KNC_THREADS>>>((int)n->op, (const float *)kn_tensor_data(in[0]), (float *)kn_tensor_data(*out), total);
    else
        knc_unary_kernel<double><<<knc_blocks(total), KNC_THREADS>>>((int)n->op, (const double *)kn_tensor_data(in[0]), (double *)kn_tensor_data(*out), total);
    KNC_LAUNCHED(knc_unary_kernel);
    return KN_OK;
}

KNC_KERNEL(knc_act_bwd) {
    kn_dtype dt = n->type.dtype;
    if (dt != KN_DT_F32 && dt != KN_DT_F64) return knc_unsupported(n, dt);
    KN_TRY(knc_new_out(n, knc_dev(in), out));
    int64_t total = kn_tensor_numel(*out);
    if (total == 0) return KN_OK;
    if (dt == KN_DT_F32)
        knc_act_bwd_kernel<float><<<knc_blocks(total), KNC_THREADS>>>((int)n->op, (const float *)kn_tensor_data(in[0]),
                                                                      (const float *)kn_tensor_data(in[1]), (float *)kn_tensor_data(*out), total);
    else
        knc_act_bwd_kernel<double><<<knc_blocks(total), KNC_THREADS>>>((int)n->op, (const double *)kn_tensor_data(in[0]),
                                                                       (const double *)kn_tensor_data(in[1]), (double *)kn_tensor_data(*out), total);
    KNC_LAUNCHED(knc_act_bwd_kernel);
    return KN_OK;
}

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
        knc_dropout_kernel<float><<<knc_blocks(total), KNC_THREADS>>>((const float *)kn_tensor_data(in[0]), (float *)kn_tensor_data(*out),
                                                                      total, a->p, (uint64_t)a->seed, (uint64_t)a->offset);
    else
        knc_dropout_kernel<double><<<knc_blocks(total), KNC_THREADS>>>((const double *)kn_tensor_data(in[0]), (double *)kn_tensor_data(*out),
                                                                       total, a->p, (uint64_t)a->seed, (uint64_t)a->offset);
    KNC_LAUNCHED(knc_dropout_kernel);
    return KN_OK;
}

/* ---------------------------------------------------------------- causal_fill */

template <typename T>
__global__ void knc_causal_fill_kernel(const T *x, T *y, int64_t total, int64_t rows, int64_t cols, T value) {
    KNC_FOR(i, total) {
        int64_t c = i % cols, r = (i / cols) % rows;
        y[i] = c > r + cols - rows ? value : x[i];
    }
}

KNC_KERNEL(knc_causal_fill) {
    kn_dtype dt = n->type.dtype;
    if (dt != KN_DT_F32 && dt != KN_DT_F64) return knc_unsupported(n, dt);
    KN_TRY(knc_new_out(n, knc_dev(in), out));
    int64_t total = kn_tensor_numel(*out);
    if (total == 0) return KN_OK;
    int64_t rows = n->type.shape[n->type.ndim - 2], cols = n->type.shape[n->type.ndim - 1];
    if (dt == KN_DT_F32)
        knc_causal_fill_kernel<float><<<knc_blocks(total), KNC_THREADS>>>((const float *)kn_tensor_data(in[0]), (float *)kn_tensor_data(*out),
                                                                          total, rows, cols, (float)n->attrs.value);
    else
        knc_causal_fill_kernel<double><<<knc_blocks(total), KNC_THREADS>>>((const double *)kn_tensor_data(in[0]), (double *)kn_tensor_data(*out),
                                                                           total, rows, cols, n->attrs.value);
    KNC_LAUNCHED(knc_causal_fill_kernel);
    return KN_OK;
}
