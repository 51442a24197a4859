/* edit.c — the graph-editing helpers every pass shares: rebuild a graph in place after
 * replacing and dropping nodes (kn_graph_compact), count uses, compare attributes, and
 * count the rewrites a pass fires.
 *
 * Node ids are indices into the node array, so a pass never edits the array while it
 * walks it: it decides first (a replacement map and a keep mask), then kn_graph_compact
 * renumbers once. Because every kept node's new id is at most its old id, the rebuild
 * writes into the same array, front to back. */
#include <string.h>

#include "kiln/passes.h"

void kn_pass_stats_fire(kn_pass_stats *st, const char *rule, int64_t times) {
    if (!st || times <= 0) return;
    for (int i = 0; i < st->nfired; i++)
        if (st->rule[i] == rule || !strcmp(st->rule[i], rule)) {
            st->count[i] += times;
            return;
        }
    if (st->nfired == KN_PASS_MAX_RULES) return; /* more rule names than a report holds */
    st->rule[st->nfired] = rule;
    st->count[st->nfired++] = times;
}

int64_t kn_pass_stats_total(const kn_pass_stats *st) {
    int64_t t = 0;
    for (int i = 0; st && i < st->nfired; i++) t += st->count[i];
    return t;
}

bool kn_op_is_random(kn_op op) { return op == KN_OP_DROPOUT; }

void kn_graph_uses(const kn_graph *g, int32_t *uses) {
    memset(uses, 0, (size_t)g->nnodes * sizeof *uses);
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].nin; k++)
            if (g->nodes[i].in[k] >= 0 && g->nodes[i].in[k] < g->nnodes) uses[g->nodes[i].in[k]]++;
    for (int i = 0; i < g->noutputs; i++)
        if (g->outputs[i] >= 0 && g->outputs[i] < g->nnodes) uses[g->outputs[i]]++;
}

void kn_graph_forward(const kn_graph *g, bool *fwd) {
    memset(fwd, 0, (size_t)g->nnodes * sizeof *fwd);
    if (g->noutputs <= 0) return;
    int32_t loss = g->outputs[0];
    fwd[loss] = true;
    for (int32_t i = loss; i >= 0; i--)
        for (int k = 0; fwd[i] && k < g->nodes[i].nin; k++) fwd[g->nodes[i].in[k]] = true;
    /* what the forward computes before the loss for the backward alone (lowsave's 16-bit
     * copies): it runs with the forward, and remat may recompute it like the rest */
    for (int32_t i = 0; i < loss; i++) {
        const kn_node *n = &g->nodes[i];
        bool all = !fwd[i] && n->nin > 0;
        for (int k = 0; all && k < n->nin; k++) all = fwd[n->in[k]];
        fwd[i] |= all;
    }
}

static bool ints_equal(int na, const int64_t *a, int nb, const int64_t *b) {
    return na == nb && (na == 0 || !memcmp(a, b, (size_t)na * sizeof *a));
}

bool kn_attrs_equal(kn_op op, const kn_attrs *a, const kn_attrs *b) {
    const kn_op_info *info = kn_op_get(op);
    if (!info) return false;
    uint32_t m = info->req_attrs | info->opt_attrs;
    if ((m & KN_ABIT(AXES)) && !ints_equal(a->naxes, a->axes, b->naxes, b->axes)) return false;
    if ((m & KN_ABIT(PERM)) && !ints_equal(a->nperm, a->perm, b->nperm, b->perm)) return false;
    if ((m & KN_ABIT(SHAPE)) && !ints_equal(a->nshape, a->shape, b->nshape, b->shape)) return false;
#define SAME_INT(E, f) if ((m & KN_ABIT(E)) && a->f != b->f) return false;
    SAME_INT(AXIS, axis) SAME_INT(KEEPDIM, keepdim) SAME_INT(START, start) SAME_INT(STOP, stop)
    SAME_INT(STEP, step) SAME_INT(TA, ta) SAME_INT(TB, tb) SAME_INT(SEED, seed) SAME_INT(OFFSET, offset)
    SAME_INT(DTYPE, dtype) SAME_INT(FN, fn)
#undef SAME_INT
#define SAME_F64(E, f) if ((m & KN_ABIT(E)) && memcmp(&a->f, &b->f, sizeof a->f)) return false;
    SAME_F64(EPS, eps) SAME_F64(P, p) SAME_F64(VALUE, value) SAME_F64(SCALE, scale)
#undef SAME_F64
    if ((m & KN_ABIT(NAME)) && strncmp(a->name, b->name, KN_NAME_MAX)) return false;
    return true;
}

/* Follow a replacement chain to the value that stays. */
static int32_t resolve(const int32_t *repl, int32_t v) {
    if (!repl) return v;
    while (repl[v] != v) v = repl[v];
    return v;
}

kn_status kn_graph_compact(kn_graph *g, const int32_t *repl, const bool *keep) {
    if (!g) return kn_error(KN_ERR_ARG, "kn_graph_compact: NULL graph");
    int n = g->nnodes;
    for (int i = 0; repl && i < n; i++)
        if (repl[i] < 0 || repl[i] > i)
            return kn_error(KN_ERR_ARG, "kn_graph_compact: %%%d is replaced by %%%d: a replacement must be defined "
                            "before the value it replaces", i, repl[i]);
    int32_t *newid = kn_malloc((size_t)(n ? n : 1) * sizeof *newid);
    if (!newid) return kn_error(KN_ERR_OOM, "kn_graph_compact: out of memory");
    int32_t next = 0;
    for (int i = 0; i < n; i++) newid[i] = (resolve(repl, i) == i && (!keep || keep[i])) ? next++ : -1;
    /* Check everything before writing, so g is unchanged on failure. */
    for (int i = 0; i < n; i++) {
        if (newid[i] < 0) continue;
        for (int k = 0; k < g->nodes[i].nin; k++) {
            int32_t v = g->nodes[i].in[k];
            if (v < 0 || v >= i || newid[resolve(repl, v)] < 0) {
                kn_free(newid);
                return kn_error(KN_ERR_ARG, "kn_graph_compact: %%%d = %s keeps operand %%%d, which is dropped", i,
                                kn_op_name(g->nodes[i].op), v);
            }
        }
    }
    for (int i = 0; i < g->noutputs; i++) {
        int32_t v = g->outputs[i];
        if (v < 0 || v >= n || newid[resolve(repl, v)] < 0) {
            kn_free(newid);
            return kn_error(KN_ERR_ARG, "kn_graph_compact: output %d (%%%d) is dropped", i, v);
        }
    }
    for (int i = 0; i < n; i++) {
        if (newid[i] < 0) continue;
        kn_node nd = g->nodes[i];
        for (int k = 0; k < nd.nin; k++) nd.in[k] = newid[resolve(repl, nd.in[k])];
        g->nodes[newid[i]] = nd;
    }
    for (int i = 0; i < g->noutputs; i++) g->outputs[i] = newid[resolve(repl, g->outputs[i])];
    g->nnodes = next;
    kn_free(newid);
    return KN_OK;
}

/* Rebuilding a graph into a new one (the passes that replace groups of nodes: flash,
 * epilogue) appends nodes whose types come from their rule, copies the others with their
 * operands renumbered, and then takes the new arrays in place of the old. */
kn_status kn_graph_emit(kn_graph *out, const char *pass, kn_op op, int nin, const int32_t *in, const kn_attrs *attrs,
                        int32_t scope, int32_t *id) {
    kn_node n = {.op = op, .nin = nin, .attrs = attrs ? *attrs : kn_attrs_default(), .scope = scope};
    const kn_type *tin[KN_MAX_OPERANDS];
    for (int i = 0; i < nin; i++) {
        n.in[i] = in[i];
        tin[i] = &out->nodes[in[i]].type;
    }
    char msg[256];
    kn_status st = kn_node_infer(&n, tin, &n.type, msg, sizeof msg);
    if (st != KN_OK) return kn_error(st, "%s: %s: %s", pass, kn_op_name(op), msg);
    return kn_graph_add_node(out, &n, id);
}

kn_status kn_graph_emit_copy(kn_graph *out, const kn_node *n, const int32_t *map, int32_t *id) {
    kn_node nd = *n;
    for (int k = 0; k < nd.nin; k++) nd.in[k] = map[nd.in[k]];
    return kn_graph_add_node(out, &nd, id);
}

kn_status kn_graph_rebuild_start(const kn_graph *g, const char *pass, kn_graph **out, int32_t **map) {
    KN_TRY(kn_graph_new(out));
    *map = kn_malloc((size_t)(g->nnodes > 0 ? g->nnodes : 1) * sizeof **map);
    if (*map) return KN_OK;
    kn_graph_free(*out);
    *out = NULL;
    return kn_error(KN_ERR_OOM, "%s: out of memory", pass);
}

kn_status kn_graph_take(kn_graph *g, kn_graph *out, int32_t *map, kn_status st) {
    for (int i = 0; st == KN_OK && i < g->noutputs; i++) st = kn_graph_add_output(out, map[g->outputs[i]]);
    if (st == KN_OK) { /* swap the new arrays into g; free the old ones with out's shell */
        kn_graph tmp = *g;
        *g = *out;
        *out = tmp;
    }
    kn_graph_free(out);
    kn_free(map);
    return st;
}
