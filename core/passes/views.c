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

/* BEGIN SOLUTION */
static const kn_pat x_same = {.op = KN_PAT_ANY, .bind = 1, .flags = KN_PAT_ROOT_TYPE};
static const kn_pat x_any = {.op = KN_PAT_ANY, .bind = 1};

static bool identity_perm(const kn_graph *g, const kn_node *n) {
    (void)g;
    for (int i = 0; i < n->attrs.nperm; i++)
        if (n->attrs.perm[i] != i) return false;
    return true;
}

/* The axes of size > 1 keep their order: the permute moves no data. */
static bool moves_only_ones(const kn_graph *g, const kn_node *n) {
    const kn_type *x = &g->nodes[n->in[0]].type;
    int64_t last = -1;
    for (int i = 0; i < n->attrs.nperm; i++) {
        int64_t a = n->attrs.perm[i];
        if (x->shape[a] == 1) continue;
        if (a < last) return false;
        last = a;
    }
    return true;
}

static bool arith(const kn_graph *g, const kn_node *n) {
    (void)g;
    return n->op == KN_OP_ADD || n->op == KN_OP_SUB || n->op == KN_OP_MUL || n->op == KN_OP_DIV;
}

static const kn_pat reshape_noop = {.op = KN_OP_RESHAPE, .in = {&x_same}};
static const kn_pat broadcast_noop = {.op = KN_OP_BROADCAST_TO, .in = {&x_same}};
static const kn_pat slice_noop = {.op = KN_OP_SLICE, .in = {&x_same}};
static const kn_pat permute_noop = {.op = KN_OP_PERMUTE, .in = {&x_any}, .where = identity_perm};
static const kn_pat inner_reshape = {.op = KN_OP_RESHAPE, .in = {&x_any}};
static const kn_pat reshape_reshape = {.op = KN_OP_RESHAPE, .in = {&inner_reshape}};
static const kn_pat inner_permute = {.op = KN_OP_PERMUTE, .bind = 2, .in = {&x_any}};
static const kn_pat permute_permute = {.op = KN_OP_PERMUTE, .in = {&inner_permute}};
static const kn_pat inner_broadcast = {.op = KN_OP_BROADCAST_TO, .in = {&x_any}};
static const kn_pat broadcast_broadcast = {.op = KN_OP_BROADCAST_TO, .in = {&inner_broadcast}};
static const kn_pat a_full = {.op = KN_OP_FULL, .bind = 1};
static const kn_pat broadcast_full = {.op = KN_OP_BROADCAST_TO, .in = {&a_full}};
static const kn_pat permute_ones = {.op = KN_OP_PERMUTE, .in = {&x_any}, .where = moves_only_ones};
static const kn_pat bcast_of_y = {.op = KN_OP_BROADCAST_TO, .in = {&x_any}};
static const kn_pat bcast_lhs = {.op = KN_PAT_ANY, .in = {&bcast_of_y}, .where = arith};
static const kn_pat bcast_rhs = {.op = KN_PAT_ANY, .in = {NULL, &bcast_of_y}, .where = arith};

static int32_t use_x(kn_rewriter *rw, const kn_match *m) {
    (void)rw;
    return m->bind[1];
}

/* x viewed to the root's shape in one reshape (x itself when it has that shape). */
static int32_t reshape_to_root(kn_rewriter *rw, const kn_match *m) {
    if (kn_type_equal(&kn_rw_node(rw, m->bind[1])->type, &m->root->type)) return m->bind[1];
    kn_attrs a = kn_attrs_default();
    a.nshape = m->root->type.ndim;
    memcpy(a.shape, m->root->type.shape, sizeof a.shape);
    return kn_rw_emit(rw, KN_OP_RESHAPE, 1, &m->bind[1], &a);
}

static int32_t compose_permutes(kn_rewriter *rw, const kn_match *m) {
    const kn_attrs *p = &kn_rw_node(rw, m->bind[2])->attrs, *q = &m->root->attrs;
    kn_attrs r = kn_attrs_default();
    r.nperm = q->nperm;
    bool identity = true;
    for (int i = 0; i < q->nperm; i++) {
        r.perm[i] = p->perm[q->perm[i]];
        identity &= r.perm[i] == i;
    }
    if (identity) return m->bind[1];
    return kn_rw_emit(rw, KN_OP_PERMUTE, 1, &m->bind[1], &r);
}

static int32_t broadcast_once(kn_rewriter *rw, const kn_match *m) {
    return kn_rw_emit(rw, KN_OP_BROADCAST_TO, 1, &m->bind[1], &m->root->attrs);
}

static int32_t full_of_root(kn_rewriter *rw, const kn_match *m) {
    return kn_rw_full(rw, &m->root->type, kn_rw_node(rw, m->bind[1])->attrs.value);
}

/* The arithmetic root with its broadcast_to operand `k` replaced by that view's input. */
static int32_t drop_broadcast(kn_rewriter *rw, const kn_match *m, int k) {
    int32_t in[2] = {m->root->in[0], m->root->in[1]};
    in[k] = m->bind[1];
    kn_type t;
    if (!kn_rw_type_of(rw, m->root->op, 2, in, &m->root->attrs, &t) || !kn_type_equal(&t, &m->root->type)) return -1;
    return kn_rw_emit(rw, m->root->op, 2, in, &m->root->attrs);
}
static int32_t drop_broadcast_lhs(kn_rewriter *rw, const kn_match *m) { return drop_broadcast(rw, m, 0); }
static int32_t drop_broadcast_rhs(kn_rewriter *rw, const kn_match *m) { return drop_broadcast(rw, m, 1); }

static const kn_rule rules[] = {
    {"reshape_noop", &reshape_noop, use_x},
    {"broadcast_noop", &broadcast_noop, use_x},
    {"slice_noop", &slice_noop, use_x},
    {"permute_noop", &permute_noop, use_x},
    {"reshape_reshape", &reshape_reshape, reshape_to_root},
    {"permute_permute", &permute_permute, compose_permutes},
    {"broadcast_broadcast", &broadcast_broadcast, broadcast_once},
    {"broadcast_full", &broadcast_full, full_of_root},
    {"permute_as_reshape", &permute_ones, reshape_to_root},
    {"broadcast_operand_lhs", &bcast_lhs, drop_broadcast_lhs},
    {"broadcast_operand_rhs", &bcast_rhs, drop_broadcast_rhs},
};
/* SKELETON
// Your patterns (static const kn_pat), replace functions and the static table of kn_rule go here.
END SOLUTION */

kn_status kn_view_rules(const kn_rule **out, int *n) {
    if (!out || !n) return kn_error(KN_ERR_ARG, "kn_view_rules: NULL argument");
    /* BEGIN SOLUTION */
    *out = rules;
    *n = (int)(sizeof rules / sizeof rules[0]);
    return KN_OK;
    /* SKELETON
    return kn_not_implemented("lab04", "kn_view_rules: patterns and replacements for view chains");
    END SOLUTION */
}
