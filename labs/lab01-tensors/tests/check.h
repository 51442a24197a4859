/* check.h — small helpers shared by lab 01's public tests.
 *
 * They read tensors the way the lesson explains, straight from the definition
 *     element(i_0, ..., i_{n-1}) = storage[offset + i_0*strides[0] + ... + i_{n-1}*strides[n-1]]
 * and never through the functions you are writing, so a test can only pass when your code
 * is right. Every check says what it expected and what came back, with shapes.
 *
 * They stop the test (cr_assert) on the first difference; a status is always checked with
 * KN_ASSERT_OK before an output is looked at.
 *
 * Every value a test checks that your units produced passes through kn_out
 * (tests/harness/kn_out.h) first: the tests call your five functions, and the framework's
 * ops built on them (binary, unary, where, matmul, cast, contiguous), through the wrappers
 * at the end of this file, which pass on the status (and its message), the shape or index
 * written, and a tensor result as its view (dtype, shape, strides, offset, which operand's
 * storage it shares) with its storage's bytes; kn_tensor_copy_into passes on both storages.
 * Under `make test-lab01` that does nothing; under the grader your run only writes the
 * values, and the staff's build of the same test (no code of yours in it) checks them. */
#ifndef KILN_LAB01_TESTS_CHECK_H
#define KILN_LAB01_TESTS_CHECK_H

#include <stdio.h>
#include <string.h>

#include "kn_out.h"
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

/* ---------------------------------------------------------------- your units, through kn_out */

/* The storage under t (NULL, storage-less or data-less: nothing), its bytes: the checker's
 * copy takes your run's bytes (the test built the same tensor, so the sizes agree). */
static inline void lab01_out_storage(const char *what, const kn_tensor *t) {
    if (t && t->storage && t->storage->data) kn_out(what, t->storage->data, t->storage->nbytes);
}

typedef struct lab01_view {
    int32_t state; /* 0: *out left alone, 1: set to NULL, 2: set to a tensor */
    int32_t dtype, ndim, share; /* share: 1 + the operand whose storage it is a view of, 0: new */
    int64_t shape[KN_MAX_DIMS], strides[KN_MAX_DIMS], offset, nbytes;
} lab01_view;

/* What a call that returned st did to *out (before: its value before the call) through
 * kn_out: a tensor (its view and its storage's bytes; always after KN_OK), left alone, or
 * NULL. In the checker *out becomes your
 * run's tensor: a view of the same operand's storage when yours shared one (that storage
 * then takes your run's bytes), else a new storage. A view that reads outside its storage
 * fails the test. */
static inline void lab01_out_tensor(const char *what, kn_status st, kn_tensor **out, kn_tensor *before, int nin,
                                    const kn_tensor *const *in) {
    lab01_view v;
    memset(&v, 0, sizeof v);
    const kn_tensor *t = kn_out_checking() ? NULL : *out;
    /* not "t != before": a test may pass a pointer it freed, which malloc hands out again */
    if (!kn_out_checking()) v.state = st == KN_OK && t ? 2 : t == before ? 0 : t == NULL ? 1 : 2;
    if (v.state != 2) t = NULL;
    if (t) {
        v.dtype = (int32_t)t->dtype, v.ndim = t->ndim, v.offset = t->offset;
        v.nbytes = t->storage ? (int64_t)t->storage->nbytes : -1;
        for (int k = 0; k < t->ndim && k < KN_MAX_DIMS; k++) v.shape[k] = t->shape[k], v.strides[k] = t->strides[k];
        for (int i = 0; i < nin && !v.share; i++)
            if (in[i] && in[i]->storage == t->storage) v.share = i + 1;
    }
    kn_out(what, &v, sizeof v);
    if (v.state != 2) {
        if (kn_out_checking()) *out = v.state ? NULL : before;
        return;
    }
    if (t) {
        cr_assert(t->storage && t->storage->data, "%s: the result has no storage", what);
        kn_out(what, t->storage->data, t->storage->nbytes);
        return;
    }
    /* the checker: your run's tensor, checked as hostile input first */
    cr_assert(v.ndim >= 0 && v.ndim <= KN_MAX_DIMS && v.dtype >= 0 && v.dtype < KN_DT_COUNT &&
                  v.share >= 0 && v.share <= nin && v.nbytes >= 0 && v.nbytes <= ((int64_t)1 << 28) &&
                  v.offset >= 0 && v.offset <= ((int64_t)1 << 40),
              "%s: your run's result is not a valid tensor (ndim %d, dtype %d, %lld bytes)", what, (int)v.ndim,
              (int)v.dtype, (long long)v.nbytes);
    int64_t lo = v.offset, hi = v.offset, esz = (int64_t)kn_dtype_size((kn_dtype)v.dtype);
    bool empty = false;
    for (int k = 0; k < v.ndim; k++) {
        cr_assert(v.shape[k] >= 0 && v.shape[k] <= (1 << 24) && v.strides[k] >= -((int64_t)1 << 32) &&
                      v.strides[k] <= ((int64_t)1 << 32),
                  "%s: your run's result has axis %d of size %lld, stride %lld", what, k, (long long)v.shape[k],
                  (long long)v.strides[k]);
        if (v.shape[k] == 0) empty = true;
        else if (v.strides[k] < 0) lo += (v.shape[k] - 1) * v.strides[k];
        else hi += (v.shape[k] - 1) * v.strides[k];
    }
    cr_assert(empty || (lo >= 0 && (hi + 1) * esz <= v.nbytes),
              "%s: your run's result reads elements %lld..%lld of a storage of %lld bytes", what, (long long)lo,
              (long long)hi, (long long)v.nbytes);
    kn_tensor *r = NULL;
    if (v.share) {
        KN_ASSERT_OK(kn_tensor_alias(&r, in[v.share - 1]));
        cr_assert((int64_t)r->storage->nbytes == v.nbytes, "%s: your run's result views operand %d's storage of "
                  "%lld bytes, here it has %zu", what, (int)v.share, (long long)v.nbytes, r->storage->nbytes);
    } else {
        int64_t n = v.nbytes;
        KN_ASSERT_OK(kn_tensor_zeros(&r, KN_DT_U8, 1, &n));
    }
    kn_out(what, r->storage->data, (size_t)v.nbytes);
    r->dtype = (kn_dtype)v.dtype, r->ndim = v.ndim, r->offset = v.offset;
    for (int k = 0; k < KN_MAX_DIMS; k++) r->shape[k] = v.shape[k], r->strides[k] = v.strides[k];
    *out = r;
}

/* A status (and its message), then what the call did to *out. */
static inline kn_status lab01_out_result(const char *what, kn_status st, kn_tensor **out, kn_tensor *before, int nin,
                                         const kn_tensor *const *in) {
    st = kn_out_status(what, st);
    if (out) lab01_out_tensor(what, st, out, before, nin, in);
    return st;
}

/* Each wrapper runs the function only in your run (the checker takes your run's values);
 * (f)(...) calls the function itself, not the macro of its name below. */
#define LAB01_OUT_CALL(call) (kn_out_checking() ? KN_OK : (call))
#define LAB01_BEFORE(out) ((out) ? *(out) : NULL)

/* out: room for KN_MAX_DIMS sizes (all of them pass, the ones past *nout too). */
static inline kn_status lab01_shape_broadcast(int na, const int64_t *a, int nb, const int64_t *b, int *nout,
                                              int64_t *out) {
    kn_status st = kn_out_status("kn_shape_broadcast", LAB01_OUT_CALL((kn_shape_broadcast)(na, a, nb, b, nout, out)));
    if (nout) kn_out("kn_shape_broadcast's nout", nout, sizeof *nout);
    if (out) kn_out("kn_shape_broadcast's out", out, KN_MAX_DIMS * sizeof *out);
    return st;
}

static inline kn_status lab01_expand(kn_tensor **out, const kn_tensor *x, int ndim, const int64_t *shape) {
    kn_tensor *before = LAB01_BEFORE(out);
    kn_status st = LAB01_OUT_CALL((kn_tensor_expand)(out, x, ndim, shape));
    return lab01_out_result("kn_tensor_expand", st, out, before, 1, &x);
}

/* The result, whether an error message was left (and its text), and index[0..ndim). */
static inline bool lab01_index_next(int ndim, const int64_t *shape, int64_t *index) {
    int64_t r[2 + KN_MAX_DIMS] = {0};
    int nd = index && ndim > 0 && ndim <= KN_MAX_DIMS ? ndim : 0;
    if (!kn_out_checking()) {
        r[0] = (kn_index_next)(ndim, shape, index);
        r[1] = kn_last_error()[0] != '\0';
        if (nd) memcpy(r + 2, index, (size_t)nd * sizeof *index);
    }
    kn_out("kn_index_next", r, (size_t)(2 + nd) * sizeof *r);
    if (r[1]) {
        char m[512];
        snprintf(m, sizeof m, "%s", kn_out_checking() ? "" : kn_last_error());
        kn_out_text("kn_index_next's error", m, sizeof m);
        if (kn_out_checking()) kn_error(KN_ERR_ARG, "%s", m);
    } else if (kn_out_checking()) {
        kn_clear_error();
    }
    if (kn_out_checking() && nd) memcpy(index, r + 2, (size_t)nd * sizeof *index);
    return r[0] != 0;
}

/* Both storages after the copy (the destination's as a whole: what lies outside the view
 * must be left alone; the source's: it must not change). */
static inline kn_status lab01_copy_into(kn_tensor *dst, const kn_tensor *src) {
    kn_status st = kn_out_status("kn_tensor_copy_into", LAB01_OUT_CALL((kn_tensor_copy_into)(dst, src)));
    lab01_out_storage("the destination's storage", dst);
    lab01_out_storage("the source's storage", src);
    return st;
}

static inline kn_status lab01_reduce(kn_tensor **out, kn_reduce_op op, const kn_tensor *x, int naxes, const int *axes,
                                     bool keepdim) {
    kn_tensor *before = LAB01_BEFORE(out);
    kn_status st = LAB01_OUT_CALL((kn_tensor_reduce)(out, op, x, naxes, axes, keepdim));
    return lab01_out_result("kn_tensor_reduce", st, out, before, 1, &x);
}

/* The framework's ops that run your units. */
static inline kn_status lab01_binary(kn_tensor **out, kn_binary_op op, const kn_tensor *a, const kn_tensor *b) {
    kn_tensor *before = LAB01_BEFORE(out);
    kn_status st = LAB01_OUT_CALL((kn_tensor_binary)(out, op, a, b));
    return lab01_out_result("kn_tensor_binary", st, out, before, 2, (const kn_tensor *const[]){a, b});
}
static inline kn_status lab01_unary(kn_tensor **out, kn_unary_op op, const kn_tensor *x) {
    kn_tensor *before = LAB01_BEFORE(out);
    kn_status st = LAB01_OUT_CALL((kn_tensor_unary)(out, op, x));
    return lab01_out_result("kn_tensor_unary", st, out, before, 1, &x);
}
static inline kn_status lab01_where(kn_tensor **out, const kn_tensor *c, const kn_tensor *a, const kn_tensor *b) {
    kn_tensor *before = LAB01_BEFORE(out);
    kn_status st = LAB01_OUT_CALL((kn_tensor_where)(out, c, a, b));
    return lab01_out_result("kn_tensor_where", st, out, before, 3, (const kn_tensor *const[]){c, a, b});
}
static inline kn_status lab01_matmul(kn_tensor **out, const kn_tensor *a, const kn_tensor *b) {
    kn_tensor *before = LAB01_BEFORE(out);
    kn_status st = LAB01_OUT_CALL((kn_tensor_matmul)(out, a, b));
    return lab01_out_result("kn_tensor_matmul", st, out, before, 2, (const kn_tensor *const[]){a, b});
}
static inline kn_status lab01_cast(kn_tensor **out, const kn_tensor *x, kn_dtype dt) {
    kn_tensor *before = LAB01_BEFORE(out);
    kn_status st = LAB01_OUT_CALL((kn_tensor_cast)(out, x, dt));
    return lab01_out_result("kn_tensor_cast", st, out, before, 1, &x);
}
static inline kn_status lab01_contiguous(kn_tensor **out, const kn_tensor *x) {
    kn_tensor *before = LAB01_BEFORE(out);
    kn_status st = LAB01_OUT_CALL((kn_tensor_contiguous)(out, x));
    return lab01_out_result("kn_tensor_contiguous", st, out, before, 1, &x);
}

#define kn_shape_broadcast(...) lab01_shape_broadcast(__VA_ARGS__)
#define kn_tensor_expand(...) lab01_expand(__VA_ARGS__)
#define kn_index_next(...) lab01_index_next(__VA_ARGS__)
#define kn_tensor_copy_into(...) lab01_copy_into(__VA_ARGS__)
#define kn_tensor_reduce(...) lab01_reduce(__VA_ARGS__)
#define kn_tensor_binary(...) lab01_binary(__VA_ARGS__)
#define kn_tensor_unary(...) lab01_unary(__VA_ARGS__)
#define kn_tensor_where(...) lab01_where(__VA_ARGS__)
#define kn_tensor_matmul(...) lab01_matmul(__VA_ARGS__)
#define kn_tensor_cast(...) lab01_cast(__VA_ARGS__)
#define kn_tensor_contiguous(...) lab01_contiguous(__VA_ARGS__)

#endif /* KILN_LAB01_TESTS_CHECK_H */
