/* compare.c — how far apart two tensors are, for tests and reference comparisons.
 *
 * abs_err = max |a - b| and rel_err = max |a - b| / max(|b|, 1e-30) over all elements. b is
 * the reference. Special values: equal infinities and two NaNs at the same place count as
 * equal (error 0); a NaN or infinity facing anything else counts as an infinite error, so
 * a comparison never passes by accident. The dtypes may differ (values are compared as
 * doubles). */
#include <math.h>

#include "tensor/tensor_impl.h"

kn_status kn_tensor_max_diff(const kn_tensor *a, const kn_tensor *b, double *abs_err, double *rel_err) {
    const char *fn = "kn_tensor_max_diff";
    KN_TRY(knt_check_cpu(fn, "a", a));
    KN_TRY(knt_check_cpu(fn, "b", b));
    KN_TRY(knt_check_ptr(fn, "abs_err", abs_err));
    KN_TRY(knt_check_ptr(fn, "rel_err", rel_err));
    bool same = a->ndim == b->ndim;
    for (int d = 0; same && d < a->ndim; d++) same = a->shape[d] == b->shape[d];
    if (!same) {
        char as[KNT_STR], bs[KNT_STR];
        return kn_error(KN_ERR_SHAPE, "%s: shapes differ: a %s, b %s", fn, kn_tensor_str(a, as, sizeof as),
                        kn_tensor_str(b, bs, sizeof bs));
    }
    double ea = 0, er = 0;
    if (kn_tensor_numel(a) > 0) {
        const kn_tensor *ops[2] = {a, b};
        knt_iter it;
        knt_iter_init(&it, a->ndim, a->shape, 2, ops);
        do {
            for (int64_t j = 0; j < it.inner; j++) {
                double x = kn_dtype_load(a->dtype, a->storage->data, it.base[0] + j * it.inner_stride[0]);
                double y = kn_dtype_load(b->dtype, b->storage->data, it.base[1] + j * it.inner_stride[1]);
                double d;
                if ((isnan(x) && isnan(y)) || x == y) d = 0;
                else if (!isfinite(x) || !isfinite(y)) d = INFINITY;
                else d = fabs(x - y);
                double r = d == 0 ? 0 : d / fmax(fabs(y), 1e-30);
                ea = d > ea ? d : ea;
                er = r > er ? r : er;
            }
        } while (knt_iter_next(&it));
        KN_TRY(knt_iter_finish(fn, &it));
    }
    *abs_err = ea;
    *rel_err = er;
    return KN_OK;
}
