/* test_lowsave.c — the lowsave pass (core/passes/lowsave.c): the backward keeps a 16-bit
 * copy of an f32 value it reads only pointwise.
 *
 *   - the rule on small graphs: a value made from a 16-bit one, read by gelu_bwd in the
 *     backward, is saved; read by a reduction or an eq in the backward, an output, or made
 *     from f32 values only, it is not; an f32 GPT step is left as it is;
 *   - the GPT step after autocast: the MLP's pre-activation of every layer, and nothing
 *     else; its copy right after it, the backward's cast up right before gelu_bwd, and the
 *     forward still reading f32; in the schedule the copy shares the add/gelu kernel and
 *     the cast up the gelu_bwd kernel; the live set falls by the f32 values' half;
 *   - numbers: the loss bit for bit as before, the gradients moved but within the
 *     tolerance per dtype of the f32 step, interpreted and compiled; with flash and with
 *     remat:selective and remat:full after it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph_test_util.h"
#include "kn_test.h"
#include "lowp_test_util.h"
#include "kiln/codegen.h"
#include "kiln/nn.h"
#include "kiln/passes.h"
#include "kiln/program.h"

static const kn_gpt_config cfg = {.vocab = 17, .context = 8, .layers = 2, .width = 16, .heads = 2};

static kn_graph *gpt_joint(const kn_gpt_config *c) {
    kn_graph *g;
    KN_ASSERT_OK(kn_gpt_graph(c, 2, 8, true, &g));
    return g;
}

/* The count of rule `rule` in pass `p` of the report (0 when it did not fire). */
static int64_t fired(const kn_pass_report *rep, int p, const char *rule) {
    for (int r = 0; r < rep->pass[p].nfired; r++)
        if (!strcmp(rep->pass[p].rule[r], rule)) return rep->pass[p].count[r];
    return 0;
}

/* A loss of gelu(cast_up(x) + b) and a "backward" %7 that reads the pre-activation %3
 * through READER; the outputs: the loss, then OUTS. lowsave's "saved" count on it. */
static int64_t saved_on(const char *x_dtype, const char *reader, const char *outs) {
    char text[1024];
    snprintf(text, sizeof text,
             "%%0 = input {name=\"x\"} : %s[4,8]\n"
             "%%1 = param {name=\"b\"} : f32[8]\n"
             "%%2 = cast %%0 {dtype=f32} : f32[4,8]\n"
             "%%3 = add %%2, %%1 : f32[4,8]\n"
             "%%4 = gelu %%3 : f32[4,8]\n"
             "%%5 = sum %%4 {axes=[0,1]} : f32[]\n"
             "%%6 = input {name=\"dy\"} : f32[4,8]\n"
             "%s\n"
             "output %%5, %s\n",
             x_dtype, reader, outs);
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_graph_parse(text, strlen(text), &g));
    int32_t before = g->nnodes;
    kn_pass_report rep;
    KN_ASSERT_OK(kn_passes_run(g, "lowsave", &rep));
    KN_ASSERT_OK(kn_graph_verify(g));
    int64_t n = fired(&rep, 0, "saved");
    cr_assert_eq(g->nnodes, before + 2 * (int32_t)n, "%s: one copy and one cast up per saved value", reader);
    if (n) {
        cr_assert(g->nodes[4].op == KN_OP_CAST && g->nodes[4].in[0] == 3 && g->nodes[4].type.dtype != KN_DT_F32,
                  "the copy stands right after its value");
        cr_assert(g->nodes[5].op == KN_OP_GELU && g->nodes[5].in[0] == 3, "the forward reads the f32 value");
        const kn_node *r = &g->nodes[g->nnodes - 1], *up = &g->nodes[g->nnodes - 2];
        cr_assert(up->op == KN_OP_CAST && up->in[0] == 4 && up->type.dtype == KN_DT_F32 && r->in[1] == g->nnodes - 2,
                  "the backward reads the copy cast up right before it");
    }
    kn_graph_free(g);
    return n;
}

KN_TEST(lowsave, the_rule_on_small_graphs) {
    cr_assert_eq(saved_on("bf16", "%7 = unary_grad %6, %3 {fn=gelu} : f32[4,8]", "%7"), 1);
    cr_assert_eq(saved_on("f16", "%7 = mul %6, %3 : f32[4,8]", "%7"), 1, "any pointwise reader but eq");
    cr_assert_eq(saved_on("f32", "%7 = unary_grad %6, %3 {fn=gelu} : f32[4,8]", "%7"), 0, "made from f32 values: no 16-bit dtype");
    cr_assert_eq(saved_on("bf16", "%7 = sum %3 {axes=[0]} : f32[8]", "%7"), 0, "a reduction's backward keeps f32");
    cr_assert_eq(saved_on("bf16", "%7 = eq %3, %6 : bool[4,8]", "%7"), 0, "an equality test is what a rounding breaks");
    cr_assert_eq(saved_on("bf16", "%7 = unary_grad %6, %3 {fn=gelu} : f32[4,8]", "%7, %3"), 0, "an output keeps its dtype");
    kn_graph *g = gpt_joint(&cfg), *a = graph_after_passes(g, "lowsave", NULL); /* f32: nothing to do */
    cr_assert_eq(a->nnodes, g->nnodes);
    kn_graph_free(a);
    kn_graph_free(g);
}

/* The backward readers of a saved value: in the GPT, gelu_bwd, through the cast up of the
 * copy made right after the f32 pre-activation that gelu reads. */
KN_TEST(lowsave, the_gpt_step_saves_the_mlp_pre_activation_in_16_bits) {
    kn_graph *g = gpt_joint(&cfg);
    kn_pass_report rep;
    kn_graph *a = graph_after_passes(g, "autocast:bf16,lowloss,lowsave", &rep);
    cr_assert_eq(fired(&rep, 2, "saved"), cfg.layers, "one value a layer");
    int ngelu_bwd = 0;
    for (int32_t i = 0; i < a->nnodes; i++) {
        const kn_node *n = &a->nodes[i];
        if (n->op != KN_OP_UNARY_GRAD || n->attrs.fn != KN_UNARY_GELU) continue;
        ngelu_bwd++;
        int32_t up = n->in[1], copy = a->nodes[up].in[0], pre = a->nodes[copy].in[0];
        cr_assert(a->nodes[up].op == KN_OP_CAST && a->nodes[up].type.dtype == KN_DT_F32, "gelu_bwd %%%d reads a cast up", i);
        cr_assert(a->nodes[copy].op == KN_OP_CAST && a->nodes[copy].type.dtype == KN_DT_BF16, "of a bf16 copy");
        cr_assert_eq(copy, pre + 1, "the copy stands right after the pre-activation");
        cr_assert(a->nodes[pre].op == KN_OP_ADD && a->nodes[pre].type.dtype == KN_DT_F32);
        cr_assert(a->nodes[pre + 2].op == KN_OP_GELU && a->nodes[pre + 2].in[0] == pre, "gelu reads the f32 value");
        for (int32_t j = up + 1; j < i; j++) cr_assert(a->nodes[j].op == KN_OP_CAST, "the cast up stands right before");
    }
    cr_assert_eq(ngelu_bwd, cfg.layers);
    kn_graph_free(a);
    kn_graph_free(g);
}

KN_TEST(lowsave, the_copies_fuse_into_the_kernels_around_them) {
    kn_graph *g = gpt_joint(&cfg), *a = graph_after_passes(g, "autocast:bf16,lowloss,lowsave", NULL);
    KN_ASSERT_OK(kn_pass_decompose(a, NULL));
    kn_schedule *s = NULL;
    KN_ASSERT_OK(kn_schedule_build(a, &s));
    int checked = 0;
    for (int32_t i = 0; i < a->nnodes; i++) {
        const kn_node *n = &a->nodes[i];
        if (n->op != KN_OP_UNARY_GRAD || n->attrs.fn != KN_UNARY_GELU) continue;
        int32_t up = n->in[1], copy = a->nodes[up].in[0], pre = a->nodes[copy].in[0];
        cr_assert(s->group_of[up] >= 0 && s->group_of[up] == s->group_of[i], "the cast up is in gelu_bwd's kernel");
        cr_assert(s->group_of[copy] >= 0 && s->group_of[copy] == s->group_of[pre], "the copy is in the add's kernel");
        cr_assert(s->group_of[pre + 2] == s->group_of[pre], "with the gelu");
        checked++;
    }
    cr_assert_eq(checked, cfg.layers);
    kn_schedule_free(s);
    kn_graph_free(a);
    kn_graph_free(g);
}

/* list with lowsave against the same list without it and against f32 (the graph g as it
 * is): the loss bit for bit, some gradient moved, every output within tol of f32. */
static void follows_f32(const kn_graph *g, const char *with, const char *without, double tol) {
    kn_graph *a = graph_after_passes(g, with, NULL), *b = graph_after_passes(g, without, NULL);
    double *e = malloc((size_t)g->noutputs * sizeof *e), moved = outputs_normwise(a, b, 3, e);
    cr_assert_eq(e[0], 0, "%s: the loss is not what %s gives (%.3g)", with, without, e[0]);
    cr_assert_gt(moved, 0, "%s: no gradient moved", with);
    double err = outputs_normwise(a, g, 3, NULL);
    cr_assert(err <= tol, "%s: %.3g from f32 (tolerance %.3g)", with, err, tol);
    free(e);
    kn_graph_free(a);
    kn_graph_free(b);
}

KN_TEST(lowsave, low_precision_steps_follow_f32_within_a_tolerance_per_dtype) {
    kn_graph *g = gpt_joint(&cfg);
    follows_f32(g, "autocast:bf16,lowloss,lowsave", "autocast:bf16,lowloss", lowp_codegen_tolerance(KN_DT_BF16));
    follows_f32(g, "autocast:fp16,lowloss,lowsave", "autocast:fp16,lowloss", lowp_codegen_tolerance(KN_DT_F16));
    /* remat after it recomputes or keeps the copy like any value: the same numbers as
     * without remat (remat is exact), and a smaller live set */
    follows_f32(g, "autocast:bf16,lowloss,lowsave,remat:selective", "autocast:bf16,lowloss,remat:selective",
                lowp_codegen_tolerance(KN_DT_BF16));
    follows_f32(g, "autocast:bf16,lowloss,lowsave,remat:full", "autocast:bf16,lowloss,remat:full",
                lowp_codegen_tolerance(KN_DT_BF16));
    kn_graph_free(g);
}

/* Flash in bf16 needs head dim 64 (the GPU's tensor-core kernels): width 128, 2 heads. The
 * live set with and without lowsave, alone and with remat after it. */
KN_TEST(lowsave, composes_with_flash_and_remat, .timeout = 120) {
    static const kn_gpt_config c64 = {.vocab = 17, .context = 8, .layers = 2, .width = 128, .heads = 2};
    kn_graph *g = gpt_joint(&c64);
    const char *tails[3] = {"", ",remat:selective", ",remat:full"};
    for (int t = 0; t < 3; t++) {
        char with[128], without[128];
        snprintf(with, sizeof with, "flash,autocast:bf16,lowloss,lowsave%s", tails[t]);
        snprintf(without, sizeof without, "flash,autocast:bf16,lowloss%s", tails[t]);
        follows_f32(g, with, without, lowp_codegen_tolerance(KN_DT_BF16));
        double lw, lo;
        KN_ASSERT_OK(kn_passes_live_bytes(g, with, &lw));
        KN_ASSERT_OK(kn_passes_live_bytes(g, without, &lo));
        cr_assert(lw <= lo, "%s: live set %.0f bytes, %.0f without lowsave", with, lw, lo);
        if (t == 0) cr_assert(lw < lo, "%s: the live set did not fall (%.0f bytes)", with, lw);
    }
    kn_graph_free(g);
}

KN_TEST(lowsave, the_compiled_bf16_step_follows_its_interpreter, .timeout = 120) {
    char tmpl[] = "/tmp/kiln-ls-XXXXXX";
    cr_assert_not_null(mkdtemp(tmpl));
    setenv("KILN_CACHE_DIR", tmpl, 1);
    kn_graph *g = gpt_joint(&cfg);
    for (int emu = 0; emu < 2; emu++) {
        kn_program_opts o = {.device = KN_CPU, .passes = "autocast:bf16,lowloss,lowsave", .mode = KN_PROGRAM_COMPILED, .cuda_emu = emu == 1};
        double worst = INFINITY;
        KN_ASSERT_OK(kn_program_compare(g, &o, 5, &worst, NULL)); /* the interpreter runs g as it is: f32 */
        cr_assert(worst <= lowp_codegen_tolerance(KN_DT_BF16), "%s: compiled bf16 with lowsave is %.3g from f32",
                  emu ? "CUDA emulator" : "C", worst);
    }
    kn_graph_free(g);
}
