/* kiln/schedule.h — fusion and the kernel IR: which nodes of a graph run as one generated
 * kernel, and the loop-level form of such a kernel (core/schedule/: fuse.c, kir.c). The
 * renderers that turn the kernel IR into C and CUDA source are in kiln/codegen.h.
 *
 * Fusion (kn_schedule_build). Nodes are visited in definition order. A fusible node (an
 * elementwise op other than dropout, or a sum/mean/max, on f32, f64 or bool values)
 * joins the group of one of its operands when every rule holds, or opens a new group:
 *   - the group is open: once a value of the group is read by a node outside it, the group
 *     is sealed (it runs there, so it cannot grow past a reader);
 *   - the node's shape is the group's iteration space S (a "full" value), or S without
 *     the reduced axes (an "outer" value, after the group's reduction);
 *   - a reduction reduces a full value of the group, over the same axes as the group's
 *     earlier reductions (a row-wise kernel: softmax, layernorm), or it is the first;
 *   - an operand from the group is used at its own shape (or, for an outer value read by a
 *     full node, broadcast over the reduced axes, keepdim form);
 *   - no operand read from outside depends on a member of the group (that would be a cycle
 *     through an outside node);
 *   - the group has fewer than KN_FUSE_MAX nodes.
 * Each refusal is recorded with its reason (kn_schedule_print). Views (reshape, permute,
 * broadcast_to, slice) and `full` constants read by fused nodes are not computed at all:
 * the kernel loads through the view's strides (no copy) and writes the constant as a
 * literal. They are materialized only for a non-fused reader or as an output. Matmuls,
 * gathers and the ops with no primitive form stay library steps (the backend's kernel).
 *
 * Kernel IR (kn_kernel). An iteration space of `ndim` axes, some of them reduced (the
 * inner axes); buffers (loads and stores, each an offset and one stride per axis: a
 * broadcast is stride 0, a permutation permuted strides, a slice an offset); an expression
 * DAG in topological order, each entry a load, a constant, an op of the graph (the scalar
 * functions of kiln/scalar.h) or a reduction's accumulator; and stores. An entry is "full"
 * (varies over the inner axes) or "outer" (one value per outer index). The C renderer
 * loops over the outer index (split over threads), then for each accumulator runs an
 * inner loop computing its full entries, then a last inner loop for the full stores. Axes
 * that are contiguous for every buffer are merged first, so the inner loop is one long
 * stride-1 loop the compiler vectorizes.
 */
#ifndef KILN_SCHEDULE_H
#define KILN_SCHEDULE_H

#include "kiln/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KN_FUSE_MAX 64 /* most graph nodes in one fused kernel */

/* ---------------------------------------------------------------- schedule */

typedef struct kn_group {
    bool fused;          /* a generated kernel; else one node run by its backend */
    int32_t *nodes;      /* members in definition order (one for a library step) */
    int nnodes;
    int32_t at;          /* the node after which it runs: its last member that is not a
                          * column sum (a column sum's readers all come after it) */
    int ndim;            /* fused: the iteration space S */
    int64_t shape[KN_MAX_DIMS];
    uint32_t inner;      /* fused: bit k set when axis k of S is reduced */
    bool reduces;        /* fused: has a reduction */
} kn_group;

typedef struct kn_schedule {
    kn_group *groups;    /* in run order */
    int ngroups;
    int32_t *group_of;   /* per node: its group, or -1 (input/param, or a view/constant
                          * that fused kernels read in place and nothing materializes) */
    bool *materialize;   /* per node: the value exists as a tensor during a run */
    bool *fusible;       /* per node: an op a generated kernel can compute */
    uint8_t *level;      /* per node of a fused group: 1 full (over S), 2 outer (reduced),
                          * 3 a column sum of a full member (kn_schedule_opts) */
    int nfused, nlibrary;/* groups of each kind */
    char *log;           /* the decisions, one per line: merges and refusals */
} kn_schedule;

/* Group g's nodes (g must verify). *out is owned by the caller (kn_schedule_free). */
kn_status kn_schedule_build(const kn_graph *g, kn_schedule **out);

/* What the target changes in a schedule. gpu: the kernels run on a GPU (the CUDA target
 * and its emulator), where a generated reduction runs a block per row: a reduction with
 * few, long rows (fewer than KN_FUSE_GPU_FEW_ROWS rows of at least KN_FUSE_GPU_LONG_ROW
 * elements: a loss summed to a scalar) would keep a handful of SMs busy and the rest idle,
 * so it stays a library step (the backend's reduction splits each row over many blocks and
 * adds the parts in a fixed order) when the library computes its dtype (f32, f64); its
 * operand chain becomes a kernel of its own. Logged as a decision. */
#define KN_FUSE_GPU_FEW_ROWS 256
#define KN_FUSE_GPU_LONG_ROW 65536
/* colsums (with gpu): a column sum (a sum over leading axes: a bias's or a layernorm
 * weight's gradient) of a value that a fused group computes at the full level joins that
 * group as a KN_LEVEL_COLSUM member, so the kernel that computes the value also sums its
 * columns (kn_kernel.colsums) instead of storing it for a library step that reads it
 * again. Only on a GPU target: the C renderer has no column sums (the CPU keeps the
 * library's). Conditions (each refusal is logged): the sum's operand is a full member of
 * an open or sealed fused group, not a view; in a group with a row reduction the sum runs
 * over exactly the group's outer axes; every column sum of a group keeps the same columns. */
typedef struct kn_schedule_opts {
    bool gpu;
    bool no_colsums;     /* gpu: keep column sums library steps (the comparison's baseline) */
} kn_schedule_opts;
kn_status kn_schedule_build_opts(const kn_graph *g, const kn_schedule_opts *o, kn_schedule **out); /* o NULL: the CPU's */
void kn_schedule_free(kn_schedule *s); /* NULL is fine */
/* The groups, one per line ("k3 fused %4 %5 %7 -> stores %7"), then the log. */
kn_status kn_schedule_print(FILE *f, const kn_graph *g, const kn_schedule *s);

/* The load of value v as its consumers read it: a materialized base value and the offset
 * and strides (over v's own shape, in elements) of a view chain ending at v. false when v
 * is not a view chain of a materialized value (the caller materializes v). */
bool kn_schedule_resolve(const kn_graph *g, const bool *materialize, int32_t v, int32_t *base, int64_t *offset,
                         int64_t *strides);

/* ---------------------------------------------------------------- kernel IR */

typedef enum kn_kx_kind { KN_KX_LOAD, KN_KX_CONST, KN_KX_OP, KN_KX_ACC } kn_kx_kind;

typedef struct kn_kbuf {
    int32_t value;               /* the graph value it holds */
    bool store;                  /* written by the kernel (else read) */
    kn_dtype dtype;
    int64_t offset;              /* elements */
    int64_t stride[KN_MAX_DIMS]; /* per axis of the kernel's space; 0: broadcast */
    bool aliased;                /* the memory plan put this buffer's bytes under another buffer of
                                  * the kernel (a store written in place over a load it indexes
                                  * alike): the C renderer drops `restrict` from it. Lowering
                                  * leaves it false; only core/program/plan.c sets it. */
} kn_kbuf;

typedef struct kn_kx {
    kn_kx_kind kind;
    bool full;                   /* varies over the inner axes */
    kn_dtype dtype;
    int buf;                     /* LOAD: its buffer */
    double value;                /* CONST */
    int32_t node;                /* OP, ACC: the graph node it computes */
    kn_op op;                    /* OP: the node's op; ACC: sum, mean or max */
    int nin;
    int in[KN_MAX_OPERANDS];     /* earlier entries */
    int64_t rows, cols;          /* OP causal_fill: its last two axes (axes ndim-2, ndim-1); OP onehot: the
                                    space axis of its last axis, and that axis's length */
    double fill;                 /* OP causal_fill: the fill value */
    int32_t fn;                  /* OP unary_grad: its kn_unary_op (attribute fn) */
} kn_kx;

typedef struct kn_kstore { int buf, src; } kn_kstore;

/* A column sum folded into the kernel (KN_LEVEL_COLSUM): buffer `buf` (a store of
 * colsum_n elements, contiguous; its strides are 0) gets, for each column c, the sum over
 * the rows of full entry `src` at the point of flat index row * colsum_n + c of the
 * kernel's space (the space's row-major order: merging and splitting axes keeps it). In a
 * kernel with a reduction the columns are its inner axes (colsum_n == inner_n). Only the
 * CUDA renderer writes them: per-block partial sums in double into a scratch of the
 * module, then a second kernel <name>_fin adds the partials in a fixed order. */
typedef struct kn_kcolsum { int buf, src; } kn_kcolsum;

typedef struct kn_kernel {
    char name[32];               /* "k3": a C identifier, unique in its program */
    int ndim;
    int64_t shape[KN_MAX_DIMS];  /* the iteration space after merging axes */
    uint32_t inner;              /* bit k: axis k is an inner (reduced) axis */
    bool reduces;                /* has accumulators (else the inner axis is just the last) */
    kn_kbuf *bufs;
    int nbufs;
    kn_kx *x;                    /* the expression DAG, topological */
    int nx;
    kn_kstore *stores;
    int nstores;
    int64_t outer_n, inner_n;    /* products of the outer and inner axes */
    kn_kcolsum *colsums;         /* column sums of full entries (see kn_kcolsum) */
    int ncolsums;
    int64_t colsum_n;            /* their number of columns (the same for all) */
} kn_kernel;

/* Lower fused group `gi` of s to kernel IR named "k<gi>". */
kn_status kn_kernel_lower(const kn_graph *g, const kn_schedule *s, int gi, kn_kernel *out);
void kn_kernel_clear(kn_kernel *k);
/* Check the invariants every renderer relies on (operands earlier, loads in range, a full
 * entry never feeds an outer one except through an accumulator, ...). */
kn_status kn_kernel_verify(const kn_kernel *k);
/* Whether buffers a and b of k index their values alike: the same dtype, offset and
 * strides, so element i of the space is at the same place in both. */
bool kn_kernel_same_map(const kn_kernel *k, int a, int b);
kn_status kn_kernel_print(FILE *f, const kn_kernel *k);

/* ---------------------------------------------------------------- lab 05 units
 * Declared here, called by the scheduler, written by students in
 * labs/lab05-fusion/ (the staff's reference units are linked for every other lab).
 *
 * kn_fuse_refusal (fuse_rules.c): may node n join group G? The scheduler describes both in
 * a kn_fuse_query (below) and applies the answer: NULL to join, with *level set to
 * KN_LEVEL_FULL (n varies over the whole space S) or KN_LEVEL_OUTER (n is one value per
 * row: a reduction's result, or an op on such values), or a static string, the reason,
 * which the schedule's log prints. The rules, in this order (the first that fails is the
 * reason given):
 *   1. G is a fused group ("a library step"), not sealed ("the group is sealed (a node
 *      outside it already reads it)"), with fewer than KN_FUSE_MAX nodes ("the group is
 *      full (KN_FUSE_MAX nodes)");
 *   2. a reduction: its operand is a full member of G, or (horizontal) read from outside
 *      ("a reduction of a value from outside the group"); its axes are G's reduced axes
 *      when G already reduces ("a reduction over other axes than the group's"), else its
 *      operand's shape is S ("a reduction of a value of another shape"). Level: outer.
 *      An elementwise node: its shape is S (full), or G reduces and its shape is S without
 *      the reduced axes, kept as 1 (keepdim) or dropped (outer); else "its shape is neither
 *      the group's space nor the space without the reduced axes";
 *   3. causal_fill only full ("causal_fill of a reduced value");
 *   4. each operand of an elementwise node: from G with n's shape at n's level ("an operand
 *      of the group at another level" otherwise), or an outer member in keepdim form read
 *      by a full n (a row statistic broadcast over its row); any other operand from G is
 *      "an operand of the group broadcast in a way the kernel cannot index". An operand
 *      read from memory: a constant is always fine; one that is a view of a member of G
 *      "reads a value of the group through a view"; one computed from a member of G is
 *      "an operand from outside depends on the group (a cycle)". */
enum { KN_LEVEL_FULL = 1, KN_LEVEL_OUTER = 2, KN_LEVEL_COLSUM = 3 /* scheduler's, never kn_fuse_refusal's */ };

typedef struct kn_fuse_operand {
    const kn_type *type;
    bool in_group;          /* a member of G (its value is in registers) */
    int level;              /* in_group: KN_LEVEL_FULL or KN_LEVEL_OUTER */
    bool constant;          /* a `full` written as a literal */
    bool view_of_group;     /* read from memory through a view of a member of G */
    bool depends_on_group;  /* read from memory and computed from a member of G */
} kn_fuse_operand;

typedef struct kn_fuse_query {
    bool fused, sealed;     /* G */
    int size;               /* G's members */
    int ndim;               /* G's space S */
    const int64_t *shape;
    uint32_t inner;         /* G's reduced axes (bit k: axis k of S), when reduces */
    bool reduces;
    kn_op op;               /* n */
    bool reduction;         /* n is sum, mean or max */
    const kn_type *type;    /* n's type */
    uint32_t mask;          /* reduction: its reduced axes, over its operand's axes */
    bool horizontal;        /* G is not an operand's group: n joins beside, not after */
    int nin;
    kn_fuse_operand in[KN_MAX_OPERANDS];
} kn_fuse_query;

const char *kn_fuse_refusal(const kn_fuse_query *q, int *level);

#ifdef __cplusplus
}
#endif

#endif /* KILN_SCHEDULE_H */
