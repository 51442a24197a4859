/* fold.c — constant folding: a node whose operands are all constants becomes a constant.
 *
 * kiln's only constant node is `full` (a tensor filled with one value), so folding asks
 * one question per node: given `full` operands, is the result again one value everywhere?
 *   - a view (reshape, permute, broadcast_to, slice) of a full is a full of the new
 *     shape with the same value: no arithmetic, so no need to run anything;
 *   - any other op (elementwise, reduction, matmul, softmax, ...) is run on the CPU
 *     kernel, the very kernel the interpreter would run (kn_node_eval), on the
 *     materialized operands, and folded when every element of the result is the same
 *     (bit for bit; NaNs count as equal). So folding never changes a number: the sum of a
 *     full [768] is whatever the sum kernel gives, rounding included.
 * Random ops (dropout) are never folded, nor are ops whose operands or result exceed
 * KN_FOLD_MAX_NUMEL elements (the evaluation would cost more than it saves). Folding
 * rewrites node i in place into a `full` of the same type, so ids do not move; the
 * operands it no longer uses are left to dce. */
#include <math.h>
#include <string.h>

#include "kiln/passes.h"

#define KN_FOLD_MAX_NUMEL (1 << 16)

static const char *const RULE_VIEW = "fold_view";
static const char *const RULE_EVAL = "fold_eval";

/* A full tensor of node id's type (a constant node of g). */
static kn_status materialize(const kn_graph *g, int32_t id, kn_tensor **out) {
    return kn_node_eval(&g->nodes[id], NULL, out);
}

/* Run node n on its full operands; *uniform tells whether the result is one value v. */
static kn_status eval_uniform(const kn_graph *g, const kn_node *n, bool *uniform, double *v) {
    kn_tensor *in[KN_MAX_OPERANDS] = {0}, *out = NULL;
    double *buf = NULL;
    kn_status st = KN_OK;
    *uniform = false;
    for (int k = 0; k < n->nin && st == KN_OK; k++) st = materialize(g, n->in[k], &in[k]);
    if (st == KN_OK) st = kn_node_eval(n, (const kn_tensor *const *)in, &out);
    int64_t numel = kn_type_numel(&n->type);
    if (st == KN_OK) {
        buf = kn_malloc((size_t)(numel ? numel : 1) * sizeof *buf);
        st = buf ? kn_tensor_to_f64(out, buf) : kn_error(KN_ERR_OOM, "kn_pass_fold: out of memory");
    }
    if (st == KN_OK && numel > 0) {
        *uniform = true;
        for (int64_t i = 1; i < numel && *uniform; i++)
            *uniform = !memcmp(&buf[i], &buf[0], sizeof buf[0]) || (isnan(buf[i]) && isnan(buf[0]));
        *v = buf[0];
    }
    kn_free(buf);
    kn_tensor_free(out);
    for (int k = 0; k < n->nin; k++) kn_tensor_free(in[k]);
    return st;
}

kn_status kn_pass_fold(kn_graph *g, kn_pass_stats *st) {
    if (!g) return kn_error(KN_ERR_ARG, "kn_pass_fold: NULL graph");
    for (int i = 0; i < g->nnodes; i++) {
        kn_node *n = &g->nodes[i];
        const kn_op_info *info = kn_op_get(n->op);
        if (!info || info->category == KN_CAT_SOURCE || info->category == KN_CAT_COLLECTIVE || kn_op_is_random(n->op) ||
            n->nin == 0)
            continue; /* a collective's token is not its operands' function: it talks to other ranks */
        bool all_full = true;
        for (int k = 0; k < n->nin; k++) all_full &= g->nodes[n->in[k]].op == KN_OP_FULL;
        if (!all_full) continue;
        double v;
        const char *rule;
        if (info->category == KN_CAT_VIEW) {
            v = g->nodes[n->in[0]].attrs.value;
            rule = RULE_VIEW;
        } else {
            bool small = kn_type_numel(&n->type) <= KN_FOLD_MAX_NUMEL;
            for (int k = 0; k < n->nin; k++) small &= kn_type_numel(&g->nodes[n->in[k]].type) <= KN_FOLD_MAX_NUMEL;
            bool uniform = false;
            /* A kernel error (an index out of range, ...) is the program's, at run time:
             * leave the node for the interpreter to report. */
            if (!small || eval_uniform(g, n, &uniform, &v) != KN_OK || !uniform) continue;
            rule = RULE_EVAL;
        }
        kn_node c;
        memset(&c, 0, sizeof c);
        c.op = KN_OP_FULL;
        c.attrs = kn_attrs_default();
        c.attrs.value = v;
        c.type = n->type;
        c.scope = n->scope;
        *n = c;
        kn_pass_stats_fire(st, rule, 1);
    }
    return KN_OK;
}
