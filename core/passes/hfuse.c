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
 * (stacked()). A fourth rule takes the bias's gradient with it: a sum of slice_grads that
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
 * the same sums, in kiln's GEMM the same bits. */
#include <string.h>

#include "ir/ir_impl.h"
#include "kiln/passes.h"

enum { HF_MAX = 8, HF_LEAVES = 16 }; /* parts one group merges; leaves of a sum looked at */

typedef enum hf_kind { HF_FWD, HF_DGRAD, HF_WGRAD, HF_CAT } hf_kind;
/* What an old node becomes: copied, dropped, a column slice of the merged product (a
 * forward part), or the merged sum (the root of a sum). */
typedef enum hf_role { R_KEEP = 0, R_DROP, R_SLICE, R_ROOT } hf_role;

typedef struct hf_group {
    hf_kind kind;
    int k;                 /* parts */
    int32_t part[HF_MAX];  /* FWD: the products; DGRAD: the products; WGRAD, CAT: the slice_grads */
    int32_t opnd[HF_MAX];  /* DGRAD, WGRAD: g_i; CAT: what the slice_grad scatters */
    int64_t start[HF_MAX], stop[HF_MAX];
    int32_t a;             /* FWD, WGRAD: the shared operand */
    int32_t w;             /* FWD, DGRAD: the weight whose columns the slices tile */
    int cast;              /* FWD, DGRAD: the slices' cast dtype; WGRAD: the products'; -1: none */
    int axis;              /* CAT: the axis the slice_grads tile */
    kn_attrs mm;           /* the merged product's ta, tb */
    int32_t at;            /* FWD: the first product (the merged one goes there); else the sum's root */
    int32_t rest[HF_LEAVES];
    int nrest;             /* the sum's other leaves */
    bool colsum;           /* CAT: the parts are column sums of the g_i, now in opnd (column_sums()) */
    int32_t src;           /* the stacked value the g_i are heads of (stacked()); -1 */
    int nperm;             /* its permutation that gives their concat, reshaped */
    int64_t perm[KN_MAX_DIMS];
    int32_t z;             /* FWD: the merged product in the new graph */
} hf_group;

typedef struct hf_memo {   /* a node emitted once and shared (cast of W, concat of the g_i) */
    kn_op op;
    int nin;
    int32_t in[2];
    kn_attrs attrs;
    int32_t id;
} hf_memo;

typedef struct hf_plan {
    const kn_graph *g;
    int32_t *uses;
    int32_t *reader;       /* the only reader of a value read once and not an output; -1 */
    int32_t *who;          /* group of a member; -1 */
    uint8_t *role;
    bool *live;            /* kept in the new graph (mark_live) */
    hf_group *grp;
    int ngrp, cap;
    hf_memo *memo;
    int nmemo, memocap;
} hf_plan;

static bool free_node(const hf_plan *p, int32_t v) { return p->who[v] < 0; }
static bool once(const hf_plan *p, int32_t v) { return p->uses[v] == 1 && p->reader[v] >= 0 && free_node(p, v); }

/* v = slice(W, axis 1, [s, e), step 1) of a 2-D W, or a cast of one (dtype in *cast). */
static bool col_slice(const kn_graph *g, int32_t v, int32_t *w, int *cast, int64_t *s, int64_t *e) {
    const kn_node *n = &g->nodes[v];
    *cast = -1;
    if (n->op == KN_OP_CAST) {
        *cast = (int)n->type.dtype;
        n = &g->nodes[n->in[0]];
    }
    if (n->op != KN_OP_SLICE || n->attrs.step != 1 || (n->attrs.axis != 1 && n->attrs.axis != -1)) return false;
    const kn_type *wt = &g->nodes[n->in[0]].type;
    if (wt->ndim != 2) return false;
    int64_t first, len;
    kn_ir_slice_range(wt->shape[1], n->attrs.start, n->attrs.stop, 1, &first, &len);
    if (len <= 0) return false;
    *w = n->in[0];
    *s = first;
    *e = first + len;
    return true;
}

/* Sort the parts by start; true when there are at least two and they tile [0, n). */
static bool tiles(hf_group *t, int64_t n) {
    for (int i = 1; i < t->k; i++)
        for (int j = i; j > 0 && t->start[j] < t->start[j - 1]; j--) {
            int32_t pt = t->part[j], op = t->opnd[j];
            int64_t s = t->start[j], e = t->stop[j];
            t->part[j] = t->part[j - 1], t->opnd[j] = t->opnd[j - 1];
            t->start[j] = t->start[j - 1], t->stop[j] = t->stop[j - 1];
            t->part[j - 1] = pt, t->opnd[j - 1] = op, t->start[j - 1] = s, t->stop[j - 1] = e;
        }
    int64_t at = 0;
    for (int i = 0; i < t->k; i++) {
        if (t->start[i] != at) return false;
        at = t->stop[i];
    }
    return t->k >= 2 && at == n;
}

static hf_group *new_group(hf_plan *p, hf_kind kind) {
    hf_group *t = &p->grp[p->ngrp];
    memset(t, 0, sizeof *t);
    t->kind = kind;
    t->a = t->w = t->z = t->src = -1;
    t->cast = -1;
    t->mm = kn_attrs_default();
    return t;
}

static void member(hf_plan *p, int32_t v, hf_role r) {
    p->who[v] = p->ngrp;
    p->role[v] = (uint8_t)r;
}

/* ---------------------------------------------------------------- forward */

/* A product matmul(a, cast?(slice(W))) with tb = 0: its W, cast, and column range. */
static bool fwd_part(const hf_plan *p, int32_t i, int32_t *w, int *cast, int64_t *s, int64_t *e) {
    const kn_node *n = &p->g->nodes[i];
    return n->op == KN_OP_MATMUL && !n->attrs.tb && free_node(p, i) && col_slice(p->g, n->in[1], w, cast, s, e);
}

static void match_forward(hf_plan *p) {
    const kn_graph *g = p->g;
    for (int32_t i = 0; i < g->nnodes && p->ngrp < p->cap; i++) {
        int32_t w, w2;
        int cast, cast2;
        int64_t s, e;
        if (!fwd_part(p, i, &w, &cast, &s, &e)) continue;
        const kn_node *n = &g->nodes[i];
        hf_group *t = new_group(p, HF_FWD);
        t->a = n->in[0], t->w = w, t->cast = cast, t->at = i;
        t->mm.ta = n->attrs.ta;
        for (int32_t j = i; j < g->nnodes; j++) { /* its siblings: the same a, W, cast and ta */
            const kn_node *m = &g->nodes[j];
            if (!fwd_part(p, j, &w2, &cast2, &s, &e) || m->in[0] != t->a || w2 != w || cast2 != cast ||
                m->attrs.ta != n->attrs.ta)
                continue;
            if (t->k == HF_MAX) { t->k = 0; break; }
            t->part[t->k] = j, t->start[t->k] = s, t->stop[t->k] = e, t->k++;
        }
        if (!tiles(t, g->nodes[w].type.shape[1])) continue;
        for (int k = 0; k < t->k; k++) member(p, t->part[k], R_SLICE);
        p->ngrp++;
    }
}

/* ---------------------------------------------------------------- sums */

/* An add read once, by an add of its own type: an inner node of a sum. */
static bool inner_add(const hf_plan *p, int32_t v) {
    const kn_graph *g = p->g;
    if (g->nodes[v].op != KN_OP_ADD || !once(p, v)) return false;
    const kn_node *r = &g->nodes[p->reader[v]];
    return r->op == KN_OP_ADD && kn_type_equal(&r->type, &g->nodes[v].type);
}

/* The leaves of the sum rooted at add `root` (at most HF_LEAVES; false when more). */
static bool leaves(const hf_plan *p, int32_t root, int32_t *leaf, int *nleaf) {
    int32_t stack[2 * HF_LEAVES];
    int top = 0;
    *nleaf = 0;
    stack[top++] = root;
    while (top) {
        const kn_node *n = &p->g->nodes[stack[--top]];
        for (int k = 1; k >= 0; k--) {
            int32_t v = n->in[k];
            if (inner_add(p, v)) {
                if (top == 2 * HF_LEAVES) return false;
                stack[top++] = v;
            } else {
                if (*nleaf == HF_LEAVES) return false;
                leaf[(*nleaf)++] = v;
            }
        }
    }
    return true;
}

/* The inner adds of the sum rooted at root are dropped with its parts. */
static void drop_inner(hf_plan *p, int32_t v) {
    const kn_node *n = &p->g->nodes[v];
    for (int k = 0; k < 2; k++)
        if (inner_add(p, n->in[k])) {
            drop_inner(p, n->in[k]);
            member(p, n->in[k], R_DROP);
        }
}

/* An input gradient's part: matmul(g, cast?(slice(W)), tb = 1), ta = 0, of the sum's type. */
static bool dgrad_part(const hf_plan *p, int32_t v, const kn_type *rt, int32_t *w, int *cast, int64_t *s,
                       int64_t *e) {
    const kn_node *n = &p->g->nodes[v];
    return n->op == KN_OP_MATMUL && n->attrs.tb && !n->attrs.ta && once(p, v) && kn_type_equal(&n->type, rt) &&
           col_slice(p->g, n->in[1], w, cast, s, e);
}

/* A slice_grad of the sum's type along one axis (normalized into *axis), step 1, read once. */
static bool scatter_part(const hf_plan *p, int32_t v, const kn_type *rt, int *axis, int64_t *s, int64_t *e) {
    const kn_node *n = &p->g->nodes[v];
    if (n->op != KN_OP_SLICE_GRAD || n->attrs.step != 1 || !once(p, v) || !kn_type_equal(&n->type, rt)) return false;
    int nd = rt->ndim;
    if (n->attrs.axis < -nd || n->attrs.axis >= nd) return false;
    *axis = (int)(n->attrs.axis < 0 ? n->attrs.axis + nd : n->attrs.axis);
    int64_t len;
    kn_ir_slice_range(rt->shape[*axis], n->attrs.start, n->attrs.stop, 1, s, &len);
    *e = *s + len;
    return len > 0;
}

/* A weight gradient's part: slice_grad(cast?(matmul(a, g, ta = 1)), axis 1) of a 2-D
 * sum, the cast and the product read once: a, g and the cast's dtype. */
static bool wgrad_part(const hf_plan *p, int32_t v, const kn_type *rt, int32_t *a, int32_t *gi, int *cast,
                       int64_t *s, int64_t *e) {
    const kn_graph *g = p->g;
    int axis;
    if (rt->ndim != 2 || !scatter_part(p, v, rt, &axis, s, e) || axis != 1) return false;
    int32_t x = g->nodes[v].in[0];
    *cast = -1;
    if (g->nodes[x].op == KN_OP_CAST) {
        if (!once(p, x)) return false;
        *cast = (int)g->nodes[x].type.dtype;
        x = g->nodes[x].in[0];
    }
    const kn_node *m = &g->nodes[x];
    if (m->op != KN_OP_MATMUL || !m->attrs.ta || m->attrs.tb || !once(p, x) || m->type.ndim != 2 ||
        g->nodes[m->in[0]].type.ndim != 2 || g->nodes[m->in[1]].type.ndim != 2)
        return false;
    *a = m->in[0];
    *gi = m->in[1];
    return true;
}

/* The parts of kind `kind` among the leaves of the sum at root that share the first
 * part's key (W and cast; a and cast; the axis) into t; the rest into t->rest. */
static void collect(hf_plan *p, hf_group *t, const int32_t *leaf, int nleaf) {
    const kn_graph *g = p->g;
    const kn_type *rt = &g->nodes[t->at].type;
    bool have = false;
    for (int l = 0; l < nleaf; l++) {
        int32_t v = leaf[l], key = -1, gi = -1;
        int cast = -1, axis = 0;
        int64_t s, e;
        bool ok = false, dup = false;
        for (int k = 0; k < t->k; k++) dup |= t->part[k] == v;
        if (!dup && t->kind == HF_DGRAD && dgrad_part(p, v, rt, &key, &cast, &s, &e)) {
            ok = !have || (key == t->w && cast == t->cast &&
                           g->nodes[g->nodes[v].in[0]].type.dtype == g->nodes[t->opnd[0]].type.dtype);
            gi = g->nodes[v].in[0];
            if (ok) t->w = key, t->cast = cast;
        } else if (!dup && t->kind == HF_WGRAD && wgrad_part(p, v, rt, &key, &gi, &cast, &s, &e)) {
            ok = !have || (key == t->a && cast == t->cast &&
                           g->nodes[gi].type.dtype == g->nodes[t->opnd[0]].type.dtype);
            if (ok) t->a = key, t->cast = cast;
        } else if (!dup && t->kind == HF_CAT && scatter_part(p, v, rt, &axis, &s, &e)) {
            gi = g->nodes[v].in[0];
            ok = !have || axis == t->axis;
            if (ok) t->axis = axis;
        }
        if (ok && t->k < HF_MAX) {
            t->part[t->k] = v, t->opnd[t->k] = gi, t->start[t->k] = s, t->stop[t->k] = e, t->k++;
            have = true;
        } else {
            t->rest[t->nrest++] = v;
        }
    }
}

/* Whether the parts' operands g_i are the heads of one stacked value S [k, ...], each
 * reshape(permute(reshape?(slice(S, axis 0, [i, i + 1))))) with one permutation, and the
 * reshape makes a last axis of whole permuted axes: the flash backward's dq, dk and dv in
 * the GPT ([3, B, H, T, D] -> [B T, H D] each). Their concat along that last axis is then
 * one permute of S, reshaped ([3, B, H, T, D] -> [B, T, 3, H, D] -> [B T, 3 H D]): S's axis
 * 0 goes just before the axes of the last one. That copies S once, where the chain of
 * two-operand concats would copy the heads and then their concats again. Sets t->src and
 * t->perm. */
static bool stacked(const hf_plan *p, hf_group *t) {
    const kn_graph *g = p->g;
    const kn_node *pm0 = NULL;
    int32_t src = -1;
    const kn_type *v = &g->nodes[t->opnd[0]].type;
    for (int i = 0; i < t->k; i++) {
        const kn_node *r = &g->nodes[t->opnd[i]];
        if (r->op != KN_OP_RESHAPE || !kn_type_equal(&r->type, v)) return false;
        const kn_node *pm = &g->nodes[r->in[0]], *s = &g->nodes[pm->in[0]];
        if (pm->op != KN_OP_PERMUTE) return false;
        if (s->op == KN_OP_RESHAPE) s = &g->nodes[s->in[0]];
        if (s->op != KN_OP_SLICE || s->attrs.axis != 0 || s->attrs.step != 1) return false;
        const kn_type *st = &g->nodes[s->in[0]].type;
        int64_t first, len;
        kn_ir_slice_range(st->shape[0], s->attrs.start, s->attrs.stop, 1, &first, &len);
        if (first != i || len != 1 || st->shape[0] != t->k) return false;
        if (i == 0) src = s->in[0], pm0 = pm;
        else if (s->in[0] != src || !kn_attrs_equal(KN_OP_PERMUTE, &pm->attrs, &pm0->attrs)) return false;
    }
    const kn_type *st = &g->nodes[src].type, *pin = &g->nodes[pm0->in[0]].type, *pout = &pm0->type;
    int n = pin->ndim, r = n;
    bool ok = n == st->ndim - 1;
    for (int d = 0; ok && d < n; d++) ok = pin->shape[d] == st->shape[d + 1]; /* the reshape dropped S's axis 0 */
    int64_t last = v->shape[v->ndim - 1], prod = 1;
    while (ok && r > 0 && prod < last) prod *= pout->shape[--r];
    if (!ok || prod != last || r == n) return false;
    t->src = src;
    t->nperm = 0;
    for (int d = 0; d <= n; d++) {
        if (d == r) t->perm[t->nperm++] = 0;
        if (d == n) break;
        int64_t a = pm0->attrs.perm[d];
        t->perm[t->nperm++] = (a < 0 ? a + n : a) + 1;
    }
    return true;
}

/* x = reshape(sum(cast?(g), axes [0], keepdim)) [n] of a 2-D g, each node read once: g, the
 * cast's dtype in *cast, the nodes in chain[0..*nchain). */
static bool column_sum(const hf_plan *p, int32_t x, int32_t *g_out, int *cast, int32_t *chain, int *nchain) {
    const kn_graph *g = p->g;
    const kn_node *r = &g->nodes[x];
    *nchain = 0;
    if (r->op != KN_OP_RESHAPE || !once(p, x) || r->type.ndim != 1) return false;
    chain[(*nchain)++] = x;
    int32_t sv = r->in[0];
    const kn_node *s = &g->nodes[sv];
    if (s->op != KN_OP_SUM || !once(p, sv) || !s->attrs.keepdim || s->attrs.naxes != 1 ||
        (s->attrs.axes[0] != 0 && s->attrs.axes[0] != -2) || s->type.ndim != 2)
        return false;
    chain[(*nchain)++] = sv;
    int32_t v = s->in[0];
    *cast = -1;
    if (g->nodes[v].op == KN_OP_CAST) {
        if (!once(p, v)) return false;
        *cast = (int)g->nodes[v].type.dtype;
        chain[(*nchain)++] = v;
        v = g->nodes[v].in[0];
    }
    *g_out = v;
    return g->nodes[v].type.ndim == 2;
}

/* A sum of slice_grads of the column sums of g_i (a bias's gradient: reshape(sum(cast?(g_i),
 * axes [0], keepdim))) is the column sum of concat(g_i): one reduction over the concat the
 * weight's gradients share, instead of k sums and a chain of concats. Sets t->colsum, the
 * g_i in t->opnd, the cast in t->cast, and drops the k sums. */
static void column_sums(hf_plan *p, hf_group *t) {
    int32_t gi[HF_MAX], chain[HF_MAX][3];
    int nchain[HF_MAX], cast = -1;
    for (int k = 0; k < t->k; k++) {
        int c;
        if (!column_sum(p, t->opnd[k], &gi[k], &c, chain[k], &nchain[k])) return;
        if (k && (c != cast || !kn_type_equal(&p->g->nodes[gi[k]].type, &p->g->nodes[gi[0]].type))) return;
        cast = c;
    }
    t->colsum = true;
    t->cast = cast;
    for (int k = 0; k < t->k; k++) {
        t->opnd[k] = gi[k];
        for (int c = 0; c < nchain[k]; c++) member(p, chain[k][c], R_DROP);
    }
}

static void take_parts(hf_plan *p, hf_group *t) {
    const kn_graph *g = p->g;
    for (int k = 0; k < t->k; k++) {
        int32_t v = t->part[k];
        member(p, v, R_DROP);
        if (t->kind != HF_WGRAD) continue;
        int32_t x = g->nodes[v].in[0]; /* the cast and the product under the slice_grad */
        if (g->nodes[x].op == KN_OP_CAST) member(p, x, R_DROP), x = g->nodes[x].in[0];
        member(p, x, R_DROP);
    }
}

static void match_sums(hf_plan *p) {
    const kn_graph *g = p->g;
    for (int32_t i = 0; i < g->nnodes && p->ngrp < p->cap; i++) {
        if (g->nodes[i].op != KN_OP_ADD || !free_node(p, i) || inner_add(p, i)) continue;
        int32_t leaf[HF_LEAVES];
        int nleaf;
        if (!leaves(p, i, leaf, &nleaf)) continue;
        const kn_type *rt = &g->nodes[i].type;
        static const hf_kind kinds[] = {HF_DGRAD, HF_WGRAD, HF_CAT};
        for (size_t q = 0; q < sizeof kinds / sizeof kinds[0]; q++) {
            hf_group *t = new_group(p, kinds[q]);
            t->at = i;
            if (kinds[q] == HF_DGRAD) t->mm.tb = 1;
            if (kinds[q] == HF_WGRAD) t->mm.ta = 1;
            collect(p, t, leaf, nleaf);
            int64_t n = kinds[q] == HF_DGRAD ? g->nodes[t->w >= 0 ? t->w : 0].type.shape[1]
                                             : rt->shape[kinds[q] == HF_CAT ? t->axis : rt->ndim - 1];
            if (t->k < 2 || !tiles(t, n)) continue;
            if (kinds[q] == HF_CAT) column_sums(p, t);
            if (kinds[q] != HF_CAT || t->colsum) stacked(p, t);
            take_parts(p, t);
            drop_inner(p, i);
            member(p, i, R_ROOT);
            p->ngrp++;
            break;
        }
    }
}

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
        int32_t pid, src = map[t->src];
        KN_TRY(emit(p, out, KN_OP_PERMUTE, 1, &src, &a, scope, true, &pid));
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
        match_forward(&p);
        match_sums(&p);
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
