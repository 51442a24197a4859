/* place.c — the placement pass (kiln/placement.h): tensor parallelism as a graph rewrite.
 *
 * One walk over the input graph in node order does both halves of the pass: each node's
 * operands get the placements its rule (place_rules.c) wants — converted by inserted
 * value collectives or local slices where they arrive otherwise — and the node is emitted
 * at once with its local type (S(d): dim d / N) and its shape-carrying attributes
 * rewritten, so the new graph is rank r's local graph. Every emitted node's type is
 * re-inferred by the IR's own shape rules and must equal kn_place_local_shape of its
 * global type: a rule that claims a placement the localized op cannot compute fails at
 * that node. The verifier (kn_place_check) then re-derives every placement from the rules
 * on the finished graph, so a wrong placement or a missing conversion is named there.
 *
 * Conversions (the value's global type is unchanged; only where it lives changes):
 *   P -> R        all_reduce
 *   P -> S(d)     reduce_scatter {axis=d}            (S(d,k), k > 1: all_reduce, then slices)
 *   S(d) -> R     all_gather {axis=d}                (S(d,k): the gathered segments are put
 *                                                    back in order by slices and concats)
 *   R -> S(d,k)   a slice of rank r's block of each of the k segments (concatenated)
 *   S -> S'       through R.
 * Each conversion of a value is made once and reused. */
#include <stdlib.h>
#include <string.h>

#include "kiln/placement.h"

typedef struct conv_entry { int32_t src; kn_placement p; int32_t id; } conv_entry;

typedef struct place_state {
    const kn_graph *g;
    const kn_place_opts *o;
    kn_place_result *r;
    int cap_info;
    conv_entry *conv;
    int nconv, cap_conv;
} place_state;

const char *kn_place_str(kn_placement p, char *buf, size_t size) {
    if (!buf || !size) return buf;
    switch ((int)p.kind) {
    case KN_PLACE_REPLICATE: snprintf(buf, size, "R"); break;
    case KN_PLACE_PARTIAL: snprintf(buf, size, "P"); break;
    case KN_PLACE_SHARD:
        if (p.blocks == 1) snprintf(buf, size, "S(%d)", p.dim);
        else snprintf(buf, size, "S(%d,%d)", p.dim, p.blocks);
        break;
    default: snprintf(buf, size, "?%d", (int)p.kind); break;
    }
    return buf;
}

void kn_place_result_free(kn_place_result *r) {
    if (!r) return;
    kn_graph_free(r->local);
    free(r->info);
    memset(r, 0, sizeof *r);
}

static kn_status local_type(const kn_type *global, kn_placement p, int parts, kn_type *out) {
    *out = *global;
    if (global->ndim == 0) return p.kind == KN_PLACE_SHARD ? KN_ERR_SHAPE : KN_OK;
    return kn_place_local_shape(global->ndim, global->shape, p, parts, out->shape);
}

/* Append node n (operands local ids; n->type: the local type for a source) to the local
 * graph with its record; checks the inferred local type against the placement's. `what`
 * names the node in messages. */
static kn_status emit(place_state *s, kn_node *n, kn_placement p, const kn_type *global, kn_place_role role,
                      int32_t from, const char *what, int32_t *id) {
    kn_graph *ng = s->r->local;
    kn_type want;
    char pb[24], b1[96], b2[96];
    if (role != KN_PLACE_ROLE_STEP) {
        if (local_type(global, p, s->o->parts, &want) != KN_OK)
            return kn_error(KN_ERR_SHAPE, "kn_place_graph: %s: %s of %s over %d ranks: %s", what,
                            kn_place_str(p, pb, sizeof pb), kn_type_str(global, b1, sizeof b1), s->o->parts,
                            kn_last_error());
    } else {
        want = n->type;
    }
    if (kn_op_get(n->op)->category != KN_CAT_SOURCE) {
        const kn_type *in[KN_MAX_OPERANDS];
        for (int k = 0; k < n->nin; k++) in[k] = &ng->nodes[n->in[k]].type;
        char msg[256];
        kn_type t;
        if (kn_node_infer(n, in, &t, msg, sizeof msg) != KN_OK)
            return kn_error(KN_ERR_SHAPE, "kn_place_graph: %s, localized as %s: %s", what,
                            kn_place_str(p, pb, sizeof pb), msg);
        if (role != KN_PLACE_ROLE_STEP && !kn_type_equal(&t, &want))
            return kn_error(KN_ERR_SHAPE, "kn_place_graph: %s, localized as %s: makes %s, its placement says %s", what,
                            kn_place_str(p, pb, sizeof pb), kn_type_str(&t, b1, sizeof b1),
                            kn_type_str(&want, b2, sizeof b2));
        n->type = t;
    } else {
        n->type = want;
    }
    if (ng->nnodes >= s->cap_info) {
        int cap = s->cap_info ? 2 * s->cap_info : 256;
        kn_place_info *ni = realloc(s->r->info, (size_t)cap * sizeof *ni);
        if (!ni) return kn_error(KN_ERR_OOM, "kn_place_graph: out of memory");
        s->r->info = ni, s->cap_info = cap;
    }
    kn_status st = kn_graph_add_node(ng, n, id);
    if (st != KN_OK) return st;
    s->r->info[*id] = (kn_place_info){p, role == KN_PLACE_ROLE_STEP ? n->type : *global, role, from};
    return KN_OK;
}

static kn_node mk(kn_op op, int nin, const int32_t *in, int32_t scope) {
    kn_node n;
    memset(&n, 0, sizeof n);
    n.op = op;
    n.nin = nin;
    for (int k = 0; k < nin; k++) n.in[k] = in[k];
    n.attrs = kn_attrs_default();
    n.scope = scope;
    return n;
}

static kn_status add_conv(place_state *s, int32_t src, kn_placement p, int32_t id) {
    if (s->nconv >= s->cap_conv) {
        int cap = s->cap_conv ? 2 * s->cap_conv : 64;
        conv_entry *c = realloc(s->conv, (size_t)cap * sizeof *c);
        if (!c) return kn_error(KN_ERR_OOM, "kn_place_graph: out of memory");
        s->conv = c, s->cap_conv = cap;
    }
    s->conv[s->nconv++] = (conv_entry){src, p, id};
    return KN_OK;
}

static int32_t find_conv(const place_state *s, int32_t src, kn_placement p) {
    for (int i = s->nconv - 1; i >= 0; i--)
        if (s->conv[i].src == src && kn_place_equal(s->conv[i].p, p)) return s->conv[i].id;
    return -1;
}

static kn_status convert(place_state *s, int32_t v, kn_placement to, const char *what, int32_t *out);

/* A value collective over the axis: op with the axis attribute d (or none). */
static kn_status collective(place_state *s, kn_op op, int32_t v, int d, kn_placement p, kn_place_role role,
                            const char *what, int32_t *id) {
    kn_node n = mk(op, 1, &v, s->r->local->nodes[v].scope);
    n.attrs.mesh = s->o->mesh;
    n.attrs.parts = s->o->parts;
    if (d >= 0) n.attrs.axis = d;
    kn_place_info src = s->r->info[v];
    return emit(s, &n, p, &src.global, role, v, what, id);
}

/* R -> S(d,k): rank r's block of each of the k segments of dim d, concatenated. */
static kn_status slice_blocks(place_state *s, int32_t v, kn_placement to, const char *what, int32_t *out) {
    kn_place_info src = s->r->info[v];
    int d = to.dim, k = to.blocks, N = s->o->parts, r = s->o->rank;
    int64_t seg = src.global.shape[d] / k, b = seg / N;
    int32_t acc = -1;
    for (int j = 0; j < k; j++) {
        kn_node n = mk(KN_OP_SLICE, 1, &v, s->r->local->nodes[v].scope);
        n.attrs.axis = d, n.attrs.start = j * seg + r * b, n.attrs.stop = j * seg + (r + 1) * b;
        int32_t id;
        bool last = j == k - 1 && k == 1;
        kn_status st = emit(s, &n, to, &src.global, last ? KN_PLACE_ROLE_CONV : KN_PLACE_ROLE_STEP, v, what, &id);
        if (st != KN_OK) return st;
        if (acc < 0) { acc = id; continue; }
        int32_t two[2] = {acc, id};
        kn_node c = mk(KN_OP_CONCAT, 2, two, n.scope);
        c.attrs.axis = d;
        st = emit(s, &c, to, &src.global, j == k - 1 ? KN_PLACE_ROLE_CONV : KN_PLACE_ROLE_STEP, v, what, &acc);
        if (st != KN_OK) return st;
    }
    s->r->local_slices++;
    *out = acc;
    return KN_OK;
}

/* S(d,k) -> R: gather along d, then (k > 1) put the segments back in order: the gathered
 * dim holds, rank by rank, that rank's block of each segment. */
static kn_status gather(place_state *s, int32_t v, const char *what, int32_t *out) {
    kn_place_info src = s->r->info[v];
    int d = src.p.dim, k = src.p.blocks, N = s->o->parts;
    int32_t g;
    kn_status st = collective(s, KN_OP_ALL_GATHER, v, d, kn_place_replicate(),
                              k == 1 ? KN_PLACE_ROLE_CONV : KN_PLACE_ROLE_STEP, what, &g);
    if (st != KN_OK) return st;
    s->r->all_gather++;
    if (k == 1) { *out = g; return KN_OK; }
    int64_t b = src.global.shape[d] / k / N;
    int32_t acc = -1;
    for (int j = 0; j < k; j++)
        for (int q = 0; q < N; q++) {
            kn_node n = mk(KN_OP_SLICE, 1, &g, s->r->local->nodes[v].scope);
            n.attrs.axis = d, n.attrs.start = ((int64_t)q * k + j) * b, n.attrs.stop = n.attrs.start + b;
            int32_t id;
            if ((st = emit(s, &n, kn_place_replicate(), &src.global, KN_PLACE_ROLE_STEP, v, what, &id)) != KN_OK)
                return st;
            if (acc < 0) { acc = id; continue; }
            int32_t two[2] = {acc, id};
            kn_node c = mk(KN_OP_CONCAT, 2, two, n.scope);
            c.attrs.axis = d;
            bool last = j == k - 1 && q == N - 1;
            if ((st = emit(s, &c, kn_place_replicate(), &src.global, last ? KN_PLACE_ROLE_CONV : KN_PLACE_ROLE_STEP,
                           v, what, &acc)) != KN_OK)
                return st;
        }
    *out = acc;
    return KN_OK;
}

static kn_status convert(place_state *s, int32_t v, kn_placement to, const char *what, int32_t *out) {
    kn_placement from = s->r->info[v].p;
    if (kn_place_equal(from, to)) { *out = v; return KN_OK; }
    int32_t c = find_conv(s, v, to);
    if (c >= 0) { *out = c; return KN_OK; }
    char b1[24], b2[24];
    kn_status st;
    if (to.kind == KN_PLACE_PARTIAL)
        return kn_error(KN_ERR_INTERNAL, "kn_place_graph: %s: no conversion %s -> P", what,
                        kn_place_str(from, b1, sizeof b1));
    if (from.kind == KN_PLACE_PARTIAL && to.kind == KN_PLACE_REPLICATE) {
        st = collective(s, KN_OP_ALL_REDUCE, v, -1, to, KN_PLACE_ROLE_CONV, what, &c);
        s->r->all_reduce++;
    } else if (from.kind == KN_PLACE_PARTIAL && to.blocks == 1) {
        st = collective(s, KN_OP_REDUCE_SCATTER, v, to.dim, to, KN_PLACE_ROLE_CONV, what, &c);
        s->r->reduce_scatter++;
    } else if (from.kind == KN_PLACE_SHARD && to.kind == KN_PLACE_REPLICATE) {
        st = gather(s, v, what, &c);
    } else if (from.kind == KN_PLACE_REPLICATE) {
        st = slice_blocks(s, v, to, what, &c);
    } else { /* through R */
        int32_t rv;
        if ((st = convert(s, v, kn_place_replicate(), what, &rv)) != KN_OK) return st;
        st = convert(s, rv, to, what, &c);
    }
    if (st != KN_OK) return st;
    (void)b2;
    *out = c;
    return add_conv(s, v, to, c);
}

/* The node's shape-carrying attributes for its local operands and type. */
static void localize_attrs(const kn_node *gn, const kn_type *gin0, kn_placement in0, kn_placement outp,
                           const kn_type *lt, int parts, kn_attrs *a) {
    switch ((int)gn->op) {
    case KN_OP_RESHAPE: case KN_OP_BROADCAST_TO: case KN_OP_EMBEDDING_GRAD: case KN_OP_ONEHOT:
        a->nshape = lt->ndim;
        for (int i = 0; i < lt->ndim; i++) a->shape[i] = lt->shape[i];
        break;
    case KN_OP_SLICE: {
        int nd = gin0->ndim;
        int64_t ax = a->axis < 0 ? a->axis + nd : a->axis;
        if (in0.kind == KN_PLACE_SHARD && in0.dim == ax) {
            int64_t seg = gin0->shape[ax] / in0.blocks, st = a->start < 0 ? a->start + gin0->shape[ax] : a->start;
            int64_t j = st / seg, lseg = seg / parts;
            a->start = j * lseg, a->stop = (j + 1) * lseg;
        }
        break;
    }
    case KN_OP_SLICE_GRAD: {
        int nd = gn->type.ndim;
        int64_t ax = a->axis < 0 ? a->axis + nd : a->axis;
        if (outp.kind == KN_PLACE_SHARD && outp.dim == ax) {
            int64_t len = gin0->shape[ax], st = a->start < 0 ? a->start + gn->type.shape[ax] : a->start;
            int64_t j = st / len, l = len / parts;
            a->start = j * l, a->stop = (j + 1) * l;
        }
        a->nshape = lt->ndim;
        for (int i = 0; i < lt->ndim; i++) a->shape[i] = lt->shape[i];
        break;
    }
    default: break;
    }
}

static kn_status param_place(const kn_place_opts *o, const char *name, kn_placement *p) {
    return o->param ? o->param(o->param_ctx, name, p) : kn_place_gpt_param(name, p);
}

/* The placement output i must end in. */
static kn_status output_place(const kn_graph *g, const kn_place_opts *o, int i, kn_placement *p) {
    if (o->outputs) { *p = o->outputs[i]; return KN_OK; }
    if (i == 0) { *p = kn_place_replicate(); return KN_OK; }
    int seen = 0;
    for (int j = 0; j < g->nnodes; j++)
        if (g->nodes[j].op == KN_OP_PARAM && ++seen == i) return param_place(o, g->nodes[j].attrs.name, p);
    return kn_error(KN_ERR_ARG, "kn_place: output %d has no parameter (the graph has %d): pass opts->outputs", i, seen);
}

static kn_status check_opts(const kn_graph *g, const kn_place_opts *o, const char *fn) {
    if (!g || !o) return kn_error(KN_ERR_ARG, "%s: NULL graph or options", fn);
    if (o->parts < 1 || o->rank < 0 || o->rank >= o->parts || o->mesh < 0)
        return kn_error(KN_ERR_ARG, "%s: rank %d of %d ranks on mesh axis %d: out of range", fn, o->rank, o->parts,
                        o->mesh);
    return KN_OK;
}

static const char *node_name(const kn_graph *g, int32_t i, char *buf, size_t size) {
    snprintf(buf, size, "%%%d = %s", (int)i, kn_op_name(g->nodes[i].op));
    return buf;
}

kn_status kn_place_graph(const kn_graph *g, const kn_place_opts *o, kn_place_result *out) {
    if (!out) return kn_error(KN_ERR_ARG, "kn_place_graph: NULL result");
    memset(out, 0, sizeof *out);
    kn_status st = check_opts(g, o, "kn_place_graph");
    if (st != KN_OK) return st;
    if ((st = kn_graph_verify(g)) != KN_OK) return st;
    place_state s = {.g = g, .o = o, .r = out};
    int32_t *map = malloc(((size_t)g->nnodes + 1) * sizeof *map);
    if (!map) return kn_error(KN_ERR_OOM, "kn_place_graph: out of memory");
    if ((st = kn_graph_new(&out->local)) != KN_OK) goto done;
    char what[96], pb[24], tb[96];
    for (int32_t i = 0; i < g->nnodes && st == KN_OK; i++) {
        const kn_node *gn = &g->nodes[i];
        node_name(g, i, what, sizeof what);
        kn_node n = *gn;
        if (kn_op_get(gn->op)->category == KN_CAT_COLLECTIVE) {
            st = kn_error(KN_ERR_UNSUPPORTED, "kn_place_graph: %s: the graph already has collectives", what);
            break;
        }
        if (gn->op == KN_OP_PARAM) {
            kn_placement p;
            if ((st = param_place(o, gn->attrs.name, &p)) != KN_OK) break;
            if (local_type(&gn->type, p, o->parts, &n.type) != KN_OK) {
                st = kn_error(KN_ERR_SHAPE, "kn_place_graph: parameter %s %s placed %s: %s", gn->attrs.name,
                              kn_type_str(&gn->type, tb, sizeof tb), kn_place_str(p, pb, sizeof pb),
                              kn_last_error());
                break;
            }
            st = emit(&s, &n, p, &gn->type, KN_PLACE_ROLE_NODE, i, what, &map[i]);
            continue;
        }
        const kn_type *gin[KN_MAX_OPERANDS];
        kn_placement have[KN_MAX_OPERANDS], want[KN_MAX_OPERANDS], outp;
        bool ready[KN_MAX_OPERANDS];
        for (int k = 0; k < gn->nin; k++) {
            gin[k] = &g->nodes[gn->in[k]].type;
            have[k] = out->info[map[gn->in[k]]].p;
            ready[k] = find_conv(&s, map[gn->in[k]], kn_place_replicate()) >= 0;
        }
        if ((st = kn_place_rule(gn, gin, have, ready, o->parts, want, &outp)) != KN_OK) break;
        for (int k = 0; k < gn->nin && st == KN_OK; k++) st = convert(&s, map[gn->in[k]], want[k], what, &n.in[k]);
        if (st != KN_OK) break;
        if (gn->op == KN_OP_FULL || gn->op == KN_OP_INPUT) {
            st = emit(&s, &n, outp, &gn->type, KN_PLACE_ROLE_NODE, i, what, &map[i]);
            continue;
        }
        kn_type lt;
        if (local_type(&gn->type, outp, o->parts, &lt) != KN_OK) {
            st = kn_error(KN_ERR_SHAPE, "kn_place_graph: %s: result %s cannot be %s over %d ranks", what,
                          kn_type_str(&gn->type, tb, sizeof tb), kn_place_str(outp, pb, sizeof pb), o->parts);
            break;
        }
        localize_attrs(gn, gn->nin ? gin[0] : NULL, gn->nin ? want[0] : kn_place_replicate(), outp, &lt, o->parts,
                       &n.attrs);
        st = emit(&s, &n, outp, &gn->type, KN_PLACE_ROLE_NODE, i, what, &map[i]);
    }
    for (int i = 0; i < g->noutputs && st == KN_OK; i++) {
        kn_placement p;
        int32_t id;
        snprintf(what, sizeof what, "output %d (%%%d)", i, (int)g->outputs[i]);
        if ((st = output_place(g, o, i, &p)) != KN_OK) break;
        if ((st = convert(&s, map[g->outputs[i]], p, what, &id)) != KN_OK) break;
        st = kn_graph_add_output(out->local, id);
    }
    if (st == KN_OK && (st = kn_graph_verify(out->local)) != KN_OK)
        st = kn_error(st, "kn_place_graph: the local graph does not verify: %s", kn_last_error());
    if (st == KN_OK) st = kn_place_check(g, out, o);
done:
    free(map);
    free(s.conv);
    if (st != KN_OK) kn_place_result_free(out);
    return st;
}

/* ---------------------------------------------------------------- the verifier */

static kn_status bad(const kn_graph *l, int32_t i, const char *fmt, const char *a, const char *b) {
    char nb[64];
    return kn_error(KN_ERR_INTERNAL, "kn_place_check: %s: %s%s%s", node_name(l, i, nb, sizeof nb), fmt, a ? a : "",
                    b ? b : "");
}

kn_status kn_place_check(const kn_graph *g, const kn_place_result *r, const kn_place_opts *o) {
    kn_status st = check_opts(g, o, "kn_place_check");
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
        if (local_type(&f->global, f->p, o->parts, &lt) != KN_OK || !kn_type_equal(&lt, &n->type))
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
        if (f->from < 0 || f->from >= g->nnodes || g->nodes[f->from].op != n->op)
            return bad(l, i, "not a node of the input graph", NULL, NULL);
        const kn_node *gn = &g->nodes[f->from];
        if (!kn_type_equal(&gn->type, &f->global)) return bad(l, i, "its global type is not its input node's", NULL, NULL);
        if (n->op == KN_OP_PARAM) {
            kn_placement p;
            if ((st = param_place(o, n->attrs.name, &p)) != KN_OK) return st;
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
        if ((st = kn_place_rule(gn, gin, have, NULL, o->parts, want, &outp)) != KN_OK) return st;
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
        if ((st = output_place(g, o, i, &p)) != KN_OK) return st;
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
            const char *role = in->role == KN_PLACE_ROLE_NODE ? "" : in->role == KN_PLACE_ROLE_CONV ? "  inserted" : "  inserted (step)";
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
