/* scaler.c — lab 09 unit: the dynamic loss scaler's rule (kn_loss_scale_update; contract
 * in kiln/optim.h).
 *
 * Training in fp16 multiplies the loss by a scale S before the backward pass, so that the
 * gradients, S times larger, stay above fp16's smallest values (2^-24) instead of
 * rounding to zero; the trainer divides them by S again before the optimizer. Too large
 * an S overflows instead: a gradient becomes inf (fp16's largest is 65504), or NaN. No
 * S is right for a whole run (gradients shrink as the loss falls), so the scaler searches:
 *
 *     inf or NaN found    the step is skipped (the trainer leaves the weights alone);
 *                         S *= backoff_factor (0.5), good_steps = 0, skipped += 1
 *     a clean step        good_steps += 1; after growth_interval of them in a row,
 *                         S *= growth_factor (2) and good_steps = 0
 *
 * so S sits just below the overflow point: it halves as soon as it is too large and tries
 * twice as large again every growth_interval steps (PyTorch's GradScaler: 2000). S stays
 * in [min_scale, max_scale]. With factors that are powers of two, S stays a power of two,
 * and multiplying by it is exact. A fixed scaler (mode FIXED) only counts; mode NONE does
 * nothing at all. */
#include "kiln/optim.h"

kn_status kn_loss_scale_update(kn_loss_scaler *s, bool found_inf) {
    if (!s) return kn_error(KN_ERR_ARG, "kn_loss_scale_update: NULL scaler");
    /* BEGIN SOLUTION */
    KN_TRY(kn_loss_scaler_check(s));
    if (s->mode == KN_LOSS_SCALE_NONE) return KN_OK;
    bool dynamic = s->mode == KN_LOSS_SCALE_DYNAMIC;
    if (found_inf) {
        s->skipped++;
        s->good_steps = 0;
        if (dynamic) {
            double down = s->scale * s->backoff_factor;
            s->scale = down < s->min_scale ? s->min_scale : down;
        }
        return KN_OK;
    }
    s->good_steps++;
    if (dynamic && s->good_steps >= s->growth_interval) {
        double up = s->scale * s->growth_factor;
        s->scale = up > s->max_scale ? s->max_scale : up;
        s->good_steps = 0;
    }
    return KN_OK;
    /* SKELETON
    // check s (kn_loss_scaler_check); mode NONE: nothing; found_inf: count the skip,
    // restart the clean streak, back off (dynamic); clean: count it and grow after
    // growth_interval in a row (dynamic). S stays in [min_scale, max_scale].
    (void)found_inf;
    return kn_not_implemented("lab09", "kn_loss_scale_update: the dynamic loss scaler's rule");
    END SOLUTION */
}
