/* pp_run.c — pipeline parallelism's step (kiln/mesh.h): the schedule walked through the
 * step runner, the stash between a micro-batch's forward and its backward, and the hooks
 * that sum, clip and update what this rank owns. pp_setup.c makes the state (the stages,
 * the rank's own slabs) and gathers it back; pp_timeline.c reports the last step.
 *
 * The step runner (kiln/step.h) keeps the step's frame: the loss averaged, the clip by
 * the global norm, the update. This file hands it hooks, and its `grads` hook takes the
 * micro-batches: every rank walks its action list from kn_pp_schedule (kiln/pipeline.h,
 * lab 11's unit); F(micro, chunk) loads the micro-batch's rows where the stage reads them
 * (idx on stage 0, targets on the last), takes a stash slot and runs the stage's forward
 * program with its stash outputs written straight into the slot's tensors; B(micro,
 * chunk) runs the backward program on that slot (then free for the next micro-batch) and
 * adds the parameters' gradients into the rank's gradient slab (sum over the
 * micro-batches, in micro-batch order as one process sums them). 1F1B keeps at most p
 * slots alive per rank, GPipe m: the peak is measured (stash_peak, stash_peak_bytes).
 * After the schedule: every send waited for; the tied wte's two gradients summed between
 * ranks 0 and p-1 (the embedding group), so both copies take the same update; the loss
 * (the last stage's) summed over the axis so every rank reports it. With a dp axis
 * (kn_pp_set_dp), each pipeline takes its share of the batch's micro-batches and its
 * gradients are summed with the other pipelines' before the clip (the runner then divides
 * by dp x m, so the step is the one process's on the whole batch). The norm counts every
 * parameter once: the last rank leaves out its wte copy, and with a tp axis a replicated
 * parameter is counted by tp rank 0 only while a sharded one's squares are summed over tp. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "kiln/device.h"
#include "kiln/mesh.h"
#include "kiln/passes.h"
#include "kiln/step.h"
#include "pp_impl.h"

/* ---------------------------------------------------------------- small helpers */

/* A blocking all-reduce (sum) of n doubles over c; NCCL moves device memory, so on a GPU
 * the values go through a device buffer. */
kn_status kn_pp_sum_f64(kn_pp *pp, kn_comm *c, double *v, int n, const char *what) {
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
    KN_TRY(kn_pp_drop_full(pp)); /* a gathered whole model is a copy: the local slabs train */
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
    KN_TRY(kn_pp_sum_f64(pp, pp->comm, &l, 1, "pipeline loss"));
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
    return pp->dp ? kn_pp_sum_f64(pp, pp->dp, v, 1, what) : KN_OK;
}

/* Is range k the last rank's copy of wte (counted by rank 0 in the norm)? */
static bool range_is_tied_copy(const kn_pp *pp, int k) {
    return pp->p > 1 && pp->rank == pp->p - 1 && pp->lo[k] == 0;
}

/* Does this rank count held parameter i in the norm (with a tp axis)? Not the last rank's
 * wte copy; a replicated parameter on tp rank 0 only (its tp partners hold the same). */
static bool counts_in_norm(const kn_pp *pp, int i) {
    if (!pp->owned[i] || (i == 0 && pp->p > 1 && pp->rank == pp->p - 1)) return false;
    return pp->place[i].kind != KN_PLACE_REPLICATE || pp->tp_rank == 0;
}

/* The gradients scaled, the norm over every stage (and every tp shard), the clip. */
static kn_status hook_clip(void *ctx, double scale, bool inject_inf, double *norm) {
    kn_pp *pp = ctx;
    kn_trainer *t = pp->tr;
    float *g = kn_tensor_data(pp->lgrad);
    double ss = 0;
    if (inject_inf && pp->held > 0) { /* the test hook (kiln train: on the ranks KILN_INJECT_INF_RANK names):
                                         * this rank's last gradient the norm counts (never in the last rank's
                                         * copy of wte, nor, with tp, a replicated one on tp rank > 0) */
        float inf = INFINITY, *at = g + pp->held - 1;
        for (int i = pp->tr->model->p.count - 1; pp->tp && i >= 0; i--)
            if (counts_in_norm(pp, i) && pp->linfo[i].numel > 0) {
                at = (float *)kn_tensor_data(pp->lgview[i]) + pp->linfo[i].numel - 1;
                break;
            }
        KN_TRY(kn_device_memcpy(t->dev, at, KN_CPU, &inf, sizeof inf));
    }
    for (int k = 0; k < pp->nranges; k++) {
        double nk;
        KN_TRY(kn_device_scale(t->dev, g + pp->loff[k], pp->hi[k] - pp->lo[k], scale));
        if (pp->tp) continue;
        KN_TRY(kn_device_clip_grad_norm(t->dev, g + pp->loff[k], pp->hi[k] - pp->lo[k], 0.0, &nk));
        if (!range_is_tied_copy(pp, k)) ss += nk * nk;
    }
    for (int i = 0; pp->tp && i < pp->tr->model->p.count; i++) {
        double ni;
        if (!counts_in_norm(pp, i)) continue;
        KN_TRY(kn_device_clip_grad_norm(t->dev, kn_tensor_data(pp->lgview[i]), pp->linfo[i].numel, 0.0, &ni));
        ss += ni * ni;
    }
    KN_TRY(kn_pp_sum_f64(pp, pp->comm, &ss, 1, "gradient norm"));
    if (pp->tp) KN_TRY(kn_pp_sum_f64(pp, pp->tp, &ss, 1, "gradient norm over tp"));
    *norm = sqrt(ss);
    if (t->clip > 0 && *norm > t->clip)
        for (int k = 0; k < pp->nranges; k++)
            KN_TRY(kn_device_scale(t->dev, g + pp->loff[k], pp->hi[k] - pp->lo[k], t->clip / (*norm + 1e-6)));
    return KN_OK;
}

/* ZeRO-1: every dp rank's updated part of the local parameter slab gathered, so each
 * replica of this rank's stages holds the whole slab again (collective over dp). */
static kn_status zero1_gather(kn_pp *pp) {
    int64_t *counts = NULL;
    kn_status st = kn_pp_zero1_counts(pp, &counts);
    if (st == KN_OK)
        st = kn_zero1_gather(pp->dp, pp->tr->dev, kn_tensor_data(pp->lparam), pp->zlo, pp->zhi, counts);
    kn_free(counts);
    return st;
}

static kn_status hook_update(void *ctx, double lr) {
    kn_pp *pp = ctx;
    kn_trainer *t = pp->tr;
    float *param = kn_tensor_data(pp->lparam), *grad = kn_tensor_data(pp->lgrad);
    for (int k = 0; k < pp->nranges; k++) { /* ZeRO-1: each range's part in this dp rank's [zlo, zhi) */
        int64_t at = pp->loff[k] + (pp->zero1 ? pp->zoff[k] : 0);
        KN_TRY(kn_device_optim_step(t->dev, &pp->opt[k], param + at, grad + at, kn_tensor_data(pp->state[k]), lr));
    }
    if (pp->zero1) KN_TRY(zero1_gather(pp));
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
    return kn_pp_drop_full(pp); /* the trainer's compile made its low copies again */
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


void kn_pp_step_hooks(kn_pp *pp, kn_step_comm *sc) {
    *sc = (kn_step_comm){.ctx = pp, .rank = 0, .ranks = 1, .pass = NULL, .coll = pp->sends->coll[0],
                         .compiled = hook_compiled, .micro_begin = hook_micro_begin, .micro_end = hook_micro_end,
                         .sum = hook_sum, .clip = hook_clip, .update = hook_update, .grads = hook_grads};
}
