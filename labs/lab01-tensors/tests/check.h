/* check.h — small helpers shared by lab 01's public tests.
 *
 * They read tensors the way the lesson explains, straight from the definition
 *     element(i_0, ..., i_{n-1}) = storage[offset + i_0*strides[0] + ... + i_{n-1}*strides[n-1]]
 * and never through the functions you are writing, so a test can only pass when your code
 * is right. Every check says what it expected and what came back, with shapes.
 *
 * They stop the test (cr_assert) on the first difference; a status is always checked with
 * KN_ASSERT_OK before an output is looked at. */
#ifndef KILN_LAB01_TESTS_CHECK_H
#define KILN_LAB01_TESTS_CHECK_H

#include <stdio.h>
#include <string.h>

#include "kn_test.h"
#include "kiln/tensor.h"

/* "[2,3,4]". */
static inline const char *lab01_shape(int ndim, const int64_t *shape, char *buf, size_t size) {
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int k = 0; k < ndim && n < size; k++)
        n += (size_t)snprintf(buf + n, size - n, k ? ",%lld" : "%lld", (long long)shape[k]);
    if (n < size) snprintf(buf + n, size - n, "]");
    return buf;
}

/* Element idx of t (ndim entries), by the formula above. */
static inline double lab01_at(const kn_tensor *t, const int64_t *idx) {
    int64_t pos = t->offset;
    for (int k = 0; k < t->ndim; k++) pos += idx[k] * t->strides[k];
    return kn_dtype_load(t->dtype, t->storage->data, pos);
}

/* A contiguous tensor holding `values` (row-major), stopping the test if it cannot be made. */
static inline kn_tensor *lab01_make(kn_dtype dt, int ndim, const int64_t *shape, const double *values) {
    kn_tensor *t = NULL;
    KN_ASSERT_OK(kn_tensor_from_f64(&t, dt, ndim, shape, values));
    return t;
}

/* t must have dtype dt, shape [ndim]shape and, read in row-major order, the values `want`
 * (each within tol). `what` names the operation in messages. */
static inline void lab01_expect(const kn_tensor *t, kn_dtype dt, int ndim, const int64_t *shape,
                                const double *want, double tol, const char *what) {
    char ws[96], gs[96];
    lab01_shape(ndim, shape, ws, sizeof ws);
    lab01_shape(t->ndim, t->shape, gs, sizeof gs);
    bool same = t->ndim == ndim;
    for (int k = 0; same && k < ndim; k++) same = t->shape[k] == shape[k];
    cr_assert(same, "%s: expected shape %s, got %s", what, ws, gs);
    cr_assert(t->dtype == dt, "%s: expected dtype %s, got %s", what, kn_dtype_name(dt),
              kn_dtype_name(t->dtype));
    int64_t n = 1, idx[KN_MAX_DIMS] = {0};
    for (int k = 0; k < ndim; k++) n *= shape[k];
    for (int64_t i = 0; i < n; i++) {
        int64_t rest = i;
        for (int k = ndim - 1; k >= 0; k--) { idx[k] = rest % shape[k]; rest /= shape[k]; }
        double got = lab01_at(t, idx);
        char is[96];
        cr_assert(fabs(got - want[i]) <= tol,
                  "%s: result %s, element %s: expected %g, got %g", what, ws,
                  lab01_shape(ndim, idx, is, sizeof is), want[i], got);
    }
}

#endif /* KILN_LAB01_TESTS_CHECK_H */
