/* gpt_graph.c — the GPT as a graph to compile: what `kiln compile --gpt` and the pass
 * tests run the passes on. It captures the model the way the trainer does (graph-mode
 * builder, inputs "idx" and "targets", then autograd for the joint graph), so the passes
 * see the very graph a training step would run (contract in kiln/nn.h). */
#include "kiln/autograd.h"
#include "kiln/nn.h"

kn_status kn_gpt_graph(const kn_gpt_config *cfg, int B, int T, bool joint, kn_graph **out) {
    if (!cfg || !out) return kn_error(KN_ERR_ARG, "kn_gpt_graph: NULL argument");
    if (B < 1 || T < 1 || T > cfg->context)
        return kn_error(KN_ERR_ARG, "kn_gpt_graph: batch %d x %d: need B >= 1 and 1 <= T <= context %d", B, T,
                        cfg->context);
    kn_gpt model;
    KN_TRY(kn_gpt_new(&model, cfg));
    kn_builder *b = NULL;
    kn_graph *fwd = NULL;
    kn_val *pvals = kn_calloc((size_t)model.p.count, sizeof *pvals);
    kn_status st = pvals ? kn_builder_new(&b, KN_MODE_GRAPH) : kn_error(KN_ERR_OOM, "kn_gpt_graph: out of memory");
    kn_val logits, loss = KN_VAL_NONE;
    if (st == KN_OK) {
        int64_t bt[2] = {B, T};
        kn_val idx = kn_input_typed(b, "idx", KN_DT_I32, 2, bt);
        kn_val tgt = kn_input_typed(b, "targets", KN_DT_I32, 2, bt);
        st = kn_gpt_build(b, &model, idx, tgt, pvals, &logits, &loss);
        if (st != KN_OK) st = kn_error(st, "kn_gpt_graph: %s", kn_builder_error(b));
    }
    if (st == KN_OK) {
        kn_builder_output(b, loss);
        if (!joint) kn_builder_output(b, logits);
        st = kn_builder_finish(b, &fwd);
    }
    if (st == KN_OK && joint) {
        st = kn_autograd(fwd, loss, model.p.count, pvals, out, NULL);
        kn_graph_free(fwd);
    } else if (st == KN_OK) {
        *out = fwd;
    }
    kn_builder_free(b);
    kn_free(pvals);
    kn_gpt_free(&model);
    return st;
}
