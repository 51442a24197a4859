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
 * (core/include/kiln/ops.def names it; core/autograd/rules.c and, for the lab 02 units below,
 * the lab unit labs/lab02-autograd/rules.c hold them). So the same code serves
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

#ifdef __cplusplus
extern "C" {
#endif

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

/* ---------------------------------------------------------------- lab 02 units
 * Declared here, called by the core, written by students in labs/lab02-autograd/
 * (the staff's reference is compiled in: PRIOR=staff). kn_backward above is one of them: the reverse
 * pass (backward.c). The others:
 *
 * kn_sum_to (backward.c): the gradient g of a value whose operand x was broadcast, summed
 * back to x's type: g's type is what x's shape broadcasts to (same dtype). Sums over the
 * leading axes x lacks and over the axes where x has size 1 and g does not, then reshapes
 * to x's shape. Returns g itself when the types are already equal, KN_VAL_NONE when g or x
 * is KN_VAL_NONE or the builder is in error. Every rule of a broadcasting op uses it.
 *
 * The backward rules (rules.c), one per op, named in core/include/kiln/ops.def. A rule gets the
 * builder, the id of the forward node, and dy, the gradient of that node's value (same
 * type). On entry dx[k] is KN_VAL_WANT (core/ir/ir_impl.h: kn_want) when operand k needs
 * a gradient and KN_VAL_NONE when not; the rule replaces each wanted dx[k] by operand k's
 * gradient (of operand k's type), emitted with ordinary builder calls, and leaves the
 * others alone. Errors go to the builder (sticky); a rule never fails by itself.
 *     mul  z = x*y          dx = dy*y, dy_y = dy*x (each summed back with kn_sum_to)
 *     div  z = x/y          dx = dy/y, dy_y = -dy*z/y
 *     exp  z = e^x          dx = dy*z          log  z = ln x    dx = dy/x
 *     tanh z = tanh x       dx = dy*(1 - z^2)
 *     sum / mean over axes  dy reshaped to keepdim form, broadcast back (mean: / count)
 *     matmul z = op(a)@op(b) (attrs ta, tb)     da = dy@op(b)^T, db = op(a)^T@dy, the
 *                           broadcast batch axes summed back
 *     permute z = x.permute(p)                  dx = dy.permute(inverse of p) */
kn_val kn_sum_to(kn_builder *b, kn_val g, kn_val x);
/* The argument check kn_sum_to starts with (core/autograd/rule_check.c): false, with
 * nothing done, when g or x is KN_VAL_NONE or the builder is in error; false after
 * failing the builder (KN_ERR_SHAPE, naming both types, the mismatched axis and the rule
 * that called) when g's type is not what x's broadcasts to; true otherwise. Every rule's
 * answer is checked against its operand's type the same way (kn_backward_checked), so a
 * wrong-shaped gradient is an error, never a silent broadcast. */
bool kn_sum_to_check(kn_builder *b, kn_val g, kn_val x);
/* Ask node id's backward rule (ops.def's backward column, compiled in
 * core/autograd/rule_check.c) for the gradients of its operands, given dy, the gradient
 * of its result. On entry dx[k] is KN_VAL_WANT for each operand that needs a gradient and
 * KN_VAL_NONE for the others; the rule sets each wanted dx[k] to a value of operand k's
 * type, or KN_VAL_NONE when no gradient flows there. Errors go to the builder (sticky),
 * each naming the rule and the node: id not a node of b (KN_ERR_ARG); an op without a rule
 * (KN_ERR_UNSUPPORTED, "not differentiable"); dy not of node id's type, or an answer not
 * of its operand's type (KN_ERR_SHAPE). */
void kn_backward_checked(kn_builder *b, int32_t id, kn_val dy, kn_val *dx);
/* Every rule the backward column of ops.def names (core/autograd/rules.c, lab 02's
 * rules_unit.c, bw_none in rule_check.c), declared here so that each definition is checked
 * against the rule's shape (kn_backward_checked's arguments). */
#define KN_OP(E, name, arity, cat, req, opt, infer, kernel, backward, cost) \
    void backward(kn_builder *b, int32_t id, kn_val dy, kn_val *dx);
#include "kiln/ops.def"
void bw_mul(kn_builder *b, int32_t id, kn_val dy, kn_val *dx);
void bw_div(kn_builder *b, int32_t id, kn_val dy, kn_val *dx);
void bw_exp(kn_builder *b, int32_t id, kn_val dy, kn_val *dx);
void bw_log(kn_builder *b, int32_t id, kn_val dy, kn_val *dx);
void bw_tanh(kn_builder *b, int32_t id, kn_val dy, kn_val *dx);
void bw_sum(kn_builder *b, int32_t id, kn_val dy, kn_val *dx);
void bw_mean(kn_builder *b, int32_t id, kn_val dy, kn_val *dx);
void bw_matmul(kn_builder *b, int32_t id, kn_val dy, kn_val *dx);
void bw_permute(kn_builder *b, int32_t id, kn_val dy, kn_val *dx);

#ifdef __cplusplus
}
#endif

#endif /* KILN_AUTOGRAD_H */
