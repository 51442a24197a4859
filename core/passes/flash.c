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
 * so no [..., T, T] value is left (kiln/ir.h, kn_flash_attn, for the ops). It matches by
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
typedef enum flash_role { R_NONE = 0, R_S, R_P, R_O, R_DP, R_DV, R_DS, R_DQ, R_DK } flash_role;

typedef struct attn {
    int32_t q, k, v, s, p, o, dout, dp, dv, ds, dq, dk; /* -1: absent */
    int32_t y, g;                                       /* their ids in the new graph */
} attn;

static bool is_mm(const kn_node *n, int ta, int tb) {
    return n->op == KN_OP_MATMUL && n->attrs.ta == ta && n->attrs.tb == tb;
}

/* Is p (a causal_softmax) the middle of an attention group? Fills *a when it is. */
static bool match_group(const kn_graph *g, const int32_t *uses, int32_t p, attn *a) {
    const kn_node *np = &g->nodes[p];
    memset(a, -1, sizeof *a);
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
            kn_attrs at = g->nodes[t->p].attrs;
            int32_t in[5] = {map[t->q], map[t->k], map[t->v], t->y, map[t->dout]};
            st = emit(out, KN_OP_FLASH_ATTN_BWD, 5, in, &at, sc, &t->g);
            if (st != KN_OK) break;
        }
        switch ((flash_role)(t ? role[i] : R_NONE)) { /* every role named: -Wswitch-enum checks it */
        case R_S: case R_P: case R_DP: case R_DS: /* dropped: nothing reads them any more */
            map[i] = -1;
            break;
        case R_O: {
            kn_attrs at = g->nodes[t->p].attrs;
            int32_t in[3] = {map[t->q], map[t->k], map[t->v]};
            st = emit(out, KN_OP_FLASH_ATTN, 3, in, &at, sc, &t->y);
            if (st == KN_OK)
                st = emit_slice(out, t->y, tq->ndim - 1, 0, tq->shape[tq->ndim - 1], NULL, sc, &map[i]);
            break;
        }
        case R_DQ: st = emit_slice(out, t->g, 0, 0, 1, tq, sc, &map[i]); break;
        case R_DK: st = emit_slice(out, t->g, 0, 1, 2, tq, sc, &map[i]); break;
        case R_DV: st = emit_slice(out, t->g, 0, 2, 3, tq, sc, &map[i]); break;
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
