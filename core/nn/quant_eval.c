/* quant_eval.c — the held-out loss of a GPT under a pass list: how `kiln eval` and the
 * quantization tests compare fp32, bf16 (autocast), w8 and w8a8 on the same batches.
 *
 * The forward graph with the loss (kn_gpt_build) is recorded once, compiled node by node
 * with the caller's passes ("" for fp32, "autocast:bf16", "quantize:w8", ...), bound to the
 * model's parameter views by name, and run on held-out batches drawn exactly as `kiln
 * train` draws its own evaluation batches (kn_batch_sample, stream 1, batch e), so the fp32
 * figure here is the one `kiln train` printed at the end of the run. */
#include <string.h>

#include "kiln/data.h"
#include "kiln/program.h"
#include "kiln/nn.h"
#include "kiln/quant.h"

static kn_status record_loss_graph(const kn_gpt *g, const kn_tensor *x, const kn_tensor *y, kn_graph **out) {
    kn_builder *b;
    KN_TRY(kn_builder_new(&b, KN_MODE_GRAPH));
    kn_val *pvals = kn_calloc((size_t)g->p.count + 1, sizeof *pvals), logits, loss = KN_VAL_NONE;
    kn_status st = pvals ? KN_OK : kn_error(KN_ERR_OOM, "kn_gpt_heldout_loss: out of memory");
    if (st == KN_OK) {
        kn_val idx = kn_input(b, "idx", x), tgt = kn_input(b, "targets", y);
        st = kn_gpt_build(b, g, idx, tgt, pvals, &logits, &loss);
        if (st != KN_OK) st = kn_error(st, "%s", kn_builder_error(b));
    }
    if (st == KN_OK) {
        kn_builder_output(b, loss);
        st = kn_builder_finish(b, out);
    }
    kn_free(pvals);
    kn_builder_free(b);
    return st;
}

kn_status kn_gpt_heldout_loss(const kn_gpt *g, const char *passes, const int32_t *tokens, int64_t n, int B, int T,
                              uint64_t seed, int nbatches, double *loss) {
    if (!g || !tokens || !loss) return kn_error(KN_ERR_ARG, "kn_gpt_heldout_loss: NULL argument");
    if (B < 1 || T < 1 || T > g->cfg.context || nbatches < 1)
        return kn_error(KN_ERR_ARG, "kn_gpt_heldout_loss: batch %d x %d, %d batches: need B, nbatches >= 1 and "
                        "1 <= T <= context %d", B, T, nbatches, g->cfg.context);
    if (n < (int64_t)T + 1)
        return kn_error(KN_ERR_ARG, "kn_gpt_heldout_loss: %lld held-out tokens, fewer than T + 1 = %d", (long long)n,
                        T + 1);
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= g->cfg.vocab)
            return kn_error(KN_ERR_ARG, "kn_gpt_heldout_loss: token %lld is %d, outside the vocabulary of %d",
                            (long long)i, tokens[i], g->cfg.vocab);
    int64_t bt[2] = {B, T};
    kn_tensor *x = NULL, *y = NULL;
    kn_graph *fwd = NULL;
    kn_program *p = NULL;
    kn_status st = kn_tensor_zeros(&x, KN_DT_I32, 2, bt);
    if (st == KN_OK) st = kn_tensor_zeros(&y, KN_DT_I32, 2, bt);
    if (st == KN_OK) st = record_loss_graph(g, x, y, &fwd);
    kn_program_opts po = {.device = KN_CPU, .passes = passes && *passes ? passes : NULL, .mode = KN_PROGRAM_NODES};
    if (st == KN_OK) st = kn_program_compile(&p, fwd, &po);
    for (int i = 0; st == KN_OK && i < g->p.count; i++)
        if (kn_graph_find(kn_program_graph(p), g->p.info[i].name) >= 0)
            st = kn_program_bind(p, g->p.info[i].name, g->p.views[i]);
    if (st == KN_OK) st = kn_program_bind(p, "idx", x);
    if (st == KN_OK) st = kn_program_bind(p, "targets", y);
    double sum = 0;
    for (int e = 0; st == KN_OK && e < nbatches; e++) {
        st = kn_batch_sample(tokens, n, B, T, seed, 1, e, kn_tensor_data(x), kn_tensor_data(y));
        if (st == KN_OK) st = kn_program_run(p);
        if (st == KN_OK) {
            const kn_tensor *o = kn_program_output(p, 0);
            if (!o || o->dtype != KN_DT_F32 || kn_tensor_numel(o) != 1)
                st = kn_error(KN_ERR_INTERNAL, "kn_gpt_heldout_loss: the loss is not one f32");
            else sum += *(const float *)kn_tensor_data(o);
        }
    }
    if (st == KN_OK) *loss = sum / nbatches;
    kn_program_free(p);
    kn_graph_free(fwd);
    kn_tensor_free(x);
    kn_tensor_free(y);
    return st;
}
