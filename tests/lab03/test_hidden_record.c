/* test_hidden_record.c — lab 03 hidden tests: a corpus of bad builder calls, each with
 * its status and the public caller's name in the message; eager and graph mode record
 * identical graphs; random models captured and interpreted equal eager bit for bit, and
 * their printed graphs round-trip exactly. */
#include <string.h>

#include "../../labs/lab03-ir/tests/check.h"

typedef struct {
    const char *name;
    kn_status st;
    const char *part; /* the message must contain it */
} bad_case;

static void expect(kn_builder *b, const bad_case *c) {
    cr_assert(kn_builder_status(b) == c->st, "%s: status %s, expected %s (%s)", c->name,
              kn_status_name(kn_builder_status(b)), kn_status_name(c->st), kn_builder_error(b));
    cr_assert(strstr(kn_builder_error(b), c->part), "%s: message \"%s\" should contain \"%s\"", c->name,
              kn_builder_error(b), c->part);
}

KN_TEST(lab03_hidden_record, bad_calls_corpus) {
    static const bad_case cases[] = {
        {"add shapes", KN_ERR_SHAPE, "kn_add: "},
        {"matmul inner", KN_ERR_SHAPE, "kn_matmul"},
        {"operand out of range", KN_ERR_ARG, "kn_mul: operand 0 is not a value of this builder (id 99)"},
        {"wrong arity", KN_ERR_ARG, "mine: add takes 2 operands, got 1"},
        {"invalid op", KN_ERR_ARG, "mine: invalid op"},
        {"source without type", KN_ERR_ARG, "a source needs its type"},
        {"eager input without data", KN_ERR_ARG, "eager mode needs data for \"t\""},
        {"duplicate name", KN_ERR_ARG, "kn_param_typed: the name \"x\" is already used"},
        {"sum axis", KN_ERR_AXIS, "kn_sum: "},
        {"dtype mismatch", KN_ERR_DTYPE, "kn_sub: "},
        {"negative dim", KN_ERR_SHAPE, "kn_full: "},
        {"bad attribute", KN_ERR_ARG, "kn_dropout: dropout p 1.5 must be in [0, 1)"},
        {"NULL operands", KN_ERR_ARG, "mine: add takes 2 operands, got 2"},
        {"NULL operand", KN_ERR_ARG, "mine: neg takes 1 operands, got 1"},
        {"too many elements", KN_ERR_SHAPE,
         "kn_input_typed: result f32[1073741824,1073741824] has a negative dimension or too many elements"},
        {"eager kernel fails", KN_ERR_ARG, "kn_cross_entropy: "},
    };
    int ncase = (int)(sizeof cases / sizeof cases[0]);
    int64_t s23[] = {2, 3}, s4[] = {4}, s45[] = {4, 5}, neg[] = {2, -1}, huge[] = {1 << 30, 1 << 30}, s2[] = {2};
    kn_tensor *xt = NULL, *tt = NULL; /* eager: logits [2,3], targets {0, 7}: 7 is out of range */
    KN_ASSERT_OK(kn_tensor_full(&xt, KN_DT_F32, 2, s23, 0.5));
    KN_ASSERT_OK(kn_tensor_full(&tt, KN_DT_I64, 1, s2, 0.0));
    ((int64_t *)kn_tensor_data(tt))[1] = 7;
    for (int c = 0; c < ncase; c++) {
        kn_builder *b = NULL;
        bool eager = c == 6 || c == 15;
        KN_ASSERT_OK(kn_builder_new(&b, eager ? KN_MODE_EAGER : KN_MODE_GRAPH));
        kn_val x = c == 6 ? KN_VAL_NONE : eager ? kn_input(b, "x", xt) : kn_input_typed(b, "x", KN_DT_F32, 2, s23);
        kn_attrs a = kn_attrs_default();
        int ax[] = {5};
        int before = l3_nnodes(b);
        kn_val r = KN_VAL_NONE;
        switch (c) {
        case 0: r = kn_add(b, x, kn_input_typed(b, "y", KN_DT_F32, 1, s4)); break;
        case 1: r = kn_matmul(b, x, kn_input_typed(b, "y", KN_DT_F32, 2, s45)); break;
        case 2: r = kn_mul(b, (kn_val){99}, x); break;
        case 3: r = kn_builder_op(b, "mine", KN_OP_ADD, 1, &x, NULL, NULL); break;
        case 4: r = kn_builder_op(b, "mine", (kn_op)(KN_OP_COUNT + 1), 0, NULL, NULL, NULL); break;
        case 5: memcpy(a.name, "z", 2); r = kn_builder_op(b, "mine", KN_OP_INPUT, 0, NULL, &a, NULL); break;
        case 6: r = kn_input_typed(b, "t", KN_DT_F32, 1, s4); break;
        case 7: r = kn_param_typed(b, "x", KN_DT_F32, 1, s4); break;
        case 8: r = kn_sum(b, x, 1, ax, false); break;
        case 9: r = kn_sub(b, x, kn_cast(b, x, KN_DT_F64)); break;
        case 10: r = kn_full(b, KN_DT_F32, 2, neg, 0.0); break;
        case 11: r = kn_dropout(b, x, 1.5, 1, 0); break;
        case 12: r = kn_builder_op(b, "mine", KN_OP_ADD, 2, NULL, NULL, NULL); break;
        case 13: r = kn_builder_op(b, "mine", KN_OP_NEG, 1, NULL, NULL, NULL); break;
        case 14: r = kn_input_typed(b, "big", KN_DT_F32, 2, huge); break;
        default: r = kn_cross_entropy(b, x, kn_input(b, "t", tt)); break;
        }
        cr_assert(!kn_val_ok(r), "%s: returned a value", cases[c].name);
        expect(b, &cases[c]);
        int after = l3_nnodes(b);
        cr_assert(after <= before + 1, "%s: a failed call appended a node", cases[c].name); /* +1: the operand made for it */
        cr_assert(!kn_val_ok(kn_neg(b, x)) && l3_nnodes(b) == after, "%s: not sticky", cases[c].name);
        kn_builder_free(b);
    }
    kn_tensor_free(xt);
    kn_tensor_free(tt);
}

/* Out of memory anywhere in a call (kn_alloc_fail_after: the kernel's output in eager
 * mode, the node array or the eager values growing past 64, ...): the call returns
 * KN_VAL_NONE, the builder fails with KN_ERR_OOM (not some later error), and the graph
 * keeps the nodes it had. Each builder records a chain of 70 calls, every allocation of
 * which fails in one of the runs. */
KN_TEST(lab03_hidden_record, out_of_memory_fails_cleanly) {
    int64_t s[] = {3, 4};
    kn_tensor *xt = NULL;
    KN_ASSERT_OK(kn_tensor_full(&xt, KN_DT_F32, 2, s, 0.25));
    int failures = 0;
    for (int mode = 0; mode < 2; mode++) {
        for (long k = 0; k < 200; k++) {
            kn_builder *b = NULL;
            KN_ASSERT_OK(kn_builder_new(&b, mode ? KN_MODE_EAGER : KN_MODE_GRAPH));
            kn_val h = mode ? kn_input(b, "x", xt) : kn_input_typed(b, "x", KN_DT_F32, 2, s);
            KN_ASSERT_OK(kn_builder_status(b));
            if (!kn_out_checking()) kn_alloc_fail_after(k); /* the checker only reads your run's results */
            int i = 0;
            for (; i < 70; i++) {
                int before = l3_nnodes(b);
                kn_val r = kn_tanh(b, h);
                if (!kn_val_ok(r)) {
                    kn_status st = kn_builder_status(b);
                    kn_alloc_fail_after(-1);
                    cr_assert(st == KN_ERR_OOM, "%s mode, allocation %ld fails: builder status %s (%s), expected "
                              "KN_ERR_OOM", mode ? "eager" : "graph", k, kn_status_name(st), kn_builder_error(b));
                    cr_assert(strstr(kn_builder_error(b), "kn_tanh: "), "message \"%s\"", kn_builder_error(b));
                    cr_assert(l3_nnodes(b) == before, "a failed call changed the graph");
                    failures++;
                    break;
                }
                h = r;
            }
            kn_alloc_fail_after(-1);
            if (i == 70) KN_ASSERT_OK(kn_builder_status(b));
            kn_builder_free(b);
        }
    }
    cr_assert(failures > 100, "only %d calls ran out of memory: the sweep no longer reaches the builder", failures);
    kn_tensor_free(xt);
}

/* A random MLP-ish model from a seed: a mix of elementwise, reductions and matmuls. */
static kn_val model(kn_builder *b, kn_val x, kn_val w, uint64_t seed) {
    kn_rng r = kn_rng_new(seed);
    kn_val h = x;
    int ax[] = {-1};
    for (int i = 0; i < 6; i++) {
        switch (kn_rng_u32(&r) % 6) {
        case 0: h = kn_tanh(b, h); break;
        case 1: h = kn_matmul(b, h, w); break;
        case 2: h = kn_sub(b, h, kn_mean(b, h, 1, ax, true)); break;
        case 3: h = kn_mul(b, h, kn_exp(b, kn_neg(b, kn_mul(b, h, h)))); break;
        case 4: h = kn_softmax(b, h, -1); break;
        default: h = kn_add_scalar(b, kn_gelu(b, h), 0.5); break;
        }
    }
    return h;
}

KN_TEST(lab03_hidden_record, eager_equals_captured_random_models) {
    int64_t s[] = {3, 4}, ws[] = {4, 4};
    kn_rng r = kn_rng_new(3);
    kn_tensor *x = NULL, *w = NULL;
    KN_ASSERT_OK(kn_tensor_randn(&x, KN_DT_F32, 2, s, &r));
    KN_ASSERT_OK(kn_tensor_randn(&w, KN_DT_F32, 2, ws, &r));
    for (uint64_t seed = 0; seed < 12; seed++) {
        kn_builder *e = NULL, *g = NULL;
        KN_ASSERT_OK(kn_builder_new(&e, KN_MODE_EAGER));
        KN_ASSERT_OK(kn_builder_new(&g, KN_MODE_GRAPH));
        kn_val ye = model(e, kn_input(e, "x", x), kn_param(e, "w", w), seed);
        kn_val yg = model(g, kn_input(g, "x", x), kn_param(g, "w", w), seed);
        KN_ASSERT_OK(kn_builder_status(e));
        /* both modes record the same graph */
        char *pe = NULL, *pg = NULL, *pr = NULL;
        kn_builder_output(e, ye);
        kn_builder_output(g, yg);
        KN_ASSERT_OK(kn_graph_to_string(kn_builder_graph(e), &pe));
        KN_ASSERT_OK(kn_graph_to_string(kn_builder_graph(g), &pg));
        cr_assert(!strcmp(pe, pg), "seed %d: eager and graph mode record different graphs", (int)seed);
        kn_graph *graph = NULL, *back = NULL;
        KN_ASSERT_OK(kn_builder_finish(g, &graph));
        cr_assert(l3_nnodes(g) == 0, "finish resets the builder");
        KN_ASSERT_OK(kn_graph_parse(pg, strlen(pg), &back));
        KN_ASSERT_OK(kn_graph_to_string(back, &pr));
        cr_assert(!strcmp(pg, pr), "seed %d: print(parse(print(g))) != print(g)", (int)seed);
        kn_interp *it = NULL;
        KN_ASSERT_OK(kn_interp_new(&it, graph));
        KN_ASSERT_OK(kn_interp_bind(it, "x", x));
        KN_ASSERT_OK(kn_interp_bind(it, "w", w));
        KN_ASSERT_OK(kn_interp_run(it));
        const kn_tensor *a = kn_val_tensor(e, ye), *c = kn_interp_output(it, 0);
        cr_assert(a && c && kn_tensor_numel(a) == kn_tensor_numel(c) &&
                      !memcmp(kn_tensor_data(a), kn_tensor_data(c), (size_t)kn_tensor_numel(a) * sizeof(float)),
                  "seed %d: eager and captured differ", (int)seed);
        kn_interp_free(it);
        kn_graph_free(graph);
        kn_graph_free(back);
        kn_free(pe);
        kn_free(pg);
        kn_free(pr);
        kn_builder_free(e);
        kn_builder_free(g);
    }
    kn_tensor_free(x);
    kn_tensor_free(w);
}

/* Eager values hold aliases of the bound tensors (params updated in place are seen),
 * and every eager value's tensor has its node's type. */
KN_TEST(lab03_hidden_record, eager_tensors_match_types) {
    int64_t s[] = {2, 3};
    kn_tensor *x = NULL;
    KN_ASSERT_OK(kn_tensor_full(&x, KN_DT_F64, 2, s, 2.0));
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
    kn_val xv = kn_param(b, "x", x);
    int ax[] = {0};
    kn_val y = kn_sum(b, kn_mul(b, xv, kn_scalar(b, KN_DT_F64, 3.0)), 1, ax, true);
    KN_ASSERT_OK(kn_builder_status(b));
    cr_assert(l3_fact("the param is aliased", !kn_out_checking() && kn_tensor_data((kn_val_tensor)(b, xv)) == kn_tensor_data(x)),
              "a contiguous param is aliased");
    const kn_graph *g = kn_builder_graph(b);
    for (int i = 0; i < g->nnodes; i++) {
        const kn_tensor *t = kn_val_tensor(b, (kn_val){i});
        cr_assert(t && t->dtype == g->nodes[i].type.dtype && t->ndim == g->nodes[i].type.ndim, "value %d typed", i);
        for (int d = 0; d < t->ndim; d++) cr_assert(t->shape[d] == g->nodes[i].type.shape[d]);
    }
    for (int i = 0; i < 3; i++) KN_ASSERT_CLOSE(((const double *)kn_tensor_data(kn_val_tensor(b, y)))[i], 12.0, 0, 0);
    kn_builder_free(b);
    kn_tensor_free(x);
}
