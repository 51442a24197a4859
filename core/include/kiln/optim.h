/* kiln/optim.h — optimizers over flat f32 slabs: SGD with momentum, AdamW, global-norm
 * gradient clipping, and the warm-up + cosine learning-rate schedule.
 *
 * Parameters, gradients and optimizer state each live in ONE contiguous slab of n floats
 * (the model's tensors are views into it). That makes an optimizer step a single loop,
 * and later lets data parallelism all-reduce one buffer and ZeRO shard one range.
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

#ifdef __cplusplus
}
#endif

#endif /* KILN_OPTIM_H */
