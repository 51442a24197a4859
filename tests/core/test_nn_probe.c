/* test_nn_probe.c — kn_trainer_probe (core/nn/probe.c): looking inside a step without
 * taking it. On the CPU its loss equals kn_trainer_eval's, its gradient is bit for bit the
 * one kn_trainer_step then applies (a step with clip 0 and lr 0 leaves it in t->grad), the
 * logits give the same loss when the cross-entropy is recomputed from them in double, and
 * neither the parameters nor the optimizer move. Bad tokens and NULLs are clean errors. On
 * a GPU (skipped without one) the probe agrees with the CPU's to 1e-4 normwise. */
#include <math.h>
#include <string.h>

#include "kiln/device.h"
#include "kiln/nn.h"
#include "kn_test.h"

static const kn_gpt_config k_cfg = {.vocab = 19, .context = 8, .layers = 2, .width = 12, .heads = 3};
enum { B = 2, T = 8, BT = B * T };

static void batch(int32_t *x, int32_t *y, uint64_t seed) {
    kn_rng r = kn_rng_new(seed);
    for (int i = 0; i < BT; i++) x[i] = (int32_t)(kn_rng_u32(&r) % (uint32_t)k_cfg.vocab);
    for (int i = 0; i < BT; i++) y[i] = (int32_t)(kn_rng_u32(&r) % (uint32_t)k_cfg.vocab);
}

/* A model and trainer (clip 0) ready to probe; the caller frees both. */
static void setup(kn_gpt *g, kn_trainer *tr) {
    KN_ASSERT_OK(kn_gpt_new(g, &k_cfg));
    kn_gpt_init(g, 3);
    kn_optim_config oc = kn_optim_default();
    KN_ASSERT_OK(kn_trainer_new(tr, g, B, T, &oc, 0.0));
}

static double mean_cross_entropy(const float *logits, const int32_t *y) {
    const int V = k_cfg.vocab;
    double sum = 0;
    for (int i = 0; i < BT; i++) {
        const float *row = logits + (size_t)i * V;
        double m = row[0], z = 0;
        for (int v = 1; v < V; v++) m = fmax(m, row[v]);
        for (int v = 0; v < V; v++) z += exp((double)row[v] - m);
        sum += m + log(z) - (double)row[y[i]];
    }
    return sum / BT;
}

KN_TEST(nn_probe, matches_eval_and_the_step_and_changes_nothing) {
    kn_gpt g;
    kn_trainer tr;
    setup(&g, &tr);
    int32_t x[BT], y[BT];
    batch(x, y, 5);
    const int64_t n = g.p.n;
    float *before = kn_malloc((size_t)n * sizeof(float)), *grad = kn_malloc((size_t)n * sizeof(float));
    float logits[BT * 19];
    cr_assert(before && grad);
    memcpy(before, g.p.data, (size_t)n * sizeof(float));
    double loss, eval, step_loss;
    KN_ASSERT_OK(kn_trainer_probe(&tr, x, y, &loss, grad, logits));
    cr_assert(memcmp(before, g.p.data, (size_t)n * sizeof(float)) == 0, "the probe changed the parameters");
    cr_assert_eq(tr.opt.step, 0, "the probe took an optimizer step");
    KN_ASSERT_OK(kn_trainer_eval(&tr, x, y, &eval));
    cr_assert(fabs(loss - eval) <= 1e-6 * fabs(eval), "probe loss %.9g, eval loss %.9g", loss, eval);
    double ce = mean_cross_entropy(logits, y);
    cr_assert(fabs(ce - loss) <= 1e-5 * fabs(loss), "cross-entropy of the logits %.9g, loss %.9g", ce, loss);
    double gn = 0;
    for (int64_t i = 0; i < n; i++) gn += (double)grad[i] * grad[i];
    cr_assert(gn > 0, "the gradient is zero");
    /* the step (clip 0, lr 0) computes the same gradient from the same joint graph */
    KN_ASSERT_OK(kn_trainer_step(&tr, x, y, 0.0, &step_loss, NULL));
    cr_assert(step_loss == loss, "step loss %.17g, probe loss %.17g", step_loss, loss);
    cr_assert(memcmp(grad, kn_tensor_data(tr.grad), (size_t)n * sizeof(float)) == 0,
              "the probe's gradient differs from the step's");
    /* optional outputs */
    KN_ASSERT_OK(kn_trainer_probe(&tr, x, y, NULL, NULL, NULL));
    KN_ASSERT_OK(kn_trainer_probe(&tr, x, y, &eval, NULL, NULL));
    cr_assert(eval == loss);
    kn_free(before);
    kn_free(grad);
    kn_trainer_free(&tr);
    kn_gpt_free(&g);
}

KN_TEST(nn_probe, bad_arguments_are_errors) {
    kn_gpt g;
    kn_trainer tr;
    setup(&g, &tr);
    int32_t x[BT], y[BT];
    batch(x, y, 6);
    double loss;
    KN_ASSERT_ERR(kn_trainer_probe(NULL, x, y, &loss, NULL, NULL), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_trainer_probe(&tr, NULL, y, &loss, NULL, NULL), KN_ERR_ARG);
    x[3] = 19;
    KN_ASSERT_ERR(kn_trainer_probe(&tr, x, y, &loss, NULL, NULL), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "outside [0, 19)"), "message: %s", kn_last_error());
    x[3] = 0;
    y[BT - 1] = -1;
    KN_ASSERT_ERR(kn_trainer_probe(&tr, x, y, &loss, NULL, NULL), KN_ERR_ARG);
    kn_trainer_free(&tr);
    kn_gpt_free(&g);
}

/* max |a - b| / max |b| over n floats. */
static double rel_diff(const float *a, const float *b, int64_t n) {
    double d = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return m > 0 ? d / m : d;
}

KN_TEST(cuda_probe, matches_the_cpu) {
    if (kn_device_count(KN_DEVICE_CUDA) == 0) cr_skip_test("no CUDA device: GPU test skipped");
    kn_gpt gc, gg;
    kn_trainer tc, tg;
    setup(&gc, &tc);
    setup(&gg, &tg);
    KN_ASSERT_OK(kn_trainer_to_device(&tg, (kn_device){KN_DEVICE_CUDA, 0}));
    int32_t x[BT], y[BT];
    batch(x, y, 7);
    const int64_t n = gc.p.n;
    float *g1 = kn_malloc((size_t)n * sizeof(float)), *g2 = kn_malloc((size_t)n * sizeof(float));
    float l1[BT * 19], l2[BT * 19];
    cr_assert(g1 && g2);
    double a, b;
    KN_ASSERT_OK(kn_trainer_probe(&tc, x, y, &a, g1, l1));
    KN_ASSERT_OK(kn_trainer_probe(&tg, x, y, &b, g2, l2));
    cr_assert(fabs(a - b) <= 1e-5 * fabs(a), "loss %.9g on the CPU, %.9g on the GPU", a, b);
    double dg = rel_diff(g2, g1, n), dl = rel_diff(l2, l1, BT * 19);
    cr_assert(dg < 1e-4 && dl < 1e-4, "GPU against CPU: gradient %g, logits %g (normwise)", dg, dl);
    cr_assert_eq(tg.opt.step, 0);
    kn_free(g1);
    kn_free(g2);
    kn_trainer_free(&tc);
    kn_trainer_free(&tg);
    kn_gpt_free(&gc);
    kn_gpt_free(&gg);
}
