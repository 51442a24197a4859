/* test_record.c — lab 03 public tests: kn_builder_record, the path every builder call
 * takes. Eager mode computes at once, graph mode only records, both record the same
 * nodes, errors name the public caller and are sticky, and a function captured in graph
 * mode and interpreted gives bitwise what it gives eagerly. */
#include "check.h"

static kn_tensor *make(int ndim, const int64_t *shape, double start) {
    kn_tensor *t = NULL;
    KN_ASSERT_OK(kn_tensor_zeros(&t, KN_DT_F32, ndim, shape));
    for (int64_t i = 0; i < kn_tensor_numel(t); i++) ((float *)kn_tensor_data(t))[i] = (float)(start + 0.25 * (double)i);
    return t;
}

KN_TEST(lab03_record, eager_runs_each_call) {
    int64_t s[] = {2, 3};
    kn_tensor *x = make(2, s, 1);
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
    kn_val xv = kn_input(b, "x", x);
    kn_val y = kn_mul(b, xv, kn_add(b, xv, xv));
    KN_ASSERT_OK(kn_builder_status(b));
    const kn_tensor *t = kn_val_tensor(b, y);
    cr_assert(t && t->ndim == 2 && t->shape[1] == 3, "eager value has a tensor of type f32[2,3]");
    for (int i = 0; i < 6; i++) {
        float v = ((float *)kn_tensor_data(x))[i];
        KN_ASSERT_CLOSE(((const float *)kn_tensor_data(t))[i], 2 * v * v, 0, 1e-6);
    }
    cr_assert(l3_nnodes(b) == 3, "eager mode records too: input, add, mul");
    kn_builder_free(b);
    kn_tensor_free(x);
}

KN_TEST(lab03_record, graph_mode_records_typed_nodes) {
    int64_t s[] = {2, 3}, w[] = {3, 4};
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
    kn_val x = l3_val("x", kn_input_typed(b, "x", KN_DT_F32, 2, s)), p = l3_val("w", kn_param_typed(b, "w", KN_DT_F32, 2, w));
    kn_val y = kn_tanh(b, kn_matmul(b, x, p));
    KN_ASSERT_OK(kn_builder_status(b));
    cr_assert(kn_val_tensor(b, y) == NULL, "graph mode computes nothing");
    const kn_graph *g = kn_builder_graph(b);
    cr_assert(g->nnodes == 4 && g->nodes[2].op == KN_OP_MATMUL && g->nodes[3].op == KN_OP_TANH, "4 nodes recorded");
    cr_assert(g->nodes[2].in[0] == x.id && g->nodes[2].in[1] == p.id, "operands recorded in order");
    cr_assert(g->nodes[3].type.ndim == 2 && g->nodes[3].type.shape[1] == 4, "inferred type f32[2,4]");
    kn_builder_free(b);
}

KN_TEST(lab03_record, errors_name_the_caller_and_stick) {
    int64_t s23[] = {2, 3}, s4[] = {4};
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
    kn_val x = kn_input_typed(b, "x", KN_DT_F32, 2, s23), y = kn_input_typed(b, "y", KN_DT_F32, 1, s4);
    kn_val z = kn_add(b, x, y);
    cr_assert(!kn_val_ok(z), "[2,3] + [4] gives KN_VAL_NONE");
    cr_assert(kn_builder_status(b) == KN_ERR_SHAPE, "status KN_ERR_SHAPE, got %s: %s",
              kn_status_name(kn_builder_status(b)), kn_builder_error(b));
    cr_assert(strncmp(kn_builder_error(b), "kn_add: ", 8) == 0, "message starts with the caller: %s", kn_builder_error(b));
    int n = l3_nnodes(b);
    cr_assert(!kn_val_ok(kn_neg(b, x)) && l3_nnodes(b) == n, "later calls do nothing");
    cr_assert(strncmp(kn_builder_error(b), "kn_add: ", 8) == 0, "the first error is kept");
    kn_builder_free(b);
}

KN_TEST(lab03_record, bad_operands_and_names) {
    int64_t s[] = {2};
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
    kn_val x = kn_input_typed(b, "x", KN_DT_F32, 1, s);
    cr_assert(!kn_val_ok(kn_add(b, x, (kn_val){7})));
    cr_assert(kn_builder_status(b) == KN_ERR_ARG && strstr(kn_builder_error(b), "operand 1 is not a value of this builder"),
              "%s", kn_builder_error(b));
    kn_builder_free(b);
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
    kn_input_typed(b, "x", KN_DT_F32, 1, s);
    cr_assert(!kn_val_ok(kn_param_typed(b, "x", KN_DT_F32, 1, s)));
    cr_assert(kn_builder_status(b) == KN_ERR_ARG && strstr(kn_builder_error(b), "\"x\" is already used"), "%s",
              kn_builder_error(b));
    kn_builder_free(b);
}

static kn_val fn(kn_builder *b, kn_val x, kn_val w) {
    int ax[] = {1};
    kn_val h = kn_tanh(b, kn_matmul(b, x, w));
    return kn_softmax(b, kn_sub(b, h, kn_mean(b, h, 1, ax, true)), -1);
}

KN_TEST(lab03_record, eager_equals_captured) {
    int64_t xs[] = {3, 4}, ws[] = {4, 5};
    kn_tensor *x = make(2, xs, -1), *w = make(2, ws, -2);
    kn_builder *e = NULL, *g = NULL;
    KN_ASSERT_OK(kn_builder_new(&e, KN_MODE_EAGER));
    KN_ASSERT_OK(kn_builder_new(&g, KN_MODE_GRAPH));
    kn_val ye = fn(e, kn_input(e, "x", x), kn_param(e, "w", w));
    kn_val yg = fn(g, kn_input(g, "x", x), kn_param(g, "w", w));
    kn_builder_output(g, yg);
    kn_graph *graph = NULL;
    KN_ASSERT_OK(kn_builder_finish(g, &graph));
    kn_interp *it = NULL;
    KN_ASSERT_OK(kn_interp_new(&it, graph));
    KN_ASSERT_OK(kn_interp_bind(it, "x", x));
    KN_ASSERT_OK(kn_interp_bind(it, "w", w));
    KN_ASSERT_OK(kn_interp_run(it));
    const kn_tensor *a = kn_val_tensor(e, ye), *c = kn_interp_output(it, 0);
    cr_assert(a && c && !memcmp(kn_tensor_data(a), kn_tensor_data(c), 15 * sizeof(float)), "eager and captured agree");
    kn_interp_free(it);
    kn_graph_free(graph);
    kn_builder_free(e);
    kn_builder_free(g);
    kn_tensor_free(x);
    kn_tensor_free(w);
}
