/* test_autocast.c — lab 09 public tests of the autocast pass's decisions: the policy of
 * one op of each class, and a two-layer MLP through autocast:bf16 (which nodes run low,
 * where each cast stands, how many there are). */
#include "check.h"

KN_TEST(lab09_autocast, one_op_of_each_class) {
    const struct { kn_op op; kn_autocast_class want; } c[] = {
        {KN_OP_MATMUL, KN_AUTOCAST_LOW},      {KN_OP_SUM, KN_AUTOCAST_F32},
        {KN_OP_SOFTMAX, KN_AUTOCAST_F32},     {KN_OP_LAYERNORM, KN_AUTOCAST_F32},
        {KN_OP_CROSS_ENTROPY, KN_AUTOCAST_F32}, {KN_OP_ADD, KN_AUTOCAST_KEEP},
        {KN_OP_GELU, KN_AUTOCAST_KEEP},       {KN_OP_RESHAPE, KN_AUTOCAST_KEEP},
        {KN_OP_PARAM, KN_AUTOCAST_KEEP},
    };
    const char *name[] = {"KEEP", "LOW", "F32"};
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        kn_clear_error();
        kn_autocast_class got = kn_autocast_policy(c[i].op);
        cr_assert_eq(got, c[i].want, "kn_autocast_policy(%s) = %s, want %s %s", kn_op_name(c[i].op), name[got],
                     name[c[i].want], l9_why());
    }
}

/* loss = sum(gelu(x @ w1) @ w2): both products and the gelu between them run in bf16,
 * the sum in f32. Casts: x, w1 and w2 down, each right after its value (3), and the
 * second product's result up, right before the sum (1). */
KN_TEST(lab09_autocast, a_two_layer_mlp_in_bf16) {
    kn_builder *b = l9_builder();
    const int64_t sx[] = {4, 8}, s1[] = {8, 16}, s2[] = {16, 8};
    kn_val x = kn_input_typed(b, "x", KN_DT_F32, 2, sx);
    kn_val w1 = kn_param_typed(b, "w1", KN_DT_F32, 2, s1);
    kn_val w2 = kn_param_typed(b, "w2", KN_DT_F32, 2, s2);
    kn_val loss = kn_sum(b, kn_matmul(b, kn_gelu(b, kn_matmul(b, x, w1)), w2), 0, NULL, false);
    kn_graph *g = l9_finish(b, 1, &loss);
    int64_t casts;
    kn_graph *a = l9_autocast(g, "autocast:bf16", &casts);
    int32_t m1 = l9_nth(a, KN_OP_MATMUL, 0), m2 = l9_nth(a, KN_OP_MATMUL, 1), ge = l9_nth(a, KN_OP_GELU, 0),
            su = l9_nth(a, KN_OP_SUM, 0);
    cr_assert(m1 >= 0 && m2 >= 0 && ge >= 0 && su >= 0, "the pass kept every computation");
    cr_assert_eq(a->nodes[m1].type.dtype, KN_DT_BF16, "the first matmul runs in bf16 %s", l9_why());
    cr_assert_eq(a->nodes[ge].type.dtype, KN_DT_BF16, "gelu of a bf16 value stays bf16");
    cr_assert_eq(a->nodes[m2].type.dtype, KN_DT_BF16, "the second matmul runs in bf16");
    cr_assert_eq(a->nodes[su].type.dtype, KN_DT_F32, "sum is a reduction: f32");
    cr_assert_eq(a->nodes[a->outputs[0]].type.dtype, KN_DT_F32, "the loss keeps its dtype");
    const int32_t src[] = {l9_nth(a, KN_OP_INPUT, 0), l9_nth(a, KN_OP_PARAM, 0), l9_nth(a, KN_OP_PARAM, 1)};
    for (int s = 0; s < 3; s++) { /* x, w1, w2: inputs and params keep f32; their copies follow them */
        int32_t v = src[s];
        cr_assert_eq(a->nodes[v].type.dtype, KN_DT_F32, "%%%d (%s) must stay f32", v, kn_op_name(a->nodes[v].op));
        int32_t c = l9_cast_of(a, v, KN_DT_BF16);
        cr_assert_eq(c, v + 1, "the bf16 copy of %%%d stands right after it (at %%%d), not at %%%d", v, v + 1, c);
    }
    int32_t up = l9_cast_of(a, m2, KN_DT_F32);
    cr_assert(up >= 0 && up == su - 1 && a->nodes[su].in[0] == up,
              "the sum reads the product cast up to f32 right before it (cast at %%%d, sum at %%%d)", up, su);
    cr_assert_eq(casts, 4, "4 casts (3 down, 1 up), not %lld", (long long)casts);
    kn_graph_free(a), kn_graph_free(g);
}

/* out = sum(x @ w + r): the product runs in bf16, but the add has an f32 operand (the
 * residual stream r, as in every transformer block), so it stays f32 and reads the product
 * cast up; run in bf16 it would round r to 8 bits at every layer. */
KN_TEST(lab09_autocast, an_add_of_bf16_and_f32_stays_f32) {
    kn_builder *b = l9_builder();
    const int64_t sx[] = {4, 8}, sw[] = {8, 8};
    kn_val x = kn_input_typed(b, "x", KN_DT_F32, 2, sx);
    kn_val r = kn_input_typed(b, "r", KN_DT_F32, 2, sx);
    kn_val w = kn_param_typed(b, "w", KN_DT_F32, 2, sw);
    kn_val loss = kn_sum(b, kn_add(b, kn_matmul(b, x, w), r), 0, NULL, false);
    kn_graph *g = l9_finish(b, 1, &loss);
    int64_t casts;
    kn_graph *a = l9_autocast(g, "autocast:bf16", &casts);
    int32_t m = l9_nth(a, KN_OP_MATMUL, 0), ad = l9_nth(a, KN_OP_ADD, 0);
    cr_assert(m >= 0 && ad >= 0, "the pass kept every computation");
    cr_assert_eq(a->nodes[m].type.dtype, KN_DT_BF16, "the matmul runs in bf16 %s", l9_why());
    cr_assert_eq(a->nodes[ad].type.dtype, KN_DT_F32, "an add of a bf16 product and an f32 input stays f32 %s",
                 l9_why());
    int32_t up = l9_cast_of(a, m, KN_DT_F32);
    cr_assert(up >= 0 && (a->nodes[ad].in[0] == up || a->nodes[ad].in[1] == up),
              "the add reads the product cast up to f32 (cast at %%%d)", up);
    cr_assert_eq(l9_cast_of(a, l9_nth(a, KN_OP_INPUT, 1), KN_DT_BF16), -1, "r is not cast down");
    kn_graph_free(a), kn_graph_free(g);
}
