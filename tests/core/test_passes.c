/* test_passes.c — the pass manager, the pattern rewriter, constant folding and the lab 04
 * passes (with the solution units) on golden files, random graphs and the GPT.
 *
 * Golden files: tests/passes/NAME.in.ir starts with "# passes: LIST"; running LIST on it
 * must print exactly tests/passes/NAME.out.ir, and both must compute the same numbers.
 * Random graphs (kn_randgraph): every pass alone and "all" on hundreds of seeds, before
 * and after compared by the interpreter on random inputs: the passes are exact
 * rewrites, so the difference must be 0. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_test.h"
#include "kiln/nn.h"
#include "kiln/passes.h"

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    cr_assert(fread(buf, 1, (size_t)n, f) == (size_t)n);
    buf[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static kn_graph *parse(const char *text) {
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_graph_parse(text, strlen(text), &g));
    KN_ASSERT_OK(kn_graph_verify(g));
    return g;
}

/* Run list on a copy of g; the copy must compute exactly what g does. */
static kn_graph *run_checked(const kn_graph *g, const char *list, kn_pass_report *rep, uint64_t seed) {
    kn_graph *c;
    KN_ASSERT_OK(kn_graph_copy(&c, g));
    KN_ASSERT_OK(kn_passes_run(c, list, rep));
    KN_ASSERT_OK(kn_graph_verify(c));
    double d = -1;
    KN_ASSERT_OK(kn_graph_compare(g, c, seed, &d));
    cr_assert(d == 0, "passes %s changed the numbers of seed %llu: max |delta| %g", list, (unsigned long long)seed, d);
    return c;
}

KN_TEST(passes_golden, every_file_gives_its_expected_text) {
    DIR *dir = opendir("tests/passes");
    cr_assert(dir, "tests/passes is missing");
    int count = 0;
    for (struct dirent *e; (e = readdir(dir));) {
        size_t n = strlen(e->d_name);
        if (n < 7 || strcmp(e->d_name + n - 6, ".in.ir")) continue;
        char path[512], outp[512], list[128] = "";
        snprintf(path, sizeof path, "tests/passes/%s", e->d_name);
        snprintf(outp, sizeof outp, "tests/passes/%.*s.out.ir", (int)(n - 6), e->d_name);
        size_t len, olen;
        char *text = slurp(path, &len), *want = slurp(outp, &olen);
        cr_assert(sscanf(text, "# passes: %127s", list) == 1, "%s: first line must be '# passes: LIST'", path);
        kn_graph *g = parse(text);
        kn_graph *c = run_checked(g, list, NULL, 3);
        char *got = NULL;
        KN_ASSERT_OK(kn_graph_to_string(c, &got));
        cr_assert_str_eq(got, want, "%s after %s:\n%s\nexpected:\n%s", path, list, got, want);
        kn_free(got);
        kn_graph_free(c);
        kn_graph_free(g);
        free(text);
        free(want);
        count++;
    }
    closedir(dir);
    cr_assert(count >= 16, "only %d golden files", count);
}

/* How the sweeps below name pass p of the table: remat with one of its policies that
 * needs no layer scopes (seed picks which). autocast changes the numbers by design (to
 * bf16 or fp16): these sweeps, which demand exact results, skip it ("none");
 * test_autocast.c checks it against f32 with a tolerance per dtype. */
static const char *pass_list(const kn_pass *table, int np, int p, uint64_t seed) {
    if (p == np) return "all";
    if (!table[p].check_arg) return table[p].name;
    if (!strcmp(table[p].name, "autocast")) return "none";
    cr_assert(!strcmp(table[p].name, "remat"), "pass %s takes an argument the tests do not know", table[p].name);
    return seed % 2 ? "remat:mincut" : "remat:selective";
}

/* Every pass alone, then "all", on many random graphs; collect the rules that fired. */
static void random_sweep(kn_dtype dt, int seeds, int nodes, const char *const *must_fire) {
    int np;
    const kn_pass *table = kn_passes_table(&np);
    const char *fired[128];
    int nfired = 0;
    kn_randgraph_opts o = kn_randgraph_defaults();
    o.dtype = dt;
    o.nodes = nodes;
    for (int s = 0; s < seeds; s++) {
        kn_graph *g;
        KN_ASSERT_OK(kn_randgraph(&g, (uint64_t)s, &o));
        for (int p = 0; p <= np; p++) {
            if (p < np && table[p].by_name) continue; /* not exact: tests/core/test_flash.c */
            kn_pass_report rep;
            kn_graph *c = run_checked(g, pass_list(table, np, p, (uint64_t)s), &rep, (uint64_t)s + 100);
            cr_assert(rep.nodes_after == c->nnodes && rep.nodes_before == g->nnodes);
            cr_assert(c->noutputs == g->noutputs);
            for (int i = 0; i < rep.npasses; i++)
                for (int r = 0; r < rep.pass[i].nfired; r++) {
                    bool seen = false;
                    for (int k = 0; k < nfired; k++) seen |= !strcmp(fired[k], rep.pass[i].rule[r]);
                    if (!seen && nfired < 128) fired[nfired++] = rep.pass[i].rule[r];
                }
            if (p == np) { /* after "all", a second "all" finds nothing left to remove */
                kn_graph *c2 = run_checked(c, "all", &rep, 5);
                cr_assert(c2->nnodes == c->nnodes, "seed %d: a second 'all' went from %d to %d nodes", s, c->nnodes,
                          c2->nnodes);
                kn_graph_free(c2);
            }
            kn_graph_free(c);
        }
        kn_graph_free(g);
    }
    for (int i = 0; must_fire[i]; i++) {
        bool seen = false;
        for (int k = 0; k < nfired; k++) seen |= !strcmp(fired[k], must_fire[i]);
        cr_assert(seen, "rule %s never fired on %d random graphs", must_fire[i], seeds);
    }
}

static const char *const all_rules[] = {"fold_eval", "fold_view", "dead", "merged", "add_zero", "sub_zero", "mul_one",
    "div_one", "neg_neg", "cast_noop", "cast_cast", "reshape_noop", "broadcast_noop", "slice_noop", "permute_noop",
    "reshape_reshape", "permute_permute", "broadcast_broadcast", "broadcast_full", "permute_as_reshape",
    "broadcast_operand_lhs", "broadcast_operand_rhs", NULL};

KN_TEST(passes_random, f64_graphs_keep_their_numbers, .timeout = 300) { random_sweep(KN_DT_F64, 300, 24, all_rules); }

KN_TEST(passes_random, f32_and_larger_graphs_keep_their_numbers, .timeout = 300) {
    static const char *const none[] = {NULL};
    random_sweep(KN_DT_F32, 60, 24, none);
    random_sweep(KN_DT_F64, 30, 80, none);
}

KN_TEST(passes_random, generator_is_deterministic_and_verified) {
    for (uint64_t s = 0; s < 20; s++) {
        kn_graph *a, *b;
        KN_ASSERT_OK(kn_randgraph(&a, s, NULL));
        KN_ASSERT_OK(kn_randgraph(&b, s, NULL));
        char *ta, *tb;
        KN_ASSERT_OK(kn_graph_to_string(a, &ta));
        KN_ASSERT_OK(kn_graph_to_string(b, &tb));
        cr_assert_str_eq(ta, tb);
        KN_ASSERT_OK(kn_graph_verify(a));
        kn_free(ta);
        kn_free(tb);
        kn_graph_free(a);
        kn_graph_free(b);
    }
    kn_randgraph_opts o = kn_randgraph_defaults();
    o.nodes = 0;
    kn_graph *g = NULL;
    KN_ASSERT_ERR(kn_randgraph(&g, 1, &o), KN_ERR_ARG);
}

/* The GPT's joint graph (small, so the interpreter checks it quickly) through every pass. */
KN_TEST(passes_gpt, joint_graph_through_every_pass, .timeout = 300) {
    kn_gpt_config cfg = {.vocab = 17, .context = 8, .layers = 2, .width = 16, .heads = 2};
    kn_graph *fwd, *joint;
    KN_ASSERT_OK(kn_gpt_graph(&cfg, 2, 8, true, &joint));
    KN_ASSERT_OK(kn_gpt_graph(&cfg, 2, 5, false, &fwd));
    KN_ASSERT_ERR(kn_gpt_graph(&cfg, 2, 9, false, &fwd), KN_ERR_ARG);
    int np;
    const kn_pass *table = kn_passes_table(&np);
    for (int p = 0; p <= np; p++) {
        if (p < np && table[p].by_name) continue; /* not exact: tests/core/test_flash.c */
        kn_pass_report rep;
        kn_graph *c = run_checked(joint, pass_list(table, np, p, (uint64_t)p), &rep, 11);
        cr_assert(c->nnodes <= joint->nnodes || table[p].check_arg, "only remat adds nodes");
        kn_graph_free(c);
    }
    /* With T shorter than the context the position slice is real and stays. */
    kn_pass_report rep;
    kn_graph *c = run_checked(fwd, "all", &rep, 2);
    cr_assert(c->nnodes == fwd->nnodes && c->noutputs == 2, "nothing to remove from the forward graph at T < context");
    kn_graph_free(c);
    kn_graph_free(fwd);
    kn_graph_free(joint);
}

KN_TEST(passes_manager, lists_names_and_errors) {
    kn_graph *g = parse("%0 = input {name=\"x\"} : f32[2]\n%1 = neg %0 : f32[2]\n%2 = neg %1 : f32[2]\n"
                        "%3 = exp %0 : f32[2]\noutput %2\n");
    kn_pass_report rep;
    KN_ASSERT_ERR(kn_passes_run(g, "cse,bogus", &rep), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "unknown pass 'bogus' (known: fold, views, algebra, cse, dce, remat, autocast, lowparams, lowloss, lowsave, flash, epilogue, hfuse, ddp, zero, zero3, quantize, all, none)"),
              "%s", kn_last_error());
    cr_assert(rep.npasses == 0 && g->nnodes == 4, "nothing runs when a name is unknown");
    KN_ASSERT_OK(kn_passes_run(g, "none", &rep));
    KN_ASSERT_OK(kn_passes_run(g, "", &rep));
    cr_assert(rep.npasses == 0 && g->nnodes == 4);
    int n = 0;
    KN_ASSERT_OK(kn_passes_check(" algebra , dce ", &n));
    cr_assert(n == 2);
    KN_ASSERT_OK(kn_passes_check("all,dce", &n));
    cr_assert(n == 6, "all runs the passes that take no argument: %d", n);
    KN_ASSERT_OK(kn_passes_check("cse, remat:every:2 ,dce", &n));
    cr_assert(n == 3);
    KN_ASSERT_ERR(kn_passes_check("cse:x", &n), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "pass cse takes no argument (got 'cse:x')"), "%s", kn_last_error());
    KN_ASSERT_ERR(kn_passes_check("all:full", &n), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_passes_check("remat", &n), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "remat needs a policy"), "%s", kn_last_error());
    KN_ASSERT_ERR(kn_passes_check("dce,,nope", &n), KN_ERR_ARG);
    KN_ASSERT_OK(kn_passes_run(g, " algebra , dce ", &rep));
    cr_assert(rep.npasses == 2 && !strcmp(rep.name[0], "algebra") && !strcmp(rep.name[1], "dce"));
    cr_assert(rep.pass[0].nodes_before == 4 && rep.pass[0].nodes_after == 3, "algebra drops the outer neg: %d",
              rep.pass[0].nodes_after);
    cr_assert(rep.pass[1].nodes_before == 3 && rep.pass[1].nodes_after == 1);
    cr_assert(rep.nodes_before == 4 && rep.nodes_after == 1 && rep.verified);
    cr_assert(rep.pass[0].nfired == 1 && !strcmp(rep.pass[0].rule[0], "neg_neg") && rep.pass[0].count[0] == 1);
    cr_assert(rep.pass[1].nfired == 1 && !strcmp(rep.pass[1].rule[0], "dead") && rep.pass[1].count[0] == 2);
    cr_assert(rep.pass[0].ms >= 0 && rep.ms >= rep.pass[0].ms);
    cr_assert(g->noutputs == 1 && g->outputs[0] == 0);
    cr_assert(kn_pass_find("cse") && !kn_pass_find("CSE") && !kn_pass_find(NULL));
    kn_graph_free(g);
}

/* A pass that breaks the graph: the verifier after it names the pass and the node. */
static kn_status break_types(kn_graph *g, kn_pass_stats *st) {
    (void)st;
    g->nodes[1].type.shape[0] = 5;
    return KN_OK;
}
static kn_status fail_outright(kn_graph *g, kn_pass_stats *st) {
    (void)g; (void)st;
    return kn_error(KN_ERR_ARG, "it went wrong");
}

KN_TEST(passes_manager, verifier_names_the_pass_and_the_node) {
    const kn_pass table[] = {{"good", kn_pass_dce, "dce", NULL, false}, {"breaker", break_types, "bad", NULL, false},
                             {"failer", fail_outright, "x", NULL, false}};
    kn_graph *g = parse("%0 = input {name=\"x\"} : f32[2]\n%1 = neg %0 : f32[2]\noutput %1\n");
    KN_ASSERT_ERR(kn_passes_run_with(table, 3, g, "good,breaker", NULL), KN_ERR_SHAPE);
    cr_assert(strstr(kn_last_error(), "after pass breaker: %1 = neg"), "%s", kn_last_error());
    kn_graph_free(g);
    g = parse("%0 = input {name=\"x\"} : f32[2]\n%1 = neg %0 : f32[2]\noutput %1\n");
    KN_ASSERT_ERR(kn_passes_run_with(table, 3, g, "failer", NULL), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "pass failer failed: it went wrong"), "%s", kn_last_error());
    bool old = kn_passes_set_verify(false);
    kn_pass_report rep;
    KN_ASSERT_OK(kn_passes_run_with(table, 3, g, "breaker", &rep));
    cr_assert(!rep.verified);
    kn_passes_set_verify(old);
    KN_ASSERT_ERR(kn_passes_run(g, "dce", NULL), KN_ERR_SHAPE);
    cr_assert(strstr(kn_last_error(), "does not verify before the passes"), "%s", kn_last_error());
    kn_graph_free(g);
    KN_ASSERT_ERR(kn_passes_run(NULL, "dce", NULL), KN_ERR_ARG);
}

KN_TEST(passes_edit, compact_and_attrs) {
    kn_graph *g = parse("%0 = input {name=\"x\"} : f32[2]\n%1 = neg %0 : f32[2]\n%2 = neg %0 : f32[2]\n"
                        "%3 = add %1, %2 : f32[2]\noutput %3, %2\n");
    int32_t uses[4];
    kn_graph_uses(g, uses);
    cr_assert(uses[0] == 2 && uses[1] == 1 && uses[2] == 2 && uses[3] == 1);
    int32_t bad[4] = {0, 2, 2, 3};
    KN_ASSERT_ERR(kn_graph_compact(g, bad, NULL), KN_ERR_ARG);
    bool keep[4] = {true, false, true, true};
    KN_ASSERT_ERR(kn_graph_compact(g, NULL, keep), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "%3 = add keeps operand %1"), "%s", kn_last_error());
    cr_assert(g->nnodes == 4, "unchanged on failure");
    int32_t repl[4] = {0, 1, 1, 3};
    KN_ASSERT_OK(kn_graph_compact(g, repl, NULL));
    char *t;
    KN_ASSERT_OK(kn_graph_to_string(g, &t));
    cr_assert_str_eq(t, "%0 = input {name=\"x\"} : f32[2]\n%1 = neg %0 : f32[2]\n%2 = add %1, %1 : f32[2]\noutput %2, %1\n");
    kn_free(t);
    kn_graph_free(g);
    kn_attrs a = kn_attrs_default(), b = kn_attrs_default();
    b.value = -0.0;
    cr_assert(!kn_attrs_equal(KN_OP_FULL, &a, &b) && kn_attrs_equal(KN_OP_NEG, &a, &b), "-0 differs only where used");
    b = a;
    b.axes[b.naxes++] = 1;
    cr_assert(!kn_attrs_equal(KN_OP_SUM, &a, &b) && kn_attrs_equal(KN_OP_MATMUL, &a, &b));
    b = a;
    b.seed = 4;
    cr_assert(!kn_attrs_equal(KN_OP_DROPOUT, &a, &b) && kn_op_is_random(KN_OP_DROPOUT) && !kn_op_is_random(KN_OP_ADD));
    kn_pass_stats st = {0};
    kn_pass_stats_fire(&st, "a", 2);
    kn_pass_stats_fire(&st, "b", 1);
    kn_pass_stats_fire(&st, "a", 3);
    kn_pass_stats_fire(&st, "c", 0);
    cr_assert(st.nfired == 2 && st.count[0] == 5 && kn_pass_stats_total(&st) == 6);
}

/* Patterns: operand order, commutation, repeated slots, type and value constraints. */
static bool is_pos_axis(const kn_graph *g, const kn_node *n) {
    (void)g;
    return n->attrs.axis >= 0;
}

KN_TEST(passes_rewrite, patterns_match_what_they_say) {
    kn_graph *g = parse("%0 = input {name=\"x\"} : f32[2,3]\n%1 = full {value=2} : f32[]\n"
                        "%2 = mul %1, %0 : f32[2,3]\n%3 = sub %0, %0 : f32[2,3]\n%4 = sub %0, %2 : f32[2,3]\n"
                        "%5 = softmax %0 {axis=1} : f32[2,3]\n%6 = softmax %0 : f32[2,3]\noutput %3\n");
    kn_pat x = {.op = KN_PAT_ANY, .bind = 1}, two = {.op = KN_OP_FULL, .flags = KN_PAT_VALUE, .value = 2};
    kn_pat mul = {.op = KN_OP_MUL, .in = {&x, &two}};
    kn_match m;
    cr_assert(!kn_pat_match(g, &mul, 2, &m), "operands in order only");
    mul.flags = KN_PAT_COMMUTE;
    cr_assert(kn_pat_match(g, &mul, 2, &m) && m.bind[1] == 0);
    two.value = 3;
    cr_assert(!kn_pat_match(g, &mul, 2, &m));
    kn_pat same = {.op = KN_OP_SUB, .in = {&x, &x}};
    cr_assert(kn_pat_match(g, &same, 3, &m) && m.bind[1] == 0);
    cr_assert(!kn_pat_match(g, &same, 4, &m), "a slot bound twice needs the same value");
    kn_pat scalar = {.op = KN_PAT_ANY, .flags = KN_PAT_SCALAR}, root_t = {.op = KN_PAT_ANY, .flags = KN_PAT_ROOT_TYPE};
    cr_assert(kn_pat_match(g, &scalar, 1, &m) && !kn_pat_match(g, &scalar, 0, &m));
    kn_pat sub_rt = {.op = KN_OP_SUB, .in = {&root_t, &root_t}};
    cr_assert(kn_pat_match(g, &sub_rt, 4, &m));
    kn_pat mul_rt = {.op = KN_OP_MUL, .in = {&root_t, &root_t}};
    cr_assert(!kn_pat_match(g, &mul_rt, 2, &m), "the scalar operand does not have the root's type");
    kn_pat sm = {.op = KN_OP_SOFTMAX, .where = is_pos_axis};
    cr_assert(kn_pat_match(g, &sm, 5, &m) && !kn_pat_match(g, &sm, 6, &m));
    cr_assert(!kn_pat_match(g, &sm, 99, &m) && !kn_pat_match(g, NULL, 1, &m));
    kn_graph_free(g);
}

static int32_t wrong_type(kn_rewriter *rw, const kn_match *m) {
    (void)m;
    kn_type t = {KN_DT_F32, 1, {7}};
    return kn_rw_full(rw, &t, 0);
}
static int32_t bad_emit(kn_rewriter *rw, const kn_match *m) {
    int32_t in[2] = {m->bind[1], m->bind[1]};
    return kn_rw_emit(rw, KN_OP_MATMUL, 2, in, NULL);
}
static int32_t decline(kn_rewriter *rw, const kn_match *m) {
    (void)rw; (void)m;
    return -1;
}

KN_TEST(passes_rewrite, replacements_are_checked) {
    const char *text = "%0 = input {name=\"x\"} : f32[2]\n%1 = neg %0 : f32[2]\noutput %1\n";
    kn_graph *g = parse(text);
    kn_pat x = {.op = KN_PAT_ANY, .bind = 1}, neg = {.op = KN_OP_NEG, .in = {&x}};
    kn_rule r1 = {"to_wrong_type", &neg, wrong_type};
    KN_ASSERT_ERR(kn_rewrite(g, &r1, 1, NULL), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "rule to_wrong_type replaced %1 = neg of type f32[2] by a value of type f32[7]"),
              "%s", kn_last_error());
    kn_rule r2 = {"bad_emit", &neg, bad_emit};
    KN_ASSERT_ERR(kn_rewrite(g, &r2, 1, NULL), KN_ERR_SHAPE);
    cr_assert(strstr(kn_last_error(), "rule bad_emit at %1 = neg: kn_rw_emit(matmul)"), "%s", kn_last_error());
    kn_rule r3 = {"decline", &neg, decline};
    kn_pass_stats st = {0};
    KN_ASSERT_OK(kn_rewrite(g, &r3, 1, &st));
    cr_assert(st.nfired == 0 && g->nnodes == 2);
    kn_rule r4 = {NULL, &neg, decline};
    KN_ASSERT_ERR(kn_rewrite(g, &r4, 1, NULL), KN_ERR_ARG);
    kn_graph_free(g);
}

/* The skeleton-independent parts: constant folding keeps kernels' rounding and skips
 * random ops and big tensors. */
KN_TEST(passes_fold, folds_only_uniform_small_deterministic_results) {
    kn_graph *g = parse("%0 = full {value=0.1} : f32[3]\n%1 = full {value=0.2} : f32[3]\n"
                        "%2 = add %0, %1 : f32[3]\n%3 = dropout %0 {p=0.5, seed=1} : f32[3]\n"
                        "%4 = full {value=1} : f32[300,300]\n%5 = sum %4 : f32[]\n"
                        "%6 = full {value=1} : f32[2,2]\n%7 = causal_fill %6 {value=0} : f32[2,2]\n"
                        "output %2, %3, %5, %7\n");
    kn_pass_stats st = {0};
    KN_ASSERT_OK(kn_pass_fold(g, &st));
    cr_assert(g->nodes[2].op == KN_OP_FULL && g->nodes[2].attrs.value == (double)(0.1f + 0.2f));
    cr_assert(g->nodes[3].op == KN_OP_DROPOUT && g->nodes[5].op == KN_OP_SUM && g->nodes[7].op == KN_OP_CAUSAL_FILL);
    cr_assert(st.nfired == 1 && st.count[0] == 1);
    kn_graph_free(g);
}
