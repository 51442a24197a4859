/* gpt.c — the layers (linear, layernorm, causal self-attention, MLP), the parameter slab
 * and the GPT model built from them (contracts in kiln/nn.h).
 *
 * Every layer is a few builder calls, so the same code runs eagerly or is recorded into a
 * graph. The residual stream is kept as a [B*T, D] matrix: linear layers are then plain
 * 2-D matrix products, and only attention reshapes to [B, H, T, D/H] and back.
 *
 * Slab layout (kn_params): the parameters that get weight decay (embeddings and weight
 * matrices) come first, then biases and layernorm parameters, each tensor contiguous. The
 * order is fixed by the config alone, so a checkpoint's slab means the same thing to every
 * run of the same config. */
#include <math.h>
#include <string.h>

#include "kiln/nn.h"

/* ---------------------------------------------------------------- layers */

kn_val kn_nn_linear(kn_builder *b, kn_val x, kn_val w, kn_val bias) {
    return kn_add(b, kn_matmul(b, x, w), bias);
}

kn_val kn_nn_layernorm(kn_builder *b, kn_val x, kn_val w, kn_val bias) { return kn_layernorm(b, x, w, bias, 1e-5); }

kn_status kn_nn_qkv(kn_builder *b, kn_val x, int B, int T, int heads, kn_val w_qkv, kn_val b_qkv, kn_val qkv[3]) {
    qkv[0] = qkv[1] = qkv[2] = KN_VAL_NONE;
    int64_t D = kn_val_dim(b, x, -1);
    if (kn_builder_status(b) != KN_OK) return kn_builder_status(b);
    if (heads < 1 || D % heads != 0 || kn_val_dim(b, x, 0) != (int64_t)B * T) {
        kn_builder_fail(b, KN_ERR_SHAPE, "kn_nn_attention: x is [%lld, %lld], expected [B*T = %d, D] with D a multiple "
                        "of heads = %d", (long long)kn_val_dim(b, x, 0), (long long)D, B * T, heads);
        return kn_builder_status(b);
    }
    int64_t hd = D / heads;
    /* q, k and v are the three column blocks of one [D, 3D] weight (one checkpoint tensor,
     * as in GPT-2). Each is its own product with its block of the weight: the blocks'
     * gradients then meet in the small [D, 3D] weight, where splitting one [BT, 3D] result
     * instead would meet them in three zero-padded [BT, 3D] gradients added together. */
    int64_t s4[4] = {B, T, heads, hd};
    int to_heads[4] = {0, 2, 1, 3};
    for (int i = 0; i < 3; i++) {
        kn_val w = kn_slice(b, w_qkv, 1, i * D, (i + 1) * D, 1);          /* [D, D] */
        kn_val bias = kn_slice(b, b_qkv, 0, i * D, (i + 1) * D, 1);       /* [D] */
        kn_val h = kn_reshape(b, kn_nn_linear(b, x, w, bias), 4, s4);     /* [B, T, H, hd] */
        qkv[i] = kn_permute(b, h, 4, to_heads);                           /* [B, H, T, hd] */
    }
    return kn_builder_status(b);
}

kn_val kn_nn_heads_merge(kn_builder *b, kn_val y, kn_val w_proj, kn_val b_proj) {
    int to_heads[4] = {0, 2, 1, 3};
    int64_t s2[2] = {kn_val_dim(b, y, 0) * kn_val_dim(b, y, 2), kn_val_dim(b, y, 1) * kn_val_dim(b, y, 3)};
    y = kn_reshape(b, kn_permute(b, y, 4, to_heads), 2, s2);              /* [BT, D]: the swap undoes itself */
    return kn_nn_linear(b, y, w_proj, b_proj);
}

kn_val kn_nn_attention_kv(kn_builder *b, kn_val x, int B, int T, int heads, kn_val w_qkv, kn_val b_qkv, kn_val w_proj,
                          kn_val b_proj, kn_val *k_out, kn_val *v_out) {
    kn_val qkv[3];
    if (k_out) *k_out = KN_VAL_NONE;
    if (v_out) *v_out = KN_VAL_NONE;
    if (kn_nn_qkv(b, x, B, T, heads, w_qkv, b_qkv, qkv) != KN_OK) return KN_VAL_NONE;
    int64_t hd = kn_val_dim(b, x, -1) / heads;
    kn_val q = qkv[0], k = qkv[1], v = qkv[2];
    if (k_out) *k_out = k;
    if (v_out) *v_out = v;
    /* scores q k^T / sqrt(hd), masked so position t sees only positions <= t, softmax over
     * the keys: one fused op (causal_softmax), not a mul, a causal_fill and a softmax. */
    kn_val att = kn_causal_softmax(b, kn_matmul_t(b, q, k, false, true), 1.0 / sqrt((double)hd)); /* [B, H, T, T] */
    return kn_nn_heads_merge(b, kn_matmul(b, att, v), w_proj, b_proj); /* att v: [B, H, T, hd] */
}

kn_val kn_nn_attention(kn_builder *b, kn_val x, int B, int T, int heads, kn_val w_qkv, kn_val b_qkv, kn_val w_proj,
                       kn_val b_proj) {
    return kn_nn_attention_kv(b, x, B, T, heads, w_qkv, b_qkv, w_proj, b_proj, NULL, NULL);
}

kn_val kn_nn_mlp(kn_builder *b, kn_val x, kn_val w_fc, kn_val b_fc, kn_val w_proj, kn_val b_proj) {
    return kn_nn_linear(b, kn_gelu(b, kn_nn_linear(b, x, w_fc, b_fc)), w_proj, b_proj);
}

/* ---------------------------------------------------------------- config and layout */

kn_status kn_gpt_config_check(const kn_gpt_config *c) {
    if (!c) return kn_error(KN_ERR_ARG, "kn_gpt_config_check: NULL config");
    if (c->vocab < 1 || c->context < 1 || c->layers < 1 || c->width < 1 || c->heads < 1)
        return kn_error(KN_ERR_ARG, "GPT config: vocab %d, context %d, layers %d, width %d, heads %d must all be >= 1",
                        c->vocab, c->context, c->layers, c->width, c->heads);
    if (c->width % c->heads != 0)
        return kn_error(KN_ERR_ARG, "GPT config: width %d is not a multiple of heads %d", c->width, c->heads);
    if (c->vocab > (1 << 24) || c->context > (1 << 20) || c->layers > 1024 || c->width > (1 << 16))
        return kn_error(KN_ERR_ARG, "GPT config: vocab %d, context %d, layers %d or width %d is unreasonably large",
                        c->vocab, c->context, c->layers, c->width);
    return KN_OK;
}

/* Parameter list in slab order: decayed tensors, then the rest. */
typedef struct layout {
    kn_param_info *info;
    int count, cap;
    int64_t n;
} layout;

static void add_param(layout *L, const char *name, int ndim, int64_t d0, int64_t d1, bool decay, double std,
                      double value) {
    kn_param_info *p = &L->info[L->count++];
    KN_CHECK(L->count <= L->cap);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    p->shape[0] = d0;
    p->shape[1] = d1;
    p->numel = ndim == 1 ? d0 : d0 * d1;
    p->offset = L->n;
    p->decay = decay;
    p->init_std = std;
    p->init_value = value;
    L->n += p->numel;
}

static void gpt_layout(const kn_gpt_config *c, layout *L) {
    const int64_t V = c->vocab, T = c->context, D = c->width;
    const double std = 0.02, proj_std = 0.02 / sqrt(2.0 * c->layers);
    char nm[KN_NAME_MAX];
    add_param(L, "wte.weight", 2, V, D, true, std, 0);
    add_param(L, "wpe.weight", 2, T, D, true, std, 0);
    for (int l = 0; l < c->layers; l++) {
        snprintf(nm, sizeof nm, "h.%d.attn.c_attn.weight", l); add_param(L, nm, 2, D, 3 * D, true, std, 0);
        snprintf(nm, sizeof nm, "h.%d.attn.c_proj.weight", l); add_param(L, nm, 2, D, D, true, proj_std, 0);
        snprintf(nm, sizeof nm, "h.%d.mlp.c_fc.weight", l);    add_param(L, nm, 2, D, 4 * D, true, std, 0);
        snprintf(nm, sizeof nm, "h.%d.mlp.c_proj.weight", l);  add_param(L, nm, 2, 4 * D, D, true, proj_std, 0);
    }
    for (int l = 0; l < c->layers; l++) {
        snprintf(nm, sizeof nm, "h.%d.ln_1.weight", l);      add_param(L, nm, 1, D, 0, false, 0, 1);
        snprintf(nm, sizeof nm, "h.%d.ln_1.bias", l);        add_param(L, nm, 1, D, 0, false, 0, 0);
        snprintf(nm, sizeof nm, "h.%d.attn.c_attn.bias", l); add_param(L, nm, 1, 3 * D, 0, false, 0, 0);
        snprintf(nm, sizeof nm, "h.%d.attn.c_proj.bias", l); add_param(L, nm, 1, D, 0, false, 0, 0);
        snprintf(nm, sizeof nm, "h.%d.ln_2.weight", l);      add_param(L, nm, 1, D, 0, false, 0, 1);
        snprintf(nm, sizeof nm, "h.%d.ln_2.bias", l);        add_param(L, nm, 1, D, 0, false, 0, 0);
        snprintf(nm, sizeof nm, "h.%d.mlp.c_fc.bias", l);    add_param(L, nm, 1, 4 * D, 0, false, 0, 0);
        snprintf(nm, sizeof nm, "h.%d.mlp.c_proj.bias", l);  add_param(L, nm, 1, D, 0, false, 0, 0);
    }
    add_param(L, "ln_f.weight", 1, D, 0, false, 0, 1);
    add_param(L, "ln_f.bias", 1, D, 0, false, 0, 0);
}

/* Per layer: 4 matrices + 8 vectors; plus wte, wpe, ln_f.{weight,bias}. */
static int gpt_param_count(const kn_gpt_config *c) { return 4 + 12 * c->layers; }

kn_status kn_params_views(const kn_params *p, const kn_tensor *slab, kn_tensor ***out) {
    if (!p || !slab || !out) return kn_error(KN_ERR_ARG, "kn_params_views: a NULL argument");
    if (slab->ndim != 1 || slab->shape[0] != p->n || !kn_dtype_is_float(slab->dtype))
        return kn_error(KN_ERR_SHAPE, "kn_params_views: the slab must be a float [%lld], got %s[%lld]",
                        (long long)p->n, kn_dtype_name(slab->dtype), (long long)(slab->ndim == 1 ? slab->shape[0] : -1));
    kn_tensor **v = kn_calloc((size_t)p->count, sizeof *v);
    if (!v) return kn_error(KN_ERR_OOM, "kn_params_views: out of memory");
    kn_status st = KN_OK;
    for (int i = 0; st == KN_OK && i < p->count; i++) {
        kn_tensor *s;
        const kn_param_info *q = &p->info[i];
        st = kn_tensor_slice(&s, slab, 0, q->offset, q->offset + q->numel, 1);
        if (st != KN_OK) break;
        st = kn_tensor_view(&v[i], s, q->ndim, q->shape);
        kn_tensor_free(s);
    }
    if (st != KN_OK) { kn_params_views_free(p, v); return st; }
    *out = v;
    return KN_OK;
}

void kn_params_views_free(const kn_params *p, kn_tensor **views) {
    for (int i = 0; views && p && i < p->count; i++) kn_tensor_free(views[i]);
    kn_free(views);
}

static void params_free(kn_params *p) {
    kn_params_views_free(p, p->views);
    kn_free(p->info);
    kn_tensor_free(p->slab);
    memset(p, 0, sizeof *p);
}

kn_status kn_gpt_new(kn_gpt *g, const kn_gpt_config *cfg) {
    if (!g) return kn_error(KN_ERR_ARG, "kn_gpt_new: NULL model");
    KN_TRY(kn_gpt_config_check(cfg));
    memset(g, 0, sizeof *g);
    g->cfg = *cfg;
    layout L = {.cap = gpt_param_count(cfg)};
    L.info = kn_calloc((size_t)L.cap, sizeof *L.info);
    if (!L.info) return kn_error(KN_ERR_OOM, "kn_gpt_new: out of memory");
    gpt_layout(cfg, &L);
    kn_params *p = &g->p;
    p->info = L.info;
    p->count = L.count;
    p->n = L.n;
    for (int i = 0; i < p->count && p->info[i].decay; i++) p->n_decay = p->info[i].offset + p->info[i].numel;
    int64_t shape[1] = {p->n};
    kn_status st = kn_tensor_zeros(&p->slab, KN_DT_F32, 1, shape);
    if (st == KN_OK) st = kn_params_views(p, p->slab, &p->views);
    if (st != KN_OK) { params_free(p); return st; }
    p->data = kn_tensor_data(p->slab);
    return KN_OK;
}

void kn_gpt_free(kn_gpt *g) {
    if (g) params_free(&g->p);
}

void kn_gpt_init(kn_gpt *g, uint64_t seed) {
    kn_rng root = kn_rng_new(seed);
    for (int i = 0; i < g->p.count; i++) {
        const kn_param_info *q = &g->p.info[i];
        float *w = g->p.data + q->offset;
        if (q->init_std > 0) {
            kn_rng r = kn_rng_split(&root, (uint64_t)i);
            kn_rng_normal_f32(&r, w, q->numel);
            for (int64_t k = 0; k < q->numel; k++) w[k] = (float)((double)w[k] * q->init_std);
        } else {
            for (int64_t k = 0; k < q->numel; k++) w[k] = (float)q->init_value;
        }
    }
}

int kn_gpt_find(const kn_gpt *g, const char *name) {
    for (int i = 0; i < g->p.count; i++)
        if (!strcmp(g->p.info[i].name, name)) return i;
    return -1;
}

/* ---------------------------------------------------------------- the model */

kn_status kn_gpt_build(kn_builder *b, const kn_gpt *g, kn_val idx, kn_val targets, kn_val *pvals, kn_val *logits,
                       kn_val *loss) {
    if (!b || !g || !pvals || !logits) return kn_error(KN_ERR_ARG, "kn_gpt_build: NULL argument");
    const kn_gpt_config *c = &g->cfg;
    for (int i = 0; i < g->p.count; i++) pvals[i] = kn_param(b, g->p.info[i].name, g->p.views[i]);
    if (kn_builder_status(b) != KN_OK) return kn_builder_status(b);
    if (kn_val_ndim(b, idx) != 2 || kn_val_dim(b, idx, 1) > c->context) {
        kn_builder_fail(b, KN_ERR_SHAPE, "kn_gpt_build: idx must be [B, T] with T <= context %d (ndim %d, T %lld)",
                        c->context, kn_val_ndim(b, idx), (long long)kn_val_dim(b, idx, -1));
        return kn_builder_status(b);
    }
    const int B = (int)kn_val_dim(b, idx, 0), T = (int)kn_val_dim(b, idx, 1);
    kn_val out;
    return kn_gpt_build_part(b, g, 0, c->layers, true, true, idx, B, T, targets, pvals, &out, logits, loss);
}

kn_status kn_gpt_build_part(kn_builder *b, const kn_gpt *g, int l0, int l1, bool embed, bool head, kn_val in, int B,
                            int T, kn_val targets, const kn_val *pvals, kn_val *out, kn_val *logits, kn_val *loss) {
    if (!b || !g || !pvals || !out) return kn_error(KN_ERR_ARG, "kn_gpt_build_part: NULL argument");
    const kn_gpt_config *c = &g->cfg;
    const int nL = c->layers;
    if (l0 < 0 || l1 < l0 || l1 > nL) {
        kn_builder_fail(b, KN_ERR_ARG, "kn_gpt_build_part: layers [%d, %d) outside the model's %d", l0, l1, nL);
        return kn_builder_status(b);
    }
    const int64_t D = c->width;
    /* pvals follow gpt_layout's order: wte, wpe, 4 matrices per layer, 8 vectors per layer, ln_f */
    const kn_val *P = pvals;
    const kn_val *mats = P + 2, *vecs = P + 2 + 4 * nL, *lnf = P + 2 + 12 * nL;
    kn_val x = in;
    if (embed) {
        kn_val tok = kn_embedding(b, P[0], in);                           /* [B, T, D] */
        kn_val pos = kn_slice(b, P[1], 0, 0, T, 1);                       /* [T, D] */
        int64_t s2[2] = {(int64_t)B * T, D};
        x = kn_reshape(b, kn_add(b, tok, pos), 2, s2);                    /* [BT, D] */
    }
    /* Each block's nodes carry its index as their scope: activation checkpointing
     * (core/passes/remat.c) finds a layer's input and its forward by it. */
    int32_t outer = KN_SCOPE_NONE;
    for (int l = l0; l < l1; l++) {
        const kn_val *m = mats + 4 * l, *v = vecs + 8 * l;
        int32_t prev = kn_builder_set_scope(b, l);
        if (l == l0) outer = prev;
        kn_val h = kn_nn_layernorm(b, x, v[0], v[1]);
        x = kn_add(b, x, kn_nn_attention(b, h, B, T, c->heads, m[0], v[2], m[1], v[3]));
        h = kn_nn_layernorm(b, x, v[4], v[5]);
        x = kn_add(b, x, kn_nn_mlp(b, h, m[2], v[6], m[3], v[7]));
    }
    if (l1 > l0) kn_builder_set_scope(b, outer);
    *out = x;
    if (!head) return kn_builder_status(b);
    kn_val lg;
    if (!logits) logits = &lg;
    x = kn_nn_layernorm(b, x, lnf[0], lnf[1]);
    *logits = kn_matmul_t(b, x, P[0], false, true);                      /* [BT, V], tied to wte */
    *out = *logits;
    if (kn_val_ok(targets)) {
        int64_t s1[1] = {(int64_t)B * T};
        kn_val l = kn_cross_entropy(b, *logits, kn_reshape(b, targets, 1, s1));
        if (loss) *loss = l;
        *out = l;
    }
    return kn_builder_status(b);
}
