/* test_nn_graph_text.c — the GPT's graphs through the text format: the forward graph and
 * the joint forward+backward graph that training runs both verify, and printing what was
 * parsed gives back the same text byte for byte: print(parse(print(g))) == print(g). */
#include <math.h>
#include <string.h>

#include "kn_test.h"
#include "kiln/autograd.h"
#include "kiln/nn.h"

static void round_trip(const kn_graph *g, const char *what) {
    char *t1 = NULL, *t2 = NULL;
    kn_graph *p = NULL;
    KN_ASSERT_OK(kn_graph_verify(g));
    KN_ASSERT_OK(kn_graph_to_string(g, &t1));
    KN_ASSERT_OK(kn_graph_parse(t1, strlen(t1), &p));
    KN_ASSERT_OK(kn_graph_verify(p));
    KN_ASSERT_OK(kn_graph_to_string(p, &t2));
    cr_assert(strcmp(t1, t2) == 0, "%s: the text of the parsed graph differs from the original", what);
    cr_assert(p->nnodes == g->nnodes && p->noutputs == g->noutputs, "%s: node or output counts differ", what);
    kn_free(t1);
    kn_free(t2);
    kn_graph_free(p);
}

KN_TEST(nn_graph_text, gpt_forward_and_joint_graphs_round_trip) {
    const kn_gpt_config cfg = {.vocab = 11, .context = 8, .layers = 2, .width = 16, .heads = 2};
    kn_gpt g;
    KN_ASSERT_OK(kn_gpt_new(&g, &cfg));
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
    const int64_t bt[2] = {3, 8};
    kn_val idx = kn_input_typed(b, "idx", KN_DT_I32, 2, bt);
    kn_val tgt = kn_input_typed(b, "targets", KN_DT_I32, 2, bt);
    kn_val *pv = kn_calloc((size_t)g.p.count, sizeof *pv);
    cr_assert(pv);
    kn_val logits, loss;
    KN_ASSERT_OK(kn_gpt_build(b, &g, idx, tgt, pv, &logits, &loss));
    kn_builder_output(b, loss);
    kn_graph *fwd = NULL;
    KN_ASSERT_OK(kn_builder_finish(b, &fwd));
    round_trip(fwd, "GPT forward graph");
    /* attention is one fused causal_softmax per layer: no mask, scale or plain softmax ops */
    int fused = 0, fills = 0, softmaxes = 0;
    for (int32_t i = 0; i < fwd->nnodes; i++) {
        const kn_node *n = &fwd->nodes[i];
        if (n->op == KN_OP_CAUSAL_SOFTMAX) {
            fused++;
            cr_assert_eq(n->attrs.scale, 1.0 / sqrt(8.0));
            cr_assert(n->type.ndim == 4 && n->type.shape[2] == 8 && n->type.shape[3] == 8);
        }
        fills += n->op == KN_OP_CAUSAL_FILL;
        softmaxes += n->op == KN_OP_SOFTMAX;
    }
    cr_assert(fused == 2 && fills == 0 && softmaxes == 0, "%d causal_softmax, %d causal_fill, %d softmax", fused, fills,
              softmaxes);

    kn_graph *joint = NULL;
    kn_val *grads = kn_calloc((size_t)g.p.count, sizeof *grads);
    cr_assert(grads);
    KN_ASSERT_OK(kn_autograd(fwd, loss, g.p.count, pv, &joint, grads));
    cr_assert_eq(joint->noutputs, 1 + g.p.count, "the joint graph outputs the loss and one gradient per parameter");
    round_trip(joint, "GPT joint forward+backward graph");

    kn_graph_free(joint);
    kn_graph_free(fwd);
    kn_free(grads);
    kn_free(pv);
    kn_builder_free(b);
    kn_gpt_free(&g);
}
