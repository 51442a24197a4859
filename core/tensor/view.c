/* view.c — views: new shapes, strides and offsets over the same storage, no bytes copied.
 *
 * Every function here returns a new kn_tensor holding one more reference to x's storage,
 * so writes through a view are seen by x and the other way round, and freeing x first is
 * fine. The rules:
 *   view      reinterpret the shape; possible without a copy when every group of old axes
 *             that merges into (or splits from) new axes is itself contiguous in memory;
 *   permute   reorder axes: shape and strides are permuted together;
 *   slice     start/stop clamp as in Python, offset += start * stride, stride *= step;
 *   squeeze / unsqueeze  drop / insert an axis of size 1;
 *   expand    (a lab 01 unit, labs/lab01-tensors/broadcast.c) stride 0 on new axes. */
#include <string.h>

#include "tensor/tensor_impl.h"

/* Resolve a requested shape against numel: at most one -1, other sizes >= 0. */
static kn_status knt_resolve_shape(const char *fn, const kn_tensor *x, int ndim, const int64_t *shape,
                                   int64_t *resolved) {
    char ss[KNT_STR], ts[KNT_STR];
    if (ndim < 0 || ndim > KN_MAX_DIMS)
        return kn_error(KN_ERR_ARG, "%s: ndim %d is outside [0, %d]", fn, ndim, KN_MAX_DIMS);
    if (ndim > 0 && !shape) return kn_error(KN_ERR_ARG, "%s: shape is NULL with ndim %d", fn, ndim);
    int infer = -1;
    for (int i = 0; i < ndim; i++) {
        resolved[i] = shape[i];
        if (shape[i] == -1 && infer < 0) {
            infer = i;
            resolved[i] = 1;
        } else if (shape[i] < 0) {
            return kn_error(KN_ERR_SHAPE, "%s: shape %s: only one size may be -1 and none may be below -1", fn,
                            kn_shape_str(ndim, shape, ss, sizeof ss));
        }
    }
    int64_t rest;
    KN_TRY(knt_check_shape(fn, ndim, resolved, 0, &rest));
    int64_t numel = kn_tensor_numel(x);
    if (infer >= 0) {
        if (rest == 0 || numel % rest != 0)
            return kn_error(KN_ERR_SHAPE, "%s: cannot infer the -1 in %s for %s (%lld elements)", fn,
                            kn_shape_str(ndim, shape, ss, sizeof ss), kn_tensor_str(x, ts, sizeof ts),
                            (long long)numel);
        resolved[infer] = numel / rest;
        rest = numel;
    }
    if (rest != numel)
        return kn_error(KN_ERR_SHAPE, "%s: shape %s has %lld elements but %s has %lld", fn,
                        kn_shape_str(ndim, shape, ss, sizeof ss), (long long)rest, kn_tensor_str(x, ts, sizeof ts),
                        (long long)numel);
    return KN_OK;
}

/* Strides for viewing x as shape (same numel) without a copy; false when impossible.
 * Walk x's axes from the right, cutting them into chunks that are contiguous among
 * themselves; each chunk must be produced by a run of new axes with the same element
 * count, which then get strides within the chunk. */
static bool knt_view_strides(const kn_tensor *x, int ndim, const int64_t *shape, int64_t *strides) {
    if (kn_tensor_numel(x) == 0 || x->ndim == 0) {
        knt_contiguous_strides(ndim, shape, strides);
        return true;
    }
    int view_d = ndim - 1;
    int64_t chunk_stride = x->strides[x->ndim - 1];
    int64_t tensor_numel = 1, view_numel = 1;
    for (int d = x->ndim - 1; d >= 0; d--) {
        tensor_numel *= x->shape[d];
        bool chunk_ends = d == 0 || (x->shape[d - 1] != 1 && x->strides[d - 1] != tensor_numel * chunk_stride);
        if (!chunk_ends) continue;
        while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
            strides[view_d] = view_numel * chunk_stride;
            view_numel *= shape[view_d];
            view_d--;
        }
        if (view_numel != tensor_numel) return false;
        if (d > 0) {
            chunk_stride = x->strides[d - 1];
            tensor_numel = view_numel = 1;
        }
    }
    return view_d == -1;
}

kn_status kn_tensor_view(kn_tensor **out, const kn_tensor *x, int ndim, const int64_t *shape) {
    const char *fn = "kn_tensor_view";
    KN_TRY(knt_check_ptr(fn, "out", out));
    KN_TRY(knt_check_tensor(fn, "x", x));
    int64_t rs[KN_MAX_DIMS], st[KN_MAX_DIMS];
    KN_TRY(knt_resolve_shape(fn, x, ndim, shape, rs));
    if (!knt_view_strides(x, ndim, rs, st)) {
        char ss[KNT_STR], ts[KNT_STR], xs[KNT_STR];
        return kn_error(KN_ERR_SHAPE,
                        "%s: %s with strides %s cannot be viewed as %s without a copy (use kn_tensor_reshape)", fn,
                        kn_tensor_str(x, ts, sizeof ts), kn_shape_str(x->ndim, x->strides, xs, sizeof xs),
                        kn_shape_str(ndim, rs, ss, sizeof ss));
    }
    kn_tensor *t;
    KN_TRY(knt_view_new(fn, x, &t));
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = rs[i], t->strides[i] = st[i];
    *out = t;
    return KN_OK;
}

kn_status kn_tensor_reshape(kn_tensor **out, const kn_tensor *x, int ndim, const int64_t *shape) {
    const char *fn = "kn_tensor_reshape";
    KN_TRY(knt_check_ptr(fn, "out", out));
    KN_TRY(knt_check_tensor(fn, "x", x));
    int64_t rs[KN_MAX_DIMS], st[KN_MAX_DIMS];
    KN_TRY(knt_resolve_shape(fn, x, ndim, shape, rs));
    kn_tensor *t;
    if (knt_view_strides(x, ndim, rs, st)) {
        KN_TRY(knt_view_new(fn, x, &t));
        for (int i = 0; i < ndim; i++) t->strides[i] = st[i];
    } else {
        KN_TRY(kn_tensor_clone(&t, x));
        knt_contiguous_strides(ndim, rs, t->strides);
    }
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = rs[i];
    *out = t;
    return KN_OK;
}

kn_status kn_tensor_permute(kn_tensor **out, const kn_tensor *x, const int *perm) {
    const char *fn = "kn_tensor_permute";
    KN_TRY(knt_check_ptr(fn, "out", out));
    KN_TRY(knt_check_tensor(fn, "x", x));
    if (x->ndim > 0) KN_TRY(knt_check_ptr(fn, "perm", perm));
    int p[KN_MAX_DIMS];
    bool seen[KN_MAX_DIMS] = {false};
    for (int i = 0; i < x->ndim; i++) {
        KN_TRY(kn_axis_normalize(fn, perm[i], x->ndim, &p[i]));
        if (seen[p[i]])
            return kn_error(KN_ERR_AXIS, "%s: axis %d appears twice in the permutation (entry %d)", fn, perm[i], i);
        seen[p[i]] = true;
    }
    kn_tensor *t;
    KN_TRY(knt_view_new(fn, x, &t));
    for (int i = 0; i < x->ndim; i++) t->shape[i] = x->shape[p[i]], t->strides[i] = x->strides[p[i]];
    *out = t;
    return KN_OK;
}

kn_status kn_tensor_transpose(kn_tensor **out, const kn_tensor *x, int axis0, int axis1) {
    const char *fn = "kn_tensor_transpose";
    KN_TRY(knt_check_ptr(fn, "out", out));
    KN_TRY(knt_check_tensor(fn, "x", x));
    int a, b;
    KN_TRY(kn_axis_normalize(fn, axis0, x->ndim, &a));
    KN_TRY(kn_axis_normalize(fn, axis1, x->ndim, &b));
    kn_tensor *t;
    KN_TRY(knt_view_new(fn, x, &t));
    t->shape[a] = x->shape[b], t->strides[a] = x->strides[b];
    t->shape[b] = x->shape[a], t->strides[b] = x->strides[a];
    *out = t;
    return KN_OK;
}

kn_status kn_tensor_slice(kn_tensor **out, const kn_tensor *x, int axis, int64_t start, int64_t stop, int64_t step) {
    const char *fn = "kn_tensor_slice";
    KN_TRY(knt_check_ptr(fn, "out", out));
    KN_TRY(knt_check_tensor(fn, "x", x));
    int ax;
    KN_TRY(kn_axis_normalize(fn, axis, x->ndim, &ax));
    if (step < 1) return kn_error(KN_ERR_ARG, "%s: step %lld must be >= 1", fn, (long long)step);
    int64_t n = x->shape[ax];
    /* Python's clamping: negative counts from the end, then clamp to [0, n]. */
    if (start < 0) start = start < -n ? 0 : start + n;
    if (stop < 0) stop = stop < -n ? 0 : stop + n;
    if (start > n) start = n;
    if (stop > n) stop = n;
    int64_t len = stop > start ? (stop - start + step - 1) / step : 0;
    kn_tensor *t;
    KN_TRY(knt_view_new(fn, x, &t));
    t->shape[ax] = len;
    if (len > 0) t->offset += start * x->strides[ax];
    t->strides[ax] = x->strides[ax] * step;
    *out = t;
    return KN_OK;
}

kn_status kn_tensor_squeeze(kn_tensor **out, const kn_tensor *x, int axis) {
    const char *fn = "kn_tensor_squeeze";
    KN_TRY(knt_check_ptr(fn, "out", out));
    KN_TRY(knt_check_tensor(fn, "x", x));
    int ax;
    KN_TRY(kn_axis_normalize(fn, axis, x->ndim, &ax));
    if (x->shape[ax] != 1) {
        char ts[KNT_STR];
        return kn_error(KN_ERR_SHAPE, "%s: axis %d of %s has size %lld, not 1", fn, axis, kn_tensor_str(x, ts, sizeof ts),
                        (long long)x->shape[ax]);
    }
    kn_tensor *t;
    KN_TRY(knt_view_new(fn, x, &t));
    for (int i = ax; i + 1 < x->ndim; i++) t->shape[i] = x->shape[i + 1], t->strides[i] = x->strides[i + 1];
    t->ndim = x->ndim - 1;
    t->shape[t->ndim] = 0, t->strides[t->ndim] = 0;
    *out = t;
    return KN_OK;
}

kn_status kn_tensor_unsqueeze(kn_tensor **out, const kn_tensor *x, int axis) {
    const char *fn = "kn_tensor_unsqueeze";
    KN_TRY(knt_check_ptr(fn, "out", out));
    KN_TRY(knt_check_tensor(fn, "x", x));
    if (x->ndim == KN_MAX_DIMS) {
        char ts[KNT_STR];
        return kn_error(KN_ERR_SHAPE, "%s: %s already has the maximum of %d dimensions", fn,
                        kn_tensor_str(x, ts, sizeof ts), KN_MAX_DIMS);
    }
    int ax;
    KN_TRY(kn_axis_normalize(fn, axis, x->ndim + 1, &ax));
    kn_tensor *t;
    KN_TRY(knt_view_new(fn, x, &t));
    for (int i = x->ndim; i > ax; i--) t->shape[i] = x->shape[i - 1], t->strides[i] = x->strides[i - 1];
    t->shape[ax] = 1;
    t->strides[ax] = ax < x->ndim ? x->strides[ax] * x->shape[ax] : 1;
    t->ndim = x->ndim + 1;
    *out = t;
    return KN_OK;
}

kn_status kn_tensor_alias(kn_tensor **out, const kn_tensor *x) {
    KN_TRY(knt_check_ptr("kn_tensor_alias", "out", out));
    KN_TRY(knt_check_tensor("kn_tensor_alias", "x", x));
    return knt_view_new("kn_tensor_alias", x, out);
}
