/* quant.c — the int8 quantizers, the int8 product's dequantizing epilogue, and the ops
 * matmul_w8 / matmul_w8a8 / matmul_w8a8_tensor on the CPU.
 *
 * kiln/quant.h states the arithmetic; the products themselves (kn_gemm_i8's packed,
 * ISA-dispatched microkernels and kn_gemm_w8) are in core/ir/gemm_i8.c. Both int8 operands
 * are kept "k-contiguous" (a [m][k], b [n][k]).
 *
 * The ops (core/ir/ops.def): operands x [..., M, K] (f32, ta = 0) and W, a 2-D f32 weight,
 * [K, N] (tb = 0) or [N, K] (tb = 1): the output channel is a column of the product either
 * way. The kernel quantizes W per output channel (and, for w8a8, x per row; for w8a8_tensor,
 * all of x with one scale, the naive baseline) into scratch,
 * then runs the int8 product. Its shape rule is matmul's with those restrictions. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/ir_impl.h"
#include "kiln/kernels.h"
#include "kiln/quant.h"

static int8_t q_one(float v, float inv) {
    float r = nearbyintf(v * inv);
    if (r > KN_QMAX) r = KN_QMAX;
    if (r < -KN_QMAX) r = -KN_QMAX;
    return (int8_t)r;
}

void kn_quant_rows_i8(const float *x, int64_t rows, int64_t cols, int64_t ld, int8_t *q, float *scale) {
    for (int64_t i = 0; i < rows; i++) {
        const float *r = x + i * ld;
        float a = 0;
        bool finite = true;
        for (int64_t j = 0; j < cols; j++) {
            float v = fabsf(r[j]);
            if (!isfinite(v)) finite = false;
            else if (v > a) a = v;
        }
        float s = finite ? a / KN_QMAX : NAN, inv = (finite && a > 0) ? KN_QMAX / a : 0;
        scale[i] = s;
        for (int64_t j = 0; j < cols; j++) q[i * cols + j] = finite ? q_one(r[j], inv) : 0;
    }
}

void kn_quant_cols_i8(const float *w, int64_t k, int64_t n, int8_t *q, float *scale) {
    for (int64_t j = 0; j < n; j++) {
        float a = 0;
        bool finite = true;
        for (int64_t i = 0; i < k; i++) {
            float v = fabsf(w[i * n + j]);
            if (!isfinite(v)) finite = false;
            else if (v > a) a = v;
        }
        float inv = (finite && a > 0) ? KN_QMAX / a : 0;
        scale[j] = finite ? a / KN_QMAX : NAN;
        for (int64_t i = 0; i < k; i++) q[j * k + i] = finite ? q_one(w[i * n + j], inv) : 0;
    }
}

/* ---------------------------------------------------------------- the epilogue */

void kn_i8_dequant(const int32_t *acc, int64_t rows, int64_t cols, int64_t ldacc, const float *sa, const float *sb,
                   float *c, int64_t ldc) {
    for (int64_t i = 0; i < rows; i++) {
        const float s = sa ? sa[i] : 1.0f;
        for (int64_t j = 0; j < cols; j++) c[i * ldc + j] = (float)acc[i * ldacc + j] * s * sb[j];
    }
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
    kn_status st = KN_OK;
    if (a8) {
        if (per_tensor) { /* x as one row: one scale, copied to every row */
            kn_quant_rows_i8(xd, 1, m * k, m * k, qx, sx);
            for (int64_t i = 1; i < m; i++) sx[i] = sx[0];
        } else {
            kn_quant_rows_i8(xd, m, k, k, qx, sx);
        }
        st = kn_gemm_i8(qx, qw, sx, sw, c, m, nn, k);
    } else {
        kn_gemm_w8(xd, qw, sw, c, m, nn, k);
    }
    kn_free(qw); kn_free(qx); kn_free(sw); kn_free(sx);
    if (st != KN_OK) { kn_tensor_free(*out); *out = NULL; }
    return st;
}
