/* test_hidden_passes.c — lab 04 hidden tests: the golden files of tests/passes/, random
 * graphs with properties checked independently of the solution (after dce no dead node
 * is left, after cse no two mergeable nodes are equal, the rules reach a fixed point),
 * every cast chain and permutation pair exhaustively, the GPT's joint graph, edge cases
 * (empty graphs, outputs that are inputs, long chains, a computing node at %0), and memory:
 * no pass leaks (kn_alloc_live) and each fails cleanly at every allocation. Survivors of
 * `make mutants LAB=04` that no test can kill are listed, with reasons, in
 * mutants-equivalent.txt. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../labs/lab04-passes/tests/check.h"
#include "kiln/nn.h"

/* l4_golden[]: tests/passes/NAME.{in,out}.ir, embedded at build time (core/passes.mk). */
#include "lab04_golden.h"

KN_TEST(lab04_hidden_golden, every_rewrite_file) {
    int count = 0;
    for (size_t i = 0; i < sizeof l4_golden / sizeof l4_golden[0]; i++) {
        char list[128] = "";
        cr_assert(sscanf(l4_golden[i].in, "# passes: %127s", list) == 1, "%s: no '# passes:' line", l4_golden[i].name);
        kn_graph *g = l4_parse(l4_golden[i].in);
        kn_graph_free(l4_run(g, list, l4_golden[i].out, NULL));
        kn_graph_free(g);
        count++;
    }
    cr_assert(count >= 16);
}

/* Reachability from the outputs, computed here without the solution. */
static int count_live(const kn_graph *g) {
    bool *live = calloc((size_t)g->nnodes + 1, 1);
    for (int i = 0; i < g->noutputs; i++) live[g->outputs[i]] = true;
    int n = 0;
    for (int i = g->nnodes - 1; i >= 0; i--) {
        kn_op op = g->nodes[i].op;
        if (op == KN_OP_INPUT || op == KN_OP_PARAM) live[i] = true;
        if (!live[i]) continue;
        n++;
        for (int k = 0; k < g->nodes[i].nin; k++) live[g->nodes[i].in[k]] = true;
    }
    free(live);
    return n;
}

static int count_op(const kn_graph *g, kn_op op) {
    int n = 0;
    for (int i = 0; i < g->nnodes; i++) n += g->nodes[i].op == op;
    return n;
}

static bool mergeable_twins(const kn_graph *g, int *a, int *b) {
    for (int i = 0; i < g->nnodes; i++)
        for (int j = i + 1; j < g->nnodes; j++) {
            const kn_node *x = &g->nodes[i], *y = &g->nodes[j];
            if (x->op != y->op || x->op == KN_OP_INPUT || x->op == KN_OP_PARAM || kn_op_is_random(x->op)) continue;
            if (x->nin != y->nin || !kn_type_equal(&x->type, &y->type) || !kn_attrs_equal(x->op, &x->attrs, &y->attrs))
                continue;
            bool same = true;
            for (int k = 0; k < x->nin; k++) same &= x->in[k] == y->in[k];
            if (same) { *a = i; *b = j; return true; }
        }
    return false;
}

KN_TEST(lab04_hidden_dce, random_graphs_exactly_the_live_nodes, .timeout = 200) {
    kn_randgraph_opts o = kn_randgraph_defaults();
    for (uint64_t s = 0; s < 150; s++) {
        o.nodes = 10 + (int)(s % 40);
        o.noutputs = 1 + (int)(s % 3);
        kn_graph *g;
        KN_ASSERT_OK(kn_randgraph(&g, 1000 + s, &o));
        kn_pass_report rep;
        kn_graph *c = l4_run(g, "dce", NULL, &rep);
        int live = count_live(g);
        cr_assert(c->nnodes == live, "seed %llu: %d nodes after dce, %d are live", (unsigned long long)s, c->nnodes, live);
        cr_assert(l4_fired(&rep, 0, "dead") == g->nnodes - live);
        cr_assert(count_op(c, KN_OP_INPUT) == count_op(g, KN_OP_INPUT) && count_op(c, KN_OP_PARAM) == count_op(g, KN_OP_PARAM));
        int32_t *uses = malloc(sizeof(int32_t) * (size_t)c->nnodes);
        kn_graph_uses(c, uses);
        for (int i = 0; i < c->nnodes; i++)
            cr_assert(uses[i] > 0 || c->nodes[i].op == KN_OP_INPUT || c->nodes[i].op == KN_OP_PARAM,
                      "seed %llu: %%%d is still dead", (unsigned long long)s, i);
        free(uses);
        kn_pass_report rep2;
        kn_graph_free(l4_run(c, "dce", NULL, &rep2));
        cr_assert(l4_fired(&rep2, 0, "dead") == 0, "a second dce removes nothing");
        kn_graph_free(c);
        kn_graph_free(g);
    }
}

KN_TEST(lab04_hidden_dce, edge_cases) {
    /* outputs that are inputs, the same output twice, everything dead but the sources */
    l4_expect("%0 = input {name=\"x\"} : f32[2]\n%1 = neg %0 : f32[2]\n%2 = param {name=\"w\"} : f32[2]\n"
              "%3 = exp %1 : f32[2]\noutput %2, %2, %0\n",
              "dce", "%0 = input {name=\"x\"} : f32[2]\n%1 = param {name=\"w\"} : f32[2]\noutput %1, %1, %0\n");
    /* the last node is dead, the first op is live */
    l4_expect("%0 = input {name=\"x\"} : f32[2]\n%1 = neg %0 : f32[2]\n%2 = exp %1 : f32[2]\noutput %1\n", "dce",
              "%0 = input {name=\"x\"} : f32[2]\n%1 = neg %0 : f32[2]\noutput %1\n");
    /* a full constant nobody reads goes; one an output reads stays */
    l4_expect("%0 = full {value=3} : f32[2]\n%1 = full {value=4} : f32[2]\noutput %1\n", "dce",
              "%0 = full {value=4} : f32[2]\noutput %0\n");
    /* a long chain with a dead side branch at every step */
    char *text = malloc(1 << 20);
    size_t len = (size_t)sprintf(text, "%%0 = input {name=\"x\"} : f32[2]\n");
    int prev = 0;
    for (int i = 0; i < 3000; i++) { /* %a = neg prev (live), %a+1 = exp %a (dead) */
        len += (size_t)sprintf(text + len, "%%%d = neg %%%d : f32[2]\n%%%d = exp %%%d : f32[2]\n", 2 * i + 1, prev,
                               2 * i + 2, 2 * i + 1);
        prev = 2 * i + 1;
    }
    sprintf(text + len, "output %%%d\n", prev);
    kn_graph *g = l4_parse(text);
    kn_pass_report rep;
    kn_graph *c = l4_run(g, "dce", NULL, &rep);
    cr_assert(c->nnodes == 3001 && l4_fired(&rep, 0, "dead") == 3000, "%d nodes", c->nnodes);
    kn_graph_free(c);
    kn_graph_free(g);
    free(text);
}

KN_TEST(lab04_hidden_cse, random_graphs_leave_no_twins, .timeout = 200) {
    kn_randgraph_opts o = kn_randgraph_defaults();
    o.plant = 60;
    for (uint64_t s = 0; s < 150; s++) {
        o.nodes = 10 + (int)(s % 40);
        kn_graph *g;
        KN_ASSERT_OK(kn_randgraph(&g, 2000 + s, &o));
        kn_pass_report rep;
        kn_graph *c = l4_run(g, "cse", NULL, &rep);
        int a, b;
        cr_assert(!mergeable_twins(c, &a, &b), "seed %llu: %%%d and %%%d are still equal", (unsigned long long)s, a, b);
        cr_assert(l4_fired(&rep, 0, "merged") == g->nnodes - c->nnodes);
        cr_assert(count_op(c, KN_OP_DROPOUT) == count_op(g, KN_OP_DROPOUT), "dropouts are never merged");
        cr_assert(count_op(c, KN_OP_INPUT) == count_op(g, KN_OP_INPUT) && count_op(c, KN_OP_PARAM) == count_op(g, KN_OP_PARAM));
        kn_graph_free(c);
        kn_graph_free(g);
    }
}

KN_TEST(lab04_hidden_cse, what_makes_nodes_different) {
    const char *in = "%0 = input {name=\"x\"} : f32[2]\n%1 = input {name=\"y\"} : f32[2]\n"
                     "%2 = add %0, %1 : f32[2]\n%3 = add %1, %0 : f32[2]\n"        /* operand order */
                     "%4 = full {value=1} : f32[2]\n%5 = full {value=1} : f32[3]\n" /* type */
                     "%6 = full : f32[2]\n%7 = full {value=-0} : f32[2]\n"          /* 0 and -0 */
                     "%8 = cast %0 {dtype=f64} : f64[2]\n%9 = cast %0 {dtype=f16} : f16[2]\n"
                     "%10 = sub %0, %1 : f32[2]\n%11 = mul %0, %1 : f32[2]\n"       /* op */
                     "%12 = dropout %0 {p=0.5, seed=1} : f32[2]\n%13 = dropout %0 {p=0.5, seed=1, offset=2} : f32[2]\n"
                     "%14 = full {value=1} : f32[2]\n%15 = full {value=1} : f32[3]\n" /* twins of 4 and 5 */
                     "output %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15\n";
    kn_graph *g = l4_parse(in);
    kn_pass_report rep;
    kn_graph *c = l4_run(g, "cse", NULL, &rep);
    cr_assert(c->nnodes == 14 && l4_fired(&rep, 0, "merged") == 2, "%d nodes", c->nnodes);
    cr_assert(c->outputs[12] == c->outputs[2] && c->outputs[13] == c->outputs[3]);
    kn_graph_free(c);
    kn_graph_free(g);
    /* an input and a param are never merged, even with equal types */
    const char *src = "%0 = input {name=\"a\"} : f32[2]\n%1 = input {name=\"b\"} : f32[2]\n%2 = add %0, %1 : f32[2]\noutput %2\n";
    l4_expect(src, "cse", src);
    /* a long chain of duplicates: every level merges */
    char *text = malloc(1 << 21);
    size_t len = (size_t)sprintf(text, "%%0 = input {name=\"x\"} : f32[2]\n");
    for (int i = 0; i < 4000; i++)
        len += (size_t)sprintf(text + len, "%%%d = tanh %%%d : f32[2]\n%%%d = tanh %%%d : f32[2]\n", 2 * i + 1,
                               i ? 2 * i - 1 : 0, 2 * i + 2, i ? 2 * i : 0);
    sprintf(text + len, "output %%7999, %%8000\n");
    g = l4_parse(text);
    c = l4_run(g, "cse", NULL, &rep);
    cr_assert(c->nnodes == 4001 && c->outputs[0] == c->outputs[1] && l4_fired(&rep, 0, "merged") == 4000);
    kn_graph_free(c);
    kn_graph_free(g);
    free(text);
}

/* Every (from, via, to) dtype triple: cast(cast(x, via), to) merges exactly when `via`
 * holds every value of `from`. */
static bool exact(kn_dtype from, kn_dtype to) {
    static const char *const yes[] = {"f16>f32", "f16>f64", "bf16>f32", "bf16>f64", "f32>f64", "i32>i64", "i32>f64",
                                      "u8>f16", "u8>bf16", "u8>f32", "u8>f64", "u8>i32", "u8>i64", NULL};
    if (from == to || from == KN_DT_BOOL) return true;
    char key[32];
    snprintf(key, sizeof key, "%s>%s", kn_dtype_name(from), kn_dtype_name(to));
    for (int i = 0; yes[i]; i++)
        if (!strcmp(yes[i], key)) return true;
    return false;
}

KN_TEST(lab04_hidden_algebra, every_cast_chain, .timeout = 200) {
    for (int a = 0; a < KN_DT_COUNT; a++)
        for (int b = 0; b < KN_DT_COUNT; b++)
            for (int c = 0; c < KN_DT_COUNT; c++) {
                if (a == b || b == c) continue;
                const char *A = kn_dtype_name(a), *B = kn_dtype_name(b), *C = kn_dtype_name(c);
                char in[512], want[512];
                snprintf(in, sizeof in, "%%0 = input {name=\"x\"} : %s[3]\n%%1 = cast %%0 {dtype=%s} : %s[3]\n"
                         "%%2 = cast %%1 {dtype=%s} : %s[3]\noutput %%2\n", A, B, B, C, C);
                if (!exact(a, b)) snprintf(want, sizeof want, "%s", in);
                else if (a == c) snprintf(want, sizeof want, "%%0 = input {name=\"x\"} : %s[3]\noutput %%0\n", A);
                else snprintf(want, sizeof want, "%%0 = input {name=\"x\"} : %s[3]\n%%1 = cast %%0 {dtype=%s} : %s[3]\n"
                              "output %%1\n", A, C, C);
                l4_expect(in, "algebra,dce", want);
            }
}

KN_TEST(lab04_hidden_algebra, each_identity_and_its_near_misses) {
    /* both operand orders, scalar and full-shaped constants */
    const char *ops[][2] = {{"mul", "1"}, {"add", "0"}};
    for (int i = 0; i < 2; i++)
        for (int order = 0; order < 2; order++)
            for (int shaped = 0; shaped < 2; shaped++) {
                char in[512];
                const char *ct = shaped ? "f64[2,3]" : "f64[]";
                snprintf(in, sizeof in, "%%0 = input {name=\"x\"} : f64[2,3]\n%%1 = full {value=%s} : %s\n"
                         "%%2 = %s %s : f64[2,3]\noutput %%2\n", ops[i][1], ct, ops[i][0], order ? "%1, %0" : "%0, %1");
                l4_expect(in, "algebra,dce", "%0 = input {name=\"x\"} : f64[2,3]\noutput %0\n");
            }
    l4_expect("%0 = input {name=\"x\"} : f64[2]\n%1 = full {value=1} : f64[]\n%2 = div %0, %1 : f64[2]\n"
              "%3 = full : f64[2]\n%4 = sub %2, %3 : f64[2]\noutput %4\n",
              "algebra,dce", "%0 = input {name=\"x\"} : f64[2]\noutput %0\n");
    /* near misses stay: 0 - x, 1 / x, x * 0, x + 1, x * 2, x - 1, x / 2, a single neg */
    const char *stay[] = {"%2 = sub %1, %0 : f64[2]\n", "%2 = div %1, %0 : f64[2]\n", "%2 = neg %0 : f64[2]\n"};
    for (int i = 0; i < 3; i++) {
        for (int v = 0; v < 2; v++) {
            char in[512];
            snprintf(in, sizeof in, "%%0 = input {name=\"x\"} : f64[2]\n%%1 = full%s : f64[]\n%soutput %%2\n",
                     v ? " {value=1}" : "", stay[i]);
            l4_expect(in, "algebra", in);
        }
    }
    const char *miss[][2] = {{"mul", "0"}, {"add", "1"}, {"mul", "2"}, {"sub", "1"}, {"div", "2"}, {"add", "-1"},
                             {"mul", "-1"}, {"div", "0"}, {"sub", "2"}};
    for (int i = 0; i < 9; i++) {
        char in[512];
        char attr[32] = "";
        if (strcmp(miss[i][1], "0")) snprintf(attr, sizeof attr, " {value=%s}", miss[i][1]);
        snprintf(in, sizeof in, "%%0 = input {name=\"x\"} : f64[2]\n%%1 = full%s : f64[]\n"
                 "%%2 = %s %%0, %%1 : f64[2]\noutput %%2\n", attr, miss[i][0]);
        l4_expect(in, "algebra", in);
    }
    /* an odd number of negs keeps one; the rules compose in one pass */
    l4_expect("%0 = input {name=\"x\"} : f64[2]\n%1 = neg %0 : f64[2]\n%2 = neg %1 : f64[2]\n%3 = neg %2 : f64[2]\n"
              "%4 = full {value=1} : f64[]\n%5 = mul %3, %4 : f64[2]\n%6 = neg %5 : f64[2]\noutput %6\n",
              "algebra,dce", "%0 = input {name=\"x\"} : f64[2]\noutput %0\n");
}

static void perm_text(char *buf, size_t n, const int *p) { snprintf(buf, n, "[%d,%d,%d]", p[0], p[1], p[2]); }

KN_TEST(lab04_hidden_views, every_pair_of_permutations) {
    static const int perms[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    const int64_t shape[3] = {2, 3, 4};
    for (int a = 0; a < 6; a++)
        for (int b = 0; b < 6; b++) {
            char pa[32], pb[32], in[512], want[512];
            int s1[3], r[3], s2[3];
            for (int i = 0; i < 3; i++) s1[i] = (int)shape[perms[a][i]];
            for (int i = 0; i < 3; i++) { r[i] = perms[a][perms[b][i]]; s2[i] = (int)shape[r[i]]; }
            perm_text(pa, sizeof pa, perms[a]);
            perm_text(pb, sizeof pb, perms[b]);
            snprintf(in, sizeof in, "%%0 = input {name=\"x\"} : f32[2,3,4]\n%%1 = permute %%0 {perm=%s} : f32[%d,%d,%d]\n"
                     "%%2 = permute %%1 {perm=%s} : f32[%d,%d,%d]\noutput %%2\n", pa, s1[0], s1[1], s1[2], pb, s2[0],
                     s2[1], s2[2]);
            bool id = r[0] == 0 && r[1] == 1 && r[2] == 2;
            if (id) snprintf(want, sizeof want, "%%0 = input {name=\"x\"} : f32[2,3,4]\noutput %%0\n");
            else {
                char pr[32];
                perm_text(pr, sizeof pr, r);
                snprintf(want, sizeof want, "%%0 = input {name=\"x\"} : f32[2,3,4]\n%%1 = permute %%0 {perm=%s} : "
                         "f32[%d,%d,%d]\noutput %%1\n", pr, s2[0], s2[1], s2[2]);
            }
            kn_graph *g = l4_parse(in);
            kn_pass_report rep;
            kn_graph_free(l4_run(g, "views,dce", want, &rep));
            /* an identity permute is dropped as such; two real ones compose in one step */
            cr_assert(l4_fired(&rep, 0, "permute_noop") == (a == 0) + (b == 0) &&
                      l4_fired(&rep, 0, "permute_permute") == (a != 0 && b != 0),
                      "perm %s then %s: permute_noop %lld, permute_permute %lld", pa, pb,
                      (long long)l4_fired(&rep, 0, "permute_noop"), (long long)l4_fired(&rep, 0, "permute_permute"));
            kn_graph_free(g);
        }
}

KN_TEST(lab04_hidden_views, near_misses_and_canonical_forms) {
    /* a real transpose of a square matrix keeps its type but is no identity */
    const char *t = "%0 = input {name=\"x\"} : f32[3,3]\n%1 = permute %0 {perm=[1,0]} : f32[3,3]\noutput %1\n";
    l4_expect(t, "views", t);
    /* a slice that drops elements stays; a strided slice of a unit axis is everything */
    const char *sl = "%0 = input {name=\"x\"} : f32[4,1]\n%1 = slice %0 {axis=0, start=0, stop=4, step=2} : f32[2,1]\n"
                     "%2 = slice %0 {axis=1, start=0, stop=1, step=3} : f32[4,1]\noutput %1, %2\n";
    l4_expect(sl, "views,dce", "%0 = input {name=\"x\"} : f32[4,1]\n%1 = slice %0 {axis=0, start=0, stop=4, step=2} : "
                               "f32[2,1]\noutput %1, %0\n");
    /* reshape back to the start is x (in one step); a reshape chain ending elsewhere is one reshape */
    kn_graph *g = l4_parse("%0 = input {name=\"x\"} : f32[2,6]\n%1 = reshape %0 {shape=[12]} : f32[12]\n"
                           "%2 = reshape %1 {shape=[2,6]} : f32[2,6]\n%3 = reshape %1 {shape=[3,4]} : f32[3,4]\n"
                           "%4 = reshape %3 {shape=[4,3]} : f32[4,3]\noutput %2, %4\n");
    kn_pass_report rep;
    kn_graph_free(l4_run(g, "views,dce", "%0 = input {name=\"x\"} : f32[2,6]\n%1 = reshape %0 {shape=[4,3]} : f32[4,3]\n"
                                       "output %0, %1\n", &rep));
    cr_assert(l4_fired(&rep, 0, "reshape_reshape") == 3 && l4_fired(&rep, 0, "reshape_noop") == 0,
              "reshape_reshape %lld, reshape_noop %lld", (long long)l4_fired(&rep, 0, "reshape_reshape"),
              (long long)l4_fired(&rep, 0, "reshape_noop"));
    kn_graph_free(g);
    /* an explicit broadcast whose removal would change the result's type stays */
    const char *bc = "%0 = input {name=\"x\"} : f32[3]\n%1 = input {name=\"y\"} : f32[3]\n"
                     "%2 = broadcast_to %1 {shape=[2,3]} : f32[2,3]\n%3 = add %0, %2 : f32[2,3]\noutput %3\n";
    l4_expect(bc, "views", bc);
    /* broadcast of a constant, any shape, keeps the value */
    l4_expect("%0 = full {value=-2.5} : f32[1]\n%1 = broadcast_to %0 {shape=[3,4]} : f32[3,4]\noutput %1\n", "views,dce",
              "%0 = full {value=-2.5} : f32[3,4]\noutput %0\n");
    /* a permute moving only unit axes becomes a reshape; one that reorders real axes does not */
    l4_expect("%0 = input {name=\"x\"} : f32[1,5,1,2]\n%1 = permute %0 {perm=[1,2,3,0]} : f32[5,1,2,1]\n"
              "%2 = permute %0 {perm=[3,1,0,2]} : f32[2,5,1,1]\noutput %1, %2\n",
              "views,dce", "%0 = input {name=\"x\"} : f32[1,5,1,2]\n%1 = reshape %0 {shape=[5,1,2,1]} : f32[5,1,2,1]\n"
                           "%2 = permute %0 {perm=[3,1,0,2]} : f32[2,5,1,1]\noutput %1, %2\n");
}

KN_TEST(lab04_hidden_rules, random_graphs_reach_a_fixed_point, .timeout = 200) {
    for (uint64_t s = 0; s < 120; s++) {
        kn_randgraph_opts o = kn_randgraph_defaults();
        o.plant = 70;
        o.dtype = s % 2 ? KN_DT_F32 : KN_DT_F64;
        kn_graph *g;
        KN_ASSERT_OK(kn_randgraph(&g, 3000 + s, &o));
        for (int k = 0; k < 2; k++) {
            const char *list = k ? "views" : "algebra";
            kn_graph *c = l4_run(g, list, NULL, NULL);
            kn_pass_report rep;
            kn_graph *c2 = l4_run(c, list, NULL, &rep);
            cr_assert(kn_out_i64("rewrites", kn_pass_stats_total(&rep.pass[0])) == 0, "seed %llu: %s fired again on its own output",
                      (unsigned long long)s, list);
            kn_graph_free(c2);
            kn_graph_free(c);
        }
        kn_graph_free(g);
    }
}

KN_TEST(lab04_hidden_gpt, joint_graph_through_the_lab_passes, .timeout = 200) {
    kn_gpt_config cfg = {.vocab = 13, .context = 6, .layers = 2, .width = 8, .heads = 2};
    kn_graph *joint;
    KN_ASSERT_OK(kn_gpt_graph(&cfg, 2, 6, true, &joint));
    static const char *const lists[] = {"dce", "cse", "algebra", "views", "algebra,views,cse,dce", "all"};
    for (int i = 0; i < 6; i++) {
        kn_pass_report rep;
        kn_graph *c = l4_run(joint, lists[i], NULL, &rep);
        cr_assert(c->noutputs == joint->noutputs && c->nnodes <= joint->nnodes);
        if (!strcmp(lists[i], "views")) cr_assert(l4_fired(&rep, 0, "slice_noop") == 1, "T == context: wpe[0:T] is all of it");
        kn_graph_free(c);
    }
    kn_graph_free(joint);
}

/* ---------------------------------------------------------------- memory and edge cases */

/* Every pass frees what it allocates: the count of live kiln allocations is the same
 * before a graph is copied, passed and freed, and after (kn_alloc_live, no sanitizer
 * needed). The first round warms up whatever a pass keeps for the whole process. */
KN_TEST(lab04_hidden_memory, every_pass_frees_what_it_allocates, .timeout = 200) {
    const char *passes[] = {"dce", "cse", "algebra", "views", "algebra,views,cse,dce"};
    kn_randgraph_opts o = kn_randgraph_defaults();
    o.plant = 40;
    for (int round = 0; round < 2; round++)
        for (uint64_t s = 0; s < 20; s++) {
            o.nodes = 10 + (int)(s % 30);
            kn_graph *g;
            KN_ASSERT_OK(kn_randgraph(&g, 3000 + s, &o));
            for (size_t p = 0; p < sizeof passes / sizeof passes[0]; p++) {
                long before = kn_alloc_live();
                kn_graph *c = NULL;
                KN_ASSERT_OK(kn_graph_copy(&c, g));
                KN_ASSERT_OK(kn_out_status("kn_passes_run", kn_passes_run(c, passes[p], NULL)));
                kn_graph_free(c);
                long leaked = (long)kn_out_i64("allocations not freed", kn_alloc_live() - before);
                cr_assert(round == 0 || leaked == 0, "seed %llu, %s: %ld allocations not freed", (unsigned long long)s,
                          passes[p], leaked);
            }
            kn_graph_free(g);
        }
}

/* Out of memory at each allocation in turn: the pass answers KN_ERR_OOM (never another
 * code, never a crash), the graph still verifies and computes what it did, nothing leaks;
 * with enough memory it succeeds. */
static void oom_sweep(const char *text, kn_status (*pass)(kn_graph *, kn_pass_stats *), const char *name) {
    kn_graph *g = l4_parse(text);
    bool done = false;
    for (long k = 0; k < 64 && !done; k++) {
        kn_graph *c = NULL;
        KN_ASSERT_OK(kn_graph_copy(&c, g));
        kn_pass_stats st;
        memset(&st, 0, sizeof st);
        long before = kn_alloc_live();
        kn_alloc_fail_after(k);
        kn_status r = pass(c, &st);
        kn_alloc_fail_after(-1);
        r = kn_out_status(name, r);
        long leaked = (long)kn_out_i64("allocations left live", kn_alloc_live() - before);
        kn_out_graph("the graph after the pass", &c);
        cr_assert(r == KN_OK || r == KN_ERR_OOM, "%s with allocation %ld failing: status %d (%s)", name, k, (int)r,
                  kn_last_error());
        if (r == KN_ERR_OOM) {
            cr_assert(leaked == 0, "%s: %ld allocations leaked on the OOM path", name, leaked);
            KN_ASSERT_OK(kn_graph_verify(c));
            double d = -1;
            KN_ASSERT_OK(kn_graph_compare(g, c, 3, &d));
            cr_assert(d == 0, "%s failed half-way and changed the numbers", name);
        }
        done = r == KN_OK;
        kn_graph_free(c);
    }
    cr_assert(done, "%s never succeeded", name);
    kn_graph_free(g);
}

KN_TEST(lab04_hidden_memory, out_of_memory_at_every_allocation) {
    const char *g = "%0 = input {name=\"x\"} : f32[2]\n%1 = neg %0 : f32[2]\n%2 = neg %0 : f32[2]\n"
                    "%3 = exp %1 : f32[2]\n%4 = add %1, %2 : f32[2]\noutput %4\n";
    oom_sweep(g, kn_pass_dce, "kn_pass_dce");
    oom_sweep(g, kn_pass_cse, "kn_pass_cse");
}

KN_TEST(lab04_hidden_cse, node_zero_and_random_twins) {
    /* the first node of the graph is a computing node: its twin must find it in the table */
    l4_expect("%0 = full {value=1} : f32[2]\n%1 = full {value=1} : f32[2]\n%2 = add %0, %1 : f32[2]\noutput %2\n", "cse",
              "%0 = full {value=1} : f32[2]\n%1 = add %0, %0 : f32[2]\noutput %1\n");
    /* two dropouts written the same way still stay two: random ops are never merged */
    const char *dr = "%0 = input {name=\"x\"} : f32[4]\n%1 = dropout %0 {p=0.5, seed=7} : f32[4]\n"
                     "%2 = dropout %0 {p=0.5, seed=7} : f32[4]\n%3 = add %1, %2 : f32[4]\noutput %3\n";
    kn_graph *g = l4_parse(dr);
    kn_graph *c = NULL;
    KN_ASSERT_OK(kn_graph_copy(&c, g));
    KN_ASSERT_OK(kn_out_status("kn_passes_run", kn_passes_run(c, "cse", NULL)));
    kn_out_graph("the graph after cse", &c);
    cr_assert(count_op(c, KN_OP_DROPOUT) == 2, "%d dropouts after cse", count_op(c, KN_OP_DROPOUT));
    kn_graph_free(c);
    kn_graph_free(g);
}

KN_TEST(lab04_hidden_dce, an_output_at_node_zero) {
    /* a computing node at %0 that an output reads is live */
    l4_expect("%0 = full {value=2} : f32[2]\n%1 = full {value=3} : f32[2]\noutput %0\n", "dce",
              "%0 = full {value=2} : f32[2]\noutput %0\n");
}

KN_TEST(lab04_hidden_views, unit_axes_and_broadcast_operands) {
    /* only the unit axis moves, behind a real axis of size > 1 at the front */
    l4_expect("%0 = input {name=\"x\"} : f32[3,1,4]\n%1 = permute %0 {perm=[0,2,1]} : f32[3,4,1]\noutput %1\n",
              "views,dce", "%0 = input {name=\"x\"} : f32[3,1,4]\n%1 = reshape %0 {shape=[3,4,1]} : f32[3,4,1]\noutput %1\n");
    /* each arithmetic op reads a broadcast operand in place (the op broadcasts itself) */
    const char *ops[] = {"add", "sub", "mul", "div"};
    for (int i = 0; i < 4; i++) {
        char in[512], want[512];
        snprintf(in, sizeof in, "%%0 = input {name=\"x\"} : f32[1,3]\n%%1 = input {name=\"y\"} : f32[2,3]\n"
                 "%%2 = broadcast_to %%0 {shape=[2,3]} : f32[2,3]\n%%3 = %s %%2, %%1 : f32[2,3]\noutput %%3\n", ops[i]);
        snprintf(want, sizeof want, "%%0 = input {name=\"x\"} : f32[1,3]\n%%1 = input {name=\"y\"} : f32[2,3]\n"
                 "%%2 = %s %%0, %%1 : f32[2,3]\noutput %%2\n", ops[i]);
        l4_expect(in, "views,dce", want);
    }
}
