/* param_buckets.c — lab 10's buckets over a model's parameter slab (kn_dp_param_buckets,
 * kiln/dist.h).
 *
 * The buckets (kn_dp_buckets, core/passes/buckets.c) need only the slab's layout, declared
 * in kiln/passes.h so that the ddp pass, below the model, can form them from a joint
 * graph. The model's slab is described by kiln/nn.h's kn_params; this file passes its
 * layout (each parameter's offset, numel and decay flag) down. A file of its own, so that
 * a program that only wants the buckets (tests/core/test_ddp_pass.c) links none of the
 * communicators. */
#include "kiln/dist.h"

kn_status kn_dp_param_buckets(const kn_params *p, size_t bucket_bytes, kn_dp_bucket **out, int *n) {
    if (!p || p->count < 1) return kn_dp_buckets(NULL, bucket_bytes, out, n); /* its error */
    kn_slab_param *info = kn_malloc((size_t)p->count * sizeof *info);
    if (!info) return kn_error(KN_ERR_OOM, "kn_dp_buckets: out of memory");
    for (int i = 0; i < p->count; i++)
        info[i] = (kn_slab_param){.offset = p->info[i].offset, .numel = p->info[i].numel, .decay = p->info[i].decay};
    kn_slab_layout l = {.count = p->count, .info = info};
    kn_status st = kn_dp_buckets(&l, bucket_bytes, out, n);
    kn_free(info);
    return st;
}
