/* nn_impl.h — what core/nn's files share and nothing else sees: the steps of a loss-scaled
 * training step (core/nn/loss_scale.c) and the trainer's pieces (core/nn/trainer.c), called
 * by the step runner (core/nn/step.c) and the trainer. */
#ifndef KILN_NN_IMPL_H
#define KILN_NN_IMPL_H

#include "kiln/nn.h"

/* Write t->scaler.scale into t->scale_in (on t->dev); no-op without scaling. */
kn_status kn_trainer_upload_scale(kn_trainer *t);
/* Before the clip: plant +inf in grad[0] when t->inject_inf (then clear it), and divide
 * the n gradients by the scale when scaling is on. */
kn_status kn_trainer_unscale(kn_trainer *t, float *grad, int64_t n);
/* After the clip measured the (unscaled) gradient norm: with scaling on, a finite loss and
 * a non-finite norm mean an overflow: *skip = true, the scaler backs off and the skip is
 * logged; otherwise the scaler counts a clean step. The new scale is uploaded. */
kn_status kn_trainer_scaler_after(kn_trainer *t, double loss, double norm, bool *skip);

/* trainer.c: free the weights' low copies (kn_trainer.low); KN_OK when the trainer holds
 * its parameter, view and gradient slabs, else an error naming fn (ZeRO shards them). */
void kn_trainer_low_free(kn_trainer *t);
kn_status kn_trainer_check_slabs(const kn_trainer *t, const char *fn);
/* step.c: the optimizer over the whole slab on the trainer's device, writing the weights'
 * low copies in the same pass when there are any. */
kn_status kn_trainer_optim_step(kn_trainer *t, float *param, float *grad, float *state, double lr);

#endif /* KILN_NN_IMPL_H */
