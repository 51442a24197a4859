/* autograd.c — reverse-mode differentiation as a graph transform.
 *
 * kn_backward walks the recorded graph backwards from the loss. Each node that received
 * a gradient calls its op's backward rule (core/autograd/rules.c, named in ops.def), which
 * emits the nodes computing its operands' gradients through the builder. Contributions
 * to a value used several times are added. Only operands that depend on one of the
 * values we differentiate with respect to are asked for a gradient, so no work is spent
 * on, say, the gradient of the token ids or of the data.
 *
 * Because the rules only use the builder, the same code differentiates eagerly (an EAGER
 * builder runs each backward node as it is emitted: the graph is the tape) and as a
 * graph transform (kn_autograd copies the forward graph into a GRAPH builder, appends the
 * backward and returns the joint graph, AOTAutograd style). */
#include <string.h>

#include "ir/ir_impl.h"
#include "kiln/autograd.h"

kn_status kn_backward(kn_builder *b, kn_val loss, int n, const kn_val *wrt, kn_val *grads) {
    if (!b) return kn_error(KN_ERR_ARG, "kn_backward: builder is NULL");
    if (kn_builder_status(b) != KN_OK) return kn_builder_status(b);
    const kn_graph *g = kn_builder_graph(b);
    const kn_type *lt = kn_val_type(b, loss);
    if (!lt) { kn_builder_fail(b, KN_ERR_ARG, "kn_backward: loss is not a value of this builder"); return kn_builder_status(b); }
    if (kn_type_numel(lt) != 1 || !kn_dtype_is_float(lt->dtype)) {
        char tb[96];
        kn_builder_fail(b, KN_ERR_SHAPE, "kn_backward: loss %s is not a one-element float value", kn_type_str(lt, tb, sizeof tb));
        return kn_builder_status(b);
    }
    if (n < 0 || (n > 0 && (!wrt || !grads))) {
        kn_builder_fail(b, KN_ERR_ARG, "kn_backward: bad list of %d values", n);
        return kn_builder_status(b);
    }
    int32_t nn = loss.id + 1;
    bool *dep = kn_calloc((size_t)nn, sizeof *dep);
    kn_val *grad = kn_malloc((size_t)nn * sizeof *grad);
    if (!dep || !grad) {
        kn_free(dep); kn_free(grad);
        kn_builder_fail(b, KN_ERR_OOM, "kn_backward: out of memory");
        return kn_builder_status(b);
    }
    for (int i = 0; i < n; i++) {
        const kn_type *t = kn_val_type(b, wrt[i]);
        if (!t || !kn_dtype_is_float(t->dtype)) {
            kn_builder_fail(b, KN_ERR_ARG, "kn_backward: wrt[%d] (%%%d) is not a float value of this builder", i, (int)wrt[i].id);
            break;
        }
        if (wrt[i].id < nn) dep[wrt[i].id] = true;
    }
    for (int32_t i = 0; i < nn; i++) {
        grad[i] = KN_VAL_NONE;
        for (int k = 0; k < g->nodes[i].nin && !dep[i]; k++) dep[i] = dep[g->nodes[i].in[k]];
    }
    if (dep[loss.id]) grad[loss.id] = kn_full(b, lt->dtype, lt->ndim, lt->shape, 1.0);
    for (int32_t i = loss.id; i >= 0 && kn_builder_status(b) == KN_OK; i--) {
        if (!kn_val_ok(grad[i]) || !dep[i]) continue;
        g = kn_builder_graph(b); /* the node array may move as nodes are appended */
        const kn_node nd = g->nodes[i];
        const kn_op_info *info = kn_op_get(nd.op);
        if (info->category == KN_CAT_SOURCE) continue;
        kn_val dx[KN_MAX_OPERANDS];
        bool any = false;
        for (int k = 0; k < nd.nin; k++) {
            dx[k] = dep[nd.in[k]] ? KN_VAL_WANT : KN_VAL_NONE;
            any |= dep[nd.in[k]];
        }
        if (!any) continue;
        kn_op_impls[nd.op].backward(b, i, grad[i], dx);
        for (int k = 0; k < nd.nin && kn_builder_status(b) == KN_OK; k++) {
            int32_t a = nd.in[k];
            if (kn_want(dx[k])) {
                kn_builder_fail(b, KN_ERR_INTERNAL, "kn_backward: the rule of %s left operand %d without an answer", info->name, k);
                break;
            }
            if (!kn_val_ok(dx[k]) || !dep[a]) continue;
            grad[a] = kn_val_ok(grad[a]) ? kn_add(b, grad[a], dx[k]) : dx[k];
        }
    }
    for (int i = 0; i < n && kn_builder_status(b) == KN_OK; i++) {
        kn_val gv = wrt[i].id < nn ? grad[wrt[i].id] : KN_VAL_NONE;
        if (!kn_val_ok(gv)) {
            const kn_type *t = kn_val_type(b, wrt[i]);
            kn_type tt = *t;
            gv = kn_full(b, tt.dtype, tt.ndim, tt.shape, 0.0);
        }
        grads[i] = gv;
    }
    kn_free(dep);
    kn_free(grad);
    return kn_builder_status(b);
}

kn_status kn_autograd(const kn_graph *fwd, kn_val loss, int n, const kn_val *wrt, kn_graph **joint, kn_val *grads) {
    if (!fwd || !joint || n < 0 || (n > 0 && !wrt)) return kn_error(KN_ERR_ARG, "kn_autograd: NULL or bad argument");
    KN_TRY(kn_graph_verify(fwd));
    kn_builder *b = NULL;
    KN_TRY(kn_builder_from_graph(&b, fwd));
    kn_val *gv = kn_calloc((size_t)(n > 0 ? n : 1), sizeof *gv);
    if (!gv) { kn_builder_free(b); return kn_error(KN_ERR_OOM, "kn_autograd: out of memory"); }
    kn_status st = kn_backward(b, loss, n, wrt, gv);
    for (int i = 0; st == KN_OK && i < n; i++) kn_builder_output(b, gv[i]);
    if (st == KN_OK) st = kn_builder_status(b);
    if (st == KN_OK) st = kn_builder_finish(b, joint);
    else kn_error(st, "kn_autograd: %s", kn_builder_error(b));
    if (st == KN_OK && grads) memcpy(grads, gv, (size_t)n * sizeof *gv);
    kn_free(gv);
    kn_builder_free(b);
    return st;
}
