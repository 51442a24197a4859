/* copy.c — copies: contiguous, clone, cast, and moving a tensor to another device.
 *
 * The element-by-element work is kn_tensor_copy_into, a lab 01 unit
 * (labs/lab01-tensors/strided.c): it walks any strides on both sides and converts
 * dtypes, so clone/cast/contiguous are "allocate a contiguous output, copy into it".
 * Moving between devices copies raw bytes with kn_device_memcpy: a contiguous tensor moves
 * its numel elements; a strided view made on the CPU is first made contiguous; a strided
 * view on a GPU moves the span of storage it covers and keeps its strides. */
#include <string.h>

#include "tensor/tensor_impl.h"

kn_status kn_tensor_clone(kn_tensor **out, const kn_tensor *x) {
    const char *fn = "kn_tensor_clone";
    KN_TRY(knt_check_ptr(fn, "out", out));
    KN_TRY(knt_check_cpu(fn, "x", x));
    kn_tensor *t;
    KN_TRY(knt_empty(fn, x->dtype, x->ndim, x->shape, &t));
    kn_status st = kn_tensor_copy_into(t, x);
    if (st != KN_OK) {
        kn_tensor_free(t);
        return st;
    }
    *out = t;
    return KN_OK;
}

kn_status kn_tensor_contiguous(kn_tensor **out, const kn_tensor *x) {
    const char *fn = "kn_tensor_contiguous";
    KN_TRY(knt_check_ptr(fn, "out", out));
    KN_TRY(knt_check_tensor(fn, "x", x));
    if (kn_tensor_is_contiguous(x)) return knt_view_new(fn, x, out);
    KN_TRY(knt_check_cpu(fn, "x", x));
    return kn_tensor_clone(out, x);
}

kn_status kn_tensor_cast(kn_tensor **out, const kn_tensor *x, kn_dtype dt) {
    const char *fn = "kn_tensor_cast";
    KN_TRY(knt_check_ptr(fn, "out", out));
    KN_TRY(knt_check_cpu(fn, "x", x));
    KN_TRY(knt_check_dtype(fn, dt));
    kn_tensor *t;
    KN_TRY(knt_empty(fn, dt, x->ndim, x->shape, &t));
    kn_status st = kn_tensor_copy_into(t, x);
    if (st != KN_OK) {
        kn_tensor_free(t);
        return st;
    }
    *out = t;
    return KN_OK;
}

kn_status kn_tensor_to(kn_tensor **out, const kn_tensor *x, kn_device dev) {
    const char *fn = "kn_tensor_to";
    KN_TRY(knt_check_ptr(fn, "out", out));
    KN_TRY(knt_check_tensor(fn, "x", x));
    KN_TRY(kn_device_check(fn, dev));
    if (kn_device_equal(x->storage->device, dev)) return knt_view_new(fn, x, out);
    const kn_tensor *src = x;
    kn_tensor *tmp = NULL;
    if (!kn_tensor_is_contiguous(x) && x->storage->device.type == KN_DEVICE_CPU) {
        KN_TRY(kn_tensor_contiguous(&tmp, x));
        src = tmp;
    }
    /* The elements the view can reach: [offset, offset + span). */
    int64_t numel = kn_tensor_numel(src), span = 0;
    if (numel > 0) {
        if (kn_tensor_is_contiguous(src)) {
            span = numel;
        } else {
            span = 1;
            for (int i = 0; i < src->ndim; i++) span += (src->shape[i] - 1) * src->strides[i];
        }
    }
    kn_tensor *t;
    kn_status st = kn_tensor_empty_on(&t, dev, src->dtype, 1, &span);
    if (st == KN_OK) {
        size_t es = kn_dtype_size(src->dtype);
        st = kn_device_memcpy(dev, t->storage->data, src->storage->device,
                              (char *)src->storage->data + (size_t)src->offset * es, (size_t)span * es);
        if (st != KN_OK) kn_tensor_free(t);
    }
    if (st != KN_OK) {
        char why[512], ts[KNT_STR], ds[32];
        snprintf(why, sizeof why, "%s", kn_last_error());
        kn_tensor_free(tmp);
        return kn_error(st, "%s: moving %s to %s: %s", fn, kn_tensor_str(x, ts, sizeof ts),
                        kn_device_str(dev, ds, sizeof ds), why);
    }
    t->ndim = src->ndim;
    t->offset = 0;
    bool contig = kn_tensor_is_contiguous(src);
    for (int i = 0; i < src->ndim; i++) t->shape[i] = src->shape[i];
    if (contig) knt_contiguous_strides(t->ndim, t->shape, t->strides);
    else for (int i = 0; i < src->ndim; i++) t->strides[i] = src->strides[i];
    kn_tensor_free(tmp);
    *out = t;
    return KN_OK;
}
