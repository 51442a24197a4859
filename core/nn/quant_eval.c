/* quant_eval.c — the held-out loss of a GPT under a pass list: how `kiln eval` and the
 * quantization tests compare fp32, bf16 (autocast), w8, w8a8 and the calibrated w8a8 schemes
 * (static scales, SmoothQuant) on the same batches.
 *
 * The forward graph with the loss (kn_gpt_build) is recorded once, compiled node by node
 * with the caller's passes ("" for fp32, "autocast:bf16", "quantize:w8", ...), bound to the
 * model's parameter views by name, and run on held-out batches drawn exactly as `kiln
 * train` draws its own evaluation batches (kn_batch_sample, stream 1, batch e), so the fp32
 * figure here is the one `kiln train` printed at the end of the run.
 *
 * The calibrated schemes (kn_gpt_heldout_loss_q; kiln/quant.h) first run the fp32 program on
 * calibration batches of the training split (stream 2) with a hook that watches the input x
 * of every product the pass quantize would rewrite (a "site", named by its weight): its
 * absmax and channel maxima, then, for the percentile and MSE observers, a histogram of |x|
 * on a second pass over the same batches. quantize:w8a8-static bakes each site's threshold
 * into the graph (kn_quantize_static) and compiles it without passes; quantize:w8a8-smooth
 * folds SmoothQuant's factors into copies of the parameters, where a group of sites reads
 * one layernorm whose gain and bias, and the sites' weights, are read by nothing else (in
 * the GPT: each block's MLP input; the attention's q/k/v products read slices of one weight,
 * which the pass does not quantize, and lm_head's weight is the tied embedding), then runs
 * quantize:w8a8 (per token). The outlier injection (opts.outliers) is the same folding with
 * factor 1/F on a few channels: the fp32 function is unchanged (to rounding) while those
 * channels of the products' input grow F times, as in the large models of LLM.int8() and
 * SmoothQuant. The model itself is never changed: folded parameters are copies. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kiln/data.h"
#include "kiln/nn.h"
#include "kiln/passes.h"
#include "kiln/program.h"
#include "kiln/quant.h"

static kn_status record_loss_graph(const kn_gpt *g, const kn_tensor *x, const kn_tensor *y, kn_graph **out) {
    kn_builder *b;
    KN_TRY(kn_builder_new(&b, KN_MODE_GRAPH));
    kn_val *pvals = kn_calloc((size_t)g->p.count + 1, sizeof *pvals), logits, loss = KN_VAL_NONE;
    kn_status st = pvals ? KN_OK : kn_error(KN_ERR_OOM, "kn_gpt_heldout_loss: out of memory");
    if (st == KN_OK) {
        kn_val idx = kn_input(b, "idx", x), tgt = kn_input(b, "targets", y);
        st = kn_gpt_build(b, g, idx, tgt, pvals, &logits, &loss);
        if (st != KN_OK) st = kn_error(st, "%s", kn_builder_error(b));
    }
    if (st == KN_OK) {
        kn_builder_output(b, loss);
        st = kn_builder_finish(b, out);
    }
    kn_free(pvals);
    kn_builder_free(b);
    return st;
}

/* ---------------------------------------------------------------- the parameters bound */

/* What the programs read for each of g's params: its view, or an owned copy once folded. */
typedef struct qbind {
    const kn_gpt *g;
    kn_tensor **t;
    bool *owned;
} qbind;

static kn_status qbind_init(qbind *b, const kn_gpt *g) {
    b->g = g;
    b->t = kn_calloc((size_t)g->p.count + 1, sizeof *b->t);
    b->owned = kn_calloc((size_t)g->p.count + 1, sizeof *b->owned);
    if (!b->t || !b->owned) return kn_error(KN_ERR_OOM, "kn_gpt_heldout_loss: out of memory");
    for (int i = 0; i < g->p.count; i++) b->t[i] = g->p.views[i];
    return KN_OK;
}

static void qbind_free(qbind *b) {
    for (int i = 0; b->t && i < b->g->p.count; i++)
        if (b->owned[i]) kn_tensor_free(b->t[i]);
    kn_free(b->t);
    kn_free(b->owned);
}

/* Param i's floats, made a copy of the model's first (the model is never written). */
static kn_status qbind_own(qbind *b, int i, float **data) {
    if (!b->owned[i]) {
        kn_tensor *c;
        KN_TRY(kn_tensor_clone(&c, b->t[i]));
        b->t[i] = c;
        b->owned[i] = true;
    }
    *data = kn_tensor_data(b->t[i]);
    return KN_OK;
}

static int param_index(const kn_gpt *g, const char *name) {
    for (int i = 0; i < g->p.count; i++)
        if (!strcmp(g->p.info[i].name, name)) return i;
    return -1;
}

/* Compile graph (after passes) and bind the params, x and y. */
static kn_status compile_bound(const qbind *b, const kn_graph *graph, const char *passes, kn_tensor *x, kn_tensor *y,
                               kn_program **p) {
    kn_program_opts po = {.device = KN_CPU, .passes = passes && *passes ? passes : NULL, .mode = KN_PROGRAM_NODES};
    kn_status st = kn_program_compile(p, graph, &po);
    for (int i = 0; st == KN_OK && i < b->g->p.count; i++)
        if (kn_graph_find(kn_program_graph(*p), b->g->p.info[i].name) >= 0)
            st = kn_program_bind(*p, b->g->p.info[i].name, b->t[i]);
    if (st == KN_OK) st = kn_program_bind(*p, "idx", x);
    if (st == KN_OK) st = kn_program_bind(*p, "targets", y);
    return st;
}

/* ---------------------------------------------------------------- the sites and calibration */

/* One product the pass quantize rewrites, in the fp32 program's graph. */
typedef struct site {
    int32_t node, x;     /* the product and its input x */
    int w;               /* its weight's param index */
    bool tb;
    int64_t k, n;        /* x's channels (the weight's input channels), the output channels */
    float absmax;
    float *chmax;        /* [k]: max |x_j| per channel */
    kn_calib_hist *hist; /* percentile, mse: |x| over [0, absmax] */
} site;

typedef struct qcal {
    site *s;
    int ns;
    bool hist_pass;
} qcal;

static void qcal_free(qcal *c) {
    for (int i = 0; i < c->ns; i++) {
        kn_free(c->s[i].chmax);
        kn_free(c->s[i].hist);
    }
    kn_free(c->s);
}

static kn_status find_sites(const kn_gpt *g, const kn_graph *pg, qcal *c) {
    c->s = kn_calloc((size_t)pg->nnodes + 1, sizeof *c->s);
    if (!c->s) return kn_error(KN_ERR_OOM, "kn_gpt_heldout_loss: out of memory");
    for (int32_t i = 0; i < pg->nnodes; i++) {
        if (!kn_quantize_candidate(pg, i)) continue;
        const kn_node *n = &pg->nodes[i], *w = &pg->nodes[n->in[1]];
        site *s = &c->s[c->ns];
        *s = (site){.node = i, .x = n->in[0], .w = param_index(g, w->attrs.name), .tb = n->attrs.tb};
        if (s->w < 0) return kn_error(KN_ERR_INTERNAL, "kn_gpt_heldout_loss: weight %s is not a param of the model",
                                      w->attrs.name);
        s->k = s->tb ? w->type.shape[1] : w->type.shape[0];
        s->n = s->tb ? w->type.shape[0] : w->type.shape[1];
        s->chmax = kn_calloc((size_t)s->k + 1, sizeof *s->chmax);
        c->ns++;
        if (!s->chmax) return kn_error(KN_ERR_OOM, "kn_gpt_heldout_loss: out of memory");
    }
    return KN_OK;
}

/* The program's hook: every site whose x this node is watches the value. */
static kn_status watch(void *ctx, int32_t node, const kn_tensor *v) {
    qcal *c = ctx;
    for (int i = 0; i < c->ns; i++) {
        site *s = &c->s[i];
        if (s->x != node) continue;
        if (v->dtype != KN_DT_F32 || !kn_tensor_is_contiguous(v) || kn_tensor_numel(v) % (s->k ? s->k : 1))
            return kn_error(KN_ERR_INTERNAL, "calibration: the input of product %%%d is not a contiguous f32 [.., %lld]",
                            s->node, (long long)s->k);
        const float *d = kn_tensor_data(v);
        const int64_t numel = kn_tensor_numel(v);
        if (c->hist_pass) {
            kn_calib_hist_add(s->hist, d, numel);
        } else {
            s->absmax = kn_calib_absmax(d, numel, s->absmax);
            kn_calib_channel_absmax(d, numel / (s->k ? s->k : 1), s->k, s->chmax);
        }
    }
    return KN_OK;
}

/* Run p (fp32, bound) on the calibration batches, the sites watching; a second pass fills
 * the histograms when want_hist. */
static kn_status calibrate(kn_program *p, qcal *c, const kn_quant_eval_opts *q, int B, int T, uint64_t seed,
                           kn_tensor *x, kn_tensor *y, bool want_hist) {
    kn_program_set_hook(p, watch, c);
    kn_status st = KN_OK;
    for (int pass = 0; st == KN_OK && pass < (want_hist ? 2 : 1); pass++) {
        c->hist_pass = pass == 1;
        for (int i = 0; st == KN_OK && c->hist_pass && i < c->ns; i++) {
            c->s[i].hist = kn_malloc(sizeof *c->s[i].hist);
            if (!c->s[i].hist) st = kn_error(KN_ERR_OOM, "calibration: out of memory");
            else kn_calib_hist_init(c->s[i].hist, c->s[i].absmax);
        }
        for (int e = 0; st == KN_OK && e < q->calib_batches; e++) {
            st = kn_batch_sample(q->calib, q->ncalib, B, T, seed, 2, e, kn_tensor_data(x), kn_tensor_data(y));
            if (st == KN_OK) st = kn_program_run(p);
        }
    }
    kn_program_set_hook(p, NULL, NULL);
    return st;
}

/* ---------------------------------------------------------------- folding (SmoothQuant, outliers) */

static int uses_of(const kn_graph *g, int32_t v) {
    int u = 0;
    for (int32_t j = v + 1; j < g->nnodes; j++)
        for (int k = 0; k < g->nodes[j].nin; k++) u += g->nodes[j].in[k] == v;
    for (int i = 0; i < g->noutputs; i++) u += g->outputs[i] == v;
    return u;
}

/* Fold s (k factors, made by make_s for the group) into every group of sites that reads one
 * layernorm whose gain, bias and the sites' weights nothing else reads; *folded counts the
 * sites folded. make_s(ctx, first site of the group, wmax, s). */
typedef kn_status (*make_s_fn)(void *ctx, const site *first, const float *wmax, float *s);
static kn_status fold_groups(qbind *b, const kn_graph *pg, qcal *c, make_s_fn make_s, void *ctx, int *folded,
                             int *groups) {
    *folded = *groups = 0;
    bool *done = kn_calloc((size_t)c->ns + 1, sizeof *done);
    if (!done) return kn_error(KN_ERR_OOM, "kn_gpt_heldout_loss: out of memory");
    kn_status st = KN_OK;
    for (int i = 0; st == KN_OK && i < c->ns; i++) {
        if (done[i]) continue;
        const site *s0 = &c->s[i];
        const kn_node *ln = &pg->nodes[s0->x];
        if (ln->op != KN_OP_LAYERNORM || pg->nodes[ln->in[1]].op != KN_OP_PARAM ||
            pg->nodes[ln->in[2]].op != KN_OP_PARAM || uses_of(pg, ln->in[1]) != 1 || uses_of(pg, ln->in[2]) != 1)
            continue;
        bool ok = true; /* every weight read only by this group's products */
        for (int j = i; ok && j < c->ns; j++) {
            if (c->s[j].x != s0->x) continue;
            int readers = 0;
            for (int t = i; t < c->ns; t++) readers += c->s[t].x == s0->x && c->s[t].w == c->s[j].w;
            ok = uses_of(pg, pg->nodes[c->s[j].node].in[1]) == readers;
        }
        if (!ok) continue;
        float *wmax = kn_calloc((size_t)s0->k + 1, sizeof *wmax), *sv = kn_calloc((size_t)s0->k + 1, sizeof *sv);
        if (!wmax || !sv) st = kn_error(KN_ERR_OOM, "kn_gpt_heldout_loss: out of memory");
        for (int j = i; st == KN_OK && j < c->ns; j++)
            if (c->s[j].x == s0->x)
                kn_smooth_weight_absmax(kn_tensor_data(b->t[c->s[j].w]), c->s[j].k, c->s[j].n, c->s[j].tb, wmax);
        if (st == KN_OK) st = make_s(ctx, s0, wmax, sv);
        float *gain, *bias;
        int gi = param_index(b->g, pg->nodes[ln->in[1]].attrs.name), bi = param_index(b->g, pg->nodes[ln->in[2]].attrs.name);
        if (st == KN_OK && (gi < 0 || bi < 0)) st = kn_error(KN_ERR_INTERNAL, "kn_gpt_heldout_loss: a norm's params");
        if (st == KN_OK) st = qbind_own(b, gi, &gain);
        if (st == KN_OK) st = qbind_own(b, bi, &bias);
        if (st == KN_OK) kn_smooth_fold_norm(gain, bias, s0->k, sv);
        for (int j = i; st == KN_OK && j < c->ns; j++) {
            if (c->s[j].x != s0->x) continue;
            bool seen = false; /* a weight two products of the group read is folded once */
            for (int t = i; t < j; t++) seen |= c->s[t].x == s0->x && c->s[t].w == c->s[j].w;
            float *w;
            if (!seen && (st = qbind_own(b, c->s[j].w, &w)) == KN_OK)
                kn_smooth_fold_weight(w, c->s[j].k, c->s[j].n, c->s[j].tb, sv);
            done[j] = true;
            ++*folded;
        }
        ++*groups;
        kn_free(wmax);
        kn_free(sv);
    }
    kn_free(done);
    return st;
}

/* Outliers: s = 1 / F on KN_OUTLIER_CHANNELS channels spread over k, 1 elsewhere. */
static kn_status outlier_s(void *ctx, const site *first, const float *wmax, float *s) {
    (void)wmax;
    const double f = *(const double *)ctx;
    for (int64_t j = 0; j < first->k; j++) s[j] = 1;
    for (int c = 0; c < KN_OUTLIER_CHANNELS; c++) s[first->k * (2 * c + 1) / (2 * KN_OUTLIER_CHANNELS)] = (float)(1.0 / f);
    return KN_OK;
}

static kn_status smooth_s(void *ctx, const site *first, const float *wmax, float *s) {
    return kn_smooth_scales(first->chmax, wmax, first->k, *(const double *)ctx, s);
}

/* ---------------------------------------------------------------- the held-out loss */

kn_status kn_gpt_heldout_loss(const kn_gpt *g, const char *passes, const int32_t *tokens, int64_t n, int B, int T,
                              uint64_t seed, int nbatches, double *loss) {
    return kn_gpt_heldout_loss_q(g, passes, NULL, tokens, n, B, T, seed, nbatches, loss);
}

kn_status kn_gpt_heldout_loss_q(const kn_gpt *g, const char *passes, kn_quant_eval_opts *q, const int32_t *tokens,
                                int64_t n, int B, int T, uint64_t seed, int nbatches, double *loss) {
    if (!g || !tokens || !loss) return kn_error(KN_ERR_ARG, "kn_gpt_heldout_loss: NULL argument");
    if (B < 1 || T < 1 || T > g->cfg.context || nbatches < 1)
        return kn_error(KN_ERR_ARG, "kn_gpt_heldout_loss: batch %d x %d, %d batches: need B, nbatches >= 1 and "
                        "1 <= T <= context %d", B, T, nbatches, g->cfg.context);
    if (n < (int64_t)T + 1)
        return kn_error(KN_ERR_ARG, "kn_gpt_heldout_loss: %lld held-out tokens, fewer than T + 1 = %d", (long long)n,
                        T + 1);
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= g->cfg.vocab)
            return kn_error(KN_ERR_ARG, "kn_gpt_heldout_loss: token %lld is %d, outside the vocabulary of %d",
                            (long long)i, tokens[i], g->cfg.vocab);
    /* the calibrated schemes: "quantize:w8a8-static[:OBS]" or "quantize:w8a8-smooth[:ALPHA]", alone */
    kn_quant_arg qa = {.scheme = KN_QUANT_W8};
    const bool one_quantize = passes && !strncmp(passes, "quantize:", 9) && !strchr(passes, ',');
    if (one_quantize) KN_TRY(kn_quantize_parse_arg(passes + 9, &qa));
    const bool calibrated = one_quantize && (qa.scheme == KN_QUANT_W8A8_STATIC || qa.scheme == KN_QUANT_W8A8_SMOOTH);
    const bool outliers = q && q->outliers != 0 && q->outliers != 1;
    if (q) q->outlier_note[0] = q->smooth_note[0] = '\0';
    if ((calibrated || outliers) && !q)
        return kn_error(KN_ERR_ARG, "kn_gpt_heldout_loss: %s needs calibration batches (kn_gpt_heldout_loss_q)", passes);
    if (outliers && !(q->outliers > 1 && isfinite(q->outliers)))
        return kn_error(KN_ERR_ARG, "kn_gpt_heldout_loss: the outlier factor must be > 1 (got %g)", q->outliers);
    if (calibrated && (q->calib_batches < 1 || !q->calib || q->ncalib < (int64_t)T + 1))
        return kn_error(KN_ERR_ARG, "kn_gpt_heldout_loss: calibration needs >= 1 batch (got %d) of %d + 1 of the "
                        "training tokens (got %lld)", q->calib_batches, T, (long long)(q->calib ? q->ncalib : 0));
    int64_t bt[2] = {B, T};
    kn_tensor *x = NULL, *y = NULL;
    kn_graph *fwd = NULL, *qg = NULL;
    kn_program *p = NULL, *p0 = NULL;
    qbind qb = {0};
    qcal cal = {0};
    kn_status st = kn_tensor_zeros(&x, KN_DT_I32, 2, bt);
    if (st == KN_OK) st = kn_tensor_zeros(&y, KN_DT_I32, 2, bt);
    if (st == KN_OK) st = record_loss_graph(g, x, y, &fwd);
    if (st == KN_OK) st = qbind_init(&qb, g);
    const kn_graph *final = fwd;
    const char *final_passes = passes;
    if (st == KN_OK && (calibrated || outliers)) {
        kn_program_opts po = {.device = KN_CPU, .mode = KN_PROGRAM_NODES};
        st = kn_program_compile(&p0, fwd, &po);
        if (st == KN_OK) st = find_sites(g, kn_program_graph(p0), &cal);
        int folded = 0, groups = 0;
        if (st == KN_OK && outliers) {
            st = fold_groups(&qb, kn_program_graph(p0), &cal, outlier_s, &q->outliers, &folded, &groups);
            snprintf(q->outlier_note, sizeof q->outlier_note, "outliers: %d channels of %d layernorm(s) "
                            "x %g, their %d product(s)' weight rows / %g", KN_OUTLIER_CHANNELS, groups,
                            q->outliers, folded, q->outliers);
        }
        if (st == KN_OK && calibrated) {
            st = compile_bound(&qb, fwd, NULL, x, y, &p);
            if (st == KN_OK)
                st = calibrate(p, &cal, q, B, T, seed, x, y,
                               qa.scheme == KN_QUANT_W8A8_STATIC && qa.observer != KN_CALIB_MINMAX);
            kn_program_free(p);
            p = NULL;
        }
        if (st == KN_OK && qa.scheme == KN_QUANT_W8A8_SMOOTH) {
            st = fold_groups(&qb, kn_program_graph(p0), &cal, smooth_s, &qa.alpha, &folded, &groups);
            snprintf(q->smooth_note, sizeof q->smooth_note, "smooth (alpha %g): %d of %d products folded into "
                     "%d layernorm(s); the others (no layernorm of their own before them) are per-token unsmoothed.",
                     qa.alpha, folded, cal.ns, groups);
            final_passes = "quantize:w8a8";
        }
        if (st == KN_OK && qa.scheme == KN_QUANT_W8A8_STATIC) {
            const char **names = kn_calloc((size_t)cal.ns + 1, sizeof *names);
            float *amax = kn_calloc((size_t)cal.ns + 1, sizeof *amax);
            st = names && amax ? KN_OK : kn_error(KN_ERR_OOM, "kn_gpt_heldout_loss: out of memory");
            for (int i = 0; st == KN_OK && i < cal.ns; i++) {
                names[i] = g->p.info[cal.s[i].w].name;
                amax[i] = cal.s[i].absmax;
                if (qa.observer != KN_CALIB_MINMAX)
                    st = kn_calib_threshold(cal.s[i].hist, qa.observer, qa.percentile, &amax[i]);
                for (int j = 0; j < i; j++) /* a weight two products read: one threshold, the larger */
                    if (!strcmp(names[j], names[i])) amax[j] = amax[i] = amax[j] > amax[i] ? amax[j] : amax[i];
            }
            if (st == KN_OK) st = kn_graph_copy(&qg, fwd);
            if (st == KN_OK) st = kn_quantize_static(qg, names, amax, cal.ns, NULL);
            kn_free(names);
            kn_free(amax);
            final = qg;
            final_passes = NULL;
        }
    }
    if (st == KN_OK) st = compile_bound(&qb, final, final_passes, x, y, &p);
    double sum = 0;
    for (int e = 0; st == KN_OK && e < nbatches; e++) {
        st = kn_batch_sample(tokens, n, B, T, seed, 1, e, kn_tensor_data(x), kn_tensor_data(y));
        if (st == KN_OK) st = kn_program_run(p);
        if (st == KN_OK) {
            const kn_tensor *o = kn_program_output(p, 0);
            if (!o || o->dtype != KN_DT_F32 || kn_tensor_numel(o) != 1)
                st = kn_error(KN_ERR_INTERNAL, "kn_gpt_heldout_loss: the loss is not one f32");
            else sum += *(const float *)kn_tensor_data(o);
        }
    }
    if (st == KN_OK) *loss = sum / nbatches;
    kn_program_free(p);
    kn_program_free(p0);
    kn_graph_free(fwd);
    kn_graph_free(qg);
    qcal_free(&cal);
    qbind_free(&qb);
    kn_tensor_free(x);
    kn_tensor_free(y);
    return st;
}
