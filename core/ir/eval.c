/* eval.c — the CPU kernel of every op (the "CPU kernel" column of ops.def).
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
 * sharing storage is safe). */
#include <string.h>

#include "ir/ir_impl.h"
#include "kiln/kernels.h"
#include "kiln/scalar.h"

/* Call fn##_f32 or fn##_f64 by dtype; evaluates to false for other dtypes. */
#define KN_DISPATCH(dt, fn, ...)                                                   \
    ((dt) == KN_DT_F32 ? (fn##_f32(__VA_ARGS__), true)                             \
     : (dt) == KN_DT_F64 ? (fn##_f64(__VA_ARGS__), true) : false)
#define KN_DISPATCH_OK(dt, ok, fn, ...)                                            \
    ((dt) == KN_DT_F32 ? ((ok) = fn##_f32(__VA_ARGS__), true)                      \
     : (dt) == KN_DT_F64 ? ((ok) = fn##_f64(__VA_ARGS__), true) : false)

static kn_status unsupported(const kn_node *n, kn_dtype dt) {
    return kn_error(KN_ERR_UNSUPPORTED, "%s: no CPU kernel for dtype %s (cast to f32 or f64)",
                    kn_op_name(n->op), kn_dtype_name(dt));
}

/* An op routed to a kernel that does not compute it (a new op of ops.def given a shared
 * kernel before that kernel learned it): an error naming the op, never another op's math. */
static kn_status no_kernel(const kn_node *n, const char *kernel) {
    return kn_error(KN_ERR_UNSUPPORTED, "%s: the cpu backend's %s does not compute this op", kn_op_name(n->op), kernel);
}

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

#define D(t) kn_tensor_data(t)
#define NUMEL(t) kn_tensor_numel(t)

/* Allocate *out, then run STMT (which evaluates to false for an unsupported dtype). */
#define KN_RUN(n, out, dt, STMT)                                        \
    do {                                                                \
        KN_TRY(kn_eval_new_out(n, out));                                        \
        if (!(STMT)) {                                                  \
            kn_tensor_free(*out);                                       \
            *out = NULL;                                                \
            return unsupported(n, dt);                                  \
        }                                                               \
        return KN_OK;                                                   \
    } while (0)

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
    if (!kn_op_binary(n->op, &op) || kn_sc_binary_is_compare(op)) return no_kernel(n, "kern_binary");
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
    if (!kn_op_unary(n->op, &op)) return no_kernel(n, "kern_unary");
    KN_RUN(n, out, n->type.dtype, KN_DISPATCH(n->type.dtype, kn_k_unary, op, D(in[0]), D(*out), NUMEL(in[0])));
}

/* unary_grad {fn}: dx = f'(x) dy of operands (dy, x), the row's gradient column. */
kn_status kern_unary_grad(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    kn_unary_op f = (kn_unary_op)n->attrs.fn;
    if (n->op != KN_OP_UNARY_GRAD || n->attrs.fn < 0 || f >= KN_UNARY_COUNT || !kn_sc_unary_has_grad(f))
        return no_kernel(n, "kern_unary_grad");
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
        return no_kernel(n, "kern_reduce");
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
        st = unsupported(n, x->dtype);
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
    if (t->dtype != KN_DT_F32 && t->dtype != KN_DT_F64) return unsupported(n, t->dtype);
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
        return no_kernel(n, "kern_matmul_ep");
    if (a->dtype != n->type.dtype) return unsupported(n, a->dtype); /* bf16 operands come widened */
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

static kn_status bad_index(const kn_node *n, const kn_tensor *idx, int64_t pos, int64_t v) {
    return kn_error(KN_ERR_ARG, "%s: index %lld at position %lld is outside [0, %lld)", kn_op_name(n->op),
                    (long long)kn_dtype_load(idx->dtype, D(idx), pos), (long long)pos, (long long)v);
}

kn_status kern_onehot(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    const kn_tensor *t = in[0];
    int64_t v = n->type.shape[n->type.ndim - 1], rows = NUMEL(t);
    for (int64_t r = 0; r < rows; r++) {
        int64_t tg = (int64_t)kn_dtype_load(t->dtype, D(t), r);
        if (tg < 0 || tg >= v) return bad_index(n, t, r, v);
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
        kn_tensor_free(*out); *out = NULL; return unsupported(n, w->dtype);
    }
    if (!ok) { kn_tensor_free(*out); *out = NULL; return bad_index(n, idx, bad, v); }
    return KN_OK;
}

kn_status kern_embedding_grad(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    const kn_tensor *dy = in[0], *idx = in[1];
    int64_t bad = 0, v = n->type.shape[0], d = n->type.shape[1];
    bool ok = true;
    KN_TRY(kn_eval_new_out(n, out));
    if (!KN_DISPATCH_OK(dy->dtype, ok, kn_k_embedding_grad, D(dy), D(idx), idx->dtype, NUMEL(idx), v, d, D(*out), &bad)) {
        kn_tensor_free(*out); *out = NULL; return unsupported(n, dy->dtype);
    }
    if (!ok) { kn_tensor_free(*out); *out = NULL; return bad_index(n, idx, bad, v); }
    return KN_OK;
}

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
    if (n->op != KN_OP_SOFTMAX && n->op != KN_OP_LOG_SOFTMAX) return no_kernel(n, "kern_softmax");
    axis_split(&n->type, n->attrs.axis, &o, &l, &i);
    KN_RUN(n, out, n->type.dtype, KN_DISPATCH(n->type.dtype, kn_k_softmax, D(in[0]), D(*out), o, l, i, n->op == KN_OP_LOG_SOFTMAX));
}

kn_status kern_softmax_bwd(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    int64_t o, l, i;
    if (n->op != KN_OP_SOFTMAX_BWD && n->op != KN_OP_LOG_SOFTMAX_BWD) return no_kernel(n, "kern_softmax_bwd");
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
                          : unsupported(n, dt);                                                 \
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
    if (dt != KN_DT_F32 && dt != KN_DT_F64) return unsupported(n, dt);
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
        kn_tensor_free(*out); *out = NULL; return unsupported(n, lg->dtype);
    }
    if (!ok) { kn_tensor_free(*out); *out = NULL; return bad_index(n, t, bad, v); }
    return KN_OK;
}

kn_status kern_cross_entropy_bwd(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    const kn_tensor *dl = in[0], *lg = in[1], *t = in[2];
    int64_t v = lg->shape[lg->ndim - 1], r = NUMEL(t), bad = 0;
    bool ok = true;
    double g = kn_dtype_load(dl->dtype, D(dl), 0);
    KN_TRY(kn_eval_new_out(n, out));
    if (!KN_DISPATCH_OK(lg->dtype, ok, kn_k_cross_entropy_bwd, g, D(lg), D(t), t->dtype, r, v, D(*out), &bad)) {
        kn_tensor_free(*out); *out = NULL; return unsupported(n, lg->dtype);
    }
    if (!ok) { kn_tensor_free(*out); *out = NULL; return bad_index(n, t, bad, v); }
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
    if (dt != KN_DT_F32 && dt != KN_DT_F64 && !low) return unsupported(&bn, dt);
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
        if (!ok) st = bad_index(&bn, t, bad, v);
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
