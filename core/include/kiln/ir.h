/* kiln/ir.h — the graph IR: an op table, SSA graphs of typed values, a builder that runs
 * eagerly or records a graph, a text format (printer + parser), a verifier and a CPU
 * interpreter.
 *
 * A graph is a list of nodes in definition order. Node i defines the SSA value %i, whose
 * type is a dtype and a shape (kn_type). A node names its op, its operands (earlier values)
 * and its attributes. Sources (`input`, `param`, `full`) have no operands. A graph also has
 * an ordered list of outputs. Every op is one line of core/include/kiln/ops.def (name, arity,
 * category, attributes, shape rule, CPU kernel, backward rule, cost), or, for a pointwise
 * function, a row of kiln/pointwise.def marked IR, which ops.def includes.
 *
 * Text format (one node per line; `#` starts a comment; blank lines are ignored):
 *
 *     %0 = input {name="x"} : f32[4,8]
 *     %1 = param {name="w"} : f32[8,16]
 *     %2 = matmul %0, %1 : f32[4,16]
 *     %3 = softmax %2 {axis=0} : f32[4,16]
 *     %4 = sum %3 {axes=[0,1]} : f32[]
 *     output %4
 *
 * i.e. `%ID = OP [OPERAND {, OPERAND}] [{ATTR=VALUE {, ATTR=VALUE}}] : DTYPE[DIMS]` and at
 * most one final `output %A {, %B}` line. Ids may be any `%name` of letters, digits, `_` and `.`
 * in text read by the parser; the printer numbers values 0, 1, 2, ... so printing what
 * was parsed gives back the canonical text: print(parse(print(g))) == print(g), byte for
 * byte. Attribute values are integers, floats (printed with %.17g, so they read back
 * exactly; inf and nan allowed), integer lists `[1,2]`, dtypes (`f32`) and strings
 * (`"wte"`, no quotes or backslashes inside). The printer writes required attributes
 * always and optional ones only when they differ from their default, in the order of the
 * attribute table; the parser accepts any order. The parser checks syntax only (errors:
 * "line:col: expected ..."); kn_graph_verify checks meaning.
 *
 * Builder (the API model code is written against):
 *
 *     kn_builder *b; kn_builder_new(&b, KN_MODE_EAGER);      // or KN_MODE_GRAPH
 *     kn_val x = kn_input(b, "x", x_tensor);                  // eager: holds x_tensor
 *     kn_val w = kn_param(b, "w", w_tensor);
 *     kn_val y = kn_softmax(b, kn_matmul(b, x, w), -1);
 *     if (kn_builder_status(b) != KN_OK) ... kn_builder_error(b) ...
 *
 * Errors are sticky: the first failing call records its message ("kn_add: operand shapes
 * f32[2,3] and f32[4] do not broadcast") and returns KN_VAL_NONE; every later call with
 * the builder in error, or with KN_VAL_NONE as an operand, does nothing and returns
 * KN_VAL_NONE. So model code checks once, at the end.
 *
 * Both modes record the graph. EAGER mode also runs every node at once (kn_node_eval: the
 * backend of its operands' device; the CPU kernels for host tensors), and the value holds
 * its tensor (kn_val_tensor). GRAPH mode only records;
 * kn_builder_finish hands over the graph, which the interpreter (kn_interp) runs with the
 * inputs and params bound by name. Eager and interpreted runs call the same kernel for
 * each node, so they agree bitwise. This is capture: one model function, two modes.
 *
 * Runtime values are contiguous tensors, on the CPU or on the device a backend runs them
 * on (views are materialized by their kernels; reshape of a contiguous tensor and a slice
 * that keeps one contiguous block are aliases). The CPU kernels compute float ops in f32
 * and f64, and in f16 and bf16 by widening the operands to f32 and rounding the result
 * once as it is stored (as a GPU does); plus the integer index operands of embedding and
 * cross_entropy, bool for eq/where, and any pair of dtypes for cast. Binary ops do not
 * promote: their operands must have the same dtype (insert a cast).
 *
 * Threads: the CPU kernels split large matrix products and row-wise kernels over
 * KILN_THREADS threads (default: the online CPUs); results do not depend on the thread
 * count. A builder, graph or interpreter is used by one thread at a time.
 *
 * Ownership: a graph owns its nodes; a builder owns its graph until kn_builder_finish;
 * tensors returned by kn_val_tensor and kn_interp_output are borrowed (valid until the
 * builder/interpreter is freed, or the next kn_interp_run). */
#ifndef KILN_IR_H
#define KILN_IR_H

#include "kiln/base.h"
#include "kiln/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- ops and attributes */

/* ORDER OP: generated from core/include/kiln/ops.def; every table indexed by kn_op follows it. */
typedef enum kn_op {
#define KN_OP(E, name, arity, cat, req, opt, infer, kernel, backward, cost) KN_OP_##E,
#include "kiln/ops.def"
    KN_OP_COUNT
} kn_op;

/* ORDER ATTR: generated from core/include/kiln/ops.def (KN_ATTR lines). */
typedef enum kn_attr_id {
#define KN_ATTR(E, name, kind, dflt) KN_ATTR_##E,
#include "kiln/ops.def"
    KN_ATTR_COUNT
} kn_attr_id;

#define KN_ABIT(E) (1u << KN_ATTR_##E)

typedef enum kn_op_category {
    KN_CAT_SOURCE = 0,    /* input, param, full: no operands */
    KN_CAT_ELEMENTWISE,   /* same-shape (broadcasting) pointwise maps */
    KN_CAT_REDUCTION,     /* sum, mean, max over axes */
    KN_CAT_MATMUL,        /* batched matrix product */
    KN_CAT_VIEW,          /* reshape, permute, broadcast_to, slice: no arithmetic */
    KN_CAT_MOVEMENT,      /* gathers and scatters: embedding, slice_grad, ... */
    KN_CAT_OTHER,         /* fused NN ops: softmax, layernorm, cross_entropy, ... */
    KN_CAT_COLLECTIVE,    /* grad_store, all_reduce_start, ...: run by the program's
                           * collectives (kn_collectives below), not by a device kernel */
    KN_CAT_COUNT
} kn_op_category;

/* The fixed set of attributes any node may carry. Which ones an op takes (required or
 * optional) is in its ops.def line; unused fields keep their defaults. */
#define KN_NAME_MAX 64
typedef struct kn_attrs {
    int naxes;                      /* axes: reduction axes; empty = all axes */
    int64_t axes[KN_MAX_DIMS];
    int nperm;                      /* perm: permutation of 0..ndim-1 */
    int64_t perm[KN_MAX_DIMS];
    int nshape;                     /* shape: target shape (reshape may hold one -1) */
    int64_t shape[KN_MAX_DIMS];
    int64_t axis;                   /* softmax/log_softmax/slice axis; default -1 */
    int64_t keepdim;                /* 0/1, default 0 */
    int64_t start, stop, step;      /* slice: Python-style, clamped; step >= 1 (default 1) */
    int64_t ta, tb;                 /* matmul: use the transpose of a / b (last two axes) */
    int64_t seed, offset;           /* dropout: Philox key and first word of the stream */
    double eps;                     /* layernorm: default 1e-5 */
    double p;                       /* dropout probability in [0, 1) */
    double value;                   /* full: the fill value; causal_fill: the fill value */
    double scale;                   /* causal_softmax(_bwd): the logit scale; default 1 */
    kn_dtype dtype;                 /* cast: the target dtype */
    char name[KN_NAME_MAX];         /* input/param: the binding name */
    int32_t fn;                     /* unary_grad: the kn_unary_op whose gradient; default -1 */
    int64_t mesh, parts, peer;      /* value collectives: the mesh axis, its rank count (default
                                     * 1), send/recv's other rank along it */
} kn_attrs;

/* The defaults every node starts from (axis -1, step 1, eps 1e-5, dtype f32, ...). */
kn_attrs kn_attrs_default(void);

typedef struct kn_op_info {
    const char *name;         /* text name: "matmul" */
    int arity;                /* number of operands */
    kn_op_category category;
    uint32_t req_attrs;       /* KN_ABIT(...) mask of required attributes */
    uint32_t opt_attrs;       /* mask of optional attributes */
    bool differentiable;      /* has a backward rule */
} kn_op_info;

const kn_op_info *kn_op_get(kn_op op);           /* NULL for an invalid op */
/* The operand whose bytes op's library kernels may write their result over, or -1 for
 * none: the one statement of it (core/ir/op.c lists the ops and why each is safe). The
 * memory plan (core/program/program.c) uses it for library steps, only when that operand
 * has the result's dtype and size, is contiguous from its storage's start, and dies there. */
int kn_op_inplace_operand(kn_op op);
const char *kn_op_name(kn_op op);                /* "?" for an invalid op */
/* KN_OP_COUNT when the name is unknown. */
kn_op kn_op_from_name(const char *name, size_t len);
const char *kn_attr_name(kn_attr_id a);
const char *kn_op_category_name(kn_op_category c);
/* The scalar function an IR op computes, for the kernels of every backend and the code
 * renderers (kiln/scalar.h): kn_op_unary, the row of kiln/pointwise.def an op was made
 * from (the table generates both, so they cannot drift); kn_op_binary, the elementwise
 * ops add sub mul div eq; kn_op_reduce, the reductions sum mean max. false (and *out
 * untouched) when op is not one of those: the caller reports the op as unsupported by its
 * backend, never computes another op. */
bool kn_op_unary(kn_op op, kn_unary_op *out);
/* The IR op of pointwise function f (KN_OP_COUNT for a row that is the library's only). */
kn_op kn_unary_ir_op(kn_unary_op f);
bool kn_op_binary(kn_op op, kn_binary_op *out);
bool kn_op_reduce(kn_op op, kn_reduce_op *out);
/* A value collective that makes a tensor (all_reduce, all_gather, reduce_scatter, recv),
 * not a token: its context fills the node's value (kiln/ir.h, "value collectives"). */
bool kn_op_makes_tensor(kn_op op);

/* ---------------------------------------------------------------- graphs */

#define KN_MAX_OPERANDS 6 /* the operands a node can hold (no op takes more) */

typedef struct kn_type {
    kn_dtype dtype;
    int ndim;                       /* 0 for a scalar */
    int64_t shape[KN_MAX_DIMS];
} kn_type;

/* A node's scope: which part of the model built it, KN_SCOPE_NONE when none. The GPT
 * builder stamps the index of the transformer block (kn_builder_set_scope), so a pass can
 * ask "which layer is this?" (activation checkpointing keeps one value per layer). It is
 * not part of the value's meaning: the verifier ignores it, the text format does not
 * carry it (a parsed graph has none), and passes keep it on what they rewrite. */
#define KN_SCOPE_NONE (-1)

typedef struct kn_node {
    kn_op op;
    int nin;                        /* == the op's arity in a verified graph */
    int32_t in[KN_MAX_OPERANDS];    /* operand value ids, each < this node's id */
    kn_type type;                   /* the type of the value this node defines */
    kn_attrs attrs;
    int32_t scope;                  /* KN_SCOPE_NONE, or the layer that made it (see above) */
} kn_node;

typedef struct kn_graph {
    kn_node *nodes;                 /* owned; node i defines %i */
    int nnodes, cap;
    int32_t *outputs;               /* owned; value ids, in order */
    int noutputs, cap_outputs;
} kn_graph;

/* A value handle: the id of the node that defines it. KN_VAL_NONE after an error. */
typedef struct kn_val { int32_t id; } kn_val;
#define KN_VAL_NONE ((kn_val){-1})
static inline bool kn_val_ok(kn_val v) { return v.id >= 0; }

kn_status kn_graph_new(kn_graph **out);
void kn_graph_free(kn_graph *g);                 /* NULL is fine */
kn_status kn_graph_copy(kn_graph **out, const kn_graph *g);
/* Append a node as given (no checking: the verifier does that); *id receives its id. */
kn_status kn_graph_add_node(kn_graph *g, const kn_node *n, int32_t *id);
kn_status kn_graph_add_output(kn_graph *g, int32_t id);
/* The id of the input or param named `name`, or -1. */
int32_t kn_graph_find(const kn_graph *g, const char *name);
/* "f32[2,3]" into buf (always NUL-terminated); returns buf. */
const char *kn_type_str(const kn_type *t, char *buf, size_t size);
bool kn_type_equal(const kn_type *a, const kn_type *b);
int64_t kn_type_numel(const kn_type *t);

/* Text: print to a FILE, or into an owned string (*out, caller kn_free()s). */
kn_status kn_graph_print(FILE *f, const kn_graph *g);
kn_status kn_graph_to_string(const kn_graph *g, char **out);
/* Parse text (len bytes, need not be NUL-terminated). KN_ERR_FORMAT with
 * "kn_graph_parse: 3:14: expected ':' before the type, got '['" on a syntax error.
 * The result is NOT verified; call kn_graph_verify. */
kn_status kn_graph_parse(const char *text, size_t len, kn_graph **out);

/* Whether node n's value shares its operand's storage (operand type x): a reshape, or a
 * slice that keeps one contiguous block of a contiguous operand (step 1, every axis before
 * the sliced one of size 1: rows of a matrix, one entry of a stack). Its kernel returns a
 * view when no output is given, and a compiled program plans no memory for it. */
bool kn_ir_aliases(const kn_node *n, const kn_type *x);
/* Check arity, attributes (required present, values in range), operand ids defined
 * before use, dtypes and shapes (each node's type equals what its op's rule infers), and
 * outputs. The message names the node: "%7 = add: operand shapes f32[2,3] and f32[4] do
 * not broadcast". Returns KN_ERR_FORMAT for structure, KN_ERR_SHAPE/DTYPE/AXIS/ARG for
 * the rest. */
kn_status kn_graph_verify(const kn_graph *g);
/* Infer the type a node of op n->op with these operand types and n->attrs defines
 * (for sources: checks n->type). On failure msg gets the reason without a prefix
 * ("operand shapes f32[2,3] and f32[4] do not broadcast"). */
kn_status kn_node_infer(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz);

/* Cost of one node of a verified graph: floating-point operations and bytes moved
 * (operands read + result written, at their dtype sizes), for passes and the roofline. */
typedef struct kn_cost { double flops; double bytes; } kn_cost;
kn_cost kn_node_cost(const kn_graph *g, int32_t id);
kn_cost kn_graph_cost(const kn_graph *g);

/* Run one node's CPU kernel: in[] are the operand tensors (contiguous, on the CPU, of the
 * operand types), *out a new contiguous tensor of n->type. Sources cannot be evaluated
 * here (KN_ERR_ARG), except `full`. Used by eager mode and the interpreter alike. *out must
 * be NULL, except on the CPU for an op that is not a reshape (which aliases its operand):
 * there a compiled program may place a contiguous CPU tensor of n->type in *out (its memory
 * plan), and the kernel writes into it. */
kn_status kn_node_eval(const kn_node *n, const kn_tensor *const *in, kn_tensor **out);

/* The IR's way to the devices' compute, which lives above it (core/runtime/, kiln/device.h).
 * A node whose operands are all on the host runs on the CPU kernels here (ir/eval.c); a
 * node with an operand on another device runs on that device's backend, and a strided
 * tensor there is made contiguous by it, through these two entry points, which the
 * runtime registers when the program starts (core/runtime/device.c, from a constructor:
 * every binary linked with the backend table has them before main). Until then (a binary
 * without the runtime) such a node or copy fails with KN_ERR_UNSUPPORTED ("no cuda
 * backend in this build"), as it does for a device whose backend is not built in.
 *   node_eval:  kn_node_eval's contract, for a node with an operand on dev (not the CPU);
 *   contiguous: a contiguous tensor on t's device with t's contents (an alias when t is
 *               contiguous already): kn_device_contiguous. */
typedef struct kn_ir_device_hooks {
    kn_status (*node_eval)(kn_device dev, const kn_node *n, const kn_tensor *const *in, kn_tensor **out);
    kn_status (*contiguous)(const char *fn, const kn_tensor *t, kn_tensor **out);
} kn_ir_device_hooks;
/* Register h (copied; NULL members or h NULL: none). Called once, before any node runs. */
void kn_ir_set_device_hooks(const kn_ir_device_hooks *h);

/* ---------------------------------------------------------------- builder */

typedef enum kn_mode { KN_MODE_EAGER = 0, KN_MODE_GRAPH } kn_mode;
typedef struct kn_builder kn_builder;

kn_status kn_builder_new(kn_builder **out, kn_mode mode);
/* A GRAPH-mode builder that starts with a copy of g (to extend it: autograd, passes). */
kn_status kn_builder_from_graph(kn_builder **out, const kn_graph *g);
void kn_builder_free(kn_builder *b);             /* frees the graph and eager tensors */
kn_mode kn_builder_mode(const kn_builder *b);
/* KN_OK, or the status of the first failed call (its message: kn_builder_error). */
kn_status kn_builder_status(const kn_builder *b);
const char *kn_builder_error(const kn_builder *b); /* "" when no error */
/* Record the first error by hand (model code validating its own arguments); sticky. */
void kn_builder_fail(kn_builder *b, kn_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The graph recorded so far (borrowed; both modes record). */
const kn_graph *kn_builder_graph(const kn_builder *b);
/* Mark v as a graph output (in order). */
void kn_builder_output(kn_builder *b, kn_val v);
/* Stamp every node recorded from now on with scope (KN_SCOPE_NONE, or >= 0: a layer's
 * index; a builder starts with none). Returns the previous scope (-1 for a NULL builder). */
int32_t kn_builder_set_scope(kn_builder *b, int32_t scope);
/* Hand over the recorded graph (verified first) and reset the builder to empty. Fails
 * with the builder's sticky error, if any. */
kn_status kn_builder_finish(kn_builder *b, kn_graph **out);

/* Inspect a value. kn_val_type returns NULL for an invalid value; the pointer is into
 * the graph's node array, valid until the next call that adds a node (copy the kn_type
 * to keep it). */
const kn_type *kn_val_type(const kn_builder *b, kn_val v);
int kn_val_ndim(const kn_builder *b, kn_val v);                /* -1 when invalid */
int64_t kn_val_dim(const kn_builder *b, kn_val v, int axis);   /* negative axis ok; -1 when invalid */
/* EAGER mode: the value's tensor (borrowed, owned by the builder). NULL in graph mode. */
const kn_tensor *kn_val_tensor(const kn_builder *b, kn_val v);

/* Sources. In eager mode the value holds an alias of t (params updated in place between
 * steps are seen by the next builder that binds them). In graph mode only t's dtype and
 * shape are recorded; the interpreter binds data by name. Names are unique per graph. */
kn_val kn_input(kn_builder *b, const char *name, const kn_tensor *t);
kn_val kn_param(kn_builder *b, const char *name, const kn_tensor *t);
/* An input declared by type only (GRAPH mode; eager mode has no data: KN_ERR_ARG). */
kn_val kn_input_typed(kn_builder *b, const char *name, kn_dtype dt, int ndim, const int64_t *shape);
kn_val kn_param_typed(kn_builder *b, const char *name, kn_dtype dt, int ndim, const int64_t *shape);
/* A constant tensor filled with value; kn_scalar is the 0-d case. */
kn_val kn_full(kn_builder *b, kn_dtype dt, int ndim, const int64_t *shape, double value);
kn_val kn_scalar(kn_builder *b, kn_dtype dt, double value);

/* Elementwise (operands broadcast, NumPy rules; same dtype required). */
kn_val kn_add(kn_builder *b, kn_val x, kn_val y);
kn_val kn_sub(kn_builder *b, kn_val x, kn_val y);
kn_val kn_mul(kn_builder *b, kn_val x, kn_val y);
kn_val kn_div(kn_builder *b, kn_val x, kn_val y);
kn_val kn_add_scalar(kn_builder *b, kn_val x, double s);   /* x + s (s as a 0-d full) */
kn_val kn_mul_scalar(kn_builder *b, kn_val x, double s);   /* x * s */
kn_val kn_eq(kn_builder *b, kn_val x, kn_val y);           /* bool result */
kn_val kn_where(kn_builder *b, kn_val cond, kn_val x, kn_val y); /* cond: bool */
kn_val kn_neg(kn_builder *b, kn_val x);
kn_val kn_exp(kn_builder *b, kn_val x);
kn_val kn_ln(kn_builder *b, kn_val x);                     /* natural log (kn_log is logging) */
kn_val kn_sqrt(kn_builder *b, kn_val x);
kn_val kn_rsqrt(kn_builder *b, kn_val x);
kn_val kn_tanh(kn_builder *b, kn_val x);
kn_val kn_gelu(kn_builder *b, kn_val x);                   /* tanh approximation (GPT-2) */
kn_val kn_relu(kn_builder *b, kn_val x);
/* f(x) for any pointwise function with an IR op (kiln/pointwise.def, its rows marked IR):
 * kn_unary(b, KN_UNARY_GELU, x) is kn_gelu(b, x). A library-only row is an error. */
kn_val kn_unary(kn_builder *b, kn_unary_op f, kn_val x);
/* dx = f'(x) dy, the unary_grad op {fn=f}: f must have a gradient column. */
kn_val kn_unary_grad(kn_builder *b, kn_unary_op f, kn_val dy, kn_val x);
kn_val kn_cast(kn_builder *b, kn_val x, kn_dtype dt);
/* Dropout: y = x * keep / (1 - p), keep_i = u_i >= p with u_i the Philox word at
 * position offset + i of stream 0 of key `seed` (kn_rng_word_at, kn_u32_to_unit_f32).
 * The mask is a pure function of (seed, offset, i): backward regenerates the same mask,
 * and a GPU kernel gives the same one. Callers advance offset by numel per call. */
kn_val kn_dropout(kn_builder *b, kn_val x, double p, uint64_t seed, uint64_t offset);
/* x with elements [..., i, j] where j > i + (cols - rows) set to value (-INFINITY for a
 * causal attention mask): the last two axes are (query, key). */
kn_val kn_causal_fill(kn_builder *b, kn_val x, double value);

/* Reductions over axes (naxes == 0: every axis). */
kn_val kn_sum(kn_builder *b, kn_val x, int naxes, const int *axes, bool keepdim);
kn_val kn_mean(kn_builder *b, kn_val x, int naxes, const int *axes, bool keepdim);
kn_val kn_max(kn_builder *b, kn_val x, int naxes, const int *axes, bool keepdim);

/* a [..., m, k] @ b [..., k, n] -> [..., m, n]; batch axes broadcast; ndim >= 2 each. */
kn_val kn_matmul(kn_builder *b, kn_val a, kn_val c);
/* The same with a and/or c used transposed (their last two axes swapped), no copy. */
kn_val kn_matmul_t(kn_builder *b, kn_val a, kn_val c, bool ta, bool tc);

/* Views (a reshape may hold one -1). */
kn_val kn_reshape(kn_builder *b, kn_val x, int ndim, const int64_t *shape);
kn_val kn_permute(kn_builder *b, kn_val x, int ndim, const int *perm);
kn_val kn_transpose(kn_builder *b, kn_val x, int axis0, int axis1); /* a permute */
kn_val kn_broadcast_to(kn_builder *b, kn_val x, int ndim, const int64_t *shape);
#define kn_expand kn_broadcast_to
/* Python slice start:stop:step along axis (clamped; step >= 1). */
kn_val kn_slice(kn_builder *b, kn_val x, int axis, int64_t start, int64_t stop, int64_t step);
/* x and y joined along axis (equal shapes but there): [x; y]. Its gradient: two slices. */
kn_val kn_concat(kn_builder *b, kn_val x, kn_val y, int axis);

/* NN ops. */
kn_val kn_embedding(kn_builder *b, kn_val weight, kn_val idx);  /* [V,D], int [...] -> [...,D] */
kn_val kn_softmax(kn_builder *b, kn_val x, int axis);
kn_val kn_log_softmax(kn_builder *b, kn_val x, int axis);
/* Scaled causal softmax over the last axis, the fused form of attention's
 * softmax(causal_fill(x * scale, -inf), -1): for x [..., Tq, Tk] (float, at least 2 axes),
 * y[..., i, j] = exp(scale * x[..., i, j] - m) / sum_j' exp(scale * x[..., i, j'] - m) over
 * the unmasked columns j, j' <= i + (Tk - Tq) (m: their maximum), and exactly 0 at the masked
 * ones (a row with none unmasked, or whose unmasked logits are all -inf, is all 0). scale,
 * rounded to x's dtype, must be positive and finite (else KN_ERR_ARG). On the CPU the result,
 * and its gradient where dy is finite, are bit for bit those of the three-op composition.
 * Its backward op, causal_softmax_bwd(dy, y), is dx = scale * y * (dy - sum_j(dy * y)). */
kn_val kn_causal_softmax(kn_builder *b, kn_val x, double scale);
/* Causal attention without the [..., T, T] matrix (FlashAttention): q, k, v of one float
 * type and one shape [..., T, D] (at least 2 axes). The result y [..., T, D + 1] packs, per
 * query row i, O_i = sum_j P_ij v_j with P = causal_softmax(q k^T, scale) in columns 0..D-1
 * and the logsumexp L_i = log sum_{j <= i} exp(scale * q_i . k_j) in column D (a row whose
 * logits are all -inf: O_i = 0, L_i = -inf). O is kn_slice(b, y, nd - 1, 0, D, 1). One
 * value holds both because a node defines one value; L travels with O to the backward,
 * which recomputes P from it tile by tile. Equal to the materialized composition to
 * rounding, not bitwise (other order of sums). Differentiable in every column: its backward
 * op, flash_attn_bwd(q, k, v, y, dy) with dy [..., T, D + 1] (or [..., T, D] when no
 * gradient reaches L), is [3, ..., T, D]: dq, dk, dv stacked on a new leading axis. */
kn_val kn_flash_attn(kn_builder *b, kn_val q, kn_val k, kn_val v, double scale);
/* One new token's attention over a static KV cache (generation's decode step, core/nn/
 * infer.c): qkv [B, 3 * H * D] (the token's query, key and value side by side, each H heads
 * of D: the q/k/v projection's row as it comes), kc, vc [B, H, Tmax, D] (the cache; of qkv's
 * float dtype), len i32 with B elements (row b's valid cache positions, clamped to [0,
 * Tmax]: L). y [B, H * D] (the heads side by side) = per head, softmax over {scale q.kc[t] :
 * t < L} and scale q.kn of the matching values (vc[t], then vn): the cache's first L
 * positions and the new token, never the rest of the cache. Then, when L < Tmax, the op
 * writes kn and vn into kc and vc at position L: the one op that writes into operands (the
 * cache is the decode step's state; no other node of the step may read kc or vc). Not
 * differentiable. (core/ir/attn_decode.c; CUDA: core/runtime/cuda_attn_decode.cu) */
kn_val kn_attn_decode(kn_builder *b, kn_val qkv, kn_val kc, kn_val vc, kn_val len, double scale);
/* The tensor-core kernels of flash_attn and flash_attn_bwd (core/runtime/cuda_flash_tc.cu):
 * the one that runs kind at head dim d ("mma.m16n8k8 tf32, D 64"), or NULL: none. Declared
 * here, with the op, because a pass decides by it too: autocast lowers flash attention only
 * where a bf16 kernel exists (core/passes/autocast.c). (core/ir/flash_tc.c) */
enum { KN_FLASH_TC_TF32, KN_FLASH_TC_BF16 };
const char *kn_flash_tc_kernel(int kind, int d);
/* Over the last axis: (x - mean) / sqrt(var + eps) * w + bias; w, bias: [C]. */
kn_val kn_layernorm(kn_builder *b, kn_val x, kn_val w, kn_val bias, double eps);
/* Mean over all positions of -log_softmax(logits)[target]: logits [..., V] float,
 * targets [...] i32 or i64 in [0, V) (out of range: KN_ERR_ARG when run). 0-d result, of
 * the logits' dtype, but f32 for bf16/f16 logits (read as they are, computed in f32: no
 * f32 copy of the logits is needed; its backward then takes the f32 loss gradient and
 * gives the logits' dtype). */
kn_val kn_cross_entropy(kn_builder *b, kn_val logits, kn_val targets);

/* Append any op by hand: checks arity and attributes, infers the type (for sources the
 * type is *type; otherwise type may be NULL), runs it in eager mode. Every kn_xxx call
 * above is a wrapper over this. `fn` names the caller in error messages. */
kn_val kn_builder_op(kn_builder *b, const char *fn, kn_op op, int nin, const kn_val *in,
                     const kn_attrs *attrs, const kn_type *type);

/* ---------------------------------------------------------------- interpreter */

/* Runs a verified graph on the CPU kernels. Inputs and params are bound by name; after
 * kn_interp_run, outputs are read with kn_interp_output. Each intermediate tensor is
 * freed after its last use (liveness from the node order), so peak memory is the live
 * set, not the whole graph. */
typedef struct kn_interp kn_interp;

/* Verifies g; the interpreter keeps a pointer to g, which must outlive it, unchanged. */
kn_status kn_interp_new(kn_interp **out, const kn_graph *g);
void kn_interp_free(kn_interp *it);
/* Bind an input or param by name; t must have the node's dtype and shape. A contiguous
 * CPU t is aliased (later in-place updates of its storage are seen by later runs);
 * otherwise a contiguous copy is taken now. Rebinding replaces the previous tensor. */
kn_status kn_interp_bind(kn_interp *it, const char *name, const kn_tensor *t);
/* Run every node. Fails naming the first unbound input, or the failing node
 * ("kn_interp_run: %12 = cross_entropy: index 70 at position 3 is outside [0, 65)"). */
kn_status kn_interp_run(kn_interp *it);
/* A callback run after each node of kn_interp_run has its value (borrowed, valid in the
 * call), in node order; a status other than KN_OK stops the run with it. Data parallelism
 * (core/dist/) uses it to start a gradient bucket's all-reduce as soon as its last gradient
 * exists, overlapped with the rest of the backward. fn NULL removes it. */
typedef kn_status (*kn_interp_hook)(void *ctx, int32_t node, const kn_tensor *value);
void kn_interp_set_hook(kn_interp *it, kn_interp_hook fn, void *ctx);
/* ---- collectives in the graph (data parallelism as a pass: core/passes/ddp.c)
 *
 * The ops of category KN_CAT_COLLECTIVE talk to other ranks, so no device kernel computes
 * them: whoever runs the graph (an interpreter, a program) hands each one to the
 * kn_collectives it was given, the context of the run, never a global:
 *   %s = grad_store %g, %t {offset=O}       g (f32) into the gradient slab at O; the
 *                                           token t orders the stores of one bucket
 *   %h = all_reduce_start %s {start=A, stop=B}  start the nonblocking all-reduce of the
 *                                           slab's [A, B), once its last store is done
 *   %h = reduce_scatter_start %s {start=A, stop=B}  the same, but each rank receives the
 *                                           sum of the part of [A, B) its shard holds (ZeRO)
 *   %w = comm_wait %h {start=A, stop=B}     wait for it (before the optimizer reads it)
 *   %b = all_gather_start %t {start=A, stop=B}  start gathering the parameter slab's [A, B)
 *                                           from the ranks' shards (ZeRO-3) into %b, f32[B-A]
 *   %p = comm_wait %b {start=A, stop=B}     wait for it: %p is %b, complete (an alias); the
 *                                           parameters' readers read views of %p, so the
 *                                           buffer lives until its last reader (then freed)
 * Each other one defines a 0-d f32 token (value 0) that orders it after what it depends on.
 *
 * Value collectives (tensor, sequence and pipeline parallelism: kiln/placement.h) take and
 * make tensors, over the ranks of one axis of the device mesh ({mesh=A, parts=N}: axis A,
 * N ranks; the context maps A to its communicator):
 *   %y = all_reduce %x {mesh, parts}           the sum of every rank's x (same type)
 *   %y = all_gather %x {mesh, parts, axis=d}   every rank's x concatenated along d, in rank
 *                                              order (dim d times N)
 *   %y = reduce_scatter %x {mesh, parts, axis=d}  the sum, cut along d into N blocks: this
 *                                              rank's block (dim d divided by N)
 *   %t = send %x {mesh, parts, peer}           x to rank `peer` of the axis: a token
 *   %y = recv %t {mesh, parts, peer, shape, dtype}  a tensor of that type from rank `peer`,
 *                                              after %t (any value: it orders the recv)
 * The context's `run` gets the value's tensor to fill as `out` (the node's type, on the run's
 * device) for all_reduce, all_gather, reduce_scatter and recv.
 * The context decides what the ops mean in a run (kiln/dist.h: the rank's communicator;
 * accumulation adds into the slab and communicates on the last micro-batch only), and is
 * polled between the other nodes so that nonblocking requests progress. `run` gets the
 * node, its operand tensors (contiguous, on the run's device: a GPU rank's NCCL reads
 * them there) and, for an all_gather_start or a value collective that makes a tensor, the
 * buffer to fill (NULL otherwise); `poll`
 * may be NULL. `finish` (may be NULL) runs once after a run's last node: a context whose
 * `run` left device-ordered work in flight (the GPU waits for it, the host did not:
 * kn_comm_wait_device) waits for it there, under the communicator's deadline, before
 * anyone reads the run's outputs on the host (`poll` is not called while a CUDA graph is
 * being captured). */
typedef struct kn_collectives {
    void *ctx;
    kn_status (*run)(void *ctx, int32_t id, const kn_node *n, const kn_tensor *const *in, kn_tensor *out);
    kn_status (*poll)(void *ctx);
    kn_status (*finish)(void *ctx);
    /* true: every collective `run` queues is device-ordered with no host work between
     * them, so a CUDA graph may capture them (kn_program_set_cuda_graph); `finish` then runs
     * after each launch too, and must bound the wait for the replay (kn_comm_ifence) */
    bool graph;
} kn_collectives;
/* The context of the following runs (copied; NULL: none, and a collective node fails
 * naming itself: "%7 = all_reduce_start: no collectives context ..."). */
void kn_interp_set_collectives(kn_interp *it, const kn_collectives *c);
/* Run collective node `id` of g through c and make its value (in[] its operands; *out the
 * program's slot for it, or NULL: made on `dev`); the one path the interpreter and programs
 * take. */
kn_status kn_collective_eval(const kn_collectives *c, kn_device dev, int32_t id, const kn_node *n,
                             const kn_tensor *const *in, kn_tensor **out);
/* One process's collectives (no other ranks): grad_store writes into a slab of its own
 * (grown to fit), an all-reduce over one rank leaves it unchanged; every start must be
 * waited for before the run ends. For kiln compile's check and the tests. */
typedef struct kn_collectives_local kn_collectives_local;
kn_status kn_collectives_local_new(kn_collectives_local **out, kn_collectives *c);
void kn_collectives_local_free(kn_collectives_local *l);
/* The parameter slab (n floats, copied) its all_gathers read: one rank's shard is all of it. */
kn_status kn_collectives_local_params(kn_collectives_local *l, const float *params, int64_t n);
/* The slab (NULL before a store) and its length in floats. */
const float *kn_collectives_local_slab(const kn_collectives_local *l, int64_t *n);

/* Output i (borrowed until the next run or kn_interp_free); NULL when out of range or
 * not run yet. */
const kn_tensor *kn_interp_output(const kn_interp *it, int i);
/* Copy output i into dst (same shape; dtypes converted), e.g. into a gradient slab. */
kn_status kn_interp_output_copy(const kn_interp *it, int i, kn_tensor *dst);

/* ---------------------------------------------------------------- lab 03 units
 * Declared here, called by the core, written by students in labs/lab03-ir/ (the staff's
 * reference is compiled in: PRIOR=staff). kn_graph_verify above is one of them (verify.c). The other is the
 * builder's record path (record.c), the one function every builder call ends in:
 *
 * kn_builder_record(b, fn, op, nin, in, attrs, type, data) appends one node of op `op`
 * with operands in[0..nin) and attributes *attrs (kn_attrs_default() when NULL) and
 * returns its value; in EAGER mode it also runs the node's kernel at once. In order:
 *   - b NULL or in error: return KN_VAL_NONE, nothing else (errors are sticky);
 *   - op unknown (kn_op_get NULL): KN_ERR_ARG "fn: invalid op 99"; nin not the op's
 *     arity: KN_ERR_ARG "fn: add takes 2 operands, got 1";
 *   - every operand a value of this builder (kn_val_type not NULL), else KN_ERR_ARG
 *     "fn: operand 1 is not a value of this builder (id -1)";
 *   - attributes: kn_node_check_attrs (its status, "fn: " + its message); sources (input,
 *     param, full) take their type from *type (NULL: KN_ERR_ARG "fn: a source needs its
 *     type"); then kn_node_infer gives the node's type (its status, "fn: " + its message)
 *     and kn_ir_type_ok must accept it (KN_ERR_SHAPE "fn: result f32[-1] has a negative
 *     dimension or too many elements");
 *   - input/param: the name must not be used yet in the graph (KN_ERR_ARG "fn: the name
 *     "x" is already used in this graph");
 *   - EAGER mode: input/param alias `data` (kn_ir_contiguous; NULL data: KN_ERR_ARG
 *     "fn: eager mode needs data for "x" ..."), other ops run kn_node_eval on the
 *     operands' tensors (kn_val_tensor); a failure there: its status, "fn: " + message;
 *   - kn_builder_push appends the node (and the eager tensor).
 * Every failure goes through kn_builder_fail(b, status, "fn: reason") and returns
 * KN_VAL_NONE, leaving the graph as it was; `fn` (the public caller, "kn_add") starts
 * every message. */
kn_val kn_builder_record(kn_builder *b, const char *fn, kn_op op, int nin, const kn_val *in,
                         const kn_attrs *attrs, const kn_type *type, const kn_tensor *data);

#ifdef __cplusplus
}
#endif

#endif /* KILN_IR_H */
