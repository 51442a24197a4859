/* test_tp.c — tensor parallelism against one process (`test-dist tp` under mpiexec -n 2
 * and -n 4: make test's test-step-dist-tp).
 *
 * Every rank captures the tiny GPT's joint graph with global shapes, runs the placement
 * pass (kiln/placement.h) for its rank of tp = the job's size, and trains its local shards
 * (kn_place_scatter of the one-process model) with the graph's value collectives over MPI
 * (kn_tp_collectives); every rank also runs the global graph alone, the reference. Three
 * SGD steps on one global batch: each step's loss must agree, the first step's gradients
 * (each rank's local ones gathered over MPI and put in place with kn_place_gather) and
 * the final parameters too, to the tolerance of a different summation order (fp32).
 * The model is sized so tp = 2 and 4 divide heads, width, 4 * width and the vocabulary.
 * `test-dist tp sp` does the same with sequence parallelism (KN_PLACE_SEQUENCE_PARALLEL). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dist_test.h"
#include "kiln/mesh.h"
#include "kiln/placement.h"

enum { B = 4, T = 8, STEPS = 3 }; /* B: tp = 4 divides it (sequence parallelism shards the rows [B, T] by batch first) */
static const kn_gpt_config tcfg = {.vocab = 16, .context = T, .layers = 2, .width = 16, .heads = 4};
static const double LR = 0.1, TOL = 2e-5;

typedef struct tp_run {
    kn_graph *g;
    kn_interp *it;
    int np;              /* parameters (graph order) */
    int *model_index;    /* graph param k -> the model's parameter index */
    kn_tensor **p;       /* the parameters this run holds (local shards, or full) */
    kn_placement *place;
} tp_run;

static double max_abs(const float *a, const float *b, int64_t n, double *scale) {
    double m = 0;
    *scale = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m)) m = d;
        if (fabs(b[i]) > *scale) *scale = fabs(b[i]);
    }
    return m;
}

/* Bind g's params (local types from the placement) from the model, and the batch. */
static kn_status setup(tp_run *r, kn_graph *g, const kn_place_info *info, const kn_gpt *m, int parts, int rank,
                       kn_tensor *x, kn_tensor *y, const kn_collectives *coll) {
    r->g = g;
    r->np = 0;
    for (int i = 0; i < g->nnodes; i++) r->np += g->nodes[i].op == KN_OP_PARAM;
    r->model_index = calloc((size_t)r->np, sizeof *r->model_index);
    r->p = calloc((size_t)r->np, sizeof *r->p);
    r->place = calloc((size_t)r->np, sizeof *r->place);
    kn_status st = kn_interp_new(&r->it, g);
    if (st != KN_OK) return st;
    if (coll) kn_interp_set_collectives(r->it, coll);
    int k = 0;
    for (int i = 0; i < g->nnodes && st == KN_OK; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->op != KN_OP_PARAM) continue;
        int mi = kn_gpt_find(m, n->attrs.name);
        const kn_param_info *pi = &m->p.info[mi];
        r->model_index[k] = mi;
        r->place[k] = info ? info[i].p : kn_place_replicate();
        st = kn_tensor_empty(&r->p[k], KN_DT_F32, n->type.ndim, n->type.shape);
        if (st == KN_OK)
            st = kn_place_scatter(m->p.data + pi->offset, pi->ndim, pi->shape, r->place[k], parts, rank,
                                  kn_tensor_data(r->p[k]));
        if (st == KN_OK) st = kn_interp_bind(r->it, n->attrs.name, r->p[k]);
        k++;
    }
    if (st == KN_OK) st = kn_interp_bind(r->it, "idx", x);
    if (st == KN_OK) st = kn_interp_bind(r->it, "targets", y);
    return st;
}

static void run_free(tp_run *r) {
    for (int k = 0; k < r->np; k++) kn_tensor_free(r->p[k]);
    free(r->p), free(r->model_index), free(r->place);
    kn_interp_free(r->it);
    kn_graph_free(r->g);
}

/* Parameter k's full value from every rank's local part (or the gradient's: output 1 + k). */
static kn_status gather_full(kn_comm *c, const tp_run *r, const kn_gpt *m, int k, const float *local, float *full) {
    const kn_param_info *pi = &m->p.info[r->model_index[k]];
    int64_t nl = kn_tensor_numel(r->p[k]);
    float *all = malloc((size_t)(nl * c->size) * sizeof *all);
    int64_t *counts = malloc((size_t)c->size * sizeof *counts);
    for (int q = 0; q < c->size; q++) counts[q] = nl;
    kn_status st = kn_comm_all_gather(c, local, all, counts, KN_DT_F32);
    for (int q = 0; q < c->size && st == KN_OK; q++)
        st = kn_place_gather(all + q * nl, pi->ndim, pi->shape, r->place[k], c->size, q, full);
    free(all), free(counts);
    return st;
}

void test_tp(kn_comm *c, bool sp) {
    int N = c->size, r = c->rank;
    kn_gpt m;
    CHECK(kn_gpt_new(&m, &tcfg) == KN_OK, "gpt");
    kn_gpt_init(&m, 5);
    kn_graph *g = NULL, *g2 = NULL;
    CHECK(kn_gpt_graph(&tcfg, B, T, true, &g) == KN_OK && kn_gpt_graph(&tcfg, B, T, true, &g2) == KN_OK, "graph");
    kn_place_opts o = {.mesh = KN_MESH_TP, .parts = N, .rank = r, .flags = sp ? KN_PLACE_SEQUENCE_PARALLEL : 0};
    kn_place_result pr;
    CHECK(kn_place_graph(g, &o, &pr) == KN_OK, "place tp=%d%s", N, sp ? " sp" : "");
    if (g_fail) return;
    if (sp) { /* sequence parallelism: the blocks' all-reduces of activations become reduce-scatter +
               * all-gather; what is still all-reduced is small (the replicated weights' gradients,
               * made from the rank's rows, and the loss's row statistics) */
        CHECK(pr.reduce_scatter >= 4 * tcfg.layers, "tp=%d sp: %d reduce_scatters", N, pr.reduce_scatter);
        for (int i = 0; i < pr.local->nnodes; i++)
            if (pr.local->nodes[i].op == KN_OP_ALL_REDUCE)
                CHECK(kn_type_numel(&pr.local->nodes[i].type) < (int64_t)B * T * tcfg.width,
                      "tp=%d sp: %%%d = all_reduce of an activation", N, i);
    } else {
    /* the collectives the pass placed: Megatron's 2 all-reduces per block forward and 2
     * backward; the vocabulary-parallel embedding's (P) and the logits' gradient's; the
     * cross-entropy's sum of exp and target logit (all-reduced) and row max (gathered) */
    int want_ar = 4 * tcfg.layers + 4;
    CHECK(pr.all_reduce == want_ar, "tp=%d: %d all_reduces, want %d", N, pr.all_reduce, want_ar);
    CHECK(pr.all_gather == 1, "tp=%d: %d all_gathers, want 1", N, pr.all_gather);
    }

    int32_t xs[B * T], ys[B * T];
    for (int i = 0; i < B * T; i++) xs[i] = (i * 7 + 3) % tcfg.vocab, ys[i] = (i * 5 + 1) % tcfg.vocab;
    int64_t bs[2] = {B, T};
    kn_tensor *x = NULL, *y = NULL;
    kn_tensor_from_data(&x, KN_DT_I32, 2, bs, xs);
    kn_tensor_from_data(&y, KN_DT_I32, 2, bs, ys);
    kn_tp_comms comms = {.axes = {NULL, c, NULL}};
    kn_collectives coll;
    kn_tp_collectives(&comms, &coll);
    tp_run ref = {0}, tp = {0};
    CHECK(setup(&ref, g2, NULL, &m, 1, 0, x, y, NULL) == KN_OK, "reference setup");
    kn_graph *local = pr.local;
    pr.local = NULL;
    CHECK(setup(&tp, local, pr.info, &m, N, r, x, y, &coll) == KN_OK, "tp setup");
    if (g_fail) goto done;
    for (int step = 0; step < STEPS; step++) {
        CHECK(kn_interp_run(ref.it) == KN_OK, "reference run");
        CHECK(kn_interp_run(tp.it) == KN_OK, "tp run");
        if (g_fail) goto done;
        double lr_, lt;
        kn_tensor_item(kn_interp_output(ref.it, 0), &lr_);
        kn_tensor_item(kn_interp_output(tp.it, 0), &lt);
        CHECK(fabs(lr_ - lt) <= TOL * (1 + fabs(lr_)), "tp=%d step %d: loss %.9g, one process %.9g", N, step, lt, lr_);
        for (int k = 0; k < tp.np; k++) {
            const kn_tensor *gr = kn_interp_output(ref.it, 1 + k), *gt = kn_interp_output(tp.it, 1 + k);
            CHECK(kn_tensor_numel(gt) == kn_tensor_numel(tp.p[k]), "grad %d: local size", k);
            if (step == 0) { /* the gradients, gathered */
                int64_t n = kn_tensor_numel(gr);
                float *full = calloc((size_t)n, sizeof *full);
                CHECK(gather_full(c, &tp, &m, k, kn_tensor_data(gt), full) == KN_OK, "gather grad %d", k);
                double sc, d = max_abs(full, kn_tensor_data(gr), n, &sc);
                CHECK(d <= TOL * (1 + sc), "tp=%d: gradient of %s differs by %g (scale %g)", N,
                      m.p.info[tp.model_index[k]].name, d, sc);
                free(full);
            }
            /* SGD on both */
            float *pr_ = kn_tensor_data(ref.p[k]), *pt = kn_tensor_data(tp.p[k]);
            const float *dr = kn_tensor_data(gr), *dt = kn_tensor_data(gt);
            for (int64_t i = 0; i < kn_tensor_numel(ref.p[k]); i++) pr_[i] -= (float)(LR * dr[i]);
            for (int64_t i = 0; i < kn_tensor_numel(tp.p[k]); i++) pt[i] -= (float)(LR * dt[i]);
        }
    }
    for (int k = 0; k < tp.np; k++) { /* the final parameters, gathered */
        int64_t n = kn_tensor_numel(ref.p[k]);
        float *full = calloc((size_t)n, sizeof *full);
        CHECK(gather_full(c, &tp, &m, k, kn_tensor_data(tp.p[k]), full) == KN_OK, "gather param %d", k);
        double sc, d = max_abs(full, kn_tensor_data(ref.p[k]), n, &sc);
        CHECK(d <= TOL * (1 + sc), "tp=%d: final %s differs by %g", N, m.p.info[tp.model_index[k]].name, d);
        free(full);
    }
    if (r == 0 && !g_fail)
        printf("tp=%d%s: %d steps, losses, gradients and parameters equal one process's (%d all_reduce, %d "
               "all_gather, %d reduce_scatter)\n", N, sp ? " with sequence parallelism" : "", STEPS, pr.all_reduce,
               pr.all_gather, pr.reduce_scatter);
done:
    run_free(&ref);
    run_free(&tp);
    kn_place_result_free(&pr);
    kn_graph_free(g);
    kn_tensor_free(x), kn_tensor_free(y);
    kn_gpt_free(&m);
}
