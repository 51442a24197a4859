/* infer.c — the GPT's prefill and decode steps as programs over a static KV cache, and
 * the generation loop (contracts and the design in kiln/infer.h).
 *
 * Both steps are graphs built from the model's own layers (core/nn/gpt.c: layernorm,
 * linear, the q/k/v projection, the MLP), compiled once into kn_programs and replayed. The
 * cache is one device tensor; each (layer, k|v) block of it is bound to a program as an
 * input and as the output that replaces it, written in place by the step that makes it.
 * Per decode step the host uploads two small inputs (the tokens and their position), the
 * step's attn_decode ops append the new keys and values to the cache, and the logits
 * [B, V] come back, or, when decoding greedily, only each row's argmax, taken on the
 * device (kn_device_argmax_rows). */
#include <math.h>
#include <string.h>

#include "kiln/device.h"
#include "kiln/infer.h"
#include "kiln/passes.h"

/* ---------------------------------------------------------------- sampling */

kn_status kn_sampling_check(const kn_sampling *s) {
    if (!s) return kn_error(KN_ERR_ARG, "kn_sampling_check: NULL settings");
    if (!(s->temperature >= 0) || !isfinite(s->temperature))
        return kn_error(KN_ERR_ARG, "sampling: temperature %g must be a finite number >= 0", s->temperature);
    if (s->top_k < 0) return kn_error(KN_ERR_ARG, "sampling: top-k %d must be >= 0 (0: every token)", s->top_k);
    if (!(s->top_p > 0 && s->top_p <= 1))
        return kn_error(KN_ERR_ARG, "sampling: top-p %g must be in (0, 1] (1: every token)", s->top_p);
    return KN_OK;
}

/* Sort ids by descending row value (ties: the smaller id first), an insertion sort over the
 * k largest only: the candidates of top-k / top-p. */
static int top_candidates(const float *row, int V, int k, int32_t *ids) {
    int n = 0;
    for (int v = 0; v < V; v++) {
        if (n == k && !(row[v] > row[ids[n - 1]])) continue;
        int j = n < k ? n++ : n - 1;
        while (j > 0 && row[v] > row[ids[j - 1]]) { ids[j] = ids[j - 1]; j--; }
        ids[j] = v;
    }
    return n;
}

int32_t kn_sample_row(const float *row, int V, const kn_sampling *s, kn_rng *rng, int32_t *scratch) {
    int best = 0;
    for (int v = 1; v < V; v++)
        if (row[v] > row[best]) best = v;
    if (s->temperature <= 0) return best;
    const double T = s->temperature, m = row[best];
    double u;
    if ((s->top_k <= 0 || s->top_k >= V) && s->top_p >= 1) { /* every token: kn_gpt_sample's draw */
        double z = 0;
        for (int v = 0; v < V; v++) z += exp(((double)row[v] - m) / T);
        kn_rng_uniform_f64(rng, &u, 1);
        double acc = 0, target = u * z;
        for (int v = 0; v < V; v++) {
            acc += exp(((double)row[v] - m) / T);
            if (acc > target) return v;
        }
        return best;
    }
    KN_CHECK(scratch != NULL);
    int n = top_candidates(row, V, s->top_k > 0 && s->top_k < V ? s->top_k : V, scratch);
    double z = 0;
    for (int i = 0; i < n; i++) z += exp(((double)row[scratch[i]] - m) / T);
    if (s->top_p < 1) { /* the smallest prefix whose probability reaches top_p */
        double acc = 0;
        int keep = n;
        for (int i = 0; i < n; i++) {
            acc += exp(((double)row[scratch[i]] - m) / T);
            if (acc >= s->top_p * z) { keep = i + 1; z = acc; break; }
        }
        n = keep;
    }
    kn_rng_uniform_f64(rng, &u, 1);
    double acc = 0, target = u * z;
    for (int i = 0; i < n; i++) {
        acc += exp(((double)row[scratch[i]] - m) / T);
        if (acc > target) return scratch[i];
    }
    return scratch[n - 1];
}

/* ---------------------------------------------------------------- the two graphs */

/* The parameters in slab order, the blocks' matrices and vectors (gpt_layout's order). */
typedef struct gpt_vals {
    kn_val *all;
    const kn_val *mats, *vecs, *lnf;
} gpt_vals;

static kn_status declare_params(kn_builder *b, const kn_gpt *g, kn_val *pvals, gpt_vals *P) {
    for (int i = 0; i < g->p.count; i++) pvals[i] = kn_param(b, g->p.info[i].name, g->p.views[i]);
    P->all = pvals;
    P->mats = pvals + 2;
    P->vecs = pvals + 2 + 4 * g->cfg.layers;
    P->lnf = pvals + 2 + 12 * g->cfg.layers;
    return kn_builder_status(b);
}

/* The last two steps of every block and of the model: x + mlp(ln_2(x)), and the logits. */
static kn_val block_mlp(kn_builder *b, kn_val x, const kn_val *m, const kn_val *v) {
    return kn_add(b, x, kn_nn_mlp(b, kn_nn_layernorm(b, x, v[4], v[5]), m[2], v[6], m[3], v[7]));
}

static kn_val head(kn_builder *b, const gpt_vals *P, kn_val x) {
    return kn_matmul_t(b, kn_nn_layernorm(b, x, P->lnf[0], P->lnf[1]), P->all[0], false, true); /* [rows, V] */
}

/* Output 0 the logits, outputs 1.. kv[0..nkv); hand the verified graph to *out (an error
 * names `what`). */
static kn_status finish(kn_builder *b, kn_val logits, const kn_val *kv, int nkv, const char *what, kn_graph **out) {
    kn_builder_output(b, logits);
    for (int i = 0; i < nkv; i++) kn_builder_output(b, kv[i]);
    kn_status st = kn_builder_status(b);
    if (st == KN_OK) st = kn_builder_finish(b, out);
    else kn_error(st, "%s: %s", what, kn_builder_error(b));
    return st;
}

/* Prefill of [B, T]: the training forward (kn_gpt_build's blocks), the keys and values of
 * every layer padded with zeros to Tmax positions as outputs 1.., and only the last
 * position's logits [B, V] as output 0. */
static kn_status build_prefill(const kn_infer *inf, int T, kn_val *pvals, kn_val *kv, kn_graph **out) {
    const kn_gpt *g = inf->model;
    const kn_gpt_config *c = &g->cfg;
    const int B = inf->B, hd = c->width / c->heads;
    kn_builder *b;
    KN_TRY(kn_builder_new(&b, KN_MODE_GRAPH));
    gpt_vals P;
    declare_params(b, g, pvals, &P);
    int64_t si[2] = {B, T}, s2[2] = {(int64_t)B * T, c->width}, pad[4] = {B, c->heads, inf->Tmax - T, hd};
    kn_val idx = kn_input_typed(b, "idx", KN_DT_I32, 2, si);
    kn_val x = kn_add(b, kn_embedding(b, P.all[0], idx), kn_slice(b, P.all[1], 0, 0, T, 1));
    x = kn_reshape(b, x, 2, s2);                                            /* [BT, D] */
    kn_val zeros = T < inf->Tmax ? kn_full(b, KN_DT_F32, 4, pad, 0.0) : KN_VAL_NONE;
    for (int l = 0; l < c->layers; l++) {
        const kn_val *m = P.mats + 4 * l, *v = P.vecs + 8 * l;
        kn_val k, vv;
        x = kn_add(b, x, kn_nn_attention_kv(b, kn_nn_layernorm(b, x, v[0], v[1]), B, T, c->heads, m[0], v[2], m[1],
                                            v[3], &k, &vv));
        kv[2 * l] = kn_val_ok(zeros) ? kn_concat(b, k, zeros, 2) : k;     /* [B, H, Tmax, hd] */
        kv[2 * l + 1] = kn_val_ok(zeros) ? kn_concat(b, vv, zeros, 2) : vv;
        x = block_mlp(b, x, m, v);
    }
    kn_val last = kn_slice(b, x, 0, T - 1, (int64_t)B * T, T);             /* [B, D]: each row's position T-1 */
    kn_status st = finish(b, head(b, &P, last), kv, 2 * c->layers, "the prefill step", out);
    kn_builder_free(b);
    return st;
}

/* Decode of one token per row at position pos (inputs "tok" and "pos" [B] i32). Per
 * layer, q attends over the cache's first pos positions ("cache.L.k", "cache.L.v") and over
 * the new token's own k and v in one op, attn_decode (kiln/ir.h: one launch per layer,
 * reading only the valid positions; "pos" is both the position embedding's index and the
 * count of cached positions), which then appends k and v to the cache at pos. The layer is
 * the training block's arithmetic in the fewest steps: q, k and v are one product with the
 * whole [D, 3D] weight and one bias add ([B, 3D], read by attn_decode as it is), and
 * attn_decode's [B, D] is the output projection's operand: no split, reshape or permute of
 * heads between them, each of which was a step (kiln bench-infer prints the count; the
 * test holding it down is tests/core/test_infer.c). Output 0: logits [B, V]. */
static kn_status build_decode(const kn_infer *inf, kn_val *pvals, kn_graph **out) {
    const kn_gpt *g = inf->model;
    const kn_gpt_config *c = &g->cfg;
    const int B = inf->B, H = c->heads, hd = c->width / c->heads, Tm = inf->Tmax;
    const double scale = 1.0 / sqrt((double)hd);
    kn_builder *b;
    KN_TRY(kn_builder_new(&b, KN_MODE_GRAPH));
    gpt_vals P;
    declare_params(b, g, pvals, &P);
    int64_t s1[1] = {B}, sc[4] = {B, H, Tm, hd};
    /* [B] indices, so the embeddings are [B, D] as they are: a reshape between their sum and
     * the first layernorm would keep the two in separate kernels */
    kn_val tok = kn_input_typed(b, "tok", KN_DT_I32, 1, s1), pos = kn_input_typed(b, "pos", KN_DT_I32, 1, s1);
    kn_val x = kn_add(b, kn_embedding(b, P.all[0], tok), kn_embedding(b, P.all[1], pos)); /* [B, D] */
    for (int l = 0; l < c->layers; l++) {
        const kn_val *m = P.mats + 4 * l, *v = P.vecs + 8 * l;
        kn_val cache[2];
        char name[KN_NAME_MAX];
        for (int i = 0; i < 2; i++) {
            snprintf(name, sizeof name, "cache.%d.%c", l, i ? 'v' : 'k');
            cache[i] = kn_input_typed(b, name, KN_DT_F32, 4, sc);
        }
        kn_val qkv = kn_nn_linear(b, kn_nn_layernorm(b, x, v[0], v[1]), m[0], v[2]);  /* [B, 3D] */
        kn_val y = kn_attn_decode(b, qkv, cache[0], cache[1], pos, scale);           /* [B, D] */
        x = kn_add(b, x, kn_nn_linear(b, y, m[1], v[3]));
        x = block_mlp(b, x, m, v);
    }
    kn_status st = finish(b, head(b, &P, x), NULL, 0, "the decode step", out);
    kn_builder_free(b);
    return st;
}

/* Bind the weights' low-precision copies a program reads after the lowparams pass
 * ("NAME@bf16", kiln/passes.h), rounding the slab once, the first time one is needed. */
static kn_status bind_low(kn_infer *inf, kn_program *p) {
    const kn_params *pp = &inf->model->p;
    const kn_dtype lows[2] = {KN_DT_BF16, KN_DT_F16};
    char name[KN_NAME_MAX];
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < pp->count; i++) {
            KN_TRY(kn_lowparam_name(pp->info[i].name, lows[k], name));
            if (kn_graph_find(kn_program_graph(p), name) < 0) continue;
            if (!inf->low) {
                kn_tensor *c = NULL;
                kn_status st = kn_tensor_cast(&c, pp->slab, lows[k]);
                if (st == KN_OK) st = kn_tensor_to(&inf->low, c, inf->o.device);
                kn_tensor_free(c);
                if (st == KN_OK) st = kn_params_views(pp, inf->low, &inf->low_views);
                KN_TRY(st);
            }
            if (inf->low->dtype != lows[k])
                return kn_error(KN_ERR_ARG, "kn_infer: the programs read weights in both bf16 and f16");
            KN_TRY(kn_program_bind(p, name, inf->low_views[i]));
        }
    return KN_OK;
}

/* Compile the decode step (T == 0) or the prefill of T tokens and bind the
 * parameters and the cache (in and out) to it. */
static kn_status compile_step(kn_infer *inf, int T, kn_program **out) {
    const kn_gpt *g = inf->model;
    const int nkv = 2 * g->cfg.layers;
    kn_val *pvals = kn_calloc((size_t)g->p.count + (size_t)nkv, sizeof *pvals); /* then the prefill's kv */
    if (!pvals) return kn_error(KN_ERR_OOM, "kn_infer: out of memory");
    kn_graph *gr = NULL;
    kn_program *p = NULL;
    kn_status st = T ? build_prefill(inf, T, pvals, pvals + g->p.count, &gr)
                     : build_decode(inf, pvals, &gr);
    kn_program_opts o = {.device = inf->o.device, .passes = inf->o.passes, .mode = inf->o.mode,
                         .cuda_emu = inf->o.cuda_emu};
    if (st == KN_OK) st = kn_program_compile(&p, gr, &o);
    for (int i = 0; st == KN_OK && i < g->p.count; i++) st = kn_program_bind(p, g->p.info[i].name, inf->views[i]);
    for (int i = 0; st == KN_OK && i < nkv; i++) {
        char name[KN_NAME_MAX];
        snprintf(name, sizeof name, "cache.%d.%c", i / 2, i % 2 ? 'v' : 'k');
        if (T) st = kn_program_bind_output(p, 1 + i, inf->cache_views[i]); /* prefill: into the cache */
        else st = kn_program_bind(p, name, inf->cache_views[i]);            /* decode: read and appended to */
    }
    if (st == KN_OK) st = bind_low(inf, p);
    if (st == KN_OK && !T) st = kn_program_bind(p, "tok", inf->tok);
    if (st == KN_OK && !T) st = kn_program_bind(p, "pos", inf->pos);
    if (st == KN_OK && !T && inf->o.cuda_graph) st = kn_program_set_cuda_graph(p, true);
    kn_graph_free(gr);
    kn_free(pvals);
    if (st != KN_OK) { kn_program_free(p); return st; }
    *out = p;
    return KN_OK;
}

/* ---------------------------------------------------------------- the session */

static kn_status device_tensor(kn_infer *inf, kn_dtype dt, int ndim, const int64_t *shape, kn_tensor **out) {
    KN_TRY(kn_tensor_empty_on(out, inf->o.device, dt, ndim, shape));
    return kn_device_memset(inf->o.device, kn_tensor_data(*out), 0, (size_t)kn_tensor_numel(*out) * kn_dtype_size(dt));
}

/* Block i of n equal contiguous blocks of t, seen as `shape`. */
static kn_status block_view(const kn_tensor *t, int n, int i, int ndim, const int64_t *shape, kn_tensor **out) {
    kn_tensor *flat = NULL, *row = NULL;
    int64_t s2[2] = {n, kn_tensor_numel(t) / n};
    kn_status st = kn_tensor_view(&flat, t, 2, s2);
    if (st == KN_OK) st = kn_tensor_slice(&row, flat, 0, i, i + 1, 1);
    if (st == KN_OK) st = kn_tensor_view(out, row, ndim, shape);
    kn_tensor_free(row);
    kn_tensor_free(flat);
    return st;
}

kn_status kn_infer_new(kn_infer *inf, const kn_gpt *model, int B, const kn_infer_opts *o) {
    if (!inf || !model) return kn_error(KN_ERR_ARG, "kn_infer_new: NULL argument");
    memset(inf, 0, sizeof *inf);
    KN_TRY(kn_gpt_config_check(&model->cfg));
    if (B < 1 || B > 4096) return kn_error(KN_ERR_ARG, "kn_infer_new: batch %d must be in [1, 4096]", B);
    const kn_gpt_config *c = &model->cfg;
    inf->model = model;
    inf->B = B;
    inf->Tmax = c->context;
    inf->V = c->vocab;
    if (o) inf->o = *o;
    else inf->o.device = KN_CPU;
    KN_TRY(kn_device_check("kn_infer_new", inf->o.device));
    const int64_t hd = c->width / c->heads, Tm = c->context;
    int64_t scache[6] = {c->layers, 2, B, c->heads, Tm, hd}, s1[1] = {B}, sv[4] = {B, c->heads, Tm, hd};
    kn_status st = kn_tensor_to(&inf->params, model->p.slab, inf->o.device);
    if (st == KN_OK) st = kn_params_views(&model->p, inf->params, &inf->views);
    if (st == KN_OK) st = device_tensor(inf, KN_DT_F32, 6, scache, &inf->cache);
    if (st == KN_OK && !(inf->cache_views = kn_calloc(2 * (size_t)c->layers, sizeof *inf->cache_views)))
        st = kn_error(KN_ERR_OOM, "kn_infer_new: out of memory");
    for (int i = 0; st == KN_OK && i < 2 * c->layers; i++)
        st = block_view(inf->cache, 2 * c->layers, i, 4, sv, &inf->cache_views[i]);
    int64_t s2[2] = {2, B}; /* tok and pos: one buffer, so one upload a token */
    if (st == KN_OK) st = device_tensor(inf, KN_DT_I32, 2, s2, &inf->step_in);
    if (st == KN_OK) st = device_tensor(inf, KN_DT_I32, 1, s1, &inf->next);
    if (st == KN_OK) st = block_view(inf->step_in, 2, 0, 1, s1, &inf->tok);
    if (st == KN_OK) st = block_view(inf->step_in, 2, 1, 1, s1, &inf->pos);
    if (st == KN_OK) {
        inf->h_tok = kn_calloc(2 * (size_t)B, sizeof *inf->h_tok);
        inf->h_pos = inf->h_tok ? inf->h_tok + B : NULL;
        inf->logits = kn_calloc((size_t)B * (size_t)c->vocab, sizeof *inf->logits);
        inf->scratch = kn_calloc((size_t)c->vocab, sizeof *inf->scratch);
        if (!inf->h_tok || !inf->h_pos || !inf->logits || !inf->scratch)
            st = kn_error(KN_ERR_OOM, "kn_infer_new: out of memory");
    }
    if (st == KN_OK) st = compile_step(inf, 0, &inf->decode);
    if (st != KN_OK) kn_infer_free(inf);
    return st;
}

void kn_infer_free(kn_infer *inf) {
    if (!inf) return;
    kn_program_free(inf->decode);
    for (int i = 0; i < KN_INFER_PREFILLS; i++) {
        kn_program_free(inf->prefill[i]);
        kn_tensor_free(inf->idx[i]);
    }
    if (inf->model && inf->views) kn_params_views_free(&inf->model->p, inf->views);
    if (inf->model && inf->low_views) kn_params_views_free(&inf->model->p, inf->low_views);
    for (int i = 0; inf->model && inf->cache_views && i < 2 * inf->model->cfg.layers; i++)
        kn_tensor_free(inf->cache_views[i]);
    kn_free(inf->cache_views);
    kn_tensor *ts[] = {inf->params, inf->low, inf->cache, inf->tok, inf->pos, inf->step_in, inf->next};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) kn_tensor_free(ts[i]);
    void *hs[] = {inf->h_tok, inf->logits, inf->scratch}; /* h_pos: in h_tok's block */
    for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++) kn_free(hs[i]);
    memset(inf, 0, sizeof *inf);
}

static kn_status upload(const kn_infer *inf, kn_tensor *t, const void *host) {
    return kn_device_memcpy(inf->o.device, kn_tensor_data(t), KN_CPU, host,
                            (size_t)kn_tensor_numel(t) * kn_dtype_size(t->dtype));
}

static kn_status take_logits(kn_infer *inf, const kn_program *p) {
    const kn_tensor *lg = kn_program_output(p, 0);
    if (!lg) return kn_error(KN_ERR_INTERNAL, "kn_infer: the step made no logits");
    return kn_device_memcpy(KN_CPU, inf->logits, inf->o.device, kn_tensor_data(lg),
                            (size_t)inf->B * (size_t)inf->V * sizeof(float));
}

static kn_status check_tokens(const kn_infer *inf, const char *fn, const int32_t *ids, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= inf->V)
            return kn_error(KN_ERR_ARG, "%s: token %d at %lld is outside the vocabulary [0, %d)", fn, ids[i],
                            (long long)i, inf->V);
    return KN_OK;
}

/* kn_infer_prefill without bringing the logits back; *ran: the program that made them. */
static kn_status run_prefill(kn_infer *inf, const int32_t *ids, int T, kn_program **ran) {
    if (!inf || !inf->decode || !ids) return kn_error(KN_ERR_ARG, "kn_infer_prefill: no session or no tokens");
    if (T < 1 || T > inf->Tmax)
        return kn_error(KN_ERR_ARG, "kn_infer_prefill: a prompt of %d tokens does not fit the context of %d (need 1..%d)",
                        T, inf->Tmax, inf->Tmax);
    KN_TRY(check_tokens(inf, "kn_infer_prefill", ids, (int64_t)inf->B * T));
    int slot = 0;
    while (slot < KN_INFER_PREFILLS && inf->prefill[slot] && inf->prefill_T[slot] != T) slot++;
    if (slot == KN_INFER_PREFILLS) { /* full: the oldest goes */
        kn_program_free(inf->prefill[0]);
        kn_tensor_free(inf->idx[0]);
        memmove(inf->prefill, inf->prefill + 1, (KN_INFER_PREFILLS - 1) * sizeof inf->prefill[0]);
        memmove(inf->prefill_T, inf->prefill_T + 1, (KN_INFER_PREFILLS - 1) * sizeof inf->prefill_T[0]);
        memmove(inf->idx, inf->idx + 1, (KN_INFER_PREFILLS - 1) * sizeof inf->idx[0]);
        slot = KN_INFER_PREFILLS - 1;
        inf->prefill[slot] = NULL;
        inf->idx[slot] = NULL;
    }
    if (!inf->prefill[slot]) {
        int64_t si[2] = {inf->B, T};
        KN_TRY(device_tensor(inf, KN_DT_I32, 2, si, &inf->idx[slot]));
        kn_status st = compile_step(inf, T, &inf->prefill[slot]);
        if (st == KN_OK) st = kn_program_bind(inf->prefill[slot], "idx", inf->idx[slot]);
        if (st != KN_OK) {
            kn_program_free(inf->prefill[slot]);
            kn_tensor_free(inf->idx[slot]);
            inf->prefill[slot] = NULL;
            inf->idx[slot] = NULL;
            return st;
        }
        inf->prefill_T[slot] = T;
    }
    KN_TRY(upload(inf, inf->idx[slot], ids));
    KN_TRY(kn_program_run(inf->prefill[slot]));
    inf->len = T;
    *ran = inf->prefill[slot];
    return KN_OK;
}

kn_status kn_infer_prefill(kn_infer *inf, const int32_t *ids, int T) {
    kn_program *p = NULL;
    KN_TRY(run_prefill(inf, ids, T, &p));
    return take_logits(inf, p);
}

/* kn_infer_decode without bringing the logits back. */
static kn_status run_decode(kn_infer *inf, const int32_t *tok) {
    if (!inf || !inf->decode || !tok) return kn_error(KN_ERR_ARG, "kn_infer_decode: no session or no tokens");
    if (inf->len < 1) return kn_error(KN_ERR_ARG, "kn_infer_decode: run a prefill first (the cache is empty)");
    if (inf->len >= inf->Tmax)
        return kn_error(KN_ERR_ARG, "kn_infer_decode: the cache is full (%d positions, the context)", inf->Tmax);
    KN_TRY(check_tokens(inf, "kn_infer_decode", tok, inf->B));
    const int B = inf->B, pos = inf->len;
    for (int b = 0; b < B; b++) {
        inf->h_tok[b] = tok[b];
        inf->h_pos[b] = pos;
    }
    KN_TRY(upload(inf, inf->step_in, inf->h_tok)); /* h_tok, then h_pos */
    KN_TRY(kn_program_run(inf->decode)); /* which also writes cache position pos */
    inf->len = pos + 1;
    return KN_OK;
}

kn_status kn_infer_decode(kn_infer *inf, const int32_t *tok) {
    KN_TRY(run_decode(inf, tok));
    return take_logits(inf, inf->decode);
}

/* Greedy's tokens from p's logits: each row's argmax on the device, B ids back. */
static kn_status take_argmax(kn_infer *inf, const kn_program *p, int32_t *tok) {
    const kn_tensor *lg = kn_program_output(p, 0);
    if (!lg || lg->dtype != KN_DT_F32) return kn_error(KN_ERR_INTERNAL, "kn_infer: the step made no f32 logits");
    KN_TRY(kn_device_argmax_rows(inf->o.device, kn_tensor_data(lg), inf->B, inf->V, kn_tensor_data(inf->next)));
    return kn_device_memcpy(KN_CPU, tok, inf->o.device, kn_tensor_data(inf->next), (size_t)inf->B * sizeof *tok);
}

kn_status kn_infer_cache_read(const kn_infer *inf, float *out) {
    if (!inf || !inf->cache || !out) return kn_error(KN_ERR_ARG, "kn_infer_cache_read: NULL argument");
    return kn_device_memcpy(KN_CPU, out, inf->o.device, kn_tensor_data(inf->cache),
                            (size_t)kn_tensor_numel(inf->cache) * sizeof(float));
}

/* ---------------------------------------------------------------- generation */

kn_status kn_infer_generate(kn_infer *inf, int32_t *ids, int n0, int n, const kn_sampling *s, kn_rng *rng,
                            kn_infer_token_fn fn, void *ctx) {
    if (!inf || !inf->decode || !ids || !s || !rng)
        return kn_error(KN_ERR_ARG, "kn_infer_generate: NULL argument");
    KN_TRY(kn_sampling_check(s));
    if (n0 < 1 || n < n0)
        return kn_error(KN_ERR_ARG, "kn_infer_generate: need a prompt of >= 1 token (got %d) and n >= n0 (got %d)", n0,
                        n);
    if (n0 > inf->Tmax)
        return kn_error(KN_ERR_ARG, "kn_infer_generate: the prompt has %d tokens, longer than the context of %d", n0,
                        inf->Tmax);
    const int B = inf->B, Tm = inf->Tmax;
    int32_t *win = kn_malloc((size_t)B * (size_t)Tm * sizeof *win), *tok = kn_malloc((size_t)B * sizeof *tok);
    kn_status st = win && tok ? KN_OK : kn_error(KN_ERR_OOM, "kn_infer_generate: out of memory");
    for (int len = n0; st == KN_OK && len < n; len++) {
        /* the logits at position len - 1: a prefill of the prompt, a decode step of the
         * last token while the cache has room, then a prefill of the sliding window */
        kn_program *p = inf->decode;
        if (len == n0 || len > Tm) {
            int T = len < Tm ? len : Tm;
            for (int b = 0; b < B; b++) memcpy(win + (size_t)b * T, ids + (size_t)b * n + len - T, (size_t)T * sizeof *win);
            st = run_prefill(inf, win, T, &p);
        } else {
            for (int b = 0; b < B; b++) tok[b] = ids[(size_t)b * n + len - 1];
            st = run_decode(inf, tok);
        }
        if (st == KN_OK && s->temperature <= 0) st = take_argmax(inf, p, tok); /* greedy: B ids, not B x V logits */
        else if (st == KN_OK) {
            st = take_logits(inf, p);
            for (int b = 0; st == KN_OK && b < B; b++)
                tok[b] = kn_sample_row(inf->logits + (size_t)b * inf->V, inf->V, s, rng, inf->scratch);
        }
        for (int b = 0; st == KN_OK && b < B; b++) ids[(size_t)b * n + len] = tok[b];
        if (st == KN_OK && fn) st = fn(ctx, len, tok);
    }
    kn_free(win);
    kn_free(tok);
    return st;
}
