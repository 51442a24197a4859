/* matmul.c — batched matrix product on the CPU: a [..., m, k] @ b [..., k, n] -> [..., m, n].
 *
 * The batch axes broadcast (kn_shape_broadcast + kn_tensor_expand, lab 01 units), and the
 * batches are walked with kn_index_next. Each batch is one GEMM in the i-k-j order, made
 * cache- and register-friendly the classic way (as in BLIS / GotoBLAS, much simplified):
 *
 *   - B is packed into panels of NR columns (8 floats or 4 doubles), each panel k x NR and
 *     contiguous, zero-padded on the right. Packing also absorbs any strides (a transposed
 *     b) and widens f16/bf16 to f32;
 *   - C is computed in micro-tiles of 4 x NR held in eight vector registers: for each p,
 *     one NR-wide row of the panel times four values of A (C[i, j] += A[i, p] * B[p, j]);
 *   - p advances in passes of KC = 256, so the panel slice a micro-tile reads stays in L1.
 *
 * A is read in place when its columns are contiguous, else packed row-major first (so is
 * any f16/bf16 A). Accumulation is in f64 for f64 and f32 otherwise, as the header says. */
#include <string.h>

#include "tensor/tensor_impl.h"

#define KNT_MR 4   /* rows of C per micro-tile */
#define KNT_KC 256 /* depth of one pass: a B panel slice of KC x NR stays in L1 */

/* C[m x n] (row stride ldc) = A[m x k] (row stride lda, unit columns) @ B, where B was
 * packed by knt_pack_panels into ceil(n/NR) panels of k x NR (zero-padded). Every C
 * micro-tile of 4 x NR lives in local accumulators over a pass of KC steps of p: each
 * step loads one NR-wide row of the panel and four values of A. The loop over j has a
 * constant trip count, so the compiler turns it into vector instructions. */
#define KNT_DEFINE_GEMM(NAME, T, VT, NR)                                                            \
    static void NAME(int64_t m, int64_t k, int64_t n, const T *A, int64_t lda, const T *Bp, T *C, \
                     int64_t ldc) {                                                               \
        int64_t np = (n + NR - 1) / NR;                                                           \
        for (int64_t p0 = 0; p0 < k || p0 == 0; p0 += KNT_KC) {                                   \
            int64_t kc = k - p0 < KNT_KC ? k - p0 : KNT_KC;                                       \
            for (int64_t jp = 0; jp < np; jp++) {                                                 \
                const T *bp = Bp + jp * k * NR + p0 * NR;                                         \
                int64_t j0 = jp * NR, w = n - j0 < NR ? n - j0 : NR;                              \
                for (int64_t i0 = 0; i0 < m; i0 += KNT_MR) {                                      \
                    int64_t mr = m - i0 < KNT_MR ? m - i0 : KNT_MR;                               \
                    T acc[KNT_MR][NR] = {{0}};                                                    \
                    if (p0 > 0)                                                                   \
                        for (int64_t r = 0; r < mr; r++)                                          \
                            for (int64_t j = 0; j < w; j++) acc[r][j] = C[(i0 + r) * ldc + j0 + j]; \
                    const T *a = A + i0 * lda + p0;                                               \
                    if (mr == KNT_MR) {                                                           \
                        VT c[KNT_MR][2];                                                          \
                        memcpy(c, acc, sizeof c);                                                 \
                        VT c00 = c[0][0], c01 = c[0][1], c10 = c[1][0], c11 = c[1][1];            \
                        VT c20 = c[2][0], c21 = c[2][1], c30 = c[3][0], c31 = c[3][1];            \
                        const T *a0 = a, *a1 = a + lda, *a2 = a + 2 * lda, *a3 = a + 3 * lda;     \
                        for (int64_t p = 0; p < kc; p++) {                                        \
                            VT b0, b1;                                                            \
                            memcpy(&b0, bp + p * NR, sizeof b0);                                  \
                            memcpy(&b1, bp + p * NR + NR / 2, sizeof b1);                         \
                            T x0 = a0[p], x1 = a1[p], x2 = a2[p], x3 = a3[p];                     \
                            c00 += x0 * b0, c01 += x0 * b1, c10 += x1 * b0, c11 += x1 * b1;       \
                            c20 += x2 * b0, c21 += x2 * b1, c30 += x3 * b0, c31 += x3 * b1;       \
                        }                                                                         \
                        c[0][0] = c00, c[0][1] = c01, c[1][0] = c10, c[1][1] = c11;               \
                        c[2][0] = c20, c[2][1] = c21, c[3][0] = c30, c[3][1] = c31;               \
                        memcpy(acc, c, sizeof c);                                                 \
                    } else {                                                                      \
                        for (int64_t p = 0; p < kc; p++)                                          \
                            for (int64_t r = 0; r < mr; r++) {                                    \
                                T ar = a[r * lda + p];                                            \
                                for (int j = 0; j < NR; j++) acc[r][j] += ar * bp[p * NR + j];    \
                            }                                                                     \
                    }                                                                             \
                    for (int64_t r = 0; r < mr; r++)                                              \
                        for (int64_t j = 0; j < w; j++) C[(i0 + r) * ldc + j0 + j] = acc[r][j];   \
                }                                                                                 \
            }                                                                                     \
        }                                                                                         \
    }
/* Two 16-byte vectors (GCC/Clang vector extension) per row of a micro-tile: 4 x 8 floats or
 * 4 x 4 doubles, eight accumulator registers. */
typedef float knt_v4f __attribute__((vector_size(16)));
typedef double knt_v2d __attribute__((vector_size(16)));
#define KNT_NR_F32 8
#define KNT_NR_F64 4
KNT_DEFINE_GEMM(knt_gemm_f32, float, knt_v4f, KNT_NR_F32)
KNT_DEFINE_GEMM(knt_gemm_f64, double, knt_v2d, KNT_NR_F64)

/* Pack k x n elements of x (element offset off, strides rs, cs) into panels of k x nr,
 * zero-padded on the right, as float (wide == false) or double. */
static void knt_pack_panels(const kn_tensor *x, int64_t off, int64_t rs, int64_t cs, int64_t k, int64_t n, int64_t nr,
                            void *dst, bool wide) {
    int64_t np = (n + nr - 1) / nr;
    for (int64_t jp = 0; jp < np; jp++)
        for (int64_t p = 0; p < k; p++)
            for (int64_t j = 0; j < nr; j++) {
                int64_t col = jp * nr + j, at = (jp * k + p) * nr + j;
                int64_t src = off + p * rs + col * cs;
                if (wide) ((double *)dst)[at] = col < n ? kn_dtype_load(x->dtype, x->storage->data, src) : 0.0;
                else if (col >= n) ((float *)dst)[at] = 0.0f;
                else if (x->dtype == KN_DT_F32) ((float *)dst)[at] = KNT_PTR(const float, x)[src];
                else ((float *)dst)[at] = (float)kn_dtype_load(x->dtype, x->storage->data, src);
            }
}

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
    int64_t nr = wide ? KNT_NR_F64 : KNT_NR_F32, npad = (n + nr - 1) / nr * nr;
    bool pack_a = !native || (k > 1 && ea->strides[nb + 1] != 1);
    if (pack_a) pa = kn_malloc((size_t)(m * k) * es);
    pb = kn_malloc((size_t)(k * npad) * es);
    if (!native) pc = kn_malloc((size_t)(m * n) * es);
    if ((pack_a && !pa) || !pb || (!native && !pc)) {
        st = kn_error(KN_ERR_OOM, "%s: out of memory packing a %s and b %s", fn, as, bs);
        goto done;
    }
    int64_t idx[KN_MAX_DIMS] = {0}, total = knt_numel(nb, bshape), visited = 0, prev_bo = 0;
    kn_clear_error();
    do {
        int64_t ao = ea->offset, bo = eb->offset;
        for (int d = 0; d < nb; d++) ao += idx[d] * ea->strides[d], bo += idx[d] * eb->strides[d];
        int64_t lda = k;
        const char *A;
        if (pack_a) knt_pack(a, ao, ea->strides[nb], ea->strides[nb + 1], m, k, pa, wide), A = pa;
        else A = (const char *)a->storage->data + (size_t)ao * es, lda = ea->strides[nb];
        /* A batch whose B is the previous one's (a broadcast B) keeps its packed panels. */
        if (visited == 0 || bo != prev_bo) knt_pack_panels(b, bo, eb->strides[nb], eb->strides[nb + 1], k, n, nr, pb, wide);
        prev_bo = bo;
        char *C = native ? (char *)t->storage->data + (size_t)(visited * m * n) * es : pc;
        if (wide) knt_gemm_f64(m, k, n, (const double *)A, lda, (const double *)pb, (double *)C, n);
        else knt_gemm_f32(m, k, n, (const float *)A, lda, (const float *)pb, (float *)C, n);
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
