/* kiln/passes.h — graph passes: a table of named graph-to-graph rewrites, the pass manager
 * that runs a list of them (verifying after each), a small declarative pattern rewriter,
 * and helpers that rebuild a graph; with kiln/randgraph.h (included), a random-graph
 * generator and a numeric before/after check.
 *
 * In place. A kn_graph is a flat array of nodes in definition order whose ids are their
 * indices, so removing or inserting a node renumbers everything after it. A pass
 * therefore rewrites `g` in place: it builds the new node array, then swaps it into *g
 * (the caller's pointer stays valid; ids are renumbered; g's old arrays are freed). A
 * caller that needs the graph before the passes copies it first (kn_graph_copy), as
 * `kiln compile` does to compare the two.
 *
 * What every pass keeps: the outputs (same count, order and types) and every `input` and
 * `param` node (they are the graph's interface: the interpreter and the trainer bind them
 * by name, so even an unused one stays). Everything else may be removed, merged or
 * replaced, as long as each output computes the same numbers; the tests check that on
 * hundreds of random graphs.
 *
 *     kn_pass_report rep;
 *     kn_passes_run(g, "fold,algebra,views,cse,dce", &rep);   // or "all", or "none"
 *     ... rep.npasses, rep.pass[i].nodes_before / nodes_after / ms / fired ...
 *
 * The pattern rewriter (kn_rewrite) is how the algebraic and view rewrites and the
 * decomposition of composite ops are written: a rule is a pattern (a tree of ops with
 * constraints on operand types and attributes) and a replacement function that emits new
 * nodes. See "pattern rewriter" below. Passes that replace whole groups of nodes (flash,
 * epilogue, hfuse, lowsave) rebuild the graph instead ("graph editing helpers"). */
#ifndef KILN_PASSES_H
#define KILN_PASSES_H

#include "kiln/ir.h"
#include "kiln/randgraph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- reports */

#define KN_PASS_MAX_RULES 32     /* distinct rewrite names counted per pass */
#define KN_PASSES_MAX 32         /* passes per kn_passes_run */

#define KN_PASS_ARG_MAX 32       /* bytes of a pass argument ("every:2"), with its NUL */

/* What a pass may know of the machine the graph is compiled for: facts the caller passes in
 * (kn_passes_run_on; kn_program_opts.target, whose default kn_program_target_default() are
 * kiln's own kernels), never asked of the runtime by a pass, so that what a pass list makes
 * depends on the graph and the options alone. NULL: nothing known, each pass takes the
 * choice that is right on every machine. */
#define KN_PASS_TARGET_DIMS 4
typedef struct kn_pass_target {
    /* head dims at which flash attention and its backward have a bf16 kernel (kiln's:
     * core/runtime/cuda_flash_tc.h), 0 ending the list: autocast:bf16 puts flash attention
     * in bf16 there only (elsewhere it stays f32, whose kernels take every head dim) */
    int flash_bf16_dims[KN_PASS_TARGET_DIMS];
} kn_pass_target;

typedef struct kn_pass_stats {
    char arg[KN_PASS_ARG_MAX];             /* the pass's argument ("" when none): "remat:full" -> "full" */
    const kn_pass_target *target;          /* the caller's facts (kn_passes_run_on), or NULL: none */
    int nodes_before, nodes_after;
    double ms;                             /* wall time of the pass */
    int nfired;                            /* distinct rules that fired */
    const char *rule[KN_PASS_MAX_RULES];   /* their names (static strings) */
    int64_t count[KN_PASS_MAX_RULES];      /* how many times each fired */
} kn_pass_stats;

/* Count one firing of the rewrite `rule` (a string that outlives the report). */
void kn_pass_stats_fire(kn_pass_stats *st, const char *rule, int64_t times);
/* Total firings of every rule. */
int64_t kn_pass_stats_total(const kn_pass_stats *st);

typedef struct kn_pass_report {
    int npasses;
    const char *name[KN_PASSES_MAX];       /* the pass table's names */
    kn_pass_stats pass[KN_PASSES_MAX];
    int nodes_before, nodes_after;
    double ms;                             /* all passes together */
    bool verified;                         /* the verifier ran after each pass */
} kn_pass_report;

/* ---------------------------------------------------------------- the pass table */

/* A pass rewrites g in place and records what it did in *st (nodes_before/after and ms
 * are filled in by kn_passes_run; a pass counts its rewrites with kn_pass_stats_fire). */
typedef kn_status (*kn_pass_fn)(kn_graph *g, kn_pass_stats *st);

/* Passes may take an argument, written after a colon in a list: "remat:full". A pass that
 * takes one has check_arg, which accepts or refuses the text (NULL when the list gives
 * none) with KN_ERR_ARG and a message saying what it takes, before any pass runs; the
 * pass then reads it from st->arg. A pass without check_arg refuses an argument. */
typedef kn_status (*kn_pass_check_fn)(const char *arg);

typedef struct kn_pass {
    const char *name;           /* "cse" */
    kn_pass_fn run;
    const char *help;           /* one line */
    kn_pass_check_fn check_arg; /* NULL: the pass takes no argument */
    bool by_name;               /* "all" skips it: asked for by name only (flash: not exact) */
} kn_pass;

/* The table, in the order "all" runs it; *n receives the count. */
const kn_pass *kn_passes_table(int *n);
/* A pass by name, NULL when there is none. */
const kn_pass *kn_pass_find(const char *name);
/* The names of every pass, ", "-separated, for error messages ("fold, algebra, ..."). */
const char *kn_passes_names(void);

/* Run a comma-separated list of pass names on g, in order ("fold,cse,dce"; spaces around
 * names are ignored; a name may repeat; "remat:full" gives remat its argument). "all" is
 * the table's passes that take no argument, in order; "none" or "" runs nothing. An
 * unknown name, an argument a pass refuses (or one given to a pass that takes none) fails
 * before any pass runs (KN_ERR_ARG, "kn_passes_run: unknown pass 'foo' (known: fold,
 * algebra, ...)"). With verification on (the default in
 * builds without NDEBUG; kn_passes_set_verify), kn_graph_verify runs on g before the first
 * pass and after each one; a failure returns its status with "kn_passes_run: after pass
 * cse: %7 = add: ...". rep may be NULL. On a failure g may be partly rewritten but is a
 * well-formed graph (free it with kn_graph_free). */
kn_status kn_passes_run(kn_graph *g, const char *list, kn_pass_report *rep);
/* The same with the target's facts (kn_pass_target; NULL as kn_passes_run: none), which
 * every pass of the list finds in its st->target. */
kn_status kn_passes_run_on(kn_graph *g, const char *list, const kn_pass_target *target, kn_pass_report *rep);
/* The same over another table of passes (tests; later issues' own pipelines): "all" is
 * that table in order. */
kn_status kn_passes_run_with(const kn_pass *table, int ntable, kn_graph *g, const char *list, kn_pass_report *rep);
kn_status kn_passes_run_with_on(const kn_pass *table, int ntable, kn_graph *g, const char *list,
                                const kn_pass_target *target, kn_pass_report *rep);
/* Check a list's names without running anything (KN_ERR_ARG as kn_passes_run gives);
 * *n receives how many passes it runs. */
kn_status kn_passes_check(const char *list, int *n);
/* Turn the verifier after each pass on or off (process-wide); returns the old setting. */
bool kn_passes_set_verify(bool on);

/* The passes of the table. The core owns fold; dce, cse, algebra and views are lab 04
 * units (below) or run them. */
kn_status kn_pass_fold(kn_graph *g, kn_pass_stats *st);
kn_status kn_pass_algebra(kn_graph *g, kn_pass_stats *st);
kn_status kn_pass_views(kn_graph *g, kn_pass_stats *st);
/* Composite ops (softmax, layernorm, ... and their backwards) into primitives, for the
 * compiled program (core/passes/decompose.c). Not in the table: "all" keeps the composite
 * ops, which are the fast path of the node-by-node backends. decompose:gpu keeps
 * cross_entropy and its backward (vocabulary-wide rows: the library kernel is faster). */
kn_status kn_pass_decompose(kn_graph *g, kn_pass_stats *st);
kn_status kn_decompose_check_arg(const char *arg);
/* Flash attention (core/passes/flash.c): each causal attention group of the joint graph
 * (matmul(q, k, tb) -> causal_softmax -> matmul with v, and the five nodes of its
 * backward) becomes flash_attn and flash_attn_bwd (kiln/ir.h), so no [..., T, T] value is
 * left; a group whose probabilities anything else reads stays. Equal to rounding, not
 * exact: "all" does not run it. */
kn_status kn_pass_flash(kn_graph *g, kn_pass_stats *st);
/* The `epilogue` pass (core/passes/epilogue.c): matmul + bias -> matmul_bias, matmul + bias
 * + gelu -> matmul_bias_gelu, matmul + unary_grad{gelu} -> matmul_dgelu, a weight gradient and its
 * bias's column sum -> matmul_bgrad (ops.def), each one cuBLASLt call with an epilogue on a
 * GPU. Exact on the CPU (the same kernels run), equal to rounding on a GPU; by name only. */
kn_status kn_pass_epilogue(kn_graph *g, kn_pass_stats *st);
/* The `hfuse` pass (core/passes/hfuse.c): products x @ slice_i(W) of column slices that
 * tile W become one product x @ W and its column slices; their input gradient (a sum of
 * g_i @ slice_i(W)^T) one product concat(g_i) @ W^T; their weight gradient (a sum of
 * slice_grads of x^T @ g_i) one product x^T @ concat(g_i); any sum of slice_grads that
 * tile an axis a concat. Equal to rounding; asked for by name, after autocast. Stats: one
 * rule per kind of group. */
kn_status kn_pass_hfuse(kn_graph *g, kn_pass_stats *st);
/* ---------------------------------------------------------------- data-parallel buckets
 *
 * A slab: the parameters (or their gradients) of a model laid out in one flat f32 array,
 * parameter i at [info[i].offset, info[i].offset + info[i].numel), in slab order. Its
 * layout is all that the buckets of data parallelism need, so they are declared here,
 * below the model (kiln/nn.h's kn_params describes a model's slab; kn_dp_param_buckets,
 * kiln/dist.h, passes its layout) and the ddp pass (which reads it from a joint graph). */
typedef struct kn_slab_param {
    int64_t offset, numel; /* floats: where the parameter starts in the slab, and how many */
    bool decay;            /* weight decay applies (the matrices; not biases and gains) */
} kn_slab_param;
typedef struct kn_slab_layout {
    int count;                  /* parameters */
    const kn_slab_param *info;  /* count entries, in slab order (borrowed) */
} kn_slab_layout;
/* A bucket: the contiguous slab range [lo, hi) of whole parameters. */
typedef struct kn_dp_bucket {
    int64_t lo, hi;
    int first_param, last_param;  /* parameters first_param..last_param (slab order) */
    int pending;                  /* gradients still missing in this step */
} kn_dp_bucket;
/* Lab 10 unit (core/passes/buckets.c). Buckets over the slab of layout p: walking the
 * parameters from the last (the first whose gradients backward produces) and closing a
 * bucket once it holds >= bucket_bytes, or where the slab turns from undecayed tensors to
 * decayed ones (info[i].decay). Returns the bucket count into *n and an owned array
 * (kn_free) in slab order into *out. */
kn_status kn_dp_buckets(const kn_slab_layout *p, size_t bucket_bytes, kn_dp_bucket **out, int *n);

/* DDP as a pass (core/passes/ddp.c): on a joint graph (outputs: the loss, then one f32
 * gradient per parameter in slab order), store each gradient into the gradient slab right
 * after the node that makes it, start each bucket's all-reduce (lab 10's kn_dp_buckets of
 * st->arg MB, 25 when none) right after its last store, and wait for every bucket at the
 * end; the outputs become the loss and the buckets' wait tokens, in slab order. */
kn_status kn_pass_ddp(kn_graph *g, kn_pass_stats *st);
/* ZeRO-1/2 as a pass: the same, with reduce_scatter_start instead of all_reduce_start. */
kn_status kn_pass_zero(kn_graph *g, kn_pass_stats *st);
/* ZeRO-3 / FSDP as a pass: as zero, and the parameters are sharded too: the graph's params
 * (parameter i is the i-th param, in slab order) go; per bucket, an all_gather_start fills
 * a buffer that a comm_wait gives back right before the bucket's first reader in the
 * forward, and again in the backward; the next bucket's gather starts right after each
 * wait (the prefetch); the readers read views (slice, reshape) of the wait, so the buffer
 * dies after its last reader and a program's memory plan reuses it. */
kn_status kn_pass_zero3(kn_graph *g, kn_pass_stats *st);
kn_status kn_ddp_check_arg(const char *arg); /* all three: the bucket size in MB, > 0 */
/* Where the pass placed the starts, as room to hide communication: for each bucket's
 * start, the share of the backward's FLOPs (the nodes after the loss, kn_node_cost) that
 * still run after it; their mean, least and most over the buckets. A start with 0 has
 * nothing left to hide behind (its wait follows at once). */
typedef struct kn_overlap_room {
    int starts;
    double mean, least, most;
    double backward_flops;
} kn_overlap_room;
kn_status kn_dp_overlap_room(const kn_graph *g, kn_overlap_room *out);

/* ---------------------------------------------------------------- activation checkpointing
 * The remat pass, its policies and the min-cut partitioner: kiln/remat.h (lab 08's
 * kn_remat_selective is below, with the lab's units). What a pass list does to a step's
 * memory, measured (core/passes/live.c): */

/* The largest live set of g in definition order: each value a node makes (not an input,
 * param or output, which live outside the run) is live from its node to its last reader,
 * a reshape (or a block slice, kn_ir_aliases) counting for the storage it aliases; *bytes receives the most bytes live at
 * one node, *at (may be NULL) that node. A node-by-node run in this order can need no
 * less; that is the lower bound of a step's activation memory, the figure remat lowers. */
kn_status kn_graph_live_bytes(const kn_graph *g, double *bytes, int32_t *at);
/* The same of a copy of g after the pass list `passes` (NULL or "none": g itself): what a
 * pass list would do to a step's memory, g unchanged. */
kn_status kn_passes_live_bytes(const kn_graph *g, const char *passes, double *bytes);
/* The same with the target's facts (kn_passes_run_on). */
kn_status kn_passes_live_bytes_on(const kn_graph *g, const char *passes, const kn_pass_target *target, double *bytes);

/* ---------------------------------------------------------------- mixed precision
 * (core/passes/autocast.c)
 *
 * autocast:bf16 / autocast:fp16 assigns dtypes to a graph's f32 computations from one
 * policy table, kn_autocast_policy (lab 09's unit, with kn_autocast_decide: see "lab 09
 * units" below):
 *   KN_AUTOCAST_LOW   the op runs in the low dtype, its operands cast down (matmul: the
 *                     linear layers and both attention products, forward and backward);
 *   KN_AUTOCAST_F32   the op runs in f32, low operands cast up (reductions, norms,
 *                     softmaxes, the loss, their backwards, the embedding gradient);
 *   KN_AUTOCAST_KEEP  the op follows its operands: low when every float operand is low
 *                     (a `full` constant follows the others), else f32.
 * f64 computations, inputs and params stay as they are (the master weights stay f32: a
 * param a low op reads gets one cast right after it, at the start of the step), and every
 * output keeps its dtype (gradients come out f32). The inserted casts are elementwise, so
 * the fusion scheduler folds them into the kernels around them. Stats: "low" (nodes now in
 * the low dtype), "casts" (casts inserted). Run it on the joint graph, before remat. */
typedef enum kn_autocast_class {
    KN_AUTOCAST_KEEP = 0,
    KN_AUTOCAST_LOW,
    KN_AUTOCAST_F32,
} kn_autocast_class;

/* The class of pointwise function f: its row's autocast column (kiln/pointwise.def), so
 * every new row gets a deliberate one; KN_AUTOCAST_KEEP for an invalid f.
 * kn_autocast_policy answers it for the IR op of every row. */
kn_autocast_class kn_autocast_pointwise(kn_unary_op f);
/* "bf16" -> KN_DT_BF16; "fp16" or "f16" -> KN_DT_F16; else KN_ERR_ARG naming both. */
kn_status kn_autocast_parse(const char *text, kn_dtype *out);
/* Rewrite g in place with low dtype `low` (bf16 or f16); st (may be NULL) counts rules and
 * brings the target's facts (st->target: where flash attention may go bf16; none: it stays f32). */
kn_status kn_autocast(kn_graph *g, kn_dtype low, kn_pass_stats *st);
kn_status kn_pass_autocast(kn_graph *g, kn_pass_stats *st);  /* the table's: dtype in st->arg */
kn_status kn_autocast_check_arg(const char *arg);

/* lowparams:bf16 / lowparams:fp16 (core/passes/autocast.c), after autocast: every cast to
 * the low dtype of an f32 param, or of a chain of views of one (attention's slices of the
 * fused q, k, v weight), becomes the same chain over a new param of the low dtype named
 * kn_lowparam_name(NAME) = "NAME@bf16" ("NAME@f16"), one per param; the f32 views only
 * the casts read are dropped (the f32 param stays, read by nothing in the step). The
 * caller binds the new params to copies that the optimizer writes in its update
 * (kn_optim_step_low, kiln/optim.h; the trainer does, kiln/nn.h), so the step no longer
 * reads the f32 weights nor holds their copies as activations. Exact when the bound
 * copies are the rounded params. Stats: "params" (new params), "casts" (casts replaced). */
kn_status kn_lowparams(kn_graph *g, kn_dtype low, kn_pass_stats *st);
kn_status kn_pass_lowparams(kn_graph *g, kn_pass_stats *st); /* the table's: dtype in st->arg */
kn_status kn_lowparams_check_arg(const char *arg);
/* lowloss (core/passes/autocast.c), after autocast: cross_entropy(cast_f32(x)) of 16-bit
 * logits x becomes cross_entropy(x) (an f32 loss: kiln/ir.h), and the cast down of
 * cross_entropy_bwd(d, cast_f32(x), t) becomes cross_entropy_bwd(d, x, t) in x's dtype
 * when only casts to that dtype read it; the casts up nothing reads go. The kernels widen
 * and round as the casts did: the same values (bit for bit on the CPU; a GPU's loss kernel
 * sums a row in another order), without the two f32 copies of the logits (GPT-2 at B = 8,
 * T = 1024: 1.6 GB each). Stats: "loss", "loss_bwd". */
kn_status kn_pass_lowloss(kn_graph *g, kn_pass_stats *st);
/* lowsave (core/passes/lowsave.c), after autocast and lowloss, before epilogue and remat:
 * a forward value that is f32, made by an elementwise op reading a 16-bit value cast up,
 * not an output, and read by the backward only through elementwise ops other than eq
 * (the GPT's MLP pre-activation, read by gelu_bwd) gets its copy in that 16-bit dtype
 * cast right after it; each backward reader reads that copy cast up right before it,
 * while the forward's readers keep the f32 value. The forward and the loss are unchanged
 * bit for bit; the backward sees v rounded once more, as PyTorch's autocast saves it.
 * Nothing changes in a graph without 16-bit values. Stats: "saved" (values), "casts". */
kn_status kn_pass_lowsave(kn_graph *g, kn_pass_stats *st);
/* "NAME@bf16" / "NAME@f16" into out (KN_NAME_MAX bytes); KN_ERR_ARG when too long. */
kn_status kn_lowparam_name(const char *name, kn_dtype low, char *out);

/* ---------------------------------------------------------------- graph editing helpers */

/* Rebuild g in place. repl (may be NULL: identity) maps each value id to the id that
 * replaces it: repl[i] <= i, and repl[i] == i for a value that stays; chains are
 * followed (repl[repl[i]]). keep (may be NULL: all) says which of the values with
 * repl[i] == i stay; a node that is replaced is always dropped. Operands and outputs are
 * redirected through repl, the kept nodes renumbered in order. Every operand of a kept
 * node and every output must resolve to a kept node (KN_ERR_ARG naming the node
 * otherwise, g unchanged). */
kn_status kn_graph_compact(kn_graph *g, const int32_t *repl, const bool *keep);
/* uses[i] = how many operand slots and outputs refer to value i (an array of g->nnodes). */
void kn_graph_uses(const kn_graph *g, int32_t *uses);
/* fwd[i] (an array of g->nnodes) = node i is in the forward of a joint graph: what the
 * first output (the loss) depends on, and the nodes before the loss computed from those
 * values alone (a value the forward makes only for the backward, as lowsave's copies).
 * The rest is the backward. No outputs: nothing is forward. */
void kn_graph_forward(const kn_graph *g, bool *fwd);
/* Rebuilding g into a new graph out (passes that replace groups of nodes: flash, epilogue,
 * hfuse, lowsave).
 * kn_graph_rebuild_start makes out and map (old id -> out's id, g->nnodes entries; the
 * error names pass); kn_graph_emit appends a node of op on out's values in[], its type
 * inferred (the error names pass, op and the rule's message); kn_graph_emit_copy appends a
 * copy of g's node n with its operands renumbered through map; kn_graph_take, given the
 * rebuild's status st, adds g's outputs through map, swaps out's arrays into g when all
 * went well, and frees out and map either way. */
kn_status kn_graph_rebuild_start(const kn_graph *g, const char *pass, kn_graph **out, int32_t **map);
kn_status kn_graph_emit(kn_graph *out, const char *pass, kn_op op, int nin, const int32_t *in, const kn_attrs *attrs,
                        int32_t scope, int32_t *id);
kn_status kn_graph_emit_copy(kn_graph *out, const kn_node *n, const int32_t *map, int32_t *id);
kn_status kn_graph_take(kn_graph *g, kn_graph *out, int32_t *map, kn_status st);
/* The attributes op `op` uses (its required and optional ones) are equal in a and b.
 * Floats compare bit for bit (so -0.0 != 0.0, and a NaN equals the same NaN). */
bool kn_attrs_equal(kn_op op, const kn_attrs *a, const kn_attrs *b);
/* Ops whose result is drawn from a random stream (dropout): never merged or folded. */
bool kn_op_is_random(kn_op op);

/* ---------------------------------------------------------------- pattern rewriter
 *
 * A pattern is a tree of kn_pat nodes. Each says what one value must be:
 *   op      the op of the node that defines it, or KN_PAT_ANY (always set it: 0 is input);
 *   in[k]   patterns for its operands (NULL: any value);
 *   bind    a slot 1..KN_PAT_SLOTS-1 that receives the value's id (0: not bound). A slot
 *           bound twice in one pattern must get the same value both times ("x - x").
 *   flags   KN_PAT_COMMUTE: a two-operand op whose operands may match in either order;
 *           KN_PAT_VALUE: the node is a `full` whose value is exactly .value;
 *           KN_PAT_ROOT_TYPE: the value's type (dtype and shape) equals the root's;
 *           KN_PAT_SCALAR: the value has one element.
 *   where   any further constraint on the node (its attributes, its operands' shapes):
 *           where(g, node) returns true to accept. NULL: none.
 * A rule is a name, a pattern and a replacement function. The rewriter walks the graph in
 * order, rebuilding it; for each node it first redirects the operands to their
 * replacements, then tries the rules in order on it (so rewrites compose bottom-up:
 * neg(neg(neg x)) becomes neg x in one sweep). The first rule whose pattern matches and
 * whose replace function returns a value (not -1) wins: the node is replaced by that
 * value, which must have the node's type. Replace functions add nodes with kn_rw_emit and
 * kn_rw_full. Sweeps repeat until none fires (at most 8). Nodes that a rewrite bypasses
 * stay in the graph, unused: dce removes them.
 *
 * Example (x * 1 -> x, either operand order):
 *     static const kn_pat x   = {.op = KN_PAT_ANY, .bind = 1, .flags = KN_PAT_ROOT_TYPE};
 *     static const kn_pat one = {.op = KN_OP_FULL, .flags = KN_PAT_VALUE, .value = 1};
 *     static const kn_pat mul = {.op = KN_OP_MUL, .in = {&x, &one}, .flags = KN_PAT_COMMUTE};
 *     static int32_t use_x(kn_rewriter *rw, const kn_match *m) { (void)rw; return m->bind[1]; }
 *     static const kn_rule rules[] = {{"mul_one", &mul, use_x}};
 *     kn_rewrite(g, rules, 1, &stats);
 */
#define KN_PAT_ANY (-1)
#define KN_PAT_SLOTS 8
enum {
    KN_PAT_COMMUTE = 1u << 0,
    KN_PAT_VALUE = 1u << 1,
    KN_PAT_ROOT_TYPE = 1u << 2,
    KN_PAT_SCALAR = 1u << 3,
};

typedef struct kn_pat {
    int op;                                     /* a kn_op, or KN_PAT_ANY */
    const struct kn_pat *in[KN_MAX_OPERANDS];
    int bind;
    unsigned flags;
    double value;
    bool (*where)(const kn_graph *g, const kn_node *n);
} kn_pat;

/* A match: the root node (with operands already redirected; it is not in the graph yet,
 * so it has no id) and the bound values (bind[k], -1 when slot k is unbound). */
typedef struct kn_match {
    const kn_node *root;
    int32_t bind[KN_PAT_SLOTS];
} kn_match;

typedef struct kn_rewriter kn_rewriter;

typedef struct kn_rule {
    const char *name;
    const kn_pat *pat;
    /* The replacement value's id (of the root's type), or -1 to leave the node alone. */
    int32_t (*replace)(kn_rewriter *rw, const kn_match *m);
} kn_rule;

/* Apply rules[0..n) to g in place (see above); each firing is counted in *st under the
 * rule's name (st may be NULL). Fails when a replacement has the wrong type (KN_ERR_ARG
 * naming the rule and the node) or an emitted node does not type-check. */
kn_status kn_rewrite(kn_graph *g, const kn_rule *rules, int n, kn_pass_stats *st);
/* Does pattern p match value id of g? m->bind receives the bindings (cleared first). For
 * tests and for passes that match without rewriting. */
bool kn_pat_match(const kn_graph *g, const kn_pat *p, int32_t id, kn_match *m);

/* For replace functions. The graph being built (read its nodes: every bound id is in it). */
const kn_graph *kn_rw_graph(const kn_rewriter *rw);
const kn_node *kn_rw_node(const kn_rewriter *rw, int32_t id);
/* Append a node of op with operands in[0..nin) and attributes (NULL: defaults); its type
 * is inferred. Returns its id, or -1 after recording the error (the rewrite then fails). */
int32_t kn_rw_emit(kn_rewriter *rw, kn_op op, int nin, const int32_t *in, const kn_attrs *attrs);
/* Append a `full` of type t filled with value. */
int32_t kn_rw_full(kn_rewriter *rw, const kn_type *t, double value);
/* Would kn_rw_emit accept this node? *out receives its type when it would (no node is
 * added and no error recorded): a replace function checks a rewrite keeps the type. */
bool kn_rw_type_of(const kn_rewriter *rw, kn_op op, int nin, const int32_t *in, const kn_attrs *attrs,
                   kn_type *out);

/* ---------------------------------------------------------------- random graphs
 * kn_randgraph and kn_graph_compare, the passes' numeric check: kiln/randgraph.h. */

/* ---------------------------------------------------------------- lab 04 units
 * Declared here, called by the core (kn_passes_run, `kiln compile`), written by students
 * in labs/lab04-passes/ (the staff's reference units are linked for every other lab).
 *
 * kn_pass_dce (dce.c): dead-code elimination. A node is live when an output uses it,
 * when a live node uses it, or when it is an `input` or `param` (the graph's interface).
 * Remove every other node (kn_graph_compact with a keep mask), and count the removed
 * nodes as the rule "dead".
 *
 * kn_pass_cse (cse.c): common-subexpression elimination. Two nodes compute the same value
 * when they have the same op, the same operands (after earlier merges), equal attributes
 * (kn_attrs_equal) and the same type. Replace each such node by the first one; never
 * merge a random op (kn_op_is_random: two dropouts draw their own masks) or an `input`
 * or `param`. Count each merged node as the rule "merged". Expected cost: O(nodes), with
 * a hash table.
 *
 * kn_algebra_rules (algebra.c): the arithmetic identities as pattern-rewriter rules
 * (*rules, *n receive a static table): x*1, 1*x, x/1, x+0, 0+x, x-0 -> x when the result
 * has x's type; neg(neg x) -> x; cast to x's own dtype -> x; cast(cast(x, t1), t2) ->
 * cast(x, t2) (or x when t2 is x's dtype) when t1 holds every value of x's dtype exactly.
 *
 * kn_view_rules (views.c): canonical view chains, as rules: reshape(reshape x) ->
 * reshape x; a reshape, permute, broadcast_to or full slice that changes nothing -> x;
 * permute(permute x) -> one permute (or x when they cancel); broadcast_to(broadcast_to
 * x) -> one broadcast_to; broadcast_to of a `full` -> a `full` of the new shape; an
 * elementwise operand that is an explicit broadcast_to -> the unbroadcast value when the
 * op's result type stays the same. */
kn_status kn_pass_dce(kn_graph *g, kn_pass_stats *st);
kn_status kn_pass_cse(kn_graph *g, kn_pass_stats *st);
kn_status kn_algebra_rules(const kn_rule **rules, int *n);
kn_status kn_view_rules(const kn_rule **rules, int *n);

/* ---------------------------------------------------------------- lab 08 units
 * Declared here, called by the core (the compiled program's memory plan, core/program/
 * program.c, and the remat pass, core/passes/remat.c), written by students in
 * labs/lab08-memory/ (the staff's reference units are linked for every other lab).
 *
 * kn_mem_liveness (liveness.c): the lifetimes of the values of a schedule. steps[s] lists
 * the values step s writes (defs) and reads (uses), values numbered 0 .. nvalues-1. For
 * each value v, first[v] receives the step that writes it and last[v] the last step that
 * writes or reads it (a value nobody reads dies where it is made: last = first); a value
 * read but never written (an input, a parameter) gets first = -1 and last its last read;
 * a value no step touches gets -1 and -1. KN_ERR_ARG (nothing written) for a value
 * outside 0 .. nvalues-1, a value written by two steps (or twice by one), a value read by
 * a step before the step that writes it, a negative count or a NULL array with a
 * positive count.
 *
 * kn_mem_assign_offsets (offsets.c): one arena for buffers whose lifetimes may not
 * overlap. bufs[i] is a size in bytes and a lifetime [first, last] of steps (inclusive);
 * two buffers conflict when their lifetimes share a step and their byte ranges
 * [offset, offset + size) intersect. Greedy by size (TFLite's arena planner): take the
 * buffers largest first (equal sizes: the lower index first) and give each the lowest
 * offset at which it conflicts with no buffer placed before it. offsets[i] receives
 * buffer i's offset (a zero-size buffer: 0), *arena the end of the highest buffer (0 for
 * none). KN_ERR_ARG (nothing written) for a lifetime with first > last, a negative count,
 * or a NULL array with a positive count. Sizes are taken as they are (the caller rounds
 * them up to its alignment).
 *
 * kn_remat_selective (recompute.c): the ops selective activation checkpointing may
 * recompute. recompute[i] receives true for node i of g when its op is cheap to run again:
 * an elementwise op (category KN_CAT_ELEMENTWISE, dropout included: its clone draws the
 * same mask), a view (KN_CAT_VIEW), a `full`, a layernorm or a normalize; false for every
 * other node (inputs and params, matmuls, reductions, softmaxes, gathers, ...). KN_ERR_ARG
 * for NULL arguments. */
typedef struct kn_mem_step {
    const int32_t *defs; /* the values the step writes */
    int ndefs;
    const int32_t *uses; /* the values it reads (a value may appear more than once) */
    int nuses;
} kn_mem_step;

typedef struct kn_mem_buffer {
    size_t size;         /* bytes */
    int32_t first, last; /* the steps it lives over, both included */
} kn_mem_buffer;

kn_status kn_mem_liveness(const kn_mem_step *steps, int nsteps, int nvalues, int32_t *first, int32_t *last);
kn_status kn_mem_assign_offsets(const kn_mem_buffer *bufs, int n, size_t *offsets, size_t *arena);
kn_status kn_remat_selective(const kn_graph *g, bool *recompute);

/* ---------------------------------------------------------------- lab 09 units
 * Declared here, called by the autocast pass (core/passes/autocast.c), written by students
 * in labs/lab09-precision/autocast.c (the staff's units are linked for every other lab).
 *
 * kn_autocast_policy (autocast.c): op's class. KN_AUTOCAST_LOW: matmul, flash_attn,
 * flash_attn_bwd (the pass keeps a flash node f32 where the GPU has no bf16 kernel for
 * its head dim). KN_AUTOCAST_F32: sum, mean, max, softmax, softmax_bwd, log_softmax,
 * log_softmax_bwd, causal_softmax, causal_softmax_bwd, layernorm, layernorm_dx,
 * normalize, cross_entropy, cross_entropy_bwd, embedding_grad. KN_AUTOCAST_KEEP: every
 * other op. The IR op of a pointwise function (kiln/pointwise.def) has its row's class,
 * kn_autocast_pointwise, answered before the unit's own part. A skeleton records "not
 * implemented (lab09: ...)" and returns KEEP for the other ops.
 *
 * kn_autocast_decide (autocast.c): the pass's decision for node i of g, the nodes before
 * it decided: dt[j] (j < i) holds node j's dtype after the pass. Writes dt[i] and
 * reads_low[i], and sets early[v] = true for some operands v < i (never clears one):
 *   - dt[i] = node i's dtype and reads_low[i] = false, unless it goes low:
 *   - it goes low when it is not a cast, its dtype is f32 or bool, and either its class
 *     is LOW and its dtype f32, or its class is KEEP and the float operands that are not
 *     a `full` are at least one and all low after the pass (dt[v] == low; so a source,
 *     with no operands, never goes low, nor a node reading f64);
 *   - going low: reads_low[i] = true, dt[i] = low if it was f32 (bool stays bool), and
 *     early[v] = true for every float operand v with dt[v] != low (its low copy is then
 *     made right after v, where it fuses with v's kernel; a weight's at the step's start).
 * KN_ERR_ARG (nothing written) for a NULL argument, i outside g, or a low dtype that is
 * not bf16 or f16. */
kn_autocast_class kn_autocast_policy(kn_op op);
kn_status kn_autocast_decide(const kn_graph *g, int32_t i, kn_dtype low, kn_dtype *dt, bool *reads_low,
                             bool *early);

/* ---------------------------------------------------------------- quantize (kiln/quant.h: the kernels) */
/* The pass `quantize:w8` / `quantize:w8a8` (kiln/passes.h's table): every f32 product
 * matmul(x, W) whose right operand is a 2-D parameter W (x not transposed; W may be, tb)
 * becomes matmul_w8, matmul_w8a8 or matmul_w8a8_tensor with the same operands. Products of two activations
 * (attention), parameters read by anything else (embeddings, layernorm, biases) and products
 * through a cast of W (after autocast) are left alone. */
kn_status kn_pass_quantize(kn_graph *g, kn_pass_stats *st);
/* Accepts "w8", "w8a8" and "w8a8-tensor", and the calibrated "w8a8-static[:OBSERVER]" and
 * "w8a8-smooth[:ALPHA]" (kn_quantize_parse_arg, kiln/quant.h), which the pass itself refuses
 * (they need calibration data: kn_gpt_heldout_loss_q); anything else (or no argument) is
 * KN_ERR_ARG with the options. */
kn_status kn_quantize_check_arg(const char *arg);

#ifdef __cplusplus
}
#endif

#endif /* KILN_PASSES_H */
