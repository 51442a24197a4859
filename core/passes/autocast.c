/* autocast.c — mixed precision as a pass: autocast:bf16 or autocast:fp16 (kiln/passes.h).
 *
 * Low precision pays where the arithmetic is: a matrix product reads and writes half the
 * bytes and, on a GPU, runs on tensor cores. It costs where values are summed or
 * normalized: a sum of many bf16 terms loses the small ones, a softmax or a layernorm
 * amplifies an error in its input, the loss is a small difference of large logs. So one
 * table, kn_autocast_policy, says per op which it is:
 *
 *   LOW    matrix products (the model's linear layers and both attention products, and
 *          their backwards): operands cast to the low dtype, the result in the low dtype
 *          (the CPU kernels and a GPU's accumulate in f32 and round once, on store);
 *   F32    reductions, norms, softmaxes, the loss and their backwards: operands cast back
 *          to f32;
 *   KEEP   elementwise ops and views: follow their operands. All float operands low (a
 *          `full` constant does not count: it is made in the low dtype too) -> low; any
 *          of them f32 -> f32, the low ones cast up, as PyTorch promotes bf16 with f32.
 *
 * Only f32 computations change (f64 stays f64; an op with an f64 operand is left alone).
 * Inputs and parameters stay as they are: the master weights remain f32 in the slab, and
 * the low-precision copy a product reads is a cast made at the start of the step, right
 * after its parameter (once per step; a fused optimizer could write it instead).
 * Every graph output keeps its dtype (gradients come out in f32, cast up where they were
 * computed low), so a trainer sees the same program interface. The casts the pass inserts
 * are elementwise nodes: the fusion scheduler folds each into the kernel that makes or
 * reads its value (a layernorm's row kernel stores its bf16 copy too), so they cost no
 * extra pass over memory except for the weights'.
 *
 * The pass plans first (the dtype of every value after the pass, and which operands are
 * read in the low dtype), then rebuilds the graph once in order, one cast per (value,
 * dtype). Where a cast stands decides what it fuses with, since the scheduler grows
 * groups in definition order and seals a group once an outside node reads it: a cast
 * down stands right after its value (a weight's right after its param, so at the start
 * of the step), and joins the kernel that computes the value, which stores both; a cast
 * up stands right before its first reader, whose kernel then takes it in. A cast stays a
 * kernel of its own only next to a library step (a matmul's result, cross-entropy's),
 * which has no epilogue to take it yet. */
#include <string.h>

#include "kiln/passes.h"

/* kn:region autocast-policy */
kn_autocast_class kn_autocast_policy(kn_op op) {
    switch (op) {
    case KN_OP_MATMUL:
        return KN_AUTOCAST_LOW;
    case KN_OP_SUM: case KN_OP_MEAN: case KN_OP_MAX:
    case KN_OP_SOFTMAX: case KN_OP_SOFTMAX_BWD: case KN_OP_LOG_SOFTMAX: case KN_OP_LOG_SOFTMAX_BWD:
    case KN_OP_CAUSAL_SOFTMAX: case KN_OP_CAUSAL_SOFTMAX_BWD:
    case KN_OP_LAYERNORM: case KN_OP_LAYERNORM_DX: case KN_OP_NORMALIZE:
    case KN_OP_CROSS_ENTROPY: case KN_OP_CROSS_ENTROPY_BWD:
    case KN_OP_EMBEDDING_GRAD: /* a scatter-add: a sum per row of the table */
    case KN_OP_FLASH_ATTN: case KN_OP_FLASH_ATTN_BWD: /* its kernels are f32/f64 (a bf16 one on tensor cores is to come) */
        return KN_AUTOCAST_F32;
    case KN_OP_INPUT: case KN_OP_PARAM: case KN_OP_FULL:
    case KN_OP_ADD: case KN_OP_SUB: case KN_OP_MUL: case KN_OP_DIV: case KN_OP_EQ: case KN_OP_WHERE:
    case KN_OP_NEG: case KN_OP_EXP: case KN_OP_LOG: case KN_OP_SQRT: case KN_OP_RSQRT: case KN_OP_TANH:
    case KN_OP_GELU: case KN_OP_RELU: case KN_OP_GELU_BWD: case KN_OP_RELU_BWD: case KN_OP_CAST:
    case KN_OP_DROPOUT: case KN_OP_CAUSAL_FILL: case KN_OP_ONEHOT:
    case KN_OP_RESHAPE: case KN_OP_PERMUTE: case KN_OP_BROADCAST_TO: case KN_OP_SLICE: case KN_OP_SLICE_GRAD:
    case KN_OP_EMBEDDING:
        return KN_AUTOCAST_KEEP;
    case KN_OP_COUNT:
        break;
    }
    return KN_AUTOCAST_KEEP;
}
/* kn:endregion autocast-policy */

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

static bool is_f32ish(kn_dtype d, kn_dtype low) { return d == KN_DT_F32 || d == low; }

/* Decide node i: its dtype after the pass and whether it reads its float operands low. */
static void plan_node(ac_plan *p, int32_t i) {
    const kn_node *n = &p->g->nodes[i];
    kn_dtype t = n->type.dtype;
    p->dt[i] = t;
    p->reads_low[i] = false;
    if (n->nin == 0 || n->op == KN_OP_CAST) return;
    bool all_low = true, any = false, eligible = t == KN_DT_F32 || t == KN_DT_BOOL;
    for (int k = 0; k < n->nin; k++) {
        const kn_node *a = &p->g->nodes[n->in[k]];
        if (!kn_dtype_is_float(a->type.dtype)) continue;
        if (!is_f32ish(a->type.dtype, p->low)) eligible = false;
        if (a->op == KN_OP_FULL) continue; /* a constant is made in whatever dtype its reader needs */
        any = true;
        all_low &= p->dt[n->in[k]] == p->low;
    }
    kn_autocast_class c = kn_autocast_policy(n->op);
    bool low = eligible && (c == KN_AUTOCAST_LOW ? t == KN_DT_F32 : c == KN_AUTOCAST_KEEP && any && all_low);
    if (!low) return;
    p->reads_low[i] = true;
    if (t == KN_DT_F32) p->dt[i] = p->low;
    for (int k = 0; k < n->nin; k++) {
        int32_t v = n->in[k];
        if (kn_dtype_is_float(p->g->nodes[v].type.dtype) && p->dt[v] != p->low) p->early[v] = true;
    }
}

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

kn_status kn_autocast(kn_graph *g, kn_dtype low, kn_pass_stats *st) {
    if (!g) return kn_error(KN_ERR_ARG, "autocast: NULL graph");
    if (low != KN_DT_BF16 && low != KN_DT_F16)
        return kn_error(KN_ERR_ARG, "autocast: the low dtype must be bf16 or f16 (got %s)", kn_dtype_name(low));
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
        for (int32_t i = 0; i < g->nnodes; i++) plan_node(&p, i);
        s = rebuild(&p);
    }
    if (s == KN_OK) { /* swap the new arrays into g; free the old ones with out's shell */
        kn_graph tmp = *g;
        *g = *p.out;
        *p.out = tmp;
    }
    kn_graph_free(p.out);
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
