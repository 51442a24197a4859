/* kiln/optim.h — optimizers over flat f32 slabs: SGD with momentum, AdamW, global-norm
 * gradient clipping, the warm-up + cosine learning-rate schedule, and loss scaling for fp16.
 *
 * Parameters, gradients and optimizer state each live in ONE contiguous slab of n floats
 * (the model's tensors are views into it). That makes an optimizer step a single loop,
 * and lets data parallelism all-reduce one buffer and ZeRO shard one range.
 * Weight decay applies to the first n_decay elements only: the model lays out the
 * matrices (which are decayed) before the biases and norm gains (which are not).
 *
 * Every update is elementwise and computed in a fixed order with sums in double, so a step
 * is bitwise reproducible: a run resumed from a checkpoint of (params, state, step)
 * continues exactly as the uninterrupted run. */
#ifndef KILN_OPTIM_H
#define KILN_OPTIM_H

#include "kiln/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kn_optim_kind { KN_OPTIM_SGD = 0, KN_OPTIM_ADAMW, KN_OPTIM_COUNT } kn_optim_kind;

typedef struct kn_optim_config {
    kn_optim_kind kind;
    double momentum;      /* SGD: mu in [0, 1); 0 is plain SGD */
    double beta1, beta2;  /* AdamW: in [0, 1) (0.9, 0.95 for GPTs) */
    double eps;           /* AdamW: > 0 (1e-8) */
    double weight_decay;  /* >= 0; SGD: added to the gradient (L2); AdamW: decoupled */
} kn_optim_config;

/* The defaults: AdamW, beta1 0.9, beta2 0.95, eps 1e-8, weight decay 0.1. */
kn_optim_config kn_optim_default(void);

typedef struct kn_optim {
    kn_optim_config cfg;
    int64_t n;          /* parameters in the slab */
    int64_t n_decay;    /* the first n_decay of them get weight decay */
    int64_t step;       /* updates done so far (AdamW's bias correction uses step + 1) */
    float *state;       /* owned, one slab: SGD: momentum buffer [n]; AdamW: m [n] then v [n] */
    int64_t state_len;  /* n (SGD) or 2n (AdamW) */
} kn_optim;

/* Zeroed state for n parameters. KN_ERR_ARG naming the field for a bad config
 * (momentum or betas outside [0, 1), eps <= 0, weight decay < 0, n_decay outside [0, n]). */
kn_status kn_optim_init(kn_optim *o, const kn_optim_config *cfg, int64_t n, int64_t n_decay);
void kn_optim_free(kn_optim *o);

/* One update of param[0..n) with grad[0..n) at learning rate lr, then step += 1.
 *   SGD:    g = grad + wd * p;  buf = mu * buf + g  (buf = g on the first step);  p -= lr * buf
 *   AdamW:  p -= lr * wd * p;   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
 *           p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps),  t = step + 1
 * (PyTorch's torch.optim.SGD and AdamW, computed in double per element, stored as f32). */
kn_status kn_optim_step(kn_optim *o, float *param, const float *grad, double lr);
/* The same update with the state slab given (o->state_len floats; o->state is not
 * touched): the CPU backend's optimizer kernel (kn_device_optim_step). */
kn_status kn_optim_step_state(kn_optim *o, float *param, const float *grad, float *state, double lr);
/* Mixed precision's fused update: the same, and in the same pass over memory each updated
 * parameter rounded to low_dt (KN_DT_BF16 or KN_DT_F16; lab 09's kn_f32_to_bf16 /
 * kn_f32_to_f16 of the stored f32, so bitwise a cast of the updated slab) is written to
 * low[0..n) (16-bit words): the low-precision copies of the weights a step reads (params
 * NAME@bf16 of the pass lowparams, kiln/passes.h), made without a second pass over the f32
 * slab. low NULL: kn_optim_step_state. KN_ERR_ARG for another low_dt. */
kn_status kn_optim_step_low(kn_optim *o, float *param, const float *grad, float *state, double lr, kn_dtype low_dt,
                            void *low);

/* Part of one update: elements [lo, hi) of the slabs (param, grad: the whole slab's
 * pointers; state: o->state_len floats, m then v for AdamW), exactly as kn_optim_step
 * updates them, and o->step is NOT counted: the caller calls it over ranges that cover
 * [0, n) once each, then adds 1 to o->step, and has the same bits as one kn_optim_step.
 * ZeRO-Offload's host step (kiln/offload.h) updates the slab chunk by chunk this way while
 * the next chunk's gradients are still on their way down. KN_ERR_ARG for a range outside
 * [0, n), a NULL slab or a bad learning rate. */
kn_status kn_optim_step_range(const kn_optim *o, float *param, const float *grad, float *state, double lr, int64_t lo,
                              int64_t hi);

/* Global-norm clipping: norm = sqrt(sum grad^2) (accumulated in double); when norm >
 * max_norm, grad *= max_norm / (norm + 1e-6). max_norm <= 0 disables clipping (the norm
 * is still returned). Returns the norm before clipping. */
double kn_clip_grad_norm(float *grad, int64_t n, double max_norm);

/* Learning rate at step s (0-based): linear warm-up from lr/warmup to lr over the first
 * `warmup` steps ((s + 1) / warmup * lr), then cosine decay from lr to min_lr at step
 * total - 1 (and min_lr after). warmup may be 0; total >= 1. */
typedef struct kn_lr_schedule {
    double lr, min_lr;
    int64_t warmup, total;
} kn_lr_schedule;
double kn_lr_at(const kn_lr_schedule *s, int64_t step);

/* ---------------------------------------------------------------- loss scaling
 * fp16 has 5 exponent bits: gradients below 2^-24 round to zero and the backward pass
 * loses them. Loss scaling multiplies the loss by S before the backward pass (so every
 * gradient is S times larger, up where fp16 holds it) and divides the gradients by S
 * before the optimizer sees them. Dynamic loss scaling searches for the largest S that
 * does not overflow: an inf or NaN in the gradients means S was too large, so that step
 * is skipped (weights, optimizer state and its step count untouched) and S shrinks
 * (backoff); after growth_interval clean steps in a row S grows. PyTorch's GradScaler and
 * apex's dynamic loss scaler follow the same rule. bf16 keeps f32's exponent range and
 * needs none of this (lesson 09). With a power-of-two S the f32 arithmetic of the scaled
 * step is exact: the same bits as without scaling, unless a value overflows. */

typedef enum kn_loss_scale_mode {
    KN_LOSS_SCALE_NONE = 0, /* no scaling (f32, bf16) */
    KN_LOSS_SCALE_FIXED,    /* a constant scale; a step with inf/NaN gradients is still skipped */
    KN_LOSS_SCALE_DYNAMIC,  /* backoff on inf/NaN, growth after growth_interval clean steps */
} kn_loss_scale_mode;

typedef struct kn_loss_scaler {
    kn_loss_scale_mode mode;
    double scale;             /* S: the loss is multiplied by it, the gradients divided */
    double growth_factor;     /* dynamic: S *= growth_factor after growth_interval clean steps (2) */
    double backoff_factor;    /* dynamic: S *= backoff_factor on inf/NaN (0.5) */
    int64_t growth_interval;  /* dynamic: clean steps in a row before S grows (2000) */
    double min_scale;         /* dynamic: S never goes below (2^-24) ... */
    double max_scale;         /* ... nor above (2^24) */
    int64_t good_steps;       /* clean steps since S last changed (or since the last skip) */
    int64_t skipped;          /* steps skipped so far (inf/NaN found) */
} kn_loss_scaler;

/* No scaling (mode NONE, scale 1). */
kn_loss_scaler kn_loss_scaler_none(void);
/* PyTorch's GradScaler defaults: S = 2^16, growth 2, backoff 0.5, interval 2000, S in
 * [2^-24, 2^24]. */
kn_loss_scaler kn_loss_scaler_dynamic(void);
/* KN_ERR_ARG naming the field when s cannot be used: scale not finite and > 0; dynamic:
 * growth_factor <= 1, backoff_factor outside (0, 1), growth_interval < 1, or not
 * 0 < min_scale <= scale <= max_scale. */
kn_status kn_loss_scaler_check(const kn_loss_scaler *s);
/* Parse `kiln train --loss-scale`: "auto" (dynamic when fp16, else none), "none",
 * "dynamic[:INIT[:INTERVAL]]" (initial scale, growth interval), or a number > 0 (fixed).
 * KN_ERR_ARG naming the text when it is none of those. */
kn_status kn_loss_scaler_parse(const char *text, bool fp16, kn_loss_scaler *out);
/* "none", "fixed 1024", "dynamic 65536 (x2 after 2000 clean steps, x0.5 on inf/NaN)". */
void kn_loss_scaler_describe(const kn_loss_scaler *s, char *buf, size_t n);
/* The number of inf and NaN values in x[0..n) (host memory). */
int64_t kn_count_nonfinite(const float *x, int64_t n);

/* ---------------------------------------------------------------- lab 09 units
 * Written by the student in labs/lab09-precision/ (the staff's units are linked for every
 * other lab); kiln's trainer calls it after every scaled step (core/nn/trainer.c). The
 * rounding units of lab 09 (kn_f32_to_bf16, kn_f32_to_f16) are declared in kiln/base.h.
 *
 * kn_loss_scale_update (scaler.c): the scaler's rule after a step whose gradients were
 * checked. KN_ERR_ARG for NULL or a scaler kn_loss_scaler_check refuses (s unchanged).
 *   mode NONE: nothing changes.
 *   found_inf (the step was skipped): skipped += 1, good_steps = 0; dynamic: S *=
 *     backoff_factor, but not below min_scale.
 *   clean: good_steps += 1; dynamic: when good_steps reaches growth_interval, S *=
 *     growth_factor (not above max_scale) and good_steps = 0.
 * A fixed scaler counts skipped and good steps but keeps S. */
kn_status kn_loss_scale_update(kn_loss_scaler *s, bool found_inf);

#ifdef __cplusplus
}
#endif

#endif /* KILN_OPTIM_H */
