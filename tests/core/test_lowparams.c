/* test_lowparams.c — the weights' low-precision copies written by the optimizer
 * (kn_optim_step_low, the pass lowparams, the trainer's low slab; issue 16).
 *
 *   - the fused update (AdamW, SGD with momentum and weight decay, first and later steps,
 *     bf16 and f16) leaves the f32 slab and the state bit for bit as the plain update and
 *     writes exactly the rounding of the updated slab (what a cast kernel would store);
 *   - lowparams on the GPT step: no cast of a param (or of a view of one) is left, one low
 *     param per matrix, and the graph computes exactly what autocast's did;
 *   - lowloss: the loss reads the 16-bit logits and its backward writes the 16-bit
 *     gradient, no f32 copy of the logits left, exactly autocast's values;
 *   - a bf16/fp16 trainer with lowparams and lowloss (interpreted and compiled) trains bit
 *     for bit as one without: losses, gradient norms, weights, and the low slab is the
 *     rounded slab;
 *   - on a GPU the fused kernel's copies are the rounding of its own f32 results, and the
 *     compiled bf16 steps with and without lowparams give the same losses bit for bit, and
 *     with lowloss within rounding (its loss kernels add a row's terms in another order). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph_test_util.h"
#include "kn_test.h"
#include "kiln/data.h"
#include "kiln/device.h"
#include "kiln/nn.h"
#include "kiln/optim.h"
#include "kiln/passes.h"
#include "kiln/program.h"

static uint16_t round_to(kn_dtype dt, float x) { return dt == KN_DT_BF16 ? kn_f32_to_bf16(x) : kn_f32_to_f16(x); }

static void fill(float *x, int64_t n, uint64_t seed, double scale) {
    kn_rng r = kn_rng_new(seed);
    double *d = malloc((size_t)n * sizeof *d);
    kn_rng_uniform_f64(&r, d, n);
    for (int64_t i = 0; i < n; i++) x[i] = (float)((2 * d[i] - 1) * scale);
    free(d);
}

KN_TEST(lowparams, the_fused_update_is_the_update_then_a_cast) {
    enum { N = 1000 };
    const kn_dtype dts[2] = {KN_DT_BF16, KN_DT_F16};
    for (int kind = 0; kind < 2; kind++)
        for (int d = 0; d < 2; d++) {
            kn_optim_config cfg = kn_optim_default();
            cfg.kind = kind ? KN_OPTIM_SGD : KN_OPTIM_ADAMW;
            if (kind) cfg.momentum = 0.9;
            cfg.weight_decay = 0.1;
            kn_optim a, b;
            KN_ASSERT_OK(kn_optim_init(&a, &cfg, N, N / 2));
            KN_ASSERT_OK(kn_optim_init(&b, &cfg, N, N / 2));
            float pa[N], pb[N], g[N];
            uint16_t low[N], want[N];
            fill(pa, N, 1, 3.0);
            memcpy(pb, pa, sizeof pa);
            for (int s = 0; s < 4; s++) {
                fill(g, N, 10 + (uint64_t)s, 1e-2);
                KN_ASSERT_OK(kn_optim_step_low(&a, pa, g, a.state, 1e-2, dts[d], low));
                KN_ASSERT_OK(kn_optim_step(&b, pb, g, 1e-2));
                kn_dtype_convert(dts[d], want, KN_DT_F32, pb, N);
                const char *what = kind ? "sgd" : "adamw";
                cr_assert(memcmp(pa, pb, sizeof pa) == 0, "%s %s step %d: the f32 slab differs", what,
                          kn_dtype_name(dts[d]), s);
                cr_assert(memcmp(a.state, b.state, (size_t)a.state_len * sizeof(float)) == 0, "%s: the state differs",
                          what);
                for (int i = 0; i < N; i++)
                    cr_assert_eq(low[i], want[i], "%s %s step %d: copy %d is 0x%04x, the cast 0x%04x", what,
                                 kn_dtype_name(dts[d]), s, i, low[i], want[i]);
            }
            cr_assert_eq(a.step, 4);
            kn_optim_free(&a), kn_optim_free(&b);
        }
    kn_optim o;
    kn_optim_config cfg = kn_optim_default();
    KN_ASSERT_OK(kn_optim_init(&o, &cfg, 4, 4));
    float p[4] = {0}, g[4] = {0};
    uint16_t low[4];
    KN_ASSERT_ERR(kn_optim_step_low(&o, p, g, o.state, 1e-2, KN_DT_F32, low), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "bf16 or f16"), "%s", kn_last_error());
    cr_assert_eq(o.step, 0, "a refused update does not count");
    kn_optim_free(&o);
}

static const kn_gpt_config cfg = {.vocab = 17, .context = 8, .layers = 2, .width = 16, .heads = 2};

static bool of_a_param(const kn_graph *g, int32_t v) {
    while (kn_op_get(g->nodes[v].op)->category == KN_CAT_VIEW) v = g->nodes[v].in[0];
    return g->nodes[v].op == KN_OP_PARAM;
}

KN_TEST(lowparams, the_weight_casts_become_params_and_nothing_else_changes) {
    kn_graph *g;
    KN_ASSERT_OK(kn_gpt_graph(&cfg, 2, 8, true, &g));
    const char *lists[2][2] = {{"autocast:bf16", "autocast:bf16,lowparams:bf16"},
                               {"autocast:fp16", "autocast:fp16,lowparams:fp16"}};
    for (int k = 0; k < 2; k++) {
        kn_pass_report rep;
        kn_graph *a = graph_after_passes(g, lists[k][0], NULL), *b = graph_after_passes(g, lists[k][1], &rep);
        int low_params = 0, weight_casts = 0;
        for (int32_t i = 0; i < b->nnodes; i++) {
            const kn_node *n = &b->nodes[i];
            if (n->op == KN_OP_PARAM && n->type.dtype != KN_DT_F32) {
                low_params++;
                cr_assert(strchr(n->attrs.name, '@'), "%s", n->attrs.name);
            }
            if (n->op == KN_OP_CAST && n->type.dtype != KN_DT_F32 && of_a_param(b, n->in[0])) weight_casts++;
        }
        cr_assert_eq(weight_casts, 0, "%s: %d casts of weights remain", lists[k][1], weight_casts);
        cr_assert_eq(low_params, 1 + 4 * cfg.layers, "%s: the embedding, and per layer q/k/v, projection, fc, fc2",
                     lists[k][1]);
        double delta = -1;
        KN_ASSERT_OK(kn_graph_compare(a, b, 3, &delta));
        cr_assert(delta == 0, "%s computes what autocast did: max |delta| %g", lists[k][1], delta);
        kn_graph_free(a), kn_graph_free(b);
    }
    KN_ASSERT_ERR(kn_passes_run(g, "lowparams:f32", NULL), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "lowparams:bf16 or lowparams:fp16"), "%s", kn_last_error());
    kn_graph_free(g);
}

KN_TEST(lowparams, lowloss_reads_the_low_logits_exactly) {
    kn_graph *g;
    kn_gpt_config big_vocab = cfg; /* the logits dominate the live set, as GPT-2's do */
    big_vocab.vocab = 1024;
    KN_ASSERT_OK(kn_gpt_graph(&big_vocab, 2, 8, true, &g));
    const char *lists[2][2] = {{"autocast:bf16", "autocast:bf16,lowloss"}, {"autocast:fp16", "autocast:fp16,lowloss"}};
    const kn_dtype dts[2] = {KN_DT_BF16, KN_DT_F16};
    for (int k = 0; k < 2; k++) {
        kn_graph *a = graph_after_passes(g, lists[k][0], NULL), *b = graph_after_passes(g, lists[k][1], NULL);
        int32_t ce = -1, bwd = -1;
        for (int32_t i = 0; i < b->nnodes; i++) {
            if (b->nodes[i].op == KN_OP_CROSS_ENTROPY) ce = i;
            if (b->nodes[i].op == KN_OP_CROSS_ENTROPY_BWD) bwd = i;
        }
        cr_assert(ce >= 0 && bwd >= 0);
        const kn_node *c = &b->nodes[ce], *d = &b->nodes[bwd];
        cr_assert(b->nodes[c->in[0]].op == KN_OP_MATMUL && b->nodes[c->in[0]].type.dtype == dts[k],
                  "%s: the loss reads the product's %s logits, not %s", lists[k][1], kn_dtype_name(dts[k]),
                  kn_op_name(b->nodes[c->in[0]].op));
        cr_assert_eq(c->type.dtype, KN_DT_F32, "the loss stays f32");
        cr_assert(d->type.dtype == dts[k] && d->in[1] == c->in[0], "%s: the gradient of the logits is %s, from them",
                  lists[k][1], kn_dtype_name(d->type.dtype));
        for (int32_t i = 0; i < b->nnodes; i++)
            cr_assert(!(b->nodes[i].op == KN_OP_CAST && (b->nodes[i].in[0] == c->in[0] || b->nodes[i].in[0] == bwd)),
                      "%s: %%%d still casts the logits or their gradient", lists[k][1], i);
        cr_assert_eq(b->nnodes, a->nnodes - 2, "the two casts go");
        double delta = -1;
        KN_ASSERT_OK(kn_graph_compare(a, b, 3, &delta));
        cr_assert(delta == 0, "%s: max |delta| %g", lists[k][1], delta);
        double la, lb;
        KN_ASSERT_OK(kn_graph_live_bytes(a, &la, NULL));
        KN_ASSERT_OK(kn_graph_live_bytes(b, &lb, NULL));
        cr_assert_lt(lb, la, "the largest live set falls: %g -> %g bytes", la, lb);
        kn_graph_free(a), kn_graph_free(b);
    }
    kn_graph_free(g);
}

enum { B = 2, T = 8, NTOK = 300 };

static void batch(int s, int32_t *x, int32_t *y) {
    int32_t toks[NTOK];
    for (int i = 0; i < NTOK; i++) toks[i] = (i * 7 + i * i) % cfg.vocab;
    KN_ASSERT_OK(kn_batch_sample(toks, NTOK, B, T, 5, 0, s, x, y));
}

/* Five steps of a fresh model on dev with the pass list; losses and norms into l[], n[]. */
static void run(kn_device dev, const char *passes, bool compiled, double *l, double *n, float *params, kn_trainer *keep) {
    kn_gpt g;
    kn_trainer t;
    kn_optim_config oc = kn_optim_default();
    KN_ASSERT_OK(kn_gpt_new(&g, &cfg));
    kn_gpt_init(&g, 4);
    KN_ASSERT_OK(kn_trainer_new(&t, &g, B, T, &oc, 1.0));
    if (dev.type != KN_DEVICE_CPU) KN_ASSERT_OK(kn_trainer_to_device(&t, dev));
    t.passes = passes;
    KN_ASSERT_OK(kn_trainer_set_compiled(&t, compiled));
    int32_t x[B * T], y[B * T];
    for (int s = 0; s < 5; s++) {
        batch(s, x, y);
        KN_ASSERT_OK(kn_trainer_step(&t, x, y, 1e-2, &l[s], &n[s]));
    }
    KN_ASSERT_OK(kn_trainer_sync_host(&t));
    memcpy(params, g.p.data, (size_t)g.p.n * sizeof(float));
    if (keep && t.low && dev.type == KN_DEVICE_CPU) { /* the low slab is the rounded slab */
        const uint16_t *low = kn_tensor_data(t.low);
        for (int64_t i = 0; i < g.p.n; i++)
            cr_assert_eq(low[i], round_to(t.low_dt, g.p.data[i]), "low copy %lld", (long long)i);
        keep->low_dt = t.low_dt;
    }
    kn_trainer_free(&t);
    kn_gpt_free(&g);
}

/* tol 0: bit for bit; else losses and norms within tol relative, and the weights within
 * 1e-2 in the 2-norm (|a - b| over |a|, every weight at once). AdamW moves a weight by
 * about lr whatever its gradient's size, so a tiny gradient element that rounds the other
 * way (fp16 without loss scaling flushes below 6e-8) moves its weight by up to a step's
 * worth, not by the rounding: on the H100 (2026-11-27) one fp16 weight moved 9.3e-3 at lr
 * 1e-2 and the 2-norm 2.2e-3 relative, while the losses and norms agreed within 1e-4.
 * A stale or wrong 16-bit copy moves every weight by that much (tens of percent). */
static void same_training(kn_device dev, bool compiled, const char *plain, const char *fused, double tol) {
    double la[5], na[5], lb[5], nb[5];
    int64_t n;
    {
        kn_gpt g;
        KN_ASSERT_OK(kn_gpt_new(&g, &cfg));
        n = g.p.n;
        kn_gpt_free(&g);
    }
    float *pa = malloc((size_t)n * sizeof(float)), *pb = malloc((size_t)n * sizeof(float));
    kn_trainer seen = {.low_dt = KN_DT_F32};
    run(dev, plain, compiled, la, na, pa, NULL);
    run(dev, fused, compiled, lb, nb, pb, &seen);
    if (dev.type == KN_DEVICE_CPU) cr_assert_neq(seen.low_dt, KN_DT_F32, "%s: the trainer made no low copies", fused);
    for (int s = 0; s < 5; s++)
        cr_assert(fabs(la[s] - lb[s]) <= tol * fabs(la[s]) && fabs(na[s] - nb[s]) <= tol * fabs(na[s]),
                  "%s (%s) step %d: loss %.17g, norm %.17g; without it %.17g, %.17g (tolerance %g)", fused,
                  compiled ? "compiled" : "interpreted", s, lb[s], nb[s], la[s], na[s], tol);
    double diff = 0, norm = 0, worst = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)pa[i] - (double)pb[i]);
        diff += d * d, norm += (double)pa[i] * pa[i];
        if (d > worst) worst = d, at = i;
    }
    cr_assert(tol > 0 ? sqrt(diff) <= 1e-2 * sqrt(norm) : worst == 0,
              "%s: the weights after 5 steps differ by %.3g in the 2-norm (of %.3g); the worst, %lld, is %.9g, %.9g "
              "without it", fused, sqrt(diff), sqrt(norm), (long long)at, (double)pb[at], (double)pa[at]);
    free(pa), free(pb);
}

KN_TEST(lowparams, training_is_bitwise_the_same, .timeout = 120) {
    char tmpl[] = "/tmp/kiln-lowp-XXXXXX";
    cr_assert_not_null(mkdtemp(tmpl));
    setenv("KILN_CACHE_DIR", tmpl, 1);
    same_training(KN_CPU, false, "autocast:bf16", "autocast:bf16,lowparams:bf16,lowloss", 0);
    same_training(KN_CPU, true, "autocast:bf16", "autocast:bf16,lowparams:bf16", 0);
    same_training(KN_CPU, true, "autocast:bf16", "autocast:bf16,lowparams:bf16,lowloss", 0);
    same_training(KN_CPU, true, "autocast:fp16", "autocast:fp16,lowparams:fp16,lowloss", 0);
}

KN_TEST(lowparams, on_a_gpu, .timeout = 120) {
    if (kn_device_count(KN_DEVICE_CUDA) <= 0) {
        cr_skip_test("no GPU here: the fused optimizer kernel and the compiled bf16 step run on a machine with one");
        return;
    }
    kn_device gpu = {KN_DEVICE_CUDA, 0};
    enum { N = 4096 };
    const kn_dtype dts[2] = {KN_DT_BF16, KN_DT_F16};
    for (int d = 0; d < 2; d++) { /* the kernel's copies are the rounding of its own f32 results */
        kn_optim o;
        kn_optim_config oc = kn_optim_default();
        KN_ASSERT_OK(kn_optim_init(&o, &oc, N, N));
        static float p[N], g[N];
        static uint16_t low[N];
        fill(p, N, 7, 2.0), fill(g, N, 8, 1e-2);
        void *dp, *dg, *ds, *dl;
        KN_ASSERT_OK(kn_device_alloc(gpu, sizeof p, &dp));
        KN_ASSERT_OK(kn_device_alloc(gpu, sizeof g, &dg));
        KN_ASSERT_OK(kn_device_alloc(gpu, 2 * sizeof p, &ds));
        KN_ASSERT_OK(kn_device_alloc(gpu, sizeof low, &dl));
        KN_ASSERT_OK(kn_device_memcpy(gpu, dp, KN_CPU, p, sizeof p));
        KN_ASSERT_OK(kn_device_memcpy(gpu, dg, KN_CPU, g, sizeof g));
        KN_ASSERT_OK(kn_device_memcpy(gpu, ds, KN_CPU, o.state, 2 * sizeof p));
        KN_ASSERT_OK(kn_device_optim_step_low(gpu, &o, dp, dg, ds, 1e-2, dts[d], dl));
        KN_ASSERT_OK(kn_device_memcpy(KN_CPU, p, gpu, dp, sizeof p));
        KN_ASSERT_OK(kn_device_memcpy(KN_CPU, low, gpu, dl, sizeof low));
        for (int i = 0; i < N; i++)
            cr_assert_eq(low[i], round_to(dts[d], p[i]), "%s copy %d: 0x%04x, the rounding of %a is 0x%04x",
                         kn_dtype_name(dts[d]), i, low[i], (double)p[i], round_to(dts[d], p[i]));
        kn_device_free(gpu, dp, sizeof p), kn_device_free(gpu, dg, sizeof g);
        kn_device_free(gpu, ds, 2 * sizeof p), kn_device_free(gpu, dl, sizeof low);
        kn_optim_free(&o);
    }
    char tmpl[] = "/tmp/kiln-lowpg-XXXXXX";
    cr_assert_not_null(mkdtemp(tmpl));
    setenv("KILN_CACHE_DIR", tmpl, 1);
    /* lowparams alone changes no kernel but the weights' casts: bit for bit. lowloss's loss
     * kernels read 16-bit rows in groups of 8, not the f32 copy's 4: the row sums (double)
     * are added in another order, so within rounding, not bitwise. A softmax that moves by
     * an ulp of f32 can round a gradient element to the neighbouring 16-bit value (2^-11
     * relative in fp16), and five steps carry that: on an H200 (2026-11-27) the fp16 norm
     * moved 2.1e-5 relative at step 3 and one weight 1.8e-4 (1e-5 had passed on the H100). */
    same_training(gpu, true, "autocast:bf16", "autocast:bf16,lowparams:bf16", 0);
    same_training(gpu, true, "autocast:bf16", "autocast:bf16,lowparams:bf16,lowloss", 1e-4);
    same_training(gpu, true, "autocast:fp16", "autocast:fp16,lowparams:fp16,lowloss", 1e-4);
}
