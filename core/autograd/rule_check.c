/* rule_check.c — the table of backward rules (ops.def's backward column) and the checks
 * around the lab 02 units that turn a wrong answer into an error naming the mistake,
 * instead of wrong numbers further on.
 *
 * The backward column of ops.def names each op's rule (bw_matmul, ...; bw_none: not
 * differentiable); it is compiled here, in autograd, into kn_op_rules and the rules'
 * names, so the IR below names no rule (core/mk/layers.py). kn_backward_checked(b, id,
 * dy, dx) is the one way a reverse pass asks node id's rule (kiln/autograd.h): it checks
 * that the gradient dy handed to node id has that node's type (a reverse pass that
 * accumulated wrongly is caught here), calls the op's rule, and checks that every answer
 * dx[k] has the type of operand k: a rule that returns, say, a transposed [4,3] gradient
 * for a [3,4] weight is refused with the rule, the node and the operand in the message.
 * The check sits in the entry, not in kn_backward, so it holds whatever reverse pass calls
 * the rules (the student's own kn_backward included).
 *
 * kn_sum_to_check(b, g, x) is the argument check at the top of kn_sum_to (lab 02's
 * backward.c, outside the part the student writes): g must be what x's shape broadcasts
 * to. "Reshape to x's shape" alone would let a transposed gradient of the right size
 * through without a word. While a rule runs, its name and node are remembered (per
 * thread) so that kn_sum_to's message can say which rule called it. */
#include <stdio.h>

#include "ir/ir_impl.h"
#include "kiln/autograd.h"

static const kn_backward_fn kn_op_rules[KN_OP_COUNT] = { /* ORDER OP */
#define KN_OP(E, name, arity, cat, req, opt, infer, kernel, backward, cost) backward,
#include "kiln/ops.def"
};

static const char *const kn_op_rule_names[KN_OP_COUNT] = { /* ORDER OP */
#define KN_OP(E, name, arity, cat, req, opt, infer, kernel, backward, cost) #backward,
#include "kiln/ops.def"
};

/* The rule of the ops without one: autograd reaching them says so. */
void bw_none(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    (void)dy; (void)dx;
    const kn_graph *g = kn_builder_graph(b);
    kn_builder_fail(b, KN_ERR_UNSUPPORTED, "kn_backward: %%%d = %s is not differentiable", id,
                    kn_op_name(g->nodes[id].op));
}

static _Thread_local int32_t kn_rule_node = -1;

/* " (called by bw_matmul of %7 = matmul)", or "" outside a rule. */
static const char *rule_context(const kn_builder *b, char *buf, size_t size) {
    const kn_graph *g = kn_builder_graph(b);
    if (kn_rule_node < 0 || !g || kn_rule_node >= g->nnodes) return "";
    kn_op op = g->nodes[kn_rule_node].op;
    snprintf(buf, size, " (in %s, the rule of %%%d = %s)", kn_op_rule_names[op], (int)kn_rule_node, kn_op_name(op));
    return buf;
}

void kn_backward_checked(kn_builder *b, int32_t id, kn_val dy, kn_val *dx) {
    const kn_graph *g = kn_builder_graph(b);
    if (!g || id < 0 || id >= g->nnodes || !dx) {
        kn_builder_fail(b, KN_ERR_ARG, "backward rule: node %%%d is not a node of this builder", (int)id);
        return;
    }
    const kn_node nd = g->nodes[id]; /* a copy: the node array moves as the rule adds nodes */
    if (!kn_op_get(nd.op)->differentiable) {
        bw_none(b, id, dy, dx);
        return;
    }
    const char *rule = kn_op_rule_names[nd.op];
    char ts[96], ws[96];
    const kn_type *dyt = kn_val_type(b, dy);
    if (!dyt || !kn_type_equal(dyt, &nd.type)) {
        kn_builder_fail(b, KN_ERR_SHAPE,
                        "kn_backward: the gradient given to %s for %%%d = %s is %s, but %%%d is %s "
                        "(the reverse pass must hand each node a gradient of its own type)",
                        rule, (int)id, kn_op_name(nd.op), dyt ? kn_type_str(dyt, ts, sizeof ts) : "not a value",
                        (int)id, kn_type_str(&nd.type, ws, sizeof ws));
        return;
    }
    int32_t outer = kn_rule_node;
    kn_rule_node = id;
    kn_op_rules[nd.op](b, id, dy, dx);
    kn_rule_node = outer;
    for (int k = 0; k < nd.nin && kn_builder_status(b) == KN_OK; k++) {
        if (!kn_val_ok(dx[k])) continue; /* KN_VAL_WANT or KN_VAL_NONE: kn_backward judges these */
        kn_type want = kn_builder_graph(b)->nodes[nd.in[k]].type;
        const kn_type *got = kn_val_type(b, dx[k]);
        if (got && kn_type_equal(got, &want)) continue;
        kn_builder_fail(b, KN_ERR_SHAPE,
                        "%s: the gradient it returns for operand %d (%%%d) of %%%d = %s is %s, but that operand is "
                        "%s: a rule must answer with the operand's own type (kn_sum_to sums broadcast axes back)",
                        rule, k, (int)nd.in[k], (int)id, kn_op_name(nd.op),
                        got ? kn_type_str(got, ts, sizeof ts) : "not a value of this builder",
                        kn_type_str(&want, ws, sizeof ws));
    }
}

bool kn_sum_to_check(kn_builder *b, kn_val g, kn_val x) {
    if (!b || kn_builder_status(b) != KN_OK || !kn_val_ok(g) || !kn_val_ok(x)) return false;
    const kn_type *gp = kn_val_type(b, g), *xp = kn_val_type(b, x);
    char gs[96], xs[96], ctx[128];
    if (!gp || !xp) {
        kn_builder_fail(b, KN_ERR_ARG, "kn_sum_to: %s is not a value of this builder%s", gp ? "x" : "g",
                        rule_context(b, ctx, sizeof ctx));
        return false;
    }
    kn_type gt = *gp, xt = *xp;
    int lead = gt.ndim - xt.ndim, bad = -1;
    for (int i = 0; i < xt.ndim && lead >= 0 && bad < 0; i++)
        if (xt.shape[i] != 1 && xt.shape[i] != gt.shape[i + lead]) bad = i;
    if (lead >= 0 && bad < 0 && gt.dtype == xt.dtype) return true;
    char why[96];
    if (lead < 0) snprintf(why, sizeof why, "g has fewer axes than x");
    else if (bad >= 0)
        snprintf(why, sizeof why, "x's axis %d has size %lld, g's axis %d %lld", bad, (long long)xt.shape[bad],
                 bad + lead, (long long)gt.shape[bad + lead]);
    else snprintf(why, sizeof why, "the dtypes differ");
    kn_builder_fail(b, KN_ERR_SHAPE,
                    "kn_sum_to: the gradient %%%d %s is not a broadcast of x = %%%d %s (%s): a wrong-shaped or "
                    "transposed gradient%s",
                    (int)g.id, kn_type_str(&gt, gs, sizeof gs), (int)x.id, kn_type_str(&xt, xs, sizeof xs), why,
                    rule_context(b, ctx, sizeof ctx));
    return false;
}
