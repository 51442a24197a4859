/* offload_dp.c — ZeRO-Offload under data parallelism (kiln/offload.h): each rank offloads
 * what it updates (DDP the whole slab, ZeRO-1/2 its shard of the optimizer state), and the
 * host state goes back where a checkpoint reads it (kn_offload_sync). The host step itself
 * is core/nn/offload.c's. */
#include "dp_impl.h"
#include "nn/offload_impl.h"

/* ZeRO-1/2: the shard's step count (kn_dp_shard_update copies it into the trainer's). */
static kn_status hook_shard(void *ctx, float *param, const float *grad, double lr) {
    kn_offload *f = ctx;
    KN_TRY(kn_offload_step(f, param, grad, lr));
    f->dp->shard_opt.step = f->opt.step;
    return KN_OK;
}

/* kn_offload_sync for ZeRO-1/2: the shard's state where kn_dp_gather_state reads it (a GPU
 * rank's device buffer, made again; a CPU rank's shard optimizer). */
static kn_status sync_shard(kn_offload *f) {
    kn_dp *d = f->dp;
    size_t sb = (size_t)f->opt.state_len * sizeof(float);
    if (kn_dp_on_gpu(d) && !d->dshard_state && !(d->dshard_state = kn_dp_alloc(d, sb)))
        return kn_error(KN_ERR_OOM, "kn_offload_sync: out of device memory for the shard's optimizer state");
    d->shard_opt.step = f->opt.step;
    return kn_offload_state(f, f->t->dev, kn_dp_shard_state(d));
}

kn_status kn_offload_dp(kn_offload **out, kn_dp *d, int64_t chunk) {
    if (!out || !d || !d->tr) return kn_error(KN_ERR_ARG, "kn_offload_dp: NULL argument");
    kn_trainer *t = d->tr;
    KN_TRY(kn_offload_refuse(t, "kn_offload_dp"));
    kn_dp_strategy s = d->cfg.strategy;
    if (s == KN_DP_ZERO3)
        return kn_error(KN_ERR_UNSUPPORTED, "kn_offload_dp: --offload optimizer with --dist zero3: ZeRO-3's update "
                        "writes the parameter shard its gathers read, which the host step does not handle yet (use "
                        "zero1 or zero2: the optimizer state is sharded and offloaded, the parameters stay whole)");
    bool gpu = kn_dp_on_gpu(d), ddp = s == KN_DP_DDP;
    /* DDP: the whole slab; ZeRO-1/2: this rank's shard (its state on the GPU: given back
     * below; on CPU ranks the optimizer's own, which stays for kn_dp_gather_state) */
    const kn_optim *o = ddp ? &t->opt : &d->shard_opt;
    const float *state = ddp ? kn_dp_slab_state(d) : kn_dp_shard_state(d);
    float *param = kn_dp_slab_param(d) + (ddp ? 0 : kn_dp_my_lo(d));
    if (!state && o->state_len > 0) return kn_error(KN_ERR_ARG, "kn_offload_dp: the rank has no optimizer state");
    KN_TRY(kn_offload_new(out, t->dev, o, param, state, chunk));
    kn_offload *f = *out;
    if (gpu) f->stats.device_freed = o->state_len * (int64_t)sizeof(float);
    if (gpu && ddp) {
        kn_tensor_free(t->state);
        t->state = NULL;
    } else if (gpu) {
        kn_dp_release(d, d->dshard_state, (size_t)o->state_len * sizeof(float));
        d->dshard_state = NULL;
    }
    f->t = t;
    f->dp = d;
    f->sync_shard = ddp ? NULL : sync_shard;
    t->optim_hook = ddp ? kn_offload_hook_trainer : hook_shard;
    t->optim_hook_ctx = f;
    return KN_OK;
}
