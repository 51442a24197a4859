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
 * starts with the case's label (`what`), failures of kn_backward included.
 *
 * Every value a test checks that your units produced passes through kn_out
 * (tests/harness/kn_out.h) first: kn_backward's status and gradients, kn_sum_to's value,
 * kn_autograd's joint graph (by the macros of their names at the end of this file), and
 * what the tests read of the builder after your code ran: l2_tensor, l2_type, l2_nnodes,
 * l2_status. Under `make test-lab02` that does nothing; under the grader your run only
 * writes the values, and the staff's build of the same test (no code of yours in it)
 * checks them. The forward values (the finite differences' losses) stay the checker's own. */
#ifndef KILN_LAB02_CHECK_H
#define KILN_LAB02_CHECK_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kn_out_program.h"
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

/* ---------------------------------------------------------------- the builder after your code, through kn_out */

/* The tensor of v (eager mode), NULL when none: in the checker a tensor made from your
 * run's type and data (the checker's builder is not looked at; the tensor lives until the
 * test's process ends). */
static inline const kn_tensor *l2_tensor(const kn_builder *b, kn_val v) {
    const kn_tensor *t = kn_out_checking() ? NULL : kn_val_tensor(b, v);
    int32_t has = t != NULL;
    kn_out("a value has a tensor", &has, sizeof has);
    if (!has) return NULL;
    kn_type ty;
    memset(&ty, 0, sizeof ty);
    if (t) {
        ty.dtype = t->dtype, ty.ndim = t->ndim;
        memcpy(ty.shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    }
    kn_out("the tensor's type", &ty, sizeof ty);
    if (t) {
        kn_out("the tensor's values", kn_tensor_data(t), (size_t)kn_tensor_numel(t) * kn_dtype_size(t->dtype));
        return t;
    }
    int64_t n = 1;
    cr_assert(ty.ndim >= 0 && ty.ndim <= KN_MAX_DIMS && kn_dtype_size(ty.dtype) > 0, "your run's tensor has a bad type");
    for (int d = 0; d < ty.ndim; d++) {
        cr_assert(ty.shape[d] >= 0 && ty.shape[d] <= (1 << 24), "your run's tensor has a bad shape");
        n *= ty.shape[d];
    }
    cr_assert(n <= (1 << 24), "your run's tensor has %lld elements", (long long)n);
    kn_tensor *c = NULL;
    KN_ASSERT_OK(kn_tensor_zeros(&c, ty.dtype, ty.ndim, ty.shape));
    kn_out("the tensor's values", kn_tensor_data(c), (size_t)n * kn_dtype_size(ty.dtype));
    return c;
}

/* The type of v, NULL when none (one of 8 buffers used in turn). */
static inline const kn_type *l2_type(const kn_builder *b, kn_val v) {
    static kn_type ring[8];
    static int next;
    const kn_type *t = kn_out_checking() ? NULL : kn_val_type(b, v);
    int32_t has = t != NULL;
    kn_out("a value has a type", &has, sizeof has);
    if (!has) return NULL;
    kn_type *r = &ring[next++ % 8];
    if (t) *r = *t;
    kn_out("the value's type", r, sizeof *r);
    return r;
}

/* The builder's node count and status. */
static inline int l2_nnodes(const kn_builder *b) {
    return (int)kn_out_i64("the builder's node count", kn_builder_graph(b)->nnodes);
}
static inline kn_status l2_status(const kn_builder *b) { return kn_out_status("the builder's status", kn_builder_status(b)); }

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

/* ---------------------------------------------------------------- your units, through kn_out */

static inline kn_status l2_backward(kn_builder *b, kn_val loss, int n, const kn_val *wrt, kn_val *grads) {
    kn_status st = kn_out_status("kn_backward", kn_backward(b, loss, n, wrt, grads));
    if (grads && n > 0 && n <= 4096) kn_out("kn_backward's gradients", grads, (size_t)n * sizeof *grads);
    return st;
}

static inline kn_val l2_sum_to(kn_builder *b, kn_val g, kn_val x) {
    kn_val r = kn_sum_to(b, g, x);
    kn_out("kn_sum_to", &r, sizeof r);
    return r;
}

static inline kn_status l2_autograd(const kn_graph *fwd, kn_val loss, int n, const kn_val *wrt, kn_graph **joint,
                                    kn_val *grads) {
    kn_status st = kn_out_status("kn_autograd", kn_autograd(fwd, loss, n, wrt, joint, grads));
    if (joint) kn_out_graph("the joint graph", joint);
    if (grads && n > 0 && n <= 4096) kn_out("kn_autograd's gradients", grads, (size_t)n * sizeof *grads);
    return st;
}

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
    kn_status st = l2_backward(b, loss, n, x, g);
    cr_assert(st == KN_OK, "%s: kn_backward returned %s: %s", what, kn_status_name(st), kn_builder_error(b));
    for (int i = 0; i < n; i++) {
        const kn_type *gt = l2_type(b, g[i]), *xt = kn_val_type(b, x[i]);
        cr_assert(gt && kn_type_equal(gt, xt), "%s: the gradient of x%d does not have x%d's type", what, i, i);
        const kn_tensor *gv = l2_tensor(b, g[i]);
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

#define kn_backward(...) l2_backward(__VA_ARGS__)
#define kn_sum_to(...) l2_sum_to(__VA_ARGS__)
#define kn_autograd(...) l2_autograd(__VA_ARGS__)

#endif /* KILN_LAB02_CHECK_H */
