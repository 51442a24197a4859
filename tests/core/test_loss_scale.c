/* test_loss_scale.c — loss scaling (kiln/optim.h, core/nn/loss_scale.c): the option's
 * parser and checks; a scaled f32 run with a power-of-two scale is bitwise the unscaled
 * run (node by node, eager and compiled, fixed and dynamic with the scale growing on the
 * way); an overflow injected into one step's gradients (kn_trainer.inject_inf) skips that
 * step (parameters, optimizer state and step count untouched, no NaN anywhere), halves
 * the scale, and the scale grows back after growth_interval clean steps. */
#include <math.h>
#include <string.h>

#include "kiln/data.h"
#include "kiln/device.h"
#include "kiln/nn.h"
#include "kn_test.h"

static const kn_gpt_config k_cfg = {.vocab = 7, .context = 8, .layers = 1, .width = 8, .heads = 2};
enum { B = 2, T = 8, NTOK = 300 };

static void tokens(int32_t *toks) {
    for (int i = 0; i < NTOK; i++) toks[i] = (i * i + 3 * i) % 7;
}

/* A model initialized from seed 8 and its trainer (AdamW, clip 1), compiled or not. */
static void setup(kn_gpt *g, kn_trainer *t, bool compiled) {
    kn_optim_config oc = kn_optim_default();
    KN_ASSERT_OK(kn_gpt_new(g, &k_cfg));
    kn_gpt_init(g, 8);
    KN_ASSERT_OK(kn_trainer_new(t, g, B, T, &oc, 1.0));
    if (compiled) KN_ASSERT_OK(kn_trainer_set_compiled(t, true));
}

/* The same, with loss scaling in `mode` from `scale` (dynamic: growing every `interval` steps). */
static void setup_scaled(kn_gpt *g, kn_trainer *t, bool compiled, kn_loss_scale_mode mode, double scale,
                         int64_t interval) {
    setup(g, t, compiled);
    kn_loss_scaler sc = kn_loss_scaler_dynamic();
    sc.mode = mode, sc.scale = scale, sc.growth_interval = interval;
    KN_ASSERT_OK(kn_trainer_set_loss_scale(t, &sc));
}

static void step(kn_trainer *t, const int32_t *toks, int s, double *loss, double *gn) {
    kn_lr_schedule sch = {.lr = 1e-2, .min_lr = 1e-3, .warmup = 3, .total = 12};
    int32_t x[B * T], y[B * T];
    KN_ASSERT_OK(kn_batch_sample(toks, NTOK, B, T, 77, 0, s, x, y));
    KN_ASSERT_OK(kn_trainer_step(t, x, y, kn_lr_at(&sch, s), loss, gn));
}

KN_TEST(loss_scale, parse_and_check) {
    kn_loss_scaler s;
    KN_ASSERT_OK(kn_loss_scaler_parse("auto", false, &s));
    cr_assert_eq(s.mode, KN_LOSS_SCALE_NONE, "auto without fp16 is none");
    KN_ASSERT_OK(kn_loss_scaler_parse("auto", true, &s));
    cr_assert(s.mode == KN_LOSS_SCALE_DYNAMIC && s.scale == 65536 && s.growth_interval == 2000 &&
              s.growth_factor == 2 && s.backoff_factor == 0.5, "auto with fp16 is GradScaler's dynamic default");
    KN_ASSERT_OK(kn_loss_scaler_parse("none", true, &s));
    cr_assert_eq(s.mode, KN_LOSS_SCALE_NONE);
    KN_ASSERT_OK(kn_loss_scaler_parse("dynamic:1024:50", false, &s));
    cr_assert(s.mode == KN_LOSS_SCALE_DYNAMIC && s.scale == 1024 && s.growth_interval == 50);
    KN_ASSERT_OK(kn_loss_scaler_parse("dynamic:8", false, &s));
    cr_assert(s.scale == 8 && s.growth_interval == 2000);
    KN_ASSERT_OK(kn_loss_scaler_parse("128", false, &s));
    cr_assert(s.mode == KN_LOSS_SCALE_FIXED && s.scale == 128);
    const char *bad[] = {"", "dyn", "dynamic:", "dynamic:0", "dynamic:1e30", "dynamic:8:0", "dynamic:8:2.5", "-4",
                         "0", "inf", "nan", "12abc", "dynamicx"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        KN_ASSERT_ERR(kn_loss_scaler_parse(bad[i], false, &s), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "dynamicx"), "the message names the text: %s", kn_last_error());
    kn_loss_scaler d = kn_loss_scaler_dynamic();
    KN_ASSERT_OK(kn_loss_scaler_check(&d));
    d.backoff_factor = 1;
    KN_ASSERT_ERR(kn_loss_scaler_check(&d), KN_ERR_ARG);
    d = kn_loss_scaler_dynamic(), d.growth_factor = 1;
    KN_ASSERT_ERR(kn_loss_scaler_check(&d), KN_ERR_ARG);
    d = kn_loss_scaler_dynamic(), d.scale = 0x1p30;
    KN_ASSERT_ERR(kn_loss_scaler_check(&d), KN_ERR_ARG);
    char text[128];
    kn_loss_scaler_describe(&s, text, sizeof text);
    cr_assert_str_eq(text, "fixed 128");
    float g[5] = {1, -2, INFINITY, NAN, -INFINITY};
    cr_assert_eq(kn_count_nonfinite(g, 5), 3);
    cr_assert_eq(kn_count_nonfinite(g, 2), 0);
}

/* Ten steps with a power-of-two scale are the ten steps without it, bit for bit: every op
 * of the backward is linear in the seed, and multiplying by 2^k is exact in f32. */
static void scaled_equals_unscaled(int mode, const kn_loss_scaler *sc) {
    int32_t toks[NTOK];
    tokens(toks);
    kn_gpt a, b;
    kn_trainer ta, tb;
    setup(&a, &ta, mode == 2);
    setup(&b, &tb, mode == 2);
    ta.eager = tb.eager = mode == 1;
    KN_ASSERT_OK(kn_trainer_set_loss_scale(&tb, sc));
    for (int s = 0; s < 10; s++) {
        double la, lb, ga, gb;
        step(&ta, toks, s, &la, &ga);
        step(&tb, toks, s, &lb, &gb);
        cr_assert(la == lb && ga == gb, "mode %d, step %d: loss %.17g / %.17g, norm %.17g / %.17g", mode, s, la, lb, ga,
                  gb);
        cr_assert(!tb.skipped);
    }
    cr_assert(memcmp(a.p.data, b.p.data, (size_t)a.p.n * sizeof(float)) == 0, "mode %d: parameters differ", mode);
    cr_assert(memcmp(ta.opt.state, tb.opt.state, (size_t)ta.opt.state_len * sizeof(float)) == 0,
              "mode %d: optimizer state differs", mode);
    cr_assert_eq(ta.opt.step, tb.opt.step);
    kn_trainer_free(&ta), kn_trainer_free(&tb), kn_gpt_free(&a), kn_gpt_free(&b);
}

KN_TEST(loss_scale, a_power_of_two_scale_changes_no_bit) {
    kn_loss_scaler fixed = kn_loss_scaler_none();
    fixed.mode = KN_LOSS_SCALE_FIXED, fixed.scale = 0x1p10;
    kn_loss_scaler dyn = kn_loss_scaler_dynamic();
    dyn.growth_interval = 3; /* 2^16 -> 2^19 on the way: a new scale is only an upload */
    for (int mode = 0; mode < 3; mode++) scaled_equals_unscaled(mode, &fixed);
    scaled_equals_unscaled(0, &dyn);
}

KN_TEST(loss_scale, an_injected_overflow_is_skipped_and_the_scale_grows_back) {
    int32_t toks[NTOK];
    tokens(toks);
    kn_gpt g;
    kn_trainer t;
    setup_scaled(&g, &t, false, KN_LOSS_SCALE_DYNAMIC, 1024, 3);
    double loss, gn;
    step(&t, toks, 0, &loss, &gn);
    step(&t, toks, 1, &loss, &gn);
    cr_assert(t.scaler.good_steps == 2 && t.scaler.scale == 1024 && t.opt.step == 2);
    size_t pb = (size_t)g.p.n * sizeof(float), sb = (size_t)t.opt.state_len * sizeof(float);
    float *p0 = malloc(pb), *s0 = malloc(sb);
    memcpy(p0, g.p.data, pb), memcpy(s0, t.opt.state, sb);
    kn_log_level lv = kn_log_get_level();
    kn_log_set_level(KN_LOG_ERROR); /* the skip's warning is expected */
    t.inject_inf = true;
    step(&t, toks, 2, &loss, &gn);
    kn_log_set_level(lv);
    cr_assert(t.skipped && !t.inject_inf, "the step with an inf gradient is skipped and the hook cleared");
    cr_assert(isfinite(loss) && !isfinite(gn), "loss %g finite, norm %g not", loss, gn);
    cr_assert(memcmp(p0, g.p.data, pb) == 0, "a skipped step changed the parameters");
    cr_assert(memcmp(s0, t.opt.state, sb) == 0, "a skipped step changed the optimizer state");
    cr_assert_eq(t.opt.step, 2, "a skipped step does not count as an optimizer step");
    cr_assert(kn_count_nonfinite(g.p.data, g.p.n) == 0, "no parameter is inf or NaN");
    cr_assert(t.scaler.scale == 512 && t.scaler.skipped == 1 && t.scaler.good_steps == 0, "scale %g, skipped %lld",
              t.scaler.scale, (long long)t.scaler.skipped);
    for (int s = 3; s < 6; s++) {
        step(&t, toks, s, &loss, &gn);
        cr_assert(!t.skipped && isfinite(gn));
        cr_assert_eq(t.scaler.scale, s < 5 ? 512 : 1024, "step %d: scale %g", s, t.scaler.scale);
    }
    cr_assert(t.opt.step == 5 && kn_count_nonfinite(g.p.data, g.p.n) == 0);
    /* without a scaler the same overflow is a divergence */
    KN_ASSERT_OK(kn_trainer_set_loss_scale(&t, &(kn_loss_scaler){.mode = KN_LOSS_SCALE_NONE, .scale = 1}));
    cr_assert(t.scale_in == NULL, "scaling off: the step's graph loses its input");
    t.inject_inf = true;
    int32_t x[B * T], y[B * T];
    KN_ASSERT_OK(kn_batch_sample(toks, NTOK, B, T, 77, 0, 6, x, y));
    KN_ASSERT_ERR(kn_trainer_step(&t, x, y, 1e-3, &loss, &gn), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "diverged"), "%s", kn_last_error());
    free(p0), free(s0);
    kn_trainer_free(&t), kn_gpt_free(&g);
}

/* A fixed scale skips an overflowing step too, and keeps its scale. */
KN_TEST(loss_scale, a_fixed_scale_skips_and_stays) {
    int32_t toks[NTOK];
    tokens(toks);
    kn_gpt g;
    kn_trainer t;
    setup_scaled(&g, &t, true, KN_LOSS_SCALE_FIXED, 64, 1);
    double loss, gn;
    kn_log_level lv = kn_log_get_level();
    kn_log_set_level(KN_LOG_ERROR);
    t.inject_inf = true;
    step(&t, toks, 0, &loss, &gn);
    kn_log_set_level(lv);
    cr_assert(t.skipped && t.opt.step == 0 && t.scaler.scale == 64 && t.scaler.skipped == 1);
    step(&t, toks, 1, &loss, &gn);
    cr_assert(!t.skipped && t.opt.step == 1 && t.scaler.scale == 64);
    KN_ASSERT_ERR(kn_trainer_set_loss_scale(&t, &(kn_loss_scaler){.mode = KN_LOSS_SCALE_FIXED, .scale = -1}),
                  KN_ERR_ARG);
    cr_assert_eq(t.scaler.scale, 64, "a refused scaler changes nothing");
    kn_trainer_free(&t), kn_gpt_free(&g);
}

/* On a GPU (skipped without one): the scale goes up as a 4-byte upload, the gradients are
 * unscaled and checked by the device's kernels, and the run is still bitwise the unscaled
 * one; an injected overflow is skipped there too. */
KN_TEST(loss_scale_gpu, bitwise_and_skipping_on_the_gpu) {
    if (kn_device_count(KN_DEVICE_CUDA) == 0) cr_skip_test("no CUDA device: GPU test skipped");
    const kn_device gpu = {KN_DEVICE_CUDA, 0};
    int32_t toks[NTOK];
    tokens(toks);
    kn_gpt a, b;
    kn_trainer ta, tb;
    setup(&a, &ta, false);
    setup(&b, &tb, false);
    KN_ASSERT_OK(kn_trainer_to_device(&ta, gpu));
    KN_ASSERT_OK(kn_trainer_to_device(&tb, gpu));
    kn_loss_scaler sc = kn_loss_scaler_dynamic();
    sc.scale = 1024, sc.growth_interval = 3;
    KN_ASSERT_OK(kn_trainer_set_loss_scale(&tb, &sc));
    for (int s = 0; s < 6; s++) {
        double la, lb, ga, gb;
        step(&ta, toks, s, &la, &ga);
        step(&tb, toks, s, &lb, &gb);
        cr_assert(la == lb && ga == gb, "GPU step %d: loss %.17g / %.17g, norm %.17g / %.17g", s, la, lb, ga, gb);
    }
    cr_assert_eq(tb.scaler.scale, 4096, "two growths in six steps: %g", tb.scaler.scale);
    KN_ASSERT_OK(kn_trainer_sync_host(&ta));
    KN_ASSERT_OK(kn_trainer_sync_host(&tb));
    cr_assert(memcmp(a.p.data, b.p.data, (size_t)a.p.n * sizeof(float)) == 0, "GPU: parameters differ");
    float *p0 = malloc((size_t)b.p.n * sizeof(float));
    memcpy(p0, b.p.data, (size_t)b.p.n * sizeof(float));
    kn_log_level lv = kn_log_get_level();
    kn_log_set_level(KN_LOG_ERROR);
    double loss, gn;
    tb.inject_inf = true;
    step(&tb, toks, 6, &loss, &gn);
    kn_log_set_level(lv);
    KN_ASSERT_OK(kn_trainer_sync_host(&tb));
    cr_assert(tb.skipped && tb.opt.step == 6 && tb.scaler.scale == 2048, "GPU skip: scale %g", tb.scaler.scale);
    cr_assert(memcmp(p0, b.p.data, (size_t)b.p.n * sizeof(float)) == 0, "GPU: a skipped step changed the weights");
    free(p0);
    kn_trainer_free(&ta), kn_trainer_free(&tb), kn_gpt_free(&a), kn_gpt_free(&b);
}
