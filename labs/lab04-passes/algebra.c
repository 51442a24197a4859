/* algebra.c — lab 04 unit: algebraic identities as pattern-rewriter rules
 * (kn_algebra_rules, contract in kiln/passes.h; the rewriter is described there).
 *
 * Each rule is data: a pattern saying what to look for, and a small replace function
 * saying what to put instead. The rewriter does the walking, the matching and the
 * bookkeeping, so a rule is a few lines, and the same machinery will later carry the
 * fusion and epilogue rewrites.
 *
 * The identities, each exact in floating point (the result is the same number, up to
 * the sign of a zero):
 *   x * 1, 1 * x, x / 1, x + 0, 0 + x, x - 0  ->  x
 *       only when the result has x's type: x [3] * ones [2,3] is [2,3], not x
 *       (KN_PAT_ROOT_TYPE on x says so);
 *   neg(neg x)  ->  x;
 *   cast(x, dt) with dt x's own dtype  ->  x;
 *   cast(cast(x, t1), t2)  ->  cast(x, t2), or x when t2 is x's dtype, but only when t1
 *       holds every value of x's dtype exactly (f32 -> f64 -> f32 is x; f64 -> f32 -> f64
 *       rounds, and must stay). Casts convert through double, so once the first cast is
 *       exact the second sees x's own value.
 * What is NOT an identity: x * 0 -> 0 (inf * 0 is NaN), x - x -> 0 (NaN - NaN is NaN),
 * x / x -> 1. */
#include "kiln/passes.h"

// Your patterns (static const kn_pat), replace functions and the static table of kn_rule go here.

kn_status kn_algebra_rules(const kn_rule **out, int *n) {
    if (!out || !n) return kn_error(KN_ERR_ARG, "kn_algebra_rules: NULL argument");
    return kn_not_implemented("lab04", "kn_algebra_rules: patterns and replacements for x*1, x+0, neg neg, casts");
}
