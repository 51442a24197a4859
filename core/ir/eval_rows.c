/* eval_rows.c — the CPU kernels of the row ops (the "CPU kernel" column of ops.def):
 * softmax and log_softmax, causal_softmax, flash attention (its [..., T, D] and [B, T, H,
 * D] layouts), layernorm and normalize (+ dx), cross_entropy (+ backward) and the fused
 * cross-entropy pair (kn_cpu_cross_entropy_fused, ir_impl.h).
 *
 * Why apart from eval.c: each of these reads whole rows of an axis and makes statistics of
 * them (a max, a sum of exponentials, a mean and variance) before it writes, through the
 * row kernels of kiln/kernels.h, where eval.c's kernels map elements or index tiles. The
 * contract is eval.c's: contiguous CPU operands of the node's types, the result allocated
 * here (or the memory plan's, kn_eval_new_out), f32 and f64, the 16-bit floats widened by
 * kn_cpu_node_eval before; the helpers both files use are in eval_impl.h. */
#include <string.h>

#include "ir/eval_impl.h"

/* [outer, n, inner] around the node's axis. */
static void axis_split(const kn_type *t, int64_t axis, int64_t *outer, int64_t *len, int64_t *inner) {
    int ax = (int)(axis < 0 ? axis + t->ndim : axis);
    *outer = *inner = 1;
    for (int i = 0; i < ax; i++) *outer *= t->shape[i];
    for (int i = ax + 1; i < t->ndim; i++) *inner *= t->shape[i];
    *len = t->shape[ax];
}

kn_status kern_softmax(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    int64_t o, l, i;
    if (n->op != KN_OP_SOFTMAX && n->op != KN_OP_LOG_SOFTMAX) return kn_eval_no_kernel(n, "kern_softmax");
    axis_split(&n->type, n->attrs.axis, &o, &l, &i);
    KN_RUN(n, out, n->type.dtype, KN_DISPATCH(n->type.dtype, kn_k_softmax, D(in[0]), D(*out), o, l, i, n->op == KN_OP_LOG_SOFTMAX));
}

kn_status kern_softmax_bwd(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    int64_t o, l, i;
    if (n->op != KN_OP_SOFTMAX_BWD && n->op != KN_OP_LOG_SOFTMAX_BWD) return kn_eval_no_kernel(n, "kern_softmax_bwd");
    axis_split(&n->type, n->attrs.axis, &o, &l, &i);
    KN_RUN(n, out, n->type.dtype, KN_DISPATCH(n->type.dtype, kn_k_softmax_bwd, D(in[0]), D(in[1]), D(*out), o, l, i,
                                              n->op == KN_OP_LOG_SOFTMAX_BWD));
}

/* causal_softmax(_bwd): the batch of [Tq, Tk] matrices. The scale is passed rounded to the
 * dtype, as the 0-d constant of a multiplication by a scalar would be. */
static void causal_dims(const kn_type *t, int64_t *batch, int64_t *tq, int64_t *tk) {
    *tq = t->shape[t->ndim - 2];
    *tk = t->shape[t->ndim - 1];
    *batch = (*tq != 0 && *tk != 0) ? kn_type_numel(t) / (*tq * *tk) : 0;
}

kn_status kern_causal_softmax(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    int64_t b, q, k;
    double s = n->attrs.scale;
    causal_dims(&n->type, &b, &q, &k);
    KN_RUN(n, out, n->type.dtype, KN_DISPATCH(n->type.dtype, kn_k_causal_softmax, D(in[0]), D(*out), b, q, k, s));
}

kn_status kern_causal_softmax_bwd(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    int64_t b, q, k;
    double s = n->attrs.scale;
    causal_dims(&n->type, &b, &q, &k);
    KN_RUN(n, out, n->type.dtype, KN_DISPATCH(n->type.dtype, kn_k_causal_softmax_bwd, D(in[0]), D(in[1]), D(*out), b, q, k, s));
}

/* Allocate *out, run STMT (false: unsupported dtype), and report ok == false (the
 * kernels' scratch tiles could not be allocated) as out of memory. */
#define KN_RUN_OK(n, out, dt, ok, STMT)                                                         \
    do {                                                                                        \
        KN_TRY(kn_eval_new_out(n, out));                                                                \
        bool known_ = (STMT);                                                                   \
        if (!known_ || !(ok)) {                                                                 \
            kn_tensor_free(*out);                                                               \
            *out = NULL;                                                                        \
            return known_ ? kn_error(KN_ERR_OOM, "%s: out of memory for the tiles", kn_op_name((n)->op)) \
                          : kn_eval_unsupported(n, dt);                                                 \
        }                                                                                       \
        return KN_OK;                                                                           \
    } while (0)

/* The [B, T, H, D] layout (perm [0, 2, 1, 3], kiln/ir.h) on the CPU: the rows are gathered
 * into the [..., T, D] layout's buffers, the same kernels run, and the results are
 * scattered back, so both layouts give the same bits. flash_move copies, for each of the
 * bh = B H pairs and t rows, d elements of es bytes between the packed row
 * (pair t + i) ldp (+ poff) of p and the strided row (b t + i) lds + h d (+ soff) of s;
 * to_packed says which way. */
static void flash_move(bool to_packed, char *p, int64_t ldp, int64_t poff, char *s, int64_t lds, int64_t soff,
                       int64_t bh, int64_t nh, int64_t t, int64_t d, size_t es) {
    for (int64_t pr = 0; pr < bh; pr++)
        for (int64_t i = 0; i < t; i++) {
            char *pk = p + (size_t)((pr * t + i) * ldp + poff) * es;
            char *st = s + (size_t)((pr / nh * t + i) * lds + pr % nh * d + soff) * es;
            if (to_packed) memcpy(pk, st, (size_t)d * es);
            else memcpy(st, pk, (size_t)d * es);
        }
}

/* y's L column (column d of packed rows of ldp elements) to or from the flat value's
 * [B, H, T] part l. */
static void flash_move_l(bool to_packed, char *p, int64_t ldp, int64_t d, char *l, int64_t rows, size_t es) {
    for (int64_t r = 0; r < rows; r++) {
        if (to_packed) memcpy(p + (size_t)(r * ldp + d) * es, l + (size_t)r * es, es);
        else memcpy(l + (size_t)r * es, p + (size_t)(r * ldp + d) * es, es);
    }
}

/* The flat y (or a dy of its type) as the packed [bh, t, d + 1] rows p. */
static void flash_pack_y(char *p, const kn_tensor *y, int64_t bh, int64_t nh, int64_t t, int64_t d, size_t es) {
    char *yd = (char *)D(y);
    flash_move(true, p, d + 1, 0, yd, nh * d, 0, bh, nh, t, d, es);
    flash_move_l(true, p, d + 1, d, yd + (size_t)(bh * t * d) * es, bh * t, es);
}

/* The typed kernels (f32, f64; false: another dtype). *ok false: no memory for the tiles. */
static bool flash_fwd_typed(kn_dtype dt, const void *q, const void *k, const void *v, void *y, int64_t bh, int64_t t,
                            int64_t d, double scale, bool *ok) {
    return KN_DISPATCH_OK(dt, *ok, kn_k_flash_attn, q, k, v, y, bh, t, d, scale);
}
static bool flash_bwd_typed(kn_dtype dt, const void *q, const void *k, const void *v, const void *y, const void *dy,
                            int64_t dyc, void *g, int64_t bh, int64_t t, int64_t d, double scale, bool *ok) {
    return KN_DISPATCH_OK(dt, *ok, kn_k_flash_attn_bwd, q, k, v, y, dy, dyc, g, bh, t, d, scale);
}

/* flash_attn(_bwd) in the [B, T, H, D] layout: gather, the [..., T, D] kernels, scatter. */
static kn_status flash_bthd(const kn_node *n, const kn_tensor *const *in, kn_tensor **out, bool bwd) {
    const kn_tensor *q = in[0];
    int64_t t = q->shape[1], nh = q->shape[2], d = q->shape[3], bh = q->shape[0] * nh, rows = bh * t;
    kn_dtype dt = n->type.dtype;
    if (dt != KN_DT_F32 && dt != KN_DT_F64) return kn_eval_unsupported(n, dt);
    size_t es = kn_dtype_size(dt), m = (size_t)(rows * d) * es, my = (size_t)(rows * (d + 1)) * es;
    bool dyl = bwd && in[4]->ndim == 1; /* dy has y's type: L's gradient too */
    int64_t dyc = dyl ? d + 1 : d;
    /* q, k, v, then y (bwd), dy (bwd), then the result: [bh, t, d + 1] or [3, bh, t, d] */
    size_t total = 3 * m + (bwd ? my + (size_t)(rows * dyc) * es + 3 * m : my);
    char *w = kn_malloc(total ? total : 1);
    if (!w) return kn_error(KN_ERR_OOM, "%s: out of memory for the [B, H, T, D] copies", kn_op_name(n->op));
    for (int i = 0; i < 3; i++) flash_move(true, w + i * m, d, 0, (char *)D(in[i]), nh * d, 0, bh, nh, t, d, es);
    char *yp = w + 3 * m, *dyp = yp + my, *res = bwd ? dyp + (size_t)(rows * dyc) * es : yp;
    kn_status st = kn_eval_new_out(n, out);
    bool ok = true;
    if (st == KN_OK && !bwd) {
        flash_fwd_typed(dt, w, w + m, w + 2 * m, yp, bh, t, d, n->attrs.scale, &ok);
        char *o = (char *)D(*out);
        if (ok) flash_move(false, yp, d + 1, 0, o, nh * d, 0, bh, nh, t, d, es);
        if (ok) flash_move_l(false, yp, d + 1, d, o + (size_t)(rows * d) * es, rows, es);
    } else if (st == KN_OK) {
        flash_pack_y(yp, in[3], bh, nh, t, d, es);
        if (dyl) flash_pack_y(dyp, in[4], bh, nh, t, d, es);
        else flash_move(true, dyp, d, 0, (char *)D(in[4]), nh * d, 0, bh, nh, t, d, es);
        flash_bwd_typed(dt, w, w + m, w + 2 * m, yp, dyp, dyc, res, bh, t, d, n->attrs.scale, &ok);
        for (int i = 0; ok && i < 3; i++) /* [3, bh, t, d] -> [B, T, 3, H, D] */
            flash_move(false, res + i * m, d, 0, (char *)D(*out), 3 * nh * d, i * nh * d, bh, nh, t, d, es);
    }
    kn_free(w);
    if (st == KN_OK && !ok) {
        kn_tensor_free(*out);
        *out = NULL;
        st = kn_error(KN_ERR_OOM, "%s: out of memory for the tiles", kn_op_name(n->op));
    }
    return st;
}

kn_status kern_flash_attn(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    int64_t bh, t, d, nh;
    bool ok = true;
    kn_type q = {.dtype = in[0]->dtype, .ndim = in[0]->ndim};
    memcpy(q.shape, in[0]->shape, sizeof(int64_t) * (size_t)q.ndim);
    kn_flash_dims(&q, &n->attrs, &bh, &t, &d, &nh);
    if (nh) return flash_bthd(n, in, out, false);
    KN_RUN_OK(n, out, n->type.dtype, ok, flash_fwd_typed(n->type.dtype, D(in[0]), D(in[1]), D(in[2]), D(*out), bh, t, d,
                                                         n->attrs.scale, &ok));
}

kn_status kern_flash_attn_bwd(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    int64_t bh, t, d, nh;
    bool ok = true;
    kn_type q = {.dtype = in[0]->dtype, .ndim = in[0]->ndim};
    memcpy(q.shape, in[0]->shape, sizeof(int64_t) * (size_t)q.ndim);
    kn_flash_dims(&q, &n->attrs, &bh, &t, &d, &nh);
    if (nh) return flash_bthd(n, in, out, true);
    int64_t dyc = in[4]->shape[in[4]->ndim - 1];
    KN_RUN_OK(n, out, n->type.dtype, ok, flash_bwd_typed(n->type.dtype, D(in[0]), D(in[1]), D(in[2]), D(in[3]),
                                                         D(in[4]), dyc, D(*out), bh, t, d, n->attrs.scale, &ok));
}

static void rows_cols(const kn_type *t, int64_t *rows, int64_t *c) {
    *c = t->shape[t->ndim - 1];
    *rows = *c ? kn_type_numel(t) / *c : 0;
}

kn_status kern_layernorm(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    int64_t r, c;
    rows_cols(&n->type, &r, &c);
    KN_RUN(n, out, n->type.dtype, KN_DISPATCH(n->type.dtype, kn_k_layernorm, D(in[0]), D(in[1]), D(in[2]), D(*out), r, c, n->attrs.eps));
}

kn_status kern_normalize(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    int64_t r, c;
    rows_cols(&n->type, &r, &c);
    KN_RUN(n, out, n->type.dtype, KN_DISPATCH(n->type.dtype, kn_k_layernorm, D(in[0]), NULL, NULL, D(*out), r, c, n->attrs.eps));
}

kn_status kern_layernorm_dx(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    int64_t r, c;
    rows_cols(&n->type, &r, &c);
    KN_RUN(n, out, n->type.dtype, KN_DISPATCH(n->type.dtype, kn_k_layernorm_dx, D(in[0]), D(in[1]), D(in[2]), D(*out), r, c, n->attrs.eps));
}

kn_status kern_cross_entropy(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    const kn_tensor *lg = in[0], *t = in[1];
    int64_t r, v, bad = 0;
    bool ok = true;
    v = lg->shape[lg->ndim - 1];
    r = NUMEL(t);
    KN_TRY(kn_eval_new_out(n, out));
    if (!KN_DISPATCH_OK(lg->dtype, ok, kn_k_cross_entropy, D(lg), D(t), t->dtype, r, v, D(*out), &bad)) {
        kn_tensor_free(*out); *out = NULL; return kn_eval_unsupported(n, lg->dtype);
    }
    if (!ok) { kn_tensor_free(*out); *out = NULL; return kn_eval_bad_index(n, t, bad, v); }
    return KN_OK;
}

kn_status kern_cross_entropy_bwd(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    const kn_tensor *dl = in[0], *lg = in[1], *t = in[2];
    int64_t v = lg->shape[lg->ndim - 1], r = NUMEL(t), bad = 0;
    bool ok = true;
    double g = kn_dtype_load(dl->dtype, D(dl), 0);
    KN_TRY(kn_eval_new_out(n, out));
    if (!KN_DISPATCH_OK(lg->dtype, ok, kn_k_cross_entropy_bwd, g, D(lg), D(t), t->dtype, r, v, D(*out), &bad)) {
        kn_tensor_free(*out); *out = NULL; return kn_eval_unsupported(n, lg->dtype);
    }
    if (!ok) { kn_tensor_free(*out); *out = NULL; return kn_eval_bad_index(n, t, bad, v); }
    return KN_OK;
}

/* The fused pair on the CPU (kiln/device.h's cross_entropy_fused; ir_impl.h): the nodes
 * cross_entropy and cross_entropy_bwd of these operands, made and type-checked here, and
 * kn_k_cross_entropy_fused. 16-bit logits compute as eval_low_precision does each node:
 * widened to f32 (the copy is read, so the gradient may go over the logits), the f32
 * kernel, the gradient rounded once as it is stored: the pair's bits. */
kn_status kn_cpu_cross_entropy_fused(const kn_tensor *const *in, kn_tensor **loss, kn_tensor **dlogits) {
    if (!in || !in[0] || !in[1] || !in[2] || !loss || !dlogits)
        return kn_error(KN_ERR_ARG, "kn_cpu_cross_entropy_fused: NULL argument");
    kn_node bn, ln;
    memset(&bn, 0, sizeof bn);
    bn.op = KN_OP_CROSS_ENTROPY_BWD;
    bn.nin = 3;
    bn.attrs = kn_attrs_default();
    ln = bn;
    ln.op = KN_OP_CROSS_ENTROPY;
    ln.nin = 2;
    kn_type ty[3];
    const kn_type *tp[3] = {&ty[0], &ty[1], &ty[2]};
    for (int i = 0; i < 3; i++) {
        if (in[i]->storage->device.type != KN_DEVICE_CPU || !kn_tensor_is_contiguous(in[i]))
            return kn_error(KN_ERR_ARG, "kn_cpu_cross_entropy_fused: operand %d is not a contiguous CPU tensor", i);
        ty[i].dtype = in[i]->dtype;
        ty[i].ndim = in[i]->ndim;
        memcpy(ty[i].shape, in[i]->shape, sizeof ty[i].shape[0] * (size_t)in[i]->ndim);
    }
    char msg[256];
    if (kn_node_infer(&bn, tp, &bn.type, msg, sizeof msg) != KN_OK || kn_node_infer(&ln, tp + 1, &ln.type, msg, sizeof msg) != KN_OK)
        return kn_error(KN_ERR_SHAPE, "kn_cpu_cross_entropy_fused: %s", msg);
    const kn_tensor *dl = in[0], *lg = in[1], *t = in[2];
    kn_dtype dt = lg->dtype;
    bool low = dt == KN_DT_BF16 || dt == KN_DT_F16;
    if (dt != KN_DT_F32 && dt != KN_DT_F64 && !low) return kn_eval_unsupported(&bn, dt);
    if (*dlogits && D(*dlogits) != D(lg)) {
        const char *a = D(*dlogits), *b = D(lg);
        size_t bytes = (size_t)NUMEL(lg) * kn_dtype_size(dt);
        if (a < b + bytes && b < a + bytes)
            return kn_error(KN_ERR_ARG, "kn_cpu_cross_entropy_fused: dlogits overlap the logits without being them");
    }
    int64_t v = lg->shape[lg->ndim - 1], r = NUMEL(t), bad = 0;
    double g = kn_dtype_load(dl->dtype, D(dl), 0);
    kn_tensor *l = *loss, *wide = NULL, *wd = NULL;
    bool made_l = !l, made_d = !*dlogits, ok = true;
    kn_status st = kn_eval_new_out(&ln, &l);
    if (st == KN_OK) st = kn_eval_new_out(&bn, dlogits);
    if (st == KN_OK && low) { /* the widened logits, and the f32 gradient before its rounding */
        st = kn_tensor_empty(&wide, KN_DT_F32, lg->ndim, lg->shape);
        if (st == KN_OK) st = kn_tensor_empty(&wd, KN_DT_F32, lg->ndim, lg->shape);
        if (st == KN_OK) kn_dtype_convert(KN_DT_F32, D(wide), dt, D(lg), NUMEL(lg));
    }
    if (st == KN_OK) {
        if (low) ok = kn_k_cross_entropy_fused_f32((float)g, D(wide), D(t), t->dtype, r, v, D(l), D(wd), &bad);
        else if (dt == KN_DT_F32) ok = kn_k_cross_entropy_fused_f32((float)g, D(lg), D(t), t->dtype, r, v, D(l), D(*dlogits), &bad);
        else ok = kn_k_cross_entropy_fused_f64(g, D(lg), D(t), t->dtype, r, v, D(l), D(*dlogits), &bad);
        if (!ok) st = kn_eval_bad_index(&bn, t, bad, v);
        else if (low) kn_dtype_convert(dt, D(*dlogits), KN_DT_F32, D(wd), NUMEL(wd));
    }
    kn_tensor_free(wide);
    kn_tensor_free(wd);
    if (st != KN_OK) {
        if (made_l) kn_tensor_free(l);
        if (made_d) { kn_tensor_free(*dlogits); *dlogits = NULL; }
        return st;
    }
    *loss = l;
    return KN_OK;
}
