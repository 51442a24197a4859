/* kiln/placement.h — where a value lives on a device mesh: placements (DTensor's model, in
 * C), the rules that propagate them through the graph, and the split of GPT-2's weights
 * for tensor parallelism (Megatron).
 *
 * A device mesh lays the ranks out over named axes (dp, tp, pp; kiln/dist.h's kn_comm_mesh
 * makes one communicator per axis). Along one axis of N ranks, every value of a graph has a
 * placement:
 *   R       Replicate: every rank holds the whole value;
 *   S(d)    Shard(d): dimension d is cut into N equal blocks, rank r holding block r;
 *   S(d,k)  Shard(d) with k blocks: dimension d is first seen as k equal segments and each
 *           segment is cut into N (rank r holds block r of every segment, in segment order).
 *           GPT-2's c_attn weight [D, 3D] is S(1,3): each rank gets its heads of q, of k and
 *           of v, so the slices that take q, k and v apart stay local;
 *   P       Partial(sum): every rank holds a value of the full shape, and the true value is
 *           their sum (a matmul over a sharded inner dimension makes one).
 * An op's rule says which placements of its operands it computes locally and the
 * placement of its result; where an operand arrives in another placement, the placement
 * pass inserts the collective that converts it (P -> R: all_reduce; S(d) -> R: all_gather;
 * P -> S(d): reduce_scatter; R -> S(d): a local slice), as value collectives of kiln/ir.h.
 *
 * Lab 11 units (written by students in labs/lab11-parallel/, the staff's reference in
 * core/): kn_place_rule_matmul (place_matmul.c), kn_place_gpt_param, kn_place_local_shape,
 * kn_place_scatter and kn_place_gather (place_split.c). A skeleton returns
 * KN_ERR_NOT_IMPLEMENTED. */
#ifndef KILN_PLACEMENT_H
#define KILN_PLACEMENT_H

#include "kiln/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kn_place_kind {
    KN_PLACE_REPLICATE = 0,
    KN_PLACE_SHARD,
    KN_PLACE_PARTIAL,
    KN_PLACE_KIND_COUNT
} kn_place_kind;

typedef struct kn_placement {
    kn_place_kind kind;
    int dim;      /* Shard: the dimension cut (>= 0); -1 otherwise */
    int blocks;   /* Shard: the segments of dim, each cut into the axis's ranks (>= 1); 1 otherwise */
} kn_placement;

static inline kn_placement kn_place_replicate(void) { return (kn_placement){KN_PLACE_REPLICATE, -1, 1}; }
static inline kn_placement kn_place_partial(void) { return (kn_placement){KN_PLACE_PARTIAL, -1, 1}; }
static inline kn_placement kn_place_shard(int dim) { return (kn_placement){KN_PLACE_SHARD, dim, 1}; }
static inline kn_placement kn_place_shard_blocks(int dim, int blocks) {
    return (kn_placement){KN_PLACE_SHARD, dim, blocks};
}
/* Equal placements (kind, and for a shard its dim and blocks). */
static inline bool kn_place_equal(kn_placement a, kn_placement b) {
    return a.kind == b.kind && (a.kind != KN_PLACE_SHARD || (a.dim == b.dim && a.blocks == b.blocks));
}

/* ---------------------------------------------------------------- lab 11 units */

/* place_matmul.c. The placement rule of matmul along one mesh axis. a and b have the same
 * rank nd (2..4); a is stored [..., M, K] ([..., K, M] when ta), b [..., K, N] ([..., N, K]
 * when tb); placements name dims of the operands as stored. When every rank can compute its
 * part of a b from its own parts, *out gets the result's placement ([..., M, N]):
 *   R x R                          -> R
 *   a S(its M dim) x b R           -> S(nd-2)
 *   a R x b S(its N dim)           -> S(nd-1)
 *   a S(its K dim) x b S(its K dim) -> P        (each rank sums over its part of K)
 *   a S(d) x b S(d), d < nd-2      -> S(d)      (a batch dim: heads split)
 *   a P x b R, a R x b P           -> P         (the product is linear in each operand)
 * Any other pair (a shard with blocks != 1 among them, P x P, P x S, S(M) x S(N), ...) is
 * KN_ERR_UNSUPPORTED, *out untouched: the pass then converts an operand. KN_ERR_ARG when nd
 * is outside 2..4, out is NULL, a kind is out of range, or a shard's dim is not a dim of
 * its operand. */
kn_status kn_place_rule_matmul(int nd, bool ta, bool tb, kn_placement a, kn_placement b, kn_placement *out);

/* place_split.c. Megatron's tensor-parallel placement of a GPT-2 parameter (kn_gpt's names,
 * core/nn/gpt.c), the column-then-row split of each block:
 *   h.L.attn.c_attn.weight [D, 3D]  S(1,3)   column-parallel q, k, v (heads split)
 *   h.L.attn.c_attn.bias   [3D]     S(0,3)
 *   h.L.attn.c_proj.weight [D, D]   S(0)     row-parallel: its product is P
 *   h.L.mlp.c_fc.weight    [D, 4D]  S(1)     column-parallel
 *   h.L.mlp.c_fc.bias      [4D]     S(0)
 *   h.L.mlp.c_proj.weight  [4D, D]  S(0)     row-parallel
 *   wte.weight             [V, D]   S(0)     vocabulary-parallel embedding and logits
 *   every other one (wpe, the layernorms, both c_proj biases, ln_f)  R
 * KN_ERR_ARG when name is not a GPT-2 parameter's (L must be a decimal layer number). */
kn_status kn_place_gpt_param(const char *name, kn_placement *out);

/* The shape of one rank's part of a value of shape[0..ndim) placed p over `parts` ranks
 * into local[0..ndim): R and P keep the shape; S(d,k) divides dim d by parts. KN_ERR_SHAPE
 * when dim d is not a multiple of k * parts, KN_ERR_ARG for parts < 1 or a dim outside
 * the value. */
kn_status kn_place_local_shape(int ndim, const int64_t *shape, kn_placement p, int parts, int64_t *local);

/* Copy rank `rank`'s part of `full` (contiguous f32 of shape[0..ndim)) into `local`
 * (contiguous, kn_place_local_shape's shape). R: all of it. S(d,k): for each of the k
 * segments of dim d, the rank's block of it, segments in order. P has no part to take from
 * a whole value: KN_ERR_ARG (so does a rank outside [0, parts)); shape errors as
 * kn_place_local_shape. */
kn_status kn_place_scatter(const float *full, int ndim, const int64_t *shape, kn_placement p, int parts, int rank,
                           float *local);

/* The inverse: write rank `rank`'s part `local` into its place in `full` (a shard's other
 * blocks untouched; R: all of full). Gathering every rank's part this way rebuilds the
 * value: how a tensor-parallel run's parameters are compared with one process's. */
kn_status kn_place_gather(const float *local, int ndim, const int64_t *shape, kn_placement p, int parts, int rank,
                          float *full);

/* ---------------------------------------------------------------- the placement pass
 * (core/passes/place.c, the per-op rules in core/passes/place_rules.c)
 *
 * Tensor parallelism the compiler's way, along one mesh axis of N ranks. Given a verified
 * graph with global shapes (kn_gpt_graph's joint graph: inputs, parameters by name, outputs
 * the loss then every parameter's gradient), a placement for each parameter and this rank's
 * index r, the pass
 *   (a) propagates placements node by node, in order, with each op's rule (kn_place_rule):
 *       given its operands' placements, a rule says which placements it computes from
 *       locally (perhaps others: "slice this replicated operand", "all-reduce that partial
 *       one") and the placement of its result. Where an operand's placement is not the one
 *       wanted, the pass inserts the conversion: P -> R all_reduce, S(d) -> R all_gather
 *       {axis=d} (S(d,k), k > 1: then the segments put back in order by slices and concats),
 *       P -> S(d) reduce_scatter, R -> S(d) a local slice of rank r's block (the rank is a
 *       constant of each rank's graph). A conversion made once is reused by later
 *       consumers; a rule offered a partial operand whose all-reduced form already exists
 *       takes that one (it costs nothing more). The outputs get their wanted placements
 *       the same way (the loss R, each gradient its parameter's);
 *   (b) localizes: every value gets its local type (S(d): dim d / N) and the attributes
 *       that carry shapes (reshape, broadcast_to, slice on a sharded axis, slice_grad,
 *       embedding_grad) are rewritten; each node's local type is re-inferred and must be
 *       kn_place_local_shape of its global one.
 * The result is rank r's local graph, with each value's placement and global type. An op
 * without a rule takes every operand replicated (always correct, the fallback).
 *
 * Vocabulary parallelism (Megatron's): four ops are expanded into local ops and value
 * collectives when their operands arrive so placed, rank r holding the vocabulary rows
 * [r V/N, (r+1) V/N) (lo .. hi):
 *   embedding(w S(0), idx R)          rows of ids outside [lo, hi) are zero: P
 *   embedding_grad(dy R, idx R)       only the rank's rows of the [V, D] gradient: S(0)
 *   cross_entropy(x S(1), t R)        the row max gathered (all_gather of [rows, 1], max),
 *                                     the sum of exp and the target's logit all-reduced: R
 *   cross_entropy_bwd(dl R, x S(1), t R)  softmax minus the rank's part of the one-hot: S(1)
 * An id is masked with exact f32 arithmetic on the id (relu of the distance to the range),
 * the clamped local id then indexes the local rows; the row statistics of cross_entropy
 * are made once and reused by its backward. */

/* What the placement pass made of one node of the local graph. */
typedef enum kn_place_role {
    KN_PLACE_ROLE_NODE = 0,  /* a node of the input graph, localized */
    KN_PLACE_ROLE_CONV,      /* the last node of an inserted conversion: the converted value */
    KN_PLACE_ROLE_STEP,      /* an inner node of a conversion or of an expansion */
    KN_PLACE_ROLE_EXPAND     /* the last node of a vocabulary-parallel expansion of an input
                              * node (from): its value, in the placement the expansion gives */
} kn_place_role;

typedef struct kn_place_info {
    kn_placement p;          /* the value's placement along the axis */
    kn_type global;          /* its global type (the local one is the node's) */
    kn_place_role role;
    int32_t from;            /* ROLE_NODE: the input graph's node; CONV/STEP: the local value
                              * converted */
} kn_place_info;

typedef struct kn_place_opts {
    int mesh;                /* the mesh axis the collectives span (1: tp) */
    int parts;               /* its ranks, N >= 1 */
    int rank;                /* this rank's index along it, in [0, N) */
    /* The placement of parameter `name` (NULL: kn_place_gpt_param). */
    kn_status (*param)(void *ctx, const char *name, kn_placement *out);
    void *param_ctx;
    /* The placement each output must end in, noutputs of them (NULL: output 0 R, output
     * 1 + i the placement of the input graph's i-th parameter, in node order: the joint
     * graph's loss and gradients). */
    const kn_placement *outputs;
    unsigned flags;          /* kn_place_rule's flags: KN_PLACE_SEQUENCE_PARALLEL */
} kn_place_opts;

typedef struct kn_place_result {
    kn_graph *local;         /* owned: rank r's graph (verified) */
    kn_place_info *info;     /* owned: local->nnodes entries */
    int all_reduce, all_gather, reduce_scatter, local_slices; /* conversions inserted */
} kn_place_result;

/* Run the pass on g; *out is filled (free with kn_place_result_free). KN_ERR_SHAPE naming
 * the parameter when a parameter's sharded dim is not divisible ("h.0.mlp.c_fc.weight:
 * dim 1 (258) is not a multiple of 2 ranks"); KN_ERR_ARG for bad options; a rule's or the
 * localization's failure names the node ("%46 = matmul: ..."). Then kn_place_check runs on
 * the result (a failure there is a bug of a rule). */
kn_status kn_place_graph(const kn_graph *g, const kn_place_opts *o, kn_place_result *out);
void kn_place_result_free(kn_place_result *r);   /* NULL and a zeroed result are fine */

/* The rule of one op along an axis of `parts` ranks. n is the node with its GLOBAL
 * attributes, in[k] the operands' global types and have[k] their placements. *want[k]
 * receives the placement the op computes operand k from (have[k] when it takes it as it
 * is) and *out the result's placement; a rule given what it wants wants it again
 * (idempotent), which the verifier relies on. `ready[k]`, when not NULL, says that
 * operand k's all-reduced (R) form already exists: a rule may then prefer R to P. Fails
 * only for bad arguments or lab 11's skeleton (KN_ERR_NOT_IMPLEMENTED from
 * kn_place_rule_matmul: never a silent replication); an op without a rule wants every
 * operand R and gives R. */
kn_status kn_place_rule(const kn_node *n, const kn_type *const *in, const kn_placement *have,
                        const bool *ready, int parts, unsigned flags, kn_placement *want, kn_placement *out);
/* kn_place_rule's flags. KN_PLACE_SEQUENCE_PARALLEL: Megatron's sequence parallelism: where
 * an elementwise op takes a P operand it cannot keep partial (the bias add after a
 * row-parallel product, the embedding's sum), the result is sharded along its first
 * splittable row dim (the sequence when B = 1, the batch when N divides B) instead of
 * replicated, so the P arrives by reduce_scatter, not all_reduce; the layernorms and the
 * residual adds then run on the rank's rows, and the column-parallel products all-gather
 * their input (a matmul converts its activation operand before its weight on equal cost). */
enum { KN_PLACE_SEQUENCE_PARALLEL = 1u };

/* The verifier: re-derive every node's placement of r from its operands' with the rules
 * (kn_place_rule must want exactly the operands' placements and give the recorded one), and
 * check each conversion (all_reduce: P -> R, all_gather {axis=d}: S(d) -> R,
 * reduce_scatter {axis=d}: P -> S(d), a local slice: R -> S), each local type
 * (kn_place_local_shape of the global one) and the outputs' placements (opts as for
 * kn_place_graph, o->outputs NULL: the joint graph's). Fails naming the first node where
 * one does not hold: "kn_place_check: %46 = matmul: operand 0 is P, its rule wants R". */
kn_status kn_place_check(const kn_graph *input, const kn_place_result *r, const kn_place_opts *o);

/* "R", "P", "S(1)", "S(1,3)" into buf (NUL-terminated); returns buf. */
const char *kn_place_str(kn_placement p, char *buf, size_t size);
/* Print the local graph with each node's placement and global type as a comment, the
 * inserted conversions marked (`kiln compile --mesh tp=N --emit-ir`). */
kn_status kn_place_print(FILE *f, const kn_place_result *r);

#ifdef __cplusplus
}
#endif

#endif /* KILN_PLACEMENT_H */
