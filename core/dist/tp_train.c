/* tp_train.c — tensor-parallel training (kiln/mesh.h, kn_tp): a trainer's model cut into
 * this rank's Megatron shards, its joint graph made the rank's local graph by the
 * placement pass, and the step taken by the trainer's step runner (kiln/step.h) through
 * hooks, as pipeline parallelism's is: the `grads` hook runs the local program on this
 * rank's micro-batches (their gradients summed in the local slab, then summed over the dp
 * axis); the runner averages the loss, scales the gradients by 1 / (dp x micro-batches x
 * loss scale), calls the clip hook (the global norm over the shards), decides a loss-scale
 * overflow once for the whole mesh (the norm is summed over tp, the flag over dp), and
 * calls the update hook (the local slab, or ZeRO-1's range of it). The one-process trainer
 * stays as it is: it still owns the full model, which the run starts from (a fresh one or
 * a checkpoint's: kn_tp_new scatters the parameters and the optimizer state into the
 * shards) and kn_tp_gather_state refills (evaluation, checkpoints and the sample read it).
 *
 * Why the one-process update is reproduced: the loss is R on every rank; a parameter's
 * gradient is its placement's part of the full gradient (the pass ends each gradient in
 * its parameter's placement); AdamW and SGD update elementwise; weight decay covers the
 * first n_decay floats, and the local slab keeps the model's order (matrices first). Only
 * the clip couples parameters: the squares of a replicated gradient are counted once (rank
 * 0's), a sharded one's summed over the ranks. fp16: the local graph is the trainer's joint
 * graph, which differentiates loss x the 0-d input "loss_scale" (Replicate on every rank),
 * bound to the trainer's scale tensor. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/device.h"
#include "kiln/mesh.h"
#include "kiln/step.h"

void kn_tp_free(kn_tp *t) {
    if (!t) return;
    if (t->tr && t->tr->step.has_comm && t->tr->step.comm.ctx == t) {
        /* the trainer's runner forgets the hooks (as kn_pp_free); a step of the trainer alone
         * then runs its own program again */
        t->tr->step.has_comm = false;
        t->tr->step.micro = 1;
        if (t->tr->prog) kn_program_set_collectives(t->tr->prog, NULL);
    }
    kn_program_free(t->prog);
    kn_place_result_free(&t->placed);
    for (int i = 0; t->pviews && i < t->np; i++) kn_tensor_free(t->pviews[i]);
    for (int i = 0; t->gviews && i < t->np; i++) kn_tensor_free(t->gviews[i]);
    free(t->pviews), free(t->gviews), free(t->place), free(t->loff), free(t->lnum);
    kn_tensor_free(t->params), kn_tensor_free(t->grads), kn_tensor_free(t->state), kn_tensor_free(t->acc);
    kn_tensor_free(t->x), kn_tensor_free(t->y);
    kn_optim_free(&t->opt);
    memset(t, 0, sizeof *t);
}

/* A view of slab [off, off + numel) shaped like shape. */
static kn_status slab_view(const kn_tensor *slab, int64_t off, int ndim, const int64_t *shape, kn_tensor **out) {
    kn_tensor *s = NULL;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    kn_status st = kn_tensor_slice(&s, slab, 0, off, off + n, 1);
    if (st == KN_OK) st = kn_tensor_view(out, s, ndim, shape);
    kn_tensor_free(s);
    return st;
}

/* Megatron's placement (kn_place_gpt_param), but the token embedding replicated when the
 * vocabulary does not split: a tokenizer's vocabulary is what it is. */
kn_status kn_tp_gpt_param(void *ctx, const char *name, kn_placement *out) {
    const kn_tp_split *s = ctx;
    if (!s || !name || !out) return kn_error(KN_ERR_ARG, "kn_tp_gpt_param: NULL argument");
    KN_TRY(kn_place_gpt_param(name, out));
    if (!strcmp(name, "wte.weight") && (s->parts < 1 || s->vocab % s->parts != 0)) *out = kn_place_replicate();
    return KN_OK;
}

/* The step runner's hooks (below). */
static kn_status hook_grads(void *ctx, const int32_t *x, const int32_t *y, double *lsum);
static kn_status hook_micro_begin(void *ctx, int m, bool last);
static kn_status hook_micro_end(void *ctx, int m, kn_status run);
static kn_status hook_sum(void *ctx, double *v, const char *what);
static kn_status hook_clip(void *ctx, double scale, bool inject_inf, double *norm);
static kn_status hook_update(void *ctx, double lr);
static kn_status hook_compiled(void *ctx, kn_program *step);

kn_status kn_tp_new(kn_tp *t, kn_comm *comm, kn_trainer *tr, unsigned flags) {
    if (!t || !comm || !tr || !tr->model || !tr->joint) return kn_error(KN_ERR_ARG, "kn_tp_new: NULL argument");
    memset(t, 0, sizeof *t);
    t->comm = comm, t->tr = tr, t->parts = comm->size, t->rank = comm->rank;
    const kn_params *p = &tr->model->p;
    kn_device dev = tr->dev;
    kn_status st;
    t->np = p->count;
    t->place = calloc((size_t)p->count, sizeof *t->place);
    t->loff = calloc((size_t)p->count, sizeof *t->loff);
    t->lnum = calloc((size_t)p->count, sizeof *t->lnum);
    t->pviews = calloc((size_t)p->count, sizeof *t->pviews);
    t->gviews = calloc((size_t)p->count, sizeof *t->gviews);
    if (!t->place || !t->loff || !t->lnum || !t->pviews || !t->gviews) {
        kn_tp_free(t);
        return kn_error(KN_ERR_OOM, "kn_tp_new: out of memory");
    }
    t->split = (kn_tp_split){tr->model->cfg.vocab, t->parts};
    kn_place_opts po = {.mesh = KN_MESH_TP, .parts = t->parts, .rank = t->rank, .param = kn_tp_gpt_param,
                        .param_ctx = &t->split, .flags = flags};
    if ((st = kn_place_graph(tr->joint, &po, &t->placed)) != KN_OK) goto fail;
    /* the local slab: the model's order, each parameter its local size */
    int64_t local[KN_MAX_DIMS];
    for (int i = 0; i < p->count; i++) {
        const kn_param_info *pi = &p->info[i];
        if ((st = kn_tp_gpt_param(&t->split, pi->name, &t->place[i])) != KN_OK) goto fail;
        if ((st = kn_place_local_shape(pi->ndim, pi->shape, t->place[i], t->parts, local)) != KN_OK) goto fail;
        int64_t n = 1;
        for (int d = 0; d < pi->ndim; d++) n *= local[d];
        t->loff[i] = t->n, t->lnum[i] = n;
        t->n += n;
        if (pi->offset < p->n_decay) t->n_decay = t->n;
    }
    if ((st = kn_optim_init(&t->opt, &tr->opt.cfg, t->n, t->n_decay)) != KN_OK) goto fail;
    /* the parameters and the optimizer state (zeros in a fresh run, a checkpoint's on
     * --resume: its state slabs, m and v, are laid out like the parameters) cut from the
     * trainer's host copies, which are current until the first step */
    int64_t comps = t->opt.state_len / (t->n > 0 ? t->n : 1), sl = t->opt.state_len > 0 ? t->opt.state_len : 1;
    if (tr->opt.state_len != comps * p->n || (comps > 0 && !tr->opt.state)) {
        st = kn_error(KN_ERR_ARG, "kn_tp_new: the trainer's optimizer state (%lld floats) is not %lld slabs of its "
                      "%lld parameters", (long long)tr->opt.state_len, (long long)comps, (long long)p->n);
        goto fail;
    }
    t->opt.step = tr->opt.step;
    float *host = malloc((size_t)(t->n + sl) * sizeof *host);
    if (!host) { st = kn_error(KN_ERR_OOM, "kn_tp_new: out of memory"); goto fail; }
    for (int64_t c = -1; c < comps && st == KN_OK; c++) /* c = -1: the parameters; then each state slab */
        for (int i = 0; i < p->count && st == KN_OK; i++) {
            const kn_param_info *pi = &p->info[i];
            const float *src = c < 0 ? p->data : tr->opt.state + c * p->n;
            st = kn_place_scatter(src + pi->offset, pi->ndim, pi->shape, t->place[i], t->parts, t->rank,
                                  host + (c < 0 ? 0 : t->n + c * t->n) + t->loff[i]);
        }
    if (st == KN_OK) st = kn_tensor_empty_on(&t->params, dev, KN_DT_F32, 1, &t->n);
    if (st == KN_OK) st = kn_tensor_empty_on(&t->grads, dev, KN_DT_F32, 1, &t->n);
    if (st == KN_OK) st = kn_tensor_empty_on(&t->state, dev, KN_DT_F32, 1, &sl);
    if (st == KN_OK) st = kn_device_memcpy(dev, kn_tensor_data(t->params), KN_CPU, host, (size_t)t->n * sizeof *host);
    if (st == KN_OK)
        st = kn_device_memcpy(dev, kn_tensor_data(t->state), KN_CPU, host + t->n, (size_t)sl * sizeof *host);
    free(host);
    if (st != KN_OK) goto fail;
    for (int i = 0; i < p->count && st == KN_OK; i++) {
        const kn_param_info *pi = &p->info[i];
        kn_place_local_shape(pi->ndim, pi->shape, t->place[i], t->parts, local);
        st = slab_view(t->params, t->loff[i], pi->ndim, local, &t->pviews[i]);
        if (st == KN_OK) st = slab_view(t->grads, t->loff[i], pi->ndim, local, &t->gviews[i]);
    }
    if (st != KN_OK) goto fail;
    /* the local graph, compiled as the trainer compiles its step */
    kn_program_opts o = {.device = dev, .passes = tr->passes,
                         .mode = tr->compiled ? KN_PROGRAM_COMPILED : KN_PROGRAM_NODES, .cuda_emu = tr->cuda_emu};
    if ((st = kn_program_compile(&t->prog, t->placed.local, &o)) != KN_OK) goto fail;
    t->comms.axes[KN_MESH_TP] = comm;
    kn_tp_collectives(&t->comms, &t->coll);
    kn_program_set_collectives(t->prog, &t->coll);
    int64_t bt[2] = {tr->B, tr->T};
    if ((st = kn_tensor_empty_on(&t->x, dev, KN_DT_I32, 2, bt)) != KN_OK) goto fail;
    if ((st = kn_tensor_empty_on(&t->y, dev, KN_DT_I32, 2, bt)) != KN_OK) goto fail;
    if ((st = kn_program_bind(t->prog, "idx", t->x)) != KN_OK) goto fail;
    if ((st = kn_program_bind(t->prog, "targets", t->y)) != KN_OK) goto fail;
    t->scaled = tr->scale_in != NULL; /* fp16: the joint graph reads the scale */
    if (t->scaled && (st = kn_program_bind(t->prog, "loss_scale", tr->scale_in)) != KN_OK) goto fail;
    /* the graph's parameters (and gradients, output 1 + k) in node order = the slab order */
    int k = 0;
    const kn_graph *lg = t->placed.local;
    for (int i = 0; i < lg->nnodes && st == KN_OK; i++) {
        if (lg->nodes[i].op != KN_OP_PARAM) continue;
        int mi = kn_gpt_find(tr->model, lg->nodes[i].attrs.name);
        if (mi < 0) { st = kn_error(KN_ERR_ARG, "kn_tp_new: parameter %s is not the model's", lg->nodes[i].attrs.name); break; }
        st = kn_program_bind(t->prog, lg->nodes[i].attrs.name, t->pviews[mi]);
        if (st == KN_OK) st = kn_program_bind_output(t->prog, 1 + k, t->gviews[mi]);
        k++;
    }
    if (st != KN_OK) goto fail;
    /* the step: the trainer's runner with this rank's hooks (one data-parallel rank, one
     * micro-batch until kn_tp_set_dp and kn_tp_set_accum say otherwise) */
    kn_step_comm sc = {.ctx = t, .rank = 0, .ranks = 1, .pass = NULL, .coll = t->coll, .compiled = hook_compiled,
                       .micro_begin = hook_micro_begin, .micro_end = hook_micro_end, .sum = hook_sum,
                       .clip = hook_clip, .update = hook_update, .grads = hook_grads};
    if ((st = kn_step_set_comm(tr, &sc, 1)) != KN_OK) goto fail;
    return KN_OK;
fail:
    kn_tp_free(t);
    return st;
}

/* Host values over a communicator whose backend may want device buffers (NCCL): staged
 * through the trainer's device. */
static kn_status host_collective(kn_comm *c, kn_device dev, bool gather, void *send, void *recv, int64_t n,
                                 kn_dtype dt) {
    int64_t *counts = NULL;
    if (gather) {
        if (!(counts = calloc((size_t)c->size, sizeof *counts))) return kn_error(KN_ERR_OOM, "kn_tp: out of memory");
        for (int q = 0; q < c->size; q++) counts[q] = n;
    }
    kn_status st;
    if (c->be->type == KN_COMM_MPI) {
        st = gather ? kn_comm_all_gather(c, send, recv, counts, dt) : kn_comm_all_reduce(c, send, recv, n, dt);
        free(counts);
        return st;
    }
    size_t es = kn_dtype_size(dt);
    int64_t nr = gather ? n * c->size : n;
    kn_tensor *a = NULL, *b = NULL;
    st = kn_tensor_empty_on(&a, dev, dt, 1, &n);
    if (st == KN_OK) st = kn_tensor_empty_on(&b, dev, dt, 1, &nr);
    if (st == KN_OK) st = kn_device_memcpy(dev, kn_tensor_data(a), KN_CPU, send, (size_t)n * es);
    if (st == KN_OK)
        st = gather ? kn_comm_all_gather(c, kn_tensor_data(a), kn_tensor_data(b), counts, dt)
                    : kn_comm_all_reduce(c, kn_tensor_data(a), kn_tensor_data(b), n, dt);
    if (st == KN_OK) st = kn_device_memcpy(KN_CPU, recv, dev, kn_tensor_data(b), (size_t)nr * es);
    kn_tensor_free(a), kn_tensor_free(b);
    free(counts);
    return st;
}

kn_status kn_tp_set_dp(kn_tp *t, kn_comm *dp) {
    if (!t || !t->prog) return kn_error(KN_ERR_ARG, "kn_tp_set_dp: no tensor-parallel state");
    if (t->zero1) return kn_error(KN_ERR_ARG, "kn_tp_set_dp: ZeRO-1 is on: set the dp axis before kn_tp_set_zero1");
    kn_step_runner *r = &t->tr->step;
    if (!r->has_comm || r->comm.ctx != t)
        return kn_error(KN_ERR_ARG, "kn_tp_set_dp: the trainer's step runner has another communication");
    t->dp = dp && dp->size > 1 ? dp : NULL;
    r->comm.rank = t->dp ? t->dp->rank : 0; /* the runner's rows: dp x micro-batches x B */
    r->comm.ranks = t->dp ? t->dp->size : 1;
    return KN_OK;
}

kn_status kn_tp_set_accum(kn_tp *t, int accum) {
    if (!t || !t->prog) return kn_error(KN_ERR_ARG, "kn_tp_set_accum: no tensor-parallel state");
    if (accum < 1) return kn_error(KN_ERR_ARG, "kn_tp_set_accum: --accum %d: need >= 1", accum);
    kn_step_runner *r = &t->tr->step;
    if (!r->has_comm || r->comm.ctx != t)
        return kn_error(KN_ERR_ARG, "kn_tp_set_accum: the trainer's step runner has another communication");
    kn_tensor_free(t->acc);
    t->acc = NULL;
    t->accum = accum;
    r->micro = accum; /* the runner averages the loss over them and scales the gradients by 1/accum */
    return accum > 1 ? kn_tensor_empty_on(&t->acc, t->tr->dev, KN_DT_F32, 1, &t->n) : KN_OK;
}

kn_status kn_tp_set_zero1(kn_tp *t) {
    if (!t || !t->prog) return kn_error(KN_ERR_ARG, "kn_tp_set_zero1: no tensor-parallel state");
    if (!t->dp) return kn_error(KN_ERR_ARG, "kn_tp_set_zero1: ZeRO-1 shards the optimizer state over the dp axis: "
                                "the mesh has none (kn_tp_set_dp first)");
    if (t->zero1) return KN_OK;
    int R = t->dp->size, r = t->dp->rank;
    int64_t lo = t->n * r / R, hi = t->n * (r + 1) / R, len = hi - lo, nd = t->n_decay - lo;
    nd = nd < 0 ? 0 : nd > len ? len : nd;
    kn_device dev = t->tr->dev;
    kn_optim o;
    KN_TRY(kn_optim_init(&o, &t->tr->opt.cfg, len, nd));
    int64_t sl = o.state_len > 0 ? o.state_len : 1, comps = len > 0 ? o.state_len / len : 0;
    kn_tensor *st = NULL;
    kn_status s_ = kn_tensor_empty_on(&st, dev, KN_DT_F32, 1, &sl);
    /* this range of every state slab of the whole local state (a checkpoint's on --resume) */
    for (int64_t c = 0; s_ == KN_OK && c < comps; c++)
        s_ = kn_device_memcpy(dev, (float *)kn_tensor_data(st) + c * len, dev,
                              (float *)kn_tensor_data(t->state) + c * t->n + lo, (size_t)len * sizeof(float));
    if (s_ != KN_OK) {
        kn_tensor_free(st);
        kn_optim_free(&o);
        return s_;
    }
    o.step = t->opt.step;
    kn_optim_free(&t->opt);
    kn_tensor_free(t->state);
    t->opt = o;
    t->state = st;
    t->zero1 = true;
    t->zlo = lo;
    t->zhi = hi;
    return KN_OK;
}

/* The dp axis's split of n local floats: counts[q] = rank q's share (kn_tp_set_zero1's). */
static kn_status zero1_counts(const kn_tp *t, int64_t n, int64_t **out) {
    int R = t->dp->size;
    int64_t *c = calloc((size_t)R, sizeof *c);
    if (!c) return kn_error(KN_ERR_OOM, "kn_tp: out of memory");
    for (int q = 0; q < R; q++) c[q] = n * (q + 1) / R - n * q / R;
    *out = c;
    return KN_OK;
}

/* dst += src over n floats on dev (the add node's kernel, the CPU's or the GPU's). */
static kn_status add_slab(kn_device dev, kn_tensor *dst, const kn_tensor *src, int64_t n) {
    kn_node nd = {.op = KN_OP_ADD, .nin = 2, .attrs = kn_attrs_default()};
    nd.type.dtype = KN_DT_F32;
    nd.type.ndim = 1;
    nd.type.shape[0] = n;
    const kn_tensor *in[2] = {dst, src};
    kn_tensor *c = NULL;
    kn_status st = kn_node_eval(&nd, in, &c);
    if (st == KN_OK)
        st = kn_device_memcpy(dev, kn_tensor_data(dst), c->storage->device, kn_tensor_data(c), (size_t)n * sizeof(float));
    kn_tensor_free(c);
    return st;
}

/* ---------------------------------------------------------------- the runner's hooks */

/* This dp group's micro-batches (K of the trainer's B rows each: rows [(g K + k) B, ...) of
 * the global batch), their gradients summed in the local slab, then summed over dp; *lsum
 * the K losses summed (each is R: the same on every tp rank). */
static kn_status hook_grads(void *ctx, const int32_t *x, const int32_t *y, double *lsum) {
    kn_tp *t = ctx;
    kn_device dev = t->tr->dev;
    int K = t->accum > 1 ? t->accum : 1;
    size_t n = (size_t)(t->tr->B * t->tr->T);
    *lsum = 0;
    for (int k = 0; k < K; k++) {
        size_t off = ((size_t)(t->dp ? t->dp->rank : 0) * (size_t)K + (size_t)k) * n;
        double l;
        KN_TRY(kn_device_memcpy(dev, kn_tensor_data(t->x), KN_CPU, x + off, n * sizeof *x));
        KN_TRY(kn_device_memcpy(dev, kn_tensor_data(t->y), KN_CPU, y + off, n * sizeof *y));
        KN_TRY(kn_program_run(t->prog));
        KN_TRY(kn_tensor_item_any(kn_program_output(t->prog, 0), &l));
        *lsum += l;
        if (K == 1) break;
        /* the program writes each micro-batch's gradients into the slab: summed in acc, the
         * last one's added into the slab */
        if (k == 0)
            KN_TRY(kn_device_memcpy(dev, kn_tensor_data(t->acc), dev, kn_tensor_data(t->grads),
                                    (size_t)t->n * sizeof(float)));
        else if (k < K - 1)
            KN_TRY(add_slab(dev, t->acc, t->grads, t->n));
        else
            KN_TRY(add_slab(dev, t->grads, t->acc, t->n));
    }
    if (t->dp) { /* the dp groups' sums summed: the runner divides by dp x K */
        float *g = kn_tensor_data(t->grads);
        KN_TRY(kn_comm_all_reduce(t->dp, g, g, t->n, KN_DT_F32));
    }
    return KN_OK;
}

static kn_status hook_micro_begin(void *ctx, int m, bool last) {
    (void)ctx, (void)m, (void)last;
    return KN_OK;
}

static kn_status hook_micro_end(void *ctx, int m, kn_status run) {
    (void)ctx, (void)m;
    return run;
}

/* The runner's sums (the loss, the overflow flag) are over the dp groups: the tp ranks of
 * a group hold the same loss already. */
static kn_status hook_sum(void *ctx, double *v, const char *what) {
    kn_tp *t = ctx;
    (void)what;
    return t->dp ? host_collective(t->dp, t->tr->dev, false, v, v, 1, KN_DT_F64) : KN_OK;
}

/* Does this rank count parameter i in the norm (a replicated one on rank 0 only)? */
static bool counts_in_norm(const kn_tp *t, int i) {
    return t->place[i].kind != KN_PLACE_REPLICATE || t->rank == 0;
}

/* The gradients scaled (1 / (dp K S)), the global norm (replicated gradients once, rank
 * 0's; sharded ones' squares summed over tp: an inf anywhere in the group makes it inf on
 * every rank), the clip. inject_inf plants +inf in the first gradient this rank counts. */
static kn_status hook_clip(void *ctx, double scale, bool inject_inf, double *norm) {
    kn_tp *t = ctx;
    kn_device dev = t->tr->dev;
    float *grad = kn_tensor_data(t->grads);
    KN_TRY(kn_device_scale(dev, grad, t->n, scale));
    for (int i = 0; inject_inf && i < t->np; i++)
        if (counts_in_norm(t, i) && t->lnum[i] > 0) {
            float inf = INFINITY;
            KN_TRY(kn_device_memcpy(dev, grad + t->loff[i], KN_CPU, &inf, sizeof inf));
            break;
        }
    double sq = 0;
    for (int i = 0; i < t->np; i++) {
        if (!counts_in_norm(t, i)) continue;
        double n = 0;
        KN_TRY(kn_device_clip_grad_norm(dev, grad + t->loff[i], t->lnum[i], 0, &n));
        sq += n * n;
    }
    KN_TRY(host_collective(t->comm, dev, false, &sq, &sq, 1, KN_DT_F64));
    *norm = sqrt(sq);
    if (t->tr->clip > 0 && *norm > t->tr->clip) KN_TRY(kn_device_scale(dev, grad, t->n, t->tr->clip / (*norm + 1e-6)));
    return KN_OK;
}

/* ZeRO-1's update: the optimizer on this dp rank's range of the local slab, then every dp
 * rank's range gathered (each dp rank of a tp shard holds the same local slab again). */
static kn_status zero1_update(kn_tp *t, double lr) {
    kn_device dev = t->tr->dev;
    float *param = kn_tensor_data(t->params), *grad = kn_tensor_data(t->grads);
    int64_t *counts = NULL;
    KN_TRY(kn_device_optim_step(dev, &t->opt, param + t->zlo, grad + t->zlo, kn_tensor_data(t->state), lr));
    kn_status st = zero1_counts(t, t->n, &counts);
    if (st == KN_OK) st = kn_zero1_gather(t->dp, dev, param, t->zlo, t->zhi, counts);
    free(counts);
    return st;
}

static kn_status hook_update(void *ctx, double lr) {
    kn_tp *t = ctx;
    KN_TRY(t->zero1 ? zero1_update(t, lr)
                    : kn_device_optim_step(t->tr->dev, &t->opt, kn_tensor_data(t->params), kn_tensor_data(t->grads),
                                           kn_tensor_data(t->state), lr));
    t->tr->opt.step = t->opt.step; /* the trainer's count (its messages, the checkpoint) follows */
    return KN_OK;
}

/* The trainer's step was compiled again (kn_step_set_comm, a mode): the local program was
 * placed from the joint graph as it was at kn_tp_new, with or without the loss scale. */
static kn_status hook_compiled(void *ctx, kn_program *step) {
    kn_tp *t = ctx;
    (void)step;
    if ((t->tr->scale_in != NULL) != t->scaled)
        return kn_error(KN_ERR_UNSUPPORTED, "kn_tp: the loss scale was turned %s after kn_tp_new (the local graph is "
                        "placed with it or without): set it before", t->scaled ? "off" : "on");
    return KN_OK;
}

kn_status kn_tp_step(kn_tp *t, const int32_t *x, const int32_t *y, double lr, double *loss, double *gnorm) {
    if (!t || !t->prog || !x || !y || !loss) return kn_error(KN_ERR_ARG, "kn_tp_step: NULL argument");
    kn_trainer *tr = t->tr;
    if (!tr->step.has_comm || tr->step.comm.ctx != t)
        return kn_error(KN_ERR_ARG, "kn_tp_step: the trainer's step runner has another communication");
    int dp = t->dp ? t->dp->size : 1, K = t->accum > 1 ? t->accum : 1;
    return kn_step_run(tr, x, y, tr->B * K * dp, lr, loss, gnorm);
}

/* Rebuild the full slab `full` (laid out like the model's) from every rank's local slab. */
static kn_status gather_slab(kn_tp *t, const float *local, float *full) {
    const kn_params *p = &t->tr->model->p;
    int N = t->parts;
    float *all = malloc((size_t)(t->n * N) * sizeof *all);
    kn_status st = all ? KN_OK : kn_error(KN_ERR_OOM, "kn_tp_gather_state: out of memory");
    if (st == KN_OK) st = host_collective(t->comm, t->tr->dev, true, (void *)local, all, t->n, KN_DT_F32);
    for (int q = 0; q < N && st == KN_OK; q++)
        for (int i = 0; i < p->count && st == KN_OK; i++)
            st = kn_place_gather(all + q * t->n + t->loff[i], p->info[i].ndim, p->info[i].shape, t->place[i], N, q,
                                 full + p->info[i].offset);
    free(all);
    return st;
}

kn_status kn_tp_gather_state(kn_tp *t) {
    if (!t || !t->prog) return kn_error(KN_ERR_ARG, "kn_tp_gather_state: no tensor-parallel state");
    kn_trainer *tr = t->tr;
    kn_params *p = &tr->model->p;
    kn_device dev = tr->dev;
    /* ZeRO-1: every dp rank's range of each state slab first (the whole local state) */
    int64_t len = t->zero1 ? t->zhi - t->zlo : t->n, comps = len > 0 ? t->opt.state_len / len : 0, sl = comps * t->n;
    kn_tensor *zs = NULL;
    int64_t *counts = NULL, sl1 = sl > 0 ? sl : 1;
    kn_status st = t->zero1 ? zero1_counts(t, t->n, &counts) : KN_OK;
    if (st == KN_OK && t->zero1) st = kn_tensor_empty_on(&zs, dev, KN_DT_F32, 1, &sl1);
    for (int64_t c = 0; st == KN_OK && t->zero1 && c < comps; c++)
        st = kn_comm_all_gather(t->dp, (float *)kn_tensor_data(t->state) + c * len, (float *)kn_tensor_data(zs) + c * t->n,
                                counts, KN_DT_F32);
    free(counts);
    float *host = malloc((size_t)(t->n + sl) * sizeof *host);
    float *full = malloc((size_t)p->n * sizeof *full);
    if (st == KN_OK && (!host || !full)) st = kn_error(KN_ERR_OOM, "kn_tp_gather_state: out of memory");
    if (st == KN_OK) st = kn_device_memcpy(KN_CPU, host, dev, kn_tensor_data(t->params), (size_t)t->n * sizeof *host);
    if (st == KN_OK)
        st = kn_device_memcpy(KN_CPU, host + t->n, dev, kn_tensor_data(zs ? zs : t->state), (size_t)sl * sizeof *host);
    kn_tensor_free(zs);
    if (st == KN_OK) st = gather_slab(t, host, p->data);
    /* the optimizer state: one (SGD) or two (AdamW: m, v) slabs of the parameters' layout */
    for (int64_t s = 0; st == KN_OK && s * t->n < sl; s++) {
        st = gather_slab(t, host + t->n + s * t->n, full);
        if (st == KN_OK) memcpy(tr->opt.state + s * p->n, full, (size_t)p->n * sizeof *full);
    }
    if (st == KN_OK) tr->opt.step = t->opt.step;
    /* a trainer on a device reads its own copies: bring them up to date */
    if (st == KN_OK && dev.type != KN_DEVICE_CPU) {
        st = kn_device_memcpy(dev, kn_tensor_data(tr->params), KN_CPU, p->data, (size_t)p->n * sizeof *full);
        if (st == KN_OK && tr->state)
            st = kn_device_memcpy(dev, kn_tensor_data(tr->state), KN_CPU, tr->opt.state,
                                  (size_t)tr->opt.state_len * sizeof *full);
    }
    if (st == KN_OK) tr->low_fresh = false;
    free(host), free(full);
    return st;
}
