/* randgraph.c — random graphs for testing passes: "does this rewrite keep the numbers?"
 * asked of hundreds of graphs nobody wrote by hand.
 *
 * A graph grows one node at a time from a pool of values. Each step either draws a plain
 * random op (elementwise with broadcasting, reduction, matmul, view, softmax, cast,
 * dropout, a constant) or, with probability o->plant percent, plants a pattern a pass
 * should rewrite: x*1, x+0, neg(neg x), a second copy of an existing node, a view chain
 * (reshape of a reshape, a permutation and its inverse, broadcast of a broadcast), a
 * constant subgraph, an explicit broadcast_to operand, exact and inexact cast pairs.
 * Operands are drawn mostly from the newest values, so chains get deep; values left out
 * of the outputs are dead code. Every candidate node is type-checked (kn_node_infer)
 * before it is added, and one that does not fit is simply not added. The result is
 * verified before it is returned.
 *
 * Fusion and later passes reuse it: the generator only uses the public IR, and its
 * sequence of draws is a pure function of the seed (Philox). */
#include <string.h>

#include "kiln/passes.h"
#include "ir/ir_impl.h"

typedef struct rg {
    kn_graph *g;
    kn_rng r;
    kn_randgraph_opts o;
    int ninputs;
    kn_status st;
} rg;

static uint32_t rnd(rg *s, uint32_t n) { return n ? kn_rng_u32(&s->r) % n : 0; }

kn_randgraph_opts kn_randgraph_defaults(void) {
    return (kn_randgraph_opts){.nodes = 24, .max_dim = 4, .max_ndim = 3, .noutputs = 2, .dtype = KN_DT_F64, .plant = 35};
}

static void random_type(rg *s, kn_type *t) {
    memset(t, 0, sizeof *t);
    t->dtype = s->o.dtype;
    t->ndim = (int)rnd(s, (uint32_t)s->o.max_ndim + 1);
    for (int d = 0; d < t->ndim; d++) t->shape[d] = 1 + rnd(s, (uint32_t)s->o.max_dim);
}

/* Add node n (type inferred unless it is a source); -1 when it does not type-check. */
static int32_t add(rg *s, kn_node *n) {
    if (s->st != KN_OK) return -1;
    const kn_op_info *info = kn_op_get(n->op);
    char msg[256];
    if (info->category != KN_CAT_SOURCE) {
        const kn_type *in[KN_MAX_OPERANDS];
        for (int k = 0; k < n->nin; k++) {
            if (n->in[k] < 0) return -1;
            in[k] = &s->g->nodes[n->in[k]].type;
        }
        if (kn_node_check_attrs(n, msg, sizeof msg) != KN_OK) return -1;
        if (kn_node_infer(n, in, &n->type, msg, sizeof msg) != KN_OK) return -1;
    }
    if (!kn_ir_type_ok(&n->type)) return -1;
    int32_t id;
    s->st = kn_graph_add_node(s->g, n, &id);
    return s->st == KN_OK ? id : -1;
}

static kn_node node_of(kn_op op, int nin, int32_t a, int32_t b) {
    kn_node n;
    memset(&n, 0, sizeof n);
    n.op = op;
    n.nin = nin;
    n.in[0] = a;
    n.in[1] = b;
    n.attrs = kn_attrs_default();
    n.scope = KN_SCOPE_NONE;
    return n;
}

static int32_t op1(rg *s, kn_op op, int32_t a) {
    kn_node n = node_of(op, 1, a, -1);
    return add(s, &n);
}
static int32_t op2(rg *s, kn_op op, int32_t a, int32_t b) {
    kn_node n = node_of(op, 2, a, b);
    return add(s, &n);
}

static int32_t source(rg *s, kn_op op, const kn_type *t, double value) {
    kn_node n = node_of(op, 0, -1, -1);
    n.type = *t;
    if (op == KN_OP_FULL) n.attrs.value = value;
    else snprintf(n.attrs.name, sizeof n.attrs.name, "%s%d", op == KN_OP_INPUT ? "x" : "w", s->ninputs++);
    return add(s, &n);
}

static int32_t full(rg *s, const kn_type *t, double v) { return source(s, KN_OP_FULL, t, v); }

/* A value of the pool: mostly one of the newest. Never an index or bool value. */
static int32_t pick(rg *s) {
    int n = s->g->nnodes;
    for (int tries = 0; tries < 16; tries++) {
        int32_t v = rnd(s, 10) < 7 ? n - 1 - (int32_t)rnd(s, n < 6 ? (uint32_t)n : 6u) : (int32_t)rnd(s, (uint32_t)n);
        if (s->g->nodes[v].type.dtype == s->o.dtype) return v;
    }
    kn_type t;
    random_type(s, &t);
    return source(s, KN_OP_INPUT, &t, 0);
}

static const kn_type *ty(rg *s, int32_t v) { return &s->g->nodes[v].type; }

/* A type x broadcasts with: drop leading axes, set some axes to 1. */
static kn_type broadcast_partner(rg *s, const kn_type *x) {
    kn_type t = *x;
    int drop = (int)rnd(s, (uint32_t)t.ndim + 1);
    t.ndim -= drop;
    memmove(t.shape, t.shape + drop, sizeof(int64_t) * (size_t)t.ndim);
    for (int d = 0; d < t.ndim; d++)
        if (rnd(s, 3) == 0) t.shape[d] = 1;
    return t;
}

/* A second operand for a binary op with a: a pool value of a broadcastable type, or a
 * fresh input, param or constant of one. */
static int32_t partner(rg *s, int32_t a) {
    for (int tries = 0; tries < 4; tries++) {
        int32_t b = pick(s);
        int nd;
        int64_t sh[KN_MAX_DIMS];
        if (ty(s, b)->dtype == ty(s, a)->dtype &&
            kn_ir_broadcast(ty(s, a)->ndim, ty(s, a)->shape, ty(s, b)->ndim, ty(s, b)->shape, &nd, sh))
            return b;
    }
    kn_type t = broadcast_partner(s, ty(s, a));
    switch (rnd(s, 3)) {
    case 0: return source(s, KN_OP_INPUT, &t, 0);
    case 1: return source(s, KN_OP_PARAM, &t, 0);
    default: return full(s, &t, (double)rnd(s, 5) * 0.5 - 1.0);
    }
}

static int32_t random_reshape(rg *s, int32_t a) {
    const kn_type *t = ty(s, a);
    kn_node n = node_of(KN_OP_RESHAPE, 1, a, -1);
    int64_t numel = kn_type_numel(t);
    switch (rnd(s, 3)) {
    case 0: /* flatten */
        n.attrs.nshape = 1;
        n.attrs.shape[0] = rnd(s, 2) ? numel : -1;
        break;
    case 1: /* add a unit axis somewhere */
        if (t->ndim >= KN_MAX_DIMS) return -1;
        n.attrs.nshape = t->ndim + 1;
        {
            int at = (int)rnd(s, (uint32_t)t->ndim + 1);
            for (int d = 0, j = 0; d < n.attrs.nshape; d++) n.attrs.shape[d] = d == at ? 1 : t->shape[j++];
        }
        break;
    default: /* merge the first two axes */
        if (t->ndim < 2) return -1;
        n.attrs.nshape = t->ndim - 1;
        n.attrs.shape[0] = t->shape[0] * t->shape[1];
        for (int d = 2; d < t->ndim; d++) n.attrs.shape[d - 1] = t->shape[d];
        break;
    }
    return add(s, &n);
}

static int32_t permute_by(rg *s, int32_t a, const int64_t *perm) {
    kn_node n = node_of(KN_OP_PERMUTE, 1, a, -1);
    n.attrs.nperm = ty(s, a)->ndim;
    memcpy(n.attrs.perm, perm, sizeof(int64_t) * (size_t)n.attrs.nperm);
    return add(s, &n);
}

static void random_perm(rg *s, int nd, int64_t *p) {
    for (int i = 0; i < nd; i++) p[i] = i;
    for (int i = nd - 1; i > 0; i--) {
        int j = (int)rnd(s, (uint32_t)i + 1);
        int64_t t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
}

static int32_t random_broadcast(rg *s, int32_t a) {
    const kn_type *t = ty(s, a);
    if (t->ndim >= KN_MAX_DIMS) return -1;
    kn_node n = node_of(KN_OP_BROADCAST_TO, 1, a, -1);
    int extra = t->ndim < s->o.max_ndim ? (int)rnd(s, 2) : 0;
    n.attrs.nshape = t->ndim + extra;
    for (int d = 0; d < extra; d++) n.attrs.shape[d] = 1 + rnd(s, (uint32_t)s->o.max_dim);
    for (int d = 0; d < t->ndim; d++)
        n.attrs.shape[extra + d] = t->shape[d] == 1 ? 1 + rnd(s, (uint32_t)s->o.max_dim) : t->shape[d];
    return add(s, &n);
}

static int32_t random_slice(rg *s, int32_t a) {
    const kn_type *t = ty(s, a);
    if (t->ndim == 0) return -1;
    kn_node n = node_of(KN_OP_SLICE, 1, a, -1);
    int ax = (int)rnd(s, (uint32_t)t->ndim);
    n.attrs.axis = rnd(s, 2) ? ax : ax - t->ndim;
    n.attrs.start = rnd(s, (uint32_t)t->shape[ax]);
    n.attrs.stop = n.attrs.start + 1 + rnd(s, (uint32_t)t->shape[ax]);
    n.attrs.step = 1 + rnd(s, 2);
    if (rnd(s, 4) == 0) { n.attrs.start = 0; n.attrs.stop = t->shape[ax]; n.attrs.step = 1; } /* all of it */
    return add(s, &n);
}

static int32_t random_reduce(rg *s, int32_t a) {
    static const kn_op ops[] = {KN_OP_SUM, KN_OP_MEAN, KN_OP_MAX};
    kn_node n = node_of(ops[rnd(s, 3)], 1, a, -1);
    const kn_type *t = ty(s, a);
    for (int d = 0; d < t->ndim; d++)
        if (rnd(s, 2)) n.attrs.axes[n.attrs.naxes++] = d;
    n.attrs.keepdim = rnd(s, 2);
    return add(s, &n);
}

static int32_t random_matmul(rg *s, int32_t a) {
    const kn_type *t = ty(s, a);
    if (t->ndim < 2) return -1;
    kn_node n = node_of(KN_OP_MATMUL, 2, a, -1);
    int64_t k = t->shape[t->ndim - 1], m = 1 + rnd(s, (uint32_t)s->o.max_dim);
    n.attrs.tb = rnd(s, 2);
    kn_type w = {s->o.dtype, 2, {n.attrs.tb ? m : k, n.attrs.tb ? k : m}};
    n.in[1] = source(s, rnd(s, 2) ? KN_OP_PARAM : KN_OP_INPUT, &w, 0);
    return add(s, &n);
}

/* One plain random op on the pool. */
static void plain(rg *s) {
    static const kn_op unary[] = {KN_OP_NEG, KN_OP_TANH, KN_OP_RELU, KN_OP_GELU};
    static const kn_op binary[] = {KN_OP_ADD, KN_OP_SUB, KN_OP_MUL, KN_OP_DIV};
    int32_t a = pick(s);
    switch (rnd(s, 13)) {
    case 0: case 1: op1(s, unary[rnd(s, 4)], a); break;
    case 2: op1(s, KN_OP_EXP, op1(s, KN_OP_TANH, a)); break;
    case 3: { /* a positive value's sqrt, rsqrt or log */
        static const kn_op pos[] = {KN_OP_SQRT, KN_OP_RSQRT, KN_OP_LOG};
        op1(s, pos[rnd(s, 3)], op1(s, KN_OP_EXP, op1(s, KN_OP_TANH, a)));
        break;
    }
    case 4: case 5: {
        kn_op op = binary[rnd(s, 4)];
        int32_t b = partner(s, a);
        /* keep divisions away from zero: divide by exp(tanh(b)) */
        if (op == KN_OP_DIV) b = op1(s, KN_OP_EXP, op1(s, KN_OP_TANH, b));
        if (rnd(s, 2)) op2(s, op, a, b); else op2(s, op, b, a);
        break;
    }
    case 6: random_reduce(s, a); break;
    case 7: random_matmul(s, a); break;
    case 8: {
        int32_t r = -1;
        switch (rnd(s, 4)) {
        case 0: r = random_reshape(s, a); break;
        case 1: { int64_t p[KN_MAX_DIMS]; random_perm(s, ty(s, a)->ndim, p); r = permute_by(s, a, p); break; }
        case 2: r = random_broadcast(s, a); break;
        default: r = random_slice(s, a); break;
        }
        (void)r;
        break;
    }
    case 9: {
        if (ty(s, a)->ndim == 0) break;
        kn_node n = node_of(rnd(s, 2) ? KN_OP_SOFTMAX : KN_OP_LOG_SOFTMAX, 1, a, -1);
        n.attrs.axis = -1 - (int64_t)rnd(s, (uint32_t)ty(s, a)->ndim);
        add(s, &n);
        break;
    }
    case 10: { /* f64 -> f32 -> f64 rounds: must survive every pass */
        kn_node c = node_of(KN_OP_CAST, 1, a, -1);
        c.attrs.dtype = s->o.dtype == KN_DT_F64 ? KN_DT_F32 : KN_DT_F64;
        int32_t m = add(s, &c);
        kn_node back = node_of(KN_OP_CAST, 1, m, -1);
        back.attrs.dtype = s->o.dtype;
        add(s, &back);
        break;
    }
    case 11: {
        kn_node n = node_of(KN_OP_DROPOUT, 1, a, -1);
        n.attrs.p = 0.25;
        n.attrs.seed = rnd(s, 3);
        n.attrs.offset = rnd(s, 2) * 7;
        add(s, &n);
        if (rnd(s, 2)) add(s, &n); /* the same dropout again: still two masks to cse */
        break;
    }
    default: {
        kn_type t;
        random_type(s, &t);
        source(s, rnd(s, 2) ? KN_OP_INPUT : KN_OP_PARAM, &t, 0);
        break;
    }
    }
}

/* Plant a pattern some pass rewrites. */
static void plant(rg *s) {
    int32_t a = pick(s);
    const kn_type *t = ty(s, a);
    kn_type sc = {s->o.dtype, 0, {0}};
    switch (rnd(s, 12)) {
    case 0: { /* x * 1, 1 * x, x / 1 with a scalar or same-shaped one */
        int32_t one = full(s, rnd(s, 2) ? &sc : t, 1.0);
        int w = (int)rnd(s, 3);
        if (w == 0) op2(s, KN_OP_MUL, a, one); else if (w == 1) op2(s, KN_OP_MUL, one, a); else op2(s, KN_OP_DIV, a, one);
        break;
    }
    case 1: { /* x + 0, 0 + x, x - 0 */
        int32_t zero = full(s, rnd(s, 2) ? &sc : t, rnd(s, 4) ? 0.0 : -0.0);
        int w = (int)rnd(s, 3);
        if (w == 0) op2(s, KN_OP_ADD, a, zero); else if (w == 1) op2(s, KN_OP_ADD, zero, a); else op2(s, KN_OP_SUB, a, zero);
        break;
    }
    case 2: op1(s, KN_OP_NEG, op1(s, KN_OP_NEG, a)); break;
    case 3: { /* a copy of an existing op node */
        for (int tries = 0; tries < 8; tries++) {
            int32_t v = (int32_t)rnd(s, (uint32_t)s->g->nnodes);
            kn_node n = s->g->nodes[v];
            if (kn_op_get(n.op)->category == KN_CAT_SOURCE && n.op != KN_OP_FULL) continue;
            add(s, &n);
            break;
        }
        break;
    }
    case 4: { /* reshape chain */
        int32_t r = random_reshape(s, a);
        if (r >= 0) random_reshape(s, r);
        break;
    }
    case 5: { /* a permutation, then its inverse or another one */
        int64_t p[KN_MAX_DIMS], q[KN_MAX_DIMS];
        random_perm(s, t->ndim, p);
        int nd = t->ndim;
        int32_t r = permute_by(s, a, p);
        if (rnd(s, 2)) for (int i = 0; i < nd; i++) q[p[i]] = i;
        else random_perm(s, nd, q);
        if (r >= 0) permute_by(s, r, q);
        break;
    }
    case 6: { /* broadcast chain, or broadcast of a constant */
        int32_t r = random_broadcast(s, rnd(s, 2) ? a : full(s, &sc, 0.5));
        if (r >= 0 && rnd(s, 2)) random_broadcast(s, r);
        break;
    }
    case 7: { /* a constant subgraph */
        kn_type ct;
        random_type(s, &ct);
        int32_t c = op1(s, KN_OP_EXP, full(s, &ct, 0.5));
        int32_t d = op2(s, KN_OP_MUL, c, full(s, &sc, 3.0));
        if (rnd(s, 2)) random_reduce(s, d);
        else op2(s, KN_OP_ADD, a, d);
        break;
    }
    case 8: { /* an explicit broadcast_to as an operand */
        int32_t b = partner(s, a);
        int nd;
        int64_t sh[KN_MAX_DIMS];
        if (!kn_ir_broadcast(ty(s, a)->ndim, ty(s, a)->shape, ty(s, b)->ndim, ty(s, b)->shape, &nd, sh)) break;
        kn_node n = node_of(KN_OP_BROADCAST_TO, 1, b, -1);
        n.attrs.nshape = nd;
        memcpy(n.attrs.shape, sh, sizeof sh);
        int32_t bb = add(s, &n);
        if (rnd(s, 2)) op2(s, KN_OP_MUL, a, bb); else op2(s, KN_OP_SUB, bb, a);
        break;
    }
    case 9: { /* exact casts: f64 of an f32 value, or a cast to its own dtype */
        kn_node c = node_of(KN_OP_CAST, 1, a, -1);
        c.attrs.dtype = rnd(s, 2) ? s->o.dtype : KN_DT_F32;
        int32_t m = add(s, &c);
        kn_node c2 = node_of(KN_OP_CAST, 1, m, -1);
        c2.attrs.dtype = KN_DT_F64;
        int32_t m2 = add(s, &c2);
        kn_node c3 = node_of(KN_OP_CAST, 1, m2, -1);
        c3.attrs.dtype = rnd(s, 2) ? KN_DT_F32 : s->o.dtype;
        int32_t m3 = add(s, &c3);
        if (m3 >= 0 && ty(s, m3)->dtype != s->o.dtype) {
            kn_node c4 = node_of(KN_OP_CAST, 1, m3, -1);
            c4.attrs.dtype = s->o.dtype;
            add(s, &c4);
        }
        break;
    }
    case 10: { /* view that changes nothing */
        kn_node n = node_of(rnd(s, 2) ? KN_OP_RESHAPE : KN_OP_BROADCAST_TO, 1, a, -1);
        n.attrs.nshape = t->ndim;
        memcpy(n.attrs.shape, t->shape, sizeof n.attrs.shape);
        add(s, &n);
        break;
    }
    default: { /* a permute that only moves unit axes */
        int32_t r = random_reshape(s, a);
        if (r < 0) break;
        int nd = ty(s, r)->ndim;
        int64_t p[KN_MAX_DIMS];
        random_perm(s, nd, p);
        permute_by(s, r, p);
        break;
    }
    }
}

kn_status kn_randgraph(kn_graph **out, uint64_t seed, const kn_randgraph_opts *o) {
    if (!out) return kn_error(KN_ERR_ARG, "kn_randgraph: NULL argument");
    rg s;
    memset(&s, 0, sizeof s);
    s.o = o ? *o : kn_randgraph_defaults();
    if (s.o.nodes < 1 || s.o.max_dim < 1 || s.o.max_ndim < 0 || s.o.max_ndim > KN_MAX_DIMS - 1 || s.o.noutputs < 1 ||
        !kn_dtype_is_float(s.o.dtype) || s.o.plant < 0 || s.o.plant > 100)
        return kn_error(KN_ERR_ARG, "kn_randgraph: bad options (nodes %d, max_dim %d, max_ndim %d, outputs %d, plant %d)",
                        s.o.nodes, s.o.max_dim, s.o.max_ndim, s.o.noutputs, s.o.plant);
    s.r = kn_rng_new(seed);
    KN_TRY(kn_graph_new(&s.g));
    kn_type t;
    for (int i = 0; i < 2; i++) {
        random_type(&s, &t);
        source(&s, i ? KN_OP_PARAM : KN_OP_INPUT, &t, 0);
    }
    int first_op = s.g->nnodes;
    for (int i = 0; i < s.o.nodes && s.st == KN_OK; i++) {
        if ((int)rnd(&s, 100) < s.o.plant) plant(&s);
        else plain(&s);
    }
    /* Outputs: the newest value of the graph's dtype, then random earlier ones (distinct). */
    for (int k = 0; k < s.o.noutputs && s.st == KN_OK; k++) {
        int32_t v = -1;
        for (int tries = 0; tries < 16 && v < 0; tries++) {
            int32_t c = k == 0 ? s.g->nnodes - 1 - tries : first_op + (int32_t)rnd(&s, (uint32_t)(s.g->nnodes - first_op));
            if (c < 0 || ty(&s, c)->dtype != s.o.dtype) continue;
            bool dup = false;
            for (int j = 0; j < s.g->noutputs; j++) dup |= s.g->outputs[j] == c;
            if (!dup) v = c;
        }
        if (v >= 0) s.st = kn_graph_add_output(s.g, v);
    }
    if (s.st == KN_OK && s.g->noutputs == 0) s.st = kn_graph_add_output(s.g, s.g->nnodes - 1);
    if (s.st == KN_OK) s.st = kn_graph_verify(s.g);
    if (s.st != KN_OK) {
        kn_graph_free(s.g);
        return s.st;
    }
    *out = s.g;
    return KN_OK;
}
