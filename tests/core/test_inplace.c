/* test_inplace.c — a library kernel written over its operand (kn_op_inplace_operand), and
 * the memory plan that asks for it.
 *
 *   - the CPU kernel of cross_entropy_bwd with its output placed over the logits gives the
 *     bits it gives into a buffer of its own: f32, f64, and bf16/f16 logits (the widening
 *     path, eval_low_precision), on rows with -inf entries and a vocabulary-wide row;
 *   - the plan: a compiled CPU program that keeps the loss as library steps
 *     (opts.keep_loss, as a GPU does) writes the gradient over the logits when they die
 *     at the backward (through a reshape, as the GPT's do), one in-place value of the
 *     logits' size, and the arena shrinks by exactly that; logits still read after the
 *     backward are never written over; the results are the interpreter's either way;
 *   - the fused pair (kiln/device.h's cross_entropy_fused): the CPU backend's call gives
 *     the loss and the gradient of the two nodes bit for bit, into a buffer of its own or
 *     over the logits, f32, f64, bf16 and f16; a bad target fails before anything is
 *     written; a compiled program keeping its loss pairs the two steps into that call
 *     (stats.ce_fused), also in the GPT's step, and not when the loss's gradient is made
 *     from the loss.
 * The CUDA kernels' tests (in place, fused) are in test_cuda_norm.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kn_test.h"
#include "test_ir_util.h"
#include "kiln/device.h"
#include "kiln/nn.h"
#include "kiln/passes.h"
#include "kiln/program.h"

/* A private kernel cache per test process, so tests neither share nor litter one. */
static void private_cache(void) {
    char tmpl[] = "/tmp/kiln-ip-XXXXXX";
    char *d = mkdtemp(tmpl);
    cr_assert_not_null(d);
    setenv("KILN_CACHE_DIR", d, 1);
}

/* Logits [rows, v] of dtype dt: 4 randn, row 1 -inf at every third entry but the target's. */
static kn_tensor *logits(kn_dtype dt, int64_t rows, int64_t v, const kn_tensor *tg, uint64_t seed) {
    int64_t sh[2] = {rows, v};
    kn_tensor *r = irt_randn(KN_DT_F64, 2, sh, seed), *x = NULL;
    double *d = kn_tensor_data(r);
    for (int64_t i = 0; i < rows * v; i++) d[i] *= 4;
    int64_t t1 = ((const int64_t *)kn_tensor_data(tg))[1];
    for (int64_t j = 0; rows > 1 && j < v; j += 3)
        if (j != t1) d[v + j] = -INFINITY;
    KN_ASSERT_OK(kn_tensor_from_f64(&x, dt, 2, sh, d));
    kn_tensor_free(r);
    return x;
}

/* cross_entropy_bwd on logits of dtype dt: into its own buffer, then over a copy of the
 * logits; the two must be the same bits. */
static void ce_bwd_case(kn_dtype dt, int64_t rows, int64_t v, uint64_t seed) {
    int64_t tsh[1] = {rows};
    kn_tensor *tg = irt_randint(1, tsh, v, seed + 1), *x = logits(dt, rows, v, tg, seed), *x2 = NULL, *dl = NULL;
    bool low = dt == KN_DT_BF16 || dt == KN_DT_F16;
    KN_ASSERT_OK(kn_tensor_clone(&x2, x));
    KN_ASSERT_OK(kn_tensor_scalar(&dl, low ? KN_DT_F32 : dt, 0.75));
    kn_node n;
    memset(&n, 0, sizeof n);
    n.op = KN_OP_CROSS_ENTROPY_BWD;
    n.nin = 3;
    n.attrs = kn_attrs_default();
    kn_type ty[3] = {{dl->dtype, 0, {0}}, {dt, 2, {rows, v}}, {KN_DT_I64, 1, {rows}}};
    const kn_type *tp[3] = {&ty[0], &ty[1], &ty[2]};
    char msg[256];
    cr_assert_eq(kn_node_infer(&n, tp, &n.type, msg, sizeof msg), KN_OK, "%s", msg);
    kn_tensor *want = NULL, *over = NULL;
    const kn_tensor *in[3] = {dl, x, tg}, *in2[3] = {dl, x2, tg};
    KN_ASSERT_OK(kn_node_eval(&n, in, &want));
    KN_ASSERT_OK(kn_tensor_wrap(&over, KN_CPU, kn_tensor_data(x2), dt, 2, x2->shape));
    kn_tensor *placed = over;
    KN_ASSERT_OK(kn_node_eval(&n, in2, &over));
    cr_assert_eq(over, placed, "the kernel kept the output it was given");
    cr_assert(irt_same_bits(over, want), "%s logits [%lld, %lld]: in place differs from out of place",
              kn_dtype_name(dt), (long long)rows, (long long)v);
    cr_assert(irt_same_bits(x2, want), "the gradient is in the logits' bytes");
    kn_tensor_free(over);
    kn_tensor_free(want);
    kn_tensor_free(x);
    kn_tensor_free(x2);
    kn_tensor_free(dl);
    kn_tensor_free(tg);
}

KN_TEST(inplace, cpu_cross_entropy_bwd_over_its_logits_is_bitwise_out_of_place) {
    const kn_dtype dts[4] = {KN_DT_F32, KN_DT_F64, KN_DT_BF16, KN_DT_F16};
    for (int d = 0; d < 4; d++) {
        ce_bwd_case(dts[d], 6, 37, 10 + (uint64_t)d);
        ce_bwd_case(dts[d], 3, 50304, 20 + (uint64_t)d); /* the GPT's vocabulary */
    }
}

/* The CPU backend's cross_entropy_fused on logits of dtype dt against the two nodes: the
 * loss and the gradient bit for bit, with the gradient in a buffer of its own and over a
 * copy of the logits. */
static void ce_fused_case(kn_dtype dt, int64_t rows, int64_t v, uint64_t seed) {
    int64_t tsh[1] = {rows};
    kn_tensor *tg = irt_randint(1, tsh, v, seed + 1), *x = logits(dt, rows, v, tg, seed), *x2 = NULL, *dl = NULL;
    bool low = dt == KN_DT_BF16 || dt == KN_DT_F16;
    KN_ASSERT_OK(kn_tensor_clone(&x2, x));
    KN_ASSERT_OK(kn_tensor_scalar(&dl, low ? KN_DT_F32 : dt, 1.25));
    kn_node ln, bn;
    memset(&ln, 0, sizeof ln);
    ln.attrs = kn_attrs_default();
    bn = ln;
    ln.op = KN_OP_CROSS_ENTROPY;
    ln.nin = 2;
    bn.op = KN_OP_CROSS_ENTROPY_BWD;
    bn.nin = 3;
    kn_type ty[3] = {{dl->dtype, 0, {0}}, {dt, 2, {rows, v}}, {KN_DT_I64, 1, {rows}}};
    const kn_type *tp[3] = {&ty[0], &ty[1], &ty[2]};
    char msg[256];
    cr_assert_eq(kn_node_infer(&ln, tp + 1, &ln.type, msg, sizeof msg), KN_OK, "%s", msg);
    cr_assert_eq(kn_node_infer(&bn, tp, &bn.type, msg, sizeof msg), KN_OK, "%s", msg);
    kn_tensor *want_l = NULL, *want_d = NULL, *l = NULL, *d = NULL, *l2 = NULL, *over = NULL;
    const kn_tensor *lin[2] = {x, tg}, *in[3] = {dl, x, tg}, *in2[3] = {dl, x2, tg};
    KN_ASSERT_OK(kn_node_eval(&ln, lin, &want_l));
    KN_ASSERT_OK(kn_node_eval(&bn, in, &want_d));
    const kn_device_backend *be = kn_device_backend_get(KN_DEVICE_CPU);
    cr_assert(be && be->cross_entropy_fused);
    KN_ASSERT_OK(be->cross_entropy_fused(be->ctx, 0, in, &l, &d));
    char ts[64];
    snprintf(ts, sizeof ts, "%s logits [%lld, %lld]", kn_dtype_name(dt), (long long)rows, (long long)v);
    cr_assert(irt_same_bits(l, want_l), "%s: the fused loss %.17g, cross_entropy's %.17g", ts,
              kn_dtype_load(l->dtype, kn_tensor_data(l), 0), kn_dtype_load(want_l->dtype, kn_tensor_data(want_l), 0));
    cr_assert(irt_same_bits(d, want_d), "%s: the fused gradient differs from cross_entropy_bwd's", ts);
    KN_ASSERT_OK(kn_tensor_wrap(&over, KN_CPU, kn_tensor_data(x2), dt, 2, x2->shape));
    kn_tensor *placed = over;
    KN_ASSERT_OK(be->cross_entropy_fused(be->ctx, 0, in2, &l2, &over));
    cr_assert_eq(over, placed, "the call kept the gradient's tensor it was given");
    cr_assert(irt_same_bits(l2, want_l), "%s: the loss with the gradient over the logits", ts);
    cr_assert(irt_same_bits(x2, want_d), "%s: the gradient written over the logits differs", ts);
    kn_tensor *ts2[] = {want_l, want_d, l, d, l2, over, x, x2, dl, tg};
    for (size_t i = 0; i < sizeof ts2 / sizeof ts2[0]; i++) kn_tensor_free(ts2[i]);
}

KN_TEST(inplace, cpu_fused_cross_entropy_is_the_pair_bitwise) {
    const kn_dtype dts[4] = {KN_DT_F32, KN_DT_F64, KN_DT_BF16, KN_DT_F16};
    for (int d = 0; d < 4; d++) {
        ce_fused_case(dts[d], 6, 37, 30 + (uint64_t)d);
        ce_fused_case(dts[d], 3, 50304, 40 + (uint64_t)d);
    }
}

/* A target outside [0, v): KN_ERR_ARG naming it, as cross_entropy_bwd's kernel does, and
 * the logits (the gradient's bytes) untouched: every target is checked first. */
KN_TEST(inplace, cpu_fused_cross_entropy_checks_targets_before_writing) {
    int64_t sh[2] = {3, 7}, tsh[1] = {3};
    kn_tensor *x = irt_randn(KN_DT_F32, 2, sh, 5), *x0 = NULL, *dl = NULL, *t = NULL, *l = NULL, *over = NULL;
    int64_t tv[3] = {1, 6, 7};
    KN_ASSERT_OK(kn_tensor_from_data(&t, KN_DT_I64, 1, tsh, tv));
    KN_ASSERT_OK(kn_tensor_clone(&x0, x));
    KN_ASSERT_OK(kn_tensor_scalar(&dl, KN_DT_F32, 1));
    KN_ASSERT_OK(kn_tensor_wrap(&over, KN_CPU, kn_tensor_data(x), KN_DT_F32, 2, sh));
    const kn_tensor *in[3] = {dl, x, t};
    const kn_device_backend *be = kn_device_backend_get(KN_DEVICE_CPU);
    kn_tensor *placed = over;
    cr_assert_eq(be->cross_entropy_fused(be->ctx, 0, in, &l, &over), KN_ERR_ARG);
    cr_assert_str_eq(kn_last_error(), "cross_entropy_bwd: index 7 at position 2 is outside [0, 7)");
    cr_assert_null(l, "no loss on failure");
    cr_assert_eq(over, placed, "the caller's tensor stays the caller's");
    cr_assert(irt_same_bits(x, x0), "the logits were written before the bad target was found");
    kn_tensor *all[] = {x, x0, dl, t, over};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kn_tensor_free(all[i]);
}

/* logits = x * x, seen by the loss through a reshape (as the GPT's lm_head output is); the
 * loss and the gradient's row sums after `tail` (which reads %6, the gradient, and maybe
 * the logits) are the outputs. DT is the logits' dtype, LT the loss's. */
static kn_graph *loss_graph(const char *dt, const char *lt, const char *tail) {
    char text[2048];
    snprintf(text, sizeof text,
             "%%0 = input {name=\"x\"} : %s[2,4,40]\n"
             "%%1 = input {name=\"t\"} : i64[8]\n"
             "%%2 = input {name=\"dl\"} : %s[]\n"
             "%%3 = mul %%0, %%0 : %s[2,4,40]\n"
             "%%4 = reshape %%3 {shape=[8,40]} : %s[8,40]\n"
             "%%5 = cross_entropy %%4, %%1 : %s[]\n"
             "%%6 = cross_entropy_bwd %%2, %%4, %%1 : %s[8,40]\n"
             "%s"
             "output %%5, %%8\n",
             dt, lt, dt, dt, lt, dt, tail);
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_graph_parse(text, strlen(text), &g));
    KN_ASSERT_OK(kn_graph_verify(g));
    return g;
}

/* The compiled program's statistics and its largest error against the interpreter; keep:
 * the loss stays library steps (opts.keep_loss). */
static double compiled(const kn_graph *g, kn_program_stats *st, bool keep) {
    kn_program_opts o = {.device = KN_CPU, .mode = KN_PROGRAM_COMPILED, .keep_loss = keep};
    double worst = INFINITY;
    KN_ASSERT_OK(kn_program_compare(g, &o, 3, &worst, st));
    cr_assert_eq(st->mode, KN_PROGRAM_COMPILED, "needs a C compiler");
    return worst;
}

KN_TEST(inplace, the_plan_writes_the_loss_gradient_over_logits_that_die_there) {
    private_cache();
    const char *dts[2][2] = {{"f32", "f32"}, {"bf16", "f32"}};
    for (int k = 0; k < 2; k++) {
        char tail[256];
        snprintf(tail, sizeof tail, "%%7 = mul %%6, %%6 : %s[8,40]\n%%8 = sum %%7 {axes=[1]} : %s[8]\n", dts[k][0],
                 dts[k][0]);
        kn_graph *g = loss_graph(dts[k][0], dts[k][1], tail);
        kn_program_stats st;
        double err = compiled(g, &st, true);
        cr_assert_leq(err, k ? 1e-2 : 1e-5, "%s: the results differ from the interpreter's by %.3g", dts[k][0], err);
        double L = 8 * 40 * (double)kn_dtype_size(g->nodes[3].type.dtype); /* 64-byte multiples, as planned */
        cr_assert_eq(st.nsteps - st.nkernels, 3, "%s: the reshape, the loss and its backward are library steps "
                     "(%d of %d)", dts[k][0], st.nsteps - st.nkernels, st.nsteps);
        cr_assert_eq(st.mem_inplace, 1, "%s: the gradient over the logits, nothing else: %d", dts[k][0], st.mem_inplace);
        cr_assert_eq(st.ce_fused, 1, "%s: the loss and its backward as one call", dts[k][0]);
        cr_assert_eq(st.mem_inplace_bytes, L);
        cr_assert_eq(st.mem_planned_separate - st.mem_planned, L, "%s: the arena %.0f, without in place %.0f: "
                     "the logits' %.0f bytes apart", dts[k][0], st.mem_planned, st.mem_planned_separate, L);
        kn_graph_free(g);
    }
}

/* The logits are read again after the backward (%7 = %6 * %4): they do not die there, so
 * nothing is written over them, and the results stay the interpreter's. */
KN_TEST(inplace, logits_read_after_the_backward_are_not_written_over) {
    private_cache();
    kn_graph *g = loss_graph("f32", "f32", "%7 = mul %6, %4 : f32[8,40]\n%8 = sum %7 {axes=[1]} : f32[8]\n");
    kn_program_stats st;
    double err = compiled(g, &st, true);
    cr_assert_leq(err, 1e-5, "the results differ from the interpreter's by %.3g", err);
    cr_assert_eq(st.mem_inplace, 0, "%d values in place", st.mem_inplace);
    cr_assert_eq(st.mem_planned, st.mem_planned_separate);
    kn_graph_free(g);
}

/* The loss's gradient made from the loss itself (dl = loss * d, read between the two
 * steps): not known before the forward, so the two stay apart, with the same results. */
KN_TEST(inplace, a_loss_gradient_made_from_the_loss_is_not_fused) {
    private_cache();
    const char *text = "%0 = input {name=\"x\"} : f32[2,4,40]\n"
                       "%1 = input {name=\"t\"} : i64[8]\n"
                       "%2 = input {name=\"d\"} : f32[]\n"
                       "%3 = mul %0, %0 : f32[2,4,40]\n"
                       "%4 = reshape %3 {shape=[8,40]} : f32[8,40]\n"
                       "%5 = cross_entropy %4, %1 : f32[]\n"
                       "%6 = mul %5, %2 : f32[]\n"
                       "%7 = cross_entropy_bwd %6, %4, %1 : f32[8,40]\n"
                       "%8 = sum %7 {axes=[1]} : f32[8]\n"
                       "output %5, %8\n";
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_graph_parse(text, strlen(text), &g));
    KN_ASSERT_OK(kn_graph_verify(g));
    kn_program_stats st;
    double err = compiled(g, &st, true);
    cr_assert_leq(err, 1e-5, "the results differ from the interpreter's by %.3g", err);
    cr_assert_eq(st.ce_fused, 0, "a gradient read from the loss cannot be made with it");
    kn_graph_free(g);
}

/* Without keep_loss the C target decomposes the loss into generated row kernels:
 * nothing for the library's in place to do, and the same results. */
KN_TEST(inplace, the_c_target_decomposes_the_loss_without_keep_loss) {
    private_cache();
    kn_graph *g = loss_graph("f32", "f32", "%7 = mul %6, %6 : f32[8,40]\n%8 = sum %7 {axes=[1]} : f32[8]\n");
    kn_program_stats st;
    double err = compiled(g, &st, false);
    cr_assert_leq(err, 1e-5, "the results differ from the interpreter's by %.3g", err);
    cr_assert_leq(st.nsteps - st.nkernels, 1, "only the reshape is a library step: %d", st.nsteps - st.nkernels);
    kn_graph_free(g);
}

/* The GPT step keeping its loss: with a wide vocabulary (the logits and their gradient the
 * step's largest values, as in GPT-2) the arena shrinks by at least a third of the
 * logits' size; with the small vocabulary of `kiln train` the in-place chains pack worse
 * than their values apart (1.62 MB against 1.59), and the plan without in place is kept:
 * in place never costs. The results are the interpreter's either way. */
KN_TEST(inplace, the_gpt_step_keeping_its_loss, .timeout = 120) {
    private_cache();
    const int64_t vocab[2] = {2048, 65};
    for (int k = 0; k < 2; k++) {
        kn_gpt_config c = {.vocab = vocab[k], .context = 64, .layers = 2, .width = 64, .heads = 4};
        kn_graph *g = NULL;
        KN_ASSERT_OK(kn_gpt_graph(&c, 2, 64, true, &g));
        kn_program_opts o = {.device = KN_CPU, .passes = "all", .mode = KN_PROGRAM_COMPILED, .keep_loss = true};
        kn_program_stats st;
        double err = INFINITY;
        KN_ASSERT_OK(kn_program_compare(g, &o, 5, &err, &st));
        cr_assert_leq(err, 1e-5, "vocab %lld: compiled against the interpreter: %.3g", (long long)vocab[k], err);
        double logits = 2.0 * 64 * (double)vocab[k] * 4;
        fprintf(stderr, "gpt step, vocab %lld, loss kept: arena %.0f bytes, %.0f without in place (logits %.0f)\n",
                (long long)vocab[k], st.mem_planned, st.mem_planned_separate, logits);
        cr_assert_leq(st.mem_planned, st.mem_planned_separate);
        cr_assert_eq(st.ce_fused, 1, "vocab %lld: the loss and its backward as one call", (long long)vocab[k]);
        if (k == 0) cr_assert_geq(st.mem_planned_separate - st.mem_planned, logits / 3);
        kn_graph_free(g);
    }
}
