/* quantize.c — the pass `quantize:w8` / `quantize:w8a8`: INT8 post-training quantization of
 * the products that read a weight.
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
 * autocast) or a view. Not exact (the rounding of int8): asked for by name only. */
#include <string.h>

#include "kiln/passes.h"
#include "kiln/quant.h"

kn_status kn_quantize_check_arg(const char *arg) {
    if (arg && (!strcmp(arg, "w8") || !strcmp(arg, "w8a8") || !strcmp(arg, "w8a8-tensor"))) return KN_OK;
    if (!arg) return kn_error(KN_ERR_ARG, "quantize needs an option: quantize:w8, quantize:w8a8 or quantize:w8a8-tensor");
    return kn_error(KN_ERR_ARG, "quantize: unknown option '%s' (known: w8, w8a8, w8a8-tensor)", arg);
}

kn_status kn_pass_quantize(kn_graph *g, kn_pass_stats *st) {
    KN_TRY(kn_quantize_check_arg(st->arg));
    const kn_op to = !strcmp(st->arg, "w8") ? KN_OP_MATMUL_W8 : !strcmp(st->arg, "w8a8") ? KN_OP_MATMUL_W8A8
                                                                                      : KN_OP_MATMUL_W8A8_TENSOR;
    int64_t fired = 0;
    for (int32_t i = 0; i < g->nnodes; i++) {
        kn_node *n = &g->nodes[i];
        if (n->op != KN_OP_MATMUL || n->attrs.ta) continue;
        const kn_node *x = &g->nodes[n->in[0]], *w = &g->nodes[n->in[1]];
        if (w->op != KN_OP_PARAM || w->type.ndim != 2 || w->type.dtype != KN_DT_F32 || x->type.dtype != KN_DT_F32)
            continue;
        n->op = to;
        fired++;
    }
    static const char *const rule[3] = {"matmul->matmul_w8", "matmul->matmul_w8a8", "matmul->matmul_w8a8_tensor"};
    if (fired) kn_pass_stats_fire(st, rule[to == KN_OP_MATMUL_W8 ? 0 : to == KN_OP_MATMUL_W8A8 ? 1 : 2], fired);
    return KN_OK;
}
