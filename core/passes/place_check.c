/* place_check.c — the placement pass's verifier and printer (kiln/placement.h):
 * kn_place_check re-derives every node's placement of a rank's local graph from the rules
 * (place_rules.c) and the placements of its operands, and names the first node where the
 * recorded placement, the local type or a conversion does not hold, so a wrong rule is
 * caught here and not by a wrong loss; kn_place_print writes the local graph with each
 * value's placement and global type as comments (kiln compile --mesh --emit-ir). */
#include <stdlib.h>
#include <string.h>

#include "passes/place_impl.h"

static kn_status bad(const kn_graph *l, int32_t i, const char *fmt, const char *a, const char *b) {
    char nb[64];
    return kn_error(KN_ERR_INTERNAL, "kn_place_check: %s: %s%s%s", kn_place_node_name(l, i, nb, sizeof nb), fmt, a ? a : "",
                    b ? b : "");
}

kn_status kn_place_check(const kn_graph *g, const kn_place_result *r, const kn_place_opts *o) {
    kn_status st = kn_place_check_opts(g, o, "kn_place_check");
    if (st != KN_OK) return st;
    if (!r || !r->local || !r->info) return kn_error(KN_ERR_ARG, "kn_place_check: no result");
    const kn_graph *l = r->local;
    char b1[24], b2[24], msg[160];
    for (int32_t i = 0; i < l->nnodes; i++) {
        const kn_node *n = &l->nodes[i];
        const kn_place_info *f = &r->info[i];
        if (kn_op_get(n->op)->category == KN_CAT_COLLECTIVE && (n->attrs.mesh != o->mesh || n->attrs.parts != o->parts))
            return bad(l, i, "collective over another mesh axis or rank count", NULL, NULL);
        if (f->role == KN_PLACE_ROLE_STEP) continue;
        kn_type lt;
        if (kn_place_local_type(&f->global, f->p, o->parts, &lt) != KN_OK || !kn_type_equal(&lt, &n->type))
            return bad(l, i, "its type is not the local type of its placement ", kn_place_str(f->p, b1, sizeof b1),
                       NULL);
        if (f->role == KN_PLACE_ROLE_CONV) {
            if (f->from < 0 || f->from >= i) return bad(l, i, "a conversion of no earlier value", NULL, NULL);
            kn_placement from = r->info[f->from].p, to = f->p;
            bool ok = !kn_type_equal(&f->global, &r->info[f->from].global) ? false : to.kind != KN_PLACE_PARTIAL;
            const kn_placement *in0 = n->nin ? &r->info[n->in[0]].p : NULL;
            switch ((int)n->op) {
            case KN_OP_ALL_REDUCE: ok = ok && in0 && in0->kind == KN_PLACE_PARTIAL && to.kind == KN_PLACE_REPLICATE; break;
            case KN_OP_ALL_GATHER:
                ok = ok && in0 && in0->kind == KN_PLACE_SHARD && in0->blocks == 1 && in0->dim == n->attrs.axis &&
                     to.kind == KN_PLACE_REPLICATE;
                break;
            case KN_OP_REDUCE_SCATTER:
                ok = ok && in0 && in0->kind == KN_PLACE_PARTIAL && to.kind == KN_PLACE_SHARD && to.blocks == 1 &&
                     to.dim == n->attrs.axis;
                break;
            case KN_OP_SLICE: { /* R -> S(d): rank r's block */
                int64_t len = f->global.shape[to.dim] / o->parts;
                ok = ok && in0 && in0->kind == KN_PLACE_REPLICATE && to.kind == KN_PLACE_SHARD && to.blocks == 1 &&
                     n->attrs.axis == to.dim && n->attrs.start == o->rank * len && n->attrs.stop == (o->rank + 1) * len;
                break;
            }
            case KN_OP_CONCAT: ok = ok && (to.kind == KN_PLACE_REPLICATE || from.kind == KN_PLACE_REPLICATE); break;
            default: ok = false; break;
            }
            if (!ok) {
                snprintf(msg, sizeof msg, "%s -> %s", kn_place_str(from, b1, sizeof b1), kn_place_str(to, b2, sizeof b2));
                return bad(l, i, "not a conversion it makes: ", msg, NULL);
            }
            continue;
        }
        if (f->role == KN_PLACE_ROLE_EXPAND) { /* vocabulary parallelism: what each expansion gives */
            if (f->from < 0 || f->from >= g->nnodes || !kn_type_equal(&g->nodes[f->from].type, &f->global))
                return bad(l, i, "an expansion of no input node of its type", NULL, NULL);
            int gop = (int)g->nodes[f->from].op;
            kn_placement want = gop == KN_OP_EMBEDDING ? kn_place_partial() : gop == KN_OP_EMBEDDING_GRAD ? kn_place_shard(0)
                              : gop == KN_OP_CROSS_ENTROPY ? kn_place_replicate() : kn_place_shard(1);
            bool known = gop == KN_OP_EMBEDDING || gop == KN_OP_EMBEDDING_GRAD || gop == KN_OP_CROSS_ENTROPY ||
                         gop == KN_OP_CROSS_ENTROPY_BWD;
            if (!known || !kn_place_equal(want, f->p)) {
                snprintf(msg, sizeof msg, "the vocabulary-parallel %s placed %s, it gives ", kn_op_name((kn_op)gop),
                         kn_place_str(f->p, b1, sizeof b1));
                return bad(l, i, msg, known ? kn_place_str(want, b2, sizeof b2) : "nothing", NULL);
            }
            continue;
        }
        if (f->from < 0 || f->from >= g->nnodes || g->nodes[f->from].op != n->op)
            return bad(l, i, "not a node of the input graph", NULL, NULL);
        const kn_node *gn = &g->nodes[f->from];
        if (!kn_type_equal(&gn->type, &f->global)) return bad(l, i, "its global type is not its input node's", NULL, NULL);
        if (n->op == KN_OP_PARAM) {
            kn_placement p;
            if ((st = kn_place_param_of(o, n->attrs.name, &p)) != KN_OK) return st;
            if (!kn_place_equal(p, f->p))
                return bad(l, i, "a parameter placed ", kn_place_str(f->p, b1, sizeof b1), ", not as declared");
            continue;
        }
        const kn_type *gin[KN_MAX_OPERANDS];
        kn_placement have[KN_MAX_OPERANDS], want[KN_MAX_OPERANDS], outp;
        for (int k = 0; k < n->nin; k++) {
            if (!kn_type_equal(&r->info[n->in[k]].global, &g->nodes[gn->in[k]].type))
                return bad(l, i, "an operand is not its input node's operand", NULL, NULL);
            gin[k] = &r->info[n->in[k]].global;
            have[k] = r->info[n->in[k]].p;
        }
        if ((st = kn_place_rule(gn, gin, have, NULL, o->parts, o->flags, want, &outp)) != KN_OK) return st;
        for (int k = 0; k < n->nin; k++)
            if (!kn_place_equal(have[k], want[k])) {
                snprintf(msg, sizeof msg, "operand %d is %s, its rule wants ", k, kn_place_str(have[k], b1, sizeof b1));
                return bad(l, i, msg, kn_place_str(want[k], b2, sizeof b2), NULL);
            }
        if (!kn_place_equal(outp, f->p)) {
            snprintf(msg, sizeof msg, "placed %s, its rule gives ", kn_place_str(f->p, b1, sizeof b1));
            return bad(l, i, msg, kn_place_str(outp, b2, sizeof b2), NULL);
        }
    }
    if (l->noutputs != g->noutputs)
        return kn_error(KN_ERR_INTERNAL, "kn_place_check: %d outputs, the input graph has %d", l->noutputs, g->noutputs);
    for (int i = 0; i < l->noutputs; i++) {
        kn_placement p;
        if ((st = kn_place_output_of(g, o, i, &p)) != KN_OK) return st;
        if (!kn_place_equal(p, r->info[l->outputs[i]].p))
            return kn_error(KN_ERR_INTERNAL, "kn_place_check: output %d (%%%d) is %s, it must be %s", i,
                            (int)l->outputs[i], kn_place_str(r->info[l->outputs[i]].p, b1, sizeof b1),
                            kn_place_str(p, b2, sizeof b2));
    }
    return KN_OK;
}

kn_status kn_place_print(FILE *f, const kn_place_result *r) {
    if (!f || !r || !r->local) return kn_error(KN_ERR_ARG, "kn_place_print: NULL argument");
    char *text = NULL;
    kn_status st = kn_graph_to_string(r->local, &text);
    if (st != KN_OK) return st;
    fprintf(f, "# rank's local graph: %d all_reduce, %d all_gather, %d reduce_scatter, %d local slices inserted\n",
            r->all_reduce, r->all_gather, r->reduce_scatter, r->local_slices);
    char *line = text;
    for (int i = 0; line && *line; i++) {
        char *nl = strchr(line, '\n');
        int len = nl ? (int)(nl - line) : (int)strlen(line);
        if (i < r->local->nnodes) {
            char pb[24], tb[96];
            const kn_place_info *in = &r->info[i];
            const char *role = in->role == KN_PLACE_ROLE_NODE ? "" : in->role == KN_PLACE_ROLE_CONV ? "  inserted"
                             : in->role == KN_PLACE_ROLE_EXPAND ? "  vocabulary-parallel" : "  inserted (step)";
            fprintf(f, "%.*s  # %s of %s%s\n", len, line, kn_place_str(in->p, pb, sizeof pb),
                    kn_type_str(&in->global, tb, sizeof tb), role);
        } else {
            fprintf(f, "%.*s\n", len, line);
        }
        line = nl ? nl + 1 : NULL;
    }
    kn_free(text);
    return KN_OK;
}
