/* test_backward.c — lab 02 public tests: the reverse pass (kn_backward), kn_sum_to and
 * the graph transform built on them (kn_autograd).
 *
 * The first tests use only ops whose rules are in the core (add, sub, neg, reshape), so
 * they test your walk, seeding and accumulation and nothing else. */
#include "check.h"

/* loss = reshape(x) for a one-element x: d loss / d x = 1, the seed itself. */
KN_TEST(lab02_backward, seed_is_one) {
    int64_t s1[] = {1};
    double v[] = {3.5};
    kn_tensor *xt = l2_make(KN_DT_F64, 1, s1, v);
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
    kn_val x = kn_input(b, "x", xt), g;
    kn_val loss = kn_reshape(b, x, 0, NULL);
    KN_ASSERT_OK(kn_backward(b, loss, 1, &x, &g));
    KN_ASSERT_CLOSE(l2_at(l2_tensor(b, g), 0), 1.0, 0, 0);
    kn_builder_free(b);
    kn_tensor_free(xt);
}

/* y = x + x, z = y + x - (-x): x reaches z along four paths, so dz/dx = 4. Every
 * contribution must be added, none overwritten. */
KN_TEST(lab02_backward, value_used_several_times_adds_up) {
    int64_t s1[] = {1};
    double v[] = {2};
    kn_tensor *xt = l2_make(KN_DT_F64, 1, s1, v);
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
    kn_val x = kn_input(b, "x", xt), g;
    kn_val y = kn_add(b, x, x);
    kn_val z = kn_sub(b, kn_add(b, y, x), kn_neg(b, x));
    KN_ASSERT_OK(kn_backward(b, kn_reshape(b, z, 0, NULL), 1, &x, &g));
    KN_ASSERT_CLOSE(l2_at(l2_tensor(b, g), 0), 4.0, 0, 0);
    kn_builder_free(b);
    kn_tensor_free(xt);
}

/* A value the loss does not depend on (w, or v defined after the loss) gets zeros of
 * its own type; the loss itself as a wrt gets 1. */
KN_TEST(lab02_backward, unrelated_values_get_zeros) {
    int64_t s1[] = {1}, s23[] = {2, 3};
    double v[] = {2};
    kn_tensor *xt = l2_make(KN_DT_F64, 1, s1, v), *wt = l2_rand(KN_DT_F64, 2, s23, -1, 1, 1);
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
    kn_val x = kn_input(b, "x", xt), w = kn_input(b, "w", wt);
    kn_val loss = kn_reshape(b, kn_add(b, x, x), 0, NULL);
    kn_val later = kn_neg(b, w);
    kn_val wrt[4] = {w, x, later, loss}, g[4];
    KN_ASSERT_OK(kn_backward(b, loss, 4, wrt, g));
    const kn_tensor *gw = l2_tensor(b, g[0]), *gl = l2_tensor(b, g[2]);
    cr_assert(gw && gw->ndim == 2 && gw->shape[0] == 2 && gw->shape[1] == 3, "zeros of w's shape");
    for (int i = 0; i < 6; i++) KN_ASSERT_CLOSE(l2_at(gw, i), 0.0, 0, 0);
    for (int i = 0; i < 6; i++) KN_ASSERT_CLOSE(l2_at(gl, i), 0.0, 0, 0);
    KN_ASSERT_CLOSE(l2_at(l2_tensor(b, g[1]), 0), 2.0, 0, 0);
    KN_ASSERT_CLOSE(l2_at(l2_tensor(b, g[3]), 0), 1.0, 0, 0);
    kn_builder_free(b);
    kn_tensor_free(xt);
    kn_tensor_free(wt);
}

/* kn_sum_to: a [2,3,4] gradient of ones summed back to [3,1] (8 ones each), to [4] (6
 * ones each), and to its own type (the same value, no new node). */
KN_TEST(lab02_backward, sum_to_reduces_broadcast_axes) {
    int64_t s234[] = {2, 3, 4}, s31[] = {3, 1}, s4[] = {4};
    kn_tensor *a = l2_make(KN_DT_F64, 2, s31, NULL), *c = l2_make(KN_DT_F64, 1, s4, NULL);
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
    kn_val g = kn_full(b, KN_DT_F64, 3, s234, 1.0), x = kn_input(b, "a", a), y = kn_input(b, "c", c);
    kn_val r1 = kn_sum_to(b, g, x), r2 = kn_sum_to(b, g, y);
    KN_ASSERT_OK(l2_status(b));
    cr_assert(kn_type_equal(l2_type(b, r1), kn_val_type(b, x)), "sum_to [2,3,4] -> [3,1] has type f64[3,1]");
    cr_assert(kn_type_equal(l2_type(b, r2), kn_val_type(b, y)), "sum_to [2,3,4] -> [4] has type f64[4]");
    for (int i = 0; i < 3; i++) KN_ASSERT_CLOSE(l2_at(l2_tensor(b, r1), i), 8.0, 0, 0);
    for (int i = 0; i < 4; i++) KN_ASSERT_CLOSE(l2_at(l2_tensor(b, r2), i), 6.0, 0, 0);
    int before = l2_nnodes(b);
    cr_assert(kn_sum_to(b, g, g).id == g.id && l2_nnodes(b) == before,
              "sum_to of a value to its own type returns it unchanged");
    kn_builder_free(b);
    kn_tensor_free(a);
    kn_tensor_free(c);
}

/* The graph transform: capture loss = sum(x * x) in GRAPH mode, differentiate it into a
 * joint graph, run that graph with the interpreter: the extra output is 2x. */
KN_TEST(lab02_backward, autograd_gives_a_joint_graph) {
    int64_t s[] = {2, 3};
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
    kn_val x = kn_input_typed(b, "x", KN_DT_F64, 2, s);
    kn_val loss = kn_sum(b, kn_mul(b, x, x), 0, NULL, false);
    kn_builder_output(b, loss);
    kn_graph *fwd = NULL, *joint = NULL;
    KN_ASSERT_OK(kn_builder_finish(b, &fwd));
    kn_val gid;
    KN_ASSERT_OK(kn_autograd(fwd, loss, 1, &x, &joint, &gid));
    cr_assert(joint->noutputs == 2 && joint->outputs[0] == loss.id && joint->outputs[1] == gid.id,
              "joint outputs: the loss, then the gradient");
    cr_assert(joint->nnodes > fwd->nnodes, "the backward nodes were appended");
    kn_tensor *xt = l2_rand(KN_DT_F64, 2, s, -1, 1, 3);
    kn_interp *it = NULL;
    KN_ASSERT_OK(kn_interp_new(&it, joint));
    KN_ASSERT_OK(kn_interp_bind(it, "x", xt));
    KN_ASSERT_OK(kn_interp_run(it));
    const kn_tensor *gx = kn_interp_output(it, 1);
    for (int i = 0; i < 6; i++) KN_ASSERT_CLOSE(l2_at(gx, i), 2 * l2_at(xt, i), 1e-15, 0);
    kn_interp_free(it);
    kn_graph_free(joint);
    kn_graph_free(fwd);
    kn_builder_free(b);
    kn_tensor_free(xt);
}

/* Argument errors (checked for you in the skeleton, so this passes from the start). */
KN_TEST(lab02_backward, loss_must_be_one_float_element) {
    int64_t s[] = {2};
    kn_tensor *xt = l2_make(KN_DT_F64, 1, s, NULL);
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
    kn_val x = kn_input(b, "x", xt), g;
    KN_ASSERT_ERR(kn_backward(b, x, 1, &x, &g), KN_ERR_SHAPE);
    cr_assert(strstr(kn_builder_error(b), "f64[2]"), "the message names the loss type: %s", kn_builder_error(b));
    kn_builder_free(b);
    kn_tensor_free(xt);
}
