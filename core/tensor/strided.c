/* strided.c — lab 01 unit: walking strided memory.
 *
 * A tensor's element at multi-index (i0, i1, ..., i{n-1}) lives at
 *     storage->data + (offset + i0*strides[0] + ... + i{n-1}*strides[n-1]) * element_size
 * Views (transpose, slice, expand) only change shape, strides and offset, so any code that
 * reads tensors must follow the strides instead of assuming row-major order.
 *
 * 1. kn_index_next(ndim, shape, index): the odometer. Add 1 to the last entry of index;
 *    when an entry reaches its size, set it to 0 and carry into the entry on its left.
 *    When the carry falls off the left end, every index has been visited: leave index all
 *    zeros and return false. Otherwise return true. With ndim 0 there is exactly one index
 *    (the empty one), so the first call returns false. Every CPU kernel in kiln walks its
 *    operands with this function (core/tensor/tensor.c, knt_iter).
 *
 * 2. kn_tensor_copy_into(dst, src): copy every element of src into the element of dst at
 *    the same index, whatever the strides of either side, converting dtypes with
 *    kn_dtype_load / kn_dtype_store. Shapes must be equal (KN_ERR_SHAPE naming both);
 *    NULL tensors are KN_ERR_ARG; tensors not on the CPU are KN_ERR_DEVICE. dst and src
 *    must not overlap. clone, cast and contiguous are built on it (core/tensor/copy.c).
 *    It is on the hot path (every transpose that feeds a matmul is made contiguous with it),
 *    so after the general loop, give it fast paths: one memcpy when both sides are
 *    contiguous with the same dtype, and a typed inner loop along the last axis. Count the
 *    rows you visit: if kn_index_next stops early (say, it is still the skeleton), return
 *    an error instead of a half-copied tensor. */
#include <string.h>

#include "kiln/tensor.h"

bool kn_index_next(int ndim, const int64_t *shape, int64_t *index) {
    /* BEGIN SOLUTION */
    if (ndim < 0 || ndim > KN_MAX_DIMS || (ndim > 0 && (!shape || !index))) {
        kn_error(KN_ERR_ARG, "kn_index_next: ndim %d with shape %p and index %p", ndim, (const void *)shape,
                 (void *)index);
        return false;
    }
    for (int d = ndim - 1; d >= 0; d--) {
        if (++index[d] < shape[d]) return true;
        index[d] = 0; /* carry into axis d - 1 */
    }
    return false;
    /* SKELETON
    (void)ndim; (void)shape; (void)index;
    kn_not_implemented("lab01", "kn_index_next: add 1 to the last index and carry to the left like an odometer");
    return false;
    END SOLUTION */
}

/* BEGIN SOLUTION */
/* The first error of a tensor argument, or KN_OK. */
static kn_status check_cpu_tensor(const char *what, const kn_tensor *t) {
    if (!t || !t->storage) return kn_error(KN_ERR_ARG, "kn_tensor_copy_into: %s is NULL or has no storage", what);
    if (t->ndim < 0 || t->ndim > KN_MAX_DIMS || !kn_dtype_valid(t->dtype))
        return kn_error(KN_ERR_ARG, "kn_tensor_copy_into: %s is malformed (ndim %d, dtype %d)", what, t->ndim,
                        (int)t->dtype);
    if (t->storage->device.type != KN_DEVICE_CPU)
        return kn_error(KN_ERR_DEVICE, "kn_tensor_copy_into: %s is not on the CPU (use kn_tensor_to)", what);
    return KN_OK;
}

/* Copy one row of n elements: dst[j*ds] = src[j*ss] for j < n (offsets in elements). */
static void copy_row(const kn_tensor *dst, int64_t doff, int64_t ds, const kn_tensor *src, int64_t soff, int64_t ss,
                     int64_t n) {
    if (dst->dtype == src->dtype && dst->dtype == KN_DT_F32) {
        float *d = (float *)dst->storage->data + doff;
        const float *s = (const float *)src->storage->data + soff;
        if (ds == 1 && ss == 1) memcpy(d, s, (size_t)n * sizeof *d);
        else for (int64_t j = 0; j < n; j++) d[j * ds] = s[j * ss];
    } else if (dst->dtype == src->dtype) {
        size_t es = kn_dtype_size(dst->dtype);
        char *d = (char *)dst->storage->data + (size_t)doff * es;
        const char *s = (const char *)src->storage->data + (size_t)soff * es;
        for (int64_t j = 0; j < n; j++) memcpy(d + (size_t)(j * ds) * es, s + (size_t)(j * ss) * es, es);
    } else {
        for (int64_t j = 0; j < n; j++)
            kn_dtype_store(dst->dtype, dst->storage->data, doff + j * ds,
                           kn_dtype_load(src->dtype, src->storage->data, soff + j * ss));
    }
}
/* END SOLUTION */

kn_status kn_tensor_copy_into(kn_tensor *dst, const kn_tensor *src) {
    /* BEGIN SOLUTION */
    KN_TRY(check_cpu_tensor("dst", dst));
    KN_TRY(check_cpu_tensor("src", src));
    bool same = dst->ndim == src->ndim;
    for (int i = 0; same && i < dst->ndim; i++) same = dst->shape[i] == src->shape[i];
    if (!same) {
        char a[128], b[128];
        return kn_error(KN_ERR_SHAPE, "kn_tensor_copy_into: dst shape %s differs from src shape %s",
                        kn_shape_str(dst->ndim, dst->shape, a, sizeof a), kn_shape_str(src->ndim, src->shape, b, sizeof b));
    }
    int64_t numel = kn_tensor_numel(src);
    if (numel == 0) return KN_OK;
    /* Fast path: both contiguous, same dtype -> one memcpy. */
    if (dst->dtype == src->dtype && kn_tensor_is_contiguous(dst) && kn_tensor_is_contiguous(src)) {
        memmove(kn_tensor_data(dst), kn_tensor_data(src), (size_t)numel * kn_dtype_size(src->dtype));
        return KN_OK;
    }
    /* General path: the outer axes with the odometer, the last axis as a row. */
    int nd = src->ndim;
    int outer = nd > 0 ? nd - 1 : 0;
    int64_t n = nd > 0 ? src->shape[nd - 1] : 1;
    int64_t ds = nd > 0 ? dst->strides[nd - 1] : 0, ss = nd > 0 ? src->strides[nd - 1] : 0;
    int64_t index[KN_MAX_DIMS] = {0};
    int64_t rows = numel / n, done = 0; /* count the rows: a kn_index_next that stops early is caught */
    kn_clear_error();
    do {
        int64_t doff = dst->offset, soff = src->offset;
        for (int d = 0; d < outer; d++) doff += index[d] * dst->strides[d], soff += index[d] * src->strides[d];
        copy_row(dst, doff, ds, src, soff, ss, n);
        done++;
    } while (done < rows && kn_index_next(outer, src->shape, index));
    if (done != rows) {
        char why[256]; /* copy: the message is formatted into the same buffer */
        snprintf(why, sizeof why, "%s", kn_last_error());
        return kn_error(KN_ERR_INTERNAL, "kn_tensor_copy_into: kn_index_next stopped after %lld of %lld rows: %s",
                        (long long)done, (long long)rows, why);
    }
    return KN_OK;
    /* SKELETON
    (void)dst; (void)src;
    return kn_not_implemented("lab01", "kn_tensor_copy_into: walk every index with kn_index_next and copy "
                                       "src's element to dst's, following both tensors' strides");
    END SOLUTION */
}
