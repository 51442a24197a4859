/* program.c — kn_program (kiln/program.h): a graph compiled into ordered steps on one
 * device, and their replay.
 *
 * Compiling is compile.c's: a table of stages (passes, decompose, schedule, lower, plan,
 * render, load) run by one timed loop, which leaves the program its steps, each with the
 * backend that runs it, chosen then (supports_op) so that a run never discovers a missing
 * kernel. Run replays the steps in order, calling the backend's node_eval (or launching a
 * generated kernel), and frees each value right after its last reader; a COMPILED program
 * places the values in its memory plan's arena instead (that plan is plan.c's). What reads a
 * program without running it (profiles, kernel listings, the memory TSV, the comparison
 * with the interpreter) is in report.c; the step profile's clock is in profile.c; the
 * replay of a step as one CUDA graph is in graph.c; outputs written into the caller's
 * memory are outputs.c's. */
#define _GNU_SOURCE /* qsort_r */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/codegen.h"
#include "kiln/kernels.h"
#if KN_HAVE_CUDA
#include "kiln/cuda.h"
#endif
#define KN_EMU_NO_BUILTINS /* only kn_emu_launch: this file is not a kernel */
#include "runtime/cuda_emu.h"
#include "kiln/passes.h"
#include "kiln/program.h"
#include "program/program_impl.h"

void kn_program_free(kn_program *p) {
    if (!p) return;
    kn_program_graph_release(p); /* first: it waits for the graph's last launch, which uses the arena */
    kn_program_profile_free(p); /* prints it first under KILN_PROFILE_STEPS */
    for (int i = 0; p->g && i < p->g->nnodes; i++) {
        if (p->bound) kn_tensor_free(p->bound[i]);
        if (p->vals) kn_tensor_free(p->vals[i]);
    }
    for (int i = 0; p->outs && p->g && i < p->g->noutputs; i++) kn_tensor_free(p->outs[i]);
    kn_program_outputs_free(p);
    kn_free(p->bound);
    kn_free(p->deferred);
    kn_free(p->vals);
    kn_free(p->is_output);
    kn_free(p->outs);
    kn_free(p->steps);
    for (int i = 0; i < p->nkernels; i++) kn_kernel_clear(&p->kernels[i].ir);
    kn_free(p->kernels);
    kn_schedule_free(p->sched);
    kn_cc_free(p->module);
#if KN_HAVE_CUDA
    kn_cuda_module_free(p->gpu_module);
#endif
    kn_free(p->last_step);
    kn_free(p->ptrs);
    kn_free(p->mem_off);
    kn_free(p->mem_def);
    kn_free(p->mem_last);
    kn_free(p->mem_from);
    kn_free(p->ce_pair);
    if (p->arena_bytes) kn_device_free(p->dev, p->arena_raw, p->arena_bytes); /* NULL is fine */
    else kn_free(p->arena_raw);
    kn_graph_free(p->g);
    kn_free(p);
}

/* The tensor for value v in the arena, when the plan placed it there (else *out stays NULL). */
static kn_status planned_tensor(kn_program *p, int32_t v, kn_tensor **out) {
    if (!p->mem_off || p->mem_off[v] < 0 || *out) return KN_OK;
    const kn_type *t = &p->g->nodes[v].type;
    return kn_tensor_wrap(out, p->target == KN_TARGET_CUDA ? p->dev : KN_CPU, p->arena + p->mem_off[v], t->dtype,
                          t->ndim, t->shape);
}

/* The input or param node called `name`, or -1. */
static int32_t find_source(const kn_program *p, const char *name) {
    for (int32_t i = 0; i < p->g->nnodes; i++) {
        const kn_node *n = &p->g->nodes[i];
        if ((n->op == KN_OP_INPUT || n->op == KN_OP_PARAM) && !strcmp(n->attrs.name, name)) return i;
    }
    return -1;
}

/* t must have source id's dtype and shape. */
static kn_status check_type(const kn_program *p, int32_t id, const kn_tensor *t, const char *fn) {
    const kn_type *want = &p->g->nodes[id].type;
    bool same = t->dtype == want->dtype && t->ndim == want->ndim;
    for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == want->shape[d];
    if (same) return KN_OK;
    char a[160], b[160];
    return kn_error(t->dtype != want->dtype ? KN_ERR_DTYPE : KN_ERR_SHAPE, "%s: \"%s\" is %s in the graph, got %s %s",
                    fn, p->g->nodes[id].attrs.name, kn_type_str(want, a, sizeof a), kn_dtype_name(t->dtype),
                    kn_shape_str(t->ndim, t->shape, b, sizeof b));
}

kn_status kn_program_bind(kn_program *p, const char *name, const kn_tensor *t) {
    if (!p || !name || !t) return kn_error(KN_ERR_ARG, "kn_program_bind: NULL argument");
    int32_t id = find_source(p, name);
    if (id < 0) return kn_error(KN_ERR_ARG, "kn_program_bind: the graph has no input or param \"%s\"", name);
    KN_TRY(check_type(p, id, t, "kn_program_bind"));
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
    p->deferred[id] = false;
    return KN_OK;
}

kn_status kn_program_defer(kn_program *p, const char *name) {
    if (!p || !name) return kn_error(KN_ERR_ARG, "kn_program_defer: NULL argument");
    int32_t id = find_source(p, name);
    if (id < 0 || p->g->nodes[id].op != KN_OP_PARAM)
        return kn_error(KN_ERR_ARG, "kn_program_defer: the graph has no param \"%s\"", name);
    kn_tensor_free(p->bound[id]); /* the binding's reference to the memory goes */
    p->bound[id] = NULL;
    p->deferred[id] = true;
    return KN_OK;
}

/* The error for a step reading value v, which has none: a deferred param (the caller puts
 * "kn_program_run: step S (...)" in front). */
static kn_status missing_value(const kn_program *p, int32_t v) {
    const kn_node *n = &p->g->nodes[v];
    if (p->deferred[v])
        return kn_error(KN_ERR_ARG, "it reads param \"%s\" (%%%d), which is deferred and was not supplied "
                        "(bind it; under ZeRO-3, gather the parameters first: kn_dp_gather_state)", n->attrs.name, v);
    return kn_error(KN_ERR_INTERNAL, "it reads %%%d (%s), which no step made", v, kn_op_name(n->op));
}

static void release_run(kn_program *p) {
    for (int i = 0; i < p->g->nnodes; i++) { kn_tensor_free(p->vals[i]); p->vals[i] = NULL; }
    if (p->arena_borrowed) { /* the owner's: it stays the owner's */
        p->arena = NULL;
        p->arena_borrowed = false;
    } else if (p->arena_bytes && p->arena_raw && !p->graph_on) { /* a GPU arena lives for one run */
        kn_device_free(p->dev, p->arena_raw, p->arena_bytes);
        p->arena = p->arena_raw = NULL;
    }
}

/* Free the values that step s was the last reader of, and what it made that nobody reads. */
static void release_after(kn_program *p, int s) {
    const kn_program_step *sp = &p->steps[s];
    const kn_graph *g = p->g;
    if (sp->kernel < 0) {
        const kn_node *n = &g->nodes[sp->node];
        for (int k = 0; k < n->nin; k++) {
            int32_t a = n->in[k];
            if (p->last_step[a] == s && !p->is_output[a] && p->vals[a]) { kn_tensor_free(p->vals[a]); p->vals[a] = NULL; }
        }
        if (p->last_step[sp->node] < 0 && !p->is_output[sp->node]) { kn_tensor_free(p->vals[sp->node]); p->vals[sp->node] = NULL; }
        return;
    }
    const kn_kernel *k = &p->kernels[sp->kernel].ir;
    for (int b = 0; b < k->nbufs; b++) {
        int32_t a = k->bufs[b].value;
        bool dead = k->bufs[b].store ? p->last_step[a] < 0 : p->last_step[a] == s;
        if (dead && !p->is_output[a] && p->vals[a]) { kn_tensor_free(p->vals[a]); p->vals[a] = NULL; }
    }
}

/* A kernel with a onehot (cross-entropy's target, decomposed) first checks its indices as
 * the interpreter's kernel does, with the same message: a generated kernel cannot fail, and
 * an index outside [0, V) would otherwise pick no logit. The index is constant along the
 * onehot's axis, so the walk covers the other axes of the space, in order. On a GPU it reads
 * a host copy (a sync), skipped while a CUDA graph is captured, as the library kernels do. */
static kn_status check_onehots(kn_program *p, const kn_kernel *k) {
    for (int i = 0; i < k->nx; i++) {
        const kn_kx *x = &k->x[i];
        if (x->kind != KN_KX_OP || x->op != KN_OP_ONEHOT) continue;
        const kn_kx *ld = &k->x[x->in[0]];
        if (ld->kind != KN_KX_LOAD)
            return kn_error(KN_ERR_INTERNAL, "%s: onehot x%d reads x%d, not a load of its indices", k->name, i, x->in[0]);
        const kn_kbuf *b = &k->bufs[ld->buf];
        const kn_tensor *t = p->vals[b->value];
        kn_tensor *host = NULL;
        if (t->storage->device.type != KN_DEVICE_CPU) {
            if (p->capturing) continue;
            KN_TRY(kn_tensor_to(&host, t, KN_CPU));
            t = host;
        }
        const void *d = kn_tensor_data(t);
        int ax = (int)x->rows, nd = k->ndim;
        int64_t n = 1, c[KN_MAX_DIMS] = {0};
        for (int a = 0; a < nd; a++) n *= a == ax ? 1 : k->shape[a];
        kn_status st = KN_OK;
        for (int64_t r = 0; r < n && st == KN_OK; r++) {
            int64_t off = b->offset;
            for (int a = 0; a < nd; a++) off += c[a] * b->stride[a];
            int64_t tg = (int64_t)kn_dtype_load(b->dtype, d, off);
            if (tg < 0 || tg >= x->cols)
                st = kn_error(KN_ERR_ARG, "%%%d = onehot: index %lld at position %lld is outside [0, %lld)", x->node,
                              (long long)tg, (long long)r, (long long)x->cols);
            for (int a = nd - 1; a >= 0; a--) { /* the next coordinate, the onehot axis held at 0 */
                if (a == ax) continue;
                if (++c[a] < k->shape[a]) break;
                c[a] = 0;
            }
        }
        kn_tensor_free(host);
        KN_TRY(st);
    }
    return KN_OK;
}

/* Run generated kernel step sp: allocate what it stores, call it over the outer range
 * (split over kiln's threads when there is enough work), then the hook per stored value. */
static kn_status run_kernel(kn_program *p, const kn_program_step *sp) {
    const kn_program_kernel *pk = &p->kernels[sp->kernel];
    const kn_kernel *k = &pk->ir;
    for (int b = 0; b < k->nbufs; b++) {
        int32_t v = k->bufs[b].value;
        if (k->bufs[b].store && !p->vals[v]) {
            const kn_type *t = &p->g->nodes[v].type;
            KN_TRY(planned_tensor(p, v, &p->vals[v]));
            if (!p->vals[v]) KN_TRY(kn_tensor_empty_on(&p->vals[v], p->dev, t->dtype, t->ndim, t->shape));
        }
        if (!p->vals[v]) return missing_value(p, v);
        if (!kn_device_equal(p->vals[v]->storage->device, p->dev)) { /* made on the host (a constant's view) */
            kn_tensor *moved = NULL;
            KN_TRY(kn_program_device_const(p, v, p->vals[v], &moved)); /* a constant: copied once */
            kn_tensor_free(p->vals[v]);
            p->vals[v] = moved;
        }
        p->ptrs[b] = kn_tensor_data(p->vals[v]);
    }
    KN_TRY(check_onehots(p, k));
    if (p->target == KN_TARGET_C) kn_k_parallel(k->outer_n, k->outer_n * k->inner_n >= (1 << 15), pk->fn, p->ptrs);
    else {
        /* cudaLaunchKernel's argument form: one pointer to each argument (the buffer
         * pointers themselves are in p->ptrs[0..nbufs)) */
        void **args = p->ptrs + k->nbufs;
        for (int b = 0; b < k->nbufs; b++) args[b] = &p->ptrs[b];
        if (p->target == KN_TARGET_EMU) {
            kn_dim3 grid = {pk->launch.grid, 1, 1}, block = {pk->launch.block, 1, 1};
            if (kn_emu_launch(pk->emu, grid, block, args) != 0)
                return kn_error(KN_ERR_INTERNAL, "kn_program_run: %s failed under the CUDA emulator (see above)", k->name);
        } else {
#if KN_HAVE_CUDA
            KN_TRY(kn_cuda_launch_kernel(pk->gpu, k->name, pk->launch, args));
#endif
        }
        if (k->ncolsums) { /* its column sums' partials, added in order (kn_cuda_colsum_finish_launch) */
            kn_cuda_launch fl = kn_cuda_colsum_finish_launch(k);
            if (p->target == KN_TARGET_EMU) {
                kn_dim3 grid = {fl.grid, 1, 1}, block = {fl.block, 1, 1};
                if (kn_emu_launch(pk->emu_fin, grid, block, args) != 0)
                    return kn_error(KN_ERR_INTERNAL, "kn_program_run: %s_fin failed under the CUDA emulator (see above)",
                                    k->name);
            } else {
#if KN_HAVE_CUDA
                KN_TRY(kn_cuda_launch_kernel(pk->gpu_fin, k->name, fl, args));
#endif
            }
        }
    }
    for (int s = 0; p->hook && s < k->nstores + k->ncolsums; s++) {
        int32_t v = k->bufs[s < k->nstores ? k->stores[s].buf : k->colsums[s - k->nstores].buf].value;
        KN_TRY(p->hook(p->hook_ctx, v, p->vals[v]));
    }
    return KN_OK;
}

/* Run every step once, in order (the body of kn_program_run; a CUDA graph's capture). */
kn_status kn_program_run_steps(kn_program *p) {
    const kn_graph *g = p->g;
    for (int i = 0; i < g->noutputs; i++) { kn_tensor_free(p->outs[i]); p->outs[i] = NULL; }
    for (int32_t i = 0; i < g->nnodes; i++) { /* the bound sources first */
        const kn_node *n = &g->nodes[i];
        if ((n->op != KN_OP_INPUT && n->op != KN_OP_PARAM) || p->deferred[i]) continue;
        if (!p->bound[i]) {
            release_run(p);
            return kn_error(KN_ERR_ARG, "kn_program_run: %s \"%s\" (%%%d) is not bound", kn_op_name(n->op),
                            n->attrs.name, i);
        }
        kn_status st = kn_tensor_alias(&p->vals[i], p->bound[i]);
        if (st != KN_OK) { release_run(p); return st; }
    }
    const kn_program *own = p->arena_owner;
    if (p->arena_bytes && !p->arena_raw && own && own->arena_raw && own->arena_bytes >= p->arena_bytes &&
        kn_device_equal(own->dev, p->dev)) { /* held by a graph between its runs, idle now */
        p->arena = own->arena;
        p->arena_borrowed = true;
    } else if (p->arena_bytes && !p->arena_raw) {
        void *mem = NULL;
        kn_status st = kn_device_alloc(p->dev, p->arena_bytes, &mem);
        if (st != KN_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", kn_last_error());
            release_run(p);
            return kn_error(st, "kn_program_run: the memory plan's %.1f MB arena: %s", p->arena_bytes / 1e6, msg);
        }
        p->arena = p->arena_raw = mem;
    }
    kn_status placed = kn_program_outputs_place(p); /* outputs written where the caller bound them */
    if (placed != KN_OK) { release_run(p); return placed; }
    kn_program_profile_run_begin(p);
    p->runs++;
    for (int s = 0; s < p->nsteps; s++) {
        const kn_program_step *sp = &p->steps[s];
        double t0 = p->step_ms ? kn_program_profile_begin(p, s) : 0;
        if (sp->kernel >= 0) {
            kn_status st = run_kernel(p, sp);
            if (st != KN_OK) {
                char msg[512];
                snprintf(msg, sizeof msg, "%s", kn_last_error());
                release_run(p);
                return kn_error(st, "kn_program_run: step %d (kernel %s): %s", s, p->kernels[sp->kernel].ir.name, msg);
            }
            if (p->coll.poll && !p->capturing && (st = p->coll.poll(p->coll.ctx)) != KN_OK) {
                release_run(p);
                return st;
            }
            release_after(p, s);
            if (p->step_ms) p->step_ms[s] += kn_program_profile_end(p, s, t0);
            continue;
        }
        if (p->ce_pair && p->ce_pair[s] == -2) { /* a cross_entropy its gradient's step makes (plan.c) */
            release_after(p, s);
            if (p->step_ms) p->step_ms[s] += kn_program_profile_end(p, s, t0);
            continue;
        }
        const kn_node *n = &g->nodes[sp->node];
        const kn_tensor *in[KN_MAX_OPERANDS];
        kn_tensor *moved[KN_MAX_OPERANDS] = {0};
        kn_status st = KN_OK;
        int32_t loss = p->ce_pair && p->ce_pair[s] >= 0 ? p->steps[p->ce_pair[s]].node : -1;
        for (int k = 0; k < n->nin; k++) {
            in[k] = p->vals[n->in[k]];
            if (!in[k] && st == KN_OK) st = missing_value(p, n->in[k]);
            /* a host step (a view of a constant) whose operand a generated kernel already
             * took to the GPU: read a host copy */
            if (st == KN_OK && sp->be->type == KN_DEVICE_CPU && in[k] && in[k]->storage->device.type != KN_DEVICE_CPU) {
                st = p->capturing ? kn_error(KN_ERR_UNSUPPORTED, "it reads %%%d on the host, a copy a CUDA graph cannot "
                                             "hold", n->in[k])
                                  : kn_tensor_to(&moved[k], in[k], KN_CPU);
                in[k] = moved[k];
            }
            /* a GPU step reading a host value (a `full`): it reads the copy made once on the
             * device (the backend would copy it over in every run) */
            if (st == KN_OK && sp->be->type != KN_DEVICE_CPU && in[k] &&
                in[k]->storage->device.type == KN_DEVICE_CPU) {
                st = kn_program_device_const(p, n->in[k], in[k], &moved[k]);
                in[k] = moved[k];
            }
        }
        if (st == KN_OK && !(n->nin == 1 && kn_ir_aliases(n, &g->nodes[n->in[0]].type)))
            st = planned_tensor(p, sp->node, &p->vals[sp->node]);
        kn_tensor *placed = p->vals[sp->node];
        if (st == KN_OK && loss >= 0) { /* the cross_entropy paired with this backward: both from one pass */
            st = planned_tensor(p, loss, &p->vals[loss]);
            if (st == KN_OK) st = sp->be->cross_entropy_fused(sp->be->ctx, sp->index, in, &p->vals[loss], &p->vals[sp->node]);
        } else if (st == KN_OK && kn_op_get(n->op)->category == KN_CAT_COLLECTIVE)
            st = kn_collective_eval(p->coll.run ? &p->coll : NULL, p->dev, sp->node, n, in, &p->vals[sp->node]);
        else if (st == KN_OK)
            st = sp->be->node_eval(sp->be->ctx, sp->index, n, in, &p->vals[sp->node]);
        /* a kernel that made its own output (an alias of an operand, a view) replaced the
         * arena's wrapper, which owns no memory: drop it (a kernel that fails frees it) */
        if (st == KN_OK && placed && p->vals[sp->node] != placed) kn_tensor_free(placed);
        for (int k = 0; k < n->nin; k++) kn_tensor_free(moved[k]);
        if (st != KN_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", kn_last_error());
            release_run(p);
            return kn_error(st, "kn_program_run: step %d (%%%d = %s): %s", s, sp->node, kn_op_name(n->op), msg);
        }
        if (p->hook && loss >= 0 && (st = p->hook(p->hook_ctx, loss, p->vals[loss])) != KN_OK) {
            release_run(p);
            return st;
        }
        if (p->hook && (st = p->hook(p->hook_ctx, sp->node, p->vals[sp->node])) != KN_OK) {
            release_run(p);
            return st;
        }
        /* collectives in flight progress between steps (MPI progresses inside MPI_Test) */
        if (p->coll.poll && !p->capturing && (st = p->coll.poll(p->coll.ctx)) != KN_OK) {
            release_run(p);
            return st;
        }
        release_after(p, s);
        if (p->step_ms) p->step_ms[s] += kn_program_profile_end(p, s, t0);
    }
    if (p->coll.finish) { /* device-ordered collectives: the host sees them end (under the deadline) */
        kn_status st = p->coll.finish(p->coll.ctx);
        if (st != KN_OK) { release_run(p); return st; }
    }
    kn_program_profile_run_end(p);
    for (int i = 0; i < g->noutputs; i++) {
        kn_status st = kn_tensor_alias(&p->outs[i], p->vals[g->outputs[i]]);
        if (st != KN_OK) { release_run(p); return st; }
    }
    kn_status st = kn_program_outputs_finish(p);
    release_run(p);
    if (st != KN_OK) return st;
    return KN_OK;
}

kn_status kn_program_run(kn_program *p) {
    if (!p) return kn_error(KN_ERR_ARG, "kn_program_run: program is NULL");
#if KN_HAVE_CUDA
    if (p->graph_on) return kn_program_run_graph(p);
#endif
    return kn_program_run_steps(p);
}

kn_status kn_program_share_arena(kn_program *p, const kn_program *owner) {
    if (!p) return kn_error(KN_ERR_ARG, "kn_program_share_arena: program is NULL");
    if (owner == p) return kn_error(KN_ERR_ARG, "kn_program_share_arena: a program cannot borrow its own arena");
    p->arena_owner = owner;
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
void kn_program_set_collectives(kn_program *p, const kn_collectives *c) {
    if (!p) return;
    if (c) p->coll = *c;
    else memset(&p->coll, 0, sizeof p->coll);
}
int32_t kn_program_step_node(const kn_program *p, int step) {
    return p && step >= 0 && step < p->nsteps ? p->steps[step].node : -1;
}
