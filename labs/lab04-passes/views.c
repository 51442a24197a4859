/* views.c — lab 04 unit: canonical view chains as pattern-rewriter rules (kn_view_rules,
 * contract in kiln/passes.h; the rewriter is described there).
 *
 * Views (reshape, permute, broadcast_to, slice) move no arithmetic, but most of them
 * cost a copy when a kernel runs them, and chains of them hide what a value really is:
 * autograd reshapes a reshaped gradient, transposes a transpose back. Canonical form:
 *   - a view that changes nothing is its operand: a reshape, broadcast_to or slice whose
 *     result has the operand's type (for a slice that can only mean "all of it"), and a
 *     permute by the identity;
 *   - reshape(reshape x) is one reshape of x to the final shape (or x itself);
 *   - permute(permute(x, p), q) is one permute of x by r[i] = p[q[i]] (the second
 *     permute's axis i is the first's axis q[i], which is x's axis p[q[i]]), or x when r
 *     is the identity: a permutation and its inverse cancel;
 *   - broadcast_to(broadcast_to x) is one broadcast_to of x (broadcasting composes);
 *   - broadcast_to of a `full` (a broadcast scalar) is a `full` of the new shape;
 *   - a permute that only moves axes of size 1 is a reshape (free: no data moves);
 *   - an operand of add/sub/mul/div that is an explicit broadcast_to(y) may be y itself,
 *     since these ops broadcast their operands anyway, provided the result's type stays
 *     the same (kn_rw_type_of tells). */
#include <string.h>

#include "kiln/passes.h"

// Your patterns (static const kn_pat), replace functions and the static table of kn_rule go here.

kn_status kn_view_rules(const kn_rule **out, int *n) {
    if (!out || !n) return kn_error(KN_ERR_ARG, "kn_view_rules: NULL argument");
    return kn_not_implemented("lab04", "kn_view_rules: patterns and replacements for view chains");
}
