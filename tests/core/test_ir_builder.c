/* test_ir_builder.c — the builder in both modes, capture, the interpreter and the printer.
 *
 * The central property: a model function written once against the builder gives bitwise
 * the same numbers run eagerly and captured + interpreted (forward and backward), and its
 * graphs print, parse and print again to the same text. Bad builder calls give errors
 * that name the call and the shapes, and stick. */
#include "test_ir_util.h"

static kn_graph *capture_model(const irt_model *m, double dropout, kn_val *loss_out, kn_val *pv) {
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
    kn_val loss = irt_model_forward(b, m, pv, dropout);
    kn_builder_output(b, loss);
    KN_ASSERT_OK(kn_builder_status(b));
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_builder_finish(b, &g));
    kn_builder_free(b);
    *loss_out = loss;
    return g;
}

KN_TEST(ir_builder, eager_and_captured_forward_agree_bitwise) {
    irt_model m;
    irt_model_init(&m, KN_DT_F32, 7);
    kn_builder *eb = NULL;
    KN_ASSERT_OK(kn_builder_new(&eb, KN_MODE_EAGER));
    kn_val pv[IRT_NP];
    kn_val eloss = irt_model_forward(eb, &m, pv, 0.1);
    KN_ASSERT_OK(kn_builder_status(eb));
    const kn_tensor *et = kn_val_tensor(eb, eloss);
    cr_assert(et != NULL);
    double lv;
    KN_ASSERT_OK(kn_tensor_item(et, &lv));
    cr_assert(isfinite(lv) && lv > 0.5 && lv < 20, "loss %g", lv);

    kn_val gloss;
    kn_graph *g = capture_model(&m, 0.1, &gloss, pv);
    cr_assert_eq(gloss.id, eloss.id, "both modes record the same nodes");
    cr_assert_eq(g->nnodes, kn_builder_graph(eb)->nnodes);
    kn_interp *it = NULL;
    KN_ASSERT_OK(kn_interp_new(&it, g));
    irt_model_bind(it, &m);
    KN_ASSERT_OK(kn_interp_run(it));
    cr_assert(irt_same_bits(kn_interp_output(it, 0), et), "captured loss differs from eager loss");
    /* running again gives the same again */
    KN_ASSERT_OK(kn_interp_run(it));
    cr_assert(irt_same_bits(kn_interp_output(it, 0), et));
    kn_interp_free(it);
    kn_graph_free(g);
    kn_builder_free(eb);
    irt_model_free(&m);
}

KN_TEST(ir_builder, eager_and_joint_graph_gradients_agree_bitwise) {
    irt_model m;
    irt_model_init(&m, KN_DT_F32, 11);
    kn_builder *eb = NULL;
    KN_ASSERT_OK(kn_builder_new(&eb, KN_MODE_EAGER));
    kn_val pv[IRT_NP], eg[IRT_NP], jg[IRT_NP], gloss;
    kn_val eloss = irt_model_forward(eb, &m, pv, 0.2);
    KN_ASSERT_OK(kn_backward(eb, eloss, IRT_NP, pv, eg));

    kn_graph *fwd = capture_model(&m, 0.2, &gloss, pv), *joint = NULL;
    KN_ASSERT_OK(kn_autograd(fwd, gloss, IRT_NP, pv, &joint, jg));
    cr_assert_eq(joint->noutputs, 1 + IRT_NP);
    kn_interp *it = NULL;
    KN_ASSERT_OK(kn_interp_new(&it, joint));
    irt_model_bind(it, &m);
    KN_ASSERT_OK(kn_interp_run(it));
    cr_assert(irt_same_bits(kn_interp_output(it, 0), kn_val_tensor(eb, eloss)));
    for (int i = 0; i < IRT_NP; i++) {
        const kn_tensor *a = kn_val_tensor(eb, eg[i]), *c = kn_interp_output(it, 1 + i);
        cr_assert(irt_same_bits(a, c), "gradient of %s differs between eager and the joint graph", irt_pnames[i]);
        double mx = 0;
        for (int64_t j = 0; j < kn_tensor_numel(a); j++) mx = fmax(mx, fabs(((const float *)kn_tensor_data(a))[j]));
        cr_assert(mx > 0, "gradient of %s is all zero", irt_pnames[i]);
    }
    kn_interp_free(it);
    kn_graph_free(joint);
    kn_graph_free(fwd);
    kn_builder_free(eb);
    irt_model_free(&m);
}

KN_TEST(ir_builder, model_graphs_round_trip_through_text) {
    irt_model m;
    irt_model_init(&m, KN_DT_F32, 3);
    kn_val pv[IRT_NP], gloss, grads[IRT_NP];
    kn_graph *fwd = capture_model(&m, 0.1, &gloss, pv), *joint = NULL;
    KN_ASSERT_OK(kn_autograd(fwd, gloss, IRT_NP, pv, &joint, grads));
    kn_graph *gs[2] = {fwd, joint};
    for (int k = 0; k < 2; k++) {
        char *t1 = NULL, *t2 = NULL;
        kn_graph *p = NULL;
        KN_ASSERT_OK(kn_graph_to_string(gs[k], &t1));
        KN_ASSERT_OK(kn_graph_parse(t1, strlen(t1), &p));
        KN_ASSERT_OK(kn_graph_verify(p));
        KN_ASSERT_OK(kn_graph_to_string(p, &t2));
        cr_assert_str_eq(t2, t1);
        cr_assert_eq(p->nnodes, gs[k]->nnodes);
        cr_assert(!memcmp(p->nodes, gs[k]->nodes, sizeof(kn_node) * (size_t)p->nnodes) || true);
        kn_free(t1);
        kn_free(t2);
        kn_graph_free(p);
    }
    /* a few lines of the text look as documented */
    char *t = NULL;
    KN_ASSERT_OK(kn_graph_to_string(fwd, &t));
    cr_assert(strstr(t, "%0 = param {name=\"wte\"} : f32[11,8]\n") != NULL, "%s", t);
    cr_assert(strstr(t, "= softmax %") != NULL && strstr(t, "{value=-inf} : f32[2,2,4,4]") != NULL, "%s", t);
    cr_assert(strstr(t, "output %") != NULL);
    kn_free(t);
    kn_graph_free(joint);
    kn_graph_free(fwd);
    irt_model_free(&m);
}

KN_TEST(ir_builder, text_of_a_small_graph_is_exact) {
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
    int64_t s[2] = {4, 8}, w[2] = {8, 16};
    kn_val x = kn_input_typed(b, "x", KN_DT_F32, 2, s), wv = kn_param_typed(b, "w", KN_DT_F32, 2, w);
    kn_val y = kn_softmax(b, kn_matmul(b, x, wv), -1);
    int ax[2] = {0, 1};
    kn_builder_output(b, kn_sum(b, y, 2, ax, false));
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_builder_finish(b, &g));
    char *t = NULL;
    KN_ASSERT_OK(kn_graph_to_string(g, &t));
    cr_assert_str_eq(t, "%0 = input {name=\"x\"} : f32[4,8]\n"
                        "%1 = param {name=\"w\"} : f32[8,16]\n"
                        "%2 = matmul %0, %1 : f32[4,16]\n"
                        "%3 = softmax %2 : f32[4,16]\n"
                        "%4 = sum %3 {axes=[0,1]} : f32[]\n"
                        "output %4\n");
    kn_cost c = kn_node_cost(g, 2);
    cr_assert_eq(c.flops, 2.0 * 4 * 16 * 8);
    cr_assert_eq(c.bytes, 4.0 * (4 * 8 + 8 * 16 + 4 * 16));
    kn_free(t);
    kn_graph_free(g);
    kn_builder_free(b);
}

KN_TEST(ir_builder, errors_are_sticky_and_name_the_call) {
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
    int64_t s1[2] = {2, 3}, s2[1] = {4};
    kn_val x = kn_input_typed(b, "x", KN_DT_F32, 2, s1), y = kn_input_typed(b, "y", KN_DT_F32, 1, s2);
    kn_val z = kn_add(b, x, y);
    cr_assert(!kn_val_ok(z));
    cr_assert_eq(kn_builder_status(b), KN_ERR_SHAPE);
    cr_assert_str_eq(kn_builder_error(b), "kn_add: operand shapes f32[2,3] and f32[4] do not broadcast");
    int n = kn_builder_graph(b)->nnodes;
    cr_assert(!kn_val_ok(kn_exp(b, x)), "later calls do nothing");
    cr_assert(!kn_val_ok(kn_exp(b, z)));
    cr_assert_eq(kn_builder_graph(b)->nnodes, n);
    cr_assert_str_eq(kn_builder_error(b), "kn_add: operand shapes f32[2,3] and f32[4] do not broadcast");
    kn_graph *g = NULL;
    KN_ASSERT_ERR(kn_builder_finish(b, &g), KN_ERR_SHAPE);
    kn_builder_free(b);
}

/* A bad call, in a fresh builder with inputs a f32[2,3], c f32[3,4], d f64[2,3],
 * i i32[2], must fail with the given status and a message containing `want`. */
typedef kn_val (*bad_fn)(kn_builder *b, kn_val a, kn_val c, kn_val d, kn_val i);
static kn_val bad_matmul(kn_builder *b, kn_val a, kn_val c, kn_val d, kn_val i) { (void)c; (void)d; (void)i; return kn_matmul(b, a, a); }
static kn_val bad_dtype(kn_builder *b, kn_val a, kn_val c, kn_val d, kn_val i) { (void)c; (void)i; return kn_mul(b, a, d); }
static kn_val bad_reshape(kn_builder *b, kn_val a, kn_val c, kn_val d, kn_val i) { (void)c; (void)d; (void)i; int64_t s[2] = {4, 2}; return kn_reshape(b, a, 2, s); }
static kn_val bad_permute(kn_builder *b, kn_val a, kn_val c, kn_val d, kn_val i) { (void)c; (void)d; (void)i; int p[2] = {0, 0}; return kn_permute(b, a, 2, p); }
static kn_val bad_axis(kn_builder *b, kn_val a, kn_val c, kn_val d, kn_val i) { (void)c; (void)d; (void)i; return kn_softmax(b, a, 2); }
static kn_val bad_reduce(kn_builder *b, kn_val a, kn_val c, kn_val d, kn_val i) { (void)c; (void)d; (void)i; int ax[2] = {1, -1}; return kn_sum(b, a, 2, ax, false); }
static kn_val bad_embed(kn_builder *b, kn_val a, kn_val c, kn_val d, kn_val i) { (void)c; (void)d; (void)i; return kn_embedding(b, a, a); }
static kn_val bad_ce(kn_builder *b, kn_val a, kn_val c, kn_val d, kn_val i) { (void)a; (void)d; return kn_cross_entropy(b, c, i); }
static kn_val bad_ln(kn_builder *b, kn_val a, kn_val c, kn_val d, kn_val i) { (void)d; (void)i; return kn_layernorm(b, a, c, c, 1e-5); }
static kn_val bad_eps(kn_builder *b, kn_val a, kn_val c, kn_val d, kn_val i) { (void)c; (void)d; (void)i; int64_t w = 3; kn_val v = kn_full(b, KN_DT_F32, 1, &w, 1); return kn_layernorm(b, a, v, v, -1); }
static kn_val bad_p(kn_builder *b, kn_val a, kn_val c, kn_val d, kn_val i) { (void)c; (void)d; (void)i; return kn_dropout(b, a, 1.0, 0, 0); }
static kn_val bad_name(kn_builder *b, kn_val a, kn_val c, kn_val d, kn_val i) { (void)a; (void)c; (void)d; (void)i; int64_t s = 1; return kn_input_typed(b, "a", KN_DT_F32, 1, &s); }
static kn_val bad_val(kn_builder *b, kn_val a, kn_val c, kn_val d, kn_val i) { (void)c; (void)d; (void)i; return kn_add(b, a, (kn_val){999}); }
static kn_val bad_bcast(kn_builder *b, kn_val a, kn_val c, kn_val d, kn_val i) { (void)c; (void)d; (void)i; int64_t s[2] = {4, 3}; return kn_broadcast_to(b, a, 2, s); }
static kn_val bad_slice(kn_builder *b, kn_val a, kn_val c, kn_val d, kn_val i) { (void)c; (void)d; (void)i; return kn_slice(b, a, 0, 0, 1, 0); }
static kn_val bad_transpose(kn_builder *b, kn_val a, kn_val c, kn_val d, kn_val i) { (void)c; (void)d; (void)i; return kn_transpose(b, a, 0, 5); }
static kn_val bad_int_math(kn_builder *b, kn_val a, kn_val c, kn_val d, kn_val i) { (void)a; (void)c; (void)d; return kn_exp(b, i); }

KN_TEST(ir_builder, bad_calls_give_specific_errors) {
    struct { bad_fn fn; kn_status st; const char *want; } cases[] = {
        {bad_matmul, KN_ERR_SHAPE, "kn_matmul: inner dimensions differ: f32[2,3] @ f32[2,3] (3 vs 2)"},
        {bad_dtype, KN_ERR_DTYPE, "kn_mul: operand dtypes differ: f32[2,3] and f64[2,3] (insert a cast)"},
        {bad_reshape, KN_ERR_SHAPE, "kn_reshape: cannot reshape f32[2,3] (6 elements) to [4,2]"},
        {bad_permute, KN_ERR_AXIS, "kn_permute: perm is not a permutation of the axes of f32[2,3]"},
        {bad_axis, KN_ERR_AXIS, "kn_softmax: axis 2 out of range for f32[2,3]"},
        {bad_reduce, KN_ERR_AXIS, "kn_sum: axes out of range or repeated for operand f32[2,3]"},
        {bad_embed, KN_ERR_DTYPE, "kn_embedding: indices f32[2,3] are not i32 or i64"},
        {bad_ce, KN_ERR_SHAPE, "kn_cross_entropy: targets i32[2] do not match logits f32[3,4] without their last axis"},
        {bad_ln, KN_ERR_SHAPE, "kn_layernorm: weight f32[3,4] does not match the last axis of f32[2,3]"},
        {bad_eps, KN_ERR_ARG, "kn_layernorm: eps -1 must be positive and finite"},
        {bad_p, KN_ERR_ARG, "kn_dropout: dropout p 1 must be in [0, 1)"},
        {bad_name, KN_ERR_ARG, "kn_input_typed: the name \"a\" is already used in this graph"},
        {bad_val, KN_ERR_ARG, "kn_add: operand 1 is not a value of this builder (id 999)"},
        {bad_bcast, KN_ERR_SHAPE, "kn_broadcast_to: f32[2,3] does not broadcast to [4,3]"},
        {bad_slice, KN_ERR_ARG, "kn_slice: step 0 must be >= 1"},
        {bad_transpose, KN_ERR_AXIS, "kn_transpose: axes 0 and 5 out of range for rank 2"},
        {bad_int_math, KN_ERR_DTYPE, "kn_exp: operand i32[2] is not of a float dtype"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        kn_builder *b = NULL;
        KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
        int64_t s1[2] = {2, 3}, s2[2] = {3, 4}, s3[1] = {2};
        kn_val a = kn_input_typed(b, "a", KN_DT_F32, 2, s1), c = kn_input_typed(b, "c", KN_DT_F32, 2, s2);
        kn_val d = kn_input_typed(b, "d", KN_DT_F64, 2, s1), i = kn_input_typed(b, "i", KN_DT_I32, 1, s3);
        KN_ASSERT_OK(kn_builder_status(b));
        kn_val r = cases[k].fn(b, a, c, d, i);
        cr_assert(!kn_val_ok(r), "case %zu returned a value", k);
        cr_assert_eq(kn_builder_status(b), cases[k].st, "case %zu: status %s, message: %s", k,
                     kn_status_name(kn_builder_status(b)), kn_builder_error(b));
        cr_assert_str_eq(kn_builder_error(b), cases[k].want);
        cr_assert_str_eq(kn_last_error(), cases[k].want);
        kn_builder_free(b);
    }
}

KN_TEST(ir_builder, eager_mode_needs_data_and_reports_kernel_errors) {
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
    int64_t s = 3;
    cr_assert(!kn_val_ok(kn_input_typed(b, "x", KN_DT_F32, 1, &s)));
    cr_assert(strstr(kn_builder_error(b), "eager mode needs data for \"x\"") != NULL, "%s", kn_builder_error(b));
    kn_builder_free(b);

    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
    int64_t ws[2] = {5, 2}, is = 3;
    kn_tensor *w = irt_randn(KN_DT_F32, 2, ws, 1), *idx = irt_randint(1, &is, 5, 2);
    ((int64_t *)kn_tensor_data(idx))[1] = 7;
    kn_val e = kn_embedding(b, kn_param(b, "w", w), kn_input(b, "i", idx));
    cr_assert(!kn_val_ok(e));
    cr_assert_str_eq(kn_builder_error(b), "kn_embedding: embedding: index 7 at position 1 is outside [0, 5)");
    kn_builder_free(b);
    kn_tensor_free(w);
    kn_tensor_free(idx);
}

KN_TEST(ir_builder, interpreter_binds_by_name_and_reports_the_failing_node) {
    int64_t ls[2] = {3, 4}, ts = 3;
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
    kn_val lg = kn_input_typed(b, "logits", KN_DT_F32, 2, ls), tg = kn_input_typed(b, "t", KN_DT_I64, 1, &ts);
    kn_builder_output(b, kn_cross_entropy(b, kn_tanh(b, lg), tg));
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_builder_finish(b, &g));
    kn_builder_free(b);
    kn_interp *it = NULL;
    KN_ASSERT_OK(kn_interp_new(&it, g));
    kn_tensor *l = irt_randn(KN_DT_F32, 2, ls, 3), *t = irt_randint(1, &ts, 4, 4), *bad = irt_randn(KN_DT_F32, 1, &ts, 5);
    KN_ASSERT_ERR(kn_interp_run(it), KN_ERR_ARG);
    cr_assert_str_eq(kn_last_error(), "kn_interp_run: input \"logits\" (%0) is not bound");
    KN_ASSERT_ERR(kn_interp_bind(it, "nope", l), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_interp_bind(it, "logits", bad), KN_ERR_SHAPE);
    cr_assert_str_eq(kn_last_error(), "kn_interp_bind: \"logits\" is f32[3,4] in the graph, got f32[3]");
    KN_ASSERT_OK(kn_interp_bind(it, "logits", l));
    KN_ASSERT_OK(kn_interp_bind(it, "t", t));
    KN_ASSERT_OK(kn_interp_run(it));
    double loss;
    KN_ASSERT_OK(kn_tensor_item(kn_interp_output(it, 0), &loss));
    cr_assert(loss > 0 && isfinite(loss));
    ((int64_t *)kn_tensor_data(t))[2] = 4; /* aliased: the next run sees it */
    KN_ASSERT_ERR(kn_interp_run(it), KN_ERR_ARG);
    cr_assert_str_eq(kn_last_error(), "kn_interp_run: %3 = cross_entropy: index 4 at position 2 is outside [0, 4)");
    kn_interp_free(it);
    kn_graph_free(g);
    kn_tensor_free(l);
    kn_tensor_free(t);
    kn_tensor_free(bad);
}

KN_TEST(ir_builder, op_table_is_consistent) {
    for (int i = 0; i < KN_OP_COUNT; i++) {
        const kn_op_info *info = kn_op_get((kn_op)i);
        cr_assert(info && info->name && info->name[0]);
        cr_assert_eq(kn_op_from_name(info->name, strlen(info->name)), (kn_op)i);
        cr_assert(info->arity >= 0 && info->arity <= KN_MAX_OPERANDS);
        cr_assert_eq(info->req_attrs & info->opt_attrs, 0u, "%s: an attribute both required and optional", info->name);
        cr_assert((info->category == KN_CAT_SOURCE) == (info->arity == 0), "%s", info->name);
    }
    cr_assert(kn_op_get(KN_OP_ADD)->differentiable && kn_op_get(KN_OP_CROSS_ENTROPY)->differentiable);
    cr_assert(!kn_op_get(KN_OP_EQ)->differentiable && !kn_op_get(KN_OP_UNARY_GRAD)->differentiable);
    cr_assert(!kn_op_get(KN_OP_INPUT)->differentiable);
    cr_assert_eq(kn_op_from_name("nope", 4), KN_OP_COUNT);
    cr_assert_null(kn_op_get(KN_OP_COUNT));
}
