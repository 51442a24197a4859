/* test_ir_lowp.c — f16 and bf16 through the IR on the CPU.
 *
 * A low-precision node computes in f32 and rounds its result once, to nearest even, as it
 * is stored (core/ir/node_eval.c, eval_low_precision). So, for every op, on inputs that are
 * exact in the low dtype:
 *   - the low-precision result equals, bit for bit, the f32 kernel's result rounded once;
 *   - it is within the dtype's unit roundoff u of the f64 result, relative to 1 + |ref|
 *     (the tolerance scaled to the dtype: bf16 u = 2^-8, f16 u = 2^-11; the f32
 *     arithmetic underneath adds ~1e-6 at most, far below either).
 * Plus the type rules (bf16 operands meet only bf16; a cast changes the dtype and keeps
 * the shape), and autograd through casts: the gradient of an f32 value used in bf16 is
 * f32 (cast's backward casts back) and agrees with the f32 graph's within bf16's u. */
#include "test_ir_util.h"

typedef kn_val (*lowp_op)(kn_builder *b, const kn_val *x);

typedef struct lowp_case {
    const char *name;
    lowp_op fn;
    int nin;
    int ndim[3];
    int64_t shape[3][3];
    bool positive;   /* inputs in [0.5, 2.5] (log, sqrt, rsqrt) */
    bool targets;    /* the last operand: integers in [0, 7) */
} lowp_case;

static kn_val op_add(kn_builder *b, const kn_val *x) { return kn_add(b, x[0], x[1]); }
static kn_val op_mul(kn_builder *b, const kn_val *x) { return kn_mul(b, x[0], x[1]); }
static kn_val op_div(kn_builder *b, const kn_val *x) { return kn_div(b, x[0], x[1]); }
static kn_val op_exp(kn_builder *b, const kn_val *x) { return kn_exp(b, x[0]); }
static kn_val op_ln(kn_builder *b, const kn_val *x) { return kn_ln(b, x[0]); }
static kn_val op_sqrt(kn_builder *b, const kn_val *x) { return kn_sqrt(b, x[0]); }
static kn_val op_rsqrt(kn_builder *b, const kn_val *x) { return kn_rsqrt(b, x[0]); }
static kn_val op_tanh(kn_builder *b, const kn_val *x) { return kn_tanh(b, x[0]); }
static kn_val op_gelu(kn_builder *b, const kn_val *x) { return kn_gelu(b, x[0]); }
static kn_val op_relu(kn_builder *b, const kn_val *x) { return kn_relu(b, x[0]); }
static kn_val op_sum(kn_builder *b, const kn_val *x) { int ax = -1; return kn_sum(b, x[0], 1, &ax, false); }
static kn_val op_mean(kn_builder *b, const kn_val *x) { int ax = 0; return kn_mean(b, x[0], 1, &ax, true); }
static kn_val op_max(kn_builder *b, const kn_val *x) { int ax = -1; return kn_max(b, x[0], 1, &ax, false); }
static kn_val op_matmul(kn_builder *b, const kn_val *x) { return kn_matmul(b, x[0], x[1]); }
static kn_val op_matmul_t(kn_builder *b, const kn_val *x) { return kn_matmul_t(b, x[0], x[1], true, true); }
static kn_val op_softmax(kn_builder *b, const kn_val *x) { return kn_softmax(b, x[0], -1); }
static kn_val op_log_softmax(kn_builder *b, const kn_val *x) { return kn_log_softmax(b, x[0], -1); }
static kn_val op_causal(kn_builder *b, const kn_val *x) { return kn_causal_softmax(b, x[0], 0.35); }
static kn_val op_layernorm(kn_builder *b, const kn_val *x) { return kn_layernorm(b, x[0], x[1], x[2], 1e-5); }
static kn_val op_xent(kn_builder *b, const kn_val *x) { return kn_cross_entropy(b, x[0], x[1]); }
static kn_val op_embedding(kn_builder *b, const kn_val *x) { return kn_embedding(b, x[0], x[1]); }
static kn_val op_dropout(kn_builder *b, const kn_val *x) { return kn_dropout(b, x[0], 0.25, 3, 5); }
static kn_val op_transpose(kn_builder *b, const kn_val *x) { return kn_transpose(b, x[0], 0, 1); }

static const lowp_case cases[] = {
    {"add", op_add, 2, {2, 1}, {{5, 7}, {7}}, false, false},
    {"mul", op_mul, 2, {2, 2}, {{5, 7}, {5, 7}}, false, false},
    {"div", op_div, 2, {2, 2}, {{5, 7}, {5, 7}}, true, false},
    {"exp", op_exp, 1, {2}, {{5, 7}}, false, false},
    {"log", op_ln, 1, {2}, {{5, 7}}, true, false},
    {"sqrt", op_sqrt, 1, {2}, {{5, 7}}, true, false},
    {"rsqrt", op_rsqrt, 1, {2}, {{5, 7}}, true, false},
    {"tanh", op_tanh, 1, {2}, {{5, 7}}, false, false},
    {"gelu", op_gelu, 1, {2}, {{5, 7}}, false, false},
    {"relu", op_relu, 1, {2}, {{5, 7}}, false, false},
    {"sum", op_sum, 1, {2}, {{6, 50}}, false, false},
    {"mean", op_mean, 1, {2}, {{50, 6}}, false, false},
    {"max", op_max, 1, {2}, {{6, 50}}, false, false},
    {"matmul", op_matmul, 2, {2, 2}, {{9, 64}, {64, 11}}, false, false},
    {"matmul_tt", op_matmul_t, 2, {3, 2}, {{2, 64, 9}, {11, 64}}, false, false},
    {"softmax", op_softmax, 1, {2}, {{6, 33}}, false, false},
    {"log_softmax", op_log_softmax, 1, {2}, {{6, 33}}, false, false},
    {"causal_softmax", op_causal, 1, {3}, {{2, 9, 9}}, false, false},
    {"layernorm", op_layernorm, 3, {2, 1, 1}, {{6, 40}, {40}, {40}}, false, false},
    {"cross_entropy", op_xent, 2, {2, 1}, {{12, 7}, {12}}, false, true},
    {"embedding", op_embedding, 2, {2, 1}, {{7, 5}, {12}}, false, true},
    {"dropout", op_dropout, 1, {2}, {{5, 7}}, false, false},
    {"permute", op_transpose, 1, {2}, {{5, 7}}, false, false},
};

/* Operand i of case c in dtype dt: the same values for every dtype (random, rounded to
 * `round` first so that they are exact in it). */
static kn_tensor *operand(const lowp_case *c, int i, kn_dtype dt, kn_dtype round, uint64_t seed) {
    if (c->targets && i == c->nin - 1) return irt_randint(c->ndim[i], c->shape[i], 7, seed + (uint64_t)i);
    kn_tensor *x = irt_randn(KN_DT_F64, c->ndim[i], c->shape[i], seed + (uint64_t)i), *r = NULL, *out = NULL;
    double *p = kn_tensor_data(x);
    for (int64_t e = 0; e < kn_tensor_numel(x); e++) p[e] = c->positive ? 0.5 + fmod(fabs(p[e]), 2.0) : p[e];
    KN_ASSERT_OK(kn_tensor_cast(&r, x, round));
    KN_ASSERT_OK(kn_tensor_cast(&out, r, dt));
    kn_tensor_free(x);
    kn_tensor_free(r);
    return out;
}

/* Case c run eagerly with float operands of dtype dt; the result (owned). */
static kn_tensor *run_case(const lowp_case *c, kn_dtype dt, kn_dtype round, uint64_t seed) {
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
    kn_val x[3];
    kn_tensor *t[3];
    for (int i = 0; i < c->nin; i++) {
        t[i] = operand(c, i, dt, round, seed);
        char nm[16];
        snprintf(nm, sizeof nm, "x%d", i);
        x[i] = kn_input(b, nm, t[i]);
    }
    kn_val y = c->fn(b, x);
    KN_ASSERT_OK(kn_builder_status(b));
    kn_tensor *out = NULL;
    KN_ASSERT_OK(kn_tensor_contiguous(&out, kn_val_tensor(b, y)));
    kn_dtype want = c->fn == op_xent && dt != KN_DT_F64 ? KN_DT_F32 : dt; /* the loss of 16-bit logits is f32 */
    cr_assert_eq(out->dtype, want, "%s: result dtype %s, not %s", c->name, kn_dtype_name(out->dtype),
                 kn_dtype_name(want));
    for (int i = 0; i < c->nin; i++) kn_tensor_free(t[i]);
    kn_builder_free(b);
    return out;
}

static double unit_roundoff(kn_dtype dt) { return dt == KN_DT_BF16 ? 0x1p-8 : 0x1p-11; }

static void every_op(kn_dtype dt) {
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const lowp_case *c = &cases[ci];
        uint64_t seed = 40 + ci;
        kn_tensor *low = run_case(c, dt, dt, seed), *f32 = run_case(c, KN_DT_F32, dt, seed);
        kn_tensor *f64 = run_case(c, KN_DT_F64, dt, seed), *rounded = NULL;
        KN_ASSERT_OK(kn_tensor_cast(&rounded, f32, low->dtype)); /* the loss stays f32: not rounded */
        cr_assert(irt_same_bits(low, rounded), "%s (%s): not the f32 result rounded once", c->name, kn_dtype_name(dt));
        int64_t n = kn_tensor_numel(low);
        double u = unit_roundoff(dt);
        for (int64_t e = 0; e < n; e++) {
            double got = kn_dtype_load(low->dtype, kn_tensor_data(low), e), want = ((double *)kn_tensor_data(f64))[e];
            cr_assert(fabs(got - want) <= u * (1 + fabs(want)), "%s (%s): element %lld is %.9g, f64 gives %.9g "
                      "(tolerance u = %.3g relative to 1 + |ref|)", c->name, kn_dtype_name(dt), (long long)e, got, want, u);
        }
        kn_tensor_free(low);
        kn_tensor_free(f32);
        kn_tensor_free(f64);
        kn_tensor_free(rounded);
    }
}

KN_TEST(ir_lowp, every_op_in_bf16_is_f32_math_rounded_once) { every_op(KN_DT_BF16); }
KN_TEST(ir_lowp, every_op_in_f16_is_f32_math_rounded_once) { every_op(KN_DT_F16); }

KN_TEST(ir_lowp, type_rules_take_low_precision_where_it_makes_sense) {
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
    int64_t s[2] = {4, 8};
    kn_val a = kn_input_typed(b, "a", KN_DT_BF16, 2, s), w = kn_param_typed(b, "w", KN_DT_F32, 2, s);
    kn_val wl = kn_cast(b, w, KN_DT_BF16);
    kn_val y = kn_matmul_t(b, a, wl, false, true);
    KN_ASSERT_OK(kn_builder_status(b));
    const kn_type *t = &kn_builder_graph(b)->nodes[y.id].type;
    cr_assert_eq(t->dtype, KN_DT_BF16);
    cr_assert_eq(t->shape[0], 4);
    cr_assert_eq(t->shape[1], 4);
    kn_val bad = kn_add(b, a, w); /* bf16 + f32: the IR asks for a cast */
    cr_assert(!kn_val_ok(bad));
    cr_assert_eq(kn_builder_status(b), KN_ERR_DTYPE);
    cr_assert(strstr(kn_last_error(), "bf16[4,8] and f32[4,8]") && strstr(kn_last_error(), "insert a cast"), "%s",
              kn_last_error());
    kn_builder_free(b);
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
    int64_t v[1] = {8};
    kn_val h = kn_input_typed(b, "h", KN_DT_F16, 1, v), i = kn_input_typed(b, "i", KN_DT_BF16, 1, v);
    kn_val e = kn_embedding(b, kn_input_typed(b, "tab", KN_DT_F32, 2, s), i); /* bf16 indices: no */
    cr_assert(!kn_val_ok(e));
    cr_assert(strstr(kn_last_error(), "not i32 or i64"), "%s", kn_last_error());
    (void)h;
    kn_builder_free(b);
}

/* loss = sum(cast(cast(x, bf16) @ cast(w, bf16), f32)^2): the gradients of the f32 x and w
 * are f32 and within bf16's u of the same graph without the casts. */
static void joint(bool low, kn_tensor **gx, kn_tensor **gw) {
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
    int64_t sx[2] = {5, 16}, sw[2] = {16, 6};
    kn_tensor *tx = operand(&(lowp_case){.ndim = {2}, .shape = {{5, 16}}}, 0, KN_DT_F32, KN_DT_BF16, 7);
    kn_tensor *tw = operand(&(lowp_case){.ndim = {2}, .shape = {{16, 6}}}, 0, KN_DT_F32, KN_DT_BF16, 8);
    kn_val x = kn_input_typed(b, "x", KN_DT_F32, 2, sx), w = kn_param_typed(b, "w", KN_DT_F32, 2, sw);
    kn_val y = low ? kn_cast(b, kn_matmul(b, kn_cast(b, x, KN_DT_BF16), kn_cast(b, w, KN_DT_BF16)), KN_DT_F32)
                   : kn_matmul(b, x, w);
    kn_val loss = kn_sum(b, kn_mul(b, y, y), 0, NULL, false), wrt[2] = {x, w}, g[2];
    KN_ASSERT_OK(kn_backward(b, loss, 2, wrt, g));
    kn_builder_output(b, loss);
    kn_builder_output(b, g[0]);
    kn_builder_output(b, g[1]);
    kn_graph *gr = NULL;
    KN_ASSERT_OK(kn_builder_finish(b, &gr));
    kn_builder_free(b);
    for (int k = 1; k <= 2; k++)
        cr_assert_eq(gr->nodes[gr->outputs[k]].type.dtype, KN_DT_F32, "gradient %d is %s", k,
                     kn_dtype_name(gr->nodes[gr->outputs[k]].type.dtype));
    kn_interp *it = NULL;
    KN_ASSERT_OK(kn_interp_new(&it, gr));
    KN_ASSERT_OK(kn_interp_bind(it, "x", tx));
    KN_ASSERT_OK(kn_interp_bind(it, "w", tw));
    KN_ASSERT_OK(kn_interp_run(it));
    KN_ASSERT_OK(kn_tensor_contiguous(gx, kn_interp_output(it, 1)));
    KN_ASSERT_OK(kn_tensor_contiguous(gw, kn_interp_output(it, 2)));
    kn_interp_free(it);
    kn_graph_free(gr);
    kn_tensor_free(tx);
    kn_tensor_free(tw);
}

KN_TEST(ir_lowp, gradients_through_bf16_casts_are_f32_and_close) {
    kn_tensor *gx = NULL, *gw = NULL, *rx = NULL, *rw = NULL;
    joint(true, &gx, &gw);
    joint(false, &rx, &rw);
    kn_tensor *got[2] = {gx, gw}, *want[2] = {rx, rw};
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(got[k]->dtype, KN_DT_F32);
        double scale = 0, worst = 0;
        for (int64_t e = 0; e < kn_tensor_numel(want[k]); e++)
            scale = fmax(scale, fabs(((float *)kn_tensor_data(want[k]))[e]));
        for (int64_t e = 0; e < kn_tensor_numel(want[k]); e++)
            worst = fmax(worst, fabs(((float *)kn_tensor_data(got[k]))[e] - ((float *)kn_tensor_data(want[k]))[e]));
        /* y rounds once (u), dy = 2y rounds once more in the backward matmul's output: 4u of the largest */
        cr_assert(worst <= 4 * 0x1p-8 * scale, "gradient %d: bf16 differs from f32 by %.3g (largest %.3g)", k, worst, scale);
        cr_assert(worst > 0, "gradient %d: bf16 is bitwise the f32 result: the casts did nothing", k);
    }
    kn_tensor_free(gx); kn_tensor_free(gw); kn_tensor_free(rx); kn_tensor_free(rw);
}
