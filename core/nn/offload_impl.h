/* offload_impl.h — the offload's state, shared by core/nn/offload.c (the host step and the
 * one-process trainer's hook) and core/dist/offload_dp.c (data parallelism's hooks and the
 * checkpoint's sync). Internal: the public face is kiln/offload.h. */
#ifndef KILN_NN_OFFLOAD_IMPL_H
#define KILN_NN_OFFLOAD_IMPL_H

#include "kiln/offload.h"
#include "kiln/storage.h"

struct kn_dp;

struct kn_offload {
    kn_device dev;
    kn_optim opt;        /* the host optimizer: cfg, n, n_decay, step; opt.state is `state` below */
    int64_t chunk;       /* floats per copy */
    int64_t nchunks;
    float *master;       /* pinned, n floats: the parameters of the range */
    float *grad;         /* pinned, n floats: the gradients as they come down */
    float *state;        /* pinned, opt.state_len floats (m then v; SGD: momentum) */
    kn_stream *down, *up;
    kn_event *ready;     /* the default stream's end: the gradients are final */
    kn_event **arrived;  /* [nchunks]: chunk k's gradients are on the host */
    kn_offload_stats stats;
    kn_trainer *t;       /* the trainer whose optim_hook is ours (NULL: none) */
    struct kn_dp *dp;    /* the strategy it serves (NULL: one process) */
    /* kn_offload_sync of a ZeRO shard (core/dist/offload_dp.c); NULL: the trainer's host state */
    kn_status (*sync_shard)(struct kn_offload *f);
};

/* The one-process / DDP hook (the trainer's step count follows the host optimizer's). */
kn_status kn_offload_hook_trainer(void *ctx, float *param, const float *grad, double lr);
/* KN_ERR_UNSUPPORTED for a trainer on the CPU (its state is on the host already), KN_ERR_ARG
 * for one offloaded already; `fn` names the caller. */
kn_status kn_offload_refuse(const kn_trainer *t, const char *fn);

#endif
