/* fuse.c — the scheduler: which nodes of a graph become one generated kernel.
 *
 * The rules are stated in kiln/codegen.h; this file applies them greedily, in definition
 * order, which is how XLA's and Inductor's first fusion passes start too: a node either
 * joins the group of one of its operands (the newest open one first) or opens a group of
 * its own. Greedy is not optimal (it never undoes a merge), but every decision is local,
 * explainable and logged, which is what a student needs to read a schedule.
 *
 * Views and `full` constants are the other half. A fused kernel reads a view in place
 * (its strides are folded into the load) and writes a constant as a literal, so neither is
 * computed unless a library step or the graph's outputs need it as a tensor. That is
 * decided first (materialize[]), because a view chain can only be folded when it ends at a
 * tensor that exists.
 *
 * On a GPU target a column sum (a bias's gradient), which no group can take as a member of
 * its own level, joins the group that computes its operand as a column-sum member
 * (join_colsum; kiln/schedule.h, kn_schedule_opts): the kernel sums what it computes instead
 * of storing it for a library step to read again. */
#include <stdarg.h>
#include <string.h>

#include "kiln/schedule.h"
#include "ir/ir_impl.h"

enum { LV_NONE = 0, LV_FULL = KN_LEVEL_FULL, LV_OUTER = KN_LEVEL_OUTER, LV_COLSUM = KN_LEVEL_COLSUM };

typedef struct grp {
    int32_t *nodes;
    int n, cap;
    bool fused, sealed, reduces;
    int ndim;                    /* the space S */
    int64_t shape[KN_MAX_DIMS];
    uint32_t inner;              /* reduced axes of S */
    uint32_t csmask;             /* the summed axes of its column sums (0: none) */
} grp;

typedef struct fz {
    const kn_graph *g;
    kn_schedule *s;
    grp *grps;
    int ngrps, cap;
    uint8_t *level;              /* per node, in its group */
    int32_t *stamp;              /* per node, for the cycle search */
    int32_t stamp_now;
    char *log;
    size_t loglen, logcap;
    bool colsums;                /* fold column sums into their operand's kernel */
    kn_status st;
} fz;

static void logf_(fz *z, const char *fmt, ...) {
    if (z->st != KN_OK) return;
    char line[320];
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (w < 0) return;
    size_t len = strlen(line);
    if (z->loglen + len + 2 > z->logcap) {
        size_t nc = z->logcap ? z->logcap * 2 : 4096;
        while (nc < z->loglen + len + 2) nc *= 2;
        char *p = kn_realloc(z->log, nc);
        if (!p) { z->st = kn_error(KN_ERR_OOM, "kn_schedule_build: out of memory for the log"); return; }
        z->log = p;
        z->logcap = nc;
    }
    memcpy(z->log + z->loglen, line, len);
    z->loglen += len;
    z->log[z->loglen++] = '\n';
    z->log[z->loglen] = 0;
}

static bool is_view(kn_op op) { return kn_op_get(op)->category == KN_CAT_VIEW; }

static bool fusible_dtype(kn_dtype dt) {
    return dt == KN_DT_F32 || dt == KN_DT_F64 || dt == KN_DT_F16 || dt == KN_DT_BF16 || dt == KN_DT_BOOL;
}

/* An op the kernel IR can express: elementwise (but dropout, whose Philox stream is the
 * library's) and sum/mean/max, on float or bool values; onehot reads integer indices. */
static bool fusible(const kn_graph *g, const kn_node *n) {
    kn_op_category c = kn_op_get(n->op)->category;
    if (c != KN_CAT_ELEMENTWISE && c != KN_CAT_REDUCTION) return false;
    if (n->op == KN_OP_DROPOUT) return false;
    if (n->op == KN_OP_CAUSAL_FILL && n->type.ndim < 2) return false;
    if (!fusible_dtype(n->type.dtype)) return false;
    if (n->op == KN_OP_ONEHOT) return true; /* its operand is an index (i32, i64), read as a load */
    for (int k = 0; k < n->nin; k++)
        if (!fusible_dtype(g->nodes[n->in[k]].type.dtype)) return false;
    if (c == KN_CAT_REDUCTION) {
        const kn_type *xt = &g->nodes[n->in[0]].type;
        if (!kn_dtype_is_float(n->type.dtype) || xt->ndim == 0) return false; /* a scalar: nothing to reduce */
        /* Row reductions only (the reduced axes are the trailing ones), whose inner loop
         * walks memory contiguously. A column sum (a bias gradient: sum over the leading
         * axes) would stride through memory once per output element; the library's kernel
         * walks the rows in order with a vector of accumulators instead. */
        unsigned mask;
        kn_ir_reduce_mask(&n->attrs, xt->ndim, &mask);
        unsigned trailing = (1u << xt->ndim) - 1u;
        while (trailing & ~mask) trailing &= trailing - 1u; /* the longest run of trailing axes in mask */
        if (mask != trailing) return false;
    }
    return true;
}

/* On a GPU: a reduction the library should run instead (kiln/codegen.h, kn_schedule_opts).
 * rows x len: the rows it would make and their length. */
static bool gpu_library_reduction(const kn_graph *g, const kn_node *n, int64_t *rows, int64_t *len) {
    if (kn_op_get(n->op)->category != KN_CAT_REDUCTION) return false;
    const kn_type *xt = &g->nodes[n->in[0]].type;
    if (xt->dtype != KN_DT_F32 && xt->dtype != KN_DT_F64) return false; /* the library's dtypes */
    unsigned mask;
    kn_ir_reduce_mask(&n->attrs, xt->ndim, &mask);
    *rows = *len = 1;
    for (int k = 0; k < xt->ndim; k++) *(mask & (1u << k) ? len : rows) *= xt->shape[k];
    return *rows < KN_FUSE_GPU_FEW_ROWS && *len >= KN_FUSE_GPU_LONG_ROW;
}

static void contig(int nd, const int64_t *shape, int64_t *st) {
    int64_t s = 1;
    for (int i = nd - 1; i >= 0; i--) { st[i] = s; s *= shape[i] > 0 ? shape[i] : 1; }
}

bool kn_schedule_resolve(const kn_graph *g, const bool *materialize, int32_t v, int32_t *base, int64_t *offset,
                         int64_t *strides) {
    const kn_node *n = &g->nodes[v];
    if (materialize[v]) {
        *base = v;
        *offset = 0;
        contig(n->type.ndim, n->type.shape, strides);
        return true;
    }
    if (!is_view(n->op)) return false;
    const kn_type *ut = &g->nodes[n->in[0]].type;
    int64_t ust[KN_MAX_DIMS], off;
    if (!kn_schedule_resolve(g, materialize, n->in[0], base, &off, ust)) return false;
    int nd = n->type.ndim;
    if (n->op == KN_OP_RESHAPE) {
        int64_t want[KN_MAX_DIMS];
        contig(ut->ndim, ut->shape, want);
        for (int i = 0; i < ut->ndim; i++)
            if (ut->shape[i] != 1 && ust[i] != want[i]) return false; /* not contiguous: no strides */
        contig(nd, n->type.shape, strides);
    } else if (n->op == KN_OP_PERMUTE) {
        for (int j = 0; j < nd; j++) strides[j] = ust[n->attrs.perm[j]];
    } else if (n->op == KN_OP_BROADCAST_TO) {
        for (int j = 0; j < nd; j++) {
            int q = j - (nd - ut->ndim);
            strides[j] = q < 0 || (ut->shape[q] == 1 && n->type.shape[j] != 1) ? 0 : ust[q];
        }
    } else if (n->op == KN_OP_SLICE) {
        int ax = (int)(n->attrs.axis < 0 ? n->attrs.axis + nd : n->attrs.axis);
        int64_t first, len;
        kn_ir_slice_range(ut->shape[ax], n->attrs.start, n->attrs.stop, n->attrs.step, &first, &len);
        for (int j = 0; j < nd; j++) strides[j] = ust[j];
        off += first * ust[ax];
        strides[ax] = ust[ax] * n->attrs.step;
    } else {
        return false;
    }
    *offset = off;
    return true;
}

/* ---- materialization of views and constants */

/* Which values exist as tensors: everything but views and `full`s that only fused nodes
 * read (and that are not outputs); a view chain that cannot be folded into strides (a
 * reshape of a non-contiguous view) materializes the reshape's operand; a materialized
 * view or constant is computed by its kernel, which needs its operand as a tensor too. */
static void decide_materialize(const kn_graph *g, bool *mat, const bool *fus) {
    int nn = g->nnodes;
    for (int i = 0; i < nn; i++) {
        const kn_node *n = &g->nodes[i];
        mat[i] = !(is_view(n->op) || n->op == KN_OP_FULL);
    }
    for (int i = 0; i < g->noutputs; i++) mat[g->outputs[i]] = true;
    for (int i = 0; i < nn; i++) {
        const kn_node *n = &g->nodes[i];
        if (fus[i] || is_view(n->op)) continue;
        for (int k = 0; k < n->nin; k++) mat[n->in[k]] = true; /* a library step reads tensors */
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (int i = nn - 1; i >= 0; i--) { /* a materialized view needs its operand */
            const kn_node *n = &g->nodes[i];
            if (mat[i] && is_view(n->op) && !mat[n->in[0]]) { mat[n->in[0]] = true; changed = true; }
        }
        for (int i = 0; i < nn; i++) { /* an unfoldable chain is cut at the reshape's operand */
            const kn_node *n = &g->nodes[i];
            if (mat[i] || !is_view(n->op)) continue;
            int32_t b;
            int64_t off, st[KN_MAX_DIMS];
            if (!kn_schedule_resolve(g, mat, i, &b, &off, st)) {
                int32_t u = i;
                while (!mat[u] && is_view(g->nodes[u].op) && g->nodes[u].op != KN_OP_RESHAPE) u = g->nodes[u].in[0];
                u = mat[u] || !is_view(g->nodes[u].op) ? i : g->nodes[u].in[0];
                mat[u] = true;
                changed = true;
            }
        }
    }
}

/* ---- groups */

/* The node after which group G runs: its last member that is not a column sum. */
static int32_t group_at(const fz *z, const grp *G) {
    for (int k = G->n - 1; k > 0; k--)
        if (z->level[G->nodes[k]] != LV_COLSUM) return G->nodes[k];
    return G->nodes[0];
}

static int new_group(fz *z, bool fused, int32_t node) {
    if (z->ngrps == z->cap) {
        int nc = z->cap ? z->cap * 2 : 64;
        grp *p = kn_realloc(z->grps, sizeof *p * (size_t)nc);
        if (!p) { z->st = kn_error(KN_ERR_OOM, "kn_schedule_build: out of memory"); return -1; }
        z->grps = p;
        z->cap = nc;
    }
    grp *G = &z->grps[z->ngrps];
    memset(G, 0, sizeof *G);
    G->fused = fused;
    const kn_node *n = &z->g->nodes[node];
    if (n->op == KN_OP_SUM || n->op == KN_OP_MEAN || n->op == KN_OP_MAX) {
        const kn_type *xt = &z->g->nodes[n->in[0]].type;
        unsigned mask;
        kn_ir_reduce_mask(&n->attrs, xt->ndim, &mask);
        G->ndim = xt->ndim;
        memcpy(G->shape, xt->shape, sizeof G->shape);
        G->inner = mask;
        G->reduces = true;
    } else {
        G->ndim = n->type.ndim;
        memcpy(G->shape, n->type.shape, sizeof G->shape);
    }
    return z->ngrps++;
}

static bool add_member(fz *z, int gi, int32_t node, int level) {
    grp *G = &z->grps[gi];
    if (G->n == G->cap) {
        int nc = G->cap ? G->cap * 2 : 8;
        int32_t *p = kn_realloc(G->nodes, sizeof *p * (size_t)nc);
        if (!p) { z->st = kn_error(KN_ERR_OOM, "kn_schedule_build: out of memory"); return false; }
        G->nodes = p;
        G->cap = nc;
    }
    G->nodes[G->n++] = node;
    z->s->group_of[node] = gi;
    z->level[node] = (uint8_t)level;
    return true;
}

static bool same_shape(int nd, const int64_t *a, int nd2, const int64_t *b) {
    if (nd != nd2) return false;
    for (int k = 0; k < nd; k++) if (a[k] != b[k]) return false;
    return true;
}

/* Does value v depend on a member of group gi? (A search backwards from v, over nodes
 * after the group's first member.) */
static bool reaches(fz *z, int32_t v, int gi, int32_t first) {
    z->stamp_now++;
    int32_t stack[512];
    int sp = 0;
    stack[sp++] = v;
    while (sp > 0) {
        int32_t u = stack[--sp];
        if (u < first || z->stamp[u] == z->stamp_now) continue;
        z->stamp[u] = z->stamp_now;
        if (z->s->group_of[u] == gi && z->level[u] != LV_NONE) return true;
        const kn_node *n = &z->g->nodes[u];
        for (int k = 0; k < n->nin; k++) {
            if (sp == (int)(sizeof stack / sizeof stack[0])) return true; /* too deep to tell: refuse */
            stack[sp++] = n->in[k];
        }
    }
    return false;
}

/* The group member an operand reads: the operand itself, or none when it is read from
 * memory (through a view chain or as a constant). */
static int32_t base_of(fz *z, int32_t v) {
    const kn_node *n = &z->g->nodes[v];
    if (n->op == KN_OP_FULL && !z->s->materialize[v]) return -1;
    int32_t b;
    int64_t off, st[KN_MAX_DIMS];
    if (!z->s->materialize[v] && kn_schedule_resolve(z->g, z->s->materialize, v, &b, &off, st)) return b;
    return v;
}

/* Try to put fusible node i into group gi; NULL when it joins, else the reason. The rules
 * are lab 05's unit (kn_fuse_refusal); this describes the group, the node and where each
 * operand comes from. */
static const char *try_join(fz *z, int gi, int32_t i, bool horizontal, int *level_out) {
    const grp *G = &z->grps[gi];
    const kn_graph *g = z->g;
    const kn_node *n = &g->nodes[i];
    kn_fuse_query q = {.fused = G->fused, .sealed = G->sealed, .size = G->n, .ndim = G->ndim, .shape = G->shape,
                       .inner = G->inner, .reduces = G->reduces, .op = n->op, .type = &n->type,
                       .horizontal = horizontal, .nin = n->nin};
    q.reduction = kn_op_get(n->op)->category == KN_CAT_REDUCTION;
    if (q.reduction) {
        unsigned mask;
        kn_ir_reduce_mask(&n->attrs, g->nodes[n->in[0]].type.ndim, &mask);
        q.mask = mask;
    }
    int32_t first = G->n > 0 ? G->nodes[0] : 0;
    for (int k = 0; k < n->nin; k++) {
        int32_t a = n->in[k];
        kn_fuse_operand *o = &q.in[k];
        o->type = &g->nodes[a].type;
        o->in_group = z->s->group_of[a] == gi && z->level[a] != LV_NONE;
        o->level = z->level[a];
        if (o->in_group) continue;
        int32_t b = base_of(z, a);
        o->constant = b < 0;
        if (b < 0) continue;
        o->view_of_group = z->s->group_of[b] == gi && z->level[b] != LV_NONE;
        o->depends_on_group = !o->view_of_group && b >= first && reaches(z, b, gi, first);
    }
    return kn_fuse_refusal(&q, level_out);
}

/* Node i reads value v: v's group, when another one, is sealed. */
static void seal_reads(fz *z, int32_t i) {
    const kn_node *n = &z->g->nodes[i];
    int gi = z->s->group_of[i];
    for (int k = 0; k < n->nin; k++) {
        int32_t b = base_of(z, n->in[k]);
        if (b < 0) continue;
        int gb = z->s->group_of[b];
        if (gb >= 0 && gb != gi && z->grps[gb].fused && !z->grps[gb].sealed) {
            z->grps[gb].sealed = true;
            logf_(z, "seal the group of %%%d: %%%d = %s reads %%%d", z->grps[gb].nodes[0], i, kn_op_name(n->op), b);
        }
    }
}

/* A column sum: sum over a leading run of axes [0, k) of a value of more axes than k, to
 * a float value (a bias's gradient). *mask: the summed axes. */
static bool colsum_candidate(const kn_graph *g, const kn_node *n, unsigned *mask) {
    if (n->op != KN_OP_SUM || !kn_dtype_is_float(n->type.dtype) || !fusible_dtype(n->type.dtype)) return false;
    const kn_type *xt = &g->nodes[n->in[0]].type;
    if (xt->ndim < 2 || !fusible_dtype(xt->dtype)) return false;
    kn_ir_reduce_mask(&n->attrs, xt->ndim, mask);
    if (*mask == 0 || (*mask & 1u) == 0) return false;
    unsigned lead = *mask;
    if (lead & (lead + 1u)) return false; /* not of the form 0..01..1: not a leading run */
    return (*mask >> (xt->ndim - 1)) == 0;   /* the last axis is kept */
}

/* Column sum i (colsum_candidate, summed axes `mask`) joins the group that computes its
 * operand, as a LV_COLSUM member (kiln/schedule.h, kn_schedule_opts): true when it did. */
static bool join_colsum(fz *z, int32_t i, unsigned mask) {
    const kn_node *n = &z->g->nodes[i];
    int32_t a = n->in[0];
    int gi = z->s->group_of[a];
    if (gi < 0 || !z->grps[gi].fused || z->level[a] != LV_FULL) return false; /* a view, an input, a library step */
    grp *G = &z->grps[gi];
    const char *why = NULL;
    unsigned all = (1u << G->ndim) - 1u;
    if (G->n >= KN_FUSE_MAX) why = "the group is full (KN_FUSE_MAX nodes)";
    else if (G->reduces && (mask | G->inner) != all) why = "the group's row reduction is over other axes than the columns";
    else if (G->csmask && G->csmask != mask) why = "the group's column sums keep other columns";
    if (why) {
        logf_(z, "refuse %%%d = sum (a column sum) into the group of %%%d: %s", i, G->nodes[0], why);
        return false;
    }
    if (!add_member(z, gi, i, LV_COLSUM)) return false;
    G->csmask = mask;
    logf_(z, "fuse %%%d = sum (a column sum of %%%d) into the group of %%%d: its kernel sums the columns", i, a,
          G->nodes[0]);
    return true;
}

static void place(fz *z, int32_t i) {
    const kn_graph *g = z->g;
    const kn_node *n = &g->nodes[i];
    kn_schedule *s = z->s;
    if (n->op == KN_OP_INPUT || n->op == KN_OP_PARAM) return;
    if (!s->materialize[i] && (is_view(n->op) || n->op == KN_OP_FULL)) return; /* read in place */
    unsigned csmask;
    if (!s->fusible[i] && z->colsums && colsum_candidate(g, n, &csmask) && join_colsum(z, i, csmask)) return;
    if (!s->fusible[i]) {
        int gi = new_group(z, false, i);
        if (gi >= 0 && add_member(z, gi, i, LV_NONE)) seal_reads(z, i);
        return;
    }
    /* candidates: the groups of its operands, newest first; then (horizontal fusion) the
     * newest open group over the same space, which it may join without reading from it */
    int cand[KN_MAX_OPERANDS + 1], nc = 0;
    for (int k = 0; k < n->nin; k++) {
        int gk = s->group_of[n->in[k]];
        if (gk < 0 || z->level[n->in[k]] == LV_NONE) continue;
        bool dup = false;
        for (int c = 0; c < nc; c++) dup |= cand[c] == gk;
        if (!dup) cand[nc++] = gk;
    }
    for (int a = 0; a < nc; a++) /* newest first */
        for (int b = a + 1; b < nc; b++)
            if (cand[b] > cand[a]) { int t = cand[a]; cand[a] = cand[b]; cand[b] = t; }
    int nvert = nc;
    const kn_type *space = kn_op_get(n->op)->category == KN_CAT_REDUCTION ? &g->nodes[n->in[0]].type : &n->type;
    for (int gi = z->ngrps - 1; gi >= 0 && gi >= z->ngrps - 8 && nc <= KN_MAX_OPERANDS; gi--) {
        const grp *G = &z->grps[gi];
        bool dup = false;
        for (int c = 0; c < nc; c++) dup |= cand[c] == gi;
        if (!dup && G->fused && !G->sealed && same_shape(space->ndim, space->shape, G->ndim, G->shape)) {
            cand[nc++] = gi;
            break;
        }
    }
    for (int c = 0; c < nc; c++) {
        int level;
        const char *why = try_join(z, cand[c], i, c >= nvert, &level);
        if (!why && z->grps[cand[c]].csmask && kn_op_get(n->op)->category == KN_CAT_REDUCTION && !z->grps[cand[c]].reduces)
            why = "a row reduction into a group with column sums (their columns would change)";
        if (!why) {
            grp *G = &z->grps[cand[c]];
            if (kn_op_get(n->op)->category == KN_CAT_REDUCTION && !G->reduces) { /* the group's first reduction */
                unsigned mask;
                kn_ir_reduce_mask(&n->attrs, g->nodes[n->in[0]].type.ndim, &mask);
                G->reduces = true;
                G->inner = mask;
            }
            if (add_member(z, cand[c], i, level)) {
                logf_(z, "fuse %%%d = %s into the group of %%%d%s", i, kn_op_name(n->op), z->grps[cand[c]].nodes[0],
                      c >= nvert ? " (horizontal: same space, no data between them)" : "");
                seal_reads(z, i);
            }
            return;
        }
        logf_(z, "refuse %%%d = %s into the group of %%%d: %s", i, kn_op_name(n->op), z->grps[cand[c]].nodes[0], why);
    }
    int gi = new_group(z, true, i);
    if (gi < 0) return;
    add_member(z, gi, i, kn_op_get(n->op)->category == KN_CAT_REDUCTION ? LV_OUTER : LV_FULL);
    seal_reads(z, i);
}

void kn_schedule_free(kn_schedule *s) {
    if (!s) return;
    for (int i = 0; i < s->ngroups; i++) kn_free(s->groups[i].nodes);
    kn_free(s->groups);
    kn_free(s->group_of);
    kn_free(s->materialize);
    kn_free(s->fusible);
    kn_free(s->level);
    kn_free(s->log);
    kn_free(s);
}

/* Free what a failed build made (the groups are still the scheduler's) and return its status. */
static kn_status build_failed(fz *z, kn_schedule *s) {
    for (int i = 0; i < z->ngrps; i++) kn_free(z->grps[i].nodes);
    kn_free(z->grps);
    kn_free(z->log);
    kn_schedule_free(s);
    return z->st;
}

kn_status kn_schedule_build(const kn_graph *g, kn_schedule **out) { return kn_schedule_build_opts(g, NULL, out); }

kn_status kn_schedule_build_opts(const kn_graph *g, const kn_schedule_opts *o, kn_schedule **out) {
    if (!g || !out) return kn_error(KN_ERR_ARG, "kn_schedule_build: NULL argument");
    *out = NULL;
    size_t nn = (size_t)g->nnodes + 1;
    kn_schedule *s = kn_calloc(1, sizeof *s);
    fz z = {.g = g, .s = s, .colsums = o && o->gpu && !o->no_colsums};
    if (s) {
        s->group_of = kn_malloc(sizeof *s->group_of * nn);
        s->materialize = kn_calloc(nn, sizeof *s->materialize);
        s->fusible = kn_calloc(nn, sizeof *s->fusible);
        s->level = z.level = kn_calloc(nn, 1);
        z.stamp = kn_calloc(nn, sizeof *z.stamp);
    }
    if (!s || !s->group_of || !s->materialize || !s->fusible || !z.level || !z.stamp) {
        kn_free(z.stamp);
        kn_schedule_free(s);
        return kn_error(KN_ERR_OOM, "kn_schedule_build: out of memory for %d nodes", g->nnodes);
    }
    for (int i = 0; i < g->nnodes; i++) {
        s->group_of[i] = -1;
        s->fusible[i] = fusible(g, &g->nodes[i]);
        int64_t rows, len;
        if (s->fusible[i] && o && o->gpu && gpu_library_reduction(g, &g->nodes[i], &rows, &len)) {
            s->fusible[i] = false;
            logf_(&z, "keep %%%d = %s a library step: %lld row(s) of %lld would be %lld block(s) of a generated "
                  "kernel on a GPU; the library splits the rows", i, kn_op_name(g->nodes[i].op), (long long)rows,
                  (long long)len, (long long)rows);
        }
    }
    decide_materialize(g, s->materialize, s->fusible);
    /* Dead nodes (no output depends on them: what a rewrite bypassed) get no step. */
    bool *live = kn_calloc(nn, sizeof *live);
    if (!live) z.st = kn_error(KN_ERR_OOM, "kn_schedule_build: out of memory");
    for (int i = 0; live && i < g->noutputs; i++) live[g->outputs[i]] = true;
    for (int32_t i = g->nnodes - 1; live && i >= 0; i--)
        for (int k = 0; live[i] && k < g->nodes[i].nin; k++) live[g->nodes[i].in[k]] = true;
    for (int32_t i = 0; live && i < g->nnodes && z.st == KN_OK; i++)
        if (live[i]) place(&z, i);
    kn_free(z.stamp);
    if (z.st != KN_OK) {
        kn_free(live);
        return build_failed(&z, s);
    }
    /* A fused member is stored (materialized) only when something outside its group reads
     * it, or it is an output; the others live in registers. (base_of resolves views with
     * the flags of the grouping, where every computed value counted as a tensor.) */
    bool *stored = kn_calloc(nn, sizeof *stored);
    if (!stored) z.st = kn_error(KN_ERR_OOM, "kn_schedule_build: out of memory");
    for (int32_t i = 0; stored && i < g->nnodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (!live[i]) continue; /* a dead reader needs nothing */
        for (int k = 0; k < n->nin; k++) {
            int32_t b = base_of(&z, n->in[k]);
            if (b < 0) continue;
            int gb = s->group_of[b];
            if (gb >= 0 && (gb != s->group_of[i] || z.level[i] == LV_NONE)) stored[b] = true;
        }
    }
    for (int i = 0; stored && i < g->noutputs; i++) stored[g->outputs[i]] = true;
    for (int32_t i = 0; stored && i < g->nnodes; i++)
        if (s->group_of[i] >= 0 && z.level[i] != LV_NONE) s->materialize[i] = stored[i];
    kn_free(stored);
    kn_free(live);
    if (z.st != KN_OK) return build_failed(&z, s);
    /* Run order: each group at its last member. */
    s->groups = kn_calloc((size_t)z.ngrps + 1, sizeof *s->groups);
    int32_t *order = kn_malloc(sizeof *order * ((size_t)z.ngrps + 1));
    if (!s->groups || !order) {
        kn_free(order);
        z.st = kn_error(KN_ERR_OOM, "kn_schedule_build: out of memory");
        return build_failed(&z, s);
    }
    for (int i = 0; i < z.ngrps; i++) order[i] = i;
    for (int i = 1; i < z.ngrps; i++) { /* insertion sort by last member: nearly sorted already */
        int32_t o = order[i], j = i;
        int32_t at = group_at(&z, &z.grps[o]);
        while (j > 0 && group_at(&z, &z.grps[order[j - 1]]) > at) { order[j] = order[j - 1]; j--; }
        order[j] = o;
    }
    int32_t *renum = kn_malloc(sizeof *renum * ((size_t)z.ngrps + 1));
    if (!renum) {
        kn_free(order);
        z.st = kn_error(KN_ERR_OOM, "kn_schedule_build: out of memory");
        return build_failed(&z, s);
    }
    for (int i = 0; i < z.ngrps; i++) {
        grp *G = &z.grps[order[i]];
        renum[order[i]] = i;
        s->groups[i] = (kn_group){.fused = G->fused, .nodes = G->nodes, .nnodes = G->n, .at = group_at(&z, G)};
        s->groups[i].ndim = G->ndim;
        memcpy(s->groups[i].shape, G->shape, sizeof G->shape);
        s->groups[i].inner = G->inner;
        s->groups[i].reduces = G->reduces;
        if (G->fused) s->nfused++;
        else s->nlibrary++;
    }
    s->ngroups = z.ngrps;
    for (int i = 0; i < g->nnodes; i++)
        if (s->group_of[i] >= 0) s->group_of[i] = renum[s->group_of[i]];
    kn_free(renum);
    kn_free(order);
    kn_free(z.grps);
    s->log = z.log;
    *out = s;
    return KN_OK;
}

kn_status kn_schedule_print(FILE *f, const kn_graph *g, const kn_schedule *s) {
    if (!f || !g || !s) return kn_error(KN_ERR_ARG, "kn_schedule_print: NULL argument");
    fprintf(f, "# schedule: %d steps (%d fused kernels, %d library steps) for %d nodes\n", s->ngroups, s->nfused,
            s->nlibrary, g->nnodes);
    for (int i = 0; i < s->ngroups; i++) {
        const kn_group *G = &s->groups[i];
        if (!G->fused) {
            fprintf(f, "step %d: library %%%d = %s\n", i, G->nodes[0], kn_op_name(g->nodes[G->nodes[0]].op));
            continue;
        }
        fprintf(f, "step %d: kernel k%d (%d nodes):", i, i, G->nnodes);
        for (int k = 0; k < G->nnodes; k++) fprintf(f, " %%%d=%s", G->nodes[k], kn_op_name(g->nodes[G->nodes[k]].op));
        fprintf(f, "; stores");
        for (int k = 0; k < G->nnodes; k++)
            if (s->materialize[G->nodes[k]]) fprintf(f, " %%%d", G->nodes[k]);
        fputc('\n', f);
    }
    if (s->log) fprintf(f, "# decisions (a group is named by its first node)\n%s", s->log);
    return KN_OK;
}
