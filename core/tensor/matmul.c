/* matmul.c — batched matrix product on the CPU: a [..., m, k] @ b [..., k, n] -> [..., m, n].
 *
 * The batch axes broadcast (kn_shape_broadcast + kn_tensor_expand, lab 01 units), and the
 * batches are walked with kn_index_next. Each batch is one call of kiln's CPU GEMM,
 * kn_k_matmul_f32 / _f64 (kernels_matmul.inc: packing, cache blocking, a register-blocked
 * micro-kernel, threads), the same kernel the IR interpreter runs, so eager and graph mode
 * give the same bits. A row-major or transposed operand is passed in place (the GEMM's ta /
 * tb flags); any other strides, and f16/bf16 (widened to f32), are copied row-major
 * first. Accumulation is in f64 for f64 and f32 otherwise, as the header says. */
#include <string.h>

#include "kiln/kernels.h"
#include "tensor/tensor_impl.h"

/* Pack rows x cols elements of x (element offset off, strides rs, cs) into dst, row-major,
 * as float (wide == false) or double. */
static void knt_pack(const kn_tensor *x, int64_t off, int64_t rs, int64_t cs, int64_t rows, int64_t cols, void *dst,
                     bool wide) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            int64_t src = off + r * rs + c * cs;
            if (x->dtype == KN_DT_F32) ((float *)dst)[r * cols + c] = KNT_PTR(const float, x)[src];
            else if (wide) ((double *)dst)[r * cols + c] = kn_dtype_load(x->dtype, x->storage->data, src);
            else ((float *)dst)[r * cols + c] = (float)kn_dtype_load(x->dtype, x->storage->data, src);
        }
}

kn_status kn_tensor_matmul(kn_tensor **out, const kn_tensor *a, const kn_tensor *b) {
    const char *fn = "kn_tensor_matmul";
    KN_TRY(knt_check_ptr(fn, "out", out));
    KN_TRY(knt_check_cpu(fn, "a", a));
    KN_TRY(knt_check_cpu(fn, "b", b));
    char as[KNT_STR], bs[KNT_STR];
    kn_tensor_str(a, as, sizeof as);
    kn_tensor_str(b, bs, sizeof bs);
    if (a->ndim < 2 || b->ndim < 2)
        return kn_error(KN_ERR_SHAPE, "%s: a %s and b %s both need at least 2 dimensions", fn, as, bs);
    if (a->dtype != b->dtype || !kn_dtype_is_float(a->dtype))
        return kn_error(KN_ERR_DTYPE, "%s: a %s and b %s need the same float dtype", fn, as, bs);
    int64_t m = a->shape[a->ndim - 2], k = a->shape[a->ndim - 1], n = b->shape[b->ndim - 1];
    if (b->shape[b->ndim - 2] != k)
        return kn_error(KN_ERR_SHAPE, "%s: a %s and b %s: inner sizes %lld and %lld differ", fn, as, bs, (long long)k,
                        (long long)b->shape[b->ndim - 2]);
    int nb;
    int64_t bshape[KN_MAX_DIMS], ashape[KN_MAX_DIMS], bbshape[KN_MAX_DIMS], oshape[KN_MAX_DIMS];
    if (kn_shape_broadcast(a->ndim - 2, a->shape, b->ndim - 2, b->shape, &nb, bshape) != KN_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", kn_last_error());
        return kn_error(KN_ERR_SHAPE, "%s: batch axes of a %s and b %s: %s", fn, as, bs, why);
    }
    memcpy(ashape, bshape, sizeof ashape);
    memcpy(bbshape, bshape, sizeof bbshape);
    memcpy(oshape, bshape, sizeof oshape);
    ashape[nb] = m, ashape[nb + 1] = k;
    bbshape[nb] = k, bbshape[nb + 1] = n;
    oshape[nb] = m, oshape[nb + 1] = n;
    int64_t onumel;
    KN_TRY(knt_check_shape(fn, nb + 2, oshape, 8, &onumel));
    kn_tensor *ea = NULL, *eb = NULL, *t = NULL;
    void *pa = NULL, *pb = NULL, *pc = NULL;
    kn_status st = kn_tensor_expand(&ea, a, nb + 2, ashape);
    if (st == KN_OK) st = kn_tensor_expand(&eb, b, nb + 2, bbshape);
    if (st != KN_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", kn_last_error());
        st = kn_error(st, "%s: %s", fn, why);
        goto done;
    }
    st = knt_empty(fn, a->dtype, nb + 2, oshape, &t);
    if (st != KN_OK || onumel == 0) goto done;
    bool wide = a->dtype == KN_DT_F64, native = a->dtype == KN_DT_F32 || wide;
    size_t es = wide ? sizeof(double) : sizeof(float);
    /* In place when row-major ([m, k] with unit columns) or transposed (unit rows). */
    int64_t ars = ea->strides[nb], acs = ea->strides[nb + 1], brs = eb->strides[nb], bcs = eb->strides[nb + 1];
    bool a_rm = acs == 1 && (ars == k || m == 1), a_tr = !a_rm && ars == 1 && (acs == m || k == 1);
    bool b_rm = bcs == 1 && (brs == n || k == 1), b_tr = !b_rm && brs == 1 && (bcs == k || n == 1);
    bool pack_a = !native || !(a_rm || a_tr), pack_b = !native || !(b_rm || b_tr);
    if (pack_a) pa = kn_malloc((size_t)(m * k + 1) * es);
    if (pack_b) pb = kn_malloc((size_t)(k * n + 1) * es);
    if (!native) pc = kn_malloc((size_t)(m * n) * es);
    if ((pack_a && !pa) || (pack_b && !pb) || (!native && !pc)) {
        st = kn_error(KN_ERR_OOM, "%s: out of memory packing a %s and b %s", fn, as, bs);
        goto done;
    }
    int64_t idx[KN_MAX_DIMS] = {0}, total = knt_numel(nb, bshape), visited = 0, prev_bo = 0;
    kn_clear_error();
    do {
        int64_t ao = ea->offset, bo = eb->offset;
        for (int d = 0; d < nb; d++) ao += idx[d] * ea->strides[d], bo += idx[d] * eb->strides[d];
        const char *A = pa, *B = pb;
        if (pack_a) knt_pack(a, ao, ars, acs, m, k, pa, wide);
        else A = (const char *)a->storage->data + (size_t)ao * es;
        /* A batch whose B is the previous one's (a broadcast B) keeps its copy. */
        if (!pack_b) B = (const char *)b->storage->data + (size_t)bo * es;
        else if (visited == 0 || bo != prev_bo) knt_pack(b, bo, brs, bcs, k, n, pb, wide);
        prev_bo = bo;
        bool ta = !pack_a && !a_rm, tb = !pack_b && !b_rm;
        char *C = native ? (char *)t->storage->data + (size_t)(visited * m * n) * es : pc;
        if (wide) kn_k_matmul_f64((const double *)A, (const double *)B, (double *)C, m, n, k, ta, tb);
        else kn_k_matmul_f32((const float *)A, (const float *)B, (float *)C, m, n, k, ta, tb);
        if (!native) kn_dtype_convert(t->dtype, (char *)t->storage->data + (size_t)(visited * m * n) * kn_dtype_size(t->dtype),
                                      KN_DT_F32, pc, m * n);
        visited++;
    } while (visited < total && kn_index_next(nb, bshape, idx));
    st = knt_walk_error(fn, visited, total);
done:
    kn_free(pa);
    kn_free(pb);
    kn_free(pc);
    kn_tensor_free(ea);
    kn_tensor_free(eb);
    if (st == KN_OK) *out = t;
    else kn_tensor_free(t);
    return st;
}
