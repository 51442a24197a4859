/* decompose.c — composite ops into primitives, so that the compiler, not a hand-written
 * kernel, is responsible for them.
 *
 * softmax, log_softmax, their backwards, the causal attention softmax and its backward,
 * layernorm, normalize, layernorm's input gradient, cross_entropy and its backward become
 * max/sum/mean reductions over the row axis (keepdim) and elementwise ops. The scheduler
 * then fuses each back into one row-wise kernel: a loop per reduction over the row, then
 * the stores (cross_entropy's mean over the rows is a second, small kernel). Each formula is
 * written in the order of operations of the kernels' shared definition (core/tensor/
 * rowmath.h, which the CPU kernels of kernels_train.inc and the CUDA kernels of cuda_norm.cu,
 * cuda_cross_entropy.cu and cuda_reduce.cu call; each rule below names the function it follows), so the generated
 * code differs from them only by where it rounds (the kernels keep a row's statistics in
 * double; here they are rounded to the row's dtype). tests/core/test_rowmath.c checks the
 * three agree.
 * The interpreter's special case of a row with no finite entry (a fully masked softmax row
 * gives 0, log_softmax -inf) is kept with a `where`.
 *
 * cross_entropy and its backward pick the target's logit with `onehot` (true where the
 * last axis's index equals the target), a compare against the column coordinate inside the
 * row kernel rather than a gather; the program checks the indices before such a kernel runs,
 * with the interpreter's message. On a GPU (decompose:gpu) the loss stays the library's
 * kernel: a GPT's logit rows are vocabulary-wide (50,304), too long for the registers of a
 * generated row kernel, which then reads the row from memory once per reduction; the
 * hand-written kernel reads it once with an online logsumexp (on the H100 the generated
 * pair took 5.6 ms of a GPT-2 step, 2,994 GB/s of copy bandwidth measured in the same run:
 * 22-36% of it, about 3 ms more than the library's, 2026-11-25). */
#include <math.h>
#include <string.h>

#include "kiln/passes.h"

static int32_t e1(kn_rewriter *rw, kn_op op, int32_t a) { return kn_rw_emit(rw, op, 1, &a, NULL); }
static int32_t e2(kn_rewriter *rw, kn_op op, int32_t a, int32_t b) {
    int32_t in[2] = {a, b};
    return kn_rw_emit(rw, op, 2, in, NULL);
}
static int32_t e3(kn_rewriter *rw, kn_op op, int32_t a, int32_t b, int32_t c) {
    int32_t in[3] = {a, b, c};
    return kn_rw_emit(rw, op, 3, in, NULL);
}
/* A scalar constant of x's dtype (broadcast by its users). */
static int32_t cst(kn_rewriter *rw, int32_t like, double v) {
    kn_type t = {kn_rw_node(rw, like)->type.dtype, 0, {0}};
    return kn_rw_full(rw, &t, v);
}
/* A reduction of x over `axis`, keepdim. */
static int32_t red(kn_rewriter *rw, kn_op op, int32_t x, int64_t axis) {
    int nd = kn_rw_node(rw, x)->type.ndim;
    kn_attrs a = kn_attrs_default();
    a.naxes = 1;
    a.axes[0] = axis < 0 ? axis + nd : axis;
    a.keepdim = 1;
    return kn_rw_emit(rw, op, 1, &x, &a);
}
static int64_t axis_of(const kn_match *m) { return m->root->attrs.axis; }

/* The row maximum with -inf replaced by 0, so x - m is never inf - inf (and a fully masked
 * row stays recognizable: its m is -inf). Writes the raw maximum to *mraw. */
static int32_t row_max(kn_rewriter *rw, int32_t x, int64_t axis, int32_t *mraw) {
    int32_t m = red(rw, KN_OP_MAX, x, axis);
    *mraw = m;
    int32_t masked = e2(rw, KN_OP_EQ, m, cst(rw, m, -INFINITY));
    return e3(rw, KN_OP_WHERE, masked, cst(rw, m, 0), m);
}

static int32_t softmax_of(kn_rewriter *rw, int32_t x, int64_t axis) {
    int32_t mraw, m = row_max(rw, x, axis, &mraw);
    int32_t e = e1(rw, KN_OP_EXP, e2(rw, KN_OP_SUB, x, m));
    int32_t s = red(rw, KN_OP_SUM, e, axis);
    int32_t y = e2(rw, KN_OP_MUL, e, e2(rw, KN_OP_DIV, cst(rw, s, 1), s));
    int32_t masked = e2(rw, KN_OP_EQ, mraw, cst(rw, mraw, -INFINITY));
    return e3(rw, KN_OP_WHERE, masked, cst(rw, y, 0), y);
}

static int32_t r_softmax(kn_rewriter *rw, const kn_match *m) { return softmax_of(rw, m->bind[1], axis_of(m)); }

static int32_t r_log_softmax(kn_rewriter *rw, const kn_match *m) {
    int32_t x = m->bind[1];
    int64_t ax = axis_of(m);
    int32_t mraw, mx = row_max(rw, x, ax, &mraw);
    int32_t s = red(rw, KN_OP_SUM, e1(rw, KN_OP_EXP, e2(rw, KN_OP_SUB, x, mx)), ax);
    int32_t y = e2(rw, KN_OP_SUB, x, e2(rw, KN_OP_ADD, mx, e1(rw, KN_OP_LOG, s)));
    int32_t masked = e2(rw, KN_OP_EQ, mraw, cst(rw, mraw, -INFINITY));
    return e3(rw, KN_OP_WHERE, masked, cst(rw, y, -INFINITY), y);
}

/* softmax_bwd(dy, y) = y * (dy - sum(dy * y)): kn_rm_softmax_dx */
static int32_t r_softmax_bwd(kn_rewriter *rw, const kn_match *m) {
    int32_t dy = m->bind[1], y = m->bind[2];
    int32_t s = red(rw, KN_OP_SUM, e2(rw, KN_OP_MUL, dy, y), axis_of(m));
    return e2(rw, KN_OP_MUL, y, e2(rw, KN_OP_SUB, dy, s));
}

/* log_softmax_bwd(dy, y) = dy - exp(y) * sum(dy): kn_rm_log_softmax_dx */
static int32_t r_log_softmax_bwd(kn_rewriter *rw, const kn_match *m) {
    int32_t dy = m->bind[1], y = m->bind[2];
    int32_t s = red(rw, KN_OP_SUM, dy, axis_of(m));
    return e2(rw, KN_OP_SUB, dy, e2(rw, KN_OP_MUL, e1(rw, KN_OP_EXP, y), s));
}

static int32_t causal_fill(kn_rewriter *rw, int32_t x, double v) {
    kn_attrs a = kn_attrs_default();
    a.value = v;
    return kn_rw_emit(rw, KN_OP_CAUSAL_FILL, 1, &x, &a);
}

/* causal_softmax(x) = softmax(causal_fill(x * scale, -inf)) over the last axis. The masked
 * entries are 0 after the exp instead of exp(-inf): the same values, but a vector exp
 * (libmvec) sends every -inf lane to the scalar function, and half of a causal row is
 * masked. */
static int32_t r_causal_softmax(kn_rewriter *rw, const kn_match *m) {
    int32_t x = m->bind[1];
    int32_t zs = e2(rw, KN_OP_MUL, x, cst(rw, x, m->root->attrs.scale));
    int32_t mraw, mx = row_max(rw, causal_fill(rw, zs, -INFINITY), -1, &mraw);
    int32_t e = causal_fill(rw, e1(rw, KN_OP_EXP, causal_fill(rw, e2(rw, KN_OP_SUB, zs, mx), 0)), 0);
    int32_t s = red(rw, KN_OP_SUM, e, -1);
    int32_t y = e2(rw, KN_OP_MUL, e, e2(rw, KN_OP_DIV, cst(rw, s, 1), s));
    int32_t masked = e2(rw, KN_OP_EQ, mraw, cst(rw, mraw, -INFINITY));
    return e3(rw, KN_OP_WHERE, masked, cst(rw, y, 0), y);
}

/* causal_softmax_bwd(dy, y) = y * (dy - sum(dy * y)) * scale (masked entries have y = 0) */
static int32_t r_causal_softmax_bwd(kn_rewriter *rw, const kn_match *m) {
    int32_t dy = m->bind[1], y = m->bind[2];
    int32_t s = red(rw, KN_OP_SUM, e2(rw, KN_OP_MUL, dy, y), -1);
    int32_t d = e2(rw, KN_OP_MUL, y, e2(rw, KN_OP_SUB, dy, s));
    return e2(rw, KN_OP_MUL, d, cst(rw, d, m->root->attrs.scale));
}

/* (x - mean) and 1 / sqrt(var + eps) over the last axis: kn_rm_mean, kn_rm_rstd (rsqrt of
 * the variance plus eps, in the row's dtype). */
static void row_stats(kn_rewriter *rw, int32_t x, double eps, int32_t *d, int32_t *rstd) {
    *d = e2(rw, KN_OP_SUB, x, red(rw, KN_OP_MEAN, x, -1));
    int32_t var = red(rw, KN_OP_MEAN, e2(rw, KN_OP_MUL, *d, *d), -1);
    *rstd = e1(rw, KN_OP_RSQRT, e2(rw, KN_OP_ADD, var, cst(rw, var, eps)));
}

/* layernorm(x, w, b) = (x - mean) * rstd * w + b: kn_rm_affine (normalize: kn_rm_normalize) */
static int32_t r_layernorm(kn_rewriter *rw, const kn_match *m) {
    int32_t d, rstd;
    row_stats(rw, m->bind[1], m->root->attrs.eps, &d, &rstd);
    int32_t y = e2(rw, KN_OP_MUL, e2(rw, KN_OP_MUL, d, rstd), m->bind[2]);
    return e2(rw, KN_OP_ADD, y, m->bind[3]);
}

static int32_t r_normalize(kn_rewriter *rw, const kn_match *m) {
    int32_t d, rstd;
    row_stats(rw, m->bind[1], m->root->attrs.eps, &d, &rstd);
    return e2(rw, KN_OP_MUL, d, rstd);
}

/* layernorm_dx(dy, x, w): g = dy * w, xh = (x - mean) * rstd,
 * dx = rstd * (g - mean(g) - xh * mean(g * xh)): kn_rm_layernorm_dx */
static int32_t r_layernorm_dx(kn_rewriter *rw, const kn_match *m) {
    int32_t d, rstd;
    row_stats(rw, m->bind[2], m->root->attrs.eps, &d, &rstd);
    int32_t g = e2(rw, KN_OP_MUL, m->bind[1], m->bind[3]);
    int32_t xh = e2(rw, KN_OP_MUL, d, rstd);
    int32_t mg = red(rw, KN_OP_MEAN, g, -1);
    int32_t mgx = red(rw, KN_OP_MEAN, e2(rw, KN_OP_MUL, g, xh), -1);
    int32_t t = e2(rw, KN_OP_SUB, e2(rw, KN_OP_SUB, g, mg), e2(rw, KN_OP_MUL, xh, mgx));
    return e2(rw, KN_OP_MUL, rstd, t);
}

/* t ([...], integer) as [..., 1], and onehot(t) over x's shape [..., V]. */
static int32_t onehot_of(kn_rewriter *rw, int32_t x, int32_t t) {
    const kn_type xt = kn_rw_node(rw, x)->type; /* a copy: emitting may move the node array */
    kn_attrs a = kn_attrs_default();
    a.nshape = xt.ndim;
    memcpy(a.shape, xt.shape, sizeof(int64_t) * (size_t)xt.ndim);
    a.shape[xt.ndim - 1] = 1;
    int32_t tk = kn_rw_emit(rw, KN_OP_RESHAPE, 1, &t, &a);
    a.shape[xt.ndim - 1] = xt.shape[xt.ndim - 1];
    return kn_rw_emit(rw, KN_OP_ONEHOT, 1, &tk, &a);
}

/* log(sum(exp(x - max))) + max over the last axis (keepdim): kn_rm_lse. */
static int32_t row_lse(kn_rewriter *rw, int32_t x) {
    int32_t mx = red(rw, KN_OP_MAX, x, -1);
    int32_t s = red(rw, KN_OP_SUM, e1(rw, KN_OP_EXP, e2(rw, KN_OP_SUB, x, mx)), -1);
    return e2(rw, KN_OP_ADD, e1(rw, KN_OP_LOG, s), mx);
}

/* x in f32 when it is bf16 or f16: cross-entropy of 16-bit logits (the lowloss pass) is
 * computed in f32, its loss f32 and its gradient rounded to the logits' dtype once, at
 * the end (kiln/ir.h), as the casts it replaced did; the cast up fuses into the row
 * kernels that read x. */
static int32_t widened(kn_rewriter *rw, int32_t x) {
    kn_dtype d = kn_rw_node(rw, x)->type.dtype;
    if (d != KN_DT_BF16 && d != KN_DT_F16) return x;
    kn_attrs a = kn_attrs_default();
    a.dtype = KN_DT_F32;
    return kn_rw_emit(rw, KN_OP_CAST, 1, &x, &a);
}

/* cross_entropy(x, t) = mean over rows of lse(row) - row[t] */
static int32_t r_cross_entropy(kn_rewriter *rw, const kn_match *m) {
    int32_t x = widened(rw, m->bind[1]), t = m->bind[2];
    int32_t picked = red(rw, KN_OP_SUM, e3(rw, KN_OP_WHERE, onehot_of(rw, x, t), x, cst(rw, x, 0)), -1);
    int32_t l = e2(rw, KN_OP_SUB, row_lse(rw, x), picked);
    kn_attrs a = kn_attrs_default(); /* over every axis, to a scalar */
    a.naxes = kn_rw_node(rw, l)->type.ndim;
    for (int i = 0; i < a.naxes; i++) a.axes[i] = i;
    return kn_rw_emit(rw, KN_OP_MEAN, 1, &l, &a);
}

/* cross_entropy_bwd(dl, x, t) = exp(x - lse) * s - onehot(t) * s, s = dl / rows
 * (kn_rm_ce_scale) */
static int32_t r_cross_entropy_bwd(kn_rewriter *rw, const kn_match *m) {
    int32_t dl = m->bind[1], x = widened(rw, m->bind[2]), t = m->bind[3];
    int32_t sc = e2(rw, KN_OP_DIV, dl, cst(rw, dl, (double)kn_type_numel(&kn_rw_node(rw, t)->type)));
    int32_t p = e2(rw, KN_OP_MUL, e1(rw, KN_OP_EXP, e2(rw, KN_OP_SUB, x, row_lse(rw, x))), sc);
    int32_t g = e2(rw, KN_OP_SUB, p, e3(rw, KN_OP_WHERE, onehot_of(rw, x, t), sc, cst(rw, x, 0)));
    if (x == m->bind[2]) return g;
    kn_attrs a = kn_attrs_default(); /* the gradient in the logits' dtype */
    a.dtype = kn_rw_node(rw, m->bind[2])->type.dtype;
    return kn_rw_emit(rw, KN_OP_CAST, 1, &g, &a);
}

static bool float_row(const kn_graph *g, const kn_node *n) {
    (void)g;
    return kn_dtype_is_float(n->type.dtype) && n->type.ndim >= 1;
}

/* cross-entropy's logits (the last operand but the targets) are a float row. */
static bool float_logits(const kn_graph *g, const kn_node *n) {
    const kn_node *x = &g->nodes[n->in[n->nin - 2]];
    return kn_dtype_is_float(x->type.dtype) && x->type.ndim >= 1;
}

static const kn_pat a1 = {.op = KN_PAT_ANY, .bind = 1};
static const kn_pat a2 = {.op = KN_PAT_ANY, .bind = 2};
static const kn_pat a3 = {.op = KN_PAT_ANY, .bind = 3};
static const kn_pat p_softmax = {.op = KN_OP_SOFTMAX, .in = {&a1}, .where = float_row};
static const kn_pat p_log_softmax = {.op = KN_OP_LOG_SOFTMAX, .in = {&a1}, .where = float_row};
static const kn_pat p_softmax_bwd = {.op = KN_OP_SOFTMAX_BWD, .in = {&a1, &a2}, .where = float_row};
static const kn_pat p_log_softmax_bwd = {.op = KN_OP_LOG_SOFTMAX_BWD, .in = {&a1, &a2}, .where = float_row};
static const kn_pat p_causal = {.op = KN_OP_CAUSAL_SOFTMAX, .in = {&a1}, .where = float_row};
static const kn_pat p_causal_bwd = {.op = KN_OP_CAUSAL_SOFTMAX_BWD, .in = {&a1, &a2}, .where = float_row};
static const kn_pat p_layernorm = {.op = KN_OP_LAYERNORM, .in = {&a1, &a2, &a3}, .where = float_row};
static const kn_pat p_normalize = {.op = KN_OP_NORMALIZE, .in = {&a1}, .where = float_row};
static const kn_pat p_layernorm_dx = {.op = KN_OP_LAYERNORM_DX, .in = {&a1, &a2, &a3}, .where = float_row};
static const kn_pat p_cross_entropy = {.op = KN_OP_CROSS_ENTROPY, .in = {&a1, &a2}, .where = float_logits};
static const kn_pat p_cross_entropy_bwd = {.op = KN_OP_CROSS_ENTROPY_BWD, .in = {&a1, &a2, &a3}, .where = float_logits};

static const kn_rule kn_decompose_rules[] = {
    {"softmax", &p_softmax, r_softmax},
    {"log_softmax", &p_log_softmax, r_log_softmax},
    {"softmax_bwd", &p_softmax_bwd, r_softmax_bwd},
    {"log_softmax_bwd", &p_log_softmax_bwd, r_log_softmax_bwd},
    {"causal_softmax", &p_causal, r_causal_softmax},
    {"causal_softmax_bwd", &p_causal_bwd, r_causal_softmax_bwd},
    {"layernorm", &p_layernorm, r_layernorm},
    {"normalize", &p_normalize, r_normalize},
    {"layernorm_dx", &p_layernorm_dx, r_layernorm_dx},
    {"cross_entropy", &p_cross_entropy, r_cross_entropy},
    {"cross_entropy_bwd", &p_cross_entropy_bwd, r_cross_entropy_bwd},
};

kn_status kn_decompose_check_arg(const char *arg) {
    if (!arg || !strcmp(arg, "gpu")) return KN_OK;
    return kn_error(KN_ERR_ARG, "decompose: unknown argument '%s' (decompose, or decompose:gpu to keep the loss's kernel)",
                    arg);
}

kn_status kn_pass_decompose(kn_graph *g, kn_pass_stats *st) {
    int n = (int)(sizeof kn_decompose_rules / sizeof kn_decompose_rules[0]);
    if (st && !strcmp(st->arg, "gpu")) n -= 2; /* the last two: cross_entropy and its backward */
    return kn_rewrite(g, kn_decompose_rules, n, st);
}
