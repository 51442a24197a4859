/* test_hidden_verify.c — lab 03 hidden tests: the verifier on the corpus of malformed IR
 * (ir_corpus.h, from tests/ir/bad: each must fail verification with its expected
 * message), the good corpus (verifies, and print(parse(print(g))) == print(g)), the
 * first problem reported when there are two, and random corruptions of good graphs,
 * none of which may crash. */
#include <string.h>

#include "ir_corpus.h"
#include "../../labs/lab03-ir/tests/check.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

KN_TEST(lab03_hidden_verify, bad_corpus_each_gives_its_error) {
    for (int i = 0; i < COUNT(l3_bad_ir); i++) {
        const l3_ir_case *c = &l3_bad_ir[i];
        kn_graph *g = NULL;
        KN_ASSERT_OK(kn_graph_parse(c->text, strlen(c->text), &g));
        kn_clear_error();
        kn_status st = kn_graph_verify(g);
        cr_assert(st != KN_OK, "%s: verifies, but should fail with \"%s\"", c->name, c->expect);
        cr_assert(strstr(kn_last_error(), c->expect), "%s: message \"%s\" should contain \"%s\"", c->name,
                  kn_last_error(), c->expect);
        kn_graph_free(g);
    }
}

KN_TEST(lab03_hidden_verify, good_corpus_verifies_and_round_trips) {
    for (int i = 0; i < COUNT(l3_good_ir); i++) {
        const l3_ir_case *c = &l3_good_ir[i];
        kn_graph *g = NULL, *h = NULL;
        KN_ASSERT_OK(kn_graph_parse(c->text, strlen(c->text), &g));
        KN_ASSERT_OK(kn_graph_verify(g));
        char *p1 = NULL, *p2 = NULL;
        KN_ASSERT_OK(kn_graph_to_string(g, &p1));
        KN_ASSERT_OK(kn_graph_parse(p1, strlen(p1), &h));
        KN_ASSERT_OK(kn_graph_verify(h));
        KN_ASSERT_OK(kn_graph_to_string(h, &p2));
        cr_assert(!strcmp(p1, p2), "%s: print(parse(print(g))) != print(g)", c->name);
        kn_free(p1);
        kn_free(p2);
        kn_graph_free(g);
        kn_graph_free(h);
    }
}

static const char good[] = "%0 = input {name=\"x\"} : f32[2,3]\n"
                           "%1 = param {name=\"w\"} : f32[3,4]\n"
                           "%2 = matmul %0, %1 : f32[2,4]\n"
                           "%3 = exp %2 : f32[2,4]\n"
                           "%4 = mul %3, %2 : f32[2,4]\n"
                           "%5 = mean %4 {axes=[0], keepdim=1} : f32[1,4]\n"
                           "%6 = reshape %5 {shape=[4]} : f32[4]\n"
                           "output %6, %4\n";

/* Two problems: the one at the lower node is reported. */
KN_TEST(lab03_hidden_verify, first_problem_wins) {
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_graph_parse(good, strlen(good), &g));
    KN_ASSERT_OK(kn_graph_verify(g));
    g->nodes[5].type.shape[1] = 9;
    g->nodes[3].nin = 2;
    g->nodes[3].in[1] = 0;
    KN_ASSERT_ERR(kn_graph_verify(g), KN_ERR_FORMAT);
    cr_assert(strstr(kn_last_error(), "%3 = exp: takes 1 operand, got 2"), "%s", kn_last_error());
    g->nodes[3].nin = 1;
    KN_ASSERT_ERR(kn_graph_verify(g), KN_ERR_SHAPE);
    cr_assert(strstr(kn_last_error(), "%5 = mean: declared type f32[1,9] but the operands give f32[1,4]"), "%s",
              kn_last_error());
    g->nodes[5].type.shape[1] = 4;
    g->nodes[6].op = (kn_op)(KN_OP_COUNT + 3);
    KN_ASSERT_ERR(kn_graph_verify(g), KN_ERR_FORMAT);
    cr_assert(strstr(kn_last_error(), "invalid op"), "%s", kn_last_error());
    g->nodes[6].op = KN_OP_RESHAPE;
    g->outputs[1] = -1;
    KN_ASSERT_ERR(kn_graph_verify(g), KN_ERR_FORMAT);
    cr_assert(strstr(kn_last_error(), "output 1: %-1 is not defined"), "%s", kn_last_error());
    kn_graph_free(g);
}

/* Bad declared types: negative dims, rank out of range, unknown dtype. */
KN_TEST(lab03_hidden_verify, invalid_declared_types) {
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_graph_parse(good, strlen(good), &g));
    g->nodes[0].type.shape[0] = -2;
    KN_ASSERT_ERR(kn_graph_verify(g), KN_ERR_SHAPE);
    cr_assert(strstr(kn_last_error(), "%0 = input"), "%s", kn_last_error());
    g->nodes[0].type.shape[0] = 2;
    g->nodes[2].type.ndim = KN_MAX_DIMS + 1;
    KN_ASSERT_ERR(kn_graph_verify(g), KN_ERR_SHAPE);
    cr_assert(strstr(kn_last_error(), "%2 = matmul: declared type is invalid (rank 9, dtype"), "%s", kn_last_error());
    g->nodes[2].type.ndim = -1;
    KN_ASSERT_ERR(kn_graph_verify(g), KN_ERR_SHAPE);
    cr_assert(strstr(kn_last_error(), "%2 = matmul: declared type is invalid (rank -1, dtype"), "%s", kn_last_error());
    g->nodes[2].type.ndim = 2;
    g->nodes[1].type.dtype = (kn_dtype)99;
    KN_ASSERT_ERR(kn_graph_verify(g), KN_ERR_SHAPE);
    cr_assert(strstr(kn_last_error(), "%1 = param"), "%s", kn_last_error());
    kn_graph_free(g);
}

/* The edges of what is valid: a value of rank KN_MAX_DIMS, and value %0 as an output. */
KN_TEST(lab03_hidden_verify, limits_are_valid) {
    static const char text[] = "%0 = input {name=\"x\"} : f32[1,2,1,2,1,2,1,2]\n"
                               "%1 = exp %0 : f32[1,2,1,2,1,2,1,2]\n"
                               "output %0, %1\n";
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_graph_parse(text, strlen(text), &g));
    cr_assert(g->nodes[1].type.ndim == KN_MAX_DIMS);
    KN_ASSERT_OK(kn_graph_verify(g));
    g->outputs[0] = 2;
    KN_ASSERT_ERR(kn_graph_verify(g), KN_ERR_FORMAT);
    cr_assert(strstr(kn_last_error(), "output 0: %2 is not defined"), "%s", kn_last_error());
    kn_graph_free(g);
}

/* 2000 random single-field corruptions of a good graph: the verifier returns (OK or an
 * error with a message), never crashes; a corruption of an operand id to a later or
 * negative value is always caught. */
KN_TEST(lab03_hidden_verify, random_corruptions_never_crash) {
    kn_graph *g0 = NULL;
    KN_ASSERT_OK(kn_graph_parse(good, strlen(good), &g0));
    kn_rng r = kn_rng_new(7);
    for (int trial = 0; trial < 2000; trial++) {
        kn_graph *g = NULL;
        KN_ASSERT_OK(kn_graph_copy(&g, g0));
        int i = (int)(kn_rng_u32(&r) % (uint32_t)g->nnodes);
        kn_node *n = &g->nodes[i];
        int what = (int)(kn_rng_u32(&r) % 6);
        int32_t v = (int32_t)(kn_rng_u32(&r) % 20) - 6;
        bool must_fail = false;
        switch (what) {
        case 0: n->op = (kn_op)((kn_rng_u32(&r) % (KN_OP_COUNT + 4))); break;
        case 1: n->nin = (int)(kn_rng_u32(&r) % 5); break;
        case 2:
            if (n->nin > 0) { n->in[0] = v; must_fail = v < 0 || v >= i; }
            break;
        case 3: n->type.ndim = (int)(kn_rng_u32(&r) % 10) - 1; break;
        case 4: n->type.shape[kn_rng_u32(&r) % 2] = v; break;
        default: n->attrs.naxes = (int)(kn_rng_u32(&r) % 3); n->attrs.axes[0] = v; break;
        }
        kn_clear_error();
        kn_status st = kn_graph_verify(g);
        if (st != KN_OK) cr_assert(kn_last_error()[0], "trial %d: an error without a message", trial);
        if (must_fail) cr_assert(st == KN_ERR_FORMAT, "trial %d: operand %d of %%%d not caught", trial, v, i);
        kn_graph_free(g);
    }
    kn_graph_free(g0);
}
