/* test_optim_steps.c — SGD with momentum, AdamW, clipping and the schedule against steps
 * worked out by hand (the arithmetic is in the comments). */
#include <math.h>
#include <string.h>

#include "kiln/optim.h"
#include "kn_test.h"

KN_TEST(optim, sgd_momentum_two_steps) {
    /* mu 0.9, lr 0.1; element 0 decayed (wd 0.5), element 1 not.
     * step 1: g0 = 0.5 + 0.5*1 = 1.0, buf0 = 1.0, p0 = 1 - 0.1 = 0.9
     *         g1 = 0.5,              buf1 = 0.5, p1 = 1 - 0.05 = 0.95
     * step 2: g0 = 0.5 + 0.5*0.9 = 0.95, buf0 = 0.9*1.0 + 0.95 = 1.85, p0 = 0.9 - 0.185 = 0.715
     *         g1 = 0.5,                  buf1 = 0.9*0.5 + 0.5 = 0.95,  p1 = 0.95 - 0.095 = 0.855 */
    kn_optim_config c = {.kind = KN_OPTIM_SGD, .momentum = 0.9, .weight_decay = 0.5};
    kn_optim o;
    KN_ASSERT_OK(kn_optim_init(&o, &c, 2, 1));
    float p[2] = {1, 1}, g[2] = {0.5f, 0.5f};
    KN_ASSERT_OK(kn_optim_step(&o, p, g, 0.1));
    KN_ASSERT_CLOSE(p[0], 0.9, 1e-6, 0);
    KN_ASSERT_CLOSE(p[1], 0.95, 1e-6, 0);
    KN_ASSERT_OK(kn_optim_step(&o, p, g, 0.1));
    KN_ASSERT_CLOSE(p[0], 0.715, 1e-6, 0);
    KN_ASSERT_CLOSE(p[1], 0.855, 1e-6, 0);
    cr_assert_eq(o.step, 2);
    cr_assert_eq(o.state_len, 2);
    kn_optim_free(&o);
}

KN_TEST(optim, plain_sgd) {
    kn_optim_config c = {.kind = KN_OPTIM_SGD};
    kn_optim o;
    KN_ASSERT_OK(kn_optim_init(&o, &c, 3, 0));
    float p[3] = {1, 2, 3}, g[3] = {1, -1, 0};
    KN_ASSERT_OK(kn_optim_step(&o, p, g, 0.5));
    KN_ASSERT_OK(kn_optim_step(&o, p, g, 0.5));
    cr_assert(p[0] == 0.0f && p[1] == 3.0f && p[2] == 3.0f, "p = %g %g %g", p[0], p[1], p[2]);
    kn_optim_free(&o);
}

KN_TEST(optim, adamw_two_steps) {
    /* b1 0.9, b2 0.95, eps 1e-8, lr 0.1, wd 0.1 on element 0 only; p = 1, g = 0.5 then -0.25.
     * step 1 (t=1): m = 0.05, v = 0.0125, mhat = 0.5, vhat = 0.25, update = 0.1*0.5/(0.5+1e-8)
     *   p0 = 1*(1 - 0.01) - 0.1*(1 - 2e-8) = 0.890000002;  p1 = 1 - 0.1*(1-2e-8) = 0.900000002
     * step 2 (t=2): m = 0.045 - 0.025 = 0.02, v = 0.011875 + 0.003125 = 0.015,
     *   mhat = 0.02/0.19 = 0.10526316, vhat = 0.015/0.0975 = 0.15384615, sqrt = 0.39223227,
     *   update = 0.1*0.10526316/0.39223227 = 0.02683702
     *   p0 = 0.890000002*(0.99) - 0.02683702 = 0.85426298;  p1 = 0.900000002 - 0.02683702 = 0.87316298 */
    kn_optim_config c = {.kind = KN_OPTIM_ADAMW, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
    kn_optim o;
    KN_ASSERT_OK(kn_optim_init(&o, &c, 2, 1));
    cr_assert_eq(o.state_len, 4, "m and v in one slab");
    float p[2] = {1, 1}, g[2] = {0.5f, 0.5f};
    KN_ASSERT_OK(kn_optim_step(&o, p, g, 0.1));
    KN_ASSERT_CLOSE(p[0], 0.89, 1e-6, 0);
    KN_ASSERT_CLOSE(p[1], 0.90, 1e-6, 0);
    KN_ASSERT_CLOSE(o.state[0], 0.05, 1e-7, 0);
    KN_ASSERT_CLOSE(o.state[2], 0.0125, 1e-7, 0);
    g[0] = g[1] = -0.25f;
    KN_ASSERT_OK(kn_optim_step(&o, p, g, 0.1));
    KN_ASSERT_CLOSE(p[0], 0.85426298, 2e-6, 0);
    KN_ASSERT_CLOSE(p[1], 0.87316298, 2e-6, 0);
    kn_optim_free(&o);
}

KN_TEST(optim, same_state_same_step_bitwise) {
    kn_optim_config c = kn_optim_default();
    kn_optim a, b;
    KN_ASSERT_OK(kn_optim_init(&a, &c, 5, 3));
    KN_ASSERT_OK(kn_optim_init(&b, &c, 5, 3));
    float pa[5] = {1, -2, 3, 0.5f, 0}, pb[5], g[5] = {0.1f, 0.2f, -0.3f, 4, -5};
    for (int s = 0; s < 3; s++) KN_ASSERT_OK(kn_optim_step(&a, pa, g, 1e-3));
    /* resume: copy params, state and step into a fresh optimizer, then both step once more */
    memcpy(pb, pa, sizeof pa);
    memcpy(b.state, a.state, (size_t)a.state_len * sizeof(float));
    b.step = a.step;
    KN_ASSERT_OK(kn_optim_step(&a, pa, g, 1e-3));
    KN_ASSERT_OK(kn_optim_step(&b, pb, g, 1e-3));
    cr_assert(memcmp(pa, pb, sizeof pa) == 0, "a resumed optimizer steps bit-identically");
    kn_optim_free(&a);
    kn_optim_free(&b);
}

KN_TEST(optim, bad_configs) {
    kn_optim o;
    kn_optim_config c = kn_optim_default();
    c.beta1 = 1.0;
    KN_ASSERT_ERR(kn_optim_init(&o, &c, 4, 0), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "betas") != NULL, "%s", kn_last_error());
    c = kn_optim_default();
    c.eps = 0;
    KN_ASSERT_ERR(kn_optim_init(&o, &c, 4, 0), KN_ERR_ARG);
    c = kn_optim_default();
    KN_ASSERT_ERR(kn_optim_init(&o, &c, 4, 5), KN_ERR_ARG);
    c.weight_decay = -1;
    KN_ASSERT_ERR(kn_optim_init(&o, &c, 4, 0), KN_ERR_ARG);
    c = (kn_optim_config){.kind = KN_OPTIM_SGD, .momentum = -0.1};
    KN_ASSERT_ERR(kn_optim_init(&o, &c, 4, 0), KN_ERR_ARG);
    c = kn_optim_default();
    KN_ASSERT_OK(kn_optim_init(&o, &c, 1, 0));
    float p = 1, g = 1;
    KN_ASSERT_ERR(kn_optim_step(&o, &p, &g, NAN), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_optim_step(&o, &p, &g, -1), KN_ERR_ARG);
    kn_optim_free(&o);
}

KN_TEST(optim, clip_grad_norm) {
    float g[2] = {3, 4};
    double n = kn_clip_grad_norm(g, 2, 10.0);
    KN_ASSERT_CLOSE(n, 5.0, 1e-12, 0);
    cr_assert(g[0] == 3 && g[1] == 4, "below the limit nothing changes");
    n = kn_clip_grad_norm(g, 2, 1.0);
    KN_ASSERT_CLOSE(n, 5.0, 1e-12, 0);
    KN_ASSERT_CLOSE(g[0], 0.6, 1e-6, 0);
    KN_ASSERT_CLOSE(g[1], 0.8, 1e-6, 0);
    KN_ASSERT_CLOSE(kn_clip_grad_norm(g, 2, 0.0), 1.0, 1e-6, 0); /* 0 disables, still measures */
}

KN_TEST(optim, warmup_cosine_schedule) {
    /* lr 1, min 0.1, warm-up 10 steps, 111 steps: cosine over steps 10..110 (span 100) */
    kn_lr_schedule s = {.lr = 1.0, .min_lr = 0.1, .warmup = 10, .total = 111};
    KN_ASSERT_CLOSE(kn_lr_at(&s, 0), 0.1, 1e-12, 0);
    KN_ASSERT_CLOSE(kn_lr_at(&s, 4), 0.5, 1e-12, 0);
    KN_ASSERT_CLOSE(kn_lr_at(&s, 9), 1.0, 1e-12, 0);
    KN_ASSERT_CLOSE(kn_lr_at(&s, 10), 1.0, 1e-12, 0);
    KN_ASSERT_CLOSE(kn_lr_at(&s, 60), 0.55, 1e-12, 0);      /* halfway: (1 + 0.1) / 2 */
    KN_ASSERT_CLOSE(kn_lr_at(&s, 35), 0.1 + 0.45 * (1 + sqrt(0.5)) /* cos(pi/4) */, 1e-12, 0);
    KN_ASSERT_CLOSE(kn_lr_at(&s, 110), 0.1, 1e-12, 0);
    KN_ASSERT_CLOSE(kn_lr_at(&s, 500), 0.1, 1e-12, 0);
    kn_lr_schedule none = {.lr = 0.5, .min_lr = 0.5, .warmup = 0, .total = 1};
    KN_ASSERT_CLOSE(kn_lr_at(&none, 0), 0.5, 1e-12, 0);
}
