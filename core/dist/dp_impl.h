/* dp_impl.h — what the files of data parallelism share. Internal to core/dist:
 *   dp.c          the strategies' setup, the step, the schedule printed
 *   dp_buckets.c  the gradients' way out: buckets stored, compressed, launched and finished,
 *                 as the collective ops of the step's graph (the collectives context)
 *   dp_shard.c    ZeRO's shards: the optimizer state, the reduced gradients, the update, the
 *                 parameters gathered after it, the state gathered for a checkpoint
 *   zero3.c       ZeRO-3's gathered parameters (the all_gather ops of the step's graph) */
#ifndef KILN_DIST_DP_IMPL_H
#define KILN_DIST_DP_IMPL_H

#include "kiln/dist.h"

/* This rank's shard of the slab: [my_lo, my_lo + my_len). */
static inline int64_t kn_dp_my_lo(const kn_dp *d) { return d->shard_lo[d->comm->rank]; }
static inline int64_t kn_dp_my_len(const kn_dp *d) {
    return d->shard_lo[d->comm->rank + 1] - d->shard_lo[d->comm->rank];
}
/* The trainer's slabs, where its step runs (kiln/nn.h: one set, on tr->dev). DDP on a GPU
 * calls only the device table (copies, scale, clip, optimizer) and NCCL, so no gradient
 * crosses to the host. */
static inline bool kn_dp_on_gpu(const kn_dp *d) { return d->tr->dev.type != KN_DEVICE_CPU; }
static inline float *kn_dp_slab_param(const kn_dp *d) { return kn_tensor_data(d->tr->params); }
static inline float *kn_dp_slab_grad(const kn_dp *d) { return d->tr->grad ? kn_tensor_data(d->tr->grad) : NULL; }
static inline float *kn_dp_slab_state(const kn_dp *d) { return d->tr->state ? kn_tensor_data(d->tr->state) : d->tr->opt.state; }
static inline float *kn_dp_shard_state(const kn_dp *d) { return kn_dp_on_gpu(d) ? d->dshard_state : d->shard_opt.state; }

/* nb bytes (zeroed) where the step runs (kn_dp_alloc, NULL when out of memory), and their
 * release (nb as allocated). */
float *kn_dp_alloc(const kn_dp *d, size_t nb);
void kn_dp_release(const kn_dp *d, void *p, size_t nb);
/* A blocking all-reduce (sum) of one double (of n doubles: kn_dp_all_reduce_f64s),
 * labelled for the timeout message. */
kn_status kn_dp_all_reduce_f64(const kn_dp *d, double *v, const char *what);
kn_status kn_dp_all_reduce_f64s(const kn_dp *d, double *v, int n, const char *what);

/* dp_buckets.c. Bytes of bucket b's ZeRO-2 staging buffer; bucket b's request done (ZeRO-2
 * moves its part into the shard, int8 decodes); the collectives context of the step
 * program's ops; the step runner's `compiled` hook (kiln/step.h: the step program, made
 * with the strategy's pass, checked against d's buckets). */
size_t kn_dp_staging_size(const kn_dp *d, int b);
void kn_dp_finished(kn_dp *d, int b);
kn_collectives kn_dp_collectives(kn_dp *d);
kn_status kn_dp_step_compiled(void *ctx, kn_program *p);

/* dp_shard.c. kn_dp_shard_new (ZeRO, in kn_dp_new once the shard ranges exist): this rank's
 * optimizer state and gradient shard, the full state (and for ZeRO-2 and -3 the gradient
 * slab) freed. kn_dp_shard_clip: the reduced shard scaled by `scale`, the global norm from
 * the ranks' sums of squares, clipped. kn_dp_shard_update: the optimizer on the shard, then
 * (ZeRO-1/2) the parameters all-gathered. */
kn_status kn_dp_shard_new(kn_dp *d);
kn_status kn_dp_shard_clip(kn_dp *d, double scale, double *norm);
kn_status kn_dp_shard_update(kn_dp *d, double lr);

/* The part of slab range [lo, hi) each rank owns: counts[r] = |[lo, hi) ∩ shard r|
 * (counts holds comm->size entries). */
void kn_dp_shard_counts(const kn_dp *d, int64_t lo, int64_t hi, int64_t *counts);

/* ZeRO-3 (zero3.c). kn_dp_z3_new runs last in kn_dp_new, once the shards exist: it copies
 * this rank's parameters into d->param_shard, defers the evaluation program's parameters
 * and frees the model's slab; kn_dp_z3_plan reads the step program's gathers (bytes per
 * run, the most gathered at once) once it is compiled with the zero3 pass. */
kn_status kn_dp_z3_new(kn_dp *d);
kn_status kn_dp_z3_plan(kn_dp *d);
void kn_dp_z3_free(kn_dp *d);
/* The collectives context's all_gather_start (bucket b into the program's buffer out) and
 * its comm_wait; the gathers in flight polled (MPI progresses inside MPI_Test). */
kn_status kn_dp_z3_start(kn_dp *d, int b, const kn_tensor *out);
kn_status kn_dp_z3_wait(kn_dp *d, int b);
kn_status kn_dp_z3_poll(kn_dp *d);
/* Before a step's micro-batches: the slab kn_dp_gather_state brought back goes again. */
kn_status kn_dp_z3_begin_step(kn_dp *d);
/* After the step program ran (ok or not): every gather finished. */
kn_status kn_dp_z3_end_run(kn_dp *d);
/* The full parameter slab back into the model, bound to the evaluation program. */
kn_status kn_dp_z3_gather_params(kn_dp *d);
/* Bytes all-gathered by one run of the step program (each gather's bucket). */
int64_t kn_dp_z3_bytes_per_run(const kn_dp *d);

#endif /* KILN_DIST_DP_IMPL_H */
