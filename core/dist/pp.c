/* pp.c — pipeline parallelism's stages (kiln/mesh.h, "pipeline parallelism"): the split of
 * the GPT into p*v stages of consecutive blocks, each stage's forward and backward
 * programs, and the context that runs their send/recv ops over the pp communicator.
 * pp_run.c runs a step's schedule through them.
 *
 * A stage is built the way the trainer builds the whole model, from the model's own
 * pieces (kn_gpt_build_part: the same ops in the same order) and autograd: its forward
 * graph takes the previous stage's activation as input "pp.x" (stage 0: "idx") and makes
 * its activation y (the last stage: the loss); a non-last stage differentiates
 * sum(y * dy) with dy an input "pp.dy", whose gradient with respect to y is dy itself (the
 * seed 1 times dy: exact), so the backward starts from the next stage's gradient (the last
 * stage, with a loss scale (fp16), differentiates loss x the 0-d input "loss_scale", which
 * its backward reads by name like a parameter, so the gradients it sends are scaled). The
 * joint graph is then cut in two (what AOTAutograd's partitioner does):
 *   forward   the nodes the output needs, and the activations the backward reads: those
 *             become extra outputs, which the runner stashes per micro-batch;
 *   backward  the backward nodes the gradients need; a stashed activation is an input
 *             "pp.s<k>", a parameter is read again by name, and nodes computed from
 *             parameters alone (a slice of c_attn's weight) are recomputed, not stashed;
 *             with kn_pp_config.remat_selective (--remat selective) so are the values
 *             lab 08's kn_remat_selective calls cheap (their inputs are stashed instead).
 * With a tp axis (a tp x pp mesh) the joint graph is first placed along it (kn_place_graph,
 * Megatron's parameter placements; the output and the input's gradient end replicated, each
 * parameter's gradient in its parameter's placement), and the rank's local graph is what is
 * cut: the all-reduces fall inside the programs, the stash holds local values, and the
 * stage's x and dy stay replicated, so each tp rank sends only its 1/tp of their rows to the
 * same tp rank of the next stage (over its own pp communicator), which all-gathers them
 * over tp (Megatron's scatter/gather). The context below hands the tp collectives to tensor
 * parallelism's (kn_tp_collectives): one context for both axes.
 * Then the stage's traffic becomes IR ops at the graphs' ends: "pp.x" is replaced by a recv
 * from the previous stage and y is sent to the next ({mesh=2, parts=p, peer}); in the
 * backward, "pp.dy" is a recv from the next stage and the input's gradient is sent to the
 * previous one. The programs are compiled like any other (kn_program_compile, the
 * trainer's passes, mode and device) and run the send/recv through this file's
 * kn_collectives context: a send copies its tensor and starts a nonblocking send on the
 * communicator of its direction and sender (kn_pp.link; so the buffer the program frees after its run is
 * never the one in flight; the copy is freed once the send is done: polled between steps
 * and waited at the end of the schedule), a recv blocks until its data is there and
 * notes the time (the timeline's "ready"). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kiln/autograd.h"
#include "kiln/device.h"
#include "kiln/mesh.h"
#include "kiln/passes.h"
#include "pp_impl.h"

/* ---------------------------------------------------------------- which stage holds what */

/* Does model stage s (of S, layers per stage `per`) read parameter i (slab order)? */
bool kn_pp_stage_reads(const kn_gpt *g, int S, int s, int i) {
    int L = g->cfg.layers, per = L / S, l;
    if (i == 0) return s == 0 || s == S - 1;     /* wte: the embedding and the tied logits */
    if (i == 1) return s == 0;                   /* wpe */
    if (i >= 2 + 12 * L) return s == S - 1;      /* ln_f */
    l = i < 2 + 4 * L ? (i - 2) / 4 : (i - 2 - 4 * L) / 8;
    return l / per == s;
}

/* The rank (along the pp axis) that owns parameter i: the first stage that reads it. */
int kn_pp_owner(const kn_pp *pp, int i) {
    for (int s = 0; s < pp->stages; s++)
        if (kn_pp_stage_reads(pp->tr->model, pp->stages, s, i)) return s % pp->p;
    return 0;
}

/* ---------------------------------------------------------------- the graphs */

/* A value of the new graph for node i of the joint graph, by copying the node (its
 * operands already mapped). */
static kn_val copy_node(kn_builder *b, const kn_graph *J, int32_t i, const int32_t *map) {
    const kn_node *n = &J->nodes[i];
    kn_val in[KN_MAX_OPERANDS];
    for (int k = 0; k < n->nin; k++) in[k] = (kn_val){map[n->in[k]]};
    return kn_builder_op(b, "kn_pp", n->op, n->nin, in, &n->attrs, &n->type);
}

/* Does the stage boundary's message go split over tp (Megatron's scatter/gather)? With a tp
 * axis the activation and its gradient are replicated on the tp ranks: each sends only its
 * 1/tp of the rows, and the receivers all-gather them over tp (exact: the same floats). */
static bool split_message(const kn_pp *pp, const kn_type *t) {
    return pp->tp && t->ndim >= 1 && t->shape[0] % pp->tp_parts == 0;
}

/* recv of a [rows, D] f32 activation from `peer`, ordered after a fresh token; split over
 * tp, a recv of this rank's rows and an all_gather of them. */
static kn_val recv_from(kn_builder *b, const kn_pp *pp, int peer, const kn_type *t) {
    kn_attrs a = kn_attrs_default();
    bool split = split_message(pp, t);
    a.mesh = KN_MESH_PP;
    a.parts = pp->p;
    a.peer = peer;
    a.dtype = t->dtype;
    a.nshape = t->ndim;
    for (int d = 0; d < t->ndim; d++) a.shape[d] = t->shape[d];
    if (split) a.shape[0] /= pp->tp_parts;
    kn_val tok = kn_scalar(b, KN_DT_F32, 0.0);
    kn_val r = kn_builder_op(b, "kn_pp recv", KN_OP_RECV, 1, &tok, &a, NULL);
    if (!split) return r;
    kn_attrs g = kn_attrs_default();
    g.mesh = KN_MESH_TP;
    g.parts = pp->tp_parts;
    g.axis = 0;
    return kn_builder_op(b, "kn_pp all_gather", KN_OP_ALL_GATHER, 1, &r, &g, NULL);
}

/* send of x to `peer`; split over tp, of this tp rank's rows only. */
static kn_val send_to(kn_builder *b, const kn_pp *pp, int peer, kn_val x, const kn_type *t) {
    kn_attrs a = kn_attrs_default();
    a.mesh = KN_MESH_PP;
    a.parts = pp->p;
    a.peer = peer;
    if (split_message(pp, t)) {
        int64_t rows = t->shape[0] / pp->tp_parts;
        x = kn_slice(b, x, 0, pp->tp_rank * rows, (pp->tp_rank + 1) * rows, 1);
    }
    return kn_builder_op(b, "kn_pp send", KN_OP_SEND, 1, &x, &a, NULL);
}

/* Cut the joint graph J of stage st (bwd[i]: node i belongs to autograd's part) into its
 * forward and backward graphs, as the file's comment says. out: the forward's output (y or
 * the loss); x, dy: the inputs "pp.x" and "pp.dy" (-1 when the stage has none); grads[0..ng):
 * the parameters' gradients, then (x >= 0) the input's. */
static kn_status partition(kn_pp *pp, kn_pp_stage *st, const kn_graph *J, const char *bwd, int32_t out, int32_t x,
                           int32_t dy, const int32_t *grads, int ng) {
    int N = J->nnodes, prev = (pp->rank - 1 + pp->p) % pp->p, next = (pp->rank + 1) % pp->p;
    char *dep_dy = kn_calloc((size_t)N, 1), *act = kn_calloc((size_t)N, 1), *need = kn_calloc((size_t)N, 1);
    char *saved = kn_calloc((size_t)N, 1), *needf = kn_calloc((size_t)N, 1);
    int32_t *map = kn_malloc((size_t)N * sizeof *map);
    kn_builder *b = NULL;
    kn_status st_ = (dep_dy && act && need && saved && needf && map) ? KN_OK
                                                                   : kn_error(KN_ERR_OOM, "kn_pp: out of memory");
    bool *cheap = NULL; /* --remat selective: the forward values recomputed in the backward */
    if (st_ == KN_OK && pp->cfg.remat_selective) {
        cheap = kn_calloc((size_t)N + 1, sizeof *cheap);
        st_ = cheap ? kn_remat_selective(J, cheap) : kn_error(KN_ERR_OOM, "kn_pp: out of memory");
    }
    for (int32_t i = 0; st_ == KN_OK && i < N; i++) {
        const kn_node *n = &J->nodes[i];
        dep_dy[i] = i == dy;
        /* the batch's inputs (a stage's x, idx, targets) make activations; the loss scale is an
         * input the backward reads by name, like a parameter (not stashed) */
        act[i] = n->op == KN_OP_INPUT && strcmp(n->attrs.name, "loss_scale") != 0;
        for (int k = 0; k < n->nin; k++) {
            dep_dy[i] |= dep_dy[n->in[k]];
            act[i] |= act[n->in[k]];
        }
    }
#define IN_BWD(i) (bwd[i] || dep_dy[i])
    /* the backward: from the gradients down; a forward node that depends on the batch is
     * stashed, one computed from parameters alone is computed again (with --remat
     * selective also a cheap one: its inputs are what is stashed, or computed again) */
    for (int k = 0; st_ == KN_OK && k < ng; k++) need[grads[k]] = 1;
    for (int32_t i = N - 1; st_ == KN_OK && i >= 0; i--) {
        if (!need[i]) continue;
        if (!IN_BWD(i) && act[i] && !(cheap && cheap[i] && J->nodes[i].op != KN_OP_INPUT)) {
            saved[i] = 1;
            continue;
        }
        for (int k = 0; k < J->nodes[i].nin; k++) need[J->nodes[i].in[k]] = 1;
    }
    /* the forward: what its output and the stash need */
    if (st_ == KN_OK) needf[out] = 1;
    for (int32_t i = N - 1; st_ == KN_OK && i >= 0; i--) {
        if (saved[i]) needf[i] = 1;
        if (!needf[i]) continue;
        if (IN_BWD(i)) {
            st_ = kn_error(KN_ERR_INTERNAL, "kn_pp: stage %d: the forward needs %%%d of the backward", st->s, i);
            break;
        }
        for (int k = 0; k < J->nodes[i].nin; k++) needf[J->nodes[i].in[k]] = 1;
    }
    st->nsaved = 0;
    for (int32_t i = 0; i < N; i++) st->nsaved += saved[i];
    st->saved = kn_calloc((size_t)(st->nsaved ? st->nsaved : 1), sizeof *st->saved);
    if (st_ == KN_OK && !st->saved) st_ = kn_error(KN_ERR_OOM, "kn_pp: out of memory");
    /* forward graph */
    if (st_ == KN_OK) st_ = kn_builder_new(&b, KN_MODE_GRAPH);
    for (int32_t i = 0; st_ == KN_OK && i < N; i++) {
        if (!needf[i]) continue;
        map[i] = (i == x ? recv_from(b, pp, prev, &J->nodes[i].type) : copy_node(b, J, i, map)).id;
    }
    if (st_ == KN_OK) {
        kn_builder_output(b, st->last ? (kn_val){map[out]}
                                      : send_to(b, pp, next, (kn_val){map[out]}, &J->nodes[out].type));
        int k = 0;
        for (int32_t i = 0; i < N; i++)
            if (saved[i]) {
                st->saved[k++] = J->nodes[i].type;
                kn_builder_output(b, (kn_val){map[i]});
            }
        st_ = kn_builder_finish(b, &st->gf);
        if (st_ != KN_OK) st_ = kn_error(st_, "kn_pp: stage %d's forward: %s", st->s, kn_builder_error(b));
    }
    kn_builder_free(b);
    b = NULL;
    /* backward graph */
    if (st_ == KN_OK) st_ = kn_builder_new(&b, KN_MODE_GRAPH);
    for (int32_t i = 0, k = 0; st_ == KN_OK && i < N; i++) {
        if (saved[i]) { /* the stash's inputs, in the order of the forward's outputs */
            char name[KN_NAME_MAX];
            snprintf(name, sizeof name, "pp.s%d", k++);
            const kn_type *t = &J->nodes[i].type;
            map[i] = kn_input_typed(b, name, t->dtype, t->ndim, t->shape).id;
        } else if (need[i]) {
            map[i] = (i == dy ? recv_from(b, pp, next, &J->nodes[i].type) : copy_node(b, J, i, map)).id;
        }
    }
    if (st_ == KN_OK) {
        int np = x >= 0 ? ng - 1 : ng;
        for (int k = 0; k < np; k++) kn_builder_output(b, (kn_val){map[grads[k]]});
        if (x >= 0) kn_builder_output(b, send_to(b, pp, prev, (kn_val){map[grads[np]]}, &J->nodes[grads[np]].type));
        st_ = kn_builder_finish(b, &st->gb);
        if (st_ != KN_OK) st_ = kn_error(st_, "kn_pp: stage %d's backward: %s", st->s, kn_builder_error(b));
    }
#undef IN_BWD
    kn_builder_free(b);
    kn_free(cheap);
    kn_free(dep_dy);
    kn_free(act);
    kn_free(need);
    kn_free(saved);
    kn_free(needf);
    kn_free(map);
    return st_;
}

/* partition() on the joint graph as autograd made it: its first nfw nodes are the forward's. */
static kn_status partition_joint(kn_pp *pp, kn_pp_stage *st, const kn_graph *J, int nfw, int32_t out, int32_t x,
                                 int32_t dy, const int32_t *grads, int ng) {
    char *bwd = kn_calloc((size_t)J->nnodes + 1, 1);
    if (!bwd) return kn_error(KN_ERR_OOM, "kn_pp: out of memory");
    for (int32_t i = nfw; i < J->nnodes; i++) bwd[i] = 1;
    kn_status s = partition(pp, st, J, bwd, out, x, dy, grads, ng);
    kn_free(bwd);
    return s;
}

/* With a tp axis: the stage's joint graph J (outputs: y or the loss, then the nw gradients:
 * the parameters' in pidx order, then the input's) placed along tp first (kn_place_graph
 * with Megatron's parameter placements: the stage's output and its input's gradient end
 * replicated, each parameter's gradient in its parameter's placement), then partitioned.
 * The pass emits the nodes for J's node j (and the conversions it needs, right before it)
 * in J's order, so a local node belongs to the forward when the next node made from J is one
 * of J's first nfw; the conversions after the last (the outputs') follow their operands. */
static kn_status place_stage(kn_pp *pp, kn_pp_stage *st, const kn_graph *J, int nfw, int nw) {
    kn_placement *outs = kn_calloc((size_t)nw + 1, sizeof *outs);
    int32_t *lg = kn_calloc((size_t)nw + 1, sizeof *lg);
    kn_place_result pr = {0};
    char *bwd = NULL;
    kn_status s = outs && lg ? KN_OK : kn_error(KN_ERR_OOM, "kn_pp: out of memory");
    if (s == KN_OK && J->noutputs != nw + 1)
        s = kn_error(KN_ERR_INTERNAL, "kn_pp: stage %d's joint graph has %d outputs, not 1 + %d", st->s,
                     J->noutputs, nw);
    for (int k = 0; s == KN_OK && k <= nw; k++)
        outs[k] = k >= 1 && k <= st->np ? pp->place[st->pidx[k - 1]] : kn_place_replicate();
    kn_place_opts po = {.mesh = KN_MESH_TP, .parts = pp->tp_parts, .rank = pp->tp_rank, .param = kn_tp_gpt_param,
                        .param_ctx = &pp->split, .outputs = outs, .flags = pp->cfg.tp_flags};
    if (s == KN_OK) {
        s = kn_place_graph(J, &po, &pr);
        if (s != KN_OK)
            s = kn_error(s, "kn_pp: stage %d's blocks along tp=%d: %s", st->s, pp->tp_parts, kn_last_error());
    }
    if (s == KN_OK) {
        pp->tp_all_reduce += pr.all_reduce;
        pp->tp_all_gather += pr.all_gather;
        pp->tp_reduce_scatter += pr.reduce_scatter;
    }
    const kn_graph *L = pr.local;
    if (s == KN_OK && !(bwd = kn_calloc((size_t)L->nnodes + 1, 1))) s = kn_error(KN_ERR_OOM, "kn_pp: out of memory");
    if (s == KN_OK) {
        int32_t owner = -1; /* the next node made from J (-1 after the last: the outputs' conversions) */
        for (int32_t i = L->nnodes - 1; i >= 0; i--) {
            kn_place_role r = pr.info[i].role;
            if (r == KN_PLACE_ROLE_NODE || r == KN_PLACE_ROLE_EXPAND) owner = pr.info[i].from;
            bwd[i] = owner >= nfw;
        }
        for (int32_t i = 0; i < L->nnodes; i++)
            for (int k = 0; k < L->nodes[i].nin; k++) bwd[i] |= bwd[L->nodes[i].in[k]];
        for (int k = 0; k < nw; k++) lg[k] = L->outputs[1 + k];
        int32_t x = st->first ? -1 : kn_graph_find(L, "pp.x"), dy = st->last ? -1 : kn_graph_find(L, "pp.dy");
        if ((!st->first && x < 0) || (!st->last && dy < 0))
            s = kn_error(KN_ERR_INTERNAL, "kn_pp: stage %d's placed graph lost its input pp.x or pp.dy", st->s);
        if (s == KN_OK) s = partition(pp, st, L, bwd, L->outputs[0], x, dy, lg, nw);
    }
    kn_place_result_free(&pr);
    kn_free(bwd);
    kn_free(outs);
    kn_free(lg);
    return s;
}

kn_status kn_pp_stage_build(kn_pp *pp, kn_pp_stage *st) {
    kn_trainer *t = pp->tr;
    const kn_gpt *g = t->model;
    const kn_params *P = &g->p;
    int B = t->B, T = t->T, S = pp->stages, per = g->cfg.layers / S;
    int64_t D = g->cfg.width, bt[2] = {B, T}, act[2] = {(int64_t)B * T, D};
    st->l0 = st->s * per;
    st->l1 = st->l0 + per;
    st->first = st->s == 0;
    st->last = st->s == S - 1;
    st->pidx = kn_calloc((size_t)P->count, sizeof *st->pidx);
    kn_val *pv = kn_calloc((size_t)P->count, sizeof *pv), *wrt = kn_calloc((size_t)P->count + 1, sizeof *wrt);
    int32_t *gid = kn_calloc((size_t)P->count + 1, sizeof *gid);
    kn_builder *b = NULL;
    kn_graph *fw = NULL, *joint = NULL;
    kn_status s = st->pidx && pv && wrt && gid ? kn_builder_new(&b, KN_MODE_GRAPH)
                                               : kn_error(KN_ERR_OOM, "kn_pp: out of memory");
    kn_val in = KN_VAL_NONE, tg = KN_VAL_NONE, dy = KN_VAL_NONE, out = KN_VAL_NONE, loss = KN_VAL_NONE, L;
    if (s == KN_OK) {
        st->np = 0;
        for (int i = 0; i < P->count; i++) {
            pv[i] = KN_VAL_NONE;
            if (!kn_pp_stage_reads(g, S, st->s, i)) continue;
            pv[i] = kn_param_typed(b, P->info[i].name, KN_DT_F32, P->info[i].ndim, P->info[i].shape);
            wrt[st->np] = pv[i];
            st->pidx[st->np++] = i;
        }
        in = st->first ? kn_input_typed(b, "idx", KN_DT_I32, 2, bt) : kn_input_typed(b, "pp.x", KN_DT_F32, 2, act);
        if (st->last) tg = kn_input_typed(b, "targets", KN_DT_I32, 2, bt);
        s = kn_gpt_build_part(b, g, st->l0, st->l1, st->first, st->last, in, B, T, tg, pv, &out, NULL, &loss);
    }
    if (s == KN_OK) {
        L = out;
        if (st->last && t->scale_in) /* fp16: the backward starts from loss x the loss scale */
            L = kn_mul(b, out, kn_input_typed(b, "loss_scale", KN_DT_F32, 0, NULL));
        if (!st->last) {
            dy = kn_input_typed(b, "pp.dy", KN_DT_F32, 2, act);
            L = kn_sum(b, kn_mul(b, out, dy), 0, NULL, false); /* d L / d out = dy */
        }
        int nw = st->np;
        if (!st->first) wrt[nw++] = in;
        kn_builder_output(b, out);
        s = kn_builder_finish(b, &fw);
        if (s != KN_OK) s = kn_error(s, "kn_pp: stage %d: %s", st->s, kn_builder_error(b));
        kn_val *gv = kn_calloc((size_t)nw, sizeof *gv);
        if (s == KN_OK && !gv) s = kn_error(KN_ERR_OOM, "kn_pp: out of memory");
        if (s == KN_OK) s = kn_autograd(fw, L, nw, wrt, &joint, gv);
        for (int k = 0; s == KN_OK && k < nw; k++) gid[k] = gv[k].id;
        if (s == KN_OK && pp->tp)
            s = place_stage(pp, st, joint, fw->nnodes, nw);
        else if (s == KN_OK)
            s = partition_joint(pp, st, joint, fw->nnodes, out.id, st->first ? -1 : in.id, st->last ? -1 : dy.id, gid,
                                nw);
        kn_free(gv);
    }
    kn_builder_free(b);
    kn_graph_free(fw);
    kn_graph_free(joint);
    kn_free(pv);
    kn_free(wrt);
    kn_free(gid);
    return s;
}

/* Bind a program's parameters (and their low copies) to this rank's own slabs' views. */
static kn_status bind_params(kn_pp *pp, kn_program *p) {
    const kn_params *P = &pp->tr->model->p;
    char name[KN_NAME_MAX];
    for (int i = 0; i < P->count; i++) {
        if (kn_graph_find(kn_program_graph(p), P->info[i].name) >= 0) {
            if (!pp->lview[i])
                return kn_error(KN_ERR_INTERNAL, "kn_pp: rank %d's stage reads %s, which it does not hold", pp->rank,
                                P->info[i].name);
            KN_TRY(kn_program_bind(p, P->info[i].name, pp->lview[i]));
        }
        if (pp->low_dt != KN_DT_F32 && kn_lowparam_name(P->info[i].name, pp->low_dt, name) == KN_OK &&
            kn_graph_find(kn_program_graph(p), name) >= 0) {
            if (!pp->llow_view || !pp->llow_view[i])
                return kn_error(KN_ERR_INTERNAL, "kn_pp: rank %d's stage reads %s without its low copy", pp->rank,
                                name);
            KN_TRY(kn_program_bind(p, name, pp->llow_view[i]));
        }
    }
    return KN_OK;
}

kn_status kn_pp_stage_compile(kn_pp *pp, kn_pp_stage *st) {
    kn_trainer *t = pp->tr;
    kn_program_free(st->pf);
    kn_program_free(st->pb);
    st->pf = st->pb = NULL;
    kn_program_opts o = {.device = t->dev, .passes = t->passes,
                         .mode = t->compiled ? KN_PROGRAM_COMPILED : KN_PROGRAM_NODES, .cuda_emu = t->cuda_emu};
    KN_TRY(kn_program_compile(&st->pf, st->gf, &o));
    KN_TRY(kn_program_compile(&st->pb, st->gb, &o));
    KN_TRY(bind_params(pp, st->pf));
    KN_TRY(bind_params(pp, st->pb));
    if (st->first) KN_TRY(kn_program_bind(st->pf, "idx", t->x));
    if (st->last) KN_TRY(kn_program_bind(st->pf, "targets", t->y));
    if (t->scale_in && kn_graph_find(st->gb, "loss_scale") >= 0) /* the scaler's tensor: bound once */
        KN_TRY(kn_program_bind(st->pb, "loss_scale", t->scale_in));
    kn_program_set_collectives(st->pf, &pp->sends->coll[0]);
    kn_program_set_collectives(st->pb, &pp->sends->coll[1]);
    return KN_OK;
}

kn_status kn_pp_print(FILE *f, const kn_pp *pp) {
    if (!f || !pp || !pp->stage) return kn_error(KN_ERR_ARG, "kn_pp_print: NULL argument");
    for (int c = 0; c < pp->v; c++) {
        const kn_pp_stage *st = &pp->stage[c];
        fprintf(f, "# rank %d of %d, chunk %d: model stage %d of %d, blocks [%d, %d)%s%s\n", pp->rank, pp->p, c, st->s,
                pp->stages, st->l0, st->l1, st->first ? ", the embeddings" : "", st->last ? ", ln_f, logits, loss" : "");
        fprintf(f, "# forward: outputs %s, then the %d stashed values\n", st->last ? "the loss" : "the send's token",
                st->nsaved);
        KN_TRY(kn_graph_print(f, st->gf));
        fprintf(f, "# backward: outputs the %d parameters' gradients%s\n", st->np, st->first ? "" : ", then the send's token");
        KN_TRY(kn_graph_print(f, st->gb));
    }
    return KN_OK;
}

void kn_pp_stage_free(kn_pp_stage *st) {
    kn_program_free(st->pf);
    kn_program_free(st->pb);
    kn_graph_free(st->gf);
    kn_graph_free(st->gb);
    kn_free(st->pidx);
    kn_free(st->saved);
    memset(st, 0, sizeof *st);
}

/* ---------------------------------------------------------------- send and recv */

/* Finish the sends that are done (or, wait: all of them), freeing their copies. */
kn_status kn_pp_sends_progress(kn_pp *pp, bool wait) {
    struct kn_pp_sends *q = pp->sends;
    kn_status st = KN_OK;
    int keep = 0;
    for (int i = 0; i < q->n; i++) {
        bool done = false;
        if (st == KN_OK) {
            if (wait) {
                st = kn_comm_wait(&q->req[i]);
                done = st == KN_OK;
            } else {
                st = kn_comm_test(&q->req[i], &done);
            }
        }
        if (done) {
            kn_tensor_free(q->buf[i]);
        } else {
            q->req[keep] = q->req[i];
            q->buf[keep++] = q->buf[i];
        }
    }
    q->n = keep;
    return st;
}

static kn_status coll_run(void *ctx, int32_t id, const kn_node *n, const kn_tensor *const *in, kn_tensor *out) {
    struct kn_pp_dir *d = ctx;
    kn_pp *pp = d->pp;
    kn_comm *c = NULL; /* the link of this direction's messages sent by the sender */
    if (pp->tp && n->op != KN_OP_SEND && n->op != KN_OP_RECV) { /* the stages' tp collectives */
        kn_collectives tc;
        kn_tp_collectives(&pp->tpc, &tc);
        return tc.run(tc.ctx, id, n, in, out);
    }
    if ((n->op != KN_OP_SEND && n->op != KN_OP_RECV) || n->attrs.mesh != 2 || n->attrs.parts != pp->p)
        return kn_error(KN_ERR_UNSUPPORTED, "%s: %%%d {mesh=%lld, parts=%lld}: the pipeline's context runs send and "
                        "recv over mesh axis 2 (pp) of %d ranks", kn_op_name(n->op), id, (long long)n->attrs.mesh,
                        (long long)n->attrs.parts, pp->p);
    int peer = (int)n->attrs.peer;
    if (peer < 0 || peer >= pp->p) return kn_error(KN_ERR_ARG, "%s: %%%d: peer %d of %d", kn_op_name(n->op), id, peer, pp->p);
    c = pp->link[d->dir * pp->p + (n->op == KN_OP_RECV ? peer : pp->rank)];
    if (n->op == KN_OP_RECV) {
        kn_comm_req r;
        KN_TRY(kn_comm_irecv(c, kn_tensor_data(out), kn_tensor_numel(out), out->dtype, peer,
                             d->dir ? "pp gradient" : "pp activation", &r));
        KN_TRY(kn_comm_wait(&r));
        pp->t_ready = kn_time_now();
        pp->recv_seen = true;
        return KN_OK;
    }
    /* the test hook's compute time, before the data leaves (kn_pp.test_sleep) */
    kn_pp_test_sleep(pp->test_sleep[d->dir]);
    pp->sent = true;
    pp->t_sent = kn_time_now();
    struct kn_pp_sends *q = pp->sends;
    if (q->n == q->cap) {
        int cap = q->cap ? 2 * q->cap : 16;
        kn_comm_req *r = kn_realloc(q->req, (size_t)cap * sizeof *r);
        if (r) q->req = r;
        kn_tensor **bf = r ? kn_realloc(q->buf, (size_t)cap * sizeof *bf) : NULL;
        if (!bf) return kn_error(KN_ERR_OOM, "send: out of memory");
        q->buf = bf;
        q->cap = cap;
    }
    kn_tensor *copy; /* the program may reuse in[0]'s memory after its run: a copy where in[0] is */
    kn_device dev = in[0]->storage->device;
    size_t bytes = (size_t)kn_tensor_numel(in[0]) * kn_dtype_size(in[0]->dtype);
    KN_TRY(kn_tensor_empty_on(&copy, dev, in[0]->dtype, in[0]->ndim, in[0]->shape));
    kn_status st = kn_device_memcpy(dev, kn_tensor_data(copy), dev, kn_tensor_data(in[0]), bytes);
    if (st == KN_OK) st = kn_comm_isend(c, kn_tensor_data(copy), kn_tensor_numel(copy), copy->dtype, peer,
                                 d->dir ? "pp gradient" : "pp activation", &q->req[q->n]);
    if (st != KN_OK) {
        kn_tensor_free(copy);
        return st;
    }
    q->buf[q->n++] = copy;
    return KN_OK;
}

/* Between nodes: the sends that are done, and (tp) the collectives that ended. */
static kn_status coll_poll(void *ctx) {
    struct kn_pp_dir *d = ctx;
    if (d->pp->tp) {
        kn_collectives tc;
        kn_tp_collectives(&d->pp->tpc, &tc);
        if (tc.poll) KN_TRY(tc.poll(tc.ctx));
    }
    return kn_pp_sends_progress(d->pp, false);
}

/* After a program's run: (tp) the host waits for the collectives the device waited for
 * (stream-ordered over NCCL, kn_comm_wait_device), before the run's outputs are read. The
 * sends are waited for at the schedule's end. */
static kn_status coll_finish(void *ctx) {
    struct kn_pp_dir *d = ctx;
    if (!d->pp->tp) return KN_OK;
    kn_collectives tc;
    kn_tp_collectives(&d->pp->tpc, &tc);
    return tc.finish ? tc.finish(tc.ctx) : KN_OK;
}

kn_status kn_pp_sends_new(kn_pp *pp) {
    pp->sends = kn_calloc(1, sizeof *pp->sends);
    if (!pp->sends) return kn_error(KN_ERR_OOM, "kn_pp: out of memory");
    for (int k = 0; k < 2; k++) {
        pp->sends->dir[k] = (struct kn_pp_dir){pp, k};
        pp->sends->coll[k] =
            (kn_collectives){.ctx = &pp->sends->dir[k], .run = coll_run, .poll = coll_poll, .finish = coll_finish};
    }
    return KN_OK;
}

void kn_pp_sends_free(kn_pp *pp) {
    if (!pp->sends) return;
    (void)kn_pp_sends_progress(pp, true);
    kn_free(pp->sends->req);
    kn_free(pp->sends->buf);
    kn_free(pp->sends);
    pp->sends = NULL;
}
