/* test_autograd_ops.c — finite-difference checks of every backward rule, in fp64.
 *
 * Each case builds one op (or a tiny composition that isolates it) on operands of random
 * small shapes, forms loss = sum(op(x) * r) with a fixed random r, and compares the
 * gradients kn_backward gives (eager mode) with central differences of the loss,
 * element by element. The same gradients must come out bitwise from the joint graph of
 * kn_autograd run by the interpreter. A last test checks that every differentiable op of
 * the table has a case here. */
#include "test_ir_util.h"
#include "kiln/scalar.h"

enum { K_F, K_POS, K_IDX0, K_IDXL, K_BOOL, K_CONST }; /* how an operand is drawn */

typedef kn_val (*gc_fn)(kn_builder *b, const kn_val *x, const int64_t *d);
typedef struct gc_case {
    kn_op op;
    const char *name;
    int nx;
    const char *shape[3]; /* letters a-d: random dims; digits: literal sizes */
    int kind[3];
    gc_fn fn;
    double h, atol, rtol; /* 0: defaults 1e-6, 1e-7, 1e-6 */
} gc_case;

static void shape_of(const char *tpl, const int64_t *d, int *nd, int64_t *shape) {
    *nd = 0;
    for (const char *c = tpl; *c; c++) shape[(*nd)++] = (*c >= 'a' && *c <= 'd') ? d[*c - 'a'] : *c - '0';
}

/* The operands of a case, drawn for dims d. */
static void make_inputs(const gc_case *c, const int64_t *d, uint64_t seed, kn_tensor **X) {
    for (int i = 0; i < c->nx; i++) {
        int nd;
        int64_t sh[KN_MAX_DIMS];
        shape_of(c->shape[i], d, &nd, sh);
        switch (c->kind[i]) {
        case K_IDX0: X[i] = irt_randint(nd, sh, X[0]->shape[0], seed + (uint64_t)i); break;
        case K_IDXL: X[i] = irt_randint(nd, sh, X[0]->shape[X[0]->ndim - 1], seed + (uint64_t)i); break;
        case K_BOOL: {
            kn_tensor *t = irt_randint(nd, sh, 2, seed + (uint64_t)i);
            KN_ASSERT_OK(kn_tensor_cast(&X[i], t, KN_DT_BOOL));
            kn_tensor_free(t);
            break;
        }
        default:
            X[i] = irt_randn(KN_DT_F64, nd, sh, seed + (uint64_t)i);
            if (c->kind[i] == K_POS)
                for (int64_t j = 0; j < kn_tensor_numel(X[i]); j++) {
                    double *p = kn_tensor_data(X[i]);
                    p[j] = 0.5 + fabs(p[j]);
                }
        }
    }
}

static bool diff(int kind) { return kind == K_F || kind == K_POS; }
static const char *const xnames[3] = {"x0", "x1", "x2"};

/* Build loss = sum(fn(x) * r) in b; returns the loss; xv receives the operands. */
static kn_val build_loss(kn_builder *b, const gc_case *c, kn_tensor **X, const kn_tensor *R, const int64_t *d, kn_val *xv) {
    for (int i = 0; i < c->nx; i++) xv[i] = diff(c->kind[i]) ? kn_param(b, xnames[i], X[i]) : kn_input(b, xnames[i], X[i]);
    kn_val y = c->fn(b, xv, d);
    if (!R) return y;
    return kn_sum(b, kn_mul(b, y, kn_input(b, "r", R)), 0, NULL, false);
}

static double eval_loss(const gc_case *c, kn_tensor **X, const kn_tensor *R, const int64_t *d) {
    kn_builder *b = NULL;
    kn_val xv[3];
    double v = NAN;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
    kn_val l = build_loss(b, c, X, R, d, xv);
    KN_ASSERT_OK(kn_builder_status(b));
    KN_ASSERT_OK(kn_tensor_item(kn_val_tensor(b, l), &v));
    kn_builder_free(b);
    return v;
}

static void run_case(const gc_case *c, int trial) {
    kn_rng rng = kn_rng_new(1000u + (uint64_t)trial);
    int64_t d[4];
    for (int i = 0; i < 4; i++) d[i] = 2 + (int64_t)(kn_rng_u32(&rng) % 3); /* 2..4 */
    kn_tensor *X[3] = {0};
    make_inputs(c, d, 77u * (uint64_t)(trial + 1), X);

    /* the output's type, to draw r */
    kn_builder *b = NULL;
    kn_val xv[3];
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
    kn_val y = build_loss(b, c, X, NULL, d, xv);
    cr_assert(kn_builder_status(b) == KN_OK, "%s: %s", c->name, kn_builder_error(b));
    kn_type yt = *kn_val_type(b, y);
    kn_builder_free(b);
    kn_tensor *R = irt_randn(KN_DT_F64, yt.ndim, yt.shape, 4242u + (uint64_t)trial);

    /* analytic, eager */
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
    kn_val loss = build_loss(b, c, X, R, d, xv), wrt[3], grads[3];
    int nw = 0, which[3];
    for (int i = 0; i < c->nx; i++) if (diff(c->kind[i])) { which[nw] = i; wrt[nw++] = xv[i]; }
    cr_assert(kn_backward(b, loss, nw, wrt, grads) == KN_OK, "%s: %s", c->name, kn_builder_error(b));

    /* the joint graph gives the same bits */
    kn_builder *gb = NULL;
    kn_val gxv[3], gg[3];
    KN_ASSERT_OK(kn_builder_new(&gb, KN_MODE_GRAPH));
    kn_val gl = build_loss(gb, c, X, R, d, gxv);
    kn_builder_output(gb, gl);
    kn_graph *fwd = NULL, *joint = NULL;
    KN_ASSERT_OK(kn_builder_finish(gb, &fwd));
    kn_builder_free(gb);
    KN_ASSERT_OK(kn_autograd(fwd, gl, nw, wrt, &joint, gg));
    kn_interp *it = NULL;
    KN_ASSERT_OK(kn_interp_new(&it, joint));
    for (int i = 0; i < c->nx; i++) KN_ASSERT_OK(kn_interp_bind(it, xnames[i], X[i]));
    KN_ASSERT_OK(kn_interp_bind(it, "r", R));
    KN_ASSERT_OK(kn_interp_run(it));
    for (int w = 0; w < nw; w++)
        cr_assert(irt_same_bits(kn_val_tensor(b, grads[w]), kn_interp_output(it, 1 + w)),
                  "%s: eager and joint-graph gradients of x%d differ", c->name, which[w]);
    kn_interp_free(it);
    kn_graph_free(joint);
    kn_graph_free(fwd);

    /* numeric */
    double h = c->h > 0 ? c->h : 1e-6, atol = c->atol > 0 ? c->atol : 1e-7, rtol = c->rtol > 0 ? c->rtol : 1e-6;
    for (int w = 0; w < nw; w++) {
        kn_tensor *x = X[which[w]];
        const kn_tensor *g = kn_val_tensor(b, grads[w]);
        cr_assert(g && g->dtype == KN_DT_F64 && kn_tensor_numel(g) == kn_tensor_numel(x), "%s: gradient type", c->name);
        double *p = kn_tensor_data(x);
        for (int64_t j = 0; j < kn_tensor_numel(x); j++) {
            double keep = p[j];
            p[j] = keep + h;
            double lp = eval_loss(c, X, R, d);
            p[j] = keep - h;
            double lm = eval_loss(c, X, R, d);
            p[j] = keep;
            double num = (lp - lm) / (2 * h), ana = ((const double *)kn_tensor_data(g))[j];
            cr_assert(fabs(num - ana) <= atol + rtol * fabs(num) + 1e-6 * fabs(num) * (h > 1e-6),
                      "%s (trial %d): d loss / d x%d[%lld]: backward %.12g, finite differences %.12g",
                      c->name, trial, which[w], (long long)j, ana, num);
        }
    }
    kn_builder_free(b);
    kn_tensor_free(R);
    for (int i = 0; i < c->nx; i++) kn_tensor_free(X[i]);
}

/* ---------------------------------------------------------------- the cases */

static kn_val f_add(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; return kn_add(b, x[0], x[1]); }
static kn_val f_sub(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; return kn_sub(b, x[0], x[1]); }
static kn_val f_mul(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; return kn_mul(b, x[0], x[1]); }
static kn_val f_div(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; return kn_div(b, x[0], x[1]); }
static kn_val f_where(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; return kn_where(b, x[0], x[1], x[2]); }
static kn_val f_neg(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; return kn_neg(b, x[0]); }
static kn_val f_exp(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; return kn_exp(b, x[0]); }
static kn_val f_log(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; return kn_ln(b, x[0]); }
static kn_val f_sqrt(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; return kn_sqrt(b, x[0]); }
static kn_val f_rsqrt(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; return kn_rsqrt(b, x[0]); }
static kn_val f_tanh(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; return kn_tanh(b, x[0]); }
static kn_val f_gelu(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; return kn_gelu(b, x[0]); }
static kn_val f_relu(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; return kn_relu(b, x[0]); }
static kn_val f_cast(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; return kn_cast(b, kn_cast(b, x[0], KN_DT_F32), KN_DT_F64); }
static kn_val f_dropout(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; return kn_dropout(b, x[0], 0.4, 5, 3); }
static kn_val f_causal(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; return kn_causal_fill(b, x[0], -2.0); }
static kn_val f_sum1(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; int ax[1] = {1}; return kn_sum(b, x[0], 1, ax, false); }
static kn_val f_sum_all(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; return kn_sum(b, x[0], 0, NULL, false); }
static kn_val f_sum02(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; int ax[2] = {0, 2}; return kn_sum(b, x[0], 2, ax, true); }
static kn_val f_mean(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; int ax[1] = {-1}; return kn_mean(b, x[0], 1, ax, true); }
static kn_val f_max(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; int ax[1] = {1}; return kn_max(b, x[0], 1, ax, false); }
static kn_val f_mm(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; return kn_matmul(b, x[0], x[1]); }
static kn_val f_mm_ta(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; return kn_matmul_t(b, x[0], x[1], true, false); }
static kn_val f_mm_tb(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; return kn_matmul_t(b, x[0], x[1], false, true); }
static kn_val f_mm_tt(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; return kn_matmul_t(b, x[0], x[1], true, true); }
static kn_val f_reshape(kn_builder *b, const kn_val *x, const int64_t *d) { int64_t s[2] = {-1, d[2]}; return kn_reshape(b, x[0], 2, s); }
static kn_val f_permute(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; int p[3] = {2, 0, 1}; return kn_permute(b, x[0], 3, p); }
static kn_val f_bcast(kn_builder *b, const kn_val *x, const int64_t *d) { int64_t s[3] = {d[2], d[0], d[1]}; return kn_broadcast_to(b, x[0], 3, s); }
static kn_val f_slice(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; return kn_slice(b, x[0], 1, 1, 100, 2); }
static kn_val f_slice_neg(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; return kn_slice(b, x[0], 0, -2, -1, 1); }
static kn_val f_slice_grad(kn_builder *b, const kn_val *x, const int64_t *d) {
    kn_attrs a = kn_attrs_default();
    a.axis = 1; a.start = 1; a.stop = 2 * d[1] + 1; a.step = 2;
    a.nshape = 2; a.shape[0] = d[0]; a.shape[1] = 2 * d[1] + 1;
    return kn_builder_op(b, "slice_grad", KN_OP_SLICE_GRAD, 1, x, &a, NULL);
}
static kn_val f_concat(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; return kn_concat(b, x[0], x[1], -1); }
static kn_val f_embed(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; return kn_embedding(b, x[0], x[1]); }
static kn_val f_softmax(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; return kn_softmax(b, x[0], -1); }
static kn_val f_softmax0(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; return kn_softmax(b, x[0], 0); }
static kn_val f_lsm(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; return kn_log_softmax(b, x[0], -1); }
static kn_val f_lsm1(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; return kn_log_softmax(b, x[0], 1); }
static kn_val f_csm(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; return kn_causal_softmax(b, x[0], 0.7); }
static kn_val f_flash(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; return kn_flash_attn(b, x[0], x[1], x[2], 0.6); }
static kn_val f_ln(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; return kn_layernorm(b, x[0], x[1], x[2], 1e-5); }
static kn_val f_ce(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; return kn_cross_entropy(b, x[0], x[1]); }
/* the same value used twice, through two paths */
static kn_val f_reuse(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; return kn_mul(b, kn_tanh(b, x[0]), kn_exp(b, x[0])); }

static const gc_case cases[] = {
    {KN_OP_ADD, "add, y broadcast on the left", 2, {"abc", "bc"}, {K_F, K_F}, f_add, 0, 0, 0},
    {KN_OP_ADD, "add, both broadcast", 2, {"a1c", "ab1"}, {K_F, K_F}, f_add, 0, 0, 0},
    {KN_OP_SUB, "sub", 2, {"ab", "a1"}, {K_F, K_F}, f_sub, 0, 0, 0},
    {KN_OP_MUL, "mul", 2, {"abc", "1bc"}, {K_F, K_F}, f_mul, 0, 0, 0},
    {KN_OP_MUL, "mul by a scalar", 2, {"ab", ""}, {K_F, K_F}, f_mul, 0, 0, 0},
    {KN_OP_DIV, "div", 2, {"ab", "b"}, {K_F, K_POS}, f_div, 0, 0, 0},
    {KN_OP_WHERE, "where", 3, {"ab", "ab", "b"}, {K_BOOL, K_F, K_F}, f_where, 0, 0, 0},
    {KN_OP_NEG, "neg", 1, {"ab"}, {K_F}, f_neg, 0, 0, 0},
    {KN_OP_EXP, "exp", 1, {"ab"}, {K_F}, f_exp, 0, 0, 0},
    {KN_OP_LOG, "log", 1, {"ab"}, {K_POS}, f_log, 0, 0, 0},
    {KN_OP_SQRT, "sqrt", 1, {"ab"}, {K_POS}, f_sqrt, 0, 0, 0},
    {KN_OP_RSQRT, "rsqrt", 1, {"ab"}, {K_POS}, f_rsqrt, 0, 0, 0},
    {KN_OP_TANH, "tanh", 1, {"abc"}, {K_F}, f_tanh, 0, 0, 0},
    {KN_OP_GELU, "gelu", 1, {"abc"}, {K_F}, f_gelu, 0, 0, 0},
    {KN_OP_RELU, "relu", 1, {"abc"}, {K_F}, f_relu, 0, 0, 0},
    {KN_OP_CAST, "cast f64 -> f32 -> f64", 1, {"ab"}, {K_F}, f_cast, 1e-2, 1e-4, 1e-3},
    {KN_OP_DROPOUT, "dropout", 1, {"abc"}, {K_F}, f_dropout, 0, 0, 0},
    {KN_OP_CAUSAL_FILL, "causal_fill", 1, {"abc"}, {K_F}, f_causal, 0, 0, 0},
    {KN_OP_SUM, "sum over axis 1", 1, {"abc"}, {K_F}, f_sum1, 0, 0, 0},
    {KN_OP_SUM, "sum over everything", 1, {"ab"}, {K_F}, f_sum_all, 0, 0, 0},
    {KN_OP_SUM, "sum over axes 0 and 2, keepdim", 1, {"abc"}, {K_F}, f_sum02, 0, 0, 0},
    {KN_OP_MEAN, "mean over the last axis, keepdim", 1, {"abc"}, {K_F}, f_mean, 0, 0, 0},
    {KN_OP_MAX, "max over axis 1", 1, {"abc"}, {K_F}, f_max, 0, 0, 0},
    {KN_OP_MATMUL, "matmul 2-D", 2, {"ab", "bc"}, {K_F, K_F}, f_mm, 0, 0, 0},
    {KN_OP_MATMUL, "matmul batched", 2, {"dab", "dbc"}, {K_F, K_F}, f_mm, 0, 0, 0},
    {KN_OP_MATMUL, "matmul batched @ 2-D", 2, {"dab", "bc"}, {K_F, K_F}, f_mm, 0, 0, 0},
    {KN_OP_MATMUL, "matmul, a's batch broadcast", 2, {"1ab", "dbc"}, {K_F, K_F}, f_mm, 0, 0, 0},
    {KN_OP_MATMUL, "matmul a^T b", 2, {"dba", "dbc"}, {K_F, K_F}, f_mm_ta, 0, 0, 0},
    {KN_OP_MATMUL, "matmul a b^T, b 2-D", 2, {"dab", "cb"}, {K_F, K_F}, f_mm_tb, 0, 0, 0},
    {KN_OP_MATMUL, "matmul a^T b^T", 2, {"ba", "cb"}, {K_F, K_F}, f_mm_tt, 0, 0, 0},
    {KN_OP_RESHAPE, "reshape", 1, {"abc"}, {K_F}, f_reshape, 0, 0, 0},
    {KN_OP_PERMUTE, "permute", 1, {"abc"}, {K_F}, f_permute, 0, 0, 0},
    {KN_OP_BROADCAST_TO, "broadcast_to", 1, {"1b"}, {K_F}, f_bcast, 0, 0, 0},
    {KN_OP_SLICE, "slice with a step", 1, {"ab"}, {K_F}, f_slice, 0, 0, 0},
    {KN_OP_SLICE, "slice from the end", 1, {"ab"}, {K_F}, f_slice_neg, 0, 0, 0},
    {KN_OP_SLICE_GRAD, "slice_grad", 1, {"ab"}, {K_F}, f_slice_grad, 0, 0, 0},
    {KN_OP_CONCAT, "concat along the last axis", 2, {"dab", "dac"}, {K_F, K_F}, f_concat, 0, 0, 0},
    {KN_OP_EMBEDDING, "embedding", 2, {"ab", "cd"}, {K_F, K_IDX0}, f_embed, 0, 0, 0},
    {KN_OP_SOFTMAX, "softmax, last axis", 1, {"abc"}, {K_F}, f_softmax, 0, 0, 0},
    {KN_OP_SOFTMAX, "softmax, axis 0", 1, {"abc"}, {K_F}, f_softmax0, 0, 0, 0},
    {KN_OP_LOG_SOFTMAX, "log_softmax, last axis", 1, {"abc"}, {K_F}, f_lsm, 0, 0, 0},
    {KN_OP_LOG_SOFTMAX, "log_softmax, axis 1", 1, {"abc"}, {K_F}, f_lsm1, 0, 0, 0},
    {KN_OP_CAUSAL_SOFTMAX, "causal_softmax, Tq 3 > Tk 2 (row 0 fully masked)", 1, {"a32"}, {K_F}, f_csm, 0, 0, 0},
    {KN_OP_CAUSAL_SOFTMAX, "causal_softmax, 2-D", 1, {"bc"}, {K_F}, f_csm, 0, 0, 0},
    {KN_OP_FLASH_ATTN, "flash_attn (O and the logsumexp both weighted)", 3, {"dab", "dab", "dab"}, {K_F, K_F, K_F}, f_flash, 0, 0, 0},
    {KN_OP_LAYERNORM, "layernorm", 3, {"abc", "c", "c"}, {K_F, K_F, K_F}, f_ln, 0, 0, 0},
    {KN_OP_LAYERNORM, "layernorm of a vector", 3, {"c", "c", "c"}, {K_F, K_F, K_F}, f_ln, 0, 0, 0},
    {KN_OP_CROSS_ENTROPY, "cross_entropy", 2, {"abc", "ab"}, {K_F, K_IDXL}, f_ce, 0, 0, 0},
    {KN_OP_TANH, "a value used twice", 1, {"ab"}, {K_F}, f_reuse, 0, 0, 0},
};
enum { NCASES = sizeof cases / sizeof cases[0] };

#define GC_TEST(i) KN_TEST(autograd_ops, case_##i) { if ((i) < NCASES) { run_case(&cases[i], 0); run_case(&cases[i], 1); } }
GC_TEST(0) GC_TEST(1) GC_TEST(2) GC_TEST(3) GC_TEST(4) GC_TEST(5) GC_TEST(6) GC_TEST(7) GC_TEST(8) GC_TEST(9)
GC_TEST(10) GC_TEST(11) GC_TEST(12) GC_TEST(13) GC_TEST(14) GC_TEST(15) GC_TEST(16) GC_TEST(17) GC_TEST(18) GC_TEST(19)
GC_TEST(20) GC_TEST(21) GC_TEST(22) GC_TEST(23) GC_TEST(24) GC_TEST(25) GC_TEST(26) GC_TEST(27) GC_TEST(28) GC_TEST(29)
GC_TEST(30) GC_TEST(31) GC_TEST(32) GC_TEST(33) GC_TEST(34) GC_TEST(35) GC_TEST(36) GC_TEST(37) GC_TEST(38) GC_TEST(39)
GC_TEST(40) GC_TEST(41) GC_TEST(42) GC_TEST(43) GC_TEST(44) GC_TEST(45) GC_TEST(46) GC_TEST(47) GC_TEST(48) GC_TEST(49)
GC_TEST(50)

/* Every pointwise function of kiln/pointwise.def that is a differentiable IR op, straight
 * from the table (so a new row is checked here with no case to write): its rule, bw_unary
 * through unary_grad's gradient column or a graph rule, against finite differences. A
 * function that is NaN at -0.75 (log, sqrt, rsqrt) gets positive operands. */
static kn_unary_op row_f;
static kn_val f_row(kn_builder *b, const kn_val *x, const int64_t *d) { (void)d; return kn_unary(b, row_f, x[0]); }
KN_TEST(autograd_ops, every_pointwise_row_against_finite_differences) {
    int n = 0;
    for (int f = 0; f < KN_UNARY_COUNT; f++) {
        kn_op op = kn_unary_ir_op((kn_unary_op)f);
        if (op == KN_OP_COUNT || !kn_op_get(op)->differentiable) continue;
        row_f = (kn_unary_op)f;
        bool pos = isnan(kn_sc_unary_f64((kn_unary_op)f, -0.75));
        gc_case c = {op, kn_unary_op_name((kn_unary_op)f), 1, {"abc"}, {pos ? K_POS : K_F}, f_row, 0, 0, 0};
        run_case(&c, 0);
        run_case(&c, 1);
        n++;
    }
    cr_assert_geq(n, 8, "only %d differentiable pointwise rows", n);
}

KN_TEST(autograd_ops, every_differentiable_op_has_a_case) {
    cr_assert(NCASES <= 51, "add GC_TEST lines for the new cases");
    for (int op = 0; op < KN_OP_COUNT; op++) {
        if (!kn_op_get((kn_op)op)->differentiable) continue;
        bool found = false;
        for (int i = 0; i < NCASES; i++) found |= cases[i].op == (kn_op)op;
        found |= kn_op_unary((kn_op)op, NULL); /* every_pointwise_row_against_finite_differences */
        cr_assert(found, "op %s has a backward rule but no finite-difference case", kn_op_name((kn_op)op));
    }
}
