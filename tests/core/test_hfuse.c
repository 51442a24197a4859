/* test_hfuse.c — the concat op (ops.def; its CPU kernel in core/ir/eval.c, its CUDA kernel
 * in core/runtime/cuda_ops.cu) and the `hfuse` pass (core/passes/hfuse.c), which merges the
 * attention's q, k and v products of column slices of one weight into one wide product in
 * the forward, the input gradient and the weight gradient.
 *
 *   - concat: the CPU kernel against a hand result (both axes, f32 and bf16),
 *     its shape rule's errors, its backward (two slices) run through the interpreter;
 *   - the pass on a GPT's joint graph: each kind of group fires once per layer, in f32, under
 *     autocast (a cast between each slice and its product) and with lowparams (slices of the
 *     16-bit weight); the forward keeps its bits; every output equals the unfused graph's
 *     within f32 rounding (bf16: the bf16 tolerance of lowp_test_util.h);
 *   - what must not fire: slices that do not tile, different shared operands, a product
 *     read elsewhere, a step other than 1; a sum with another leaf keeps it;
 *   - compiled (generated C, and the CUDA dialect under the emulator) against the
 *     interpreter, and three AdamW steps node by node and compiled;
 *   - allocation failures leave the graph as it was;
 *   - cuda_hfuse (skipped without a GPU): the CUDA concat against the CPU in every dtype. */
#include <math.h>
#include <string.h>

#include "cuda_test_util.h"
#include "graph_test_util.h"
#include "lowp_test_util.h"
#include "pass_step_util.h"
#include "kiln/autograd.h"
#include "kiln/nn.h"
#include "kiln/passes.h"
#include "kiln/program.h"

static const kn_gpt_config cfg = {.vocab = 17, .context = 24, .layers = 2, .width = 16, .heads = 2};
enum { GB = 2, GT = 12 };

static int count_ops(const kn_graph *g, kn_op op) {
    int c = 0;
    for (int i = 0; i < g->nnodes; i++) c += g->nodes[i].op == op;
    return c;
}

/* The type of a node of op on operands in[], or the shape rule's status and message. */
static kn_status infer(kn_node *n, int nin, kn_tensor **in, char *msg, size_t msz) {
    const kn_type *tp[KN_MAX_OPERANDS];
    kn_type types[KN_MAX_OPERANDS];
    n->nin = nin;
    for (int i = 0; i < nin; i++) {
        types[i] = (kn_type){in[i]->dtype, in[i]->ndim, {0}};
        memcpy(types[i].shape, in[i]->shape, sizeof(int64_t) * (size_t)in[i]->ndim);
        tp[i] = &types[i];
    }
    return kn_node_infer(n, tp, &n->type, msg, msz);
}

static kn_tensor *from(kn_dtype dt, int nd, const int64_t *shape, const float *v) {
    kn_tensor *t = NULL, *c = NULL;
    KN_ASSERT_OK(kn_tensor_from_data(&t, KN_DT_F32, nd, shape, v));
    if (dt == KN_DT_F32) return t;
    KN_ASSERT_OK(kn_tensor_cast(&c, t, dt));
    kn_tensor_free(t);
    return c;
}

static void expect(const kn_tensor *t, const float *want, int64_t n) {
    cr_assert_eq(kn_tensor_numel(t), n);
    for (int64_t i = 0; i < n; i++)
        cr_assert_eq(kn_dtype_load(t->dtype, kn_tensor_data(t), i), (double)want[i], "element %lld", (long long)i);
}

KN_TEST(hfuse, concat_cpu_kernel_against_a_hand_result) {
    const float a[6] = {1, 2, 3, 4, 5, 6}, b[4] = {7, 8, 9, 10}, c[3] = {-1, -2, -3};
    const int64_t sa[2] = {2, 3}, sb[2] = {2, 2}, sc[2] = {1, 3};
    /* columns: [[1 2 3 7 8] [4 5 6 9 10]]; rows: [[1 2 3] [4 5 6] [-1 -2 -3]] */
    const float cols[10] = {1, 2, 3, 7, 8, 4, 5, 6, 9, 10}, rows[9] = {1, 2, 3, 4, 5, 6, -1, -2, -3};
    for (int d = 0; d < 2; d++) {
        kn_dtype dt = d ? KN_DT_BF16 : KN_DT_F32; /* small integers: exact in bf16 */
        kn_tensor *in[2] = {from(dt, 2, sa, a), from(dt, 2, sb, b)}, *out = NULL;
        kn_node n = node(KN_OP_CONCAT);
        n.attrs.axis = -1;
        char msg[256];
        KN_ASSERT_OK(infer(&n, 2, in, msg, sizeof msg));
        cr_assert(n.type.dtype == dt && n.type.shape[0] == 2 && n.type.shape[1] == 5);
        KN_ASSERT_OK(kn_node_eval(&n, (const kn_tensor *const *)in, &out));
        expect(out, cols, 10);
        kn_tensor_free(out);
        out = NULL;
        kn_tensor_free(in[1]);
        in[1] = from(dt, 2, sc, c);
        n.attrs.axis = 0;
        KN_ASSERT_OK(infer(&n, 2, in, msg, sizeof msg));
        KN_ASSERT_OK(kn_node_eval(&n, (const kn_tensor *const *)in, &out));
        expect(out, rows, 9);
        kn_tensor_free(out);
        out = NULL;
        kn_tensor_free(in[0]);
        kn_tensor_free(in[1]);
    }
}

KN_TEST(hfuse, concat_shape_rule_names_the_problem) {
    static const struct {
        const char *text, *msg;
    } bad[] = {
        {"%0 = input {name=\"a\"} : f32[2,3]\n%1 = input {name=\"b\"} : bf16[2,3]\n"
         "%2 = concat %0, %1 {axis=1} : f32[2,6]\noutput %2\n", "differ in dtype"},
        {"%0 = input {name=\"a\"} : f32[2,3]\n%1 = input {name=\"b\"} : f32[6]\n"
         "%2 = concat %0, %1 {axis=0} : f32[8]\noutput %2\n", "same rank"},
        {"%0 = input {name=\"a\"} : f32[2,3]\n%1 = input {name=\"b\"} : f32[3,3]\n"
         "%2 = concat %0, %1 {axis=1} : f32[2,6]\noutput %2\n", "differ along axis 0"},
        {"%0 = input {name=\"a\"} : f32[2,3]\n%1 = input {name=\"b\"} : f32[2,3]\n"
         "%2 = concat %0, %1 {axis=2} : f32[2,6]\noutput %2\n", "out of range"},
        {"%0 = input {name=\"a\"} : f32[2,3]\n%1 = input {name=\"b\"} : f32[2,3]\n"
         "%2 = concat %0, %1 : f32[2,6]\noutput %2\n", "axis"}, /* axis is required */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kn_graph *g = NULL;
        kn_status st = kn_graph_parse(bad[i].text, strlen(bad[i].text), &g);
        if (st == KN_OK) st = kn_graph_verify(g);
        kn_graph_free(g);
        cr_assert_neq(st, KN_OK, "case %zu parsed", i);
        cr_assert(strstr(kn_last_error(), bad[i].msg), "case %zu: '%s' does not say '%s'", i, kn_last_error(),
                  bad[i].msg);
    }
    const char *good = "%0 = input {name=\"a\"} : f32[2,3]\n%1 = input {name=\"b\"} : f32[2,4]\n"
                       "%2 = concat %0, %1 {axis=-1} : f32[2,7]\noutput %2\n";
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_graph_parse(good, strlen(good), &g));
    kn_graph_free(g);
}

/* The gradient of sum(w * concat(x, y)) is w's two blocks (bw_concat: two slices), in
 * eager mode (kn_backward runs the backward at once). */
KN_TEST(hfuse, concat_backward_is_two_slices) {
    kn_builder *b;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
    const int64_t sx[2] = {2, 3}, sy[2] = {2, 2}, sw[2] = {2, 5};
    const float wv[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, zx[6] = {0}, zy[4] = {0};
    kn_tensor *tw = from(KN_DT_F32, 2, sw, wv), *tx = from(KN_DT_F32, 2, sx, zx), *ty = from(KN_DT_F32, 2, sy, zy);
    kn_val x = kn_param(b, "x", tx), y = kn_param(b, "y", ty), w = kn_input(b, "w", tw);
    kn_val loss = kn_sum(b, kn_mul(b, w, kn_concat(b, x, y, 1)), 0, NULL, false);
    kn_val grads[2];
    KN_ASSERT_OK(kn_backward(b, loss, 2, (kn_val[]){x, y}, grads));
    KN_ASSERT_OK(kn_builder_status(b));
    const float gx[6] = {1, 2, 3, 6, 7, 8}, gy[4] = {4, 5, 9, 10};
    expect(kn_val_tensor(b, grads[0]), gx, 6);
    expect(kn_val_tensor(b, grads[1]), gy, 4);
    kn_builder_free(b);
    kn_tensor_free(tw);
    kn_tensor_free(tx);
    kn_tensor_free(ty);
}

/* g after list, then with hfuse too: each kind of group once per layer, `concats` concats a
 * layer, the loss (output 0) bit for bit when bitwise_loss, every output within tol
 * normwise. */
static void check_step(const kn_gpt_config *m, const char *list, int concats, double tol, bool bitwise_loss) {
    kn_graph *g;
    KN_ASSERT_OK(kn_gpt_graph(m, GB, GT, true, &g));
    char with[256];
    snprintf(with, sizeof with, "%s%shfuse", list, list[0] ? "," : "");
    kn_pass_report ra, rb;
    kn_graph *a = graph_after_passes(g, list[0] ? list : "none", &ra), *c = graph_after_passes(g, with, &rb);
    const kn_pass_stats *st = &rb.pass[rb.npasses - 1];
    cr_assert_eq(st->nfired, 4, "%s: %d kinds of group fired", list, st->nfired);
    for (int k = 0; k < 4; k++) cr_assert_eq(st->count[k], m->layers, "%s: %s fired %lld times", list, st->rule[k],
                                             (long long)st->count[k]);
    /* per layer: 2 concats of the q, k, v gradients, shared by both products and the bias's
     * column sum (none after flash: they are one permute of flash_attn_bwd's stacked result);
     * 3 products fewer in the forward, 2 in the input gradient, 2 in the weight gradient; one
     * column sum of the bias instead of 3 */
    cr_assert_eq(count_ops(c, KN_OP_CONCAT), concats * m->layers);
    cr_assert_eq(count_ops(c, KN_OP_SUM), count_ops(a, KN_OP_SUM) - 2 * m->layers);
    cr_assert_eq(count_ops(c, KN_OP_MATMUL), count_ops(a, KN_OP_MATMUL) - 6 * m->layers);
    cr_assert_eq(count_ops(c, KN_OP_SLICE_GRAD), count_ops(a, KN_OP_SLICE_GRAD) - 6 * m->layers);
    double err[64];
    cr_assert(a->noutputs <= 64);
    double worst = outputs_normwise(c, a, 5, err);
    cr_assert(worst <= tol, "%s: outputs differ by %.3g normwise (tolerance %.3g)", list, worst, tol);
    if (bitwise_loss) cr_assert_eq(err[0], 0, "%s: the loss changed (%.3g)", list, err[0]);
    printf("hfuse after '%s': nodes %d -> %d, worst output %.3g\n", list, a->nnodes, c->nnodes, worst);
    kn_graph_free(a);
    kn_graph_free(c);
    kn_graph_free(g);
}

KN_TEST(hfuse, fires_per_layer_on_the_gpt_step_f32, .timeout = 60) { check_step(&cfg, "", 2, 1e-5, true); }

KN_TEST(hfuse, fires_per_layer_under_autocast_bf16, .timeout = 60) {
    check_step(&cfg, "autocast:bf16", 2, lowp_codegen_tolerance(KN_DT_BF16), true);
    check_step(&cfg, "autocast:bf16,lowparams:bf16,lowloss,lowsave", 2, lowp_codegen_tolerance(KN_DT_BF16), true);
    /* flash in bf16 needs a head dimension with a tensor-core kernel (64): then its stacked
     * gradient is bf16 and the heads' concat one permute (at head dim 8 it stays f32, each
     * head cast down: a chain of concats) */
    const kn_gpt_config d64 = {.vocab = 17, .context = 24, .layers = 1, .width = 128, .heads = 2};
    check_step(&d64, "flash,autocast:bf16,lowparams:bf16,lowloss,lowsave", 0, lowp_codegen_tolerance(KN_DT_BF16), false);
    check_step(&cfg, "flash,autocast:bf16,lowparams:bf16,lowloss,lowsave", 2, lowp_codegen_tolerance(KN_DT_BF16), false);
}

/* After flash the q, k, v gradients are heads of flash_attn_bwd's [3, B, H, T, D]: their
 * concat is one permute of it, reshaped, shared by both gradients. */
KN_TEST(hfuse, fires_after_flash, .timeout = 60) {
    check_step(&cfg, "flash", 0, 1e-5, false);
    kn_graph *g;
    KN_ASSERT_OK(kn_gpt_graph(&cfg, GB, GT, true, &g));
    KN_ASSERT_OK(kn_passes_run(g, "flash,hfuse", NULL));
    /* the flash pass's [B, T, H, D] layout: the gradient is stacked [B, T, 3, H, D] already, so
     * the heads' concat is that value reshaped, no permute (test_flash_layout.c) */
    int stacked = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const kn_node *n = &g->nodes[i];
        cr_assert(n->op != KN_OP_PERMUTE || g->nodes[n->in[0]].op != KN_OP_FLASH_ATTN_BWD, "a permute of the heads");
        if (n->op != KN_OP_RESHAPE || g->nodes[n->in[0]].op != KN_OP_FLASH_ATTN_BWD || n->type.ndim != 2) continue;
        const kn_type *s = &g->nodes[n->in[0]].type;
        cr_assert(s->ndim == 5 && s->shape[2] == 3 && n->type.shape[1] == 3 * s->shape[3] * s->shape[4], "the heads' concat");
        stacked++;
    }
    cr_assert_eq(stacked, cfg.layers);
    kn_graph_free(g);
}

/* txt after the pass: the groups of each kind that fired (forward, input gradient, weight
 * gradient, slice_grad sums) and the largest output difference from the graph as parsed. */
static void expect_groups(const char *txt, int fwd, int dgrad, int wgrad, int cat, double tol) {
    kn_graph *g;
    KN_ASSERT_OK(kn_graph_parse(txt, strlen(txt), &g));
    kn_pass_report rep;
    kn_graph *c = graph_after_passes(g, "hfuse", &rep);
    const kn_pass_stats *st = &rep.pass[0];
    int want[4] = {fwd, dgrad, wgrad, cat}, got[4] = {0};
    for (int r = 0; r < st->nfired; r++) {
        const char *n = st->rule[r];
        int k = strstr(n, "forward") ? 0 : strstr(n, "input") ? 1 : strstr(n, "weight") ? 2 : 3;
        got[k] = (int)st->count[r];
    }
    for (int k = 0; k < 4; k++) cr_assert_eq(got[k], want[k], "kind %d: %d groups, want %d in\n%s", k, got[k], want[k], txt);
    double d = -1;
    KN_ASSERT_OK(kn_graph_compare(g, c, 3, &d));
    cr_assert(d >= 0 && d <= tol, "max |delta| %.3g", d);
    kn_graph_free(c);
    kn_graph_free(g);
}

#define HDR "%0 = input {name=\"x\"} : f32[4,3]\n%1 = param {name=\"w\"} : f32[3,6]\n"

KN_TEST(hfuse, patterns_that_must_not_fire) {
    /* the slices leave a gap ([0, 2) and [3, 6)) */
    expect_groups(HDR "%2 = slice %1 {axis=1, start=0, stop=2} : f32[3,2]\n"
                      "%3 = slice %1 {axis=1, start=3, stop=6} : f32[3,3]\n"
                      "%4 = matmul %0, %2 : f32[4,2]\n%5 = matmul %0, %3 : f32[4,3]\noutput %4, %5\n",
                  0, 0, 0, 0, 0);
    /* they overlap ([0, 4) and [2, 6)) */
    expect_groups(HDR "%2 = slice %1 {axis=1, start=0, stop=4} : f32[3,4]\n"
                      "%3 = slice %1 {axis=1, start=2, stop=6} : f32[3,4]\n"
                      "%4 = matmul %0, %2 : f32[4,4]\n%5 = matmul %0, %3 : f32[4,4]\noutput %4, %5\n",
                  0, 0, 0, 0, 0);
    /* different shared operands */
    expect_groups(HDR "%2 = input {name=\"y\"} : f32[4,3]\n"
                      "%3 = slice %1 {axis=1, start=0, stop=3} : f32[3,3]\n"
                      "%4 = slice %1 {axis=1, start=3, stop=6} : f32[3,3]\n"
                      "%5 = matmul %0, %3 : f32[4,3]\n%6 = matmul %2, %4 : f32[4,3]\noutput %5, %6\n",
                  0, 0, 0, 0, 0);
    /* a step of 2 (every other column) */
    expect_groups(HDR "%2 = slice %1 {axis=1, start=0, stop=6, step=2} : f32[3,3]\n"
                      "%3 = slice %1 {axis=1, start=1, stop=6, step=2} : f32[3,3]\n"
                      "%4 = matmul %0, %2 : f32[4,3]\n%5 = matmul %0, %3 : f32[4,3]\noutput %4, %5\n",
                  0, 0, 0, 0, 0);
    /* an input gradient whose first product is read elsewhere (an output): left alone */
    expect_groups("%0 = input {name=\"g0\"} : f32[4,3]\n%1 = input {name=\"g1\"} : f32[4,3]\n"
                  "%2 = param {name=\"w\"} : f32[5,6]\n"
                  "%3 = slice %2 {axis=1, start=0, stop=3} : f32[5,3]\n"
                  "%4 = slice %2 {axis=1, start=3, stop=6} : f32[5,3]\n"
                  "%5 = matmul %0, %3 {tb=1} : f32[4,5]\n%6 = matmul %1, %4 {tb=1} : f32[4,5]\n"
                  "%7 = add %5, %6 : f32[4,5]\noutput %7, %5\n",
                  0, 0, 0, 0, 0);
    /* weight gradients of different shared operands */
    expect_groups("%0 = input {name=\"x\"} : f32[4,5]\n%1 = input {name=\"y\"} : f32[4,5]\n"
                  "%2 = input {name=\"g0\"} : f32[4,3]\n%3 = input {name=\"g1\"} : f32[4,3]\n"
                  "%4 = matmul %0, %2 {ta=1} : f32[5,3]\n%5 = matmul %1, %3 {ta=1} : f32[5,3]\n"
                  "%6 = slice_grad %4 {shape=[5,6], axis=1, start=0, stop=3} : f32[5,6]\n"
                  "%7 = slice_grad %5 {shape=[5,6], axis=1, start=3, stop=6} : f32[5,6]\n"
                  "%8 = add %6, %7 : f32[5,6]\noutput %8\n",
                  0, 0, 0, 1, 1e-6); /* (the slice_grads still become a concat of the two products) */
    /* slice_grads that do not tile: [0, 3) twice */
    expect_groups("%0 = input {name=\"a\"} : f32[5,3]\n%1 = input {name=\"b\"} : f32[5,3]\n"
                  "%2 = slice_grad %0 {shape=[5,6], axis=1, start=0, stop=3} : f32[5,6]\n"
                  "%3 = slice_grad %1 {shape=[5,6], axis=1, start=0, stop=3} : f32[5,6]\n"
                  "%4 = add %2, %3 : f32[5,6]\noutput %4\n",
                  0, 0, 0, 0, 0);
}

KN_TEST(hfuse, patterns_that_fire) {
    /* the forward: three slices out of order, one product also read elsewhere (it reads its
     * columns of the merged product) */
    expect_groups(HDR "%2 = slice %1 {axis=1, start=4, stop=6} : f32[3,2]\n"
                      "%3 = slice %1 {axis=1, start=0, stop=1} : f32[3,1]\n"
                      "%4 = slice %1 {axis=1, start=1, stop=4} : f32[3,3]\n"
                      "%5 = matmul %0, %2 : f32[4,2]\n%6 = matmul %0, %3 : f32[4,1]\n"
                      "%7 = matmul %0, %4 : f32[4,3]\n%8 = exp %5 : f32[4,2]\noutput %5, %6, %7, %8\n",
                  1, 0, 0, 0, 0);
    /* the input gradient with another leaf in the sum (kept, added to the merged product) */
    expect_groups("%0 = input {name=\"g0\"} : f32[4,3]\n%1 = input {name=\"g1\"} : f32[4,3]\n"
                  "%2 = param {name=\"w\"} : f32[5,6]\n%3 = input {name=\"r\"} : f32[4,5]\n"
                  "%4 = slice %2 {axis=1, start=0, stop=3} : f32[5,3]\n"
                  "%5 = slice %2 {axis=1, start=3, stop=6} : f32[5,3]\n"
                  "%6 = matmul %1, %5 {tb=1} : f32[4,5]\n%7 = add %3, %6 : f32[4,5]\n"
                  "%8 = matmul %0, %4 {tb=1} : f32[4,5]\n%9 = add %8, %7 : f32[4,5]\noutput %9\n",
                  0, 1, 0, 0, 1e-6);
    /* the input gradient of heads of one stacked value S [2, 2, 3, 2]: their concat is one
     * permute of S, reshaped (the numbers check the permutation); then the second head
     * permuted otherwise: a concat */
#define STACK(P1)                                                                                  \
    "%0 = input {name=\"s\"} : f32[2,2,3,2]\n%1 = param {name=\"w\"} : f32[5,8]\n"                 \
    "%2 = slice %0 {axis=0, start=0, stop=1} : f32[1,2,3,2]\n%3 = reshape %2 {shape=[2,3,2]} : f32[2,3,2]\n" \
    "%4 = permute %3 {perm=[1,0,2]} : f32[3,2,2]\n%5 = reshape %4 {shape=[3,4]} : f32[3,4]\n"        \
    "%6 = slice %0 {axis=0, start=1, stop=2} : f32[1,2,3,2]\n%7 = reshape %6 {shape=[2,3,2]} : f32[2,3,2]\n" \
    "%8 = permute %7 {perm=" P1 "} : f32[3,2,2]\n%9 = reshape %8 {shape=[3,4]} : f32[3,4]\n"         \
    "%10 = slice %1 {axis=1, start=0, stop=4} : f32[5,4]\n%11 = slice %1 {axis=1, start=4, stop=8} : f32[5,4]\n" \
    "%12 = matmul %5, %10 {tb=1} : f32[3,5]\n%13 = matmul %9, %11 {tb=1} : f32[3,5]\n"               \
    "%14 = add %12, %13 : f32[3,5]\noutput %14\n"
    expect_groups(STACK("[1,0,2]"), 0, 1, 0, 0, 1e-6);
    expect_groups(STACK("[1,2,0]"), 0, 1, 0, 0, 1e-6);
#undef STACK
    /* the weight gradient under autocast: bf16 products cast up before their slice_grads */
    expect_groups("%0 = input {name=\"x\"} : bf16[4,5]\n"
                  "%1 = input {name=\"g0\"} : bf16[4,3]\n%2 = input {name=\"g1\"} : bf16[4,3]\n"
                  "%3 = matmul %0, %1 {ta=1} : bf16[5,3]\n%4 = cast %3 {dtype=f32} : f32[5,3]\n"
                  "%5 = matmul %0, %2 {ta=1} : bf16[5,3]\n%6 = cast %5 {dtype=f32} : f32[5,3]\n"
                  "%7 = slice_grad %4 {shape=[5,6], axis=1, start=0, stop=3} : f32[5,6]\n"
                  "%8 = slice_grad %6 {shape=[5,6], axis=1, start=3, stop=6} : f32[5,6]\n"
                  "%9 = add %7, %8 : f32[5,6]\noutput %9\n",
                  0, 0, 1, 0, 0);
}

/* Compiled to C and to the CUDA dialect under the emulator, with the pass, against the
 * interpreter without it (of the graph after the passes before it: bf16 against bf16). */
KN_TEST(hfuse, compiled_step_equals_the_interpreter, .timeout = 240) {
    const kn_gpt_config d64 = {.vocab = 17, .context = 16, .layers = 1, .width = 128, .heads = 2};
    static const struct {
        bool d64;
        const char *passes;
        bool emu;
        double tol;
    } runs[] = {
        {false, "hfuse", false, 1e-5},
        {false, "flash,autocast:bf16,lowloss,lowsave,hfuse", false, 0},
        {true, "flash,autocast:bf16,lowloss,lowsave,hfuse", false, 0}, /* the heads' permute, in bf16 */
        {true, "flash,hfuse", true, 1e-5},                              /* the CUDA dialect, f32 */
        {false, "hfuse", true, 1e-5},
    };
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        kn_graph *g;
        KN_ASSERT_OK(kn_gpt_graph(runs[r].d64 ? &d64 : &cfg, GB, GT, true, &g));
        /* the interpreter runs the graph after the passes before hfuse (bf16 against bf16) */
        char before[128];
        snprintf(before, sizeof before, "%.*s", (int)(strlen(runs[r].passes) - strlen("hfuse")), runs[r].passes);
        if (before[0]) KN_ASSERT_OK(kn_passes_run_on(g, before, kn_program_target_default(), NULL));
        kn_program_opts o = {.passes = "hfuse", .mode = KN_PROGRAM_COMPILED, .cuda_emu = runs[r].emu};
        kn_program_stats s;
        double d = -1, tol = runs[r].tol > 0 ? runs[r].tol : lowp_codegen_tolerance(KN_DT_BF16);
        KN_ASSERT_OK(kn_program_compare(g, &o, 9, &d, &s));
        cr_assert(s.mode == KN_PROGRAM_COMPILED, "no C compiler?");
        printf("hfuse compiled%s after %s: max relative difference %.3g, %d kernels\n", runs[r].emu ? " (CUDA emulator)" : "", runs[r].passes, d, s.nkernels);
        cr_assert(d >= 0 && d <= tol, "%s%s: max relative difference %.3g > %.3g", runs[r].passes,
                  runs[r].emu ? " (emulator)" : "", d, tol);
        kn_graph_free(g);
    }
}

/* Three AdamW steps: node by node and compiled, within rounding of the unfused run. */
KN_TEST(hfuse, trainer_steps_follow_the_unfused_run, .timeout = 120) {
    kn_test_train3_follows(&cfg, GB, GT, "hfuse", 1e-6, 1e-5);
}

/* The k-th allocation of the pass fails: KN_ERR_OOM, the graph untouched, nothing leaked. */
KN_TEST(hfuse, allocation_failures_leave_the_graph_as_it_was) {
    const kn_gpt_config one = {.vocab = 11, .context = 8, .layers = 1, .width = 16, .heads = 2};
    kn_graph *g;
    KN_ASSERT_OK(kn_gpt_graph(&one, 2, 8, true, &g));
    kn_graph *c = kn_test_pass_under_allocation_failures(g, kn_pass_hfuse);
    cr_assert_eq(count_ops(c, KN_OP_CONCAT), 2);
    kn_graph_free(c);
    kn_graph_free(g);
}

/* ---------------------------------------------------------------- on a GPU */

/* The CUDA concat against the CPU's, bit for bit, in every dtype, along each axis. */
KN_TEST(cuda_hfuse, concat_matches_the_cpu, .timeout = 60) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(21);
    static const kn_dtype dts[] = {KN_DT_F32, KN_DT_F64, KN_DT_BF16, KN_DT_F16};
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
        for (int ax = 0; ax < 3; ax++) {
            int64_t sa[3] = {3, 5, 8}, sb[3] = {3, 5, 8};
            sb[ax] = 4 + ax;
            kn_tensor *f[2] = {randn(&r, KN_DT_F32, 3, sa), randn(&r, KN_DT_F32, 3, sb)}, *h[2], *dv[2] = {NULL, NULL};
            for (int i = 0; i < 2; i++) {
                h[i] = NULL;
                KN_ASSERT_OK(kn_tensor_cast(&h[i], f[i], dts[d]));
                kn_tensor_free(f[i]);
            }
            kn_node n = node(KN_OP_CONCAT);
            n.attrs.axis = ax;
            gpu_operands(&n, 2, h, NULL, dv);
            kn_tensor *want = NULL;
            KN_ASSERT_OK(kn_node_eval(&n, (const kn_tensor *const *)h, &want));
            kn_tensor *got = on_gpu(&n, dv);
            compare(&n, got, want, TOL_EXACT);
            kn_tensor_free(got);
            kn_tensor_free(want);
            want = NULL;
            for (int i = 0; i < 2; i++) {
                kn_tensor_free(h[i]);
                kn_tensor_free(dv[i]);
            }
        }
}
