/* dp_impl.h — what dp.c (the strategies and the step) and zero3.c (ZeRO-3's gathered
 * parameters) share. Internal to core/dist. */
#ifndef KILN_DIST_DP_IMPL_H
#define KILN_DIST_DP_IMPL_H

#include "kiln/dist.h"

/* This rank's shard of the slab: [my_lo, my_lo + my_len). */
static inline int64_t kn_dp_my_lo(const kn_dp *d) { return d->shard_lo[d->comm->rank]; }
static inline int64_t kn_dp_my_len(const kn_dp *d) {
    return d->shard_lo[d->comm->rank + 1] - d->shard_lo[d->comm->rank];
}
/* The part of slab range [lo, hi) each rank owns: counts[r] = |[lo, hi) ∩ shard r|
 * (counts holds comm->size entries). */
void kn_dp_shard_counts(const kn_dp *d, int64_t lo, int64_t hi, int64_t *counts);

/* ZeRO-3 (zero3.c). kn_dp_z3_new runs last in kn_dp_new, once the shards exist: it copies
 * this rank's parameters into d->param_shard, plans the gathers over the step program,
 * defers both programs' parameters and frees the model's slab. */
kn_status kn_dp_z3_new(kn_dp *d);
void kn_dp_z3_free(kn_dp *d);
/* Before a step's micro-batches: the slab kn_dp_gather_state brought back goes again. */
kn_status kn_dp_z3_begin_step(kn_dp *d);
/* After the step program ran (ok or not): every gather finished, every bucket dropped. */
kn_status kn_dp_z3_end_run(kn_dp *d);
/* Poll the gathers in flight (from the node hook: MPI progresses inside MPI_Test). */
kn_status kn_dp_z3_poll(kn_dp *d);
/* The full parameter slab back into the model, bound to the evaluation program. */
kn_status kn_dp_z3_gather_params(kn_dp *d);
/* Bytes all-gathered by one run of the step program (each window's bucket). */
int64_t kn_dp_z3_bytes_per_run(const kn_dp *d);
/* kn_dp_schedule_print's lines for the steps whose node is `node`. */
void kn_dp_z3_print_notes(FILE *f, const kn_dp *d, int32_t node);

#endif /* KILN_DIST_DP_IMPL_H */
