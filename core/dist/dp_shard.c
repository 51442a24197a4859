/* dp_shard.c — ZeRO's shards (kiln/dist.h): what each rank keeps of the optimizer state,
 * the gradients and (ZeRO-3) the parameters, and the update that runs on them.
 *
 * The slab is cut into N nearly equal ranges (lab 10's kn_dp_shard_ranges); rank r owns
 * [shard_lo[r], shard_lo[r+1]). ZeRO-1 keeps the optimizer state of its range only (the
 * buckets' reduce-scatter, dp_buckets.c, gives it the reduced gradients of its range); it
 * updates its range of the parameters and all-gathers the rest from the other ranks.
 * ZeRO-2 also frees the full gradient slab (gradients wait in a bucket's staging buffer
 * until its reduce-scatter finishes). ZeRO-3 keeps only its range of the parameters too
 * (zero3.c gathers them for the steps that read them): its update writes the shard and no
 * all_gather follows. The global gradient norm for clipping is the square root of the
 * ranks' sums of squares of their shards, all-reduced. kn_dp_gather_state brings the full
 * state back for checkpoints, so one resumes under any strategy and rank count.
 * kn_zero1_gather is ZeRO-1's gather for the meshes' local slabs (tensor and pipeline
 * parallelism's dp axis, tp_train.c and pp_run.c): one copy of this rank's range, then the
 * all_gather, the same step for both. */
#include <math.h>
#include <string.h>

#include "dp_impl.h"

void kn_dp_shard_counts(const kn_dp *d, int64_t lo, int64_t hi, int64_t *counts) {
    for (int r = 0; r < d->comm->size; r++) {
        int64_t a = lo > d->shard_lo[r] ? lo : d->shard_lo[r], b = hi < d->shard_lo[r + 1] ? hi : d->shard_lo[r + 1];
        counts[r] = b > a ? b - a : 0;
    }
}

kn_status kn_dp_shard_new(kn_dp *d) {
    kn_trainer *tr = d->tr;
    const kn_params *p = &tr->model->p;
    bool gpu = kn_dp_on_gpu(d);
    int64_t lo = kn_dp_my_lo(d), len = kn_dp_my_len(d), n = p->n;
    int64_t decay = p->n_decay - lo;
    decay = decay < 0 ? 0 : decay > len ? len : decay;
    kn_status st = kn_optim_init(&d->shard_opt, &tr->opt.cfg, len, decay);
    size_t state_bytes = (size_t)d->shard_opt.state_len * sizeof(float);
    if (st == KN_OK && gpu && !(d->dshard_state = kn_dp_alloc(d, state_bytes)))
        st = kn_error(KN_ERR_OOM, "kn_dp_new: out of device memory for the shard's optimizer state");
    int slabs = n > 0 ? (int)(tr->opt.state_len / n) : 0;
    for (int k = 0; st == KN_OK && k < slabs; k++) /* this rank's range of each state slab */
        st = kn_device_memcpy(tr->dev, kn_dp_shard_state(d) + k * len, tr->dev, kn_dp_slab_state(d) + k * n + lo,
                              (size_t)len * sizeof(float));
    d->shard_opt.step = tr->opt.step;
    d->grad_shard = st == KN_OK ? kn_dp_alloc(d, (size_t)len * sizeof(float)) : NULL;
    if (st == KN_OK && !d->grad_shard) st = kn_error(KN_ERR_OOM, "kn_dp_new: out of memory for the shard");
    if (st == KN_OK) {
        /* the full state is gone: this rank keeps its shard (kn_dp_gather_state brings it back) */
        if (gpu) {
            kn_tensor_free(tr->state);
            tr->state = NULL;
        } else {
            kn_free(tr->opt.state);
            tr->opt.state = NULL;
        }
    }
    if (st == KN_OK && d->cfg.strategy >= KN_DP_ZERO2) {
        /* no full gradient slab: gradients live in the buckets' staging buffers */
        kn_params_views_free(p, tr->grad_views);
        kn_tensor_free(tr->grad);
        tr->grad_views = NULL;
        tr->grad = NULL;
    }
    return st;
}

kn_status kn_dp_shard_clip(kn_dp *d, double scale, double *norm) {
    kn_trainer *t = d->tr;
    int64_t len = kn_dp_my_len(d);
    double ss = 0;
    KN_TRY(kn_device_scale(t->dev, d->grad_shard, len, scale));
    /* the shard's sum of squares, summed over the ranks: on the CPU summed here in double
     * (kn_clip_grad_norm's sum); a GPU backend gives the shard's norm, squared back */
    if (kn_dp_on_gpu(d)) {
        double local = 0;
        KN_TRY(kn_device_clip_grad_norm(t->dev, d->grad_shard, len, 0.0, &local));
        ss = local * local;
    } else {
        for (int64_t i = 0; i < len; i++) ss += (double)d->grad_shard[i] * (double)d->grad_shard[i];
    }
    KN_TRY(kn_dp_all_reduce_f64(d, &ss, "gradient norm"));
    *norm = sqrt(ss);
    if (t->clip > 0 && *norm > t->clip) KN_TRY(kn_device_scale(t->dev, d->grad_shard, len, t->clip / (*norm + 1e-6)));
    return KN_OK;
}

kn_status kn_dp_shard_update(kn_dp *d, double lr) {
    kn_trainer *t = d->tr;
    int N = d->comm->size;
    if (d->cfg.strategy == KN_DP_ZERO3) {
        /* the shard is the parameters: the next forward gathers it, bucket by bucket */
        KN_TRY(kn_device_optim_step(t->dev, &d->shard_opt, d->param_shard, d->grad_shard, kn_dp_shard_state(d), lr));
        t->opt.step = d->shard_opt.step;
    } else {
        float *mine = kn_dp_slab_param(d) + kn_dp_my_lo(d);
        if (t->optim_hook) /* ZeRO-Offload: this rank's shard stepped on the host (offload.c) */
            KN_TRY(t->optim_hook(t->optim_hook_ctx, mine, d->grad_shard, lr));
        else
            KN_TRY(kn_device_optim_step(t->dev, &d->shard_opt, mine, d->grad_shard, kn_dp_shard_state(d), lr));
        t->opt.step = d->shard_opt.step;
        int64_t counts[1024];
        if (N > 1024) return kn_error(KN_ERR_ARG, "kn_dp: more than 1024 ranks");
        for (int r = 0; r < N; r++) counts[r] = d->shard_lo[r + 1] - d->shard_lo[r];
        kn_comm_req r;
        KN_TRY(kn_comm_iall_gather(d->comm, mine, kn_dp_slab_param(d), counts, KN_DT_F32, "parameters", &r));
        KN_TRY(kn_comm_wait(&r));
    }
    return KN_OK;
}

kn_status kn_zero1_gather(kn_comm *dp, kn_device dev, float *slab, int64_t lo, int64_t hi, const int64_t *counts) {
    if (!dp || !slab || !counts || lo < 0 || hi < lo)
        return kn_error(KN_ERR_ARG, "kn_zero1_gather: no communicator, slab or counts, or range [%lld, %lld)",
                        (long long)lo, (long long)hi);
    int64_t len = hi - lo, l1 = len > 0 ? len : 1;
    if (counts[dp->rank] != len)
        return kn_error(KN_ERR_ARG, "kn_zero1_gather: rank %d's range holds %lld floats, its count says %lld", dp->rank,
                        (long long)len, (long long)counts[dp->rank]);
    kn_tensor *mine = NULL; /* the send buffer must not lie inside the receive buffer */
    kn_status st = kn_tensor_empty_on(&mine, dev, KN_DT_F32, 1, &l1);
    if (st == KN_OK) st = kn_device_memcpy(dev, kn_tensor_data(mine), dev, slab + lo, (size_t)len * sizeof(float));
    if (st == KN_OK) st = kn_comm_all_gather(dp, kn_tensor_data(mine), slab, counts, KN_DT_F32);
    kn_tensor_free(mine);
    return st;
}

kn_status kn_dp_gather_state(kn_dp *d) {
    if (!d || !d->tr) return kn_error(KN_ERR_ARG, "kn_dp_gather_state: NULL argument");
    if (d->cfg.strategy == KN_DP_DDP) return KN_OK;
    kn_optim *o = &d->tr->opt;
    int64_t n = d->tr->model->p.n, len = kn_dp_my_len(d), counts[1024];
    int N = d->comm->size;
    if (N > 1024) return kn_error(KN_ERR_ARG, "kn_dp: more than 1024 ranks");
    for (int r = 0; r < N; r++) counts[r] = d->shard_lo[r + 1] - d->shard_lo[r];
    if (kn_dp_on_gpu(d) && !d->tr->state) {
        /* the trainer's state slab comes back on its device (kn_trainer_sync_host copies it) */
        int64_t sn[1] = {o->state_len};
        KN_TRY(kn_tensor_empty_on(&d->tr->state, d->tr->dev, KN_DT_F32, 1, sn));
    }
    if (!kn_dp_on_gpu(d) && !o->state) {
        o->state = kn_malloc((size_t)(o->state_len > 0 ? o->state_len : 1) * sizeof(float));
        if (!o->state) return kn_error(KN_ERR_OOM, "kn_dp_gather_state: out of memory");
    }
    int slabs = n > 0 ? (int)(o->state_len / n) : 0;
    for (int k = 0; k < slabs; k++)
        KN_TRY(kn_comm_all_gather(d->comm, kn_dp_shard_state(d) + k * len, kn_dp_slab_state(d) + k * n, counts, KN_DT_F32));
    o->step = d->shard_opt.step;
    return d->z3 ? kn_dp_z3_gather_params(d) : KN_OK;
}

kn_dp_memory kn_dp_memory_of(const kn_dp *d) {
    kn_dp_memory m = {0};
    if (!d || !d->tr) return m;
    int64_t P = d->tr->model->p.n, f = (int64_t)sizeof(float);
    m.params = d->cfg.strategy == KN_DP_ZERO3 ? kn_dp_my_len(d) * f : P * f;
    m.grads = (kn_dp_slab_grad(d) ? P * f : 0) + (d->grad_shard ? kn_dp_my_len(d) * f : 0);
    /* ZeRO-Offload (kiln/offload.h, the trainer's optim_hook): the state is on the host */
    m.optim = d->tr->optim_hook ? 0 : (d->cfg.strategy == KN_DP_DDP ? d->tr->opt.state_len : d->shard_opt.state_len) * f;
    m.staging_peak = d->staging_peak;
    m.gathered_peak = d->gathered_peak;
    m.device = d->device_held;
    return m;
}

kn_status kn_dp_memory_ranks(const kn_dp *d, kn_dp_memory *all) {
    if (!d || !d->tr || !d->comm || !all) return kn_error(KN_ERR_ARG, "kn_dp_memory_ranks: NULL argument");
    enum { F = 6 };
    int N = d->comm->size;
    double *v = kn_calloc((size_t)N * F, sizeof *v);
    if (!v) return kn_error(KN_ERR_OOM, "kn_dp_memory_ranks: out of memory");
    /* each rank fills its row, zeros elsewhere: the sum over the ranks is every row (bytes
     * below 2^53 are exact in a double) */
    kn_dp_memory m = kn_dp_memory_of(d);
    const int64_t mine[F] = {m.params, m.grads, m.optim, m.staging_peak, m.gathered_peak, m.device};
    for (int f = 0; f < F; f++) v[d->comm->rank * F + f] = (double)mine[f];
    kn_status st = kn_dp_all_reduce_f64s(d, v, N * F, "the memory per rank");
    for (int r = 0; st == KN_OK && r < N; r++) {
        const double *q = v + r * F;
        all[r] = (kn_dp_memory){(int64_t)q[0], (int64_t)q[1], (int64_t)q[2], (int64_t)q[3], (int64_t)q[4], (int64_t)q[5]};
    }
    kn_free(v);
    return st;
}

kn_dp_memory kn_dp_memory_expected(kn_dp_strategy s, int64_t P, int n) {
    kn_dp_memory m = {.params = 4 * P, .grads = 4 * P, .optim = 8 * P};
    if (s != KN_DP_DDP) m.optim = 8 * P / n;
    if (s >= KN_DP_ZERO2) m.grads = 4 * P / n;
    if (s == KN_DP_ZERO3) m.params = 4 * P / n;
    return m;
}

