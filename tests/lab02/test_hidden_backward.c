/* test_hidden_backward.c — lab 02 hidden tests: the reverse pass on harder graphs
 * (diamonds, long chains, fan-out, a wrt listed twice), kn_sum_to against a brute-force
 * reference on random shapes, eager gradients equal bitwise to the ones of the captured
 * joint graph, and errors that stay sticky. */
/* The helpers of the public tests (tensors from arrays, the fp64 finite-difference check):
 * the grader takes only unit files from a submission, so this is always the staff copy. */
#include "../../labs/lab02-autograd/tests/check.h"

/* A diamond with fan-out: a = tanh(x), b = exp(x), c = a*b + a/b, loss uses c and x. */
static kn_val f_diamond(kn_builder *b, const kn_val *x, void *ctx) {
    (void)ctx;
    kn_val a = kn_tanh(b, x[0]), e = kn_exp(b, x[0]);
    kn_val c = kn_add(b, kn_mul(b, a, e), kn_div(b, a, e));
    return kn_mul(b, kn_sub(b, c, x[0]), kn_add(b, a, x[1]));
}

KN_TEST(lab02_hidden_backward, diamond_with_fan_out) {
    int64_t s[] = {2, 3}, s3[] = {3};
    kn_tensor *xs[2] = {l2_rand(KN_DT_F64, 2, s, -1, 1, 1), l2_rand(KN_DT_F64, 1, s3, -1, 1, 2)};
    l2_gradcheck("diamond", f_diamond, NULL, 2, xs, 3);
    kn_tensor_free(xs[0]);
    kn_tensor_free(xs[1]);
}

/* 30 tanh in a row: the walk must reach the first one. */
static kn_val f_chain(kn_builder *b, const kn_val *x, void *ctx) {
    (void)ctx;
    kn_val v = x[0];
    for (int i = 0; i < 30; i++) v = kn_tanh(b, kn_mul_scalar(b, v, 1.1));
    return v;
}

KN_TEST(lab02_hidden_backward, long_chain) {
    int64_t s[] = {4};
    kn_tensor *x = l2_rand(KN_DT_F64, 1, s, -1, 1, 4);
    l2_gradcheck("30 tanh", f_chain, NULL, 1, &x, 5);
    kn_tensor_free(x);
}

/* The same value twice in wrt gets the same gradient twice; a wrt that is an
 * intermediate value gets d loss / d that value. */
KN_TEST(lab02_hidden_backward, wrt_twice_and_intermediate) {
    int64_t s[] = {3};
    kn_tensor *xt = l2_rand(KN_DT_F64, 1, s, -1, 1, 6);
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
    kn_val x = kn_input(b, "x", xt);
    kn_val t = kn_tanh(b, x);
    kn_val loss = kn_sum(b, kn_mul(b, t, t), 0, NULL, false);
    kn_val wrt[3] = {x, t, x}, g[3];
    KN_ASSERT_OK(kn_backward(b, loss, 3, wrt, g));
    for (int i = 0; i < 3; i++) {
        double tv = tanh(l2_at(xt, i));
        KN_ASSERT_CLOSE(l2_at(l2_tensor(b, g[1]), i), 2 * tv, 1e-15, 1e-12);
        KN_ASSERT_CLOSE(l2_at(l2_tensor(b, g[0]), i), 2 * tv * (1 - tv * tv), 1e-15, 1e-12);
        KN_ASSERT_CLOSE(l2_at(l2_tensor(b, g[2]), i), l2_at(l2_tensor(b, g[0]), i), 0, 0);
    }
    kn_builder_free(b);
    kn_tensor_free(xt);
}

/* n == 0 is fine, and a loss that depends on no wrt gives zeros without error. */
KN_TEST(lab02_hidden_backward, nothing_to_differentiate) {
    int64_t s[] = {2};
    kn_tensor *xt = l2_rand(KN_DT_F64, 1, s, -1, 1, 7), *yt = l2_rand(KN_DT_F64, 1, s, -1, 1, 8);
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
    kn_val x = kn_input(b, "x", xt), y = kn_input(b, "y", yt), g;
    kn_val loss = kn_sum(b, kn_exp(b, x), 0, NULL, false);
    KN_ASSERT_OK(kn_backward(b, loss, 0, NULL, NULL));
    KN_ASSERT_OK(kn_backward(b, loss, 1, &y, &g));
    for (int i = 0; i < 2; i++) KN_ASSERT_CLOSE(l2_at(l2_tensor(b, g), i), 0.0, 0, 0);
    kn_builder_free(b);
    kn_tensor_free(xt);
    kn_tensor_free(yt);
}

/* kn_sum_to on random broadcasts: each element of the result is the sum of the
 * gradient's elements that read it. */
KN_TEST(lab02_hidden_backward, sum_to_random_against_reference) {
    kn_rng r = kn_rng_new(9);
    for (int trial = 0; trial < 20; trial++) {
        int gn = 1 + (int)(kn_rng_u32(&r) % 4), xn = (int)(kn_rng_u32(&r) % (uint32_t)(gn + 1));
        int64_t gs[KN_MAX_DIMS], xs[KN_MAX_DIMS];
        for (int i = 0; i < gn; i++) gs[i] = 1 + kn_rng_u32(&r) % 3;
        for (int i = 0; i < xn; i++) xs[i] = (kn_rng_u32(&r) % 2) ? 1 : gs[gn - xn + i];
        kn_tensor *gt = l2_rand(KN_DT_F64, gn, gs, -1, 1, 100 + trial), *xt = l2_make(KN_DT_F64, xn, xs, NULL);
        kn_builder *b = NULL;
        KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
        kn_val gv = kn_input(b, "g", gt), xv = kn_input(b, "x", xt);
        kn_val s = kn_sum_to(b, gv, xv);
        KN_ASSERT_OK(l2_status(b));
        cr_assert(kn_type_equal(l2_type(b, s), kn_val_type(b, xv)), "trial %d: sum_to has x's type", trial);
        double want[64] = {0};
        int64_t idx[KN_MAX_DIMS] = {0}, n = kn_tensor_numel(gt);
        for (int64_t e = 0; e < n; e++) {
            int64_t off = 0;
            for (int i = 0; i < xn; i++) off = off * xs[i] + (xs[i] == 1 ? 0 : idx[gn - xn + i]);
            want[off] += l2_at(gt, e);
            kn_index_next(gn, gs, idx);
        }
        for (int64_t j = 0; j < kn_tensor_numel(xt); j++)
            KN_ASSERT_CLOSE(l2_at(l2_tensor(b, s), j), want[j], 1e-12, 1e-12);
        kn_builder_free(b);
        kn_tensor_free(gt);
        kn_tensor_free(xt);
    }
}

/* One model function, differentiated eagerly and as a captured joint graph run by the
 * interpreter: the same kernels on the same nodes, so the gradients agree bit for bit. */
static kn_val model(kn_builder *b, kn_val x, kn_val w1, kn_val w2) {
    kn_val h = kn_tanh(b, kn_matmul(b, x, w1));
    kn_val y = kn_matmul(b, h, w2);
    int ax[] = {1};
    kn_val z = kn_div(b, kn_exp(b, y), kn_sum(b, kn_exp(b, y), 1, ax, true));
    return kn_mean(b, kn_ln(b, z), 0, NULL, false);
}

KN_TEST(lab02_hidden_backward, eager_equals_captured_joint_graph) {
    int64_t xs[] = {4, 3}, w1s[] = {3, 5}, w2s[] = {5, 2};
    kn_tensor *t[3] = {l2_rand(KN_DT_F32, 2, xs, -1, 1, 10), l2_rand(KN_DT_F32, 2, w1s, -1, 1, 11),
                       l2_rand(KN_DT_F32, 2, w2s, -1, 1, 12)};
    const char *names[3] = {"x", "w1", "w2"};
    kn_builder *e = NULL, *g = NULL;
    KN_ASSERT_OK(kn_builder_new(&e, KN_MODE_EAGER));
    KN_ASSERT_OK(kn_builder_new(&g, KN_MODE_GRAPH));
    kn_val ev[3], gv[3], eg[3];
    for (int i = 0; i < 3; i++) {
        ev[i] = kn_param(e, names[i], t[i]);
        gv[i] = kn_param(g, names[i], t[i]);
    }
    kn_val el = model(e, ev[0], ev[1], ev[2]), gl = model(g, gv[0], gv[1], gv[2]);
    KN_ASSERT_OK(kn_backward(e, el, 3, ev, eg));
    kn_builder_output(g, gl);
    kn_graph *fwd = NULL, *joint = NULL;
    KN_ASSERT_OK(kn_builder_finish(g, &fwd));
    KN_ASSERT_OK(kn_autograd(fwd, gl, 3, gv, &joint, NULL));
    KN_ASSERT_OK(kn_graph_verify(joint));
    kn_interp *it = NULL;
    KN_ASSERT_OK(kn_interp_new(&it, joint));
    for (int i = 0; i < 3; i++) KN_ASSERT_OK(kn_interp_bind(it, names[i], t[i]));
    KN_ASSERT_OK(kn_interp_run(it));
    for (int i = 0; i < 3; i++) {
        const kn_tensor *a = l2_tensor(e, eg[i]), *c = kn_interp_output(it, 1 + i);
        cr_assert(a && c && kn_tensor_numel(a) == kn_tensor_numel(c), "gradient %d present in both", i);
        cr_assert(!memcmp(kn_tensor_data(a), kn_tensor_data(c), (size_t)kn_tensor_numel(a) * 4),
                  "gradient of %s: eager and captured differ", names[i]);
    }
    kn_interp_free(it);
    kn_graph_free(joint);
    kn_graph_free(fwd);
    kn_builder_free(e);
    kn_builder_free(g);
    for (int i = 0; i < 3; i++) kn_tensor_free(t[i]);
}

/* A builder already in error: kn_backward returns its status and adds nothing. */
KN_TEST(lab02_hidden_backward, sticky_errors) {
    int64_t s2[] = {2}, s3[] = {3};
    kn_tensor *a = l2_make(KN_DT_F64, 1, s2, NULL), *c = l2_make(KN_DT_F64, 1, s3, NULL);
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
    kn_val x = kn_input(b, "a", a), y = kn_input(b, "c", c);
    kn_val loss = kn_sum(b, x, 0, NULL, false);
    kn_val bad = kn_add(b, x, y); /* [2] + [3]: fails */
    cr_assert(!kn_val_ok(bad));
    int n = kn_builder_graph(b)->nnodes;
    kn_val g = KN_VAL_NONE;
    KN_ASSERT_ERR(kn_backward(b, loss, 1, &x, &g), KN_ERR_SHAPE);
    cr_assert(l2_nnodes(b) == n, "nothing appended after an error");
    kn_builder_free(b);
    kn_tensor_free(a);
    kn_tensor_free(c);
}

/* What the loss does not depend on costs nothing: a loss independent of wrt gets zeros
 * and no backward node besides them; a branch that depends on wrt but not on the loss
 * (dead code) is skipped, not differentiated. */
KN_TEST(lab02_hidden_backward, only_what_the_loss_depends_on) {
    int64_t s[] = {3};
    kn_tensor *xt = l2_rand(KN_DT_F64, 1, s, -1, 1, 20), *wt = l2_rand(KN_DT_F64, 1, s, -1, 1, 21);
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
    kn_val x = kn_input(b, "x", xt), w = kn_param(b, "w", wt);
    kn_val loss = kn_sum(b, kn_mul(b, w, w), 0, NULL, false), g;
    int before = kn_builder_graph(b)->nnodes;
    KN_ASSERT_OK(kn_backward(b, loss, 1, &x, &g));
    int after = l2_nnodes(b);
    cr_assert(after == before + 1, "a loss independent of x: %d nodes added, expected 1 (the zeros for x)", after - before);
    kn_builder_free(b);
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
    x = kn_input(b, "x", xt);
    kn_val dead = kn_ln(b, kn_neg(b, kn_exp(b, x))); /* log of a negative: NaN, never used */
    (void)dead;
    loss = kn_sum(b, kn_mul(b, x, x), 0, NULL, false);
    KN_ASSERT_OK(kn_backward(b, loss, 1, &x, &g));
    for (int i = 0; i < 3; i++) KN_ASSERT_CLOSE(l2_at(l2_tensor(b, g), i), 2 * l2_at(xt, i), 0, 1e-15);
    kn_builder_free(b);
    kn_tensor_free(xt);
    kn_tensor_free(wt);
}

/* kn_sum_to on a NONE value or a builder in error: KN_VAL_NONE, nothing else (after one
 * call that works). */
KN_TEST(lab02_hidden_backward, sum_to_of_nothing) {
    int64_t s[] = {2, 3};
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
    int64_t s3[] = {3};
    kn_val x = kn_input_typed(b, "x", KN_DT_F32, 2, s), r = kn_input_typed(b, "r", KN_DT_F32, 1, s3);
    kn_val v = kn_sum_to(b, x, r); /* first, one that works: [2,3] summed to [3] */
    KN_ASSERT_OK(l2_status(b));
    const kn_type *vt = kn_val_ok(v) ? l2_type(b, v) : NULL;
    cr_assert(vt && vt->ndim == 1 && vt->shape[0] == 3);
    cr_assert(!kn_val_ok(kn_sum_to(b, KN_VAL_NONE, x)));
    cr_assert(!kn_val_ok(kn_sum_to(b, x, KN_VAL_NONE)));
    kn_builder_fail(b, KN_ERR_ARG, "an earlier error");
    cr_assert(!kn_val_ok(kn_sum_to(b, x, x)), "a builder in error returned a value");
    kn_builder_free(b);
}

/* Out of memory anywhere in kn_backward: it returns KN_ERR_OOM (the builder's status), and
 * when it succeeds every gradient is a value. */
KN_TEST(lab02_hidden_backward, out_of_memory) {
    int64_t s[] = {2, 3};
    kn_tensor *xt = l2_rand(KN_DT_F64, 2, s, -1, 1, 30);
    int oom = 0;
    for (int mode = 0; mode < 2; mode++)
        for (long k = 0; k < 60; k++) {
            kn_builder *b = NULL;
            KN_ASSERT_OK(kn_builder_new(&b, mode ? KN_MODE_EAGER : KN_MODE_GRAPH));
            kn_val x = mode ? kn_input(b, "x", xt) : kn_input_typed(b, "x", KN_DT_F64, 2, s);
            kn_val loss = kn_sum(b, kn_mul(b, kn_tanh(b, x), x), 0, NULL, false), g = KN_VAL_NONE;
            KN_ASSERT_OK(kn_builder_status(b));
            kn_alloc_fail_after(k);
            kn_status st = kn_backward(b, loss, 1, &x, &g);
            kn_alloc_fail_after(-1);
            if (st == KN_OK) cr_assert(kn_val_ok(g), "k %ld: KN_OK without a gradient", k);
            else {
                cr_assert(st == KN_ERR_OOM, "k %ld: %s (%s), expected KN_ERR_OOM", k, kn_status_name(st),
                          kn_builder_error(b));
                oom++;
            }
            kn_builder_free(b);
        }
    cr_assert(oom > 5, "only %d runs out of memory", oom);
    kn_tensor_free(xt);
}
