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
 * The arithmetic, per (b, h), with L = len[b] (clamped to [0, Tmax]):
 *   s_t = scale * q . kc[t]  (t < L),   s_new = scale * q . kn,
 *   p = softmax(s_0 .. s_{L-1}, s_new),   y = sum_t p_t vc[t] + p_new vn,
 * in f32 with the max subtracted (f64 operands: in f64). The new token always takes part,
 * so a row with L = 0 is y = vn. */
#include <math.h>
#include <stdio.h>

#include "ir/ir_impl.h"

#define TS(t, buf) kn_type_str((t), (buf), sizeof(buf))

/* q, kn, vn [..., 1, D]; kc, vc [..., Tmax, D] with the same leading axes; len [...] i32
 * (one count per leading index: [B, 1] for [B, H, 1, D] reads len[b]). */
kn_status infer_attn_decode(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    char a[96], b[96];
    (void)n;
    const kn_type *q = in[0], *kc = in[1], *vc = in[2], *kn = in[3], *vn = in[4], *len = in[5];
    KN_TRY(kn_infer_need_float(q, "q", msg, msz));
    if (q->ndim != 4 || q->shape[2] != 1) {
        snprintf(msg, msz, "q %s must be [B, H, 1, D] (one new token per row)", TS(q, a));
        return KN_ERR_SHAPE;
    }
    if (!kn_type_equal(q, kn) || !kn_type_equal(q, vn)) {
        snprintf(msg, msz, "q %s, the new key %s and value must have one type", TS(q, a), TS(kn, b));
        return q->dtype != kn->dtype || q->dtype != vn->dtype ? KN_ERR_DTYPE : KN_ERR_SHAPE;
    }
    if (!kn_type_equal(kc, vc) || kc->dtype != q->dtype || kc->ndim != 4 || kc->shape[0] != q->shape[0] ||
        kc->shape[1] != q->shape[1] || kc->shape[3] != q->shape[3] || kc->shape[2] < 1) {
        snprintf(msg, msz, "the caches %s and %s must both be [B, H, Tmax, D] of q's dtype, B, H and D (q %s)",
                 TS(kc, a), TS(vc, b), TS(q, b));
        return kc->dtype != q->dtype || vc->dtype != q->dtype ? KN_ERR_DTYPE : KN_ERR_SHAPE;
    }
    if (len->dtype != KN_DT_I32 || kn_type_numel(len) != q->shape[0]) {
        snprintf(msg, msz, "len %s must be i32 with one count per row (%lld)", TS(len, a), (long long)q->shape[0]);
        return len->dtype != KN_DT_I32 ? KN_ERR_DTYPE : KN_ERR_SHAPE;
    }
    *out = *q;
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

#define F32(i) ((const float *)kn_tensor_data(in[i]))
#define F64(i) ((const double *)kn_tensor_data(in[i]))

kn_status kern_attn_decode(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    const kn_type *q = &n->type;
    const int64_t B = q->shape[0], H = q->shape[1], D = q->shape[3], T = in[1]->shape[2];
    if (q->dtype != KN_DT_F32 && q->dtype != KN_DT_F64)
        return kn_error(KN_ERR_UNSUPPORTED, "attn_decode: the cpu kernel takes f32 and f64 (got %s)",
                        kn_dtype_name(q->dtype));
    KN_TRY(kn_eval_new_out(n, out));
    const int32_t *len = kn_tensor_data(in[5]);
    void *s = kn_malloc((size_t)(T + 1) * sizeof(double));
    if (!s) {
        kn_tensor_free(*out);
        *out = NULL;
        return kn_error(KN_ERR_OOM, "attn_decode: out of memory for %lld scores", (long long)T + 1);
    }
    for (int64_t b = 0; b < B; b++) {
        const int64_t L = len[b] < 0 ? 0 : len[b] > T ? T : len[b];
        for (int64_t h = 0; h < H; h++) {
            const int64_t r = b * H + h, c = r * T * D;
            if (q->dtype == KN_DT_F32)
                decode_row_float(F32(0) + r * D, F32(1) + c, F32(2) + c, F32(3) + r * D, F32(4) + r * D, L, D,
                                 (float)n->attrs.scale, s, (float *)kn_tensor_data(*out) + r * D);
            else
                decode_row_double(F64(0) + r * D, F64(1) + c, F64(2) + c, F64(3) + r * D, F64(4) + r * D, L, D,
                                  n->attrs.scale, s, (double *)kn_tensor_data(*out) + r * D);
        }
    }
    kn_free(s);
    return KN_OK;
}

/* Counted as if every cache position were valid (the count is a run-time value): two
 * products of D per position and the softmax's few operations; the bytes are the operands'. */
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
