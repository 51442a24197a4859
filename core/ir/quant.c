/* quant.c — the int8 products and the ops matmul_w8 / matmul_w8a8 on the CPU.
 *
 * kiln/quant.h states the arithmetic. Layout: both int8 operands are kept "k-contiguous"
 * (a [m][k], b [n][k]) so that the inner loop of every output element is a dot product of
 * two contiguous int8 rows, which the compiler vectorizes (widening multiply-adds into int32
 * lanes) when the loop has a constant trip count (QCHUNK). The microkernel makes four
 * outputs of one row at once (one pass over a's row for four of b's), and the columns go in
 * blocks of four outside the rows, so those four weight rows stay in L1.
 *
 * The ops (core/ir/ops.def): operands x [..., M, K] (f32, ta = 0) and W, a 2-D f32 weight,
 * [K, N] (tb = 0) or [N, K] (tb = 1): the output channel is a column of the product either
 * way. The kernel quantizes W per output channel (and, for w8a8, x per row; for w8a8_tensor,
 * all of x with one scale, the naive baseline) into scratch,
 * then runs the int8 product. Its shape rule is matmul's with those restrictions.
 *
 * The quantizers (kn_quant_rows_i8, kn_quant_cols_i8) and the epilogue (kn_i8_dequant) are
 * lab 12's units: core/ir/quant_scale.c and core/ir/quant_epilogue.c (core/mk/units.list).
 * They return nothing, so an untouched skeleton only records its message
 * (kn_not_implemented); the op's kernel checks for one and fails with it. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/ir_impl.h"
#include "kiln/kernels.h"
#include "kiln/quant.h"

/* ---------------------------------------------------------------- the products */

typedef struct gemm_q {
    const int8_t *a, *b;
    const float *x, *sa, *sb;
    float *c;
    int64_t n, k;
} gemm_q;

/* The chunk the inner loops run over: a constant trip count, so that the compiler vectorizes
 * them at -O2 (its cheapest cost model takes no loop of unknown length), and the tail after
 * the last whole chunk runs scalar. */
#define QCHUNK 32

/* Four int8 dot products of a with b0..b3, int32 sums (exact, in any order). */
static void dot4_i8(const int8_t *a, const int8_t *b0, const int8_t *b1, const int8_t *b2, const int8_t *b3,
                    int64_t k, int32_t *out) {
    int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t t = 0;
    for (; t + QCHUNK <= k; t += QCHUNK)
        for (int u = 0; u < QCHUNK; u++) {
            int16_t av = a[t + u];
            s0 += av * b0[t + u];
            s1 += av * b1[t + u];
            s2 += av * b2[t + u];
            s3 += av * b3[t + u];
        }
    for (; t < k; t++) {
        s0 += a[t] * b0[t];
        s1 += a[t] * b1[t];
        s2 += a[t] * b2[t];
        s3 += a[t] * b3[t];
    }
    out[0] = s0, out[1] = s1, out[2] = s2, out[3] = s3;
}

/* x . b in f32 with the codes widened in the loop: eight lanes of partial sums (each lane
 * its own sequence, so the lanes vectorize without reordering any one sum), then added. */
static float dot_w8(const float *x, const int8_t *b, int64_t k) {
    float lane[8] = {0};
    int64_t t = 0;
    for (; t + QCHUNK <= k; t += QCHUNK)
        for (int u = 0; u < QCHUNK; u += 8)
            for (int l = 0; l < 8; l++) lane[l] += x[t + u + l] * (float)b[t + u + l];
    float s = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
    for (; t < k; t++) s += x[t] * (float)b[t];
    return s;
}

/* Rows [lo, hi) of the int8 product. Columns in blocks of four outside, rows inside: the
 * block's four weight rows (4 K bytes) stay in L1 while every activation row passes by. */
static void gemm_i8_rows(void *vctx, int64_t lo, int64_t hi) {
    const gemm_q *g = vctx;
    const int64_t n = g->n, k = g->k;
    for (int64_t j = 0; j < n; j += 4) {
        const int64_t nj = n - j < 4 ? n - j : 4;
        const int8_t *b[4];
        for (int q = 0; q < 4; q++) b[q] = g->b + (j + (q < nj ? q : 0)) * k; /* a short block repeats a row */
        for (int64_t i = lo; i < hi; i++) {
            int32_t acc[4];
            dot4_i8(g->a + i * k, b[0], b[1], b[2], b[3], k, acc);
            kn_i8_dequant(acc, 1, nj, 4, g->sa ? g->sa + i : NULL, g->sb + j, g->c + i * n + j, n);
        }
    }
}

/* Rows [lo, hi) of the weight-only product, in the same blocking. */
static void gemm_w8_rows(void *vctx, int64_t lo, int64_t hi) {
    const gemm_q *g = vctx;
    const int64_t n = g->n, k = g->k;
    for (int64_t j = 0; j < n; j += 4) {
        const int64_t nj = n - j < 4 ? n - j : 4;
        for (int64_t i = lo; i < hi; i++)
            for (int q = 0; q < nj; q++) g->c[i * n + j + q] = dot_w8(g->x + i * k, g->b + (j + q) * k, k) * g->sb[j + q];
    }
}

static bool worth_threads(int64_t m, int64_t n, int64_t k) { return 2.0 * (double)m * (double)n * (double)k >= 4e6; }

void kn_gemm_i8(const int8_t *a, const int8_t *b, const float *sa, const float *sb, float *c, int64_t m, int64_t n,
                int64_t k) {
    gemm_q g = {.a = a, .b = b, .sa = sa, .sb = sb, .c = c, .n = n, .k = k};
    kn_k_parallel(m, worth_threads(m, n, k), gemm_i8_rows, &g);
}

void kn_gemm_w8(const float *x, const int8_t *b, const float *sb, float *c, int64_t m, int64_t n, int64_t k) {
    gemm_q g = {.x = x, .b = b, .sb = sb, .c = c, .n = n, .k = k};
    kn_k_parallel(m, worth_threads(m, n, k), gemm_w8_rows, &g);
}

/* ---------------------------------------------------------------- the ops */

kn_status infer_matmul_q(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    const char *name = kn_op_name(n->op);
    if (in[0]->dtype != KN_DT_F32 || in[1]->dtype != KN_DT_F32) {
        snprintf(msg, msz, "%s reads f32 operands (got %s and %s)", name, kn_dtype_name(in[0]->dtype),
                 kn_dtype_name(in[1]->dtype));
        return KN_ERR_DTYPE;
    }
    if (in[1]->ndim != 2 || in[0]->ndim < 2) {
        snprintf(msg, msz, "%s needs x with at least 2 axes and a 2-D weight (got %d and %d axes)", name, in[0]->ndim,
                 in[1]->ndim);
        return KN_ERR_SHAPE;
    }
    if (n->attrs.ta) {
        snprintf(msg, msz, "%s takes no ta (x is read row by row: a token per row)", name);
        return KN_ERR_ARG;
    }
    return infer_matmul(n, in, out, msg, msz);
}

kn_status kern_matmul_q(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    if (n->op != KN_OP_MATMUL_W8 && n->op != KN_OP_MATMUL_W8A8 && n->op != KN_OP_MATMUL_W8A8_TENSOR)
        return kn_error(KN_ERR_UNSUPPORTED, "%s: the cpu backend's kern_matmul_q does not compute this op",
                        kn_op_name(n->op));
    const kn_tensor *x = in[0], *w = in[1];
    if (x->dtype != KN_DT_F32 || w->dtype != KN_DT_F32)
        return kn_error(KN_ERR_UNSUPPORTED, "%s: f32 operands only (got %s)", kn_op_name(n->op), kn_dtype_name(x->dtype));
    const bool tb = n->attrs.tb;
    const int64_t k = x->shape[x->ndim - 1], nn = tb ? w->shape[0] : w->shape[1];
    const int64_t m = kn_tensor_numel(x) / (k ? k : 1);
    if (*out) {
        if (kn_tensor_numel(*out) != m * nn || (*out)->dtype != KN_DT_F32 || !kn_tensor_is_contiguous(*out))
            return kn_error(KN_ERR_INTERNAL, "%s: the output given is not of the node's type", kn_op_name(n->op));
    } else {
        KN_TRY(kn_tensor_empty(out, n->type.dtype, n->type.ndim, n->type.shape));
    }
    bool a8 = n->op != KN_OP_MATMUL_W8, per_tensor = n->op == KN_OP_MATMUL_W8A8_TENSOR;
    int8_t *qw = kn_malloc((size_t)(nn * k) + 1), *qx = a8 ? kn_malloc((size_t)(m * k) + 1) : NULL;
    float *sw = kn_malloc((size_t)(nn + 1) * sizeof *sw), *sx = a8 ? kn_malloc((size_t)(m + 1) * sizeof *sx) : NULL;
    if (!qw || !sw || (a8 && (!qx || !sx))) {
        kn_free(qw); kn_free(qx); kn_free(sw); kn_free(sx);
        kn_tensor_free(*out);
        *out = NULL;
        return kn_error(KN_ERR_OOM, "%s: out of memory for the int8 operands", kn_op_name(n->op));
    }
    const float *wd = kn_tensor_data(w), *xd = kn_tensor_data(x);
    if (tb) kn_quant_rows_i8(wd, nn, k, k, qw, sw); /* [N, K]: a row is an output channel */
    else kn_quant_cols_i8(wd, k, nn, qw, sw);
    float *c = kn_tensor_data(*out);
    if (a8) {
        if (per_tensor) { /* x as one row: one scale, copied to every row */
            kn_quant_rows_i8(xd, 1, m * k, m * k, qx, sx);
            for (int64_t i = 1; i < m; i++) sx[i] = sx[0];
        } else {
            kn_quant_rows_i8(xd, m, k, k, qx, sx);
        }
        kn_gemm_i8(qx, qw, sx, sw, c, m, nn, k);
    } else {
        kn_gemm_w8(xd, qw, sw, c, m, nn, k);
    }
    kn_free(qw); kn_free(qx); kn_free(sw); kn_free(sx);
    /* lab 12's units return nothing: a skeleton among them is known by its message */
    const char *skeleton = kn_not_implemented_seen();
    if (skeleton) return kn_error(KN_ERR_NOT_IMPLEMENTED, "%s: %s", kn_op_name(n->op), skeleton);
    return KN_OK;
}
