/* test_place_rules.c — lab 11's placement units (kiln/placement.h) against their contract:
 * the matmul rule on every pair of placements for every rank and transpose (both what it
 * answers and that its answer is right: the ranks' local products, combined as the answer
 * says, are the whole product), Megatron's split of every GPT-2 parameter, and the parts
 * scatter and gather move, including the blocked S(1,3) on odd shapes. */
#include <stdlib.h>
#include <string.h>

#include "kn_test.h"
#include "kiln/placement.h"

enum { PARTS = 2 };

/* Every placement of a rank-nd operand: R, P, S(d) and S(d,3) for each dim. */
static int all_places(int nd, kn_placement *out) {
    int n = 0;
    out[n++] = kn_place_replicate();
    out[n++] = kn_place_partial();
    for (int d = 0; d < nd; d++) {
        out[n++] = kn_place_shard(d);
        out[n++] = kn_place_shard_blocks(d, 3);
    }
    return n;
}

/* The contract's table, written from the operands' M, K, N dims. */
static bool expected_rule(int nd, bool ta, bool tb, kn_placement a, kn_placement b, kn_placement *want) {
    int a_m = ta ? nd - 1 : nd - 2, a_k = ta ? nd - 2 : nd - 1, b_k = tb ? nd - 1 : nd - 2, b_n = tb ? nd - 2 : nd - 1;
    kn_place_kind ka = a.kind, kb = b.kind;
    if ((ka == KN_PLACE_SHARD && a.blocks != 1) || (kb == KN_PLACE_SHARD && b.blocks != 1)) return false;
    if (ka == KN_PLACE_REPLICATE && kb == KN_PLACE_REPLICATE) *want = kn_place_replicate();
    else if (ka == KN_PLACE_SHARD && a.dim == a_m && kb == KN_PLACE_REPLICATE) *want = kn_place_shard(nd - 2);
    else if (ka == KN_PLACE_REPLICATE && kb == KN_PLACE_SHARD && b.dim == b_n) *want = kn_place_shard(nd - 1);
    else if (ka == KN_PLACE_SHARD && kb == KN_PLACE_SHARD && a.dim == a_k && b.dim == b_k) *want = kn_place_partial();
    else if (ka == KN_PLACE_SHARD && kb == KN_PLACE_SHARD && a.dim == b.dim && a.dim < nd - 2) *want = kn_place_shard(a.dim);
    else if ((ka == KN_PLACE_PARTIAL && kb == KN_PLACE_REPLICATE) || (ka == KN_PLACE_REPLICATE && kb == KN_PLACE_PARTIAL))
        *want = kn_place_partial();
    else return false;
    return true;
}

KN_TEST(place_matmul, every_pair_follows_the_table) {
    int supported = 0, refused = 0;
    for (int nd = 2; nd <= 4; nd++)
        for (int t = 0; t < 4; t++) {
            bool ta = t & 1, tb = t & 2;
            kn_placement pl[10];
            int np = all_places(nd, pl);
            for (int i = 0; i < np; i++)
                for (int j = 0; j < np; j++) {
                    kn_placement want, got = {KN_PLACE_KIND_COUNT, 99, 99};
                    kn_status st = kn_place_rule_matmul(nd, ta, tb, pl[i], pl[j], &got);
                    if (expected_rule(nd, ta, tb, pl[i], pl[j], &want)) {
                        cr_assert(st == KN_OK, "nd %d ta %d tb %d pair %d,%d: %s", nd, ta, tb, i, j, kn_last_error());
                        cr_assert(kn_place_equal(got, want), "nd %d ta %d tb %d pair %d,%d: kind %d dim %d", nd, ta, tb,
                                  i, j, (int)got.kind, got.dim);
                        supported++;
                    } else {
                        cr_assert(st == KN_ERR_UNSUPPORTED, "nd %d ta %d tb %d pair %d,%d: %s", nd, ta, tb, i, j,
                                  kn_status_name(st));
                        cr_assert(got.kind == KN_PLACE_KIND_COUNT && got.dim == 99, "*out written on a refusal");
                        refused++;
                    }
                }
        }
    /* per (nd, transposes): R R, S(M) R, R S(N), S(K) S(K), P R, R P, and nd-2 batch dims */
    cr_assert_eq(supported, 4 * (6 + 7 + 8));
    cr_assert_gt(refused, supported);
}

KN_TEST(place_matmul, bad_arguments) {
    kn_placement r = kn_place_replicate(), out;
    KN_ASSERT_ERR(kn_place_rule_matmul(1, false, false, r, r, &out), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_place_rule_matmul(5, false, false, r, r, &out), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_place_rule_matmul(2, false, false, r, r, NULL), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_place_rule_matmul(2, false, false, kn_place_shard(2), r, &out), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_place_rule_matmul(3, false, false, r, kn_place_shard(-1), &out), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_place_rule_matmul(2, false, false, (kn_placement){KN_PLACE_KIND_COUNT, -1, 1}, r, &out), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_place_rule_matmul(2, false, false, kn_place_partial(), kn_place_partial(), &out),
                  KN_ERR_UNSUPPORTED);
}

/* ---------------------------------------------------------------- numeric soundness */

/* A batched matmul of rank nd with stored shapes sa, sb (row-major): out [.., M, N]. */
static void bmm(int nd, bool ta, bool tb, const int64_t *sa, const int64_t *sb, const float *a, const float *b,
                float *out) {
    int64_t batch = 1;
    for (int d = 0; d < nd - 2; d++) batch *= sa[d];
    int64_t M = ta ? sa[nd - 1] : sa[nd - 2], K = ta ? sa[nd - 2] : sa[nd - 1], N = tb ? sb[nd - 2] : sb[nd - 1];
    for (int64_t z = 0; z < batch; z++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                float s = 0;
                for (int64_t k = 0; k < K; k++)
                    s += a[z * M * K + (ta ? k * M + i : i * K + k)] * b[z * K * N + (tb ? j * K + k : k * N + j)];
                out[(z * M + i) * N + j] = s;
            }
}

static int64_t numel(int nd, const int64_t *s) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= s[d];
    return n;
}

/* Rank r's operand: its shard (scatter), all of it (R), or a random split that sums to it (P). */
static void part_of(const float *full, int nd, const int64_t *shape, kn_placement p, int r, float *local,
                    int64_t *lshape) {
    KN_ASSERT_OK(kn_place_local_shape(nd, shape, p, PARTS, lshape));
    if (p.kind != KN_PLACE_PARTIAL) {
        KN_ASSERT_OK(kn_place_scatter(full, nd, shape, p, PARTS, r, local));
        return;
    }
    int64_t n = numel(nd, shape);
    for (int64_t i = 0; i < n; i++) {
        /* rank 0 holds full - (i % 5) / 4, rank 1 the rest: a split that is no copy */
        float other = (float)(i % 5) * 0.25f;
        local[i] = r == 0 ? full[i] - other : other;
    }
}

KN_TEST(place_matmul, every_supported_answer_computes_the_product) {
    int checked = 0;
    for (int nd = 2; nd <= 4; nd++)
        for (int t = 0; t < 4; t++) {
            bool ta = t & 1, tb = t & 2;
            /* batch dims 2 and 4, M 4, K 6, N 2: all even, all different */
            int64_t bat[2] = {2, 4}, M = 4, K = 6, N = 2, sa[4], sb[4], so[4];
            for (int d = 0; d < nd - 2; d++) sa[d] = sb[d] = so[d] = bat[d];
            sa[nd - 2] = ta ? K : M, sa[nd - 1] = ta ? M : K;
            sb[nd - 2] = tb ? N : K, sb[nd - 1] = tb ? K : N;
            so[nd - 2] = M, so[nd - 1] = N;
            int64_t na = numel(nd, sa), nb = numel(nd, sb), no = numel(nd, so);
            float *a = malloc(na * sizeof(float)), *b = malloc(nb * sizeof(float)), *want = malloc(no * sizeof(float));
            float *la = malloc(na * sizeof(float)), *lb = malloc(nb * sizeof(float)), *lo = malloc(no * sizeof(float));
            float *got = malloc(no * sizeof(float));
            for (int64_t i = 0; i < na; i++) a[i] = (float)((i * 7) % 11) - 5;
            for (int64_t i = 0; i < nb; i++) b[i] = (float)((i * 5) % 13) - 6;
            bmm(nd, ta, tb, sa, sb, a, b, want);
            kn_placement pl[10];
            int np = all_places(nd, pl);
            for (int i = 0; i < np; i++)
                for (int j = 0; j < np; j++) {
                    kn_placement po;
                    if (kn_place_rule_matmul(nd, ta, tb, pl[i], pl[j], &po) != KN_OK) continue;
                    memset(got, 0, no * sizeof(float));
                    for (int r = 0; r < PARTS; r++) {
                        int64_t lsa[4], lsb[4], lso[4];
                        part_of(a, nd, sa, pl[i], r, la, lsa);
                        part_of(b, nd, sb, pl[j], r, lb, lsb);
                        bmm(nd, ta, tb, lsa, lsb, la, lb, lo);
                        KN_ASSERT_OK(kn_place_local_shape(nd, so, po, PARTS, lso));
                        int64_t lm = ta ? lsa[nd - 1] : lsa[nd - 2], ln = tb ? lsb[nd - 2] : lsb[nd - 1];
                        cr_assert_eq(numel(nd - 2, lsa) * lm * ln, numel(nd, lso),
                                     "the local product's size is not the answer's local shape");
                        if (po.kind == KN_PLACE_PARTIAL)
                            for (int64_t e = 0; e < no; e++) got[e] += lo[e];
                        else if (po.kind == KN_PLACE_SHARD)
                            KN_ASSERT_OK(kn_place_gather(lo, nd, so, po, PARTS, r, got));
                        else
                            for (int64_t e = 0; e < no; e++)
                                cr_assert_float_eq(lo[e], want[e], 1e-3, "R answer differs on rank %d", r);
                    }
                    if (po.kind != KN_PLACE_REPLICATE)
                        for (int64_t e = 0; e < no; e++)
                            cr_assert_float_eq(got[e], want[e], 1e-3, "nd %d ta %d tb %d pair %d,%d: element %lld", nd,
                                               ta, tb, i, j, (long long)e);
                    checked++;
                }
            free(a), free(b), free(want), free(la), free(lb), free(lo), free(got);
        }
    cr_assert_eq(checked, 4 * (6 + 7 + 8));
}

/* ---------------------------------------------------------------- GPT-2's split */

KN_TEST(place_split, every_gpt2_parameter) {
    struct { const char *name; kn_placement want; } t[] = {
        {"h.0.attn.c_attn.weight", kn_place_shard_blocks(1, 3)}, {"h.11.attn.c_attn.bias", kn_place_shard_blocks(0, 3)},
        {"h.3.attn.c_proj.weight", kn_place_shard(0)},           {"h.3.attn.c_proj.bias", kn_place_replicate()},
        {"h.7.mlp.c_fc.weight", kn_place_shard(1)},              {"h.7.mlp.c_fc.bias", kn_place_shard(0)},
        {"h.120.mlp.c_proj.weight", kn_place_shard(0)},          {"h.2.mlp.c_proj.bias", kn_place_replicate()},
        {"h.0.ln_1.weight", kn_place_replicate()},               {"h.0.ln_1.bias", kn_place_replicate()},
        {"h.5.ln_2.weight", kn_place_replicate()},               {"h.5.ln_2.bias", kn_place_replicate()},
        {"wte.weight", kn_place_shard(0)},                       {"wpe.weight", kn_place_replicate()},
        {"ln_f.weight", kn_place_replicate()},                   {"ln_f.bias", kn_place_replicate()},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        kn_placement got;
        KN_ASSERT_OK(kn_place_gpt_param(t[i].name, &got));
        cr_assert(kn_place_equal(got, t[i].want), "%s: kind %d dim %d blocks %d", t[i].name, (int)got.kind, got.dim,
                  got.blocks);
    }
    const char *bad[] = {"h.x.ln_1.weight", "h..ln_1.weight", "h.1.ln_3.weight", "h.1", "wte", "wte.weight.x",
                         "lm_head.weight", "", "h.1.attn.c_attn.weight2", "H.1.ln_1.bias", "h.-1.ln_1.bias"};
    kn_placement out;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) KN_ASSERT_ERR(kn_place_gpt_param(bad[i], &out), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_place_gpt_param(NULL, &out), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_place_gpt_param("wte.weight", NULL), KN_ERR_ARG);
}

KN_TEST(place_split, local_shapes) {
    int64_t s[3] = {6, 12, 5}, l[3];
    KN_ASSERT_OK(kn_place_local_shape(3, s, kn_place_shard_blocks(1, 3), 2, l));
    cr_assert(l[0] == 6 && l[1] == 6 && l[2] == 5);
    KN_ASSERT_OK(kn_place_local_shape(3, s, kn_place_shard(0), 3, l));
    cr_assert(l[0] == 2 && l[1] == 12 && l[2] == 5);
    KN_ASSERT_OK(kn_place_local_shape(3, s, kn_place_partial(), 4, l));
    cr_assert(l[0] == 6 && l[1] == 12 && l[2] == 5);
    KN_ASSERT_OK(kn_place_local_shape(3, s, kn_place_replicate(), 4, l));
    cr_assert(l[0] == 6 && l[1] == 12 && l[2] == 5);
    KN_ASSERT_ERR(kn_place_local_shape(3, s, kn_place_shard_blocks(1, 3), 8, l), KN_ERR_SHAPE); /* 12 / 24 */
    KN_ASSERT_ERR(kn_place_local_shape(3, s, kn_place_shard(2), 2, l), KN_ERR_SHAPE);
    KN_ASSERT_ERR(kn_place_local_shape(3, s, kn_place_shard(3), 2, l), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_place_local_shape(3, s, kn_place_shard(0), 0, l), KN_ERR_ARG);
}

KN_TEST(place_split, blocked_scatter_and_gather_on_odd_shapes) {
    /* [3, 12, 5] as S(1,3) over 2 ranks: each of the 3 segments of 4 rows gives each rank 2 */
    int64_t s[3] = {3, 12, 5};
    float full[180], back[180], part[90];
    for (int i = 0; i < 180; i++) full[i] = (float)i, back[i] = -1;
    for (int r = 0; r < 2; r++) {
        KN_ASSERT_OK(kn_place_scatter(full, 3, s, kn_place_shard_blocks(1, 3), 2, r, part));
        for (int o = 0; o < 3; o++)
            for (int j = 0; j < 6; j++)
                for (int i = 0; i < 5; i++) {
                    int seg = j / 2, row = seg * 4 + r * 2 + j % 2;
                    cr_assert_eq(part[(o * 6 + j) * 5 + i], full[(o * 12 + row) * 5 + i], "rank %d [%d,%d,%d]", r, o,
                                 j, i);
                }
        KN_ASSERT_OK(kn_place_gather(part, 3, s, kn_place_shard_blocks(1, 3), 2, r, back));
    }
    cr_assert(!memcmp(full, back, sizeof full), "gathering both parts does not rebuild the value");
    /* R takes and puts everything; P has no part; a bad rank */
    float r_part[180];
    KN_ASSERT_OK(kn_place_scatter(full, 3, s, kn_place_replicate(), 2, 1, r_part));
    cr_assert(!memcmp(full, r_part, sizeof full));
    KN_ASSERT_ERR(kn_place_scatter(full, 3, s, kn_place_partial(), 2, 0, part), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_place_gather(part, 3, s, kn_place_partial(), 2, 0, back), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_place_scatter(full, 3, s, kn_place_shard(1), 2, 2, part), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_place_scatter(full, 3, s, kn_place_shard(1), 2, -1, part), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_place_scatter(full, 3, s, kn_place_shard(2), 2, 0, part), KN_ERR_SHAPE);
    KN_ASSERT_ERR(kn_place_gather(part, 3, s, kn_place_shard(0), 2, 0, back), KN_ERR_SHAPE);
}
