/* test_placement.c — lab 11 public tests: the matmul placement rule (place_matmul.c) and
 * Megatron's split of GPT-2 with the parts it gives each rank (place_split.c). The cases
 * are the handout's examples; the hidden tests check every pair of placements, every
 * parameter and every shape. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "kn_test.h"
#include "kiln/placement.h"

/* "R", "P", "S(d)", "S(d,k)": what a failing test prints. */
static const char *pstr(kn_placement p) {
    static char buf[4][32];
    static int next;
    char *b = buf[next++ % 4];
    if (p.kind == KN_PLACE_SHARD && p.blocks != 1) snprintf(b, 32, "S(%d,%d)", p.dim, p.blocks);
    else if (p.kind == KN_PLACE_SHARD) snprintf(b, 32, "S(%d)", p.dim);
    else snprintf(b, 32, "%s", p.kind == KN_PLACE_PARTIAL ? "P" : p.kind == KN_PLACE_REPLICATE ? "R" : "?");
    return b;
}

#define R kn_place_replicate()
#define P kn_place_partial()
#define S(d) kn_place_shard(d)

static void expect_rule(int nd, bool ta, bool tb, kn_placement a, kn_placement b, kn_placement want) {
    kn_placement got = {KN_PLACE_KIND_COUNT, -7, -7};
    kn_status st = kn_place_rule_matmul(nd, ta, tb, a, b, &got);
    cr_assert(st == KN_OK, "rank %d%s%s: a %s x b %s returned %s: %s", nd, ta ? " ta" : "", tb ? " tb" : "", pstr(a),
              pstr(b), kn_status_name(st), kn_last_error());
    cr_assert(kn_place_equal(got, want), "rank %d%s%s: a %s x b %s gave %s, expected %s", nd, ta ? " ta" : "",
              tb ? " tb" : "", pstr(a), pstr(b), pstr(got), pstr(want));
}

static void expect_refused(int nd, bool ta, bool tb, kn_placement a, kn_placement b) {
    kn_placement got = {KN_PLACE_KIND_COUNT, -7, -7};
    kn_status st = kn_place_rule_matmul(nd, ta, tb, a, b, &got);
    cr_assert(st == KN_ERR_UNSUPPORTED, "rank %d%s%s: a %s x b %s returned %s (%s), expected KN_ERR_UNSUPPORTED", nd,
              ta ? " ta" : "", tb ? " tb" : "", pstr(a), pstr(b), kn_status_name(st), pstr(got));
    cr_assert(got.kind == KN_PLACE_KIND_COUNT && got.dim == -7, "a refusal wrote *out");
}

KN_TEST(lab11_place_matmul, megatron_column_then_row) {
    /* x [BT, D] R times c_fc [D, 4D] S(1): each rank its columns of h */
    expect_rule(2, false, false, R, S(1), S(1));
    /* h [BT, 4D] S(1) times c_proj [4D, D] S(0): each rank a partial sum */
    expect_rule(2, false, false, S(1), S(0), P);
    /* rows of x cut, weight whole: rows of the product */
    expect_rule(2, false, false, S(0), R, S(0));
    expect_rule(2, false, false, R, R, R);
}

KN_TEST(lab11_place_matmul, transposes_move_the_dims) {
    /* logits = x wte^T: b stored [V, D], its N dim is dim 0 (the vocabulary) */
    expect_rule(2, false, true, R, S(0), S(1));
    /* a transposed: a stored [K, M], its M dim is dim 1 */
    expect_rule(2, true, false, S(1), R, S(0));
    /* both transposed: a's K is dim 0, b's K is dim 1 */
    expect_rule(2, true, true, S(0), S(1), P);
    /* rank 3: the same rules on the last two dims */
    expect_rule(3, false, false, R, S(2), S(2));
    expect_rule(3, false, false, S(2), S(1), P);
}

KN_TEST(lab11_place_matmul, heads_and_partials) {
    /* attention's scores q k^T on [B, H, T, hd]: heads cut in both */
    expect_rule(4, false, true, S(1), S(1), S(1));
    expect_rule(3, false, false, S(0), S(0), S(0));
    expect_rule(2, false, false, P, R, P);
    expect_rule(3, true, false, R, P, P);
}

KN_TEST(lab11_place_matmul, pairs_without_a_local_rule) {
    expect_refused(2, false, false, P, P);
    expect_refused(2, false, false, P, S(0));
    expect_refused(2, false, false, S(0), S(1)); /* M in a, N in b: one diagonal block each */
    expect_refused(2, false, false, S(1), R);    /* K cut in a only */
    expect_refused(2, false, false, kn_place_shard_blocks(0, 3), R);
    expect_refused(3, false, false, S(0), R); /* a batch dim cut on one side only */
}

KN_TEST(lab11_place_split, a_gpt2_block) {
    struct { const char *name; kn_placement want; } t[] = {
        {"h.0.attn.c_attn.weight", kn_place_shard_blocks(1, 3)},
        {"h.0.attn.c_attn.bias", kn_place_shard_blocks(0, 3)},
        {"h.0.attn.c_proj.weight", S(0)},
        {"h.0.attn.c_proj.bias", R},
        {"h.0.mlp.c_fc.weight", S(1)},
        {"h.0.mlp.c_fc.bias", S(0)},
        {"h.0.mlp.c_proj.weight", S(0)},
        {"h.0.ln_1.weight", R},
        {"wte.weight", S(0)},
        {"wpe.weight", R},
        {"ln_f.bias", R},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        kn_placement got = {KN_PLACE_KIND_COUNT, -7, -7};
        kn_status st = kn_place_gpt_param(t[i].name, &got);
        cr_assert(st == KN_OK, "%s: %s: %s", t[i].name, kn_status_name(st), kn_last_error());
        cr_assert(kn_place_equal(got, t[i].want), "%s: %s, expected %s", t[i].name, pstr(got), pstr(t[i].want));
    }
    kn_placement out;
    KN_ASSERT_ERR(kn_place_gpt_param("h.0.attn.c_attn", &out), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_place_gpt_param("h.one.ln_1.weight", &out), KN_ERR_ARG);
}

KN_TEST(lab11_place_split, local_shapes) {
    int64_t w[2] = {8, 24}, l[2] = {0, 0};
    KN_ASSERT_OK(kn_place_local_shape(2, w, kn_place_shard_blocks(1, 3), 2, l));
    cr_assert(l[0] == 8 && l[1] == 12, "c_attn [8, 24] S(1,3) over 2: [%lld, %lld], expected [8, 12]",
              (long long)l[0], (long long)l[1]);
    KN_ASSERT_OK(kn_place_local_shape(2, w, S(0), 4, l));
    cr_assert(l[0] == 2 && l[1] == 24, "[8, 24] S(0) over 4: [%lld, %lld]", (long long)l[0], (long long)l[1]);
    KN_ASSERT_OK(kn_place_local_shape(2, w, P, 4, l));
    cr_assert(l[0] == 8 && l[1] == 24, "P keeps the shape: [%lld, %lld]", (long long)l[0], (long long)l[1]);
    KN_ASSERT_ERR(kn_place_local_shape(2, w, kn_place_shard_blocks(1, 3), 16, l), KN_ERR_SHAPE);
}

KN_TEST(lab11_place_split, c_attn_scatter_and_gather) {
    /* a [1, 12] "c_attn" with D = 4: q = 0..3, k = 4..7, v = 8..11; two ranks, S(1,3) */
    int64_t s[2] = {1, 12};
    float full[12], part[6], back[12];
    for (int i = 0; i < 12; i++) full[i] = (float)i, back[i] = -1;
    const float want[2][6] = {{0, 1, 4, 5, 8, 9}, {2, 3, 6, 7, 10, 11}};
    for (int r = 0; r < 2; r++) {
        memset(part, 0, sizeof part);
        KN_ASSERT_OK(kn_place_scatter(full, 2, s, kn_place_shard_blocks(1, 3), 2, r, part));
        for (int i = 0; i < 6; i++)
            cr_assert_eq(part[i], want[r][i], "rank %d's part[%d] = %g, expected %g (its q, then its k, then its v)",
                         r, i, part[i], want[r][i]);
        KN_ASSERT_OK(kn_place_gather(part, 2, s, kn_place_shard_blocks(1, 3), 2, r, back));
    }
    for (int i = 0; i < 12; i++) cr_assert_eq(back[i], full[i], "gathered [%d] = %g, expected %g", i, back[i], full[i]);
}
