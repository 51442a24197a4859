/* broadcast.c — lab 01 unit: NumPy broadcasting.
 *
 * What you write here powers every elementwise operation in kiln: kn_tensor_binary
 * (add, mul, ...), kn_tensor_where and the batch dimensions of kn_tensor_matmul first call
 * kn_shape_broadcast to find the output shape, then kn_tensor_expand to view each operand
 * at that shape, and finally walk all operands with the same index.
 *
 * 1. kn_shape_broadcast(na, a, nb, b, &nout, out): align the two shapes on the right.
 *    Walking from the last axis backwards, two sizes are compatible when they are equal or
 *    one of them is 1; the output size is the other one. A missing axis (the shorter shape
 *    ran out) behaves like size 1. The output has max(na, nb) axes.
 *        [8,1,6,1] with [7,1,5] -> [8,7,6,5]        [3] with [4] -> KN_ERR_SHAPE
 *    Note that [0] with [1] gives [0]: an axis of size 0 is fine, it just has no elements.
 *
 * 2. kn_tensor_expand(&out, x, ndim, shape): a VIEW of x at a larger shape, without
 *    copying a byte. The trick is a stride of 0: stepping along such an axis does not move
 *    in memory, so every index along it reads the same element. New leading axes and axes
 *    where x has size 1 (and the target does not) get stride 0; the other axes keep x's
 *    stride. Start from kn_tensor_alias(&t, x) (a new header sharing x's storage) and
 *    rewrite t's ndim, shape and strides; the offset stays.
 *
 * Errors (the tests check the exact codes, and that the message names the function and
 * the shapes): NULL pointers and ndim outside [0, KN_MAX_DIMS] are KN_ERR_ARG; a negative
 * size or shapes that do not broadcast are KN_ERR_SHAPE. Write the outputs only on success. */
#include "kiln/tensor.h"

kn_status kn_shape_broadcast(int na, const int64_t *a, int nb, const int64_t *b, int *nout, int64_t *out) {
    /* BEGIN SOLUTION */
    const char *fn = "kn_shape_broadcast";
    if (na < 0 || na > KN_MAX_DIMS || nb < 0 || nb > KN_MAX_DIMS)
        return kn_error(KN_ERR_ARG, "%s: ndims %d and %d must be in [0, %d]", fn, na, nb, KN_MAX_DIMS);
    if ((na > 0 && !a) || (nb > 0 && !b) || !nout || !out)
        return kn_error(KN_ERR_ARG, "%s: a NULL argument (a=%p, b=%p, nout=%p, out=%p)", fn, (const void *)a,
                        (const void *)b, (void *)nout, (void *)out);
    char sa[128], sb[128];
    for (int i = 0; i < na; i++)
        if (a[i] < 0)
            return kn_error(KN_ERR_SHAPE, "%s: shape %s has a negative size", fn, kn_shape_str(na, a, sa, sizeof sa));
    for (int i = 0; i < nb; i++)
        if (b[i] < 0)
            return kn_error(KN_ERR_SHAPE, "%s: shape %s has a negative size", fn, kn_shape_str(nb, b, sb, sizeof sb));
    int n = na > nb ? na : nb;
    int64_t res[KN_MAX_DIMS];
    for (int i = 0; i < n; i++) {
        /* i counts axes from the right: 0 is the last axis of both. */
        int64_t sa_i = i < na ? a[na - 1 - i] : 1;
        int64_t sb_i = i < nb ? b[nb - 1 - i] : 1;
        if (sa_i != sb_i && sa_i != 1 && sb_i != 1)
            return kn_error(KN_ERR_SHAPE, "%s: shapes %s and %s do not broadcast (size %lld vs %lld at axis %d from the end)",
                            fn, kn_shape_str(na, a, sa, sizeof sa), kn_shape_str(nb, b, sb, sizeof sb),
                            (long long)sa_i, (long long)sb_i, -1 - i);
        res[n - 1 - i] = sa_i == 1 ? sb_i : sa_i;
    }
    for (int i = 0; i < n; i++) out[i] = res[i];
    *nout = n;
    return KN_OK;
    /* SKELETON
    (void)na; (void)a; (void)nb; (void)b; (void)nout; (void)out;
    return kn_not_implemented("lab01", "kn_shape_broadcast: align the shapes from the right; sizes must match "
                                       "or one must be 1");
    END SOLUTION */
}

kn_status kn_tensor_expand(kn_tensor **out, const kn_tensor *x, int ndim, const int64_t *shape) {
    /* BEGIN SOLUTION */
    const char *fn = "kn_tensor_expand";
    if (!out || !x) return kn_error(KN_ERR_ARG, "%s: %s is NULL", fn, !out ? "out" : "x");
    if (ndim < 0 || ndim > KN_MAX_DIMS)
        return kn_error(KN_ERR_ARG, "%s: ndim %d is outside [0, %d]", fn, ndim, KN_MAX_DIMS);
    if (ndim > 0 && !shape) return kn_error(KN_ERR_ARG, "%s: shape is NULL with ndim %d", fn, ndim);
    char xs[128], ss[128];
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0)
            return kn_error(KN_ERR_SHAPE, "%s: target shape %s has a negative size", fn,
                            kn_shape_str(ndim, shape, ss, sizeof ss));
    if (x->ndim < 0 || x->ndim > KN_MAX_DIMS)
        return kn_error(KN_ERR_ARG, "%s: x has ndim %d", fn, x->ndim);
    if (ndim < x->ndim)
        return kn_error(KN_ERR_SHAPE, "%s: cannot expand %s to fewer dimensions %s", fn,
                        kn_shape_str(x->ndim, x->shape, xs, sizeof xs), kn_shape_str(ndim, shape, ss, sizeof ss));
    int64_t strides[KN_MAX_DIMS];
    int lead = ndim - x->ndim; /* new axes on the left */
    for (int i = 0; i < ndim; i++) {
        if (i < lead) {
            strides[i] = 0;
            continue;
        }
        int64_t from = x->shape[i - lead];
        if (from == shape[i]) {
            strides[i] = x->strides[i - lead];
        } else if (from == 1) {
            strides[i] = 0;
        } else {
            return kn_error(KN_ERR_SHAPE, "%s: %s does not broadcast to %s (size %lld at axis %d)", fn,
                            kn_shape_str(x->ndim, x->shape, xs, sizeof xs), kn_shape_str(ndim, shape, ss, sizeof ss),
                            (long long)from, i - lead);
        }
    }
    kn_tensor *t;
    KN_TRY(kn_tensor_alias(&t, x));
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i], t->strides[i] = strides[i];
    *out = t;
    return KN_OK;
    /* SKELETON
    (void)out; (void)x; (void)ndim; (void)shape;
    return kn_not_implemented("lab01", "kn_tensor_expand: alias x and give new or size-1 axes stride 0");
    END SOLUTION */
}
