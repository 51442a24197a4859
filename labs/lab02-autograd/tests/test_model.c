/* test_model.c — lab 02 public test: the whole model with your units.
 *
 * A tiny GPT (core/nn/gpt.c: the same code `make run` trains; 1 layer, width 8, 2 heads,
 * vocab 7, batch 2 x 3 tokens, no square shape anywhere) is built in fp64 in an EAGER
 * builder; kn_backward (yours) differentiates its cross-entropy loss with respect to every
 * parameter, and sampled elements of every gradient are compared with central finite
 * differences. Every rule the model runs is exercised here in the attribute combinations
 * the model uses (matmul with tb=1 and with batch axes, attention's permute, ...). The
 * rule tests (test_rules.c) name the rule when one is wrong; this test says which
 * parameter's gradient is wrong. */
#include "check.h"
#include "kiln/nn.h"

/* The GPT with its parameters as fp64 copies (the model's own slab is f32, too coarse
 * for finite differences): kn_gpt_build only reads the config, the names and the views. */
typedef struct tiny_gpt {
    kn_gpt g;          /* the f32 model (names, layout, initial values) */
    kn_gpt g64;        /* the same with views replaced by p64 */
    kn_tensor **p64;
} tiny_gpt;

static void tiny_init(tiny_gpt *t) {
    kn_gpt_config cfg = {.vocab = 7, .context = 4, .layers = 1, .width = 8, .heads = 2};
    KN_ASSERT_OK(kn_gpt_new(&t->g, &cfg));
    kn_gpt_init(&t->g, 42);
    t->g64 = t->g;
    t->p64 = kn_calloc((size_t)t->g.p.count, sizeof *t->p64);
    cr_assert(t->p64);
    for (int i = 0; i < t->g.p.count; i++) {
        const kn_tensor *v = t->g.p.views[i];
        t->p64[i] = l2_make(KN_DT_F64, v->ndim, v->shape, NULL);
        const float *src = t->g.p.data + t->g.p.info[i].offset;
        /* spread the small initial values out a little so every path carries signal */
        kn_rng r = kn_rng_new(100 + (uint64_t)i);
        for (int64_t j = 0; j < kn_tensor_numel(t->p64[i]); j++) {
            double u;
            kn_rng_uniform_f64(&r, &u, 1);
            ((double *)kn_tensor_data(t->p64[i]))[j] = src[j] + 0.2 * (u - 0.5);
        }
    }
    t->g64.p.views = t->p64;
}

static void tiny_free(tiny_gpt *t) {
    for (int i = 0; i < t->g.p.count; i++) kn_tensor_free(t->p64[i]);
    kn_free(t->p64);
    kn_gpt_free(&t->g);
}

/* Forward (and, with grads != NULL, backward) on a fresh eager builder; returns the loss. */
static double tiny_loss(tiny_gpt *t, const kn_tensor *idx, const kn_tensor *tgt, kn_builder **keep, kn_val *grads) {
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
    kn_val pv[64], logits, loss;
    cr_assert(t->g.p.count <= 64);
    kn_status st = kn_gpt_build(b, &t->g64, kn_input(b, "idx", idx), kn_input(b, "targets", tgt), pv, &logits, &loss);
    cr_assert(st == KN_OK, "tiny GPT: the forward failed: %s", kn_builder_error(b));
    if (grads) {
        st = kn_backward(b, loss, t->g.p.count, pv, grads);
        cr_assert(st == KN_OK, "tiny GPT: kn_backward returned %s: %s", kn_status_name(st), kn_builder_error(b));
    }
    double v = l2_at(kn_val_tensor(b, loss), 0);
    if (keep) *keep = b;
    else kn_builder_free(b);
    return v;
}

KN_TEST(lab02_model, tiny_gpt_gradients_match_finite_differences) {
    tiny_gpt t;
    tiny_init(&t);
    int64_t s[2] = {2, 3};
    kn_tensor *idx = NULL, *tgt = NULL;
    KN_ASSERT_OK(kn_tensor_zeros(&idx, KN_DT_I32, 2, s));
    KN_ASSERT_OK(kn_tensor_zeros(&tgt, KN_DT_I32, 2, s));
    int32_t iv[6] = {1, 4, 2, 6, 0, 3}, tv[6] = {4, 2, 5, 0, 3, 3};
    memcpy(kn_tensor_data(idx), iv, sizeof iv);
    memcpy(kn_tensor_data(tgt), tv, sizeof tv);

    kn_builder *b = NULL;
    kn_val g[64];
    tiny_loss(&t, idx, tgt, &b, g);
    kn_rng r = kn_rng_new(7);
    for (int i = 0; i < t.g.p.count; i++) {
        const char *name = t.g.p.info[i].name;
        const kn_type *gt = l2_type(b, g[i]);
        cr_assert(gt && gt->ndim == t.p64[i]->ndim && kn_type_numel(gt) == kn_tensor_numel(t.p64[i]),
                  "tiny GPT: the gradient of %s does not have its shape", name);
        const kn_tensor *gv = l2_tensor(b, g[i]);
        double *p = kn_tensor_data(t.p64[i]);
        int64_t n = kn_tensor_numel(t.p64[i]);
        for (int k = 0; k < 4; k++) {
            int64_t j = (int64_t)(kn_rng_u32(&r) % (uint32_t)n);
            const double h = 1e-6, keep = p[j];
            p[j] = keep + h;
            double lp = tiny_loss(&t, idx, tgt, NULL, NULL);
            p[j] = keep - h;
            double lm = tiny_loss(&t, idx, tgt, NULL, NULL);
            p[j] = keep;
            double num = (lp - lm) / (2 * h), got = l2_at(gv, j);
            cr_assert(fabs(got - num) <= 1e-7 + 1e-5 * fabs(num),
                      "tiny GPT: d loss / d %s[%lld] = %.10g, finite differences give %.10g", name, (long long)j,
                      got, num);
        }
    }
    kn_builder_free(b);
    kn_tensor_free(idx);
    kn_tensor_free(tgt);
    tiny_free(&t);
}
