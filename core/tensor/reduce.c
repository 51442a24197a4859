/* reduce.c — reductions: the names of kn_reduce_op, and argmax.
 *
 * The general reduction (sum/mean/max/min/prod over any set of axes) is the lab 01 unit
 * kn_tensor_reduce (labs/lab01-tensors/reduce.c). argmax reduces one axis to the
 * index of its largest element: the axis is moved last (a header, no copy), so every
 * output element is one row of the row iterator. */
#include <math.h>

#include "tensor/tensor_impl.h"

/* ORDER REDUCE */
static const char *const knt_reduce_names[KN_REDUCE_COUNT] = {"sum", "mean", "max", "min", "prod"};

const char *kn_reduce_op_name(kn_reduce_op op) {
    if ((int)op < 0 || op >= KN_REDUCE_COUNT) return "?";
    return knt_reduce_names[op];
}

/* Ties keep the first index; NaN counts as larger than everything (the first NaN wins),
 * as in NumPy. */
kn_status kn_tensor_argmax(kn_tensor **out, const kn_tensor *x, int axis, bool keepdim) {
    const char *fn = "kn_tensor_argmax";
    KN_TRY(knt_check_ptr(fn, "out", out));
    KN_TRY(knt_check_cpu(fn, "x", x));
    int ax;
    KN_TRY(kn_axis_normalize(fn, axis, x->ndim, &ax));
    char ts[KNT_STR];
    if (x->shape[ax] == 0)
        return kn_error(KN_ERR_SHAPE, "%s: axis %d of %s is empty: no maximum", fn, axis, kn_tensor_str(x, ts, sizeof ts));
    int64_t oshape[KN_MAX_DIMS];
    int ond = 0;
    for (int d = 0; d < x->ndim; d++)
        if (d != ax || keepdim) oshape[ond++] = d == ax ? 1 : x->shape[d];
    kn_tensor *t;
    KN_TRY(knt_empty(fn, KN_DT_I64, ond, oshape, &t));
    kn_tensor xp = knt_axis_last(x, ax);
    kn_status st = KN_OK;
    if (kn_tensor_numel(x) > 0) {
        const kn_tensor *ops[1] = {&xp};
        knt_iter it;
        knt_iter_init(&it, xp.ndim, xp.shape, 1, ops);
        int64_t *po = KNT_PTR(int64_t, t), k = 0;
        do {
            int64_t best = 0;
            double bv = kn_dtype_load(x->dtype, x->storage->data, it.base[0]);
            for (int64_t j = 1; j < it.inner && !isnan(bv); j++) {
                double v = kn_dtype_load(x->dtype, x->storage->data, it.base[0] + j * it.inner_stride[0]);
                if (v > bv || isnan(v)) bv = v, best = j;
            }
            po[k++] = best;
        } while (knt_iter_next(&it));
        st = knt_iter_finish(fn, &it);
    }
    if (st != KN_OK) {
        kn_tensor_free(t);
        return st;
    }
    *out = t;
    return KN_OK;
}
