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

#ifdef __cplusplus
}
#endif

#endif /* KILN_PLACEMENT_H */
