/* ir_impl.h — internals of the graph IR shared by core/ir/ and core/autograd/.
 *
 * The per-op function tables generated from ops.def (ORDER OP), the attribute table, and
 * the few helpers the printer, parser, verifier, builder and interpreter share. Nothing
 * here is part of the public API (kiln/ir.h). */
#ifndef KILN_IR_IMPL_H
#define KILN_IR_IMPL_H

#include <stddef.h>

#include "kiln/ir.h"

/* Shape and dtype rule: the type a node defines, given its operand types; on failure a
 * reason without prefix in msg (msz bytes) and the status. For sources, out arrives
 * holding the declared type, which the rule checks. */
typedef kn_status (*kn_infer_fn)(const kn_node *n, const kn_type *const *in, kn_type *out,
                                 char *msg, size_t msz);
/* CPU kernel: in[] contiguous operand tensors; *out a new tensor of n->type. */
typedef kn_status (*kn_kernel_fn)(const kn_node *n, const kn_tensor *const *in, kn_tensor **out);
/* Backward rule: node `id` of b's graph receives the gradient dy. On entry dx[i] is
 * KN_VAL_WANT when operand i needs a gradient and KN_VAL_NONE when not; the rule sets
 * each wanted dx[i] to the gradient (of operand i's type) or to KN_VAL_NONE when none
 * flows there. Errors go to the builder (sticky). */
#define KN_VAL_WANT ((kn_val){-2})
static inline bool kn_want(kn_val v) { return v.id == -2; }
typedef void (*kn_backward_fn)(kn_builder *b, int32_t id, kn_val dy, kn_val *dx);
typedef kn_cost (*kn_cost_fn)(const kn_graph *g, const kn_node *n);

#define KN_OP(E, name, arity, cat, req, opt, infer, kernel, backward, cost)              \
    kn_status infer(const kn_node *, const kn_type *const *, kn_type *, char *, size_t); \
    kn_status kernel(const kn_node *, const kn_tensor *const *, kn_tensor **);           \
    kn_cost cost(const kn_graph *, const kn_node *);
#include "kiln/ops.def"

/* The IR's columns of ops.def. Its backward column is autograd's (core/autograd/rule_check.c
 * compiles it into the rules' table; kn_backward_checked, kiln/autograd.h, runs a node's
 * rule): the IR only reads whether an op has one (kn_op_info.differentiable). */
typedef struct kn_op_impl {
    kn_infer_fn infer;
    kn_kernel_fn kernel;
    kn_cost_fn cost;
} kn_op_impl;
extern const kn_op_impl kn_op_impls[KN_OP_COUNT]; /* ORDER OP */
/* Run n's CPU kernel (the CPU backend's node_eval): operands must be contiguous CPU
 * tensors (KN_ERR_ARG otherwise). */
kn_status kn_cpu_node_eval(const kn_node *n, const kn_tensor *const *in, kn_tensor **out);
/* The CPU backend's cross_entropy_fused (kiln/device.h): cross_entropy and
 * cross_entropy_bwd of in[] = {dloss, logits, targets} in one pass over the rows, the
 * bits of the two nodes (eval_rows.c). */
kn_status kn_cpu_cross_entropy_fused(const kn_tensor *const *in, kn_tensor **loss, kn_tensor **dlogits);
/* A CPU kernel's output (eval.c): a new contiguous tensor of n's type in *out, or, when
 * *out is already set (a compiled program's memory plan), a check that it is a contiguous
 * CPU tensor of n's type (KN_ERR_INTERNAL if not). */
kn_status kn_eval_new_out(const kn_node *n, kn_tensor **out);

typedef enum kn_attr_kind { KN_AK_INT, KN_AK_F64, KN_AK_INTS, KN_AK_DTYPE, KN_AK_STR, KN_AK_FN } kn_attr_kind;
typedef struct kn_attr_meta {
    const char *name;
    kn_attr_kind kind;
} kn_attr_meta;
extern const kn_attr_meta kn_attr_metas[KN_ATTR_COUNT]; /* ORDER ATTR */

/* Access to one attribute of a kn_attrs by id (for the generic printer and parser). */
int64_t *kn_attr_int(kn_attrs *a, kn_attr_id id);          /* INT kinds */
double *kn_attr_f64(kn_attrs *a, kn_attr_id id);           /* F64 kinds */
int64_t *kn_attr_ints(kn_attrs *a, kn_attr_id id, int **count); /* INTS kinds */
/* Whether attribute id of a differs from its default. */
bool kn_attr_is_default(const kn_attrs *a, kn_attr_id id);

/* A growing string for the printer and messages. */
typedef struct kn_sbuf { char *s; size_t len, cap; bool oom; } kn_sbuf;
void kn_sbuf_printf(kn_sbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append node id's line (without a newline) to sb: "%3 = matmul %1, %2 : f32[4,8]". */
void kn_node_format(kn_sbuf *sb, const kn_graph *g, int32_t id);

/* "%7 = add" for messages. */
const char *kn_node_label(const kn_graph *g, int32_t id, char *buf, size_t size);

/* Check that node n's attributes are the ones its op takes and are in range (names the
 * first problem in msg). Used by the verifier and the builder. */
kn_status kn_node_check_attrs(const kn_node *n, char *msg, size_t msz);

/* NumPy broadcasting of two shapes (kiln's own, independent of the lab 01 unit): false
 * when they do not broadcast. */
bool kn_ir_broadcast(int na, const int64_t *a, int nb, const int64_t *b, int *nout, int64_t *out);
/* Element strides of a contiguous tensor of shape (ndim, shape) read as a broadcast to
 * (nout, oshape): 0 on new and stretched axes. */
void kn_ir_broadcast_strides(int ndim, const int64_t *shape, int nout, const int64_t *oshape,
                             int64_t *strides);
/* Element strides of a contiguous tensor of shape (ndim, shape) read through permutation
 * perm (output axis i is input axis perm[i]; negative entries count from the end): the
 * source strides of a permute's strided copy. */
void kn_ir_permute_strides(int ndim, const int64_t *shape, const int64_t *perm, int64_t *strides);
/* A type whose dims are non-negative and whose element count stays below 2^48 (so
 * byte counts and offsets cannot overflow). */
bool kn_ir_type_ok(const kn_type *t);
/* Python slice clamping: the first index and the length of start:stop:step on a dim. */
void kn_ir_slice_range(int64_t dim, int64_t start, int64_t stop, int64_t step, int64_t *first,
                       int64_t *len);
/* Normalize the reduction axes of a node against ndim (empty = all) into a bitmask. */
bool kn_ir_reduce_mask(const kn_attrs *a, int ndim, unsigned *mask);

/* A contiguous tensor on t's device with t's contents: an alias when t already is one,
 * else a copy (on the CPU here; elsewhere by the device's backend, kn_ir_device.contiguous:
 * KN_ERR_UNSUPPORTED when none is registered); fn names the caller. */
kn_status kn_ir_contiguous(const char *fn, const kn_tensor *t, kn_tensor **out);
/* The device hooks the runtime registered (kn_ir_set_device_hooks; node_eval.c). */
extern kn_ir_device_hooks kn_ir_device;

/* The builder's graph and eager tensors, for the autograd rules. */
kn_graph *kn_builder_graph_mut(kn_builder *b);
/* Append node n (checked and typed by the caller: kn_builder_record) to the builder's
 * graph; *id receives its id. In EAGER mode t (owned; the node's value, computed by the
 * caller) is kept as the value's tensor; in GRAPH mode t should be NULL (it is freed).
 * On failure t is freed and the status returned (the builder is not marked failed). */
kn_status kn_builder_push(kn_builder *b, const kn_node *n, kn_tensor *t, int32_t *id);

/* The shape rules' messages (infer.c, shared with infer_comm.c): fail writes the message and
 * returns st; need_float fails unless t is a floating type, naming `what`. */
kn_status kn_infer_fail(char *msg, size_t msz, kn_status st, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
kn_status kn_infer_need_float(const kn_type *t, const char *what, char *msg, size_t msz);

#endif /* KILN_IR_IMPL_H */
