/* autocast.c — mixed precision as a pass: autocast:bf16 or autocast:fp16 (kiln/passes.h).
 *
 * Low precision pays where the arithmetic is: a matrix product reads and writes half the
 * bytes and, on a GPU, runs on tensor cores. It costs where values are summed or
 * normalized. One table, kn_autocast_policy, says per op which it is (LOW: matrix
 * products; F32: reductions, norms, softmaxes, the loss and their backwards; KEEP:
 * elementwise ops and views follow their operands), and kn_autocast_decide says, node
 * by node in order, what the node's dtype becomes and which operands need a low copy
 * made right after them. Both are lab 09's unit (labs/lab09-precision/autocast.c);
 * this file parses the argument and rebuilds the graph from the decisions.
 *
 * Only f32 computations change (f64 stays f64; an op with an f64 operand is left alone).
 * Inputs and parameters stay as they are: the master weights remain f32 in the slab, and
 * the low-precision copy a product reads is a cast made at the start of the step, right
 * after its parameter (once per step; the pass lowparams below makes it a param that the
 * optimizer writes in its update instead).
 * Every graph output keeps its dtype (gradients come out in f32, cast up where they were
 * computed low), so a trainer sees the same program interface. The casts the pass inserts
 * are elementwise nodes: the fusion scheduler folds each into the kernel that makes or
 * reads its value (a layernorm's row kernel stores its bf16 copy too), so they cost no
 * extra pass over memory except for the weights'.
 *
 * The pass plans first (the unit: the dtype of every value after the pass, which nodes
 * read their operands in the low dtype, which values get their low copy early), then
 * rebuilds the graph once in order, one cast per (value, dtype). Where a cast stands decides what it fuses with, since the scheduler grows
 * groups in definition order and seals a group once an outside node reads it: a cast
 * down stands right after its value (a weight's right after its param, so at the start
 * of the step), and joins the kernel that computes the value, which stores both; a cast
 * up stands right before its first reader, whose kernel then takes it in. A cast stays a
 * kernel of its own only next to a library step (a matmul's result, cross-entropy's),
 * which has no epilogue to take it yet. */
#include <string.h>

#include "kiln/passes.h"

kn_status kn_autocast_parse(const char *text, kn_dtype *out) {
    if (!out) return kn_error(KN_ERR_ARG, "autocast: NULL dtype");
    if (!text) return kn_error(KN_ERR_ARG, "autocast needs a dtype: autocast:bf16 or autocast:fp16");
    if (!strcmp(text, "bf16")) { *out = KN_DT_BF16; return KN_OK; }
    if (!strcmp(text, "fp16") || !strcmp(text, "f16")) { *out = KN_DT_F16; return KN_OK; }
    return kn_error(KN_ERR_ARG, "autocast: unknown dtype '%s' (autocast:bf16 or autocast:fp16)", text);
}

kn_status kn_autocast_check_arg(const char *arg) {
    kn_dtype dt;
    return kn_autocast_parse(arg, &dt);
}

typedef struct ac_plan {
    kn_graph *g;        /* the graph being rewritten (borrowed) */
    kn_graph *out;      /* the new graph */
    kn_dtype low;
    kn_dtype *dt;       /* per old node: its dtype after the pass */
    bool *reads_low;    /* per old node: reads its float operands in the low dtype */
    bool *early;        /* per old source: a low copy is made right after it */
    int32_t *newid;     /* per old node: its id in out */
    int32_t *as_low;    /* per old node: out's id of its value in the low dtype, or -1 */
    int32_t *as_orig;   /* per old node: out's id of its value in its original dtype, or -1 */
    kn_pass_stats *st;
} ac_plan;

static kn_status emit(ac_plan *p, const kn_node *n, int32_t *id) { return kn_graph_add_node(p->out, n, id); }

/* out's id of old value v in dtype want (a cast, or a low `full`, made once). */
static kn_status value_as(ac_plan *p, int32_t v, kn_dtype want, int32_t *id) {
    const kn_node *src = &p->g->nodes[v];
    if (p->dt[v] == want || !kn_dtype_is_float(src->type.dtype)) { *id = p->newid[v]; return KN_OK; }
    int32_t *memo = want == p->low ? &p->as_low[v] : want == src->type.dtype ? &p->as_orig[v] : NULL;
    KN_CHECK(memo != NULL);
    if (*memo >= 0) { *id = *memo; return KN_OK; }
    kn_node c = {.op = KN_OP_CAST, .nin = 1, .in = {p->newid[v]}, .type = src->type, .attrs = kn_attrs_default(),
                 .scope = src->scope};
    if (src->op == KN_OP_FULL) { /* the constant itself in the dtype: no cast to run */
        c = *src;
    } else {
        c.attrs.dtype = want;
        kn_pass_stats_fire(p->st, "casts", 1);
    }
    c.type.dtype = want;
    KN_TRY(emit(p, &c, memo));
    *id = *memo;
    return KN_OK;
}

static kn_status rebuild(ac_plan *p) {
    kn_graph *g = p->g;
    for (int32_t i = 0; i < g->nnodes; i++) {
        kn_node nd = g->nodes[i];
        for (int k = 0; k < nd.nin; k++) {
            int32_t v = nd.in[k];
            kn_dtype want = p->reads_low[i] && kn_dtype_is_float(g->nodes[v].type.dtype) ? p->low
                            : nd.op == KN_OP_CAST ? p->dt[v] : g->nodes[v].type.dtype;
            KN_TRY(value_as(p, v, want, &nd.in[k]));
        }
        nd.type.dtype = p->dt[i];
        if (nd.op == KN_OP_CAST && p->out->nodes[nd.in[0]].type.dtype == nd.attrs.dtype) { /* now a no-op */
            p->newid[i] = nd.in[0];
            continue;
        }
        KN_TRY(emit(p, &nd, &p->newid[i]));
        if (p->reads_low[i]) kn_pass_stats_fire(p->st, "low", 1);
        if (p->early[i]) { /* the low copy, right after its value: see the file comment */
            int32_t id;
            KN_TRY(value_as(p, i, p->low, &id));
        }
    }
    for (int i = 0; i < g->noutputs; i++) {
        int32_t v = g->outputs[i], id;
        KN_TRY(value_as(p, v, g->nodes[v].type.dtype, &id));
        KN_TRY(kn_graph_add_output(p->out, id));
    }
    return KN_OK;
}

/* The arguments of a pass that takes a low dtype (autocast, lowparams). */
static kn_status low_pass_args(const char *pass, const kn_graph *g, kn_dtype low) {
    if (!g) return kn_error(KN_ERR_ARG, "%s: NULL graph", pass);
    if (low != KN_DT_BF16 && low != KN_DT_F16)
        return kn_error(KN_ERR_ARG, "%s: the low dtype must be bf16 or f16 (got %s)", pass, kn_dtype_name(low));
    return KN_OK;
}

/* A rebuilt graph out replaces g when s is KN_OK (the arrays swap; the old ones go with
 * out's shell); out is freed either way. */
static kn_status adopt(kn_graph *g, kn_graph *out, kn_status s) {
    if (s == KN_OK) {
        kn_graph tmp = *g;
        *g = *out;
        *out = tmp;
    }
    kn_graph_free(out);
    return s;
}

/* Whether node n takes lab 09's decision (true for most nodes), or keeps its own dtype.
 * Two kinds keep theirs:
 * - flash_attn(_bwd) is a product, LOW in the policy, but it goes low only in bf16 and at
 *   the head dims the GPU's bf16 tensor-core kernels take (core/runtime/cuda_flash_tc.cu:
 *   64, 128), so a program that runs on the CPU also runs on a GPU (f16 and other head
 *   dims keep the f32 kernels). Low, its y holds O and the logsumexp L in bf16: the
 *   backward's P = exp(s - L) then carries a relative error up to |L| 2^-9 per row, the
 *   same factor across the row (a per-row scale of dq, dk, dv of well under 1% at GPT-2's
 *   T = 1024, not a change of direction).
 * - the cuBLASLt epilogue products (matmul_bias, matmul_bias_gelu, matmul_dgelu,
 *   matmul_bgrad) come from the epilogue pass, which runs after autocast and takes
 *   autocast's casts into the products themselves; should autocast run after it, they
 *   stay as they are. */
static bool follows_policy(const ac_plan *p, const kn_node *n) {
    if (n->op == KN_OP_MATMUL_BIAS || n->op == KN_OP_MATMUL_BIAS_GELU || n->op == KN_OP_MATMUL_DGELU ||
        n->op == KN_OP_MATMUL_BGRAD)
        return false;
    if (n->op != KN_OP_FLASH_ATTN && n->op != KN_OP_FLASH_ATTN_BWD) return true;
    const kn_type *q = &p->g->nodes[n->in[0]].type;
    return p->low == KN_DT_BF16 && q->ndim >= 2 && kn_flash_tc_kernel(KN_FLASH_TC_BF16, (int)q->shape[q->ndim - 1]);
}

/* Node i decided by lab 09's unit, unless it does not follow the policy (above): then it
 * keeps its dtype, and its operands' early copies are as they were before. */
static kn_status decide(ac_plan *p, int32_t i) {
    const kn_node *n = &p->g->nodes[i];
    bool was[KN_MAX_OPERANDS];
    for (int k = 0; k < n->nin; k++) was[k] = p->early[n->in[k]];
    KN_TRY(kn_autocast_decide(p->g, i, p->low, p->dt, p->reads_low, p->early));
    if (follows_policy(p, n)) return KN_OK;
    p->dt[i] = n->type.dtype;
    p->reads_low[i] = false;
    for (int k = 0; k < n->nin; k++) p->early[n->in[k]] = was[k];
    return KN_OK;
}

kn_status kn_autocast(kn_graph *g, kn_dtype low, kn_pass_stats *st) {
    KN_TRY(low_pass_args("autocast", g, low));
    size_t n = (size_t)g->nnodes + 1;
    ac_plan p = {.g = g, .low = low, .st = st};
    p.dt = kn_malloc(n * sizeof *p.dt);
    p.reads_low = kn_calloc(n, sizeof *p.reads_low);
    p.early = kn_calloc(n, sizeof *p.early);
    p.newid = kn_malloc(n * sizeof *p.newid);
    p.as_low = kn_malloc(n * sizeof *p.as_low);
    p.as_orig = kn_malloc(n * sizeof *p.as_orig);
    kn_status s = p.dt && p.reads_low && p.early && p.newid && p.as_low && p.as_orig
                      ? kn_graph_new(&p.out) : kn_error(KN_ERR_OOM, "autocast: out of memory");
    if (s == KN_OK) {
        for (int32_t i = 0; i < g->nnodes; i++) p.as_low[i] = p.as_orig[i] = -1;
        for (int32_t i = 0; i < g->nnodes && s == KN_OK; i++) s = decide(&p, i);
        if (s == KN_OK) s = rebuild(&p);
    }
    s = adopt(g, p.out, s);
    kn_free(p.dt);
    kn_free(p.reads_low);
    kn_free(p.early);
    kn_free(p.newid);
    kn_free(p.as_low);
    kn_free(p.as_orig);
    return s;
}

kn_status kn_pass_autocast(kn_graph *g, kn_pass_stats *st) {
    kn_dtype low;
    KN_TRY(kn_autocast_parse(st && st->arg[0] ? st->arg : NULL, &low));
    return kn_autocast(g, low, st);
}

/* ---------------------------------------------------------------- lowparams
 * After autocast, every weight a low product reads is cast(param), or cast(view chain of
 * a param) (attention's q, k and v slices of the fused weight), made inside the step: one
 * more pass over the f32 weights, and the copies are activations of the step. lowparams
 * makes each such copy a param of its own, "NAME@bf16", which the optimizer writes in its
 * update (kn_optim_step_low) and the trainer binds: the view chain is redone on the low
 * param (views move elements, not bits), the casts and the f32 views they read go. */

kn_status kn_lowparam_name(const char *name, kn_dtype low, char *out) {
    if (!name || !out) return kn_error(KN_ERR_ARG, "kn_lowparam_name: NULL argument");
    if (low != KN_DT_BF16 && low != KN_DT_F16)
        return kn_error(KN_ERR_ARG, "kn_lowparam_name: %s is not bf16 or f16", kn_dtype_name(low));
    int w = snprintf(out, KN_NAME_MAX, "%s@%s", name, kn_dtype_name(low));
    if (w < 0 || w >= KN_NAME_MAX)
        return kn_error(KN_ERR_ARG, "lowparams: param name '%s@%s' is longer than %d characters", name,
                        kn_dtype_name(low), KN_NAME_MAX - 1);
    return KN_OK;
}

/* A param, or a view (one operand) of a value that is: the chain lowparams redoes in low. */
static bool param_chain(const kn_graph *g, int32_t v) {
    for (;;) {
        const kn_node *n = &g->nodes[v];
        if (n->op == KN_OP_PARAM) return n->type.dtype == KN_DT_F32;
        if (kn_op_get(n->op)->category != KN_CAT_VIEW || n->nin != 1) return false;
        v = n->in[0];
    }
}

typedef struct lp_state {
    const kn_graph *g;
    kn_graph *out;
    kn_dtype low;
    int32_t *newid, *lowid; /* per old node: its id in out; its low twin's (-1: none yet) */
    kn_pass_stats *st;
} lp_state;

/* out's id of param chain v redone in the low dtype (made once per value). */
static kn_status low_twin(lp_state *s, int32_t v, int32_t *id) {
    if (s->lowid[v] >= 0) { *id = s->lowid[v]; return KN_OK; }
    kn_node n = s->g->nodes[v];
    n.type.dtype = s->low;
    if (n.op == KN_OP_PARAM) {
        KN_TRY(kn_lowparam_name(s->g->nodes[v].attrs.name, s->low, n.attrs.name));
        kn_pass_stats_fire(s->st, "params", 1);
    } else {
        KN_TRY(low_twin(s, n.in[0], &n.in[0]));
    }
    KN_TRY(kn_graph_add_node(s->out, &n, &s->lowid[v]));
    *id = s->lowid[v];
    return KN_OK;
}

static kn_status lowparams_rebuild(lp_state *s) {
    const kn_graph *g = s->g;
    for (int32_t i = 0; i < g->nnodes; i++) {
        kn_node n = g->nodes[i];
        if (n.op == KN_OP_CAST && n.attrs.dtype == s->low && param_chain(g, n.in[0])) {
            KN_TRY(low_twin(s, n.in[0], &s->newid[i]));
            kn_pass_stats_fire(s->st, "casts", 1);
            continue;
        }
        for (int k = 0; k < n.nin; k++) n.in[k] = s->newid[n.in[k]];
        KN_TRY(kn_graph_add_node(s->out, &n, &s->newid[i]));
    }
    for (int i = 0; i < g->noutputs; i++) KN_TRY(kn_graph_add_output(s->out, s->newid[g->outputs[i]]));
    return KN_OK;
}

/* Drop the views that nothing reads any more (the f32 chains the casts read), last first. */
static kn_status drop_dead_views(kn_graph *g) {
    int32_t *uses = kn_malloc((size_t)(g->nnodes + 1) * sizeof *uses);
    bool *keep = kn_malloc((size_t)(g->nnodes + 1) * sizeof *keep);
    kn_status st = uses && keep ? KN_OK : kn_error(KN_ERR_OOM, "lowparams: out of memory");
    if (st == KN_OK) {
        kn_graph_uses(g, uses);
        for (int32_t i = g->nnodes - 1; i >= 0; i--) {
            const kn_node *n = &g->nodes[i];
            keep[i] = uses[i] > 0 || kn_op_get(n->op)->category != KN_CAT_VIEW;
            if (!keep[i])
                for (int k = 0; k < n->nin; k++) uses[n->in[k]]--;
        }
        st = kn_graph_compact(g, NULL, keep);
    }
    kn_free(uses);
    kn_free(keep);
    return st;
}

kn_status kn_lowparams(kn_graph *g, kn_dtype low, kn_pass_stats *st) {
    KN_TRY(low_pass_args("lowparams", g, low));
    size_t n = (size_t)g->nnodes + 1;
    lp_state s = {.g = g, .low = low, .st = st};
    s.newid = kn_malloc(n * sizeof *s.newid);
    s.lowid = kn_malloc(n * sizeof *s.lowid);
    kn_status r = s.newid && s.lowid ? kn_graph_new(&s.out) : kn_error(KN_ERR_OOM, "lowparams: out of memory");
    if (r == KN_OK) {
        for (int32_t i = 0; i < g->nnodes; i++) s.lowid[i] = -1;
        r = lowparams_rebuild(&s);
    }
    if (r == KN_OK) r = drop_dead_views(s.out);
    r = adopt(g, s.out, r);
    kn_free(s.newid);
    kn_free(s.lowid);
    return r;
}

kn_status kn_lowparams_check_arg(const char *arg) {
    kn_dtype dt;
    if (kn_autocast_parse(arg, &dt) != KN_OK)
        return kn_error(KN_ERR_ARG, "lowparams needs a dtype: lowparams:bf16 or lowparams:fp16 (got '%s')",
                        arg ? arg : "");
    return KN_OK;
}

kn_status kn_pass_lowparams(kn_graph *g, kn_pass_stats *st) {
    kn_dtype low;
    KN_TRY(kn_autocast_parse(st && st->arg[0] ? st->arg : NULL, &low));
    return kn_lowparams(g, low, st);
}

/* ---------------------------------------------------------------- lowloss
 * After autocast, the loss reads the logits cast up to f32 and its backward makes an f32
 * gradient that is cast down at once for the products: at B = 8, T = 1024 and GPT-2's
 * vocabulary each of those is 1.6 GB, both alive at the backward, the step's largest live
 * set. The loss's kernels read 16-bit logits themselves (widening in registers, as the
 * cast does: exact) and its backward rounds once where it stores (as the cast down does),
 * so: cross_entropy(cast_f32(x)) -> cross_entropy(x) (an f32 loss), and
 * cast_low(cross_entropy_bwd(d, cast_f32(x), t)) -> cross_entropy_bwd(d, x, t) in the low
 * dtype, when only casts to x's dtype read that gradient. Bit for bit the same values on
 * the CPU; a GPU's loss kernel reads 16-bit rows in groups of 8 (not 4 floats), so it
 * sums a row in another order: equal within rounding. */

/* v's 16-bit operand when v is a cast up to f32 of one, else -1. */
static int32_t low_source(const kn_graph *g, int32_t v) {
    const kn_node *n = &g->nodes[v];
    if (n->op != KN_OP_CAST || n->type.dtype != KN_DT_F32) return -1;
    kn_dtype d = g->nodes[n->in[0]].type.dtype;
    return d == KN_DT_BF16 || d == KN_DT_F16 ? n->in[0] : -1;
}

/* Whether every reader of v is a cast to dt and no output is v. */
static bool only_cast_to(const kn_graph *g, int32_t v, kn_dtype dt) {
    for (int i = 0; i < g->noutputs; i++)
        if (g->outputs[i] == v) return false;
    int readers = 0;
    for (int32_t j = v + 1; j < g->nnodes; j++)
        for (int k = 0; k < g->nodes[j].nin; k++)
            if (g->nodes[j].in[k] == v) {
                if (g->nodes[j].op != KN_OP_CAST || g->nodes[j].type.dtype != dt) return false;
                readers++;
            }
    return readers > 0;
}

kn_status kn_pass_lowloss(kn_graph *g, kn_pass_stats *st) {
    if (!g) return kn_error(KN_ERR_ARG, "lowloss: NULL graph");
    size_t n = (size_t)g->nnodes + 1;
    int32_t *repl = kn_malloc(n * sizeof *repl), *uses = kn_malloc(n * sizeof *uses);
    bool *keep = kn_malloc(n * sizeof *keep);
    kn_status s = repl && uses && keep ? KN_OK : kn_error(KN_ERR_OOM, "lowloss: out of memory");
    for (int32_t i = 0; s == KN_OK && i < g->nnodes; i++) repl[i] = i;
    for (int32_t i = 0; s == KN_OK && i < g->nnodes; i++) {
        kn_node *nd = &g->nodes[i];
        int32_t x;
        if (nd->op == KN_OP_CROSS_ENTROPY && (x = low_source(g, nd->in[0])) >= 0) {
            nd->in[0] = x; /* the loss stays f32 */
            kn_pass_stats_fire(st, "loss", 1);
        } else if (nd->op == KN_OP_CROSS_ENTROPY_BWD && (x = low_source(g, nd->in[1])) >= 0 &&
                   only_cast_to(g, i, g->nodes[x].type.dtype)) {
            nd->in[1] = x;
            nd->type.dtype = g->nodes[x].type.dtype;
            for (int32_t j = i + 1; j < g->nnodes; j++) /* the casts down become the gradient itself */
                if (g->nodes[j].op == KN_OP_CAST && g->nodes[j].in[0] == i) repl[j] = i;
            kn_pass_stats_fire(st, "loss_bwd", 1);
        }
    }
    if (s == KN_OK) { /* the casts up that nothing reads any more go */
        kn_graph_uses(g, uses);
        for (int32_t i = 0; i < g->nnodes; i++)
            keep[i] = repl[i] != i || uses[i] > 0 || g->nodes[i].op != KN_OP_CAST;
        s = kn_graph_compact(g, repl, keep);
    }
    kn_free(repl);
    kn_free(uses);
    kn_free(keep);
    return s;
}
