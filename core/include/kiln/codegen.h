/* kiln/codegen.h — fusion, the kernel IR and C code generation: how a graph becomes a few
 * generated kernels plus library calls.
 *
 *   graph ──kn_schedule_build──► groups (fused kernels, library steps), in run order
 *         ──kn_kernel_lower────► kernel IR, one per fused group (printable, verified)
 *         ──kn_render_c────────► C11 source, one function per kernel
 *         ──kn_cc_compile──────► a shared object (cc -O3 -march=native, cached on disk
 *                                 by a hash of source and flags), dlopen'ed
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
 *
 * The compiled program (kiln/program.h, KN_PROGRAM_COMPILED) uses all of this on the CPU;
 * the CUDA renderer (lab 07) will read the same kernel IR. */
#ifndef KILN_CODEGEN_H
#define KILN_CODEGEN_H

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
    int32_t at;          /* the node after which it runs: its last member */
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
    uint8_t *level;      /* per node of a fused group: 1 full (over S), 2 outer (reduced) */
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
typedef struct kn_schedule_opts {
    bool gpu;
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
} kn_kx;

typedef struct kn_kstore { int buf, src; } kn_kstore;

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
/* Whether buffer b of an elementwise kernel (no reduction) may share its memory with a
 * buffer of the other kind (a store with a load) that it indexes alike: the memory plan
 * may then write the store in place over the load (core/program/program.c), so the C
 * renderer declares such pointers without `restrict`. */
bool kn_kernel_inplace_buf(const kn_kernel *k, int b);
kn_status kn_kernel_print(FILE *f, const kn_kernel *k);

/* ---------------------------------------------------------------- C code */

/* Append the C11 definition of k to *src (a growing NUL-terminated string, kn_realloc'ed):
 *     void <name>(void *ctx, int64_t lo, int64_t hi)
 * where ctx is an array of the buffers' base pointers (k->bufs order) and [lo, hi) a
 * range of outer indices: the signature kn_k_parallel calls. */
kn_status kn_render_c(const kn_kernel *k, char **src, size_t *len, size_t *cap);
/* The lines every generated file starts with (includes). */
const char *kn_render_c_prelude(void);
/* ---------------------------------------------------------------- CUDA code
 *
 * The same kernel as CUDA C (core/codegen/render_cuda.c):
 *     KN_KERNEL <name>(float *__restrict__ p0, const float *__restrict__ p1, ...)
 * one pointer per buffer (k->bufs order), launched as kn_cuda_launch_config says. A kernel
 * without a reduction runs a thread per element of its space (grid-stride); one with a
 * reduction runs a block per row (grid-stride over rows), the block's threads striding
 * over the row and combining their partial sums with warp shuffles and shared memory.
 * Dialects: KN_CUDA_NVRTC for the GPU; KN_CUDA_EMU, the same text as C11 for the host
 * compiler, run by the CUDA emulator (core/runtime/cuda_emu.h), with, per kernel, an entry
 * `void <name>__emu(void *args)` taking the arguments as cudaLaunchKernel does (an array of
 * pointers to each argument). A file starts with kn_render_cuda_prelude(dialect). l: the
 * launch the kernel is rendered for (kn_cuda_launch_config), or NULL for any launch. With
 * the block size known, a row of at most 8 blocks' width is unrolled into slots and the
 * values a row's later loops need again stay in registers (one pass over memory for a
 * softmax, not three). */

typedef struct kn_cuda_limits {
    int sm_count;        /* multiprocessors (132 on an H100 SXM) */
    int max_threads;     /* most threads a block may have (1024 on every GPU kiln builds for) */
    int threads_per_sm;  /* most resident threads per multiprocessor (2048 on an H100) */
} kn_cuda_limits;
typedef struct kn_cuda_launch { unsigned grid, block; } kn_cuda_launch;
/* Grid and block for k. A reduction: one block per row, of the fewest whole warps that
 * give each thread at most 8 of the row's elements (32 <= block <= max_threads). An
 * elementwise kernel: 256 threads a block (max_threads when smaller), one element a
 * thread. Either way at most as many blocks as fit on the GPU at once (sm_count *
 * threads_per_sm / block): the grid-stride loops take the rest. */
kn_cuda_launch kn_cuda_launch_config(const kn_kernel *k, const kn_cuda_limits *lim);

/* ---------------------------------------------------------------- lab 07 units
 * Declared here, called by the CUDA renderer (core/codegen/render_cuda.c), written by
 * students in labs/lab07-cudagen/ (the staff's units are linked for every other lab):
 *   kn_cuda_launch_config (launch.c), above;
 *   kn_cuda_block_reduce_source (block_reduce.c): the CUDA C text (which must also compile
 *     as C11 for the emulator, with KN_DEVICE for __device__) defining
 *         double kn_max2(double a, double b);   (the max of two that keeps a NaN: the row
 *                                                kernels the renderer writes call it too)
 *         double kn_block_sum(double v, double *sh);   double kn_block_max(double v, double *sh);
 *     called by every thread of a block (blockDim.x a multiple of 32, at most 1024) with its
 *     partial v and a __shared__ double sh[32]; each returns the block's total (max: NaN if
 *     any v is NaN), the same bits in every thread, and leaves sh free for the next call.
 *     NULL (the skeleton): row kernels cannot be rendered.
 *   kn_render_cuda_element_loop (element_loop.c): the head of an elementwise kernel's
 *     thread loop, into out: a grid-stride loop over e, one point of the flattened space
 *     (outer_n * inner_n points) a thread, opening a brace, then the definitions of
 *         const <ix> o = <row of e>, r = <inner index of e>;
 *     ix is "int" or "int64_t" (then the grid arithmetic is done in 64 bits). KN_ERR_ARG
 *     when it does not fit in cap bytes. */
const char *kn_cuda_block_reduce_source(void);
kn_status kn_render_cuda_element_loop(const kn_kernel *k, const char *ix, char *out, size_t cap);

typedef enum kn_cuda_dialect { KN_CUDA_NVRTC = 0, KN_CUDA_EMU = 1 } kn_cuda_dialect;
kn_status kn_render_cuda(const kn_kernel *k, kn_cuda_dialect d, const kn_cuda_launch *l, char **src, size_t *len,
                         size_t *cap);
const char *kn_render_cuda_prelude(kn_cuda_dialect d);

/* A compiled shared object. kn_cc_compile writes src to the kernel cache directory
 * ($KILN_CACHE_DIR, $XDG_CACHE_HOME/kiln or ~/.cache/kiln; then kernels/) as <hash>.c,
 * compiles it with $KILN_CC (default cc) into <hash>.so unless that file exists (the hash
 * covers the source, the flags and the machine), and dlopens it. KN_ERR_UNSUPPORTED when
 * there is no C compiler (the message says so); the generated file's
 * path and the compiler's message on a compile error (KN_ERR_INTERNAL: generated code that does
 * not compile is a kiln bug, or a $KILN_CC that is not a C11 compiler). */
typedef struct kn_cc_module kn_cc_module;
typedef struct kn_cc_info {
    bool cached;                 /* the .so was already there */
    double ms;                   /* compile (or load) time */
    char path[768];              /* the generated .c */
} kn_cc_info;
kn_status kn_cc_compile(const char *src, kn_cc_module **out, kn_cc_info *info);
void *kn_cc_symbol(const kn_cc_module *m, const char *name); /* NULL when absent */
void kn_cc_free(kn_cc_module *m);
/* Whether a C compiler can be run ($KILN_CC or cc); the answer is cached. */
bool kn_cc_available(void);
/* Whether glibc's vector math library (libmvec, glibc >= 2.35 on x86-64) is there: the
 * prelude then declares the SIMD variants of exp, log and tanh, so loops calling them
 * vectorize (a few ulp from the scalar functions, like any libm). */
bool kn_cc_vector_math(void);
/* A file in the kernel cache: <cache>/kernels/<hash of keys>.<ext> (the directory is made).
 * What the CUDA module cache (cubins) shares with the C one. */
kn_status kn_cc_cache_path(const char *ext, const char *const *keys, int nkeys, char *out, size_t cap);

/* ---------------------------------------------------------------- lab 05 units
 * Declared here, called by the core (the scheduler, the C renderer), written by students in
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
 *      "an operand from outside depends on the group (a cycle)".
 *
 * kn_render_c_row_offset, kn_render_c_index, kn_render_c_bind (render_index.c): the index
 * arithmetic and expressions of the C renderer. See each below. */
enum { KN_LEVEL_FULL = 1, KN_LEVEL_OUTER = 2 };

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

/* The row offset of buffer b of k as a C expression: its offset, then " + cA * sA" for each
 * outer axis A (ascending) whose stride sA is not 0 ("12 + c0 * 40 + c2 * 5"). Writes at
 * most cap bytes (NUL included); KN_ERR_ARG when it does not fit, and then out is "". */
kn_status kn_render_c_row_offset(const kn_kernel *k, int b, char *out, size_t cap);
/* Buffer b's element index inside the loops: "o<b>" (its row offset), then, when `inner`,
 * " + X" or " + X * s" for each inner axis (ascending) with a stride s not 0, where X is
 * "r" when k has exactly one inner axis and "r<axis>" otherwise ("o1 + r", "o0 + r2 * 3 +
 * r3"). KN_ERR_ARG when it does not fit, and then out is "". */
kn_status kn_render_c_index(const kn_kernel *k, int b, bool inner, char *out, size_t cap);
/* Bind a kiln/scalar.h expression template: every identifier of one letter that is in
 * `names` is replaced by "(" args[its position in names] ")"; when f32, the math functions
 * exp, log, sqrt, tanh, fabs, sin, cos, pow get an "f" (expf) and every floating literal
 * (a number with '.' or an exponent) an "f" suffix, so float code computes in float.
 * false when the result does not fit in cap bytes. */
bool kn_render_c_bind(const char *tmpl, const char *const *args, const char *names, bool f32, char *out, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* KILN_CODEGEN_H */
