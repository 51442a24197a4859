/* kiln/autograd.h — reverse-mode differentiation as a graph transform.
 *
 * The idea (AOTAutograd in PyTorch): differentiation does not run alongside the forward
 * pass; it is a function from graphs to graphs. Given a forward graph, a scalar loss value
 * in it and the values to differentiate with respect to, it appends the backward nodes to
 * (a copy of) the graph and returns the joint forward+backward graph, whose extra outputs
 * are the gradients. Every later pass (fusion, memory planning, remat) then sees forward
 * and backward together.
 *
 * The backward is emitted through the builder (kiln/ir.h), one backward rule per op
 * (core/ir/ops.def names it; core/autograd/rules.c holds them). So the same code serves
 * eager mode: on an EAGER builder, kn_backward computes the gradients at once (the
 * recorded graph is the tape).
 *
 * Gradients of broadcast operands are summed back to the operand's shape; a value used
 * several times gets the sum of its contributions; values the loss does not depend on get
 * a zero gradient (a `full` of their type). Dropout's backward regenerates the same mask
 * from the node's (seed, offset) attributes. */
#ifndef KILN_AUTOGRAD_H
#define KILN_AUTOGRAD_H

#include "kiln/ir.h"

/* Append the backward of `loss` (a 0-d or 1-element float value) with respect to
 * wrt[0..n) to the builder; grads[i] receives the gradient of wrt[i] (same type). The seed
 * gradient d loss / d loss is 1. Returns the builder's status (errors are sticky as for
 * every builder call: the message names the rule that failed). n may be 0. */
kn_status kn_backward(kn_builder *b, kn_val loss, int n, const kn_val *wrt, kn_val *grads);

/* The graph transform: *joint = fwd + backward nodes, with outputs: fwd's outputs, then
 * the n gradients in order. Values of fwd keep their ids in *joint; grads[i] (optional,
 * may be NULL) receives each gradient's id in *joint. fwd must verify. */
kn_status kn_autograd(const kn_graph *fwd, kn_val loss, int n, const kn_val *wrt,
                      kn_graph **joint, kn_val *grads);

#endif /* KILN_AUTOGRAD_H */
