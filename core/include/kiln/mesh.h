/* kiln/mesh.h — the device mesh's axes beyond data parallelism: tensor parallelism (kn_mesh,
 * kn_tp: Megatron's shards of a GPT, core/dist/tp.c and tp_train.c) and pipeline parallelism
 * (kn_pp: stages of consecutive blocks on the pp axis, core/dist/pp*.c), each composing with
 * the dp axis of kiln/dist.h.
 *
 * Why a header of its own: kiln/dist.h is the communicators and data parallelism, which the
 * mesh's axes build on (a kn_comm per axis, ZeRO-1's shards over dp); what only tensor and
 * pipeline parallelism need (the placement pass, kiln/placement.h, and the schedules,
 * kiln/pipeline.h) comes in with this header alone. */
#ifndef KILN_MESH_H
#define KILN_MESH_H

#include "kiln/dist.h"
#include "kiln/placement.h"
#include "kiln/pipeline.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- tensor parallelism
 * (core/dist/tp.c; the placement pass that makes a rank's graph: kiln/placement.h)
 *
 * A device mesh from the command line: `--mesh dp=2,tp=2` lays the ranks out over named
 * axes, in any order; the sizes multiply to the rank count. The axis indices of the value
 * collectives' {mesh=A} are fixed whatever the order: 0 dp, 1 tp, 2 pp. */
enum { KN_MESH_DP = 0, KN_MESH_TP = 1, KN_MESH_PP = 2, KN_MESH_AXES = 3 };

typedef struct kn_mesh {
    int size[KN_MESH_AXES];  /* ranks along dp, tp, pp (1: the axis is absent) */
    int order[KN_MESH_AXES]; /* the axes in the order written (row-major, the last fastest) */
    int naxes;               /* how many were written */
} kn_mesh;

/* Parse "tp=2", "dp=2,tp=2", "tp=2,pp=2,dp=2" for a job of `ranks` ranks. KN_ERR_ARG with
 * a message naming the problem: an unknown axis ("--mesh: unknown axis 'xp' (dp, tp,
 * pp)"), a repeated one, a size that is not an integer >= 1, or sizes whose product is not
 * the rank count ("--mesh dp=2,tp=2: 4 ranks, but the job has 2"; ranks <= 0: any count,
 * for kiln compile). */
kn_status kn_mesh_parse(const char *text, int ranks, kn_mesh *out);
/* Whether a GPT can be split tp ways (Megatron): heads, width and 4 * width must be
 * multiples of tp. KN_ERR_ARG naming the first that is not. A vocabulary that is not a
 * multiple keeps the token embedding (and the logits) replicated: kn_tp does that, and
 * kn_mesh_vocab_split says which. */
kn_status kn_mesh_check_gpt(const kn_mesh *m, const kn_gpt_config *cfg);
bool kn_mesh_vocab_split(const kn_mesh *m, const kn_gpt_config *cfg);
/* The placement tensor parallelism gives a GPT's parameter (kn_place_opts.param; ctx: a
 * kn_tp_split): Megatron's (kn_place_gpt_param), the token embedding replicated when the
 * vocabulary is not a multiple of the ranks. */
typedef struct kn_tp_split { int vocab, parts; } kn_tp_split;
kn_status kn_tp_gpt_param(void *ctx, const char *name, kn_placement *out);
/* The communicators of the mesh over c (kn_comm_mesh, in the written order): axes[A] gets
 * the one along axis A (NULL for an absent axis), coords[A] this rank's index along it. */
kn_status kn_mesh_comms(const kn_mesh *m, kn_comm *c, kn_comm **axes, int *coords);

/* The value collectives of a rank's graph (all_reduce, all_gather, reduce_scatter, send,
 * recv: kiln/ir.h) run over the communicator of their {mesh=A} axis: MPI for CPU tensors,
 * NCCL for GPU ones (whatever backend the communicator has). An all_gather or a
 * reduce_scatter along a dim other than the leading one rearranges the blocks locally
 * (kn_device_memcpy_2d), so it works on any device. `axes` is copied (borrowed comms). */
typedef struct kn_tp_comms {
    kn_comm *axes[KN_MESH_AXES];
} kn_tp_comms;
void kn_tp_collectives(kn_tp_comms *t, kn_collectives *out);

/* A tensor-parallel trainer around a kn_trainer (core/dist/tp_train.c): the trainer's model
 * (the full one, initialized like one process's, or loaded from a checkpoint: every rank
 * starts from the same values) and its optimizer state (and step count) are cut into this
 * rank's shards (kn_place_scatter, Megatron's kn_place_gpt_param; the
 * token embedding replicated when the vocabulary does not split), its
 * joint graph becomes the rank's local graph (kn_place_graph along KN_MESH_TP), compiled on
 * the trainer's device with the trainer's pass list and mode, its value collectives run
 * over `comm` (kn_tp_collectives); flags are the pass's (KN_PLACE_SEQUENCE_PARALLEL: Megatron's
 * sequence parallelism). The step is the trainer's step runner's (kiln/step.h) with this
 * state's hooks (kn_tp_new sets them; kn_tp_free takes them back): every tp rank runs the
 * local program on the same rows, the loss comes out R; the gradients land in a local slab
 * laid out like the model's (matrices first, so weight decay covers the same parameters);
 * the clip's global norm counts a replicated parameter once and sums the sharded ones'
 * squares over the ranks; the optimizer updates the local shards (AdamW and SGD are
 * elementwise, so that is the one-process update). A loss scale (fp16: the trainer's,
 * kn_trainer_set_loss_scale, set before kn_tp_new) is the runner's: its overflow decision is
 * one for the mesh (the norm summed over tp, the flag over dp), a skipped step leaves every
 * shard and its state as they were. kn_tp_gather_state puts the full parameters and
 * optimizer state back into the trainer's model and optimizer (checkpoints, evaluation, the
 * sample). */
typedef struct kn_tp {
    kn_comm *comm;           /* borrowed: the tp axis */
    kn_trainer *tr;          /* borrowed */
    int parts, rank;
    kn_place_result placed;  /* owned: the pass's result (the local graph, its placements) */
    kn_tp_comms comms;
    kn_collectives coll;
    kn_program *prog;        /* owned: the local joint graph compiled */
    int np;                  /* the model's parameters */
    kn_placement *place;     /* owned: each parameter's placement */
    kn_tp_split split;       /* kn_tp_gpt_param's context */
    int64_t *loff, *lnum;    /* owned: each parameter's offset and size in the local slab */
    int64_t n, n_decay;      /* floats in the local slab; the decayed ones first */
    kn_tensor *params, *grads, *state; /* owned, on the trainer's device: the local slabs */
    kn_tensor **pviews, **gviews;      /* owned: views of them shaped like the local parameters */
    kn_tensor *x, *y;        /* owned, on the device: the batch, i32 [B, T] */
    kn_optim opt;            /* over the local slab */
    kn_comm *dp;             /* borrowed, NULL: none; the data-parallel axis (kn_tp_set_dp) */
    int accum;               /* micro-batches per step (kn_tp_set_accum; 0 or 1: one) */
    bool zero1;              /* the optimizer state sharded over dp (kn_tp_set_zero1): this rank
                              * keeps (and updates) local slab [zlo, zhi) only */
    int64_t zlo, zhi;
    kn_tensor *acc;          /* owned, accum > 1: the micro-batches' gradients summed (local slab) */
    bool scaled;             /* the local graph differentiates loss x "loss_scale" (fp16) */
} kn_tp;
kn_status kn_tp_new(kn_tp *t, kn_comm *comm, kn_trainer *tr, unsigned flags);
/* Compose with data parallelism (a dp x tp mesh): the dp axis's ranks each take their
 * equal share of the global batch (the trainer's B rows: rows [dp_rank B, ...)); the local
 * gradient slab is averaged over dp (one all-reduce, before the clip), and so is the loss. */
kn_status kn_tp_set_dp(kn_tp *t, kn_comm *dp);
/* Gradient accumulation (--accum): each step runs the local program on accum micro-batches
 * of the trainer's B rows (dp group g: micro-batches g accum .. g accum + accum - 1 of the
 * global batch), their gradients summed in a local slab of their own and averaged, the
 * loss too, before the dp average and the clip: the one process's step on the same global
 * batch. */
kn_status kn_tp_set_accum(kn_tp *t, int accum);
/* ZeRO-1 on the dp axis of a dp x tp mesh (after kn_tp_set_dp, before the first step):
 * the local slab cut into dp nearly equal ranges, dp rank r keeping the
 * optimizer state of range r only (1/dp of it, taken from the local state: a resumed run's
 * continues) and updating those parameters, then the
 * ranges all-gathered over dp. The gradients are still all-reduced over dp (each rank's
 * norm needs the whole local slab). kn_tp_gather_state gathers the state back. */
kn_status kn_tp_set_zero1(kn_tp *t);
/* One step on the global batch x, y (dp x accum x the trainer's B rows of T tokens, the
 * same on every rank) through the trainer's step runner; *loss the mean loss, *gnorm (may
 * be NULL) the global gradient norm; the trainer's `skipped` says whether a loss-scale
 * overflow (on any rank of the mesh) skipped the update. */
kn_status kn_tp_step(kn_tp *t, const int32_t *x, const int32_t *y, double lr, double *loss, double *gnorm);
/* Every rank's shards gathered into the trainer's model slab and optimizer state (and its
 * step count), on every rank. */
kn_status kn_tp_gather_state(kn_tp *t);
void kn_tp_free(kn_tp *t);
/* ---------------------------------------------------------------- pipeline parallelism
 *
 * p ranks (the pp axis of the mesh, mesh axis 2) hold p*v stages of consecutive blocks of
 * the GPT (core/dist/pp.c): rank r holds chunks c = 0..v-1, model stage c*p + r (v = 1
 * unless the schedule is interleaved). Stage 0 also holds the embeddings (wte, wpe), the
 * last stage ln_f and the logits tied to wte, and the loss: wte lives on both ends, and
 * their gradients are summed between those two ranks before the update (Megatron's
 * embedding group), so both copies stay equal. Each stage is two programs compiled from
 * the model's pieces (kn_gpt_build_part) and autograd: its forward (a recv of the previous
 * stage's activation, or idx, in; a send of its activation, or the loss, out; plus the
 * activations its backward reads, which the runner stashes per micro-batch) and its
 * backward (a recv of its output's gradient in, a send of its input's gradient out, plus
 * its parameters' gradients). The send and recv are IR ops ({mesh=2, parts=p, peer}),
 * run by this rank's context over the pp communicator: a send copies its tensor and
 * completes later (MPI isend / NCCL send), a recv blocks. One optimizer step runs the
 * rank's actions of kn_pp_schedule (kiln/pipeline.h) through the step runner (kiln/step.h:
 * the runner's `grads` hook), sums the parameters' gradients over the micro-batches, and
 * clips by the norm over every stage (each parameter counted once). */

typedef struct kn_pp_config {
    kn_pp_kind schedule;   /* gpipe, 1f1b, interleaved */
    int micro;             /* m: micro-batches per step (>= 1) */
    int chunks;            /* v: chunks per rank; 0: implied (2 for interleaved, else 1) */
    int accum;             /* rounds of the schedule per step, gradients summed (--accum); 0: 1 */
    kn_comm *tp;           /* borrowed, NULL: none; the tensor-parallel axis (a tp x pp mesh): every
                            * stage's graph is placed along it (Megatron's split, kn_place_graph,
                            * mesh axis 1) before it is cut into forward and backward */
    unsigned tp_flags;     /* the placement pass's flags with tp (KN_PLACE_SEQUENCE_PARALLEL: --sp) */
    bool remat_selective;  /* --remat selective: the cut recomputes in a stage's backward the forward
                            * values kn_remat_selective calls cheap (elementwise, views, layernorm)
                            * instead of stashing them; the stash holds their inputs */
} kn_pp_config;

/* One action of the last step, for the timeline: F or B of (micro, chunk), started at t0
 * (seconds from the step's common start, a barrier), its input there at t_ready (after
 * the recv; t0 when none), done at t1. Busy is [t_ready, t1); the rest idle. */
typedef struct kn_pp_record {
    int op, micro, chunk;  /* op: KN_PP_FWD or KN_PP_BWD */
    double t0, t_ready, t1;
    double t_sent;         /* when its send left (after its compute; t1 when it sends nothing) */
} kn_pp_record;

typedef struct kn_pp_stage kn_pp_stage; /* pp.c */

typedef struct kn_pp {
    kn_comm *comm;           /* borrowed: the pp axis (this rank's index: comm->rank) */
    kn_comm **link;          /* owned, 2 p: the axis again, link[d p + s] carrying direction d's
                              * messages (0 activations, 1 gradients) sent by rank s: each
                              * communicator then holds one kind of message from one sender, sent
                              * and received in the same order, and a rank's sends and receives
                              * never share one (NCCL runs a communicator's operations in order on
                              * its stream: a send waiting for its receiver there would hold up
                              * a receive queued behind it) */
    kn_comm *embed;          /* owned: ranks 0 and p-1 (the tied wte's group); NULL elsewhere and
                              * for p = 1 */
    kn_comm *dp;             /* borrowed, NULL: none; the data-parallel axis (kn_pp_set_dp): this
                              * pipeline is replica dp->rank of dp->size */
    kn_comm *tp;             /* borrowed, NULL: none; the tensor-parallel axis (kn_pp_config.tp) */
    int tp_parts, tp_rank;   /* its size and this rank's index (1 and 0 without one) */
    kn_tp_split split;       /* kn_tp_gpt_param's context: each parameter's placement along tp */
    kn_tp_comms tpc;         /* the stages' all_reduce / all_gather / reduce_scatter run over tp */
    kn_placement *place;     /* owned: per parameter its placement along tp (R without tp) */
    kn_param_info *linfo;    /* owned: per parameter its local layout: the tp shard's shape and size,
                              * offsets in the model's order (the model's own without tp) */
    int64_t ln, ln_decay;    /* floats of that layout; the decayed ones first */
    int tp_all_reduce, tp_all_gather, tp_reduce_scatter; /* the conversions the placement pass put in
                              * this rank's stages */
    kn_trainer *tr;          /* borrowed: its batch is one micro-batch */
    kn_pp_config cfg;        /* chunks and accum made explicit */
    int p, rank, v, stages;  /* stages = p * v */
    int round;               /* the schedule's round now running (0 .. accum-1) */
    bool scaled;             /* the stages differentiate loss x "loss_scale" (the trainer's, at
                              * kn_pp_new: fp16's loss scaling) */
    kn_pp_stage *stage;      /* owned: v, chunk c at [c] */
    kn_pp_action *actions;   /* owned: this rank's schedule */
    int nactions;
    /* the parameters this rank owns: contiguous slab ranges, each with its optimizer. They
     * live in this rank's own slabs (the trainer's device), range k at [loff[k], loff[k] +
     * hi[k] - lo[k]): `held` floats of parameters, as many of gradients, the optimizer's
     * state per range. The trainer's whole-model slabs (parameters, gradients, optimizer
     * state, low copies) are freed while the steps run; kn_pp_gather makes them again. */
    int nranges;
    int64_t *lo, *hi;        /* owned: slab offsets */
    int64_t *loff;           /* owned: each range's offset in the local slabs */
    int64_t held;            /* floats of parameters this rank holds */
    kn_tensor *lparam, *lgrad;   /* owned: f32 [held] each, on the trainer's device */
    kn_tensor **lview, **lgview; /* owned: per parameter a view of lparam / lgrad (NULL: not held) */
    kn_dtype low_dt;         /* the weights' low copies the stages read (f32: none) */
    kn_tensor *llow;         /* owned: low_dt [held], rounded from lparam (NULL: none) */
    kn_tensor **llow_view;   /* owned: per parameter a view of llow (NULL: not held) */
    bool low_fresh;          /* llow is lparam rounded (cleared by every update) */
    bool full;               /* the trainer's whole-model slabs exist (after kn_pp_gather) */
    kn_optim *opt;           /* owned: one per range (the trainer's config, its step) */
    kn_tensor **state;       /* owned: per range its optimizer state on the trainer's device */
    bool *owned;             /* owned: per parameter, this rank holds it */
    bool zero1;              /* the optimizer state sharded over dp (kn_pp_set_zero1): this rank
                              * updates local slab [zlo, zhi) only; range k's optimizer and state
                              * then cover [loff[k] + zoff[k], + opt[k].n) of the local slab */
    int64_t zlo, zhi;
    int64_t *zoff;           /* owned (ZeRO-1): per range, where its updated part starts in it */
    /* stashed activations: a slot per (micro, chunk) between its F and its B */
    struct kn_pp_slot *slots;
    int nslots;
    int stash_alive, stash_peak;      /* slots in use now / at the most in the last step */
    int64_t stash_bytes, stash_peak_bytes;
    /* the last step */
    kn_pp_record *events;     /* owned: nactions */
    double t_step0;
    double loss_sum;         /* the last stage's micro-batch losses summed (this rank) */
    double t_ready;          /* set by a recv: when its data arrived */
    double t_sent;           /* set by a send: when it left */
    bool recv_seen;
    bool sent;               /* the action's program ran its send */
    struct kn_pp_sends *sends;   /* owned: sends in flight */
    double test_sleep[2];    /* a test hook (seconds, 0: none): every forward [0] and backward [1]
                              * also sleeps this long (before its send, or after its program when
                              * it sends nothing), so a step's timing is the schedule's and not the
                              * loaded machine's (tests/dist/test_pp.c checks the bubble) */
} kn_pp;

/* The checks a pipeline makes before anything runs, the same on every rank: KN_ERR_ARG with
 * a message naming the fix for: ranks != p, p < 1, layers not divisible into p*v stages, m
 * fewer than p (1f1b, interleaved), a global batch not divisible by m, interleaved with m
 * not a multiple of p or v < 2, gpipe/1f1b with v != 1. */
kn_status kn_pp_check(const kn_gpt_config *g, int p, int ranks, int global_batch, const kn_pp_config *c);
/* Set up on communicator c (the pp axis: p = c->size): the stages of this rank, their
 * programs, the schedule, the owned ranges and their optimizers, and the trainer's step
 * runner's hooks (kn_step_set_comm: from now on kn_pp_step takes the steps). The trainer's
 * batch must be one micro-batch (global batch / (m accum) rows). A loss scale (fp16), set on
 * the trainer before, is differentiated by the last stage and agreed by the step runner
 * (an overflow on any stage's rank skips the step on all: the norm is summed over pp, the
 * overflow flag over dp).
 * Every rank's parameters are made rank 0's; this rank's are copied into its own slabs
 * (kn_pp.lparam) and the trainer's whole-model slabs freed (model->p.slab on the CPU, the
 * device copies on a GPU; the gradient and optimizer-state slabs; the low copies): the
 * trainer is not stepped on its own after this, and its parameters are read only after
 * kn_pp_gather. With cfg->tp (a tp x pp mesh; c is then the pp axis of this rank's tp and dp
 * coordinates) every stage's joint graph is placed along tp before it is cut (Megatron's
 * split; KN_ERR_ARG when the heads or the width do not split, kn_mesh_check_gpt's message),
 * the rank's slabs hold its shards (kn_pp.linfo's layout), the tied wte's gradients are
 * summed per tp coordinate and the norm over tp and pp. */
kn_status kn_pp_new(kn_pp *pp, kn_comm *c, kn_trainer *tr, const kn_pp_config *cfg);
void kn_pp_free(kn_pp *pp);
/* Compose with data parallelism (a dp x pp mesh): call after kn_pp_new, before the first
 * step, on every rank; dp is the axis of the ranks holding the same stages in the other
 * pipelines (NULL or size 1: none). Each pipeline then takes its equal share of the global
 * batch (replica d: micro-batches d m .. d m + m - 1 of the global batch's d_size m), and
 * after its schedule every stage's gradients are summed over dp (one all-reduce of the
 * rank's gradient slab) before the clip, so the update is the one process's on the whole
 * batch; the loss is averaged over dp. Every replica is made dp rank 0's (parameters and
 * optimizer state). Collective over dp. */
kn_status kn_pp_set_dp(kn_pp *pp, kn_comm *dp);
/* ZeRO-1 on the dp axis of a dp x pp (or dp x tp x pp) mesh: after kn_pp_set_dp (with a dp
 * axis), before the first step, on every rank. The rank's local slab (kn_pp.held floats, its
 * ranges one after the other) is cut into dp ranges (kn_dp_shard_ranges); dp rank r keeps
 * the optimizer state of range r only (cut from its ranges' state: a resumed run's
 * continues), updates those parameters, and the ranges are all-gathered over dp after the
 * update. The gradients are still all-reduced over dp (the clip needs the whole slab's
 * norm). kn_pp_gather gathers the state back first. KN_ERR_ARG without a dp axis. */
kn_status kn_pp_set_zero1(kn_pp *pp);
/* One optimizer step on the global batch x, y (global_batch x T each; global_batch = dp
 * size x accum x m x the trainer's rows; pipeline d takes rows of micro-batches d accum m
 * .. (d + 1) accum m - 1, round r its r-th m of them): the schedule's forwards and
 * backwards (accum rounds), the tied gradient summed, the pipelines' gradients summed, the
 * clip over every stage, the update of this rank's parameters (skipped on every rank when
 * a loss scale overflowed anywhere). *loss: the global batch's mean loss on every rank. */
kn_status kn_pp_step(kn_pp *pp, const int32_t *x, const int32_t *y, int global_batch, double lr, double *loss,
                     double *gnorm);
/* Every rank's parameters and optimizer state brought to every rank (each range broadcast
 * by its owner) into the trainer's slabs, made again for it (the parameters, the optimizer
 * state, the low copies; not the gradients), the evaluation program bound to them: before
 * evaluation, sampling, a checkpoint, or a comparison. The next kn_pp_step frees them again
 * (the local slabs are what trains: a change made to the gathered slab is not seen).
 * Collective over the pp axis (and the tp axis: the shards put together, kn_place_gather). */
kn_status kn_pp_gather(kn_pp *pp);
/* The last step's timeline of every rank, gathered (collective); rank 0 writes it to path
 * as TSV ("rank op micro chunk t0 t_ready t1 idle", seconds; idle: the wait before t_ready since
 * the rank's previous action ended) when path is not NULL. *bubble (may
 * be NULL): 1 - busy / (p * makespan) over every rank. */
kn_status kn_pp_timeline(kn_pp *pp, const char *path, double *bubble);
/* Every rank's figures (collective): out[KN_PP_STATS r + k] for rank r < p: k = 0 its stash at
 * the peak of the last step (micro-batch chunks alive), 1 their bytes, 2 the parameters its
 * stages read, differentiate and update (floats: kn_pp.held), then the bytes its own slabs
 * allocated: 3 parameters, 4 gradients, 5 optimizer state, 6 the low copies (0: none). */
enum { KN_PP_STATS = 7 };
kn_status kn_pp_rank_stats(kn_pp *pp, double *out);
/* This rank's stages as text (kiln/ir.h's format, parseable): for each chunk a comment naming
 * the model stage and its blocks, its forward graph, its backward graph. */
kn_status kn_pp_print(FILE *f, const kn_pp *pp);

#ifdef __cplusplus
}
#endif

#endif /* KILN_MESH_H */
