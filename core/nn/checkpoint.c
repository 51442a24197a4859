/* checkpoint.c — GPT checkpoints as safetensors files (format in kiln/data.h).
 *
 * A checkpoint holds one tensor per parameter, named as in the model ("wte.weight",
 * "h.0.attn.c_attn.weight", ...) so that PyTorch's safetensors loads it as a state dict,
 * plus "optim.state" (the optimizer's one state slab) when the optimizer is saved. The
 * model config and the optimizer's kind and step go into "__metadata__" as strings; the
 * caller adds what else a resumed run needs (data seed, schedule, ...).
 *
 * Loading is strict: every parameter must be present with dtype F32 and its exact shape,
 * the config must match, and the optimizer state must have the right size. Floats are
 * copied as raw bytes, so a loaded model is bit-identical to the saved one. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/data.h"
#include "kiln/nn.h"

#define CFG_KEYS 5
static const char *const k_cfg_keys[CFG_KEYS] = {"kiln.vocab", "kiln.context", "kiln.layers", "kiln.width",
                                                 "kiln.heads"};

static int *cfg_field(kn_gpt_config *c, int i) {
    int *f[CFG_KEYS] = {&c->vocab, &c->context, &c->layers, &c->width, &c->heads};
    return f[i];
}

kn_status kn_checkpoint_save(const char *path, const kn_gpt *g, const kn_optim *opt, int n_meta,
                             const char *const *keys, const char *const *values) {
    if (!path || !g || n_meta < 0 || (n_meta && (!keys || !values)))
        return kn_error(KN_ERR_ARG, "kn_checkpoint_save: bad arguments");
    int nt = g->p.count + (opt ? 1 : 0), nm = CFG_KEYS + 2 + n_meta;
    kn_st_tensor *ts = kn_calloc((size_t)nt, sizeof *ts);
    kn_st_meta *meta = kn_calloc((size_t)nm, sizeof *meta);
    char nums[CFG_KEYS + 2][32];
    if (!ts || !meta) {
        kn_free(ts);
        kn_free(meta);
        return kn_error(KN_ERR_OOM, "kn_checkpoint_save: out of memory");
    }
    for (int i = 0; i < g->p.count; i++) {
        const kn_param_info *q = &g->p.info[i];
        ts[i] = (kn_st_tensor){.name = q->name, .dtype = KN_DT_F32, .ndim = q->ndim, .data = g->p.data + q->offset,
                               .nbytes = (uint64_t)q->numel * sizeof(float)};
        memcpy(ts[i].shape, q->shape, sizeof q->shape);
    }
    kn_gpt_config c = g->cfg;
    int k = 0;
    for (int i = 0; i < CFG_KEYS; i++, k++) {
        snprintf(nums[k], sizeof nums[k], "%d", *cfg_field(&c, i));
        meta[k] = (kn_st_meta){k_cfg_keys[i], nums[k]};
    }
    if (opt) {
        ts[nt - 1] = (kn_st_tensor){.name = "optim.state", .dtype = KN_DT_F32, .ndim = 1, .shape = {opt->state_len},
                                    .data = opt->state, .nbytes = (uint64_t)opt->state_len * sizeof(float)};
        snprintf(nums[k], sizeof nums[k], "%lld", (long long)opt->step);
        meta[k] = (kn_st_meta){"kiln.optim.step", nums[k]};
        k++;
        meta[k++] = (kn_st_meta){"kiln.optim.kind", opt->cfg.kind == KN_OPTIM_SGD ? "sgd" : "adamw"};
    }
    for (int i = 0; i < n_meta; i++) meta[k++] = (kn_st_meta){keys[i], values[i]};
    kn_status st = kn_safetensors_write(path, nt, ts, k, meta);
    kn_free(ts);
    kn_free(meta);
    return st;
}

/* A metadata value that must be a non-negative decimal integer. */
static kn_status meta_int(const kn_safetensors *st, const char *path, const char *key, long long *out) {
    const char *v = kn_safetensors_meta(st, key);
    if (!v) return kn_error(KN_ERR_FORMAT, "%s: not a kiln checkpoint (no '%s' in its metadata)", path, key);
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < 0)
        return kn_error(KN_ERR_FORMAT, "%s: metadata '%s' = '%s' is not a non-negative integer", path, key, v);
    *out = x;
    return KN_OK;
}

static kn_status read_config(const kn_safetensors *st, const char *path, kn_gpt_config *cfg) {
    kn_gpt_config c = {0};
    for (int i = 0; i < CFG_KEYS; i++) {
        long long x;
        KN_TRY(meta_int(st, path, k_cfg_keys[i], &x));
        if (x > (1 << 30)) return kn_error(KN_ERR_FORMAT, "%s: metadata '%s' = %lld is too large", path, k_cfg_keys[i], x);
        *cfg_field(&c, i) = (int)x;
    }
    kn_status s = kn_gpt_config_check(&c);
    if (s != KN_OK) return kn_error(KN_ERR_FORMAT, "%s: %s", path, kn_last_error());
    *cfg = c;
    return KN_OK;
}

kn_status kn_checkpoint_config(const char *path, kn_gpt_config *cfg) {
    if (!path || !cfg) return kn_error(KN_ERR_ARG, "kn_checkpoint_config: NULL argument");
    kn_safetensors st;
    KN_TRY(kn_safetensors_read(path, &st));
    kn_status s = read_config(&st, path, cfg);
    kn_safetensors_free(&st);
    return s;
}

static kn_status load_into(const kn_safetensors *st, const char *path, kn_gpt *g, kn_optim *opt) {
    kn_gpt_config c;
    KN_TRY(read_config(st, path, &c));
    if (memcmp(&c, &g->cfg, sizeof c) != 0)
        return kn_error(KN_ERR_ARG, "%s: checkpoint model (vocab %d, context %d, layers %d, width %d, heads %d) differs "
                        "from this model (vocab %d, context %d, layers %d, width %d, heads %d)", path, c.vocab,
                        c.context, c.layers, c.width, c.heads, g->cfg.vocab, g->cfg.context, g->cfg.layers,
                        g->cfg.width, g->cfg.heads);
    /* check everything before changing anything */
    for (int i = 0; i < g->p.count; i++) {
        const kn_param_info *q = &g->p.info[i];
        const kn_st_tensor *t = kn_safetensors_find(st, q->name);
        if (!t) return kn_error(KN_ERR_FORMAT, "%s: parameter '%s' is missing", path, q->name);
        bool same = t->dtype == KN_DT_F32 && t->ndim == q->ndim;
        for (int d = 0; same && d < q->ndim; d++) same = t->shape[d] == q->shape[d];
        if (!same) {
            char want[64], got[64];
            kn_shape_str(q->ndim, q->shape, want, sizeof want);
            kn_shape_str(t->ndim, t->shape, got, sizeof got);
            return kn_error(KN_ERR_FORMAT, "%s: parameter '%s' is %s%s, expected F32%s", path, q->name,
                            kn_st_dtype_name(t->dtype), got, want);
        }
    }
    const kn_st_tensor *os = NULL;
    long long step = 0;
    if (opt) {
        os = kn_safetensors_find(st, "optim.state");
        const char *kind = kn_safetensors_meta(st, "kiln.optim.kind");
        const char *want = opt->cfg.kind == KN_OPTIM_SGD ? "sgd" : "adamw";
        if (!os || !kind) return kn_error(KN_ERR_FORMAT, "%s: no optimizer state to resume from", path);
        if (strcmp(kind, want) != 0)
            return kn_error(KN_ERR_ARG, "%s: optimizer state is for %s, this run uses %s", path, kind, want);
        if (os->dtype != KN_DT_F32 || os->ndim != 1 || os->shape[0] != opt->state_len)
            return kn_error(KN_ERR_FORMAT, "%s: optimizer state has %lld floats, expected %lld", path,
                            (long long)(os->ndim == 1 ? os->shape[0] : -1), (long long)opt->state_len);
        KN_TRY(meta_int(st, path, "kiln.optim.step", &step));
    }
    for (int i = 0; i < g->p.count; i++) {
        const kn_param_info *q = &g->p.info[i];
        memcpy(g->p.data + q->offset, kn_safetensors_find(st, q->name)->data, (size_t)q->numel * sizeof(float));
    }
    if (opt) {
        memcpy(opt->state, os->data, (size_t)opt->state_len * sizeof(float));
        opt->step = step;
    }
    return KN_OK;
}

kn_status kn_checkpoint_load(const char *path, kn_gpt *g, kn_optim *opt, kn_safetensors *out) {
    if (!path || !g) return kn_error(KN_ERR_ARG, "kn_checkpoint_load: NULL argument");
    kn_safetensors st;
    KN_TRY(kn_safetensors_read(path, &st));
    kn_status s = load_into(&st, path, g, opt);
    if (s == KN_OK && out) *out = st;
    else kn_safetensors_free(&st);
    return s;
}
