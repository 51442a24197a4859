/* place_matmul.c — lab 11 unit: the placement rule of matmul along one mesh axis
 * (kn_place_rule_matmul, contract in kiln/placement.h, "lab 11 units").
 *
 * A matrix product C[M, N] = sum over K of A[M, K] B[K, N] can be computed by each rank
 * from its own parts only when the parts line up:
 *   - A cut along M (its rows), B whole: each rank computes its rows of C: S(rows).
 *   - A whole, B cut along N (its columns): each rank computes its columns: S(cols).
 *     These two are Megatron's column-parallel layer (c_attn, c_fc: the weight is cut).
 *   - A and B both cut along K: each rank sums over its part of K only, so it holds a
 *     full-shape C that is one term of the true sum: Partial. Megatron's row-parallel layer
 *     (attention's c_proj, the MLP's c_proj), which the pass then all-reduces.
 *   - a batch dim (heads) cut the same way in both: each rank multiplies its own heads.
 *   - a Partial times a whole value stays Partial: (A1 + A2) B = A1 B + A2 B.
 * Everything else (a Partial times a Partial would be (A1 + A2)(B1 + B2), not the sum of
 * the ranks' A_r B_r; M cut in A and N in B leaves each rank one diagonal block, ...) is
 * refused, and the placement pass converts an operand first (an all-gather, an
 * all-reduce). A transposed operand is stored the other way round, so its M, K or N dim is
 * the other of the last two. */
#include <stdio.h>

#include "kiln/placement.h"

/* A placement the contract accepts at all: a known kind, and a shard's dim one of the
 * operand's nd dims. */
static bool valid_place(int nd, kn_placement p) {
    if (p.kind < KN_PLACE_REPLICATE || p.kind >= KN_PLACE_KIND_COUNT) return false;
    return p.kind != KN_PLACE_SHARD || (p.dim >= 0 && p.dim < nd);
}


kn_status kn_place_rule_matmul(int nd, bool ta, bool tb, kn_placement a, kn_placement b, kn_placement *out) {
    if (!out) return kn_error(KN_ERR_ARG, "kn_place_rule_matmul: NULL out");
    if (nd < 2 || nd > 4) return kn_error(KN_ERR_ARG, "kn_place_rule_matmul: operands of rank %d (2..4)", nd);
    if (!valid_place(nd, a) || !valid_place(nd, b))
        return kn_error(KN_ERR_ARG, "kn_place_rule_matmul: a placement (kind %d dim %d, kind %d dim %d) of rank-%d operands",
                        (int)a.kind, a.dim, (int)b.kind, b.dim, nd);
    (void)ta; (void)tb;
    return kn_not_implemented("lab11", "kn_place_rule_matmul: the placement rule of matmul (place_matmul.c)");
}
