/* attn_decode.c — the op attn_decode: one new token's attention over a static KV cache
 * (kn_attn_decode, contract in kiln/ir.h), its shape rule, its CPU kernel and its cost.
 *
 * Why an op: the decode step of generation (core/nn/infer.c) attends one query per row over
 * the positions cached so far plus the token's own key and value, which are not in the
 * cache yet. Built from the general ops that was ten steps per layer (two products against
 * the cache and the new key, the scale and the mask, a concat, a softmax, two slices, the
 * product with the values, the new value's share and the sum), each a kernel launch of a
 * few microseconds on a GPU for a few kilobytes of work, and the products read the whole
 * static cache, valid or not. One op is one launch per layer and reads only the len[b]
 * valid positions. (The CUDA kernel: core/runtime/cuda_attn_decode.cu.)
 *
 * Why these operands: the op reads q, k and v where the q/k/v projection left them, the
 * three column blocks of one [B, 3 * H * D] row (GPT-2's c_attn), and writes y as [B, H * D],
 * the heads side by side, which is what the output projection multiplies: no split of the
 * projection, no reshape or permute of heads, so nothing between the product, its bias
 * kernel, this op and the next product (three steps a layer fewer than q, k, v [B, H, 1, D]
 * apart). And it appends the token's k and v to the cache at position len[b] itself, the
 * one op of the IR that writes into an operand: the append was an output of the step copied
 * into the cache after it (one more copy per token, outside the CUDA graph); the cache is
 * state the decode step owns, read and written by this op alone.
 *
 * The arithmetic, per (b, h), with L = len[b] (clamped to [0, Tmax]), q, kn, vn row b's
 * column blocks h of the q, k and v thirds of qkv:
 *   s_t = scale * q . kc[t]  (t < L),   s_new = scale * q . kn,
 *   p = softmax(s_0 .. s_{L-1}, s_new),   y = sum_t p_t vc[t] + p_new vn,
 * in f32 with the max subtracted (f64 operands: in f64), then kc[L] = kn, vc[L] = vn when
 * L < Tmax. The new token always takes part, so a row with L = 0 is y = vn. */
#include <math.h>
#include <stdio.h>

#include "ir/ir_impl.h"

#define TS(t, buf) kn_type_str((t), (buf), sizeof(buf))

/* qkv [B, 3 * H * D]; kc, vc [B, H, Tmax, D] of qkv's dtype; len i32 with B elements. */
kn_status infer_attn_decode(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    char a[96], b[96];
    (void)n;
    const kn_type *qkv = in[0], *kc = in[1], *vc = in[2], *len = in[3];
    KN_TRY(kn_infer_need_float(qkv, "qkv", msg, msz));
    if (qkv->ndim != 2) {
        snprintf(msg, msz, "qkv %s must be [B, 3 * H * D] (one new token per row: its q, k and v)", TS(qkv, a));
        return KN_ERR_SHAPE;
    }
    if (!kn_type_equal(kc, vc) || kc->dtype != qkv->dtype || kc->ndim != 4 || kc->shape[0] != qkv->shape[0] ||
        3 * kc->shape[1] * kc->shape[3] != qkv->shape[1] || kc->shape[2] < 1) {
        snprintf(msg, msz, "the caches %s and %s must both be [B, H, Tmax, D] of qkv's dtype with 3 * H * D = qkv's "
                 "columns (qkv %s)", TS(kc, a), TS(vc, b), TS(qkv, b));
        return kc->dtype != qkv->dtype || vc->dtype != qkv->dtype ? KN_ERR_DTYPE : KN_ERR_SHAPE;
    }
    if (len->dtype != KN_DT_I32 || kn_type_numel(len) != qkv->shape[0]) {
        snprintf(msg, msz, "len %s must be i32 with one count per row (%lld)", TS(len, a), (long long)qkv->shape[0]);
        return len->dtype != KN_DT_I32 ? KN_ERR_DTYPE : KN_ERR_SHAPE;
    }
    *out = *qkv;
    out->shape[1] = qkv->shape[1] / 3;
    return KN_OK;
}

/* One (b, h) pair: q, kn, vn, y [D]; kc, vc [T][D]; s scratch [T + 1]. */
#define DECODE_ROW(TYPE, ACC)                                                                               \
    static void decode_row_##TYPE(const TYPE *q, const TYPE *kc, const TYPE *vc, const TYPE *kn, const TYPE *vn, \
                                  int64_t L, int64_t D, ACC scale, ACC *s, TYPE *y) {                       \
        ACC m = 0;                                                                                          \
        for (int64_t t = 0; t <= L; t++) {                                                                  \
            const TYPE *k = t < L ? kc + t * D : kn;                                                        \
            ACC d = 0;                                                                                      \
            for (int64_t j = 0; j < D; j++) d += (ACC)q[j] * (ACC)k[j];                                     \
            s[t] = scale * d;                                                                               \
            if (t == 0 || s[t] > m) m = s[t];                                                               \
        }                                                                                                   \
        ACC z = 0;                                                                                          \
        for (int64_t t = 0; t <= L; t++) z += s[t] = (ACC)exp((double)(s[t] - m));                          \
        for (int64_t j = 0; j < D; j++) {                                                                   \
            ACC acc = 0;                                                                                    \
            for (int64_t t = 0; t <= L; t++) acc += s[t] * (ACC)(t < L ? vc[t * D + j] : vn[j]);            \
            y[j] = (TYPE)(acc / z);                                                                         \
        }                                                                                                   \
    }
DECODE_ROW(float, float)
DECODE_ROW(double, double)

/* One (b, h) pair of the cache's type: the attention, then the append at L. */
#define DECODE_PAIR(TYPE, ACC)                                                                              \
    static void decode_pair_##TYPE(const kn_tensor *const *in, int64_t b, int64_t h, int64_t L, ACC scale,     \
                                   ACC *s, TYPE *y) {                                                       \
        const int64_t H = in[1]->shape[1], T = in[1]->shape[2], D = in[1]->shape[3], c = (b * H + h) * T * D; \
        const TYPE *q = (const TYPE *)kn_tensor_data(in[0]) + b * 3 * H * D + h * D;                       \
        TYPE *kc = (TYPE *)kn_tensor_data(in[1]) + c, *vc = (TYPE *)kn_tensor_data(in[2]) + c;              \
        decode_row_##TYPE(q, kc, vc, q + H * D, q + 2 * H * D, L, D, scale, s, y + (b * H + h) * D);       \
        if (L < T)                                                                                          \
            for (int64_t j = 0; j < D; j++) kc[L * D + j] = q[H * D + j], vc[L * D + j] = q[2 * H * D + j];   \
    }
DECODE_PAIR(float, float)
DECODE_PAIR(double, double)

kn_status kern_attn_decode(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    const kn_type *y = &n->type;
    const int64_t B = in[1]->shape[0], H = in[1]->shape[1], T = in[1]->shape[2];
    if (y->dtype != KN_DT_F32 && y->dtype != KN_DT_F64)
        return kn_error(KN_ERR_UNSUPPORTED, "attn_decode: the cpu kernel takes f32 and f64 (got %s)",
                        kn_dtype_name(y->dtype));
    KN_TRY(kn_eval_new_out(n, out));
    const int32_t *len = kn_tensor_data(in[3]);
    void *s = kn_malloc((size_t)(T + 1) * sizeof(double));
    if (!s) {
        kn_tensor_free(*out);
        *out = NULL;
        return kn_error(KN_ERR_OOM, "attn_decode: out of memory for %lld scores", (long long)T + 1);
    }
    for (int64_t b = 0; b < B; b++) {
        const int64_t L = len[b] < 0 ? 0 : len[b] > T ? T : len[b];
        for (int64_t h = 0; h < H; h++)
            if (y->dtype == KN_DT_F32)
                decode_pair_float(in, b, h, L, (float)n->attrs.scale, s, kn_tensor_data(*out));
            else
                decode_pair_double(in, b, h, L, n->attrs.scale, s, kn_tensor_data(*out));
    }
    kn_free(s);
    return KN_OK;
}

/* Counted as if every cache position were valid (the count is a run-time value): two
 * products of D per position and the softmax's few operations; the bytes are the operands'
 * and the result's (the append's two rows are in the noise). */
kn_cost cost_attn_decode(const kn_graph *g, const kn_node *n) {
    const kn_type *kc = &g->nodes[n->in[1]].type;
    double rows = (double)(kc->shape[0] * kc->shape[1]), t = (double)kc->shape[2] + 1, d = (double)kc->shape[3];
    double bytes = 0;
    for (int i = 0; i <= n->nin; i++) { /* the operands and the result */
        const kn_type *x = i < n->nin ? &g->nodes[n->in[i]].type : &n->type;
        bytes += (double)kn_type_numel(x) * (double)kn_dtype_size(x->dtype);
    }
    return (kn_cost){rows * t * (4.0 * d + 5.0), bytes};
}
