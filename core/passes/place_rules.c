/* place_rules.c — the placement rule of every op (kiln/placement.h, kn_place_rule): given
 * the placements of a node's operands along one mesh axis, the placements it computes from
 * locally and its result's placement. The placement pass (place.c) converts an operand
 * whose placement is not the one wanted; its verifier re-runs these rules on the result.
 *
 * The rules, per op family (N: the axis's ranks; S(d,k): kiln/placement.h):
 *   elementwise   operands broadcast: a shard of one operand on an output dim shards the
 *                 result there; the others take the same shard (a replicated one is sliced,
 *                 Megatron's choice over gathering), or stay R where that dim is broadcast.
 *                 P passes where the op is linear in it: add/sub of all-P operands,
 *                 mul (div: the numerator) of one P by R ones, neg, cast, unary_grad's dy.
 *                 Any other P is all-reduced: a P reaching a non-linear op or added to R.
 *   reductions    a shard on a reduced dim: sum gives P, mean and max take R (a local
 *                 mean divides by the local count); on a kept dim the shard moves to its
 *                 new index. P stays P through sum and mean (linear), not max.
 *   matmul        lab 11's kn_place_rule_matmul decides; when it refuses, the cheapest
 *                 operand conversions it accepts are taken (slicing an R operand costs
 *                 nothing in communication; all-reducing or gathering costs; fewer changes
 *                 first).
 *   views         reshape moves a shard to the output dim that starts at the same offset
 *                 (a split [D] -> [H, hd] keeps it on H when H % N == 0; a merge back
 *                 likewise); permute follows the permutation; broadcast_to keeps it;
 *                 slice of a whole segment j of S(d,k) gives S(d), of another dim keeps
 *                 it; slice_grad of S(d) into segment j of k gives S(d,k); P passes (linear).
 *   softmaxes     sharded on a dim they do not normalize (causal_softmax: a batch dim).
 *   layernorm     rows sharded, weights R (layernorm_dx and normalize alike).
 *   flash_attn    q, k, v (and y, dy for the backward) sharded on one batch dim (heads).
 *   embedding     idx sharded (rows) with the weight R, or the weight sharded on D;
 *                 embedding_grad: dy sharded on D, or rows with idx sharded alike (P).
 *   everything else (cross_entropy and its backward, onehot, dropout, the epilogue and
 *   quantized matmuls, ...): every operand R, the result R — always correct (the pass
 *   expands embedding and cross_entropy vocabulary-parallel first where it can: place.c).
 * KN_PLACE_SEQUENCE_PARALLEL changes one choice: an elementwise op given a P operand it
 * cannot keep partial shards its result along the first row dim that splits (the P is then
 * reduce-scattered, not all-reduced), and everything row-wise downstream follows.
 * A rule offered a P operand whose all-reduced form exists already (ready[k]) takes R: the
 * all-reduce is paid for, and a replicated value needs no later one. */
#include <string.h>

#include "kiln/placement.h"

static kn_placement R(void) { return kn_place_replicate(); }
static kn_placement P(void) { return kn_place_partial(); }
static bool is_r(kn_placement p) { return p.kind == KN_PLACE_REPLICATE; }
static bool is_p(kn_placement p) { return p.kind == KN_PLACE_PARTIAL; }
static bool is_s(kn_placement p) { return p.kind == KN_PLACE_SHARD; }

/* Whether dim d of t can be cut into blocks * parts equal blocks. */
static bool shardable(const kn_type *t, int d, int blocks, int parts) {
    return d >= 0 && d < t->ndim && blocks >= 1 && t->shape[d] % ((int64_t)blocks * parts) == 0;
}

static void all_r(int nin, kn_placement *want, kn_placement *out) {
    for (int k = 0; k < nin; k++) want[k] = R();
    *out = R();
}

/* Operands that must share one placement: the first shard among them with a dim that
 * `ok(dim, ndim)` accepts (and every such operand can take) becomes everyone's; else R.
 * P operands are wanted R. Returns the shared placement. */
static kn_placement agree(int nin, const kn_type *const *in, const kn_placement *have, int parts,
                          bool (*ok)(int dim, int ndim, const kn_node *n), const kn_node *n, kn_placement *want) {
    kn_placement t = R();
    for (int k = 0; k < nin && is_r(t); k++) {
        if (!is_s(have[k]) || !ok(have[k].dim, in[k]->ndim, n)) continue;
        bool all = true;
        for (int j = 0; j < nin; j++)
            if (in[j]->ndim != in[k]->ndim || !shardable(in[j], have[k].dim, have[k].blocks, parts)) all = false;
        if (all) t = have[k];
    }
    for (int k = 0; k < nin; k++) want[k] = t;
    return t;
}

static bool not_last(int d, int nd, const kn_node *n) { (void)n; return d < nd - 1; }
static bool batch_dim(int d, int nd, const kn_node *n) { (void)n; return d < nd - 2; }
static bool not_axis(int d, int nd, const kn_node *n) {
    int64_t a = n->attrs.axis < 0 ? n->attrs.axis + nd : n->attrs.axis;
    return d != a;
}

/* ---------------------------------------------------------------- elementwise */

static void rule_elementwise(const kn_node *n, const kn_type *const *in, const kn_placement *have, int parts,
                             unsigned flags, kn_placement *want, kn_placement *out) {
    int nin = n->nin, nd = n->type.ndim;
    /* P through ops linear in it */
    int np = 0, nr = 0, ns = 0;
    for (int k = 0; k < nin; k++) np += is_p(have[k]), nr += is_r(have[k]), ns += is_s(have[k]);
    bool pass_p = false;
    switch ((int)n->op) {
    case KN_OP_ADD: case KN_OP_SUB: pass_p = np == nin; break;
    case KN_OP_MUL: pass_p = np == 1 && nr == nin - 1; break;
    case KN_OP_DIV: pass_p = is_p(have[0]) && is_r(have[1]); break;
    case KN_OP_NEG: case KN_OP_CAST: pass_p = np == 1; break;
    case KN_OP_UNARY_GRAD: pass_p = is_p(have[0]) && is_r(have[1]); break;
    default: break;
    }
    if (pass_p) {
        for (int k = 0; k < nin; k++) want[k] = have[k];
        *out = P();
        return;
    }
    if (n->op == KN_OP_DROPOUT || n->op == KN_OP_ONEHOT) { /* position-dependent / reshaping */
        all_r(nin, want, out);
        return;
    }
    if ((flags & KN_PLACE_SEQUENCE_PARALLEL) && np > 0 && ns == 0 && n->op != KN_OP_CAUSAL_FILL) {
        /* sequence parallelism: the P arrives reduce-scattered along the first row dim that
         * splits; the other operands are sliced there or broadcast along it */
        for (int d = 0; d < nd - 1; d++) {
            if (n->type.shape[d] == 1 || !shardable(&n->type, d, 1, parts)) continue;
            bool ok = true;
            for (int k = 0; k < nin && ok; k++) {
                int jd = d - (nd - in[k]->ndim);
                if (jd >= 0 && in[k]->shape[jd] != 1 && !shardable(in[k], jd, 1, parts)) ok = false;
            }
            if (!ok) continue;
            for (int k = 0; k < nin; k++) {
                int jd = d - (nd - in[k]->ndim);
                want[k] = (jd < 0 || in[k]->shape[jd] == 1) ? R() : kn_place_shard(jd);
            }
            *out = kn_place_shard(d);
            return;
        }
    }
    /* the shard: the first operand's on an output dim every operand can take */
    kn_placement t = R();
    for (int k = 0; k < nin && is_r(t); k++) {
        if (!is_s(have[k])) continue;
        int od = have[k].dim + (nd - in[k]->ndim);
        if (n->op == KN_OP_CAUSAL_FILL && od >= nd - 2) continue;
        bool ok = shardable(&n->type, od, have[k].blocks, parts);
        for (int j = 0; j < nin && ok; j++) {
            int jd = od - (nd - in[j]->ndim);
            if (jd >= 0 && in[j]->shape[jd] != 1 && !shardable(in[j], jd, have[k].blocks, parts)) ok = false;
        }
        if (ok) t = kn_place_shard_blocks(od, have[k].blocks);
    }
    for (int k = 0; k < nin; k++) {
        if (is_r(t)) { want[k] = R(); continue; }
        int jd = t.dim - (nd - in[k]->ndim);
        want[k] = (jd < 0 || in[k]->shape[jd] == 1) ? R() : kn_place_shard_blocks(jd, t.blocks);
    }
    *out = t;
}

/* ---------------------------------------------------------------- reductions */

static bool reduced(const kn_node *n, int nd, int d) {
    if (n->attrs.naxes == 0) return true;
    for (int i = 0; i < n->attrs.naxes; i++) {
        int64_t a = n->attrs.axes[i] < 0 ? n->attrs.axes[i] + nd : n->attrs.axes[i];
        if (a == d) return true;
    }
    return false;
}

static void rule_reduce(const kn_node *n, const kn_type *const *in, const kn_placement *have, kn_placement *want,
                        kn_placement *out) {
    kn_placement h = have[0];
    int nd = in[0]->ndim;
    if (is_p(h)) {
        if (n->op == KN_OP_MAX) { all_r(1, want, out); return; }
        want[0] = h, *out = P();
        return;
    }
    if (is_s(h)) {
        if (reduced(n, nd, h.dim)) {
            if (n->op == KN_OP_SUM) { want[0] = h, *out = P(); return; }
            all_r(1, want, out);
            return;
        }
        int d = h.dim;
        if (!n->attrs.keepdim)
            for (int i = 0; i < h.dim; i++) d -= reduced(n, nd, i);
        want[0] = h, *out = kn_place_shard_blocks(d, h.blocks);
        return;
    }
    all_r(1, want, out);
}

/* ---------------------------------------------------------------- matmul */

/* The communication a conversion costs: nothing for none or a local slice of R, more for
 * the collectives (a P already all-reduced costs nothing: the caller passed it as R). */
static int conv_cost(kn_placement from, kn_placement to) {
    if (kn_place_equal(from, to)) return 0;
    if (is_r(from)) return 1;             /* a slice: local work, no communication */
    if (is_r(to)) return 10;              /* all_reduce or all_gather */
    return 20;                            /* reduce_scatter, or gather + slice */
}

static kn_status rule_matmul(const kn_node *n, const kn_type *const *in, const kn_placement *have, int parts,
                             kn_placement *want, kn_placement *out) {
    int nd = in[0]->ndim;
    if (in[1]->ndim != nd || nd < 2 || nd > 4) { all_r(2, want, out); return KN_OK; }
    bool ta = n->attrs.ta != 0, tb = n->attrs.tb != 0;
    kn_placement cand[2][KN_MAX_DIMS + 2];
    int nc[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        cand[k][nc[k]++] = have[k];
        if (!is_r(have[k])) cand[k][nc[k]++] = R();
        for (int d = 0; d < nd; d++) {
            kn_placement s = kn_place_shard(d);
            if (shardable(in[k], d, 1, parts) && !kn_place_equal(s, have[k])) cand[k][nc[k]++] = s;
        }
    }
    int best = -1;
    kn_placement bo = R(), ba = R(), bb = R();
    for (int i = 0; i < nc[0]; i++)
        for (int j = 0; j < nc[1]; j++) {
            kn_placement o;
            kn_status st = kn_place_rule_matmul(nd, ta, tb, cand[0][i], cand[1][j], &o);
            if (st == KN_ERR_NOT_IMPLEMENTED) return st; /* lab 11's skeleton: say so, never replicate silently */
            if (st != KN_OK) continue;
            /* on equal cost, convert the activation (a) before the weight (b): Megatron
             * gathers activations, a sharded weight stays sharded */
            int cb = conv_cost(have[1], cand[1][j]);
            int c = conv_cost(have[0], cand[0][i]) + cb + (cb >= 10);
            if (best < 0 || c < best) best = c, bo = o, ba = cand[0][i], bb = cand[1][j];
        }
    if (best < 0) { all_r(2, want, out); return KN_OK; }
    want[0] = ba, want[1] = bb, *out = bo;
    return KN_OK;
}

/* ---------------------------------------------------------------- views */

static int64_t prefix(const int64_t *shape, int d) {
    int64_t p = 1;
    for (int i = 0; i < d; i++) p *= shape[i];
    return p;
}

/* The output dim of a reshape that carries input dim d's shard (blocks 1), or -1. */
static int reshape_dim(const kn_type *from, const kn_type *to, int d, int parts) {
    int64_t pre = prefix(from->shape, d), a = from->shape[d];
    for (int e = 0; e < to->ndim; e++) {
        int64_t b = to->shape[e];
        if (prefix(to->shape, e) != pre || b == 1) continue;
        if (a == b) return e;
        if (a % b == 0 && b % parts == 0) return e;            /* a split: the leading factor */
        if (b % a == 0 && a % parts == 0) {                     /* a merge: d leads the group */
            for (int m = d + 1; m <= from->ndim; m++)
                if (prefix(from->shape, m) == pre * b) return e;
        }
        return -1;
    }
    return -1;
}

static void rule_view(const kn_node *n, const kn_type *const *in, const kn_placement *have, int parts,
                      kn_placement *want, kn_placement *out) {
    kn_placement h = have[0];
    want[0] = h;
    if (!is_s(h)) { *out = h; return; }  /* R and P pass every view (linear, no reordering) */
    int nd = in[0]->ndim, d = h.dim;
    switch ((int)n->op) {
    case KN_OP_RESHAPE: {
        int e = h.blocks == 1 ? reshape_dim(in[0], &n->type, d, parts) : -1;
        if (e >= 0) { *out = kn_place_shard(e); return; }
        break;
    }
    case KN_OP_PERMUTE:
        for (int e = 0; e < n->attrs.nperm; e++)
            if (n->attrs.perm[e] == d) { *out = kn_place_shard_blocks(e, h.blocks); return; }
        break;
    case KN_OP_BROADCAST_TO: {
        int e = d + (n->type.ndim - nd);
        if (n->type.shape[e] == in[0]->shape[d]) { *out = kn_place_shard_blocks(e, h.blocks); return; }
        break;
    }
    case KN_OP_SLICE: {
        int64_t ax = n->attrs.axis < 0 ? n->attrs.axis + nd : n->attrs.axis;
        if (ax != d) { *out = h; return; }
        int64_t dim = in[0]->shape[d], len = n->type.shape[d];
        int64_t st = n->attrs.start < 0 ? n->attrs.start + dim : n->attrs.start;
        if (st < 0) st = 0;
        int64_t seg = dim / h.blocks;
        if (n->attrs.step == 1 && len == seg && st % seg == 0) { *out = kn_place_shard(d); return; }
        break;
    }
    case KN_OP_SLICE_GRAD: {
        int64_t ax = n->attrs.axis < 0 ? n->attrs.axis + nd : n->attrs.axis;
        if (ax != d) { *out = h; return; }
        int64_t len = in[0]->shape[d], full = n->type.shape[d];
        int64_t st = n->attrs.start < 0 ? n->attrs.start + full : n->attrs.start;
        if (h.blocks == 1 && n->attrs.step == 1 && len > 0 && full % len == 0 && st % len == 0 &&
            st + len <= full) {
            *out = kn_place_shard_blocks(d, (int)(full / len));
            return;
        }
        break;
    }
    default: break;
    }
    want[0] = R(), *out = R();
}

/* ---------------------------------------------------------------- the rule */

kn_status kn_place_rule(const kn_node *n, const kn_type *const *in, const kn_placement *have_in,
                        const bool *ready, int parts, unsigned flags, kn_placement *want, kn_placement *out) {
    if (!n || !want || !out || parts < 1 || n->nin < 0 || n->nin > KN_MAX_OPERANDS || (n->nin && (!in || !have_in)))
        return kn_error(KN_ERR_ARG, "kn_place_rule: bad arguments");
    kn_placement have[KN_MAX_OPERANDS];
    for (int k = 0; k < n->nin; k++) {
        have[k] = have_in[k];
        if (have[k].kind < 0 || have[k].kind >= KN_PLACE_KIND_COUNT)
            return kn_error(KN_ERR_ARG, "kn_place_rule: operand %d: placement kind %d out of range", k, have[k].kind);
        if (is_p(have[k]) && ready && ready[k]) have[k] = R();
    }
    const kn_op_info *info = kn_op_get(n->op);
    if (!info) return kn_error(KN_ERR_ARG, "kn_place_rule: invalid op %d", (int)n->op);
    int nin = n->nin;
    switch ((int)n->op) {
    case KN_OP_INPUT: case KN_OP_FULL: *out = R(); return KN_OK;
    case KN_OP_MATMUL: return rule_matmul(n, in, have, parts, want, out);
    case KN_OP_SUM: case KN_OP_MEAN: case KN_OP_MAX: rule_reduce(n, in, have, want, out); return KN_OK;
    case KN_OP_RESHAPE: case KN_OP_PERMUTE: case KN_OP_BROADCAST_TO: case KN_OP_SLICE: case KN_OP_SLICE_GRAD:
        rule_view(n, in, have, parts, want, out);
        return KN_OK;
    case KN_OP_CONCAT: {
        if (is_p(have[0]) && is_p(have[1])) { want[0] = want[1] = P(), *out = P(); return KN_OK; }
        *out = agree(2, in, have, parts, not_axis, n, want);
        return KN_OK;
    }
    case KN_OP_SOFTMAX: case KN_OP_LOG_SOFTMAX: case KN_OP_SOFTMAX_BWD: case KN_OP_LOG_SOFTMAX_BWD:
        *out = agree(nin, in, have, parts, not_axis, n, want);
        return KN_OK;
    case KN_OP_CAUSAL_SOFTMAX: case KN_OP_CAUSAL_SOFTMAX_BWD: case KN_OP_FLASH_ATTN:
        if (n->attrs.nperm) break; /* flash's [B, T, H, D] layout (a flat y): replicated, below */
        *out = agree(nin, in, have, parts, batch_dim, n, want);
        return KN_OK;
    case KN_OP_FLASH_ATTN_BWD: {
        if (n->attrs.nperm) break;
        kn_placement t = agree(nin, in, have, parts, batch_dim, n, want);
        *out = is_s(t) ? kn_place_shard_blocks(t.dim + 1, t.blocks) : t;
        return KN_OK;
    }
    case KN_OP_LAYERNORM: case KN_OP_LAYERNORM_DX: case KN_OP_NORMALIZE: {
        int rows = n->op == KN_OP_LAYERNORM_DX ? 2 : 1; /* layernorm: x; layernorm_dx: dy, x */
        *out = agree(rows, in, have, parts, not_last, n, want);
        for (int k = rows; k < nin; k++) want[k] = R();
        return KN_OK;
    }
    case KN_OP_EMBEDDING: { /* (weight [V, D], idx [...]) */
        int ni = in[1]->ndim;
        if (is_r(have[0]) && is_s(have[1])) { want[0] = R(), want[1] = have[1], *out = have[1]; return KN_OK; }
        if (is_s(have[0]) && have[0].dim == 1 && is_r(have[1])) {
            want[0] = have[0], want[1] = R(), *out = kn_place_shard_blocks(ni, have[0].blocks);
            return KN_OK;
        }
        all_r(2, want, out);
        return KN_OK;
    }
    case KN_OP_EMBEDDING_GRAD: { /* (dy [..., D], idx [...]) -> [V, D] */
        int nd = in[0]->ndim;
        if (is_p(have[0]) && is_r(have[1])) { want[0] = P(), want[1] = R(), *out = P(); return KN_OK; }
        if (is_s(have[0]) && have[0].dim == nd - 1 && is_r(have[1])) {
            want[0] = have[0], want[1] = R(), *out = kn_place_shard_blocks(1, have[0].blocks);
            return KN_OK;
        }
        if (is_s(have[0]) && have[0].dim < nd - 1 && kn_place_equal(have[0], have[1])) {
            want[0] = want[1] = have[0], *out = P();
            return KN_OK;
        }
        all_r(2, want, out);
        return KN_OK;
    }
    default: break;
    }
    if (info->category == KN_CAT_ELEMENTWISE) { rule_elementwise(n, in, have, parts, flags, want, out); return KN_OK; }
    all_r(nin, want, out); /* no rule: replicate (cross_entropy, the epilogue matmuls, ...) */
    return KN_OK;
}
