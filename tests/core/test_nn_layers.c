/* test_nn_layers.c — the layers against loops written out in double, the GPT's parameter
 * slab and initialization, eager == graph, and causality. */
#include <math.h>
#include <string.h>

#include "kiln/nn.h"
#include "kn_test.h"

static kn_tensor *randn(int ndim, const int64_t *shape, uint64_t seed, double scale) {
    kn_tensor *t;
    kn_rng r = kn_rng_new(seed);
    KN_ASSERT_OK(kn_tensor_randn(&t, KN_DT_F32, ndim, shape, &r));
    float *d = kn_tensor_data(t);
    for (int64_t i = 0; i < kn_tensor_numel(t); i++) d[i] = (float)(d[i] * scale);
    return t;
}

static const float *F(const kn_tensor *t) { return kn_tensor_data(t); }

KN_TEST(nn_layers, linear_matches_loops) {
    int64_t sx[2] = {3, 4}, sw[2] = {4, 5}, sb[1] = {5};
    kn_tensor *x = randn(2, sx, 1, 1), *w = randn(2, sw, 2, 1), *bias = randn(1, sb, 3, 1);
    kn_builder *b;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
    kn_val y = kn_nn_linear(b, kn_input(b, "x", x), kn_param(b, "w", w), kn_param(b, "b", bias));
    KN_ASSERT_OK(kn_builder_status(b));
    const float *Y = F(kn_val_tensor(b, y));
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 5; j++) {
            double s = F(bias)[j];
            for (int k = 0; k < 4; k++) s += (double)F(x)[i * 4 + k] * F(w)[k * 5 + j];
            KN_ASSERT_CLOSE(Y[i * 5 + j], s, 1e-5, 1e-5);
        }
    kn_builder_free(b);
    kn_tensor_free(x); kn_tensor_free(w); kn_tensor_free(bias);
}

static double gelu_ref(double x) { return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

KN_TEST(nn_layers, mlp_matches_loops) {
    enum { N = 3, D = 2, H = 8 };
    int64_t sx[2] = {N, D}, sf[2] = {D, H}, sbf[1] = {H}, sp[2] = {H, D}, sbp[1] = {D};
    kn_tensor *x = randn(2, sx, 4, 1), *wf = randn(2, sf, 5, 1), *bf = randn(1, sbf, 6, 1), *wp = randn(2, sp, 7, 1),
              *bp = randn(1, sbp, 8, 1);
    kn_builder *b;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
    kn_val y = kn_nn_mlp(b, kn_input(b, "x", x), kn_param(b, "wf", wf), kn_param(b, "bf", bf), kn_param(b, "wp", wp),
                         kn_param(b, "bp", bp));
    KN_ASSERT_OK(kn_builder_status(b));
    const float *Y = F(kn_val_tensor(b, y));
    for (int i = 0; i < N; i++) {
        double h[H];
        for (int j = 0; j < H; j++) {
            double s = F(bf)[j];
            for (int k = 0; k < D; k++) s += (double)F(x)[i * D + k] * F(wf)[k * H + j];
            h[j] = gelu_ref(s);
        }
        for (int j = 0; j < D; j++) {
            double s = F(bp)[j];
            for (int k = 0; k < H; k++) s += h[k] * F(wp)[k * D + j];
            KN_ASSERT_CLOSE(Y[i * D + j], s, 1e-5, 1e-5);
        }
    }
    kn_builder_free(b);
    kn_tensor_free(x); kn_tensor_free(wf); kn_tensor_free(bf); kn_tensor_free(wp); kn_tensor_free(bp);
}

/* Causal multi-head attention written out: B=2, T=3, D=4, H=2. */
KN_TEST(nn_layers, attention_matches_loops) {
    enum { B = 2, T = 3, D = 4, H = 2, HD = D / H };
    int64_t sx[2] = {B * T, D}, sq[2] = {D, 3 * D}, sbq[1] = {3 * D}, sp[2] = {D, D}, sbp[1] = {D};
    kn_tensor *x = randn(2, sx, 11, 1), *wq = randn(2, sq, 12, 0.5), *bq = randn(1, sbq, 13, 0.5),
              *wp = randn(2, sp, 14, 0.5), *bp = randn(1, sbp, 15, 0.5);
    kn_builder *b;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
    kn_val y = kn_nn_attention(b, kn_input(b, "x", x), B, T, H, kn_param(b, "wq", wq), kn_param(b, "bq", bq),
                               kn_param(b, "wp", wp), kn_param(b, "bp", bp));
    KN_ASSERT_OK(kn_builder_status(b));
    const float *Y = F(kn_val_tensor(b, y));
    double qkv[B * T][3 * D], att[B * T][D];
    for (int r = 0; r < B * T; r++)
        for (int j = 0; j < 3 * D; j++) {
            double s = F(bq)[j];
            for (int k = 0; k < D; k++) s += (double)F(x)[r * D + k] * F(wq)[k * 3 * D + j];
            qkv[r][j] = s;
        }
    for (int bb = 0; bb < B; bb++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                double sc[T], mx = -INFINITY, z = 0;
                for (int s = 0; s <= t; s++) {
                    sc[s] = 0;
                    for (int d = 0; d < HD; d++) sc[s] += qkv[bb * T + t][h * HD + d] * qkv[bb * T + s][D + h * HD + d];
                    sc[s] /= sqrt((double)HD);
                    if (sc[s] > mx) mx = sc[s];
                }
                for (int s = 0; s <= t; s++) z += exp(sc[s] - mx);
                for (int d = 0; d < HD; d++) {
                    double o = 0;
                    for (int s = 0; s <= t; s++) o += exp(sc[s] - mx) / z * qkv[bb * T + s][2 * D + h * HD + d];
                    att[bb * T + t][h * HD + d] = o;
                }
            }
    for (int r = 0; r < B * T; r++)
        for (int j = 0; j < D; j++) {
            double s = F(bp)[j];
            for (int k = 0; k < D; k++) s += att[r][k] * F(wp)[k * D + j];
            KN_ASSERT_CLOSE(Y[r * D + j], s, 1e-5, 1e-4);
        }
    /* a width that heads do not divide is a clear error, not a crash */
    kn_val bad = kn_nn_attention(b, kn_input(b, "x2", x), B, T, 3, kn_param(b, "wq2", wq), kn_param(b, "bq2", bq),
                                 kn_param(b, "wp2", wp), kn_param(b, "bp2", bp));
    cr_assert(!kn_val_ok(bad));
    cr_assert_eq(kn_builder_status(b), KN_ERR_SHAPE);
    cr_assert(strstr(kn_builder_error(b), "kn_nn_attention") != NULL, "%s", kn_builder_error(b));
    kn_builder_free(b);
    kn_tensor_free(x); kn_tensor_free(wq); kn_tensor_free(bq); kn_tensor_free(wp); kn_tensor_free(bp);
}

static const kn_gpt_config k_tiny = {.vocab = 11, .context = 8, .layers = 2, .width = 8, .heads = 2};

KN_TEST(nn_gpt, slab_layout) {
    kn_gpt g;
    KN_ASSERT_OK(kn_gpt_new(&g, &k_tiny));
    const int64_t V = 11, T = 8, D = 8, L = 2;
    int64_t mats = V * D + T * D + L * (D * 3 * D + D * D + D * 4 * D + 4 * D * D);
    int64_t vecs = L * (2 * D + 3 * D + D + 2 * D + 4 * D + D) + 2 * D;
    cr_assert_eq(g.p.count, 4 + 12 * L);
    cr_assert_eq(g.p.n_decay, mats, "matrices first: %lld", (long long)g.p.n_decay);
    cr_assert_eq(g.p.n, mats + vecs);
    int64_t at = 0;
    for (int i = 0; i < g.p.count; i++) {
        cr_assert_eq(g.p.info[i].offset, at, "%s is packed", g.p.info[i].name);
        cr_assert_eq(g.p.info[i].decay, at < g.p.n_decay, "%s decay flag", g.p.info[i].name);
        cr_assert_eq(kn_tensor_numel(g.p.views[i]), g.p.info[i].numel);
        cr_assert_eq(kn_tensor_data(g.p.views[i]), (void *)(g.p.data + at), "%s views the slab", g.p.info[i].name);
        at += g.p.info[i].numel;
    }
    cr_assert(kn_gpt_find(&g, "h.1.mlp.c_fc.weight") >= 0);
    cr_assert_eq(kn_gpt_find(&g, "nope"), -1);
    kn_gpt_free(&g);
    kn_gpt_config bad = k_tiny;
    bad.heads = 3;
    KN_ASSERT_ERR(kn_gpt_new(&g, &bad), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "multiple of heads 3") != NULL, "%s", kn_last_error());
    bad = k_tiny;
    bad.layers = 0;
    KN_ASSERT_ERR(kn_gpt_new(&g, &bad), KN_ERR_ARG);
}

static double stddev(const float *x, int64_t n) {
    double s = 0, ss = 0;
    for (int64_t i = 0; i < n; i++) { s += x[i]; ss += (double)x[i] * x[i]; }
    return sqrt(ss / n - (s / n) * (s / n));
}

KN_TEST(nn_gpt, gpt2_initialization) {
    kn_gpt_config c = {.vocab = 64, .context = 32, .layers = 4, .width = 64, .heads = 4};
    kn_gpt g, h;
    KN_ASSERT_OK(kn_gpt_new(&g, &c));
    KN_ASSERT_OK(kn_gpt_new(&h, &c));
    kn_gpt_init(&g, 5);
    kn_gpt_init(&h, 5);
    cr_assert(memcmp(g.p.data, h.p.data, (size_t)g.p.n * 4) == 0, "same seed, same weights");
    kn_gpt_init(&h, 6);
    cr_assert(memcmp(g.p.data, h.p.data, (size_t)g.p.n * 4) != 0, "another seed, other weights");
    for (int i = 0; i < g.p.count; i++) {
        const kn_param_info *q = &g.p.info[i];
        const float *w = g.p.data + q->offset;
        if (strstr(q->name, "c_proj.weight")) {
            KN_ASSERT_CLOSE(stddev(w, q->numel), 0.02 / sqrt(8.0), 0, 0.1);
        } else if (q->decay) {
            KN_ASSERT_CLOSE(stddev(w, q->numel), 0.02, 0, 0.1);
        } else {
            double want = strstr(q->name, "ln") && strstr(q->name, "weight") ? 1.0 : 0.0;
            for (int64_t k = 0; k < q->numel; k++) cr_assert_eq(w[k], (float)want, "%s[%lld]", q->name, (long long)k);
        }
    }
    kn_gpt_free(&g);
    kn_gpt_free(&h);
}

/* Forward of the tiny GPT on a fixed batch in one mode: logits copied out, loss. */
static void forward(const kn_gpt *g, kn_mode mode, const kn_tensor *x, const kn_tensor *y, float *logits, double *loss) {
    kn_builder *b;
    KN_ASSERT_OK(kn_builder_new(&b, mode));
    kn_val pv[64], lg, ls;
    kn_val xi = kn_input(b, "idx", x), yi = kn_input(b, "targets", y);
    KN_ASSERT_OK(kn_gpt_build(b, g, xi, yi, pv, &lg, &ls));
    if (mode == KN_MODE_EAGER) {
        memcpy(logits, kn_tensor_data(kn_val_tensor(b, lg)), (size_t)kn_type_numel(kn_val_type(b, lg)) * 4);
        KN_ASSERT_OK(kn_tensor_item(kn_val_tensor(b, ls), loss));
    } else {
        kn_builder_output(b, lg);
        kn_builder_output(b, ls);
        kn_graph *gr;
        KN_ASSERT_OK(kn_builder_finish(b, &gr));
        kn_interp *it;
        KN_ASSERT_OK(kn_interp_new(&it, gr));
        for (int i = 0; i < g->p.count; i++) KN_ASSERT_OK(kn_interp_bind(it, g->p.info[i].name, g->p.views[i]));
        KN_ASSERT_OK(kn_interp_bind(it, "idx", x));
        KN_ASSERT_OK(kn_interp_bind(it, "targets", y));
        KN_ASSERT_OK(kn_interp_run(it));
        const kn_tensor *o = kn_interp_output(it, 0);
        memcpy(logits, kn_tensor_data(o), (size_t)kn_tensor_numel(o) * 4);
        KN_ASSERT_OK(kn_tensor_item(kn_interp_output(it, 1), loss));
        kn_interp_free(it);
        kn_graph_free(gr);
    }
    kn_builder_free(b);
}

static void tiny_batch(kn_tensor **x, kn_tensor **y, int B, int T, int V) {
    int64_t s[2] = {B, T};
    KN_ASSERT_OK(kn_tensor_zeros(x, KN_DT_I32, 2, s));
    KN_ASSERT_OK(kn_tensor_zeros(y, KN_DT_I32, 2, s));
    int32_t *xd = kn_tensor_data(*x), *yd = kn_tensor_data(*y);
    for (int i = 0; i < B * T; i++) { xd[i] = (i * 5 + 1) % V; yd[i] = (i * 5 + 6) % V; }
}

KN_TEST(nn_gpt, eager_equals_graph_and_starts_at_log_vocab) {
    kn_gpt g;
    KN_ASSERT_OK(kn_gpt_new(&g, &k_tiny));
    kn_gpt_init(&g, 3);
    kn_tensor *x, *y;
    tiny_batch(&x, &y, 2, 8, 11);
    float le[2 * 8 * 11], lg[2 * 8 * 11];
    double a, c;
    forward(&g, KN_MODE_EAGER, x, y, le, &a);
    forward(&g, KN_MODE_GRAPH, x, y, lg, &c);
    cr_assert(memcmp(le, lg, sizeof le) == 0, "eager and graph logits agree bitwise");
    cr_assert(a == c, "losses %.17g and %.17g", a, c);
    KN_ASSERT_CLOSE(a, log(11.0), 0.05, 0); /* small init: nearly uniform predictions */
    kn_tensor_free(x); kn_tensor_free(y);
    kn_gpt_free(&g);
}

KN_TEST(nn_gpt, attention_is_causal) {
    kn_gpt g;
    KN_ASSERT_OK(kn_gpt_new(&g, &k_tiny));
    kn_gpt_init(&g, 4);
    /* make the weights large enough that every position matters */
    for (int64_t i = 0; i < g.p.n_decay; i++) g.p.data[i] *= 20;
    kn_tensor *x, *y;
    tiny_batch(&x, &y, 1, 8, 11);
    float a[8 * 11], b[8 * 11];
    double la, lb;
    forward(&g, KN_MODE_EAGER, x, y, a, &la);
    ((int32_t *)kn_tensor_data(x))[5] = 0; /* change position 5 (it was (25 + 1) % 11 = 4) */
    forward(&g, KN_MODE_EAGER, x, y, b, &lb);
    cr_assert(memcmp(a, b, 5 * 11 * sizeof(float)) == 0, "positions 0..4 cannot see position 5");
    cr_assert(memcmp(a + 5 * 11, b + 5 * 11, 11 * sizeof(float)) != 0, "position 5 sees itself");
    kn_tensor_free(x); kn_tensor_free(y);
    kn_gpt_free(&g);
}
