/* test_autograd_model.c — autograd on a whole (tiny) transformer block and its contracts.
 *
 * Finite differences in fp64 through every parameter of the model; a training loop run
 * eagerly and as a captured joint graph ends with bitwise equal parameters; zero
 * gradients for what the loss does not use; clear errors for misuse. */
#include "test_ir_util.h"

KN_TEST(autograd_model, gradients_of_a_transformer_block_match_finite_differences) {
    irt_model m;
    irt_model_init(&m, KN_DT_F64, 21);
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
    kn_val pv[IRT_NP], g[IRT_NP];
    kn_val loss = irt_model_forward(b, &m, pv, 0.2);
    KN_ASSERT_OK(kn_backward(b, loss, IRT_NP, pv, g));
    kn_rng r = kn_rng_new(5);
    const double h = 1e-6;
    for (int i = 0; i < IRT_NP; i++) {
        double *p = kn_tensor_data(m.p[i]);
        const double *gd = kn_tensor_data(kn_val_tensor(b, g[i]));
        int64_t n = kn_tensor_numel(m.p[i]);
        for (int s = 0; s < 4; s++) {
            int64_t j = (int64_t)(kn_rng_u32(&r) % (uint32_t)n);
            double keep = p[j], lp, lm;
            for (int sign = 0; sign < 2; sign++) {
                p[j] = keep + (sign ? -h : h);
                kn_builder *fb = NULL;
                kn_val fpv[IRT_NP];
                KN_ASSERT_OK(kn_builder_new(&fb, KN_MODE_EAGER));
                kn_val l = irt_model_forward(fb, &m, fpv, 0.2);
                KN_ASSERT_OK(kn_tensor_item(kn_val_tensor(fb, l), sign ? &lm : &lp));
                kn_builder_free(fb);
            }
            p[j] = keep;
            double num = (lp - lm) / (2 * h);
            cr_assert(fabs(num - gd[j]) <= 1e-7 + 1e-5 * fabs(num), "d loss / d %s[%lld]: backward %.10g, finite differences %.10g",
                      irt_pnames[i], (long long)j, gd[j], num);
        }
    }
    kn_builder_free(b);
    irt_model_free(&m);
}

/* p -= lr * g, elementwise on f32 tensors. */
static void sgd(kn_tensor *p, const kn_tensor *g, float lr) {
    float *pd = kn_tensor_data(p);
    const float *gd = kn_tensor_data(g);
    for (int64_t j = 0; j < kn_tensor_numel(p); j++) pd[j] -= lr * gd[j];
}

KN_TEST(autograd_model, eager_and_captured_training_end_bitwise_equal) {
    irt_model me, mg;
    irt_model_init(&me, KN_DT_F32, 8);
    irt_model_init(&mg, KN_DT_F32, 8);
    double first = 0, last = 0;
    for (int step = 0; step < 6; step++) { /* eager: a fresh builder per step */
        kn_builder *b = NULL;
        kn_val pv[IRT_NP], g[IRT_NP];
        KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
        kn_val loss = irt_model_forward(b, &me, pv, 0.0);
        KN_ASSERT_OK(kn_backward(b, loss, IRT_NP, pv, g));
        KN_ASSERT_OK(kn_tensor_item(kn_val_tensor(b, loss), step ? &last : &first));
        for (int i = 0; i < IRT_NP; i++) sgd(me.p[i], kn_val_tensor(b, g[i]), 0.1f);
        kn_builder_free(b);
    }
    cr_assert(last < first - 0.05, "eager training did not learn: %g -> %g", first, last);

    kn_builder *b = NULL;
    kn_val pv[IRT_NP], g[IRT_NP];
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
    kn_val loss = irt_model_forward(b, &mg, pv, 0.0);
    KN_ASSERT_OK(kn_backward(b, loss, IRT_NP, pv, g));
    kn_builder_output(b, loss);
    for (int i = 0; i < IRT_NP; i++) kn_builder_output(b, g[i]);
    kn_graph *joint = NULL;
    KN_ASSERT_OK(kn_builder_finish(b, &joint));
    kn_builder_free(b);
    kn_interp *it = NULL;
    KN_ASSERT_OK(kn_interp_new(&it, joint));
    irt_model_bind(it, &mg); /* aliases: the in-place updates are seen by the next run */
    for (int step = 0; step < 6; step++) {
        KN_ASSERT_OK(kn_interp_run(it));
        for (int i = 0; i < IRT_NP; i++) sgd(mg.p[i], kn_interp_output(it, 1 + i), 0.1f);
    }
    double glast;
    KN_ASSERT_OK(kn_tensor_item(kn_interp_output(it, 0), &glast));
    cr_assert_eq(glast, last, "last loss: captured %.9g, eager %.9g", glast, last);
    for (int i = 0; i < IRT_NP; i++) cr_assert(irt_same_bits(me.p[i], mg.p[i]), "parameter %s differs", irt_pnames[i]);
    kn_interp_free(it);
    kn_graph_free(joint);
    irt_model_free(&me);
    irt_model_free(&mg);
}

KN_TEST(autograd_model, unused_values_get_zero_gradients_and_reuse_adds_up) {
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
    int64_t s[2] = {2, 3};
    kn_tensor *xt = irt_randn(KN_DT_F64, 2, s, 1), *ut = irt_randn(KN_DT_F64, 2, s, 2);
    kn_val x = kn_param(b, "x", xt), u = kn_param(b, "u", ut);
    kn_val loss = kn_sum(b, kn_add(b, x, kn_mul(b, x, x)), 0, NULL, false); /* d/dx = 1 + 2x */
    kn_val w[2] = {x, u}, g[2];
    KN_ASSERT_OK(kn_backward(b, loss, 2, w, g));
    const double *xd = kn_tensor_data(xt), *gx = kn_tensor_data(kn_val_tensor(b, g[0])), *gu = kn_tensor_data(kn_val_tensor(b, g[1]));
    for (int i = 0; i < 6; i++) {
        KN_ASSERT_CLOSE(gx[i], 1 + 2 * xd[i], 1e-15, 1e-15);
        cr_assert_eq(gu[i], 0.0);
    }
    cr_assert(kn_type_equal(kn_val_type(b, g[1]), kn_val_type(b, u)));
    kn_builder_free(b);
    kn_tensor_free(xt);
    kn_tensor_free(ut);
}

KN_TEST(autograd_model, misuse_gives_clear_errors) {
    int64_t s[2] = {2, 3};
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
    kn_val x = kn_param_typed(b, "x", KN_DT_F32, 2, s), g;
    KN_ASSERT_ERR(kn_backward(b, kn_exp(b, x), 1, &x, &g), KN_ERR_SHAPE);
    cr_assert_str_eq(kn_builder_error(b), "kn_backward: loss f32[2,3] is not a one-element float value");
    kn_builder_free(b);

    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
    x = kn_param_typed(b, "x", KN_DT_F32, 2, s);
    kn_val in[2] = {kn_exp(b, x), x};
    kn_val gb = kn_unary_grad(b, KN_UNARY_GELU, in[0], in[1]);
    kn_val loss = kn_sum(b, gb, 0, NULL, false);
    KN_ASSERT_ERR(kn_backward(b, loss, 1, &x, &g), KN_ERR_UNSUPPORTED);
    cr_assert_str_eq(kn_builder_error(b), "kn_backward: %2 = unary_grad is not differentiable");
    kn_builder_free(b);

    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
    int64_t n = 3;
    kn_val i = kn_input_typed(b, "i", KN_DT_I64, 1, &n);
    x = kn_param_typed(b, "x", KN_DT_F32, 2, s);
    KN_ASSERT_ERR(kn_backward(b, kn_sum(b, x, 0, NULL, false), 1, &i, &g), KN_ERR_ARG);
    cr_assert_str_eq(kn_builder_error(b), "kn_backward: wrt[0] (%0) is not a float value of this builder");
    kn_builder_free(b);

    kn_graph *j = NULL;
    KN_ASSERT_ERR(kn_autograd(NULL, KN_VAL_NONE, 0, NULL, &j, NULL), KN_ERR_ARG);
}

/* Eager forward + backward with the n-th allocation failing: a clean, sticky error. */
KN_TEST(autograd_model, eager_allocation_failures_fail_cleanly) {
    irt_model m;
    irt_model_init(&m, KN_DT_F32, 2);
    bool completed = false;
    for (long n = 0; n < 1000000 && !completed; n += 1 + n / 6) {
        kn_builder *b = NULL;
        kn_val pv[IRT_NP], g[IRT_NP];
        kn_clear_error();
        kn_alloc_fail_after(n);
        kn_status st = kn_builder_new(&b, KN_MODE_EAGER);
        if (st == KN_OK) {
            kn_val loss = irt_model_forward(b, &m, pv, 0.1);
            st = kn_backward(b, loss, IRT_NP, pv, g);
            if (st != KN_OK) cr_assert(kn_builder_error(b)[0] != '\0', "allocation %ld: no message", n);
        }
        kn_alloc_fail_after(-1);
        completed = st == KN_OK;
        if (!completed) cr_assert(st == KN_ERR_OOM || kn_last_error()[0], "allocation %ld: %s without a message", n, kn_status_name(st));
        kn_builder_free(b);
    }
    cr_assert(completed);
    irt_model_free(&m);
}
