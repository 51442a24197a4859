/* graph.c — CUDA graphs for a compiled GPU program (kn_program_set_cuda_graph, kiln/program.h).
 *
 * A compiled GPU step launches a few hundred kernels; on a small model the launches, not
 * the kernels, set the pace. A CUDA graph records them once and replays them with one
 * launch. The first run after turning it on is an ordinary run (it loads the kernels,
 * warms cuBLAS and the allocator, and puts the host's constants on the device once); the
 * second is captured: the same steps, recorded instead of run, then the graph is launched.
 * Every later run only refreshes the inputs (a bound tensor whose buffer is not the one the
 * graph reads is copied into it) and launches the graph. The graph owns every buffer it
 * touches: the arena, the blocks freed during the capture (held, kiln/cuda.h), the
 * sources it read and the outputs it writes, which each run hands out again. The steps it
 * records are program.c's (kn_program_run_steps), unchanged. */
#include <stdio.h>
#include <stdlib.h>

#include "kiln/program.h"
#if KN_HAVE_CUDA
#include "kiln/cuda.h"
#endif
#include "program/program_impl.h"

#if KN_HAVE_CUDA
static bool is_constant(const kn_program *p, int32_t v) {
    const kn_node *n = &p->g->nodes[v];
    if (n->op == KN_OP_INPUT || n->op == KN_OP_PARAM) return false;
    for (int k = 0; k < n->nin; k++)
        if (!is_constant(p, n->in[k])) return false;
    return true;
}
#endif

/* The device copy of host value v (made by a host step: a `full`, or what is computed from
 * one) for a step on the device. A constant (made from constants only) is copied once and
 * kept for every later run, with or without a CUDA graph: copying it in every run cost the
 * node-by-node attention benchmark a [B, H, T, D] upload per run. Anything else is copied
 * in every run, which a CUDA graph cannot replay. */
kn_status kn_program_device_const(kn_program *p, int32_t v, const kn_tensor *host, kn_tensor **out) {
#if KN_HAVE_CUDA
    if (!p->dev_const && !(p->dev_const = kn_calloc((size_t)p->g->nnodes + 1, sizeof *p->dev_const)))
        return kn_error(KN_ERR_OOM, "kn_program_run: out of memory");
    if (!p->dev_const[v]) {
        if (!is_constant(p, v)) {
            if (p->graph_on)
                return kn_error(KN_ERR_UNSUPPORTED, "%%%d is computed on the host from the inputs in every run: a "
                                "CUDA graph cannot hold that copy (run without --cuda-graph)", v);
            return kn_tensor_to(out, host, p->dev);
        }
        if (p->capturing)
            return kn_error(KN_ERR_INTERNAL, "%%%d: its device copy was not made in the warm-up run", v);
        KN_TRY(kn_tensor_to(&p->dev_const[v], host, p->dev));
    }
    return kn_tensor_alias(out, p->dev_const[v]);
#else
    (void)p; (void)host; (void)out;
    return kn_error(KN_ERR_UNSUPPORTED, "%%%d: a host value for a device step needs a build with CUDA", v);
#endif
}

/* Collectives may sit in a CUDA graph only where their context says it queues them all in
 * device order (kn_collectives.graph: NCCL's stream-ordered waits); the others wait on the
 * host between the steps (MPI, kiln's ring, ZeRO-3's gathers, accumulation's micro-batches). */
kn_status kn_program_graph_collectives_ok(const kn_program *p, const char *who) {
    if (p->coll.run && p->coll.graph) return KN_OK;
    for (int i = 0; i < p->g->nnodes; i++)
        if (kn_op_get(p->g->nodes[i].op)->category == KN_CAT_COLLECTIVE)
            return kn_error(KN_ERR_UNSUPPORTED, "%s: %%%d = %s talks to other ranks from the host between the steps "
                            "(%s), which a CUDA graph cannot replay", who, i, kn_op_name(p->g->nodes[i].op),
                            p->coll.run ? "its collectives context waits on the host" : "no collectives context yet");
    return KN_OK;
}

kn_status kn_program_set_cuda_graph(kn_program *p, bool on) {
    if (!p) return kn_error(KN_ERR_ARG, "kn_program_set_cuda_graph: program is NULL");
    kn_program_graph_release(p);
    p->graph_on = false;
    if (!on) return KN_OK;
    if (p->target != KN_TARGET_CUDA || p->stats.mode != KN_PROGRAM_COMPILED)
        return kn_error(KN_ERR_UNSUPPORTED, "kn_program_set_cuda_graph: CUDA graphs need a compiled program on a GPU "
                        "(--mode compiled --device cuda)");
    if (p->hook || p->step_ms)
        return kn_error(KN_ERR_UNSUPPORTED, "kn_program_set_cuda_graph: a program with a hook or a step profile runs host "
                        "code between its steps, which a CUDA graph cannot replay");
    KN_TRY(kn_program_graph_collectives_ok(p, "kn_program_set_cuda_graph"));
    for (int i = 0; i < p->g->nnodes; i++)
        if (p->deferred[i])
            return kn_error(KN_ERR_UNSUPPORTED, "kn_program_set_cuda_graph: param \"%s\" is supplied during the run "
                            "(ZeRO-3), which a CUDA graph cannot replay", p->g->nodes[i].attrs.name);
    if (getenv("KILN_PROFILE_STEPS") || getenv("KILN_CUDA_SYNC"))
        return kn_error(KN_ERR_UNSUPPORTED, "kn_program_set_cuda_graph: KILN_PROFILE_STEPS and KILN_CUDA_SYNC synchronize "
                        "between steps, which a CUDA graph cannot do: unset them");
#if KN_HAVE_CUDA
    size_t nn = (size_t)p->g->nnodes;
    p->dev_const = kn_calloc(nn + 1, sizeof *p->dev_const);
    p->graph_src = kn_calloc(nn + 1, sizeof *p->graph_src);
    p->graph_outs = kn_calloc((size_t)p->g->noutputs + 1, sizeof *p->graph_outs);
    if (!p->dev_const || !p->graph_src || !p->graph_outs) {
        kn_program_graph_release(p);
        return kn_error(KN_ERR_OOM, "kn_program_set_cuda_graph: out of memory");
    }
    p->graph_on = true;
    p->graph_runs = 0;
    return KN_OK;
#else
    return kn_error(KN_ERR_UNSUPPORTED, "kn_program_set_cuda_graph: this build has no CUDA");
#endif
}

/* Forget the graph and what it holds (the next run with graphs on warms up again). */
void kn_program_graph_release(kn_program *p) {
#if KN_HAVE_CUDA
    if (p->graph_exec || p->graph_hold) kn_cuda_graph_free(p->graph_exec, p->graph_hold);
#endif
    p->graph_exec = NULL;
    p->graph_hold = NULL;
    for (int i = 0; p->g && i < p->g->nnodes; i++) {
        if (p->dev_const) kn_tensor_free(p->dev_const[i]);
        if (p->graph_src) kn_tensor_free(p->graph_src[i]);
    }
    for (int i = 0; p->graph_outs && i < p->g->noutputs; i++) kn_tensor_free(p->graph_outs[i]);
    kn_free(p->dev_const);
    kn_free(p->graph_src);
    kn_free(p->graph_outs);
    p->dev_const = p->graph_src = p->graph_outs = NULL;
}

#if KN_HAVE_CUDA
static bool is_source(const kn_program *p, int32_t i) {
    const kn_node *n = &p->g->nodes[i];
    return n->op == KN_OP_INPUT || n->op == KN_OP_PARAM;
}

kn_status kn_program_run_graph(kn_program *p) {
    const kn_graph *g = p->g;
    if (p->hook)
        return kn_error(KN_ERR_UNSUPPORTED, "kn_program_run: a hook was set after CUDA graphs were turned on; a graph "
                        "cannot run host code between its steps (kn_program_set_cuda_graph(p, false) first)");
    if (p->graph_runs++ == 0) return kn_program_run_steps(p); /* the warm-up */
    if (!p->graph_exec) {
        KN_TRY(kn_program_graph_collectives_ok(p, "kn_program_run"));
        KN_TRY(kn_cuda_graph_begin(p->dev.index));
        p->capturing = true;
        kn_status st = kn_program_run_steps(p);
        p->capturing = false;
        char msg[512];
        snprintf(msg, sizeof msg, "%s", st != KN_OK ? kn_last_error() : "");
        kn_status se = kn_cuda_graph_end(st == KN_OK, &p->graph_exec, &p->graph_hold);
        if (st == KN_OK && se != KN_OK) snprintf(msg, sizeof msg, "%s", kn_last_error());
        if (st == KN_OK) st = se;
        for (int32_t i = 0; st == KN_OK && i < g->nnodes; i++)
            if (is_source(p, i) && p->bound[i]) st = kn_tensor_alias(&p->graph_src[i], p->bound[i]);
        for (int i = 0; st == KN_OK && i < g->noutputs; i++) st = kn_tensor_alias(&p->graph_outs[i], p->outs[i]);
        if (st != KN_OK) {
            kn_program_graph_release(p);
            p->graph_on = false;
            return kn_error(st, "kn_program_run: capturing the step as a CUDA graph failed: %s", msg);
        }
    } else {
        for (int32_t i = 0; i < g->nnodes; i++) { /* the inputs, into the buffers the graph reads */
            if (!is_source(p, i)) continue;
            const kn_tensor *b = p->bound[i], *s = p->graph_src[i];
            if (!b || !s)
                return kn_error(KN_ERR_ARG, "kn_program_run: %s \"%s\" is not bound", kn_op_name(g->nodes[i].op),
                                g->nodes[i].attrs.name);
            if (kn_tensor_data(b) != kn_tensor_data(s))
                KN_TRY(kn_cuda_copy_async(kn_tensor_data(s), kn_tensor_data(b),
                                          (size_t)kn_tensor_numel(s) * kn_dtype_size(s->dtype)));
        }
    }
    KN_TRY(kn_cuda_graph_launch(p->graph_exec));
    p->stats.graph_launches++;
    /* collectives in the graph: the context bounds the wait for this replay (its fence) */
    if (p->coll.finish && p->coll.graph) KN_TRY(p->coll.finish(p->coll.ctx));
    for (int i = 0; i < g->noutputs; i++) {
        kn_tensor_free(p->outs[i]);
        p->outs[i] = NULL;
        KN_TRY(kn_tensor_alias(&p->outs[i], p->graph_outs[i]));
    }
    return KN_OK;
}
#endif

