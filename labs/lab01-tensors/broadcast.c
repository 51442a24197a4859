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
    (void)na; (void)a; (void)nb; (void)b; (void)nout; (void)out;
    return kn_not_implemented("lab01", "kn_shape_broadcast: align the shapes from the right; sizes must match "
                                       "or one must be 1");
}

kn_status kn_tensor_expand(kn_tensor **out, const kn_tensor *x, int ndim, const int64_t *shape) {
    (void)out; (void)x; (void)ndim; (void)shape;
    return kn_not_implemented("lab01", "kn_tensor_expand: alias x and give new or size-1 axes stride 0");
}
