/* dump.c — `kiln dump`: everything a reference framework needs to check kiln's training
 * math, in one safetensors file: the initial weights, a few batches of random tokens, and
 * what kiln computed from them (logits, loss, every gradient, the losses of N AdamW steps).
 *
 * plots/torch_agree.py reads the file, rebuilds the same GPT in PyTorch (or in numpy with
 * --reference numpy), loads the weights and compares. The file holds
 *   <param>           f32, every parameter before any step, named as in a checkpoint
 *                     ("wte.weight", "h.0.attn.c_attn.weight", ...; kn_checkpoint_save)
 *   x, y              i32 [N+1, B, T]: batch k's tokens and targets (k = 0..N)
 *   logits            f32 [B*T, vocab]: the forward pass on batch 0
 *   loss              f64 [1]: the mean cross-entropy on batch 0
 *   grad.<param>      f32: the gradient of the loss on batch 0, before clipping
 *   losses            f64 [N]: the loss of AdamW step k = 1..N, taken on batch k, each
 *                     reported before its update (as kn_trainer_step reports it)
 *   gnorms            f64 [N]: the global gradient norm of those steps, before clipping
 * and in "__metadata__" the model config (the checkpoint's "kiln.*" keys), the batch, the
 * seed, the optimizer's hyperparameters, the names of the parameters that get weight decay,
 * the clip and the device. Batch 0 is probed without an update (kn_trainer_probe), so the
 * steps start from the saved weights.
 *
 * Tokens are uniform random (a Philox stream of the seed, one child stream per batch), so
 * the file depends on the flags alone. Bad usage exits 2 naming the flag; a failure while
 * running exits 1. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "kiln/data.h"
#include "kiln/device.h"
#include "kiln/nn.h"

typedef struct dump_opts {
    int vocab, context, layers, width, heads, batch, steps;
    uint64_t seed;
    double lr, clip;
    char device[16];
    bool compiled;      /* --mode compiled: the step as generated kernels (C or CUDA) */
    const char *out;
} dump_opts;

static void usage(FILE *f) {
    fprintf(f, "usage: kiln dump --out FILE.safetensors [--vocab N] [--context N] [--layers N] [--width N]\n"
               "                 [--heads N] [--batch N] [--steps N] [--seed N] [--lr X] [--clip X]\n"
               "                 [--device auto|cpu|cuda|cuda:N] [--mode interp|compiled]\n"
               "Initializes a GPT from --seed, draws steps + 1 batches of random tokens (batch size --batch,\n"
               "length --context), and on the device writes one safetensors file with the initial weights, the\n"
               "batches, the logits, loss and every (unclipped) gradient on batch 0, and the losses of --steps\n"
               "AdamW steps (betas 0.9/0.95, eps 1e-8, weight decay 0.1 on matrices and embeddings, global-norm\n"
               "clip --clip, 0: none) on batches 1..steps. plots/torch_agree.py checks it against PyTorch.\n"
               "Defaults: vocab 512, context 64, 2 layers, width 128, 4 heads, batch 4, 10 steps, seed 1,\n"
               "lr 1e-3, clip 1.0, device auto (the first GPU when one is usable), mode interp (node by node;\n"
               "compiled: the loss, gradients and steps from the fused, generated kernels; logits node by node).\n");
}

static int parse(dump_opts *o, int argc, char **argv) {
    *o = (dump_opts){.vocab = 512, .context = 64, .layers = 2, .width = 128, .heads = 4, .batch = 4, .steps = 10,
                     .seed = 1, .lr = 1e-3, .clip = 1.0};
    snprintf(o->device, sizeof o->device, "auto");
    struct { const char *name; int *v; int lo, hi; } ints[] = {
        {"--vocab", &o->vocab, 2, 1 << 24}, {"--context", &o->context, 1, 1 << 20}, {"--layers", &o->layers, 1, 1024},
        {"--width", &o->width, 1, 1 << 16}, {"--heads", &o->heads, 1, 1 << 16}, {"--batch", &o->batch, 1, 1 << 20},
        {"--steps", &o->steps, 0, 100000}};
    struct { const char *name; double *v, lo, hi; } reals[] = {
        {"--lr", &o->lr, 0.0, 10.0}, {"--clip", &o->clip, 0.0, 1e9}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        if (strncmp(a, "--", 2) != 0) { fprintf(stderr, "kiln dump: unexpected argument '%s'\n", a); return 2; }
        if (i + 1 >= argc) { fprintf(stderr, "kiln dump: %s needs a value\n", a); return 2; }
        const char *v = argv[++i];
        char *end = NULL;
        errno = 0;
        if (!strcmp(a, "--out")) { o->out = v; continue; }
        if (!strcmp(a, "--device")) {
            if (strlen(v) >= sizeof o->device) {
                fprintf(stderr, "kiln dump: --device '%s' is too long\n", v);
                return 2;
            }
            snprintf(o->device, sizeof o->device, "%s", v);
            continue;
        }
        if (!strcmp(a, "--mode")) {
            if (strcmp(v, "interp") && strcmp(v, "compiled")) {
                fprintf(stderr, "kiln dump: --mode '%s': use interp or compiled\n", v);
                return 2;
            }
            o->compiled = !strcmp(v, "compiled");
            continue;
        }
        if (!strcmp(a, "--seed")) {
            o->seed = strtoull(v, &end, 10);
            if (!*v || *end || errno || *v == '-') {
                fprintf(stderr, "kiln dump: --seed '%s' is not a non-negative integer\n", v);
                return 2;
            }
            continue;
        }
        bool found = false;
        for (size_t k = 0; !found && k < sizeof ints / sizeof ints[0]; k++) {
            if (strcmp(a, ints[k].name) != 0) continue;
            long x = strtol(v, &end, 10);
            if (!*v || *end || errno || x < ints[k].lo || x > ints[k].hi) {
                fprintf(stderr, "kiln dump: %s '%s': expected an integer in [%d, %d]\n", a, v, ints[k].lo, ints[k].hi);
                return 2;
            }
            *ints[k].v = (int)x;
            found = true;
        }
        for (size_t k = 0; !found && k < sizeof reals / sizeof reals[0]; k++) {
            if (strcmp(a, reals[k].name) != 0) continue;
            double x = strtod(v, &end);
            if (!*v || *end || errno || !isfinite(x) || x < reals[k].lo || x > reals[k].hi) {
                fprintf(stderr, "kiln dump: %s '%s': expected a number in [%g, %g]\n", a, v, reals[k].lo, reals[k].hi);
                return 2;
            }
            *reals[k].v = x;
            found = true;
        }
        if (!found) { fprintf(stderr, "kiln dump: unknown option '%s'\n", a); usage(stderr); return 2; }
    }
    if (!o->out) { fprintf(stderr, "kiln dump: --out FILE is required\n"); usage(stderr); return 2; }
    if (o->width % o->heads) {
        fprintf(stderr, "kiln dump: --width %d is not a multiple of --heads %d\n", o->width, o->heads);
        return 2;
    }
    if ((int64_t)o->batch * o->context * o->vocab > ((int64_t)1 << 31)) {
        fprintf(stderr, "kiln dump: --batch %d x --context %d x --vocab %d logits are too many (> 2^31)\n", o->batch,
                o->context, o->vocab);
        return 2;
    }
    return -1;
}

/* Everything the file holds, gathered before it is written. */
typedef struct dump_data {
    float *params, *grad, *logits;   /* owned: p.n, p.n, B*T*V floats */
    int32_t *x, *y;                  /* owned: (N+1)*B*T each */
    double loss, *losses, *gnorms;   /* owned: N each (+1 so N = 0 allocates) */
} dump_data;

static void dump_data_free(dump_data *d) {
    kn_free(d->params); kn_free(d->grad); kn_free(d->logits);
    kn_free(d->x); kn_free(d->y); kn_free(d->losses); kn_free(d->gnorms);
}

/* Batch k: uniform tokens from child stream 2^32 + k of the seed (the parameters use
 * child streams 0..count-1, so the two never overlap). */
static void draw_batches(const dump_opts *o, int32_t *x, int32_t *y) {
    kn_rng root = kn_rng_new(o->seed);
    size_t bt = (size_t)o->batch * (size_t)o->context;
    for (int k = 0; k <= o->steps; k++) {
        kn_rng r = kn_rng_split(&root, ((uint64_t)1 << 32) + (uint64_t)k);
        for (size_t i = 0; i < bt; i++) x[(size_t)k * bt + i] = (int32_t)(kn_rng_u32(&r) % (uint32_t)o->vocab);
        for (size_t i = 0; i < bt; i++) y[(size_t)k * bt + i] = (int32_t)(kn_rng_u32(&r) % (uint32_t)o->vocab);
    }
}

static kn_status write_file(const dump_opts *o, const kn_gpt *g, const dump_data *d, const char *devname) {
    const kn_params *p = &g->p;
    const int np = p->count, nt = 2 * np + 6;
    const int64_t B = o->batch, T = o->context, N = o->steps;
    kn_st_tensor *ts = kn_calloc((size_t)nt, sizeof *ts);
    char (*gname)[KN_NAME_MAX + 8] = kn_calloc((size_t)np, sizeof *gname);
    size_t dlen = 1;
    for (int i = 0; i < np; i++) dlen += strlen(p->info[i].name) + 1;
    char *decay = kn_calloc(dlen, 1);
    if (!ts || !gname || !decay) {
        kn_free(ts); kn_free(gname); kn_free(decay);
        return kn_error(KN_ERR_OOM, "kiln dump: out of memory");
    }
    int k = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < np; i++) {
            const kn_param_info *q = &p->info[i];
            if (pass) snprintf(gname[i], sizeof gname[i], "grad.%s", q->name);
            ts[k] = (kn_st_tensor){.name = pass ? gname[i] : q->name, .dtype = KN_DT_F32, .ndim = q->ndim,
                                   .data = (pass ? d->grad : d->params) + q->offset,
                                   .nbytes = (uint64_t)q->numel * sizeof(float)};
            memcpy(ts[k++].shape, q->shape, sizeof q->shape);
        }
    uint64_t nb = (uint64_t)(N + 1) * (uint64_t)(B * T) * sizeof(int32_t);
    ts[k++] = (kn_st_tensor){.name = "x", .dtype = KN_DT_I32, .ndim = 3, .shape = {N + 1, B, T}, .data = d->x,
                             .nbytes = nb};
    ts[k++] = (kn_st_tensor){.name = "y", .dtype = KN_DT_I32, .ndim = 3, .shape = {N + 1, B, T}, .data = d->y,
                             .nbytes = nb};
    ts[k++] = (kn_st_tensor){.name = "logits", .dtype = KN_DT_F32, .ndim = 2, .shape = {B * T, o->vocab},
                             .data = d->logits, .nbytes = (uint64_t)(B * T) * (uint64_t)o->vocab * sizeof(float)};
    ts[k++] = (kn_st_tensor){.name = "loss", .dtype = KN_DT_F64, .ndim = 1, .shape = {1}, .data = &d->loss,
                             .nbytes = sizeof(double)};
    ts[k++] = (kn_st_tensor){.name = "losses", .dtype = KN_DT_F64, .ndim = 1, .shape = {N}, .data = d->losses,
                             .nbytes = (uint64_t)N * sizeof(double)};
    ts[k++] = (kn_st_tensor){.name = "gnorms", .dtype = KN_DT_F64, .ndim = 1, .shape = {N}, .data = d->gnorms,
                             .nbytes = (uint64_t)N * sizeof(double)};
    for (int i = 0; i < np; i++)
        if (p->info[i].decay) {
            if (decay[0]) strcat(decay, ",");
            strcat(decay, p->info[i].name);
        }
    kn_optim_config oc = kn_optim_default();
    char v[13][40];
    int iv[7] = {o->vocab, o->context, o->layers, o->width, o->heads, o->batch, o->steps};
    for (int i = 0; i < 7; i++) snprintf(v[i], sizeof v[i], "%d", iv[i]);
    snprintf(v[7], sizeof v[7], "%llu", (unsigned long long)o->seed);
    double dv[5] = {o->lr, oc.beta1, oc.beta2, oc.eps, oc.weight_decay};
    for (int i = 0; i < 5; i++) snprintf(v[8 + i], sizeof v[8 + i], "%.17g", dv[i]);
    char clip[40];
    snprintf(clip, sizeof clip, "%.17g", o->clip);
    kn_st_meta meta[] = {
        {"kiln.vocab", v[0]}, {"kiln.context", v[1]}, {"kiln.layers", v[2]}, {"kiln.width", v[3]},
        {"kiln.heads", v[4]}, {"kiln.batch", v[5]}, {"kiln.steps", v[6]}, {"kiln.seed", v[7]},
        {"kiln.lr", v[8]}, {"kiln.optim.kind", "adamw"}, {"kiln.optim.beta1", v[9]}, {"kiln.optim.beta2", v[10]},
        {"kiln.optim.eps", v[11]}, {"kiln.optim.weight_decay", v[12]}, {"kiln.optim.decay", decay},
        {"kiln.clip", clip}, {"kiln.device", devname}, {"kiln.mode", o->compiled ? "compiled" : "interp"},
        {"kiln.layernorm_eps", "1e-05"},
        {"kiln.gelu", "tanh"}, {"kiln.dump.steps", "step k = 1..N on batch k; losses before each update"}};
    kn_status st = kn_safetensors_write(o->out, k, ts, (int)(sizeof meta / sizeof meta[0]), meta);
    kn_free(ts);
    kn_free(gname);
    kn_free(decay);
    return st;
}

static kn_status dump(const dump_opts *o, kn_device dev) {
    kn_gpt_config cfg = {.vocab = o->vocab, .context = o->context, .layers = o->layers, .width = o->width,
                         .heads = o->heads};
    KN_TRY(kn_gpt_config_check(&cfg));
    kn_gpt g = {0};
    kn_trainer tr = {0};
    dump_data d = {0};
    char devname[32];
    kn_device_str(dev, devname, sizeof devname);
    const size_t bt = (size_t)o->batch * (size_t)o->context, nb = (size_t)(o->steps + 1) * bt;
    kn_status st = kn_gpt_new(&g, &cfg);
    if (st == KN_OK) {
        kn_gpt_init(&g, o->seed);
        d.params = kn_malloc((size_t)g.p.n * sizeof(float));
        d.grad = kn_malloc((size_t)g.p.n * sizeof(float));
        d.logits = kn_malloc(bt * (size_t)o->vocab * sizeof(float));
        d.x = kn_malloc(nb * sizeof(int32_t));
        d.y = kn_malloc(nb * sizeof(int32_t));
        d.losses = kn_calloc((size_t)o->steps + 1, sizeof(double));
        d.gnorms = kn_calloc((size_t)o->steps + 1, sizeof(double));
        if (!d.params || !d.grad || !d.logits || !d.x || !d.y || !d.losses || !d.gnorms)
            st = kn_error(KN_ERR_OOM, "kiln dump: out of memory for %lld parameters and %zu logits", (long long)g.p.n,
                          bt * (size_t)o->vocab);
    }
    if (st == KN_OK) {
        memcpy(d.params, g.p.data, (size_t)g.p.n * sizeof(float));
        draw_batches(o, d.x, d.y);
        kn_optim_config oc = kn_optim_default();
        st = kn_trainer_new(&tr, &g, o->batch, o->context, &oc, o->clip);
    }
    if (st == KN_OK) st = kn_trainer_to_device(&tr, dev);
    if (st == KN_OK && o->compiled) st = kn_trainer_set_compiled(&tr, true);
    if (st == KN_OK) st = kn_trainer_probe(&tr, d.x, d.y, &d.loss, d.grad, d.logits);
    if (st == KN_OK)
        printf("kiln dump: GPT vocab %d, context %d, %d layers, width %d, %d heads (%lld parameters), batch %d, on "
               "%s (%s)\n  batch 0: loss %.9f\n", o->vocab, o->context, o->layers, o->width, o->heads, (long long)g.p.n,
               o->batch, devname, o->compiled ? "compiled" : "node by node", d.loss);
    for (int s = 0; st == KN_OK && s < o->steps; s++) {
        size_t off = (size_t)(s + 1) * bt;
        st = kn_trainer_step(&tr, d.x + off, d.y + off, o->lr, &d.losses[s], &d.gnorms[s]);
        if (st == KN_OK) printf("  step %2d: loss %.9f  gradient norm %.6f\n", s + 1, d.losses[s], d.gnorms[s]);
    }
    if (st == KN_OK) st = write_file(o, &g, &d, devname);
    if (st == KN_OK) printf("  wrote %s\n", o->out);
    kn_trainer_free(&tr);
    kn_gpt_free(&g);
    dump_data_free(&d);
    return st;
}

int kn_cli_dump(int argc, char **argv) {
    dump_opts o;
    int rc = parse(&o, argc, argv);
    if (rc >= 0) return rc;
    kn_device dev;
    if (kn_device_parse(o.device, &dev) != KN_OK) {
        fprintf(stderr, "kiln dump: --device: %s\n", kn_last_error());
        return 2;
    }
    if (dump(&o, dev) != KN_OK) {
        fprintf(stderr, "kiln dump: %s\n", kn_last_error());
        return 1;
    }
    return 0;
}
