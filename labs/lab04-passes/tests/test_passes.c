/* test_passes.c — lab 04 public tests: dead-code elimination, common-subexpression
 * elimination, the algebraic rules and the view rules, each on small graphs whose result
 * is known, plus random graphs checked numerically (kn_randgraph, kn_graph_compare). */
#include "check.h"

#define X2 "%0 = input {name=\"x\"} : f32[2,3]\n"

KN_TEST(lab04_dce, removes_what_no_output_uses) {
    kn_pass_report rep;
    kn_graph *g = l4_parse(X2 "%1 = tanh %0 : f32[2,3]\n%2 = exp %0 : f32[2,3]\n%3 = neg %2 : f32[2,3]\n"
                              "%4 = sum %1 {axes=[1]} : f32[2]\noutput %4\n");
    kn_graph_free(l4_run(g, "dce", X2 "%1 = tanh %0 : f32[2,3]\n%2 = sum %1 {axes=[1]} : f32[2]\noutput %2\n", &rep));
    cr_assert(l4_fired(&rep, 0, "dead") == 2, "two nodes removed, counted as \"dead\"");
    kn_graph_free(g);
}

KN_TEST(lab04_dce, keeps_inputs_params_and_outputs) {
    const char *in = X2 "%1 = param {name=\"unused\"} : f32[4]\n%2 = relu %1 : f32[4]\noutput %0\n";
    l4_expect(in, "dce", X2 "%1 = param {name=\"unused\"} : f32[4]\noutput %0\n");
}

KN_TEST(lab04_cse, merges_equal_nodes) {
    kn_pass_report rep;
    kn_graph *g = l4_parse(X2 "%1 = tanh %0 : f32[2,3]\n%2 = tanh %0 : f32[2,3]\n%3 = add %1, %2 : f32[2,3]\noutput %3\n");
    kn_graph_free(l4_run(g, "cse", X2 "%1 = tanh %0 : f32[2,3]\n%2 = add %1, %1 : f32[2,3]\noutput %2\n", &rep));
    cr_assert(l4_fired(&rep, 0, "merged") == 1);
    kn_graph_free(g);
}

KN_TEST(lab04_cse, merges_through_earlier_merges) {
    l4_expect(X2 "%1 = exp %0 : f32[2,3]\n%2 = exp %0 : f32[2,3]\n%3 = neg %1 : f32[2,3]\n%4 = neg %2 : f32[2,3]\n"
                 "output %3, %4\n",
              "cse", X2 "%1 = exp %0 : f32[2,3]\n%2 = neg %1 : f32[2,3]\noutput %2, %2\n");
}

KN_TEST(lab04_cse, different_attributes_or_random_ops_stay) {
    const char *in = X2 "%1 = sum %0 {axes=[0]} : f32[3]\n%2 = sum %0 {axes=[1]} : f32[2]\n"
                        "%3 = dropout %0 {p=0.5, seed=1} : f32[2,3]\n%4 = dropout %0 {p=0.5, seed=1} : f32[2,3]\n"
                        "output %1, %2, %3, %4\n";
    kn_graph *g = l4_parse(in);
    kn_graph *c = l4_run(g, "cse", NULL, NULL);
    cr_assert(c->nnodes == 5, "nothing to merge: two different sums, two dropouts (each draws its own mask)");
    kn_graph_free(c);
    kn_graph_free(g);
}

KN_TEST(lab04_algebra, identities) {
    l4_expect(X2 "%1 = full {value=1} : f32[]\n%2 = mul %0, %1 : f32[2,3]\n%3 = full : f32[]\n"
                 "%4 = add %3, %2 : f32[2,3]\n%5 = neg %4 : f32[2,3]\n%6 = neg %5 : f32[2,3]\noutput %6\n",
              "algebra,dce", X2 "output %0\n");
}

KN_TEST(lab04_algebra, only_when_the_type_is_kept) {
    const char *in = X2 "%1 = full {value=1} : f32[4,2,3]\n%2 = mul %0, %1 : f32[4,2,3]\noutput %2\n";
    l4_expect(in, "algebra", in);
}

KN_TEST(lab04_algebra, exact_casts_only) {
    l4_expect("%0 = input {name=\"x\"} : f32[2]\n%1 = cast %0 {dtype=f64} : f64[2]\n%2 = cast %1 {dtype=f32} : f32[2]\n"
              "%3 = cast %2 {dtype=f64} : f64[2]\n%4 = cast %3 {dtype=f32} : f32[2]\noutput %4\n",
              "algebra,dce", "%0 = input {name=\"x\"} : f32[2]\noutput %0\n");
    const char *lossy = "%0 = input {name=\"x\"} : f64[2]\n%1 = cast %0 {dtype=f32} : f32[2]\n"
                        "%2 = cast %1 {dtype=f64} : f64[2]\noutput %2\n";
    l4_expect(lossy, "algebra", lossy);
}

KN_TEST(lab04_views, chains_collapse) {
    l4_expect("%0 = input {name=\"x\"} : f32[2,3,4]\n%1 = reshape %0 {shape=[6,4]} : f32[6,4]\n"
              "%2 = reshape %1 {shape=[24]} : f32[24]\n%3 = permute %0 {perm=[2,0,1]} : f32[4,2,3]\n"
              "%4 = permute %3 {perm=[1,2,0]} : f32[2,3,4]\noutput %2, %4\n",
              "views,dce", "%0 = input {name=\"x\"} : f32[2,3,4]\n%1 = reshape %0 {shape=[24]} : f32[24]\noutput %1, %0\n");
}

KN_TEST(lab04_views, broadcasts) {
    l4_expect("%0 = input {name=\"b\"} : f32[3]\n%1 = broadcast_to %0 {shape=[2,3]} : f32[2,3]\n"
              "%2 = broadcast_to %1 {shape=[4,2,3]} : f32[4,2,3]\n%3 = full {value=2} : f32[]\n"
              "%4 = broadcast_to %3 {shape=[2,3]} : f32[2,3]\n%5 = add %4, %1 : f32[2,3]\noutput %2, %5\n",
              "views,dce",
              "%0 = input {name=\"b\"} : f32[3]\n%1 = broadcast_to %0 {shape=[4,2,3]} : f32[4,2,3]\n"
              "%2 = full {value=2} : f32[2,3]\n%3 = add %2, %0 : f32[2,3]\noutput %1, %3\n");
}

KN_TEST(lab04_random, every_pass_keeps_the_numbers, .timeout = 200) {
    static const char *const lists[] = {"dce", "cse", "algebra", "views", "all"};
    for (uint64_t s = 0; s < 60; s++) {
        kn_graph *g = NULL;
        KN_ASSERT_OK(kn_randgraph(&g, s, NULL));
        for (int i = 0; i < 5; i++) kn_graph_free(l4_run(g, lists[i], NULL, NULL));
        kn_graph_free(g);
    }
}
