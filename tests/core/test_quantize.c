/* test_quantize.c — INT8 post-training quantization (kiln/quant.h): the quantizers' error
 * bound, the int8 and weight-only products against an f64 reference of the same codes, the
 * pass `quantize` on a small graph (what it rewrites, what it leaves, the result against the
 * f32 program), its option errors, the held-out loss of a GPT trained here (w8 within 0.5% of
 * fp32, w8a8 within 2%), and the CUDA kernels against the CPU's (skipped without a GPU).
 * The int8 product's every CPU path this machine can run (core/ir/gemm_i8.c: generic, avx2,
 * avxvnni, avx512vnni) must give bitwise the scalar reference's floats (exact int32 sums,
 * then kn_i8_dequant's order) on shapes off every block size, k = 1, a large k whose
 * shifted (vpdpbusd) lanes wrap, NaN scales; and cuBLASLt's int8 product on a GPU the CPU's. */
#include <math.h>
#include <stdlib.h>
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

KN_TEST(quantize, round_trip_within_half_a_step) {
    enum { R = 9, C = 33 };
    float x[R * C], s[R];
    int8_t q[R * C];
    fill(x, R * C, 1, 3.0f);
    for (int j = 0; j < C; j++) x[4 * C + j] = 0; /* a row of zeros */
    x[2 * C + 5] = -40.0f;                        /* an outlier: its row gets a coarse scale */
    kn_quant_rows_i8(x, R, C, C, q, s);
    for (int i = 0; i < R; i++) {
        int qmax = 0;
        for (int j = 0; j < C; j++) {
            cr_assert(q[i * C + j] >= -127 && q[i * C + j] <= 127);
            cr_assert(fabsf(x[i * C + j] - q[i * C + j] * s[i]) <= 0.5f * s[i] * (1 + 1e-5f) + 1e-30f,
                      "row %d col %d: %g vs %d * %g", i, j, x[i * C + j], q[i * C + j], s[i]);
            if (abs(q[i * C + j]) > qmax) qmax = abs(q[i * C + j]);
        }
        cr_assert_eq(qmax, i == 4 ? 0 : 127, "row %d: the absmax maps to 127 (got %d)", i, qmax);
    }
    cr_assert_eq(s[4], 0.0f);
    cr_assert_float_eq(s[2], 40.0f / 127, 1e-6);
    /* columns of w [k, n] into [n][k]: the same codes as the rows of its transpose */
    float w[C * R], wt[R * C], sc[R], sr[R];
    int8_t qc[R * C], qr[R * C];
    fill(w, C * R, 2, 0.2f);
    for (int i = 0; i < C; i++)
        for (int j = 0; j < R; j++) wt[j * C + i] = w[i * R + j];
    kn_quant_cols_i8(w, C, R, qc, sc);
    kn_quant_rows_i8(wt, R, C, C, qr, sr);
    cr_assert(!memcmp(qc, qr, sizeof qc) && !memcmp(sc, sr, sizeof sc));
    /* a non-finite row: NaN scale, never silent codes */
    x[7 * C + 3] = INFINITY;
    kn_quant_rows_i8(x, R, C, C, q, s);
    cr_assert(isnan(s[7]));
}

/* The int8 product is the exact integer sum times the scales: compare with f64. */
KN_TEST(quantize, int8_gemm_matches_f64) {
    enum { M = 7, N = 13, K = 37 };
    float a[M * K], b[N * K], sa[M], sb[N], c[M * N], cw[M * N];
    int8_t qa[M * K], qb[N * K];
    fill(a, M * K, 3, 1.0f);
    fill(b, N * K, 4, 0.5f);
    kn_quant_rows_i8(a, M, K, K, qa, sa);
    kn_quant_rows_i8(b, N, K, K, qb, sb);
    kn_gemm_i8(qa, qb, sa, sb, c, M, N, K);
    kn_gemm_w8(a, qb, sb, cw, M, N, K);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0, sw = 0;
            for (int t = 0; t < K; t++) {
                s += (double)qa[i * K + t] * qb[j * K + t];
                sw += (double)a[i * K + t] * qb[j * K + t];
            }
            KN_ASSERT_CLOSE(c[i * N + j], s * sa[i] * sb[j], 1e-7, 1e-6);
            KN_ASSERT_CLOSE(cw[i * N + j], sw * sb[j], 1e-6, 1e-5);
        }
    /* extreme codes: 127 * 127 * K summed in int32 without overflow */
    enum { K2 = 4096 };
    static int8_t big[2 * K2];
    for (int t = 0; t < 2 * K2; t++) big[t] = t < K2 ? 127 : -127;
    float one[2] = {1, 1}, out[4];
    kn_gemm_i8(big, big, one, one, out, 2, 2, K2);
    cr_assert_float_eq(out[1], -127.0f * 127.0f * K2, 1);
}

/* The scalar reference of kn_gemm_i8: int32 sums in order, then the epilogue's arithmetic. */
static void gemm_i8_ref(const int8_t *a, const int8_t *b, const float *sa, const float *sb, float *c, int64_t m,
                        int64_t n, int64_t k) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            int32_t acc = 0;
            for (int64_t t = 0; t < k; t++) acc += (int32_t)a[i * k + t] * (int32_t)b[j * k + t];
            c[i * n + j] = (float)acc * (sa ? sa[i] : 1.0f) * sb[j];
        }
}

static void codes(int8_t *q, int64_t n, uint64_t seed) {
    kn_rng r = kn_rng_new(seed);
    for (int64_t i = 0; i < n; i++) q[i] = (int8_t)((int)(kn_rng_u32(&r) % 255) - 127); /* [-127, 127] */
}

/* Bitwise equal, NaN equal to NaN. */
static void assert_same(const float *got, const float *want, int64_t n, const char *what, int64_t m, int64_t nn,
                        int64_t k) {
    for (int64_t e = 0; e < n; e++)
        cr_assert(got[e] == want[e] || (isnan(got[e]) && isnan(want[e])),
                  "%s, %lld x %lld x %lld: element %lld is %.9g, the reference %.9g", what, (long long)m, (long long)nn,
                  (long long)k, (long long)e, got[e], want[e]);
}

/* Every path this CPU runs, through kn_gemm_i8 and kn_gemm_i8_packed, on shapes that are not
 * multiples of the 8-row / 32-column tiles or of the 4-byte groups, with few rows (the
 * panel-parallel split) and many (the row-block split, threaded), k = 1 and k large. */
KN_TEST(quantize, int8_gemm_every_path_is_the_scalar_reference) {
    const char *paths[8];
    const int np = kn_gemm_i8_paths(paths, 8);
    cr_assert(np >= 1 && !strcmp(paths[0], "generic"), "the generic path always runs");
    const int64_t shapes[][3] = {{1, 1, 1},   {1, 3, 1},    {2, 33, 1},   {7, 13, 37},  {8, 32, 4},   {9, 33, 5},
                                 {17, 70, 129}, {3, 5, 1001}, {70, 45, 67}, {130, 97, 6}, {64, 64, 64}, {1, 100, 2051}};
    const int ns = (int)(sizeof shapes / sizeof shapes[0]);
    for (int si = 0; si < ns; si++) {
        const int64_t m = shapes[si][0], n = shapes[si][1], k = shapes[si][2];
        int8_t *a = malloc((size_t)(m * k)), *b = malloc((size_t)(n * k));
        float *sa = malloc((size_t)m * 4), *sb = malloc((size_t)n * 4), *want = malloc((size_t)(m * n) * 4),
              *got = malloc((size_t)(m * n) * 4);
        cr_assert(a && b && sa && sb && want && got);
        codes(a, m * k, 100 + si);
        codes(b, n * k, 200 + si);
        fill(sa, m, 300 + si, 0.01f);
        fill(sb, n, 400 + si, 0.02f);
        if (m > 2) a[k] = 127, a[k + k - 1] = -127, b[0] = -127; /* the extreme codes */
        kn_i8_weight w;
        KN_ASSERT_OK(kn_i8_weight_pack(b, n, k, &w));
        for (int p = 0; p < np; p++) {
            KN_ASSERT_OK(kn_gemm_i8_set_path(paths[p]));
            cr_assert_str_eq(kn_gemm_i8_path(), paths[p]);
            for (int with_sa = 0; with_sa < 2; with_sa++) {
                gemm_i8_ref(a, b, with_sa ? sa : NULL, sb, want, m, n, k);
                memset(got, 0xff, (size_t)(m * n) * 4); /* NaN: an element not written fails */
                KN_ASSERT_OK(kn_gemm_i8(a, b, with_sa ? sa : NULL, sb, got, m, n, k));
                assert_same(got, want, m * n, paths[p], m, n, k);
                memset(got, 0xff, (size_t)(m * n) * 4);
                KN_ASSERT_OK(kn_gemm_i8_packed(a, &w, with_sa ? sa : NULL, sb, got, m));
                assert_same(got, want, m * n, paths[p], m, n, k);
            }
        }
        /* kn_gemm_w8 (f32 activations): bitwise the same on every path (generic: dot_w8;
         * the others: its lanes on 256-bit vectors) */
        float *x = malloc((size_t)(m * k) * 4), *w8ref = malloc((size_t)(m * n) * 4);
        cr_assert(x && w8ref);
        fill(x, m * k, 500 + si, 2.0f);
        for (int p = 0; p < np; p++) {
            KN_ASSERT_OK(kn_gemm_i8_set_path(paths[p]));
            memset(got, 0xff, (size_t)(m * n) * 4);
            kn_gemm_w8(x, b, sb, got, m, n, k);
            if (p == 0) memcpy(w8ref, got, (size_t)(m * n) * 4);
            else assert_same(got, w8ref, m * n, paths[p], m, n, k);
        }
        for (int64_t i = 0; i < m; i++) /* and the generic one against f64 */
            for (int64_t j = 0; j < n; j++) {
                double d = 0, mag = 0;
                for (int64_t t = 0; t < k; t++) d += (double)x[i * k + t] * b[j * k + t], mag += fabs((double)x[i * k + t] * b[j * k + t]);
                cr_assert(fabs(w8ref[i * n + j] - d * sb[j]) <= 1e-6 * mag * fabs(sb[j]) + 1e-30, "w8 (%lld, %lld)",
                          (long long)i, (long long)j);
            }
        free(x), free(w8ref);
        KN_ASSERT_OK(kn_gemm_i8_set_path("auto"));
        kn_i8_weight_free(&w);
        free(a), free(b), free(sa), free(sb), free(want), free(got);
    }
}

/* |sum| up to 127 * 127 * k fits int32 for k <= 133,000 (quant.h); the vpdpbusd paths sum
 * (a + 128) * b, which passes 2^31 long before: their lanes wrap and the correction must
 * bring the exact sum back. k = 70,001 (odd: a padded group). */
KN_TEST(quantize, int8_gemm_large_k_wraps_back_exactly) {
    enum { K = 70001 };
    static int8_t a[2 * K], b[3 * K];
    for (int t = 0; t < K; t++) {
        a[t] = 127, a[K + t] = -127;
        b[t] = 127, b[K + t] = -127, b[2 * K + t] = (int8_t)(t % 2 ? 127 : -127);
    }
    const float one[3] = {1, 1, 1};
    float want[6], got[6];
    gemm_i8_ref(a, b, one, one, want, 2, 3, K);
    cr_assert_eq(want[1], -want[0]); /* 127 * 127 * K and its negation */
    const char *paths[8];
    const int np = kn_gemm_i8_paths(paths, 8);
    for (int p = 0; p < np; p++) {
        KN_ASSERT_OK(kn_gemm_i8_set_path(paths[p]));
        KN_ASSERT_OK(kn_gemm_i8(a, b, one, one, got, 2, 3, K));
        assert_same(got, want, 6, paths[p], 2, 3, K);
    }
    KN_ASSERT_OK(kn_gemm_i8_set_path("auto"));
}

/* quant.h: a non-finite input row gets a NaN scale, and the product reads NaN there (as the
 * f32 product would): a NaN scale of a row or a column makes that row or column NaN on
 * every path, and nothing else. */
KN_TEST(quantize, int8_gemm_nan_scales_propagate) {
    enum { M = 11, N = 37, K = 19 };
    int8_t a[M * K], b[N * K];
    float sa[M], sb[N], want[M * N], got[M * N];
    codes(a, M * K, 7);
    codes(b, N * K, 8);
    fill(sa, M, 9, 1.0f);
    fill(sb, N, 10, 1.0f);
    sa[3] = NAN, sb[33] = NAN;
    gemm_i8_ref(a, b, sa, sb, want, M, N, K);
    const char *paths[8];
    const int np = kn_gemm_i8_paths(paths, 8);
    for (int p = 0; p < np; p++) {
        KN_ASSERT_OK(kn_gemm_i8_set_path(paths[p]));
        KN_ASSERT_OK(kn_gemm_i8(a, b, sa, sb, got, M, N, K));
        assert_same(got, want, M * N, paths[p], M, N, K);
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) cr_assert_eq(isnan(got[i * N + j]), i == 3 || j == 33);
    }
    KN_ASSERT_OK(kn_gemm_i8_set_path("auto"));
}

KN_TEST(quantize, int8_gemm_path_errors) {
    KN_ASSERT_ERR(kn_gemm_i8_set_path("avx9000"), KN_ERR_ARG);
    KN_ASSERT_OK(kn_gemm_i8_set_path("generic"));
    cr_assert_str_eq(kn_gemm_i8_path(), "generic");
    KN_ASSERT_OK(kn_gemm_i8_set_path(NULL));
    cr_assert_str_neq(kn_gemm_i8_path(), "");
    kn_i8_weight w;
    KN_ASSERT_ERR(kn_i8_weight_pack(NULL, 3, 4, &w), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_gemm_i8_packed(NULL, NULL, NULL, NULL, NULL, 1), KN_ERR_ARG);
}

/* x [2, 5, 16] @ W [16, 12] (param), then @ V^T (V [8, 12] param, tb), plus a bias param, and
 * a product of two activations: two products become quantized, the rest stays. */
static kn_graph *small_graph(void) {
    kn_builder *b;
    cr_assert(kn_builder_new(&b, KN_MODE_GRAPH) == KN_OK);
    int64_t xs[3] = {2, 5, 16}, ws[2] = {16, 12}, vs[2] = {8, 12}, bs[1] = {8}, ys[3] = {2, 8, 5};
    kn_val x = kn_input_typed(b, "x", KN_DT_F32, 3, xs), y = kn_input_typed(b, "y", KN_DT_F32, 3, ys);
    kn_val w = kn_param_typed(b, "w", KN_DT_F32, 2, ws), v = kn_param_typed(b, "v", KN_DT_F32, 2, vs);
    kn_val bias = kn_param_typed(b, "bias", KN_DT_F32, 1, bs);
    kn_val h = kn_add(b, kn_matmul_t(b, kn_matmul(b, x, w), v, false, true), bias); /* [2, 5, 8] */
    kn_builder_output(b, kn_matmul(b, h, y));                                       /* [2, 5, 5] */
    kn_graph *g = NULL;
    cr_assert(kn_builder_finish(b, &g) == KN_OK, "%s", kn_builder_error(b));
    kn_builder_free(b);
    return g;
}

static int count_op(const kn_graph *g, kn_op op) {
    int c = 0;
    for (int i = 0; i < g->nnodes; i++) c += g->nodes[i].op == op;
    return c;
}

static void run_small(const char *passes, float *out) {
    kn_graph *g = small_graph();
    kn_program *p = NULL;
    kn_program_opts po = {.passes = passes};
    KN_ASSERT_OK(kn_program_compile(&p, g, &po));
    const char *names[5] = {"x", "y", "w", "v", "bias"};
    int64_t shapes[5][3] = {{2, 5, 16}, {2, 8, 5}, {16, 12}, {8, 12}, {8}};
    int nd[5] = {3, 3, 2, 2, 1};
    kn_tensor *t[5];
    for (int i = 0; i < 5; i++) {
        KN_ASSERT_OK(kn_tensor_zeros(&t[i], KN_DT_F32, nd[i], shapes[i]));
        fill(kn_tensor_data(t[i]), kn_tensor_numel(t[i]), 10 + (uint64_t)i, i == 0 ? 2.0f : 0.5f);
        KN_ASSERT_OK(kn_program_bind(p, names[i], t[i]));
    }
    KN_ASSERT_OK(kn_program_run(p));
    memcpy(out, kn_tensor_data(kn_program_output(p, 0)), 50 * sizeof *out);
    for (int i = 0; i < 5; i++) kn_tensor_free(t[i]);
    kn_program_free(p);
    kn_graph_free(g);
}

static double rel_err(const float *a, const float *ref, int n) {
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
        num += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]);
        den += (double)ref[i] * ref[i];
    }
    return sqrt(num / den);
}

KN_TEST(quantize, pass_rewrites_weight_products_only) {
    const char *opts[2] = {"quantize:w8", "quantize:w8a8"};
    kn_op ops[2] = {KN_OP_MATMUL_W8, KN_OP_MATMUL_W8A8};
    for (int k = 0; k < 2; k++) {
        kn_graph *g = small_graph();
        int before = g->nnodes, mm = count_op(g, KN_OP_MATMUL);
        kn_pass_report rep;
        KN_ASSERT_OK(kn_passes_run(g, opts[k], &rep));
        cr_assert_eq(g->nnodes, before, "the rewrite is in place");
        cr_assert_eq(count_op(g, ops[k]), 2, "%s: the two products of a weight", opts[k]);
        cr_assert_eq(count_op(g, KN_OP_MATMUL), mm - 2, "the product of two activations stays");
        cr_assert_eq(kn_pass_stats_total(&rep.pass[0]), 2);
        KN_ASSERT_OK(kn_graph_verify(g));
        kn_graph_free(g);
    }
    float ref[50], w8[50], w8a8[50];
    run_small(NULL, ref);
    run_small("quantize:w8", w8);
    run_small("quantize:w8a8", w8a8);
    double e8 = rel_err(w8, ref, 50), e88 = rel_err(w8a8, ref, 50);
    cr_assert(e8 > 0 && e8 < 1e-2, "w8 relative error %g", e8);
    cr_assert(e88 > 0 && e88 < 2e-2, "w8a8 relative error %g", e88);
}

KN_TEST(quantize, pass_options_and_no_ops) {
    kn_graph *g = small_graph();
    KN_ASSERT_ERR(kn_passes_run(g, "quantize:w4", NULL), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "unknown option 'w4'") && strstr(kn_last_error(), "w8a8"), "%s", kn_last_error());
    KN_ASSERT_ERR(kn_passes_run(g, "quantize", NULL), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "quantize:w8"), "%s", kn_last_error());
    cr_assert_eq(count_op(g, KN_OP_MATMUL_W8) + count_op(g, KN_OP_MATMUL_W8A8), 0, "nothing ran");
    kn_graph_free(g);
    /* a graph whose only parameter is read by an add: nothing to quantize, the same graph */
    kn_builder *b;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
    int64_t s[2] = {3, 4};
    kn_builder_output(b, kn_add(b, kn_input_typed(b, "x", KN_DT_F32, 2, s), kn_param_typed(b, "p", KN_DT_F32, 2, s)));
    KN_ASSERT_OK(kn_builder_finish(b, &g));
    kn_builder_free(b);
    kn_pass_report rep;
    KN_ASSERT_OK(kn_passes_run(g, "quantize:w8a8", &rep));
    cr_assert_eq(kn_pass_stats_total(&rep.pass[0]), 0);
    cr_assert_eq(g->nodes[g->outputs[0]].op, KN_OP_ADD);
    kn_graph_free(g);
}

/* A small GPT trained here on the bundled grammar corpus, then evaluated on its held-out
 * tenth under each program. */
KN_TEST(quantize, trained_gpt_heldout_loss, .timeout = 120) {
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
    double l[4];
    const char *lists[4] = {"", "quantize:w8", "quantize:w8a8", "autocast:bf16"};
    for (int v = 0; v < 4; v++)
        KN_ASSERT_OK(kn_gpt_heldout_loss(&g, lists[v], ids + ntrain, n - ntrain, B, T, 3, 4, &l[v]));
    cr_assert(l[0] < 2.2, "the model learned something: held-out loss %g", l[0]);
    cr_assert(l[1] != l[0] && l[2] != l[1], "quantization changed the numbers: %g %g %g", l[0], l[1], l[2]);
    cr_assert(fabs(l[1] - l[0]) <= 0.005 * l[0], "w8 %g vs fp32 %g: more than 0.5%%", l[1], l[0]);
    cr_assert(fabs(l[2] - l[0]) <= 0.02 * l[0], "w8a8 %g vs fp32 %g: more than 2%%", l[2], l[0]);
    cr_assert(fabs(l[3] - l[0]) <= 0.02 * l[0], "bf16 %g vs fp32 %g", l[3], l[0]);
    KN_ASSERT_ERR(kn_gpt_heldout_loss(&g, "quantize:w3", ids + ntrain, n - ntrain, B, T, 3, 1, &l[0]), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_gpt_heldout_loss(&g, "", ids + ntrain, T, B, T, 3, 1, &l[0]), KN_ERR_ARG);
    kn_free(ids);
    kn_gpt_free(&g);
}

/* The CUDA kernels (core/runtime/cuda_quant.cu) against the CPU's: the same codes and int32
 * sums, so w8a8 and w8a8_tensor agree to the last bits of the epilogue and w8 to f32
 * rounding; shapes with K a multiple of 4 (__dp4a) and not, tb on and off. */
KN_TEST(quantize, cuda_matches_cpu) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(21);
    const kn_op ops[3] = {KN_OP_MATMUL_W8, KN_OP_MATMUL_W8A8, KN_OP_MATMUL_W8A8_TENSOR};
    const int64_t shapes[4][3] = {{5, 64, 48}, {3, 37, 11}, {64, 768, 96}, {1, 8, 3}};
    for (int si = 0; si < 4; si++)
        for (int tb = 0; tb < 2; tb++)
            for (int oi = 0; oi < 3; oi++) {
                const int64_t m = shapes[si][0], k = shapes[si][1], nn = shapes[si][2];
                int64_t xs[2] = {m, k}, ws[2] = {tb ? nn : k, tb ? k : nn};
                kn_tensor *host[2] = {randn(&r, KN_DT_F32, 2, xs), randn(&r, KN_DT_F32, 2, ws)}, *d[2], *want = NULL;
                kn_node n = node(ops[oi]);
                n.attrs.tb = tb;
                gpu_operands(&n, 2, host, NULL, d);
                KN_ASSERT_OK(kn_node_eval(&n, (const kn_tensor *const *)host, &want));
                kn_tensor *got = on_gpu(&n, d);
                compare(&n, got, want, TOL_REDUCE);
                kn_tensor_free(got);
                kn_tensor_free(want);
                for (int i = 0; i < 2; i++) { kn_tensor_free(host[i]); kn_tensor_free(d[i]); }
            }
}

/* matmul_w8a8 on a GPU is the CPU's bit for bit (exact int32 sums, the same epilogue order)
 * through cuBLASLt's int8 product (n and k multiples of 4) and through the dp4a kernel
 * (other shapes, and KILN_I8_LT=0 for all), tb on and off; with KILN_I8_FUSED=1 (cuBLASLt
 * applying the scales, where it offers that for int8) within f32 rounding of it. */
KN_TEST(quantize, cuda_w8a8_is_the_cpu_bit_for_bit) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(34);
    const int64_t shapes[6][3] = {{5, 64, 48}, {3, 37, 11}, {64, 768, 96}, {1, 8, 4}, {200, 768, 3072}, {33, 20, 36}};
    for (int mode = 0; mode < 3; mode++) { /* cuBLASLt, dp4a only, fused scales */
        setenv("KILN_I8_LT", mode == 1 ? "0" : "1", 1);
        setenv("KILN_I8_FUSED", mode == 2 ? "1" : "0", 1);
        for (int si = 0; si < 6; si++)
            for (int tb = 0; tb < 2; tb++)
                for (int pt = 0; pt < 2; pt++) {
                    const int64_t m = shapes[si][0], k = shapes[si][1], nn = shapes[si][2];
                    int64_t xs[2] = {m, k}, ws[2] = {tb ? nn : k, tb ? k : nn};
                    kn_tensor *host[2] = {randn(&r, KN_DT_F32, 2, xs), randn(&r, KN_DT_F32, 2, ws)}, *d[2], *want = NULL;
                    if (si == 0) /* a row too small for 127 / absmax: scale 0 and codes 0 on both */
                        for (int64_t j = 0; j < k; j++) ((float *)kn_tensor_data(host[0]))[k + j] *= 1e-38f;
                    kn_node n = node(pt ? KN_OP_MATMUL_W8A8_TENSOR : KN_OP_MATMUL_W8A8);
                    n.attrs.tb = tb;
                    gpu_operands(&n, 2, host, NULL, d);
                    KN_ASSERT_OK(kn_node_eval(&n, (const kn_tensor *const *)host, &want));
                    kn_tensor *got = on_gpu(&n, d);
                    compare(&n, got, want, mode == 2 ? TOL_ELEM : TOL_EXACT);
                    kn_tensor_free(got);
                    kn_tensor_free(want);
                    for (int i = 0; i < 2; i++) { kn_tensor_free(host[i]); kn_tensor_free(d[i]); }
                }
    }
    unsetenv("KILN_I8_LT");
    unsetenv("KILN_I8_FUSED");
}
