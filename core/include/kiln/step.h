/* kiln/step.h — the step runner: the one object that owns a training step (core/nn/step.c).
 *
 * A training step is more than one run of the joint forward+backward program: it is K
 * micro-batches (gradient accumulation), each a run of the step program on its rows of
 * the batch, the gradients made where the optimizer can read them, the loss averaged,
 * the gradients unscaled (fp16's loss scale), clipped by their global norm, an overflow
 * check that may skip the update, and the update. The runner holds what varies: how many
 * micro-batches, and the communication hooks (kn_step_comm) through which data
 * parallelism (core/dist/dp.c) plugs in. The step program is compiled by the runner
 * alone (kn_step_compile), with the trainer's passes plus the hooks' pass, so whatever
 * recompiles it (a mode, a loss scale, a device) keeps the collectives in it; nothing
 * else swaps the trainer's program. Pipeline parallelism (core/dist/pp.c) takes the
 * micro-batches itself through the `grads` hook: its schedule runs the stages' forward
 * and backward programs and stashes the activations between them; the runner keeps the
 * loss, the clip, the overflow decision and the update.
 *
 * Layering: nn (the runner and the trainer) sits below dist; dist hands the runner a
 * kn_step_comm of function pointers and never the other way round. */
#ifndef KILN_STEP_H
#define KILN_STEP_H

#include "kiln/ir.h"
#include "kiln/program.h"

#ifdef __cplusplus
extern "C" {
#endif

struct kn_trainer;

/* The communication of a step: a backend struct of function pointers plus its context
 * (data parallelism's kn_dp). Every member is required unless marked optional. The runner
 * calls them in this order each step:
 *   for m in 0..micro-1: micro_begin(m, last) · the step program (its collective ops run
 *                        through coll) · micro_end(m, status of the run)
 *   (or, when grads is set, grads(x, y) instead of that loop: a pipeline's schedule)
 *   sum(loss) · clip(scale, ...) · [sum(overflow flag) when a loss scale is on] · update
 * so the hooks never see a half-made step. */
typedef struct kn_step_comm {
    void *ctx;
    int rank, ranks;         /* this process among the ranks: micro-batch m of a step is rows
                              * [(rank*micro + m) * B, ... + B) of the global batch */
    const char *pass;        /* the strategy's pass (kiln/passes.h: "ddp:25"), run after the
                              * trainer's own when the step program is compiled */
    kn_collectives coll;     /* the context of the program's collective ops */
    /* The step program was (re)compiled with `pass`: check it against the hooks' own plan
     * (the buckets), note what it gathers. Optional. */
    kn_status (*compiled)(void *ctx, kn_program *step);
    /* Before micro-batch m's run (last: m == micro-1, when DDP communicates). */
    kn_status (*micro_begin)(void *ctx, int m, bool last);
    /* After it, given the run's status: finish every request in flight (a failed run's too,
     * so no buffer goes while a request still writes it); returns the first error. */
    kn_status (*micro_end)(void *ctx, int m, kn_status run);
    /* *v summed over the ranks (blocking; `what` names it in a timeout message). */
    kn_status (*sum)(void *ctx, double *v, const char *what);
    /* The reduced gradients this rank keeps multiplied by scale (1/(ranks*micro*loss
     * scale)); inject_inf (a test hook) plants +inf in this rank's first one before the
     * norm; *norm gets the global norm (NaN/inf when any gradient anywhere is), the
     * gradients clipped to the trainer's clip. */
    kn_status (*clip)(void *ctx, double scale, bool inject_inf, double *norm);
    /* The optimizer at lr over what this rank keeps; afterwards every rank reads the same
     * parameters (gathered where sharded). */
    kn_status (*update)(void *ctx, double lr);
    /* Optional: the micro-batches taken by the strategy itself instead of the runner's loop
     * (a pipeline schedule, core/dist/pp.c: its stages' programs, not the step program):
     * given the step's rows of x and y, every micro-batch's forward and backward, the
     * gradients summed where clip reads them, *lsum the micro-batches' losses summed (the
     * same on every rank). micro_begin and micro_end are then not called. */
    kn_status (*grads)(void *ctx, const int32_t *x, const int32_t *y, double *lsum);
} kn_step_comm;

/* What the runner holds, inside the trainer (kn_trainer.step). */
typedef struct kn_step_runner {
    int micro;               /* micro-batches per step (>= 1) */
    bool has_comm;           /* comm is set */
    kn_step_comm comm;       /* copied; its ctx borrowed */
    kn_tensor *acc;          /* one process, micro > 1: owned, f32 [p.n] on the trainer's
                              * device, the micro-batches' gradients summed (made at the
                              * first such step, freed when the step is compiled again) */
} kn_step_runner;

/* Give the trainer's steps communication c (copied; NULL: none, one process) and micro
 * micro-batches, and recompile the step program with c's pass and collectives. The
 * trainer's rows (B) are one micro-batch of one rank. One process with micro > 1 sums
 * the micro-batches' gradients on the trainer's device (kn_step_runner.acc) and divides
 * by micro: the gradient of the whole batch's mean loss. */
kn_status kn_step_set_comm(struct kn_trainer *t, const kn_step_comm *c, int micro);

/* Compile the trainer's step (joint) and evaluation (forward) programs for dev, the step
 * with the trainer's passes and the hooks' pass, and bind both to the trainer's state:
 * parameters (those the program reads: ZeRO-3's step reads none, and a trainer whose
 * slab is sharded away defers them), the batch, the loss scale, the gradient outputs
 * (one process: straight into the slab), the weights' low copies; the collectives set.
 * The one place the step program is made. */
kn_status kn_step_compile(struct kn_trainer *t, kn_device dev);

/* One optimizer step on `rows` rows of x, y (T tokens each: the global batch, which is
 * ranks * micro * B rows), as the header comment says; *loss gets the global batch's
 * mean loss (the same on every rank), *gnorm (may be NULL) the global gradient norm.
 * t->skipped says whether a loss-scale overflow (on any rank) skipped the update. */
kn_status kn_step_run(struct kn_trainer *t, const int32_t *x, const int32_t *y, int rows, double lr, double *loss,
                      double *gnorm);

/* dst[i] = a[i] + b[i] over n floats that live on dev (dst may be a or b), by the add
 * node's kernel of dev's backend: the same float sums on every device. The runner's sum of
 * micro-batch gradients, and data parallelism's (core/dist/dp_buckets.c). KN_ERR_ARG for
 * a NULL slab or n < 0. */
kn_status kn_step_add(kn_device dev, float *dst, const float *a, const float *b, int64_t n);

#ifdef __cplusplus
}
#endif

#endif /* KILN_STEP_H */
