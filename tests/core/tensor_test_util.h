/* tensor_test_util.h — helpers shared by the tests/core/test_tensor_*.c files.
 *
 * The references here are computed by hand from the definitions (element at
 * offset + sum index*stride, read with kn_dtype_load), never through the kernels under test.
 * All functions are static: each test file gets its own copy. */
#ifndef KILN_TESTS_TENSOR_TEST_UTIL_H
#define KILN_TESTS_TENSOR_TEST_UTIL_H

#include <stdlib.h>
#include <string.h>

#include "kn_test.h"
#include "kiln/device.h"
#include "kiln/tensor.h"

static inline int64_t tt_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

/* Row-major multi-index of linear position lin. */
static inline void tt_unravel(int64_t lin, int ndim, const int64_t *shape, int64_t *idx) {
    for (int d = ndim - 1; d >= 0; d--) {
        idx[d] = shape[d] ? lin % shape[d] : 0;
        lin = shape[d] ? lin / shape[d] : 0;
    }
}

/* Element idx of t, by hand. */
static inline double tt_at(const kn_tensor *t, const int64_t *idx) {
    int64_t off = t->offset;
    for (int d = 0; d < t->ndim; d++) off += idx[d] * t->strides[d];
    return kn_dtype_load(t->dtype, t->storage->data, off);
}

/* All elements of t in row-major order, by hand (caller frees). */
static inline double *tt_values(const kn_tensor *t) {
    int64_t n = tt_numel(t->ndim, t->shape);
    double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    cr_assert(v);
    int64_t idx[KN_MAX_DIMS];
    for (int64_t i = 0; i < n; i++) {
        tt_unravel(i, t->ndim, t->shape, idx);
        v[i] = tt_at(t, idx);
    }
    return v;
}

/* A contiguous tensor of dt with values uniform in [lo, hi) (as stored in dt). */
static inline kn_tensor *tt_rand(kn_dtype dt, int ndim, const int64_t *shape, uint64_t seed, double lo, double hi) {
    int64_t n = tt_numel(ndim, shape);
    double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    cr_assert(v);
    kn_rng r = kn_rng_new(seed);
    kn_rng_uniform_f64(&r, v, n);
    for (int64_t i = 0; i < n; i++) v[i] = lo + (hi - lo) * v[i];
    kn_tensor *t = NULL;
    KN_ASSERT_OK(kn_tensor_from_f64(&t, dt, ndim, shape, v));
    free(v);
    return t;
}

/* Relative tolerance of one rounding in dt (a few ulps). */
static inline double tt_rtol(kn_dtype dt) {
    switch (dt) {
    case KN_DT_F64: return 1e-12;
    case KN_DT_F32: return 2e-6;
    case KN_DT_F16: return 2e-3;
    case KN_DT_BF16: return 1.6e-2;
    case KN_DT_I32: case KN_DT_I64: case KN_DT_U8: case KN_DT_BOOL: case KN_DT_COUNT: break;
    }
    return 0;
}

/* The value x takes when stored in dt. */
static inline double tt_round(kn_dtype dt, double x) {
    unsigned char buf[8];
    kn_dtype_store(dt, buf, 0, x);
    return kn_dtype_load(dt, buf, 0);
}

static inline void tt_assert_shape(const kn_tensor *t, kn_dtype dt, int ndim, const int64_t *shape) {
    cr_assert(t, "no tensor");
    char a[96], b[96];
    cr_assert_eq(t->dtype, dt, "dtype %s, expected %s", kn_dtype_name(t->dtype), kn_dtype_name(dt));
    bool same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
    cr_assert(same, "shape %s, expected %s", kn_shape_str(t->ndim, t->shape, a, sizeof a),
              kn_shape_str(ndim, shape, b, sizeof b));
}

#endif /* KILN_TESTS_TENSOR_TEST_UTIL_H */
