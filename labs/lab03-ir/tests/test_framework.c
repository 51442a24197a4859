/* test_framework.c — lab 03 public tests: the framework's entry points run your units.
 *
 * kn_graph_verify is not only called by these tests: the interpreter (kn_interp_new),
 * the autograd transform (kn_autograd) and kn_builder_finish verify every graph they are
 * given, so a graph your verifier lets through is a graph they run. And every builder
 * call, eager or captured, ends in your kn_builder_record. Each case here is one the
 * framework runs when kiln trains. */
#include <math.h>

#include "check.h"
#include "kiln/autograd.h"
#include "kiln/tensor.h"

/* A broken graph is refused at the interpreter's door and by autograd, with your message. */
KN_TEST(lab03_framework, interpreter_and_autograd_refuse_what_the_verifier_refuses) {
    kn_graph *g = l3_parse(l3_good);
    g->nodes[3].in[0] = 4; /* tanh of a later value */
    kn_interp *it = NULL;
    KN_ASSERT_ERR(kn_interp_new(&it, g), KN_ERR_FORMAT);
    cr_assert(strstr(kn_last_error(), "%3 = tanh: operand %4 is not defined before use"),
              "kn_interp_new on a graph with a forward reference: \"%s\" should name %%3's operand %%4",
              kn_last_error());
    kn_graph *joint = NULL;
    KN_ASSERT_ERR(kn_autograd(g, (kn_val){5}, 1, &(kn_val){1}, &joint, NULL), KN_ERR_FORMAT);
    kn_graph_free(g);
}

/* The training step's path: capture loss = sum(tanh(x @ w)) through kn_builder_record,
 * differentiate it as a graph transform (kn_autograd copies the graph into a builder and
 * appends the backward, every node through kn_builder_record again), verify and run it. */
KN_TEST(lab03_framework, a_captured_graph_differentiates_and_runs) {
    int64_t xs[] = {2, 3}, ws[] = {3, 4};
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
    kn_val x = kn_input_typed(b, "x", KN_DT_F64, 2, xs), w = kn_param_typed(b, "w", KN_DT_F64, 2, ws);
    kn_val loss = kn_sum(b, kn_tanh(b, kn_matmul(b, x, w)), 0, NULL, false);
    kn_builder_output(b, loss);
    kn_graph *fwd = NULL, *joint = NULL;
    KN_ASSERT_OK(kn_builder_finish(b, &fwd));
    kn_val gw;
    KN_ASSERT_OK(kn_autograd(fwd, loss, 1, &w, &joint, &gw));
    KN_ASSERT_OK(kn_graph_verify(joint));
    kn_tensor *xt = NULL, *wt = NULL;
    KN_ASSERT_OK(kn_tensor_full(&xt, KN_DT_F64, 2, xs, 0.5));
    KN_ASSERT_OK(kn_tensor_full(&wt, KN_DT_F64, 2, ws, 0.25));
    kn_interp *it = NULL;
    KN_ASSERT_OK(kn_interp_new(&it, joint));
    KN_ASSERT_OK(kn_interp_bind(it, "x", xt));
    KN_ASSERT_OK(kn_interp_bind(it, "w", wt));
    KN_ASSERT_OK(kn_interp_run(it));
    /* every (x @ w) element is 3 * 0.5 * 0.25 = 0.375; d/dw[k][j] = sum_i x[i][k] (1 - tanh^2) */
    double t = tanh(0.375), want = 2 * 0.5 * (1 - t * t);
    const kn_tensor *g = kn_interp_output(it, 1);
    cr_assert(g && kn_tensor_numel(g) == 12, "the joint graph's second output is w's gradient, f64[3,4]");
    for (int i = 0; i < 12; i++)
        KN_ASSERT_CLOSE(((const double *)kn_tensor_data(g))[i], want, 1e-15, 1e-12);
    kn_interp_free(it);
    kn_graph_free(joint);
    kn_graph_free(fwd);
    kn_builder_free(b);
    kn_tensor_free(xt);
    kn_tensor_free(wt);
}
