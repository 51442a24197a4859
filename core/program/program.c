/* program.c — kn_program (kiln/program.h): a graph compiled into ordered steps on one
 * device, and their replay.
 *
 * Compile copies the graph, verifies it, runs the pass list on the copy (kn_passes_run:
 * the single place a program's passes run), and builds the schedule: one step per computing
 * node, each with the backend that runs it, chosen now (supports_op) so that a run never
 * discovers a missing kernel. Run replays the steps in order, calling the backend's
 * node_eval, and frees each value right after its last reader (as the interpreter does:
 * the memory plan will replace this). */
#include <string.h>

#include "kiln/program.h"
#include "kiln/passes.h"

typedef struct kn_program_step {
    int32_t node;
    const kn_device_backend *be; /* who computes it */
    int index;                   /* that backend's device index */
} kn_program_step;

struct kn_program {
    kn_graph *g;              /* owned: the graph after passes */
    kn_device dev;
    kn_program_step *steps;   /* owned, in order */
    int nsteps;
    kn_tensor **bound;        /* per node: the bound tensor of an input/param (owned alias) */
    kn_tensor **vals;         /* per node, during a run */
    int32_t *last_use;        /* per node: the last node reading it (itself when none) */
    bool *is_output;
    kn_tensor **outs;         /* per output, after a run (owned aliases) */
    kn_interp_hook hook;      /* called after each step (kn_program_set_hook), or NULL */
    void *hook_ctx;
};

void kn_program_free(kn_program *p) {
    if (!p) return;
    for (int i = 0; p->g && i < p->g->nnodes; i++) {
        if (p->bound) kn_tensor_free(p->bound[i]);
        if (p->vals) kn_tensor_free(p->vals[i]);
    }
    for (int i = 0; p->outs && p->g && i < p->g->noutputs; i++) kn_tensor_free(p->outs[i]);
    kn_free(p->bound);
    kn_free(p->vals);
    kn_free(p->last_use);
    kn_free(p->is_output);
    kn_free(p->outs);
    kn_free(p->steps);
    kn_graph_free(p->g);
    kn_free(p);
}

/* The pass list (kiln/passes.h): NULL, "" and "none" run nothing. */
static kn_status run_passes(kn_graph *g, const char *passes) {
    if (!passes || !passes[0] || !strcmp(passes, "none")) return KN_OK;
    kn_pass_report rep;
    return kn_passes_run(g, passes, &rep);
}

static kn_status schedule(kn_program *p) {
    const kn_graph *g = p->g;
    const kn_device_backend *be = kn_device_backend_get(p->dev.type), *host = kn_device_backend_get(KN_DEVICE_CPU);
    char ds[32];
    for (int32_t i = 0; i < g->nnodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->op == KN_OP_INPUT || n->op == KN_OP_PARAM) continue;
        kn_program_step s = {i, be, p->dev.index};
        if (!be->supports_op(be->ctx, n->op)) {
            if (n->nin != 0 || !host->supports_op(host->ctx, n->op))
                return kn_error(KN_ERR_UNSUPPORTED, "kn_program_compile: %%%d = %s: the %s backend has no kernel for it",
                                i, kn_op_name(n->op), kn_device_str(p->dev, ds, sizeof ds));
            s = (kn_program_step){i, host, 0}; /* a source the device does not compute: on the host */
        }
        p->steps[p->nsteps++] = s;
    }
    return KN_OK;
}

kn_status kn_program_compile(kn_program **out, const kn_graph *g, const kn_program_opts *opts) {
    if (!out || !g) return kn_error(KN_ERR_ARG, "kn_program_compile: NULL argument");
    *out = NULL;
    kn_program_opts o = opts ? *opts : (kn_program_opts){KN_CPU, NULL};
    KN_TRY(kn_device_check("kn_program_compile", o.device));
    kn_program *p = kn_calloc(1, sizeof *p);
    if (!p) return kn_error(KN_ERR_OOM, "kn_program_compile: out of memory");
    p->dev = o.device;
    kn_status st = kn_graph_copy(&p->g, g);
    if (st == KN_OK) st = run_passes(p->g, o.passes);
    if (st == KN_OK) st = kn_graph_verify(p->g);
    if (st != KN_OK) { kn_program_free(p); return st; }
    size_t nn = (size_t)p->g->nnodes;
    p->steps = kn_calloc(nn + 1, sizeof *p->steps);
    p->bound = kn_calloc(nn + 1, sizeof *p->bound);
    p->vals = kn_calloc(nn + 1, sizeof *p->vals);
    p->last_use = kn_calloc(nn + 1, sizeof *p->last_use);
    p->is_output = kn_calloc(nn + 1, sizeof *p->is_output);
    p->outs = kn_calloc((size_t)p->g->noutputs + 1, sizeof *p->outs);
    if (!p->steps || !p->bound || !p->vals || !p->last_use || !p->is_output || !p->outs) {
        kn_program_free(p);
        return kn_error(KN_ERR_OOM, "kn_program_compile: out of memory for %zu nodes", nn);
    }
    for (int32_t i = 0; i < p->g->nnodes; i++) {
        p->last_use[i] = i;
        for (int k = 0; k < p->g->nodes[i].nin; k++) p->last_use[p->g->nodes[i].in[k]] = i;
    }
    for (int i = 0; i < p->g->noutputs; i++) p->is_output[p->g->outputs[i]] = true;
    st = schedule(p);
    if (st != KN_OK) { kn_program_free(p); return st; }
    *out = p;
    return KN_OK;
}

kn_status kn_program_bind(kn_program *p, const char *name, const kn_tensor *t) {
    if (!p || !name || !t) return kn_error(KN_ERR_ARG, "kn_program_bind: NULL argument");
    int32_t id = -1;
    for (int32_t i = 0; i < p->g->nnodes && id < 0; i++) {
        const kn_node *n = &p->g->nodes[i];
        if ((n->op == KN_OP_INPUT || n->op == KN_OP_PARAM) && !strcmp(n->attrs.name, name)) id = i;
    }
    if (id < 0) return kn_error(KN_ERR_ARG, "kn_program_bind: the graph has no input or param \"%s\"", name);
    const kn_type *want = &p->g->nodes[id].type;
    bool same = t->dtype == want->dtype && t->ndim == want->ndim;
    for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == want->shape[d];
    if (!same) {
        char a[160], b[160];
        return kn_error(t->dtype != want->dtype ? KN_ERR_DTYPE : KN_ERR_SHAPE, "kn_program_bind: \"%s\" is %s in the "
                        "graph, got %s %s", name, kn_type_str(want, a, sizeof a), kn_dtype_name(t->dtype),
                        kn_shape_str(t->ndim, t->shape, b, sizeof b));
    }
    kn_tensor *c = NULL, *moved = NULL;
    kn_status st = KN_OK;
    if (!kn_device_equal(t->storage->device, p->dev)) { /* a copy on the program's device */
        st = kn_tensor_to(&moved, t, p->dev);
        t = moved;
    }
    if (st == KN_OK) st = kn_device_contiguous("kn_program_bind", t, &c);
    kn_tensor_free(moved);
    if (st != KN_OK) return st;
    kn_tensor_free(p->bound[id]);
    p->bound[id] = c;
    return KN_OK;
}

static void release_run(kn_program *p) {
    for (int i = 0; i < p->g->nnodes; i++) { kn_tensor_free(p->vals[i]); p->vals[i] = NULL; }
}

/* Free the values that node i was the last reader of. */
static void release_after(kn_program *p, int32_t i) {
    const kn_node *n = &p->g->nodes[i];
    for (int k = 0; k < n->nin; k++) {
        int32_t a = n->in[k];
        if (p->last_use[a] == i && !p->is_output[a] && p->vals[a]) { kn_tensor_free(p->vals[a]); p->vals[a] = NULL; }
    }
    if (p->last_use[i] == i && !p->is_output[i]) { kn_tensor_free(p->vals[i]); p->vals[i] = NULL; }
}

kn_status kn_program_run(kn_program *p) {
    if (!p) return kn_error(KN_ERR_ARG, "kn_program_run: program is NULL");
    const kn_graph *g = p->g;
    for (int i = 0; i < g->noutputs; i++) { kn_tensor_free(p->outs[i]); p->outs[i] = NULL; }
    for (int32_t i = 0; i < g->nnodes; i++) { /* the bound sources first */
        const kn_node *n = &g->nodes[i];
        if (n->op != KN_OP_INPUT && n->op != KN_OP_PARAM) continue;
        if (!p->bound[i]) {
            release_run(p);
            return kn_error(KN_ERR_ARG, "kn_program_run: %s \"%s\" (%%%d) is not bound", kn_op_name(n->op),
                            n->attrs.name, i);
        }
        kn_status st = kn_tensor_alias(&p->vals[i], p->bound[i]);
        if (st != KN_OK) { release_run(p); return st; }
    }
    for (int s = 0; s < p->nsteps; s++) {
        const kn_program_step *sp = &p->steps[s];
        const kn_node *n = &g->nodes[sp->node];
        const kn_tensor *in[KN_MAX_OPERANDS];
        for (int k = 0; k < n->nin; k++) in[k] = p->vals[n->in[k]];
        kn_status st = sp->be->node_eval(sp->be->ctx, sp->index, n, in, &p->vals[sp->node]);
        if (st != KN_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", kn_last_error());
            release_run(p);
            return kn_error(st, "kn_program_run: step %d (%%%d = %s): %s", s, sp->node, kn_op_name(n->op), msg);
        }
        if (p->hook && (st = p->hook(p->hook_ctx, sp->node, p->vals[sp->node])) != KN_OK) {
            release_run(p);
            return st;
        }
        release_after(p, sp->node);
    }
    for (int i = 0; i < g->noutputs; i++) {
        kn_status st = kn_tensor_alias(&p->outs[i], p->vals[g->outputs[i]]);
        if (st != KN_OK) { release_run(p); return st; }
    }
    release_run(p);
    return KN_OK;
}

const kn_tensor *kn_program_output(const kn_program *p, int i) {
    return p && i >= 0 && i < p->g->noutputs ? p->outs[i] : NULL;
}

const kn_graph *kn_program_graph(const kn_program *p) { return p ? p->g : NULL; }
kn_device kn_program_device(const kn_program *p) { return p ? p->dev : KN_CPU; }
int kn_program_nsteps(const kn_program *p) { return p ? p->nsteps : 0; }
void kn_program_set_hook(kn_program *p, kn_interp_hook fn, void *ctx) {
    if (!p) return;
    p->hook = fn;
    p->hook_ctx = ctx;
}
int32_t kn_program_step_node(const kn_program *p, int step) {
    return p && step >= 0 && step < p->nsteps ? p->steps[step].node : -1;
}
