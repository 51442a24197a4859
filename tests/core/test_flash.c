/* test_flash.c — flash attention (the flash_attn/flash_attn_bwd ops, their CPU kernels in
 * core/tensor/kernels_flash.inc, the autograd rule and the `flash` pass, core/passes/flash.c).
 *
 * The reference is the materialized math in double, written out here naively: scores
 * [T, T], masked softmax, P V, and the textbook gradients. The kernels must agree with it
 * at awkward sizes (T = 1, primes, one more and one less than a tile; D = 1 and odd), in
 * f32 within 2e-5 and in f64 within 1e-12 of the largest magnitude of each result.
 * On a GPT step the pass must keep the loss (within 1e-6 relative) and every gradient
 * (within 1e-4 of each gradient's largest magnitude: f32, other summation order), leave
 * no [B, H, T, T] value, and lower the largest live set and the compiled memory plan by a
 * layer's probabilities less its packed result, per layer. */
#include <math.h>
#include <string.h>

#include "kn_test.h"
#include "graph_test_util.h"
#include "pass_step_util.h"
#include "kiln/autograd.h"
#include "kiln/kernels.h"
#include "kiln/nn.h"
#include "kiln/passes.h"
#include "kiln/program.h"

/* Uniform values in [-a, a) from a 64-bit LCG (the tests' own, reproducible). */
static void fill(double *x, int64_t n, uint64_t seed, double a) {
    uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = a * (2.0 * (double)(s >> 11) / 9007199254740992.0 - 1.0);
    }
}

/* y [bh, t, d + 1] and, when dy is given ([bh, t, d + 1]), dqkv [3, bh, t, d]. */
static void reference(const double *q, const double *k, const double *v, const double *dy, double *y, double *dqkv,
                      int64_t bh, int64_t t, int64_t d, double scale) {
    double *p = malloc((size_t)(t * t) * sizeof *p), *dp = malloc((size_t)(t * t) * sizeof *dp);
    for (int64_t h = 0; h < bh; h++) {
        const double *qh = q + h * t * d, *kh = k + h * t * d, *vh = v + h * t * d;
        double *yh = y + h * t * (d + 1);
        for (int64_t i = 0; i < t; i++) {
            double m = -INFINITY, l = 0;
            for (int64_t j = 0; j <= i; j++) {
                double s = 0;
                for (int64_t c = 0; c < d; c++) s += qh[i * d + c] * kh[j * d + c];
                p[i * t + j] = s * scale;
                if (p[i * t + j] > m) m = p[i * t + j];
            }
            for (int64_t j = 0; j <= i; j++) l += exp(p[i * t + j] - m);
            for (int64_t j = 0; j < t; j++) p[i * t + j] = j <= i ? exp(p[i * t + j] - m) / l : 0;
            for (int64_t c = 0; c < d; c++) {
                double o = 0;
                for (int64_t j = 0; j <= i; j++) o += p[i * t + j] * vh[j * d + c];
                yh[i * (d + 1) + c] = o;
            }
            yh[i * (d + 1) + d] = m + log(l);
        }
        if (!dy) continue;
        const double *dyh = dy + h * t * (d + 1);
        double *dq = dqkv + h * t * d, *dk = dq + bh * t * d, *dv = dk + bh * t * d;
        memset(dq, 0, (size_t)(t * d) * sizeof *dq);
        memset(dk, 0, (size_t)(t * d) * sizeof *dk);
        memset(dv, 0, (size_t)(t * d) * sizeof *dv);
        for (int64_t i = 0; i < t; i++) {
            /* dS_ij = P_ij (dP_ij - sum_j' P_ij' dP_ij') + P_ij dL_i (L's gradient is P) */
            double rs = 0;
            for (int64_t j = 0; j <= i; j++) {
                double s = 0;
                for (int64_t c = 0; c < d; c++) s += dyh[i * (d + 1) + c] * vh[j * d + c];
                dp[i * t + j] = s;
                rs += p[i * t + j] * s;
            }
            for (int64_t j = 0; j <= i; j++) {
                double ds = p[i * t + j] * (dp[i * t + j] - rs + dyh[i * (d + 1) + d]) * scale;
                for (int64_t c = 0; c < d; c++) {
                    dv[j * d + c] += p[i * t + j] * dyh[i * (d + 1) + c];
                    dq[i * d + c] += ds * kh[j * d + c];
                    dk[j * d + c] += ds * qh[i * d + c];
                }
            }
        }
    }
    free(p);
    free(dp);
}

/* max |a - b| / max(1e-30, max |b|) */
static double rel_err(const double *a, const double *b, int64_t n) {
    double e = 0, m = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        if (!(fabs(a[i] - b[i]) <= e)) e = isnan(a[i]) ? INFINITY : fabs(a[i] - b[i]);
        if (fabs(b[i]) > m) m = fabs(b[i]);
    }
    return e / m;
}

static kn_tensor *tensor_of(kn_dtype dt, int nd, const int64_t *shape, const double *x) {
    kn_tensor *t;
    KN_ASSERT_OK(kn_tensor_empty(&t, dt, nd, shape));
    int64_t n = kn_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        if (dt == KN_DT_F32) ((float *)kn_tensor_data(t))[i] = (float)x[i];
        else ((double *)kn_tensor_data(t))[i] = x[i];
    }
    return t;
}

static void to_double(const kn_tensor *t, double *x) {
    int64_t n = kn_tensor_numel(t);
    for (int64_t i = 0; i < n; i++)
        x[i] = t->dtype == KN_DT_F32 ? ((const float *)kn_tensor_data(t))[i] : ((const double *)kn_tensor_data(t))[i];
}

/* Values rounded to dt (so the reference sees the kernel's inputs exactly). */
static void round_to(kn_dtype dt, double *x, int64_t n) {
    if (dt == KN_DT_F32)
        for (int64_t i = 0; i < n; i++) x[i] = (float)x[i];
}

/* One case through the IR: y = flash_attn(q, k, v) and the gradients of sum(y * c) by
 * autograd (so the rule and flash_attn_bwd, with a gradient for L too), against the
 * reference. */
static void check_case(kn_dtype dt, int64_t b, int64_t h, int64_t t, int64_t d, uint64_t seed) {
    const int64_t bh = b * h, n = bh * t * d, ny = bh * t * (d + 1);
    const double scale = d ? 1.0 / sqrt((double)d) : 1.0, tol = dt == KN_DT_F32 ? 2e-5 : 1e-12;
    double *x = malloc((size_t)(3 * n + 2 * ny + 3 * n + ny + 3 * n) * sizeof *x);
    double *q = x, *k = q + n, *v = k + n, *c = v + n, *y = c + ny, *dqkv = y + ny, *got = dqkv + 3 * n;
    fill(q, 3 * n, seed, 1.5);
    fill(c, ny, seed + 1, 1.0);
    round_to(dt, x, 3 * n + ny);
    reference(q, k, v, c, y, dqkv, bh, t, d, scale);

    int64_t s4[4] = {b, h, t, d}, sy[4] = {b, h, t, d + 1};
    kn_builder *bld;
    KN_ASSERT_OK(kn_builder_new(&bld, KN_MODE_GRAPH));
    kn_val vq = kn_param_typed(bld, "q", dt, 4, s4), vk = kn_param_typed(bld, "k", dt, 4, s4);
    kn_val vv = kn_param_typed(bld, "v", dt, 4, s4), vc = kn_input_typed(bld, "c", dt, 4, sy);
    kn_val vy = kn_flash_attn(bld, vq, vk, vv, scale);
    kn_val loss = kn_sum(bld, kn_mul(bld, vy, vc), 0, NULL, false);
    kn_builder_output(bld, loss);
    kn_builder_output(bld, vy);
    kn_graph *fwd, *joint;
    KN_ASSERT_OK(kn_builder_finish(bld, &fwd));
    kn_val ps[3] = {vq, vk, vv};
    KN_ASSERT_OK(kn_autograd(fwd, loss, 3, ps, &joint, NULL));
    kn_interp *it;
    KN_ASSERT_OK(kn_interp_new(&it, joint));
    const char *names[4] = {"q", "k", "v", "c"};
    const double *data[4] = {q, k, v, c};
    for (int i = 0; i < 4; i++) {
        kn_tensor *tt = tensor_of(dt, 4, i < 3 ? s4 : sy, data[i]);
        KN_ASSERT_OK(kn_interp_bind(it, names[i], tt));
        kn_tensor_free(tt);
    }
    KN_ASSERT_OK(kn_interp_run(it));
    cr_assert(joint->noutputs == 5, "loss, y and three gradients");
    to_double(kn_interp_output(it, 1), got);
    double e = rel_err(got, y, ny);
    cr_assert(e <= tol, "%s B=%lld H=%lld T=%lld D=%lld: y off by %.3g (tol %g)", kn_dtype_name(dt), (long long)b,
              (long long)h, (long long)t, (long long)d, e, tol);
    for (int g = 0; g < 3; g++) {
        to_double(kn_interp_output(it, 2 + g), got);
        e = rel_err(got, dqkv + g * n, n);
        cr_assert(e <= tol, "%s B=%lld H=%lld T=%lld D=%lld: d%c off by %.3g (tol %g)", kn_dtype_name(dt),
                  (long long)b, (long long)h, (long long)t, (long long)d, "qkv"[g], e, tol);
    }
    kn_interp_free(it);
    kn_graph_free(joint);
    kn_graph_free(fwd);
    kn_builder_free(bld);
    free(x);
}

KN_TEST(flash, ops_match_the_materialized_math_at_awkward_sizes, .timeout = 120) {
    check_case(KN_DT_F64, 2, 1, 5, 0, 77); /* D = 0: O is empty, L = log(i + 1) */
    static const int64_t ts[] = {1, 2, 7, 31, 32, 33, 63, 64, 65, 97, 130};
    static const int64_t ds[] = {1, 3, 16, 17};
    uint64_t seed = 1;
    for (int dt = 0; dt < 2; dt++)
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
            for (size_t j = 0; j < sizeof ds / sizeof ds[0]; j++)
                check_case(dt ? KN_DT_F64 : KN_DT_F32, 1 + (int64_t)(i % 2), 1 + (int64_t)(j % 3), ts[i], ds[j], seed++);
}

/* Large logits: the online softmax's rescaling must keep exp from overflowing (a plain
 * exp(s) / sum would give inf / inf). */
KN_TEST(flash, large_logits_stay_finite) {
    check_case(KN_DT_F64, 1, 2, 70, 8, 99); /* warm-up of the helper at a normal scale */
    const int64_t t = 67, d = 4, n = t * d;
    double q[67 * 4], k[67 * 4], v[67 * 4], y[67 * 5], got[67 * 5];
    fill(q, n, 5, 60.0);
    fill(k, n, 6, 60.0);
    fill(v, n, 7, 1.0);
    round_to(KN_DT_F32, q, n);
    round_to(KN_DT_F32, k, n);
    round_to(KN_DT_F32, v, n);
    reference(q, k, v, NULL, y, NULL, 1, t, d, 1.0);
    float fq[67 * 4], fk[67 * 4], fv[67 * 4], fy[67 * 5];
    for (int64_t i = 0; i < n; i++) fq[i] = (float)q[i], fk[i] = (float)k[i], fv[i] = (float)v[i];
    cr_assert(kn_k_flash_attn_f32(fq, fk, fv, fy, 1, t, d, 1.0f));
    for (int64_t i = 0; i < t * (d + 1); i++) got[i] = fy[i];
    double e = rel_err(got, y, t * (d + 1));
    cr_assert(isfinite(e) && e <= 1e-5, "logits near 1e4: off by %.3g", e);
}

/* Results do not depend on the thread count: each unit of work is one call's. */
KN_TEST(flash, kernels_are_deterministic) {
    const int64_t bh = 5, t = 45, d = 7, n = bh * t * d;
    double *x = malloc((size_t)(3 * n + bh * t * (d + 1)) * sizeof *x);
    fill(x, 3 * n + bh * t * (d + 1), 3, 1.0);
    float *f = malloc((size_t)(3 * n + 2 * bh * t * (d + 1) + 6 * n) * sizeof *f);
    for (int64_t i = 0; i < 3 * n + bh * t * (d + 1); i++) f[i] = (float)x[i];
    float *q = f, *k = q + n, *v = k + n, *dy = v + n, *y = dy + bh * t * (d + 1), *g1 = y + bh * t * (d + 1),
          *g2 = g1 + 3 * n;
    cr_assert(kn_k_flash_attn_f32(q, k, v, y, bh, t, d, 0.5f));
    cr_assert(kn_k_flash_attn_bwd_f32(q, k, v, y, dy, d + 1, g1, bh, t, d, 0.5f));
    cr_assert(kn_k_flash_attn_bwd_f32(q, k, v, y, dy, d + 1, g2, bh, t, d, 0.5f));
    cr_assert(!memcmp(g1, g2, (size_t)(3 * n) * sizeof *g1), "two runs differ");
    free(f);
    free(x);
}

KN_TEST(flash, shape_rules_name_the_problem) {
    kn_builder *b;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
    int64_t s[3] = {2, 5, 4}, s2[3] = {2, 6, 4}, s1[1] = {4};
    kn_val q = kn_input_typed(b, "q", KN_DT_F32, 3, s), k = kn_input_typed(b, "k", KN_DT_F32, 3, s2);
    cr_assert(!kn_val_ok(kn_flash_attn(b, q, k, q, 0.5)));
    cr_assert(kn_builder_status(b) == KN_ERR_SHAPE);
    cr_assert(strstr(kn_builder_error(b), "must have one type"), "%s", kn_builder_error(b));
    kn_builder_free(b);
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
    kn_val x = kn_input_typed(b, "x", KN_DT_F32, 1, s1);
    cr_assert(!kn_val_ok(kn_flash_attn(b, x, x, x, 0.5)));
    cr_assert(strstr(kn_builder_error(b), "fewer than 2 axes"), "%s", kn_builder_error(b));
    kn_builder_free(b);
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
    q = kn_input_typed(b, "q", KN_DT_F32, 3, s);
    cr_assert(!kn_val_ok(kn_flash_attn(b, q, q, q, -1.0)));
    cr_assert(kn_builder_status(b) == KN_ERR_ARG, "a negative scale is refused: %s", kn_builder_error(b));
    kn_builder_free(b);
    /* the text format carries both ops; the verifier checks y against q, k, v */
    const char *txt = "%0 = input {name=\"q\"} : f32[2,5,4]\n"
                      "%1 = flash_attn %0, %0, %0 {scale=0.5} : f32[2,5,5]\n"
                      "%2 = flash_attn_bwd %0, %0, %0, %1, %0 {scale=0.5} : f32[3,2,5,4]\n"
                      "output %2\n";
    kn_graph *g;
    KN_ASSERT_OK(kn_graph_parse(txt, strlen(txt), &g));
    KN_ASSERT_OK(kn_graph_verify(g));
    char *out;
    KN_ASSERT_OK(kn_graph_to_string(g, &out));
    cr_assert(!strcmp(out, txt), "round trip:\n%s", out);
    kn_free(out);
    g->nodes[2].in[3] = 0; /* y replaced by q: wrong shape */
    KN_ASSERT_ERR(kn_graph_verify(g), KN_ERR_SHAPE);
    cr_assert(strstr(kn_last_error(), "flash_attn_bwd") && strstr(kn_last_error(), "not flash_attn's result"), "%s",
              kn_last_error());
    kn_graph_free(g);
}

/* ---------------------------------------------------------------- the pass on a GPT step */

static const kn_gpt_config cfg = {.vocab = 17, .context = 40, .layers = 3, .width = 16, .heads = 2};
enum { GB = 2, GT = 40 };

static int count_ops(const kn_graph *g, kn_op op) {
    int c = 0;
    for (int i = 0; i < g->nnodes; i++) c += g->nodes[i].op == op;
    return c;
}

static bool has_tt(const kn_graph *g) {
    for (int i = 0; i < g->nnodes; i++) {
        const kn_type *t = &g->nodes[i].type;
        if (t->ndim == 4 && t->shape[2] == GT && t->shape[3] == GT) return true;
    }
    return false;
}

static kn_graph *flashed(const kn_graph *g, kn_pass_report *rep) {
    kn_graph *c;
    KN_ASSERT_OK(kn_graph_copy(&c, g));
    KN_ASSERT_OK(kn_passes_run(c, "flash", rep));
    KN_ASSERT_OK(kn_graph_verify(c));
    return c;
}

KN_TEST(flash, pass_replaces_every_layer_and_keeps_loss_and_gradients, .timeout = 120) {
    kn_graph *g;
    KN_ASSERT_OK(kn_gpt_graph(&cfg, GB, GT, true, &g));
    kn_pass_report rep;
    kn_graph *c = flashed(g, &rep);
    cr_assert(rep.pass[0].nfired == 1 && !strcmp(rep.pass[0].rule[0], "flash_attn + flash_attn_bwd") &&
              rep.pass[0].count[0] == cfg.layers, "fired %d rules", rep.pass[0].nfired);
    cr_assert(count_ops(c, KN_OP_FLASH_ATTN) == cfg.layers && count_ops(c, KN_OP_FLASH_ATTN_BWD) == cfg.layers);
    cr_assert(count_ops(c, KN_OP_CAUSAL_SOFTMAX) == 0 && count_ops(c, KN_OP_CAUSAL_SOFTMAX_BWD) == 0);
    cr_assert(has_tt(g) && !has_tt(c), "a [B, H, T, T] value is left");
    /* the scopes stay: remat can still find the layers */
    for (int i = 0; i < c->nnodes; i++)
        if (c->nodes[i].op == KN_OP_FLASH_ATTN) cr_assert(c->nodes[i].scope >= 0);

    kn_interp *ia, *ib;
    KN_ASSERT_OK(kn_interp_new(&ia, g));
    KN_ASSERT_OK(kn_interp_new(&ib, c));
    bind_same_random(g, (kn_interp *const[]){ia, ib}, 2, 11, 1);
    KN_ASSERT_OK(kn_interp_run(ia));
    KN_ASSERT_OK(kn_interp_run(ib));
    cr_assert(g->noutputs == c->noutputs && g->noutputs > 1);
    for (int i = 0; i < g->noutputs; i++) {
        const kn_tensor *x = kn_interp_output(ia, i), *y = kn_interp_output(ib, i);
        int64_t n = kn_tensor_numel(x);
        cr_assert(n == kn_tensor_numel(y));
        double *a = malloc((size_t)n * 2 * sizeof *a);
        to_double(y, a);
        to_double(x, a + n);
        double e = rel_err(a, a + n, n);
        cr_assert(e <= (i == 0 ? 1e-6 : 1e-4), "output %d (%s): off by %.3g of its largest magnitude", i,
                  i == 0 ? "the loss" : "a gradient", e);
        free(a);
    }
    kn_interp_free(ia);
    kn_interp_free(ib);
    kn_graph_free(c);
    kn_graph_free(g);
}

KN_TEST(flash, pass_removes_the_t2_buffers_from_the_live_set_and_the_plan, .timeout = 120) {
    kn_graph *g;
    KN_ASSERT_OK(kn_gpt_graph(&cfg, GB, GT, true, &g));
    double before, after;
    KN_ASSERT_OK(kn_passes_live_bytes(g, NULL, &before));
    KN_ASSERT_OK(kn_passes_live_bytes(g, "flash", &after));
    /* each layer keeps y [B, H, T, D/H + 1] for its backward instead of its probabilities */
    const double tt = (double)GB * cfg.heads * GT * (GT - (cfg.width / cfg.heads + 1)) * 4;
    cr_assert(after + cfg.layers * tt <= before, "live set %.0f -> %.0f bytes: less than %d x %.0f saved", before,
              after, cfg.layers, tt);
    /* the compiled program's memory plan (generated C, flash steps as library calls) */
    double planned[2];
    for (int f = 0; f < 2; f++) {
        kn_program_opts o = {.passes = f ? "flash" : NULL, .mode = KN_PROGRAM_COMPILED};
        kn_program *p;
        KN_ASSERT_OK(kn_program_compile(&p, g, &o));
        kn_program_stats s = kn_program_get_stats(p);
        cr_assert(s.mode == KN_PROGRAM_COMPILED, "no C compiler?");
        planned[f] = s.mem_planned;
        kn_program_free(p);
    }
    cr_assert(planned[1] + cfg.layers * tt <= planned[0], "planned arena %.0f -> %.0f bytes", planned[0], planned[1]);
    kn_graph_free(g);
}

/* A group something else reads (here the probabilities are an output too) stays. */
KN_TEST(flash, pass_leaves_a_partial_pattern_alone) {
    const char *txt = "%0 = input {name=\"q\"} : f32[2,5,4]\n"
                      "%1 = matmul %0, %0 {tb=1} : f32[2,5,5]\n"
                      "%2 = causal_softmax %1 {scale=0.5} : f32[2,5,5]\n"
                      "%3 = matmul %2, %0 : f32[2,5,4]\n"
                      "output %3, %2\n";
    kn_graph *g;
    KN_ASSERT_OK(kn_graph_parse(txt, strlen(txt), &g));
    kn_pass_report rep;
    KN_ASSERT_OK(kn_passes_run(g, "flash", &rep));
    cr_assert(rep.pass[0].nfired == 0 && count_ops(g, KN_OP_FLASH_ATTN) == 0);
    g->noutputs = 1; /* now only o: the forward-only form fires */
    KN_ASSERT_OK(kn_passes_run(g, "flash", &rep));
    cr_assert(rep.pass[0].nfired == 1 && !strcmp(rep.pass[0].rule[0], "flash_attn (forward only)"));
    cr_assert(count_ops(g, KN_OP_FLASH_ATTN) == 1 && count_ops(g, KN_OP_CAUSAL_SOFTMAX) == 0);
    kn_graph_free(g);
    /* "all" does not run it */
    KN_ASSERT_OK(kn_graph_parse(txt, strlen(txt), &g));
    g->noutputs = 1;
    KN_ASSERT_OK(kn_passes_run(g, "all", &rep));
    cr_assert(count_ops(g, KN_OP_FLASH_ATTN) == 0);
    kn_graph_free(g);
}

/* The trainer with the pass: three AdamW steps, node by node and compiled, follow the run
 * without it (losses within 1e-5, parameters within 1e-4 absolute). */
KN_TEST(flash, trainer_steps_follow_the_materialized_run, .timeout = 120) {
    kn_test_train3_follows(&cfg, GB, GT, "flash", 1e-5, 1e-4);
}
