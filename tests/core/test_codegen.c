/* test_codegen.c — the compiled program (fusion, kernel IR, generated C) against the
 * interpreter, the reference.
 *
 *   - hundreds of random graphs (kn_randgraph: elementwise ops with broadcasting,
 *     reductions, views, softmax, casts, dropout, matmuls, constants), f64, f32, bf16 and
 *     f16: every output within rounding of the interpreter's (f64: 1e-12 relative; f32, or
 *     an f64 graph that rounds a value to f32 on the way: 2e-5 relative, a few ulp times
 *     the reduction lengths these graphs have; bf16 and f16: 16 unit roundoffs,
 *     lowp_test_util.h says why), and the kernels' f16/bf16 conversions bit for bit;
 *   - the GPT's joint graph: the loss and every gradient; and 10 AdamW steps of the
 *     trainer, compiled against node by node;
 *   - fusion decisions on small graphs (an elementwise chain is one kernel, softmax and
 *     layernorm are one row kernel each, a matmul stays a library step and seals its
 *     operand's group), every kernel's IR verifies, and the GPT step has far fewer steps;
 *   - the kernel cache (a second compile is a hit), a compile error naming the generated
 *     file and the compiler's message, and no C compiler: a warning and the interpreter's
 *     kernels, with the same results. */
#define _GNU_SOURCE /* open_memstream */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kn_test.h"
#include "lowp_test_util.h"
#include "test_ir_util.h"
#include "train_modes.h"
#include "kiln/codegen.h"
#include "kiln/nn.h"
#include "kiln/passes.h"
#include "kiln/program.h"

/* A private kernel cache per test process, so tests neither share nor litter one. */
static void private_cache(void) {
    char tmpl[] = "/tmp/kiln-cg-XXXXXX";
    char *d = mkdtemp(tmpl);
    cr_assert_not_null(d);
    setenv("KILN_CACHE_DIR", d, 1);
}

/* The largest error of a `mode` program relative to the interpreter (kiln/program.h). */
static double compare(const kn_graph *g, kn_program_mode mode, uint64_t seed, kn_program_stats *stats) {
    kn_program_opts o = {.device = KN_CPU, .mode = mode};
    double worst = INFINITY;
    KN_ASSERT_OK(kn_program_compare(g, &o, seed, &worst, stats));
    return worst;
}

static void random_graphs(kn_dtype dt, int nseeds) {
    private_cache();
    kn_randgraph_opts ro = kn_randgraph_defaults();
    ro.dtype = dt;
    int fused_steps = 0, nodes = 0;
    for (int s = 0; s < nseeds; s++) {
        kn_graph *g = NULL;
        KN_ASSERT_OK(kn_randgraph(&g, (uint64_t)s, &ro));
        kn_program_stats st;
        double err = compare(g, KN_PROGRAM_COMPILED, (uint64_t)s + 7, &st);
        double tol = lowp_codegen_tolerance(dt);
        for (int i = 0; i < g->nnodes; i++) /* a value rounded to f32 on the way: f32's tolerance */
            if (g->nodes[i].op == KN_OP_CAST && g->nodes[i].type.dtype == KN_DT_F32 && tol < 2e-5) tol = 2e-5;
        cr_assert(err <= tol, "seed %d (%s): compiled program differs from the interpreter by %.3g (tolerance %.3g)", s,
                  kn_dtype_name(dt), err, tol);
        cr_assert_eq(st.mode, KN_PROGRAM_COMPILED);
        fused_steps += st.nsteps;
        nodes += st.nodes_computing;
        kn_graph_free(g);
    }
    cr_assert_lt(fused_steps, nodes, "fusion made no step out of several nodes (%d steps for %d nodes)", fused_steps, nodes);
}

KN_TEST(codegen, random_graphs_f64_match_the_interpreter, .timeout = 240) { random_graphs(KN_DT_F64, 160); }
KN_TEST(codegen, random_graphs_f32_match_the_interpreter, .timeout = 240) { random_graphs(KN_DT_F32, 120); }
KN_TEST(codegen, random_graphs_bf16_match_the_interpreter, .timeout = 240) { random_graphs(KN_DT_BF16, 120); }
KN_TEST(codegen, random_graphs_f16_match_the_interpreter, .timeout = 240) { random_graphs(KN_DT_F16, 80); }

/* The generated C's f16/bf16 conversions are core/base's, bit for bit, on every class of f32. */
KN_TEST(codegen, low_precision_conversions_are_bitwise_core_base) {
    private_cache();
    kn_program_opts o = {.device = KN_CPU, .mode = KN_PROGRAM_COMPILED};
    lowp_check_conversions(&o);
}

static kn_gpt_config tiny(void) { return (kn_gpt_config){.vocab = 17, .context = 8, .layers = 2, .width = 16, .heads = 2}; }

KN_TEST(codegen, gpt_joint_graph_loss_and_every_gradient, .timeout = 120) {
    private_cache();
    kn_gpt_config c = tiny();
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_gpt_graph(&c, 3, 8, true, &g));
    kn_program_stats st;
    double err = compare(g, KN_PROGRAM_COMPILED, 5, &st);
    cr_assert(err <= 2e-5, "GPT joint graph: compiled differs by %.3g", err);
    /* The arithmetic that fusion can touch (elementwise ops, reductions, the composite
     * row ops) was one kernel per node; now it is a handful of generated kernels plus the
     * column sums left to the library. */
    int arith = 0;
    for (int i = 0; i < g->nnodes; i++) {
        kn_op_category c = kn_op_get(g->nodes[i].op)->category;
        arith += c == KN_CAT_ELEMENTWISE || c == KN_CAT_REDUCTION || c == KN_CAT_OTHER;
    }
    cr_assert_lt(st.nsteps, st.nodes_computing, "fusion: %d steps for %d nodes", st.nsteps, st.nodes_computing);
    cr_assert_gt(st.nkernels, 0);
    cr_assert_lt(st.nkernels * 2, arith, "%d generated kernels for %d arithmetic nodes", st.nkernels, arith);
    kn_graph_free(g);
}

/* A graph from text, verified. */
static kn_graph *parse(const char *text) {
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_graph_parse(text, strlen(text), &g));
    KN_ASSERT_OK(kn_graph_verify(g));
    return g;
}

static kn_schedule *sched(const kn_graph *g) {
    kn_schedule *s = NULL;
    KN_ASSERT_OK(kn_schedule_build(g, &s));
    for (int i = 0; i < s->ngroups; i++) {
        if (!s->groups[i].fused) continue;
        kn_kernel k;
        KN_ASSERT_OK(kn_kernel_lower(g, s, i, &k));
        KN_ASSERT_OK(kn_kernel_verify(&k));
        kn_kernel_clear(&k);
    }
    return s;
}

KN_TEST(codegen, an_elementwise_chain_with_broadcast_and_a_transpose_is_one_kernel) {
    kn_graph *g = parse("%0 = input {name=\"x\"} : f32[4,8]\n"
                        "%1 = input {name=\"b\"} : f32[8]\n"
                        "%2 = input {name=\"y\"} : f32[8,4]\n"
                        "%3 = permute %2 {perm=[1,0]} : f32[4,8]\n"
                        "%4 = add %0, %1 : f32[4,8]\n"
                        "%5 = mul %4, %3 : f32[4,8]\n"
                        "%6 = tanh %5 : f32[4,8]\n"
                        "output %6\n");
    kn_schedule *s = sched(g);
    cr_assert_eq(s->nfused, 1, "add, mul, tanh and the permute read in place: one kernel");
    cr_assert_eq(s->nlibrary, 0, "the permute is not materialized");
    cr_assert_eq(s->groups[0].nnodes, 3);
    cr_assert(!s->materialize[4] && !s->materialize[5] && s->materialize[6], "only the output is stored");
    cr_assert_leq(compare(g, KN_PROGRAM_COMPILED, 3, NULL), 1e-6);
    kn_schedule_free(s);
    kn_graph_free(g);
}

KN_TEST(codegen, layernorm_then_softmax_is_one_row_kernel) {
    private_cache();
    kn_graph *g = parse("%0 = input {name=\"x\"} : f64[6,10]\n"
                        "%1 = param {name=\"w\"} : f64[10]\n"
                        "%2 = param {name=\"b\"} : f64[10]\n"
                        "%3 = layernorm %0, %1, %2 : f64[6,10]\n"
                        "%4 = softmax %3 : f64[6,10]\n"
                        "output %4\n");
    kn_graph *d = NULL;
    KN_ASSERT_OK(kn_graph_copy(&d, g));
    KN_ASSERT_OK(kn_pass_decompose(d, NULL));
    kn_pass_report rep;
    KN_ASSERT_OK(kn_passes_run(d, "dce", &rep));
    kn_schedule *s = sched(d);
    cr_assert_eq(s->nlibrary, 0, "no library step is left");
    cr_assert_eq(s->nfused, 1, "layernorm's and softmax's reductions are all over the rows' axis: one row kernel "
                               "(four loops over each row: mean, variance, max, sum; then the stores)");
    for (int i = 0; i < s->ngroups; i++) cr_assert(s->groups[i].reduces && s->groups[i].inner == 2u);
    cr_assert_leq(compare(g, KN_PROGRAM_COMPILED, 9, NULL), 1e-12);
    kn_schedule_free(s);
    kn_graph_free(d);
    kn_graph_free(g);
}

/* Cross-entropy and its backward are decomposed (row max, exp-sum, log, the target's logit
 * picked with onehot; softmax - onehot) and generated as row kernels: no library step is
 * left, the results equal the interpreter's, and a target outside [0, V) is the
 * interpreter's error, not a loss without its logit. */
static const char *ce_text(const char *dt) {
    static char buf[640];
    snprintf(buf, sizeof buf,
             "%%0 = input {name=\"x\"} : %s[2,3,7]\n"
             "%%1 = input {name=\"t\"} : i32[2,3]\n"
             "%%2 = input {name=\"g\"} : %s[]\n"
             "%%3 = cross_entropy %%0, %%1 : %s[]\n"
             "%%4 = cross_entropy_bwd %%2, %%0, %%1 : %s[2,3,7]\n"
             "output %%3, %%4\n",
             dt, dt, dt, dt);
    return buf;
}

KN_TEST(codegen, cross_entropy_and_its_backward_are_row_kernels) {
    private_cache();
    kn_graph *g = parse(ce_text("f64"));
    kn_graph *d = NULL;
    KN_ASSERT_OK(kn_graph_copy(&d, g));
    KN_ASSERT_OK(kn_pass_decompose(d, NULL));
    kn_pass_report rep;
    KN_ASSERT_OK(kn_passes_run(d, "cse,dce", &rep));
    for (int i = 0; i < d->nnodes; i++)
        cr_assert(d->nodes[i].op != KN_OP_CROSS_ENTROPY && d->nodes[i].op != KN_OP_CROSS_ENTROPY_BWD, "decomposed");
    kn_schedule *s = sched(d);
    int views = 0, onehots = 0;
    for (int i = 0; i < s->ngroups; i++) {
        const kn_group *G = &s->groups[i];
        if (!G->fused) views += G->nnodes == 1 && d->nodes[G->nodes[0]].op == KN_OP_RESHAPE;
        for (int j = 0; G->fused && j < G->nnodes; j++) onehots += d->nodes[G->nodes[j]].op == KN_OP_ONEHOT;
    }
    cr_assert_eq(s->nlibrary, views, "no library step but the targets' reshape (%d library steps):\n%s", s->nlibrary, s->log);
    cr_assert_geq(onehots, 1, "onehot is fused into a row kernel");
    cr_assert_leq(compare(g, KN_PROGRAM_COMPILED, 4, NULL), 1e-12);
    kn_schedule_free(s);
    kn_graph_free(d);
    kn_graph_free(g);
    g = parse(ce_text("f32"));
    cr_assert_leq(compare(g, KN_PROGRAM_COMPILED, 5, NULL), 2e-5);

    /* a bad target: the same error in both programs */
    int64_t xs[3] = {2, 3, 7}, ts[2] = {2, 3};
    kn_tensor *x = irt_randn(KN_DT_F32, 3, xs, 1), *gr = irt_randn(KN_DT_F32, 0, xs, 2), *t = NULL;
    KN_ASSERT_OK(kn_tensor_zeros(&t, KN_DT_I32, 2, ts));
    ((int32_t *)kn_tensor_data(t))[4] = 7;
    for (int m = 0; m < 2; m++) {
        kn_program_opts o = {.device = KN_CPU, .mode = m ? KN_PROGRAM_COMPILED : KN_PROGRAM_NODES};
        kn_program *p = NULL;
        KN_ASSERT_OK(kn_program_compile(&p, g, &o));
        KN_ASSERT_OK(kn_program_bind(p, "x", x));
        KN_ASSERT_OK(kn_program_bind(p, "t", t));
        KN_ASSERT_OK(kn_program_bind(p, "g", gr));
        cr_assert_eq(kn_program_run(p), KN_ERR_ARG, "mode %d runs with target 7 of 7 classes", m);
        cr_assert(strstr(kn_last_error(), "index 7 at position 4 is outside [0, 7)"), "mode %d: %s", m, kn_last_error());
        kn_program_free(p);
    }
    kn_tensor_free(x);
    kn_tensor_free(gr);
    kn_tensor_free(t);
    kn_graph_free(g);
}

/* A row of 16 or more reduces in 8 lanes: the maximum still propagates a NaN (the
 * interpreter's rule) wherever in the row it is, lane or tail, and the sum is the row's. */
KN_TEST(codegen, laned_row_reductions_keep_the_nan_rule) {
    private_cache();
    kn_graph *g = parse("%0 = input {name=\"x\"} : f32[4,21]\n%1 = max %0 {axes=[1]} : f32[4]\n"
                        "%2 = sum %0 {axes=[1]} : f32[4]\noutput %1, %2\n");
    int64_t xs[2] = {4, 21};
    kn_tensor *x = irt_randn(KN_DT_F32, 2, xs, 3);
    float *xp = kn_tensor_data(x);
    xp[1 * 21 + 5] = NAN;  /* a lane */
    xp[2 * 21 + 20] = NAN; /* the tail (21 = 16 + 5) */
    xp[3 * 21 + 9] = 1e30f;
    kn_program_opts o = {.device = KN_CPU, .mode = KN_PROGRAM_COMPILED};
    kn_program *p = NULL;
    KN_ASSERT_OK(kn_program_compile(&p, g, &o));
    cr_assert_eq(kn_program_get_stats(p).mode, KN_PROGRAM_COMPILED);
    KN_ASSERT_OK(kn_program_bind(p, "x", x));
    KN_ASSERT_OK(kn_program_run(p));
    const float *mx = kn_tensor_data(kn_program_output(p, 0)), *sm = kn_tensor_data(kn_program_output(p, 1));
    for (int r = 0; r < 4; r++) {
        float want = -INFINITY;
        double sum = 0;
        bool nan = false;
        for (int j = 0; j < 21; j++) {
            float v = xp[r * 21 + j];
            nan |= v != v;
            if (v > want) want = v;
            sum += v;
        }
        if (nan) cr_assert(isnan(mx[r]) && isnan(sm[r]), "row %d: max %g, sum %g, not NaN", r, mx[r], sm[r]);
        else {
            cr_assert_eq(mx[r], want, "row %d: max %g, want %g", r, mx[r], want);
            cr_assert_float_eq(sm[r], (float)sum, 1e-6 * fabs(sum) + 1e-6, "row %d: sum %g, want %g", r, sm[r], sum);
        }
    }
    kn_program_free(p);
    kn_tensor_free(x);
    kn_graph_free(g);
}

KN_TEST(codegen, a_matmul_is_a_library_step_that_seals_its_operand_group) {
    kn_graph *g = parse("%0 = input {name=\"x\"} : f32[4,8]\n"
                        "%1 = param {name=\"w\"} : f32[8,8]\n"
                        "%2 = exp %0 : f32[4,8]\n"
                        "%3 = matmul %2, %1 : f32[4,8]\n"
                        "%4 = add %2, %3 : f32[4,8]\n"
                        "output %4\n");
    kn_schedule *s = sched(g);
    cr_assert_eq(s->nlibrary, 1);
    cr_assert_eq(s->nfused, 2, "exp, then the matmul, then the add: the add cannot join exp's sealed group");
    cr_assert(s->materialize[2], "exp's value is stored: the matmul reads it");
    cr_assert(strstr(s->log, "sealed"), "the refusal is logged with its reason:\n%s", s->log);
    cr_assert_leq(compare(g, KN_PROGRAM_COMPILED, 3, NULL), 1e-5);
    kn_schedule_free(s);
    kn_graph_free(g);
}

KN_TEST(codegen, the_kernel_cache_hits_on_a_second_compile) {
    private_cache();
    kn_graph *g = parse("%0 = input {name=\"x\"} : f32[3,5]\n%1 = exp %0 : f32[3,5]\n%2 = sum %1 {axes=[1]} : f32[3]\n"
                        "output %2\n");
    kn_program_opts o = {.device = KN_CPU, .mode = KN_PROGRAM_COMPILED};
    kn_program *a = NULL, *b = NULL;
    KN_ASSERT_OK(kn_program_compile(&a, g, &o));
    KN_ASSERT_OK(kn_program_compile(&b, g, &o));
    cr_assert(!kn_program_get_stats(a).cached, "a fresh cache misses");
    cr_assert(kn_program_get_stats(b).cached, "the second compile loads %s", kn_program_get_stats(b).source);
    cr_assert_eq(access(kn_program_get_stats(b).source, R_OK), 0, "the generated source is kept beside the object");
    kn_program_free(a);
    kn_program_free(b);
    kn_graph_free(g);
}

KN_TEST(codegen, a_compile_error_names_the_file_and_shows_the_message) {
    private_cache();
    char script[] = "/tmp/kiln-badcc-XXXXXX";
    int fd = mkstemp(script);
    cr_assert_geq(fd, 0);
    const char *body = "#!/bin/sh\necho 'kernel.c:1:1: error: planted compiler failure' >&2\nexit 1\n";
    cr_assert_eq(write(fd, body, strlen(body)), (ssize_t)strlen(body));
    close(fd);
    chmod(script, 0755);
    setenv("KILN_CC", script, 1);
    kn_graph *g = parse("%0 = input {name=\"x\"} : f32[3]\n%1 = exp %0 : f32[3]\noutput %1\n");
    kn_program_opts o = {.device = KN_CPU, .mode = KN_PROGRAM_COMPILED};
    kn_program *p = NULL;
    cr_assert_eq(kn_program_compile(&p, g, &o), KN_ERR_INTERNAL);
    cr_assert_null(p);
    cr_assert(strstr(kn_last_error(), "planted compiler failure"), "%s", kn_last_error());
    cr_assert(strstr(kn_last_error(), ".c with"), "names the generated file: %s", kn_last_error());
    unlink(script);
    kn_graph_free(g);
}

KN_TEST(codegen, without_a_c_compiler_the_interpreter_kernels_run) {
    setenv("KILN_CC", "/nonexistent/kiln-cc", 1);
    kn_gpt_config c = tiny();
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_gpt_graph(&c, 2, 4, true, &g));
    kn_program_stats st;
    double err = compare(g, KN_PROGRAM_COMPILED, 2, &st);
    cr_assert_eq(st.mode, KN_PROGRAM_NODES, "falls back to the node-by-node program");
    cr_assert_eq(err, 0, "the same kernels in the same order: the same bits");
    kn_graph_free(g);
}

KN_TEST(codegen, compiled_training_follows_the_interpreter_for_ten_adamw_steps, .timeout = 120) {
    private_cache();
    kn_gpt_config c = tiny();
    kn_test_compiled_training_follows(&c, KN_CPU);
}

KN_TEST(codegen, the_memory_plan_shares_bytes_between_lifetimes) {
    private_cache();
    kn_gpt_config c = tiny();
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_gpt_graph(&c, 3, 8, true, &g));
    kn_program_opts o = {.device = KN_CPU, .mode = KN_PROGRAM_COMPILED};
    kn_program *p = NULL;
    KN_ASSERT_OK(kn_program_compile(&p, g, &o));
    kn_program_stats st = kn_program_get_stats(p);
    cr_assert_gt(st.mem_lower, 0);
    cr_assert_leq(st.mem_lower, st.mem_planned, "no plan beats the most bytes live at once");
    cr_assert_lt(st.mem_planned, 0.5 * st.mem_sum, "lifetimes share the arena: %.0f planned for %.0f", st.mem_planned,
                 st.mem_sum);
    cr_assert_leq(st.mem_planned, 1.5 * st.mem_lower, "greedy by size stays near the bound: %.0f against %.0f",
                  st.mem_planned, st.mem_lower);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    KN_ASSERT_OK(kn_program_memory_tsv(f, p));
    fclose(f);
    cr_assert(strstr(buf, "# step\tlive_bytes"), "%s", buf);
    int lines = 0;
    double peak = 0;
    for (char *q = strchr(buf, '\n'); q && q[1]; q = strchr(q + 1, '\n')) {
        lines++;
        double live = 0, top = 0;
        cr_assert_eq(sscanf(q + 1, "%*d %lf %lf", &live, &top), 2);
        cr_assert_leq(top, st.mem_planned);
        if (live > peak) peak = live;
    }
    cr_assert_eq(lines, st.nsteps);
    cr_assert_eq(peak, st.mem_lower);
    free(buf);
    kn_program_free(p);
    kn_graph_free(g);
}

/* opts.no_plan (the ablation's "-plan" row): every value its own bytes, nothing in place;
 * the arena is then at least the sum of the values, and the results do not change. */
KN_TEST(codegen, no_plan_gives_every_value_its_own_bytes) {
    private_cache();
    kn_gpt_config c = tiny();
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_gpt_graph(&c, 3, 8, true, &g));
    kn_program_opts o = {.device = KN_CPU, .mode = KN_PROGRAM_COMPILED}, n = o;
    n.no_plan = true;
    kn_program *p = NULL, *q = NULL;
    KN_ASSERT_OK(kn_program_compile(&p, g, &o));
    KN_ASSERT_OK(kn_program_compile(&q, g, &n));
    kn_program_stats sp = kn_program_get_stats(p), sq = kn_program_get_stats(q);
    cr_assert_geq(sq.mem_planned, sq.mem_sum, "no plan: %.0f bytes for values of %.0f", sq.mem_planned, sq.mem_sum);
    cr_assert_eq(sq.mem_inplace, 0);
    cr_assert_lt(sp.mem_planned, 0.5 * sq.mem_planned);
    kn_program_free(p);
    kn_program_free(q);
    kn_graph_free(g);
}

/* x @ w, exp of it (in place over the product, which dies there), and its product with w:
 * the start of both graphs below. */
#define INPLACE_HEAD                                                                                                   \
    "%0 = input {name=\"x\"} : f32[16,16]\n"                                                                         \
    "%1 = input {name=\"w\"} : f32[16,16]\n"                                                                         \
    "%2 = matmul %0, %1 : f32[16,16]\n"                                                                              \
    "%3 = exp %2 : f32[16,16]\n"                                                                                     \
    "%4 = matmul %3, %1 : f32[16,16]\n"

/* In place: K2 = tanh(%3) + %4 reads %3 and %4 for the last time, element for element, and
 * its result has their size: it is written over one of them. */
KN_TEST(codegen, an_elementwise_kernel_writes_in_place_over_an_operand_that_dies) {
    private_cache();
    kn_graph *g = parse(INPLACE_HEAD
                        "%5 = tanh %3 : f32[16,16]\n"
                        "%6 = add %5, %4 : f32[16,16]\n"
                        "%7 = mul %6, %6 : f32[16,16]\n"
                        "%8 = matmul %7, %1 : f32[16,16]\n"
                        "output %8\n");
    kn_program_stats st;
    double err = compare(g, KN_PROGRAM_COMPILED, 5, &st);
    cr_assert_leq(err, 1e-4, "written in place, the results are the interpreter's within f32 rounding: %.3g", err);
    cr_assert_eq(st.mem_inplace, 2, "exp over the matmul's %%2, the chain's kernel over %%3 or %%4: %d", st.mem_inplace);
    cr_assert_eq(st.mem_inplace_bytes, st.mem_inplace * 1024.0);
    cr_assert_lt(st.mem_planned, st.mem_planned_separate, "in place shares a buffer: %.0f against %.0f",
                 st.mem_planned, st.mem_planned_separate);
    cr_assert_leq(st.mem_lower, st.mem_planned);
    kn_graph_free(g);
}

/* A transposed read of the dying operand: the kernel would read element (j, i) after it
 * wrote (i, j) there, so the second kernel writes nothing in place; nor over a broadcast
 * operand. Only exp goes over the matmul's %2, as above. */
KN_TEST(codegen, no_in_place_over_a_transposed_or_broadcast_read) {
    private_cache();
    kn_graph *g = parse(INPLACE_HEAD
                        "%5 = sum %4 {axes=[0], keepdim=1} : f32[1,16]\n"
                        "%6 = permute %3 {perm=[1,0]} : f32[16,16]\n"
                        "%7 = tanh %3 : f32[16,16]\n"
                        "%8 = add %7, %6 : f32[16,16]\n"
                        "%9 = mul %8, %5 : f32[16,16]\n"
                        "%10 = matmul %9, %1 : f32[16,16]\n"
                        "output %10\n");
    kn_program_stats st;
    double err = compare(g, KN_PROGRAM_COMPILED, 6, &st);
    cr_assert_leq(err, 1e-4);
    cr_assert_eq(st.mem_inplace, 1, "%%3 is read transposed, %%5 broadcast: only exp over %%2 (%d)", st.mem_inplace);
    kn_graph_free(g);
}

/* The GPT step: in place never costs, and where the peak is an elementwise kernel (full
 * recompute: the peak is in a layer's recomputed forward) it lowers the planned peak. */
KN_TEST(codegen, in_place_on_the_gpt_step_before_and_after, .timeout = 120) {
    private_cache();
    kn_gpt_config c = {.vocab = 65, .context = 64, .layers = 2, .width = 64, .heads = 4};
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_gpt_graph(&c, 8, 64, true, &g));
    const char *policies[] = {"none", "all,remat:full"};
    for (int k = 0; k < 2; k++) {
        kn_program_opts o = {.device = KN_CPU, .passes = policies[k], .mode = KN_PROGRAM_COMPILED};
        kn_program *p = NULL;
        KN_ASSERT_OK(kn_program_compile(&p, g, &o));
        kn_program_stats st = kn_program_get_stats(p);
        fprintf(stderr, "gpt step (passes %s): arena %.0f bytes without in-place, %.0f with (%d values, %.0f bytes "
                "written in place); lower bound %.0f\n", policies[k], st.mem_planned_separate, st.mem_planned,
                st.mem_inplace, st.mem_inplace_bytes, st.mem_lower);
        cr_assert_gt(st.mem_inplace, 0);
        cr_assert_leq(st.mem_planned, st.mem_planned_separate);
        if (k == 1) cr_assert_lt(st.mem_planned, 0.9 * st.mem_planned_separate, "full remat: the peak drops");
        kn_program_free(p);
    }
    double err = 0;
    kn_program_opts o = {.device = KN_CPU, .passes = "all,remat:full", .mode = KN_PROGRAM_COMPILED};
    KN_ASSERT_OK(kn_program_compare(g, &o, 11, &err, NULL));
    cr_assert_leq(err, 1e-5, "compiled (in place) against the interpreter: %.3g", err);
    kn_graph_free(g);
}
