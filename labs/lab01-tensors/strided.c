/* strided.c — lab 01 unit: walking strided memory.
 *
 * A tensor's element at multi-index (i0, i1, ..., i{n-1}) lives at
 *     storage->data + (offset + i0*strides[0] + ... + i{n-1}*strides[n-1]) * element_size
 * Views (transpose, slice, expand) only change shape, strides and offset, so any code that
 * reads tensors must follow the strides instead of assuming row-major order.
 *
 * 1. kn_index_next(ndim, shape, index): the odometer. Add 1 to the last entry of index;
 *    when an entry reaches its size, set it to 0 and carry into the entry on its left.
 *    When the carry falls off the left end, every index has been visited: leave index all
 *    zeros and return false. Otherwise return true. With ndim 0 there is exactly one index
 *    (the empty one), so the first call returns false. Every CPU kernel in kiln walks its
 *    operands with this function (core/tensor/tensor.c, knt_iter).
 *
 * 2. kn_tensor_copy_into(dst, src): copy every element of src into the element of dst at
 *    the same index, whatever the strides of either side, converting dtypes with
 *    kn_dtype_load / kn_dtype_store. Shapes must be equal (KN_ERR_SHAPE naming both);
 *    NULL tensors are KN_ERR_ARG; tensors not on the CPU are KN_ERR_DEVICE. dst and src
 *    must not overlap. clone, cast and contiguous are built on it (core/tensor/copy.c).
 *    It is on the hot path (every transpose that feeds a matmul is made contiguous with it),
 *    so after the general loop, give it fast paths: one memcpy when both sides are
 *    contiguous with the same dtype, and a typed inner loop along the last axis. Count the
 *    rows you visit: if kn_index_next stops early (say, it is still the skeleton), return
 *    an error instead of a half-copied tensor. */
#include <string.h>

#include "kiln/tensor.h"

bool kn_index_next(int ndim, const int64_t *shape, int64_t *index) {
    (void)ndim; (void)shape; (void)index;
    kn_not_implemented("lab01", "kn_index_next: add 1 to the last index and carry to the left like an odometer");
    return false;
}


kn_status kn_tensor_copy_into(kn_tensor *dst, const kn_tensor *src) {
    (void)dst; (void)src;
    return kn_not_implemented("lab01", "kn_tensor_copy_into: walk every index with kn_index_next and copy "
                                       "src's element to dst's, following both tensors' strides");
}
