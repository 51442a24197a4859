/* hfuse.c — the `hfuse` pass: horizontal fusion of sibling matrix products (TASO, TVM).
 *
 * The GPT builder (core/nn/gpt.c, kn_nn_attention) projects q, k and v with one weight W
 * [768, 2304]: three products x @ W[:, 0:768], x @ W[:, 768:1536], x @ W[:, 1536:2304] of
 * column slices, so that their gradients meet in W. Each is [8192, 768] x [768, 768]: too
 * narrow to fill an H100 (122-172 TFLOP/s against ~310 for the step's wide products). In
 * the joint graph the siblings appear three times:
 *
 *   forward         y_i = matmul(x, slice_i(W))                     (tb = 0, same x)
 *                   -> z = matmul(x, W); y_i = slice_i(z)
 *   input gradient  dx = sum_i matmul(g_i, slice_i(W), tb = 1)      (a chain of adds)
 *                   -> dx = matmul(concat(g_1..g_k, axis -1), W, tb = 1)
 *   weight gradient dW = sum_i slice_grad(matmul(x, g_i, ta = 1), axis 1, [s_i, e_i))
 *                   -> dW = matmul(x, concat(g_1..g_k, axis -1), ta = 1)
 *
 * where the slices (axis 1, step 1) tile W's columns [0, N) exactly. Under autocast a
 * cast may stand between a slice and its product (then W is cast once, whole) and between
 * a weight gradient's product and its slice_grad (then the cast moves after the merged
 * product); with lowparams the slices are of the 16-bit param itself. The concat of the
 * g_i is shared by the input and the weight gradient (emitted once); where the g_i are the
 * heads of one stacked value (flash_attn_bwd's dq, dk, dv) it is one permute of that value
 * (stacked()), or that value itself, reshaped, where it is stacked in the concat's layout
 * already (the flash pass's [B, T, H, D] layout: [B, T, 3, H, D]). A fourth rule takes the bias's gradient with it: a sum of slice_grads that
 * tile an axis is the concat of what they scatter (no zero-filled buffers, no adds, the same
 * values), and where those are the column sums of the g_i, the column sum of their concat
 * (column_sums()).
 *
 * The pass matches by structure, on the joint graph after autocast / lowparams / lowsave
 * and before epilogue and remat. A sum is a tree of adds whose inner adds have one reader,
 * an add of the same type; its other leaves (anything the group does not take) are added
 * to the merged product. A group needs at least two parts that tile the columns exactly,
 * the same shared operand, each backward part read only by its sum: anything else is left
 * alone. The merged products sum in another order than the separate ones (and a 16-bit
 * input gradient is rounded once instead of at each add), so the gradients are equal only
 * to rounding: asked for by name (`--passes ...,hfuse`, `kiln bench --hfuse`,
 * `kiln train --hfuse`), not in "all". The forward is a column slice of one product:
 * the same sums, in kiln's GEMM the same bits.
 *
 * This file: the pass's entry and the rebuild of the graph from the plan; the matching is
 * hfuse_match.c, the plan they share hfuse.h. */
#include <string.h>

#include "passes/hfuse.h"

/* ---------------------------------------------------------------- rebuild */

static kn_status emit(hf_plan *p, kn_graph *out, kn_op op, int nin, const int32_t *in, const kn_attrs *a,
                      int32_t scope, bool share, int32_t *id) {
    for (int m = 0; share && m < p->nmemo; m++) {
        const hf_memo *e = &p->memo[m];
        if (e->op == op && e->nin == nin && e->in[0] == in[0] && (nin < 2 || e->in[1] == in[1]) &&
            kn_attrs_equal(op, &e->attrs, a)) {
            *id = e->id;
            return KN_OK;
        }
    }
    KN_TRY(kn_graph_emit(out, "hfuse", op, nin, in, a, scope, id));
    if (share && p->nmemo < p->memocap)
        p->memo[p->nmemo++] = (hf_memo){op, nin, {in[0], nin > 1 ? in[1] : -1}, *a, *id};
    return KN_OK;
}

/* W, or its cast to the slices' dtype (once per W and dtype). */
static kn_status emit_weight(hf_plan *p, kn_graph *out, const hf_group *t, const int32_t *map, int32_t scope,
                             int32_t *id) {
    *id = map[t->w];
    if (t->cast < 0) return KN_OK;
    kn_attrs a = kn_attrs_default();
    a.dtype = (kn_dtype)t->cast;
    int32_t w = *id;
    return emit(p, out, KN_OP_CAST, 1, &w, &a, scope, true, id);
}

/* concat(opnd_1, ..., opnd_k) along axis (a chain of two-operand concats, shared). */
static kn_status emit_concat(hf_plan *p, kn_graph *out, const hf_group *t, const int32_t *map, int axis, int32_t scope,
                             int32_t *id) {
    kn_attrs a = kn_attrs_default();
    if (t->src >= 0) { /* one permute of the stacked value, reshaped (stacked()) */
        const kn_type *v = &p->g->nodes[t->opnd[0]].type;
        a.nperm = t->nperm;
        memcpy(a.perm, t->perm, sizeof(int64_t) * (size_t)t->nperm);
        int32_t pid = map[t->src];
        if (t->nperm) KN_TRY(emit(p, out, KN_OP_PERMUTE, 1, &pid, &a, scope, true, &pid)); /* 0: S as it is */
        kn_attrs r = kn_attrs_default();
        r.nshape = v->ndim;
        memcpy(r.shape, v->shape, sizeof(int64_t) * (size_t)v->ndim);
        r.shape[axis] *= t->k;
        return emit(p, out, KN_OP_RESHAPE, 1, &pid, &r, scope, true, id);
    }
    a.axis = axis;
    *id = map[t->opnd[0]];
    for (int k = 1; k < t->k; k++) {
        int32_t in[2] = {*id, map[t->opnd[k]]};
        KN_TRY(emit(p, out, KN_OP_CONCAT, 2, in, &a, scope, true, id));
    }
    return KN_OK;
}

/* The merged sum at its root: the merged product (or concat) plus the sum's other leaves. */
static kn_status emit_root(hf_plan *p, kn_graph *out, const hf_group *t, const int32_t *map, int32_t scope,
                           int32_t *id) {
    const kn_graph *g = p->g;
    int32_t in[2];
    if (t->kind == HF_DGRAD) {
        KN_TRY(emit_concat(p, out, t, map, g->nodes[t->opnd[0]].type.ndim - 1, scope, &in[0]));
        KN_TRY(emit_weight(p, out, t, map, scope, &in[1]));
        KN_TRY(emit(p, out, KN_OP_MATMUL, 2, in, &t->mm, scope, false, id));
    } else if (t->kind == HF_WGRAD) {
        in[0] = map[t->a];
        KN_TRY(emit_concat(p, out, t, map, 1, scope, &in[1]));
        KN_TRY(emit(p, out, KN_OP_MATMUL, 2, in, &t->mm, scope, false, id));
        if (t->cast >= 0) {
            kn_attrs c = kn_attrs_default();
            c.dtype = (kn_dtype)t->cast;
            in[0] = *id;
            KN_TRY(emit(p, out, KN_OP_CAST, 1, in, &c, scope, false, id));
        }
    } else {
        KN_TRY(emit_concat(p, out, t, map, t->colsum ? 1 : t->axis, scope, id));
        if (t->colsum) { /* cast?, the column sum, and its [1, N] -> [N] */
            in[0] = *id;
            if (t->cast >= 0) {
                kn_attrs c = kn_attrs_default();
                c.dtype = (kn_dtype)t->cast;
                KN_TRY(emit(p, out, KN_OP_CAST, 1, in, &c, scope, false, &in[0]));
            }
            kn_attrs s = kn_attrs_default();
            s.naxes = 1, s.axes[0] = 0, s.keepdim = 1;
            KN_TRY(emit(p, out, KN_OP_SUM, 1, in, &s, scope, false, &in[0]));
            kn_attrs r = kn_attrs_default();
            r.nshape = 1, r.shape[0] = out->nodes[in[0]].type.shape[1];
            KN_TRY(emit(p, out, KN_OP_RESHAPE, 1, in, &r, scope, false, id));
        }
    }
    for (int r = 0; r < t->nrest; r++) {
        in[0] = *id, in[1] = map[t->rest[r]];
        KN_TRY(emit(p, out, KN_OP_ADD, 2, in, NULL, scope, false, id));
    }
    if (kn_type_equal(&out->nodes[*id].type, &g->nodes[t->at].type)) return KN_OK;
    return kn_error(KN_ERR_INTERNAL, "hfuse: the merged sum at %%%d has another type than the sum", t->at);
}

/* The merged forward product, before its first part. */
static kn_status emit_forward(hf_plan *p, kn_graph *out, hf_group *t, const int32_t *map, int32_t scope) {
    int32_t in[2] = {map[t->a], -1};
    KN_TRY(emit_weight(p, out, t, map, scope, &in[1]));
    return emit(p, out, KN_OP_MATMUL, 2, in, &t->mm, scope, false, &t->z);
}

/* A forward part: its columns of the merged product. */
static kn_status emit_part(hf_plan *p, kn_graph *out, const hf_group *t, int32_t v, int32_t *id) {
    const kn_node *n = &p->g->nodes[v];
    int k = 0;
    while (t->part[k] != v) k++;
    kn_attrs a = kn_attrs_default();
    a.axis = n->type.ndim - 1;
    a.start = t->start[k];
    a.stop = t->stop[k];
    KN_TRY(emit(p, out, KN_OP_SLICE, 1, &t->z, &a, n->scope, false, id));
    if (kn_type_equal(&out->nodes[*id].type, &n->type)) return KN_OK;
    return kn_error(KN_ERR_INTERNAL, "hfuse: the slice for %%%d has another type than the product", v);
}

static kn_status rebuild(kn_graph *g, hf_plan *p) {
    kn_graph *out;
    int32_t *map;
    KN_TRY(kn_graph_rebuild_start(g, "hfuse", &out, &map));
    kn_status st = KN_OK;
    for (int32_t i = 0; st == KN_OK && i < g->nnodes; i++) {
        const kn_node *n = &g->nodes[i];
        hf_group *t = p->who[i] >= 0 ? &p->grp[p->who[i]] : NULL;
        if (t && t->kind == HF_FWD && t->at == i) st = emit_forward(p, out, t, map, n->scope);
        if (st != KN_OK) break;
        switch ((hf_role)p->role[i]) { /* every role named: -Wswitch-enum checks it */
        case R_DROP: map[i] = -1; break;
        case R_SLICE: st = emit_part(p, out, t, i, &map[i]); break;
        case R_ROOT: st = emit_root(p, out, t, map, n->scope, &map[i]); break;
        case R_KEEP:
            if (!p->live[i]) { map[i] = -1; break; }
            for (int k = 0; k < n->nin; k++)
                if (map[n->in[k]] < 0)
                    st = kn_error(KN_ERR_INTERNAL, "hfuse: %%%d reads %%%d, which a group dropped", i, n->in[k]);
            if (st == KN_OK) st = kn_graph_emit_copy(out, n, map, &map[i]);
            break;
        }
    }
    return kn_graph_take(g, out, map, st);
}

/* Which nodes the new graph keeps: every node but the dropped ones, and but the views and
 * casts that nothing kept reads any more (the slices of W the parts read). Walked from the
 * end, each kept node marking what its new form reads: a part of a forward group the
 * shared operand and W, a sum's root its group's operands and other leaves. */
static void mark_live(hf_plan *p, bool *live) {
    const kn_graph *g = p->g;
    memset(live, 0, (size_t)g->nnodes * sizeof *live);
    for (int i = 0; i < g->noutputs; i++) live[g->outputs[i]] = true;
    for (int32_t i = g->nnodes - 1; i >= 0; i--) {
        const kn_node *n = &g->nodes[i];
        hf_role r = (hf_role)p->role[i];
        bool pure = kn_op_get(n->op)->category == KN_CAT_VIEW || n->op == KN_OP_CAST;
        live[i] = r != R_DROP && (live[i] || r != R_KEEP || !pure);
        if (!live[i]) continue;
        if (r == R_KEEP) {
            for (int k = 0; k < n->nin; k++) live[n->in[k]] = true;
            continue;
        }
        const hf_group *t = &p->grp[p->who[i]];
        if (t->a >= 0) live[t->a] = true;
        if (t->w >= 0) live[t->w] = true;
        if (r != R_ROOT) continue;
        if (t->src >= 0) live[t->src] = true;
        for (int k = 0; t->src < 0 && k < t->k; k++) live[t->opnd[k]] = true;
        for (int k = 0; k < t->nrest; k++) live[t->rest[k]] = true;
    }
}

kn_status kn_pass_hfuse(kn_graph *g, kn_pass_stats *st) {
    if (!g) return kn_error(KN_ERR_ARG, "hfuse: NULL graph");
    int32_t n = g->nnodes;
    size_t cap = (size_t)(n > 0 ? n : 1);
    hf_plan p = {.g = g, .cap = (int)cap, .memocap = (int)cap};
    p.uses = kn_malloc(cap * sizeof *p.uses * 3);
    p.role = kn_calloc(cap, 1);
    p.live = kn_malloc(cap * sizeof *p.live);
    p.grp = kn_malloc(cap * sizeof *p.grp);
    p.memo = kn_malloc(cap * sizeof *p.memo);
    kn_status s = p.uses && p.role && p.live && p.grp && p.memo ? KN_OK : kn_error(KN_ERR_OOM, "hfuse: out of memory");
    if (s == KN_OK) {
        p.reader = p.uses + n;
        p.who = p.uses + 2 * n;
        kn_graph_uses(g, p.uses);
        for (int32_t i = 0; i < n; i++) p.reader[i] = p.who[i] = -1;
        for (int32_t i = 0; i < n; i++)
            for (int k = 0; k < g->nodes[i].nin; k++)
                if (p.uses[g->nodes[i].in[k]] == 1) p.reader[g->nodes[i].in[k]] = i;
        for (int i = 0; i < g->noutputs; i++) p.reader[g->outputs[i]] = -1; /* an output is read outside */
        hf_match_forward(&p);
        hf_match_sums(&p);
        int cnt[4] = {0};
        for (int i = 0; i < p.ngrp; i++) cnt[p.grp[i].kind]++;
        if (p.ngrp) mark_live(&p, p.live);
        if (p.ngrp) s = rebuild(g, &p);
        if (s == KN_OK) {
            static const char *const what[] = {"forward products -> one product and column slices",
                                               "input-gradient sum -> one product of a concat",
                                               "weight-gradient sum -> one product of a concat",
                                               "sum of slice_grads -> concat"};
            for (int k = 0; k < 4; k++) kn_pass_stats_fire(st, what[k], cnt[k]);
            kn_log(KN_LOG_INFO, "hfuse: merged %d forward, %d input-gradient, %d weight-gradient groups, %d slice_grad sums",
                   cnt[HF_FWD], cnt[HF_DGRAD], cnt[HF_WGRAD], cnt[HF_CAT]);
        }
    }
    kn_free(p.uses);
    kn_free(p.role);
    kn_free(p.live);
    kn_free(p.grp);
    kn_free(p.memo);
    return s;
}
