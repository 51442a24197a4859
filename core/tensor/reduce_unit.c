/* reduce.c — lab 01 unit: reductions over any set of axes.
 *
 * kn_tensor_reduce(&out, op, x, naxes, axes, keepdim) combines the elements of x along the
 * listed axes with sum, mean, max, min or prod. naxes == 0 reduces over every axis.
 *     x f32[2,3,4], axes {1}, keepdim=false -> f32[2,4]   (out[i,k] = op over j of x[i,j,k])
 *     x f32[2,3,4], axes {0,-1}, keepdim=true -> f32[1,3,1]
 * Rules (the tests check them):
 *   - axes may be negative (-1 is the last); an axis out of range or listed twice is
 *     KN_ERR_AXIS (use kn_axis_normalize); naxes outside [0, ndim] or axes == NULL with
 *     naxes > 0 is KN_ERR_ARG; op outside kn_reduce_op is KN_ERR_ARG; a NULL out or x is
 *     KN_ERR_ARG and a tensor not on the CPU is KN_ERR_DEVICE;
 *   - sum/mean/prod accumulate in double whatever the dtype; the result is stored in x's
 *     dtype, except the mean of a non-float dtype, which is f32;
 *   - the sum of nothing is 0, the product of nothing 1, the mean of nothing NaN; max/min
 *     of nothing is KN_ERR_SHAPE; max/min propagate NaN.
 *
 * A way to do it: allocate the output (contiguous) and an array of doubles, one
 * accumulator per output element. Give each axis of x an "output stride": the output's
 * stride for a kept axis, 0 for a reduced one. Then walk every element of x (kn_index_next
 * over the outer axes, a loop over the last axis) and combine it into the accumulator at
 * sum(index[d] * output_stride[d]). The output with keepdim and without it has the same
 * elements in the same order, so one walk serves both. */
#include <math.h>
#include <string.h>

#include "kiln/tensor.h"

/* BEGIN SOLUTION */
/* Combine one value into an accumulator. */
static inline double combine(kn_reduce_op op, double acc, double v) {
    switch (op) {
    case KN_REDUCE_SUM:
    case KN_REDUCE_MEAN: return acc + v;
    case KN_REDUCE_PROD: return acc * v;
    case KN_REDUCE_MAX: return (v > acc || isnan(v)) ? v : acc; /* NaN sticks: NaN > v is false */
    case KN_REDUCE_MIN: return (v < acc || isnan(v)) ? v : acc;
    case KN_REDUCE_COUNT: break; /* not an op (kn_tensor_reduce rejects it) */
    }
    return acc;
}

static double initial(kn_reduce_op op) {
    switch (op) {
    case KN_REDUCE_PROD: return 1.0;
    case KN_REDUCE_MAX: return -INFINITY;
    case KN_REDUCE_MIN: return INFINITY;
    case KN_REDUCE_SUM:
    case KN_REDUCE_MEAN:
    case KN_REDUCE_COUNT: break;
    }
    return 0.0;
}
/* END SOLUTION */

kn_status kn_tensor_reduce(kn_tensor **out, kn_reduce_op op, const kn_tensor *x, int naxes, const int *axes,
                           bool keepdim) {
    /* BEGIN SOLUTION */
    const char *fn = "kn_tensor_reduce";
    if (!out || !x || !x->storage) return kn_error(KN_ERR_ARG, "%s: %s is NULL", fn, !out ? "out" : "x");
    if (x->ndim < 0 || x->ndim > KN_MAX_DIMS || !kn_dtype_valid(x->dtype))
        return kn_error(KN_ERR_ARG, "%s: x is malformed (ndim %d, dtype %d)", fn, x->ndim, (int)x->dtype);
    if (x->storage->device.type != KN_DEVICE_CPU)
        return kn_error(KN_ERR_DEVICE, "%s: x is not on the CPU (use kn_tensor_to)", fn);
    if ((int)op < 0 || op >= KN_REDUCE_COUNT) return kn_error(KN_ERR_ARG, "%s: op %d is not a kn_reduce_op", fn, (int)op);
    int nd = x->ndim;
    if (naxes < 0 || naxes > nd)
        return kn_error(KN_ERR_ARG, "%s: naxes %d is outside [0, %d] for a %d-d tensor", fn, naxes, nd, nd);
    if (naxes > 0 && !axes) return kn_error(KN_ERR_ARG, "%s: axes is NULL with naxes %d", fn, naxes);

    /* Which axes are reduced. */
    bool reduced[KN_MAX_DIMS] = {false};
    for (int i = 0; i < naxes; i++) {
        int ax;
        KN_TRY(kn_axis_normalize(fn, axes[i], nd, &ax));
        if (reduced[ax]) return kn_error(KN_ERR_AXIS, "%s: axis %d is listed twice", fn, axes[i]);
        reduced[ax] = true;
    }
    if (naxes == 0)
        for (int d = 0; d < nd; d++) reduced[d] = true;

    /* Output shape, elements per output (count), and the output stride of each x axis. */
    int64_t oshape[KN_MAX_DIMS], kshape[KN_MAX_DIMS], ostride[KN_MAX_DIMS];
    int ond = 0;
    int64_t count = 1, onumel = 1;
    for (int d = 0; d < nd; d++) {
        kshape[d] = reduced[d] ? 1 : x->shape[d];
        if (reduced[d]) count *= x->shape[d];
        else onumel *= x->shape[d];
        if (!reduced[d] || keepdim) oshape[ond++] = kshape[d];
    }
    int64_t s = 1;
    for (int d = nd - 1; d >= 0; d--) {
        ostride[d] = reduced[d] ? 0 : s;
        s *= kshape[d];
    }
    if (count == 0 && onumel > 0 && (op == KN_REDUCE_MAX || op == KN_REDUCE_MIN)) {
        char xs[128];
        return kn_error(KN_ERR_SHAPE, "%s: %s of an empty reduction (x shape %s)", fn, kn_reduce_op_name(op),
                        kn_shape_str(nd, x->shape, xs, sizeof xs));
    }
    kn_dtype odt = (op == KN_REDUCE_MEAN && !kn_dtype_is_float(x->dtype)) ? KN_DT_F32 : x->dtype;

    kn_tensor *t;
    KN_TRY(kn_tensor_empty(&t, odt, ond, oshape));
    double *acc = kn_malloc((size_t)(onumel > 0 ? onumel : 1) * sizeof *acc);
    if (!acc) {
        kn_tensor_free(t);
        return kn_error(KN_ERR_OOM, "%s: out of memory for %lld accumulators", fn, (long long)onumel);
    }
    for (int64_t i = 0; i < onumel; i++) acc[i] = initial(op);

    if (kn_tensor_numel(x) > 0) {
        int outer = nd > 0 ? nd - 1 : 0;
        int64_t n = nd > 0 ? x->shape[nd - 1] : 1;
        int64_t xs = nd > 0 ? x->strides[nd - 1] : 0, os = nd > 0 ? ostride[nd - 1] : 0;
        int64_t index[KN_MAX_DIMS] = {0};
        int64_t rows = kn_tensor_numel(x) / n, done = 0; /* catches a kn_index_next that stops early */
        kn_clear_error();
        do {
            int64_t xoff = x->offset, ooff = 0;
            for (int d = 0; d < outer; d++) xoff += index[d] * x->strides[d], ooff += index[d] * ostride[d];
            if (x->dtype == KN_DT_F32) {
                const float *p = (const float *)x->storage->data + xoff;
                for (int64_t j = 0; j < n; j++) acc[ooff + j * os] = combine(op, acc[ooff + j * os], p[j * xs]);
            } else {
                for (int64_t j = 0; j < n; j++)
                    acc[ooff + j * os] =
                        combine(op, acc[ooff + j * os], kn_dtype_load(x->dtype, x->storage->data, xoff + j * xs));
            }
            done++;
        } while (done < rows && kn_index_next(outer, x->shape, index));
        if (done != rows) {
            char why[256]; /* copy: the message is formatted into the same buffer */
            snprintf(why, sizeof why, "%s", kn_last_error());
            kn_free(acc);
            kn_tensor_free(t);
            return kn_error(KN_ERR_INTERNAL, "%s: kn_index_next stopped after %lld of %lld rows: %s", fn,
                            (long long)done, (long long)rows, why);
        }
    }
    for (int64_t i = 0; i < onumel; i++)
        kn_dtype_store(odt, t->storage->data, i, op == KN_REDUCE_MEAN ? acc[i] / (double)count : acc[i]);
    kn_free(acc);
    *out = t;
    return KN_OK;
    /* SKELETON
    (void)out; (void)op; (void)x; (void)naxes; (void)axes; (void)keepdim;
    return kn_not_implemented("lab01", "kn_tensor_reduce: one accumulator per output element; walk x and "
                                       "combine each element into the accumulator its kept axes select");
    END SOLUTION */
}
