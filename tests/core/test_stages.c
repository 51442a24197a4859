/* test_stages.c — the compile pipeline as a table of stages (core/program/compile.c).
 *
 *   - a compiled program runs every stage of the table, in its order (passes, decompose,
 *     schedule, lower, plan, render, load), each with a summary; a node-by-node program
 *     skips decompose, lower, render and load, and says so; kn_program_print_stages prints
 *     every stage, in order (`kiln compile --stages` is checked in test_cli_compile.sh);
 *   - the memory plan comes before rendering, and the renderer uses its facts: a kernel
 *     that the plan writes in place over a dying operand declares exactly those two pointers
 *     without `restrict`, and a kernel whose operand is indexed like its result but still
 *     read later (not in place) keeps `restrict` on both: no guess from the indexing alone;
 *   - compiling the same graph twice gives the same program (steps, kernels' C, memory
 *     plan) and the same output bits, with KILN_KEEP_LOSS set or not: no environment
 *     variable changes what is compiled; the option that replaced it (opts.keep_loss)
 *     does, as does opts.scalar_math (the generated C's prelude: no SIMD declarations of
 *     the math functions), which replaced KILN_SCALAR_MATH. */
#define _GNU_SOURCE /* open_memstream */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_test.h"
#include "kiln/codegen.h"
#include "kiln/nn.h"
#include "kiln/passes.h"
#include "kiln/program.h"

/* A private kernel cache per test process, so tests neither share nor litter one. */
static void private_cache(void) {
    char tmpl[] = "/tmp/kiln-st-XXXXXX";
    char *d = mkdtemp(tmpl);
    cr_assert_not_null(d);
    setenv("KILN_CACHE_DIR", d, 1);
}

static kn_graph *parse(const char *text) {
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_graph_parse(text, strlen(text), &g));
    KN_ASSERT_OK(kn_graph_verify(g));
    return g;
}

static const char *const stage_names[KN_PROGRAM_NSTAGES] = {"passes", "decompose", "schedule", "lower",
                                                             "plan",   "render",    "load"};

/* What f wrote, as a string (caller frees). */
static char *capture(kn_status (*fn)(FILE *, const kn_program *), const kn_program *p) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_assert_not_null(f);
    KN_ASSERT_OK(fn(f, p));
    fclose(f);
    return buf;
}

static kn_graph *small_gpt(void) {
    kn_gpt_config c = {.vocab = 65, .context = 16, .layers = 1, .width = 32, .heads = 2};
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_gpt_graph(&c, 2, 16, true, &g));
    return g;
}

KN_TEST(stages, a_compiled_program_runs_every_stage_in_order) {
    private_cache();
    kn_graph *g = small_gpt();
    kn_program_opts o = {.device = KN_CPU, .passes = "all", .mode = KN_PROGRAM_COMPILED};
    kn_program *p = NULL;
    KN_ASSERT_OK(kn_program_compile(&p, g, &o));
    kn_program_stats st = kn_program_get_stats(p);
    cr_assert_eq(st.mode, KN_PROGRAM_COMPILED, "needs a C compiler");
    int plan = -1, render = -1;
    for (int i = 0; i < KN_PROGRAM_NSTAGES; i++) {
        const kn_program_stage_log *l = &st.stages[i];
        cr_assert_not_null(l->name, "stage %d has no name", i);
        cr_assert_str_eq(l->name, stage_names[i], "stage %d", i);
        cr_assert(l->ran, "%s did not run", l->name);
        cr_assert(l->ms >= 0 && l->ms <= st.compile_ms, "%s: %.3f ms of %.3f", l->name, l->ms, st.compile_ms);
        cr_assert(l->summary[0], "%s has no summary", l->name);
        if (!strcmp(l->name, "plan")) plan = i;
        if (!strcmp(l->name, "render")) render = i;
    }
    cr_assert(plan >= 0 && render > plan, "the memory plan (%d) comes before rendering (%d)", plan, render);
    char want[64];
    snprintf(want, sizeof want, "%d kernels", st.nkernels);
    cr_assert(strstr(st.stages[3].summary, want), "lower: '%s' lacks '%s'", st.stages[3].summary, want);
    cr_assert(strstr(st.stages[1].summary, "decompose: "), "decompose: '%s'", st.stages[1].summary);
    cr_assert(strstr(st.stages[4].summary, "arena "), "plan: '%s'", st.stages[4].summary);
    char *text = capture(kn_program_print_stages, p);
    const char *at = text;
    for (int i = 0; i < KN_PROGRAM_NSTAGES; i++) { /* every stage, one line each, in order */
        char line[64];
        snprintf(line, sizeof line, "  %s ", stage_names[i]);
        const char *hit = strstr(at, line);
        cr_assert_not_null(hit, "kn_program_print_stages lacks '%s' after the earlier stages:\n%s", stage_names[i], text);
        at = hit + 1;
    }
    cr_assert(strstr(at, "  total "), "no total line:\n%s", text);
    free(text);
    kn_program_free(p);
    kn_graph_free(g);
}

KN_TEST(stages, a_node_by_node_program_skips_the_code_generation_stages) {
    kn_graph *g = small_gpt();
    kn_program_opts o = {.device = KN_CPU, .passes = "fold", .mode = KN_PROGRAM_NODES};
    kn_program *p = NULL;
    KN_ASSERT_OK(kn_program_compile(&p, g, &o));
    kn_program_stats st = kn_program_get_stats(p);
    const bool ran[KN_PROGRAM_NSTAGES] = {true, false, true, false, true, false, false};
    for (int i = 0; i < KN_PROGRAM_NSTAGES; i++) {
        cr_assert_str_eq(st.stages[i].name, stage_names[i]);
        cr_assert_eq(st.stages[i].ran, ran[i], "%s: ran %d", stage_names[i], st.stages[i].ran);
        if (!ran[i]) cr_assert(strstr(st.stages[i].summary, "skipped"), "%s: '%s'", stage_names[i], st.stages[i].summary);
    }
    cr_assert(strstr(st.stages[2].summary, "one per computing node"), "schedule: '%s'", st.stages[2].summary);
    kn_program_free(p);
    kn_graph_free(g);
}

/* The restrict keywords of each generated function's pointer declarations, in order: the
 * count per function ("void kN(void *ctx, ...)" up to its loop). */
static int restricts(const char *c, int *per, int max) {
    int n = 0;
    for (const char *f = strstr(c, "(void *ctx, int64_t lo, int64_t hi)"); f && n < max;
         f = strstr(f + 1, "(void *ctx, int64_t lo, int64_t hi)")) {
        const char *end = strstr(f, "for (int64_t o = lo");
        cr_assert_not_null(end);
        per[n] = 0;
        for (const char *r = strstr(f, "restrict "); r && r < end; r = strstr(r + 1, "restrict ")) per[n]++;
        n++;
    }
    return n;
}

/* x @ w, then exp of it (kernel A), its product with w, and a kernel B adding that product
 * to the first one (%2), then a last product. %2 is read by B, so kernel A cannot write
 * over it: A's store and load are indexed alike, yet both stay `restrict`. B reads %2 and
 * %4 for the last time, element for element: the plan writes B's result over one of them,
 * and only those two pointers lose `restrict`. */
KN_TEST(stages, the_renderer_drops_restrict_where_the_plan_aliases_and_only_there) {
    private_cache();
    kn_graph *g = parse("%0 = input {name=\"x\"} : f32[16,16]\n"
                        "%1 = input {name=\"w\"} : f32[16,16]\n"
                        "%2 = matmul %0, %1 : f32[16,16]\n"
                        "%3 = exp %2 : f32[16,16]\n"
                        "%4 = matmul %3, %1 : f32[16,16]\n"
                        "%5 = add %4, %2 : f32[16,16]\n"
                        "%6 = matmul %5, %1 : f32[16,16]\n"
                        "output %6\n");
    kn_program_opts o = {.device = KN_CPU, .mode = KN_PROGRAM_COMPILED};
    kn_program *p = NULL;
    KN_ASSERT_OK(kn_program_compile(&p, g, &o));
    kn_program_stats st = kn_program_get_stats(p);
    cr_assert_eq(st.mode, KN_PROGRAM_COMPILED, "needs a C compiler");
    cr_assert_eq(st.nkernels, 2, "exp and add are kernels of their own: %d", st.nkernels);
    cr_assert_eq(st.mem_inplace, 1, "only the add's result goes in place: %d", st.mem_inplace);
    char *text = capture(kn_program_print_kernels, p);
    int per[4];
    cr_assert_eq(restricts(text, per, 4), 2, "two generated functions:\n%s", text);
    cr_assert_eq(per[0], 2, "exp's %%2 is read again later: both pointers restrict (%d):\n%s", per[0], text);
    cr_assert_eq(per[1], 1, "add writes over %%2 or %%4: only the third pointer restrict (%d):\n%s", per[1], text);
    free(text);
    double err = INFINITY;
    KN_ASSERT_OK(kn_program_compare(g, &o, 4, &err, NULL));
    cr_assert_leq(err, 1e-5, "the results are the interpreter's within f32 rounding: %.3g", err);
    kn_program_free(p);
    kn_graph_free(g);
}

/* Compile g with o, bind the same random inputs, run; *c receives the kernels' text. */
static kn_program *compile_and_run(const kn_graph *g, const kn_program_opts *o, char **c) {
    kn_program *p = NULL;
    KN_ASSERT_OK(kn_program_compile(&p, g, o));
    for (int32_t i = 0; i < g->nnodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->op != KN_OP_INPUT && n->op != KN_OP_PARAM) continue;
        kn_tensor *t = NULL;
        KN_ASSERT_OK(kn_graph_random_input(g, i, 11, &t));
        KN_ASSERT_OK(kn_program_bind(p, n->attrs.name, t));
        kn_tensor_free(t);
    }
    KN_ASSERT_OK(kn_program_run(p));
    *c = capture(kn_program_print_kernels, p);
    return p;
}

static void same_program(const kn_program *a, const char *ca, const kn_program *b, const char *cb, const char *what) {
    kn_program_stats x = kn_program_get_stats(a), y = kn_program_get_stats(b);
    cr_assert_eq(x.nsteps, y.nsteps, "%s: %d steps against %d", what, x.nsteps, y.nsteps);
    cr_assert_eq(x.nkernels, y.nkernels, "%s: %d kernels against %d", what, x.nkernels, y.nkernels);
    cr_assert_eq(x.mem_planned, y.mem_planned, "%s: arena %.0f against %.0f", what, x.mem_planned, y.mem_planned);
    cr_assert_eq(x.mem_inplace, y.mem_inplace, "%s", what);
    cr_assert_str_eq(ca, cb, "%s: the schedule and kernels differ", what);
    const kn_graph *g = kn_program_graph(a);
    for (int i = 0; i < g->noutputs; i++) {
        const kn_tensor *s = kn_program_output(a, i), *t = kn_program_output(b, i);
        size_t bytes = (size_t)kn_tensor_numel(s) * kn_dtype_size(s->dtype);
        cr_assert_eq(kn_tensor_numel(s), kn_tensor_numel(t));
        cr_assert(!memcmp(kn_tensor_data(s), kn_tensor_data(t), bytes), "%s: output %d differs in its bits", what, i);
    }
}

KN_TEST(stages, the_same_graph_compiles_to_the_same_program_whatever_the_environment, .timeout = 120) {
    private_cache();
    kn_graph *g = small_gpt();
    kn_program_opts o = {.device = KN_CPU, .passes = "all", .mode = KN_PROGRAM_COMPILED};
    unsetenv("KILN_KEEP_LOSS");
    char *c0 = NULL, *c1 = NULL, *c2 = NULL, *c3 = NULL;
    kn_program *p0 = compile_and_run(g, &o, &c0);
    cr_assert_eq(kn_program_get_stats(p0).mode, KN_PROGRAM_COMPILED, "needs a C compiler");
    kn_program *p1 = compile_and_run(g, &o, &c1);
    same_program(p0, c0, p1, c1, "compiled twice");
    setenv("KILN_KEEP_LOSS", "1", 1); /* what once kept the loss as library steps */
    kn_program *p2 = compile_and_run(g, &o, &c2);
    unsetenv("KILN_KEEP_LOSS");
    same_program(p0, c0, p2, c2, "KILN_KEEP_LOSS=1 in the environment");
    kn_program_opts keep = o;
    keep.keep_loss = true; /* the option does change it: the loss and its backward stay library steps */
    kn_program *p3 = compile_and_run(g, &keep, &c3);
    kn_program_stats s0 = kn_program_get_stats(p0), s3 = kn_program_get_stats(p3);
    cr_assert_gt(s3.nsteps - s3.nkernels, s0.nsteps - s0.nkernels, "keep_loss: %d library steps against %d",
                 s3.nsteps - s3.nkernels, s0.nsteps - s0.nkernels);
    cr_assert(strstr(s3.stages[1].summary, "decompose:gpu"), "decompose: '%s'", s3.stages[1].summary);
    cr_assert(!strstr(s0.stages[1].summary, "decompose:gpu"), "decompose: '%s'", s0.stages[1].summary);
    free(c0), free(c1), free(c2), free(c3);
    kn_program_free(p0), kn_program_free(p1), kn_program_free(p2), kn_program_free(p3);
    kn_graph_free(g);
}

/* The generated file's text (stats.source), read back. */
static char *source_of(const kn_program *p) {
    kn_program_stats st = kn_program_get_stats(p);
    FILE *f = fopen(st.source, "rb");
    cr_assert_not_null(f, "cannot read %s", st.source);
    char *buf = malloc(1 << 20);
    cr_assert_not_null(buf);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

KN_TEST(stages, scalar_math_is_an_option_of_the_program) {
    private_cache();
    kn_graph *g = parse("%0 = input {name=\"x\"} : f32[64,64]\n"
                        "%1 = exp %0 : f32[64,64]\n"
                        "%2 = tanh %1 : f32[64,64]\n"
                        "output %2\n");
    kn_program_opts o = {.device = KN_CPU, .mode = KN_PROGRAM_COMPILED}, sc = o;
    sc.scalar_math = true;
    kn_program *p = NULL, *q = NULL;
    KN_ASSERT_OK(kn_program_compile(&p, g, &o));
    KN_ASSERT_OK(kn_program_compile(&q, g, &sc));
    cr_assert_eq(kn_program_get_stats(p).mode, KN_PROGRAM_COMPILED, "needs a C compiler");
    char *a = source_of(p), *b = source_of(q);
    cr_assert_null(strstr(b, "declare simd"), "scalar_math: the prelude declares SIMD variants");
    if (kn_cc_vector_math()) cr_assert_not_null(strstr(a, "declare simd"), "libmvec is there, and unused");
    else cr_assert_str_eq(a, b, "no libmvec: one prelude either way");
    double err = INFINITY;
    KN_ASSERT_OK(kn_program_compare(g, &sc, 2, &err, NULL));
    cr_assert_leq(err, 1e-6, "the scalar functions: %.3g from the interpreter", err);
    free(a), free(b);
    kn_program_free(p), kn_program_free(q);
    kn_graph_free(g);
}
