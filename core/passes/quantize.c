/* quantize.c — the pass `quantize:w8` / `quantize:w8a8` / `quantize:w8a8-tensor`: INT8
 * post-training quantization of the products that read a weight; and the parsing and the
 * graph rewrite of the calibrated schemes quantize:w8a8-static and quantize:w8a8-smooth.
 *
 * A product matmul(x, W) whose right operand is a 2-D f32 parameter, with x f32 and not
 * transposed, becomes matmul_w8(x, W) (the weight quantized per output channel, symmetric
 * int8, f32 activations) or matmul_w8a8(x, W) (the activations quantized per token as well,
 * an int8 x int8 -> int32 product and a dequantizing epilogue); quantize:w8a8-tensor gives
 * matmul_w8a8_tensor, one activation scale for the whole x (the naive baseline that the
 * per-token scales beat: one outlier token sets everyone's step). kiln/quant.h gives the
 * arithmetic. The node keeps its operands, attributes and type, so the rewrite is in place:
 * no node is added or removed. Everything else is left alone: products of two activations
 * (attention's q k^T and p v), parameters read by anything but a product (embeddings, norms,
 * biases: quantizing them is a no-op, not an error), a weight seen through a cast (after
 * autocast) or a view (a slice: the GPT's q, k and v blocks of one weight). Not exact (the
 * rounding of int8): asked for by name only.
 *
 * The calibrated schemes need data a pass list does not carry: w8a8-static's thresholds come
 * from calibration batches, w8a8-smooth's factors from the activations' channel maxima. The
 * pass refuses them (naming where they are made); kn_quantize_static is their graph rewrite
 * (matmul -> matmul_w8a8_static with the threshold as its `value`), and
 * kn_gpt_heldout_loss_q (core/nn/quant_eval.c) calibrates, folds and evaluates them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/passes.h"
#include "kiln/quant.h"

kn_status kn_quantize_parse_arg(const char *arg, kn_quant_arg *out) {
    if (!out) return kn_error(KN_ERR_ARG, "kn_quantize_parse_arg: NULL argument");
    *out = (kn_quant_arg){.observer = KN_CALIB_MINMAX, .percentile = KN_CALIB_PCT_DEFAULT, .alpha = 0.5};
    if (!arg)
        return kn_error(KN_ERR_ARG, "quantize needs an option: quantize:w8, quantize:w8a8, quantize:w8a8-tensor, "
                        "quantize:w8a8-static[:OBSERVER] or quantize:w8a8-smooth[:ALPHA]");
    if (!strcmp(arg, "w8")) out->scheme = KN_QUANT_W8;
    else if (!strcmp(arg, "w8a8")) out->scheme = KN_QUANT_W8A8;
    else if (!strcmp(arg, "w8a8-tensor")) out->scheme = KN_QUANT_W8A8_TENSOR;
    else if (!strcmp(arg, "w8a8-static") || !strncmp(arg, "w8a8-static:", 12)) {
        out->scheme = KN_QUANT_W8A8_STATIC;
        if (arg[11] == ':') {
            kn_status st = kn_calib_observer_parse(arg + 12, &out->observer, &out->percentile);
            if (st != KN_OK) return kn_error(st, "quantize:%s: %s", arg, kn_last_error());
        }
    } else if (!strcmp(arg, "w8a8-smooth") || !strncmp(arg, "w8a8-smooth:", 12)) {
        out->scheme = KN_QUANT_W8A8_SMOOTH;
        if (arg[11] == ':') {
            char *end;
            out->alpha = strtod(arg + 12, &end);
            if (!arg[12] || *end || !(out->alpha >= 0 && out->alpha <= 1))
                return kn_error(KN_ERR_ARG, "quantize:%s: SmoothQuant's alpha must be a number in [0, 1] (got '%s')",
                                arg, arg + 12);
        }
    } else {
        return kn_error(KN_ERR_ARG, "quantize: unknown option '%s' (known: w8, w8a8, w8a8-tensor, w8a8-static, "
                        "w8a8-smooth)", arg);
    }
    return KN_OK;
}

kn_status kn_quantize_check_arg(const char *arg) {
    kn_quant_arg q;
    return kn_quantize_parse_arg(arg, &q);
}

bool kn_quantize_candidate(const kn_graph *g, int32_t i) {
    const kn_node *n = &g->nodes[i];
    if (n->op != KN_OP_MATMUL || n->attrs.ta) return false;
    const kn_node *x = &g->nodes[n->in[0]], *w = &g->nodes[n->in[1]];
    return w->op == KN_OP_PARAM && w->type.ndim == 2 && w->type.dtype == KN_DT_F32 && x->type.dtype == KN_DT_F32;
}

kn_status kn_pass_quantize(kn_graph *g, kn_pass_stats *st) {
    kn_quant_arg q;
    KN_TRY(kn_quantize_parse_arg(st->arg, &q));
    if (q.scheme == KN_QUANT_W8A8_STATIC || q.scheme == KN_QUANT_W8A8_SMOOTH)
        return kn_error(KN_ERR_ARG, "quantize:%s needs calibration data, which a pass list does not carry: kiln eval "
                        "--passes quantize:%s calibrates on the training split (kn_gpt_heldout_loss_q, kiln/quant.h)",
                        st->arg, st->arg);
    const kn_op to = q.scheme == KN_QUANT_W8 ? KN_OP_MATMUL_W8 : q.scheme == KN_QUANT_W8A8 ? KN_OP_MATMUL_W8A8
                                                                                          : KN_OP_MATMUL_W8A8_TENSOR;
    int64_t fired = 0;
    for (int32_t i = 0; i < g->nnodes; i++)
        if (kn_quantize_candidate(g, i)) {
            g->nodes[i].op = to;
            fired++;
        }
    static const char *const rule[3] = {"matmul->matmul_w8", "matmul->matmul_w8a8", "matmul->matmul_w8a8_tensor"};
    if (fired) kn_pass_stats_fire(st, rule[to == KN_OP_MATMUL_W8 ? 0 : to == KN_OP_MATMUL_W8A8 ? 1 : 2], fired);
    return KN_OK;
}

kn_status kn_quantize_static(kn_graph *g, const char *const *names, const float *amax, int n, kn_pass_stats *st) {
    if (!g || (n > 0 && (!names || !amax)) || n < 0) return kn_error(KN_ERR_ARG, "kn_quantize_static: NULL argument");
    for (int t = 0; t < n; t++)
        if (!(amax[t] >= 0) || !isfinite(amax[t]))
            return kn_error(KN_ERR_ARG, "kn_quantize_static: the threshold of %s is %g (need finite, >= 0)", names[t],
                            (double)amax[t]);
    int64_t fired = 0;
    for (int32_t i = 0; i < g->nnodes; i++) {
        if (!kn_quantize_candidate(g, i)) continue;
        const char *w = g->nodes[g->nodes[i].in[1]].attrs.name;
        int t = 0;
        while (t < n && strcmp(names[t], w)) t++;
        if (t == n) return kn_error(KN_ERR_ARG, "kn_quantize_static: the product %%%d reads weight %s, which the "
                                    "calibration table does not have", i, w);
        g->nodes[i].op = KN_OP_MATMUL_W8A8_STATIC;
        g->nodes[i].attrs.value = amax[t];
        fired++;
    }
    if (fired && st) kn_pass_stats_fire(st, "matmul->matmul_w8a8_static", fired);
    return KN_OK;
}
