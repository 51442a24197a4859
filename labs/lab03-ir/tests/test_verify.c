/* test_verify.c — lab 03 public tests: kn_graph_verify accepts a well-typed graph and
 * rejects each kind of problem with its status and a message naming the node. The bad
 * graphs are the good one (check.h) with one field broken in memory. */
#include "check.h"

KN_TEST(lab03_verify, good_graph_passes) {
    kn_graph *g = l3_parse(l3_good);
    KN_ASSERT_OK(kn_graph_verify(g));
    kn_graph_free(g);
}

KN_TEST(lab03_verify, wrong_arity) {
    kn_graph *g = l3_parse(l3_good);
    g->nodes[4].nin = 1; /* add with one operand */
    l3_expect_verify_error(g, KN_ERR_FORMAT, "%4 = add: takes 2 operands, got 1");
    kn_graph_free(g);
}

KN_TEST(lab03_verify, operand_used_before_definition) {
    kn_graph *g = l3_parse(l3_good);
    g->nodes[3].in[0] = 4; /* tanh of a later value */
    l3_expect_verify_error(g, KN_ERR_FORMAT, "%3 = tanh: operand %4 is not defined before use");
    g->nodes[3].in[0] = 3; /* of itself: a cycle */
    l3_expect_verify_error(g, KN_ERR_FORMAT, "operand %3 is not defined before use");
    kn_graph_free(g);
}

KN_TEST(lab03_verify, declared_type_must_match_the_rule) {
    kn_graph *g = l3_parse(l3_good);
    g->nodes[2].type.shape[1] = 5; /* matmul of [2,3] and [3,4] declared [2,5] */
    l3_expect_verify_error(g, KN_ERR_SHAPE, "%2 = matmul: declared type f32[2,5] but the operands give f32[2,4]");
    g->nodes[2].type.shape[1] = 4;
    g->nodes[5].type.dtype = KN_DT_F64;
    l3_expect_verify_error(g, KN_ERR_DTYPE, "%5 = sum: declared type f64[2]");
    kn_graph_free(g);
}

KN_TEST(lab03_verify, shape_rule_failure_names_the_node) {
    kn_graph *g = l3_parse(l3_good);
    g->nodes[4].in[1] = 0; /* add f32[2,4] + f32[2,3] */
    l3_expect_verify_error(g, KN_ERR_SHAPE, "%4 = add: ");
    kn_graph_free(g);
}

KN_TEST(lab03_verify, names_are_unique) {
    kn_graph *g = l3_parse(l3_good);
    memcpy(g->nodes[1].attrs.name, "x", 2);
    l3_expect_verify_error(g, KN_ERR_ARG, "%1 = param: name \"x\" is already used by %0");
    kn_graph_free(g);
}

KN_TEST(lab03_verify, outputs_must_be_defined) {
    kn_graph *g = l3_parse(l3_good);
    g->outputs[0] = 6;
    l3_expect_verify_error(g, KN_ERR_FORMAT, "output 0: %6 is not defined");
    kn_graph_free(g);
}

KN_TEST(lab03_verify, attributes_are_checked) {
    kn_graph *g = l3_parse(l3_good);
    g->nodes[5].attrs.axes[0] = 2; /* sum over axis 2 of a 2-d value */
    KN_ASSERT_ERR(kn_graph_verify(g), KN_ERR_AXIS);
    cr_assert(strstr(kn_last_error(), "%5 = sum: "), "message names the node: %s", kn_last_error());
    kn_graph_free(g);
}
