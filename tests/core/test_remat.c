/* test_remat.c — activation checkpointing (core/passes/remat.c, mincut.c, live.c): every
 * policy on a small GPT step gives the loss and every gradient bit for bit as without
 * recompute, dropout's clone draws the same mask, the policies lower the largest live
 * set, scopes are stamped where the layers are built, and bad policies are clear errors. */
#include <string.h>

#include "graph_test_util.h"
#include "kn_test.h"
#include "pass_step_util.h"
#include "kiln/autograd.h"
#include "kiln/nn.h"
#include "kiln/passes.h"
#include "kiln/remat.h"

static const kn_gpt_config cfg = {.vocab = 17, .context = 8, .layers = 3, .width = 16, .heads = 2};
static const char *const policies[] = {"none", "selective", "full", "every:2", "every:3", "mincut", NULL};

static kn_graph *gpt_joint(void) {
    kn_graph *g;
    KN_ASSERT_OK(kn_gpt_graph(&cfg, 2, 8, true, &g));
    return g;
}

static kn_graph *remat_of(const kn_graph *g, const char *policy, kn_pass_report *rep) {
    char list[64];
    snprintf(list, sizeof list, "remat:%s", policy);
    kn_graph *c;
    KN_ASSERT_OK(kn_graph_copy(&c, g));
    KN_ASSERT_OK(kn_passes_run(c, list, rep));
    KN_ASSERT_OK(kn_graph_verify(c));
    return c;
}

/* Run a and b in the interpreter on the same random inputs and parameters (bound by name)
 * and require every output to be the same bytes. */
static void assert_bitwise(const kn_graph *a, const kn_graph *b, const char *what) {
    kn_interp *ia, *ib;
    KN_ASSERT_OK(kn_interp_new(&ia, a));
    KN_ASSERT_OK(kn_interp_new(&ib, b));
    bind_same_random(a, (kn_interp *const[]){ia, ib}, 2, 7, 1);
    KN_ASSERT_OK(kn_interp_run(ia));
    KN_ASSERT_OK(kn_interp_run(ib));
    cr_assert(a->noutputs == b->noutputs);
    for (int i = 0; i < a->noutputs; i++) {
        const kn_tensor *x = kn_interp_output(ia, i), *y = kn_interp_output(ib, i);
        size_t bytes = (size_t)kn_tensor_numel(x) * kn_dtype_size(x->dtype);
        cr_assert(kn_tensor_numel(x) == kn_tensor_numel(y) && x->dtype == y->dtype);
        cr_assert(!memcmp(kn_tensor_data(x), kn_tensor_data(y), bytes), "%s: output %d (%s) differs", what, i,
                  i == 0 ? "the loss" : "a gradient");
    }
    kn_interp_free(ia);
    kn_interp_free(ib);
}

static int64_t fired(const kn_pass_report *rep, const char *rule) {
    for (int r = 0; r < rep->pass[0].nfired; r++)
        if (!strcmp(rep->pass[0].rule[r], rule)) return rep->pass[0].count[r];
    return 0;
}

KN_TEST(remat, every_policy_is_bitwise_on_a_gpt_step) {
    kn_graph *g = gpt_joint();
    for (int p = 0; policies[p]; p++) {
        kn_pass_report rep;
        kn_graph *c = remat_of(g, policies[p], &rep);
        int64_t clones = fired(&rep, "recomputed");
        cr_assert(!strcmp(rep.pass[0].arg, policies[p]), "the report keeps the argument: '%s'", rep.pass[0].arg);
        if (p == 0) cr_assert(clones == 0 && c->nnodes == g->nnodes, "none recomputes nothing");
        else cr_assert(clones > 0 && c->nnodes == g->nnodes + clones, "%s: %lld clones, %d -> %d nodes", policies[p],
                       (long long)clones, g->nnodes, c->nnodes);
        assert_bitwise(g, c, policies[p]);
        kn_graph_free(c);
    }
    kn_graph_free(g);
}

/* The same through the trainer, in its node-by-node program (bit for bit: the same kernels
 * in the same order) and as generated C (fused differently, so only within rounding is
 * promised; it has been exact so far): three AdamW steps, losses and parameters. */
KN_TEST(remat, trainer_steps_are_unchanged, .timeout = 120) {
    float *p0, *p1;
    double l0[3], l1[3];
    size_t n = kn_test_train3_both(&cfg, 2, 8, NULL, "remat:full", false, l0, l1, &p0, &p1);
    cr_assert(!memcmp(l0, l1, sizeof l0) && !memcmp(p0, p1, n * sizeof *p0), "node by node: not bit for bit");
    free(p0);
    free(p1);
    n = kn_test_train3_both(&cfg, 2, 8, NULL, "cse,dce,remat:mincut", true, l0, l1, &p0, &p1);
    for (int s = 0; s < 3; s++) KN_ASSERT_CLOSE(l1[s], l0[s], 0, 1e-6);
    for (size_t i = 0; i < n; i++) KN_ASSERT_CLOSE(p1[i], p0[i], 1e-7, 1e-5);
    free(p0);
    free(p1);
}

/* x -> matmul -> gelu -> dropout -> matmul -> sum of squares, in one scope: the second
 * matmul's weight gradient reads the dropout's output, which full recomputes. */
static kn_graph *dropout_joint(void) {
    kn_builder *b;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
    int64_t sx[2] = {4, 8}, s1[2] = {8, 16}, s2[2] = {16, 8};
    kn_val x = kn_input_typed(b, "x", KN_DT_F32, 2, sx);
    kn_val w[2] = {kn_param_typed(b, "w1", KN_DT_F32, 2, s1), kn_param_typed(b, "w2", KN_DT_F32, 2, s2)};
    cr_assert(kn_builder_set_scope(b, 0) == KN_SCOPE_NONE, "a builder starts with no scope");
    kn_val h = kn_dropout(b, kn_gelu(b, kn_matmul(b, x, w[0])), 0.5, 1234, 77);
    kn_val y = kn_matmul(b, h, w[1]);
    cr_assert(kn_builder_set_scope(b, KN_SCOPE_NONE) == 0);
    kn_val loss = kn_sum(b, kn_mul(b, y, y), 0, NULL, false);
    kn_builder_output(b, loss);
    kn_graph *fwd, *joint;
    KN_ASSERT_OK(kn_builder_finish(b, &fwd));
    KN_ASSERT_OK(kn_autograd(fwd, loss, 2, w, &joint, NULL));
    kn_builder_free(b);
    kn_graph_free(fwd);
    return joint;
}

static int count_op(const kn_graph *g, kn_op op, int32_t *last) {
    int c = 0;
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i].op == op) { c++; if (last) *last = i; }
    return c;
}

KN_TEST(remat, dropout_recomputes_the_same_mask) {
    kn_graph *g = dropout_joint();
    int before = count_op(g, KN_OP_DROPOUT, NULL); /* the forward's and its backward's */
    kn_graph *full = remat_of(g, "full", NULL), *cut = remat_of(g, "mincut", NULL);
    int32_t clone = -1;
    cr_assert(count_op(full, KN_OP_DROPOUT, &clone) == before + 1, "full clones the dropout");
    cr_assert(count_op(cut, KN_OP_DROPOUT, NULL) == before, "mincut never recomputes a random op");
    assert_bitwise(g, full, "dropout, full");
    assert_bitwise(g, cut, "dropout, mincut");
    /* The test can tell: a clone drawing another mask changes the gradient of w2. */
    int32_t first = -1;
    for (int i = 0; i < full->nnodes && first < 0; i++) if (full->nodes[i].op == KN_OP_DROPOUT) first = i;
    cr_assert(first >= 0 && first != clone && full->nodes[clone].attrs.offset == full->nodes[first].attrs.offset);
    full->nodes[clone].attrs.offset += 16;
    double d = 0;
    KN_ASSERT_OK(kn_graph_compare(g, full, 3, &d));
    cr_assert(d > 0, "another mask must change the gradients");
    kn_graph_free(full);
    kn_graph_free(cut);
    kn_graph_free(g);
}

KN_TEST(remat, live_bytes_fall) {
    kn_gpt_config c = cfg;
    c.layers = 4;
    kn_graph *g;
    KN_ASSERT_OK(kn_gpt_graph(&c, 4, 8, true, &g));
    double live[7];
    for (int p = 0; policies[p]; p++) {
        char list[64];
        snprintf(list, sizeof list, "remat:%s", policies[p]);
        KN_ASSERT_OK(kn_passes_live_bytes(g, list, &live[p]));
    }
    double none;
    KN_ASSERT_OK(kn_graph_live_bytes(g, &none, NULL));
    cr_assert(live[0] == none, "remat:none changes nothing");
    cr_assert(live[2] < 0.75 * none, "full: %.0f bytes against %.0f without recompute", live[2], none);
    cr_assert(live[1] < none && live[5] < none, "selective %.0f, mincut %.0f, none %.0f", live[1], live[5], none);
    cr_assert(live[2] < live[1], "full keeps less than selective");
    kn_graph_free(g);
}

/* Full keeps exactly what crosses from one layer to another: every forward value the
 * backward still reads is outside every layer or read by another layer's forward. */
KN_TEST(remat, full_keeps_only_layer_inputs) {
    kn_graph *g = gpt_joint();
    kn_graph *c = remat_of(g, "full", NULL);
    bool *fwd = calloc((size_t)c->nnodes, 1), *crosses = calloc((size_t)c->nnodes, 1);
    fwd[c->outputs[0]] = true;
    for (int i = c->nnodes - 1; i >= 0; i--)
        for (int k = 0; fwd[i] && k < c->nodes[i].nin; k++) fwd[c->nodes[i].in[k]] = true;
    for (int i = 0; i < c->nnodes; i++)
        for (int k = 0; fwd[i] && k < c->nodes[i].nin; k++)
            crosses[c->nodes[i].in[k]] |= c->nodes[c->nodes[i].in[k]].scope != c->nodes[i].scope;
    bool *read = calloc((size_t)c->nnodes, 1);
    for (int i = 0; i < c->nnodes; i++)
        for (int k = 0; !fwd[i] && k < c->nodes[i].nin; k++) {
            int32_t v = c->nodes[i].in[k];
            const kn_node *n = &c->nodes[v];
            if (!fwd[v] || n->op == KN_OP_INPUT || n->op == KN_OP_PARAM || n->scope < 0) continue;
            cr_assert(crosses[v], "the backward reads %%%d = %s of layer %d, which is no layer's input", v,
                      kn_op_name(n->op), n->scope);
            read[v] = true;
        }
    int kept = 0;
    for (int i = 0; i < c->nnodes; i++) kept += read[i];
    cr_assert(kept == cfg.layers, "%d layer values kept: one per layer's output", kept);
    free(read);
    kn_graph_free(c);
    kn_graph_free(g);
    free(fwd);
    free(crosses);
}

KN_TEST(remat, scopes_follow_the_layers) {
    kn_graph *g = gpt_joint();
    int per[3] = {0, 0, 0}, none = 0;
    for (int i = 0; i < g->nnodes; i++) {
        int32_t s = g->nodes[i].scope;
        cr_assert(s >= KN_SCOPE_NONE && s < cfg.layers, "%%%d has scope %d", i, s);
        if (s < 0) none++;
        else per[s]++;
    }
    cr_assert(per[0] > 10 && per[0] == per[1] && per[1] == per[2], "every block the same: %d %d %d", per[0], per[1],
              per[2]);
    cr_assert(none > 0, "embeddings, the head and the backward are outside the layers");
    char *text;
    KN_ASSERT_OK(kn_graph_to_string(g, &text));
    kn_graph *p;
    KN_ASSERT_OK(kn_graph_parse(text, strlen(text), &p));
    for (int i = 0; i < p->nnodes; i++) cr_assert(p->nodes[i].scope == KN_SCOPE_NONE, "text carries no scope");
    KN_ASSERT_ERR(kn_passes_run(p, "remat:full", NULL), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "needs the layers of the forward"), "%s", kn_last_error());
    kn_graph *q = remat_of(p, "mincut", NULL); /* the cut needs no scopes */
    assert_bitwise(p, q, "parsed, mincut");
    kn_graph_free(q);
    kn_free(text);
    kn_graph_free(p);
    kn_graph_free(g);
}

KN_TEST(remat, bad_policies_are_clear_errors) {
    kn_remat_policy pol;
    KN_ASSERT_ERR(kn_remat_parse("fancy", &pol), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "unknown policy 'fancy' (policies: none, selective, full, every:K"), "%s",
              kn_last_error());
    const char *bad_every[] = {"every:0", "every:", "every:x", "every:2x", "every:-1", NULL};
    for (int i = 0; bad_every[i]; i++) {
        KN_ASSERT_ERR(kn_remat_parse(bad_every[i], &pol), KN_ERR_ARG);
        cr_assert(strstr(kn_last_error(), "every:K needs K"), "%s: %s", bad_every[i], kn_last_error());
    }
    KN_ASSERT_OK(kn_remat_parse("every:4", &pol));
    cr_assert(pol.kind == KN_REMAT_EVERY && pol.every == 4);
    KN_ASSERT_OK(kn_remat_parse("full", &pol));
    cr_assert(pol.kind == KN_REMAT_EVERY && pol.every == 1);
    kn_graph *g = gpt_joint();
    int n = g->nnodes;
    KN_ASSERT_ERR(kn_passes_run(g, "cse,remat:bogus", NULL), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "unknown policy 'bogus'") && g->nnodes == n, "%s", kn_last_error());
    KN_ASSERT_ERR(kn_passes_run(g, "remat", NULL), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "remat needs a policy"), "%s", kn_last_error());
    KN_ASSERT_ERR(kn_remat(g, (kn_remat_policy){KN_REMAT_EVERY, 0}, NULL), KN_ERR_ARG);
    kn_graph_free(g);
    /* a graph without a backward: nothing to recompute */
    KN_ASSERT_OK(kn_gpt_graph(&cfg, 2, 8, false, &g));
    n = g->nnodes;
    KN_ASSERT_OK(kn_passes_run(g, "remat:full", NULL));
    cr_assert(g->nnodes == n);
    kn_graph_free(g);
}

KN_TEST(remat, live_bytes_of_a_small_graph) {
    const char *text = "%0 = input {name=\"x\"} : f32[4]\n"  /* outside the run */
                       "%1 = neg %0 : f32[4]\n"              /* 16 bytes, live at 1..5 */
                       "%2 = exp %1 : f32[4]\n"              /* 16, live at 2..4 (its reshape is read at 4) */
                       "%3 = reshape %2 {shape=[2,2]} : f32[2,2]\n"
                       "%4 = neg %3 : f32[2,2]\n"            /* 16, live at 4..7 (through %6) */
                       "%5 = add %1, %1 : f32[4]\n"          /* an output: not counted */
                       "%6 = reshape %4 {shape=[4]} : f32[4]\n"
                       "%7 = add %6, %5 : f32[4]\n"          /* an output */
                       "output %7, %5\n";
    kn_graph *g;
    KN_ASSERT_OK(kn_graph_parse(text, strlen(text), &g));
    KN_ASSERT_OK(kn_graph_verify(g));
    double b;
    int32_t at;
    KN_ASSERT_OK(kn_graph_live_bytes(g, &b, &at));
    cr_assert(b == 48 && at == 4, "got %g bytes at %%%d, expected 48 at %%4: %%1, %%2 and %%4", b, at);
    KN_ASSERT_ERR(kn_graph_live_bytes(NULL, &b, NULL), KN_ERR_ARG);
    kn_graph_free(g);
}
