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

#include "passes/place_impl.h"

typedef struct conv_entry { int32_t src; kn_placement p; int32_t id; } conv_entry;

typedef struct place_state {
    const kn_graph *g;
    const kn_place_opts *o;
    kn_place_result *r;
    int cap_info;
    conv_entry *conv;
    int nconv, cap_conv;
    /* vocabulary parallelism's shared values: the mask and local ids of one index value, the
     * row statistics of one logits value */
    int32_t mask_of, mask, mask_ids;     /* idx (local id) -> mask f32 [...], clamped ids */
    int32_t stats_of, stats_m, stats_e, stats_s, stats_oh; /* logits -> m, e, s, one-hot */
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

kn_status kn_place_local_type(const kn_type *global, kn_placement p, int parts, kn_type *out) {
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
        if (kn_place_local_type(global, p, s->o->parts, &want) != KN_OK)
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

/* ---------------------------------------------------------------- vocabulary parallelism */

/* A local node of the expansion (its type inferred; role STEP unless given). */
static kn_status vstep(place_state *s, kn_op op, int nin, const int32_t *in, const kn_attrs *a, int32_t scope,
                       const char *what, int32_t *id) {
    kn_node n = mk(op, nin, in, scope);
    if (a) n.attrs = *a;
    kn_type none = {KN_DT_F32, 0, {0}};
    if (op == KN_OP_FULL) n.type = none;
    return emit(s, &n, kn_place_replicate(), &none, KN_PLACE_ROLE_STEP, -1, what, id);
}

static kn_status vfull(place_state *s, double v, int32_t scope, const char *what, int32_t *id) {
    kn_attrs a = kn_attrs_default();
    a.value = v;
    return vstep(s, KN_OP_FULL, 0, NULL, &a, scope, what, id);
}

static kn_status vunary(place_state *s, kn_op op, int32_t x, int32_t scope, const char *what, int32_t *id) {
    return vstep(s, op, 1, &x, NULL, scope, what, id);
}

static kn_status vbin(place_state *s, kn_op op, int32_t x, int32_t y, int32_t scope, const char *what, int32_t *id) {
    int32_t in[2] = {x, y};
    return vstep(s, op, 2, in, NULL, scope, what, id);
}

static kn_status vcast(place_state *s, int32_t x, kn_dtype dt, int32_t scope, const char *what, int32_t *id) {
    kn_attrs a = kn_attrs_default();
    a.dtype = dt;
    return vstep(s, KN_OP_CAST, 1, &x, &a, scope, what, id);
}

static kn_status vreshape(place_state *s, int32_t x, int nd, const int64_t *shape, int32_t scope, const char *what,
                          int32_t *id) {
    kn_attrs a = kn_attrs_default();
    a.nshape = nd;
    memcpy(a.shape, shape, (size_t)nd * sizeof *shape);
    return vstep(s, KN_OP_RESHAPE, 1, &x, &a, scope, what, id);
}

/* The rank's view of index value idx (local id, R, over a vocabulary of V): *mask (f32, 1
 * where lo <= id < hi, else 0) and *ids (the id - lo clamped to [0, Vl), idx's dtype).
 * Exact: ids are integers below 2^24 in f32, and
 *   below = relu(-(id - lo)), above = relu((id - lo) - (Vl - 1)),
 *   mask = relu(1 - below) * relu(1 - above), clamped = (id - lo) + below - above. */
static kn_status vocab_ids(place_state *s, int32_t idx, int64_t V, int32_t sc, const char *what, int32_t *mask,
                           int32_t *ids) {
    if (s->mask_of == idx) { *mask = s->mask, *ids = s->mask_ids; return KN_OK; }
    int64_t Vl = V / s->o->parts, lo = (int64_t)s->o->rank * Vl;
    int32_t f, lo_c, top_c, one, tl, neg, below, over, above, a, b, m, c1, c2, ci;
    kn_dtype idt = s->r->local->nodes[idx].type.dtype;
    KN_TRY(vcast(s, idx, KN_DT_F32, sc, what, &f));
    KN_TRY(vfull(s, (double)lo, sc, what, &lo_c));
    KN_TRY(vfull(s, (double)(Vl - 1), sc, what, &top_c));
    KN_TRY(vfull(s, 1.0, sc, what, &one));
    KN_TRY(vbin(s, KN_OP_SUB, f, lo_c, sc, what, &tl));
    KN_TRY(vunary(s, KN_OP_NEG, tl, sc, what, &neg));
    KN_TRY(vunary(s, KN_OP_RELU, neg, sc, what, &below));
    KN_TRY(vbin(s, KN_OP_SUB, tl, top_c, sc, what, &over));
    KN_TRY(vunary(s, KN_OP_RELU, over, sc, what, &above));
    KN_TRY(vbin(s, KN_OP_SUB, one, below, sc, what, &a));
    KN_TRY(vunary(s, KN_OP_RELU, a, sc, what, &a));
    KN_TRY(vbin(s, KN_OP_SUB, one, above, sc, what, &b));
    KN_TRY(vunary(s, KN_OP_RELU, b, sc, what, &b));
    KN_TRY(vbin(s, KN_OP_MUL, a, b, sc, what, &m));
    KN_TRY(vbin(s, KN_OP_ADD, tl, below, sc, what, &c1));
    KN_TRY(vbin(s, KN_OP_SUB, c1, above, sc, what, &c2));
    KN_TRY(vcast(s, c2, idt, sc, what, &ci));
    s->mask_of = idx, s->mask = m, s->mask_ids = ci;
    *mask = m, *ids = ci;
    return KN_OK;
}

/* mask [...] as [..., 1], to scale rows of [..., D]. */
static kn_status mask_col(place_state *s, int32_t mask, int32_t sc, const char *what, int32_t *out) {
    const kn_type *t = &s->r->local->nodes[mask].type;
    int64_t sh[KN_MAX_DIMS];
    memcpy(sh, t->shape, (size_t)t->ndim * sizeof *sh);
    sh[t->ndim] = 1;
    return vreshape(s, mask, t->ndim + 1, sh, sc, what, out);
}

/* Emit the last node of an expansion of input node i with placement p (role EXPAND). */
static kn_status vlast(place_state *s, kn_op op, int nin, const int32_t *in, const kn_attrs *a, const kn_node *gn,
                       int32_t i, kn_placement p, const char *what, int32_t *id) {
    kn_node n = mk(op, nin, in, gn->scope);
    if (a) n.attrs = *a;
    return emit(s, &n, p, &gn->type, KN_PLACE_ROLE_EXPAND, i, what, id);
}

/* The row statistics of 2-D logits x (local [rows, Vl], S(1)) with targets t: m (the row max,
 * R [rows, 1]), e = exp(x - m) [rows, Vl], s = sum of e over the vocabulary (R [rows, 1]),
 * and oh, the rank's part of the targets' one-hot, f32 [rows, Vl] (masked). */
static kn_status vocab_stats(place_state *s, int32_t x, int32_t t, int64_t V, int32_t sc, const char *what) {
    if (s->stats_of == x) return KN_OK;
    const kn_type *xt = &s->r->local->nodes[x].type;
    int64_t rows = xt->shape[0], Vl = xt->shape[1];
    kn_attrs red = kn_attrs_default();
    red.naxes = 1, red.axes[0] = 1, red.keepdim = 1;
    int32_t mloc, mg, m, xs, e, sl, sg, mask, ids, col, oh, ohf, ohm;
    KN_TRY(vstep(s, KN_OP_MAX, 1, &x, &red, sc, what, &mloc));
    kn_node g = mk(KN_OP_ALL_GATHER, 1, &mloc, sc);
    g.attrs.mesh = s->o->mesh, g.attrs.parts = s->o->parts, g.attrs.axis = 1;
    kn_type none = {KN_DT_F32, 0, {0}};
    KN_TRY(emit(s, &g, kn_place_replicate(), &none, KN_PLACE_ROLE_STEP, -1, what, &mg));
    s->r->all_gather++;
    KN_TRY(vstep(s, KN_OP_MAX, 1, &mg, &red, sc, what, &m));
    KN_TRY(vbin(s, KN_OP_SUB, x, m, sc, what, &xs));
    KN_TRY(vunary(s, KN_OP_EXP, xs, sc, what, &e));
    KN_TRY(vstep(s, KN_OP_SUM, 1, &e, &red, sc, what, &sl));
    kn_node ar = mk(KN_OP_ALL_REDUCE, 1, &sl, sc);
    ar.attrs.mesh = s->o->mesh, ar.attrs.parts = s->o->parts;
    KN_TRY(emit(s, &ar, kn_place_replicate(), &none, KN_PLACE_ROLE_STEP, -1, what, &sg));
    s->r->all_reduce++;
    KN_TRY(vocab_ids(s, t, V, sc, what, &mask, &ids));
    int64_t sh[2] = {rows, 1};
    KN_TRY(vreshape(s, ids, 2, sh, sc, what, &col));
    kn_attrs oa = kn_attrs_default();
    oa.nshape = 2, oa.shape[0] = rows, oa.shape[1] = Vl;
    KN_TRY(vstep(s, KN_OP_ONEHOT, 1, &col, &oa, sc, what, &oh));
    KN_TRY(vcast(s, oh, KN_DT_F32, sc, what, &ohf));
    KN_TRY(mask_col(s, mask, sc, what, &col));
    KN_TRY(vbin(s, KN_OP_MUL, ohf, col, sc, what, &ohm));
    s->stats_of = x, s->stats_m = m, s->stats_e = e, s->stats_s = sg, s->stats_oh = ohm;
    (void)xs;
    return KN_OK;
}

/* Input node i's vocabulary-parallel expansion, when its operands (local ids in[]) arrive
 * placed for one (*done false otherwise: the rules decide). */
static kn_status expand_vocab(place_state *s, const kn_node *gn, int32_t i, const int32_t *in, const char *what,
                              bool *done, int32_t *id) {
    *done = false;
    const kn_place_info *f = s->r->info;
    int N = s->o->parts;
    if (N == 1) return KN_OK;
    int32_t sc = gn->scope, mask, ids, col, t;
    switch ((int)gn->op) {
    case KN_OP_EMBEDDING: { /* (w [V, D] S(0), idx R) -> P */
        if (!kn_place_equal(f[in[0]].p, kn_place_shard(0)) || f[in[1]].p.kind != KN_PLACE_REPLICATE) return KN_OK;
        KN_TRY(vocab_ids(s, in[1], f[in[0]].global.shape[0], sc, what, &mask, &ids));
        int32_t e, two[2] = {in[0], ids};
        KN_TRY(vstep(s, KN_OP_EMBEDDING, 2, two, NULL, sc, what, &e));
        KN_TRY(mask_col(s, mask, sc, what, &col));
        int32_t mul[2] = {e, col};
        *done = true;
        return vlast(s, KN_OP_MUL, 2, mul, NULL, gn, i, kn_place_partial(), what, id);
    }
    case KN_OP_EMBEDDING_GRAD: { /* (dy R, idx R) {shape=[V, D]} -> S(0) */
        if (f[in[0]].p.kind != KN_PLACE_REPLICATE || f[in[1]].p.kind != KN_PLACE_REPLICATE ||
            gn->attrs.shape[0] % N != 0)
            return KN_OK;
        KN_TRY(vocab_ids(s, in[1], gn->attrs.shape[0], sc, what, &mask, &ids));
        int32_t dym;
        KN_TRY(mask_col(s, mask, sc, what, &col));
        KN_TRY(vbin(s, KN_OP_MUL, in[0], col, sc, what, &dym));
        kn_attrs a = gn->attrs;
        a.shape[0] /= N;
        int32_t two[2] = {dym, ids};
        *done = true;
        return vlast(s, KN_OP_EMBEDDING_GRAD, 2, two, &a, gn, i, kn_place_shard(0), what, id);
    }
    case KN_OP_CROSS_ENTROPY:      /* (x [rows, V] S(1), t [rows] R) -> R */
    case KN_OP_CROSS_ENTROPY_BWD: { /* (dl R, x S(1), t R) -> S(1) */
        bool bwd = gn->op == KN_OP_CROSS_ENTROPY_BWD;
        int32_t x = in[bwd], tg = in[bwd + 1];
        if (!kn_place_equal(f[x].p, kn_place_shard(1)) || f[x].global.ndim != 2 || f[x].global.dtype != KN_DT_F32 ||
            f[tg].p.kind != KN_PLACE_REPLICATE || f[tg].global.ndim != 1 || (bwd && f[in[0]].p.kind != KN_PLACE_REPLICATE))
            return KN_OK;
        int64_t V = f[x].global.shape[1], rows = f[x].global.shape[0];
        KN_TRY(vocab_stats(s, x, tg, V, sc, what));
        kn_attrs red = kn_attrs_default();
        red.naxes = 1, red.axes[0] = 1;
        *done = true;
        if (!bwd) { /* mean over rows of log s - (x_t - m) */
            int32_t xs, xt, xtl, xtg, ls, lsr, d;
            KN_TRY(vbin(s, KN_OP_SUB, x, s->stats_m, sc, what, &xs));
            KN_TRY(vbin(s, KN_OP_MUL, xs, s->stats_oh, sc, what, &xt));
            KN_TRY(vstep(s, KN_OP_SUM, 1, &xt, &red, sc, what, &xtl));
            kn_node ar = mk(KN_OP_ALL_REDUCE, 1, &xtl, sc);
            ar.attrs.mesh = s->o->mesh, ar.attrs.parts = N;
            kn_type none = {KN_DT_F32, 0, {0}};
            KN_TRY(emit(s, &ar, kn_place_replicate(), &none, KN_PLACE_ROLE_STEP, -1, what, &xtg));
            s->r->all_reduce++;
            KN_TRY(vunary(s, KN_OP_LOG, s->stats_s, sc, what, &ls));
            KN_TRY(vreshape(s, ls, 1, &rows, sc, what, &lsr));
            KN_TRY(vbin(s, KN_OP_SUB, lsr, xtg, sc, what, &d));
            kn_attrs all = kn_attrs_default();
            return vlast(s, KN_OP_MEAN, 1, &d, &all, gn, i, kn_place_replicate(), what, id);
        }
        /* dl / rows * (e / s - onehot) */
        int32_t p, d, inv, g;
        KN_TRY(vbin(s, KN_OP_DIV, s->stats_e, s->stats_s, sc, what, &p));
        KN_TRY(vbin(s, KN_OP_SUB, p, s->stats_oh, sc, what, &d));
        KN_TRY(vfull(s, 1.0 / (double)rows, sc, what, &inv));
        KN_TRY(vbin(s, KN_OP_MUL, in[0], inv, sc, what, &g));
        int32_t two[2] = {d, g};
        (void)t;
        return vlast(s, KN_OP_MUL, 2, two, NULL, gn, i, kn_place_shard(1), what, id);
    }
    default: return KN_OK;
    }
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

kn_status kn_place_param_of(const kn_place_opts *o, const char *name, kn_placement *p) {
    return o->param ? o->param(o->param_ctx, name, p) : kn_place_gpt_param(name, p);
}

/* The placement output i must end in. */
kn_status kn_place_output_of(const kn_graph *g, const kn_place_opts *o, int i, kn_placement *p) {
    if (o->outputs) { *p = o->outputs[i]; return KN_OK; }
    if (i == 0) { *p = kn_place_replicate(); return KN_OK; }
    int seen = 0;
    for (int j = 0; j < g->nnodes; j++)
        if (g->nodes[j].op == KN_OP_PARAM && ++seen == i) return kn_place_param_of(o, g->nodes[j].attrs.name, p);
    return kn_error(KN_ERR_ARG, "kn_place: output %d has no parameter (the graph has %d): pass opts->outputs", i, seen);
}

kn_status kn_place_check_opts(const kn_graph *g, const kn_place_opts *o, const char *fn) {
    if (!g || !o) return kn_error(KN_ERR_ARG, "%s: NULL graph or options", fn);
    if (o->parts < 1 || o->rank < 0 || o->rank >= o->parts || o->mesh < 0)
        return kn_error(KN_ERR_ARG, "%s: rank %d of %d ranks on mesh axis %d: out of range", fn, o->rank, o->parts,
                        o->mesh);
    return KN_OK;
}

const char *kn_place_node_name(const kn_graph *g, int32_t i, char *buf, size_t size) {
    snprintf(buf, size, "%%%d = %s", (int)i, kn_op_name(g->nodes[i].op));
    return buf;
}

kn_status kn_place_graph(const kn_graph *g, const kn_place_opts *o, kn_place_result *out) {
    if (!out) return kn_error(KN_ERR_ARG, "kn_place_graph: NULL result");
    memset(out, 0, sizeof *out);
    kn_status st = kn_place_check_opts(g, o, "kn_place_graph");
    if (st != KN_OK) return st;
    if ((st = kn_graph_verify(g)) != KN_OK) return st;
    place_state s = {.g = g, .o = o, .r = out, .mask_of = -1, .stats_of = -1};
    int32_t *map = malloc(((size_t)g->nnodes + 1) * sizeof *map);
    if (!map) return kn_error(KN_ERR_OOM, "kn_place_graph: out of memory");
    if ((st = kn_graph_new(&out->local)) != KN_OK) goto done;
    char what[96], pb[24], tb[96];
    for (int32_t i = 0; i < g->nnodes && st == KN_OK; i++) {
        const kn_node *gn = &g->nodes[i];
        kn_place_node_name(g, i, what, sizeof what);
        kn_node n = *gn;
        if (kn_op_get(gn->op)->category == KN_CAT_COLLECTIVE) {
            st = kn_error(KN_ERR_UNSUPPORTED, "kn_place_graph: %s: the graph already has collectives", what);
            break;
        }
        if (gn->op == KN_OP_PARAM) {
            kn_placement p;
            if ((st = kn_place_param_of(o, gn->attrs.name, &p)) != KN_OK) break;
            if (kn_place_local_type(&gn->type, p, o->parts, &n.type) != KN_OK) {
                st = kn_error(KN_ERR_SHAPE, "kn_place_graph: parameter %s %s placed %s: %s", gn->attrs.name,
                              kn_type_str(&gn->type, tb, sizeof tb), kn_place_str(p, pb, sizeof pb),
                              kn_last_error());
                break;
            }
            st = emit(&s, &n, p, &gn->type, KN_PLACE_ROLE_NODE, i, what, &map[i]);
            continue;
        }
        int32_t lin[KN_MAX_OPERANDS];
        bool done = false;
        for (int k = 0; k < gn->nin; k++) lin[k] = map[gn->in[k]];
        if ((st = expand_vocab(&s, gn, i, lin, what, &done, &map[i])) != KN_OK || done) continue;
        const kn_type *gin[KN_MAX_OPERANDS];
        kn_placement have[KN_MAX_OPERANDS], want[KN_MAX_OPERANDS], outp;
        bool ready[KN_MAX_OPERANDS];
        for (int k = 0; k < gn->nin; k++) {
            gin[k] = &g->nodes[gn->in[k]].type;
            have[k] = out->info[map[gn->in[k]]].p;
            ready[k] = find_conv(&s, map[gn->in[k]], kn_place_replicate()) >= 0;
        }
        if ((st = kn_place_rule(gn, gin, have, ready, o->parts, o->flags, want, &outp)) != KN_OK) break;
        for (int k = 0; k < gn->nin && st == KN_OK; k++) st = convert(&s, map[gn->in[k]], want[k], what, &n.in[k]);
        if (st != KN_OK) break;
        if (gn->op == KN_OP_FULL || gn->op == KN_OP_INPUT) {
            st = emit(&s, &n, outp, &gn->type, KN_PLACE_ROLE_NODE, i, what, &map[i]);
            continue;
        }
        kn_type lt;
        if (kn_place_local_type(&gn->type, outp, o->parts, &lt) != KN_OK) {
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
        if ((st = kn_place_output_of(g, o, i, &p)) != KN_OK) break;
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

