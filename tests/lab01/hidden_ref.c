/* hidden_ref.c — the naive reference of lab 01's hidden tests: element reads by hand,
 * dtype round trips, tolerances and random layouts. See hidden_ref.h for why none of it
 * goes through the lab 01 units. */
#include <stdio.h>
#include <string.h>

#include "hidden_ref.h"

const kn_dtype href_all_dtypes[KN_DT_COUNT] = {KN_DT_F32, KN_DT_F64, KN_DT_F16, KN_DT_BF16,
                                               KN_DT_I32, KN_DT_I64, KN_DT_U8,  KN_DT_BOOL};

int64_t href_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int k = 0; k < ndim; k++) n *= shape[k];
    return n;
}

void href_unravel(int64_t lin, int ndim, const int64_t *shape, int64_t *idx) {
    for (int k = ndim - 1; k >= 0; k--) {
        idx[k] = shape[k] > 0 ? lin % shape[k] : 0;
        lin = shape[k] > 0 ? lin / shape[k] : 0;
    }
}

double href_at(const kn_tensor *t, const int64_t *idx) {
    int64_t pos = t->offset;
    for (int k = 0; k < t->ndim; k++) pos += idx[k] * t->strides[k];
    cr_assert(pos >= 0 && (size_t)(pos + 1) * kn_dtype_size(t->dtype) <= t->storage->nbytes,
              "element at storage position %lld lies outside the storage (%zu bytes)",
              (long long)pos, t->storage->nbytes);
    return kn_dtype_load(t->dtype, t->storage->data, pos);
}

double href_roundtrip(kn_dtype dt, double x) {
    uint64_t scratch[2] = {0, 0};
    kn_dtype_store(dt, scratch, 0, x);
    return kn_dtype_load(dt, scratch, 0);
}

double href_eps(kn_dtype dt) {
    switch (dt) {
    case KN_DT_F64: return 0x1p-52;
    case KN_DT_F32: return 0x1p-23;
    case KN_DT_F16: return 0x1p-10;
    case KN_DT_BF16: return 0x1p-7;
    case KN_DT_I32: case KN_DT_I64: case KN_DT_U8: case KN_DT_BOOL: case KN_DT_COUNT: break;
    }
    return 0.0;
}

bool href_close(double got, double want, double tol) {
    if (isnan(want)) return isnan(got);
    if (isinf(want)) return got == want;
    return !isnan(got) && fabs(got - want) <= tol;
}

int64_t href_randint(kn_rng *r, int64_t lo, int64_t hi) {
    uint64_t span = (uint64_t)(hi - lo) + 1;
    uint64_t x = ((uint64_t)kn_rng_u32(r) << 32) | kn_rng_u32(r);
    return lo + (int64_t)(x % span);
}

int href_rand_shape(kn_rng *r, int max_ndim, bool allow_zero, int64_t *shape) {
    int ndim = (int)href_randint(r, 0, max_ndim);
    for (int k = 0; k < ndim; k++) {
        int64_t roll = href_randint(r, 0, 19);
        shape[k] = roll < 5 ? 1 : href_randint(r, 2, 4);
        if (allow_zero && roll == 19) shape[k] = 0;
    }
    while (href_numel(ndim, shape) > HREF_MAX_NUMEL) {
        int big = 0;
        for (int k = 1; k < ndim; k++) if (shape[k] > shape[big]) big = k;
        shape[big]--;
    }
    return ndim;
}

void href_rand_perm(kn_rng *r, int n, int *perm) {
    for (int k = 0; k < n; k++) perm[k] = k;
    for (int k = n - 1; k > 0; k--) {
        int j = (int)href_randint(r, 0, k);
        int t = perm[k]; perm[k] = perm[j]; perm[j] = t;
    }
}

static double rand_value(kn_rng *r, kn_dtype dt, href_values values) {
    double u;
    kn_rng_uniform_f64(r, &u, 1);
    if (values == HREF_VALUES_NEAR_ONE) {
        if (kn_dtype_is_float(dt)) return 0.5 + u;              /* [0.5, 1.5) */
        if (dt == KN_DT_BOOL || dt == KN_DT_U8) return u < 0.8 ? 1 : 2;
        return u < 0.7 ? 1 : (u < 0.85 ? -1 : 2);
    }
    switch (dt) {
    case KN_DT_BOOL: return u < 0.5 ? 0 : 1;
    case KN_DT_U8: return (double)(int)(u * 10);                 /* 0..9 */
    case KN_DT_I32:
    case KN_DT_I64: return (double)((int)(u * 101) - 50);        /* -50..50 */
    case KN_DT_F32: case KN_DT_F64: case KN_DT_F16: case KN_DT_BF16: case KN_DT_COUNT: break;
    }
    return 4 * u - 2;                                                /* [-2, 2) */
}

kn_tensor *href_rand_layout(kn_rng *r, kn_dtype dt, int ndim, const int64_t *shape,
                            bool allow_bcast, href_values values) {
    int perm[KN_MAX_DIMS];
    int64_t strides[KN_MAX_DIMS];
    href_rand_perm(r, ndim, perm);
    /* perm[ndim-1] is the axis stored innermost. */
    int64_t running = 1;
    for (int j = ndim - 1; j >= 0; j--) {
        int a = perm[j];
        if (allow_bcast && href_randint(r, 0, 5) == 0) { strides[a] = 0; continue; }
        int64_t step = href_randint(r, 0, 2) == 0 ? href_randint(r, 2, 3) : 1;
        int64_t gap = href_randint(r, 0, 3) == 0 ? 1 : 0;
        strides[a] = running * step;
        running *= (shape[a] > 0 ? shape[a] : 1) * step + gap;
    }
    int64_t offset = href_randint(r, 0, 3);
    int64_t total = offset + running + href_randint(r, 0, 2);
    kn_tensor *base = NULL, *t = NULL;
    KN_ASSERT_OK(kn_tensor_empty(&base, dt, 1, &total));
    for (int64_t i = 0; i < total; i++)
        kn_dtype_store(dt, base->storage->data, base->offset + i, rand_value(r, dt, values));
    KN_ASSERT_OK(kn_tensor_alias(&t, base));
    kn_tensor_free(base);
    t->offset += offset;
    t->ndim = ndim;
    for (int k = 0; k < ndim; k++) { t->shape[k] = shape[k]; t->strides[k] = strides[k]; }
    return t;
}

const char *href_shape_str(int ndim, const int64_t *shape, char *buf, size_t size) {
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int k = 0; k < ndim && n < size; k++)
        n += (size_t)snprintf(buf + n, size - n, k ? ",%lld" : "%lld", (long long)shape[k]);
    if (n < size) snprintf(buf + n, size - n, "]");
    return buf;
}

void href_expect_shape(const kn_tensor *t, kn_dtype dt, int ndim, const int64_t *shape,
                       const char *what) {
    char want[96], got[96];
    href_shape_str(ndim, shape, want, sizeof want);
    href_shape_str(t->ndim, t->shape, got, sizeof got);
    bool same = t->ndim == ndim;
    for (int k = 0; same && k < ndim; k++) same = t->shape[k] == shape[k];
    cr_assert(same, "%s: expected shape %s, got %s", what, want, got);
    cr_assert(t->dtype == dt, "%s: expected dtype %s, got %s", what, kn_dtype_name(dt),
              kn_dtype_name(t->dtype));
}
