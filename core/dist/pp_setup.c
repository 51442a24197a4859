/* pp_setup.c — pipeline parallelism's state (kiln/mesh.h): the checks, kn_pp_new (the
 * stages, the schedule, this rank's own slabs), kn_pp_set_dp, kn_pp_set_zero1 (the optimizer
 * state cut over dp), kn_pp_free, and kn_pp_gather (the trainer's whole-model slabs made
 * again from every rank's). pp_run.c runs the step.
 *
 * Each rank holds only its stages' parameters: contiguous ranges of the model's slab, copied
 * at setup into the rank's own slabs (parameters, gradients, per range an optimizer and its
 * state; the bf16 copies when the stages read them), which the stages' programs are bound
 * to and the update writes (the trainer's config and step; AdamW is elementwise, so a
 * range's update is the one process's). The trainer's whole-model slabs are freed, as
 * ZeRO-3 frees its (P/p of the parameter, gradient and optimizer bytes per rank, plus the
 * tied wte on the last rank). With a tp axis the ranges are over the rank's local layout
 * (kn_pp.linfo: every parameter at its tensor-parallel shard's size, in the model's order),
 * cut from the full slab with the parameters' placements (kn_place_scatter). kn_pp_gather
 * makes the trainer's slabs again and brings every rank's ranges (and their optimizer
 * state) to all for evaluation, sampling and checkpoints (with tp, then every tp rank's
 * shards put back together, kn_place_gather); the next step frees them again. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "kiln/device.h"
#include "kiln/mesh.h"
#include "kiln/passes.h"
#include "kiln/step.h"
#include "pp_impl.h"

/* ---------------------------------------------------------------- the checks */

kn_status kn_pp_check(const kn_gpt_config *g, int p, int ranks, int global_batch, const kn_pp_config *c) {
    if (!g || !c) return kn_error(KN_ERR_ARG, "kn_pp_check: NULL argument");
    const char *sn = kn_pp_kind_name(c->schedule);
    int v = c->chunks > 0 ? c->chunks : c->schedule == KN_PP_INTERLEAVED ? 2 : 1, m = c->micro;
    if (p < 1) return kn_error(KN_ERR_ARG, "--pp %d: need >= 1 pipeline stage", p);
    if (ranks != p)
        return kn_error(KN_ERR_ARG, "--pp %d on %d ranks: pipeline parallelism takes one rank per stage (run mpiexec "
                        "-n %d)", p, ranks, p);
    if (c->schedule < 0 || c->schedule >= KN_PP_KIND_COUNT)
        return kn_error(KN_ERR_ARG, "--schedule: unknown schedule %d", (int)c->schedule);
    if (c->schedule != KN_PP_INTERLEAVED && v != 1)
        return kn_error(KN_ERR_ARG, "--schedule %s --chunks %d: only the interleaved schedule holds several chunks per "
                        "rank", sn, v);
    if (c->schedule == KN_PP_INTERLEAVED && v < 2)
        return kn_error(KN_ERR_ARG, "--schedule interleaved --chunks %d: interleaving needs >= 2 chunks per rank", v);
    if (m < 1) return kn_error(KN_ERR_ARG, "--microbatches %d: need >= 1", m);
    if (g->layers % (p * v) != 0)
        return kn_error(KN_ERR_ARG, "--pp %d%s: %d layers do not divide into %d stages of equal blocks (choose "
                        "layers a multiple of %d)", p, v > 1 ? " with 2 chunks per rank" : "", g->layers, p * v, p * v);
    if (c->schedule != KN_PP_GPIPE && m < p)
        return kn_error(KN_ERR_ARG, "--schedule %s with %d micro-batches on %d stages: need --microbatches >= --pp "
                        "(fewer leaves a stage with nothing to overlap)", sn, m, p);
    if (c->schedule == KN_PP_INTERLEAVED && m % p != 0)
        return kn_error(KN_ERR_ARG, "--schedule interleaved: %d micro-batches are not a multiple of --pp %d", m, p);
    if (global_batch % m != 0)
        return kn_error(KN_ERR_ARG, "--batch %d is not divisible by --microbatches %d", global_batch, m);
    return KN_OK;
}

/* ---------------------------------------------------------------- this rank's slabs */

/* Free the trainer's whole-model slabs (what ZeRO-2 and ZeRO-3 do with theirs, dp_shard.c,
 * zero3.c): its programs' bindings to them first (a binding holds a reference), then the
 * parameter slab (the model's on the CPU, the device copy on a GPU: the host's model slab
 * stays there, host memory), the gradient slab, the optimizer state (the host's on the CPU,
 * the device's on a GPU), the low copies. Whatever is already gone is skipped. */
kn_status kn_pp_drop_full(kn_pp *pp) {
    kn_trainer *t = pp->tr;
    kn_params *P = &t->model->p;
    kn_program *ps[2] = {t->prog, t->eval};
    const kn_dtype dts[2] = {KN_DT_BF16, KN_DT_F16};
    char name[KN_NAME_MAX];
    for (int k = 0; k < 2; k++)
        for (int i = 0; ps[k] && i < P->count; i++) {
            if (kn_graph_find(kn_program_graph(ps[k]), P->info[i].name) >= 0)
                KN_TRY(kn_program_defer(ps[k], P->info[i].name));
            for (int d = 0; d < 2; d++)
                if (kn_lowparam_name(P->info[i].name, dts[d], name) == KN_OK &&
                    kn_graph_find(kn_program_graph(ps[k]), name) >= 0)
                    KN_TRY(kn_program_defer(ps[k], name));
        }
    if (t->views) {
        kn_params_views_free(P, t->views);
        kn_tensor_free(t->params);
        if (t->dev.type == KN_DEVICE_CPU) { /* the trainer's were the model's */
            P->views = NULL;
            P->slab = NULL;
            P->data = NULL;
        }
        t->views = NULL;
        t->params = NULL;
    }
    kn_params_views_free(P, t->grad_views);
    kn_tensor_free(t->grad);
    t->grad_views = NULL;
    t->grad = NULL;
    if (t->dev.type == KN_DEVICE_CPU) {
        kn_free(t->opt.state);
        t->opt.state = NULL;
    } else {
        kn_tensor_free(t->state);
        t->state = NULL;
    }
    kn_params_views_free(P, t->low_views);
    kn_tensor_free(t->low);
    t->low_views = NULL;
    t->low = NULL;
    t->low_fresh = false;
    pp->full = false;
    return KN_OK;
}

/* A view shaped like parameter i of slab s (floats or low copies) at offset off. */
static kn_status local_view(const kn_param_info *q, const kn_tensor *s, int64_t off, kn_tensor **out) {
    kn_tensor *sl = NULL;
    kn_status st = kn_tensor_slice(&sl, s, 0, off, off + q->numel, 1);
    if (st == KN_OK) st = kn_tensor_view(out, sl, q->ndim, q->shape);
    kn_tensor_free(sl);
    return st;
}

/* ---------------------------------------------------------------- setup */

/* Every parameter's placement along tp and its local layout (kn_pp.linfo): the model's own
 * without a tp axis; with one, each parameter at its shard's shape, packed in the model's
 * order (matrices first, so the decayed ones stay a prefix). */
static kn_status make_layout(kn_pp *pp) {
    const kn_params *P = &pp->tr->model->p;
    pp->place = kn_calloc((size_t)P->count, sizeof *pp->place);
    pp->linfo = kn_calloc((size_t)P->count, sizeof *pp->linfo);
    if (!pp->place || !pp->linfo) return kn_error(KN_ERR_OOM, "kn_pp: out of memory");
    pp->ln = pp->tp ? 0 : P->n;
    pp->ln_decay = pp->tp ? 0 : P->n_decay;
    for (int i = 0; i < P->count; i++) {
        kn_param_info *q = &pp->linfo[i];
        *q = P->info[i];
        pp->place[i] = kn_place_replicate();
        if (!pp->tp) continue;
        KN_TRY(kn_tp_gpt_param(&pp->split, q->name, &pp->place[i]));
        KN_TRY(kn_place_local_shape(q->ndim, P->info[i].shape, pp->place[i], pp->tp_parts, q->shape));
        q->numel = 1;
        for (int d = 0; d < q->ndim; d++) q->numel *= q->shape[d];
        q->offset = pp->ln;
        pp->ln += q->numel;
        if (P->info[i].offset < P->n_decay) pp->ln_decay = pp->ln;
    }
    return KN_OK;
}

/* With a tp axis: the trainer's parameters and optimizer state (1 + comps slabs of P->n, on
 * its device) cut into this rank's shards, as 1 + comps slabs of the local layout in *out
 * (on the device). */
static kn_status scatter_local(kn_pp *pp, int comps, const float *params, const float *state, kn_tensor **out) {
    kn_trainer *t = pp->tr;
    const kn_params *P = &t->model->p;
    int64_t n = P->n, ln = pp->ln, all = (1 + comps) * ln;
    float *full = kn_malloc((size_t)n * sizeof *full), *loc = kn_malloc((size_t)(all > 0 ? all : 1) * sizeof *loc);
    kn_status st = full && loc ? KN_OK : kn_error(KN_ERR_OOM, "kn_pp: out of memory");
    for (int c = -1; st == KN_OK && c < comps; c++) { /* c = -1: the parameters */
        st = kn_device_memcpy(KN_CPU, full, t->dev, c < 0 ? params : state + c * n, (size_t)n * sizeof *full);
        for (int i = 0; st == KN_OK && i < P->count; i++)
            st = kn_place_scatter(full + P->info[i].offset, P->info[i].ndim, P->info[i].shape, pp->place[i],
                                  pp->tp_parts, pp->tp_rank, loc + (c + 1) * ln + pp->linfo[i].offset);
    }
    if (st == KN_OK) st = kn_tensor_empty_on(out, t->dev, KN_DT_F32, 1, &all);
    if (st == KN_OK) st = kn_device_memcpy(t->dev, kn_tensor_data(*out), KN_CPU, loc, (size_t)all * sizeof *loc);
    kn_free(full);
    kn_free(loc);
    return st;
}

/* The owned parameters as maximal contiguous slab ranges, each with its optimizer and its
 * state (taken from the trainer's, so a resumed run continues), and this rank's own slabs:
 * the ranges' parameters copied out of the trainer's slab, a gradient slab, the low copies
 * when the trainer's programs read them. */
static kn_status make_ranges(kn_pp *pp) {
    kn_trainer *t = pp->tr;
    const kn_params *P = &t->model->p;
    size_t np = (size_t)P->count;
    pp->owned = kn_calloc(np, sizeof *pp->owned);
    pp->lo = kn_calloc(np, sizeof *pp->lo);
    pp->hi = kn_calloc(np, sizeof *pp->hi);
    pp->loff = kn_calloc(np, sizeof *pp->loff);
    pp->opt = kn_calloc(np, sizeof *pp->opt);
    pp->state = kn_calloc(np, sizeof *pp->state);
    pp->lview = kn_calloc(np, sizeof *pp->lview);
    pp->lgview = kn_calloc(np, sizeof *pp->lgview);
    if (!pp->owned || !pp->lo || !pp->hi || !pp->loff || !pp->opt || !pp->state || !pp->lview || !pp->lgview)
        return kn_error(KN_ERR_OOM, "kn_pp: out of memory");
    for (int c = 0; c < pp->v; c++)
        for (int k = 0; k < pp->stage[c].np; k++) pp->owned[pp->stage[c].pidx[k]] = true;
    for (int i = 0; i < P->count; i++) {
        if (!pp->owned[i]) continue;
        int64_t lo = pp->linfo[i].offset, hi = lo + pp->linfo[i].numel;
        /* (on the last rank wte is a range of its own: wpe, next in the slab, is rank 0's) */
        if (pp->nranges > 0 && pp->hi[pp->nranges - 1] == lo) {
            pp->hi[pp->nranges - 1] = hi;
        } else {
            pp->lo[pp->nranges] = lo;
            pp->loff[pp->nranges] = pp->held;
            pp->hi[pp->nranges++] = hi;
        }
        pp->held += hi - lo;
    }
    int64_t n = pp->ln, held = pp->held > 0 ? pp->held : 1;
    int comps = t->opt.n > 0 ? (int)(t->opt.state_len / t->opt.n) : 0;
    float *src = t->state ? kn_tensor_data(t->state) : t->opt.state, *psrc = kn_tensor_data(t->params);
    kn_tensor *lsrc = NULL; /* with tp: the shards of the parameters and the state, in the local layout */
    if (pp->tp) {
        KN_TRY(scatter_local(pp, comps, psrc, src, &lsrc));
        psrc = kn_tensor_data(lsrc);
        src = psrc + n;
    }
    kn_status st = KN_OK;
#define TRY_(x) do { if (st == KN_OK) st = (x); } while (0)
    TRY_(kn_tensor_empty_on(&pp->lparam, t->dev, KN_DT_F32, 1, &held));
    TRY_(kn_tensor_empty_on(&pp->lgrad, t->dev, KN_DT_F32, 1, &held));
    TRY_(kn_device_memset(t->dev, kn_tensor_data(pp->lgrad), 0, (size_t)held * sizeof(float)));
    pp->low_dt = t->low ? t->low_dt : KN_DT_F32;
    if (pp->low_dt != KN_DT_F32) {
        TRY_(kn_tensor_empty_on(&pp->llow, t->dev, pp->low_dt, 1, &held));
        if (st == KN_OK && !(pp->llow_view = kn_calloc(np, sizeof *pp->llow_view)))
            st = kn_error(KN_ERR_OOM, "kn_pp: out of memory");
    }
    for (int k = 0; st == KN_OK && k < pp->nranges; k++) {
        int64_t len = pp->hi[k] - pp->lo[k], nd = pp->ln_decay - pp->lo[k];
        TRY_(kn_device_memcpy(t->dev, (float *)kn_tensor_data(pp->lparam) + pp->loff[k], t->dev, psrc + pp->lo[k],
                              (size_t)len * sizeof(float)));
        nd = nd < 0 ? 0 : nd > len ? len : nd;
        TRY_(kn_optim_init(&pp->opt[k], &t->opt.cfg, len, nd));
        pp->opt[k].step = t->opt.step;
        int64_t sl = pp->opt[k].state_len > 0 ? pp->opt[k].state_len : 1;
        TRY_(kn_tensor_empty_on(&pp->state[k], t->dev, KN_DT_F32, 1, &sl));
        for (int c = 0; c < comps; c++)
            TRY_(kn_device_memcpy(t->dev, (float *)kn_tensor_data(pp->state[k]) + c * len, t->dev,
                                  src + c * n + pp->lo[k], (size_t)len * sizeof(float)));
    }
    kn_tensor_free(lsrc);
    /* every held parameter's views: its range's offset plus its own within the range */
    for (int i = 0, k = 0; st == KN_OK && i < P->count; i++) {
        const kn_param_info *q = &pp->linfo[i];
        if (!pp->owned[i]) continue;
        while (q->offset >= pp->hi[k]) k++;
        int64_t off = pp->loff[k] + q->offset - pp->lo[k];
        TRY_(local_view(q, pp->lparam, off, &pp->lview[i]));
        TRY_(local_view(q, pp->lgrad, off, &pp->lgview[i]));
        if (pp->llow) TRY_(local_view(q, pp->llow, off, &pp->llow_view[i]));
    }
#undef TRY_
    pp->full = true;
    return st;
}

kn_status kn_pp_new(kn_pp *pp, kn_comm *c, kn_trainer *tr, const kn_pp_config *cfg) {
    if (!pp || !c || !tr || !cfg) return kn_error(KN_ERR_ARG, "kn_pp_new: NULL argument");
    memset(pp, 0, sizeof *pp);
    KN_TRY(kn_pp_check(&tr->model->cfg, c->size, c->size, tr->B * cfg->micro, cfg));
    if (tr->eager) return kn_error(KN_ERR_UNSUPPORTED, "kn_pp_new: the stages are programs (graph mode), not the eager tape");
    if (cfg->accum < 0) return kn_error(KN_ERR_ARG, "kn_pp_new: --accum %d: need >= 1", cfg->accum);
    pp->comm = c;
    pp->scaled = tr->scale_in != NULL;
    pp->tr = tr;
    pp->cfg = *cfg;
    pp->p = c->size;
    pp->rank = c->rank;
    pp->v = cfg->chunks > 0 ? cfg->chunks : cfg->schedule == KN_PP_INTERLEAVED ? 2 : 1;
    pp->cfg.chunks = pp->v;
    pp->cfg.accum = cfg->accum > 0 ? cfg->accum : 1;
    pp->stages = pp->p * pp->v;
    pp->tp = cfg->tp && cfg->tp->size > 1 ? cfg->tp : NULL;
    pp->tp_parts = pp->tp ? pp->tp->size : 1;
    pp->tp_rank = pp->tp ? pp->tp->rank : 0;
    pp->split = (kn_tp_split){tr->model->cfg.vocab, pp->tp_parts};
    pp->tpc.axes[KN_MESH_TP] = pp->tp;
    kn_status st = KN_OK;
    if (pp->tp) { /* Megatron's split of every stage's blocks: heads, width and 4 width over tp */
        kn_mesh m = {.size = {1, pp->tp_parts, pp->p}};
        st = kn_mesh_check_gpt(&m, &tr->model->cfg);
    }
#define TRY_(x) do { if (st == KN_OK) st = (x); } while (0)
    TRY_(make_layout(pp));
    pp->link = kn_calloc(2 * (size_t)pp->p, sizeof *pp->link);
    if (!pp->link) st = kn_error(KN_ERR_OOM, "kn_pp_new: out of memory");
    for (int k = 0; k < 2 * pp->p; k++) TRY_(kn_comm_split(c, 0, c->rank, &pp->link[k]));
    if (pp->p > 1) {
        kn_comm *e = NULL;
        bool in = pp->rank == 0 || pp->rank == pp->p - 1;
        TRY_(kn_comm_split(c, in ? 0 : 1, c->rank, &e));
        if (in) pp->embed = e;
        else kn_comm_free(e);
    }
    /* every rank starts from rank 0's parameters */
    TRY_(kn_comm_broadcast(c, kn_tensor_data(tr->params), tr->model->p.n, KN_DT_F32, 0));
    TRY_(kn_pp_sends_new(pp));
    pp->stage = kn_calloc((size_t)pp->v, sizeof *pp->stage);
    int cap = 2 * cfg->micro * pp->v;
    pp->actions = kn_calloc((size_t)cap, sizeof *pp->actions);
    pp->events = kn_calloc((size_t)cap, sizeof *pp->events);
    if (st == KN_OK && (!pp->stage || !pp->actions || !pp->events)) st = kn_error(KN_ERR_OOM, "kn_pp_new: out of memory");
    for (int k = 0; st == KN_OK && k < pp->v; k++) {
        pp->stage[k].s = k * pp->p + pp->rank;
        st = kn_pp_stage_build(pp, &pp->stage[k]);
    }
    TRY_(kn_pp_schedule(cfg->schedule, pp->p, cfg->micro, pp->v, pp->rank, pp->actions, cap, &pp->nactions));
    if (st == KN_OK && pp->nactions != cap)
        st = kn_error(KN_ERR_ARG, "kn_pp_new: the schedule gave rank %d %d actions, not 2 x %d micro-batches x %d "
                      "chunks", pp->rank, pp->nactions, cfg->micro, pp->v);
    TRY_(make_ranges(pp));
    if (st == KN_OK) {
        kn_step_comm sc;
        kn_pp_step_hooks(pp, &sc);
        st = kn_step_set_comm(tr, &sc, cfg->micro * pp->cfg.accum);
    }
#undef TRY_
    if (st != KN_OK) kn_pp_free(pp);
    return st;
}

void kn_pp_free(kn_pp *pp) {
    if (!pp) return;
    if (pp->tr && pp->tr->step.has_comm && pp->tr->step.comm.ctx == pp) {
        /* the trainer's runner forgets the hooks (as kn_dp_free: no recompile, whose gradient
         * outputs would need the slab that is gone); a step of the trainer alone then fails,
         * naming the missing slabs (kn_trainer_check_slabs) */
        pp->tr->step.has_comm = false;
        pp->tr->step.micro = 1;
        if (pp->tr->prog) kn_program_set_collectives(pp->tr->prog, NULL);
    }
    kn_pp_sends_free(pp);
    for (int k = 0; pp->stage && k < pp->v; k++) kn_pp_stage_free(&pp->stage[k]);
    kn_free(pp->stage);
    for (int i = 0; i < pp->nslots; i++) {
        for (int k = 0; k < pp->slots[i].n; k++) kn_tensor_free(pp->slots[i].t[k]);
        kn_free(pp->slots[i].t);
    }
    kn_free(pp->slots);
    for (int k = 0; k < pp->nranges; k++) {
        kn_optim_free(&pp->opt[k]);
        kn_tensor_free(pp->state[k]);
    }
    kn_free(pp->opt);
    kn_free(pp->state);
    for (int i = 0; pp->tr && i < pp->tr->model->p.count; i++) {
        if (pp->lview) kn_tensor_free(pp->lview[i]);
        if (pp->lgview) kn_tensor_free(pp->lgview[i]);
        if (pp->llow_view) kn_tensor_free(pp->llow_view[i]);
    }
    kn_free(pp->lview);
    kn_free(pp->lgview);
    kn_free(pp->llow_view);
    kn_tensor_free(pp->lparam);
    kn_tensor_free(pp->lgrad);
    kn_tensor_free(pp->llow);
    kn_free(pp->lo);
    kn_free(pp->hi);
    kn_free(pp->loff);
    kn_free(pp->zoff);
    kn_free(pp->owned);
    kn_free(pp->place);
    kn_free(pp->linfo);
    kn_free(pp->actions);
    kn_free(pp->events);
    for (int k = 0; pp->link && k < 2 * pp->p; k++) kn_comm_free(pp->link[k]);
    kn_free(pp->link);
    kn_comm_free(pp->embed);
    memset(pp, 0, sizeof *pp);
}

kn_status kn_pp_set_dp(kn_pp *pp, kn_comm *dp) {
    if (!pp || !pp->tr || !pp->lparam) return kn_error(KN_ERR_ARG, "kn_pp_set_dp: no pipeline");
    kn_trainer *t = pp->tr;
    if (!t->step.has_comm || t->step.comm.ctx != pp)
        return kn_error(KN_ERR_ARG, "kn_pp_set_dp: the trainer's step runner has another communication");
    if (pp->zero1) return kn_error(KN_ERR_ARG, "kn_pp_set_dp: ZeRO-1 is on: set the dp axis before kn_pp_set_zero1");
    pp->dp = dp && dp->size > 1 ? dp : NULL;
    t->step.comm.rank = pp->dp ? pp->dp->rank : 0; /* the runner's rows: ranks x micro x B */
    t->step.comm.ranks = pp->dp ? pp->dp->size : 1;
    if (!pp->dp) return KN_OK;
    /* every pipeline starts from the first one's parameters and optimizer state */
    KN_TRY(kn_comm_broadcast(pp->dp, kn_tensor_data(pp->lparam), pp->held, KN_DT_F32, 0));
    for (int k = 0; k < pp->nranges; k++)
        KN_TRY(kn_comm_broadcast(pp->dp, kn_tensor_data(pp->state[k]), kn_tensor_numel(pp->state[k]), KN_DT_F32, 0));
    pp->low_fresh = false;
    return KN_OK;
}

kn_status kn_pp_set_zero1(kn_pp *pp) {
    if (!pp || !pp->tr || !pp->lparam) return kn_error(KN_ERR_ARG, "kn_pp_set_zero1: no pipeline");
    if (!pp->dp) return kn_error(KN_ERR_ARG, "kn_pp_set_zero1: ZeRO-1 shards the optimizer state over the dp axis: the "
                                 "mesh has none (kn_pp_set_dp first)");
    if (pp->zero1) return KN_OK;
    int R = pp->dp->size, r = pp->dp->rank;
    int64_t *b = kn_calloc((size_t)R + 1, sizeof *b);
    if (!b || !(pp->zoff = kn_calloc((size_t)(pp->nranges > 0 ? pp->nranges : 1), sizeof *pp->zoff))) {
        kn_free(b);
        return kn_error(KN_ERR_OOM, "kn_pp_set_zero1: out of memory");
    }
    kn_status st = kn_dp_shard_ranges(pp->held, R, b);
    int64_t zlo = b[r], zhi = b[r + 1];
    kn_free(b);
    KN_TRY(st);
    kn_device dev = pp->tr->dev;
    /* each range keeps its part inside [zlo, zhi): its optimizer over that part (the decayed
     * prefix cut alike), its state that part of every state slab */
    for (int k = 0; k < pp->nranges; k++) {
        int64_t len = pp->hi[k] - pp->lo[k], a = pp->loff[k] > zlo ? pp->loff[k] : zlo;
        int64_t e = pp->loff[k] + len < zhi ? pp->loff[k] + len : zhi, zl = e > a ? e - a : 0, zs = a - pp->loff[k];
        int64_t nd = pp->opt[k].n_decay - zs, comps = len > 0 ? pp->opt[k].state_len / len : 0;
        nd = nd < 0 ? 0 : nd > zl ? zl : nd;
        kn_optim o;
        KN_TRY(kn_optim_init(&o, &pp->tr->opt.cfg, zl, nd));
        int64_t sl = o.state_len > 0 ? o.state_len : 1;
        kn_tensor *s = NULL;
        st = kn_tensor_empty_on(&s, dev, KN_DT_F32, 1, &sl);
        for (int64_t c = 0; st == KN_OK && c < comps; c++)
            st = kn_device_memcpy(dev, (float *)kn_tensor_data(s) + c * zl, dev,
                                  (float *)kn_tensor_data(pp->state[k]) + c * len + zs, (size_t)zl * sizeof(float));
        if (st != KN_OK) {
            kn_tensor_free(s);
            kn_optim_free(&o);
            return st;
        }
        o.step = pp->opt[k].step;
        kn_optim_free(&pp->opt[k]);
        kn_tensor_free(pp->state[k]);
        pp->opt[k] = o;
        pp->state[k] = s;
        pp->zoff[k] = zs;
    }
    pp->zero1 = true;
    pp->zlo = zlo;
    pp->zhi = zhi;
    return KN_OK;
}

kn_status kn_pp_zero1_counts(const kn_pp *pp, int64_t **out) {
    int R = pp->dp->size;
    int64_t *b = kn_calloc((size_t)R + 1, sizeof *b), *c = kn_calloc((size_t)R, sizeof *c);
    kn_status st = b && c ? kn_dp_shard_ranges(pp->held, R, b) : kn_error(KN_ERR_OOM, "kn_pp: out of memory");
    for (int q = 0; st == KN_OK && q < R; q++) c[q] = b[q + 1] - b[q];
    kn_free(b);
    if (st != KN_OK) kn_free(c);
    else *out = c;
    return st;
}

/* ZeRO-1: comps slabs of this rank's whole optimizer state (held floats each, its ranges'
 * layout) into *out, every dp rank's part all-gathered (collective over dp). */
static kn_status zero1_state(kn_pp *pp, int comps, kn_tensor **out) {
    kn_device dev = pp->tr->dev;
    int64_t mine = pp->zhi - pp->zlo, m1 = mine > 0 ? mine : 1, all = comps * pp->held > 0 ? comps * pp->held : 1;
    int64_t *counts = NULL;
    kn_tensor *part = NULL;
    kn_status st = kn_pp_zero1_counts(pp, &counts);
    if (st == KN_OK) st = kn_tensor_empty_on(&part, dev, KN_DT_F32, 1, &m1);
    if (st == KN_OK) st = kn_tensor_empty_on(out, dev, KN_DT_F32, 1, &all);
    for (int c = 0; st == KN_OK && c < comps; c++) {
        int64_t at = 0; /* the ranges' parts lie one after the other: together [zlo, zhi) */
        for (int k = 0; st == KN_OK && k < pp->nranges; k++) {
            int64_t zl = pp->opt[k].n;
            st = kn_device_memcpy(dev, (float *)kn_tensor_data(part) + at, dev,
                                  (float *)kn_tensor_data(pp->state[k]) + c * zl, (size_t)zl * sizeof(float));
            at += zl;
        }
        if (st == KN_OK)
            st = kn_comm_all_gather(pp->dp, kn_tensor_data(part), (float *)kn_tensor_data(*out) + c * pp->held, counts,
                                    KN_DT_F32);
    }
    kn_tensor_free(part);
    kn_free(counts);
    return st;
}

/* The trainer's whole-model slabs made again (kn_pp_drop_full's), empty, and bound where its
 * programs read them. */
static kn_status make_full(kn_pp *pp) {
    kn_trainer *t = pp->tr;
    kn_params *P = &t->model->p;
    int64_t n = P->n, sl = t->opt.state_len;
    if (t->dev.type == KN_DEVICE_CPU) {
        KN_TRY(kn_tensor_empty(&P->slab, KN_DT_F32, 1, &n));
        P->data = kn_tensor_data(P->slab);
        KN_TRY(kn_params_views(P, P->slab, &P->views));
        t->params = P->slab;
        t->views = P->views;
        if (sl > 0 && !(t->opt.state = kn_malloc((size_t)sl * sizeof(float))))
            return kn_error(KN_ERR_OOM, "kn_pp_gather: out of memory for the optimizer state");
    } else {
        KN_TRY(kn_tensor_empty_on(&t->params, t->dev, KN_DT_F32, 1, &n));
        KN_TRY(kn_params_views(P, t->params, &t->views));
        if (sl > 0) KN_TRY(kn_tensor_empty_on(&t->state, t->dev, KN_DT_F32, 1, &sl));
    }
    if (pp->low_dt != KN_DT_F32) {
        KN_TRY(kn_tensor_empty_on(&t->low, t->dev, pp->low_dt, 1, &n));
        KN_TRY(kn_params_views(P, t->low, &t->low_views));
        t->low_dt = pp->low_dt;
        t->low_fresh = false;
    }
    kn_program *ps[2] = {t->prog, t->eval};
    char name[KN_NAME_MAX];
    for (int k = 0; k < 2; k++)
        for (int i = 0; ps[k] && i < P->count; i++) {
            if (kn_graph_find(kn_program_graph(ps[k]), P->info[i].name) >= 0)
                KN_TRY(kn_program_bind(ps[k], P->info[i].name, t->views[i]));
            if (t->low && kn_lowparam_name(P->info[i].name, t->low_dt, name) == KN_OK &&
                kn_graph_find(kn_program_graph(ps[k]), name) >= 0)
                KN_TRY(kn_program_bind(ps[k], name, t->low_views[i]));
        }
    pp->full = true;
    return KN_OK;
}

/* With a tp axis: every tp rank's local slabs (lf: 1 + comps slabs of the local layout, the
 * parameters and the optimizer state) gathered over tp and put together (kn_place_gather)
 * into the trainer's param and state slabs (on its device). */
static kn_status gather_tp(kn_pp *pp, int comps, const kn_tensor *lf, float *param, float *state) {
    kn_trainer *t = pp->tr;
    const kn_params *P = &t->model->p;
    int N = pp->tp_parts;
    int64_t n = P->n, ln = pp->ln, per = (1 + comps) * ln, tot = per * N;
    int64_t *counts = kn_calloc((size_t)N, sizeof *counts);
    float *host = kn_malloc((size_t)(tot > 0 ? tot : 1) * sizeof *host), *full = kn_malloc((size_t)n * sizeof *full);
    kn_tensor *all = NULL;
    kn_status st = counts && host && full ? KN_OK : kn_error(KN_ERR_OOM, "kn_pp_gather: out of memory");
    for (int q = 0; counts && q < N; q++) counts[q] = per;
    if (st == KN_OK) st = kn_tensor_empty_on(&all, t->dev, KN_DT_F32, 1, &tot);
    if (st == KN_OK) st = kn_comm_all_gather(pp->tp, kn_tensor_data(lf), kn_tensor_data(all), counts, KN_DT_F32);
    if (st == KN_OK) st = kn_device_memcpy(KN_CPU, host, t->dev, kn_tensor_data(all), (size_t)tot * sizeof *host);
    for (int c = -1; st == KN_OK && c < comps; c++) { /* c = -1: the parameters */
        for (int q = 0; st == KN_OK && q < N; q++)
            for (int i = 0; st == KN_OK && i < P->count; i++)
                st = kn_place_gather(host + q * per + (c + 1) * ln + pp->linfo[i].offset, P->info[i].ndim,
                                     P->info[i].shape, pp->place[i], N, q, full + P->info[i].offset);
        if (st == KN_OK)
            st = kn_device_memcpy(t->dev, c < 0 ? param : state + c * n, KN_CPU, full, (size_t)n * sizeof *full);
    }
    kn_tensor_free(all);
    kn_free(counts);
    kn_free(host);
    kn_free(full);
    return st;
}

kn_status kn_pp_gather(kn_pp *pp) {
    if (!pp || !pp->tr) return kn_error(KN_ERR_ARG, "kn_pp_gather: NULL argument");
    kn_trainer *t = pp->tr;
    const kn_params *P = &t->model->p;
    int64_t n = pp->ln;
    int comps = t->opt.n > 0 ? (int)(t->opt.state_len / t->opt.n) : 0;
    if (!pp->full) {
        kn_status st = make_full(pp);
        if (st != KN_OK) {
            (void)kn_pp_drop_full(pp);
            return st;
        }
    }
    float *param = kn_tensor_data(t->params), *state = t->state ? kn_tensor_data(t->state) : t->opt.state;
    /* with tp, the local layout's slabs first (gather_tp puts the shards together) */
    kn_tensor *lf = NULL;
    float *lp = param, *ls = state;
    if (pp->tp) {
        int64_t all = (1 + comps) * n;
        KN_TRY(kn_tensor_empty_on(&lf, t->dev, KN_DT_F32, 1, &all));
        lp = kn_tensor_data(lf);
        ls = lp + n;
    }
    /* this rank's parameters and optimizer state into those slabs, then every parameter's
     * from its owner */
    kn_status st = KN_OK;
#define TRY_(x) do { if (st == KN_OK) st = (x); } while (0)
    kn_tensor *zs = NULL; /* ZeRO-1: the rank's whole optimizer state, its dp group's parts gathered */
    if (pp->zero1) TRY_(zero1_state(pp, comps, &zs));
    for (int k = 0; k < pp->nranges; k++) {
        int64_t len = pp->hi[k] - pp->lo[k];
        TRY_(kn_device_memcpy(t->dev, lp + pp->lo[k], t->dev, (float *)kn_tensor_data(pp->lparam) + pp->loff[k],
                              (size_t)len * sizeof(float)));
        for (int c = 0; c < comps; c++)
            TRY_(kn_device_memcpy(t->dev, ls + c * n + pp->lo[k], t->dev,
                                  zs ? (float *)kn_tensor_data(zs) + c * pp->held + pp->loff[k]
                                     : (float *)kn_tensor_data(pp->state[k]) + c * len,
                                  (size_t)len * sizeof(float)));
    }
    kn_tensor_free(zs);
    for (int i = 0; i < P->count; i++) {
        int owner = kn_pp_owner(pp, i);
        int64_t off = pp->linfo[i].offset, len = pp->linfo[i].numel;
        TRY_(kn_comm_broadcast(pp->comm, lp + off, len, KN_DT_F32, owner));
        for (int c = 0; c < comps; c++) TRY_(kn_comm_broadcast(pp->comm, ls + c * n + off, len, KN_DT_F32, owner));
    }
    if (pp->tp) TRY_(gather_tp(pp, comps, lf, param, state));
#undef TRY_
    kn_tensor_free(lf);
    KN_TRY(st);
    t->low_fresh = false;
    return kn_trainer_sync_host(t);
}

