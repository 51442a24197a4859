/* train_opts.c — the option table of `kiln train` and everything driven by it: flags,
 * config files, usage text, checkpoint metadata (see train_opts.h).
 *
 * One row per option: its name, where it lives in kn_train_opts, its kind and whether it
 * defines the run (saved in checkpoints, fixed on resume). Adding an option is one row.
 * Values are checked when they are set (numbers fully parsed and in range), so a typo
 * fails with the flag's name before any work starts. */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/data.h"
#include "kiln/passes.h"
#include "kiln/remat.h"
#include "nn/train_opts.h"

typedef enum { O_INT, O_I64, O_U64, O_F64, O_STR } opt_kind;

typedef struct opt_row {
    const char *name;
    opt_kind kind;
    size_t off;
    size_t size;       /* O_STR: buffer size */
    double lo, hi;     /* numeric range (inclusive) */
    bool defines_run;  /* saved in the checkpoint, fixed on resume */
    const char *help;
} opt_row;

#define F(field) offsetof(kn_train_opts, field)
#define S(field) offsetof(kn_train_opts, field), sizeof(((kn_train_opts *)0)->field)
static const opt_row k_opts[] = {
    {"layers", O_INT, F(layers), 0, 1, 64, true, "transformer blocks"},
    {"width", O_INT, F(width), 0, 1, 4096, true, "model width (a multiple of --heads)"},
    {"heads", O_INT, F(heads), 0, 1, 64, true, "attention heads"},
    {"context", O_INT, F(context), 0, 1, 4096, true, "sequence length T"},
    {"batch", O_INT, F(batch), 0, 1, 4096, true, "sequences per step B"},
    {"steps", O_I64, F(steps), 0, 1, 1e9, true, "optimizer steps (the schedule's length)"},
    {"lr", O_F64, F(lr), 0, 0, 10, true, "peak learning rate"},
    {"min-lr", O_F64, F(min_lr), 0, -1, 10, true, "final learning rate (default lr/10)"},
    {"warmup", O_I64, F(warmup), 0, -1, 1e9, true, "warm-up steps (default min(100, steps/10))"},
    {"optimizer", O_STR, S(optimizer), 0, 0, true, "adamw or sgd"},
    {"momentum", O_F64, F(momentum), 0, 0, 0.999999, true, "SGD momentum"},
    {"weight-decay", O_F64, F(weight_decay), 0, 0, 10, true, "decoupled weight decay of the matrices"},
    {"clip", O_F64, F(clip), 0, 0, 1e9, true, "global gradient-norm clip (0: off)"},
    {"seed", O_U64, F(seed), 0, 0, 0, true, "seed of initialization, batches and sampling"},
    {"data", O_STR, S(data), 0, 0, true, "'grammar' (bundled generator), a text file or a KNTK token file"},
    {"data-seed", O_U64, F(data_seed), 0, 0, 0, true, "seed of the grammar corpus"},
    {"data-bytes", O_I64, F(data_bytes), 0, 1024, 1e9, true, "size of the grammar corpus in bytes"},
    {"precision", O_STR, S(precision), 0, 0, true, "fp32, tf32 (a GPU's fp32 matmuls on TF32 tensor cores; the CPU's are fp32), bf16 or fp16 (the autocast pass)"},
    {"device", O_STR, S(device), 0, 0, false, "auto (cuda when a GPU is usable, else cpu), cpu, cuda or cuda:N"},
    {"mode", O_STR, S(mode), 0, 0, false, "auto, compiled (fused generated kernels: C on the CPU, CUDA on a GPU), emu (compiled to CUDA, run by the CPU's CUDA emulator: the GPU's code path without a GPU; slow), interp (node by node) or eager (CPU)"},
    {"remat", O_STR, S(remat), 0, 0, false, "activation checkpointing: none, selective, full, every:K or mincut"},
    {"passes", O_STR, S(passes), 0, 0, false, "graph passes run first on the step's graph: none, all (views, algebra, cse, dce, fold) or a list like cse,dce (kiln/passes.h)"},
    {"flash", O_INT, F(flash), 0, 0, 1, false, "flash attention (the flash pass): 1 (also bare --flash) or 0"},
    {"epilogue", O_INT, F(epilogue), 0, 0, 1, false, "matmul epilogues (the epilogue pass: bias, gelu and the bias gradient in the matmul's library call): 1 (also bare --epilogue) or 0"},
    {"hfuse", O_INT, F(hfuse), 0, 0, 1, false, "horizontal fusion (the hfuse pass: the q, k, v products of one weight's column slices as one wide product, forward and backward): 1 (also bare --hfuse) or 0"},
    {"cuda-graph", O_STR, S(cuda_graph), 0, 0, false, "on or off: replay the compiled GPU step as one CUDA graph"},
    {"offload", O_STR, S(offload), 0, 0, false, "none or optimizer: ZeRO-Offload, the optimizer state (AdamW's m and v, a master copy) and its step on the host, gradients down and parameters up each step (a GPU; with --dist ddp, zero1, zero2 each rank its part; kiln/offload.h)"},
    {"loss-scale", O_STR, S(loss_scale), 0, 0, false, "auto (dynamic with fp16, else none), none, dynamic[:INIT[:INTERVAL]] or a fixed scale"},
    {"out", O_STR, S(out), 0, 0, false, "checkpoint to write ('none': do not write one)"},
    {"resume", O_STR, S(resume), 0, 0, false, "continue the run saved in this checkpoint, exactly"},
    {"log", O_STR, S(log), 0, 0, false, "write 'step loss lr gradnorm' per step to this file"},
    {"stop-after", O_I64, F(stop_after), 0, 0, 1e9, false, "stop (and save) after this step (0: at --steps)"},
    {"sample", O_INT, F(sample), 0, 0, 100000, false, "characters to sample at the end (0: none)"},
    {"temperature", O_F64, F(temperature), 0, 0, 100, false, "sampling temperature (0: greedy)"},
    {"eval-batches", O_INT, F(eval_batches), 0, 0, 10000, false, "held-out batches to evaluate at the end"},
    {"dist", O_STR, S(dist), 0, 0, false, "data parallelism under mpiexec: ddp, zero1, zero2 or zero3 (fsdp) (kiln/dist.h)"},
    {"bucket-mb", O_F64, F(bucket_mb), 0, 1e-6, 1e6, false, "--dist: gradient (zero3: also parameter) bucket size in MiB"},
    {"accum", O_INT, F(accum), 0, 1, 4096, false, "micro-batches per step, gradients summed (--dist: communicate on the last; zero2/3: on each; --pp: rounds of the schedule)"},
    {"comm", O_STR, S(comm), 0, 0, false, "--dist: communicator backend, mpi (CPU ranks) or nccl (one GPU per rank)"},
    {"allreduce", O_STR, S(allreduce), 0, 0, false, "--dist ddp: library (MPI/NCCL's own) or ring (kiln's)"},
    {"compress", O_STR, S(compress), 0, 0, false, "--dist ddp: gradient compression, none or int8 (error feedback)"},
    {"emit-ir", O_STR, S(emit_ir), 0, 0, false, "--dist: write the joint graph and where each collective starts"},
    {"mesh", O_STR, S(mesh), 0, 0, false, "device mesh under mpiexec: tp=N (tensor parallel, Megatron), dp=D,tp=N, pp=N, dp=D,pp=N (axes dp, tp, pp; kiln/mesh.h)"},
    {"sp", O_INT, F(sp), 0, 0, 1, false, "--mesh: sequence parallelism (layernorms and residuals on the rank's rows; reduce-scatter + all-gather): 1 (also bare --sp) or 0"},
    {"pp", O_INT, F(pp), 0, 0, 1024, false, "pipeline parallelism under mpiexec -n N: N stages of consecutive blocks (kiln/mesh.h)"},
    {"schedule", O_STR, S(schedule), 0, 0, false, "--pp: gpipe, 1f1b or interleaved (kiln/pipeline.h)"},
    {"microbatches", O_INT, F(microbatches), 0, 0, 65536, false, "--pp: micro-batches per step (0: 4 x --pp)"},
    {"chunks", O_INT, F(chunks), 0, 0, 64, false, "--pp: model chunks per rank (0: 2 for interleaved, else 1)"},
    {"timeline", O_STR, S(timeline), 0, 0, false, "--pp: write the last step's per-rank timeline (TSV; plots/pp_timeline.sh)"},
};
#undef F
#undef S
#define N_OPTS ((int)(sizeof k_opts / sizeof k_opts[0]))

static void defaults(kn_train_opts *o) {
    memset(o, 0, sizeof *o);
    o->layers = 2;
    o->width = 64;
    o->heads = 4;
    o->context = 64;
    o->batch = 8;
    o->steps = 1200;
    o->lr = 2e-2;
    o->min_lr = -1;
    o->warmup = -1;
    snprintf(o->optimizer, sizeof o->optimizer, "adamw");
    o->momentum = 0.9;
    o->weight_decay = 0.1;
    o->clip = 1.0;
    o->seed = 1;
    snprintf(o->data, sizeof o->data, "grammar");
    o->data_seed = KN_CORPUS_DEFAULT_SEED;
    o->data_bytes = KN_CORPUS_DEFAULT_BYTES;
    snprintf(o->device, sizeof o->device, "auto");
    snprintf(o->mode, sizeof o->mode, "auto");
    snprintf(o->remat, sizeof o->remat, "none");
    snprintf(o->passes, sizeof o->passes, "none");
    snprintf(o->cuda_graph, sizeof o->cuda_graph, "off");
    snprintf(o->offload, sizeof o->offload, "none");
    snprintf(o->loss_scale, sizeof o->loss_scale, "auto");
    snprintf(o->precision, sizeof o->precision, "fp32");
    snprintf(o->out, sizeof o->out, "ckpt.safetensors");
    o->sample = 300;
    o->temperature = 0.8;
    o->eval_batches = 8;
    o->bucket_mb = 25;
    o->accum = 1;
    snprintf(o->comm, sizeof o->comm, "mpi");
    snprintf(o->allreduce, sizeof o->allreduce, "library");
    snprintf(o->compress, sizeof o->compress, "none");
    snprintf(o->schedule, sizeof o->schedule, "1f1b");
}

static const opt_row *find_opt(const char *name, size_t len) {
    for (int i = 0; i < N_OPTS; i++)
        if (strlen(k_opts[i].name) == len && !strncmp(k_opts[i].name, name, len)) return &k_opts[i];
    return NULL;
}

/* Set one option from text; `where` names the source for messages ("--lr", "run.cfg:3"). */
static bool set_opt(kn_train_opts *o, const opt_row *r, const char *text, const char *where) {
    char *p = (char *)o + r->off, *end = NULL;
    errno = 0;
    if (r->kind == O_STR) {
        if (strlen(text) >= r->size) {
            fprintf(stderr, "kiln train: %s: value is longer than %zu characters\n", where, r->size - 1);
            return false;
        }
        snprintf(p, r->size, "%s", text);
        return true;
    }
    if (r->kind == O_U64) {
        if (text[0] == '-') end = (char *)text;
        else {
            unsigned long long v = strtoull(text, &end, 10);
            if (!errno && end != text && !*end) { memcpy(p, &(uint64_t){v}, sizeof(uint64_t)); return true; }
        }
        fprintf(stderr, "kiln train: %s: '%s' is not a non-negative integer\n", where, text);
        return false;
    }
    double v = r->kind == O_F64 ? strtod(text, &end) : (double)strtoll(text, &end, 10);
    if (errno || end == text || *end || !(v >= r->lo && v <= r->hi)) {
        fprintf(stderr, "kiln train: %s: '%s' is not %s in [%g, %g]\n", where, text,
                r->kind == O_F64 ? "a number" : "an integer", r->lo, r->hi);
        return false;
    }
    if (r->kind == O_INT) memcpy(p, &(int){(int)v}, sizeof(int));
    else if (r->kind == O_I64) memcpy(p, &(int64_t){(int64_t)v}, sizeof(int64_t));
    else memcpy(p, &v, sizeof(double));
    return true;
}

/* The text of an option's value; exact: doubles with 17 digits (they read back exactly). */
static void opt_text(const kn_train_opts *o, const opt_row *r, char *buf, size_t n, bool exact) {
    const char *p = (const char *)o + r->off;
    int64_t i64;
    uint64_t u64;
    double f;
    int i;
    switch (r->kind) {
    case O_INT: memcpy(&i, p, sizeof i); snprintf(buf, n, "%d", i); break;
    case O_I64: memcpy(&i64, p, sizeof i64); snprintf(buf, n, "%lld", (long long)i64); break;
    case O_U64: memcpy(&u64, p, sizeof u64); snprintf(buf, n, "%llu", (unsigned long long)u64); break;
    case O_F64: memcpy(&f, p, sizeof f); snprintf(buf, n, exact ? "%.17g" : "%g", f); break;
    case O_STR: snprintf(buf, n, "%s", p); break;
    }
}

void kn_train_opts_usage(FILE *f) {
    kn_train_opts d;
    defaults(&d);
    fprintf(f, "usage: kiln train [--NAME VALUE | --NAME=VALUE | --config FILE] ...\n\n"
               "Trains a GPT on the CPU and shows it learning; with no options, the default small model on\n"
               "the bundled grammar corpus. FILE holds 'NAME = VALUE' lines ('#' comments), applied where\n"
               "--config appears. With --resume, the run's settings come from the checkpoint.\n\noptions (default):\n");
    for (int i = 0; i < N_OPTS; i++) {
        char v[64];
        opt_text(&d, &k_opts[i], v, sizeof v, false);
        fprintf(f, "  --%-13s %s (%s)\n", k_opts[i].name, k_opts[i].help,
                !v[0] ? "none" : !strcmp(v, "-1") ? "auto" : v);
    }
    fprintf(f, "  --%-13s read options from a key=value file\n  --%-13s this text\n", "config FILE", "help");
}

static int usage_error(const char *fmt, const char *a) {
    fprintf(stderr, "kiln train: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, "\n(kiln train --help lists the options)\n");
    return 2;
}

/* Set `name` (len bytes) = text from a flag or config line; refuses run-defining options
 * on resume. Returns false after printing the reason. */
static bool apply(kn_train_opts *o, const char *name, size_t len, const char *text, const char *where, bool resuming) {
    const opt_row *r = find_opt(name, len);
    if (!r) {
        fprintf(stderr, "kiln train: %s: unknown option '%.*s'\n", where, (int)len, name);
        return false;
    }
    if (resuming && r->defines_run) {
        fprintf(stderr, "kiln train: %s: '%s' cannot be set with --resume: the checkpoint fixes the run's settings\n",
                where, r->name);
        return false;
    }
    return set_opt(o, r, text, where);
}

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n')) s[--n] = '\0';
    return s;
}

static bool read_config(kn_train_opts *o, const char *path, bool resuming) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "kiln train: --config %s: cannot open: %s\n", path, strerror(errno));
        return false;
    }
    char line[1024], where[600];
    int ln = 0;
    bool ok = true;
    while (ok && fgets(line, sizeof line, f)) {
        ln++;
        char *h = strchr(line, '#');
        if (h) *h = '\0';
        char *s = trim(line);
        if (!*s) continue;
        snprintf(where, sizeof where, "%s:%d", path, ln);
        char *eq = strchr(s, '=');
        if (!eq) {
            fprintf(stderr, "kiln train: %s: expected 'NAME = VALUE', got '%s'\n", where, s);
            ok = false;
            break;
        }
        *eq = '\0';
        char *k = trim(s), *v = trim(eq + 1);
        ok = apply(o, k, strlen(k), v, where, resuming);
    }
    fclose(f);
    return ok;
}

/* Options saved in a checkpoint's metadata, applied before the flags. */
static bool apply_checkpoint(kn_train_opts *o, const char *path) {
    kn_safetensors st;
    if (kn_safetensors_read(path, &st) != KN_OK) {
        fprintf(stderr, "kiln train: --resume: %s\n", kn_last_error());
        return false;
    }
    bool ok = true;
    for (int i = 0; ok && i < N_OPTS; i++) {
        if (!k_opts[i].defines_run) continue;
        char key[64], where[600];
        snprintf(key, sizeof key, "kiln.opt.%s", k_opts[i].name);
        const char *v = kn_safetensors_meta(&st, key);
        snprintf(where, sizeof where, "%s: metadata %s", path, key);
        if (!v && !strcmp(k_opts[i].name, "precision")) continue; /* written before --precision: fp32 */
        if (!v) {
            fprintf(stderr, "kiln train: --resume %s: not a checkpoint of `kiln train` (no '%s')\n", path, key);
            ok = false;
        } else {
            ok = set_opt(o, &k_opts[i], v, where);
        }
    }
    kn_safetensors_free(&st);
    return ok;
}

int kn_train_opts_parse(kn_train_opts *o, int argc, char **argv) {
    defaults(o);
    bool resuming = false;
    /* --resume first: the checkpoint's settings are the base the other flags change */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            kn_train_opts_usage(stdout);
            return 0;
        }
        const char *v = NULL;
        if (!strcmp(a, "--resume")) v = i + 1 < argc ? argv[i + 1] : NULL;
        else if (!strncmp(a, "--resume=", 9)) v = a + 9;
        else continue;
        if (!v || !*v) return usage_error("%s needs a checkpoint file", "--resume");
        if (!apply_checkpoint(o, v)) return 2;
        resuming = true;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0 || !a[2]) return usage_error("unexpected argument '%s'", a);
        const char *name = a + 2, *eq = strchr(name, '='), *val;
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const opt_row *r = find_opt(name, len);
        bool sw = r && r->kind == O_INT && r->lo == 0 && r->hi == 1; /* a switch: bare means 1 */
        if (eq) {
            val = eq + 1;
        } else if (sw && (i + 1 >= argc || (strcmp(argv[i + 1], "0") && strcmp(argv[i + 1], "1")))) {
            val = "1";
        } else {
            if (i + 1 >= argc) return usage_error("%s needs a value", a);
            val = argv[++i];
        }
        char where[80];
        snprintf(where, sizeof where, "--%.*s", (int)(len < 60 ? len : 60), name);
        if (len == 6 && !strncmp(name, "config", 6)) {
            if (!read_config(o, val, resuming)) return 2;
        } else if (!apply(o, name, len, val, where, resuming)) {
            return 2;
        }
    }
    if (o->width % o->heads != 0) {
        fprintf(stderr, "kiln train: --width %d is not a multiple of --heads %d\n", o->width, o->heads);
        return 2;
    }
    if (strcmp(o->optimizer, "adamw") && strcmp(o->optimizer, "sgd"))
        return usage_error("--optimizer '%s': use adamw or sgd", o->optimizer);
    if (!strcmp(o->mode, "graph")) snprintf(o->mode, sizeof o->mode, "interp"); /* the former name */
    if (strcmp(o->mode, "auto") && strcmp(o->mode, "compiled") && strcmp(o->mode, "emu") && strcmp(o->mode, "interp") &&
        strcmp(o->mode, "eager"))
        return usage_error("--mode '%s': use auto, compiled, emu, interp or eager", o->mode);
    if (kn_remat_check_arg(o->remat) != KN_OK) return usage_error("--remat: %s", kn_last_error());
    if (strcmp(o->cuda_graph, "on") && strcmp(o->cuda_graph, "off"))
        return usage_error("--cuda-graph '%s': use on or off", o->cuda_graph);
    const struct { const char *name; int on; } rewrites[] = {{"flash", o->flash}, {"hfuse", o->hfuse},
                                                             {"epilogue", o->epilogue}}; /* passes over the graph */
    for (size_t i = 0; i < sizeof rewrites / sizeof rewrites[0]; i++)
        if (rewrites[i].on && !strcmp(o->mode, "eager"))
            return usage_error("--%s: eager mode runs the model op by op, with no graph to rewrite; use --mode auto, "
                               "compiled or interp", rewrites[i].name);
    if (strcmp(o->passes, "none") && !strcmp(o->mode, "eager"))
        return usage_error("--passes %s: eager mode runs the model op by op, with no graph for passes; use --mode "
                           "auto, compiled or interp", o->passes);
    if (strcmp(o->remat, "none") && !strcmp(o->mode, "eager"))
        return usage_error("--remat %s: eager mode runs the model op by op, with no graph to rematerialize; use "
                           "--mode auto, compiled or interp", o->remat);
    kn_loss_scaler ls;
    if (kn_loss_scaler_parse(o->loss_scale, !strcmp(o->precision, "fp16"), &ls) != KN_OK)
        return usage_error("%s", kn_last_error());
    if (strcmp(o->precision, "fp32") && strcmp(o->precision, "tf32") && strcmp(o->precision, "bf16") &&
        strcmp(o->precision, "fp16"))
        return usage_error("--precision '%s': use fp32, tf32, bf16 or fp16", o->precision);
    if ((!strcmp(o->precision, "bf16") || !strcmp(o->precision, "fp16")) && !strcmp(o->mode, "eager"))
        return usage_error("--precision %s: eager mode runs the model op by op, with no graph for the autocast pass; "
                           "use --mode auto, compiled or interp", o->precision);
    if (o->min_lr < 0) o->min_lr = o->lr / 10;
    if (o->warmup < 0) o->warmup = o->steps / 10 < 100 ? o->steps / 10 : 100;
    if (o->warmup >= o->steps) o->warmup = o->steps - 1;
    if (o->stop_after > o->steps) {
        fprintf(stderr, "kiln train: --stop-after %lld is past --steps %lld\n", (long long)o->stop_after,
                (long long)o->steps);
        return 2;
    }
    return -1;
}

int kn_train_opts_to_meta(const kn_train_opts *o, const char **keys, char vals[][600]) {
    static char names[N_OPTS][64];
    int n = 0;
    for (int i = 0; i < N_OPTS; i++) {
        if (!k_opts[i].defines_run) continue;
        snprintf(names[i], sizeof names[i], "kiln.opt.%s", k_opts[i].name);
        keys[n] = names[i];
        opt_text(o, &k_opts[i], vals[n], 600, true);
        n++;
    }
    return n;
}

kn_optim_config kn_train_opts_optim(const kn_train_opts *o) {
    kn_optim_config c = kn_optim_default();
    c.kind = strcmp(o->optimizer, "sgd") ? KN_OPTIM_ADAMW : KN_OPTIM_SGD;
    c.momentum = o->momentum;
    c.weight_decay = o->weight_decay;
    return c;
}
