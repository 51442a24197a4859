/* loss_scale.c — loss scaling for fp16 training: the scaler's settings and their parsing
 * (kiln/optim.h), and the two places a scaled training step differs from a plain one
 * (core/nn/nn_impl.h, called by core/nn/trainer.c).
 *
 * A scaled step (kn_trainer_set_loss_scale turns it on):
 *   1. the joint graph differentiates loss * S instead of the loss (S is the 0-d input
 *      "loss_scale", so changing S recompiles nothing); the loss it reports is unscaled;
 *   2. the gradients land in the slab S times too large: kn_trainer_unscale divides them by
 *      S (and, for tests, plants an inf first when asked: kn_trainer.inject_inf);
 *   3. the clip computes the gradient norm anyway; it is inf or NaN exactly when some
 *      gradient is (a sum of squares of finite floats, in double, cannot overflow), so
 *      that norm is the check: kn_trainer_scaler_after decides whether the step is skipped,
 *      updates the scaler (lab 09's kn_loss_scale_update), logs a skip, and uploads S.
 *
 * A skipped step leaves the parameters, the optimizer state and the optimizer's step count
 * (kn_optim.step, which AdamW's bias correction reads) exactly as they were; the caller's
 * own step counter (the batch, the learning-rate schedule) moves on, as PyTorch's does
 * when GradScaler skips optimizer.step(). So after a run, opt.step = steps run - skipped. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/device.h"
#include "kiln/nn.h"
#include "nn/nn_impl.h"

kn_loss_scaler kn_loss_scaler_none(void) {
    return (kn_loss_scaler){.mode = KN_LOSS_SCALE_NONE, .scale = 1, .growth_factor = 2, .backoff_factor = 0.5,
                            .growth_interval = 2000, .min_scale = 0x1p-24, .max_scale = 0x1p24};
}

kn_loss_scaler kn_loss_scaler_dynamic(void) {
    kn_loss_scaler s = kn_loss_scaler_none();
    s.mode = KN_LOSS_SCALE_DYNAMIC;
    s.scale = 0x1p16;
    return s;
}

kn_status kn_loss_scaler_check(const kn_loss_scaler *s) {
    if (!s) return kn_error(KN_ERR_ARG, "kn_loss_scaler_check: NULL scaler");
    if (s->mode != KN_LOSS_SCALE_NONE && s->mode != KN_LOSS_SCALE_FIXED && s->mode != KN_LOSS_SCALE_DYNAMIC)
        return kn_error(KN_ERR_ARG, "loss scaler: unknown mode %d", (int)s->mode);
    if (!(s->scale > 0) || !isfinite(s->scale))
        return kn_error(KN_ERR_ARG, "loss scaler: scale %g must be finite and > 0", s->scale);
    if (s->mode != KN_LOSS_SCALE_DYNAMIC) return KN_OK;
    if (!(s->growth_factor > 1) || !isfinite(s->growth_factor))
        return kn_error(KN_ERR_ARG, "loss scaler: growth factor %g must be finite and > 1", s->growth_factor);
    if (!(s->backoff_factor > 0 && s->backoff_factor < 1))
        return kn_error(KN_ERR_ARG, "loss scaler: backoff factor %g must lie in (0, 1)", s->backoff_factor);
    if (s->growth_interval < 1)
        return kn_error(KN_ERR_ARG, "loss scaler: growth interval %lld must be >= 1", (long long)s->growth_interval);
    if (!(s->min_scale > 0 && s->min_scale <= s->scale && s->scale <= s->max_scale) || !isfinite(s->max_scale))
        return kn_error(KN_ERR_ARG, "loss scaler: need 0 < min scale (%g) <= scale (%g) <= max scale (%g), finite",
                        s->min_scale, s->scale, s->max_scale);
    return KN_OK;
}

/* A number > 0 that fills `text` (strtod), or false. */
static bool number(const char *text, double *out) {
    char *end = NULL;
    double v = strtod(text, &end);
    if (end == text || *end || !(v > 0) || !isfinite(v)) return false;
    *out = v;
    return true;
}

kn_status kn_loss_scaler_parse(const char *text, bool fp16, kn_loss_scaler *out) {
    if (!text || !out) return kn_error(KN_ERR_ARG, "kn_loss_scaler_parse: NULL argument");
    kn_loss_scaler s = kn_loss_scaler_none();
    const char *want = "expected auto, none, dynamic[:INIT[:INTERVAL]] or a fixed scale > 0";
    if (!strcmp(text, "auto")) {
        if (fp16) s = kn_loss_scaler_dynamic();
    } else if (!strcmp(text, "none")) {
    } else if (!strncmp(text, "dynamic", 7) && (text[7] == '\0' || text[7] == ':')) {
        s = kn_loss_scaler_dynamic();
        char buf[64];
        snprintf(buf, sizeof buf, "%s", text[7] ? text + 8 : "");
        char *colon = strchr(buf, ':');
        if (colon) *colon = '\0';
        double init = 0, interval = 0;
        if (text[7] && (!number(buf, &init) || init < s.min_scale || init > s.max_scale))
            return kn_error(KN_ERR_ARG, "--loss-scale %s: the initial scale '%s' is not a number in [2^-24, 2^24]",
                            text, buf);
        if (colon && (!number(colon + 1, &interval) || interval != floor(interval) || interval > 1e12))
            return kn_error(KN_ERR_ARG, "--loss-scale %s: the growth interval '%s' is not a whole number >= 1", text,
                            colon + 1);
        if (init > 0) s.scale = init;
        if (interval > 0) s.growth_interval = (int64_t)interval;
    } else if (number(text, &s.scale)) {
        s.mode = KN_LOSS_SCALE_FIXED;
    } else {
        return kn_error(KN_ERR_ARG, "--loss-scale '%s': %s", text, want);
    }
    KN_TRY(kn_loss_scaler_check(&s));
    *out = s;
    return KN_OK;
}

void kn_loss_scaler_describe(const kn_loss_scaler *s, char *buf, size_t n) {
    if (!s || s->mode == KN_LOSS_SCALE_NONE) snprintf(buf, n, "none");
    else if (s->mode == KN_LOSS_SCALE_FIXED) snprintf(buf, n, "fixed %g", s->scale);
    else
        snprintf(buf, n, "dynamic %g (x%g after %lld clean steps, x%g on inf/NaN)", s->scale, s->growth_factor,
                 (long long)s->growth_interval, s->backoff_factor);
}

int64_t kn_count_nonfinite(const float *x, int64_t n) {
    int64_t c = 0;
    for (int64_t i = 0; x && i < n; i++) c += !isfinite(x[i]);
    return c;
}

/* S into the trainer's 0-d input on its device. */
kn_status kn_trainer_upload_scale(kn_trainer *t) {
    if (!t->scale_in) return KN_OK;
    float s = (float)t->scaler.scale;
    return kn_device_memcpy(t->dev, kn_tensor_data(t->scale_in), KN_CPU, &s, sizeof s);
}

kn_status kn_trainer_unscale(kn_trainer *t, float *grad, int64_t n) {
    if (t->inject_inf) { /* the test hook: an overflow in the first gradient */
        float inf = INFINITY;
        t->inject_inf = false;
        if (n > 0) KN_TRY(kn_device_memcpy(t->dev, grad, KN_CPU, &inf, sizeof inf));
    }
    if (t->scaler.mode == KN_LOSS_SCALE_NONE || t->scaler.scale == 1) return KN_OK;
    return kn_device_scale(t->dev, grad, n, 1.0 / t->scaler.scale);
}

kn_status kn_trainer_scaler_after(kn_trainer *t, double loss, double norm, bool *skip) {
    *skip = false;
    if (t->scaler.mode == KN_LOSS_SCALE_NONE) return KN_OK;
    /* a non-finite loss is not the scale's doing (the forward pass is unscaled): the
     * trainer's divergence check reports it */
    bool found = isfinite(loss) && !isfinite(norm);
    double before = t->scaler.scale;
    KN_TRY(kn_loss_scale_update(&t->scaler, found));
    if (found) {
        *skip = true;
        kn_log(KN_LOG_WARN, "kn_trainer_step: inf/NaN in the gradients at loss scale %g: step skipped (optimizer "
               "step %lld unchanged, %lld skipped so far); loss scale now %g", before, (long long)t->opt.step,
               (long long)t->scaler.skipped, t->scaler.scale);
    }
    return t->scaler.scale != before ? kn_trainer_upload_scale(t) : KN_OK;
}
