/* reduce.c — lab 01 unit: reductions over any set of axes.
 *
 * kn_tensor_reduce(&out, op, x, naxes, axes, keepdim) combines the elements of x along the
 * listed axes with sum, mean, max, min or prod. naxes == 0 reduces over every axis.
 *     x f32[2,3,4], axes {1}, keepdim=false -> f32[2,4]   (out[i,k] = op over j of x[i,j,k])
 *     x f32[2,3,4], axes {0,-1}, keepdim=true -> f32[1,3,1]
 * Rules (the tests check them):
 *   - axes may be negative (-1 is the last); an axis out of range or listed twice is
 *     KN_ERR_AXIS (use kn_axis_normalize); naxes outside [0, ndim] or axes == NULL with
 *     naxes > 0 is KN_ERR_ARG; op outside kn_reduce_op is KN_ERR_ARG; a NULL out or x is
 *     KN_ERR_ARG and a tensor not on the CPU is KN_ERR_DEVICE;
 *   - sum/mean/prod accumulate in double whatever the dtype; the result is stored in x's
 *     dtype, except the mean of a non-float dtype, which is f32;
 *   - the sum of nothing is 0, the product of nothing 1, the mean of nothing NaN; max/min
 *     of nothing is KN_ERR_SHAPE; max/min propagate NaN.
 *
 * A way to do it: allocate the output (contiguous) and an array of doubles, one
 * accumulator per output element. Give each axis of x an "output stride": the output's
 * stride for a kept axis, 0 for a reduced one. Then walk every element of x (kn_index_next
 * over the outer axes, a loop over the last axis) and combine it into the accumulator at
 * sum(index[d] * output_stride[d]). The output with keepdim and without it has the same
 * elements in the same order, so one walk serves both. */
#include <math.h>
#include <string.h>

#include "kiln/tensor.h"


kn_status kn_tensor_reduce(kn_tensor **out, kn_reduce_op op, const kn_tensor *x, int naxes, const int *axes,
                           bool keepdim) {
    (void)out; (void)op; (void)x; (void)naxes; (void)axes; (void)keepdim;
    return kn_not_implemented("lab01", "kn_tensor_reduce: one accumulator per output element; walk x and "
                                       "combine each element into the accumulator its kept axes select");
}
