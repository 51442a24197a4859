/* test_epilogue.c — the products with an epilogue (matmul_bias, matmul_bias_gelu,
 * matmul_dgelu, matmul_bgrad: ops.def, their CPU kernel in core/ir/eval.c, the cuBLASLt
 * kernel in core/runtime/cuda_matmul_lt.cu) and the `epilogue` pass (core/passes/epilogue.c).
 *
 * On the CPU a fused op runs kiln's GEMM and then the kernels of the nodes it replaces, so
 * it must equal those nodes bit for bit, and the pass must leave a GPT step's loss and
 * every gradient bit for bit unchanged, node by node; compiled (generated C for the
 * elementwise nodes that stay) within rounding, with fewer kernels. Edge cases of the
 * matcher: a bias read twice, a product read elsewhere (left alone), gelu's output and the
 * pre-activation read elsewhere or outputs, a sum without keepdim, the bf16 form with
 * casts. cuda_epilogue: the cuBLASLt kernel against the CPU reference on a GPU (skipped
 * without one); KILN_LT_EPILOGUE=0 runs the same test on the path without cuBLASLt's
 * epilogues. */
#include <math.h>
#include <string.h>

#include "cuda_test_util.h"
#include "graph_test_util.h"
#include "pass_step_util.h"
#include "kiln/nn.h"
#include "kiln/passes.h"
#include "kiln/program.h"

static kn_tensor *eval(kn_node *n, int nin, kn_tensor **in) {
    const kn_type *tp[KN_MAX_OPERANDS];
    kn_type types[KN_MAX_OPERANDS];
    char msg[256];
    n->nin = nin;
    for (int i = 0; i < nin; i++) {
        types[i] = (kn_type){in[i]->dtype, in[i]->ndim, {0}};
        memcpy(types[i].shape, in[i]->shape, sizeof(int64_t) * (size_t)in[i]->ndim);
        tp[i] = &types[i];
    }
    kn_status st = kn_node_infer(n, tp, &n->type, msg, sizeof msg);
    cr_assert_eq(st, KN_OK, "%s: %s", kn_op_name(n->op), msg);
    kn_tensor *out = NULL;
    KN_ASSERT_OK(kn_node_eval(n, (const kn_tensor *const *)in, &out));
    return out;
}

/* rows [r0, r0 + n elements) of z equal w bit for bit */
static void same_bits(const kn_tensor *z, int64_t off, const kn_tensor *w, const char *what) {
    size_t es = kn_dtype_size(w->dtype);
    int64_t n = kn_tensor_numel(w);
    cr_assert(off + n <= kn_tensor_numel(z));
    cr_assert(!memcmp((const char *)kn_tensor_data(z) + (size_t)off * es, kn_tensor_data(w), (size_t)n * es),
              "%s: the fused op's bits differ from the unfused nodes'", what);
}

static void check_ops(kn_dtype dt, int64_t m, int64_t n, int64_t k, bool ta, bool tb, uint64_t seed) {
    kn_rng r = kn_rng_new(seed);
    int64_t sa[2] = {ta ? k : m, ta ? m : k}, sb[2] = {tb ? n : k, tb ? k : n}, sbias[1] = {n}, sy[2] = {m, n};
    kn_tensor *a = randn(&r, dt, 2, sa), *b = randn(&r, dt, 2, sb), *bias = randn(&r, dt, 1, sbias);
    kn_tensor *pre = randn(&r, dt, 2, sy);
    kn_node mm = node(KN_OP_MATMUL);
    mm.attrs.ta = ta;
    mm.attrs.tb = tb;
    kn_tensor *ab[2] = {a, b}, *p = eval(&mm, 2, ab);
    kn_node add = node(KN_OP_ADD), gelu = node(KN_OP_GELU), gb = node(KN_OP_UNARY_GRAD);
    gb.attrs.fn = KN_UNARY_GELU;
    kn_tensor *pb[2] = {p, bias}, *y = eval(&add, 2, pb), *h = eval(&gelu, 1, &y);
    kn_tensor *pp[2] = {p, pre}, *dg = eval(&gb, 2, pp);

    kn_node f = node(KN_OP_MATMUL_BIAS);
    f.attrs = mm.attrs;
    kn_tensor *in3[3] = {a, b, bias}, *z = eval(&f, 3, in3);
    same_bits(z, 0, y, "matmul_bias");
    kn_tensor_free(z);
    f.op = KN_OP_MATMUL_BIAS_GELU;
    z = eval(&f, 3, in3);
    same_bits(z, 0, h, "matmul_bias_gelu (gelu)");
    same_bits(z, m * n, y, "matmul_bias_gelu (pre-activation)");
    kn_tensor_free(z);
    f.op = KN_OP_MATMUL_DGELU;
    in3[2] = pre;
    z = eval(&f, 3, in3);
    same_bits(z, 0, dg, "matmul_dgelu");
    kn_tensor_free(z);
    if (!tb) { /* the weight gradient x^T dy and dy's column sum */
        kn_node s = node(KN_OP_SUM);
        s.attrs.naxes = 1;
        s.attrs.axes[0] = 0;
        kn_tensor *cs = eval(&s, 1, &b);
        f.op = KN_OP_MATMUL_BGRAD;
        z = eval(&f, 2, ab);
        same_bits(z, 0, p, "matmul_bgrad (product)");
        same_bits(z, m * n, cs, "matmul_bgrad (column sum)");
        kn_tensor_free(z);
        kn_tensor_free(cs);
    }
    kn_tensor *all[] = {a, b, bias, pre, p, y, h, dg};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kn_tensor_free(all[i]);
}

KN_TEST(epilogue, cpu_ops_equal_the_unfused_nodes_bit_for_bit) {
    static const int64_t sizes[][3] = {{1, 1, 1}, {7, 5, 3}, {33, 17, 64}, {64, 96, 31}, {5, 8, 0}};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int t = 0; t < 4; t++)
            for (int d = 0; d < 2; d++)
                check_ops(d ? KN_DT_F64 : KN_DT_F32, sizes[s][0], sizes[s][1], sizes[s][2], t & 1, t >> 1, 10 + s);
}

/* bf16 operands, f32 result: the product of the widened operands, not rounded to bf16. */
KN_TEST(epilogue, bf16_operands_give_the_f32_product_of_their_values) {
    kn_rng r = kn_rng_new(4);
    int64_t sa[2] = {6, 10}, sb[2] = {10, 12}, sn[1] = {12};
    kn_tensor *a32 = randn(&r, KN_DT_F32, 2, sa), *b32 = randn(&r, KN_DT_F32, 2, sb), *bias = randn(&r, KN_DT_F32, 1, sn);
    kn_tensor *a16, *b16, *aw, *bw;
    KN_ASSERT_OK(kn_tensor_cast(&a16, a32, KN_DT_BF16));
    KN_ASSERT_OK(kn_tensor_cast(&b16, b32, KN_DT_BF16));
    KN_ASSERT_OK(kn_tensor_cast(&aw, a16, KN_DT_F32));
    KN_ASSERT_OK(kn_tensor_cast(&bw, b16, KN_DT_F32));
    kn_node f = node(KN_OP_MATMUL_BIAS_GELU);
    kn_tensor *lo[3] = {a16, b16, bias}, *wide[3] = {aw, bw, bias};
    kn_tensor *z = eval(&f, 3, lo), *w = eval(&f, 3, wide);
    cr_assert(z->dtype == KN_DT_F32 && z->shape[0] == 12 && z->shape[1] == 12);
    same_bits(z, 0, w, "bf16 matmul_bias_gelu");
    kn_tensor *all[] = {a32, b32, bias, a16, b16, aw, bw, z, w};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kn_tensor_free(all[i]);
}

static void refused(const char *txt, const char *needle) {
    kn_graph *g = NULL;
    kn_status st = kn_graph_parse(txt, strlen(txt), &g);
    if (st == KN_OK) st = kn_graph_verify(g);
    cr_assert(st != KN_OK, "accepted: %s", txt);
    cr_assert(strstr(kn_last_error(), needle), "message '%s' lacks '%s'", kn_last_error(), needle);
    kn_graph_free(g);
}

KN_TEST(epilogue, shape_rules_name_the_problem) {
    refused("%0 = input {name=\"a\"} : f32[4,3]\n%1 = input {name=\"b\"} : f32[3,5]\n%2 = input {name=\"c\"} : f32[4]\n"
            "%3 = matmul_bias %0, %1, %2 : f32[4,5]\noutput %3\n", "bias");
    refused("%0 = input {name=\"a\"} : f32[4,3]\n%1 = input {name=\"b\"} : f32[3,5]\n%2 = input {name=\"c\"} : f32[5,4]\n"
            "%3 = matmul_dgelu %0, %1, %2 : f32[4,5]\noutput %3\n", "pre-activation");
    refused("%0 = input {name=\"a\"} : f32[4,3]\n%1 = input {name=\"b\"} : f32[5,3]\n"
            "%2 = matmul_bgrad %0, %1 {tb=1} : f32[5,5]\noutput %2\n", "tb must be 0");
    refused("%0 = input {name=\"a\"} : f32[2,4,3]\n%1 = input {name=\"b\"} : f32[3,5]\n%2 = input {name=\"c\"} : f32[5]\n"
            "%3 = matmul_bias %0, %1, %2 : f32[2,4,5]\noutput %3\n", "matrices");
    refused("%0 = input {name=\"a\"} : bf16[4,3]\n%1 = input {name=\"b\"} : bf16[3,5]\n%2 = input {name=\"c\"} : bf16[5]\n"
            "%3 = matmul_bias %0, %1, %2 : bf16[4,5]\noutput %3\n", "f32 or f64");
    refused("%0 = input {name=\"a\"} : f32[4,3]\n%1 = input {name=\"b\"} : f32[3,5]\n%2 = input {name=\"c\"} : f64[5]\n"
            "%3 = matmul_bias %0, %1, %2 : f64[4,5]\noutput %3\n", "f32 or f64");
}

/* ---------------------------------------------------------------- the pass */

static const kn_gpt_config cfg = {.vocab = 17, .context = 24, .layers = 3, .width = 16, .heads = 2};
enum { GB = 2, GT = 24 };

static int count_ops(const kn_graph *g, kn_op op) {
    int c = 0;
    for (int i = 0; i < g->nnodes; i++) c += g->nodes[i].op == op;
    return c;
}

KN_TEST(epilogue, pass_on_the_gpt_step_keeps_every_output_bit_for_bit, .timeout = 120) {
    kn_graph *g;
    KN_ASSERT_OK(kn_gpt_graph(&cfg, GB, GT, true, &g));
    kn_pass_report rep;
    kn_graph *c = graph_after_passes(g, "epilogue", &rep);
    /* per layer: q, k, v, the attention projection and the MLP's second linear get a bias;
     * the MLP's first its bias and gelu; its backward one dgelu; six weight gradients their
     * bias's gradient */
    cr_assert_eq(count_ops(c, KN_OP_MATMUL_BIAS), 5 * cfg.layers);
    cr_assert_eq(count_ops(c, KN_OP_MATMUL_BIAS_GELU), cfg.layers);
    cr_assert_eq(count_ops(c, KN_OP_MATMUL_DGELU), cfg.layers);
    cr_assert_eq(count_ops(c, KN_OP_MATMUL_BGRAD), 6 * cfg.layers);
    cr_assert_eq(count_ops(c, KN_OP_GELU) + count_ops(c, KN_OP_UNARY_GRAD), 0);
    cr_assert_eq(rep.pass[0].nfired, 4);
    for (int i = 0; i < c->nnodes; i++)
        if (c->nodes[i].op == KN_OP_MATMUL_BIAS_GELU) cr_assert(c->nodes[i].scope >= 0, "the scope is lost");

    kn_interp *ia, *ib;
    KN_ASSERT_OK(kn_interp_new(&ia, g));
    KN_ASSERT_OK(kn_interp_new(&ib, c));
    bind_same_random(g, (kn_interp *const[]){ia, ib}, 2, 5, 1);
    KN_ASSERT_OK(kn_interp_run(ia));
    KN_ASSERT_OK(kn_interp_run(ib));
    cr_assert(g->noutputs == c->noutputs && g->noutputs > 1);
    for (int i = 0; i < g->noutputs; i++) {
        const kn_tensor *x = kn_interp_output(ia, i), *y = kn_interp_output(ib, i);
        cr_assert(kn_tensor_numel(x) == kn_tensor_numel(y));
        cr_assert(!memcmp(kn_tensor_data(x), kn_tensor_data(y), (size_t)kn_tensor_numel(x) * kn_dtype_size(x->dtype)),
                  "output %d differs", i);
    }
    kn_interp_free(ia);
    kn_interp_free(ib);

    /* compiled to C: fewer steps and generated kernels (the bias adds, gelus and column sums
     * leave the schedule) */
    kn_program_stats s[2];
    for (int f = 0; f < 2; f++) {
        kn_program_opts o = {.passes = f ? "epilogue" : NULL, .mode = KN_PROGRAM_COMPILED};
        kn_program *p;
        KN_ASSERT_OK(kn_program_compile(&p, g, &o));
        s[f] = kn_program_get_stats(p);
        kn_program_free(p);
    }
    cr_assert(s[0].mode == KN_PROGRAM_COMPILED, "no C compiler?");
    cr_assert(s[1].nkernels < s[0].nkernels, "kernels %d -> %d", s[0].nkernels, s[1].nkernels);
    /* the slices of the stacked results are views, not copies: the plan grows by no more
     * than the gelu outputs kept beside their pre-activations (one [B T, 4 D] f32 a layer) */
    double h = (double)GB * GT * 4 * cfg.width * 4;
    cr_assert(s[1].mem_planned <= s[0].mem_planned + cfg.layers * h, "planned arena %.0f -> %.0f bytes",
              s[0].mem_planned, s[1].mem_planned);
    printf("epilogue: kernels %d -> %d, steps %d -> %d, arena %.0f -> %.0f bytes\n", s[0].nkernels, s[1].nkernels,
           s[0].nsteps, s[1].nsteps, s[0].mem_planned, s[1].mem_planned);
    kn_graph_free(c);
    kn_graph_free(g);
}

/* The k-th allocation of the pass fails: KN_ERR_OOM, the graph untouched and valid, nothing
 * leaked; then it runs. */
KN_TEST(epilogue, allocation_failures_leave_the_graph_as_it_was) {
    const kn_gpt_config one = {.vocab = 11, .context = 8, .layers = 1, .width = 16, .heads = 2};
    kn_graph *g;
    KN_ASSERT_OK(kn_gpt_graph(&one, 2, 8, true, &g));
    kn_graph *c = kn_test_pass_under_allocation_failures(g, kn_pass_epilogue);
    cr_assert_eq(count_ops(c, KN_OP_MATMUL_BGRAD), 6);
    kn_graph_free(c);
    kn_graph_free(g);
}

/* Three AdamW steps, node by node (bit for bit) and compiled (within rounding). */
KN_TEST(epilogue, trainer_steps_follow_the_unfused_run, .timeout = 120) {
    for (int compiled = 0; compiled < 2; compiled++) {
        float *p0, *p1;
        double l0[3], l1[3];
        size_t n = kn_test_train3_both(&cfg, GB, GT, NULL, "epilogue", compiled, l0, l1, &p0, &p1);
        for (int s = 0; s < 3; s++) {
            if (compiled) KN_ASSERT_CLOSE(l1[s], l0[s], 0, 1e-6);
            else cr_assert(l1[s] == l0[s], "step %d: loss %.9g against %.9g", s, l1[s], l0[s]);
        }
        for (size_t i = 0; i < n; i++) {
            if (compiled) KN_ASSERT_CLOSE(p1[i], p0[i], 1e-5, 0);
            else cr_assert(p1[i] == p0[i], "parameter %zu differs", i);
        }
        free(p0);
        free(p1);
    }
}

/* g and c on the same random inputs: max |delta| within [lo, hi] */
static void check_delta(const kn_graph *g, const kn_graph *c, double lo, double hi) {
    double d = -1;
    KN_ASSERT_OK(kn_graph_compare(g, c, 3, &d));
    cr_assert(d >= lo && d <= hi, "max |delta| %.3g, expected in [%g, %g]", d, lo, hi);
}

/* txt parsed into *g, and its copy after the pass */
static kn_graph *parse_fused(const char *txt, kn_graph **g) {
    kn_pass_report rep;
    KN_ASSERT_OK(kn_graph_parse(txt, strlen(txt), g));
    return graph_after_passes(*g, "epilogue", &rep);
}

KN_TEST(epilogue, pass_edge_cases) {
    /* one bias read by two linears and by an output; the first product read elsewhere too
     * (left alone); the second's gelu output and pre-activation read elsewhere */
    const char *txt = "%0 = input {name=\"x\"} : f32[4,3]\n"
                      "%1 = param {name=\"w\"} : f32[3,5]\n"
                      "%2 = param {name=\"b\"} : f32[5]\n"
                      "%3 = matmul %0, %1 : f32[4,5]\n"
                      "%4 = add %3, %2 : f32[4,5]\n"
                      "%5 = matmul %0, %1 : f32[4,5]\n"
                      "%6 = add %2, %5 : f32[4,5]\n"
                      "%7 = gelu %6 : f32[4,5]\n"
                      "%8 = mul %7, %6 : f32[4,5]\n"
                      "%9 = exp %3 : f32[4,5]\n"
                      "output %4, %8, %9, %2, %7, %6\n";
    kn_graph *g, *c = parse_fused(txt, &g);
    kn_pass_report rep;
    cr_assert_eq(count_ops(c, KN_OP_MATMUL_BIAS_GELU), 1);
    cr_assert_eq(count_ops(c, KN_OP_MATMUL_BIAS), 0, "a product read elsewhere was fused");
    cr_assert_eq(count_ops(c, KN_OP_MATMUL), 1);
    check_delta(g, c, 0, 0);
    kn_graph_free(c);
    /* "all" does not run it */
    c = graph_after_passes(g, "all", &rep);
    cr_assert_eq(count_ops(c, KN_OP_MATMUL_BIAS_GELU), 0);
    kn_graph_free(c);
    kn_graph_free(g);

    /* a bias gradient without keepdim, the weight gradient before it, dy read by dx too;
     * and a sum over the other axis (not a bias gradient) */
    txt = "%0 = input {name=\"x\"} : f32[6,3]\n"
          "%1 = input {name=\"dy\"} : f32[6,4]\n"
          "%2 = param {name=\"w\"} : f32[3,4]\n"
          "%3 = matmul %0, %1 {ta=1} : f32[3,4]\n"
          "%4 = matmul %1, %2 {tb=1} : f32[6,3]\n"
          "%5 = sum %1 {axes=[0]} : f32[4]\n"
          "%6 = sum %1 {axes=[1]} : f32[6]\n"
          "output %3, %4, %5, %6\n";
    c = parse_fused(txt, &g);
    cr_assert_eq(count_ops(c, KN_OP_MATMUL_BGRAD), 1);
    cr_assert_eq(count_ops(c, KN_OP_SUM), 1);
    check_delta(g, c, 0, 0);
    kn_graph_free(c);
    kn_graph_free(g);

    /* mixed precision: a bf16 product cast up to f32 before its bias, its gelu gradient */
    txt = "%0 = input {name=\"x\"} : bf16[4,3]\n"
          "%1 = input {name=\"w\"} : bf16[3,5]\n"
          "%2 = param {name=\"b\"} : f32[5]\n"
          "%3 = input {name=\"pre\"} : f32[4,5]\n"
          "%4 = matmul %0, %1 : bf16[4,5]\n"
          "%5 = cast %4 {dtype=f32} : f32[4,5]\n"
          "%6 = add %5, %2 : f32[4,5]\n"
          "%7 = matmul %0, %1 : bf16[4,5]\n"
          "%8 = cast %7 {dtype=f32} : f32[4,5]\n"
          "%9 = unary_grad %8, %3 {fn=gelu} : f32[4,5]\n"
          "output %6, %9\n";
    c = parse_fused(txt, &g);
    cr_assert_eq(count_ops(c, KN_OP_MATMUL_BIAS) + count_ops(c, KN_OP_MATMUL_DGELU), 2);
    cr_assert_eq(count_ops(c, KN_OP_CAST) + count_ops(c, KN_OP_MATMUL), 0);
    check_delta(g, c, 1e-30, 0.05); /* the product is no longer rounded to bf16 */
    kn_graph_free(c);
    kn_graph_free(g);

    /* a gelu whose f32 output is only cast (autocast's form): the bias alone is fused, the
     * gelu stays (a stacked value would keep its f32 output alive) */
    txt = "%0 = input {name=\"x\"} : bf16[4,3]\n"
          "%1 = input {name=\"w\"} : bf16[3,5]\n"
          "%2 = param {name=\"b\"} : f32[5]\n"
          "%3 = matmul %0, %1 : bf16[4,5]\n"
          "%4 = cast %3 {dtype=f32} : f32[4,5]\n"
          "%5 = add %4, %2 : f32[4,5]\n"
          "%6 = gelu %5 : f32[4,5]\n"
          "%7 = cast %6 {dtype=bf16} : bf16[4,5]\n"
          "output %7, %5\n";
    c = parse_fused(txt, &g);
    cr_assert(count_ops(c, KN_OP_MATMUL_BIAS) == 1 && count_ops(c, KN_OP_MATMUL_BIAS_GELU) == 0 &&
              count_ops(c, KN_OP_GELU) == 1);
    check_delta(g, c, 0, 0.05);
    kn_graph_free(c);
    kn_graph_free(g);
}

/* ---------------------------------------------------------------- on a GPU */

static void gpu_case(kn_op op, kn_dtype in_dt, kn_dtype out_dt, int64_t m, int64_t n, int64_t k, bool ta, bool tb,
                     uint64_t seed) {
    kn_rng r = kn_rng_new(seed);
    int64_t sa[2] = {ta ? k : m, ta ? m : k}, sb[2] = {tb ? n : k, tb ? k : n}, sbias[1] = {n}, sy[2] = {m, n};
    kn_tensor *h[3] = {randn(&r, in_dt, 2, sa), randn(&r, in_dt, 2, sb), NULL}, *d[3] = {NULL};
    int nin = 2;
    if (op == KN_OP_MATMUL_BIAS || op == KN_OP_MATMUL_BIAS_GELU) h[nin++] = randn(&r, out_dt, 1, sbias);
    if (op == KN_OP_MATMUL_DGELU) h[nin++] = randn(&r, out_dt, 2, sy);
    kn_node f = node(op);
    f.attrs.ta = ta;
    f.attrs.tb = tb;
    gpu_operands(&f, nin, h, NULL, d);
    kn_tensor *want = NULL;
    KN_ASSERT_OK(kn_node_eval(&f, (const kn_tensor *const *)h, &want));
    kn_tensor *got = on_gpu(&f, d);
    compare(&f, got, want, TOL_REDUCE); /* f64's GELU epilogues run by hand (cuda_matmul_lt.cu) */
    kn_tensor_free(got);
    kn_tensor_free(want);
    for (int i = 0; i < nin; i++) {
        kn_tensor_free(h[i]);
        kn_tensor_free(d[i]);
    }
}

KN_TEST(cuda_epilogue, ops_match_the_cpu, .timeout = 120) {
    SKIP_WITHOUT_GPU();
    static const kn_op ops[] = {KN_OP_MATMUL_BIAS, KN_OP_MATMUL_BIAS_GELU, KN_OP_MATMUL_DGELU, KN_OP_MATMUL_BGRAD};
    /* GPT-like shapes (the widths cuBLASLt fuses) and awkward ones (odd N: no aligned aux) */
    static const int64_t sizes[][3] = {{256, 768, 192}, {512, 128, 64}, {33, 17, 9}, {1, 5, 3}, {64, 48, 0}};
    for (size_t o = 0; o < 4; o++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            for (int t = 0; t < 4; t++) {
                bool ta = t & 1, tb = t >> 1;
                if (ops[o] == KN_OP_MATMUL_BGRAD && tb) continue;
                gpu_case(ops[o], KN_DT_F32, KN_DT_F32, sizes[s][0], sizes[s][1], sizes[s][2], ta, tb, 20 + s);
                gpu_case(ops[o], KN_DT_F64, KN_DT_F64, sizes[s][0], sizes[s][1], sizes[s][2], ta, tb, 30 + s);
                if (ops[o] != KN_OP_MATMUL_BGRAD) /* bf16 operands, f32 result (mixed precision) */
                    gpu_case(ops[o], KN_DT_BF16, KN_DT_F32, sizes[s][0], sizes[s][1], sizes[s][2], ta, tb, 40 + s);
            }
}

/* On a GPU: five AdamW steps of the compiled step with the pass (cuBLASLt's epilogues) and
 * without (cuBLAS and generated kernels), the fused one also replayed as a CUDA graph
 * (cuBLASLt's calls are captured on kiln's stream): losses within 1e-5 relative,
 * parameters within 1e-4. */
KN_TEST(cuda_epilogue, compiled_training_with_the_pass_follows_the_unfused_step, .timeout = 240) {
    SKIP_WITHOUT_GPU();
    double loss[3][5];
    float *params[3] = {NULL, NULL, NULL};
    int64_t np = 0;
    for (int run = 0; run < 3; run++) {
        kn_gpt model;
        KN_ASSERT_OK(kn_gpt_new(&model, &cfg));
        kn_gpt_init(&model, 77);
        kn_optim_config oc = kn_optim_default();
        kn_trainer t;
        KN_ASSERT_OK(kn_trainer_new(&t, &model, GB, GT, &oc, 1.0));
        KN_ASSERT_OK(kn_trainer_to_device(&t, CUDA0));
        t.passes = run ? "epilogue" : NULL;
        t.cuda_graph = run == 2;
        KN_ASSERT_OK(kn_trainer_set_compiled(&t, true));
        int32_t x[GB * GT], y[GB * GT];
        for (int step = 0; step < 5; step++) {
            for (int i = 0; i < GB * GT; i++) { x[i] = (i * 7 + step * 3) % cfg.vocab; y[i] = (i * 5 + step) % cfg.vocab; }
            KN_ASSERT_OK(kn_trainer_step(&t, x, y, 1e-2, &loss[run][step], NULL));
        }
        kn_tensor *host = NULL;
        KN_ASSERT_OK(kn_tensor_to(&host, t.params, KN_CPU));
        np = kn_tensor_numel(host);
        params[run] = malloc(sizeof(float) * (size_t)np);
        memcpy(params[run], kn_tensor_data(host), sizeof(float) * (size_t)np);
        kn_tensor_free(host);
        kn_trainer_free(&t);
        kn_gpt_free(&model);
    }
    for (int run = 1; run < 3; run++) {
        for (int s = 0; s < 5; s++) KN_ASSERT_CLOSE(loss[run][s], loss[0][s], 0, 1e-5);
        for (int64_t i = 0; i < np; i++) KN_ASSERT_CLOSE(params[run][i], params[0][i], 1e-4, 0);
    }
    for (int run = 0; run < 3; run++) free(params[run]);
}
