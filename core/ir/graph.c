/* graph.c — SSA graphs: creation, copying, appending nodes and outputs, and types.
 *
 * A kn_graph is two growing arrays: nodes (node i defines value %i) and outputs. Nothing
 * here checks meaning (that is kn_graph_verify's job): a graph may be built in any state
 * and verified once. Invariant kept here: the arrays' capacities are >= their counts. */
#include <string.h>

#include "ir/ir_impl.h"

kn_status kn_graph_new(kn_graph **out) {
    if (!out) return kn_error(KN_ERR_ARG, "kn_graph_new: out is NULL");
    kn_graph *g = kn_calloc(1, sizeof *g);
    if (!g) return kn_error(KN_ERR_OOM, "kn_graph_new: out of memory");
    *out = g;
    return KN_OK;
}

void kn_graph_free(kn_graph *g) {
    if (!g) return;
    kn_free(g->nodes);
    kn_free(g->outputs);
    kn_free(g);
}

kn_status kn_graph_copy(kn_graph **out, const kn_graph *g) {
    if (!out || !g) return kn_error(KN_ERR_ARG, "kn_graph_copy: NULL argument");
    kn_graph *c = NULL;
    KN_TRY(kn_graph_new(&c));
    c->nodes = kn_malloc((size_t)g->nnodes * sizeof *c->nodes);
    c->outputs = kn_malloc((size_t)g->noutputs * sizeof *c->outputs);
    if (!c->nodes || !c->outputs) {
        kn_graph_free(c);
        return kn_error(KN_ERR_OOM, "kn_graph_copy: out of memory for %d nodes", g->nnodes);
    }
    if (g->nnodes) memcpy(c->nodes, g->nodes, (size_t)g->nnodes * sizeof *c->nodes);
    if (g->noutputs) memcpy(c->outputs, g->outputs, (size_t)g->noutputs * sizeof *c->outputs);
    c->nnodes = c->cap = g->nnodes;
    c->noutputs = c->cap_outputs = g->noutputs;
    *out = c;
    return KN_OK;
}

kn_status kn_graph_add_node(kn_graph *g, const kn_node *n, int32_t *id) {
    if (!g || !n) return kn_error(KN_ERR_ARG, "kn_graph_add_node: NULL argument");
    if (g->nnodes == INT32_MAX) return kn_error(KN_ERR_ARG, "kn_graph_add_node: too many nodes");
    if (g->nnodes == g->cap) {
        int cap = g->cap ? g->cap * 2 : 64;
        kn_node *nodes = kn_realloc(g->nodes, (size_t)cap * sizeof *nodes);
        if (!nodes) return kn_error(KN_ERR_OOM, "kn_graph_add_node: out of memory for %d nodes", cap);
        g->nodes = nodes;
        g->cap = cap;
    }
    g->nodes[g->nnodes] = *n;
    if (id) *id = g->nnodes;
    g->nnodes++;
    return KN_OK;
}

kn_status kn_graph_add_output(kn_graph *g, int32_t id) {
    if (!g) return kn_error(KN_ERR_ARG, "kn_graph_add_output: graph is NULL");
    if (g->noutputs == g->cap_outputs) {
        int cap = g->cap_outputs ? g->cap_outputs * 2 : 8;
        int32_t *o = kn_realloc(g->outputs, (size_t)cap * sizeof *o);
        if (!o) return kn_error(KN_ERR_OOM, "kn_graph_add_output: out of memory");
        g->outputs = o;
        g->cap_outputs = cap;
    }
    g->outputs[g->noutputs++] = id;
    return KN_OK;
}

int32_t kn_graph_find(const kn_graph *g, const char *name) {
    if (!g || !name) return -1;
    for (int32_t i = 0; i < g->nnodes; i++) {
        kn_op op = g->nodes[i].op;
        if ((op == KN_OP_INPUT || op == KN_OP_PARAM) && !strcmp(g->nodes[i].attrs.name, name)) return i;
    }
    return -1;
}

const char *kn_type_str(const kn_type *t, char *buf, size_t size) {
    if (!buf || size == 0) return buf;
    int n = snprintf(buf, size, "%s", kn_dtype_name(t->dtype));
    if (n < 0 || (size_t)n >= size) return buf;
    kn_shape_str(t->ndim < 0 || t->ndim > KN_MAX_DIMS ? 0 : t->ndim, t->shape, buf + n, size - (size_t)n);
    return buf;
}

bool kn_type_equal(const kn_type *a, const kn_type *b) {
    if (a->dtype != b->dtype || a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++) if (a->shape[i] != b->shape[i]) return false;
    return true;
}

int64_t kn_type_numel(const kn_type *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

const char *kn_node_label(const kn_graph *g, int32_t id, char *buf, size_t size) {
    snprintf(buf, size, "%%%d = %s", id, kn_op_name(g->nodes[id].op));
    return buf;
}
