/* epilogue.c — the `epilogue` pass: a matrix product and the elementwise work around it
 * become one library call with an epilogue (cuBLASLt's, core/runtime/cuda_matmul_lt.cu).
 *
 * The GPT's linear layers and their backward (autograd's rules) give, in the joint graph:
 *
 *     y  = add(matmul(x, w), bias)            -> matmul_bias(x, w, bias)
 *     h  = gelu(y)  (y read by gelu_bwd too)  -> z = matmul_bias_gelu(x, w, bias) [2M, N]:
 *                                                h = rows 0..M-1, y = rows M..2M-1 (the aux)
 *     dy = gelu_bwd(matmul(dh, w2, tb), y)    -> matmul_dgelu(dh, w2, y, tb)
 *     dw = matmul(x, dy, ta); db = sum(dy, axes [0])
 *                                             -> z = matmul_bgrad(x, dy, ta) [K + 1, N]:
 *                                                dw = rows 0..K-1, db = row K
 *
 * (ops.def, infer_matmul_ep). With mixed precision (autocast first) a 16-bit product is
 * followed by its cast up to f32: matmul -> cast -> add/gelu_bwd matches too, and the fused
 * op takes the bf16 operands with an f32 result, so the product is not rounded to bf16 in
 * between. The bias gradient is fused only where the sum reads the product's own operand
 * (no cast between: a bf16 copy would round the gradient's terms), and the gelu only where
 * its f32 output is not cast (read_by_cast: the stacked value would keep it alive); there
 * the bias is fused and the gelu stays a generated kernel with its cast. The pass matches by
 * structure, as flash does, because one fused node replaces several roots: the product
 * (and its cast) must have no other reader (it is dropped), the operands must be 2-D and
 * defined before the node the fused op takes the place of; anything else is left alone.
 * The bias and the gelu's output may have any readers (they read a slice of the fused
 * value: folded into a generated kernel's loads, a view for a library step); so may the
 * pre-activation.
 *
 * Math: kiln's gelu is the tanh approximation (kiln/scalar.h), and so are cuBLASLt's GELU
 * and DGELU: the same function, fused. On the CPU the fused ops run kiln's GEMM and then the
 * very kernels of the nodes they replace, so results are the unfused node-by-node bits; on
 * a GPU cuBLASLt sums in its own order: equal to rounding. Like flash it is asked for by name
 * (`--passes ...,epilogue`, `kiln bench --epilogue`, `kiln train --epilogue`), after
 * autocast and before remat; "all" does not run it. */
#include <string.h>

#include "kiln/passes.h"

/* What an old node becomes: copied, dropped, the fused value, or a slice of its rows. */
typedef enum ep_role { E_NONE = 0, E_DROP, E_WHOLE, E_TOP, E_BOTTOM } ep_role;

typedef struct ep_group {
    kn_op op;
    int32_t a, b, e;  /* operands (old ids; e: -1 for matmul_bgrad) */
    int32_t at;       /* the old node whose place the fused node takes */
    int64_t rows;     /* rows of the top half (the product's M or K) */
    kn_attrs attrs;   /* ta, tb */
    int32_t z;        /* the fused node in the new graph */
} ep_group;

typedef struct ep_plan {
    const kn_graph *g;
    const int32_t *uses;
    uint8_t *role;
    int32_t *who;     /* group of a member, -1 */
    ep_group *grp;
    int ngrp;
} ep_plan;

static bool is_f(kn_dtype dt) { return dt == KN_DT_F32 || dt == KN_DT_F64; }
static bool is_low(kn_dtype dt) { return dt == KN_DT_BF16 || dt == KN_DT_F16; }
static bool free_node(const ep_plan *p, int32_t i) { return p->who[i] < 0; }

/* A 2-D product read once, or a 2-D 16-bit product read once by its cast to f32 read once:
 * the product's id in *mm, the cast's in *cast (-1 without), for a result of dtype dt. */
static bool product_of(const ep_plan *p, int32_t v, kn_dtype dt, int32_t *mm, int32_t *cast) {
    const kn_graph *g = p->g;
    const kn_node *n = &g->nodes[v];
    *cast = -1;
    if (n->op == KN_OP_CAST && p->uses[v] == 1 && free_node(p, v) && n->type.dtype == KN_DT_F32 &&
        is_low(g->nodes[n->in[0]].type.dtype)) {
        *cast = v;
        v = n->in[0];
        n = &g->nodes[v];
    } else if (n->type.dtype != dt) {
        return false;
    }
    if (n->op != KN_OP_MATMUL || p->uses[v] != 1 || !free_node(p, v) || n->type.ndim != 2) return false;
    if (g->nodes[n->in[0]].type.ndim != 2 || g->nodes[n->in[1]].type.ndim != 2) return false;
    *mm = v;
    return true;
}

static void add_group(ep_plan *p, kn_op op, int32_t mm, int32_t e, int32_t at, int64_t rows) {
    const kn_node *n = &p->g->nodes[mm];
    ep_group *t = &p->grp[p->ngrp];
    t->op = op;
    t->a = n->in[0];
    t->b = n->in[1];
    t->e = e;
    t->at = at;
    t->rows = rows;
    t->attrs = kn_attrs_default();
    t->attrs.ta = n->attrs.ta;
    t->attrs.tb = n->attrs.tb;
    t->z = -1;
}

static void member(ep_plan *p, int32_t i, ep_role r) {
    if (i < 0) return;
    p->role[i] = (uint8_t)r;
    p->who[i] = p->ngrp;
}

/* add(product, bias) (either order), bias [N] of the add's f32/f64 type [M, N]. */
static bool match_bias(const ep_plan *p, int32_t j, int32_t *mm, int32_t *cast, int32_t *bias) {
    const kn_node *n = &p->g->nodes[j];
    if (n->op != KN_OP_ADD || !free_node(p, j) || !is_f(n->type.dtype) || n->type.ndim != 2) return false;
    for (int s = 0; s < 2; s++) {
        const kn_type *bt = &p->g->nodes[n->in[1 - s]].type;
        if (bt->ndim != 1 || bt->shape[0] != n->type.shape[1] || bt->dtype != n->type.dtype) continue;
        if (!product_of(p, n->in[s], n->type.dtype, mm, cast)) continue;
        const kn_type *pt = &p->g->nodes[*mm].type;
        if (pt->shape[0] != n->type.shape[0] || pt->shape[1] != n->type.shape[1]) continue;
        *bias = n->in[1 - s];
        return true;
    }
    return false;
}

/* Whether a reader of v is a cast: under autocast gelu's output is read only by its cast to
 * bf16 (which the backward keeps), so a stacked [gelu; pre-activation] would hold the f32
 * output as long as the pre-activation, which the backward reads (+100 MB a layer at GPT-2).
 * In f32 the backward keeps the output anyway (the next weight's gradient reads it). */
static bool read_by_cast(const kn_graph *g, int32_t v) {
    for (int32_t j = v + 1; j < g->nnodes; j++) {
        const kn_node *n = &g->nodes[j];
        if (n->op == KN_OP_CAST && n->in[0] == v) return true;
    }
    return false;
}

/* gelu(add(product, bias)) and add(product, bias). */
static void match_forward(ep_plan *p) {
    const kn_graph *g = p->g;
    int32_t mm, cast, bias;
    for (int32_t i = 0; i < g->nnodes; i++) { /* gelus first: their adds become matmul_bias_gelu */
        const kn_node *n = &g->nodes[i];
        if (n->op != KN_OP_GELU || !free_node(p, i) || read_by_cast(g, i) || !match_bias(p, n->in[0], &mm, &cast, &bias))
            continue;
        add_group(p, KN_OP_MATMUL_BIAS_GELU, mm, bias, n->in[0], n->type.shape[0]);
        member(p, mm, E_DROP);
        member(p, cast, E_DROP);
        member(p, n->in[0], E_BOTTOM);
        member(p, i, E_TOP);
        p->ngrp++;
    }
    for (int32_t i = 0; i < g->nnodes; i++) {
        if (!match_bias(p, i, &mm, &cast, &bias)) continue;
        add_group(p, KN_OP_MATMUL_BIAS, mm, bias, i, g->nodes[i].type.shape[0]);
        member(p, mm, E_DROP);
        member(p, cast, E_DROP);
        member(p, i, E_WHOLE);
        p->ngrp++;
    }
}

/* unary_grad {fn=gelu}(product, pre) ("gelu_bwd" below), then matmul(x, dy, ta) with
 * sum(dy, axes [0]). */
static void match_backward(ep_plan *p) {
    const kn_graph *g = p->g;
    int32_t mm, cast;
    for (int32_t i = 0; i < g->nnodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->op != KN_OP_UNARY_GRAD || n->attrs.fn != KN_UNARY_GELU || !free_node(p, i) || !is_f(n->type.dtype) || n->type.ndim != 2) continue;
        if (!product_of(p, n->in[0], n->type.dtype, &mm, &cast)) continue;
        add_group(p, KN_OP_MATMUL_DGELU, mm, n->in[1], i, n->type.shape[0]);
        member(p, mm, E_DROP);
        member(p, cast, E_DROP);
        member(p, i, E_WHOLE);
        p->ngrp++;
    }
    for (int32_t s = 0; s < g->nnodes; s++) {
        const kn_node *n = &g->nodes[s];
        if (n->op != KN_OP_SUM || !free_node(p, s) || !is_f(n->type.dtype)) continue;
        int32_t dy = n->in[0];
        const kn_type *dt = &g->nodes[dy].type;
        if (dt->ndim != 2 || n->attrs.naxes != 1 || (n->attrs.axes[0] != 0 && n->attrs.axes[0] != -2)) continue;
        for (int32_t j = dy + 1; j < g->nnodes; j++) { /* the weight gradient reading dy as b */
            const kn_node *w = &g->nodes[j];
            if (w->op != KN_OP_MATMUL || w->in[1] != dy || w->attrs.tb || !free_node(p, j) || w->type.dtype != dt->dtype ||
                g->nodes[w->in[0]].type.ndim != 2)
                continue;
            int32_t at = j < s ? j : s;
            if (w->in[0] >= at) continue; /* x must be there where the fused node goes */
            add_group(p, KN_OP_MATMUL_BGRAD, j, -1, at, w->type.shape[0]);
            member(p, j, E_TOP);
            member(p, s, E_BOTTOM);
            p->ngrp++;
            break;
        }
    }
}

/* Append a node of op with operands in[] to out; its type is inferred. */
static kn_status emit(kn_graph *out, kn_op op, int nin, const int32_t *in, const kn_attrs *attrs, int32_t scope,
                      int32_t *id) {
    return kn_graph_emit(out, "epilogue", op, nin, in, attrs, scope, id);
}

/* Rows [start, stop) of z, reshaped to like's type when the slice's differs (a sum
 * without keepdim). */
static kn_status emit_rows(kn_graph *out, int32_t z, int64_t start, int64_t stop, const kn_type *like, int32_t scope,
                           int32_t *id) {
    kn_attrs a = kn_attrs_default();
    a.axis = 0;
    a.start = start;
    a.stop = stop;
    KN_TRY(emit(out, KN_OP_SLICE, 1, &z, &a, scope, id));
    if (kn_type_equal(&out->nodes[*id].type, like)) return KN_OK;
    kn_attrs r = kn_attrs_default();
    r.nshape = like->ndim;
    memcpy(r.shape, like->shape, sizeof(int64_t) * (size_t)like->ndim);
    int32_t s = *id;
    return emit(out, KN_OP_RESHAPE, 1, &s, &r, scope, id);
}

static kn_status rebuild(kn_graph *g, ep_plan *p) {
    kn_graph *out;
    int32_t *map;
    KN_TRY(kn_graph_rebuild_start(g, "epilogue", &out, &map));
    kn_status st = KN_OK;
    for (int32_t i = 0; st == KN_OK && i < g->nnodes; i++) {
        const kn_node *n = &g->nodes[i];
        ep_group *t = p->who[i] >= 0 ? &p->grp[p->who[i]] : NULL;
        if (t && t->at == i) { /* the fused node goes here */
            int32_t in[3] = {map[t->a], map[t->b], t->e >= 0 ? map[t->e] : -1};
            st = emit(out, t->op, t->e >= 0 ? 3 : 2, in, &t->attrs, n->scope, &t->z);
            if (st != KN_OK) break;
        }
        switch ((ep_role)(t ? p->role[i] : E_NONE)) { /* every role named: -Wswitch-enum checks it */
        case E_DROP: map[i] = -1; break;
        case E_WHOLE: map[i] = t->z; break;
        case E_TOP: st = emit_rows(out, t->z, 0, t->rows, &n->type, n->scope, &map[i]); break;
        case E_BOTTOM:
            st = emit_rows(out, t->z, t->rows, out->nodes[t->z].type.shape[0], &n->type, n->scope, &map[i]);
            break;
        case E_NONE: st = kn_graph_emit_copy(out, n, map, &map[i]); break;
        }
    }
    return kn_graph_take(g, out, map, st);
}

kn_status kn_pass_epilogue(kn_graph *g, kn_pass_stats *st) {
    if (!g) return kn_error(KN_ERR_ARG, "epilogue: NULL graph");
    int32_t n = g->nnodes;
    size_t cap = (size_t)(n > 0 ? n : 1);
    int32_t *uses = kn_malloc(cap * sizeof *uses * 2);
    uint8_t *role = kn_calloc(cap, 1);
    ep_group *grp = kn_malloc(cap * sizeof *grp);
    if (!uses || !role || !grp) {
        kn_free(uses);
        kn_free(role);
        kn_free(grp);
        return kn_error(KN_ERR_OOM, "epilogue: out of memory");
    }
    ep_plan p = {g, uses, role, uses + n, grp, 0};
    kn_graph_uses(g, uses);
    for (int32_t i = 0; i < n; i++) p.who[i] = -1;
    match_forward(&p);
    match_backward(&p);
    kn_status s = p.ngrp ? rebuild(g, &p) : KN_OK;
    if (s == KN_OK) {
        static const kn_op ops[] = {KN_OP_MATMUL_BIAS, KN_OP_MATMUL_BIAS_GELU, KN_OP_MATMUL_DGELU, KN_OP_MATMUL_BGRAD};
        static const char *const what[] = {"matmul + bias -> matmul_bias", "matmul + bias + gelu -> matmul_bias_gelu",
                                           "matmul + unary_grad{gelu} -> matmul_dgelu",
                                           "matmul(ta) + sum(axis 0) -> matmul_bgrad"};
        int cnt[4] = {0};
        for (int i = 0; i < p.ngrp; i++)
            for (int k = 0; k < 4; k++) cnt[k] += grp[i].op == ops[k];
        for (int k = 0; k < 4; k++)
            if (cnt[k]) kn_pass_stats_fire(st, what[k], cnt[k]);
        kn_log(KN_LOG_INFO, "epilogue: fused %d matmul_bias, %d matmul_bias_gelu, %d matmul_dgelu, %d matmul_bgrad",
               cnt[0], cnt[1], cnt[2], cnt[3]);
    }
    kn_free(uses);
    kn_free(role);
    kn_free(grp);
    return s;
}
