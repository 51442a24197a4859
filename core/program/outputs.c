/* outputs.c — outputs written where the caller wants them (kn_program_bind_output).
 *
 * A program's outputs are normally its own memory: each is allocated by the step that makes
 * it, kept after the run and read by the caller. A trainer then copied every gradient into
 * its gradient slab after every step: one copy of all the parameters' bytes a step, and, for
 * the length of the step, a second home for every gradient (GPT-2 124M: 475 MiB; under a
 * CUDA graph, which keeps the outputs it recorded, twice that).
 *
 * Binding output i to a tensor t places it before the run: the step that makes the value
 * finds t's memory already in its output slot, as it finds the arena's for a planned value
 * (planned_tensor in program.c), and writes there. A view output (a reshape of a gradient)
 * places the value it views, with that value's own shape, when the view covers it whole.
 * What cannot be placed is copied into t at the end of the run (still on the device's
 * stream, so a CUDA graph records the copy too):
 *   - an input or param handed back as an output;
 *   - a view of part of a value, or a view of a value placed for another output;
 *   - a value made on the host for a GPU program (a constant `full`);
 *   - a value whose kernel made its own result instead of writing the placed one (a
 *     backend kernel that returns a view of its operand).
 * Either way, after a run t holds the output and kn_program_output(p, i) is t. */
#include <string.h>

#include "kiln/program.h"
#include "program/program_impl.h"

/* The value output v is a view of, following views that alias their operand's storage. */
static int32_t view_root(const kn_graph *g, int32_t v) {
    for (;;) {
        const kn_node *n = &g->nodes[v];
        if (!(n->nin == 1 && kn_ir_aliases(n, &g->nodes[n->in[0]].type))) return v;
        v = n->in[0];
    }
}

static size_t value_bytes(const kn_type *t) { return (size_t)kn_type_numel(t) * kn_dtype_size(t->dtype); }

/* Whether the step that makes value r computes on the program's device (not a host step of a
 * GPU program) and writes a result slot the run can fill beforehand. */
static bool made_on_device(const kn_program *p, int32_t r) {
    for (int s = 0; s < p->nsteps; s++) {
        const kn_program_step *sp = &p->steps[s];
        if (sp->kernel >= 0) {
            const kn_kernel *k = &p->kernels[sp->kernel].ir;
            for (int b = 0; b < k->nbufs; b++)
                if (k->bufs[b].store && k->bufs[b].value == r) return true; /* generated: the program's device */
            continue;
        }
        if (sp->node != r) continue;
        if (kn_op_get(p->g->nodes[r].op)->category == KN_CAT_COLLECTIVE) return false;
        return sp->be && sp->be->type == p->dev.type;
    }
    return false;
}

/* The value to place in output i's bound memory before a run, or -1 (copied at the end). */
static int32_t placement(const kn_program *p, int i) {
    const kn_graph *g = p->g;
    int32_t v = g->outputs[i], r = view_root(g, v);
    const kn_node *n = &g->nodes[r];
    if (n->op == KN_OP_INPUT || n->op == KN_OP_PARAM) return -1;
    if (value_bytes(&n->type) != value_bytes(&g->nodes[v].type) || n->type.dtype != g->nodes[v].type.dtype) return -1;
    if (p->mem_off && p->mem_off[r] >= 0) return -1; /* the plan keeps outputs' values out of the arena */
    for (int j = 0; j < g->noutputs; j++)
        if (j != i && p->out_bound[j] && p->out_place[j] == r) return -1;
    return made_on_device(p, r) ? r : -1;
}

kn_status kn_program_bind_output(kn_program *p, int i, const kn_tensor *t) {
    if (!p) return kn_error(KN_ERR_ARG, "kn_program_bind_output: program is NULL");
    if (i < 0 || i >= p->g->noutputs)
        return kn_error(KN_ERR_ARG, "kn_program_bind_output: output %d does not exist (the graph has %d)", i,
                        p->g->noutputs);
    if (p->graph_exec)
        return kn_error(KN_ERR_ARG, "kn_program_bind_output: the step was already captured as a CUDA graph, which "
                        "writes where it recorded: bind outputs before the first run");
    if (!p->out_bound) {
        p->out_bound = kn_calloc((size_t)p->g->noutputs + 1, sizeof *p->out_bound);
        p->out_place = kn_malloc(((size_t)p->g->noutputs + 1) * sizeof *p->out_place);
        if (!p->out_bound || !p->out_place) {
            kn_free(p->out_bound); kn_free(p->out_place);
            p->out_bound = NULL; p->out_place = NULL;
            return kn_error(KN_ERR_OOM, "kn_program_bind_output: out of memory");
        }
        for (int j = 0; j < p->g->noutputs; j++) p->out_place[j] = -1;
    }
    kn_tensor_free(p->out_bound[i]);
    p->out_bound[i] = NULL;
    p->out_place[i] = -1;
    if (!t) return KN_OK;
    const kn_type *want = &p->g->nodes[p->g->outputs[i]].type;
    bool same = t->dtype == want->dtype && t->ndim == want->ndim;
    for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == want->shape[d];
    char a[160], b[160];
    if (!same)
        return kn_error(t->dtype != want->dtype ? KN_ERR_DTYPE : KN_ERR_SHAPE, "kn_program_bind_output: output %d is "
                        "%s, got %s %s", i, kn_type_str(want, a, sizeof a), kn_dtype_name(t->dtype),
                        kn_shape_str(t->ndim, t->shape, b, sizeof b));
    if (!kn_device_equal(t->storage->device, p->dev))
        return kn_error(KN_ERR_DEVICE, "kn_program_bind_output: output %d is made on %s, the tensor lives on %s", i,
                        kn_device_str(p->dev, a, sizeof a), kn_device_str(t->storage->device, b, sizeof b));
    if (!kn_tensor_is_contiguous(t))
        return kn_error(KN_ERR_ARG, "kn_program_bind_output: output %d: the tensor must be contiguous (kernels write "
                        "their results row-major)", i);
    KN_TRY(kn_tensor_alias(&p->out_bound[i], t));
    p->out_place[i] = placement(p, i);
    return KN_OK;
}

kn_status kn_program_outputs_place(kn_program *p) {
    for (int i = 0; p->out_bound && i < p->g->noutputs; i++) {
        int32_t r = p->out_place[i];
        if (!p->out_bound[i] || r < 0 || p->vals[r]) continue;
        const kn_type *t = &p->g->nodes[r].type;
        KN_TRY(kn_tensor_wrap(&p->vals[r], p->dev, kn_tensor_data(p->out_bound[i]), t->dtype, t->ndim, t->shape));
    }
    return KN_OK;
}

/* Copy output i's value into its bound tensor: a cast to its own dtype, run by the backend
 * of the value's device into the bound memory (a kernel on the device's stream). */
static kn_status copy_into(kn_program *p, int i, const kn_tensor *val) {
    int32_t v = p->g->outputs[i];
    kn_tensor *moved = NULL, *c = NULL, *dst = NULL;
    kn_status st = KN_OK;
    if (!kn_device_equal(val->storage->device, p->dev)) { /* a host value of a GPU program */
        st = kn_program_device_const(p, v, val, &moved);
        val = moved;
    }
    if (st == KN_OK) st = kn_device_contiguous("kn_program_run", val, &c);
    const kn_tensor *b = p->out_bound[i];
    if (st == KN_OK) st = kn_tensor_wrap(&dst, p->dev, kn_tensor_data(b), b->dtype, b->ndim, b->shape);
    if (st == KN_OK) {
        kn_node n = {0};
        n.op = KN_OP_CAST;
        n.nin = 1;
        n.in[0] = v;
        n.type = p->g->nodes[v].type;
        n.attrs.dtype = n.type.dtype;
        const kn_tensor *in[1] = {c};
        kn_tensor *placed = dst;
        st = kn_node_eval(&n, in, &dst);
        if (st == KN_OK && dst != placed)
            st = kn_error(KN_ERR_INTERNAL, "output %d: the copy kernel did not write the bound tensor", i);
        if (dst != placed) kn_tensor_free(placed);
    }
    kn_tensor_free(dst);
    kn_tensor_free(c);
    kn_tensor_free(moved);
    return st;
}

kn_status kn_program_outputs_finish(kn_program *p) {
    p->stats.outputs_copied = 0;
    for (int i = 0; p->out_bound && i < p->g->noutputs; i++) {
        if (!p->out_bound[i]) continue;
        const kn_tensor *val = p->vals[p->g->outputs[i]];
        if (!val) return kn_error(KN_ERR_INTERNAL, "kn_program_run: output %d has no value", i);
        if (kn_tensor_data(val) != kn_tensor_data(p->out_bound[i]) || !kn_tensor_is_contiguous(val))
        {
            KN_TRY(copy_into(p, i, val));
            p->stats.outputs_copied++;
        }
        kn_tensor_free(p->outs[i]);
        p->outs[i] = NULL;
        KN_TRY(kn_tensor_alias(&p->outs[i], p->out_bound[i]));
    }
    return KN_OK;
}

void kn_program_outputs_free(kn_program *p) {
    for (int i = 0; p->out_bound && p->g && i < p->g->noutputs; i++) kn_tensor_free(p->out_bound[i]);
    kn_free(p->out_bound);
    kn_free(p->out_place);
    p->out_bound = NULL;
    p->out_place = NULL;
}
