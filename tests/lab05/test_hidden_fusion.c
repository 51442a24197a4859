/* test_hidden_fusion.c — lab 05 hidden tests: every fusion rule with its reason and its near
 * miss, the outer forms (keepdim and dropped axes), horizontal joins, the index arithmetic
 * of several axes and its limits, expression binding in detail, and the compiled program
 * on the GPT, on row kernels and on random graphs against the interpreter. */
#include <math.h>

#include "../../labs/lab05-fusion/tests/check.h"

static const int64_t S234[3] = {2, 3, 4};

static const char *ask(kn_fuse_query *q, int *level) {
    *level = 0;
    return l5_refusal(q, level);
}

KN_TEST(lab05_hidden_rules, each_refusal_names_its_reason) {
    kn_type t = {KN_DT_F32, 3, {2, 3, 4}}, other = {KN_DT_F32, 3, {2, 3, 5}}, row = {KN_DT_F32, 3, {2, 3, 1}};
    int lv;
    kn_fuse_query q = l5_query(KN_OP_EXP, &t, 3, S234);
    q.size = KN_FUSE_MAX - 1;
    cr_assert_null(ask(&q, &lv));
    q.size = KN_FUSE_MAX;
    cr_assert_str_eq(ask(&q, &lv), "the group is full (KN_FUSE_MAX nodes)");
    q = l5_query(KN_OP_EXP, &other, 3, S234);
    cr_assert_str_eq(ask(&q, &lv), "its shape is neither the group's space nor the space without the reduced axes");
    q = l5_query(KN_OP_EXP, &row, 3, S234);
    cr_assert_str_eq(ask(&q, &lv), "its shape is neither the group's space nor the space without the reduced axes",
                     "an outer shape without a reduction in the group");
    q.reduces = true;
    q.inner = 4u;
    cr_assert_null(ask(&q, &lv));
    cr_assert_eq(lv, KN_LEVEL_OUTER);
    q.op = KN_OP_CAUSAL_FILL;
    cr_assert_str_eq(ask(&q, &lv), "causal_fill of a reduced value");
    q = l5_query(KN_OP_CAUSAL_FILL, &t, 3, S234);
    cr_assert_null(ask(&q, &lv));
    cr_assert_eq(lv, KN_LEVEL_FULL);
}

KN_TEST(lab05_hidden_rules, reductions) {
    kn_type x = {KN_DT_F64, 3, {2, 3, 4}}, y = {KN_DT_F64, 3, {2, 3, 5}}, r = {KN_DT_F64, 2, {2, 3}};
    int lv;
    kn_fuse_query q = l5_query(KN_OP_MAX, &r, 3, S234);
    q.nin = 1;
    q.mask = 4u;
    q.in[0] = (kn_fuse_operand){.type = &x};
    cr_assert_str_eq(ask(&q, &lv), "a reduction of a value from outside the group");
    q.horizontal = true;
    cr_assert_null(ask(&q, &lv), "beside the group (horizontal) a reduction may read memory");
    cr_assert_eq(lv, KN_LEVEL_OUTER);
    q.horizontal = false;
    q.in[0] = (kn_fuse_operand){.type = &x, .in_group = true, .level = KN_LEVEL_OUTER};
    cr_assert_str_eq(ask(&q, &lv), "a reduction of a value from outside the group", "an outer value cannot be reduced");
    q.in[0].level = KN_LEVEL_FULL;
    cr_assert_null(ask(&q, &lv));
    q.reduces = true;
    q.inner = 6u;
    cr_assert_str_eq(ask(&q, &lv), "a reduction over other axes than the group's");
    q.inner = 4u;
    cr_assert_null(ask(&q, &lv));
    q.reduces = false;
    q.in[0].type = &y;
    cr_assert_str_eq(ask(&q, &lv), "a reduction of a value of another shape");
}

KN_TEST(lab05_hidden_rules, operands_of_the_group) {
    kn_type t = {KN_DT_F32, 3, {2, 3, 4}}, keep = {KN_DT_F32, 3, {2, 3, 1}}, drop = {KN_DT_F32, 2, {2, 3}},
            col = {KN_DT_F32, 3, {2, 1, 4}};
    int lv;
    kn_fuse_query q = l5_query(KN_OP_SUB, &t, 3, S234);
    q.reduces = true;
    q.inner = 4u;
    q.nin = 2;
    q.in[0] = (kn_fuse_operand){.type = &t, .in_group = true, .level = KN_LEVEL_FULL};
    q.in[1] = (kn_fuse_operand){.type = &keep, .in_group = true, .level = KN_LEVEL_OUTER};
    cr_assert_null(ask(&q, &lv), "x - max(x, keepdim)");
    cr_assert_eq(lv, KN_LEVEL_FULL);
    q.in[1].type = &drop;
    cr_assert_str_eq(ask(&q, &lv), "an operand of the group broadcast in a way the kernel cannot index",
                     "a dropped-axes statistic does not broadcast over the row");
    q.in[1] = (kn_fuse_operand){.type = &col, .in_group = true, .level = KN_LEVEL_OUTER};
    cr_assert_str_eq(ask(&q, &lv), "an operand of the group broadcast in a way the kernel cannot index");
    q.in[1] = (kn_fuse_operand){.type = &t, .in_group = true, .level = KN_LEVEL_OUTER};
    cr_assert_str_eq(ask(&q, &lv), "an operand of the group at another level");
    /* an outer node (squeezed form) from two outer values */
    kn_fuse_query o = l5_query(KN_OP_ADD, &drop, 3, S234);
    o.reduces = true;
    o.inner = 4u;
    o.nin = 2;
    o.in[0] = (kn_fuse_operand){.type = &drop, .in_group = true, .level = KN_LEVEL_OUTER};
    o.in[1] = (kn_fuse_operand){.type = &drop, .in_group = true, .level = KN_LEVEL_OUTER};
    cr_assert_null(ask(&o, &lv));
    cr_assert_eq(lv, KN_LEVEL_OUTER);
    o.in[1].level = KN_LEVEL_FULL;
    cr_assert_str_eq(ask(&o, &lv), "an operand of the group at another level");
}

KN_TEST(lab05_hidden_rules, operands_from_memory) {
    kn_type t = {KN_DT_F32, 3, {2, 3, 4}};
    int lv;
    kn_fuse_query q = l5_query(KN_OP_MUL, &t, 3, S234);
    q.nin = 2;
    q.in[0] = (kn_fuse_operand){.type = &t, .in_group = true, .level = KN_LEVEL_FULL};
    q.in[1] = (kn_fuse_operand){.type = &t, .constant = true, .view_of_group = true};
    cr_assert_null(ask(&q, &lv), "a constant is a literal, whatever else is said of it");
    q.in[1] = (kn_fuse_operand){.type = &t, .view_of_group = true, .depends_on_group = true};
    cr_assert_str_eq(ask(&q, &lv), "reads a value of the group through a view");
    q.in[1] = (kn_fuse_operand){.type = &t, .depends_on_group = true};
    cr_assert_str_eq(ask(&q, &lv), "an operand from outside depends on the group (a cycle)");
    q.in[1] = (kn_fuse_operand){.type = &t};
    cr_assert_null(ask(&q, &lv));
    q.sealed = true;
    q.in[1].depends_on_group = true;
    cr_assert_str_eq(ask(&q, &lv), "the group is sealed (a node outside it already reads it)", "the first rule wins");
    cr_assert_eq(lv, 0, "no level on a refusal");
}

KN_TEST(lab05_hidden_rules, shapes_axis_by_axis) {
    int lv;
    /* every axis counts: a difference in the first or the last axis is another shape */
    kn_type a0 = {KN_DT_F32, 3, {3, 3, 4}}, a2 = {KN_DT_F32, 3, {2, 3, 5}};
    kn_fuse_query q = l5_query(KN_OP_NEG, &a0, 3, S234);
    cr_assert_not_null(ask(&q, &lv));
    q.type = &a2;
    cr_assert_not_null(ask(&q, &lv));
    /* keepdim outer forms: first and last axes checked too */
    q.reduces = true;
    q.inner = 2u; /* axis 1 reduced */
    kn_type k_ok = {KN_DT_F32, 3, {2, 1, 4}}, k0 = {KN_DT_F32, 3, {3, 1, 4}}, k2 = {KN_DT_F32, 3, {2, 1, 5}};
    q.type = &k_ok;
    cr_assert_null(ask(&q, &lv));
    cr_assert_eq(lv, KN_LEVEL_OUTER);
    q.type = &k0;
    cr_assert_not_null(ask(&q, &lv));
    q.type = &k2;
    cr_assert_not_null(ask(&q, &lv));
    /* dropped-axes forms: {2,4} for S {2,3,4} reduced over axis 1; too short, too long, wrong */
    kn_type d_ok = {KN_DT_F32, 2, {2, 4}}, d_short = {KN_DT_F32, 1, {2}}, d_bad = {KN_DT_F32, 2, {2, 5}},
            d_first = {KN_DT_F32, 2, {3, 4}};
    q.type = &d_ok;
    cr_assert_null(ask(&q, &lv));
    q.type = &d_short;
    cr_assert_not_null(ask(&q, &lv), "an outer shape missing an axis");
    q.type = &d_bad;
    cr_assert_not_null(ask(&q, &lv));
    q.type = &d_first;
    cr_assert_not_null(ask(&q, &lv));
    /* reduced over axis 0: the outer axes are 1 and 2, the last one included */
    q.inner = 1u;
    kn_type e_ok = {KN_DT_F32, 2, {3, 4}}, e_bad = {KN_DT_F32, 2, {3, 7}};
    q.type = &e_ok;
    cr_assert_null(ask(&q, &lv));
    q.type = &e_bad;
    cr_assert_not_null(ask(&q, &lv));
    /* a group that does not reduce has no outer values, whatever its inner field says */
    q.reduces = false;
    q.inner = 4u;
    kn_type row = {KN_DT_F32, 3, {2, 3, 1}};
    q.type = &row;
    cr_assert_str_eq(ask(&q, &lv), "its shape is neither the group's space nor the space without the reduced axes");
}

KN_TEST(lab05_hidden_rules, every_operand_and_only_those) {
    kn_type t = {KN_DT_F32, 3, {2, 3, 4}};
    int lv;
    kn_fuse_query q = l5_query(KN_OP_WHERE, &t, 3, S234);
    q.nin = 3;
    q.in[0] = (kn_fuse_operand){.type = &t, .view_of_group = true};
    q.in[1] = (kn_fuse_operand){.type = &t, .in_group = true, .level = KN_LEVEL_FULL};
    q.in[2] = (kn_fuse_operand){.type = &t};
    cr_assert_str_eq(ask(&q, &lv), "reads a value of the group through a view", "the first operand counts");
    q.in[0] = (kn_fuse_operand){.type = &t};
    q.in[2] = (kn_fuse_operand){.type = &t, .depends_on_group = true};
    cr_assert_str_eq(ask(&q, &lv), "an operand from outside depends on the group (a cycle)", "the last operand counts");
    q.nin = 2;
    cr_assert_null(ask(&q, &lv), "an entry past nin is not an operand");
    q = l5_query(KN_OP_SUM, &t, 3, S234); /* a reduction reads one operand */
    kn_type r = {KN_DT_F32, 2, {2, 3}};
    q.type = &r;
    q.mask = 4u;
    q.nin = 1;
    q.in[0] = (kn_fuse_operand){.type = &t, .in_group = true, .level = KN_LEVEL_FULL};
    q.in[1] = (kn_fuse_operand){.type = &t, .view_of_group = true, .depends_on_group = true};
    cr_assert_null(ask(&q, &lv));
}

KN_TEST(lab05_hidden_index, several_axes_strides_and_limits) {
    kn_kbuf b;
    const int64_t shape[4] = {3, 4, 5, 6}, stride[4] = {120, 1, 24, 0};
    kn_kernel k = l5_kernel(4, shape, 6u, 0, stride, &b); /* inner axes 1 and 2 */
    char out[128];
    KN_ASSERT_OK(l5_row_offset(&k, 0, out, sizeof out));
    cr_assert_str_eq(out, "0 + c0 * 120");
    KN_ASSERT_OK(l5_index(&k, 0, true, out, sizeof out));
    cr_assert_str_eq(out, "o0 + r1 + r2 * 24");
    const int64_t st2[4] = {0, 0, 0, 7};
    kn_kernel k2 = l5_kernel(4, shape, 0u, 5, st2, &b);
    KN_ASSERT_OK(l5_row_offset(&k2, 0, out, sizeof out));
    cr_assert_str_eq(out, "5 + c3 * 7");
    KN_ASSERT_OK(l5_index(&k2, 0, true, out, sizeof out));
    cr_assert_str_eq(out, "o0", "no inner axis");
    const int64_t st3[4] = {1, 2, 3, 4};
    kn_kernel k3 = l5_kernel(4, shape, 8u, 0, st3, &b);
    KN_ASSERT_OK(l5_row_offset(&k3, 0, out, sizeof out));
    cr_assert_str_eq(out, "0 + c0 * 1 + c1 * 2 + c2 * 3", "outer strides of 1 are written out");
    KN_ASSERT_OK(l5_index(&k3, 0, true, out, sizeof out));
    cr_assert_str_eq(out, "o0 + r * 4");
    cr_assert_eq(l5_index(&k3, 0, true, out, 6), KN_ERR_ARG, "too long for the buffer");
    cr_assert_eq(l5_row_offset(&k3, 0, out, 8), KN_ERR_ARG);
    cr_assert_eq(l5_index(&k3, 1, true, out, sizeof out), KN_ERR_ARG, "no buffer 1");
    /* a failure leaves an empty string, whatever was in the buffer */
    memset(out, 'x', sizeof out);
    cr_assert_eq(l5_row_offset(&k3, 0, out, 2), KN_ERR_ARG);
    cr_assert_eq(out[0], 0);
    memset(out, 'x', sizeof out);
    cr_assert_eq(l5_index(&k3, 0, true, out, 2), KN_ERR_ARG);
    cr_assert_eq(out[0], 0);
    /* only the space's axes: what lies past ndim in the stride array is not an axis */
    kn_kbuf b2;
    const int64_t sh2[2] = {3, 4}, st5[3] = {4, 1, 9};
    kn_kernel k5 = l5_kernel(2, sh2, 2u, 0, st5, &b2);
    b2.stride[2] = 9;
    KN_ASSERT_OK(l5_row_offset(&k5, 0, out, sizeof out));
    cr_assert_str_eq(out, "0 + c0 * 4");
    KN_ASSERT_OK(l5_index(&k5, 0, true, out, sizeof out));
    cr_assert_str_eq(out, "o0 + r");
}

KN_TEST(lab05_hidden_bind, names_literals_and_limits) {
    const char *args[3] = {"a7", "w2", "t1"};
    char out[256];
    cr_assert(l5_bind("((a) > (b) || (a) != (a) ? (a) : (b))", args, "ab", false, out, sizeof out));
    cr_assert_str_eq(out, "(((a7)) > ((w2)) || ((a7)) != ((a7)) ? ((a7)) : ((w2)))");
    cr_assert(l5_bind("(1 / sqrt(x)) + 1e-5 + 2.5E+3 + 3", args, "x", true, out, sizeof out));
    cr_assert_str_eq(out, "(1 / sqrtf((a7))) + 1e-5f + 2.5E+3f + 3", "integers stay, floating literals get f");
    cr_assert(l5_bind("pow(a, b) + fabs(b) + xb + exp2(a)", args, "ab", true, out, sizeof out));
    cr_assert_str_eq(out, "powf((a7), (w2)) + fabsf((w2)) + xb + exp2((a7))", "only one-letter names, only the listed math");
    cr_assert(l5_bind("(a) * (t) + sin(b) * cos(b) * log(b) * tanh(b)", args, "abt", true, out, sizeof out));
    cr_assert_str_eq(out, "((a7)) * ((t1)) + sinf((w2)) * cosf((w2)) * logf((w2)) * tanhf((w2))");
    cr_assert(!l5_bind("exp(x)", args, "x", true, out, 8), "does not fit");
    cr_assert(l5_bind("Aexp + Zexp + _exp + zexp + exp(x) + 9.5 + 2.0-(x)", args, "x", true, out, sizeof out));
    cr_assert_str_eq(out, "Aexp + Zexp + _exp + zexp + expf((a7)) + 9.5f + 2.0f-((a7))",
                     "identifiers start with any letter or _; numbers with any digit; a sign only after an exponent");
    /* every cap short of the whole result fails; the exact one succeeds */
    const char *tmpl = "exp(x) * 0.5 + tanh(b)";
    const char *args2[2] = {"f1", "w2"};
    char full[128];
    cr_assert(l5_bind(tmpl, args2, "xb", true, full, sizeof full));
    size_t need = strlen(full) + 1;
    for (size_t cap = 1; cap < need; cap++)
        cr_assert(!l5_bind(tmpl, args2, "xb", true, out, cap), "cap %zu of %zu must not fit", cap, need);
    cr_assert(l5_bind(tmpl, args2, "xb", true, out, need));
    cr_assert_str_eq(out, full);
    memset(out, 'x', sizeof out);
    cr_assert(l5_bind("", args2, "xb", true, out, sizeof out));
    cr_assert_str_eq(out, "", "an empty template binds to an empty string");
}

KN_TEST(lab05_hidden_compiled, gpt_step_fuses_and_matches, .timeout = 120) {
    l5_cache();
    kn_gpt_config c = {.vocab = 13, .context = 8, .layers = 2, .width = 16, .heads = 2};
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_gpt_graph(&c, 2, 8, true, &g));
    kn_program_stats st;
    double err = l5_compare(g, 3, &st);
    cr_assert_leq(err, 2e-5);
    int arith = 0;
    for (int i = 0; i < g->nnodes; i++) {
        kn_op_category cat = kn_op_get(g->nodes[i].op)->category;
        arith += cat == KN_CAT_ELEMENTWISE || cat == KN_CAT_REDUCTION || cat == KN_CAT_OTHER;
    }
    cr_assert_lt(st.nkernels * 2, arith, "%d kernels for %d arithmetic nodes", st.nkernels, arith);
    cr_assert_lt(st.nsteps, st.nodes_computing);
    kn_graph_free(g);
}

KN_TEST(lab05_hidden_compiled, row_kernels_and_views, .timeout = 60) {
    l5_cache();
    const char *cases[] = {
        "%0 = input {name=\"x\"} : f64[6,10]\n%1 = param {name=\"w\"} : f64[10]\n%2 = param {name=\"b\"} : f64[10]\n"
        "%3 = layernorm %0, %1, %2 : f64[6,10]\n%4 = softmax %3 : f64[6,10]\noutput %4\n",
        "%0 = input {name=\"x\"} : f64[2,3,5,5]\n%1 = causal_softmax %0 {scale=0.5} : f64[2,3,5,5]\noutput %1\n",
        "%0 = input {name=\"x\"} : f64[4,9]\n%1 = log_softmax %0 : f64[4,9]\noutput %1\n",
        "%0 = input {name=\"x\"} : f64[4,8]\n%1 = input {name=\"b\"} : f64[8]\n%2 = input {name=\"y\"} : f64[8,4]\n"
        "%3 = permute %2 {perm=[1,0]} : f64[4,8]\n%4 = add %0, %1 : f64[4,8]\n%5 = mul %4, %3 : f64[4,8]\n"
        "%6 = tanh %5 : f64[4,8]\n%7 = slice %6 {axis=1, start=1, stop=7, step=2} : f64[4,3]\n%8 = exp %7 : f64[4,3]\n"
        "output %8\n",
    };
    const int kernels[] = {1, 1, 1, 2};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        kn_graph *g = l5_parse(cases[i]);
        kn_program_stats st;
        cr_assert_leq(l5_compare(g, 4, &st), 1e-12, "case %zu", i);
        cr_assert_eq(st.nkernels, kernels[i], "case %zu: %d kernels", i, st.nkernels);
        cr_assert_eq(st.nsteps, kernels[i], "case %zu: no library step", i);
        kn_graph_free(g);
    }
}

KN_TEST(lab05_hidden_compiled, random_graphs_f32_and_f64, .timeout = 180) {
    l5_cache();
    for (int d = 0; d < 2; d++) {
        kn_randgraph_opts ro = kn_randgraph_defaults();
        ro.dtype = d ? KN_DT_F32 : KN_DT_F64;
        for (int s = 0; s < 40; s++) {
            kn_graph *g = NULL;
            KN_ASSERT_OK(kn_randgraph(&g, (uint64_t)s + 9000, &ro));
            double tol = d ? 2e-5 : 1e-12;
            for (int i = 0; i < g->nnodes; i++)
                if (g->nodes[i].op == KN_OP_CAST && g->nodes[i].type.dtype == KN_DT_F32) tol = 2e-5;
            double err = l5_compare(g, (uint64_t)s, NULL);
            cr_assert_leq(err, tol, "seed %d (%s): %.3g", s + 9000, d ? "f32" : "f64", err);
            kn_graph_free(g);
        }
    }
}
