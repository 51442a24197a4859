/* check.h — helpers for the lab 02 tests: tensors from arrays, and a finite-difference
 * gradient check.
 *
 * l2_gradcheck(fn, ctx, n, xs) runs, in an EAGER builder, out = fn(b, x, ctx) on the f64
 * inputs xs[0..n), takes loss = sum(out * r) with r a fixed random tensor of out's shape
 * (so every element of out gets a different upstream gradient), asks kn_backward for
 * d loss / d x_i and compares every element with the central difference
 * (loss(x + h e_j) - loss(x - h e_j)) / 2h, h = 1e-6. In fp64 the two agree to about
 * 1e-8 for smooth functions; the tolerance is 1e-6 + 1e-5 |numeric|.
 * Note the loss itself uses mul and sum: get bw_mul and bw_sum right first. Every message
 * starts with the case's label (`what`), failures of kn_backward included. */
#ifndef KILN_LAB02_CHECK_H
#define KILN_LAB02_CHECK_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kn_test.h"
#include "kiln/autograd.h"
#include "kiln/ir.h"

#define L2_MAXIN 4

typedef kn_val (*l2_fn)(kn_builder *b, const kn_val *x, void *ctx);

/* A tensor of dtype dt with the given values (row-major). */
static inline kn_tensor *l2_make(kn_dtype dt, int ndim, const int64_t *shape, const double *v) {
    kn_tensor *t = NULL;
    KN_ASSERT_OK(kn_tensor_zeros(&t, dt, ndim, shape));
    for (int64_t i = 0; i < kn_tensor_numel(t); i++) kn_dtype_store(dt, kn_tensor_data(t), i, v ? v[i] : 0.0);
    return t;
}

/* Uniform values in [lo, hi) from seed. */
static inline kn_tensor *l2_rand(kn_dtype dt, int ndim, const int64_t *shape, double lo, double hi, uint64_t seed) {
    kn_tensor *t = l2_make(dt, ndim, shape, NULL);
    kn_rng r = kn_rng_new(seed);
    for (int64_t i = 0; i < kn_tensor_numel(t); i++) {
        double u;
        kn_rng_uniform_f64(&r, &u, 1);
        kn_dtype_store(dt, kn_tensor_data(t), i, lo + (hi - lo) * u);
    }
    return t;
}

static inline double l2_at(const kn_tensor *t, int64_t i) { return kn_dtype_load(t->dtype, kn_tensor_data(t), i); }

/* loss = sum(fn(x) * r), evaluated eagerly. */
static inline double l2_loss(l2_fn fn, void *ctx, int n, kn_tensor *const *xs, const kn_tensor *r) {
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
    kn_val x[L2_MAXIN];
    char name[16];
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "x%d", i);
        x[i] = kn_input(b, name, xs[i]);
    }
    kn_val loss = kn_sum(b, kn_mul(b, fn(b, x, ctx), kn_input(b, "r", r)), 0, NULL, false);
    KN_ASSERT_OK(kn_builder_status(b));
    double v = l2_at(kn_val_tensor(b, loss), 0);
    kn_builder_free(b);
    return v;
}

/* The gradient check described above. `what` names the case in failure messages. */
static inline void l2_gradcheck(const char *what, l2_fn fn, void *ctx, int n, kn_tensor *const *xs, uint64_t seed) {
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
    kn_val x[L2_MAXIN], g[L2_MAXIN];
    char name[16];
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "x%d", i);
        x[i] = kn_input(b, name, xs[i]);
    }
    kn_val out = fn(b, x, ctx);
    cr_assert(kn_builder_status(b) == KN_OK, "%s: the forward failed: %s", what, kn_builder_error(b));
    kn_type ot = *kn_val_type(b, out);
    kn_tensor *r = l2_rand(ot.dtype, ot.ndim, ot.shape, -1.0, 1.0, seed);
    kn_val loss = kn_sum(b, kn_mul(b, out, kn_input(b, "r", r)), 0, NULL, false);
    cr_assert(kn_builder_status(b) == KN_OK, "%s: the loss failed: %s", what, kn_builder_error(b));
    kn_status st = kn_backward(b, loss, n, x, g);
    cr_assert(st == KN_OK, "%s: kn_backward returned %s: %s", what, kn_status_name(st), kn_builder_error(b));
    for (int i = 0; i < n; i++) {
        const kn_type *gt = kn_val_type(b, g[i]), *xt = kn_val_type(b, x[i]);
        cr_assert(gt && kn_type_equal(gt, xt), "%s: the gradient of x%d does not have x%d's type", what, i, i);
        const kn_tensor *gv = kn_val_tensor(b, g[i]);
        cr_assert(gv, "%s: no tensor for the gradient of x%d", what, i);
        for (int64_t j = 0; j < kn_tensor_numel(xs[i]); j++) {
            double x0 = l2_at(xs[i], j), h = 1e-6;
            kn_dtype_store(xs[i]->dtype, kn_tensor_data(xs[i]), j, x0 + h);
            double lp = l2_loss(fn, ctx, n, xs, r);
            kn_dtype_store(xs[i]->dtype, kn_tensor_data(xs[i]), j, x0 - h);
            double lm = l2_loss(fn, ctx, n, xs, r);
            kn_dtype_store(xs[i]->dtype, kn_tensor_data(xs[i]), j, x0);
            double num = (lp - lm) / (2 * h), got = l2_at(gv, j);
            cr_assert(fabs(got - num) <= 1e-6 + 1e-5 * fabs(num),
                      "%s: d loss / d x%d[%lld] = %.10g, finite differences give %.10g", what, i, (long long)j, got,
                      num);
        }
    }
    kn_tensor_free(r);
    kn_builder_free(b);
}

#endif /* KILN_LAB02_CHECK_H */
