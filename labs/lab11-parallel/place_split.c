/* place_split.c — lab 11 unit: Megatron's tensor-parallel split of GPT-2's weights and the
 * parts a placement gives each rank (kn_place_gpt_param, kn_place_local_shape,
 * kn_place_scatter, kn_place_gather; contracts in kiln/placement.h, "lab 11 units").
 *
 * Megatron splits each block column-then-row: the first matmul of a sub-block (attention's
 * c_attn, the MLP's c_fc) has its weight cut along its output columns, so each rank
 * computes its own heads / its own quarter of the hidden units from the whole input with no
 * communication, and the nonlinearity (GELU, the attention of a head) stays local; the
 * second (c_proj) is cut along its input rows, so each rank multiplies its own columns of
 * the activation by its own rows of the weight and holds a Partial sum: one all-reduce per
 * sub-block forward (and, in the backward, one for the gradient of the sub-block's input).
 * c_attn's columns are q, k and v side by side, so it is cut S(1,3): each rank keeps its
 * heads of each of the three. The embedding wte [V, D] is cut along the vocabulary.
 *
 * kn_place_scatter and kn_place_gather move one rank's part between the whole value and the
 * local one. S(d,k) over N ranks views the value as [outer, k, N, blk, inner] (outer: the
 * product of the dims before d, inner: of those after, blk = shape[d] / (k N)): rank r's
 * part is [outer, k, blk, inner], the slices with index r on the N axis. */
#include <stdio.h>
#include <string.h>

#include "kiln/placement.h"

kn_status kn_place_gpt_param(const char *name, kn_placement *out) {
    if (!name || !out) return kn_error(KN_ERR_ARG, "kn_place_gpt_param: NULL name or out");
    return kn_not_implemented("lab11", "kn_place_gpt_param: Megatron's placement of each GPT-2 parameter (place_split.c)");
}

/* The arguments every function below shares, checked the same way; `who` names the caller. */
static kn_status check_args(const char *who, int ndim, const int64_t *shape, kn_placement p, int parts) {
    if (ndim < 0 || (ndim > 0 && !shape)) return kn_error(KN_ERR_ARG, "%s: a value of %d dims", who, ndim);
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0) return kn_error(KN_ERR_ARG, "%s: dim %d of size %lld", who, i, (long long)shape[i]);
    if (parts < 1) return kn_error(KN_ERR_ARG, "%s: %d parts (at least 1)", who, parts);
    if (p.kind < KN_PLACE_REPLICATE || p.kind >= KN_PLACE_KIND_COUNT)
        return kn_error(KN_ERR_ARG, "%s: placement kind %d", who, (int)p.kind);
    if (p.kind == KN_PLACE_SHARD && (p.dim < 0 || p.dim >= ndim || p.blocks < 1))
        return kn_error(KN_ERR_ARG, "%s: a shard of dim %d in %d blocks of a value of %d dims", who, p.dim, p.blocks,
                        ndim);
    return KN_OK;
}

/* What scatter and gather refuse before any copying: check_args's, a NULL buffer, a
 * Partial (no part of a whole value), a rank outside [0, parts). */
static kn_status check_part(const char *who, const float *full, const float *local, int ndim, const int64_t *shape,
                            kn_placement p, int parts, int rank) {
    KN_TRY(check_args(who, ndim, shape, p, parts));
    if (!full || !local) return kn_error(KN_ERR_ARG, "%s: NULL full or local", who);
    if (p.kind == KN_PLACE_PARTIAL)
        return kn_error(KN_ERR_ARG, "%s: a Partial value has no part to take or put (all-reduce it first)", who);
    if (rank < 0 || rank >= parts) return kn_error(KN_ERR_ARG, "%s: rank %d of %d parts", who, rank, parts);
    return KN_OK;
}


kn_status kn_place_local_shape(int ndim, const int64_t *shape, kn_placement p, int parts, int64_t *local) {
    KN_TRY(check_args("kn_place_local_shape", ndim, shape, p, parts));
    if (ndim > 0 && !local) return kn_error(KN_ERR_ARG, "kn_place_local_shape: NULL local");
    return kn_not_implemented("lab11", "kn_place_local_shape: the shape of one rank's part (place_split.c)");
}

kn_status kn_place_scatter(const float *full, int ndim, const int64_t *shape, kn_placement p, int parts, int rank,
                           float *local) {
    KN_TRY(check_part("kn_place_scatter", full, local, ndim, shape, p, parts, rank));
    return kn_not_implemented("lab11", "kn_place_scatter: copy one rank's part out of the whole value (place_split.c)");
}

kn_status kn_place_gather(const float *local, int ndim, const int64_t *shape, kn_placement p, int parts, int rank,
                          float *full) {
    KN_TRY(check_part("kn_place_gather", full, local, ndim, shape, p, parts, rank));
    return kn_not_implemented("lab11", "kn_place_gather: write one rank's part into the whole value (place_split.c)");
}
