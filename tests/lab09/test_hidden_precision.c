/* test_hidden_precision.c — lab 09 hidden tests: both roundings equal the core's f64
 * rounding on a sweep of the f32 line, at every bf16 and f16 rounding boundary (the
 * midpoints and their neighbours), on NaN payloads, signed zeros and infinities; the
 * scaler's contract field by field (errors leave it unchanged, modes none and fixed, the
 * bounds, other factors, a long random run against a reference model); and the trainer
 * with your scaler: bitwise the unscaled run, skips, and the scale regrown. */
#include <float.h>

#include "../../labs/lab09-precision/tests/check.h"

KN_TEST(lab09_hidden_round, a_sweep_of_the_f32_line) {
    /* every 251st bit pattern: all exponents, all signs, NaNs and infinities included */
    for (uint64_t u = 0; u <= 0xFFFFFFFFu; u += 251) L9_ROUNDS_LIKE_THE_REFERENCE(l9_f32((uint32_t)u));
    for (uint32_t u = 0xFFFFFF00u; u != 0; u++) L9_ROUNDS_LIKE_THE_REFERENCE(l9_f32(u)); /* the top: NaNs */
    L9_ROUNDINGS_JUDGED();
}

KN_TEST(lab09_hidden_round, every_bf16_boundary) {
    /* for each bf16 b: the f32s b..b+1 end with 16 dropped bits; below, at and above half */
    const uint32_t drop[] = {0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF};
    for (uint32_t b = 0; b < 0x10000; b++)
        for (size_t k = 0; k < sizeof drop / sizeof drop[0]; k++) {
            float x = l9_f32(b << 16 | drop[k]);
            kn_clear_error();
            uint16_t got = l9_bf16(x);
            cr_assert_eq(got, l9_bf16_want(x), "kn_f32_to_bf16(0x%08x) = 0x%04x, want 0x%04x %s", l9_bits(x), got,
                         l9_bf16_want(x), l9_why());
        }
    L9_ROUNDINGS_JUDGED();
}

KN_TEST(lab09_hidden_round, every_f16_boundary) {
    /* for each finite f16 h >= 0: the midpoint to the next one, one f32 ulp either side,
     * and h itself, with both signs; the midpoints of subnormals included */
    for (uint32_t h = 0; h < 0x7C00; h++) {
        double lo = kn_f16_to_f32((uint16_t)h), hi = h + 1 < 0x7C00 ? kn_f16_to_f32((uint16_t)(h + 1)) : 65536.0;
        float mid = (float)((lo + hi) / 2); /* exact: the midpoint needs one more bit than f16 */
        const float xs[] = {(float)lo, mid, nextafterf(mid, 0), nextafterf(mid, INFINITY)};
        for (int k = 0; k < 4; k++) {
            L9_ROUNDS_LIKE_THE_REFERENCE(xs[k]);
            L9_ROUNDS_LIKE_THE_REFERENCE(-xs[k]);
        }
    }
    L9_ROUNDINGS_JUDGED();
}

KN_TEST(lab09_hidden_round, specials) {
    const uint32_t c[] = {0x7F800000u, 0xFF800000u, 0x00000000u, 0x80000000u, 0x7FC00000u, 0xFFC00000u, 0x7F800001u,
                          0x7FFFFFFFu, 0xFF80FFFFu, 0x7FBF0000u, 0x7F7FFFFFu, 0x477FEFFFu, 0x477FF000u, 0x33000000u,
                          0x33000001u, 0x387FFFFFu, 0x38800000u, 0x00800000u, 0x007FFFFFu, 0x3F7FFFFFu};
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) L9_ROUNDS_LIKE_THE_REFERENCE(l9_f32(c[i]));
    L9_ROUNDINGS_JUDGED();
    /* a NaN whose payload is only in the dropped bits must not become Inf */
    uint16_t b = kn_f32_to_bf16(l9_f32(0x7F800001u)), h = kn_f32_to_f16(l9_f32(0x7F800001u));
    cr_assert(b == 0x7FC0 && h == 0x7E00, "quiet NaNs: bf16 0x%04x, f16 0x%04x %s", b, h, l9_why());
}

/* Every invalid field is refused with KN_ERR_ARG, and the scaler is left as it was. */
KN_TEST(lab09_hidden_scaler, bad_scalers_are_refused_unchanged) {
    kn_loss_scaler ok = kn_loss_scaler_dynamic(), s;
    ok.scale = 64, ok.good_steps = 5, ok.skipped = 2;
    for (int field = 0; field < 8; field++) {
        s = ok;
        switch (field) {
        case 0: s.scale = 0; break;
        case 1: s.scale = INFINITY; break;
        case 2: s.growth_factor = 1; break;
        case 3: s.backoff_factor = 1; break;
        case 4: s.backoff_factor = 0; break;
        case 5: s.growth_interval = 0; break;
        case 6: s.min_scale = 128; break;
        case 7: s.max_scale = 32; break;
        }
        kn_loss_scaler copy = s;
        for (int inf = 0; inf < 2; inf++) {
            KN_ASSERT_ERR(kn_loss_scale_update(&s, inf), KN_ERR_ARG);
            cr_assert(memcmp(&s, &copy, sizeof s) == 0, "bad field %d: the scaler changed", field);
        }
    }
    s = ok, s.mode = (kn_loss_scale_mode)7;
    KN_ASSERT_ERR(kn_loss_scale_update(&s, false), KN_ERR_ARG);
}

KN_TEST(lab09_hidden_scaler, none_and_fixed) {
    kn_loss_scaler s = kn_loss_scaler_none(), want;
    s.good_steps = 3, s.skipped = 4;
    want = s;
    KN_ASSERT_OK(kn_loss_scale_update(&s, true));
    KN_ASSERT_OK(kn_loss_scale_update(&s, false));
    cr_assert(memcmp(&s, &want, sizeof s) == 0, "mode none: nothing changes");
    s.mode = KN_LOSS_SCALE_FIXED, s.scale = 8, s.growth_interval = 2, s.good_steps = 0, s.skipped = 0;
    for (int i = 0; i < 5; i++) KN_ASSERT_OK(kn_loss_scale_update(&s, false));
    cr_assert(s.scale == 8 && s.good_steps == 5, "fixed: counts clean steps (%lld) and keeps its scale (%g)",
              (long long)s.good_steps, s.scale);
    KN_ASSERT_OK(kn_loss_scale_update(&s, true));
    cr_assert(s.scale == 8 && s.good_steps == 0 && s.skipped == 1, "fixed: counts the skip, keeps the scale");
}

KN_TEST(lab09_hidden_scaler, bounds_and_other_factors) {
    kn_loss_scaler s = kn_loss_scaler_dynamic();
    s.scale = 4, s.min_scale = 1, s.max_scale = 16, s.growth_interval = 1;
    KN_ASSERT_OK(kn_loss_scale_update(&s, false));
    cr_assert_eq(s.scale, 8, "interval 1: every clean step grows (%g)", s.scale);
    KN_ASSERT_OK(kn_loss_scale_update(&s, false));
    KN_ASSERT_OK(kn_loss_scale_update(&s, false));
    cr_assert(s.scale == 16 && s.good_steps == 0, "the scale stops at max_scale (%g), good_steps %lld", s.scale,
              (long long)s.good_steps);
    for (int i = 0; i < 6; i++) KN_ASSERT_OK(kn_loss_scale_update(&s, true));
    cr_assert(s.scale == 1 && s.skipped == 6, "the scale stops at min_scale (%g)", s.scale);
    s = kn_loss_scaler_dynamic();
    s.scale = 3, s.min_scale = 0.5, s.max_scale = 1000, s.growth_factor = 4, s.backoff_factor = 0.25,
    s.growth_interval = 2;
    KN_ASSERT_OK(kn_loss_scale_update(&s, true));
    cr_assert_eq(s.scale, 0.75, "backoff 0.25 of 3: %g", s.scale);
    KN_ASSERT_OK(kn_loss_scale_update(&s, true));
    cr_assert_eq(s.scale, 0.5, "not below min_scale 0.5: %g", s.scale);
    KN_ASSERT_OK(kn_loss_scale_update(&s, false));
    KN_ASSERT_OK(kn_loss_scale_update(&s, false));
    cr_assert_eq(s.scale, 2, "growth 4 after 2 clean steps: %g", s.scale);
    s.max_scale = 5;
    KN_ASSERT_OK(kn_loss_scale_update(&s, false));
    KN_ASSERT_OK(kn_loss_scale_update(&s, false));
    cr_assert_eq(s.scale, 5, "growth capped at max_scale 5: %g", s.scale);
}

KN_TEST(lab09_hidden_scaler, a_long_run_follows_the_rule) {
    kn_loss_scaler s = kn_loss_scaler_dynamic(), m;
    s.growth_interval = 7, s.good_steps = 2, s.skipped = 10;
    m = s;
    uint32_t r = 12345;
    for (int i = 0; i < 5000; i++) {
        r = r * 1103515245u + 12345u;
        bool inf = (r >> 16) % 9 == 0;
        KN_ASSERT_OK(kn_loss_scale_update(&s, inf));
        l9_scaler_model(&m, inf);
        char what[48];
        snprintf(what, sizeof what, "update %d (%s)", i, inf ? "inf" : "clean");
        L9_SAME_SCALER(s, m, what);
        cr_assert(s.mode == KN_LOSS_SCALE_DYNAMIC && s.growth_factor == 2 && s.backoff_factor == 0.5 &&
                  s.growth_interval == 7, "the settings do not change");
    }
}

/* With your scaler the trainer's dynamic run is bitwise the unscaled one while the scale
 * grows, and an overflow in the middle is skipped and regrown. */
KN_TEST(lab09_hidden_train, scaled_training_is_bitwise_unscaled) {
    kn_gpt a, b;
    kn_trainer ta, tb;
    l9_trainer(&a, &ta);
    l9_trainer(&b, &tb);
    kn_loss_scaler s = kn_loss_scaler_dynamic();
    s.scale = 16, s.growth_interval = 2;
    KN_ASSERT_OK(kn_trainer_set_loss_scale(&tb, &s));
    for (int i = 0; i < 10; i++) {
        double la, lb;
        l9_step_ref(&ta, i, &la, NULL); /* the unscaled run: the checker's own */
        l9_step(&tb, i, &lb, NULL);
        cr_assert(la == lb, "step %d: loss %.17g unscaled, %.17g scaled", i, la, lb);
    }
    l9_out_trainer(&tb, &b);
    cr_assert_eq(tb.scaler.scale, 16 * 32, "five growths in ten clean steps: %g", tb.scaler.scale);
    cr_assert(memcmp(a.p.data, b.p.data, (size_t)a.p.n * sizeof(float)) == 0, "parameters differ");
    kn_trainer_free(&ta), kn_trainer_free(&tb), kn_gpt_free(&a), kn_gpt_free(&b);
}

KN_TEST(lab09_hidden_train, overflows_are_skipped_and_the_scale_regrows) {
    kn_gpt g;
    kn_trainer t;
    l9_scaled_trainer(&g, &t, 1024, 3);
    kn_log_set_level(KN_LOG_ERROR);
    const double want[] = {1024, 1024, 512, 256, 256, 256, 512, 512, 512, 1024};
    for (int i = 0; i < 10; i++) {
        t.inject_inf = i == 2 || i == 3;
        double gn;
        l9_step(&t, i, NULL, &gn);
        l9_out_trainer(&t, &g);
        cr_assert_eq(t.skipped, i == 2 || i == 3, "step %d skipped: %d", i, t.skipped);
        cr_assert_eq(t.scaler.scale, want[i], "after step %d: scale %g, want %g", i, t.scaler.scale, want[i]);
        cr_assert_eq(kn_count_nonfinite(g.p.data, g.p.n), 0, "step %d: a weight is inf or NaN", i);
    }
    cr_assert(t.opt.step == 8 && t.scaler.skipped == 2, "8 updates and 2 skips (opt.step %lld)", (long long)t.opt.step);
    kn_trainer_free(&t), kn_gpt_free(&g);
}
