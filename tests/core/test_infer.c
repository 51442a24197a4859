/* test_infer.c — inference with a KV cache (core/nn/infer.c, kiln/infer.h) against the
 * sampler without one (kn_gpt_sample), the reference.
 *
 * Greedy generation gives kn_gpt_sample's tokens for several prompt lengths, up to and
 * past the context (where the window slides), with the steps interpreted node by node and
 * compiled to C; sampling at a temperature gives its tokens too (the same draw, the same
 * stream). After a prefill and decode steps the cache holds what a prefill of the whole
 * sequence writes, and the decode step's logits are the full forward's. B rows at once
 * give each row's B = 1 tokens. Bad prompts, tokens, settings and a full cache are errors.
 * On a GPU (skipped without one) greedy tokens match the CPU's, with and without a CUDA
 * graph. The decode step compiled with the GPU's pass list has at most 10 steps a layer
 * (5 generated kernels) and 5 more (2) around them: the count that sets the TPOT of a small
 * model on a GPU, held down here on the CPU (the schedule is the same). */
#include <math.h>
#include <string.h>

#include "kiln/device.h"
#include "kiln/infer.h"
#include "kn_test.h"

static const kn_gpt_config k_cfg = {.vocab = 23, .context = 12, .layers = 2, .width = 16, .heads = 4};
enum { NMAX = 30 };

/* GPT-2's init, weights scaled up: at std 0.02 attention is nearly uniform and the next
 * token hardly depends on the earlier ones, so a cache that lost them would go unnoticed. */
static void model(kn_gpt *g) {
    KN_ASSERT_OK(kn_gpt_new(g, &k_cfg));
    kn_gpt_init(g, 11);
    for (int64_t i = 0; i < g->p.n_decay; i++) g->p.data[i] *= 25.0f;
}

static void prompt(int32_t *ids, int n0, uint64_t seed) {
    kn_rng r = kn_rng_new(seed);
    for (int i = 0; i < n0; i++) ids[i] = (int32_t)(kn_rng_u32(&r) % (uint32_t)k_cfg.vocab);
}

/* Generate n tokens from a prompt of n0 with the cache and without it; the same tokens. */
static void same_as_reference(const kn_gpt *g, kn_infer *inf, int n0, int n, double temperature, uint64_t seed) {
    int32_t want[NMAX], got[NMAX];
    prompt(want, n0, seed);
    memcpy(got, want, sizeof want);
    kn_rng r1 = kn_rng_new(seed + 100), r2 = kn_rng_new(seed + 100);
    KN_ASSERT_OK(kn_gpt_sample(g, want, n0, n, temperature, &r1));
    kn_sampling s = {temperature, 0, 1.0};
    KN_ASSERT_OK(kn_infer_generate(inf, got, n0, n, &s, &r2, NULL, NULL));
    for (int i = 0; i < n; i++)
        cr_assert_eq(got[i], want[i], "prompt %d, %d tokens, temperature %g: token %d is %d with the cache, %d without",
                     n0, n, temperature, i, got[i], want[i]);
}

static void greedy_sweep(kn_program_mode mode) {
    kn_gpt g;
    model(&g);
    kn_infer inf;
    kn_infer_opts o = {.device = KN_CPU, .mode = mode};
    KN_ASSERT_OK(kn_infer_new(&inf, &g, 1, &o));
    kn_program_stats st = kn_program_get_stats(inf.decode);
    if (mode == KN_PROGRAM_COMPILED) cr_assert(st.mode == KN_PROGRAM_COMPILED && st.nkernels > 0, "not compiled to C");
    const int cases[][2] = {{1, 6}, {4, 12}, {12, 13}, {5, NMAX}}; /* (n0, n): to the context, and past it */
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) same_as_reference(&g, &inf, cases[c][0], cases[c][1], 0, c);
    kn_infer_free(&inf);
    kn_gpt_free(&g);
}

KN_TEST(infer, greedy_matches_the_sampler_interpreted) { greedy_sweep(KN_PROGRAM_NODES); }
KN_TEST(infer, greedy_matches_the_sampler_compiled) { greedy_sweep(KN_PROGRAM_COMPILED); }

/* The GPU's generated CUDA for both steps, run by the CUDA emulator on the CPU. */
KN_TEST(infer, greedy_matches_under_the_cuda_emulator) {
    kn_gpt g;
    model(&g);
    kn_infer inf;
    kn_infer_opts o = {.device = KN_CPU, .mode = KN_PROGRAM_COMPILED, .cuda_emu = true};
    KN_ASSERT_OK(kn_infer_new(&inf, &g, 2, &o));
    kn_program_stats st = kn_program_get_stats(inf.decode);
    cr_assert(st.mode == KN_PROGRAM_COMPILED && st.nkernels > 0, "not compiled");
    enum { N0 = 3, N = 8 };
    int32_t rows[2 * N], want[N];
    kn_sampling s = {0, 0, 1};
    kn_rng r = kn_rng_new(1);
    for (int b = 0; b < 2; b++) prompt(rows + b * N, N0, 40 + (uint64_t)b);
    KN_ASSERT_OK(kn_infer_generate(&inf, rows, N0, N, &s, &r, NULL, NULL));
    for (int b = 0; b < 2; b++) {
        prompt(want, N0, 40 + (uint64_t)b);
        KN_ASSERT_OK(kn_gpt_sample(&g, want, N0, N, 0, &r));
        for (int i = 0; i < N; i++) cr_assert_eq(rows[b * N + i], want[i], "row %d token %d", b, i);
    }
    kn_infer_free(&inf);
    kn_gpt_free(&g);
}

KN_TEST(infer, sampling_matches_the_sampler) {
    kn_gpt g;
    model(&g);
    kn_infer inf;
    KN_ASSERT_OK(kn_infer_new(&inf, &g, 1, NULL));
    same_as_reference(&g, &inf, 3, 20, 1.0, 7);
    same_as_reference(&g, &inf, 2, 9, 0.5, 8);
    kn_infer_free(&inf);
    kn_gpt_free(&g);
}

/* The full forward's logits at every position of ids[0..T) (one row), from the reference
 * graph (kn_gpt_build, interpreted). */
static void full_logits(const kn_gpt *g, const int32_t *ids, int T, float *out) {
    kn_builder *b;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
    int64_t s[2] = {1, T};
    kn_tensor *x;
    KN_ASSERT_OK(kn_tensor_from_data(&x, KN_DT_I32, 2, s, ids));
    kn_val *pv = kn_calloc((size_t)g->p.count, sizeof *pv), logits;
    KN_ASSERT_OK(kn_gpt_build(b, g, kn_input(b, "idx", x), KN_VAL_NONE, pv, &logits, NULL));
    memcpy(out, kn_tensor_data(kn_val_tensor(b, logits)), (size_t)T * k_cfg.vocab * sizeof(float));
    kn_free(pv);
    kn_tensor_free(x);
    kn_builder_free(b);
}

KN_TEST(infer, cache_and_logits_match_a_recompute) {
    kn_gpt g;
    model(&g);
    kn_infer a, full;
    KN_ASSERT_OK(kn_infer_new(&a, &g, 1, NULL));
    KN_ASSERT_OK(kn_infer_new(&full, &g, 1, NULL));
    enum { T0 = 3, T = 9, V = 23 };
    int32_t ids[T];
    prompt(ids, T, 5);
    float ref[T * V];
    full_logits(&g, ids, T, ref);
    KN_ASSERT_OK(kn_infer_prefill(&a, ids, T0));
    for (int v = 0; v < V; v++) KN_ASSERT_CLOSE(a.logits[v], ref[(T0 - 1) * V + v], 1e-5, 1e-5);
    for (int t = T0; t < T; t++) {
        KN_ASSERT_OK(kn_infer_decode(&a, &ids[t]));
        cr_assert_eq(a.len, t + 1);
        for (int v = 0; v < V; v++) KN_ASSERT_CLOSE(a.logits[v], ref[t * V + v], 1e-5, 1e-5);
    }
    KN_ASSERT_OK(kn_infer_prefill(&full, ids, T));
    const int64_t n = kn_tensor_numel(a.cache), hd = k_cfg.width / k_cfg.heads;
    float *ca = kn_malloc((size_t)n * sizeof(float)), *cf = kn_malloc((size_t)n * sizeof(float));
    KN_ASSERT_OK(kn_infer_cache_read(&a, ca));
    KN_ASSERT_OK(kn_infer_cache_read(&full, cf));
    int64_t checked = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t pos = (i / hd) % k_cfg.context;
        if (pos >= T) { cr_assert_eq(ca[i], 0.0f, "cache element %lld past the filled positions is not 0", (long long)i); continue; }
        KN_ASSERT_CLOSE(ca[i], cf[i], 1e-5, 1e-5);
        checked += ca[i] != 0;
    }
    cr_assert(checked > n / 2, "the cache is mostly zeros: nothing was written");
    kn_free(ca);
    kn_free(cf);
    kn_infer_free(&a);
    kn_infer_free(&full);
    kn_gpt_free(&g);
}

/* The lowparams pass's bf16 weight copies are made and bound: prefill and decode logits
 * stay within bf16 rounding of the f32 forward's. */
KN_TEST(infer, bf16_weights_with_autocast_and_lowparams) {
    kn_gpt g;
    KN_ASSERT_OK(kn_gpt_new(&g, &k_cfg));
    kn_gpt_init(&g, 11);
    kn_infer inf;
    kn_infer_opts o = {.device = KN_CPU, .mode = KN_PROGRAM_COMPILED, .passes = "autocast:bf16,lowparams:bf16"};
    KN_ASSERT_OK(kn_infer_new(&inf, &g, 1, &o));
    cr_assert(inf.low && inf.low->dtype == KN_DT_BF16, "no bf16 copy of the weights was bound");
    enum { T0 = 4, T = 10, V = 23 };
    int32_t ids[T];
    prompt(ids, T, 9);
    float ref[T * V];
    full_logits(&g, ids, T, ref);
    KN_ASSERT_OK(kn_infer_prefill(&inf, ids, T0));
    double worst = 0, scale = 0;
    for (int t = T0; t <= T; t++) {
        for (int v = 0; v < V; v++) {
            worst = fmax(worst, fabs(inf.logits[v] - ref[(t - 1) * V + v]));
            scale = fmax(scale, fabs(ref[(t - 1) * V + v]));
        }
        if (t < T) KN_ASSERT_OK(kn_infer_decode(&inf, &ids[t]));
    }
    cr_assert(worst > 0 && worst <= 2e-2 * scale, "bf16 logits differ from f32 by %g (largest logit %g)", worst, scale);
    kn_infer_free(&inf);
    kn_gpt_free(&g);
}

/* The decode step's steps, compiled as `kiln bench-infer` compiles it for a GPU (its pass
 * list, the CUDA dialect under the emulator), at two depths: 10 a layer (the four products,
 * attn_decode, the qkv bias, the cast of attention's output, the gelu and the two residual +
 * layernorm kernels) and 5 outside them (two embeddings, their sum with the first
 * layernorm, the logits' product and their cast); with the epilogue pass 9 a layer (the
 * qkv bias rides on its product). 15 a layer and 6 outside before the decode step read q, k
 * and v packed (three bias kernels, three reshapes; the embeddings' sum a kernel apart),
 * which this fails on. Greedy tokens still match the sampler. */
KN_TEST(infer, decode_step_count_is_held_down) {
    const char *passes[2] = {"all,flash,autocast:bf16,lowparams:bf16,hfuse",
                             "all,flash,autocast:bf16,lowparams:bf16,hfuse,epilogue"};
    const int per_layer[2] = {10, 9}, kernels_per_layer[2] = {5, 4};
    for (int pi = 0; pi < 2; pi++)
        for (int layers = 1; layers <= 3; layers += 2) {
            kn_gpt_config c = k_cfg;
            c.layers = layers;
            kn_gpt g;
            KN_ASSERT_OK(kn_gpt_new(&g, &c));
            kn_gpt_init(&g, 11);
            kn_infer inf;
            kn_infer_opts o = {.device = KN_CPU, .mode = KN_PROGRAM_COMPILED, .passes = passes[pi], .cuda_emu = true};
            KN_ASSERT_OK(kn_infer_new(&inf, &g, 1, &o));
            kn_program_stats st = kn_program_get_stats(inf.decode);
            cr_assert(st.mode == KN_PROGRAM_COMPILED, "not compiled");
            cr_assert(st.nsteps <= 5 + per_layer[pi] * layers && st.nkernels <= 2 + kernels_per_layer[pi] * layers,
                      "%s, %d layers: the decode step has %d steps (%d generated kernels), more than %d (%d)",
                      passes[pi], layers, st.nsteps, st.nkernels, 5 + per_layer[pi] * layers,
                      2 + kernels_per_layer[pi] * layers);
            int32_t ids[8], want[8];
            prompt(ids, 8, 3);
            memcpy(want, ids, sizeof ids);
            kn_rng r1 = kn_rng_new(1), r2 = kn_rng_new(1);
            kn_sampling s = {0, 0, 1.0};
            KN_ASSERT_OK(kn_gpt_sample(&g, want, 3, 8, 0, &r1));
            KN_ASSERT_OK(kn_infer_generate(&inf, ids, 3, 8, &s, &r2, NULL, NULL));
            cr_assert(!memcmp(ids, want, sizeof ids), "%s: greedy tokens differ from the sampler's", passes[pi]);
            kn_infer_free(&inf);
            kn_gpt_free(&g);
        }
}

KN_TEST(infer, batched_rows_match_one_at_a_time) {
    kn_gpt g;
    model(&g);
    enum { B = 3, N0 = 4, N = 16 };
    kn_infer one, many;
    KN_ASSERT_OK(kn_infer_new(&one, &g, 1, NULL));
    KN_ASSERT_OK(kn_infer_new(&many, &g, B, NULL));
    int32_t rows[B * N], row[N];
    for (int b = 0; b < B; b++) prompt(rows + b * N, N0, 20 + (uint64_t)b);
    kn_sampling s = {0, 0, 1};
    kn_rng r = kn_rng_new(1);
    KN_ASSERT_OK(kn_infer_generate(&many, rows, N0, N, &s, &r, NULL, NULL));
    for (int b = 0; b < B; b++) {
        prompt(row, N0, 20 + (uint64_t)b);
        KN_ASSERT_OK(kn_infer_generate(&one, row, N0, N, &s, &r, NULL, NULL));
        for (int i = 0; i < N; i++) cr_assert_eq(rows[b * N + i], row[i], "row %d token %d", b, i);
    }
    kn_infer_free(&one);
    kn_infer_free(&many);
    kn_gpt_free(&g);
}

KN_TEST(infer, top_k_and_top_p) {
    enum { V = 6 };
    const float row[V] = {0.5f, 3.0f, 2.9f, -1.0f, 2.95f, 0.0f};
    int32_t scratch[V];
    kn_rng r = kn_rng_new(3);
    kn_sampling greedy = {0, 0, 1}, k1 = {1.0, 1, 1}, p = {1.0, 0, 1e-3}, k3 = {1.0, 3, 1};
    cr_assert_eq(kn_sample_row(row, V, &greedy, &r, scratch), 1);
    for (int i = 0; i < 50; i++) {
        cr_assert_eq(kn_sample_row(row, V, &k1, &r, scratch), 1, "top-k 1 is greedy");
        cr_assert_eq(kn_sample_row(row, V, &p, &r, scratch), 1, "a tiny top-p keeps the best token only");
        int32_t t = kn_sample_row(row, V, &k3, &r, scratch);
        cr_assert(t == 1 || t == 2 || t == 4, "top-k 3 drew %d, outside the three best", t);
    }
    int seen[V] = {0};
    kn_sampling all = {1.0, 0, 1};
    for (int i = 0; i < 400; i++) seen[kn_sample_row(row, V, &all, &r, scratch)]++;
    cr_assert(seen[0] > 0 && seen[5] > 0, "plain sampling never drew the unlikely tokens");
}

KN_TEST(infer, bad_input_is_an_error) {
    kn_gpt g;
    model(&g);
    kn_infer inf;
    KN_ASSERT_ERR(kn_infer_new(&inf, &g, 0, NULL), KN_ERR_ARG);
    KN_ASSERT_OK(kn_infer_new(&inf, &g, 1, NULL));
    int32_t ids[NMAX] = {0}, tok = 1;
    kn_sampling s = {0, 0, 1};
    kn_rng r = kn_rng_new(1);
    KN_ASSERT_ERR(kn_infer_decode(&inf, &tok), KN_ERR_ARG); /* no prefill yet */
    KN_ASSERT_ERR(kn_infer_generate(&inf, ids, k_cfg.context + 1, NMAX, &s, &r, NULL, NULL), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "longer than the context"), "%s", kn_last_error());
    KN_ASSERT_ERR(kn_infer_generate(&inf, ids, 0, 5, &s, &r, NULL, NULL), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_infer_generate(&inf, ids, 3, 2, &s, &r, NULL, NULL), KN_ERR_ARG);
    ids[1] = k_cfg.vocab;
    KN_ASSERT_ERR(kn_infer_prefill(&inf, ids, 3), KN_ERR_ARG);
    ids[1] = -1;
    KN_ASSERT_ERR(kn_infer_prefill(&inf, ids, 3), KN_ERR_ARG);
    ids[1] = 0;
    kn_sampling bad[] = {{-1, 0, 1}, {NAN, 0, 1}, {1, -2, 1}, {1, 0, 0}, {1, 0, 1.5}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        KN_ASSERT_ERR(kn_infer_generate(&inf, ids, 2, 4, &bad[i], &r, NULL, NULL), KN_ERR_ARG);
    KN_ASSERT_OK(kn_infer_prefill(&inf, ids, k_cfg.context));
    KN_ASSERT_ERR(kn_infer_decode(&inf, &tok), KN_ERR_ARG); /* the cache is full */
    cr_assert(strstr(kn_last_error(), "full"), "%s", kn_last_error());
    tok = k_cfg.vocab;
    KN_ASSERT_OK(kn_infer_prefill(&inf, ids, 2));
    KN_ASSERT_ERR(kn_infer_decode(&inf, &tok), KN_ERR_ARG);
    kn_infer_free(&inf);
    kn_infer_free(&inf); /* twice is fine */
    kn_gpt_free(&g);
}

static kn_status stop_at_3(void *ctx, int i, const int32_t *tok) {
    (void)tok;
    ++*(int *)ctx;
    return i >= 3 ? kn_error(KN_ERR_ARG, "stop") : KN_OK;
}

KN_TEST(infer, the_callback_sees_every_token_and_can_stop) {
    kn_gpt g;
    model(&g);
    kn_infer inf;
    KN_ASSERT_OK(kn_infer_new(&inf, &g, 1, NULL));
    int32_t ids[NMAX] = {1, 2};
    kn_sampling s = {0, 0, 1};
    kn_rng r = kn_rng_new(1);
    int calls = 0;
    KN_ASSERT_ERR(kn_infer_generate(&inf, ids, 2, 10, &s, &r, stop_at_3, &calls), KN_ERR_ARG);
    cr_assert_eq(calls, 2, "positions 2 and 3, then the stop");
    kn_infer_free(&inf);
    kn_gpt_free(&g);
}

static void gpu_greedy(bool cuda_graph) {
    if (kn_device_count(KN_DEVICE_CUDA) == 0) cr_skip_test("no CUDA device: GPU test skipped");
    kn_gpt g;
    model(&g);
    kn_infer inf;
    kn_infer_opts o = {.device = {KN_DEVICE_CUDA, 0}, .mode = KN_PROGRAM_COMPILED, .cuda_graph = cuda_graph};
    KN_ASSERT_OK(kn_infer_new(&inf, &g, 1, &o));
    same_as_reference(&g, &inf, 4, 12, 0, 1);
    same_as_reference(&g, &inf, 3, NMAX, 0, 2);
    kn_infer_free(&inf);
    kn_gpt_free(&g);
}

KN_TEST(infer, gpu_greedy_matches_the_sampler) { gpu_greedy(false); }
KN_TEST(infer, gpu_greedy_matches_with_a_cuda_graph) { gpu_greedy(true); }

/* kn_device_memcpy_2d (tensor parallelism gathers its blocks with it, core/dist/tp.c): rows land at
 * their pitch, the bytes between them are untouched, bad pitches are errors. */
KN_TEST(infer, memcpy_2d_copies_rows_at_their_pitch) {
    float src[3 * 2] = {1, 2, 3, 4, 5, 6}, dst[3 * 5];
    for (int i = 0; i < 15; i++) dst[i] = -1;
    KN_ASSERT_OK(kn_device_memcpy_2d(KN_CPU, dst + 1, 5 * sizeof(float), src, 2 * sizeof(float), 2 * sizeof(float), 3));
    const float want[15] = {-1, 1, 2, -1, -1, -1, 3, 4, -1, -1, -1, 5, 6, -1, -1};
    for (int i = 0; i < 15; i++) cr_assert_eq(dst[i], want[i], "element %d: %g, expected %g", i, dst[i], want[i]);
    KN_ASSERT_ERR(kn_device_memcpy_2d(KN_CPU, dst, 4, src, 8, 8, 1), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_device_memcpy_2d(KN_CPU, NULL, 8, src, 8, 8, 1), KN_ERR_ARG);
    KN_ASSERT_OK(kn_device_memcpy_2d(KN_CPU, NULL, 8, NULL, 8, 8, 0)); /* nothing to copy */
}
