/* kir.c — the kernel IR: lowering a fused group, verifying and printing the result.
 *
 * Lowering turns the group's nodes into one expression DAG over the group's iteration
 * space S. Every value read from outside the group becomes a load: the view chain that
 * produced it (kn_schedule_resolve) gives an offset and strides over the value's own
 * shape, numpy broadcasting maps those onto the consumer's axes (a broadcast axis gets
 * stride 0), and the consumer's form maps them onto S (a reduced "outer" value skips the
 * inner axes). So a transpose, a slice or a bias broadcast costs nothing but a different
 * stride in the load. Then axes that are contiguous for every buffer are merged (a
 * [B, T, C] elementwise kernel over contiguous tensors becomes one loop of B*T*C) and
 * size-1 axes dropped: the renderers see the simplest equivalent loop nest. */
#include <string.h>

#include "kiln/schedule.h"
#include "ir/ir_impl.h"

void kn_kernel_clear(kn_kernel *k) {
    if (!k) return;
    kn_free(k->bufs);
    kn_free(k->x);
    kn_free(k->stores);
    kn_free(k->colsums);
    memset(k, 0, sizeof *k);
}

typedef struct lw {
    kn_kernel *k;
    int capb, capx, caps, capc;
    kn_status st;
} lw;

static bool grow(lw *w, void **p, int n, int *cap, size_t size) {
    if (n < *cap) return true;
    int nc = *cap ? *cap * 2 : 16;
    void *q = kn_realloc(*p, size * (size_t)nc);
    if (!q) { w->st = kn_error(KN_ERR_OOM, "kn_kernel_lower: out of memory"); return false; }
    *p = q;
    *cap = nc;
    return true;
}

static int add_x(lw *w, const kn_kx *x) {
    if (w->st != KN_OK || !grow(w, (void **)&w->k->x, w->k->nx, &w->capx, sizeof *x)) return -1;
    w->k->x[w->k->nx] = *x;
    return w->k->nx++;
}

static int add_buf(lw *w, const kn_kbuf *b) {
    kn_kernel *k = w->k;
    for (int i = 0; i < k->nbufs; i++)
        if (k->bufs[i].value == b->value && k->bufs[i].store == b->store && k->bufs[i].offset == b->offset &&
            !memcmp(k->bufs[i].stride, b->stride, sizeof b->stride))
            return i;
    if (w->st != KN_OK || !grow(w, (void **)&k->bufs, k->nbufs, &w->capb, sizeof *b)) return -1;
    k->bufs[k->nbufs] = *b;
    return k->nbufs++;
}

/* The axis of S that axis j of a node in form `full` / `outer` (keepdim or squeezed) is. */
static int space_axis(const kn_group *G, int node_ndim, bool full, int j) {
    if (full || node_ndim == G->ndim) return j;
    int c = 0;
    for (int k = 0; k < G->ndim; k++) {
        if ((G->inner >> k) & 1u) continue;
        if (c++ == j) return k;
    }
    return -1;
}

/* The kx of operand `a` of member m (m read at its form). */
static int operand(lw *w, const kn_graph *g, const kn_schedule *s, const kn_group *G, int gi, const int32_t *node_kx,
                   int32_t m, int32_t a) {
    if (s->group_of[a] == gi && s->level[a] != 0) return node_kx[a];
    const kn_node *an = &g->nodes[a];
    if (an->op == KN_OP_FULL && !s->materialize[a]) {
        for (int i = 0; i < w->k->nx; i++) /* one entry per constant value and dtype */
            if (w->k->x[i].kind == KN_KX_CONST && w->k->x[i].dtype == an->type.dtype &&
                !memcmp(&w->k->x[i].value, &an->attrs.value, sizeof(double)))
                return i;
        kn_kx c = {.kind = KN_KX_CONST, .dtype = an->type.dtype, .value = an->attrs.value, .node = a};
        return add_x(w, &c);
    }
    int32_t base;
    int64_t off, st[KN_MAX_DIMS];
    if (!kn_schedule_resolve(g, s->materialize, a, &base, &off, st)) {
        w->st = kn_error(KN_ERR_INTERNAL, "kn_kernel_lower: %%%d is neither computed nor a view of a tensor", a);
        return -1;
    }
    const kn_node *mn = &g->nodes[m];
    bool red = kn_op_get(mn->op)->category == KN_CAT_REDUCTION;
    bool mfull = red || s->level[m] == 1;
    const kn_type *mt = red ? &g->nodes[mn->in[0]].type : &mn->type;
    kn_kbuf b = {.value = base, .store = false, .dtype = an->type.dtype, .offset = off};
    for (int q = 0; q < an->type.ndim; q++) {
        int j = q + (mt->ndim - an->type.ndim);
        if (an->type.shape[q] == 1 && mt->shape[j] != 1) continue; /* broadcast: stride 0 */
        int ax = space_axis(G, mt->ndim, mfull, j);
        if (ax >= 0) b.stride[ax] = st[q];
    }
    int bi = add_buf(w, &b);
    if (bi < 0) return -1;
    /* full: read inside the inner loop. A value constant over the row is read once per row,
     * unless a reduction reads it (a sum over a broadcast axis: the loop adds it each time). */
    bool full = true;
    if (G->reduces && G->inner && !red) {
        full = false;
        for (int ax = 0; ax < G->ndim; ax++) full |= ((G->inner >> ax) & 1u) && b.stride[ax] != 0;
    }
    for (int i = 0; i < w->k->nx; i++)
        if (w->k->x[i].kind == KN_KX_LOAD && w->k->x[i].buf == bi && w->k->x[i].full == full) return i;
    kn_kx x = {.kind = KN_KX_LOAD, .full = full, .dtype = b.dtype, .buf = bi, .node = a};
    return add_x(w, &x);
}

/* Merge adjacent axes that every buffer walks contiguously and drop size-1 axes. */
static void simplify(kn_kernel *k, bool keep_axes) {
    if (keep_axes) return;
    for (int ax = k->ndim - 1; ax >= 0; ax--) { /* drop size-1 axes */
        if (k->shape[ax] != 1 || ((k->inner >> ax) & 1u)) continue; /* an inner axis stays: the loop exists */
        for (int j = ax; j + 1 < k->ndim; j++) {
            k->shape[j] = k->shape[j + 1];
            for (int b = 0; b < k->nbufs; b++) k->bufs[b].stride[j] = k->bufs[b].stride[j + 1];
        }
        uint32_t lowm = (1u << ax) - 1u;
        k->inner = (k->inner & lowm) | ((k->inner >> 1) & ~lowm);
        k->ndim--;
        for (int b = 0; b < k->nbufs; b++) k->bufs[b].stride[k->ndim] = 0;
    }
    for (int ax = k->ndim - 2; ax >= 0; ax--) { /* merge ax and ax + 1 */
        if (((k->inner >> ax) & 1u) != ((k->inner >> (ax + 1)) & 1u)) continue;
        bool ok = true;
        for (int b = 0; b < k->nbufs && ok; b++)
            ok = k->bufs[b].stride[ax] == k->bufs[b].stride[ax + 1] * k->shape[ax + 1];
        if (!ok) continue;
        k->shape[ax] *= k->shape[ax + 1];
        for (int b = 0; b < k->nbufs; b++) k->bufs[b].stride[ax] = k->bufs[b].stride[ax + 1];
        for (int j = ax + 1; j + 1 < k->ndim; j++) {
            k->shape[j] = k->shape[j + 1];
            for (int b = 0; b < k->nbufs; b++) k->bufs[b].stride[j] = k->bufs[b].stride[j + 1];
        }
        uint32_t lowm = (1u << (ax + 1)) - 1u;
        k->inner = (k->inner & lowm) | ((k->inner >> 1) & ~lowm);
        k->ndim--;
        for (int b = 0; b < k->nbufs; b++) k->bufs[b].stride[k->ndim] = 0;
    }
}

kn_status kn_kernel_lower(const kn_graph *g, const kn_schedule *s, int gi, kn_kernel *out) {
    if (!g || !s || !out || gi < 0 || gi >= s->ngroups || !s->groups[gi].fused)
        return kn_error(KN_ERR_ARG, "kn_kernel_lower: no fused group %d", gi);
    memset(out, 0, sizeof *out);
    const kn_group *G = &s->groups[gi];
    lw w = {.k = out};
    snprintf(out->name, sizeof out->name, "k%d", gi);
    out->ndim = G->ndim;
    memcpy(out->shape, G->shape, sizeof out->shape);
    out->inner = G->inner;
    out->reduces = G->reduces;
    int32_t *node_kx = kn_malloc(sizeof *node_kx * ((size_t)g->nnodes + 1));
    if (!node_kx) return kn_error(KN_ERR_OOM, "kn_kernel_lower: out of memory");
    bool causal = false;
    for (int mi = 0; mi < G->nnodes && w.st == KN_OK; mi++) {
        int32_t m = G->nodes[mi];
        const kn_node *n = &g->nodes[m];
        if (s->level[m] == KN_LEVEL_COLSUM) { /* the kernel sums a full entry's columns into m */
            kn_kbuf b = {.value = m, .store = true, .dtype = n->type.dtype};
            int src = node_kx[n->in[0]], bi = add_buf(&w, &b);
            int64_t cols = kn_type_numel(&n->type);
            if (w.st != KN_OK || bi < 0) break;
            if (s->group_of[n->in[0]] != gi || src < 0 || src >= out->nx || !out->x[src].full) {
                w.st = kn_error(KN_ERR_INTERNAL, "kn_kernel_lower: %%%d = sum: a column sum of %%%d, not a full entry of "
                                "the kernel", m, n->in[0]);
                break;
            }
            if (out->ncolsums && out->colsum_n != cols) {
                w.st = kn_error(KN_ERR_INTERNAL, "kn_kernel_lower: %%%d = sum: %lld columns, the kernel's other column "
                                "sums %lld", m, (long long)cols, (long long)out->colsum_n);
                break;
            }
            if (grow(&w, (void **)&out->colsums, out->ncolsums, &w.capc, sizeof *out->colsums))
                out->colsums[out->ncolsums++] = (kn_kcolsum){bi, src};
            out->colsum_n = cols;
            continue;
        }
        kn_kx x = {.kind = KN_KX_OP, .full = s->level[m] == 1, .dtype = n->type.dtype, .node = m, .op = n->op,
                   .nin = n->nin};
        if (kn_op_get(n->op)->category == KN_CAT_REDUCTION) x.kind = KN_KX_ACC;
        if (n->op == KN_OP_UNARY_GRAD) x.fn = n->attrs.fn;
        if (n->op == KN_OP_CAUSAL_FILL) {
            causal = true;
            x.rows = n->type.shape[n->type.ndim - 2];
            x.cols = n->type.shape[n->type.ndim - 1];
            x.fill = n->attrs.value;
        }
        if (n->op == KN_OP_ONEHOT) { /* compares the coordinate of its last axis: axes stay as they are */
            causal = true;
            x.cols = n->type.shape[n->type.ndim - 1];
            x.rows = space_axis(G, n->type.ndim, s->level[m] == 1, n->type.ndim - 1);
            if (x.rows < 0 || G->shape[x.rows] != x.cols) {
                w.st = kn_error(KN_ERR_INTERNAL, "kn_kernel_lower: %%%d = onehot: its last axis is not an axis of the "
                                "kernel's space", m);
                break;
            }
        }
        for (int k = 0; k < n->nin && w.st == KN_OK; k++) x.in[k] = operand(&w, g, s, G, gi, node_kx, m, n->in[k]);
        if (w.st != KN_OK) break;
        node_kx[m] = add_x(&w, &x);
        if (w.st == KN_OK && s->materialize[m]) { /* stored: contiguous in its own shape */
            kn_kbuf b = {.value = m, .store = true, .dtype = n->type.dtype};
            int64_t st[KN_MAX_DIMS];
            int64_t acc = 1;
            for (int j = n->type.ndim - 1; j >= 0; j--) { st[j] = acc; acc *= n->type.shape[j]; }
            bool full = s->level[m] == 1;
            for (int j = 0; j < n->type.ndim; j++) {
                int ax = space_axis(G, n->type.ndim, full, j);
                if (ax >= 0 && !(n->type.shape[j] == 1 && !full && n->type.ndim == G->ndim && ((G->inner >> ax) & 1u)))
                    b.stride[ax] = st[j];
            }
            int bi = add_buf(&w, &b);
            if (bi >= 0 && grow(&w, (void **)&out->stores, out->nstores, &w.caps, sizeof *out->stores))
                out->stores[out->nstores++] = (kn_kstore){bi, node_kx[m]};
        }
    }
    kn_free(node_kx);
    if (w.st != KN_OK) { kn_kernel_clear(out); return w.st; }
    simplify(out, causal);
    if (!out->reduces && out->ndim > 0 && out->ndim < KN_MAX_DIMS && !causal && !out->ncolsums) {
        /* Merged axes can leave one long row (a [B*T*C] elementwise kernel is 1 x B*T*C),
         * which no thread could share: split the last axis into rows of a power of two up
         * to 2048 that divides it, so the outer loop has rows to split over threads. */
        int last = out->ndim - 1;
        int64_t n = out->shape[last], c = 2048;
        while (c > 16 && (n % c != 0 || n / c < 2)) c /= 2;
        if (n > 2048 && n % c == 0 && n / c >= 2) {
            out->shape[last] = n / c;
            out->shape[last + 1] = c;
            for (int b = 0; b < out->nbufs; b++) {
                out->bufs[b].stride[last + 1] = out->bufs[b].stride[last];
                out->bufs[b].stride[last] *= c;
            }
            out->ndim++;
        }
    }
    if (!out->reduces) { /* no reduction: the last axis is the inner (vector) loop */
        for (int i = 0; i < out->nx; i++) out->x[i].full = true;
        out->inner = out->ndim > 0 ? 1u << (out->ndim - 1) : 0;
    }
    out->outer_n = out->inner_n = 1;
    for (int ax = 0; ax < out->ndim; ax++) {
        if ((out->inner >> ax) & 1u) out->inner_n *= out->shape[ax];
        else out->outer_n *= out->shape[ax];
    }
    kn_status st = kn_kernel_verify(out);
    if (st != KN_OK) kn_kernel_clear(out);
    return st;
}

bool kn_kernel_same_map(const kn_kernel *k, int a, int b) {
    if (!k || a < 0 || b < 0 || a >= k->nbufs || b >= k->nbufs) return false;
    const kn_kbuf *x = &k->bufs[a], *y = &k->bufs[b];
    if (x->dtype != y->dtype || x->offset != y->offset) return false;
    for (int ax = 0; ax < k->ndim; ax++)
        if (x->stride[ax] != y->stride[ax]) return false;
    return true;
}

kn_status kn_kernel_verify(const kn_kernel *k) {
    if (!k) return kn_error(KN_ERR_ARG, "kn_kernel_verify: NULL kernel");
#define BAD(...) return kn_error(KN_ERR_INTERNAL, "kn_kernel_verify: " __VA_ARGS__)
    if (k->ndim < 0 || k->ndim > KN_MAX_DIMS) BAD("%s: %d axes", k->name, k->ndim);
    if (k->inner >> k->ndim) BAD("%s: inner axes 0x%x beyond %d axes", k->name, k->inner, k->ndim);
    for (int i = 0; i < k->nx; i++) {
        const kn_kx *x = &k->x[i];
        if (x->kind == KN_KX_LOAD && (x->buf < 0 || x->buf >= k->nbufs || k->bufs[x->buf].store))
            BAD("%s: x%d loads buffer %d, not an input buffer", k->name, i, x->buf);
        for (int j = 0; j < x->nin; j++) {
            int a = x->in[j];
            if (a < 0 || a >= i) BAD("%s: x%d reads x%d, not an earlier entry", k->name, i, a);
            if (x->kind == KN_KX_ACC && !k->x[a].full && k->reduces) BAD("%s: accumulator x%d reduces outer x%d", k->name, i, a);
            if (x->kind == KN_KX_OP && !x->full && k->x[a].full) BAD("%s: outer x%d reads full x%d", k->name, i, a);
        }
        if (x->kind == KN_KX_ACC && (x->full || x->nin != 1)) BAD("%s: accumulator x%d must be outer, of one entry", k->name, i);
        if (x->kind == KN_KX_LOAD && !x->full) {
            for (int ax = 0; ax < k->ndim; ax++)
                if (((k->inner >> ax) & 1u) && k->bufs[x->buf].stride[ax] != 0)
                    BAD("%s: outer load x%d varies over inner axis %d", k->name, i, ax);
        }
    }
    for (int i = 0; i < k->nstores; i++) {
        const kn_kstore *s = &k->stores[i];
        if (s->buf < 0 || s->buf >= k->nbufs || !k->bufs[s->buf].store) BAD("%s: store %d to buffer %d", k->name, i, s->buf);
        if (s->src < 0 || s->src >= k->nx) BAD("%s: store %d of x%d", k->name, i, s->src);
        if (!k->x[s->src].full)
            for (int ax = 0; ax < k->ndim; ax++)
                if (((k->inner >> ax) & 1u) && k->bufs[s->buf].stride[ax] != 0) BAD("%s: outer x%d stored over inner axes", k->name, s->src);
    }
    for (int i = 0; i < k->ncolsums; i++) {
        const kn_kcolsum *c = &k->colsums[i];
        if (c->buf < 0 || c->buf >= k->nbufs || !k->bufs[c->buf].store) BAD("%s: column sum %d to buffer %d", k->name, i, c->buf);
        if (c->src < 0 || c->src >= k->nx || !k->x[c->src].full) BAD("%s: column sum %d of x%d, not a full entry", k->name, i, c->src);
        for (int ax = 0; ax < k->ndim; ax++)
            if (k->bufs[c->buf].stride[ax] != 0) BAD("%s: column sum %d's buffer has strides", k->name, i);
    }
    if (k->ncolsums) {
        int64_t n = k->outer_n * k->inner_n;
        if (k->colsum_n <= 0 || n % k->colsum_n != 0) BAD("%s: %lld columns do not divide the space", k->name, (long long)k->colsum_n);
        if (k->reduces && k->colsum_n != k->inner_n) BAD("%s: column sums over a row reduction's other axes", k->name);
    }
#undef BAD
    return KN_OK;
}

static void print_strides(FILE *f, const kn_kernel *k, const int64_t *st) {
    fputc('[', f);
    for (int ax = 0; ax < k->ndim; ax++) fprintf(f, "%s%lld", ax ? "," : "", (long long)st[ax]);
    fputc(']', f);
}

kn_status kn_kernel_print(FILE *f, const kn_kernel *k) {
    if (!f || !k) return kn_error(KN_ERR_ARG, "kn_kernel_print: NULL argument");
    fprintf(f, "kernel %s space [", k->name);
    for (int ax = 0; ax < k->ndim; ax++)
        fprintf(f, "%s%lld%s", ax ? "," : "", (long long)k->shape[ax], (k->inner >> ax) & 1u ? "r" : "");
    fprintf(f, "] (%lld outer x %lld inner%s)\n", (long long)k->outer_n, (long long)k->inner_n,
            k->reduces ? ", reduced" : "");
    for (int b = 0; b < k->nbufs; b++) {
        const kn_kbuf *kb = &k->bufs[b];
        fprintf(f, "  buf%d %s %%%d %s offset %lld strides ", b, kb->store ? "store" : "load ", kb->value,
                kn_dtype_name(kb->dtype), (long long)kb->offset);
        print_strides(f, k, kb->stride);
        fputc('\n', f);
    }
    for (int i = 0; i < k->nx; i++) {
        const kn_kx *x = &k->x[i];
        fprintf(f, "  x%d %s %s = ", i, x->full ? "full " : "outer", kn_dtype_name(x->dtype));
        switch (x->kind) {
        case KN_KX_LOAD: fprintf(f, "load buf%d", x->buf); break;
        case KN_KX_CONST: fprintf(f, "const %.17g", x->value); break;
        case KN_KX_OP:
        case KN_KX_ACC:
            fprintf(f, "%s%s", x->kind == KN_KX_ACC ? "reduce " : "", kn_op_name(x->op));
            if (x->kind == KN_KX_OP && x->op == KN_OP_UNARY_GRAD) fprintf(f, " {fn=%s}", kn_unary_op_name((kn_unary_op)x->fn));
            for (int j = 0; j < x->nin; j++) fprintf(f, "%s x%d", j ? "," : "", x->in[j]);
            break;
        }
        if (x->kind != KN_KX_CONST) fprintf(f, "   # %%%d", x->node);
        fputc('\n', f);
    }
    for (int i = 0; i < k->nstores; i++) fprintf(f, "  store buf%d <- x%d\n", k->stores[i].buf, k->stores[i].src);
    for (int i = 0; i < k->ncolsums; i++)
        fprintf(f, "  colsum buf%d <- x%d (%lld columns)\n", k->colsums[i].buf, k->colsums[i].src, (long long)k->colsum_n);
    return KN_OK;
}
