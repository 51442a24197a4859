/* test_rules.c — lab 02 public tests: each backward rule of the lab, on one small case
 * with a hand-computed answer and one finite-difference check (check.h) in fp64. */
#include "check.h"

static kn_val f_mul(kn_builder *b, const kn_val *x, void *c) { (void)c; return kn_mul(b, x[0], x[1]); }
static kn_val f_div(kn_builder *b, const kn_val *x, void *c) { (void)c; return kn_div(b, x[0], x[1]); }
static kn_val f_exp(kn_builder *b, const kn_val *x, void *c) { (void)c; return kn_exp(b, x[0]); }
static kn_val f_log(kn_builder *b, const kn_val *x, void *c) { (void)c; return kn_ln(b, x[0]); }
static kn_val f_tanh(kn_builder *b, const kn_val *x, void *c) { (void)c; return kn_tanh(b, x[0]); }
static kn_val f_sum1(kn_builder *b, const kn_val *x, void *c) { (void)c; int ax[] = {1}; return kn_sum(b, x[0], 1, ax, false); }
static kn_val f_mean02(kn_builder *b, const kn_val *x, void *c) { (void)c; int ax[] = {0, 2}; return kn_mean(b, x[0], 2, ax, true); }
static kn_val f_permute(kn_builder *b, const kn_val *x, void *c) { (void)c; int p[] = {2, 0, 1}; return kn_permute(b, x[0], 3, p); }

/* loss = sum(x * y) with x [2,3] and y [3] broadcast over the rows: d/dx = y on every
 * row, d/dy = the column sums of x. */
KN_TEST(lab02_rules, mul_with_a_broadcast_operand) {
    int64_t s23[] = {2, 3}, s3[] = {3};
    double xv[] = {1, 2, 3, 4, 5, 6}, yv[] = {10, 20, 30};
    kn_tensor *xt = l2_make(KN_DT_F64, 2, s23, xv), *yt = l2_make(KN_DT_F64, 1, s3, yv);
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
    kn_val x[2] = {kn_input(b, "x", xt), kn_input(b, "y", yt)}, g[2];
    kn_val loss = kn_sum(b, kn_mul(b, x[0], x[1]), 0, NULL, false);
    KN_ASSERT_OK(kn_backward(b, loss, 2, x, g));
    const kn_tensor *gx = l2_tensor(b, g[0]), *gy = l2_tensor(b, g[1]);
    cr_assert(gx && gy && gx->ndim == 2 && gy->ndim == 1 && gy->shape[0] == 3, "gradients have the operands' shapes");
    for (int i = 0; i < 6; i++) KN_ASSERT_CLOSE(l2_at(gx, i), yv[i % 3], 0, 0);
    double want_y[] = {5, 7, 9};
    for (int i = 0; i < 3; i++) KN_ASSERT_CLOSE(l2_at(gy, i), want_y[i], 0, 0);
    kn_builder_free(b);
    kn_tensor *xs[2] = {xt, yt};
    l2_gradcheck("x[2,3] * y[3]", f_mul, NULL, 2, xs, 1);
    kn_tensor_free(xt);
    kn_tensor_free(yt);
}

KN_TEST(lab02_rules, div_both_operands) {
    int64_t s23[] = {2, 3}, s21[] = {2, 1};
    kn_tensor *xs[2] = {l2_rand(KN_DT_F64, 2, s23, -2, 2, 2), l2_rand(KN_DT_F64, 2, s21, 0.5, 2, 3)};
    l2_gradcheck("x[2,3] / y[2,1]", f_div, NULL, 2, xs, 4);
    kn_tensor_free(xs[0]);
    kn_tensor_free(xs[1]);
}

/* d exp(x)/dx = exp(x); d ln(x)/dx = 1/x; d tanh(x)/dx = 1 - tanh(x)^2. */
KN_TEST(lab02_rules, exp_log_tanh) {
    int64_t s[] = {2, 3};
    kn_tensor *x = l2_rand(KN_DT_F64, 2, s, -1.5, 1.5, 5), *p = l2_rand(KN_DT_F64, 2, s, 0.3, 3, 6);
    l2_gradcheck("exp(x)", f_exp, NULL, 1, &x, 7);
    l2_gradcheck("tanh(x)", f_tanh, NULL, 1, &x, 8);
    l2_gradcheck("ln(x)", f_log, NULL, 1, &p, 9);
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
    kn_val xv = kn_input(b, "x", x), g;
    kn_val loss = kn_sum(b, kn_tanh(b, xv), 0, NULL, false);
    KN_ASSERT_OK(kn_backward(b, loss, 1, &xv, &g));
    for (int i = 0; i < 6; i++) {
        double t = tanh(l2_at(x, i));
        KN_ASSERT_CLOSE(l2_at(l2_tensor(b, g), i), 1 - t * t, 1e-15, 1e-12);
    }
    kn_builder_free(b);
    kn_tensor_free(x);
    kn_tensor_free(p);
}

/* The gradient of a sum is dy copied to every summed position; of a mean, divided by the
 * number of elements each mean averages. */
KN_TEST(lab02_rules, sum_and_mean_over_axes) {
    int64_t s234[] = {2, 3, 4};
    kn_tensor *x = l2_rand(KN_DT_F64, 3, s234, -1, 1, 10);
    l2_gradcheck("sum over axis 1", f_sum1, NULL, 1, &x, 11);
    l2_gradcheck("mean over axes {0,2}, keepdim", f_mean02, NULL, 1, &x, 12);
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
    kn_val xv = kn_input(b, "x", x), g;
    kn_val loss = kn_mean(b, xv, 0, NULL, false); /* d mean / d x_j = 1/24 */
    KN_ASSERT_OK(kn_backward(b, loss, 1, &xv, &g));
    for (int i = 0; i < 24; i++) KN_ASSERT_CLOSE(l2_at(l2_tensor(b, g), i), 1.0 / 24, 1e-15, 0);
    kn_builder_free(b);
    kn_tensor_free(x);
}

/* Every matmul the GPT (core/nn/gpt.c) runs, and the other transpose flags: ta/tb
 * transpose the last two axes of a/b; leading axes are batch axes, broadcast against each
 * other (b's are summed back with kn_sum_to). No shape is square, so a gradient that is
 * transposed or of the wrong operand cannot pass for the right one. */
typedef struct mm_case {
    const char *what;
    int na, nb;
    int64_t a[4], b[4];
    bool ta, tb;
} mm_case;
static kn_val f_matmul_t(kn_builder *b, const kn_val *x, void *c) {
    const mm_case *m = c;
    return kn_matmul_t(b, x[0], x[1], m->ta, m->tb);
}
static const mm_case mm_cases[] = {
    {"[3,4] @ [4,5] (linear layers: ta=0 tb=0)", 2, 2, {3, 4}, {4, 5}, false, false},
    {"[3,4] @ [5,4]^T (logits tied to the embedding: tb=1)", 2, 2, {3, 4}, {5, 4}, false, true},
    {"[4,3]^T @ [4,5] (ta=1)", 2, 2, {4, 3}, {4, 5}, true, false},
    {"[4,3]^T @ [5,4]^T (ta=1 tb=1)", 2, 2, {4, 3}, {5, 4}, true, true},
    {"[2,2,3,4] @ [2,2,5,4]^T (attention scores q k^T: batched, tb=1)", 4, 4, {2, 2, 3, 4}, {2, 2, 5, 4}, false, true},
    {"[2,2,3,5] @ [2,2,5,4] (attention output att v: batched)", 4, 4, {2, 2, 3, 5}, {2, 2, 5, 4}, false, false},
    {"[2,3,4] @ [4,5] (b shared by the batch)", 3, 2, {2, 3, 4}, {4, 5}, false, false},
    {"[2,3,4] @ [5,4]^T (b shared by the batch, tb=1)", 3, 2, {2, 3, 4}, {5, 4}, false, true},
    {"[2,1,3,4] @ [2,4,5] (batch axes broadcast: [2,1] against [2])", 4, 3, {2, 1, 3, 4}, {2, 4, 5}, false, false},
};

/* (The name is the rubric's: every case above, plain and batched.) */
KN_TEST(lab02_rules, matmul_plain_and_batched) {
    for (size_t i = 0; i < sizeof mm_cases / sizeof mm_cases[0]; i++) {
        const mm_case *m = &mm_cases[i];
        kn_tensor *xs[2] = {l2_rand(KN_DT_F64, m->na, m->a, -1, 1, 13 + 2 * i),
                            l2_rand(KN_DT_F64, m->nb, m->b, -1, 1, 14 + 2 * i)};
        l2_gradcheck(m->what, f_matmul_t, (void *)m, 2, xs, 15 + i);
        kn_tensor_free(xs[0]);
        kn_tensor_free(xs[1]);
    }
}

static kn_val f_permute_heads(kn_builder *b, const kn_val *x, void *c) {
    (void)c;
    int p[] = {0, 2, 1, 3};
    return kn_permute(b, x[0], 4, p);
}

KN_TEST(lab02_rules, permute_inverts) {
    int64_t s[] = {2, 3, 4}, s4[] = {2, 3, 2, 4};
    kn_tensor *x = l2_rand(KN_DT_F64, 3, s, -1, 1, 18), *x4 = l2_rand(KN_DT_F64, 4, s4, -1, 1, 20);
    l2_gradcheck("permute {2,0,1}", f_permute, NULL, 1, &x, 19);
    l2_gradcheck("permute {0,2,1,3} (attention's heads)", f_permute_heads, NULL, 1, &x4, 21);
    kn_tensor_free(x);
    kn_tensor_free(x4);
}
