/* pp_schedule.c — lab 11 unit: pipeline parallelism's schedules, each rank's ordered list
 * of forwards and backwards (kn_pp_schedule, contract in kiln/pipeline.h), and the names of
 * the schedules (kn_pp_kind_parse, kn_pp_kind_name).
 *
 * p ranks hold consecutive stages; a step is m micro-batches. Every schedule is the same
 * three phases, with a different number w of warm-up forwards:
 *   warm-up    the rank's first w forwards;
 *   steady     then one forward and one backward in turn (forward w+i, then backward i);
 *   cool-down  the backwards left.
 * GPipe runs every forward first (w = m): simple, but rank r holds all m micro-batches'
 * activations at once. 1F1B (PipeDream-flush, Megatron's default) starts a micro-batch's
 * backward as soon as it can: rank r runs only the p-1-r forwards that the ranks after it
 * need to fill the pipeline, so it keeps at most p - r micro-batches alive, with the same
 * bubble (p-1)/(m+p-1) as GPipe. Interleaved 1F1B (Megatron's virtual pipeline) gives each
 * rank v chunks of the model (stages r, r+p, ...): forwards go p micro-batches at a time
 * through chunk 0, then the same p through chunk 1, and so on, backwards through the
 * chunks in reverse, and the warm-up is 2(p-1-r) + (v-1)p; the bubble shrinks by v at the
 * price of v times more point-to-point messages. The orders are Megatron-LM's
 * (megatron/core/pipeline_parallel/schedules.py: get_model_chunk_id and the warm-up count
 * of forward_backward_pipelining_with_interleaving, microbatch_group_size_per_vp_stage = p).
 *
 * The runner (core/nn/step.c's pipeline step) adds the sends and receives around each
 * action; kn_pp_simulate (pp_schedule_sim.c) replays the lists with the dependencies
 * between stages to measure the bubble and find deadlocks. */
#include <string.h>

#include "kiln/pipeline.h"

static const char *const kind_names[KN_PP_KIND_COUNT] = {"gpipe", "1f1b", "interleaved"};

kn_status kn_pp_kind_parse(const char *s, kn_pp_kind *out) {
    if (!out) return kn_error(KN_ERR_ARG, "kn_pp_kind_parse: NULL out");
    for (int k = 0; s && k < KN_PP_KIND_COUNT; k++)
        if (!strcmp(s, kind_names[k])) {
            *out = (kn_pp_kind)k;
            return KN_OK;
        }
    return kn_error(KN_ERR_ARG, "pipeline schedule '%s': use gpipe, 1f1b or interleaved", s ? s : "(null)");
}

const char *kn_pp_kind_name(kn_pp_kind k) {
    return k >= 0 && k < KN_PP_KIND_COUNT ? kind_names[k] : "?";
}

kn_status kn_pp_schedule(kn_pp_kind k, int p, int m, int v, int rank, kn_pp_action *out, int cap, int *n) {
    if (!out || !n) return kn_error(KN_ERR_ARG, "kn_pp_schedule: NULL out or n");
    if (k < 0 || k >= KN_PP_KIND_COUNT) return kn_error(KN_ERR_ARG, "kn_pp_schedule: schedule kind %d", (int)k);
    if (p < 1 || m < 1 || v < 1)
        return kn_error(KN_ERR_ARG, "kn_pp_schedule: %d stages, %d micro-batches, %d chunks (each at least 1)", p, m, v);
    if (rank < 0 || rank >= p) return kn_error(KN_ERR_ARG, "kn_pp_schedule: rank %d of %d stages", rank, p);
    if (k != KN_PP_INTERLEAVED && v != 1)
        return kn_error(KN_ERR_ARG, "kn_pp_schedule: %s has one chunk per rank, not %d (interleaved has several)",
                        kind_names[k], v);
    if (k == KN_PP_INTERLEAVED && v < 2)
        return kn_error(KN_ERR_ARG, "kn_pp_schedule: interleaved needs at least 2 chunks per rank, not %d", v);
    if (k == KN_PP_INTERLEAVED && m % p != 0)
        return kn_error(KN_ERR_ARG, "kn_pp_schedule: interleaved needs the micro-batches (%d) a multiple of the stages (%d)",
                        m, p);
    if ((int64_t)2 * m * v > cap)
        return kn_error(KN_ERR_ARG, "kn_pp_schedule: %d actions do not fit in %d", 2 * m * v, cap);
    (void)rank;
    return kn_not_implemented("lab11", "kn_pp_schedule: each rank's forwards and backwards (pp_schedule.c)");
}
