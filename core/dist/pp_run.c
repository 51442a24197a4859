/* pp_run.c — pipeline parallelism's step (kiln/dist.h): the checks, the setup, the
 * schedule run through the step runner, the stash, the update of what this rank owns,
 * and the timeline.
 *
 * The step runner (kiln/step.h) keeps the step's frame: the loss averaged, the clip by
 * the global norm, the update. This file hands it hooks, and its `grads` hook takes the
 * micro-batches: every rank walks its action list from kn_pp_schedule (kiln/pipeline.h,
 * lab 11's unit); F(micro, chunk) loads the micro-batch's rows where the stage reads them
 * (idx on stage 0, targets on the last), takes a stash slot and runs the stage's forward
 * program with its stash outputs written straight into the slot's tensors; B(micro,
 * chunk) runs the backward program on that slot (then free for the next micro-batch) and
 * adds the parameters' gradients into the trainer's gradient slab (sum over the
 * micro-batches, in micro-batch order as one process sums them). 1F1B keeps at most p
 * slots alive per rank, GPipe m: the peak is measured (stash_peak, stash_peak_bytes).
 * After the schedule: every send waited for; the tied wte's two gradients summed between
 * ranks 0 and p-1 (the embedding group), so both copies take the same update; the loss
 * (the last stage's) summed over the axis so every rank reports it. With a dp axis
 * (kn_pp_set_dp), each pipeline takes its share of the batch's micro-batches and its
 * gradients are summed with the other pipelines' before the clip (the runner then divides
 * by dp x m, so the step is the one process's on the whole batch).
 *
 * Each rank holds only its stages' parameters: contiguous ranges of the model's slab, copied
 * at setup into the rank's own slabs (parameters, gradients, per range an optimizer and its
 * state; the bf16 copies when the stages read them), which the stages' programs are bound
 * to and the update writes (the trainer's config and step; AdamW is elementwise, so a
 * range's update is the one process's). The trainer's whole-model slabs are freed, as
 * ZeRO-3 frees its (P/p of the parameter, gradient and optimizer bytes per rank, plus the
 * tied wte on the last rank). The norm counts every parameter once (the last rank leaves
 * out its wte copy). kn_pp_gather makes the trainer's slabs again and brings every rank's
 * ranges (and their optimizer state) to all for evaluation, sampling and checkpoints; the
 * next step frees them again. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "kiln/device.h"
#include "kiln/dist.h"
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

/* ---------------------------------------------------------------- small helpers */

/* A blocking all-reduce (sum) of n doubles over c; NCCL moves device memory, so on a GPU
 * the values go through a device buffer. */
static kn_status sum_f64(kn_pp *pp, kn_comm *c, double *v, int n, const char *what) {
    kn_device dev = pp->tr->dev;
    kn_comm_req r;
    if (c->be->type != KN_COMM_NCCL) {
        KN_TRY(kn_comm_iall_reduce(c, v, v, n, KN_DT_F64, what, &r));
        return kn_comm_wait(&r);
    }
    kn_tensor *buf;
    int64_t len = n;
    KN_TRY(kn_tensor_empty_on(&buf, dev, KN_DT_F64, 1, &len));
    kn_status st = kn_device_memcpy(dev, kn_tensor_data(buf), KN_CPU, v, (size_t)n * sizeof *v);
    if (st == KN_OK) st = kn_comm_iall_reduce(c, kn_tensor_data(buf), kn_tensor_data(buf), n, KN_DT_F64, what, &r);
    if (st == KN_OK) st = kn_comm_wait(&r);
    if (st == KN_OK) st = kn_device_memcpy(KN_CPU, v, dev, kn_tensor_data(buf), (size_t)n * sizeof *v);
    kn_tensor_free(buf);
    return st;
}

/* dst += src (contiguous f32 tensors of one shape on the trainer's device): the add node's kernel,
 * the CPU's or the GPU's. */
static kn_status add_into(kn_tensor *dst, const kn_tensor *src) {
    kn_node n = {.op = KN_OP_ADD, .nin = 2, .attrs = kn_attrs_default()};
    n.type.dtype = KN_DT_F32;
    n.type.ndim = dst->ndim;
    for (int d = 0; d < dst->ndim; d++) n.type.shape[d] = dst->shape[d];
    const kn_tensor *in[2] = {dst, src};
    kn_tensor *c = NULL;
    kn_status st = kn_node_eval(&n, in, &c);
    if (st == KN_OK)
        st = kn_device_memcpy(dst->storage->device, kn_tensor_data(dst), c->storage->device, kn_tensor_data(c),
                              (size_t)kn_tensor_numel(dst) * sizeof(float));
    kn_tensor_free(c);
    return st;
}

static kn_status load_rows(kn_trainer *t, kn_tensor *dst, const int32_t *src, int micro) {
    size_t bytes = (size_t)t->B * (size_t)t->T * sizeof(int32_t);
    return kn_device_memcpy(t->dev, kn_tensor_data(dst), KN_CPU, src + (size_t)micro * (size_t)t->B * (size_t)t->T,
                            bytes);
}

/* ---------------------------------------------------------------- this rank's slabs */

/* Round lparam into llow unless it is fresh (the trainer's kn_trainer_low_refresh, on the
 * rank's own slab). */
static kn_status low_refresh(kn_pp *pp) {
    if (!pp->llow || pp->low_fresh) return KN_OK;
    kn_node n = {.op = KN_OP_CAST, .nin = 1, .attrs = kn_attrs_default()};
    n.attrs.dtype = n.type.dtype = pp->low_dt;
    n.type.ndim = 1;
    n.type.shape[0] = pp->held;
    const kn_tensor *in[1] = {pp->lparam};
    kn_tensor *c = NULL;
    kn_status st = kn_node_eval(&n, in, &c);
    if (st == KN_OK)
        st = kn_device_memcpy(pp->tr->dev, kn_tensor_data(pp->llow), c->storage->device, kn_tensor_data(c),
                              (size_t)pp->held * kn_dtype_size(pp->low_dt));
    kn_tensor_free(c);
    if (st == KN_OK) pp->low_fresh = true;
    return st;
}

/* Free the trainer's whole-model slabs (what ZeRO-2 and ZeRO-3 do with theirs, dp_shard.c,
 * zero3.c): its programs' bindings to them first (a binding holds a reference), then the
 * parameter slab (the model's on the CPU, the device copy on a GPU: the host's model slab
 * stays there, host memory), the gradient slab, the optimizer state (the host's on the CPU,
 * the device's on a GPU), the low copies. Whatever is already gone is skipped. */
static kn_status drop_full(kn_pp *pp) {
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

/* ---------------------------------------------------------------- the stash */

static kn_status slot_take(kn_pp *pp, int micro, int chunk, struct kn_pp_slot **out) {
    const kn_pp_stage *st = &pp->stage[chunk];
    struct kn_pp_slot *s = NULL;
    for (int i = 0; i < pp->nslots && !s; i++)
        if (!pp->slots[i].used && pp->slots[i].chunk == chunk) s = &pp->slots[i];
    if (!s) {
        struct kn_pp_slot *ns = kn_realloc(pp->slots, (size_t)(pp->nslots + 1) * sizeof *ns);
        if (!ns) return kn_error(KN_ERR_OOM, "kn_pp: out of memory for a stash slot");
        pp->slots = ns;
        s = &pp->slots[pp->nslots++];
        memset(s, 0, sizeof *s);
        s->chunk = chunk;
        s->n = st->nsaved;
        s->t = kn_calloc((size_t)(st->nsaved ? st->nsaved : 1), sizeof *s->t);
        if (!s->t) return kn_error(KN_ERR_OOM, "kn_pp: out of memory for a stash slot");
        for (int k = 0; k < st->nsaved; k++) {
            const kn_type *ty = &st->saved[k];
            KN_TRY(kn_tensor_empty_on(&s->t[k], pp->tr->dev, ty->dtype, ty->ndim, ty->shape));
            s->bytes += kn_type_numel(ty) * (int64_t)kn_dtype_size(ty->dtype);
        }
    }
    s->used = true;
    s->micro = micro;
    pp->stash_alive++;
    pp->stash_bytes += s->bytes;
    if (pp->stash_alive > pp->stash_peak) pp->stash_peak = pp->stash_alive;
    if (pp->stash_bytes > pp->stash_peak_bytes) pp->stash_peak_bytes = pp->stash_bytes;
    *out = s;
    return KN_OK;
}

static kn_status slot_find(kn_pp *pp, int micro, int chunk, struct kn_pp_slot **out) {
    for (int i = 0; i < pp->nslots; i++)
        if (pp->slots[i].used && pp->slots[i].chunk == chunk && pp->slots[i].micro == micro) {
            *out = &pp->slots[i];
            return KN_OK;
        }
    return kn_error(KN_ERR_ARG, "kn_pp: rank %d: the backward of micro-batch %d, chunk %d comes before its forward "
                    "(a schedule out of order)", pp->rank, micro, chunk);
}

/* ---------------------------------------------------------------- one action */

void kn_pp_test_sleep(double s) {
    if (s <= 0) return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static kn_status run_action(kn_pp *pp, const kn_pp_action *a, const int32_t *x, const int32_t *y) {
    kn_trainer *t = pp->tr;
    if (a->chunk < 0 || a->chunk >= pp->v || a->micro < 0 || a->micro >= pp->cfg.micro)
        return kn_error(KN_ERR_ARG, "kn_pp: rank %d: action (micro %d, chunk %d) outside %d micro-batches x %d chunks",
                        pp->rank, a->micro, a->chunk, pp->cfg.micro, pp->v);
    kn_pp_stage *st = &pp->stage[a->chunk];
    struct kn_pp_slot *s = NULL;
    if (a->op == KN_PP_FWD) {
        /* this pipeline's share (dp), this round's micro-batches (--accum) */
        int row = ((pp->dp ? pp->dp->rank : 0) * pp->cfg.accum + pp->round) * pp->cfg.micro + a->micro;
        if (st->first) KN_TRY(load_rows(t, t->x, x, row));
        if (st->last) KN_TRY(load_rows(t, t->y, y, row));
        KN_TRY(slot_take(pp, a->micro, a->chunk, &s));
        for (int k = 0; k < s->n; k++) KN_TRY(kn_program_bind_output(st->pf, 1 + k, s->t[k]));
        KN_TRY(low_refresh(pp));
        KN_TRY(kn_program_run(st->pf));
        if (!pp->sent) kn_pp_test_sleep(pp->test_sleep[0]); /* a send sleeps before it leaves */
        if (st->last) {
            double l;
            KN_TRY(kn_tensor_item_any(kn_program_output(st->pf, 0), &l));
            pp->loss_sum += l;
        }
        return KN_OK;
    }
    KN_TRY(slot_find(pp, a->micro, a->chunk, &s));
    char name[KN_NAME_MAX];
    for (int k = 0; k < s->n; k++) {
        snprintf(name, sizeof name, "pp.s%d", k);
        KN_TRY(kn_program_bind(st->pb, name, s->t[k]));
    }
    KN_TRY(kn_program_run(st->pb));
    if (!pp->sent) kn_pp_test_sleep(pp->test_sleep[1]);
    for (int k = 0; k < st->np; k++) /* the micro-batches' gradients summed in the slab */
        KN_TRY(add_into(pp->lgview[st->pidx[k]], kn_program_output(st->pb, k)));
    s->used = false;
    pp->stash_alive--;
    pp->stash_bytes -= s->bytes;
    return KN_OK;
}

/* ---------------------------------------------------------------- the runner's hooks */

/* One round of the schedule: every action of this rank, timed from a common origin (the
 * timeline keeps the last round's), its sends finished. */
static kn_status run_round(kn_pp *pp, const int32_t *x, const int32_t *y) {
    kn_trainer *t = pp->tr;
    KN_TRY(kn_comm_barrier(pp->comm)); /* a common origin for the timeline */
    pp->t_step0 = kn_time_now();
    for (int i = 0; i < pp->nactions; i++) {
        kn_pp_record *e = &pp->events[i];
        const kn_pp_action *a = &pp->actions[i];
        e->op = a->op;
        e->micro = a->micro;
        e->chunk = a->chunk;
        pp->recv_seen = pp->sent = false;
        double t0 = kn_time_now();
        kn_status st = run_action(pp, a, x, y);
        /* a GPU runs behind the host: the action ends when its kernels have */
        if (st == KN_OK && t->dev.type != KN_DEVICE_CPU) st = kn_device_synchronize(t->dev);
        if (st != KN_OK) {
            (void)kn_pp_sends_progress(pp, true);
            return st;
        }
        e->t0 = t0 - pp->t_step0;
        e->t_ready = (pp->recv_seen ? pp->t_ready : t0) - pp->t_step0;
        e->t1 = kn_time_now() - pp->t_step0;
        e->t_sent = pp->sent ? pp->t_sent - pp->t_step0 : e->t1;
    }
    return kn_pp_sends_progress(pp, true);
}

/* The schedule (--accum rounds of it), the tied gradient summed, the pipelines' gradients
 * summed over dp, the loss summed over the axis. */
static kn_status hook_grads(void *ctx, const int32_t *x, const int32_t *y, double *lsum) {
    kn_pp *pp = ctx;
    kn_trainer *t = pp->tr;
    pp->loss_sum = 0;
    pp->stash_peak = 0;
    pp->stash_peak_bytes = 0;
    KN_TRY(drop_full(pp)); /* a gathered whole model is a copy: the local slabs train */
    KN_TRY(kn_device_memset(t->dev, kn_tensor_data(pp->lgrad), 0, (size_t)pp->held * sizeof(float)));
    for (pp->round = 0; pp->round < pp->cfg.accum; pp->round++) /* --accum: the schedule again */
        KN_TRY(run_round(pp, x, y));
    if (pp->embed) { /* the tied embedding: both copies' gradients summed (ranks 0 and p-1) */
        kn_tensor *g = pp->lgview[0];
        kn_comm_req r;
        KN_TRY(kn_comm_iall_reduce(pp->embed, kn_tensor_data(g), kn_tensor_data(g), kn_tensor_numel(g), KN_DT_F32,
                                   "tied wte gradient", &r));
        KN_TRY(kn_comm_wait(&r));
    }
    if (pp->dp) { /* the pipelines' gradients summed: the runner scales by 1/(dp m accum) */
        float *g = kn_tensor_data(pp->lgrad);
        kn_comm_req r;
        KN_TRY(kn_comm_iall_reduce(pp->dp, g, g, pp->held, KN_DT_F32, "data-parallel gradients", &r));
        KN_TRY(kn_comm_wait(&r));
    }
    double l = pp->loss_sum;
    KN_TRY(sum_f64(pp, pp->comm, &l, 1, "pipeline loss"));
    *lsum = l;
    return KN_OK;
}

static kn_status hook_micro_begin(void *ctx, int m, bool last) {
    (void)ctx; (void)m; (void)last;
    return KN_OK;
}

static kn_status hook_micro_end(void *ctx, int m, kn_status run) {
    (void)ctx; (void)m;
    return run;
}

/* The data-parallel sum over the pipelines (a pipeline alone is one replica: nothing). */
static kn_status hook_sum(void *ctx, double *v, const char *what) {
    kn_pp *pp = ctx;
    return pp->dp ? sum_f64(pp, pp->dp, v, 1, what) : KN_OK;
}

/* Is range k the last rank's copy of wte (counted by rank 0 in the norm)? */
static bool range_is_tied_copy(const kn_pp *pp, int k) {
    return pp->p > 1 && pp->rank == pp->p - 1 && pp->lo[k] == 0;
}

static kn_status hook_clip(void *ctx, double scale, bool inject_inf, double *norm) {
    kn_pp *pp = ctx;
    kn_trainer *t = pp->tr;
    float *g = kn_tensor_data(pp->lgrad);
    double ss = 0;
    if (inject_inf && pp->held > 0) { /* the test hook (kiln train: on the ranks KILN_INJECT_INF_RANK names):
                                         * this rank's last gradient, never in the last rank's copy of wte,
                                         * which the norm leaves out */
        float inf = INFINITY;
        KN_TRY(kn_device_memcpy(t->dev, g + pp->held - 1, KN_CPU, &inf, sizeof inf));
    }
    for (int k = 0; k < pp->nranges; k++) {
        double nk;
        KN_TRY(kn_device_scale(t->dev, g + pp->loff[k], pp->hi[k] - pp->lo[k], scale));
        KN_TRY(kn_device_clip_grad_norm(t->dev, g + pp->loff[k], pp->hi[k] - pp->lo[k], 0.0, &nk));
        if (!range_is_tied_copy(pp, k)) ss += nk * nk;
    }
    KN_TRY(sum_f64(pp, pp->comm, &ss, 1, "gradient norm"));
    *norm = sqrt(ss);
    if (t->clip > 0 && *norm > t->clip)
        for (int k = 0; k < pp->nranges; k++)
            KN_TRY(kn_device_scale(t->dev, g + pp->loff[k], pp->hi[k] - pp->lo[k], t->clip / (*norm + 1e-6)));
    return KN_OK;
}

static kn_status hook_update(void *ctx, double lr) {
    kn_pp *pp = ctx;
    kn_trainer *t = pp->tr;
    float *param = kn_tensor_data(pp->lparam), *grad = kn_tensor_data(pp->lgrad);
    for (int k = 0; k < pp->nranges; k++)
        KN_TRY(kn_device_optim_step(t->dev, &pp->opt[k], param + pp->loff[k], grad + pp->loff[k],
                                    kn_tensor_data(pp->state[k]), lr));
    if (pp->nranges > 0) t->opt.step = pp->opt[0].step;
    else t->opt.step++;
    pp->low_fresh = false;
    return KN_OK;
}

/* The trainer's step was compiled (a mode, a device): the stages' programs again. */
static kn_status hook_compiled(void *ctx, kn_program *step) {
    (void)step;
    kn_pp *pp = ctx;
    kn_trainer *t = pp->tr;
    if ((t->scale_in != NULL) != pp->scaled)
        return kn_error(KN_ERR_UNSUPPORTED, "kn_pp: the loss scale was turned %s after kn_pp_new (the last stage's "
                        "backward is built with it or without): set it before", pp->scaled ? "off" : "on");
    kn_dtype dt = t->low ? t->low_dt : KN_DT_F32;
    if (dt != pp->low_dt)
        return kn_error(KN_ERR_UNSUPPORTED, "kn_pp: the weights' low copies changed from %s to %s after kn_pp_new: set "
                        "the trainer's passes before", kn_dtype_name(pp->low_dt), kn_dtype_name(dt));
    for (int c = 0; c < pp->v; c++) KN_TRY(kn_pp_stage_compile(pp, &pp->stage[c]));
    return drop_full(pp); /* the trainer's compile made its low copies again */
}

/* ---------------------------------------------------------------- setup */

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
        int64_t lo = P->info[i].offset, hi = lo + P->info[i].numel;
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
    int64_t n = P->n, held = pp->held > 0 ? pp->held : 1;
    int comps = t->opt.n > 0 ? (int)(t->opt.state_len / t->opt.n) : 0;
    float *src = t->state ? kn_tensor_data(t->state) : t->opt.state;
    KN_TRY(kn_tensor_empty_on(&pp->lparam, t->dev, KN_DT_F32, 1, &held));
    KN_TRY(kn_tensor_empty_on(&pp->lgrad, t->dev, KN_DT_F32, 1, &held));
    KN_TRY(kn_device_memset(t->dev, kn_tensor_data(pp->lgrad), 0, (size_t)held * sizeof(float)));
    pp->low_dt = t->low ? t->low_dt : KN_DT_F32;
    if (pp->low_dt != KN_DT_F32) {
        KN_TRY(kn_tensor_empty_on(&pp->llow, t->dev, pp->low_dt, 1, &held));
        if (!(pp->llow_view = kn_calloc(np, sizeof *pp->llow_view))) return kn_error(KN_ERR_OOM, "kn_pp: out of memory");
    }
    for (int k = 0; k < pp->nranges; k++) {
        int64_t len = pp->hi[k] - pp->lo[k], nd = P->n_decay - pp->lo[k];
        KN_TRY(kn_device_memcpy(t->dev, (float *)kn_tensor_data(pp->lparam) + pp->loff[k], t->dev,
                                (float *)kn_tensor_data(t->params) + pp->lo[k], (size_t)len * sizeof(float)));
        nd = nd < 0 ? 0 : nd > len ? len : nd;
        KN_TRY(kn_optim_init(&pp->opt[k], &t->opt.cfg, len, nd));
        pp->opt[k].step = t->opt.step;
        int64_t sl = pp->opt[k].state_len > 0 ? pp->opt[k].state_len : 1;
        KN_TRY(kn_tensor_empty_on(&pp->state[k], t->dev, KN_DT_F32, 1, &sl));
        for (int c = 0; c < comps; c++)
            KN_TRY(kn_device_memcpy(t->dev, (float *)kn_tensor_data(pp->state[k]) + c * len, t->dev,
                                    src + c * n + pp->lo[k], (size_t)len * sizeof(float)));
    }
    /* every held parameter's views: its range's offset plus its own within the range */
    for (int i = 0, k = 0; i < P->count; i++) {
        if (!pp->owned[i]) continue;
        while (P->info[i].offset >= pp->hi[k]) k++;
        int64_t off = pp->loff[k] + P->info[i].offset - pp->lo[k];
        KN_TRY(local_view(&P->info[i], pp->lparam, off, &pp->lview[i]));
        KN_TRY(local_view(&P->info[i], pp->lgrad, off, &pp->lgview[i]));
        if (pp->llow) KN_TRY(local_view(&P->info[i], pp->llow, off, &pp->llow_view[i]));
    }
    pp->full = true;
    return KN_OK;
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
    kn_status st = KN_OK;
#define TRY_(x) do { if (st == KN_OK) st = (x); } while (0)
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
        kn_step_comm sc = {.ctx = pp, .rank = 0, .ranks = 1, .pass = NULL, .coll = pp->sends->coll[0],
                           .compiled = hook_compiled, .micro_begin = hook_micro_begin, .micro_end = hook_micro_end,
                           .sum = hook_sum, .clip = hook_clip, .update = hook_update, .grads = hook_grads};
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
    kn_free(pp->owned);
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

/* ---------------------------------------------------------------- the step */

kn_status kn_pp_step(kn_pp *pp, const int32_t *x, const int32_t *y, int global_batch, double lr, double *loss,
                     double *gnorm) {
    if (!pp || !pp->tr || !x || !y) return kn_error(KN_ERR_ARG, "kn_pp_step: NULL argument");
    kn_trainer *t = pp->tr;
    int reps = pp->dp ? pp->dp->size : 1;
    if ((int64_t)t->B * pp->cfg.micro * pp->cfg.accum * reps != global_batch)
        return kn_error(KN_ERR_ARG, "kn_pp_step: global batch %d is not %d pipeline%s x %d rounds x %d micro-batches x "
                        "%d rows", global_batch, reps, reps == 1 ? "" : "s", pp->cfg.accum, pp->cfg.micro, t->B);
    if (!t->step.has_comm || t->step.comm.ctx != pp)
        return kn_error(KN_ERR_ARG, "kn_pp_step: the trainer's step runner has another communication");
    return kn_step_run(t, x, y, global_batch, lr, loss, gnorm);
}

/* The trainer's whole-model slabs made again (drop_full's), empty, and bound where its
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

kn_status kn_pp_gather(kn_pp *pp) {
    if (!pp || !pp->tr) return kn_error(KN_ERR_ARG, "kn_pp_gather: NULL argument");
    kn_trainer *t = pp->tr;
    const kn_params *P = &t->model->p;
    int64_t n = P->n;
    int comps = t->opt.n > 0 ? (int)(t->opt.state_len / t->opt.n) : 0;
    if (!pp->full) {
        kn_status st = make_full(pp);
        if (st != KN_OK) {
            (void)drop_full(pp);
            return st;
        }
    }
    float *param = kn_tensor_data(t->params), *state = t->state ? kn_tensor_data(t->state) : t->opt.state;
    /* this rank's parameters and optimizer state into the trainer's slabs, then every
     * parameter's from its owner */
    for (int k = 0; k < pp->nranges; k++) {
        int64_t len = pp->hi[k] - pp->lo[k];
        KN_TRY(kn_device_memcpy(t->dev, param + pp->lo[k], t->dev, (float *)kn_tensor_data(pp->lparam) + pp->loff[k],
                                (size_t)len * sizeof(float)));
        for (int c = 0; c < comps; c++)
            KN_TRY(kn_device_memcpy(t->dev, state + c * n + pp->lo[k], t->dev,
                                    (float *)kn_tensor_data(pp->state[k]) + c * len, (size_t)len * sizeof(float)));
    }
    for (int i = 0; i < P->count; i++) {
        int owner = kn_pp_owner(pp, i);
        int64_t off = P->info[i].offset, len = P->info[i].numel;
        KN_TRY(kn_comm_broadcast(pp->comm, param + off, len, KN_DT_F32, owner));
        for (int c = 0; c < comps; c++) KN_TRY(kn_comm_broadcast(pp->comm, state + c * n + off, len, KN_DT_F32, owner));
    }
    t->low_fresh = false;
    return kn_trainer_sync_host(t);
}

/* ---------------------------------------------------------------- the timeline */

/* The bytes of a tensor this rank allocated (0 for none). */
static double tensor_bytes(const kn_tensor *x) {
    return x ? (double)kn_tensor_numel(x) * (double)kn_dtype_size(x->dtype) : 0;
}

kn_status kn_pp_rank_stats(kn_pp *pp, double *out) {
    if (!pp || !out) return kn_error(KN_ERR_ARG, "kn_pp_rank_stats: NULL argument");
    for (int r = 0; r < KN_PP_STATS * pp->p; r++) out[r] = 0;
    double *me = out + KN_PP_STATS * pp->rank;
    me[0] = pp->stash_peak;
    me[1] = (double)pp->stash_peak_bytes;
    me[2] = (double)pp->held;
    me[3] = tensor_bytes(pp->lparam);
    me[4] = tensor_bytes(pp->lgrad);
    for (int k = 0; k < pp->nranges; k++) me[5] += tensor_bytes(pp->state[k]);
    me[6] = tensor_bytes(pp->llow);
    return sum_f64(pp, pp->comm, out, KN_PP_STATS * pp->p, "pipeline rank statistics");
}

kn_status kn_pp_timeline(kn_pp *pp, const char *path, double *bubble) {
    if (!pp || !pp->events) return kn_error(KN_ERR_ARG, "kn_pp_timeline: NULL argument");
    int n = pp->nactions, p = pp->p, w = 6;
    double *mine = kn_calloc((size_t)n * w, sizeof *mine), *all = kn_calloc((size_t)n * w * p, sizeof *all);
    kn_status st = mine && all ? KN_OK : kn_error(KN_ERR_OOM, "kn_pp_timeline: out of memory");
    for (int i = 0; st == KN_OK && i < n; i++) {
        const kn_pp_record *e = &pp->events[i];
        double row[6] = {e->op, e->micro, e->chunk, e->t0, e->t_ready, e->t1};
        memcpy(mine + (size_t)i * w, row, sizeof row);
    }
    if (st == KN_OK) {
        /* every rank's rows: an all-reduce of zero-padded blocks works on both backends */
        memcpy(all + (size_t)pp->rank * n * w, mine, (size_t)n * w * sizeof *all);
        st = sum_f64(pp, pp->comm, all, n * w * p, "pipeline timeline");
    }
    double busy = 0, span = 0;
    for (int r = 0; st == KN_OK && r < p; r++)
        for (int i = 0; i < n; i++) {
            const double *row = all + ((size_t)r * n + i) * w;
            busy += row[5] - row[4];
            if (row[5] > span) span = row[5];
        }
    if (st == KN_OK && bubble) *bubble = span > 0 ? 1.0 - busy / (p * span) : 0;
    if (st == KN_OK && path && pp->rank == 0) {
        FILE *f = fopen(path, "w");
        if (!f) st = kn_error(KN_ERR_IO, "--timeline %s: cannot open for writing", path);
        if (st == KN_OK) {
            fprintf(f, "# kiln pipeline timeline: schedule %s, p %d, m %d, v %d (seconds from the step's start)\n",
                    kn_pp_kind_name(pp->cfg.schedule), p, pp->cfg.micro, pp->v);
            fprintf(f, "# rank\top\tmicro\tchunk\tt0\tt_ready\tt1\tidle (before t_ready, since the rank's last "
                    "action ended)\n");
            for (int r = 0; r < p; r++)
                for (int i = 0; i < n; i++) {
                    const double *row = all + ((size_t)r * n + i) * w, prev = i ? row[5 - w] : 0;
                    fprintf(f, "%d\t%s\t%d\t%d\t%.6f\t%.6f\t%.6f\t%.6f\n", r, row[0] == KN_PP_FWD ? "F" : "B",
                            (int)row[1], (int)row[2], row[3], row[4], row[5], row[4] - prev);
                }
            if (fclose(f) != 0) st = kn_error(KN_ERR_IO, "--timeline %s: write failed", path);
        }
    }
    kn_free(mine);
    kn_free(all);
    return st;
}
