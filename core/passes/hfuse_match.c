/* hfuse_match.c — the `hfuse` pass's matching (the pass is described in hfuse.c): find
 * the groups of sibling products it merges, by structure, and record them in the plan
 * (hfuse.h). Forward: products matmul(x, cast?(slice_i(W))) with one x whose column slices
 * tile W. Sums: a tree of adds (inner adds read once, by an add of their type) whose leaves
 * include parts that tile W's columns: input-gradient products matmul(g_i, slice_i(W),
 * tb = 1), weight-gradient slice_grad(matmul(x, g_i, ta = 1)), or slice_grads that tile
 * an axis (the bias's gradient; column sums of the g_i where they are). A part is taken
 * only when nothing else reads it; where the g_i are the heads of one stacked value, the
 * group notes the one permute that gives their concat. */
#include <string.h>

#include "passes/hfuse.h"

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

void hf_match_forward(hf_plan *p) {
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
static bool stacked_rows(const hf_plan *p, hf_group *t);

static bool stacked(const hf_plan *p, hf_group *t) {
    if (stacked_rows(p, t)) return true;
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

/* The other stacking (the flash pass's [B, T, H, D] layout): each g_i [R, C] is
 * reshape(reshape?(slice(S, axis a, [i, i + 1)))) of one S whose axes before a make R and
 * whose axes after a make C (S [B, T, 3, H, D], g_i [B T, H D]): their concat along the last
 * axis is S itself, reshaped, with no copy. Sets t->src and t->nperm = 0 (no permute). */
static bool stacked_rows(const hf_plan *p, hf_group *t) {
    const kn_graph *g = p->g;
    const kn_type *v = &g->nodes[t->opnd[0]].type;
    int32_t src = -1;
    int64_t ax = -1;
    for (int i = 0; i < t->k; i++) {
        const kn_node *r = &g->nodes[t->opnd[i]], *s;
        if (r->op != KN_OP_RESHAPE || !kn_type_equal(&r->type, v)) return false;
        s = &g->nodes[r->in[0]];
        if (s->op == KN_OP_RESHAPE) s = &g->nodes[s->in[0]];
        if (s->op != KN_OP_SLICE || s->attrs.step != 1) return false;
        const kn_type *st = &g->nodes[s->in[0]].type;
        int64_t a = s->attrs.axis < 0 ? s->attrs.axis + st->ndim : s->attrs.axis, first, len;
        if (a < 0 || a >= st->ndim || st->shape[a] != t->k) return false;
        kn_ir_slice_range(st->shape[a], s->attrs.start, s->attrs.stop, 1, &first, &len);
        if (first != i || len != 1) return false;
        if (i == 0) src = s->in[0], ax = a;
        else if (s->in[0] != src || a != ax) return false;
    }
    const kn_type *st = &g->nodes[src].type;
    int64_t rows = 1, cols = 1, vrows = 1;
    for (int d = 0; d < st->ndim; d++)
        if (d < ax) rows *= st->shape[d];
        else if (d > ax) cols *= st->shape[d];
    for (int d = 0; d + 1 < v->ndim; d++) vrows *= v->shape[d];
    if (v->ndim < 1 || rows != vrows || cols != v->shape[v->ndim - 1]) return false;
    t->src = src;
    t->nperm = 0;
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

void hf_match_sums(hf_plan *p) {
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
