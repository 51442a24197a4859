/* test_offload.c — ZeRO-Offload's host step (kiln/offload.h) without a GPU: on KN_CPU its
 * "device" copies are plain copies, so the chunked pipeline (gradients down chunk by chunk,
 * kn_optim_step_range on each, parameters up) must give kn_optim_step's bits exactly, for
 * AdamW and SGD, with a chunk size that cuts a parameter range and the decayed/undecayed
 * boundary in the middle of a chunk. Also kn_optim_step_range's own contract, --offload's
 * parser, the refusal of a CPU trainer, and allocation failures (an error, no leak).
 * The GPU's version of these checks: tests/dist/test_offload_gpu.sh. */
#include <math.h>
#include <string.h>

#include "kiln/nn.h"
#include "kiln/offload.h"
#include "kiln/optim.h"
#include "kn_test.h"

enum { N = 50, DECAY = 23 };

static void fill(float *x, int n, float a, float b) {
    for (int i = 0; i < n; i++) x[i] = a * sinf((float)i * 0.7f + b) + 0.01f * (float)(i % 5);
}

KN_TEST(offload, step_range_covering_the_slab_is_one_step) {
    kn_optim_config c = kn_optim_default();
    kn_optim a, b;
    KN_ASSERT_OK(kn_optim_init(&a, &c, N, DECAY));
    KN_ASSERT_OK(kn_optim_init(&b, &c, N, DECAY));
    float pa[N], pb[N], g[N];
    fill(pa, N, 1, 0);
    memcpy(pb, pa, sizeof pa);
    for (int s = 0; s < 3; s++) {
        fill(g, N, 0.3f, (float)s);
        KN_ASSERT_OK(kn_optim_step(&a, pa, g, 0.01));
        int cuts[] = {0, 11, 12, 30, N}; /* uneven ranges, one across the decay boundary */
        for (int k = 0; k + 1 < 5; k++) KN_ASSERT_OK(kn_optim_step_range(&b, pb, g, b.state, 0.01, cuts[k], cuts[k + 1]));
        b.step++;
    }
    cr_assert(memcmp(pa, pb, sizeof pa) == 0, "the ranges' parameters differ from one step's");
    cr_assert(memcmp(a.state, b.state, (size_t)a.state_len * sizeof(float)) == 0, "the ranges' moments differ");
    cr_assert_eq(kn_optim_step_range(&b, pb, g, b.state, 0.01, 10, N + 1), KN_ERR_ARG);
    cr_assert_eq(kn_optim_step_range(&b, pb, g, b.state, 0.01, 5, 4), KN_ERR_ARG);
    cr_assert_eq(kn_optim_step_range(&b, pb, g, b.state, -1.0, 0, 1), KN_ERR_ARG);
    cr_assert_eq(b.step, 3, "a range does not count a step");
    kn_optim_free(&a);
    kn_optim_free(&b);
}

/* The offload of (kind, chunk) against kn_optim_step on a slab of n floats (the first
 * n_decay decayed), 4 steps, bit for bit. */
static void against_the_step(kn_optim_kind kind, int n, int n_decay, int64_t chunk) {
    kn_optim_config c = kn_optim_default();
    c.kind = kind;
    c.momentum = 0.9;
    kn_optim ref;
    KN_ASSERT_OK(kn_optim_init(&ref, &c, n, n_decay));
    float *p_ref = kn_malloc((size_t)n * sizeof(float)), *p_dev = kn_malloc((size_t)n * sizeof(float));
    float *g = kn_malloc((size_t)n * sizeof(float)), *state = kn_malloc((size_t)ref.state_len * sizeof(float));
    cr_assert(p_ref && p_dev && g && state);
    fill(p_ref, n, 1, 0.5f);
    /* a state that is not zero: the offload takes it over, as after a resume */
    for (int64_t i = 0; i < ref.state_len; i++) ref.state[i] = 1e-3f * (float)(i % 7);
    ref.step = 2;
    memcpy(p_dev, p_ref, (size_t)n * sizeof(float));
    kn_offload *f = NULL;
    KN_ASSERT_OK(kn_offload_new(&f, KN_CPU, &ref, p_dev, ref.state, chunk));
    kn_offload_stats st = kn_offload_stats_of(f);
    cr_assert_eq(st.chunks, chunk > 0 ? (n + chunk - 1) / chunk : 1);
    cr_assert_eq(st.host_bytes, (int64_t)(2 * n + ref.state_len) * 4, "master, gradients and state: %lld",
                 (long long)st.host_bytes);
    for (int s = 0; s < 4; s++) {
        fill(g, n, 0.2f, 1.0f + (float)s);
        KN_ASSERT_OK(kn_optim_step(&ref, p_ref, g, 0.02));
        KN_ASSERT_OK(kn_offload_step(f, p_dev, g, 0.02));
    }
    cr_assert(memcmp(p_ref, p_dev, (size_t)n * sizeof(float)) == 0, "n %d chunk %lld: parameters differ from "
              "kn_optim_step's", n, (long long)chunk);
    KN_ASSERT_OK(kn_offload_state(f, KN_CPU, state));
    cr_assert(memcmp(state, ref.state, (size_t)ref.state_len * sizeof(float)) == 0, "n %d chunk %lld: state differs",
              n, (long long)chunk);
    cr_assert_eq(kn_offload_optim(f)->step, ref.step);
    cr_assert_eq(kn_offload_stats_of(f).steps, 4);
    kn_offload_free(f);
    kn_optim_free(&ref);
    kn_free(p_ref);
    kn_free(p_dev);
    kn_free(g);
    kn_free(state);
}

KN_TEST(offload, adamw_chunks_equal_the_step) {
    against_the_step(KN_OPTIM_ADAMW, N, DECAY, 7);  /* 8 chunks, the last short, the boundary 23 inside one */
    against_the_step(KN_OPTIM_ADAMW, N, DECAY, 0);  /* the default: one chunk */
    against_the_step(KN_OPTIM_ADAMW, N, DECAY, N);
    /* chunks large enough to be cut over the worker pool (>= 2^16 floats) */
    against_the_step(KN_OPTIM_ADAMW, 300001, 123457, 100003);
}

KN_TEST(offload, sgd_chunks_equal_the_step) {
    against_the_step(KN_OPTIM_SGD, N, DECAY, 9);
    against_the_step(KN_OPTIM_SGD, 200000, 150001, 0);
}

KN_TEST(offload, parse_and_arguments) {
    bool on = true;
    KN_ASSERT_OK(kn_offload_parse("none", &on));
    cr_assert(!on);
    KN_ASSERT_OK(kn_offload_parse("optimizer", &on));
    cr_assert(on);
    cr_assert_eq(kn_offload_parse("optim", &on), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "expected none or optimizer"), "%s", kn_last_error());
    kn_optim_config c = kn_optim_default();
    kn_optim o;
    KN_ASSERT_OK(kn_optim_init(&o, &c, 4, 4));
    float p[4] = {0};
    kn_offload *f = NULL;
    cr_assert_eq(kn_offload_new(&f, KN_CPU, &o, p, NULL, -1), KN_ERR_ARG);
    cr_assert_eq(kn_offload_new(&f, KN_CPU, &o, NULL, NULL, 0), KN_ERR_ARG);
    cr_assert_null(f);
    KN_ASSERT_OK(kn_offload_new(&f, KN_CPU, &o, p, NULL, 0));
    cr_assert_eq(kn_offload_step(f, NULL, p, 0.1), KN_ERR_ARG);
    cr_assert_eq(kn_offload_step(f, p, p, -0.5), KN_ERR_ARG, "a negative learning rate");
    kn_offload_free(f);
    kn_offload_free(NULL);
    kn_optim_free(&o);
}

KN_TEST(offload, out_of_memory_is_an_error) {
    kn_optim_config c = kn_optim_default();
    kn_optim o;
    KN_ASSERT_OK(kn_optim_init(&o, &c, N, DECAY));
    float p[N] = {0};
    int failed = 0;
    for (long k = 0; k < 12; k++) {
        kn_offload *f = NULL;
        kn_alloc_fail_after(k);
        kn_status st = kn_offload_new(&f, KN_CPU, &o, p, o.state, 8);
        kn_alloc_fail_after(-1);
        if (st != KN_OK) {
            cr_assert_null(f);
            failed++;
        }
        kn_offload_free(f);
    }
    cr_assert(failed >= 3, "allocations failed in %d of 12 tries", failed);
    kn_optim_free(&o);
}

/* A CPU trainer offloaded (plain copies: kiln train refuses it, the library runs it) takes
 * the plain trainer's steps bit for bit: the hook, the step count, the state's way back. */
KN_TEST(offload, a_trainer_steps_as_without) {
    const kn_gpt_config cfg = {.vocab = 7, .context = 8, .layers = 1, .width = 8, .heads = 2};
    kn_gpt g[2];
    kn_trainer tr[2];
    kn_optim_config oc = kn_optim_default();
    for (int k = 0; k < 2; k++) {
        KN_ASSERT_OK(kn_gpt_new(&g[k], &cfg));
        kn_gpt_init(&g[k], 1);
        KN_ASSERT_OK(kn_trainer_new(&tr[k], &g[k], 2, 8, &oc, 0.5));
    }
    kn_offload *f = NULL;
    KN_ASSERT_OK(kn_offload_trainer(&f, &tr[1], 100)); /* chunks cut the parameters */
    cr_assert(tr[1].optim_hook != NULL);
    cr_assert_eq(kn_offload_trainer(&f, &tr[1], 0), KN_ERR_ARG, "offloaded twice");
    cr_assert_eq(kn_offload_stats_of(f).device_freed, 0, "nothing on a device to give back");
    int32_t x[16], y[16];
    for (int s = 0; s < 3; s++) {
        for (int i = 0; i < 16; i++) x[i] = (i * 3 + s) % 7, y[i] = (i * 5 + 2 * s + 1) % 7;
        double l0, l1, n0, n1;
        KN_ASSERT_OK(kn_trainer_step(&tr[0], x, y, 0.05, &l0, &n0));
        KN_ASSERT_OK(kn_trainer_step(&tr[1], x, y, 0.05, &l1, &n1));
        cr_assert(l0 == l1 && n0 == n1, "step %d: loss %.17g vs %.17g, norm %.17g vs %.17g", s, l0, l1, n0, n1);
    }
    cr_assert(memcmp(g[0].p.data, g[1].p.data, (size_t)g[0].p.n * sizeof(float)) == 0, "parameters differ");
    cr_assert_eq(tr[1].opt.step, 3);
    KN_ASSERT_OK(kn_offload_sync(f));
    cr_assert(memcmp(tr[0].opt.state, tr[1].opt.state, (size_t)tr[0].opt.state_len * sizeof(float)) == 0,
              "the synced state differs");
    kn_offload_free(f);
    cr_assert_null(tr[1].optim_hook, "free detaches the hook");
    for (int k = 0; k < 2; k++) {
        kn_trainer_free(&tr[k]);
        kn_gpt_free(&g[k]);
    }
}
