/* test_matrix.c — data parallelism in every combination a user would combine, against one
 * process (`test-dist matrix` under mpiexec -n 2, make test's test-step-dist-matrix).
 *
 * A cell is precision (fp32, bf16, fp16 with a dynamic loss scale) x strategy (ddp, zero1,
 * zero2, zero3) x program mode (node by node, compiled C) x micro-batches (1, 2), and the
 * graph rewrites that run on the CPU (flash attention, horizontal fusion, remat) on a
 * slice of them; and a tp=2 mesh (kn_tp, Megatron's split) and a pp=2 pipeline (kn_pp, 1F1B) per
 * precision and mode. The same tiny GPT is trained twice: by one process on the whole global
 * batch with the cell's passes (the reference: one per pass list and mode, shared by the
 * cells that use it, run by rank 0 and broadcast) and by a trainer per rank on its rows
 * under kn_dp. After each step the losses must agree, and after the last the parameters
 * (gathered) and the loss scaler (also for one process with the step runner's own
 * accumulation over 4 micro-batches), to the tolerance of a different summation order in the cell's precision (16-bit
 * values can flip one rounding: a bf16 or fp16 ulp of a parameter, not more). fp16 cells
 * plant an inf in the gradients at step 1 on rank 1 ONLY (and in the reference): every
 * rank must skip that step, as the reference does, and back off to the same scale — the
 * loss-scale agreement; a rank that decided alone would update while the other did not.
 *
 * SGD with momentum, not AdamW: Adam divides by sqrt(v), so a gradient that is zero in
 * exact arithmetic (the attention's key bias) gets a +-lr update from rounding noise
 * alone, whose sign depends on the summation order: an order-dependent parameter that
 * says nothing about the strategy (tests/dist/compare.py). Momentum is optimizer state
 * that ZeRO shards all the same. One launch runs every cell: the whole matrix costs one
 * MPI start-up, and the compiled cells share the kernel cache. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dist_test.h"
#include "kiln/mesh.h"
#include "kiln/nn.h"
#include "kiln/step.h"

enum { G = 8, T = 8, STEPS = 3, INJECT_STEP = 1, INJECT_RANK = 1 };
static const kn_gpt_config cfg = {.vocab = 11, .context = T, .layers = 2, .width = 16, .heads = 2};

typedef struct cell {
    const char *prec;        /* fp32, bf16, fp16 */
    kn_dp_strategy strategy;
    bool compiled;
    int accum;
    const char *extra;       /* a rewrite pass ("flash", "hfuse", "remat:selective") or "" */
    bool local;              /* no data parallelism: the step runner's own accumulation */
    bool tp;                 /* a tp=2 mesh (kn_tp: Megatron's split of the joint graph) instead of kn_dp */
    bool pp;                 /* a pp=2 pipeline (kn_pp: 1F1B, 2 micro-batches) instead of kn_dp */
} cell;

static void batch(int32_t *x, int32_t *y, int step) {
    for (int i = 0; i < G * T; i++) {
        x[i] = (i * 7 + step * 3 + i / T) % cfg.vocab;
        y[i] = (i * 5 + step + 1) % cfg.vocab;
    }
}

static kn_optim_config optim(void) {
    kn_optim_config o = kn_optim_default();
    o.kind = KN_OPTIM_SGD;
    o.momentum = 0.9;
    o.weight_decay = 0.01;
    return o;
}

/* The cell's pass list, in kiln train's order (core/cli/train.c): flash, the precision's
 * (autocast, the 16-bit loss and saves, the weights' low copies except under ZeRO-3, whose
 * step casts the gathered weights itself, and on a tp mesh, whose local step casts its
 * shards), hfuse, remat. */
static void passes_of(const cell *c, char *out, size_t cap) {
    bool low = strcmp(c->prec, "fp32") != 0;
    char prec[96] = "";
    bool copies = c->strategy != KN_DP_ZERO3 && !c->tp; /* kiln train's: ZeRO-3 and a mesh cast in-step */
    if (low)
        snprintf(prec, sizeof prec, "autocast:%s,lowloss,lowsave%s%s", c->prec, copies ? ",lowparams:" : "",
                 copies ? c->prec : "");
    const char *parts[4] = {!strcmp(c->extra, "flash") ? "flash" : "", prec, !strcmp(c->extra, "hfuse") ? "hfuse" : "",
                            !strncmp(c->extra, "remat", 5) ? c->extra : ""};
    out[0] = '\0';
    for (int i = 0; i < 4; i++)
        if (parts[i][0]) snprintf(out + strlen(out), cap - strlen(out), "%s%s", out[0] ? "," : "", parts[i]);
}

/* A trainer of `rows` rows set up as the cell says: passes, mode, loss scale. The rank's
 * trainer (`compile` false) is compiled once, by kn_dp_new (the step runner compiles with
 * the trainer's passes and mode and the strategy's pass): the cold kernel cache makes every
 * compile count. */
static kn_status trainer_for(const cell *c, const char *passes, kn_gpt *g, kn_trainer *tr, int rows, bool compile) {
    kn_optim_config oc = optim();
    KN_TRY(kn_gpt_new(g, &cfg));
    kn_gpt_init(g, 5);
    KN_TRY(kn_trainer_new(tr, g, rows, T, &oc, 0.0)); /* no clip: a wrong gradient scale must show */
    tr->passes = passes[0] ? passes : NULL;
    tr->compiled = c->compiled;
    if (compile) KN_TRY(kn_trainer_set_compiled(tr, c->compiled));
    if (!strcmp(c->prec, "fp16")) {
        kn_loss_scaler s = kn_loss_scaler_dynamic();
        KN_TRY(kn_trainer_set_loss_scale(tr, &s));
    }
    return KN_OK;
}

/* The one-process run of a pass list and mode: losses, final parameters, scaler. */
typedef struct reference {
    char key[200];
    double loss[STEPS];
    float *params;
    int64_t n;
    double scale;
    int64_t opt_step;
    bool ok;
} reference;

enum { MAX_REFS = 64 };
static reference refs[MAX_REFS];
static int nrefs;

/* Rank 0 runs the reference (the other ranks would compile the same programs again: on a
 * cold kernel cache that is most of the matrix's time) and broadcasts it. Collective: every
 * rank asks for the references in the same order. */
static const reference *reference_of(kn_comm *comm, const cell *c, const char *passes) {
    char key[200];
    snprintf(key, sizeof key, "%s|%d|%s", passes, c->compiled, c->prec);
    for (int i = 0; i < nrefs; i++)
        if (!strcmp(refs[i].key, key)) return &refs[i];
    if (nrefs == MAX_REFS) return NULL;
    reference *r = &refs[nrefs++];
    memset(r, 0, sizeof *r);
    snprintf(r->key, sizeof r->key, "%s", key);
    kn_gpt g = {0};
    kn_trainer tr = {0};
    int32_t x[G * T], y[G * T];
    /* head: ok, the scale, the optimizer step, the parameter count, then the losses */
    double head[4 + STEPS] = {0};
    kn_status st = KN_OK;
    if (comm->rank == 0) {
        st = trainer_for(c, passes, &g, &tr, G, true);
        for (int s = 0; st == KN_OK && s < STEPS; s++) {
            batch(x, y, s);
            tr.inject_inf = tr.scale_in && s == INJECT_STEP;
            st = kn_trainer_step(&tr, x, y, 0.05, &head[4 + s], NULL);
        }
        CHECK(st == KN_OK, "reference %s", key);
        head[0] = st == KN_OK, head[1] = tr.scaler.scale, head[2] = (double)tr.opt.step, head[3] = (double)g.p.n;
    }
    CHECK(kn_comm_broadcast(comm, head, 4 + STEPS, KN_DT_F64, 0) == KN_OK, "broadcast %s", key);
    r->n = (int64_t)head[3];
    r->params = head[0] > 0 ? kn_malloc((size_t)(r->n > 0 ? r->n : 1) * sizeof(float)) : NULL;
    if (r->params && comm->rank == 0) memcpy(r->params, g.p.data, (size_t)r->n * sizeof(float));
    int have = r->params != NULL, all = 0;
    CHECK(kn_comm_all_reduce(comm, &have, &all, 1, KN_DT_I32) == KN_OK, "agree on %s", key);
    if (all == comm->size) {
        CHECK(kn_comm_broadcast(comm, r->params, r->n, KN_DT_F32, 0) == KN_OK, "broadcast %s", key);
        r->scale = head[1];
        r->opt_step = (int64_t)head[2];
        memcpy(r->loss, head + 4, sizeof r->loss);
        r->ok = true;
    }
    kn_trainer_free(&tr);
    kn_gpt_free(&g);
    return r;
}

/* The largest |a - b| of a parameter relative to its largest |a|, or to 0.01 for a tensor
 * still near zero: the biases start at 0, and their gradients are sums over every row
 * with much cancellation, so after a few steps they are small and mostly rounding. */
static double worst_param_diff(const kn_params *p, const float *ref) {
    double worst = 0;
    for (int i = 0; i < p->count; i++) {
        const float *a = ref + p->info[i].offset, *b = p->data + p->info[i].offset;
        double scale = 1e-2, d = 0;
        for (int64_t j = 0; j < p->info[i].numel; j++) scale = fmax(scale, fabs(a[j]));
        for (int64_t j = 0; j < p->info[i].numel; j++) d = fmax(d, fabs((double)a[j] - b[j]));
        worst = fmax(worst, d / scale);
        if (getenv("KILN_MATRIX_VERBOSE") && d / scale > 1e-3 && g_rank == 0)
            printf("    %s: %.3g relative (largest |x| %.3g)\n", p->info[i].name, d / scale, scale);
    }
    return worst;
}

/* Tolerances: losses (relative) and parameters (relative to each tensor's largest). */
static void tolerances(const char *prec, double *tl, double *tp) {
    if (!strcmp(prec, "bf16")) *tl = 3e-4, *tp = 4e-3;      /* a bf16 ulp is 2^-8 = 3.9e-3 */
    else if (!strcmp(prec, "fp16")) *tl = 1e-4, *tp = 1e-3; /* an fp16 ulp is 2^-11 = 4.9e-4 */
    else *tl = 1e-5, *tp = 1e-4;
}

static int cells_run, cells_failed;
static double worst_seen[3][2];

static void run_cell(kn_comm *comm, const cell *c) {
    char passes[160], name[200];
    passes_of(c, passes, sizeof passes);
    snprintf(name, sizeof name, "%s %s %s accum %d%s%s", c->prec,
             c->local ? "one-process" : c->tp ? "tp=2" : c->pp ? "pp=2 1f1b" : kn_dp_strategy_name(c->strategy),
             c->compiled ? "compiled" : "interp", c->accum, c->extra[0] ? " " : "", c->extra);
    int fails0 = g_fail;
    const reference *r = reference_of(comm, c, passes);
    if (!r || !r->ok) { /* every rank sees the same (the reference was agreed on) */
        CHECK(false, "%s: no reference", name);
        cells_run++, cells_failed++;
        return;
    }
    double tl, tp;
    tolerances(c->prec, &tl, &tp);
    kn_gpt g = {0};
    kn_trainer tr = {0};
    kn_dp d;
    kn_tp t = {0};
    kn_pp pl = {0};
    bool have_dp = false, have_tp = false, have_pp = false;
    int32_t x[G * T], y[G * T];
    int ranks = c->local || c->tp ? 1 : comm->size; /* tp: every rank runs the whole batch, on its shards */
    enum { PP_MICRO = 2 };
    int rows = c->pp ? G / PP_MICRO : G / (ranks * c->accum); /* pp: the trainer's batch is one micro-batch */
    /* kn_pp reads the trainer's low copies as its compile made them: compiled first */
    kn_status st = trainer_for(c, passes, &g, &tr, rows, c->pp);
    CHECK(st == KN_OK, "%s: trainer", name);
    if (st == KN_OK && c->local) {
        st = kn_step_set_comm(&tr, NULL, c->accum);
        CHECK(st == KN_OK, "%s: kn_step_set_comm", name);
    } else if (st == KN_OK && c->tp) {
        st = kn_tp_new(&t, comm, &tr, 0);
        have_tp = st == KN_OK;
        if (st == KN_OK) st = kn_tp_set_accum(&t, c->accum);
        CHECK(st == KN_OK, "%s: kn_tp_new", name);
    } else if (st == KN_OK && c->pp) {
        kn_pp_config pc = {.schedule = KN_PP_1F1B, .micro = PP_MICRO};
        st = kn_pp_new(&pl, comm, &tr, &pc);
        have_pp = st == KN_OK;
        CHECK(st == KN_OK, "%s: kn_pp_new", name);
    } else if (st == KN_OK) {
        kn_dp_config dc = {.strategy = c->strategy, .bucket_mb = 0.002, .accum = c->accum};
        st = kn_dp_new(&d, comm, &tr, &dc);
        have_dp = st == KN_OK;
        CHECK(st == KN_OK, "%s: kn_dp_new", name);
    }
    double worst_l = 0;
    for (int s = 0; st == KN_OK && s < STEPS; s++) {
        double l = 0;
        batch(x, y, s);
        tr.inject_inf = tr.scale_in && s == INJECT_STEP && (c->local || comm->rank == INJECT_RANK);
        st = c->local ? kn_trainer_step(&tr, x, y, 0.05, &l, NULL)
             : c->tp  ? kn_tp_step(&t, x, y, 0.05, &l, NULL)
             : c->pp  ? kn_pp_step(&pl, x, y, G, 0.05, &l, NULL)
                      : kn_dp_step(&d, x, y, G, 0.05, &l, NULL);
        CHECK(st == KN_OK, "%s: step %d", name, s);
        if (st != KN_OK) break;
        double e = fabs(l - r->loss[s]) / fabs(r->loss[s]);
        worst_l = fmax(worst_l, e);
        CHECK(e <= tl, "%s: step %d: loss %.9g, one process %.9g (%.2g relative, tolerance %g)", name, s, l,
              r->loss[s], e, tl);
        if (tr.scale_in && s == INJECT_STEP)
            CHECK(tr.skipped, "%s: step %d: rank %d's inf did not skip the step here", name, s, INJECT_RANK);
    }
    if (st == KN_OK && (have_dp || have_tp || have_pp)) {
        st = have_dp ? kn_dp_gather_state(&d) : have_tp ? kn_tp_gather_state(&t) : kn_pp_gather(&pl);
        CHECK(st == KN_OK && g.p.data, "%s: gather", name);
    }
    if (st == KN_OK && g.p.data) {
        double w = worst_param_diff(&g.p, r->params);
        if (getenv("KILN_MATRIX_VERBOSE") && g_rank == 0) printf("  %s: worst parameter %.3g relative\n", name, w);
        CHECK(w <= tp, "%s: the parameters differ from one process by %.3g relative (tolerance %g)", name, w, tp);
        CHECK(tr.scaler.scale == r->scale && tr.opt.step == r->opt_step, "%s: loss scale %g, optimizer step %lld; one "
              "process %g, %lld", name, tr.scaler.scale, (long long)tr.opt.step, r->scale, (long long)r->opt_step);
        int pi = !strcmp(c->prec, "bf16") ? 1 : !strcmp(c->prec, "fp16") ? 2 : 0;
        worst_seen[pi][0] = fmax(worst_seen[pi][0], worst_l);
        worst_seen[pi][1] = fmax(worst_seen[pi][1], w);
    }
    if (have_dp) kn_dp_free(&d);
    if (have_tp) kn_tp_free(&t); /* its hooks are the trainer's: gone before it */
    if (have_pp) kn_pp_free(&pl);
    kn_trainer_free(&tr);
    kn_gpt_free(&g);
    cells_run++;
    if (g_fail != fails0) {
        cells_failed++;
        if (g_rank == 0) printf("not ok: %s\n", name);
    }
}

void test_matrix(kn_comm *comm) {
    static const char *const precs[] = {"fp32", "bf16", "fp16"};
    static const char *const extras[] = {"flash", "hfuse", "remat:selective"};
    for (int p = 0; p < 3; p++)
        for (int s = 0; s < KN_DP_COUNT; s++)
            for (int m = 0; m < 2; m++)
                for (int a = 1; a <= 2; a++) {
                    cell c = {precs[p], (kn_dp_strategy)s, m == 1, a, "", false, false, false};
                    run_cell(comm, &c);
                }
    /* the rewrites, compiled, with accumulation, on the full-slab and the sharded extremes */
    for (int e = 0; e < 3; e++)
        for (int p = 0; p < 3; p++)
            for (int s = 0; s < 2; s++) {
                cell c = {precs[p], s ? KN_DP_ZERO3 : KN_DP_DDP, true, 2, extras[e], false, false, false};
                run_cell(comm, &c);
            }
    /* a tp=2 mesh (the placement pass's local graph, its all-reduces run over the ranks),
     * node by node and compiled, each precision; fp16's inf on rank 1 reaches rank 0 through
     * the norm's sum over tp */
    for (int p = 0; p < 3; p++)
        for (int m = 0; m < 2; m++) {
            cell c = {precs[p], KN_DP_DDP, m == 1, 1, "", false, true, false};
            run_cell(comm, &c);
        }
    /* a pp=2 pipeline (one block per stage, 1F1B over 2 micro-batches, the weights' low copies
     * in the rank's own slabs), node by node and compiled, each precision; fp16's inf on rank
     * 1 reaches rank 0 through the norm's sum over pp */
    for (int p = 0; p < 3; p++)
        for (int m = 0; m < 2; m++) {
            cell c = {precs[p], KN_DP_DDP, m == 1, 1, "", false, false, true};
            run_cell(comm, &c);
        }
    /* the step runner's own accumulation, one process, 4 micro-batches */
    for (int p = 0; p < 3; p++)
        for (int m = 0; m < 2; m++) {
            cell c = {precs[p], KN_DP_DDP, m == 1, 4, "", true, false, false};
            run_cell(comm, &c);
        }
    /* refused up front, with the reason: int8 compression under a loss scale (an overflow's
     * inf would stay in the error feedback) */
    kn_gpt g = {0};
    kn_trainer tr = {0};
    kn_dp d;
    cell c = {"fp16", KN_DP_DDP, false, 1, "", false, false, false};
    char passes[160];
    passes_of(&c, passes, sizeof passes);
    CHECK(trainer_for(&c, passes, &g, &tr, G / comm->size, false) == KN_OK, "fp16 trainer");
    kn_dp_config comp = {.strategy = KN_DP_DDP, .bucket_mb = 1, .accum = 1, .compress = true};
    CHECK(kn_dp_new(&d, comm, &tr, &comp) == KN_ERR_UNSUPPORTED && strstr(kn_last_error(), "loss scale"),
          "int8 compression with a loss scale is refused with its reason");
    kn_trainer_free(&tr);
    kn_gpt_free(&g);
    for (int i = 0; i < nrefs; i++) kn_free(refs[i].params);
    if (g_rank == 0) {
        printf("matrix: %d ranks, %d cells (precision x strategy x mode x micro-batches, flash/hfuse/remat, tp=2, pp=2), "
               "%d failed, against %d one-process references\n", comm->size, cells_run, cells_failed, nrefs);
        for (int p = 0; p < 3; p++)
            printf("  %s: worst loss %.2g relative, worst parameter %.2g relative\n", precs[p], worst_seen[p][0],
                   worst_seen[p][1]);
    }
}
