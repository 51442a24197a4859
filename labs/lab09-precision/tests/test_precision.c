/* test_precision.c — lab 09 public tests: round to nearest even into bf16 and f16 on the
 * cases of the lesson (ties, carries, overflow, subnormals, NaN), a tensor cast that goes
 * through your rounding, the loss scaler's backoff and growth, and a training run that
 * skips an injected overflow with your scaler. */
#include <float.h>

#include "check.h"

KN_TEST(lab09_bf16, ties_go_to_even_and_carries_ripple) {
    const struct { float x; uint16_t want; } c[] = {
        {1.0f, 0x3F80},                 {1.0f + 0x1p-8f, 0x3F80}, /* a tie: 1 is even */
        {1.0f + 3 * 0x1p-8f, 0x3F82},   /* a tie: 1 + 2^-6 is even */
        {1.0f + 0x1p-8f + 0x1p-20f, 0x3F81}, {-2.5f, 0xC020},
        {0x1.FFp0f, 0x4000},            /* rounds up into the next binade */
        {FLT_MAX, 0x7F80},              /* past bf16's largest: Inf */
        {-0.0f, 0x8000},                {0x1p-149f, 0x0000}, /* the smallest f32 subnormal rounds to +0 */
        {INFINITY, 0x7F80},             {-INFINITY, 0xFF80},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        kn_clear_error();
        uint16_t got = kn_f32_to_bf16(c[i].x);
        cr_assert_eq(got, c[i].want, "kn_f32_to_bf16(%a) = 0x%04x, want 0x%04x %s", (double)c[i].x, got, c[i].want,
                     l9_why());
    }
    uint16_t n = kn_f32_to_bf16(NAN);
    cr_assert((n & 0x7F80) == 0x7F80 && (n & 0x7F), "NaN must stay NaN: 0x%04x %s", n, l9_why());
}

/* A NaN whose payload is in the low bits (the GPU's NaN is 0x7FFFFFFF) must not round: the
 * carry would make it Inf, or wrap it to -0, and a NaN gradient cast to bf16 would reach
 * the loss scaler as a number, so the step that must be skipped is taken. */
KN_TEST(lab09_bf16, nan_payloads_stay_nan) {
    const uint32_t nans[] = {0x7FFFFFFFu, 0x7F800001u, 0xFFFFFFFFu, 0x7FBFFFFFu, 0xFF80FFFFu};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        kn_clear_error();
        uint16_t n = kn_f32_to_bf16(l9_f32(nans[i]));
        cr_assert((n & 0x7F80) == 0x7F80 && (n & 0x7F), "kn_f32_to_bf16 of the NaN 0x%08x = 0x%04x: not a NaN %s",
                  nans[i], n, l9_why());
    }
    float x[4] = {1.5f, l9_f32(0x7FFFFFFFu), -2.0f, l9_f32(0x7F800001u)};
    uint16_t b[4];
    kn_dtype_convert(KN_DT_BF16, b, KN_DT_F32, x, 4);
    cr_assert((b[1] & 0x7FFF) > 0x7F80 && (b[3] & 0x7FFF) > 0x7F80, "a tensor cast keeps its NaNs: 0x%04x 0x%04x",
              b[1], b[3]);
}

KN_TEST(lab09_f16, normals_subnormals_and_overflow) {
    const struct { float x; uint16_t want; } c[] = {
        {1.0f, 0x3C00},        {1.0f + 0x1p-11f, 0x3C00}, /* a tie to even */
        {-2.0f, 0xC000},       {65504.0f, 0x7BFF},        {65519.99f, 0x7BFF},
        {65520.0f, 0x7C00},    /* the tie above the largest goes to Inf */
        {1e10f, 0x7C00},       {0x1p-14f, 0x0400}, /* the smallest normal */
        {0x1p-24f, 0x0001},    /* the smallest subnormal */
        {0x1p-25f, 0x0000},    /* half of it: a tie, to 0 */
        {0x1.8p-24f, 0x0002},  /* 1.5 units: a tie, to 2 */
        {-0x1p-30f, 0x8000},   {0.1f, 0x2E66},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        kn_clear_error();
        uint16_t got = kn_f32_to_f16(c[i].x);
        cr_assert_eq(got, c[i].want, "kn_f32_to_f16(%a) = 0x%04x, want 0x%04x %s", (double)c[i].x, got, c[i].want,
                     l9_why());
    }
}

KN_TEST(lab09_cast, a_tensor_cast_rounds_with_your_units) {
    enum { N = 4096 };
    float x[N];
    uint16_t b[N], h[N];
    for (int i = 0; i < N; i++) x[i] = (float)((i * 2654435761u % 200001) - 100000) * 0.37f / (float)(1 + i % 7);
    /* one dtype at a time, so that a failure names that dtype's unit (l9_why: the last error) */
    kn_clear_error();
    kn_dtype_convert(KN_DT_BF16, b, KN_DT_F32, x, N);
    for (int i = 0; i < N; i++)
        cr_assert_eq(b[i], l9_bf16_want(x[i]), "bf16 of %a: 0x%04x, want 0x%04x %s", (double)x[i], b[i],
                     l9_bf16_want(x[i]), l9_why());
    kn_clear_error();
    kn_dtype_convert(KN_DT_F16, h, KN_DT_F32, x, N);
    for (int i = 0; i < N; i++)
        cr_assert_eq(h[i], l9_f16_want(x[i]), "f16 of %a: 0x%04x, want 0x%04x %s", (double)x[i], h[i],
                     l9_f16_want(x[i]), l9_why());
}

KN_TEST(lab09_scaler, backoff_then_growth) {
    kn_loss_scaler s = kn_loss_scaler_dynamic();
    s.scale = 1024, s.growth_interval = 3;
    KN_ASSERT_OK(kn_loss_scale_update(&s, false));
    KN_ASSERT_OK(kn_loss_scale_update(&s, false));
    cr_assert(s.scale == 1024 && s.good_steps == 2, "two clean steps of 3: scale %g, good_steps %lld", s.scale,
              (long long)s.good_steps);
    KN_ASSERT_OK(kn_loss_scale_update(&s, true));
    cr_assert(s.scale == 512 && s.good_steps == 0 && s.skipped == 1, "an overflow: scale %g (want 512), good_steps "
              "%lld (want 0), skipped %lld (want 1)", s.scale, (long long)s.good_steps, (long long)s.skipped);
    for (int i = 0; i < 3; i++) KN_ASSERT_OK(kn_loss_scale_update(&s, false));
    cr_assert(s.scale == 1024 && s.good_steps == 0, "3 clean steps after it: scale %g (want 1024), good_steps %lld",
              s.scale, (long long)s.good_steps);
    KN_ASSERT_ERR(kn_loss_scale_update(NULL, false), KN_ERR_ARG);
}

/* S stays in [min_scale, max_scale]: a run of overflows (a NaN in every step, say) must not
 * take S to 0, where every scaled gradient is 0 and the weights stop moving, nor a long clean
 * run to Inf. */
KN_TEST(lab09_scaler, stays_within_min_and_max) {
    kn_loss_scaler s = kn_loss_scaler_dynamic();
    s.scale = 4, s.min_scale = 2, s.max_scale = 16, s.growth_interval = 1;
    for (int i = 0; i < 3; i++) KN_ASSERT_OK(kn_loss_scale_update(&s, true));
    cr_assert(s.scale == 2 && s.skipped == 3, "3 overflows from 4 with min_scale 2: scale %g (want 2), skipped %lld",
              s.scale, (long long)s.skipped);
    for (int i = 0; i < 5; i++) KN_ASSERT_OK(kn_loss_scale_update(&s, false));
    cr_assert(s.scale == 16, "5 growths from 2 with max_scale 16: scale %g (want 16)", s.scale);
    s.scale = 3, s.min_scale = 2; /* not a power of two: the clamp, not the halving, gives 2 */
    KN_ASSERT_OK(kn_loss_scale_update(&s, true));
    cr_assert(s.scale == 2, "an overflow at 3 with min_scale 2: scale %g (want 2)", s.scale);
}

KN_TEST(lab09_train, an_injected_overflow_is_skipped) {
    kn_gpt g;
    kn_trainer t;
    l9_scaled_trainer(&g, &t, 256, 2);
    l9_step(&t, 0, NULL, NULL);
    l9_out_trainer(&t, &g);
    float *before = malloc((size_t)g.p.n * sizeof(float));
    memcpy(before, g.p.data, (size_t)g.p.n * sizeof(float));
    kn_log_set_level(KN_LOG_ERROR);
    t.inject_inf = true;
    l9_step(&t, 1, NULL, NULL);
    l9_out_trainer(&t, &g);
    cr_assert(t.skipped && t.opt.step == 1, "the overflowing step is skipped");
    cr_assert(memcmp(before, g.p.data, (size_t)g.p.n * sizeof(float)) == 0, "and leaves the weights alone");
    cr_assert_eq(t.scaler.scale, 128, "the scale halves: %g", t.scaler.scale);
    l9_step(&t, 2, NULL, NULL);
    l9_step(&t, 3, NULL, NULL);
    l9_out_trainer(&t, &g);
    cr_assert(t.scaler.scale == 256 && t.opt.step == 3, "two clean steps later it is back: %g", t.scaler.scale);
    free(before);
    kn_trainer_free(&t), kn_gpt_free(&g);
}
