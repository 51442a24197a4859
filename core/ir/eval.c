/* eval.c — the CPU kernel of every op but the row ops (the "CPU kernel" column of ops.def;
 * the row ops: eval_rows.c).
 *
 * Each kern_* takes the node (attributes, result type) and its operand tensors, which are
 * contiguous CPU tensors of the operand types (eager mode and the interpreter guarantee
 * this), allocates the result and fills it with the raw kernels of kiln/kernels.h. Float
 * ops run on f32 and f64. The low-precision floats (f16, bf16) get no third family of
 * kernels: kn_cpu_node_eval (node_eval.c) widens their operands to f32, runs the f32
 * kernel and rounds the result once as it stores it, as a GPU kernel that loads bf16 into
 * float registers and stores bf16 does.
 * Views materialize a contiguous copy, except reshape and a slice that keeps one contiguous
 * block (kn_ir_aliases), which alias (values are never written after they are defined, so
 * sharing storage is safe). The row ops (softmax, causal_softmax, flash attention, the
 * norms, cross-entropy and its fused pair) are eval_rows.c's; what both files share is
 * eval_impl.h. */
#include <string.h>

#include "ir/eval_impl.h"

/* The node's output (contract in ir_impl.h). */
kn_status kn_eval_new_out(const kn_node *n, kn_tensor **out) {
    if (*out) {
        const kn_tensor *t = *out;
        bool ok = t->dtype == n->type.dtype && t->ndim == n->type.ndim && kn_tensor_is_contiguous(t) &&
                  t->storage->device.type == KN_DEVICE_CPU;
        for (int d = 0; ok && d < t->ndim; d++) ok = t->shape[d] == n->type.shape[d];
        return ok ? KN_OK : kn_error(KN_ERR_INTERNAL, "%s: the output given is not a contiguous CPU tensor of the node's "
                                     "type", kn_op_name(n->op));
    }
    return kn_tensor_empty(out, n->type.dtype, n->type.ndim, n->type.shape);
}

kn_status kern_full(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    (void)in;
    KN_TRY(kn_eval_new_out(n, out));
    int64_t k = NUMEL(*out);
    void *p = D(*out);
    if (n->type.dtype == KN_DT_F32) for (int64_t i = 0; i < k; i++) ((float *)p)[i] = (float)n->attrs.value;
    else if (n->type.dtype == KN_DT_F64) for (int64_t i = 0; i < k; i++) ((double *)p)[i] = n->attrs.value;
    else for (int64_t i = 0; i < k; i++) kn_dtype_store(n->type.dtype, p, i, n->attrs.value);
    return KN_OK;
}

kn_status kern_binary(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    kn_binary_op op;
    if (!kn_op_binary(n->op, &op) || kn_sc_binary_is_compare(op)) return kn_eval_no_kernel(n, "kern_binary");
    int64_t as[KN_MAX_DIMS], bs[KN_MAX_DIMS];
    const kn_type *t = &n->type;
    kn_ir_broadcast_strides(in[0]->ndim, in[0]->shape, t->ndim, t->shape, as);
    kn_ir_broadcast_strides(in[1]->ndim, in[1]->shape, t->ndim, t->shape, bs);
    KN_RUN(n, out, t->dtype, KN_DISPATCH(t->dtype, kn_k_binary, op, t->ndim, t->shape, D(in[0]), as, D(in[1]), bs, D(*out)));
}

/* Walk the index space of the result with the broadcast offsets of up to 3 operands:
 * the slow generic path for the rarely hot eq and where. */
static void bcast_walk(const kn_node *n, int nops, const kn_tensor *const *in, int64_t *offs_out,
                       int64_t total) {
    int64_t st[3][KN_MAX_DIMS], idx[KN_MAX_DIMS] = {0}, off[3] = {0};
    const kn_type *t = &n->type;
    for (int k = 0; k < nops; k++) kn_ir_broadcast_strides(in[k]->ndim, in[k]->shape, t->ndim, t->shape, st[k]);
    for (int64_t e = 0; e < total; e++) {
        for (int k = 0; k < nops; k++) offs_out[e * nops + k] = off[k];
        for (int d = t->ndim - 1; d >= 0; d--) {
            for (int k = 0; k < nops; k++) off[k] += st[k][d];
            if (++idx[d] < t->shape[d]) break;
            for (int k = 0; k < nops; k++) off[k] -= st[k][d] * t->shape[d];
            idx[d] = 0;
        }
    }
}

static kn_status generic_select(const kn_node *n, const kn_tensor *const *in, kn_tensor **out, int nops) {
    KN_TRY(kn_eval_new_out(n, out));
    int64_t total = NUMEL(*out);
    int64_t *offs = kn_malloc((size_t)(total * nops) * sizeof(int64_t));
    if (!offs) { kn_tensor_free(*out); *out = NULL; return kn_error(KN_ERR_OOM, "%s: out of memory", kn_op_name(n->op)); }
    bcast_walk(n, nops, in, offs, total);
    for (int64_t e = 0; e < total; e++) {
        double r;
        if (nops == 2)
            r = kn_dtype_load(in[0]->dtype, D(in[0]), offs[2 * e]) == kn_dtype_load(in[1]->dtype, D(in[1]), offs[2 * e + 1]);
        else
            r = kn_dtype_load(KN_DT_BOOL, D(in[0]), offs[3 * e]) != 0
                    ? kn_dtype_load(in[1]->dtype, D(in[1]), offs[3 * e + 1])
                    : kn_dtype_load(in[2]->dtype, D(in[2]), offs[3 * e + 2]);
        kn_dtype_store(n->type.dtype, D(*out), e, r);
    }
    kn_free(offs);
    return KN_OK;
}

kn_status kern_eq(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) { return generic_select(n, in, out, 2); }
kn_status kern_where(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) { return generic_select(n, in, out, 3); }

kn_status kern_unary(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    kn_unary_op op;
    if (!kn_op_unary(n->op, &op)) return kn_eval_no_kernel(n, "kern_unary");
    KN_RUN(n, out, n->type.dtype, KN_DISPATCH(n->type.dtype, kn_k_unary, op, D(in[0]), D(*out), NUMEL(in[0])));
}

/* unary_grad {fn}: dx = f'(x) dy of operands (dy, x), the row's gradient column. */
kn_status kern_unary_grad(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    kn_unary_op f = (kn_unary_op)n->attrs.fn;
    if (n->op != KN_OP_UNARY_GRAD || n->attrs.fn < 0 || f >= KN_UNARY_COUNT || !kn_sc_unary_has_grad(f))
        return kn_eval_no_kernel(n, "kern_unary_grad");
    KN_RUN(n, out, n->type.dtype, KN_DISPATCH(n->type.dtype, kn_k_unary_grad, f, D(in[0]), D(in[1]), D(*out), NUMEL(in[0])));
}

kn_status kern_cast(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    KN_TRY(kn_eval_new_out(n, out));
    kn_dtype_convert(n->type.dtype, D(*out), in[0]->dtype, D(in[0]), NUMEL(in[0]));
    return KN_OK;
}

kn_status kern_dropout(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    const kn_attrs *a = &n->attrs;
    KN_RUN(n, out, n->type.dtype, KN_DISPATCH(n->type.dtype, kn_k_dropout, D(in[0]), D(*out), NUMEL(in[0]), a->p,
                                              (uint64_t)a->seed, (uint64_t)a->offset));
}

kn_status kern_causal_fill(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    const kn_type *t = &n->type;
    int64_t rows = t->shape[t->ndim - 2], cols = t->shape[t->ndim - 1];
    int64_t batch = (rows != 0 && cols != 0) ? kn_type_numel(t) / (rows * cols) : 0;
    KN_RUN(n, out, t->dtype, KN_DISPATCH(t->dtype, kn_k_causal_fill, D(in[0]), D(*out), batch, rows, cols, n->attrs.value));
}

/* Contiguous row-major strides of a shape. */
static void contig_strides(int ndim, const int64_t *shape, int64_t *st) {
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) { st[i] = s; s *= shape[i]; }
}

kn_status kern_reduce(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    kn_reduce_op op;
    if (!kn_op_reduce(n->op, &op) || (op != KN_REDUCE_SUM && op != KN_REDUCE_MEAN && op != KN_REDUCE_MAX))
        return kn_eval_no_kernel(n, "kern_reduce");
    const kn_tensor *x = in[0];
    unsigned mask;
    kn_ir_reduce_mask(&n->attrs, x->ndim, &mask);
    int first = -1, last = -1;
    bool block = true;
    for (int i = 0; i < x->ndim; i++)
        if (mask & (1u << i)) { if (first < 0) first = i; else if (last != i - 1) block = false; last = i; }
    const void *src = D(x);
    void *tmp = NULL;
    int64_t outer = 1, r = 1, inner = 1;
    if (first < 0) { first = last = x->ndim; }
    if (block) {
        for (int i = 0; i < first; i++) outer *= x->shape[i];
        for (int i = first; i <= last && i < x->ndim; i++) r *= x->shape[i];
        for (int i = last + 1; i < x->ndim; i++) inner *= x->shape[i];
    } else { /* move the reduced axes last with a copy, then reduce rows */
        int64_t st[KN_MAX_DIMS], pst[KN_MAX_DIMS], psh[KN_MAX_DIMS], dst[KN_MAX_DIMS];
        int k = 0;
        contig_strides(x->ndim, x->shape, st);
        for (int i = 0; i < x->ndim; i++) if (!(mask & (1u << i))) { psh[k] = x->shape[i]; pst[k++] = st[i]; outer *= x->shape[i]; }
        for (int i = 0; i < x->ndim; i++) if (mask & (1u << i)) { psh[k] = x->shape[i]; pst[k++] = st[i]; r *= x->shape[i]; }
        size_t es = kn_dtype_size(x->dtype);
        tmp = kn_malloc((size_t)NUMEL(x) * es);
        if (!tmp) return kn_error(KN_ERR_OOM, "%s: out of memory", kn_op_name(n->op));
        contig_strides(x->ndim, psh, dst);
        kn_k_strided_copy(es, x->ndim, psh, D(x), pst, tmp, dst);
        src = tmp;
    }
    kn_status st = kn_eval_new_out(n, out);
    if (st == KN_OK && !KN_DISPATCH(x->dtype, kn_k_reduce, op, src, D(*out), outer, r, inner)) {
        kn_tensor_free(*out);
        *out = NULL;
        st = kn_eval_unsupported(n, x->dtype);
    }
    kn_free(tmp);
    return st;
}

/* One batch entry of a batched product per range index (for kn_k_parallel). */
typedef struct mm_batch {
    const char *a, *b;
    char *c;
    const int64_t *oa, *ob; /* per batch entry: matrix index into a and b */
    int64_t m, n, k;
    size_t es;
    kn_dtype dt;
    bool ta, tb;
} mm_batch;

static void mm_batch_run(void *vctx, int64_t lo, int64_t hi) {
    const mm_batch *x = vctx;
    int64_t es = (int64_t)x->es;
    for (int64_t bi = lo; bi < hi; bi++) {
        const void *pa = x->a + x->oa[bi] * x->m * x->k * es, *pb = x->b + x->ob[bi] * x->k * x->n * es;
        void *pc = x->c + bi * x->m * x->n * es;
        KN_DISPATCH(x->dt, kn_k_matmul, pa, pb, pc, x->m, x->n, x->k, x->ta, x->tb);
    }
}

/* Batched product. Three schedules, all giving the same bits (each element is the same
 * sum in the same order): a 2-D b shared by a full batch of a (not transposed) folds the
 * batch into rows, one big product; many small products run in parallel over the batch;
 * large ones run one after the other, each threaded inside. */
kn_status kern_matmul(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    const kn_tensor *a = in[0], *b = in[1];
    const kn_type *t = &n->type;
    bool ta = n->attrs.ta, tb = n->attrs.tb;
    int64_t m = t->shape[t->ndim - 2], nn = t->shape[t->ndim - 1];
    int64_t k = ta ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1];
    int nb = t->ndim - 2;
    int64_t sa[KN_MAX_DIMS], sb[KN_MAX_DIMS], nbatch = 1, idx[KN_MAX_DIMS] = {0};
    kn_ir_broadcast_strides(a->ndim - 2, a->shape, nb, t->shape, sa);
    kn_ir_broadcast_strides(b->ndim - 2, b->shape, nb, t->shape, sb);
    for (int i = 0; i < nb; i++) nbatch *= t->shape[i];
    if (t->dtype != KN_DT_F32 && t->dtype != KN_DT_F64) return kn_eval_unsupported(n, t->dtype);
    KN_TRY(kn_eval_new_out(n, out));
    bool a_full = a->ndim - 2 == nb;
    for (int i = 0; a_full && i < nb; i++) a_full = a->shape[i] == t->shape[i];
    if (b->ndim == 2 && a_full && !ta) {
        KN_DISPATCH(t->dtype, kn_k_matmul, D(a), D(b), D(*out), nbatch * m, nn, k, false, tb);
        return KN_OK;
    }
    int64_t *off = kn_malloc((size_t)(2 * nbatch) * sizeof *off);
    if (!off) { kn_tensor_free(*out); *out = NULL; return kn_error(KN_ERR_OOM, "matmul: out of memory"); }
    int64_t oa = 0, ob = 0;
    for (int64_t bi = 0; bi < nbatch; bi++) {
        off[bi] = oa;
        off[nbatch + bi] = ob;
        for (int d = nb - 1; d >= 0; d--) {
            oa += sa[d]; ob += sb[d];
            if (++idx[d] < t->shape[d]) break;
            oa -= sa[d] * t->shape[d]; ob -= sb[d] * t->shape[d]; idx[d] = 0;
        }
    }
    mm_batch ctx = {D(a), D(b), D(*out), off, off + nbatch, m, nn, k, kn_dtype_size(t->dtype), t->dtype, ta, tb};
    double one = 2.0 * (double)m * (double)nn * (double)k;
    kn_k_parallel(nbatch, one < 4e6 && one * (double)nbatch >= 4e6, mm_batch_run, &ctx);
    kn_free(off);
    return KN_OK;
}

/* The products with an epilogue (the `epilogue` pass's ops; infer_matmul_ep has their
 * shapes): kiln's GEMM, then the epilogue loop, with the very kernels the nodes they
 * replace run (the bias add is add's sum, gelu and its gradient are kn_k_unary and
 * kn_k_unary_grad, the bias gradient is sum's kn_k_reduce), so on the CPU the fused step
 * gives the unfused step's bits. This is the reference the CUDA kernel (cuBLASLt's
 * epilogues, cuda_matmul_lt.cu) is tested against. */
#define KN_MATMUL_EP(T, S)                                                                          \
    static void matmul_ep_##S(kn_op op, const T *a, const T *b, const T *e, T *c, int64_t m, int64_t n, \
                              int64_t k, bool ta, bool tb) {                                        \
        T *p = op == KN_OP_MATMUL_BIAS_GELU ? c + m * n : c; /* the product (+ bias) */             \
        kn_k_matmul_##S(a, b, p, m, n, k, ta, tb);                                                  \
        if (op == KN_OP_MATMUL_BIAS || op == KN_OP_MATMUL_BIAS_GELU)                                \
            for (int64_t i = 0; i < m; i++)                                                         \
                for (int64_t j = 0; j < n; j++) p[i * n + j] = p[i * n + j] + e[j];                  \
        if (op == KN_OP_MATMUL_BIAS_GELU) kn_k_unary_##S(KN_UNARY_GELU, p, c, m * n);               \
        if (op == KN_OP_MATMUL_DGELU) kn_k_unary_grad_##S(KN_UNARY_GELU, p, e, p, m * n);          \
        if (op == KN_OP_MATMUL_BGRAD) kn_k_reduce_##S(KN_REDUCE_SUM, b, c + m * n, 1, k, n);         \
    }
KN_MATMUL_EP(float, f32)
KN_MATMUL_EP(double, f64)
#undef KN_MATMUL_EP

kn_status kern_matmul_ep(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    const kn_tensor *a = in[0], *b = in[1];
    bool ta = n->attrs.ta, tb = n->attrs.tb;
    int64_t m = ta ? a->shape[1] : a->shape[0], k = ta ? a->shape[0] : a->shape[1], nn = tb ? b->shape[0] : b->shape[1];
    const void *e = n->nin > 2 ? D(in[2]) : NULL;
    if (n->op != KN_OP_MATMUL_BIAS && n->op != KN_OP_MATMUL_BIAS_GELU && n->op != KN_OP_MATMUL_DGELU &&
        n->op != KN_OP_MATMUL_BGRAD)
        return kn_eval_no_kernel(n, "kern_matmul_ep");
    if (a->dtype != n->type.dtype) return kn_eval_unsupported(n, a->dtype); /* bf16 operands come widened */
    KN_RUN(n, out, n->type.dtype, KN_DISPATCH(n->type.dtype, matmul_ep, n->op, D(a), D(b), e, D(*out), m, nn, k, ta, tb));
}

kn_status kern_reshape(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    return kn_tensor_view(out, in[0], n->type.ndim, n->type.shape);
}

/* out = strided read of x (source strides sst, element offset soff) over n->type. */
static kn_status strided_out(const kn_node *n, const kn_tensor *x, const int64_t *sst, int64_t soff, kn_tensor **out) {
    int64_t dst[KN_MAX_DIMS];
    KN_TRY(kn_eval_new_out(n, out));
    size_t es = kn_dtype_size(x->dtype);
    contig_strides(n->type.ndim, n->type.shape, dst);
    kn_k_strided_copy(es, n->type.ndim, n->type.shape, (const char *)D(x) + soff * (int64_t)es, sst, D(*out), dst);
    return KN_OK;
}

kn_status kern_permute(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    int64_t pst[KN_MAX_DIMS];
    kn_ir_permute_strides(in[0]->ndim, in[0]->shape, n->attrs.perm, pst);
    return strided_out(n, in[0], pst, 0, out);
}

kn_status kern_broadcast_to(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    int64_t st[KN_MAX_DIMS];
    kn_ir_broadcast_strides(in[0]->ndim, in[0]->shape, n->type.ndim, n->type.shape, st);
    return strided_out(n, in[0], st, 0, out);
}

kn_status kern_slice(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    int64_t st[KN_MAX_DIMS], first, len;
    int nd = in[0]->ndim, ax = (int)(n->attrs.axis < 0 ? n->attrs.axis + nd : n->attrs.axis);
    contig_strides(nd, in[0]->shape, st);
    kn_ir_slice_range(in[0]->shape[ax], n->attrs.start, n->attrs.stop, n->attrs.step, &first, &len);
    kn_type xt = {in[0]->dtype, nd, {0}};
    memcpy(xt.shape, in[0]->shape, sizeof(int64_t) * (size_t)nd);
    if (!*out && kn_ir_aliases(n, &xt)) return kn_tensor_slice(out, in[0], ax, first, first + len, 1); /* a block: a view */
    int64_t off = first * st[ax];
    st[ax] *= n->attrs.step;
    return strided_out(n, in[0], st, len ? off : 0, out);
}

kn_status kern_slice_grad(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    int64_t st[KN_MAX_DIMS], sst[KN_MAX_DIMS], first, len;
    const kn_type *t = &n->type;
    int ax = (int)(n->attrs.axis < 0 ? n->attrs.axis + t->ndim : n->attrs.axis);
    KN_TRY(kn_eval_new_out(n, out));
    size_t es = kn_dtype_size(t->dtype);
    memset(D(*out), 0, (size_t)NUMEL(*out) * es);
    contig_strides(t->ndim, t->shape, st);
    contig_strides(in[0]->ndim, in[0]->shape, sst);
    kn_ir_slice_range(t->shape[ax], n->attrs.start, n->attrs.stop, n->attrs.step, &first, &len);
    if (len == 0) return KN_OK;
    char *dst = (char *)D(*out) + first * st[ax] * (int64_t)es;
    st[ax] *= n->attrs.step;
    kn_k_strided_copy(es, in[0]->ndim, in[0]->shape, D(in[0]), sst, dst, st);
    return KN_OK;
}

/* concat: each operand, at any strides, copied into its block of the contiguous out (x's
 * block first along the axis, then y's). A copy: every dtype as it is. */
kn_status kern_concat(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    int64_t st[KN_MAX_DIMS];
    const kn_type *t = &n->type;
    int ax = (int)(n->attrs.axis < 0 ? n->attrs.axis + t->ndim : n->attrs.axis);
    KN_TRY(kn_eval_new_out(n, out));
    size_t es = kn_dtype_size(t->dtype);
    contig_strides(t->ndim, t->shape, st);
    char *dst = D(*out);
    for (int k = 0; k < 2; k++) {
        kn_k_strided_copy(es, in[k]->ndim, in[k]->shape, D(in[k]), in[k]->strides, dst, st);
        dst += in[k]->shape[ax] * st[ax] * (int64_t)es;
    }
    return KN_OK;
}

kn_status kern_onehot(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    const kn_tensor *t = in[0];
    int64_t v = n->type.shape[n->type.ndim - 1], rows = NUMEL(t);
    for (int64_t r = 0; r < rows; r++) {
        int64_t tg = (int64_t)kn_dtype_load(t->dtype, D(t), r);
        if (tg < 0 || tg >= v) return kn_eval_bad_index(n, t, r, v);
    }
    KN_TRY(kn_eval_new_out(n, out));
    unsigned char *o = D(*out);
    memset(o, 0, (size_t)(rows * v));
    for (int64_t r = 0; r < rows; r++) o[r * v + (int64_t)kn_dtype_load(t->dtype, D(t), r)] = 1;
    return KN_OK;
}

kn_status kern_embedding(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    const kn_tensor *w = in[0], *idx = in[1];
    int64_t bad = 0, v = w->shape[0], d = w->shape[1];
    bool ok = true;
    KN_TRY(kn_eval_new_out(n, out));
    if (!KN_DISPATCH_OK(w->dtype, ok, kn_k_embedding, D(w), v, d, D(idx), idx->dtype, NUMEL(idx), D(*out), &bad)) {
        kn_tensor_free(*out); *out = NULL; return kn_eval_unsupported(n, w->dtype);
    }
    if (!ok) { kn_tensor_free(*out); *out = NULL; return kn_eval_bad_index(n, idx, bad, v); }
    return KN_OK;
}

kn_status kern_embedding_grad(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    const kn_tensor *dy = in[0], *idx = in[1];
    int64_t bad = 0, v = n->type.shape[0], d = n->type.shape[1];
    bool ok = true;
    KN_TRY(kn_eval_new_out(n, out));
    if (!KN_DISPATCH_OK(dy->dtype, ok, kn_k_embedding_grad, D(dy), D(idx), idx->dtype, NUMEL(idx), v, d, D(*out), &bad)) {
        kn_tensor_free(*out); *out = NULL; return kn_eval_unsupported(n, dy->dtype);
    }
    if (!ok) { kn_tensor_free(*out); *out = NULL; return kn_eval_bad_index(n, idx, bad, v); }
    return KN_OK;
}

