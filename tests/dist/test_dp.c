/* test_dp.c — ZeRO-3 through the library, on every rank of test-dist (1, 2 and 4 ranks).
 *
 * Each rank builds the same small GPT twice: a one-process trainer on the whole global
 * batch (the reference, computed on every rank) and a trainer on its rows under
 * kn_dp(ZeRO-3). Checked: the losses of every step and the parameters after them equal the
 * reference's to the tolerance of a summation order, with one micro-batch and with two;
 * while training, the model's parameter slab is gone (the allocator's live bytes fall by
 * what the rank no longer holds), the per-rank parameter bytes are the shard, the gathered
 * buckets peak below the whole slab and are all freed after a step; the evaluation program
 * refuses to run on parameters that are not there, with a message, and runs once
 * kn_dp_gather_state brought them back; a step after that drops them again; after
 * kn_dp_free the trainer evaluates on the gathered slab; bad configurations are refused. */
#include <math.h>
#include <string.h>

#include "dist_test.h"
#include "kiln/nn.h"

enum { G = 8, T = 8 }; /* global batch (divisible by 1, 2, 4 ranks x 2 micro-batches), sequence */
static const kn_gpt_config cfg = {.vocab = 11, .context = T, .layers = 2, .width = 16, .heads = 2};

static void batch(int32_t *x, int32_t *y, int step) { dist_test_batch(x, y, G, T, cfg.vocab, step); }


/* ZeRO-3 with `accum` micro-batches for `steps` steps against the reference. */
static void zero3_against_one_process(kn_comm *c, int accum, int steps) {
    int N = c->size;
    kn_gpt ref = {0}, g = {0};
    kn_trainer tr_ref = {0}, tr = {0};
    kn_optim_config oc = kn_optim_default();
    int32_t x[G * T], y[G * T];
    CHECK(kn_gpt_new(&ref, &cfg) == KN_OK && kn_gpt_new(&g, &cfg) == KN_OK, "models");
    kn_gpt_init(&ref, 5);
    kn_gpt_init(&g, 5);
    CHECK(kn_trainer_new(&tr_ref, &ref, G, T, &oc, 1.0) == KN_OK, "reference trainer");
    CHECK(kn_trainer_new(&tr, &g, G / (N * accum), T, &oc, 1.0) == KN_OK, "rank trainer");
    /* kn_dp_new compiles the step again with the zero3 pass: the two programs' own bytes */
    int64_t P = g.p.n, progs[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        kn_program *p = NULL;
        kn_program_opts po = {.device = tr.dev, .passes = k ? "zero3:0.002" : tr.passes,
                              .mode = tr.compiled ? KN_PROGRAM_COMPILED : KN_PROGRAM_NODES, .cuda_emu = tr.cuda_emu};
        int64_t b0 = (int64_t)kn_alloc_bytes();
        CHECK(kn_program_compile(&p, tr.joint, &po) == KN_OK, "compile %d", k);
        progs[k] = (int64_t)kn_alloc_bytes() - b0;
        kn_program_free(p);
    }
    int64_t before = (int64_t)kn_alloc_bytes();
    kn_dp d;
    kn_dp_config dc = {.strategy = KN_DP_ZERO3, .bucket_mb = 0.002, .accum = accum};
    if (kn_dp_new(&d, c, &tr, &dc) != KN_OK) {
        CHECK(false, "kn_dp_new zero3");
        goto out;
    }
    int64_t len = d.shard_lo[c->rank + 1] - d.shard_lo[c->rank], largest = 0, smallest = 4 * P;
    for (int b = 0; b < d.nbuckets; b++) {
        if ((d.buckets[b].hi - d.buckets[b].lo) * 4 > largest) largest = (d.buckets[b].hi - d.buckets[b].lo) * 4;
        if ((d.buckets[b].hi - d.buckets[b].lo) * 4 < smallest) smallest = (d.buckets[b].hi - d.buckets[b].lo) * 4;
    }
    /* gone: the parameter (4P), gradient (4P) and optimizer-state (8P) slabs; held: their
     * shards (16P/N) and the bookkeeping (a few KiB) */
    int64_t saved = before - (int64_t)kn_alloc_bytes(), want = 16 * P - 16 * len - (progs[1] - progs[0]);
    CHECK(!g.p.slab && !g.p.data && !tr.params, "the model's parameter slab is freed");
    CHECK(saved >= want - 32768, "live bytes fell by %lld, expected about %lld", (long long)saved, (long long)want);
    batch(x, y, 0);
    CHECK(kn_trainer_step(&tr, x, y, 1e-2, NULL, NULL) == KN_ERR_ARG && strstr(kn_last_error(), "kn_dp_step"),
          "the trainer alone refuses to step on a sharded slab");
    kn_dp_memory m = kn_dp_memory_of(&d);
    CHECK(m.params == 4 * len && m.grads == 4 * len && m.optim == 8 * len, "memory %lld %lld %lld, shard %lld",
          (long long)m.params, (long long)m.grads, (long long)m.optim, (long long)len);
    int64_t held = 0;
    for (int s = 0; s < steps; s++) {
        double l_ref = 0, l = 0;
        batch(x, y, s);
        CHECK(kn_trainer_step(&tr_ref, x, y, 1e-2, &l_ref, NULL) == KN_OK, "reference step");
        held = (int64_t)kn_alloc_bytes();
        CHECK(kn_dp_step(&d, x, y, G, 1e-2, &l, NULL) == KN_OK, "zero3 step %d", s);
        CHECK(fabs(l - l_ref) <= 1e-5 * fabs(l_ref), "step %d: loss %.9g, one process %.9g", s, l, l_ref);
        /* the gathered buckets die with their last readers: a step after the first (which
         * makes the program's arena) ends holding less extra than its smallest bucket */
        CHECK(s == 0 || (int64_t)kn_alloc_bytes() - held < smallest, "step %d: %lld more bytes held after it", s,
              (long long)((int64_t)kn_alloc_bytes() - held));
        CHECK(d.gathered_bytes > 4 * P * accum && d.gathered_bytes <= 8 * P * accum,
              "step %d gathered %lld bytes: every bucket once or twice per micro-batch (4P = %lld)", s,
              (long long)d.gathered_bytes, (long long)(4 * P));
    }
    CHECK(d.gathered_peak >= largest && d.gathered_peak < 4 * P, "gathered at the peak %lld (largest bucket %lld, "
          "the slab %lld)", (long long)d.gathered_peak, (long long)largest, (long long)(4 * P));
    double l_eval = 0;
    batch(x, y, 0);
    CHECK(kn_trainer_eval(&tr, x, y, &l_eval) == KN_ERR_ARG && strstr(kn_last_error(), "deferred"),
          "evaluation without the parameters says what is missing");
    CHECK(kn_dp_gather_state(&d) == KN_OK && g.p.slab, "gather the parameters");
    CHECK(kn_trainer_eval(&tr, x, y, &l_eval) == KN_OK && isfinite(l_eval), "evaluation after the gather");
    double w = g.p.data ? dist_test_param_diff(&ref.p, &g.p) : 1;
    CHECK(w <= 1e-3, "accum %d: the parameters differ from one process by %.3g relative", accum, w);
    /* one more step drops the gathered slab again and stays on course */
    double l_ref = 0, l = 0;
    batch(x, y, steps);
    CHECK(kn_trainer_step(&tr_ref, x, y, 1e-2, &l_ref, NULL) == KN_OK, "reference step");
    CHECK(kn_dp_step(&d, x, y, G, 1e-2, &l, NULL) == KN_OK && !g.p.slab, "a step after the gather");
    CHECK(fabs(l - l_ref) <= 1e-5 * fabs(l_ref), "after the gather: loss %.9g, one process %.9g", l, l_ref);
    /* gathered, then freed: the trainer's programs read the gathered slab */
    CHECK(kn_dp_gather_state(&d) == KN_OK, "gather again");
    kn_dp_free(&d);
    CHECK(kn_trainer_eval(&tr, x, y, &l_eval) == KN_OK, "evaluation after kn_dp_free");
out:
    kn_trainer_free(&tr);
    kn_trainer_free(&tr_ref);
    kn_gpt_free(&g);
    kn_gpt_free(&ref);
}

void test_zero3(kn_comm *c) {
    zero3_against_one_process(c, 1, 3);
    zero3_against_one_process(c, 2, 2);
    /* refused: the ring (DDP's), int8 compression (DDP's) */
    kn_gpt g = {0};
    kn_trainer tr = {0};
    kn_optim_config oc = kn_optim_default();
    kn_dp d;
    CHECK(kn_gpt_new(&g, &cfg) == KN_OK, "model");
    CHECK(kn_trainer_new(&tr, &g, 2, T, &oc, 1.0) == KN_OK, "trainer");
    kn_dp_config ring = {.strategy = KN_DP_ZERO3, .bucket_mb = 1, .accum = 1, .ring = true};
    CHECK(kn_dp_new(&d, c, &tr, &ring) == KN_ERR_ARG && strstr(kn_last_error(), "ring"), "zero3 with the ring");
    kn_dp_config comp = {.strategy = KN_DP_ZERO3, .bucket_mb = 1, .accum = 1, .compress = true};
    CHECK(kn_dp_new(&d, c, &tr, &comp) == KN_ERR_UNSUPPORTED && strstr(kn_last_error(), "compress"),
          "zero3 with int8 compression");
    CHECK(g.p.slab != NULL, "a refused kn_dp_new leaves the model whole");
    kn_trainer_free(&tr);
    kn_gpt_free(&g);
    if (g_rank == 0) printf("zero3: %d rank(s): the losses and parameters of one process, 1 and 2 micro-batches\n", c->size);
}
