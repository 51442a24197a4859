/* tensor.c — storage and tensor lifetime, creation functions, and the shared internals of
 * core/tensor/ (argument checks, view headers, the row iterator).
 *
 * Ownership: a kn_storage is freed when its refcount drops to 0; every kn_tensor holds
 * exactly one reference. Creating a view takes a reference, kn_tensor_free drops one.
 * Storage bytes come from the device backend of the tensor's device (kn_device_alloc), so
 * a tensor is "on" a device because its storage is; CPU bytes come from kn_malloc.
 * The refcount is a plain int: share a storage between threads only with your own locking.
 *
 * Creation functions validate everything first (dtype, ndim, sizes, numel overflow, device)
 * and only then allocate, so a failure never leaves half a tensor behind. */
#include <math.h>
#include <string.h>

#include "tensor/tensor_impl.h"

/* ---------------------------------------------------------------- checks */

kn_status knt_check_ptr(const char *fn, const char *what, const void *p) {
    if (!p) return kn_error(KN_ERR_ARG, "%s: %s is NULL", fn, what);
    return KN_OK;
}

kn_status knt_check_dtype(const char *fn, kn_dtype dt) {
    if (!kn_dtype_valid(dt))
        return kn_error(KN_ERR_DTYPE, "%s: dtype %d is not a kn_dtype (0..%d)", fn, (int)dt, KN_DT_COUNT - 1);
    return KN_OK;
}

kn_status knt_check_tensor(const char *fn, const char *what, const kn_tensor *t) {
    if (!t) return kn_error(KN_ERR_ARG, "%s: tensor %s is NULL", fn, what);
    if (!t->storage) return kn_error(KN_ERR_ARG, "%s: tensor %s has no storage (freed or never created?)", fn, what);
    if (t->ndim < 0 || t->ndim > KN_MAX_DIMS)
        return kn_error(KN_ERR_ARG, "%s: tensor %s has ndim %d, outside [0, %d]", fn, what, t->ndim, KN_MAX_DIMS);
    if (!kn_dtype_valid(t->dtype))
        return kn_error(KN_ERR_DTYPE, "%s: tensor %s has invalid dtype %d", fn, what, (int)t->dtype);
    return KN_OK;
}

kn_status knt_check_cpu(const char *fn, const char *what, const kn_tensor *t) {
    KN_TRY(knt_check_tensor(fn, what, t));
    if (t->storage->device.type != KN_DEVICE_CPU) {
        char ds[32], ts[KNT_STR];
        return kn_error(KN_ERR_DEVICE, "%s: tensor %s %s is on %s; this CPU kernel needs CPU tensors (kn_tensor_to)",
                        fn, what, kn_tensor_str(t, ts, sizeof ts), kn_device_str(t->storage->device, ds, sizeof ds));
    }
    return KN_OK;
}

kn_status knt_check_shape(const char *fn, int ndim, const int64_t *shape, size_t elem_size, int64_t *numel_out) {
    if (ndim < 0 || ndim > KN_MAX_DIMS)
        return kn_error(KN_ERR_ARG, "%s: ndim %d is outside [0, %d]", fn, ndim, KN_MAX_DIMS);
    if (ndim > 0 && !shape) return kn_error(KN_ERR_ARG, "%s: shape is NULL with ndim %d", fn, ndim);
    char ss[KNT_STR];
    int64_t n = 1;
    bool zero = false;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return kn_error(KN_ERR_SHAPE, "%s: shape %s has a negative size at axis %d", fn,
                            kn_shape_str(ndim, shape, ss, sizeof ss), i);
        if (shape[i] == 0) zero = true;
    }
    for (int i = 0; i < ndim && !zero; i++) {
        if (n > INT64_MAX / shape[i])
            return kn_error(KN_ERR_SHAPE, "%s: shape %s has more elements than fit in int64", fn,
                            kn_shape_str(ndim, shape, ss, sizeof ss));
        n *= shape[i];
    }
    if (zero) n = 0;
    if (elem_size > 0 && n > INT64_MAX / (int64_t)elem_size)
        return kn_error(KN_ERR_SHAPE, "%s: shape %s needs more than 2^63 bytes", fn,
                        kn_shape_str(ndim, shape, ss, sizeof ss));
    if (numel_out) *numel_out = n;
    return KN_OK;
}

int64_t knt_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

void knt_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides) {
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= shape[i] > 0 ? shape[i] : 1;
    }
}

/* ---------------------------------------------------------------- lifetime */

kn_status knt_view_new(const char *fn, const kn_tensor *x, kn_tensor **out) {
    kn_tensor *t = kn_malloc(sizeof *t);
    if (!t) return kn_error(KN_ERR_OOM, "%s: out of memory for a tensor header", fn);
    *t = *x;
    t->storage->refcount++;
    *out = t;
    return KN_OK;
}

/* A contiguous tensor of (dt, shape) over storage s (its one reference). */
static kn_tensor *knt_over(kn_tensor *t, kn_storage *s, kn_dtype dt, int ndim, const int64_t *shape) {
    memset(t, 0, sizeof *t);
    t->storage = s;
    t->dtype = dt;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    knt_contiguous_strides(ndim, t->shape, t->strides);
    t->offset = 0;
    return t;
}

static kn_status knt_empty_on(const char *fn, kn_device dev, kn_dtype dt, int ndim, const int64_t *shape,
                              kn_tensor **out) {
    KN_TRY(knt_check_dtype(fn, dt));
    int64_t numel;
    KN_TRY(knt_check_shape(fn, ndim, shape, kn_dtype_size(dt), &numel));
    KN_TRY(kn_device_check(fn, dev));
    size_t nbytes = (size_t)numel * kn_dtype_size(dt);
    kn_tensor *t = kn_malloc(sizeof *t);
    kn_storage *s = kn_malloc(sizeof *s);
    void *data = NULL;
    kn_status st = (t && s) ? kn_device_alloc(dev, nbytes, &data) : KN_ERR_OOM;
    if (st != KN_OK) {
        char ss[KNT_STR], ds[32], why[256] = "";
        if (t && s) snprintf(why, sizeof why, ": %s", kn_last_error());
        kn_free(t);
        kn_free(s);
        return kn_error(st, "%s: cannot allocate %s%s on %s (%zu bytes)%s", fn, kn_dtype_name(dt),
                        kn_shape_str(ndim, shape, ss, sizeof ss), kn_device_str(dev, ds, sizeof ds), nbytes, why);
    }
    *s = (kn_storage){.refcount = 1, .device = dev, .nbytes = nbytes, .data = data, .owns_data = true};
    *out = knt_over(t, s, dt, ndim, shape);
    return KN_OK;
}

kn_status kn_tensor_wrap(kn_tensor **out, kn_device dev, void *data, kn_dtype dt, int ndim, const int64_t *shape) {
    KN_TRY(knt_check_ptr("kn_tensor_wrap", "out", out));
    if (!data) return kn_error(KN_ERR_ARG, "kn_tensor_wrap: NULL data");
    int64_t numel;
    KN_TRY(knt_check_shape("kn_tensor_wrap", ndim, shape, kn_dtype_size(dt), &numel));
    kn_tensor *t = kn_malloc(sizeof *t);
    kn_storage *s = kn_malloc(sizeof *s);
    if (!t || !s) {
        kn_free(t);
        kn_free(s);
        return kn_error(KN_ERR_OOM, "kn_tensor_wrap: out of memory");
    }
    *s = (kn_storage){.refcount = 1, .device = dev, .nbytes = (size_t)numel * kn_dtype_size(dt), .data = data,
                      .owns_data = false};
    *out = knt_over(t, s, dt, ndim, shape);
    return KN_OK;
}

kn_status knt_empty(const char *fn, kn_dtype dt, int ndim, const int64_t *shape, kn_tensor **out) {
    return knt_empty_on(fn, KN_CPU, dt, ndim, shape, out);
}

void kn_tensor_free(kn_tensor *t) {
    if (!t) return;
    kn_storage *s = t->storage;
    if (s && --s->refcount == 0) {
        if (s->owns_data) kn_device_free(s->device, s->data, s->nbytes);
        kn_free(s);
    }
    kn_free(t);
}

/* ---------------------------------------------------------------- creation */

kn_status kn_tensor_empty_on(kn_tensor **out, kn_device dev, kn_dtype dt, int ndim, const int64_t *shape) {
    KN_TRY(knt_check_ptr("kn_tensor_empty_on", "out", out));
    return knt_empty_on("kn_tensor_empty_on", dev, dt, ndim, shape, out);
}

kn_status kn_tensor_empty(kn_tensor **out, kn_dtype dt, int ndim, const int64_t *shape) {
    KN_TRY(knt_check_ptr("kn_tensor_empty", "out", out));
    return knt_empty("kn_tensor_empty", dt, ndim, shape, out);
}

kn_status kn_tensor_zeros(kn_tensor **out, kn_dtype dt, int ndim, const int64_t *shape) {
    KN_TRY(knt_check_ptr("kn_tensor_zeros", "out", out));
    kn_tensor *t;
    KN_TRY(knt_empty("kn_tensor_zeros", dt, ndim, shape, &t));
    if (t->storage->nbytes) memset(t->storage->data, 0, t->storage->nbytes);
    *out = t;
    return KN_OK;
}

/* Fill a fresh contiguous CPU tensor with one value. */
static void knt_fill(kn_tensor *t, double v) {
    int64_t n = knt_numel(t->ndim, t->shape);
    if (t->dtype == KN_DT_F32) {
        float *p = KNT_PTR(float, t), f = (float)v;
        for (int64_t i = 0; i < n; i++) p[i] = f;
    } else if (n > 0) {
        kn_dtype_store(t->dtype, t->storage->data, 0, v);
        size_t es = kn_dtype_size(t->dtype);
        char *p = t->storage->data;
        for (int64_t i = 1; i < n; i++) memcpy(p + (size_t)i * es, p, es);
    }
}

kn_status kn_tensor_full(kn_tensor **out, kn_dtype dt, int ndim, const int64_t *shape, double value) {
    KN_TRY(knt_check_ptr("kn_tensor_full", "out", out));
    kn_tensor *t;
    KN_TRY(knt_empty("kn_tensor_full", dt, ndim, shape, &t));
    knt_fill(t, value);
    *out = t;
    return KN_OK;
}

kn_status kn_tensor_scalar(kn_tensor **out, kn_dtype dt, double value) {
    KN_TRY(knt_check_ptr("kn_tensor_scalar", "out", out));
    kn_tensor *t;
    KN_TRY(knt_empty("kn_tensor_scalar", dt, 0, NULL, &t));
    knt_fill(t, value);
    *out = t;
    return KN_OK;
}

/* The checks and the allocation kn_tensor_from_data and kn_tensor_from_f64 share: a new
 * contiguous tensor *t with *numel elements, after checking out, dt, shape and data. */
static kn_status knt_new_for_data(const char *fn, kn_tensor **out, kn_dtype dt, int ndim, const int64_t *shape,
                                  const void *data, kn_tensor **t, int64_t *numel) {
    KN_TRY(knt_check_ptr(fn, "out", out));
    KN_TRY(knt_check_dtype(fn, dt));
    KN_TRY(knt_check_shape(fn, ndim, shape, kn_dtype_size(dt), numel));
    if (*numel > 0) KN_TRY(knt_check_ptr(fn, "data", data));
    return knt_empty(fn, dt, ndim, shape, t);
}

kn_status kn_tensor_from_data(kn_tensor **out, kn_dtype dt, int ndim, const int64_t *shape, const void *data) {
    kn_tensor *t;
    int64_t numel;
    KN_TRY(knt_new_for_data("kn_tensor_from_data", out, dt, ndim, shape, data, &t, &numel));
    if (t->storage->nbytes) memcpy(t->storage->data, data, t->storage->nbytes);
    *out = t;
    return KN_OK;
}

kn_status kn_tensor_from_f64(kn_tensor **out, kn_dtype dt, int ndim, const int64_t *shape, const double *data) {
    kn_tensor *t;
    int64_t numel;
    KN_TRY(knt_new_for_data("kn_tensor_from_f64", out, dt, ndim, shape, data, &t, &numel));
    for (int64_t i = 0; i < numel; i++) kn_dtype_store(dt, t->storage->data, i, data[i]);
    *out = t;
    return KN_OK;
}

kn_status kn_tensor_arange(kn_tensor **out, kn_dtype dt, double start, double stop, double step) {
    const char *fn = "kn_tensor_arange";
    KN_TRY(knt_check_ptr(fn, "out", out));
    KN_TRY(knt_check_dtype(fn, dt));
    if (!isfinite(start) || !isfinite(stop) || !isfinite(step) || step == 0)
        return kn_error(KN_ERR_ARG, "%s: start %g, stop %g, step %g: need finite values and step != 0", fn, start,
                        stop, step);
    double count = ceil((stop - start) / step);
    if (!(count <= (double)(INT64_C(1) << 48)))
        return kn_error(KN_ERR_SHAPE, "%s: start %g, stop %g, step %g give %g elements (too many)", fn, start, stop,
                        step, count);
    int64_t n = count > 0 ? (int64_t)count : 0;
    kn_tensor *t;
    KN_TRY(knt_empty(fn, dt, 1, &n, &t));
    for (int64_t i = 0; i < n; i++) kn_dtype_store(dt, t->storage->data, i, start + (double)i * step);
    *out = t;
    return KN_OK;
}

static kn_status knt_random(const char *fn, bool normal, kn_tensor **out, kn_dtype dt, int ndim,
                            const int64_t *shape, kn_rng *rng) {
    KN_TRY(knt_check_ptr(fn, "out", out));
    KN_TRY(knt_check_ptr(fn, "rng", rng));
    KN_TRY(knt_check_dtype(fn, dt));
    if (!kn_dtype_is_float(dt))
        return kn_error(KN_ERR_DTYPE, "%s: dtype %s: random tensors need a float dtype", fn, kn_dtype_name(dt));
    kn_tensor *t;
    KN_TRY(knt_empty(fn, dt, ndim, shape, &t));
    int64_t n = knt_numel(ndim, shape);
    if (dt == KN_DT_F64) {
        (normal ? kn_rng_normal_f64 : kn_rng_uniform_f64)(rng, t->storage->data, n);
    } else if (dt == KN_DT_F32) {
        (normal ? kn_rng_normal_f32 : kn_rng_uniform_f32)(rng, t->storage->data, n);
    } else {
        float *tmp = kn_malloc((size_t)n * sizeof(float));
        if (!tmp) {
            kn_tensor_free(t);
            return kn_error(KN_ERR_OOM, "%s: out of memory for %lld temporary floats", fn, (long long)n);
        }
        (normal ? kn_rng_normal_f32 : kn_rng_uniform_f32)(rng, tmp, n);
        kn_dtype_convert(dt, t->storage->data, KN_DT_F32, tmp, n);
        kn_free(tmp);
    }
    *out = t;
    return KN_OK;
}

kn_status kn_tensor_rand(kn_tensor **out, kn_dtype dt, int ndim, const int64_t *shape, kn_rng *rng) {
    return knt_random("kn_tensor_rand", false, out, dt, ndim, shape, rng);
}

kn_status kn_tensor_randn(kn_tensor **out, kn_dtype dt, int ndim, const int64_t *shape, kn_rng *rng) {
    return knt_random("kn_tensor_randn", true, out, dt, ndim, shape, rng);
}

/* ---------------------------------------------------------------- the row iterator */

static void knt_iter_set_base(knt_iter *it) {
    for (int k = 0; k < it->nops; k++) {
        int64_t b = it->offset[k];
        for (int d = 0; d < it->outer_ndim; d++) b += it->index[d] * it->strides[k][d];
        it->base[k] = b;
    }
}

void knt_iter_init(knt_iter *it, int ndim, const int64_t *shape, int nops, const kn_tensor *const *ops) {
    KN_CHECK(nops >= 1 && nops <= KNT_MAX_OPS && ndim >= 0 && ndim <= KN_MAX_DIMS);
    memset(it, 0, sizeof *it);
    it->nops = nops;
    it->outer_ndim = ndim > 0 ? ndim - 1 : 0;
    it->inner = ndim > 0 ? shape[ndim - 1] : 1;
    for (int d = 0; d < it->outer_ndim; d++) it->shape[d] = shape[d];
    it->rows = knt_numel(it->outer_ndim, it->shape);
    for (int k = 0; k < nops; k++) {
        KN_CHECK(ops[k]->ndim == ndim);
        it->offset[k] = ops[k]->offset;
        it->inner_stride[k] = ndim > 0 ? ops[k]->strides[ndim - 1] : 0;
        for (int d = 0; d < it->outer_ndim; d++) it->strides[k][d] = ops[k]->strides[d];
    }
    knt_iter_set_base(it);
    it->visited = (it->rows > 0 && it->inner > 0) ? 1 : 0;
    kn_clear_error();
}

bool knt_iter_next(knt_iter *it) {
    if (it->visited == 0 || it->visited >= it->rows) return false;
    if (!kn_index_next(it->outer_ndim, it->shape, it->index)) return false;
    it->visited++;
    knt_iter_set_base(it);
    return true;
}

kn_status knt_walk_error(const char *fn, int64_t visited, int64_t total) {
    if (visited == total) return KN_OK;
    char why[512];
    snprintf(why, sizeof why, "%s", kn_last_error());
    if (!strncmp(why, "not implemented", 15))
        return kn_error(KN_ERR_NOT_IMPLEMENTED, "%s: needs kn_index_next: %s", fn, why);
    return kn_error(KN_ERR_INTERNAL,
                    "%s: kn_index_next stopped after %lld of %lld indices (is the lab01 unit kn_index_next right?)%s%s",
                    fn, (long long)visited, (long long)total, why[0] ? ": " : "", why);
}

kn_status knt_iter_finish(const char *fn, const knt_iter *it) {
    if (it->inner == 0) return KN_OK;
    return knt_walk_error(fn, it->visited, it->rows);
}

kn_tensor knt_axis_last(const kn_tensor *x, int axis) {
    kn_tensor t = *x;
    int k = 0;
    for (int d = 0; d < x->ndim; d++)
        if (d != axis) t.shape[k] = x->shape[d], t.strides[k] = x->strides[d], k++;
    t.shape[k] = x->shape[axis], t.strides[k] = x->strides[axis];
    return t;
}
