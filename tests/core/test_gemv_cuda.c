/* test_gemv_cuda.c — the GEMV of few rows by a bf16 weight (core/runtime/cuda_gemv.cu)
 * against the CPU's matmul (kn_tensor_matmul in f32 on the same bf16 values, widened
 * exactly), then the epilogue (bias, gelu) in f32.
 *
 * gemv_emu: the very kernel text nvcc compiles, run on the CPU under the CUDA emulator
 * (core/runtime/cuda_gemv_emu.c): GPT-2's decode shapes (w [768, 768] and [3072, 768] split
 * over k; [768, 2304] scaled to n 1152; the tied head w [V, 768] read transposed, V scaled to
 * 1031: an odd column count), m 1..8, odd n and k (no 16-byte loads: one element at a time,
 * masked), a w whose rows are not 16-byte aligned, a transposed a, f32 and bf16 a and c, the
 * bias and gelu epilogues, and a problem wide enough to need two staged k-tiles a block.
 * Tolerance: f32 results within 1e-5 of max|want| (f32 sums in another order); bf16 results
 * within 2^-8 |want| (one rounding, at most half an ulp of 2^-7) plus that. Every run is
 * repeated: the same bits (the sums' order depends on the shape alone), and the output
 * starts as NaN, so an element the kernels forget shows.
 *
 * cuda_gemv (GPU, skipped without one): the CUDA backend's matmul node with m <= 8 runs the
 * GEMV (its counter moves) and agrees with cuBLAS (the GEMV switched off) on GPT-2's real
 * shapes, both within the tolerance of the f32 CPU product; matmul_bias and
 * matmul_bias_gelu likewise; and greedy decoding on the GPU gives the same tokens with and
 * without the GEMV. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test_util.h"
#include "kiln/infer.h"
#include "kiln/scalar.h"
#include "runtime/cuda_argmax.h"
#include "runtime/cuda_gemv.h"
#include "runtime/cuda_mma.h"

static float uni(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)(2.0 * (double)(*s >> 11) / 9007199254740992.0 - 1.0);
}

/* One problem's host data: a and w as bf16 bits (and a as f32, the same values), bias. */
typedef struct problem {
    int m;
    long long n, k;
    bool ta, tb;
    unsigned short *a16, *w16;
    float *a32, *bias;
} problem;

static problem make(int m, long long n, long long k, bool ta, bool tb, uint64_t seed) {
    problem p = {m, n, k, ta, tb, NULL, NULL, NULL, NULL};
    uint64_t s = seed;
    p.a16 = malloc((size_t)(m * k) * 2 + 16);
    p.a32 = malloc((size_t)(m * k) * 4 + 16);
    p.w16 = malloc((size_t)(n * k) * 2 + 32);
    p.bias = malloc((size_t)n * 4);
    for (long long i = 0; i < m * k; i++) {
        p.a16[i] = kn_bf16_bits(uni(&s));
        p.a32[i] = kn_bf16_f32(p.a16[i]);
    }
    for (long long i = 0; i < n * k + 16; i++) p.w16[i] = kn_bf16_bits(uni(&s) * 0.5f);
    for (long long i = 0; i < n; i++) p.bias[i] = uni(&s);
    return p;
}

static void unmake(problem *p) {
    free(p->a16);
    free(p->a32);
    free(p->w16);
    free(p->bias);
}

/* The CPU's product of p (w read from woff elements in), then bias and gelu, as f32 [m, n]. */
static float *reference(const problem *p, long long woff, bool bias, bool gelu) {
    int64_t sa[2] = {p->ta ? p->k : p->m, p->ta ? p->m : p->k}, sw[2] = {p->tb ? p->n : p->k, p->tb ? p->k : p->n};
    float *w32 = malloc((size_t)(p->n * p->k) * 4);
    for (long long i = 0; i < p->n * p->k; i++) w32[i] = kn_bf16_f32(p->w16[woff + i]);
    kn_tensor *ta = NULL, *tw = NULL, *va = NULL, *vw = NULL, *out = NULL;
    KN_ASSERT_OK(kn_tensor_from_data(&ta, KN_DT_F32, 2, sa, p->a32));
    KN_ASSERT_OK(kn_tensor_from_data(&tw, KN_DT_F32, 2, sw, w32));
    if (p->ta) KN_ASSERT_OK(kn_tensor_transpose(&va, ta, 0, 1));
    if (p->tb) KN_ASSERT_OK(kn_tensor_transpose(&vw, tw, 0, 1));
    KN_ASSERT_OK(kn_tensor_matmul(&out, va ? va : ta, vw ? vw : tw));
    float *r = malloc((size_t)(p->m * p->n) * 4);
    memcpy(r, kn_tensor_data(out), (size_t)(p->m * p->n) * 4);
    for (long long i = 0; i < p->m * p->n; i++) {
        if (bias) r[i] += p->bias[i % p->n];
        if (gelu) r[i] = kn_sc_gelu_f32(r[i]);
    }
    kn_tensor *ts[] = {ta, tw, va, vw, out};
    for (int i = 0; i < 5; i++) kn_tensor_free(ts[i]);
    free(w32);
    return r;
}

/* max|got - want| within the tolerance of the header comment; got is f32 or bf16 bits. */
static void agree(const char *what, const void *got, bool f32, const float *want, long long count, long long n) {
    double maxref = 0;
    for (long long i = 0; i < count; i++) maxref = fmax(maxref, fabs(want[i]));
    for (long long i = 0; i < count; i++) {
        double g = f32 ? ((const float *)got)[i] : kn_bf16_f32(((const unsigned short *)got)[i]);
        double tol = 1e-5 * fmax(maxref, 1e-30) + (f32 ? 0 : ldexp(fabs(want[i]), -8));
        cr_assert(!isnan(g), "%s: element %lld is NaN (unwritten?), want %.7g", what, i, want[i]);
        cr_assert(fabs(g - want[i]) <= tol, "%s: c[%lld][%lld] is %.7g, the CPU's %.7g", what, i / n, i % n, g, want[i]);
    }
}

/* One emulated case: a (f32 or bf16), w from woff elements in, c f32 or bf16, with or
 * without bias and gelu; against the CPU, and a second run for the same bits. */
static void emu_case(int m, long long n, long long k, bool ta, bool tb, bool a_f32, bool c_f32, long long woff, bool bias,
                     bool gelu, uint64_t seed) {
    problem p = make(m, n, k, ta, tb, seed);
    const size_t es = c_f32 ? 4 : 2, bytes = (size_t)(m * n) * es;
    char *c = malloc(bytes), *aux = malloc(bytes), *c2 = malloc(bytes), *aux2 = malloc(bytes);
    memset(c, 0xFF, bytes);
    memset(aux, 0xFF, bytes);
    kn_gemv_args g = {.m = m, .n = n, .k = k, .a = a_f32 ? (const void *)p.a32 : (const void *)p.a16, .a_f32 = a_f32,
                      .ta = ta, .w = p.w16 + woff, .tb = tb, .bias = bias ? p.bias : NULL, .gelu = gelu, .c = c,
                      .c_f32 = c_f32, .aux = aux};
    char what[160];
    snprintf(what, sizeof what, "m %d n %lld k %lld%s%s a %s c %s%s%s%s", m, n, k, ta ? " ta" : "", tb ? " tb" : "",
             a_f32 ? "f32" : "bf16", c_f32 ? "f32" : "bf16", woff ? " (w unaligned)" : "", bias ? " +bias" : "",
             gelu ? " gelu" : "");
    KN_ASSERT_OK(kn_gemv_emu(&g));
    float *want = reference(&p, woff, bias, gelu);
    agree(what, c, c_f32, want, (long long)m * n, n);
    if (gelu) {
        float *pre = reference(&p, woff, bias, false);
        char w2[180];
        snprintf(w2, sizeof w2, "%s, aux", what);
        agree(w2, aux, c_f32, pre, (long long)m * n, n);
        free(pre);
    }
    g.c = c2;
    g.aux = aux2;
    memset(c2, 0, bytes);
    memset(aux2, 0, bytes);
    KN_ASSERT_OK(kn_gemv_emu(&g));
    cr_assert(!memcmp(c, c2, bytes), "%s: two runs differ", what);
    cr_assert(!gelu || !memcmp(aux, aux2, bytes), "%s: two runs' aux differ", what);
    free(want);
    free(c);
    free(aux);
    free(c2);
    free(aux2);
    unmake(&p);
}

KN_TEST(gemv_emu, gpt2_decode_shapes) {
    emu_case(1, 768, 768, false, false, false, false, 0, false, false, 1);   /* attention's output projection */
    emu_case(1, 1152, 768, false, false, false, false, 0, false, false, 2);  /* q, k, v (n 2304 halved) */
    emu_case(1, 768, 3072, false, false, false, false, 0, false, false, 3);  /* the MLP's second product */
    emu_case(1, 1031, 768, false, true, false, false, 0, false, false, 4);   /* the tied head, V scaled */
    long long tiles, splits, kper;
    kn_gemv_plan(1, 768, 3072, false, &tiles, &splits, &kper);
    cr_assert(splits > 1 && splits * kper >= 3072 && (splits - 1) * kper < 3072, "[3072, 768] is split over k: %lld x %lld",
              splits, kper);
}

KN_TEST(gemv_emu, every_row_count) {
    for (int m = 1; m <= KN_GEMV_MAX_M; m++) {
        emu_case(m, 200, 96, false, false, false, m % 2 == 0, 0, false, false, 10 + (uint64_t)m);
        emu_case(m, 72, 264, false, true, m % 3 == 0, false, 0, false, false, 20 + (uint64_t)m);
    }
}

KN_TEST(gemv_emu, odd_tails_and_unaligned_weights) {
    emu_case(3, 77, 131, false, false, true, true, 0, false, false, 30);  /* n % 8: one element at a time */
    emu_case(5, 45, 101, true, true, false, true, 0, false, false, 31);   /* k % 8 (transposed w), transposed a */
    emu_case(4, 200, 96, true, false, true, false, 0, false, false, 36); /* transposed a, w [k, n] */
    emu_case(2, 64, 40, false, false, false, false, 1, false, false, 32); /* rows of w 2 bytes off 16 */
    emu_case(7, 40, 64, false, true, false, false, 3, false, false, 33);
    emu_case(1, 9, 1, false, false, false, true, 0, false, false, 34);    /* k 1 */
    emu_case(8, 1, 300, false, true, false, true, 0, false, false, 35);   /* n 1 */
}

KN_TEST(gemv_emu, bias_and_gelu_epilogues) {
    emu_case(1, 768, 768, false, false, false, true, 0, true, false, 40); /* matmul_bias: f32 result */
    emu_case(4, 3072 / 4, 768, false, false, false, true, 0, true, true, 41); /* matmul_bias_gelu */
    emu_case(2, 50, 77, false, true, false, false, 0, true, true, 42);
}

KN_TEST(gemv_emu, wide_problems_stage_several_k_tiles) {
    long long tiles, splits, kper;
    kn_gemv_plan(1, 64 * 257, 264, false, &tiles, &splits, &kper);
    cr_assert(splits == 1 && kper > 256, "w [264, 16448] is not split: %lld splits of %lld", splits, kper);
    emu_case(1, 64 * 257, 264, false, false, false, false, 0, false, false, 50); /* rows 256.. in a second tile */
    kn_gemv_plan(1, 32 * 257, 1040, true, &tiles, &splits, &kper);
    cr_assert(splits == 1 && kper > 1024, "w [8224, 1040]: %lld splits of %lld", splits, kper);
    emu_case(1, 32 * 257, 1040, false, true, false, true, 0, false, false, 51); /* columns 1024.. in a second tile */
}

KN_TEST(gemv_emu, refuses_what_it_does_not_take) {
    unsigned short w[8] = {0}, a[8] = {0}, c[8];
    kn_gemv_args g = {.m = 9, .n = 1, .k = 1, .a = a, .w = w, .c = c};
    KN_ASSERT_ERR(kn_gemv_emu(&g), KN_ERR_ARG);
    g.m = 0;
    KN_ASSERT_ERR(kn_gemv_emu(&g), KN_ERR_ARG);
    g.m = 1;
    g.k = 0;
    KN_ASSERT_ERR(kn_gemv_emu(&g), KN_ERR_ARG);
    g.k = 1;
    g.gelu = true; /* no aux */
    KN_ASSERT_ERR(kn_gemv_emu(&g), KN_ERR_ARG);
    g.gelu = false;
    KN_ASSERT_OK(kn_gemv_emu(&g));
}

/* ---------------------------------------------------------------- greedy's argmax */

/* Rows that stress the order: ties (the first wins), NaN inside and at index 0 (0 wins),
 * all -inf (0), +inf, a row shorter than the block, one element, and GPT-2's vocabulary. */
static float *argmax_rows(int64_t rows, int64_t n, uint64_t seed) {
    float *x = malloc((size_t)(rows * n) * sizeof *x);
    uint64_t s = seed;
    for (int64_t i = 0; i < rows * n; i++) x[i] = (float)(int)(uni(&s) * 20.0f); /* few values: many ties */
    for (int64_t r = 0; r < rows; r++) {
        float *row = x + r * n;
        switch (r % 6) {
        case 1: row[n / 2] = NAN; row[n - 1] = 1e30f; break;          /* NaN ignored, the last wins */
        case 2: row[0] = NAN; break;                                   /* the CPU's scan stays at 0 */
        case 3: for (int64_t i = 0; i < n; i++) row[i] = -INFINITY; break;
        case 4: row[n - 1] = INFINITY; row[n / 3] = INFINITY; break;   /* the first +inf */
        default: break;
        }
    }
    return x;
}

static void argmax_case(int64_t rows, int64_t n, uint64_t seed, bool gpu) {
    float *x = argmax_rows(rows, n, seed);
    int32_t *got = malloc((size_t)rows * sizeof *got);
    memset(got, 0xFF, (size_t)rows * sizeof *got);
    if (gpu) {
        kn_tensor *hx = NULL, *dx = NULL, *dout = NULL;
        int64_t sx[2] = {rows, n}, so[1] = {rows};
        KN_ASSERT_OK(kn_tensor_from_data(&hx, KN_DT_F32, 2, sx, x));
        KN_ASSERT_OK(kn_tensor_to(&dx, hx, CUDA0));
        KN_ASSERT_OK(kn_tensor_empty_on(&dout, CUDA0, KN_DT_I32, 1, so));
        KN_ASSERT_OK(kn_device_argmax_rows(CUDA0, kn_tensor_data(dx), rows, n, kn_tensor_data(dout)));
        KN_ASSERT_OK(kn_device_memcpy(KN_CPU, got, CUDA0, kn_tensor_data(dout), (size_t)rows * sizeof *got));
        kn_tensor_free(hx);
        kn_tensor_free(dx);
        kn_tensor_free(dout);
    } else
        KN_ASSERT_OK(kn_argmax_rows_emu(x, rows, n, got));
    kn_sampling greedy = {0, 0, 1};
    kn_rng r = kn_rng_new(1);
    for (int64_t i = 0; i < rows; i++) {
        int32_t want = kn_sample_row(x + i * n, (int)n, &greedy, &r, NULL);
        cr_assert_eq(got[i], want, "%s, row %lld of %lld: argmax %d, the CPU sampler's %d", gpu ? "GPU" : "emulator",
                     (long long)i, (long long)n, got[i], want);
    }
    free(x);
    free(got);
}

KN_TEST(gemv_emu, argmax_is_the_cpu_samplers_greedy_token) {
    argmax_case(12, 1, 60, false);
    argmax_case(12, 100, 61, false);
    argmax_case(12, 1000, 62, false);
    argmax_case(6, 50257, 63, false);
    KN_ASSERT_ERR(kn_argmax_rows_emu(NULL, 1, 5, NULL), KN_ERR_ARG);
}

/* ---------------------------------------------------------------- on a GPU */

/* bf16 [nd, shape] with values N(0, 1) * scale. */
static kn_tensor *bf16_randn(kn_rng *r, int nd, const int64_t *shape, double scale) {
    kn_tensor *f = randn(r, KN_DT_F32, nd, shape), *h = NULL;
    for (int64_t i = 0; i < kn_tensor_numel(f); i++) ((float *)kn_tensor_data(f))[i] *= (float)scale;
    KN_ASSERT_OK(kn_tensor_cast(&h, f, KN_DT_BF16));
    kn_tensor_free(f);
    return h;
}

/* n on cuda:0 with the GEMV (its counter moves) and with cuBLAS (the GEMV switched off; its
 * counter moves), each within the header's tolerance of the CPU's f32 product of the same
 * values. Frees host[]. */
static void gemv_vs_cublas(kn_node *n, int nin, kn_tensor **host) {
    kn_tensor *dev[3] = {NULL}, *wide[3] = {NULL}, *want = NULL;
    gpu_operands(n, nin, host, NULL, dev);
    long long g0, c0, g1, c1, g2, c2;
    kn_gemv_cuda_counts(&g0, &c0);
    kn_gemv_cuda_force(1);
    kn_tensor *gv = on_gpu(n, dev);
    kn_gemv_cuda_counts(&g1, &c1);
    kn_gemv_cuda_force(0);
    kn_tensor *cb = on_gpu(n, dev);
    kn_gemv_cuda_counts(&g2, &c2);
    kn_gemv_cuda_force(-1);
    char ts[96];
    kn_type_str(&n->type, ts, sizeof ts);
    cr_assert(g1 == g0 + 1 && c1 == c0, "%s -> %s: the GEMV did not run (gemv %lld -> %lld)", kn_op_name(n->op), ts, g0, g1);
    cr_assert(g2 == g1 && c2 == c1 + 1, "%s -> %s: cuBLAS did not run", kn_op_name(n->op), ts);
    for (int i = 0; i < nin; i++) KN_ASSERT_OK(kn_tensor_cast(&wide[i], host[i], KN_DT_F32));
    kn_node nf = *n;
    nf.type.dtype = KN_DT_F32;
    KN_ASSERT_OK(kn_node_eval(&nf, (const kn_tensor *const *)wide, &want));
    const int64_t count = kn_tensor_numel(want), cols = n->type.shape[n->type.ndim - 1];
    const bool f32 = n->type.dtype == KN_DT_F32;
    kn_tensor *res[2] = {gv, cb};
    const char *who[2] = {"the GEMV", "cuBLAS"};
    for (int k = 0; k < 2; k++) {
        char what[160];
        snprintf(what, sizeof what, "%s -> %s, %s", kn_op_name(n->op), ts, who[k]);
        agree(what, kn_tensor_data(res[k]), f32, kn_tensor_data(want), count, cols);
    }
    kn_tensor_free(gv);
    kn_tensor_free(cb);
    kn_tensor_free(want);
    for (int i = 0; i < nin; i++) { kn_tensor_free(dev[i]); kn_tensor_free(host[i]); kn_tensor_free(wide[i]); }
}

KN_TEST(cuda_gemv, matmul_agrees_with_cublas_on_gpt2_shapes) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(70);
    /* (m, k, n, tb): q/k/v, the projections, the MLP, the tied head; 8 rows; odd sizes; ta */
    const int64_t cases[][5] = {{1, 768, 2304, 0, 0}, {1, 768, 768, 0, 0},  {1, 768, 3072, 0, 0}, {1, 3072, 768, 0, 0},
                                {1, 768, 50257, 1, 0}, {8, 768, 2304, 0, 0}, {8, 3072, 768, 0, 0}, {8, 768, 50257, 1, 0},
                                {3, 300, 77, 0, 0},  {5, 101, 45, 1, 0},   {4, 96, 200, 0, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int64_t m = cases[c][0], k = cases[c][1], nn = cases[c][2];
        const bool tb = cases[c][3], ta = cases[c][4];
        int64_t sa[2] = {ta ? k : m, ta ? m : k}, sb[2] = {tb ? nn : k, tb ? k : nn};
        kn_node n = node(KN_OP_MATMUL);
        n.attrs.ta = ta;
        n.attrs.tb = tb;
        kn_tensor *in[2] = {bf16_randn(&r, 2, sa, 1.0), bf16_randn(&r, 2, sb, 0.05)};
        gemv_vs_cublas(&n, 2, in);
    }
}

KN_TEST(cuda_gemv, bias_and_gelu_epilogues_agree_with_cublaslt) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(71);
    const kn_op ops[2] = {KN_OP_MATMUL_BIAS, KN_OP_MATMUL_BIAS_GELU};
    const int64_t cases[][3] = {{1, 768, 2304}, {1, 768, 3072}, {8, 768, 3072}, {3, 77, 45}};
    for (int o = 0; o < 2; o++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            int64_t sa[2] = {cases[c][0], cases[c][1]}, sb[2] = {cases[c][1], cases[c][2]}, se[1] = {cases[c][2]};
            kn_node n = node(ops[o]);
            kn_tensor *in[3] = {bf16_randn(&r, 2, sa, 1.0), bf16_randn(&r, 2, sb, 0.05), randn(&r, KN_DT_F32, 1, se)};
            gemv_vs_cublas(&n, 3, in);
        }
}

KN_TEST(cuda_gemv, argmax_rows_matches_the_cpu_sampler) {
    SKIP_WITHOUT_GPU();
    argmax_case(12, 1, 80, true);
    argmax_case(12, 1000, 81, true);
    argmax_case(8, 50257, 82, true);
}

/* Decode on the GPU with the bf16 pass list of `kiln bench-infer`, the same token sequence
 * fed with and without the GEMV (and with and without a CUDA graph): every step's logits
 * agree to bf16's precision, and so does each step's greedy token wherever the best two
 * logits are further apart than that (a near tie may go either way). Then greedy generation
 * with the GEMV, its tokens read back from the device's argmax, equals the tokens chosen
 * on the host from the same session's logits. */
KN_TEST(cuda_gemv, decode_with_and_without_the_gemv) {
    SKIP_WITHOUT_GPU();
    const kn_gpt_config cfg = {.vocab = 515, .context = 64, .layers = 2, .width = 128, .heads = 4};
    kn_gpt g;
    KN_ASSERT_OK(kn_gpt_new(&g, &cfg));
    kn_gpt_init(&g, 5);
    for (int64_t i = 0; i < g.p.n_decay; i++) g.p.data[i] *= 5.0f; /* logits far apart: few near ties */
    enum { B = 2, T0 = 5, STEPS = 30 };
    int32_t ids[B * (T0 + STEPS)];
    kn_rng r = kn_rng_new(9);
    for (int i = 0; i < B * (T0 + STEPS); i++) ids[i] = (int32_t)(kn_rng_u32(&r) % (uint32_t)cfg.vocab);
    for (int graph = 0; graph < 2; graph++) {
        float *logits[2];
        long long gv0, cb0, gv1, cb1;
        for (int on = 0; on < 2; on++) {
            kn_gemv_cuda_force(on);
            kn_gemv_cuda_counts(&gv0, &cb0);
            kn_infer inf;
            kn_infer_opts o = {.device = CUDA0, .mode = KN_PROGRAM_COMPILED, .cuda_graph = graph,
                               .passes = "all,flash,autocast:bf16,lowparams:bf16,hfuse"};
            KN_ASSERT_OK(kn_infer_new(&inf, &g, B, &o));
            logits[on] = malloc((size_t)STEPS * B * cfg.vocab * sizeof(float));
            int32_t prompt[B * T0], tok[B];
            for (int b = 0; b < B; b++) memcpy(prompt + b * T0, ids + b * (T0 + STEPS), T0 * sizeof(int32_t));
            KN_ASSERT_OK(kn_infer_prefill(&inf, prompt, T0));
            for (int s = 0; s < STEPS; s++) {
                memcpy(logits[on] + (size_t)s * B * cfg.vocab, inf.logits, (size_t)B * cfg.vocab * sizeof(float));
                for (int b = 0; b < B; b++) tok[b] = ids[b * (T0 + STEPS) + T0 + s];
                if (s + 1 < STEPS) KN_ASSERT_OK(kn_infer_decode(&inf, tok));
            }
            kn_gemv_cuda_counts(&gv1, &cb1);
            cr_assert(on ? gv1 > gv0 : gv1 == gv0 && cb1 > cb0, "graph %d, GEMV %s: gemv %lld -> %lld, cublas %lld -> %lld",
                      graph, on ? "on" : "off", gv0, gv1, cb0, cb1);
            if (on) { /* greedy generation (the device's argmax) against the host's scan of the same steps' logits */
                enum { N = 12 };
                int32_t gen[B * N];
                for (int b = 0; b < B; b++) memcpy(gen + b * N, prompt + b * T0, T0 * sizeof(int32_t));
                kn_sampling greedy = {0, 0, 1};
                kn_rng r1 = kn_rng_new(1);
                KN_ASSERT_OK(kn_infer_generate(&inf, gen, T0, N, &greedy, &r1, NULL, NULL));
                KN_ASSERT_OK(kn_infer_prefill(&inf, prompt, T0));
                for (int len = T0; len < N; len++) {
                    for (int b = 0; b < B; b++) {
                        int32_t want = kn_sample_row(inf.logits + (size_t)b * cfg.vocab, cfg.vocab, &greedy, &r1, NULL);
                        cr_assert_eq(gen[b * N + len], want, "graph %d, row %d, position %d: generated %d, the host's "
                                     "scan of the logits %d", graph, b, len, gen[b * N + len], want);
                        tok[b] = gen[b * N + len];
                    }
                    if (len + 1 < N) KN_ASSERT_OK(kn_infer_decode(&inf, tok));
                }
            }
            kn_infer_free(&inf);
        }
        kn_gemv_cuda_force(-1);
        for (int s = 0; s < STEPS; s++)
            for (int b = 0; b < B; b++) {
                const float *x = logits[1] + ((size_t)s * B + b) * cfg.vocab, *y = logits[0] + ((size_t)s * B + b) * cfg.vocab;
                double maxref = 0, maxdiff = 0;
                int ax = 0, ay = 0, second = -1;
                for (int v = 0; v < cfg.vocab; v++) {
                    maxref = fmax(maxref, fabs(y[v]));
                    maxdiff = fmax(maxdiff, fabs(x[v] - y[v]));
                    if (x[v] > x[ax]) ax = v;
                    if (y[v] > y[ay]) ay = v;
                }
                for (int v = 0; v < cfg.vocab; v++)
                    if (v != ay && (second < 0 || y[v] > y[second])) second = v;
                cr_assert(maxdiff <= 5e-2 * maxref, "graph %d, step %d row %d: logits differ by %.3g of %.3g", graph, s,
                          b, maxdiff, maxref);
                if (y[ay] - y[second] > 2 * maxdiff)
                    cr_assert_eq(ax, ay, "graph %d, step %d row %d: greedy token %d with the GEMV, %d with cuBLAS", graph,
                                 s, b, ax, ay);
            }
        free(logits[0]);
        free(logits[1]);
    }
    kn_gpt_free(&g);
}
