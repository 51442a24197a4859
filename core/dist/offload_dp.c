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

kn_status kn_offload_dp(kn_offload **out, kn_dp *d, int64_t chunk) {
    if (!out || !d || !d->tr) return kn_error(KN_ERR_ARG, "kn_offload_dp: NULL argument");
    kn_trainer *t = d->tr;
    KN_TRY(kn_offload_refuse(t, "kn_offload_dp"));
    kn_dp_strategy s = d->cfg.strategy;
    if (s == KN_DP_ZERO3)
        return kn_error(KN_ERR_UNSUPPORTED, "kn_offload_dp: --offload optimizer with --dist zero3: ZeRO-3's update "
                        "writes the parameter shard its gathers read, which the host step does not handle yet (use "
                        "zero1 or zero2: the optimizer state is sharded and offloaded, the parameters stay whole)");
    if (s == KN_DP_DDP) {
        if (!t->state) return kn_error(KN_ERR_ARG, "kn_offload_dp: the trainer has no optimizer state on its device");
        KN_TRY(kn_offload_new(out, t->dev, &t->opt, kn_dp_slab_param(d), kn_tensor_data(t->state), chunk));
        (*out)->stats.device_freed = t->opt.state_len * (int64_t)sizeof(float);
        kn_tensor_free(t->state);
        t->state = NULL;
        t->optim_hook = kn_offload_hook_trainer;
    } else {
        if (!d->dshard_state) return kn_error(KN_ERR_ARG, "kn_offload_dp: the shard has no optimizer state on its device");
        KN_TRY(kn_offload_new(out, t->dev, &d->shard_opt, kn_dp_slab_param(d) + kn_dp_my_lo(d), d->dshard_state, chunk));
        (*out)->stats.device_freed = d->shard_opt.state_len * (int64_t)sizeof(float);
        kn_dp_release(d, d->dshard_state, (size_t)d->shard_opt.state_len * sizeof(float));
        d->dshard_state = NULL;
        t->optim_hook = hook_shard;
    }
    (*out)->t = t;
    (*out)->dp = d;
    t->optim_hook_ctx = *out;
    return KN_OK;
}

kn_status kn_offload_sync(kn_offload *f) {
    if (!f || !f->t) return kn_error(KN_ERR_ARG, "kn_offload_sync: not attached to a trainer");
    kn_trainer *t = f->t;
    if (!f->dp || f->dp->cfg.strategy == KN_DP_DDP) {
        if (t->opt.state_len != f->opt.state_len || (t->opt.state_len > 0 && !t->opt.state))
            return kn_error(KN_ERR_INTERNAL, "kn_offload_sync: the trainer's host state holds %lld floats, not %lld",
                            (long long)t->opt.state_len, (long long)f->opt.state_len);
        t->opt.step = f->opt.step;
        return kn_offload_state(f, KN_CPU, t->opt.state);
    }
    kn_dp *d = f->dp;
    size_t sb = (size_t)f->opt.state_len * sizeof(float);
    if (!d->dshard_state && !(d->dshard_state = kn_dp_alloc(d, sb)))
        return kn_error(KN_ERR_OOM, "kn_offload_sync: out of device memory for the shard's optimizer state");
    d->shard_opt.step = f->opt.step;
    return kn_offload_state(f, t->dev, d->dshard_state);
}
