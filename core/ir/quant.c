/* quant.c — the ops matmul_w8 / matmul_w8a8 / matmul_w8a8_tensor on the CPU.
 *
 * kiln/quant.h states the arithmetic; the products themselves (kn_gemm_i8's packed,
 * ISA-dispatched microkernels and kn_gemm_w8) are in core/ir/gemm_i8.c. Both int8 operands
 * are kept "k-contiguous" (a [m][k], b [n][k]).
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
    /* lab 12's units return nothing: a skeleton among them is known by its message */
    const char *skeleton = st == KN_OK ? kn_not_implemented_seen() : NULL;
    if (skeleton) st = kn_error(KN_ERR_NOT_IMPLEMENTED, "%s: %s", kn_op_name(n->op), skeleton);
    if (st != KN_OK) { kn_tensor_free(*out); *out = NULL; }
    return st;
}
