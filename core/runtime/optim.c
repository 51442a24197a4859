/* optim.c — SGD with momentum and AdamW over one flat f32 slab, gradient clipping and the
 * learning-rate schedule (contracts in kiln/optim.h).
 *
 * Each update is a single pass over the slab. The arithmetic of one element is done in
 * double and rounded once to f32 when stored, so results do not depend on the compiler's
 * choice of fused multiply-adds in float, and the same state always gives the same step.
 * The state lives in one owned slab (m then v for AdamW) so a checkpoint saves it as one
 * tensor and a resumed run restores it bit for bit.
 *
 * It lives in runtime/ beside its CUDA twin (cuda_optim.cu): the CPU backend
 * (device_cpu.c) runs it for slabs in host memory, and nn/ (the trainer) calls it through
 * kn_device_optim_step, so the layering stays one way (core/mk/layers.py). */
#include <math.h>
#include <string.h>

#include "kiln/optim.h"

kn_optim_config kn_optim_default(void) {
    return (kn_optim_config){.kind = KN_OPTIM_ADAMW, .momentum = 0.0, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                             .weight_decay = 0.1};
}

static bool in01(double x) { return x >= 0.0 && x < 1.0; }

kn_status kn_optim_init(kn_optim *o, const kn_optim_config *cfg, int64_t n, int64_t n_decay) {
    if (!o || !cfg) return kn_error(KN_ERR_ARG, "kn_optim_init: NULL argument");
    if (cfg->kind != KN_OPTIM_SGD && cfg->kind != KN_OPTIM_ADAMW)
        return kn_error(KN_ERR_ARG, "kn_optim_init: unknown optimizer kind %d", (int)cfg->kind);
    if (n < 0 || n_decay < 0 || n_decay > n)
        return kn_error(KN_ERR_ARG, "kn_optim_init: need 0 <= n_decay (%lld) <= n (%lld)", (long long)n_decay,
                        (long long)n);
    if (cfg->kind == KN_OPTIM_SGD && !in01(cfg->momentum))
        return kn_error(KN_ERR_ARG, "kn_optim_init: SGD momentum %g is outside [0, 1)", cfg->momentum);
    if (cfg->kind == KN_OPTIM_ADAMW && (!in01(cfg->beta1) || !in01(cfg->beta2)))
        return kn_error(KN_ERR_ARG, "kn_optim_init: AdamW betas (%g, %g) must lie in [0, 1)", cfg->beta1, cfg->beta2);
    if (cfg->kind == KN_OPTIM_ADAMW && !(cfg->eps > 0.0))
        return kn_error(KN_ERR_ARG, "kn_optim_init: AdamW eps %g must be > 0", cfg->eps);
    if (!(cfg->weight_decay >= 0.0))
        return kn_error(KN_ERR_ARG, "kn_optim_init: weight decay %g must be >= 0", cfg->weight_decay);
    int64_t len = cfg->kind == KN_OPTIM_ADAMW ? 2 * n : n;
    float *state = kn_calloc((size_t)len + 1, sizeof(float));
    if (!state) return kn_error(KN_ERR_OOM, "kn_optim_init: out of memory for %lld state floats", (long long)len);
    *o = (kn_optim){.cfg = *cfg, .n = n, .n_decay = n_decay, .step = 0, .state = state, .state_len = len};
    return KN_OK;
}

void kn_optim_free(kn_optim *o) {
    if (!o) return;
    kn_free(o->state);
    o->state = NULL;
    o->state_len = 0;
}

/* The low copy of element i (see kn_optim_step_low): 16-bit words, or nothing. */
static inline void store_low(kn_dtype dt, uint16_t *low, int64_t i, float x) {
    if (low) low[i] = dt == KN_DT_BF16 ? kn_f32_to_bf16(x) : kn_f32_to_f16(x);
}

/* The updates of elements [lo, hi) of the slab (the whole slab: [0, n)); the caller counts the step.
 * Each is two loops, over the decayed part of the range and the rest (n_decay splits it),
 * with `decay` a constant in each: no branch in the loop, so the compiler vectorizes it
 * (optim.o is built with -O3 -fno-math-errno -ffp-contract=off: core/dist.mk). Lanes do
 * each element's double operations in the same order, unfused (ISO C11 does not contract
 * a * b + c), so the bits are the scalar loop's. */
static inline void sgd_span(const kn_optim *o, float *p, const float *g, float *buf, double lr, kn_dtype ldt,
                            uint16_t *low, int64_t lo, int64_t hi, bool decay) {
    const double mu = o->cfg.momentum, wd = o->cfg.weight_decay;
    bool first = o->step == 0;
    for (int64_t i = lo; i < hi; i++) {
        double gi = (double)g[i];
        if (decay) gi += wd * (double)p[i];
        double b = gi;
        if (mu > 0.0) {
            b = first ? gi : mu * (double)buf[i] + gi;
            buf[i] = (float)b;
        }
        p[i] = (float)((double)p[i] - lr * b);
        store_low(ldt, low, i, p[i]);
    }
}

static inline void adamw_span(const kn_optim *o, float *p, const float *g, float *state, double lr, kn_dtype ldt,
                              uint16_t *low, int64_t lo, int64_t hi, bool decay) {
    const double b1 = o->cfg.beta1, b2 = o->cfg.beta2, eps = o->cfg.eps, wd = o->cfg.weight_decay;
    const double t = (double)(o->step + 1);
    const double c1 = 1.0 - pow(b1, t), c2 = 1.0 - pow(b2, t);
    float *m = state, *v = state + o->n;
    for (int64_t i = lo; i < hi; i++) {
        double pi = (double)p[i], gi = (double)g[i];
        if (decay) pi -= lr * wd * pi;
        double mi = b1 * (double)m[i] + (1.0 - b1) * gi;
        double vi = b2 * (double)v[i] + (1.0 - b2) * gi * gi;
        m[i] = (float)mi;
        v[i] = (float)vi;
        /* the stored (rounded) moments are what a resumed run sees, so use them here too */
        pi -= lr * ((double)m[i] / c1) / (sqrt((double)v[i] / c2) + eps);
        p[i] = (float)pi;
        store_low(ldt, low, i, p[i]);
    }
}

/* n_decay clamped into [lo, hi]: where the range's decayed part ends. */
static int64_t decay_end(const kn_optim *o, int64_t lo, int64_t hi) {
    return o->n_decay < lo ? lo : o->n_decay > hi ? hi : o->n_decay;
}

static void sgd_step(const kn_optim *o, float *p, const float *g, float *buf, double lr, kn_dtype ldt, uint16_t *low,
                     int64_t lo, int64_t hi) {
    int64_t mid = decay_end(o, lo, hi);
    sgd_span(o, p, g, buf, lr, ldt, low, lo, mid, true);
    sgd_span(o, p, g, buf, lr, ldt, low, mid, hi, false);
}

static void adamw_step(const kn_optim *o, float *p, const float *g, float *state, double lr, kn_dtype ldt,
                       uint16_t *low, int64_t lo, int64_t hi) {
    int64_t mid = decay_end(o, lo, hi);
    adamw_span(o, p, g, state, lr, ldt, low, lo, mid, true);
    adamw_span(o, p, g, state, lr, ldt, low, mid, hi, false);
}

kn_status kn_optim_step_low(kn_optim *o, float *param, const float *grad, float *state, double lr, kn_dtype low_dt,
                            void *low) {
    if (!o || !state || (o->n && (!param || !grad)))
        return kn_error(KN_ERR_ARG, "kn_optim_step: optimizer not initialized or NULL slab");
    if (!isfinite(lr) || lr < 0.0) return kn_error(KN_ERR_ARG, "kn_optim_step: learning rate %g is not >= 0", lr);
    if (low && low_dt != KN_DT_BF16 && low_dt != KN_DT_F16)
        return kn_error(KN_ERR_ARG, "kn_optim_step: the weights' low copies are bf16 or f16, not %s",
                        kn_dtype_name(low_dt));
    if (o->cfg.kind == KN_OPTIM_SGD) sgd_step(o, param, grad, state, lr, low_dt, low, 0, o->n);
    else adamw_step(o, param, grad, state, lr, low_dt, low, 0, o->n);
    o->step++;
    return KN_OK;
}

kn_status kn_optim_step_range(const kn_optim *o, float *param, const float *grad, float *state, double lr, int64_t lo,
                              int64_t hi) {
    if (!o || !state || (o->n && (!param || !grad)))
        return kn_error(KN_ERR_ARG, "kn_optim_step_range: optimizer not initialized or NULL slab");
    if (lo < 0 || hi < lo || hi > o->n)
        return kn_error(KN_ERR_ARG, "kn_optim_step_range: range [%lld, %lld) is not inside [0, %lld)", (long long)lo,
                        (long long)hi, (long long)o->n);
    if (!isfinite(lr) || lr < 0.0) return kn_error(KN_ERR_ARG, "kn_optim_step_range: learning rate %g is not >= 0", lr);
    if (o->cfg.kind == KN_OPTIM_SGD) sgd_step(o, param, grad, state, lr, KN_DT_F32, NULL, lo, hi);
    else adamw_step(o, param, grad, state, lr, KN_DT_F32, NULL, lo, hi);
    return KN_OK;
}

kn_status kn_optim_step_state(kn_optim *o, float *param, const float *grad, float *state, double lr) {
    return kn_optim_step_low(o, param, grad, state, lr, KN_DT_F32, NULL);
}

kn_status kn_optim_step(kn_optim *o, float *param, const float *grad, double lr) {
    return kn_optim_step_state(o, param, grad, o ? o->state : NULL, lr);
}

double kn_clip_grad_norm(float *grad, int64_t n, double max_norm) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += (double)grad[i] * (double)grad[i];
    double norm = sqrt(ss);
    if (max_norm > 0.0 && norm > max_norm) {
        double s = max_norm / (norm + 1e-6);
        for (int64_t i = 0; i < n; i++) grad[i] = (float)((double)grad[i] * s);
    }
    return norm;
}

double kn_lr_at(const kn_lr_schedule *s, int64_t step) {
    if (step < 0) step = 0;
    if (s->warmup > 0 && step < s->warmup) return s->lr * (double)(step + 1) / (double)s->warmup;
    int64_t span = s->total - 1 - s->warmup;
    double progress = span > 0 ? (double)(step - s->warmup) / (double)span : 1.0;
    if (progress > 1.0) progress = 1.0;
    if (progress < 0.0) progress = 0.0;
    return s->min_lr + 0.5 * (s->lr - s->min_lr) * (1.0 + cos(3.14159265358979323846 * progress));
}
