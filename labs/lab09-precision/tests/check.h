/* check.h — helpers for lab 09's tests (public and hidden): the core's rounding from f64
 * (the reference your units must equal), f32 values from their bits, a reference model of
 * the loss scaler's rule, and a tiny GPT trainer with loss scaling. */
#ifndef LAB09_CHECK_H
#define LAB09_CHECK_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kn_test.h"
#include "kiln/data.h"
#include "kiln/nn.h"
#include "kiln/optim.h"

static inline float l9_f32(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}
static inline uint32_t l9_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* kiln's message when a unit left one (a skeleton's "not implemented (lab09: ...)"), else "". */
static inline const char *l9_why(void) { return kn_last_error(); }

/* The rounding of x computed from its exact value in double by the core (one rounding,
 * to nearest, ties to even): what your units must return, bit for bit. */
static inline uint16_t l9_bf16_want(float x) { return kn_f64_to_bf16((double)x); }
static inline uint16_t l9_f16_want(float x) { return kn_f64_to_f16((double)x); }

/* Both units on x against the reference; the first difference fails the test. */
#define L9_ROUNDS_LIKE_THE_REFERENCE(x)                                                                            \
    do {                                                                                                           \
        float x_ = (x);                                                                                            \
        kn_clear_error();                                                                                          \
        uint16_t b_ = kn_f32_to_bf16(x_), h_ = kn_f32_to_f16(x_);                                                  \
        cr_assert_eq(b_, l9_bf16_want(x_), "kn_f32_to_bf16(%a = 0x%08x) = 0x%04x, want 0x%04x %s", (double)x_,     \
                     l9_bits(x_), b_, l9_bf16_want(x_), l9_why());                                                 \
        cr_assert_eq(h_, l9_f16_want(x_), "kn_f32_to_f16(%a = 0x%08x) = 0x%04x, want 0x%04x %s", (double)x_,       \
                     l9_bits(x_), h_, l9_f16_want(x_), l9_why());                                                  \
    } while (0)

/* The scaler's rule written out once more, plainly (kiln/optim.h): for comparing long runs. */
static inline void l9_scaler_model(kn_loss_scaler *s, bool found_inf) {
    if (s->mode == KN_LOSS_SCALE_NONE) return;
    if (found_inf) {
        s->skipped += 1;
        s->good_steps = 0;
        if (s->mode == KN_LOSS_SCALE_DYNAMIC) s->scale = fmax(s->scale * s->backoff_factor, s->min_scale);
        return;
    }
    s->good_steps += 1;
    if (s->mode == KN_LOSS_SCALE_DYNAMIC && s->good_steps == s->growth_interval) {
        s->scale = fmin(s->scale * s->growth_factor, s->max_scale);
        s->good_steps = 0;
    }
}

#define L9_SAME_SCALER(a, b, what)                                                                                 \
    cr_assert((a).scale == (b).scale && (a).good_steps == (b).good_steps && (a).skipped == (b).skipped,            \
              "%s: scale %g, good_steps %lld, skipped %lld; want %g, %lld, %lld", what, (a).scale,                \
              (long long)(a).good_steps, (long long)(a).skipped, (b).scale, (long long)(b).good_steps,            \
              (long long)(b).skipped)

/* A tiny GPT and its trainer (AdamW, clip 1, graph mode), seed 8. */
static const kn_gpt_config L9_GPT = {.vocab = 7, .context = 8, .layers = 1, .width = 8, .heads = 2};
enum { L9_B = 2, L9_T = 8, L9_NTOK = 300 };

static inline void l9_trainer(kn_gpt *g, kn_trainer *t) {
    kn_optim_config oc = kn_optim_default();
    KN_ASSERT_OK(kn_gpt_new(g, &L9_GPT));
    kn_gpt_init(g, 8);
    KN_ASSERT_OK(kn_trainer_new(t, g, L9_B, L9_T, &oc, 1.0));
}

/* The same with a dynamic loss scale starting at `scale`, growing every `interval` steps. */
static inline void l9_scaled_trainer(kn_gpt *g, kn_trainer *t, double scale, int64_t interval) {
    l9_trainer(g, t);
    kn_loss_scaler s = kn_loss_scaler_dynamic();
    s.scale = scale, s.growth_interval = interval;
    KN_ASSERT_OK(kn_trainer_set_loss_scale(t, &s));
}

/* Training step s on a fixed token stream; *loss and *gn may be NULL. */
static inline void l9_step(kn_trainer *t, int s, double *loss, double *gn) {
    int32_t toks[L9_NTOK], x[L9_B * L9_T], y[L9_B * L9_T];
    for (int i = 0; i < L9_NTOK; i++) toks[i] = (i * i + 3 * i) % 7;
    KN_ASSERT_OK(kn_batch_sample(toks, L9_NTOK, L9_B, L9_T, 77, 0, s, x, y));
    KN_ASSERT_OK(kn_trainer_step(t, x, y, 1e-2, loss, gn));
}

#endif
