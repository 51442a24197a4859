/* autograd.c — reverse-mode differentiation as a graph transform.
 *
 * kn_backward (a lab 02 unit: labs/lab02-autograd/backward.c) walks the recorded
 * graph backwards from the loss. Each node that received a gradient calls its op's
 * backward rule (named in ops.def; core/autograd/rules.c and the lab 02 unit rules.c),
 * which emits the nodes computing its operands' gradients through the builder.
 * Contributions to a value used several times are added. Only operands that depend on one
 * of the values we differentiate with respect to are asked for a gradient, so no work is
 * spent on, say, the gradient of the token ids or of the data.
 *
 * Because the rules only use the builder, the same code differentiates eagerly (an EAGER
 * builder runs each backward node as it is emitted: the graph is the tape) and as a
 * graph transform (kn_autograd copies the forward graph into a GRAPH builder, appends the
 * backward and returns the joint graph, AOTAutograd style). */
#include <string.h>

#include "ir/ir_impl.h"
#include "kiln/autograd.h"

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
