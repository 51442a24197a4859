/* lowsave.c — the `lowsave` pass: the backward keeps a 16-bit copy of a value that
 * autocast left in f32 but whose precision it does not need (kiln/passes.h).
 *
 * After autocast, a linear layer is matmul (bf16) -> cast up -> add bias (f32, because the
 * bias is an f32 param and "any f32 operand -> f32"). In the GPT's MLP that f32 sum, the
 * pre-activation, is read by gelu in the forward and by gelu_bwd in the backward, so it
 * stays alive from one to the other: [B*T, 4C] f32, 100 MB a layer at GPT-2 with B = 8,
 * T = 1024. PyTorch's autocast folds the bias into the 16-bit product, so what its gelu
 * saves is bf16: half of that.
 *
 * The rule. A forward value v (what output 0, the loss, depends on) gets a low copy when
 *   - v is f32 and not an output, made by an elementwise op that reads a 16-bit value cast
 *     up to f32 (a low product's result, most often): v carries that value's rounding
 *     already, and the copy takes that 16-bit dtype, so one more rounding is the same size
 *     of error again, which is what PyTorch's autocast gives (it rounds the product with
 *     its bias);
 *   - the backward reads v, and only through elementwise ops other than eq (gelu_bwd,
 *     relu_bwd, mul, ...): each gradient element then depends on its own element of v,
 *     so a rounding of v is a relative error of the dtype's unit roundoff in a local
 *     factor (gelu'(x)), not one that sums or cancels. A reduction's, a norm's or a
 *     softmax's backward (layernorm_dx, causal_softmax_bwd) keeps the f32 value, as
 *     autocast keeps those ops in f32; eq is left alone because an equality test is
 *     exactly what a rounding breaks.
 * In the GPT step with autocast that is the MLP's pre-activation of every layer and
 * nothing else (the residual stream is read by the layernorms' backward; the attention
 * probabilities by the softmax's). An f32 graph has no casts from 16 bits: the pass then
 * changes nothing, and so it needs no dtype argument.
 *
 * The rewrite, per such v: c = cast(v, low) right after v, so the kernel that computes v
 * stores the 16-bit copy and v itself dies in the forward ("Where a cast stands decides
 * what it fuses with", core/passes/NOTES.md); each backward reader r reads cast(c, f32) made
 * right before r, so the f32 copy lives only inside r's kernel. The forward's readers
 * still read v: the forward and the loss are bit for bit as before, only the gradients
 * move. Run it after autocast (and lowloss) and before epilogue and remat: remat then
 * recomputes or keeps the copy like any value, and epilogue's matmul_dgelu takes the
 * cast up as its pre-activation. */
#include "kiln/passes.h"

typedef struct ls_plan {
    const kn_graph *g;
    bool *fwd;      /* per node: in the forward */
    bool *bwd_ok;   /* per node: read by the backward, only through ops the rule allows */
    bool *bwd_bad;  /* per node: read by a backward op the rule does not allow */
    kn_dtype *save; /* per node: the dtype of its low copy, or its own dtype (none) */
    int32_t *map;   /* per node: its id in the new graph */
    int32_t *low;   /* per node: the new graph's id of its low copy, or -1 */
    kn_pass_stats *st;
} ls_plan;

/* The 16-bit dtype of the first operand of v that is a cast up to f32 of a 16-bit value,
 * else v's own dtype. */
static kn_dtype low_operand(const kn_graph *g, int32_t v) {
    const kn_node *n = &g->nodes[v];
    for (int k = 0; k < n->nin; k++) {
        const kn_node *c = &g->nodes[n->in[k]];
        kn_dtype src = c->nin == 1 ? g->nodes[c->in[0]].type.dtype : KN_DT_F32;
        if (c->op == KN_OP_CAST && c->type.dtype == KN_DT_F32 && (src == KN_DT_BF16 || src == KN_DT_F16)) return src;
    }
    return n->type.dtype;
}

/* A backward reader the rule allows: elementwise, not an equality test. */
static bool pointwise_reader(kn_op op) { return kn_op_get(op)->category == KN_CAT_ELEMENTWISE && op != KN_OP_EQ; }

/* fwd, bwd_ok, bwd_bad, then save: which values get a low copy, in which dtype. */
static void plan(ls_plan *p) {
    const kn_graph *g = p->g;
    kn_graph_forward(g, p->fwd);
    for (int32_t i = 0; i < g->nnodes; i++)
        for (int k = 0; !p->fwd[i] && k < g->nodes[i].nin; k++) {
            int32_t v = g->nodes[i].in[k];
            if (pointwise_reader(g->nodes[i].op)) p->bwd_ok[v] = true;
            else p->bwd_bad[v] = true;
        }
    for (int i = 0; i < g->noutputs; i++) p->bwd_bad[g->outputs[i]] = true; /* an output keeps its dtype */
    for (int32_t v = 0; v < g->nnodes; v++) {
        const kn_node *n = &g->nodes[v];
        p->save[v] = n->type.dtype;
        if (!p->fwd[v] || !p->bwd_ok[v] || p->bwd_bad[v] || n->type.dtype != KN_DT_F32 ||
            kn_op_get(n->op)->category != KN_CAT_ELEMENTWISE)
            continue;
        p->save[v] = low_operand(g, v);
    }
}

static kn_status cast_to(ls_plan *p, kn_graph *out, int32_t v, kn_dtype dt, int32_t scope, int32_t *id) {
    kn_attrs a = kn_attrs_default();
    a.dtype = dt;
    kn_pass_stats_fire(p->st, "casts", 1);
    return kn_graph_emit(out, "lowsave", KN_OP_CAST, 1, &v, &a, scope, id);
}

/* Node i into out: a backward reader of a saved value reads a cast up of its copy made
 * right before it (one per reader and value); a saved value gets its copy right after. */
static kn_status rebuild_node(ls_plan *p, kn_graph *out, int32_t i) {
    const kn_graph *g = p->g;
    kn_node n = g->nodes[i];
    int32_t up[KN_MAX_OPERANDS];
    for (int k = 0; k < n.nin; k++) {
        int32_t v = n.in[k];
        up[k] = p->map[v];
        if (p->fwd[i] || p->low[v] < 0) continue;
        int same = 0;
        while (same < k && n.in[same] != v) same++;
        if (same < k) up[k] = up[same];
        else KN_TRY(cast_to(p, out, p->low[v], g->nodes[v].type.dtype, n.scope, &up[k]));
    }
    for (int k = 0; k < n.nin; k++) n.in[k] = up[k];
    KN_TRY(kn_graph_add_node(out, &n, &p->map[i]));
    if (p->save[i] == g->nodes[i].type.dtype) return KN_OK;
    kn_pass_stats_fire(p->st, "saved", 1);
    return cast_to(p, out, p->map[i], p->save[i], n.scope, &p->low[i]);
}

kn_status kn_pass_lowsave(kn_graph *g, kn_pass_stats *st) {
    if (!g) return kn_error(KN_ERR_ARG, "lowsave: NULL graph");
    size_t n = (size_t)(g->nnodes ? g->nnodes : 1);
    ls_plan p = {.g = g, .st = st};
    p.fwd = kn_calloc(n, sizeof *p.fwd);
    p.bwd_ok = kn_calloc(n, sizeof *p.bwd_ok);
    p.bwd_bad = kn_calloc(n, sizeof *p.bwd_bad);
    p.save = kn_malloc(n * sizeof *p.save);
    p.low = kn_malloc(n * sizeof *p.low);
    kn_graph *out = NULL;
    kn_status s = p.fwd && p.bwd_ok && p.bwd_bad && p.save && p.low ? KN_OK
                                                                     : kn_error(KN_ERR_OOM, "lowsave: out of memory");
    if (s == KN_OK) s = kn_graph_rebuild_start(g, "lowsave", &out, &p.map);
    if (s == KN_OK) {
        plan(&p);
        for (int32_t i = 0; i < g->nnodes; i++) p.low[i] = -1;
        for (int32_t i = 0; i < g->nnodes && s == KN_OK; i++) s = rebuild_node(&p, out, i);
        s = kn_graph_take(g, out, p.map, s);
    }
    kn_free(p.fwd);
    kn_free(p.bwd_ok);
    kn_free(p.bwd_bad);
    kn_free(p.save);
    kn_free(p.low);
    return s;
}
