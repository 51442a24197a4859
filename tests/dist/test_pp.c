/* test_pp.c — pipeline parallelism against one process (`test-dist pp`, under mpiexec -n 1,
 * 2 or 4: every rank is one stage of the pp axis).
 *
 * Each rank builds the same small GPT twice: a one-process trainer on the whole global
 * batch (the reference, computed on every rank) and a trainer on one micro-batch under
 * kn_pp with each schedule (gpipe, 1f1b, interleaved with 2 chunks per rank). Checked: the
 * losses of every step (on every rank) and, after kn_pp_gather, every parameter equal the
 * reference's to the tolerance of a summation order; before the gather the two copies of the
 * tied wte (ranks 0 and p-1) are bitwise equal; the stash never holds more than the
 * schedule allows (1F1B: p - rank micro-batches, GPipe: m); the timeline has the schedule's
 * actions in order, each after its input arrived, a forward's input never before the
 * previous stage's forward of that micro-batch sent it (across ranks, on the common clock),
 * and a bubble in [0, 1); with every action sleeping a fixed time (the test hook), the
 * measured bubble is within 6 points of (p-1)/(v m+p-1); the bad configurations are refused
 * with their message. */
#include <math.h>
#include <string.h>

#include "dist_test.h"
#include "kiln/mesh.h"
#include "kiln/nn.h"

enum { G = 8, T = 8, M = 4, STEPS = 3 }; /* global batch, sequence, micro-batches (a multiple of 1, 2, 4), steps */
static const kn_gpt_config cfg = {.vocab = 13, .context = T, .layers = 8, .width = 16, .heads = 2};

static void batch(int32_t *x, int32_t *y, int step) { dist_test_batch(x, y, G, T, cfg.vocab, step); }


/* The timeline's structure: this rank's actions are the schedule's, in order, each one's
 * input there before it computes; across ranks, F(micro, stage s) starts computing only
 * after F(micro, s-1) sent its output (absolute clock: the ranks share a host). */
static void check_timeline(kn_pp *pp, kn_comm *c) {
    int n = pp->nactions, p = pp->p;
    for (int i = 0; i < n; i++) {
        const kn_pp_record *e = &pp->events[i];
        CHECK(e->op == (int)pp->actions[i].op && e->micro == pp->actions[i].micro && e->chunk == pp->actions[i].chunk,
              "timeline action %d is not the schedule's", i);
        CHECK(e->t0 <= e->t_ready && e->t_ready <= e->t1, "action %d: t0 %g, ready %g, t1 %g out of order", i, e->t0,
              e->t_ready, e->t1);
        if (i > 0) CHECK(pp->events[i - 1].t1 <= e->t0, "action %d starts before action %d ended", i, i - 1);
    }
    /* every rank's forward sends, absolute: [rank][chunk][micro] */
    int V = pp->v, cells = p * V * M;
    double *end = kn_calloc((size_t)cells, sizeof *end), *ready = kn_calloc((size_t)cells, sizeof *ready);
    for (int i = 0; i < n; i++) {
        const kn_pp_record *e = &pp->events[i];
        if (e->op != KN_PP_FWD) continue;
        int at = (pp->rank * V + e->chunk) * M + e->micro;
        end[at] = pp->t_step0 + e->t_sent; /* its output left here: the program's end-of-run work follows */
        CHECK(e->t_ready <= e->t_sent && e->t_sent <= e->t1, "action %d: sent at %g outside [%g, %g]", i, e->t_sent,
              e->t_ready, e->t1);
        ready[at] = pp->t_step0 + e->t_ready;
    }
    CHECK(kn_comm_all_reduce(c, end, end, cells, KN_DT_F64) == KN_OK, "gather the forward ends");
    CHECK(kn_comm_all_reduce(c, ready, ready, cells, KN_DT_F64) == KN_OK, "gather the forward starts");
    for (int s = 1; s < p * V; s++)
        for (int m = 0; m < M; m++) {
            int r = s % p, ch = s / p, pr = (s - 1) % p, pc = (s - 1) / p;
            double got = ready[(r * V + ch) * M + m], before = end[(pr * V + pc) * M + m];
            CHECK(got + 1e-4 >= before, "F(micro %d) of stage %d had its input at %.6f, before stage %d's forward "
                  "sent it at %.6f", m, s, got, s - 1, before);
        }
    kn_free(end);
    kn_free(ready);
    double bubble = -1;
    CHECK(kn_pp_timeline(pp, NULL, &bubble) == KN_OK && bubble >= 0 && bubble < 1, "bubble %g", bubble);
}

/* Memory per rank: between steps the trainer's whole-model slabs are gone (parameters,
 * gradients, optimizer state), and this rank's own slabs hold exactly its stages'
 * parameters, counted here from the GPT's shapes (not from the split's code): a block has
 * 12 D^2 + 13 D (ln_1 2D, c_attn 3D^2 + 3D, attn c_proj D^2 + D, ln_2 2D, c_fc 4D^2 + 4D,
 * mlp c_proj 4D^2 + D), stage 0 adds wpe C D, the last stage ln_f 2D, and a rank holding
 * either holds the tied wte V D (once: the last rank's is its own copy). Tolerance: none (the counts are whole numbers); AdamW's state is
 * 2 floats per parameter. Over the ranks: P plus one more wte (p > 1). */
static void check_memory(kn_pp *pp, const kn_gpt *g, const kn_trainer *tr, kn_comm *c) {
    int64_t D = cfg.width, V = cfg.vocab, C = cfg.context, L = cfg.layers, blk = 12 * D * D + 13 * D;
    int S = pp->stages, per = (int)L / S;
    CHECK(V * D + C * D + L * blk + 2 * D == g->p.n, "the GPT's shapes give %lld parameters, the model has %lld",
          (long long)(V * D + C * D + L * blk + 2 * D), (long long)g->p.n);
    int64_t want = 0;
    bool wte = false; /* once per rank, whichever of its stages reads it */
    for (int ch = 0; ch < pp->v; ch++) {
        int s = ch * pp->p + pp->rank;
        want += per * blk;
        if (s == 0) want += C * D;
        if (s == S - 1) want += 2 * D;
        wte |= s == 0 || s == S - 1;
    }
    want += wte ? V * D : 0;
    CHECK(pp->held == want, "rank %d holds %lld parameters, its stages have %lld", pp->rank, (long long)pp->held,
          (long long)want);
    CHECK(!g->p.slab && !g->p.data && !tr->params && !tr->grad && !tr->opt.state && !tr->low,
          "rank %d: the trainer's whole-model slabs are still allocated between steps", pp->rank);
    double *st = kn_calloc((size_t)KN_PP_STATS * (size_t)pp->p, sizeof *st);
    CHECK(kn_pp_rank_stats(pp, st) == KN_OK, "rank stats");
    double sum = 0, *me = st + KN_PP_STATS * pp->rank;
    for (int r = 0; r < pp->p; r++) sum += st[KN_PP_STATS * r + 2];
    CHECK(sum == (double)(g->p.n + (pp->p > 1 ? V * D : 0)), "the ranks hold %.0f parameters, not P + wte", sum);
    CHECK(me[3] == 4.0 * (double)want && me[4] == 4.0 * (double)want && me[5] == 8.0 * (double)want && me[6] == 0,
          "rank %d's slabs: %.0f parameter, %.0f gradient, %.0f AdamW-state, %.0f low-copy bytes for %lld parameters",
          pp->rank, me[3], me[4], me[5], me[6], (long long)want);
    kn_free(st);
    (void)c;
}

static void pp_against_one_process(kn_comm *c, kn_pp_kind kind) {
    int p = c->size;
    kn_gpt ref = {0}, g = {0};
    kn_trainer tr_ref = {0}, tr = {0};
    kn_optim_config oc = kn_optim_default();
    int32_t x[G * T], y[G * T];
    CHECK(kn_gpt_new(&ref, &cfg) == KN_OK && kn_gpt_new(&g, &cfg) == KN_OK, "models");
    kn_gpt_init(&ref, 7);
    kn_gpt_init(&g, 7);
    CHECK(kn_trainer_new(&tr_ref, &ref, G, T, &oc, 1.0) == KN_OK, "reference trainer");
    CHECK(kn_trainer_new(&tr, &g, G / M, T, &oc, 1.0) == KN_OK, "stage trainer");
    kn_pp pp;
    kn_pp_config pc = {.schedule = kind, .micro = M};
    kn_status st = kn_pp_new(&pp, c, &tr, &pc);
    CHECK(st == KN_OK, "kn_pp_new %s on %d ranks", kn_pp_kind_name(kind), p);
    if (st != KN_OK) goto out;
    for (int s = 0; s < STEPS; s++) {
        double l_ref = 0, l = 0, gn_ref = 0, gn = 0;
        batch(x, y, s);
        CHECK(kn_trainer_step(&tr_ref, x, y, 1e-2, &l_ref, &gn_ref) == KN_OK, "reference step");
        CHECK(kn_pp_step(&pp, x, y, G, 1e-2, &l, &gn) == KN_OK, "%s step %d", kn_pp_kind_name(kind), s);
        CHECK(fabs(l - l_ref) <= 1e-5 * fabs(l_ref), "%s step %d: loss %.9g, one process %.9g", kn_pp_kind_name(kind),
              s, l, l_ref);
        CHECK(fabs(gn - gn_ref) <= 1e-4 * fabs(gn_ref), "%s step %d: gradient norm %.9g, one process %.9g",
              kn_pp_kind_name(kind), s, gn, gn_ref);
    }
    /* the stash: 1F1B keeps at most p - rank micro-batches (one per stage still to come back) */
    if (kind == KN_PP_1F1B) CHECK(pp.stash_peak <= p - pp.rank, "1f1b: %d stashed at the peak", pp.stash_peak);
    if (kind == KN_PP_GPIPE) CHECK(pp.stash_peak == M, "gpipe: %d stashed at the peak, not %d", pp.stash_peak, M);
    CHECK(pp.stash_alive == 0, "%d stash slots still in use after the step", pp.stash_alive);
    check_memory(&pp, &g, &tr, c);
    /* the tied wte: ranks 0 and p-1 hold the same bits before any gather (at the start of
     * both ranks' own slabs: wte is the model slab's first parameter) */
    if (p > 1) {
        int64_t nw = g.p.info[0].numel;
        const float *mine = kn_tensor_data(pp.lparam);
        float *w = kn_malloc((size_t)nw * sizeof *w);
        memcpy(w, mine, (size_t)nw * sizeof *w);
        CHECK(kn_comm_broadcast(c, w, nw, KN_DT_F32, p - 1) == KN_OK, "broadcast wte");
        if (pp.rank == 0) CHECK(!memcmp(w, mine, (size_t)nw * sizeof *w), "the two copies of wte differ");
        kn_free(w);
    }
    check_timeline(&pp, c);
    /* the bubble: with every forward 30 ms and backward 60 ms of sleep the compute is noise,
     * and the measured idle share is the schedule's: (p-1)/(v m+p-1) (v = 1: (p-1)/(m+p-1)) */
    if (p > 1) {
        double bubble = -1, want = (double)(p - 1) / (pp.v * M + p - 1);
        pp.test_sleep[0] = 0.03;
        pp.test_sleep[1] = 0.06;
        batch(x, y, 0);
        CHECK(kn_pp_step(&pp, x, y, G, 0.0, NULL, NULL) == KN_OK, "a step with sleeps");
        CHECK(kn_pp_timeline(&pp, NULL, &bubble) == KN_OK, "timeline");
        CHECK(fabs(bubble - want) < 0.06, "%s on %d ranks: bubble %.3f measured, %.3f by the formula",
              kn_pp_kind_name(kind), p, bubble, want);
        if (g_rank == 0)
            printf("pp %d ranks, %-11s m=%d, forward 30 ms, backward 60 ms: bubble %.1f%% measured, %.1f%% by the "
                   "formula\n", p, kn_pp_kind_name(kind), M, 100 * bubble, 100 * want);
        pp.test_sleep[0] = pp.test_sleep[1] = 0;
    }
    CHECK(kn_pp_gather(&pp) == KN_OK, "gather");
    double w = dist_test_param_diff(&ref.p, &g.p);
    CHECK(w <= 1e-3, "%s: the parameters differ from one process by %.3g relative", kn_pp_kind_name(kind), w);
    if (g_rank == 0)
        printf("pp %d ranks, %-11s m=%d: parameters within %.2g of one process; stash peak %d (%lld bytes) on "
               "rank 0\n", p, kn_pp_kind_name(kind), M, w, pp.stash_peak, (long long)pp.stash_peak_bytes);
    kn_pp_free(&pp);
out:
    kn_trainer_free(&tr);
    kn_trainer_free(&tr_ref);
    kn_gpt_free(&g);
    kn_gpt_free(&ref);
}

/* The configurations refused before anything runs, each with its message. */
static void check_refusals(void) {
    kn_gpt_config g6 = cfg;
    g6.layers = 6;
    struct {
        const kn_gpt_config *g;
        int p, ranks, batch, micro, chunks;
        kn_pp_kind kind;
        const char *msg;
    } bad[] = {
        {&cfg, 4, 2, 8, 4, 0, KN_PP_1F1B, "one rank per stage"},
        {&g6, 4, 4, 8, 4, 0, KN_PP_1F1B, "do not divide into 4 stages"},
        {&g6, 2, 2, 8, 4, 0, KN_PP_INTERLEAVED, "do not divide into 4 stages"},
        {&cfg, 4, 4, 8, 2, 0, KN_PP_1F1B, "need --microbatches >= --pp"},
        {&cfg, 4, 4, 8, 2, 0, KN_PP_INTERLEAVED, "need --microbatches >= --pp"},
        {&cfg, 2, 2, 10, 3, 0, KN_PP_1F1B, "not divisible by --microbatches"},
        {&cfg, 2, 2, 6, 3, 0, KN_PP_INTERLEAVED, "not a multiple of --pp"},
        {&cfg, 2, 2, 8, 4, 2, KN_PP_1F1B, "only the interleaved schedule"},
        {&cfg, 2, 2, 8, 4, 1, KN_PP_INTERLEAVED, "needs >= 2 chunks"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kn_pp_config pc = {.schedule = bad[i].kind, .micro = bad[i].micro, .chunks = bad[i].chunks};
        kn_status st = kn_pp_check(bad[i].g, bad[i].p, bad[i].ranks, bad[i].batch, &pc);
        CHECK(st == KN_ERR_ARG && strstr(kn_last_error(), bad[i].msg), "refusal %zu: expected \"%s\"", i, bad[i].msg);
    }
    kn_pp_config ok = {.schedule = KN_PP_GPIPE, .micro = 2};
    CHECK(kn_pp_check(&cfg, 4, 4, 8, &ok) == KN_OK, "gpipe with m < p is allowed");
}

void test_pp(kn_comm *c) {
    check_refusals();
    for (int k = 0; k < KN_PP_KIND_COUNT; k++) pp_against_one_process(c, (kn_pp_kind)k);
}
