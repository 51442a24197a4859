/* kiln/pipeline.h — pipeline parallelism's schedules: which micro-batch each rank runs
 * forward or backward next.
 *
 * p ranks hold p consecutive stages of the model (interleaved: p*v stages, rank r holding
 * the v chunks r, r + p, r + 2p, ...: model stage chunk*p + rank). A step is m micro-batches;
 * every rank runs m*v forwards and m*v backwards. The schedule is each rank's ordered list
 * of them; the runner adds the point-to-point traffic (a forward receives its input from
 * the previous stage and sends its output to the next; a backward the other way round).
 * With the forward taking tf and the backward tb, GPipe and 1F1B both idle each rank for
 * (p-1)(tf+tb) of a step of (m+p-1)(tf+tb): the bubble (p-1)/(m+p-1); 1F1B keeps at most p
 * micro-batches' activations alive instead of m; interleaving divides the bubble by v.
 *
 * Lab 11 unit (labs/lab11-parallel/pp_schedule.c; the staff's reference core/dist/pp_schedule.c):
 * kn_pp_schedule. A skeleton returns KN_ERR_NOT_IMPLEMENTED. Below it, staff code: kn_pp_simulate
 * (core/dist/pp_schedule_sim.c) replays the schedules on a clock, for the bubble, the live
 * activations and deadlocks. */
#ifndef KILN_PIPELINE_H
#define KILN_PIPELINE_H

#include "kiln/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kn_pp_kind { KN_PP_GPIPE = 0, KN_PP_1F1B, KN_PP_INTERLEAVED, KN_PP_KIND_COUNT } kn_pp_kind;
/* "gpipe", "1f1b", "interleaved"; KN_ERR_ARG (listing them) for anything else. */
kn_status kn_pp_kind_parse(const char *s, kn_pp_kind *out);
const char *kn_pp_kind_name(kn_pp_kind k);

typedef enum kn_pp_op { KN_PP_FWD = 0, KN_PP_BWD } kn_pp_op;

typedef struct kn_pp_action {
    kn_pp_op op;
    int micro;   /* the micro-batch, 0..m-1 */
    int chunk;   /* which of the rank's v chunks (0..v-1): model stage chunk*p + rank */
} kn_pp_action;

/* Rank `rank`'s ordered actions for p stages (p >= 1 ranks), m >= 1 micro-batches and v
 * chunks per rank: 2*m*v actions into out[0..cap), their count into *n.
 *   GPipe (v = 1): F0 F1 ... F(m-1), then B0 B1 ... B(m-1).
 *   1F1B (v = 1): w = min(p-1-rank, m) warm-up forwards F0..F(w-1); then, for i = 0..m-w-1,
 *     F(w+i) B(i); then the cool-down backwards B(m-w)..B(m-1).
 *   interleaved (v >= 2, m a multiple of p): the rank's k-th forward (k = 0..mv-1) is
 *     micro-batch (k / (p v)) p + k % p of chunk (k / p) % v; its k-th backward is the same
 *     micro-batch of chunk v-1 - (k / p) % v. w = min((p-1-rank)*2 + (v-1)*p, m v) warm-up
 *     forwards; then, for i = 0..mv-w-1, forward w+i then backward i; then the remaining
 *     backwards in order.
 * KN_ERR_ARG naming the problem: p, m or v < 1, rank outside [0, p), v != 1 for GPipe and
 * 1F1B, v < 2 or m not a multiple of p for interleaved, cap < 2*m*v, a NULL pointer. */
kn_status kn_pp_schedule(kn_pp_kind k, int p, int m, int v, int rank, kn_pp_action *out, int cap, int *n);

/* ---------------------------------------------------------------- staff: the schedule simulator */

/* One action of a simulated step: which rank ran it, and when. */
typedef struct kn_pp_event {
    int rank;
    kn_pp_action a;
    double start, end;
} kn_pp_event;

/* What kn_pp_simulate measured. The arrays are the caller's (any may be NULL): busy[p],
 * peak_live[p], events[2 m v p]. */
typedef struct kn_pp_sim {
    double makespan;   /* the end of the last action (the step's time) */
    double bubble;     /* idle share of the ranks' time: 1 - sum(busy) / (p * makespan) */
    double *busy;      /* per rank: the time it computed */
    int *peak_live;    /* per rank: the most micro-batch chunks whose forward ran and backward not yet */
    kn_pp_event *events; /* every action, ranks in order, each rank's in its list's order */
    int nevents;
} kn_pp_sim;

/* core/dist/pp_schedule_sim.c (staff code, not a lab unit). Replay p ranks' action lists
 * (lists[r][0..counts[r]), v chunks per rank, m micro-batches) as the runner would, with a
 * forward taking tf and a backward tb, every action as early as its dependencies allow:
 *   - each rank runs its actions in list order, one at a time;
 *   - the forward of model stage s (chunk c of rank r: s = c p + r) for micro-batch i after
 *     the forward of stage s-1 for i;
 *   - the backward of stage s for i after the backward of stage s+1 for i (the last stage:
 *     none) and after its own forward.
 * Communication is free and buffered (a send never waits for its receive). KN_ERR_ARG for
 * bad sizes, an action naming a micro-batch or chunk out of range or an action twice, or a
 * list that misses one; KN_ERR_UNSUPPORTED when the lists deadlock (no rank's next action
 * can run), naming each stuck rank's next action. */
kn_status kn_pp_simulate_lists(int p, int m, int v, const kn_pp_action *const *lists, const int *counts, double tf,
                               double tb, kn_pp_sim *out);
/* The same for kn_pp_schedule's lists of schedule k (its errors passed on). */
kn_status kn_pp_simulate(kn_pp_kind k, int p, int m, int v, double tf, double tb, kn_pp_sim *out);

#ifdef __cplusplus
}
#endif

#endif /* KILN_PIPELINE_H */
