/* test_fusion.c — lab 05 public tests: the fusion rules on hand-made queries, the index
 * arithmetic and expression binding on small kernels, and the compiled program (your rules
 * and your index code inside kiln's scheduler and renderer) against the interpreter. */
#include <math.h>

#include "check.h"

static const int64_t S23[2] = {2, 3};

KN_TEST(lab05_rules, an_elementwise_node_of_the_space_joins_full) {
    kn_type t = {KN_DT_F32, 2, {2, 3}}, ta = t;
    kn_fuse_query q = l5_query(KN_OP_ADD, &t, 2, S23);
    q.nin = 2;
    q.in[0] = (kn_fuse_operand){.type = &ta, .in_group = true, .level = KN_LEVEL_FULL};
    q.in[1] = (kn_fuse_operand){.type = &ta};
    int level = 0;
    const char *why = l5_refusal(&q, &level);
    cr_assert_null(why, "%s", why);
    cr_assert_eq(level, KN_LEVEL_FULL);
}

KN_TEST(lab05_rules, sealed_and_library_groups_refuse) {
    kn_type t = {KN_DT_F32, 2, {2, 3}};
    kn_fuse_query q = l5_query(KN_OP_EXP, &t, 2, S23);
    int level = 0;
    q.sealed = true;
    cr_assert_str_eq(l5_refusal(&q, &level), "the group is sealed (a node outside it already reads it)");
    q.sealed = false;
    q.fused = false;
    cr_assert_str_eq(l5_refusal(&q, &level), "a library step");
}

KN_TEST(lab05_rules, a_row_reduction_and_its_epilogue) {
    kn_type x = {KN_DT_F32, 2, {2, 3}}, r = {KN_DT_F32, 2, {2, 1}};
    kn_fuse_query q = l5_query(KN_OP_SUM, &r, 2, S23);
    q.nin = 1;
    q.mask = 2u;
    q.in[0] = (kn_fuse_operand){.type = &x, .in_group = true, .level = KN_LEVEL_FULL};
    int level = 0;
    const char *why = l5_refusal(&q, &level);
    cr_assert_null(why, "%s", why);
    cr_assert_eq(level, KN_LEVEL_OUTER);
    /* x / sum(x): a full node reading the row's sum, broadcast over the row */
    kn_fuse_query d = l5_query(KN_OP_DIV, &x, 2, S23);
    d.reduces = true;
    d.inner = 2u;
    d.nin = 2;
    d.in[0] = (kn_fuse_operand){.type = &x, .in_group = true, .level = KN_LEVEL_FULL};
    d.in[1] = (kn_fuse_operand){.type = &r, .in_group = true, .level = KN_LEVEL_OUTER};
    why = l5_refusal(&d, &level);
    cr_assert_null(why, "%s", why);
    cr_assert_eq(level, KN_LEVEL_FULL);
}

KN_TEST(lab05_index, row_offset_and_inner_index) {
    kn_kbuf b;
    const int64_t shape[3] = {4, 5, 6}, stride[3] = {30, 0, 1};
    kn_kernel k = l5_kernel(3, shape, 4u, 7, stride, &b);
    char out[128];
    KN_ASSERT_OK(l5_row_offset(&k, 0, out, sizeof out));
    cr_assert_str_eq(out, "7 + c0 * 30", "the broadcast axis 1 (stride 0) is skipped");
    KN_ASSERT_OK(l5_index(&k, 0, true, out, sizeof out));
    cr_assert_str_eq(out, "o0 + r");
    KN_ASSERT_OK(l5_index(&k, 0, false, out, sizeof out));
    cr_assert_str_eq(out, "o0");
}

KN_TEST(lab05_bind, float_math_and_literals) {
    const char *args[1] = {"f3"};
    char out[256];
    cr_assert(l5_bind("(0.5 * (x) * (1 + tanh(x)))", args, "x", true, out, sizeof out),
              "kn_render_c_bind returned false: %s", kn_last_error());
    cr_assert_str_eq(out, "(0.5f * ((f3)) * (1 + tanhf((f3))))");
    cr_assert(l5_bind("exp(x)", args, "x", false, out, sizeof out), "kn_render_c_bind returned false: %s",
              kn_last_error());
    cr_assert_str_eq(out, "exp((f3))");
}

KN_TEST(lab05_compiled, softmax_is_one_kernel_and_matches, .timeout = 60) {
    l5_cache();
    kn_graph *g = l5_parse("%0 = input {name=\"x\"} : f64[5,7]\n%1 = softmax %0 : f64[5,7]\noutput %1\n");
    kn_program_stats st;
    double err = l5_compare(g, 1, &st);
    cr_assert_leq(err, 1e-12);
    cr_assert_eq(st.mode, KN_PROGRAM_COMPILED);
    cr_assert_eq(st.nkernels, 1, "max, exp, sum, divide: one row kernel (got %d)", st.nkernels);
    kn_graph_free(g);
}

KN_TEST(lab05_compiled, random_graphs_match_the_interpreter, .timeout = 120) {
    l5_cache();
    kn_randgraph_opts ro = kn_randgraph_defaults();
    for (int s = 0; s < 30; s++) {
        kn_graph *g = NULL;
        KN_ASSERT_OK(kn_randgraph(&g, (uint64_t)s + 500, &ro));
        double tol = 1e-12;
        for (int i = 0; i < g->nnodes; i++)
            if (g->nodes[i].op == KN_OP_CAST && g->nodes[i].type.dtype == KN_DT_F32) tol = 2e-5;
        double err = l5_compare(g, (uint64_t)s, NULL);
        cr_assert_leq(err, tol, "seed %d: %.3g", s + 500, err);
        kn_graph_free(g);
    }
}

/* Graphs a GPT step is made of, each at a shape that tells the cases apart, compiled (your
 * fusion rules and index) against the interpreter:
 *   - a row statistic with its axis DROPPED, s = sum(x, axis 1) : [6], broadcast against x
 *     [6, 6]: it lines up with x's LAST axis (a column vector by numpy's rule), so it is not
 *     the row's statistic and must not join as one (only the keepdim form [6, 1] may);
 *   - a reduction over other axes than the group's, sum(x - max(x, axis 2), axes [1, 2]):
 *     its rows are not the group's rows, so it must start a new group;
 *   - a reduction over two inner axes that cannot merge into one (the bias b [4, 1] runs
 *     along axis 1 only), x / sum(x, axes [1, 2]) + b: r runs over both axes, and each
 *     buffer's offset takes each axis's coordinate times that buffer's stride. */
KN_TEST(lab05_compiled, broadcasts_other_axes_and_several_inner_axes, .timeout = 60) {
    l5_cache();
    static const char *const graphs[] = {
        "%0 = input {name=\"x\"} : f64[6,6]\n%1 = sum %0 {axes=[1]} : f64[6]\n%2 = sub %0, %1 : f64[6,6]\n"
        "output %2\n",
        "%0 = input {name=\"x\"} : f64[6,6]\n%1 = sum %0 {axes=[1], keepdim=1} : f64[6,1]\n%2 = sub %0, %1 : f64[6,6]\n"
        "output %2\n",
        "%0 = input {name=\"x\"} : f64[3,4,5]\n%1 = max %0 {axes=[2], keepdim=1} : f64[3,4,1]\n"
        "%2 = sub %0, %1 : f64[3,4,5]\n%3 = sum %2 {axes=[1,2]} : f64[3]\noutput %3\n",
        "%0 = input {name=\"x\"} : f64[3,4,5]\n%1 = input {name=\"b\"} : f64[4,1]\n"
        "%2 = sum %0 {axes=[1,2], keepdim=1} : f64[3,1,1]\n%3 = div %0, %2 : f64[3,4,5]\n"
        "%4 = add %3, %1 : f64[3,4,5]\noutput %4\n",
    };
    for (size_t i = 0; i < sizeof graphs / sizeof graphs[0]; i++) {
        kn_graph *g = l5_parse(graphs[i]);
        double err = l5_compare(g, 7 + i, NULL);
        cr_assert_leq(err, 1e-12, "graph %zu differs from the interpreter by %.3g:\n%s", i, err, graphs[i]);
        kn_graph_free(g);
    }
}
