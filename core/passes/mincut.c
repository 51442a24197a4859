/* mincut.c — which forward values to keep for the backward: AOTAutograd's min-cut
 * partitioner (kn_remat_mincut, kiln/remat.h).
 *
 * The question "which activations to save" is a cut in a flow network. Each forward node v
 * becomes two vertices, v.in and v.out, joined by an edge whose capacity is v's bytes:
 * cutting it means "keep v" and costs its memory. Every edge of the graph, v feeding u,
 * becomes v.out -> u.in of infinite capacity, so a cut can never separate a value from a
 * reader that is recomputed. A value the backward reads gets v.out -> SINK (infinite): the
 * backward must have it. A node that may not be recomputed (a matmul: too costly; dropout
 * in PyTorch, where the generator's state moves on) gets SOURCE -> v.in (infinite): it is
 * only ever computed in the forward. Inputs and params are not vertices: the backward can
 * always read them.
 *
 * A finite cut then separates what the forward provides (the SOURCE side) from what the
 * backward recomputes (the SINK side); its cost is the bytes of the values whose in is on
 * the source side and whose out is on the sink side: the values kept. Max-flow equals the
 * least such cost (max-flow min-cut), found here with Dinic's algorithm: breadth-first
 * levels from the source, then augmenting paths along increasing levels until none is
 * left, repeated until the sink is unreachable.
 *
 * Ties are common (the attention scores and their softmax have the same size; a matmul's
 * output and its bias add too). Of all least cuts, this one takes the one nearest the
 * sink: the vertices that can still reach the sink in the residual network are the sink
 * side, everything else is kept or computed in the forward. That recomputes the least. */
#include <stdint.h>
#include <string.h>

#include "kiln/passes.h"
#include "kiln/remat.h"

#define INF_CAP (INT64_MAX / 4)

typedef struct flow_net {
    int nv, ne, cap_e;
    int *head, *next, *to;   /* adjacency lists; edge e and e ^ 1 are a pair */
    int64_t *cap;            /* residual capacity */
    int *level, *iter, *queue, *path;
} flow_net;

static void net_free(flow_net *f) {
    kn_free(f->head); kn_free(f->next); kn_free(f->to); kn_free(f->cap);
    kn_free(f->level); kn_free(f->iter); kn_free(f->queue); kn_free(f->path);
}

static kn_status net_init(flow_net *f, int nv, int max_edges) {
    memset(f, 0, sizeof *f);
    f->nv = nv;
    f->cap_e = 2 * max_edges;
    f->head = kn_malloc((size_t)nv * sizeof *f->head);
    f->next = kn_malloc((size_t)f->cap_e * sizeof *f->next);
    f->to = kn_malloc((size_t)f->cap_e * sizeof *f->to);
    f->cap = kn_malloc((size_t)f->cap_e * sizeof *f->cap);
    f->level = kn_malloc((size_t)nv * sizeof *f->level);
    f->iter = kn_malloc((size_t)nv * sizeof *f->iter);
    f->queue = kn_malloc((size_t)nv * sizeof *f->queue);
    f->path = kn_malloc((size_t)nv * sizeof *f->path);
    if (!f->head || !f->next || !f->to || !f->cap || !f->level || !f->iter || !f->queue || !f->path) {
        net_free(f);
        return kn_error(KN_ERR_OOM, "kn_remat_mincut: out of memory for a network of %d vertices", nv);
    }
    for (int v = 0; v < nv; v++) f->head[v] = -1;
    return KN_OK;
}

static void add_edge(flow_net *f, int a, int b, int64_t c) {
    KN_CHECK(f->ne + 2 <= f->cap_e);
    int e = f->ne;
    f->to[e] = b; f->cap[e] = c; f->next[e] = f->head[a]; f->head[a] = e;
    f->to[e + 1] = a; f->cap[e + 1] = 0; f->next[e + 1] = f->head[b]; f->head[b] = e + 1;
    f->ne += 2;
}

/* Levels by breadth-first search over edges with residual capacity; true if t is reached. */
static bool bfs(flow_net *f, int s, int t) {
    for (int v = 0; v < f->nv; v++) f->level[v] = -1;
    int qh = 0, qt = 0;
    f->level[s] = 0;
    f->queue[qt++] = s;
    while (qh < qt) {
        int u = f->queue[qh++];
        for (int e = f->head[u]; e >= 0; e = f->next[e])
            if (f->cap[e] > 0 && f->level[f->to[e]] < 0) {
                f->level[f->to[e]] = f->level[u] + 1;
                f->queue[qt++] = f->to[e];
            }
    }
    return f->level[t] >= 0;
}

/* Augment along level-increasing paths until none is left (a blocking flow). The depth-first
 * search keeps its path of edges in f->path, not on the C stack: a deep model's forward is
 * a path thousands of vertices long. */
static void blocking_flow(flow_net *f, int s, int t) {
    for (int v = 0; v < f->nv; v++) f->iter[v] = f->head[v];
    int depth = 0, u = s;
    for (;;) {
        if (u == t) {
            int64_t push = INF_CAP;
            for (int k = 0; k < depth; k++) push = f->cap[f->path[k]] < push ? f->cap[f->path[k]] : push;
            int back = depth;
            for (int k = depth - 1; k >= 0; k--) {
                f->cap[f->path[k]] -= push;
                f->cap[f->path[k] ^ 1] += push;
                if (f->cap[f->path[k]] == 0) back = k;
            }
            depth = back; /* resume from the tail of the first saturated edge */
            u = depth ? f->to[f->path[depth - 1]] : s;
            continue;
        }
        int e = f->iter[u];
        while (e >= 0 && !(f->cap[e] > 0 && f->level[f->to[e]] == f->level[u] + 1)) e = f->next[e];
        f->iter[u] = e;
        if (e >= 0) {
            f->path[depth++] = e;
            u = f->to[e];
            continue;
        }
        if (u == s) return;
        f->level[u] = -1; /* a dead end: never enter it again in this phase */
        depth--;
        u = depth ? f->to[f->path[depth - 1]] : s;
        f->iter[u] = f->next[f->iter[u]];
    }
}

kn_status kn_remat_mincut(const kn_graph *g, const bool *fwd, const bool *need, const bool *banned, bool *keep) {
    if (!g || !fwd || !need || !banned || !keep) return kn_error(KN_ERR_ARG, "kn_remat_mincut: NULL argument");
    int n = g->nnodes;
    int32_t *vid = kn_malloc((size_t)(n ? n : 1) * sizeof *vid); /* node -> its in vertex / 2, or -1 */
    if (!vid) return kn_error(KN_ERR_OOM, "kn_remat_mincut: out of memory");
    int nv = 0, max_edges = 0;
    for (int i = 0; i < n; i++) {
        const kn_node *nd = &g->nodes[i];
        keep[i] = false;
        vid[i] = -1;
        if (!fwd[i]) continue;
        if (nd->op == KN_OP_INPUT || nd->op == KN_OP_PARAM) { keep[i] = true; continue; }
        vid[i] = nv++;
        max_edges += 3 + nd->nin; /* in->out, source->in, out->sink, one per operand */
    }
    flow_net f;
    kn_status st = net_init(&f, 2 * nv + 2, max_edges > 0 ? max_edges : 1);
    if (st != KN_OK) { kn_free(vid); return st; }
    const int S = 2 * nv, T = 2 * nv + 1;
    for (int i = 0; i < n; i++) {
        if (vid[i] < 0) continue;
        const kn_node *nd = &g->nodes[i];
        int vin = 2 * vid[i], vout = vin + 1;
        int64_t bytes = kn_type_numel(&nd->type) * (int64_t)kn_dtype_size(nd->type.dtype);
        /* a reshape (or a block slice) is its operand's storage: keeping it would count those bytes twice */
        bool alias = nd->nin == 1 && kn_ir_aliases(nd, &g->nodes[nd->in[0]].type);
        add_edge(&f, vin, vout, alias ? INF_CAP : bytes);
        if (banned[i]) add_edge(&f, S, vin, INF_CAP);
        if (need[i]) add_edge(&f, vout, T, INF_CAP);
        for (int k = 0; k < nd->nin; k++)
            if (vid[nd->in[k]] >= 0) add_edge(&f, 2 * vid[nd->in[k]] + 1, vin, INF_CAP);
    }
    while (bfs(&f, S, T)) blocking_flow(&f, S, T);
    /* the sink side: every vertex that still reaches T through residual capacity */
    bool *sink = kn_calloc((size_t)f.nv, sizeof *sink);
    if (!sink) st = kn_error(KN_ERR_OOM, "kn_remat_mincut: out of memory");
    if (st == KN_OK) {
        int qh = 0, qt = 0;
        sink[T] = true;
        f.queue[qt++] = T;
        while (qh < qt) {
            int y = f.queue[qh++];
            for (int e = f.head[y]; e >= 0; e = f.next[e]) { /* e: y -> x, so e ^ 1 is x -> y */
                int x = f.to[e];
                if (!sink[x] && f.cap[e ^ 1] > 0) {
                    sink[x] = true;
                    f.queue[qt++] = x;
                }
            }
        }
        for (int i = 0; i < n; i++)
            if (vid[i] >= 0) keep[i] = !sink[2 * vid[i]];
    }
    kn_free(sink);
    net_free(&f);
    kn_free(vid);
    return st;
}
