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

/* BEGIN SOLUTION */
/* "R", "P", "S(d)" or "S(d,k)", for messages. */
static const char *place_str(kn_placement p, char buf[32]) {
    if (p.kind == KN_PLACE_SHARD && p.blocks != 1) snprintf(buf, 32, "S(%d,%d)", p.dim, p.blocks);
    else if (p.kind == KN_PLACE_SHARD) snprintf(buf, 32, "S(%d)", p.dim);
    else snprintf(buf, 32, "%s", p.kind == KN_PLACE_PARTIAL ? "P" : "R");
    return buf;
}
/* END SOLUTION */

kn_status kn_place_rule_matmul(int nd, bool ta, bool tb, kn_placement a, kn_placement b, kn_placement *out) {
    if (!out) return kn_error(KN_ERR_ARG, "kn_place_rule_matmul: NULL out");
    if (nd < 2 || nd > 4) return kn_error(KN_ERR_ARG, "kn_place_rule_matmul: operands of rank %d (2..4)", nd);
    if (!valid_place(nd, a) || !valid_place(nd, b))
        return kn_error(KN_ERR_ARG, "kn_place_rule_matmul: a placement (kind %d dim %d, kind %d dim %d) of rank-%d operands",
                        (int)a.kind, a.dim, (int)b.kind, b.dim, nd);
    /* BEGIN SOLUTION */
    /* the operands' dims as stored: a is [.., M, K] ([.., K, M] when ta), b [.., K, N] */
    int a_m = ta ? nd - 1 : nd - 2, a_k = ta ? nd - 2 : nd - 1;
    int b_k = tb ? nd - 1 : nd - 2, b_n = tb ? nd - 2 : nd - 1;
    bool ar = a.kind == KN_PLACE_REPLICATE, br = b.kind == KN_PLACE_REPLICATE;
    bool as = a.kind == KN_PLACE_SHARD && a.blocks == 1, bs = b.kind == KN_PLACE_SHARD && b.blocks == 1;
    bool ap = a.kind == KN_PLACE_PARTIAL, bp = b.kind == KN_PLACE_PARTIAL;
    kn_placement r;
    char sa[32], sb[32];
    if (ar && br) r = kn_place_replicate();
    else if (as && br && a.dim == a_m) r = kn_place_shard(nd - 2);
    else if (ar && bs && b.dim == b_n) r = kn_place_shard(nd - 1);
    else if (as && bs && a.dim == a_k && b.dim == b_k) r = kn_place_partial();
    else if (as && bs && a.dim == b.dim && a.dim < nd - 2) r = kn_place_shard(a.dim);
    else if ((ap && br) || (ar && bp)) r = kn_place_partial();
    else
        return kn_error(KN_ERR_UNSUPPORTED, "kn_place_rule_matmul: no local rule for a %s x b %s (rank %d%s%s)",
                        place_str(a, sa), place_str(b, sb), nd, ta ? ", a transposed" : "", tb ? ", b transposed" : "");
    *out = r;
    return KN_OK;
    /* SKELETON
    (void)ta; (void)tb;
    return kn_not_implemented("lab11", "kn_place_rule_matmul: the placement rule of matmul (place_matmul.c)");
    END SOLUTION */
}
