/* flash.c — the `flash` pass: materialized causal attention becomes flash attention.
 *
 * The GPT (core/nn/gpt.c) writes attention as three ops, and autograd gives their backward
 * as five more:
 *
 *     s  = matmul(q, k, tb)          [..., T, T]   forward
 *     p  = causal_softmax(s, scale)  [..., T, T]
 *     o  = matmul(p, v)              [..., T, D]
 *     dp = matmul(do, v, tb)         [..., T, T]   backward (do: the gradient of o)
 *     dv = matmul(p, do, ta)
 *     ds = causal_softmax_bwd(dp, p, scale)
 *     dq = matmul(ds, k)
 *     dk = matmul(ds, q, ta)
 *
 * Four of those values are [..., T, T], and p lives from the forward to the backward:
 * at GPT-2's shape that is most of a step's activation memory. The pass replaces the
 * group with
 *
 *     y  = flash_attn(q, k, v, scale)             [..., T, D + 1]   (O and the logsumexp)
 *     o' = slice(y, last axis, 0, D)
 *     g  = flash_attn_bwd(q, k, v, y, do, scale)  [3, ..., T, D]
 *     dq', dk', dv' = reshape(slice(g, 0, i, i + 1))
 *
 * so no [..., T, T] value is left (kiln/ir.h, kn_flash_attn, for the ops).
 *
 * The GPT's q, k, v are permutes of its projections ([B, T, H, D] -> [B, H, T, D]), and o
 * and the gradients dq, dk, dv are permuted back before their products. Where q, k, v (and
 * do) are such permutes, the pass uses the ops' [B, T, H, D] layout instead (perm
 * [0, 2, 1, 3]): the kernels read the projections in place and write O and the stacked
 * gradient [B, T, 3, H, D] in the layout the products read, so
 *
 *     y  = flash_attn(q', k', v', scale, perm)          [B T H D + B H T]  (O, then L)
 *     o' = reshape(slice(y, 0, 0, B T H D))             [B, T, H, D]       a view
 *     g  = flash_attn_bwd(q', k', v', y, do', perm)     [B, T, 3, H, D]
 *     dq' = reshape(slice(g, 2, 0, 1)), ...             [B, T, H, D]
 *
 * (q' the permute's operand); each permute back of o, dq, dk or dv becomes o', dq', ... and
 * the permutes q, k, v, do are dropped when nothing else reads them: no permute and no slice
 * copy is left around attention (the hfuse pass then reads the gradients' concat as one
 * reshape of g). It matches by
 * structure, not by pattern tree, because it replaces several roots (o, dq, dk, dv) that
 * share new nodes: it checks that s feeds only p, that every reader of p is o, dv or ds
 * (and p is no output), that dp feeds only ds and every reader of ds is dq or dk, with
 * one scale and one do throughout, and q, k, v of one f32 or f64 type [..., T, D].
 * Anything else (a graph that also reads the probabilities, say) is left alone. A forward-only graph (no backward readers) gets flash_attn
 * alone. Then it rebuilds the graph in one sweep: y where o was, g where the first of dp
 * and dv was, each gradient's slice where that gradient was; s, p, dp and ds are dropped.
 *
 * Unlike the other passes it is not exact: the flash kernels sum in another order, so
 * results agree to rounding (tests/core/test_flash.c states the tolerance). That is why
 * "all" does not run it; it is asked for by name (`--passes ...,flash`, `--flash`). */
#include <string.h>

#include "kiln/passes.h"

/* What a node is in one attention group. */
typedef enum flash_role {
    R_NONE = 0, R_S, R_P, R_O, R_DP, R_DV, R_DS, R_DQ, R_DK,
    R_IN,                   /* [B, T, H, D] layout: a permute q, k, v or do read only by the group (dropped) */
    R_BACK_O, R_BACK_DQ, R_BACK_DK, R_BACK_DV /* ... a permute back of o, dq, dk, dv (becomes o', dq', ...) */
} flash_role;

typedef struct attn {
    int32_t q, k, v, s, p, o, dout, dp, dv, ds, dq, dk; /* -1: absent */
    int32_t y, g;                                       /* their ids in the new graph */
    bool bthd;                 /* the [B, T, H, D] layout: */
    int32_t src[4];            /* q', k', v', do': the permutes' operands (do' -1 when no backward) */
    bool other[4];             /* o, dq, dk, dv read by more than their permutes back (or outputs) */
    int32_t back[4];           /* o', dq', dk', dv' in the new graph */
} attn;

static bool is_mm(const kn_node *n, int ta, int tb) {
    return n->op == KN_OP_MATMUL && n->attrs.ta == ta && n->attrs.tb == tb;
}

/* Is p (a causal_softmax) the middle of an attention group? Fills *a when it is. */
static bool match_group(const kn_graph *g, const int32_t *uses, int32_t p, attn *a) {
    const kn_node *np = &g->nodes[p];
    memset(a, -1, sizeof *a);
    a->bthd = false; /* the [B, T, H, D] layout: match_bthd decides */
    memset(a->other, 0, sizeof a->other);
    a->p = p;
    a->s = np->in[0];
    const kn_node *ns = &g->nodes[a->s];
    if (!is_mm(ns, 0, 1) || uses[a->s] != 1) return false;
    a->q = ns->in[0];
    a->k = ns->in[1];
    const kn_type *tq = &g->nodes[a->q].type;
    if ((tq->dtype != KN_DT_F32 && tq->dtype != KN_DT_F64) || tq->ndim < 2 || tq->ndim + 1 > KN_MAX_DIMS ||
        !kn_type_equal(tq, &g->nodes[a->k].type))
        return false;
    const double scale = np->attrs.scale;
    int readers = 0;
    for (int32_t j = p + 1; j < g->nnodes; j++) {
        const kn_node *n = &g->nodes[j];
        int slots = 0;
        for (int i = 0; i < n->nin; i++) slots += n->in[i] == p;
        if (!slots) continue;
        readers += slots;
        if (slots != 1) return false;
        if (is_mm(n, 0, 0) && n->in[0] == p && a->o < 0) {
            a->o = j;
            a->v = n->in[1];
        } else if (is_mm(n, 1, 0) && n->in[0] == p && a->dv < 0) {
            a->dv = j;
            if (a->dout >= 0 && a->dout != n->in[1]) return false;
            a->dout = n->in[1];
        } else if (n->op == KN_OP_CAUSAL_SOFTMAX_BWD && n->in[1] == p && n->attrs.scale == scale && a->ds < 0) {
            a->ds = j;
            a->dp = n->in[0];
        } else {
            return false;
        }
    }
    if (readers != uses[p] || a->o < 0 || !kn_type_equal(tq, &g->nodes[a->v].type)) return false;
    if (a->dv >= 0 && a->dv < a->o) return false;
    if (a->ds >= 0) { /* dp = matmul(do, v, tb) read only by ds; ds read only by dq and dk */
        const kn_node *nd = &g->nodes[a->dp];
        if (!is_mm(nd, 0, 1) || nd->in[1] != a->v || uses[a->dp] != 1 || a->dp < a->o) return false;
        if (a->dout >= 0 && a->dout != nd->in[0]) return false;
        a->dout = nd->in[0];
        int dsr = 0;
        for (int32_t j = a->ds + 1; j < g->nnodes; j++) {
            const kn_node *n = &g->nodes[j];
            int slots = 0;
            for (int i = 0; i < n->nin; i++) slots += n->in[i] == a->ds;
            if (!slots) continue;
            dsr += slots;
            if (slots == 1 && is_mm(n, 0, 0) && n->in[0] == a->ds && n->in[1] == a->k && a->dq < 0) a->dq = j;
            else if (slots == 1 && is_mm(n, 1, 0) && n->in[0] == a->ds && n->in[1] == a->q && a->dk < 0) a->dk = j;
            else return false;
        }
        if (dsr != uses[a->ds]) return false;
    }
    return a->dout < 0 || kn_type_equal(tq, &g->nodes[a->dout].type);
}

static const int64_t bthd_perm[4] = {0, 2, 1, 3};

/* Is x permute(x', [0, 2, 1, 3]) of a 4-D x'? Its operand, or -1. */
static int32_t perm_src(const kn_graph *g, int32_t x) {
    const kn_node *n = &g->nodes[x];
    if (n->op != KN_OP_PERMUTE || n->type.ndim != 4 || n->attrs.nperm != 4) return -1;
    for (int i = 0; i < 4; i++)
        if (n->attrs.perm[i] != bthd_perm[i]) return -1;
    return n->in[0];
}

static bool is_output(const kn_graph *g, int32_t x) {
    for (int i = 0; i < g->noutputs; i++)
        if (g->outputs[i] == x) return true;
    return false;
}

/* The [B, T, H, D] layout for the matched group a, where q, k, v (and do) are permutes
 * [0, 2, 1, 3]: sets a->bthd and a->src, marks the permutes that only the group reads R_IN
 * and the permutes back of o, dq, dk, dv R_BACK_* (a->other: some other reader). */
static void match_bthd(const kn_graph *g, const int32_t *uses, attn *a, uint8_t *role, int32_t *who, int ia) {
    const int32_t ins[4] = {a->q, a->k, a->v, a->dout};
    for (int i = 0; i < 4; i++) {
        a->src[i] = ins[i] < 0 ? -1 : perm_src(g, ins[i]);
        if (ins[i] >= 0 && a->src[i] < 0) return;
    }
    a->bthd = true;
    const int32_t grp[6] = {a->s, a->o, a->dp, a->dv, a->dq, a->dk};
    for (int i = 0; i < 4; i++) { /* dropped when every read is by the group's dropped nodes */
        if (ins[i] < 0 || role[ins[i]] != R_NONE || is_output(g, ins[i])) continue;
        int reads = 0;
        for (int r = 0; r < 6; r++)
            for (int k = 0; grp[r] >= 0 && k < g->nodes[grp[r]].nin; k++) reads += g->nodes[grp[r]].in[k] == ins[i];
        if (reads == uses[ins[i]]) role[ins[i]] = R_IN, who[ins[i]] = ia;
    }
    const int32_t outs[4] = {a->o, a->dq, a->dk, a->dv};
    for (int i = 0; i < 4; i++) {
        if (outs[i] < 0) continue;
        a->other[i] = is_output(g, outs[i]);
        for (int32_t j = outs[i] + 1; j < g->nnodes; j++) {
            const kn_node *n = &g->nodes[j];
            bool reads = false;
            for (int k = 0; k < n->nin; k++) reads |= n->in[k] == outs[i];
            if (!reads) continue;
            if (n->nin == 1 && perm_src(g, j) == outs[i] && role[j] == R_NONE) role[j] = (uint8_t)(R_BACK_O + i), who[j] = ia;
            else a->other[i] = true;
        }
    }
}

/* Append a node of op with operands in[] to out; its type is inferred. */
static kn_status emit(kn_graph *out, kn_op op, int nin, const int32_t *in, const kn_attrs *attrs, int32_t scope,
                      int32_t *id) {
    return kn_graph_emit(out, "flash", op, nin, in, attrs, scope, id);
}

/* slice(x, axis, i, i + 1), reshaped to like's type when reshape is set. */
static kn_status emit_slice(kn_graph *out, int32_t x, int axis, int64_t start, int64_t stop, const kn_type *like,
                            int32_t scope, int32_t *id) {
    kn_attrs a = kn_attrs_default();
    a.axis = axis;
    a.start = start;
    a.stop = stop;
    KN_TRY(emit(out, KN_OP_SLICE, 1, &x, &a, scope, id));
    if (!like) return KN_OK;
    kn_attrs r = kn_attrs_default();
    r.nshape = like->ndim;
    memcpy(r.shape, like->shape, sizeof(int64_t) * (size_t)like->ndim);
    int32_t s = *id;
    return emit(out, KN_OP_RESHAPE, 1, &s, &r, scope, id);
}

/* The flash ops' attributes: the softmax's scale, and perm [0, 2, 1, 3] in the [B, T, H, D] layout. */
static kn_attrs flash_attrs(const kn_graph *g, const attn *t) {
    kn_attrs at = g->nodes[t->p].attrs;
    if (t->bthd) {
        at.nperm = 4;
        memcpy(at.perm, bthd_perm, sizeof bthd_perm);
    }
    return at;
}

/* [B, T, H, D] layout: value i (0 o, 1 dq, 2 dk, 3 dv) as the kernels wrote it into x (y, or
 * the stacked gradient g [B, T, 3, H, D], part k): t->back[i] = o' (a view of y's first
 * B T H D elements) or dq', dk', dv' (slice k of g's axis 2); *id, the value in the old
 * layout, is its permute [0, 2, 1, 3] where something else reads it, else -1. */
static kn_status emit_back(kn_graph *out, attn *t, const kn_graph *g, int32_t x, int i, int k, int32_t scope,
                           int32_t *id) {
    const kn_type *q = &g->nodes[t->src[0]].type; /* [B, T, H, D] */
    if (i == 0) KN_TRY(emit_slice(out, x, 0, 0, kn_type_numel(q), q, scope, &t->back[0]));
    else KN_TRY(emit_slice(out, x, 2, k, k + 1, q, scope, &t->back[i]));
    *id = -1;
    if (!t->other[i]) return KN_OK;
    kn_attrs a = kn_attrs_default();
    a.nperm = 4;
    memcpy(a.perm, bthd_perm, sizeof bthd_perm);
    return emit(out, KN_OP_PERMUTE, 1, &t->back[i], &a, scope, id);
}

/* Rebuild g with every group of a[0..na) replaced; role/who say which group a node is in. */
static kn_status rebuild(kn_graph *g, attn *a, const uint8_t *role, const int32_t *who) {
    kn_graph *out;
    int32_t *map;
    KN_TRY(kn_graph_rebuild_start(g, "flash", &out, &map));
    kn_status st = KN_OK;
    for (int32_t i = 0; st == KN_OK && i < g->nnodes; i++) {
        const kn_node *n = &g->nodes[i];
        attn *t = who[i] >= 0 ? &a[who[i]] : NULL;
        const kn_type *tq = t ? &g->nodes[t->q].type : NULL;
        int32_t sc = n->scope;
        if (t && (role[i] == R_DP || role[i] == R_DV) && t->g < 0) { /* the first backward reader */
            kn_attrs at = flash_attrs(g, t);
            int32_t in[5] = {map[t->q], map[t->k], map[t->v], t->y, map[t->dout]};
            if (t->bthd) in[0] = map[t->src[0]], in[1] = map[t->src[1]], in[2] = map[t->src[2]], in[4] = map[t->src[3]];
            st = emit(out, KN_OP_FLASH_ATTN_BWD, 5, in, &at, sc, &t->g);
            if (st != KN_OK) break;
        }
        switch ((flash_role)(t ? role[i] : R_NONE)) { /* every role named: -Wswitch-enum checks it */
        case R_S: case R_P: case R_DP: case R_DS: case R_IN: /* dropped: nothing reads them any more */
            map[i] = -1;
            break;
        case R_O: {
            kn_attrs at = flash_attrs(g, t);
            int32_t in[3] = {map[t->q], map[t->k], map[t->v]};
            if (t->bthd) in[0] = map[t->src[0]], in[1] = map[t->src[1]], in[2] = map[t->src[2]];
            st = emit(out, KN_OP_FLASH_ATTN, 3, in, &at, sc, &t->y);
            if (st == KN_OK && t->bthd) st = emit_back(out, t, g, t->y, 0, 0, sc, &map[i]);
            else if (st == KN_OK)
                st = emit_slice(out, t->y, tq->ndim - 1, 0, tq->shape[tq->ndim - 1], NULL, sc, &map[i]);
            break;
        }
        case R_DQ: case R_DK: case R_DV: {
            int k = role[i] == R_DQ ? 0 : role[i] == R_DK ? 1 : 2; /* g's parts: dq, dk, dv */
            if (t->bthd) st = emit_back(out, t, g, t->g, 1 + k, k, sc, &map[i]);
            else st = emit_slice(out, t->g, 0, k, k + 1, tq, sc, &map[i]);
            break;
        }
        case R_BACK_O: case R_BACK_DQ: case R_BACK_DK: case R_BACK_DV: map[i] = t->back[role[i] - R_BACK_O]; break;
        case R_NONE: st = kn_graph_emit_copy(out, n, map, &map[i]); break; /* not part of a replaced attention */
        }
    }
    return kn_graph_take(g, out, map, st);
}

kn_status kn_pass_flash(kn_graph *g, kn_pass_stats *st) {
    if (!g) return kn_error(KN_ERR_ARG, "flash: NULL graph");
    int32_t n = g->nnodes, *uses = kn_malloc((size_t)(n > 0 ? n : 1) * sizeof *uses * 2);
    uint8_t *role = kn_calloc((size_t)(n > 0 ? n : 1), 1);
    attn *a = kn_malloc((size_t)(n > 0 ? n : 1) * sizeof *a);
    if (!uses || !role || !a) {
        kn_free(uses);
        kn_free(role);
        kn_free(a);
        return kn_error(KN_ERR_OOM, "flash: out of memory");
    }
    int32_t *who = uses + n;
    kn_graph_uses(g, uses);
    for (int32_t i = 0; i < n; i++) who[i] = -1;
    int na = 0;
    for (int32_t i = 0; i < n; i++) {
        if (g->nodes[i].op != KN_OP_CAUSAL_SOFTMAX) continue;
        attn *t = &a[na];
        if (!match_group(g, uses, i, t)) continue; /* left materialized */
        const int32_t ids[] = {t->s, t->p, t->o, t->dp, t->dv, t->ds, t->dq, t->dk};
        for (int r = 0; r < 8; r++)
            if (ids[r] >= 0) { role[ids[r]] = (uint8_t)(R_S + r); who[ids[r]] = na; }
        match_bthd(g, uses, t, role, who, na);
        na++;
    }
    kn_status s = na ? rebuild(g, a, role, who) : KN_OK;
    if (s == KN_OK) {
        int bwd = 0;
        for (int i = 0; i < na; i++) bwd += a[i].g >= 0;
        if (na - bwd) kn_pass_stats_fire(st, "flash_attn (forward only)", na - bwd);
        if (bwd) kn_pass_stats_fire(st, "flash_attn + flash_attn_bwd", bwd);
    }
    kn_free(uses);
    kn_free(role);
    kn_free(a);
    return s;
}
