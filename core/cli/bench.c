/* bench.c — `kiln bench`: time GPT training steps on random tokens, node by node or
 * compiled (--mode; what `make bench-gpu` runs for kiln's rows). Defaults are the GPT-2 124M shape (vocab 50304, context 1024, 12 layers,
 * width 768, 12 heads, batch 8), fp32, AdamW with clip 1.0, on the first GPU when one is
 * usable (--device cpu to force the CPU); flags shrink the model for a quick check.
 *
 * Protocol: compile the step, move it to the device, run --warmup steps (not timed: the
 * caching allocator fills, cuBLAS picks its kernels), then --steps timed steps, each on a
 * fresh random batch (drawn on the host before its timer starts; never zeros; --tokens
 * picks how the ids are distributed, which the embedding gradient's time depends on). A
 * step is timed with CUDA events around kn_trainer_step (batch upload, forward and backward graph,
 * the gradients, written into the slab where they are made; clip, AdamW, loss read-back); on the CPU with the wall clock. Reported:
 * median step ms (and min, max), tokens/s from the median, the median forward-only ms
 * (kn_trainer_eval) and the median clip+optimizer ms, so step - forward - optimizer is
 * roughly the backward, and the peak of kiln's live GPU allocations from the caching
 * allocator. The last line is one JSON object with the same fields (plots/bench.sh reads
 * it beside plots/bench_torch.py's). `kiln bench-attn` (bench_attn.c) times attention
 * alone; both time with timing.c's stopwatch. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/timing.h"
#if KN_HAVE_CUDA
#include "kiln/cuda.h"
#endif
#include "kiln/device.h"
#include "kiln/kernels.h"
#include "kiln/nn.h"
#include "kiln/passes.h"
#include "kiln/program.h"
#include "kiln/remat.h"

typedef struct bench_opts {
    int vocab, context, layers, width, heads, batch, warmup, steps, profile;
    bool tf32, cuda_graph, flash; /* flash: the flash pass after --passes (before remat) */
    bool epilogue;                /* the epilogue pass after autocast (before remat) */
    bool hfuse;                   /* the hfuse pass after autocast (before epilogue and remat) */
    bool no_plan;                 /* compiled: no memory plan (every value its own bytes) */
    char profile_out[512];
    uint64_t seed;
    char device[16];
    char mode[16];      /* compiled | interp */
    char passes[128];   /* the pass list (kiln/passes.h); "" none */
    char remat[32];     /* activation checkpointing policy, run after the passes ("none": off) */
    char precision[8];  /* fp32 | bf16 | fp16: the autocast pass first (kiln/passes.h) */
    char tokens[8];     /* uniform | same | zipf: how the batches' ids are drawn */
} bench_opts;

/* STREAM-style copy bandwidth of this machine: bytes read + written per second by memcpy
 * of 64 MiB split over kiln's threads, the best of 5. The ceiling of a memory-bound kernel. */
typedef struct copy_job { const char *src; char *dst; } copy_job;
static void copy_part(void *ctx, int64_t lo, int64_t hi) {
    copy_job *j = ctx;
    memcpy(j->dst + lo, j->src + lo, (size_t)(hi - lo));
}
static double copy_bandwidth(void) {
    const int64_t n = 64 << 20;
    char *a = kn_malloc((size_t)n), *b = kn_malloc((size_t)n);
    double best = 0;
    if (a && b) {
        memset(a, 1, (size_t)n);
        memset(b, 2, (size_t)n);
        copy_job j = {a, b};
        for (int r = 0; r < 6; r++) {
            double t0 = kn_time_now();
            kn_k_parallel(n, true, copy_part, &j);
            double dt = kn_time_now() - t0;
            if (r > 0 && dt > 0 && 2.0 * (double)n / dt / 1e9 > best) best = 2.0 * (double)n / dt / 1e9;
        }
    }
    kn_free(a);
    kn_free(b);
    return best;
}

static void usage(FILE *f) {
    fprintf(f, "usage: kiln bench [--vocab N] [--context N] [--layers N] [--width N] [--heads N] [--batch N]\n"
               "                  [--warmup N] [--steps N] [--seed N] [--device auto|cpu|cuda|cuda:N] [--profile N]\n"
               "                  [--profile-out FILE.tsv] [--tf32] [--mode compiled|interp] [--passes LIST]\n"
               "                  [--flash] [--epilogue] [--hfuse] [--remat none|selective|full|every:K|mincut] [--cuda-graph]\n"
               "                  [--no-plan]\n"
               "                  [--precision fp32|bf16|fp16] [--tokens uniform|same|zipf]\n"
               "Times GPT training steps (fp32, AdamW, clip 1.0) on random tokens. Defaults: the GPT-2 124M\n"
               "shape: vocab 50304, context 1024, 12 layers, width 768, 12 heads, batch 8; 3 warm-up and\n"
               "10 timed steps; device auto (the first GPU when one is usable). --profile N adds one step\n"
               "(GPU) run with a per-op profile and prints its N costliest groups of ops (0: none); on the\n"
               "CPU, three steps with every step timed, printing the N costliest with their GB/s against\n"
               "a copy bandwidth measured in the same run;\n"
               "--profile-out also writes every group to a TSV file (plots/profile.sh plots it).\n"
               "--tf32 lets cuBLAS use TF32 tensor cores for fp32 matmuls (KILN_TF32=1; off by default).\n"
               "--mode compiled runs the step as fused generated kernels (C on the CPU, CUDA through NVRTC on a\n"
               "GPU); interp (the default on a GPU) node by node with the backend's kernels. On the CPU the\n"
               "default is compiled. --passes LIST\n"
               "compiles the step with those graph passes (fold, views, algebra, cse, dce, all, flash; default\n"
               "none): with --mode, the rows of an ablation table. --flash adds the flash pass (flash\n"
               "attention: no [B, H, T, T] matrix; kiln bench-attn times attention alone). --epilogue adds the\n"
               "epilogue pass after autocast (matmul + bias [+ gelu], + gelu's gradient, + the bias gradient as one\n"
               "cuBLASLt call each). --hfuse adds the hfuse pass after autocast, before epilogue (the q, k, v\n"
               "products of one weight's column slices as one wide product, forward and backward).\n"
               "--remat POLICY recomputes activations in\n"
               "the backward (the remat pass, after the others): it prints the step's largest live set, the\n"
               "lower bound of its activation memory, beside the time (plots/remat.sh plots every policy).\n"
               "--cuda-graph (with --mode compiled on a GPU) replays the step as one CUDA graph.\n"
               "--no-plan (with --mode compiled) gives every value of the step its own bytes: no memory plan\n"
               "(the ablation's row; make ablation).\n"
               "--precision bf16|fp16 runs the autocast pass first (matmuls in 16 bits, f32 accumulation), and\n"
               "lowparams (the optimizer writes the weights' 16-bit copies in its update), lowloss (the loss\n"
               "reads the 16-bit logits: no f32 copy of them) and lowsave (the backward keeps the MLP's\n"
               "pre-activation in 16 bits, as PyTorch's autocast does).\n"
               "--tokens draws the batches' ids uniformly (the default), all the same id, or by Zipf's law\n"
               "(log-uniform ranks: a few ids take most positions, as words in text); the embedding gradient's\n"
               "cost depends on it.\n"
               "The last line is JSON.\n");
}

static int parse(bench_opts *o, int argc, char **argv) {
    *o = (bench_opts){.vocab = 50304, .context = 1024, .layers = 12, .width = 768, .heads = 12, .batch = 8,
                      .warmup = 3, .steps = 10, .seed = 1, .remat = "none", .precision = "fp32",
                      .tokens = "uniform"};
    snprintf(o->device, sizeof o->device, "auto");
    struct { const char *name; int *v; int lo; } ints[] = {
        {"--vocab", &o->vocab, 2}, {"--context", &o->context, 1}, {"--layers", &o->layers, 1},
        {"--width", &o->width, 1}, {"--heads", &o->heads, 1}, {"--batch", &o->batch, 1},
        {"--warmup", &o->warmup, 0}, {"--steps", &o->steps, 1}, {"--profile", &o->profile, 0}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        if (!strcmp(a, "--tf32")) { o->tf32 = true; continue; }
        if (!strcmp(a, "--flash")) { o->flash = true; continue; }
        if (!strcmp(a, "--epilogue")) { o->epilogue = true; continue; }
        if (!strcmp(a, "--hfuse")) { o->hfuse = true; continue; }
        if (!strcmp(a, "--no-plan")) { o->no_plan = true; continue; }
        if (!strcmp(a, "--cuda-graph")) { o->cuda_graph = true; continue; }
        bool known = !strcmp(a, "--device") || !strcmp(a, "--seed") || !strcmp(a, "--profile-out") || !strcmp(a, "--mode") ||
                     !strcmp(a, "--passes") || !strcmp(a, "--remat") || !strcmp(a, "--precision") ||
                     !strcmp(a, "--tokens");
        for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) known = known || !strcmp(a, ints[k].name);
        if (!known) { fprintf(stderr, "kiln bench: unknown option '%s'\n", a); usage(stderr); return 2; }
        if (i + 1 >= argc) { fprintf(stderr, "kiln bench: %s needs a value\n", a); usage(stderr); return 2; }
        const char *v = argv[++i];
        char *end = NULL;
        errno = 0;
        if (!strcmp(a, "--device")) {
            snprintf(o->device, sizeof o->device, "%s", v);
            continue;
        }
        if (!strcmp(a, "--passes")) {
            if (strlen(v) >= sizeof o->passes || kn_passes_check(v, NULL) != KN_OK) {
                fprintf(stderr, "kiln bench: --passes: %s\n", strlen(v) >= sizeof o->passes ? "too long" : kn_last_error());
                return 2;
            }
            snprintf(o->passes, sizeof o->passes, "%s", v);
            continue;
        }
        if (!strcmp(a, "--remat")) {
            if (strlen(v) >= sizeof o->remat || kn_remat_check_arg(v) != KN_OK) {
                fprintf(stderr, "kiln bench: --remat: %s\n", strlen(v) >= sizeof o->remat ? "too long" : kn_last_error());
                return 2;
            }
            snprintf(o->remat, sizeof o->remat, "%s", v);
            continue;
        }
        if (!strcmp(a, "--precision")) {
            if (strcmp(v, "fp32") && strcmp(v, "bf16") && strcmp(v, "fp16")) {
                fprintf(stderr, "kiln bench: --precision '%s': use fp32, bf16 or fp16 (--tf32 for TF32 matmuls)\n", v);
                return 2;
            }
            snprintf(o->precision, sizeof o->precision, "%s", v);
            continue;
        }
        if (!strcmp(a, "--tokens")) {
            if (strcmp(v, "uniform") && strcmp(v, "same") && strcmp(v, "zipf")) {
                fprintf(stderr, "kiln bench: --tokens '%s': use uniform, same or zipf\n", v);
                return 2;
            }
            snprintf(o->tokens, sizeof o->tokens, "%s", v);
            continue;
        }
        if (!strcmp(a, "--mode")) {
            if (strcmp(v, "compiled") && strcmp(v, "interp")) {
                fprintf(stderr, "kiln bench: --mode '%s': use compiled or interp\n", v);
                return 2;
            }
            snprintf(o->mode, sizeof o->mode, "%s", v);
            continue;
        }
        if (!strcmp(a, "--profile-out")) {
            if (strlen(v) >= sizeof o->profile_out) {
                fprintf(stderr, "kiln bench: --profile-out: the path is longer than %zu bytes\n", sizeof o->profile_out - 1);
                return 2;
            }
            snprintf(o->profile_out, sizeof o->profile_out, "%s", v);
            continue;
        }
        if (!strcmp(a, "--seed")) {
            o->seed = strtoull(v, &end, 10);
            if (!*v || *end || errno) { fprintf(stderr, "kiln bench: --seed '%s' is not a number\n", v); return 2; }
            continue;
        }
        for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
            if (strcmp(a, ints[k].name) != 0) continue;
            long x = strtol(v, &end, 10);
            if (!*v || *end || errno || x < ints[k].lo || x > 1000000) {
                fprintf(stderr, "kiln bench: %s '%s': expected an integer in [%d, 1000000]\n", a, v, ints[k].lo);
                return 2;
            }
            *ints[k].v = (int)x;
        }
    }
    return -1;
}

/* One token id of --tokens: uniform over the vocabulary; the same id (vocab / 2) every
 * time; or Zipf's law with exponent 1, drawn as a log-uniform rank: id k with probability
 * ~ ln((k + 2) / (k + 1)) / ln(vocab + 1), 6% of the positions on id 0 at GPT-2's vocab. */
static int32_t draw_token(kn_rng *r, const char *tokens, int vocab) {
    uint32_t u = kn_rng_u32(r);
    if (tokens[0] == 's') return vocab / 2;
    if (tokens[0] == 'u') return (int32_t)(u % (uint32_t)vocab);
    int32_t k = (int32_t)floor(pow((double)vocab + 1.0, u / 4294967296.0)) - 1;
    return k < 0 ? 0 : k >= vocab ? vocab - 1 : k;
}

static void random_batch(kn_rng *r, int32_t *x, int32_t *y, size_t n, int vocab, const char *tokens) {
    for (size_t i = 0; i < n; i++) {
        x[i] = draw_token(r, tokens, vocab);
        y[i] = draw_token(r, tokens, vocab);
    }
}

static kn_status bench(const bench_opts *o, kn_device dev, char *devname, size_t dn) {
    kn_gpt_config cfg = {.vocab = o->vocab, .context = o->context, .layers = o->layers, .width = o->width,
                         .heads = o->heads};
    KN_TRY(kn_gpt_config_check(&cfg));
    kn_gpt g = {0};
    kn_trainer tr = {0};
    size_t bt = (size_t)o->batch * (size_t)o->context;
    int32_t *x = kn_malloc(bt * sizeof *x), *y = kn_malloc(bt * sizeof *y);
    int nt = o->steps, nf = 3;
    double *ms = kn_calloc((size_t)nt, sizeof *ms), fwd[3], opt[3], loss0 = 0, loss1 = 0;
    kn_status st = x && y && ms ? KN_OK : kn_error(KN_ERR_OOM, "kiln bench: out of memory");
    double t0 = kn_time_now();
    if (st == KN_OK) st = kn_gpt_new(&g, &cfg);
    if (st == KN_OK) kn_gpt_init(&g, o->seed);
    kn_optim_config oc = kn_optim_default();
    if (st == KN_OK) st = kn_trainer_new(&tr, &g, o->batch, o->context, &oc, 1.0);
    if (st == KN_OK) st = kn_trainer_to_device(&tr, dev);
    /* the default: compiled on the CPU, node by node on a GPU (as kiln train --mode auto) */
    bool compiled = !strcmp(o->mode, "compiled") || (!o->mode[0] && dev.type == KN_DEVICE_CPU);
    char list[256] = ""; /* the passes, flash, autocast (and the weights' copies the optimizer writes), hfuse,
                          * epilogue, then remat: cse would merge its clones back */
    bool low = strcmp(o->precision, "fp32") != 0;
    const char *parts[9] = {o->passes, o->flash ? "flash" : "", low ? "autocast:" : "", low ? "lowparams:" : "",
                            low ? "lowloss" : "", low ? "lowsave" : "", o->hfuse ? "hfuse" : "",
                            o->epilogue ? "epilogue" : "", strcmp(o->remat, "none") ? "remat:" : ""};
    const char *args[9] = {"", "", low ? o->precision : "", low ? o->precision : "", "", "", "", "",
                           strcmp(o->remat, "none") ? o->remat : ""};
    for (int i = 0; i < 9; i++)
        if (parts[i][0])
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s%s", list[0] ? "," : "", parts[i], args[i]);
    tr.passes = list[0] ? list : NULL;
    tr.cuda_graph = o->cuda_graph;
    tr.no_plan = o->no_plan;
    if (st == KN_OK && o->no_plan && !compiled)
        st = kn_error(KN_ERR_ARG, "kiln bench: --no-plan turns off the compiled step's memory plan: use it with --mode compiled");
    if (st == KN_OK && o->cuda_graph && (dev.type != KN_DEVICE_CUDA || !compiled))
        st = kn_error(KN_ERR_ARG, "kiln bench: --cuda-graph replays the compiled GPU step: use it with --mode compiled on a GPU");
    if (st == KN_OK && o->cuda_graph && o->profile > 0)
        st = kn_error(KN_ERR_ARG, "kiln bench: --profile times each op, which a CUDA graph replays as one launch: use one or the other");
    if (st == KN_OK) st = kn_trainer_set_compiled(&tr, compiled);
    double live = 0, live_none = 0; /* the step graph's largest live set, with and without the passes */
    if (st == KN_OK) st = kn_passes_live_bytes_on(tr.joint, tr.passes, kn_program_target_default(), &live);
    if (st == KN_OK) st = kn_passes_live_bytes_on(tr.joint, NULL, kn_program_target_default(), &live_none);
    kn_program_stats ps = kn_program_get_stats(tr.prog);
    compiled = ps.mode == KN_PROGRAM_COMPILED;
    double setup = kn_time_now() - t0;
    kn_device_str(dev, devname, dn);
    if (st == KN_OK) {
        printf("kiln bench: GPT vocab %d, context %d, %d layers, width %d, %d heads: %lld parameters; batch %d; "
               "fp32 (TF32 %s) AdamW on %s\n", o->vocab, o->context, o->layers, o->width, o->heads, (long long)g.p.n,
               o->batch, o->tf32 ? "on" : "off", devname);
        printf("  setup (init, compile, move): %.1f s; %d warm-up + %d timed steps\n", setup, o->warmup, nt);
        printf("  mode %s, passes %s: %d steps per training step (%d generated kernels, %d distinct) for %d graph nodes; "
               "compile %.0f ms%s\n", compiled ? "compiled" : "interp", list[0] ? list : "none", ps.nsteps,
               ps.nkernels, ps.nunique, ps.nodes_computing, ps.compile_ms,
               compiled ? (ps.cached ? " (kernel cache hit)" : " (cold)") : "");
        if (compiled)
            printf("  memory plan: %.2f MB arena for %.2f MB of buffers (lower bound %.2f MB)\n", ps.mem_planned / 1e6,
                   ps.mem_sum / 1e6, ps.mem_lower / 1e6);
        printf("  remat %s: the step graph's largest live set %.2f MB in node order (%.2f MB without passes)\n",
               o->remat, live / 1e6, live_none / 1e6);
        fflush(stdout);
    }
    kn_rng r = kn_rng_new(o->seed + 1000);
    kn_stopwatch w = {NULL, NULL};
    size_t cpu_base = kn_alloc_bytes(); /* the CPU's peak: kiln's allocations during the steps */
    kn_alloc_reset_peak();
    for (int s = 0; st == KN_OK && s < o->warmup + nt; s++) {
        double l = 0, m = 0;
        random_batch(&r, x, y, bt, o->vocab, o->tokens);
        st = kn_stopwatch_start(&w, dev);
        if (st == KN_OK) st = kn_trainer_step(&tr, x, y, 1e-4, &l, NULL);
        if (st == KN_OK) st = kn_stopwatch_stop(&w, &m);
        if (st != KN_OK) break;
        if (s == 0) loss0 = l;
        loss1 = l;
        if (s >= o->warmup) ms[s - o->warmup] = m;
        printf("  step %3d  %s  %9.2f ms  loss %.4f\n", s + 1, s < o->warmup ? "warm-up" : "timed  ", m, l);
        fflush(stdout);
    }
    size_t cpu_peak = kn_alloc_peak_bytes(); /* of the training steps only */
    if (st == KN_OK) {
        int ng = kn_program_graph(tr.prog)->noutputs - 1, copied = kn_program_get_stats(tr.prog).outputs_copied;
        printf("  gradients: %d of %d written into the gradient slab by the steps that make them, %d copied there\n",
               ng - copied, ng, copied);
    }
    for (int k = 0; st == KN_OK && k < nf; k++) {
        double l;
        random_batch(&r, x, y, bt, o->vocab, o->tokens);
        st = kn_stopwatch_start(&w, dev);
        if (st == KN_OK) st = kn_trainer_eval(&tr, x, y, &l);
        if (st == KN_OK) st = kn_stopwatch_stop(&w, &fwd[k]);
    }
    for (int k = 0; st == KN_OK && k < nf; k++) {
        st = kn_stopwatch_start(&w, dev);
        if (st == KN_OK) st = kn_trainer_optimize(&tr, 1e-4, NULL);
        if (st == KN_OK) st = kn_stopwatch_stop(&w, &opt[k]);
    }
    if (st == KN_OK && o->profile > 0 && dev.type == KN_DEVICE_CPU) { /* three extra steps, every step timed */
        double copy = copy_bandwidth(), l;
        kn_program_set_profile(tr.prog, true);
        for (int k = 0; st == KN_OK && k < 3; k++) {
            random_batch(&r, x, y, bt, o->vocab, o->tokens);
            st = kn_trainer_step(&tr, x, y, 1e-4, &l, NULL);
        }
        if (st == KN_OK) {
            printf("copy bandwidth (memcpy of 64 MiB over %d threads, best of 5; read + write): %.1f GB/s\n",
                   kn_k_threads(), copy);
            kn_program_print_profile(stdout, tr.prog, o->profile, copy);
        }
        kn_program_set_profile(tr.prog, false);
    }
    if (st == KN_OK && o->profile > 0 && dev.type != KN_DEVICE_CPU) { /* one extra step, profiled */
        double l, m = 0;
        random_batch(&r, x, y, bt, o->vocab, o->tokens);
        FILE *tsv = NULL;
        st = kn_device_profile_start(dev);
        if (st == KN_OK) st = kn_stopwatch_start(&w, dev);
        if (st == KN_OK) st = kn_trainer_step(&tr, x, y, 1e-4, &l, NULL);
        if (st == KN_OK) st = kn_stopwatch_stop(&w, &m);
        if (st == KN_OK && o->profile_out[0] && !(tsv = fopen(o->profile_out, "w")))
            st = kn_error(KN_ERR_IO, "--profile-out %s: %s", o->profile_out, strerror(errno));
        if (st == KN_OK) st = kn_device_profile_report(dev, stdout, tsv, m, o->profile, NULL);
        if (tsv && fclose(tsv) != 0 && st == KN_OK)
            st = kn_error(KN_ERR_IO, "--profile-out %s: %s", o->profile_out, strerror(errno));
        if (st == KN_OK && tsv) printf("per-op profile written to %s\n", o->profile_out);
#if KN_HAVE_CUDA
        /* the compiled program: its generated kernels against the copy bandwidth of this GPU,
         * measured now (a device-to-device copy, read + write) */
        double copy = 0, f32 = 0, bf16 = 0;
        if (st == KN_OK && compiled) st = kn_cuda_ceilings(dev.index, &copy, &f32, &bf16);
        if (st == KN_OK && compiled) {
            kn_program_set_profile(tr.prog, true);
            for (int k = 0; st == KN_OK && k < 3; k++) {
                random_batch(&r, x, y, bt, o->vocab, o->tokens);
                st = kn_trainer_step(&tr, x, y, 1e-4, &l, NULL);
            }
            if (st == KN_OK) {
                printf("copy bandwidth of %s (device-to-device, read + write): %.0f GB/s; each step below is timed "
                       "between CUDA events recorded before and after it\n", devname, copy);
                kn_program_print_profile(stdout, tr.prog, o->profile, copy);
            }
            kn_program_set_profile(tr.prog, false);
        }
#endif
    }
    if (st == KN_OK) {
        double lo = ms[0], hi = ms[0];
        for (int i = 1; i < nt; i++) { lo = ms[i] < lo ? ms[i] : lo; hi = ms[i] > hi ? ms[i] : hi; }
        double med = kn_median(ms, nt), mf = kn_median(fwd, nf), mo = kn_median(opt, nf);
        double tps = (double)bt / (med / 1e3), peak = 0, peak_res = 0;
        bool gpu = dev.type != KN_DEVICE_CPU;
        if (gpu) {
            kn_device_mem_stats mi;
            st = kn_device_mem_stats_get(dev, &mi);
            peak = (double)mi.peak / 1048576.0;
            peak_res = (double)mi.peak_reserved / 1048576.0;
        } else {
            peak = peak_res = (double)cpu_peak / 1048576.0;
        }
        if (st == KN_OK) {
            printf("  step %.2f ms median (min %.2f, max %.2f) -> %.0f tokens/s\n", med, lo, hi, tps);
            printf("  forward only %.2f ms; clip + AdamW %.2f ms; so backward ~ %.2f ms\n", mf, mo,
                   med - mf - mo);
            if (gpu)
                printf("  peak GPU memory: %.0f MiB allocated, %.0f MiB reserved (caching allocator)\n", peak,
                       peak_res);
            else
                printf("  peak CPU memory of kiln's allocations during the steps: %.1f MiB (%.1f MiB above the %.1f MiB "
                       "live before them)\n", peak, peak - (double)cpu_base / 1048576.0, (double)cpu_base / 1048576.0);
            printf("{\"impl\": \"kiln\", \"device\": \"%s\", \"vocab\": %d, \"context\": %d, \"layers\": %d, "
                   "\"width\": %d, \"heads\": %d, \"batch\": %d, \"params\": %lld, \"warmup\": %d, \"steps\": %d, "
                   "\"step_ms_median\": %.3f, \"step_ms_min\": %.3f, \"step_ms_max\": %.3f, \"tokens_per_s\": %.1f, "
                   "\"fwd_ms\": %.3f, \"optim_ms\": %.3f, \"peak_mem_mib\": %.1f, \"peak_reserved_mib\": %.1f, "
                   "\"loss_first\": %.5f, \"loss_last\": %.5f, \"tf32\": %s, \"mode\": \"%s\", \"nsteps\": %d, "
                   "\"nkernels\": %d, \"nodes\": %d, \"compile_ms\": %.1f, \"compile_cached\": %s, \"passes\": \"%s\", "
                   "\"remat\": \"%s\", \"live_bytes\": %.0f, \"live_bytes_none\": %.0f, \"mem_planned\": %.0f, "
                   "\"mem_lower\": %.0f, \"no_plan\": %s, \"cuda_graph\": %s, \"flash\": %s, \"hfuse\": %s, \"precision\": \"%s\", "
                   "\"tokens\": \"%s\"}\n",
                   devname, o->vocab, o->context, o->layers, o->width, o->heads, o->batch, (long long)g.p.n,
                   o->warmup, nt, med, lo, hi, tps, mf, mo, peak, peak_res, loss0, loss1, o->tf32 ? "true" : "false",
                   compiled ? "compiled" : "interp", ps.nsteps, ps.nkernels, ps.nodes_computing, ps.compile_ms,
                   ps.cached ? "true" : "false", o->passes[0] ? o->passes : "none", o->remat, live, live_none,
                   ps.mem_planned, ps.mem_lower, o->no_plan ? "true" : "false", o->cuda_graph ? "true" : "false", o->flash ? "true" : "false",
                   o->hfuse ? "true" : "false", o->precision, o->tokens);
        }
    }
    kn_stopwatch_free(&w);
    kn_trainer_free(&tr);
    kn_gpt_free(&g);
    kn_free(x);
    kn_free(y);
    kn_free(ms);
    return st;
}

int kn_cli_bench(int argc, char **argv) {
    bench_opts o;
    int rc = parse(&o, argc, argv);
    if (rc >= 0) return rc;
    if (o.width % o.heads) {
        fprintf(stderr, "kiln bench: --width %d is not a multiple of --heads %d\n", o.width, o.heads);
        return 2;
    }
    kn_device dev;
    if (kn_device_parse(o.device, &dev) != KN_OK) {
        fprintf(stderr, "kiln bench: --device: %s\n", kn_last_error());
        return 2;
    }
    if (o.tf32 && setenv("KILN_TF32", "1", 1) != 0) { /* read by the first matmul */
        fprintf(stderr, "kiln bench: --tf32: cannot set KILN_TF32\n");
        return 1;
    }
    char name[32];
    if (bench(&o, dev, name, sizeof name) != KN_OK) {
        fprintf(stderr, "kiln bench: %s\n", kn_last_error());
        return 1;
    }
    return 0;
}
