/* nn.c — the kernels a language model needs beyond elementwise ops and matmul: softmax,
 * log-softmax, embedding lookup and concatenation.
 *
 * softmax(x)_i = exp(x_i - max x) / sum_j exp(x_j - max x): subtracting the row maximum
 * first keeps exp() from overflowing (the largest term becomes exp(0) = 1) without
 * changing the result. log_softmax(x)_i = x_i - max x - log(sum_j exp(x_j - max x)), which
 * stays finite where log(softmax) would give log(0) = -inf.
 * The reduced axis is moved last (a header, no copy), so each row of the row iterator is
 * one softmax; the output gets the same permuted view, so it comes out in x's layout. */
#include <math.h>
#include <string.h>

#include "tensor/tensor_impl.h"

static kn_status knt_softmax(const char *fn, kn_tensor **out, const kn_tensor *x, int axis, bool log_space) {
    KN_TRY(knt_check_ptr(fn, "out", out));
    KN_TRY(knt_check_cpu(fn, "x", x));
    char ts[KNT_STR];
    if (!kn_dtype_is_float(x->dtype))
        return kn_error(KN_ERR_DTYPE, "%s: x is %s; a float dtype is needed", fn, kn_tensor_str(x, ts, sizeof ts));
    int ax;
    KN_TRY(kn_axis_normalize(fn, axis, x->ndim, &ax));
    kn_tensor *t;
    KN_TRY(knt_empty(fn, x->dtype, x->ndim, x->shape, &t));
    if (kn_tensor_numel(x) == 0) {
        *out = t;
        return KN_OK;
    }
    kn_tensor xp = knt_axis_last(x, ax), tp = knt_axis_last(t, ax);
    const kn_tensor *ops[2] = {&tp, &xp};
    knt_iter it;
    knt_iter_init(&it, xp.ndim, xp.shape, 2, ops);
    int64_t n = it.inner;
    do {
        int64_t so = it.inner_stride[0], sx = it.inner_stride[1];
        if (x->dtype == KN_DT_F32) {
            const float *px = KNT_PTR(const float, x) + it.base[1];
            float *po = KNT_PTR(float, t) + it.base[0];
            float mx = -INFINITY;
            for (int64_t j = 0; j < n; j++) mx = px[j * sx] > mx ? px[j * sx] : mx;
            if (mx == -INFINITY) mx = 0; /* an all -inf row: avoid -inf - -inf */
            double sum = 0;
            for (int64_t j = 0; j < n; j++) {
                float e = expf(px[j * sx] - mx);
                sum += e;
                if (!log_space) po[j * so] = e;
            }
            if (log_space) {
                double lse = mx + log(sum); /* x - lse in double: no cancellation loss */
                for (int64_t j = 0; j < n; j++) po[j * so] = (float)(px[j * sx] - lse);
            } else {
                float inv = (float)(1.0 / sum);
                for (int64_t j = 0; j < n; j++) po[j * so] *= inv;
            }
        } else {
            const void *dx = x->storage->data;
            void *dt = t->storage->data;
            int64_t bx = it.base[1], bo = it.base[0];
            double mx = -INFINITY;
            for (int64_t j = 0; j < n; j++) {
                double v = kn_dtype_load(x->dtype, dx, bx + j * sx);
                mx = v > mx ? v : mx;
            }
            if (mx == -INFINITY) mx = 0;
            double sum = 0;
            for (int64_t j = 0; j < n; j++) sum += exp(kn_dtype_load(x->dtype, dx, bx + j * sx) - mx);
            double lse = mx + log(sum);
            for (int64_t j = 0; j < n; j++) {
                double v = kn_dtype_load(x->dtype, dx, bx + j * sx);
                kn_dtype_store(t->dtype, dt, bo + j * so, log_space ? v - lse : exp(v - mx) / sum);
            }
        }
    } while (knt_iter_next(&it));
    kn_status st = knt_iter_finish(fn, &it);
    if (st != KN_OK) {
        kn_tensor_free(t);
        return st;
    }
    *out = t;
    return KN_OK;
}

kn_status kn_tensor_softmax(kn_tensor **out, const kn_tensor *x, int axis) {
    return knt_softmax("kn_tensor_softmax", out, x, axis, false);
}

kn_status kn_tensor_log_softmax(kn_tensor **out, const kn_tensor *x, int axis) {
    return knt_softmax("kn_tensor_log_softmax", out, x, axis, true);
}

kn_status kn_tensor_embedding(kn_tensor **out, const kn_tensor *weight, const kn_tensor *idx) {
    const char *fn = "kn_tensor_embedding";
    KN_TRY(knt_check_ptr(fn, "out", out));
    KN_TRY(knt_check_cpu(fn, "weight", weight));
    KN_TRY(knt_check_cpu(fn, "idx", idx));
    char ws[KNT_STR], is[KNT_STR];
    kn_tensor_str(weight, ws, sizeof ws);
    kn_tensor_str(idx, is, sizeof is);
    if (weight->ndim != 2) return kn_error(KN_ERR_SHAPE, "%s: weight %s must be 2-d [V, D]", fn, ws);
    if (idx->dtype != KN_DT_I32 && idx->dtype != KN_DT_I64 && idx->dtype != KN_DT_U8)
        return kn_error(KN_ERR_DTYPE, "%s: idx %s must have an integer dtype (i32, i64, u8)", fn, is);
    if (idx->ndim + 1 > KN_MAX_DIMS)
        return kn_error(KN_ERR_SHAPE, "%s: idx %s has too many dimensions for a [..., D] result", fn, is);
    int64_t V = weight->shape[0], D = weight->shape[1];
    int64_t oshape[KN_MAX_DIMS];
    for (int d = 0; d < idx->ndim; d++) oshape[d] = idx->shape[d];
    oshape[idx->ndim] = D;
    kn_tensor *t;
    KN_TRY(knt_empty(fn, weight->dtype, idx->ndim + 1, oshape, &t));
    kn_status st = KN_OK;
    if (kn_tensor_numel(idx) > 0) {
        size_t es = kn_dtype_size(weight->dtype);
        bool rows_contig = weight->strides[1] == 1 || D <= 1;
        char *po = t->storage->data;
        const char *pw = weight->storage->data;
        int64_t k = 0;
        const kn_tensor *ops[1] = {idx};
        knt_iter it;
        knt_iter_init(&it, idx->ndim, idx->shape, 1, ops);
        do {
            for (int64_t j = 0; j < it.inner && st == KN_OK; j++, k++) {
                double v = kn_dtype_load(idx->dtype, idx->storage->data, it.base[0] + j * it.inner_stride[0]);
                if (!(v >= 0 && v < (double)V)) {
                    st = kn_error(KN_ERR_ARG, "%s: index %.0f (element %lld of idx %s) is outside [0, %lld) for weight %s",
                                  fn, v, (long long)k, is, (long long)V, ws);
                    break;
                }
                int64_t row = weight->offset + (int64_t)v * weight->strides[0];
                char *dst = po + (size_t)(k * D) * es;
                if (rows_contig) memcpy(dst, pw + (size_t)row * es, (size_t)D * es);
                else for (int64_t c = 0; c < D; c++) memcpy(dst + (size_t)c * es, pw + (size_t)(row + c * weight->strides[1]) * es, es);
            }
        } while (st == KN_OK && knt_iter_next(&it));
        if (st == KN_OK) st = knt_iter_finish(fn, &it);
    }
    if (st != KN_OK) {
        kn_tensor_free(t);
        return st;
    }
    *out = t;
    return KN_OK;
}

kn_status kn_tensor_cat(kn_tensor **out, int n, const kn_tensor *const *xs, int axis) {
    const char *fn = "kn_tensor_cat";
    KN_TRY(knt_check_ptr(fn, "out", out));
    KN_TRY(knt_check_ptr(fn, "xs", xs));
    if (n < 1) return kn_error(KN_ERR_ARG, "%s: n = %d; at least one tensor is needed", fn, n);
    for (int i = 0; i < n; i++) {
        char what[32];
        snprintf(what, sizeof what, "xs[%d]", i);
        KN_TRY(knt_check_cpu(fn, what, xs[i]));
    }
    const kn_tensor *x0 = xs[0];
    int ax;
    KN_TRY(kn_axis_normalize(fn, axis, x0->ndim, &ax));
    int64_t shape[KN_MAX_DIMS];
    memcpy(shape, x0->shape, sizeof shape);
    shape[ax] = 0;
    for (int i = 0; i < n; i++) {
        char s0[KNT_STR], si[KNT_STR];
        kn_tensor_str(x0, s0, sizeof s0);
        kn_tensor_str(xs[i], si, sizeof si);
        if (xs[i]->dtype != x0->dtype)
            return kn_error(KN_ERR_DTYPE, "%s: xs[%d] is %s but xs[0] is %s: dtypes must match", fn, i, si, s0);
        bool ok = xs[i]->ndim == x0->ndim;
        for (int d = 0; ok && d < x0->ndim; d++) ok = d == ax || xs[i]->shape[d] == x0->shape[d];
        if (!ok)
            return kn_error(KN_ERR_SHAPE, "%s: xs[%d] %s does not match xs[0] %s outside axis %d", fn, i, si, s0, axis);
        if (shape[ax] > INT64_MAX - xs[i]->shape[ax])
            return kn_error(KN_ERR_SHAPE, "%s: axis %d grows past int64", fn, axis);
        shape[ax] += xs[i]->shape[ax];
    }
    kn_tensor *t;
    KN_TRY(knt_empty(fn, x0->dtype, x0->ndim, shape, &t));
    int64_t pos = 0;
    for (int i = 0; i < n; i++) {
        /* The slab of t that xs[i] fills: a header over t's storage, no reference. */
        kn_tensor slab = *t;
        slab.shape[ax] = xs[i]->shape[ax];
        slab.offset = t->offset + pos * t->strides[ax];
        pos += xs[i]->shape[ax];
        kn_status st = kn_tensor_copy_into(&slab, xs[i]);
        if (st != KN_OK) {
            char why[512];
            snprintf(why, sizeof why, "%s", kn_last_error());
            kn_tensor_free(t);
            return kn_error(st, "%s: copying xs[%d]: %s", fn, i, why);
        }
    }
    *out = t;
    return KN_OK;
}
