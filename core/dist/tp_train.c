/* tp_train.c — tensor-parallel training (kiln/dist.h, kn_tp): a trainer's model cut into
 * this rank's Megatron shards, its joint graph made the rank's local graph by the
 * placement pass, and the step around it (global-norm clip over the shards, the update of
 * the local slab). The one-process trainer stays as it is: it still owns the full model,
 * which the run starts from and kn_tp_gather_state refills (evaluation, checkpoints and
 * the sample read it), so nothing of the existing strategies changes.
 *
 * Why the one-process update is reproduced: the loss is R on every rank; a parameter's
 * gradient is its placement's part of the full gradient (the pass ends each gradient in
 * its parameter's placement); AdamW and SGD update elementwise; weight decay covers the
 * first n_decay floats, and the local slab keeps the model's order (matrices first). Only
 * the clip couples parameters: the squares of a replicated gradient are counted once (rank
 * 0's), a sharded one's summed over the ranks. With --accum (kn_tp_set_accum) the program
 * runs once per micro-batch and the gradients are summed in a local slab of their own. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/device.h"
#include "kiln/dist.h"

void kn_tp_free(kn_tp *t) {
    if (!t) return;
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
    float *host = malloc((size_t)t->n * sizeof *host);
    if (!host) { st = kn_error(KN_ERR_OOM, "kn_tp_new: out of memory"); goto fail; }
    for (int i = 0; i < p->count && st == KN_OK; i++) {
        const kn_param_info *pi = &p->info[i];
        st = kn_place_scatter(p->data + pi->offset, pi->ndim, pi->shape, t->place[i], t->parts, t->rank,
                              host + t->loff[i]);
    }
    if (st == KN_OK) st = kn_tensor_empty_on(&t->params, dev, KN_DT_F32, 1, &t->n);
    if (st == KN_OK) st = kn_tensor_empty_on(&t->grads, dev, KN_DT_F32, 1, &t->n);
    if (st == KN_OK) st = kn_device_memcpy(dev, kn_tensor_data(t->params), KN_CPU, host, (size_t)t->n * sizeof *host);
    free(host);
    if (st != KN_OK) goto fail;
    if ((st = kn_optim_init(&t->opt, &tr->opt.cfg, t->n, t->n_decay)) != KN_OK) goto fail;
    if ((st = kn_tensor_zeros(&t->state, KN_DT_F32, 1, &t->opt.state_len)) != KN_OK) goto fail;
    if (dev.type != KN_DEVICE_CPU) {
        kn_tensor *d = NULL;
        if ((st = kn_tensor_to(&d, t->state, dev)) != KN_OK) goto fail;
        kn_tensor_free(t->state);
        t->state = d;
    }
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
    t->dp = dp && dp->size > 1 ? dp : NULL;
    return KN_OK;
}

kn_status kn_tp_set_accum(kn_tp *t, int accum) {
    if (!t || !t->prog) return kn_error(KN_ERR_ARG, "kn_tp_set_accum: no tensor-parallel state");
    if (accum < 1) return kn_error(KN_ERR_ARG, "kn_tp_set_accum: --accum %d: need >= 1", accum);
    kn_tensor_free(t->acc);
    t->acc = NULL;
    t->accum = accum;
    return accum > 1 ? kn_tensor_empty_on(&t->acc, t->tr->dev, KN_DT_F32, 1, &t->n) : KN_OK;
}

kn_status kn_tp_set_zero1(kn_tp *t) {
    if (!t || !t->prog) return kn_error(KN_ERR_ARG, "kn_tp_set_zero1: no tensor-parallel state");
    if (!t->dp) return kn_error(KN_ERR_ARG, "kn_tp_set_zero1: ZeRO-1 shards the optimizer state over the dp axis: "
                                "the mesh has none (kn_tp_set_dp first)");
    int R = t->dp->size, r = t->dp->rank;
    int64_t lo = t->n * r / R, hi = t->n * (r + 1) / R, len = hi - lo, nd = t->n_decay - lo;
    nd = nd < 0 ? 0 : nd > len ? len : nd;
    kn_optim o;
    KN_TRY(kn_optim_init(&o, &t->tr->opt.cfg, len, nd));
    int64_t sl = o.state_len > 0 ? o.state_len : 1;
    kn_tensor *st = NULL, *d = NULL;
    kn_status s_ = kn_tensor_zeros(&st, KN_DT_F32, 1, &sl);
    if (s_ == KN_OK && t->tr->dev.type != KN_DEVICE_CPU) {
        s_ = kn_tensor_to(&d, st, t->tr->dev);
        kn_tensor_free(st);
        st = d;
    }
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

/* ZeRO-1's update: the optimizer on this dp rank's range of the local slab, then every dp
 * rank's range gathered (each dp rank of a tp shard holds the same local slab again). */
static kn_status zero1_update(kn_tp *t, double lr) {
    kn_device dev = t->tr->dev;
    float *param = kn_tensor_data(t->params), *grad = kn_tensor_data(t->grads);
    int64_t len = t->zhi - t->zlo, *counts = NULL;
    KN_TRY(kn_device_optim_step(dev, &t->opt, param + t->zlo, grad + t->zlo, kn_tensor_data(t->state), lr));
    kn_tensor *mine = NULL; /* the send buffer must not lie inside the receive buffer */
    int64_t l1 = len > 0 ? len : 1;
    kn_status st = zero1_counts(t, t->n, &counts);
    if (st == KN_OK) st = kn_tensor_empty_on(&mine, dev, KN_DT_F32, 1, &l1);
    if (st == KN_OK) st = kn_device_memcpy(dev, kn_tensor_data(mine), dev, param + t->zlo, (size_t)len * sizeof(float));
    if (st == KN_OK) st = kn_comm_all_gather(t->dp, kn_tensor_data(mine), param, counts, KN_DT_F32);
    kn_tensor_free(mine);
    free(counts);
    return st;
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

kn_status kn_tp_step(kn_tp *t, const int32_t *x, const int32_t *y, double lr, double *loss, double *gnorm) {
    if (!t || !t->prog || !x || !y || !loss) return kn_error(KN_ERR_ARG, "kn_tp_step: NULL argument");
    kn_device dev = t->tr->dev;
    int K = t->accum > 1 ? t->accum : 1;
    size_t n = (size_t)(t->tr->B * t->tr->T);
    double lsum = 0;
    for (int k = 0; k < K; k++) { /* this dp group's share: K micro-batches of B rows */
        size_t off = ((size_t)(t->dp ? t->dp->rank : 0) * (size_t)K + (size_t)k) * n;
        double l;
        KN_TRY(kn_device_memcpy(dev, kn_tensor_data(t->x), KN_CPU, x + off, n * sizeof *x));
        KN_TRY(kn_device_memcpy(dev, kn_tensor_data(t->y), KN_CPU, y + off, n * sizeof *y));
        KN_TRY(kn_program_run(t->prog));
        KN_TRY(kn_tensor_item_any(kn_program_output(t->prog, 0), &l));
        lsum += l;
        if (K == 1) break;
        /* the program writes each micro-batch's gradients into the slab: summed in acc */
        if (k == 0)
            KN_TRY(kn_device_memcpy(dev, kn_tensor_data(t->acc), dev, kn_tensor_data(t->grads),
                                    (size_t)t->n * sizeof(float)));
        else
            KN_TRY(add_slab(dev, t->acc, t->grads, t->n));
    }
    if (K > 1) { /* the mean over the micro-batches */
        KN_TRY(kn_device_memcpy(dev, kn_tensor_data(t->grads), dev, kn_tensor_data(t->acc), (size_t)t->n * sizeof(float)));
        KN_TRY(kn_device_scale(dev, kn_tensor_data(t->grads), t->n, 1.0 / K));
    }
    *loss = lsum / K;
    if (t->dp) { /* the mean over the dp groups' equal shares: the global batch's */
        float *g = kn_tensor_data(t->grads);
        KN_TRY(kn_comm_all_reduce(t->dp, g, g, t->n, KN_DT_F32));
        KN_TRY(kn_device_scale(dev, g, t->n, 1.0 / t->dp->size));
        KN_TRY(host_collective(t->dp, dev, false, loss, loss, 1, KN_DT_F64));
        *loss /= t->dp->size;
    }
    /* the global norm: replicated gradients once (rank 0's), sharded ones summed */
    double sq = 0;
    float *grad = kn_tensor_data(t->grads);
    for (int i = 0; i < t->np; i++) {
        if (t->place[i].kind == KN_PLACE_REPLICATE && t->rank != 0) continue;
        double n = 0;
        KN_TRY(kn_device_clip_grad_norm(dev, grad + t->loff[i], t->lnum[i], 0, &n));
        sq += n * n;
    }
    KN_TRY(host_collective(t->comm, dev, false, &sq, &sq, 1, KN_DT_F64));
    double norm = sqrt(sq);
    if (gnorm) *gnorm = norm;
    if (!isfinite(*loss) || !isfinite(norm)) /* the same on every rank (both are summed over the ranks) */
        return kn_error(KN_ERR_ARG, "kn_tp_step: loss %g, gradient norm %g at optimizer step %lld (diverged: lower the "
                        "learning rate)", *loss, norm, (long long)t->opt.step);
    if (t->tr->clip > 0 && norm > t->tr->clip) KN_TRY(kn_device_scale(dev, grad, t->n, t->tr->clip / (norm + 1e-6)));
    if (t->zero1) return zero1_update(t, lr);
    return kn_device_optim_step(dev, &t->opt, kn_tensor_data(t->params), grad, kn_tensor_data(t->state), lr);
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
