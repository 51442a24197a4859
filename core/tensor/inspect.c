/* inspect.c — looking at tensors: element count, contiguity, element access, shape strings
 * and printing.
 *
 * A tensor is contiguous when its elements sit in row-major order with no gaps, i.e. each
 * stride equals the product of the sizes to its right. Axes of size 1 may have any stride
 * (they are never stepped over), and a tensor with no elements is contiguous. */
#include <math.h>
#include <string.h>

#include "tensor/tensor_impl.h"

int64_t kn_tensor_numel(const kn_tensor *t) {
    if (!t || t->ndim < 0 || t->ndim > KN_MAX_DIMS) return 0;
    return knt_numel(t->ndim, t->shape);
}

bool kn_tensor_is_contiguous(const kn_tensor *t) {
    if (!t || t->ndim < 0 || t->ndim > KN_MAX_DIMS) return false;
    if (kn_tensor_numel(t) == 0) return true;
    int64_t expect = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->strides[i] != expect) return false;
        expect *= t->shape[i];
    }
    return true;
}

void *kn_tensor_data(const kn_tensor *t) {
    if (!t || !t->storage || !t->storage->data || !kn_dtype_valid(t->dtype)) return NULL;
    return (char *)t->storage->data + t->offset * (int64_t)kn_dtype_size(t->dtype);
}

kn_status kn_axis_normalize(const char *fn, int axis, int ndim, int *out) {
    if (!fn) fn = "kn_axis_normalize";
    if (!out) return kn_error(KN_ERR_ARG, "%s: out is NULL", fn);
    if (ndim < 0 || ndim > KN_MAX_DIMS) return kn_error(KN_ERR_ARG, "%s: ndim %d is outside [0, %d]", fn, ndim, KN_MAX_DIMS);
    if (axis < -ndim || axis >= ndim)
        return kn_error(KN_ERR_AXIS, "%s: axis %d is out of range for %d dimensions (expected [%d, %d])", fn, axis,
                        ndim, -ndim, ndim - 1);
    *out = axis < 0 ? axis + ndim : axis;
    return KN_OK;
}

/* Element offset of a multi-index, negative entries counting from the end. */
static kn_status knt_index_offset(const char *fn, const kn_tensor *t, const int64_t *index, int64_t *off) {
    if (t->ndim > 0) KN_TRY(knt_check_ptr(fn, "index", index));
    int64_t o = t->offset;
    for (int i = 0; i < t->ndim; i++) {
        int64_t k = index[i] < 0 ? index[i] + t->shape[i] : index[i];
        if (k < 0 || k >= t->shape[i]) {
            char ss[KNT_STR];
            return kn_error(KN_ERR_ARG, "%s: index %lld is out of range for axis %d of shape %s", fn,
                            (long long)index[i], i, kn_shape_str(t->ndim, t->shape, ss, sizeof ss));
        }
        o += k * t->strides[i];
    }
    *off = o;
    return KN_OK;
}

kn_status kn_tensor_get(const kn_tensor *t, const int64_t *index, double *out) {
    const char *fn = "kn_tensor_get";
    KN_TRY(knt_check_cpu(fn, "t", t));
    KN_TRY(knt_check_ptr(fn, "out", out));
    int64_t off;
    KN_TRY(knt_index_offset(fn, t, index, &off));
    *out = kn_dtype_load(t->dtype, t->storage->data, off);
    return KN_OK;
}

kn_status kn_tensor_set(kn_tensor *t, const int64_t *index, double value) {
    const char *fn = "kn_tensor_set";
    KN_TRY(knt_check_cpu(fn, "t", t));
    int64_t off;
    KN_TRY(knt_index_offset(fn, t, index, &off));
    kn_dtype_store(t->dtype, t->storage->data, off, value);
    return KN_OK;
}

kn_status kn_tensor_item_any(const kn_tensor *t, double *out) {
    if (!t || !t->storage || t->storage->device.type == KN_DEVICE_CPU) return kn_tensor_item(t, out);
    kn_tensor *h = NULL;
    KN_TRY(kn_tensor_to(&h, t, KN_CPU));
    kn_status st = kn_tensor_item(h, out);
    kn_tensor_free(h);
    return st;
}

kn_status kn_tensor_item(const kn_tensor *t, double *out) {
    const char *fn = "kn_tensor_item";
    KN_TRY(knt_check_cpu(fn, "t", t));
    KN_TRY(knt_check_ptr(fn, "out", out));
    if (kn_tensor_numel(t) != 1) {
        char ts[KNT_STR];
        return kn_error(KN_ERR_SHAPE, "%s: %s has %lld elements, expected exactly 1", fn,
                        kn_tensor_str(t, ts, sizeof ts), (long long)kn_tensor_numel(t));
    }
    int64_t zeros[KN_MAX_DIMS] = {0};
    int64_t off;
    KN_TRY(knt_index_offset(fn, t, zeros, &off));
    *out = kn_dtype_load(t->dtype, t->storage->data, off);
    return KN_OK;
}

kn_status kn_tensor_to_f64(const kn_tensor *t, double *out) {
    const char *fn = "kn_tensor_to_f64";
    KN_TRY(knt_check_cpu(fn, "t", t));
    if (kn_tensor_numel(t) == 0) return KN_OK;
    KN_TRY(knt_check_ptr(fn, "out", out));
    knt_iter it;
    knt_iter_init(&it, t->ndim, t->shape, 1, &t);
    int64_t k = 0;
    do {
        for (int64_t j = 0; j < it.inner; j++)
            out[k++] = kn_dtype_load(t->dtype, t->storage->data, it.base[0] + j * it.inner_stride[0]);
    } while (knt_iter_next(&it));
    return knt_iter_finish(fn, &it);
}

const char *kn_shape_str(int ndim, const int64_t *shape, char *buf, size_t size) {
    if (!buf || size == 0) return buf;
    if (ndim < 0 || ndim > KN_MAX_DIMS || (ndim > 0 && !shape)) {
        snprintf(buf, size, "[?ndim=%d]", ndim);
        return buf;
    }
    size_t n = 0;
    buf[0] = '\0';
    n += (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, i ? ",%lld" : "%lld", (long long)shape[i]);
    if (n < size) snprintf(buf + n, size - n, "]");
    return buf;
}

const char *kn_tensor_str(const kn_tensor *t, char *buf, size_t size) {
    if (!buf || size == 0) return buf;
    if (!t) {
        snprintf(buf, size, "(null)");
        return buf;
    }
    char ss[KNT_STR];
    kn_shape_str(t->ndim, t->shape, ss, sizeof ss);
    if (t->storage && t->storage->device.type != KN_DEVICE_CPU) {
        char ds[32];
        snprintf(buf, size, "%s%s@%s", kn_dtype_name(t->dtype), ss, kn_device_str(t->storage->device, ds, sizeof ds));
    } else {
        snprintf(buf, size, "%s%s", kn_dtype_name(t->dtype), ss);
    }
    return buf;
}

static void knt_print_rec(FILE *f, const kn_tensor *t, int axis, int64_t off, int max_items, int indent) {
    if (axis == t->ndim) {
        double v = kn_dtype_load(t->dtype, t->storage->data, off);
        if (kn_dtype_is_float(t->dtype)) fprintf(f, "%.6g", v);
        else fprintf(f, "%lld", (long long)v);
        return;
    }
    int64_t n = t->shape[axis];
    bool elide = max_items > 0 && n > 2 * (int64_t)max_items;
    fputc('[', f);
    for (int64_t i = 0; i < n; i++) {
        if (elide && i == max_items) {
            fprintf(f, "...");
            i = n - max_items - 1;
            if (axis + 1 < t->ndim) fprintf(f, ",\n%*s", indent + 1, "");
            else fprintf(f, ", ");
            continue;
        }
        knt_print_rec(f, t, axis + 1, off + i * t->strides[axis], max_items, indent + 1);
        if (i + 1 < n) {
            if (axis + 1 < t->ndim) fprintf(f, ",\n%*s", indent + 1, "");
            else fprintf(f, ", ");
        }
    }
    fputc(']', f);
}

void kn_tensor_print(FILE *f, const kn_tensor *t, int max_items) {
    if (!f) return;
    char ts[KNT_STR];
    if (knt_check_cpu("kn_tensor_print", "t", t) != KN_OK) {
        fprintf(f, "tensor %s: cannot print: %s\n", kn_tensor_str(t, ts, sizeof ts), kn_last_error());
        return;
    }
    fprintf(f, "tensor %s\n", kn_tensor_str(t, ts, sizeof ts));
    knt_print_rec(f, t, 0, t->offset, max_items, 0);
    fputc('\n', f);
}
