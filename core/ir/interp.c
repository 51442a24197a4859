/* interp.c — the reference interpreter: run a graph node by node on the CPU kernels.
 *
 * kn_interp_new verifies the graph and computes, for every value, the last node that
 * reads it. kn_interp_run then walks the nodes in order, evaluates each with
 * kn_node_eval (the same call eager mode makes, hence bitwise equal results) and frees
 * every tensor right after its last reader: the peak memory is the largest live set
 * along the node order, the simplest liveness-based allocator. Outputs are kept until
 * the next run. Inputs and params are bound by name and aliased, so a training loop can
 * update parameters in place and just run again. */
#include <string.h>

#include "ir/ir_impl.h"
#include "kiln/kernels.h"

struct kn_interp {
    const kn_graph *g;      /* borrowed */
    kn_tensor **bound;      /* per node: the bound tensor of an input/param (owned alias) */
    kn_tensor **vals;       /* per node, during a run */
    int32_t *last_use;      /* per node: the last node reading it (itself when none) */
    bool *is_output;
    kn_tensor **outs;       /* per output, after a run (owned aliases) */
    kn_interp_hook hook;    /* called after each node (core/dist/ overlaps communication) */
    void *hook_ctx;
    kn_collectives coll;    /* runs the collective nodes (kiln/ir.h); coll.run NULL: none */
};

void kn_interp_set_collectives(kn_interp *it, const kn_collectives *c) {
    if (!it) return;
    if (c) it->coll = *c;
    else memset(&it->coll, 0, sizeof it->coll);
}

void kn_interp_set_hook(kn_interp *it, kn_interp_hook fn, void *ctx) {
    if (!it) return;
    it->hook = fn;
    it->hook_ctx = ctx;
}

void kn_interp_free(kn_interp *it) {
    if (!it) return;
    for (int i = 0; i < it->g->nnodes; i++) {
        if (it->bound) kn_tensor_free(it->bound[i]);
        if (it->vals) kn_tensor_free(it->vals[i]);
    }
    for (int i = 0; it->outs && i < it->g->noutputs; i++) kn_tensor_free(it->outs[i]);
    kn_free(it->bound);
    kn_free(it->vals);
    kn_free(it->last_use);
    kn_free(it->is_output);
    kn_free(it->outs);
    kn_free(it);
}

kn_status kn_interp_new(kn_interp **out, const kn_graph *g) {
    if (!out || !g) return kn_error(KN_ERR_ARG, "kn_interp_new: NULL argument");
    KN_TRY(kn_graph_verify(g));
    kn_interp *it = kn_calloc(1, sizeof *it);
    if (!it) return kn_error(KN_ERR_OOM, "kn_interp_new: out of memory");
    size_t nn = (size_t)g->nnodes;
    it->g = g;
    it->bound = kn_calloc(nn, sizeof *it->bound);
    it->vals = kn_calloc(nn, sizeof *it->vals);
    it->last_use = kn_calloc(nn, sizeof *it->last_use);
    it->is_output = kn_calloc(nn, sizeof *it->is_output);
    it->outs = kn_calloc((size_t)g->noutputs, sizeof *it->outs);
    if (!it->bound || !it->vals || !it->last_use || !it->is_output || !it->outs) {
        kn_interp_free(it);
        return kn_error(KN_ERR_OOM, "kn_interp_new: out of memory for %d nodes", g->nnodes);
    }
    for (int32_t i = 0; i < g->nnodes; i++) {
        it->last_use[i] = i;
        for (int k = 0; k < g->nodes[i].nin; k++) it->last_use[g->nodes[i].in[k]] = i;
    }
    for (int i = 0; i < g->noutputs; i++) it->is_output[g->outputs[i]] = true;
    *out = it;
    return KN_OK;
}

kn_status kn_interp_bind(kn_interp *it, const char *name, const kn_tensor *t) {
    if (!it || !name || !t) return kn_error(KN_ERR_ARG, "kn_interp_bind: NULL argument");
    int32_t id = kn_graph_find(it->g, name);
    if (id < 0) return kn_error(KN_ERR_ARG, "kn_interp_bind: the graph has no input or param named \"%s\"", name);
    kn_type tt = {t->dtype, t->ndim, {0}};
    memcpy(tt.shape, t->shape, sizeof(int64_t) * (size_t)(t->ndim > 0 && t->ndim <= KN_MAX_DIMS ? t->ndim : 0));
    if (t->ndim < 0 || t->ndim > KN_MAX_DIMS || !kn_type_equal(&tt, &it->g->nodes[id].type)) {
        char a[160], b[160];
        return kn_error(t->dtype != it->g->nodes[id].type.dtype ? KN_ERR_DTYPE : KN_ERR_SHAPE,
                        "kn_interp_bind: \"%s\" is %s in the graph, got %s", name,
                        kn_type_str(&it->g->nodes[id].type, a, sizeof a), kn_type_str(&tt, b, sizeof b));
    }
    kn_tensor *c = NULL;
    /* A tensor bound on a device stays there, and the nodes reading it run that device's
     * kernels (kn_node_eval asks its backend). */
    KN_TRY(kn_ir_contiguous("kn_interp_bind", t, &c));
    kn_tensor_free(it->bound[id]);
    it->bound[id] = c;
    return KN_OK;
}

static void release_run(kn_interp *it) {
    for (int i = 0; i < it->g->nnodes; i++) { kn_tensor_free(it->vals[i]); it->vals[i] = NULL; }
}

kn_status kn_interp_run(kn_interp *it) {
    if (!it) return kn_error(KN_ERR_ARG, "kn_interp_run: interpreter is NULL");
    const kn_graph *g = it->g;
    for (int i = 0; i < g->noutputs; i++) { kn_tensor_free(it->outs[i]); it->outs[i] = NULL; }
    for (int32_t i = 0; i < g->nnodes; i++) {
        const kn_node *n = &g->nodes[i];
        kn_status st;
        if (n->op == KN_OP_INPUT || n->op == KN_OP_PARAM) {
            if (!it->bound[i]) {
                release_run(it);
                return kn_error(KN_ERR_ARG, "kn_interp_run: %s \"%s\" (%%%d) is not bound", kn_op_name(n->op), n->attrs.name, i);
            }
            st = kn_tensor_alias(&it->vals[i], it->bound[i]);
        } else {
            const kn_tensor *in[KN_MAX_OPERANDS];
            for (int k = 0; k < n->nin; k++) in[k] = it->vals[n->in[k]];
            if (kn_op_get(n->op)->category == KN_CAT_COLLECTIVE)
                st = kn_collective_eval(it->coll.run ? &it->coll : NULL, KN_CPU, i, n, in, &it->vals[i]);
            else
                st = kn_node_eval(n, in, &it->vals[i]);
            /* requests in flight progress between nodes (MPI progresses inside MPI_Test) */
            if (st == KN_OK && it->coll.poll) st = it->coll.poll(it->coll.ctx);
        }
        if (st != KN_OK) {
            char msg[512];
            const char *m = kn_last_error();
            size_t ol = strlen(kn_op_name(n->op));
            if (!strncmp(m, kn_op_name(n->op), ol) && m[ol] == ':' && m[ol + 1] == ' ') m += ol + 2;
            snprintf(msg, sizeof msg, "%s", m);
            release_run(it);
            return kn_error(st, "kn_interp_run: %%%d = %s: %s", i, kn_op_name(n->op), msg);
        }
        if (it->hook && (st = it->hook(it->hook_ctx, i, it->vals[i])) != KN_OK) {
            release_run(it);
            return st;
        }
        for (int k = 0; k < n->nin; k++) {
            int32_t a = n->in[k];
            if (it->last_use[a] == i && !it->is_output[a] && it->vals[a]) { kn_tensor_free(it->vals[a]); it->vals[a] = NULL; }
        }
        if (it->last_use[i] == i && !it->is_output[i]) { kn_tensor_free(it->vals[i]); it->vals[i] = NULL; }
    }
    if (it->coll.finish) {
        kn_status st = it->coll.finish(it->coll.ctx);
        if (st != KN_OK) { release_run(it); return st; }
    }
    for (int i = 0; i < g->noutputs; i++) {
        kn_status st = kn_tensor_alias(&it->outs[i], it->vals[g->outputs[i]]);
        if (st != KN_OK) { release_run(it); return st; }
    }
    release_run(it);
    return KN_OK;
}

const kn_tensor *kn_interp_output(const kn_interp *it, int i) {
    return it && i >= 0 && i < it->g->noutputs ? it->outs[i] : NULL;
}

static kn_status output_copy(const kn_tensor *o, int i, kn_tensor *dst);

kn_status kn_interp_output_copy(const kn_interp *it, int i, kn_tensor *dst) {
    const kn_tensor *o = kn_interp_output(it, i);
    if (!o || !dst) return kn_error(KN_ERR_ARG, "kn_interp_output_copy: no output %d (run first) or dst is NULL", i);
    if (o->storage->device.type == KN_DEVICE_CPU) return output_copy(o, i, dst);
    /* Device dispatch: an output on a GPU comes to the CPU first. */
    kn_tensor *h = NULL;
    KN_TRY(kn_tensor_to(&h, o, KN_CPU));
    kn_status st = output_copy(h, i, dst);
    kn_tensor_free(h);
    return st;
}

static kn_status output_copy(const kn_tensor *o, int i, kn_tensor *dst) {
    bool same = o->ndim == dst->ndim;
    for (int d = 0; same && d < o->ndim; d++) same = o->shape[d] == dst->shape[d];
    if (!same) {
        char a[96], b[96];
        return kn_error(KN_ERR_SHAPE, "kn_interp_output_copy: output %d is %s, dst is %s", i,
                        kn_shape_str(o->ndim, o->shape, a, sizeof a), kn_shape_str(dst->ndim, dst->shape, b, sizeof b));
    }
    if (dst->storage->device.type != KN_DEVICE_CPU) return kn_error(KN_ERR_DEVICE, "kn_interp_output_copy: dst is not on the CPU");
    if (kn_tensor_is_contiguous(dst)) {
        kn_dtype_convert(dst->dtype, kn_tensor_data(dst), o->dtype, kn_tensor_data(o), kn_tensor_numel(o));
        return KN_OK;
    }
    if (dst->dtype != o->dtype) return kn_error(KN_ERR_DTYPE, "kn_interp_output_copy: a strided dst must have the output's dtype");
    int64_t st[KN_MAX_DIMS], s = 1;
    for (int d = o->ndim - 1; d >= 0; d--) { st[d] = s; s *= o->shape[d]; }
    kn_k_strided_copy(kn_dtype_size(o->dtype), o->ndim, o->shape, kn_tensor_data(o), st, kn_tensor_data(dst), dst->strides);
    return KN_OK;
}
