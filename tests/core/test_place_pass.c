/* test_place_pass.c — the placement pass (core/passes/place.c, kiln/placement.h) on a
 * small GPT's joint graph: Megatron's collectives found by propagation (2 all-reduces per
 * block forward, in that block's scope, 2 per block backward; the vocabulary-parallel
 * embedding's, the logits' gradient's and the cross-entropy's), the local types, the
 * verifier naming the node where a
 * planted wrong placement or a dropped all_reduce breaks a rule, the one-rank graph
 * computing what the global one does, and a clear message for a model that cannot split.
 * The multi-rank equality is tests/dist/test_tp.c (under mpiexec). */
#include <math.h>
#include <string.h>

#include "kn_test.h"
#include "kiln/nn.h"
#include "kiln/placement.h"

static const kn_gpt_config cfg = {.vocab = 16, .context = 8, .layers = 2, .width = 16, .heads = 4};

static kn_graph *joint(const kn_gpt_config *c) {
    kn_graph *g;
    KN_ASSERT_OK(kn_gpt_graph(c, 2, 8, true, &g));
    return g;
}

static int count_in_scope(const kn_graph *g, kn_op op, int32_t scope) {
    int n = 0;
    for (int i = 0; i < g->nnodes; i++) n += g->nodes[i].op == op && g->nodes[i].scope == scope;
    return n;
}

static int32_t first_op(const kn_graph *g, kn_op op) {
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i].op == op) return i;
    return -1;
}

KN_TEST(place_pass, megatron_collectives) {
    kn_graph *g = joint(&cfg);
    for (int N = 2; N <= 4; N += 2) {
        kn_place_opts o = {.mesh = 1, .parts = N, .rank = N - 1};
        kn_place_result r;
        KN_ASSERT_OK(kn_place_graph(g, &o, &r));
        /* per block forward: the attention's and the MLP's all-reduce, in the block's scope
         * (the backward's nodes carry no scope): then the gradient of each sub-block's input
         * backward, 2 per block, and the logits' gradient */
        for (int l = 0; l < cfg.layers; l++)
            cr_assert_eq(count_in_scope(r.local, KN_OP_ALL_REDUCE, l), 2, "tp=%d block %d: %d all_reduces", N, l,
                         count_in_scope(r.local, KN_OP_ALL_REDUCE, l));
        /* outside the blocks: the vocabulary-parallel embedding's P, the logits' gradient,
         * the cross-entropy's sum of exp and target logit */
        cr_assert_eq(count_in_scope(r.local, KN_OP_ALL_REDUCE, KN_SCOPE_NONE), 2 * cfg.layers + 4);
        cr_assert_eq(r.all_reduce, 4 * cfg.layers + 4, "tp=%d: %d all_reduces", N, r.all_reduce);
        cr_assert_eq(r.all_gather, 1);       /* the cross-entropy's row max: no weight or logits gathered */
        cr_assert_eq(r.reduce_scatter, 0);
        /* the parameters are local: c_fc.weight [D, 4D] S(1) is [D, 4D/N] */
        int32_t fc = kn_graph_find(r.local, "h.0.mlp.c_fc.weight");
        cr_assert(fc >= 0);
        cr_assert_eq(r.local->nodes[fc].type.shape[1], 4 * cfg.width / N);
        cr_assert(kn_place_equal(r.info[fc].p, kn_place_shard(1)));
        /* the loss is R, the c_attn gradient S(1,3) like its parameter */
        cr_assert_eq(r.info[r.local->outputs[0]].p.kind, KN_PLACE_REPLICATE);
        KN_ASSERT_OK(kn_place_check(g, &r, &o));
        kn_place_result_free(&r);
    }
    kn_graph_free(g);
}

/* A wrong placement planted on the attention's row-parallel product (P claimed R): the
 * verifier names that node. */
static int32_t first_all_reduce_of(const kn_graph *g, kn_op op) {
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i].op == KN_OP_ALL_REDUCE && g->nodes[g->nodes[i].in[0]].op == op) return i;
    return -1;
}

KN_TEST(place_pass, verifier_names_a_wrong_placement) {
    kn_graph *g = joint(&cfg);
    kn_place_opts o = {.mesh = 1, .parts = 2, .rank = 0};
    kn_place_result r;
    KN_ASSERT_OK(kn_place_graph(g, &o, &r));
    int32_t ar = first_all_reduce_of(r.local, KN_OP_MATMUL);
    cr_assert(ar > 0);
    int32_t mm = r.local->nodes[ar].in[0];
    cr_assert_eq(r.local->nodes[mm].op, KN_OP_MATMUL);
    cr_assert_eq(r.info[mm].p.kind, KN_PLACE_PARTIAL);
    r.info[mm].p = kn_place_replicate();
    KN_ASSERT_ERR(kn_place_check(g, &r, &o), KN_ERR_INTERNAL);
    char want[48];
    snprintf(want, sizeof want, "%%%d = matmul: placed R, its rule gives P", (int)mm);
    cr_assert(strstr(kn_last_error(), want), "%s", kn_last_error());
    kn_place_result_free(&r);
    kn_graph_free(g);
}

/* The all_reduce dropped (its reader reads the partial sum): the verifier names the reader. */
KN_TEST(place_pass, verifier_names_a_dropped_all_reduce) {
    kn_graph *g = joint(&cfg);
    kn_place_opts o = {.mesh = 1, .parts = 2, .rank = 1};
    kn_place_result r;
    KN_ASSERT_OK(kn_place_graph(g, &o, &r));
    int32_t ar = first_op(r.local, KN_OP_ALL_REDUCE), reader = -1;
    for (int i = ar + 1; i < r.local->nnodes && reader < 0; i++)
        for (int k = 0; k < r.local->nodes[i].nin; k++)
            if (r.local->nodes[i].in[k] == ar) reader = i, r.local->nodes[i].in[k] = r.local->nodes[ar].in[0];
    cr_assert(reader > 0);
    KN_ASSERT_ERR(kn_place_check(g, &r, &o), KN_ERR_INTERNAL);
    char want[64];
    snprintf(want, sizeof want, "%%%d = %s: operand", (int)reader, kn_op_name(r.local->nodes[reader].op));
    cr_assert(strstr(kn_last_error(), want) && strstr(kn_last_error(), "is P, its rule wants R"), "%s",
              kn_last_error());
    kn_place_result_free(&r);
    kn_graph_free(g);
}

/* One rank: the local graph is the global one plus identity collectives; same loss and
 * gradients through the one-process context. */
KN_TEST(place_pass, one_rank_computes_the_same) {
    kn_graph *g = joint(&cfg);
    kn_place_opts o = {.mesh = 1, .parts = 1, .rank = 0};
    kn_place_result r;
    KN_ASSERT_OK(kn_place_graph(g, &o, &r));
    kn_gpt m;
    KN_ASSERT_OK(kn_gpt_new(&m, &cfg));
    kn_gpt_init(&m, 3);
    int32_t xs[16], ys[16];
    for (int i = 0; i < 16; i++) xs[i] = (i * 3 + 1) % cfg.vocab, ys[i] = (i * 5 + 2) % cfg.vocab;
    int64_t bs[2] = {2, 8};
    kn_tensor *x, *y;
    KN_ASSERT_OK(kn_tensor_from_data(&x, KN_DT_I32, 2, bs, xs));
    KN_ASSERT_OK(kn_tensor_from_data(&y, KN_DT_I32, 2, bs, ys));
    kn_interp *a, *b;
    KN_ASSERT_OK(kn_interp_new(&a, g));
    KN_ASSERT_OK(kn_interp_new(&b, r.local));
    kn_collectives c;
    kn_collectives_local *loc;
    KN_ASSERT_OK(kn_collectives_local_new(&loc, &c));
    kn_interp_set_collectives(b, &c);
    for (int i = 0; i < m.p.count; i++) {
        KN_ASSERT_OK(kn_interp_bind(a, m.p.info[i].name, m.p.views[i]));
        KN_ASSERT_OK(kn_interp_bind(b, m.p.info[i].name, m.p.views[i]));
    }
    KN_ASSERT_OK(kn_interp_bind(a, "idx", x));
    KN_ASSERT_OK(kn_interp_bind(b, "idx", x));
    KN_ASSERT_OK(kn_interp_bind(a, "targets", y));
    KN_ASSERT_OK(kn_interp_bind(b, "targets", y));
    KN_ASSERT_OK(kn_interp_run(a));
    KN_ASSERT_OK(kn_interp_run(b));
    for (int i = 0; i < g->noutputs; i++) {
        double abs_err, rel;
        KN_ASSERT_OK(kn_tensor_max_diff(kn_interp_output(b, i), kn_interp_output(a, i), &abs_err, &rel));
        cr_assert(abs_err == 0, "output %d differs by %g", i, abs_err);
    }
    kn_interp_free(a), kn_interp_free(b);
    kn_collectives_local_free(loc);
    kn_tensor_free(x), kn_tensor_free(y);
    kn_gpt_free(&m);
    kn_place_result_free(&r);
    kn_graph_free(g);
}

/* A vocabulary-parallel expansion placed wrong (the embedding's P claimed R): named. */
KN_TEST(place_pass, verifier_names_a_wrong_expansion) {
    kn_graph *g = joint(&cfg);
    kn_place_opts o = {.mesh = 1, .parts = 2, .rank = 0};
    kn_place_result r;
    KN_ASSERT_OK(kn_place_graph(g, &o, &r));
    int32_t e = -1;
    for (int i = 0; i < r.local->nnodes && e < 0; i++)
        if (r.info[i].role == KN_PLACE_ROLE_EXPAND) e = i;
    cr_assert(e > 0 && r.info[e].p.kind == KN_PLACE_PARTIAL);
    r.info[e].p = kn_place_replicate();
    KN_ASSERT_ERR(kn_place_check(g, &r, &o), KN_ERR_INTERNAL);
    cr_assert(strstr(kn_last_error(), "vocabulary-parallel embedding placed R, it gives P"), "%s", kn_last_error());
    kn_place_result_free(&r);
    kn_graph_free(g);
}

/* Sequence parallelism: the blocks' all-reduces of activations become reduce-scatters (and
 * all-gathers before the column-parallel products); a dropped reduce_scatter (its reader
 * given the partial sum) is named by the verifier. (The sequence-parallel graph is also
 * valid under the plain rules: the flag only changes which conversion a P gets.) */
KN_TEST(place_pass, sequence_parallel) {
    kn_graph *g;
    KN_ASSERT_OK(kn_gpt_graph(&cfg, 2, 8, true, &g));
    kn_place_opts o = {.mesh = 1, .parts = 2, .rank = 0, .flags = KN_PLACE_SEQUENCE_PARALLEL};
    kn_place_result r;
    KN_ASSERT_OK(kn_place_graph(g, &o, &r));
    cr_assert_geq(r.reduce_scatter, 4 * cfg.layers, "%d reduce_scatters", r.reduce_scatter);
    cr_assert_geq(r.all_gather, 4 * cfg.layers, "%d all_gathers", r.all_gather);
    for (int i = 0; i < r.local->nnodes; i++) /* only small values are still all-reduced */
        if (r.local->nodes[i].op == KN_OP_ALL_REDUCE)
            cr_assert_lt(kn_type_numel(&r.local->nodes[i].type), 2 * 8 * cfg.width, "%%%d", i);
    KN_ASSERT_OK(kn_place_check(g, &r, &o));
    int32_t rs = first_op(r.local, KN_OP_REDUCE_SCATTER), reader = -1;
    cr_assert(rs > 0);
    for (int i = rs + 1; i < r.local->nnodes && reader < 0; i++)
        for (int k = 0; k < r.local->nodes[i].nin; k++)
            if (r.local->nodes[i].in[k] == rs) reader = i, r.local->nodes[i].in[k] = r.local->nodes[rs].in[0];
    cr_assert(reader > 0);
    KN_ASSERT_ERR(kn_place_check(g, &r, &o), KN_ERR_INTERNAL);
    char want[48];
    snprintf(want, sizeof want, "%%%d = ", (int)reader);
    cr_assert(strstr(kn_last_error(), want), "%s", kn_last_error());
    kn_place_result_free(&r);
    kn_graph_free(g);
}

KN_TEST(place_pass, a_model_that_cannot_split) {
    kn_gpt_config c = cfg;
    c.vocab = 17; /* wte [17, D] S(0) over 2 ranks */
    kn_graph *g = joint(&c);
    kn_place_opts o = {.mesh = 1, .parts = 2, .rank = 0};
    kn_place_result r;
    KN_ASSERT_ERR(kn_place_graph(g, &o, &r), KN_ERR_SHAPE);
    cr_assert(strstr(kn_last_error(), "wte.weight"), "%s", kn_last_error());
    o.rank = 2;
    KN_ASSERT_ERR(kn_place_graph(g, &o, &r), KN_ERR_ARG);
    kn_graph_free(g);
}
