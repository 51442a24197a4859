/* rewrite.c — the pattern rewriter: declarative patterns (a tree of ops with constraints)
 * matched against a graph, and replacement functions that emit new nodes.
 *
 * kn_rewrite rebuilds the graph front to back into a new one. Each node's operands are
 * first redirected to their replacements (map[]), so by the time a node is visited its
 * operands are final: a pattern that looks through operands sees rewritten values, and a
 * chain like neg(neg(neg x)) collapses in a single sweep. The root being matched is a
 * candidate node not yet appended; if a rule replaces it, it never enters the new graph.
 * Its operands stay (perhaps unused now): dead-code elimination removes them, which keeps
 * this file free of liveness bookkeeping. Sweeps repeat until nothing fires, because a
 * replacement's own new nodes are only matched in the next sweep. */
#include <string.h>

#include "kiln/passes.h"
#include "ir/ir_impl.h"

#define KN_REWRITE_MAX_SWEEPS 8

struct kn_rewriter {
    kn_graph *out;          /* the graph being built */
    kn_status status;       /* first failure of an emit */
    int32_t scope;          /* the candidate's scope: what replaces it belongs where it did */
};

const kn_graph *kn_rw_graph(const kn_rewriter *rw) { return rw->out; }

const kn_node *kn_rw_node(const kn_rewriter *rw, int32_t id) {
    return (id >= 0 && id < rw->out->nnodes) ? &rw->out->nodes[id] : NULL;
}

/* Build node n of op with operands in[] and infer its type; msg gets the reason on failure. */
static kn_status make_node(const kn_rewriter *rw, kn_op op, int nin, const int32_t *in, const kn_attrs *attrs,
                           kn_node *n, char *msg, size_t msz) {
    const kn_op_info *info = kn_op_get(op);
    if (!info || nin != info->arity || info->category == KN_CAT_SOURCE) {
        snprintf(msg, msz, "cannot emit op %s with %d operands", kn_op_name(op), nin);
        return KN_ERR_ARG;
    }
    memset(n, 0, sizeof *n);
    n->op = op;
    n->nin = nin;
    n->attrs = attrs ? *attrs : kn_attrs_default();
    n->scope = rw->scope;
    const kn_type *types[KN_MAX_OPERANDS];
    for (int k = 0; k < nin; k++) {
        if (in[k] < 0 || in[k] >= rw->out->nnodes) {
            snprintf(msg, msz, "operand %d is not a value (%d)", k, in[k]);
            return KN_ERR_ARG;
        }
        n->in[k] = in[k];
        types[k] = &rw->out->nodes[in[k]].type;
    }
    kn_status st = kn_node_check_attrs(n, msg, msz);
    if (st == KN_OK) st = kn_node_infer(n, types, &n->type, msg, msz);
    return st;
}

bool kn_rw_type_of(const kn_rewriter *rw, kn_op op, int nin, const int32_t *in, const kn_attrs *attrs,
                   kn_type *out) {
    kn_node n;
    char msg[256];
    if (!rw || make_node(rw, op, nin, in, attrs, &n, msg, sizeof msg) != KN_OK) return false;
    if (out) *out = n.type;
    return true;
}

int32_t kn_rw_emit(kn_rewriter *rw, kn_op op, int nin, const int32_t *in, const kn_attrs *attrs) {
    if (rw->status != KN_OK) return -1;
    kn_node n;
    char msg[256];
    kn_status st = make_node(rw, op, nin, in, attrs, &n, msg, sizeof msg);
    if (st != KN_OK) {
        rw->status = kn_error(st, "kn_rw_emit(%s): %s", kn_op_name(op), msg);
        return -1;
    }
    int32_t id;
    st = kn_graph_add_node(rw->out, &n, &id);
    if (st != KN_OK) {
        rw->status = st;
        return -1;
    }
    return id;
}

int32_t kn_rw_full(kn_rewriter *rw, const kn_type *t, double value) {
    if (rw->status != KN_OK) return -1;
    kn_node n;
    memset(&n, 0, sizeof n);
    n.op = KN_OP_FULL;
    n.attrs = kn_attrs_default();
    n.attrs.value = value;
    n.type = *t;
    n.scope = rw->scope;
    int32_t id;
    kn_status st = kn_graph_add_node(rw->out, &n, &id);
    if (st != KN_OK) {
        rw->status = st;
        return -1;
    }
    return id;
}

/* Does pattern p accept node nd (value id, -1 for the candidate root)? */
static bool match(const kn_graph *g, const kn_pat *p, const kn_node *nd, int32_t id, const kn_type *root,
                  kn_match *m) {
    if (!p) return true;
    if (p->op != KN_PAT_ANY && (int)nd->op != p->op) return false;
    if ((p->flags & KN_PAT_VALUE) && (nd->op != KN_OP_FULL || nd->attrs.value != p->value)) return false;
    if ((p->flags & KN_PAT_ROOT_TYPE) && !kn_type_equal(&nd->type, root)) return false;
    if ((p->flags & KN_PAT_SCALAR) && kn_type_numel(&nd->type) != 1) return false;
    if (p->bind > 0 && p->bind < KN_PAT_SLOTS) {
        if (m->bind[p->bind] >= 0 && m->bind[p->bind] != id) return false;
        m->bind[p->bind] = id;
    }
    if (p->where && !p->where(g, nd)) return false;
    int nin = nd->nin;
    bool any_in = false;
    for (int k = 0; k < KN_MAX_OPERANDS; k++) any_in |= p->in[k] != NULL;
    if (!any_in) return true;
    kn_match saved = *m;
    bool ok = true;
    for (int k = 0; k < KN_MAX_OPERANDS && ok; k++) {
        if (!p->in[k]) continue;
        if (k >= nin) { ok = false; break; }
        ok = match(g, p->in[k], &g->nodes[nd->in[k]], nd->in[k], root, m);
    }
    if (ok || !(p->flags & KN_PAT_COMMUTE) || nin != 2) return ok;
    *m = saved; /* try the operands the other way round */
    return match(g, p->in[0], &g->nodes[nd->in[1]], nd->in[1], root, m) &&
           match(g, p->in[1], &g->nodes[nd->in[0]], nd->in[0], root, m);
}

static void match_clear(kn_match *m, const kn_node *root) {
    m->root = root;
    for (int k = 0; k < KN_PAT_SLOTS; k++) m->bind[k] = -1;
}

bool kn_pat_match(const kn_graph *g, const kn_pat *p, int32_t id, kn_match *m) {
    if (!g || !p || !m || id < 0 || id >= g->nnodes) return false;
    match_clear(m, &g->nodes[id]);
    return match(g, p, &g->nodes[id], id, &g->nodes[id].type, m);
}

/* One sweep: rebuild g into a new graph; *fired counts the rewrites. */
static kn_status sweep(kn_graph *g, const kn_rule *rules, int n, kn_pass_stats *st, int64_t *fired) {
    kn_graph *out;
    KN_TRY(kn_graph_new(&out));
    int32_t *map = kn_malloc((size_t)(g->nnodes ? g->nnodes : 1) * sizeof *map);
    if (!map) {
        kn_graph_free(out);
        return kn_error(KN_ERR_OOM, "kn_rewrite: out of memory");
    }
    kn_rewriter rw = {out, KN_OK, KN_SCOPE_NONE};
    kn_status s = KN_OK;
    for (int i = 0; i < g->nnodes && s == KN_OK; i++) {
        kn_node cand = g->nodes[i];
        for (int k = 0; k < cand.nin; k++) cand.in[k] = map[cand.in[k]];
        map[i] = -1;
        rw.scope = cand.scope;
        for (int r = 0; r < n && map[i] < 0; r++) {
            kn_match m;
            match_clear(&m, &cand);
            if (!match(out, rules[r].pat, &cand, -1, &cand.type, &m)) continue;
            int32_t v = rules[r].replace(&rw, &m);
            if (rw.status != KN_OK) {
                s = kn_error(rw.status, "kn_rewrite: rule %s at %%%d = %s: %s", rules[r].name, i, kn_op_name(cand.op),
                             kn_last_error());
                break;
            }
            if (v < 0) continue;
            if (v >= out->nnodes || !kn_type_equal(&out->nodes[v].type, &cand.type)) {
                char a[96], b[96];
                s = kn_error(KN_ERR_ARG, "kn_rewrite: rule %s replaced %%%d = %s of type %s by a value of type %s",
                             rules[r].name, i, kn_op_name(cand.op), kn_type_str(&cand.type, a, sizeof a),
                             v < out->nnodes ? kn_type_str(&out->nodes[v].type, b, sizeof b) : "(none)");
                break;
            }
            map[i] = v;
            kn_pass_stats_fire(st, rules[r].name, 1);
            (*fired)++;
        }
        if (s == KN_OK && map[i] < 0) s = kn_graph_add_node(out, &cand, &map[i]);
    }
    for (int i = 0; i < g->noutputs && s == KN_OK; i++) s = kn_graph_add_output(out, map[g->outputs[i]]);
    kn_free(map);
    if (s == KN_OK) { /* swap the new arrays into g; free the old ones with out's shell */
        kn_graph tmp = *g;
        *g = *out;
        *out = tmp;
    }
    kn_graph_free(out);
    return s;
}

kn_status kn_rewrite(kn_graph *g, const kn_rule *rules, int n, kn_pass_stats *st) {
    if (!g || (n > 0 && !rules) || n < 0) return kn_error(KN_ERR_ARG, "kn_rewrite: NULL graph or rules");
    for (int r = 0; r < n; r++)
        if (!rules[r].name || !rules[r].pat || !rules[r].replace)
            return kn_error(KN_ERR_ARG, "kn_rewrite: rule %d has no name, pattern or replace function", r);
    for (int s = 0; s < KN_REWRITE_MAX_SWEEPS; s++) {
        int64_t fired = 0;
        KN_TRY(sweep(g, rules, n, st, &fired));
        if (!fired) break;
    }
    return KN_OK;
}
