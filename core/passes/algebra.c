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

/* BEGIN SOLUTION */
/* x: any value whose type is the root's; bound to slot 1. */
static const kn_pat x_same = {.op = KN_PAT_ANY, .bind = 1, .flags = KN_PAT_ROOT_TYPE};
static const kn_pat zero = {.op = KN_OP_FULL, .flags = KN_PAT_VALUE, .value = 0.0};
static const kn_pat one = {.op = KN_OP_FULL, .flags = KN_PAT_VALUE, .value = 1.0};

static const kn_pat add_zero = {.op = KN_OP_ADD, .in = {&x_same, &zero}, .flags = KN_PAT_COMMUTE};
static const kn_pat sub_zero = {.op = KN_OP_SUB, .in = {&x_same, &zero}};
static const kn_pat mul_one = {.op = KN_OP_MUL, .in = {&x_same, &one}, .flags = KN_PAT_COMMUTE};
static const kn_pat div_one = {.op = KN_OP_DIV, .in = {&x_same, &one}};
static const kn_pat neg_x = {.op = KN_OP_NEG, .in = {&x_same}};
static const kn_pat neg_neg = {.op = KN_OP_NEG, .in = {&neg_x}};
static const kn_pat cast_noop = {.op = KN_OP_CAST, .in = {&x_same}};
static const kn_pat x_any = {.op = KN_PAT_ANY, .bind = 1};
static const kn_pat inner_cast = {.op = KN_OP_CAST, .bind = 2, .in = {&x_any}};
static const kn_pat cast_cast = {.op = KN_OP_CAST, .in = {&inner_cast}};

/* Does dtype `to` hold every value of dtype `from` exactly? */
static bool holds_exactly(kn_dtype from, kn_dtype to) {
    if (from == to || from == KN_DT_BOOL) return true;
    switch (from) {
    case KN_DT_U8: return to != KN_DT_BOOL;
    case KN_DT_I32: return to == KN_DT_I64 || to == KN_DT_F64;
    case KN_DT_F16:
    case KN_DT_BF16: return to == KN_DT_F32 || to == KN_DT_F64;
    case KN_DT_F32: return to == KN_DT_F64;
    case KN_DT_F64:
    case KN_DT_I64:
    case KN_DT_BOOL:
    case KN_DT_COUNT: break;
    }
    return false;
}

static int32_t use_x(kn_rewriter *rw, const kn_match *m) {
    (void)rw;
    return m->bind[1];
}

static int32_t merge_casts(kn_rewriter *rw, const kn_match *m) {
    kn_dtype from = kn_rw_node(rw, m->bind[1])->type.dtype;
    kn_dtype mid = kn_rw_node(rw, m->bind[2])->type.dtype;
    kn_dtype to = m->root->type.dtype;
    if (!holds_exactly(from, mid)) return -1;
    if (to == from) return m->bind[1];
    return kn_rw_emit(rw, KN_OP_CAST, 1, &m->bind[1], &m->root->attrs);
}

static const kn_rule rules[] = {
    {"add_zero", &add_zero, use_x},
    {"sub_zero", &sub_zero, use_x},
    {"mul_one", &mul_one, use_x},
    {"div_one", &div_one, use_x},
    {"neg_neg", &neg_neg, use_x},
    {"cast_noop", &cast_noop, use_x},
    {"cast_cast", &cast_cast, merge_casts},
};
/* SKELETON
// Your patterns (static const kn_pat), replace functions and the static table of kn_rule go here.
END SOLUTION */

kn_status kn_algebra_rules(const kn_rule **out, int *n) {
    if (!out || !n) return kn_error(KN_ERR_ARG, "kn_algebra_rules: NULL argument");
    /* BEGIN SOLUTION */
    *out = rules;
    *n = (int)(sizeof rules / sizeof rules[0]);
    return KN_OK;
    /* SKELETON
    return kn_not_implemented("lab04", "kn_algebra_rules: patterns and replacements for x*1, x+0, neg neg, casts");
    END SOLUTION */
}
