/* test_quant_calib.c — calibration and SmoothQuant (kiln/quant.h, core/ir/quant_calib.c,
 * core/nn/quant_eval.c): each observer's threshold on known distributions (min-max the
 * absmax, the percentile of a known array, MSE's threshold below the absmax when one outlier
 * stands far out and near it when none does); the static op against the dynamic per-tensor
 * op given the same threshold (the same numbers, bit for bit); SmoothQuant's factors and its
 * folding into a layernorm and the next product (the fp32 function unchanged to 1e-5); the
 * option parsing and refusals; the CUDA kernel against the CPU's (bit for bit; skipped without
 * a GPU); and, on a GPT trained here, the outlier injection that keeps
 * fp32's loss while the naive per-tensor w8a8 degrades far more than per-token and smoothed. */
#include <math.h>
#include <string.h>

#include "kn_test.h"
#include "cuda_test_util.h"
#include "kiln/data.h"
#include "kiln/nn.h"
#include "kiln/passes.h"
#include "kiln/program.h"
#include "kiln/quant.h"

static void fill(float *x, int64_t n, uint64_t seed, float a) {
    kn_rng r = kn_rng_new(seed);
    for (int64_t i = 0; i < n; i++) x[i] = a * (2.0f * (float)(kn_rng_u32(&r) >> 8) / (float)(1u << 24) - 1.0f);
}

static float observe(const float *x, int64_t n, kn_calib_observer obs, double pct) {
    static kn_calib_hist h;
    kn_calib_hist_init(&h, kn_calib_absmax(x, n, 0));
    kn_calib_hist_add(&h, x, n);
    float t = -1;
    KN_ASSERT_OK(kn_calib_threshold(&h, obs, pct, &t));
    return t;
}

KN_TEST(quant_calib, observers_on_known_distributions) {
    enum { N = 100000 };
    static float x[N];
    /* |x| = (i + 0.5) / N for i < N, signs alternating: uniform on (0, 1) */
    for (int i = 0; i < N; i++) x[i] = (i % 2 ? -1.0f : 1.0f) * ((float)i + 0.5f) / N;
    const float amax = kn_calib_absmax(x, N, 0), bin = amax / KN_CALIB_BINS;
    cr_assert_float_eq(observe(x, N, KN_CALIB_MINMAX, 0), amax, 0, "minmax is the absmax");
    cr_assert_float_eq(observe(x, N, KN_CALIB_PERCENTILE, 99.0), 0.99f, bin, "the 99th percentile of U(0, 1)");
    cr_assert_float_eq(observe(x, N, KN_CALIB_PERCENTILE, 50.0), 0.5f, bin, "the median of U(0, 1)");
    cr_assert_float_eq(observe(x, N, KN_CALIB_PERCENTILE, 100.0), amax, bin, "the 100th percentile is the absmax");
    /* no outlier: clipping costs more than it saves, MSE keeps (nearly) everything */
    float t = observe(x, N, KN_CALIB_MSE, 0);
    cr_assert(t > 0.95f * amax && t <= amax, "MSE on U(-1, 1): threshold %g, absmax %g", t, amax);
    /* one outlier 100 times the rest: min-max follows it, MSE clips it (not down to the bulk:
     * the rounding error of 1e5 values under a step near 1 / 127 of 100 weighs more) */
    x[17] = 100.0f;
    t = observe(x, N, KN_CALIB_MSE, 0);
    cr_assert(t < 0.9f * 100.0f && t > 1.0f, "MSE with one outlier: threshold %g (absmax 100)", t);
    cr_assert_float_eq(observe(x, N, KN_CALIB_MINMAX, 0), 100.0f, 0);
    cr_assert(observe(x, N, KN_CALIB_PERCENTILE, 99.99) < 1.1f, "the outlier is above the 99.99th percentile");
    /* non-finite values are not counted; an empty histogram gives 0 */
    float bad[3] = {NAN, INFINITY, 2.0f};
    cr_assert_float_eq(kn_calib_absmax(bad, 3, 0), 2.0f, 0);
    kn_calib_hist h;
    kn_calib_hist_init(&h, 2.0f);
    kn_calib_hist_add(&h, bad, 3);
    cr_assert_eq(h.total, 1);
    kn_calib_hist_init(&h, 0);
    KN_ASSERT_OK(kn_calib_threshold(&h, KN_CALIB_MSE, 0, &t));
    cr_assert_float_eq(t, 0.0f, 0);
    KN_ASSERT_ERR(kn_calib_threshold(&h, KN_CALIB_PERCENTILE, 0, &t), KN_ERR_ARG);
    /* channel maxima */
    float rows[6] = {1, -5, 2, -3, 4, 0.5f}, ch[3] = {0, 0, 0};
    kn_calib_channel_absmax(rows, 2, 3, ch);
    cr_assert(ch[0] == 3 && ch[1] == 5 && ch[2] == 2, "channel maxima %g %g %g", ch[0], ch[1], ch[2]);
}

KN_TEST(quant_calib, option_parsing) {
    kn_quant_arg q;
    KN_ASSERT_OK(kn_quantize_parse_arg("w8a8-static", &q));
    cr_assert(q.scheme == KN_QUANT_W8A8_STATIC && q.observer == KN_CALIB_MINMAX);
    KN_ASSERT_OK(kn_quantize_parse_arg("w8a8-static:percentile:99.9", &q));
    cr_assert(q.observer == KN_CALIB_PERCENTILE && q.percentile == 99.9);
    KN_ASSERT_OK(kn_quantize_parse_arg("w8a8-static:percentile", &q));
    cr_assert(q.percentile == KN_CALIB_PCT_DEFAULT);
    KN_ASSERT_OK(kn_quantize_parse_arg("w8a8-static:mse", &q));
    cr_assert(q.observer == KN_CALIB_MSE);
    KN_ASSERT_OK(kn_quantize_parse_arg("w8a8-smooth", &q));
    cr_assert(q.scheme == KN_QUANT_W8A8_SMOOTH && q.alpha == 0.5);
    KN_ASSERT_OK(kn_quantize_parse_arg("w8a8-smooth:0.8", &q));
    cr_assert(q.alpha == 0.8);
    const char *bad[] = {"w8a8-static:foo", "w8a8-static:percentile:0", "w8a8-static:percentile:101",
                         "w8a8-static:", "w8a8-smooth:1.5", "w8a8-smooth:-0.1", "w8a8-smooth:", "w8a8-smooth:x",
                         "w8a8-statics"};
    const char *word[] = {"unknown calibration observer 'foo'", "(0, 100]", "(0, 100]", "observer", "[0, 1]",
                          "[0, 1]", "[0, 1]", "[0, 1]", "unknown option"};
    for (int i = 0; i < 9; i++) {
        KN_ASSERT_ERR(kn_quantize_parse_arg(bad[i], &q), KN_ERR_ARG);
        cr_assert(strstr(kn_last_error(), word[i]), "%s: %s", bad[i], kn_last_error());
    }
    /* the pass list accepts the spelling (kiln eval checks lists with it) but the pass, with
     * no calibration data, refuses to run */
    KN_ASSERT_OK(kn_passes_check("quantize:w8a8-static:mse", NULL));
    kn_graph *g;
    kn_builder *b;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
    int64_t xs[2] = {3, 4}, ws[2] = {4, 5};
    kn_builder_output(b, kn_matmul(b, kn_input_typed(b, "x", KN_DT_F32, 2, xs), kn_param_typed(b, "w", KN_DT_F32, 2, ws)));
    KN_ASSERT_OK(kn_builder_finish(b, &g));
    kn_builder_free(b);
    KN_ASSERT_ERR(kn_passes_run(g, "quantize:w8a8-smooth", NULL), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "calibration"), "%s", kn_last_error());
    /* kn_quantize_static: an uncalibrated weight and a bad threshold are refused */
    const char *names[1] = {"v"};
    float amax[1] = {1.0f};
    KN_ASSERT_ERR(kn_quantize_static(g, names, amax, 1, NULL), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "weight w"), "%s", kn_last_error());
    names[0] = "w";
    amax[0] = -1;
    KN_ASSERT_ERR(kn_quantize_static(g, names, amax, 1, NULL), KN_ERR_ARG);
    amax[0] = 2.5f;
    KN_ASSERT_OK(kn_quantize_static(g, names, amax, 1, NULL));
    cr_assert_eq(g->nodes[g->outputs[0]].op, KN_OP_MATMUL_W8A8_STATIC);
    cr_assert_eq(g->nodes[g->outputs[0]].attrs.value, 2.5);
    KN_ASSERT_OK(kn_graph_verify(g));
    g->nodes[g->outputs[0]].attrs.value = NAN;
    KN_ASSERT_ERR(kn_graph_verify(g), KN_ERR_ARG);
    kn_graph_free(g);
}

/* The static op given the threshold the dynamic per-tensor op finds (x's absmax) makes the
 * same codes and the same product, bit for bit; a smaller threshold clips. */
KN_TEST(quant_calib, static_equals_per_tensor_with_its_threshold) {
    enum { M = 6, K = 40, N = 9 };
    for (int tb = 0; tb < 2; tb++) {
        int64_t xs[2] = {M, K}, ws[2] = {tb ? N : K, tb ? K : N};
        kn_tensor *x, *w, *dyn = NULL, *sta = NULL, *clip = NULL;
        KN_ASSERT_OK(kn_tensor_zeros(&x, KN_DT_F32, 2, xs));
        KN_ASSERT_OK(kn_tensor_zeros(&w, KN_DT_F32, 2, ws));
        fill(kn_tensor_data(x), M * K, 5 + (uint64_t)tb, 3.0f);
        fill(kn_tensor_data(w), N * K, 6, 0.5f);
        ((float *)kn_tensor_data(x))[7] = 11.0f; /* an outlier sets the per-tensor step */
        const kn_tensor *in[2] = {x, w};
        int64_t os[2] = {M, N};
        kn_node n = {.op = KN_OP_MATMUL_W8A8_TENSOR, .nin = 2, .in = {0, 1}, .attrs = kn_attrs_default()};
        n.attrs.tb = tb;
        n.type.dtype = KN_DT_F32;
        n.type.ndim = 2;
        memcpy(n.type.shape, os, sizeof os);
        KN_ASSERT_OK(kn_node_eval(&n, in, &dyn));
        n.op = KN_OP_MATMUL_W8A8_STATIC;
        n.attrs.value = kn_calib_absmax(kn_tensor_data(x), M * K, 0);
        KN_ASSERT_OK(kn_node_eval(&n, in, &sta));
        cr_assert(!memcmp(kn_tensor_data(dyn), kn_tensor_data(sta), M * N * sizeof(float)),
                  "tb %d: static with the absmax differs from w8a8_tensor", tb);
        n.attrs.value = 3.0; /* the outlier clips to 3: a different product */
        KN_ASSERT_OK(kn_node_eval(&n, in, &clip));
        cr_assert(memcmp(kn_tensor_data(dyn), kn_tensor_data(clip), M * N * sizeof(float)), "the threshold is used");
        int8_t q[M * K], qr[M * K];
        float s;
        cr_assert(kn_quant_static_i8(kn_tensor_data(x), M * K, 3.0f, q));
        cr_assert_eq(q[7], 127, "the outlier clips to 127");
        kn_quant_rows_i8(kn_tensor_data(x), 1, M * K, M * K, qr, &s);
        cr_assert(kn_quant_static_i8(kn_tensor_data(x), M * K, kn_calib_absmax(kn_tensor_data(x), M * K, 0), q));
        cr_assert(!memcmp(q, qr, sizeof q), "kn_quant_static_i8 with the absmax: kn_quant_rows_i8's codes");
        ((float *)kn_tensor_data(x))[3] = NAN;
        cr_assert(!kn_quant_static_i8(kn_tensor_data(x), M * K, 3.0f, q), "a NaN is reported");
        kn_tensor_free(x); kn_tensor_free(w); kn_tensor_free(dyn); kn_tensor_free(sta); kn_tensor_free(clip);
    }
}

/* y = layernorm(x; g, b) @ W (and @ V^T, tb), in fp32, through a program. */
static void ln_products(const float *x, const float *g, const float *b, const float *w, const float *v, float *y,
                        float *z) {
    enum { M = 10, K = 16, N = 7, N2 = 5 };
    kn_builder *bd;
    KN_ASSERT_OK(kn_builder_new(&bd, KN_MODE_GRAPH));
    int64_t xs[2] = {M, K}, ks[1] = {K}, ws[2] = {K, N}, vs[2] = {N2, K};
    kn_val h = kn_layernorm(bd, kn_input_typed(bd, "x", KN_DT_F32, 2, xs), kn_param_typed(bd, "g", KN_DT_F32, 1, ks),
                            kn_param_typed(bd, "b", KN_DT_F32, 1, ks), 1e-5);
    kn_builder_output(bd, kn_matmul(bd, h, kn_param_typed(bd, "w", KN_DT_F32, 2, ws)));
    kn_builder_output(bd, kn_matmul_t(bd, h, kn_param_typed(bd, "v", KN_DT_F32, 2, vs), false, true));
    kn_graph *gr;
    KN_ASSERT_OK(kn_builder_finish(bd, &gr));
    kn_builder_free(bd);
    kn_program *p;
    KN_ASSERT_OK(kn_program_compile(&p, gr, NULL));
    const char *names[5] = {"x", "g", "b", "w", "v"};
    const float *data[5] = {x, g, b, w, v};
    int nd[5] = {2, 1, 1, 2, 2};
    const int64_t *shapes[5] = {xs, ks, ks, ws, vs};
    kn_tensor *t[5];
    for (int i = 0; i < 5; i++) {
        KN_ASSERT_OK(kn_tensor_from_data(&t[i], KN_DT_F32, nd[i], shapes[i], data[i]));
        KN_ASSERT_OK(kn_program_bind(p, names[i], t[i]));
    }
    KN_ASSERT_OK(kn_program_run(p));
    memcpy(y, kn_tensor_data(kn_program_output(p, 0)), M * N * sizeof *y);
    memcpy(z, kn_tensor_data(kn_program_output(p, 1)), M * N2 * sizeof *z);
    for (int i = 0; i < 5; i++) kn_tensor_free(t[i]);
    kn_program_free(p);
    kn_graph_free(gr);
}

KN_TEST(quant_calib, smoothing_folds_without_changing_the_function) {
    enum { M = 10, K = 16, N = 7, N2 = 5 };
    float x[M * K], g[K], b[K], w[K * N], v[N2 * K], y0[M * N], z0[M * N2], y1[M * N], z1[M * N2];
    fill(x, M * K, 1, 2.0f);
    fill(g, K, 2, 1.0f);
    fill(b, K, 3, 0.3f);
    fill(w, K * N, 4, 0.5f);
    fill(v, N2 * K, 5, 0.5f);
    g[3] *= 40, b[3] *= 40, g[11] *= 25; /* outlier channels */
    ln_products(x, g, b, w, v, y0, z0);
    /* the factors from the channel maxima of x (as the layernorm's output has them: the
     * outlier channels' gains) and of both weights */
    float xmax[K], wmax[K] = {0}, s[K];
    for (int j = 0; j < K; j++) xmax[j] = fabsf(g[j]) * 3 + fabsf(b[j]);
    kn_smooth_weight_absmax(w, K, N, false, wmax);
    kn_smooth_weight_absmax(v, K, N2, true, wmax);
    KN_ASSERT_OK(kn_smooth_scales(xmax, wmax, K, 0.5, s));
    for (int j = 0; j < K; j++) /* alpha 0.5 balances the two ranges: xmax / s == wmax * s */
        KN_ASSERT_CLOSE(xmax[j] / s[j], wmax[j] * s[j], 1e-6, 1e-5);
    cr_assert(s[3] > s[0] * 3, "the outlier channel gets the larger factor: %g vs %g", s[3], s[0]);
    kn_smooth_fold_norm(g, b, K, s);
    kn_smooth_fold_weight(w, K, N, false, s);
    kn_smooth_fold_weight(v, K, N2, true, s);
    ln_products(x, g, b, w, v, y1, z1);
    for (int i = 0; i < M * N; i++) KN_ASSERT_CLOSE(y1[i], y0[i], 1e-5, 1e-5);
    for (int i = 0; i < M * N2; i++) KN_ASSERT_CLOSE(z1[i], z0[i], 1e-5, 1e-5);
    /* the edges: zeros give 1 (nothing to move), alpha outside [0, 1] is refused */
    float zx[2] = {0, 2}, zw[2] = {1, 0};
    KN_ASSERT_OK(kn_smooth_scales(zx, zw, 2, 0.5, s));
    cr_assert(s[0] == 1 && s[1] == 1);
    KN_ASSERT_ERR(kn_smooth_scales(zx, zw, 2, 1.5, s), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "alpha"), "%s", kn_last_error());
}

/* A small GPT trained here on the grammar corpus; outlier channels injected (fp32 unchanged),
 * then per-tensor w8a8 against per-token and smoothed. */
KN_TEST(quant_calib, outliers_break_per_tensor_not_smoothing, .timeout = 180) {
    char *text;
    size_t len;
    KN_ASSERT_OK(kn_corpus_generate(7, 60000, &text, &len));
    kn_tokenizer tok;
    KN_ASSERT_OK(kn_tokenizer_fit(&tok, (const uint8_t *)text, len));
    int32_t *ids = kn_malloc(len * sizeof *ids);
    KN_ASSERT_OK(kn_tokenizer_encode(&tok, (const uint8_t *)text, len, ids));
    kn_free(text);
    const int64_t n = (int64_t)len, ntrain = n - n / 10;
    kn_gpt_config cfg = {.vocab = tok.vocab_size, .context = 32, .layers = 2, .width = 48, .heads = 2};
    kn_gpt g;
    KN_ASSERT_OK(kn_gpt_new(&g, &cfg));
    kn_gpt_init(&g, 5);
    enum { B = 8, T = 32, STEPS = 150 };
    kn_optim_config oc = kn_optim_default();
    kn_trainer tr;
    KN_ASSERT_OK(kn_trainer_new(&tr, &g, B, T, &oc, 1.0));
    int32_t x[B * T], y[B * T];
    double loss = 0;
    for (int s = 0; s < STEPS; s++) {
        KN_ASSERT_OK(kn_batch_sample(ids, ntrain, B, T, 3, 0, s, x, y));
        KN_ASSERT_OK(kn_trainer_step(&tr, x, y, 3e-3, &loss, NULL));
    }
    kn_trainer_free(&tr);
    kn_quant_eval_opts q = {.calib = ids, .ncalib = ntrain, .calib_batches = 4};
    const int32_t *held = ids + ntrain;
    const int64_t nh = n - ntrain;
    double fp32, l[4];
    KN_ASSERT_OK(kn_gpt_heldout_loss_q(&g, "", &q, held, nh, B, T, 3, 4, &fp32));
    /* without outliers every calibrated scheme is within 2% */
    const char *cal[4] = {"quantize:w8a8-static:minmax", "quantize:w8a8-static:percentile", "quantize:w8a8-static:mse",
                          "quantize:w8a8-smooth"};
    for (int i = 0; i < 4; i++) {
        KN_ASSERT_OK(kn_gpt_heldout_loss_q(&g, cal[i], &q, held, nh, B, T, 3, 4, &l[i]));
        cr_assert(fabs(l[i] - fp32) <= 0.02 * fp32 && l[i] != fp32, "%s: %g vs fp32 %g", cal[i], l[i], fp32);
    }
    cr_assert(l[0] != l[1] && l[0] != l[2], "the observers choose their own thresholds: minmax %g, percentile %g, "
              "mse %g", l[0], l[1], l[2]);
    cr_assert(strstr(q.smooth_note, "2 of"), "one product per block is smoothed: %s", q.smooth_note);
    q.outliers = 300;
    double fo, tensor, token, smooth;
    KN_ASSERT_OK(kn_gpt_heldout_loss_q(&g, "", &q, held, nh, B, T, 3, 4, &fo));
    cr_assert(fabs(fo - fp32) <= 1e-4 * fp32, "the injection keeps fp32: %g vs %g", fo, fp32);
    cr_assert(strstr(q.outlier_note, "2 layernorm"), "%s", q.outlier_note);
    KN_ASSERT_OK(kn_gpt_heldout_loss_q(&g, "quantize:w8a8-tensor", &q, held, nh, B, T, 3, 4, &tensor));
    KN_ASSERT_OK(kn_gpt_heldout_loss_q(&g, "quantize:w8a8", &q, held, nh, B, T, 3, 4, &token));
    KN_ASSERT_OK(kn_gpt_heldout_loss_q(&g, "quantize:w8a8-smooth", &q, held, nh, B, T, 3, 4, &smooth));
    cr_assert(fabs(smooth - fp32) <= 0.02 * fp32, "smoothed %g vs fp32 %g", smooth, fp32);
    cr_assert(tensor - fp32 > 0.05 * fp32, "naive per-tensor %g should degrade (fp32 %g, per-token %g, smoothed %g)",
              tensor, fp32, token, smooth);
    cr_assert(tensor - fp32 > 2 * (token - fp32), "per-token %g should lose far less than per-tensor %g", token,
              tensor);
    /* refusals: the calibrated schemes without calibration data, no batches, a bad factor */
    KN_ASSERT_ERR(kn_gpt_heldout_loss(&g, "quantize:w8a8-smooth", held, nh, B, T, 3, 1, &l[0]), KN_ERR_ARG);
    q.calib_batches = 0;
    KN_ASSERT_ERR(kn_gpt_heldout_loss_q(&g, "quantize:w8a8-static", &q, held, nh, B, T, 3, 1, &l[0]), KN_ERR_ARG);
    q.calib_batches = 1;
    q.outliers = 0.5;
    KN_ASSERT_ERR(kn_gpt_heldout_loss_q(&g, "", &q, held, nh, B, T, 3, 1, &l[0]), KN_ERR_ARG);
    kn_free(ids);
    kn_gpt_free(&g);
}

/* The CUDA kernel (core/runtime/cuda_quant_static.cu) against the CPU's: the same codes, int32
 * sums and epilogue, so the same numbers; K a multiple of 4 (__dp4a) and not, tb on and off, a
 * threshold that clips, and a NaN in x. */
KN_TEST(quant_calib, cuda_matches_cpu) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(23);
    const int64_t shapes[3][3] = {{5, 64, 48}, {3, 37, 11}, {64, 768, 96}};
    for (int si = 0; si < 3; si++)
        for (int tb = 0; tb < 2; tb++)
            for (int v = 0; v < 3; v++) {
                const int64_t m = shapes[si][0], k = shapes[si][1], nn = shapes[si][2];
                int64_t xs[2] = {m, k}, ws[2] = {tb ? nn : k, tb ? k : nn};
                kn_tensor *host[2] = {randn(&r, KN_DT_F32, 2, xs), randn(&r, KN_DT_F32, 2, ws)}, *d[2], *want = NULL;
                if (v == 2) ((float *)kn_tensor_data(host[0]))[1] = NAN;
                kn_node n = {.op = KN_OP_MATMUL_W8A8_STATIC, .nin = 2, .in = {0, 1}, .attrs = kn_attrs_default()};
                n.attrs.tb = tb;
                n.attrs.value = v == 1 ? 1.0 : 4.0;
                gpu_operands(&n, 2, host, NULL, d);
                KN_ASSERT_OK(kn_node_eval(&n, (const kn_tensor *const *)host, &want));
                kn_tensor *got = on_gpu(&n, d);
                compare(&n, got, want, TOL_EXACT);
                kn_tensor_free(got);
                kn_tensor_free(want);
                for (int i = 0; i < 2; i++) { kn_tensor_free(host[i]); kn_tensor_free(d[i]); }
            }
}
