/* backward.c — lab 02 unit: the reverse pass (kn_backward) and kn_sum_to.
 *
 * kn_backward(b, loss, n, wrt, grads) appends to the builder the nodes that compute
 * d loss / d wrt[i] for each i and returns their values in grads[i]. The forward graph is
 * the builder's graph so far; node i defines value %i and its operands are earlier values,
 * so the node order is already a topological order, and walking the ids DOWN from the loss
 * visits every node after all the nodes that use it. That is the whole reverse pass:
 *
 *   1. which values matter: dep[i] is true when %i is one of wrt or has an operand with
 *      dep set (one forward sweep over ids 0..loss). Values with dep false (the data, the
 *      token ids, a constant) never get a gradient and their rules are never asked;
 *   2. seed: grad[loss] = a `full` of 1.0 of the loss's type (d loss / d loss = 1);
 *   3. walk i = loss, loss-1, ..., 0: when %i has a gradient and dep[i], and its op is not
 *      a source (kn_op_get(op)->category != KN_CAT_SOURCE), ask its backward rule
 *      (kn_backward_checked, kiln/autograd.h) for the operand gradients: dx[k] =
 *      KN_VAL_WANT for the operands with dep set, KN_VAL_NONE for the others. A rule that leaves a wanted
 *      operand at KN_VAL_WANT is a bug in the rule: fail with KN_ERR_INTERNAL naming the
 *      op. Every answered dx[k] is added into grad[operand k]: the first contribution is
 *      stored, later ones are summed with kn_add (a value used twice, like x in x*x,
 *      gets both contributions);
 *   4. grads[i] = grad[wrt[i]], or a `full` of 0.0 of wrt[i]'s type when the loss does not
 *      depend on it.
 * Errors are the builder's (sticky): check kn_builder_status(b) in the loop and stop at
 * the first failure; free what you allocated on every path.
 *
 * kn_sum_to(b, g, x): see kiln/autograd.h. When x of shape [3,1] was broadcast against
 * [2,3,4], the gradient arriving has shape [2,3,4]: sum over axis 0 (x lacks it) and axis
 * 2 (x has 1 there), keepdim, then reshape [1,3,1] to [3,1]. */
#include <string.h>

#include "ir/ir_impl.h"
#include "kiln/autograd.h"

kn_val kn_sum_to(kn_builder *b, kn_val g, kn_val x) {
    /* The arguments are checked for you: g's type must be what x's broadcasts to (a
     * transposed or wrong-shaped gradient is refused here, naming the rule that called). */
    if (!kn_sum_to_check(b, g, x)) return KN_VAL_NONE;
    (void)g; (void)x;
    kn_builder_fail(b, kn_not_implemented("lab02", "kn_sum_to: sum the broadcast axes of g back to x's shape"),
                    "%s", kn_last_error());
    return KN_VAL_NONE;
}

kn_status kn_backward(kn_builder *b, kn_val loss, int n, const kn_val *wrt, kn_val *grads) {
    /* The arguments are checked for you. */
    if (!b) return kn_error(KN_ERR_ARG, "kn_backward: builder is NULL");
    if (kn_builder_status(b) != KN_OK) return kn_error(kn_builder_status(b), "%s", kn_builder_error(b));
    const kn_type *lt = kn_val_type(b, loss);
    if (!lt) {
        kn_builder_fail(b, KN_ERR_ARG, "kn_backward: loss is not a value of this builder");
        return kn_builder_status(b);
    }
    if (kn_type_numel(lt) != 1 || !kn_dtype_is_float(lt->dtype)) {
        char tb[96];
        kn_builder_fail(b, KN_ERR_SHAPE, "kn_backward: loss %s is not a one-element float value",
                        kn_type_str(lt, tb, sizeof tb));
        return kn_builder_status(b);
    }
    if (n < 0 || (n > 0 && (!wrt || !grads))) {
        kn_builder_fail(b, KN_ERR_ARG, "kn_backward: bad list of %d values", n);
        return kn_builder_status(b);
    }
    for (int i = 0; i < n; i++) {
        const kn_type *t = kn_val_type(b, wrt[i]);
        if (!t || !kn_dtype_is_float(t->dtype)) {
            kn_builder_fail(b, KN_ERR_ARG, "kn_backward: wrt[%d] (%%%d) is not a float value of this builder", i,
                            (int)wrt[i].id);
            return kn_builder_status(b);
        }
    }
    kn_builder_fail(b, kn_not_implemented("lab02", "kn_backward: mark the values the loss depends on, seed "
                                                   "d loss/d loss = 1, walk the ids down calling each rule"),
                    "%s", kn_last_error());
    return kn_builder_status(b);
}
