/* test_ir_causal_softmax.c — the fused attention softmax (kn_causal_softmax) on the CPU.
 *
 * causal_softmax(x, s) is defined as softmax(causal_fill(x * s, -inf), -1), and its CPU
 * kernels do the same arithmetic in the same order minus the masked columns, so the fused
 * op and the three-op composition must agree bit for bit, forward and backward, on random
 * shapes (square and not, 2-D to 4-D, rows fully masked when Tq > Tk, -inf logits, and
 * sizes large enough to split over threads). Then: the exact values of a tiny case worked
 * out in double, the builder's errors and the printed form (the GPT using the fused op:
 * test_nn_graph_text.c).
 * (Finite differences: tests/core/test_autograd_ops.c; the CUDA kernels: test_cuda_ops.c.) */
#include "kiln/nn.h"
#include "test_ir_util.h"

/* y (and dL/dx for L = sum(y * r)) of the fused op or of the composition, eagerly. */
static void run(const kn_tensor *x, const kn_tensor *r, double s, bool fused, kn_tensor **y, kn_tensor **dx) {
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
    kn_val xv = kn_param(b, "x", x), yv;
    if (fused) yv = kn_causal_softmax(b, xv, s);
    else yv = kn_softmax(b, kn_causal_fill(b, kn_mul_scalar(b, xv, s), -INFINITY), -1);
    kn_val loss = kn_sum(b, kn_mul(b, yv, kn_input(b, "r", r)), 0, NULL, false), g;
    KN_ASSERT_OK(kn_backward(b, loss, 1, &xv, &g));
    cr_assert(kn_builder_status(b) == KN_OK, "%s", kn_builder_error(b));
    KN_ASSERT_OK(kn_tensor_clone(y, kn_val_tensor(b, yv)));
    KN_ASSERT_OK(kn_tensor_clone(dx, kn_val_tensor(b, g)));
    kn_builder_free(b);
}

KN_TEST(ir_causal_softmax, equals_the_three_op_composition_bit_for_bit) {
    kn_rng rng = kn_rng_new(7);
    for (int trial = 0; trial < 40; trial++) {
        int nd = 2 + trial % 3;
        int64_t sh[4];
        for (int i = 0; i < nd; i++) sh[i] = 1 + (int64_t)(kn_rng_u32(&rng) % 9);
        if (trial == 38) { nd = 3; sh[0] = 4; sh[1] = 131; sh[2] = 131; } /* > 2^16 elements: threaded */
        if (trial == 39) { nd = 2; sh[0] = 300; sh[1] = 260; }           /* Tq > Tk, threaded */
        kn_dtype dt = trial % 2 ? KN_DT_F64 : KN_DT_F32;
        double s = 0.05 + 2.0 * (kn_rng_u32(&rng) % 1000) / 1000.0;
        kn_tensor *x = irt_randn(dt, nd, sh, 100u + (uint64_t)trial), *r = irt_randn(dt, nd, sh, 500u + (uint64_t)trial);
        if (trial % 5 == 2) kn_dtype_store(dt, kn_tensor_data(x), 0, -INFINITY); /* a -inf logit */
        kn_tensor *y1, *g1, *y2, *g2;
        run(x, r, s, true, &y1, &g1);
        run(x, r, s, false, &y2, &g2);
        char tb[96];
        const kn_type ty = {dt, nd, {sh[0], sh[1], nd > 2 ? sh[2] : 0, nd > 3 ? sh[3] : 0}};
        cr_assert(irt_same_bits(y1, y2), "trial %d %s scale %g: forward differs from the composition", trial,
                  kn_type_str(&ty, tb, sizeof tb), s);
        cr_assert(irt_same_bits(g1, g2), "trial %d %s scale %g: gradient differs from the composition's", trial,
                  kn_type_str(&ty, tb, sizeof tb), s);
        kn_tensor_free(y1); kn_tensor_free(g1); kn_tensor_free(y2); kn_tensor_free(g2);
        kn_tensor_free(x); kn_tensor_free(r);
    }
}

/* Tq = 3 queries, Tk = 2 keys: query i sees keys j <= i - 1, so row 0 sees none. */
KN_TEST(ir_causal_softmax, exact_values_of_a_small_case) {
    const double xs[6] = {5.0, -7.0, 1.0, 9.0, 0.5, -1.5}, s = 0.5;
    const int64_t sh[2] = {3, 2};
    kn_tensor *x = NULL;
    KN_ASSERT_OK(kn_tensor_from_f64(&x, KN_DT_F64, 2, sh, xs));
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
    const double *y = kn_tensor_data(kn_val_tensor(b, kn_causal_softmax(b, kn_input(b, "x", x), s)));
    cr_assert(kn_builder_status(b) == KN_OK, "%s", kn_builder_error(b));
    double e0 = exp(0.25 - 0.25), e1 = exp(-0.75 - 0.25);
    const double want[6] = {0, 0, 1, 0, e0 / (e0 + e1), e1 / (e0 + e1)};
    for (int i = 0; i < 6; i++) KN_ASSERT_CLOSE(y[i], want[i], 1e-15, 1e-15);
    cr_assert(y[0] == 0 && !signbit(y[0]) && y[1] == 0 && y[3] == 0, "masked entries must be exactly +0");
    kn_builder_free(b);
    kn_tensor_free(x);
}

static void expect_error(kn_dtype dt, int nd, const int64_t *sh, double scale, kn_status want, const char *msg) {
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
    kn_val x = kn_input_typed(b, "x", dt, nd, sh);
    cr_assert(!kn_val_ok(kn_causal_softmax(b, x, scale)), "accepted: %s", msg);
    cr_assert_eq(kn_builder_status(b), want, "status for %s", msg);
    cr_assert_str_eq(kn_builder_error(b), msg);
    kn_builder_free(b);
}

KN_TEST(ir_causal_softmax, builder_rejects_bad_input) {
    const int64_t s2[2] = {3, 4}, s1[1] = {4};
    expect_error(KN_DT_F32, 1, s1, 1.0, KN_ERR_SHAPE, "kn_causal_softmax: operand f32[4] has fewer than 2 axes");
    expect_error(KN_DT_F32, 0, s1, 1.0, KN_ERR_SHAPE, "kn_causal_softmax: operand f32[] has fewer than 2 axes");
    expect_error(KN_DT_I64, 2, s2, 1.0, KN_ERR_DTYPE, "kn_causal_softmax: operand i64[3,4] is not of a float dtype");
    expect_error(KN_DT_F32, 2, s2, 0.0, KN_ERR_ARG, "kn_causal_softmax: scale 0 must be positive and finite");
    expect_error(KN_DT_F32, 2, s2, -0.5, KN_ERR_ARG, "kn_causal_softmax: scale -0.5 must be positive and finite");
    expect_error(KN_DT_F64, 2, s2, INFINITY, KN_ERR_ARG, "kn_causal_softmax: scale inf must be positive and finite");
    expect_error(KN_DT_F64, 2, s2, NAN, KN_ERR_ARG, "kn_causal_softmax: scale nan must be positive and finite");
    /* the backward op: dy and y of one type */
    kn_builder *b = NULL;
    const int64_t s3[2] = {3, 5};
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
    kn_val in[2] = {kn_input_typed(b, "dy", KN_DT_F32, 2, s2), kn_input_typed(b, "y", KN_DT_F32, 2, s3)};
    kn_attrs a = kn_attrs_default();
    a.scale = 0.25;
    cr_assert(!kn_val_ok(kn_builder_op(b, "bwd", KN_OP_CAUSAL_SOFTMAX_BWD, 2, in, &a, NULL)));
    cr_assert_str_eq(kn_builder_error(b), "bwd: operand types f32[3,4] and f32[3,5] must be equal");
    kn_builder_free(b);
    /* other ops do not take a scale */
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
    kn_val x = kn_input_typed(b, "x", KN_DT_F32, 2, s2);
    cr_assert(!kn_val_ok(kn_builder_op(b, "mine", KN_OP_SOFTMAX, 1, &x, &a, NULL)));
    cr_assert_str_eq(kn_builder_error(b), "mine: attribute 'scale' is not one softmax takes");
    kn_builder_free(b);
}

KN_TEST(ir_causal_softmax, prints_its_scale_and_parses_back) {
    kn_builder *b = NULL;
    const int64_t sh[3] = {2, 3, 4};
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
    kn_val x = kn_param_typed(b, "x", KN_DT_F32, 3, sh), g;
    kn_val loss = kn_sum(b, kn_causal_softmax(b, x, 0.125), 0, NULL, false);
    KN_ASSERT_OK(kn_backward(b, loss, 1, &x, &g));
    kn_builder_output(b, g);
    kn_graph *gr = NULL, *back = NULL;
    KN_ASSERT_OK(kn_builder_finish(b, &gr));
    char *t1 = NULL, *t2 = NULL;
    KN_ASSERT_OK(kn_graph_to_string(gr, &t1));
    cr_assert(strstr(t1, "%1 = causal_softmax %0 {scale=0.125} : f32[2,3,4]\n"), "printed:\n%s", t1);
    cr_assert(strstr(t1, "= causal_softmax_bwd %"), "printed:\n%s", t1);
    cr_assert(strstr(t1, ", %1 {scale=0.125} : f32[2,3,4]\n"), "printed:\n%s", t1);
    KN_ASSERT_OK(kn_graph_parse(t1, strlen(t1), &back));
    KN_ASSERT_OK(kn_graph_verify(back));
    KN_ASSERT_OK(kn_graph_to_string(back, &t2));
    cr_assert_str_eq(t2, t1);
    const char *bad = "%0 = input {name=\"x\"} : f32[2,2]\n%1 = causal_softmax %0 : f32[2,2]\n";
    kn_graph *bg = NULL;
    KN_ASSERT_ERR(kn_graph_parse(bad, strlen(bad), &bg), KN_ERR_FORMAT);
    cr_assert(strstr(kn_last_error(), "causal_softmax needs attribute 'scale'"), "%s", kn_last_error());
    kn_free(t1);
    kn_free(t2);
    kn_graph_free(gr);
    kn_graph_free(back);
    kn_builder_free(b);
}
