/* bench_infer.c — `kiln bench-infer`: the latency and throughput of generation with a KV
 * cache (kiln/infer.h), over four workloads, at batch 1 and batched.
 *
 * The workloads (the capstone's inference benchmark): chat (a short prompt, 64 new tokens),
 * long (a long generation of 512), mid (a 256-token generation) and summarize (a ~500-token
 * prompt answered in 128); and, when asked for, prefill (a prompt of the whole context, one
 * new token: the TTFT of a full-context prompt, the capstone's 1,024-token row). Each runs `--requests` times per batch size after `--warmup`
 * untimed requests (which compile the prefill program and capture the decode step's CUDA
 * graph). A request is B prompts generated together, greedily; each of its B rows counts as
 * a request of its own in the statistics (they share their times). The metrics are vLLM's
 * (benchmarks/benchmark_serving.py):
 *   TTFT  time to first token: from the request's start to its first new token;
 *   TPOT  time per output token: (end to end - TTFT) / (new tokens - 1), per request;
 *   ITL   inter-token latency: every gap between two consecutive tokens, pooled;
 *   E2E   end-to-end latency: from the start to the last token;
 * each as mean, p50, p95 and p99 (numpy's linear interpolation), plus output tokens/s (all
 * the new tokens over the summed end-to-end time) and the peak memory of a request
 * (kiln's allocations on the device; on the CPU its heap blocks). Decoding is greedy, so
 * each token is its row's argmax taken on the device (kn_device_argmax_rows) and only the
 * B token ids come back to the host, as in `kiln generate` at temperature 0: part of the cost.
 * The header says which kernel runs the products of at most 8 rows on a GPU (cuBLAS, or
 * the GEMV of core/runtime/cuda_gemv.cu with KILN_GEMV=1), and the line after the table how
 * many products went each way (also in the JSON: "small_products", "gemv", "cublas").
 * Output: a table on stdout and, with --json FILE, the same numbers as JSON, the format
 * plots/bench_infer_torch.py writes for PyTorch (plots/bench_infer_compare.py divides).
 * Before the table, per batch size, the decode program's step count (kn_program_stats:
 * steps, of them generated kernels), also in the JSON (decode_steps, decode_kernels): on a
 * small model each step is a launch whose latency, not its work, sets the TPOT, so the
 * count is the number to hold down (tests/core/test_cli_infer.sh). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/infer_cli.h"
#include "kiln/device.h"
#include "runtime/cuda_gemv.h"

typedef struct bi_workload {
    const char *name;
    int prompt, new_tokens;
} bi_workload;

/* prompt 0: the model's whole context (prefill: TTFT alone, so not in the default list) */
static const bi_workload k_workloads[] = {{"chat", 32, 64},       {"long", 16, 512},     {"mid", 64, 256},
                                          {"summarize", 500, 128}, {"prefill", 0, 1}};
enum { NWORK = sizeof k_workloads / sizeof k_workloads[0], MAXB = 8 };

typedef struct bi_model {
    const char *name;
    kn_gpt_config cfg;
} bi_model;

static const bi_model k_models[] = {
    {"tiny", {.vocab = 64, .context = 128, .layers = 2, .width = 32, .heads = 2}},
    {"small", {.vocab = 256, .context = 1024, .layers = 4, .width = 256, .heads = 4}},
    {"124M", {.vocab = 50257, .context = 1024, .layers = 12, .width = 768, .heads = 12}},
};

typedef struct bi_opts {
    char ckpt[1024], model[16], device[16], mode[16], passes[192], batch[64], workloads[128], json[1024];
    int requests, warmup, seed;
    double scale;
    bool no_graph;
} bi_opts;

static void bi_usage(FILE *f) {
    fprintf(f, "usage: kiln bench-infer [--ckpt FILE | --model tiny|small|124M] [--device cpu|cuda|cuda:N|auto]\n"
               "                        [--mode nodes|compiled] [--passes LIST] [--batch 1,8] [--requests N]\n"
               "                        [--warmup N] [--workloads chat,long,mid,summarize,prefill] [--scale F]\n"
               "                        [--seed S] [--no-cuda-graph] [--json FILE]\n"
               "Times generation with a KV cache over four workloads (prompt -> new tokens): chat 32 -> 64,\n"
               "long 16 -> 512, mid 64 -> 256, summarize 500 -> 128; --scale F (0 < F <= 1) shrinks every count\n"
               "(a quick run). --workloads prefill adds a prompt of the whole context -> 1 (its TTFT; no TPOT).\n"
               "Prints TTFT, TPOT, inter-token and end-to-end latency (mean, p50, p95, p99 in ms;\n"
               "vLLM's definitions), output tokens/s and peak memory per workload and batch size, greedy\n"
               "decoding of random prompts. The model: a checkpoint, or a random GPT-2 init of a named size\n"
               "(tiny; small: 4 layers, width 256, context 1024, 256 tokens; 124M: GPT-2's). Defaults: small on\n"
               "the CPU and 124M on a GPU, --batch 1,8, 3 requests after 1 warm-up, --mode compiled (on a GPU\n"
               "the decode step replayed as one CUDA graph unless --no-cuda-graph), --device cpu.\n");
}

/* ---------------------------------------------------------------- statistics */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* numpy's default percentile (linear interpolation between the closest ranks) of sorted v. */
static double percentile(const double *v, int n, double q) {
    if (n <= 0) return NAN;
    double r = q / 100.0 * (n - 1);
    int lo = (int)floor(r), hi = lo + 1 < n ? lo + 1 : lo;
    return v[lo] + (r - lo) * (v[hi] - v[lo]);
}

typedef struct bi_stat { double mean, p50, p95, p99; } bi_stat;

static bi_stat summarize(double *v, int n) {
    bi_stat s = {NAN, NAN, NAN, NAN};
    if (n <= 0) return s;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += v[i];
    s.mean = sum / n;
    s.p50 = percentile(v, n, 50);
    s.p95 = percentile(v, n, 95);
    s.p99 = percentile(v, n, 99);
    return s;
}

typedef struct bi_result {
    const char *workload;
    int batch, prompt, new_tokens, requests;
    bi_stat ttft, tpot, itl, e2e;
    double tokens_per_s, peak_bytes;
    int decode_steps, decode_kernels; /* the compiled decode step's steps, of them generated kernels */
} bi_result;

/* ---------------------------------------------------------------- one workload */

typedef struct bi_clock {
    double *t;    /* the time each new position was done */
    int count;
} bi_clock;

static kn_status bi_tick(void *ctx, int i, const int32_t *tok) {
    (void)i; (void)tok;
    bi_clock *c = ctx;
    c->t[c->count++] = kn_time_now();
    return KN_OK;
}

static size_t peak_now(kn_device dev) {
    if (dev.type == KN_DEVICE_CPU) return kn_alloc_peak_bytes();
    kn_device_mem_stats m = {0};
    return kn_device_mem_stats_get(dev, &m) == KN_OK ? m.peak : 0;
}

static void reset_peak(kn_device dev) {
    if (dev.type == KN_DEVICE_CPU) kn_alloc_reset_peak();
    else kn_device_mem_reset_peak(dev);
}

static kn_status run_workload(kn_infer *inf, const bi_workload *w, const bi_opts *o, kn_progress *bar, int64_t *done,
                              bi_result *r) {
    const int B = inf->B, n0 = w->prompt, n = n0 + w->new_tokens, nr = o->requests;
    int32_t *ids = kn_malloc((size_t)B * (size_t)n * sizeof *ids);
    double *t = kn_malloc((size_t)n * sizeof *t);
    double *ttft = kn_malloc((size_t)nr * B * sizeof(double)), *tpot = kn_malloc((size_t)nr * B * sizeof(double));
    double *e2e = kn_malloc((size_t)nr * B * sizeof(double));
    double *itl = kn_malloc((size_t)nr * B * (size_t)(w->new_tokens > 1 ? w->new_tokens - 1 : 1) * sizeof(double));
    kn_status st = ids && t && ttft && tpot && e2e && itl ? KN_OK : kn_error(KN_ERR_OOM, "bench-infer: out of memory");
    kn_rng data = kn_rng_new((uint64_t)o->seed);
    kn_sampling greedy = {0, 0, 1};
    int nitl = 0, nreq = 0;
    double sum_e2e = 0, peak = 0;
    for (int q = -o->warmup; st == KN_OK && q < nr; q++) {
        for (int64_t i = 0; i < (int64_t)B * n; i++) ids[i] = (int32_t)(kn_rng_u32(&data) % (uint32_t)inf->V);
        bi_clock c = {t, 0};
        kn_rng rng = kn_rng_new(1);
        reset_peak(inf->o.device);
        double t0 = kn_time_now();
        st = kn_infer_generate(inf, ids, n0, n, &greedy, &rng, bi_tick, &c);
        if (st != KN_OK) break;
        double first = c.t[0] - t0, all = c.t[c.count - 1] - t0;
        char extra[96];
        snprintf(extra, sizeof extra, "%s B=%d  %.0f tok/s%s", w->name, B, B * w->new_tokens / all, q < 0 ? " (warm-up)" : "");
        *done += w->new_tokens;
        kn_progress_update(bar, *done, extra);
        if (q < 0) continue;
        peak = fmax(peak, (double)peak_now(inf->o.device));
        for (int b = 0; b < B; b++) { /* each row is a request finished at the same times */
            ttft[nreq] = 1e3 * first;
            e2e[nreq] = 1e3 * all;
            tpot[nreq] = c.count > 1 ? 1e3 * (all - first) / (c.count - 1) : NAN;
            nreq++;
            for (int i = 1; i < c.count; i++) itl[nitl++] = 1e3 * (c.t[i] - c.t[i - 1]);
        }
        sum_e2e += all;
    }
    if (st == KN_OK) {
        *r = (bi_result){.workload = w->name, .batch = B, .prompt = n0, .new_tokens = w->new_tokens, .requests = nreq};
        r->ttft = summarize(ttft, nreq);
        r->tpot = summarize(tpot, nreq);
        r->e2e = summarize(e2e, nreq);
        r->itl = summarize(itl, nitl);
        r->tokens_per_s = sum_e2e > 0 ? (double)nr * B * w->new_tokens / sum_e2e : NAN;
        r->peak_bytes = peak;
        kn_program_stats ps = kn_program_get_stats(inf->decode);
        r->decode_steps = ps.nsteps;
        r->decode_kernels = ps.nkernels;
    }
    kn_free(ids); kn_free(t); kn_free(ttft); kn_free(tpot); kn_free(e2e); kn_free(itl);
    return st;
}

/* ---------------------------------------------------------------- output */

static void json_stat(kn_json *j, const char *key, bi_stat s) {
    kn_json_key(j, key);
    kn_json_begin_object(j);
    kn_json_key(j, "mean"); kn_json_number(j, s.mean);
    kn_json_key(j, "p50"); kn_json_number(j, s.p50);
    kn_json_key(j, "p95"); kn_json_number(j, s.p95);
    kn_json_key(j, "p99"); kn_json_number(j, s.p99);
    kn_json_end_object(j);
}

static kn_status write_json(const char *path, const char *dev, const char *mode, const char *model,
                            const kn_gpt_config *c, const bi_result *r, int nr, const char *small, long long ngemv,
                            long long ncublas) {
    FILE *f = fopen(path, "w");
    if (!f) return kn_error(KN_ERR_IO, "bench-infer: cannot write %s", path);
    kn_json j;
    kn_json_init_file(&j, f, true);
    kn_json_begin_object(&j);
    kn_json_key(&j, "framework"); kn_json_string(&j, "kiln");
    kn_json_key(&j, "variant"); kn_json_string(&j, mode);
    kn_json_key(&j, "device"); kn_json_string(&j, dev);
    kn_json_key(&j, "model"); kn_json_string(&j, model);
    kn_json_key(&j, "small_products"); kn_json_string(&j, small);
    kn_json_key(&j, "gemv"); kn_json_int(&j, ngemv);
    kn_json_key(&j, "cublas"); kn_json_int(&j, ncublas);
    kn_json_key(&j, "config");
    kn_json_begin_object(&j);
    kn_json_key(&j, "vocab"); kn_json_int(&j, c->vocab);
    kn_json_key(&j, "context"); kn_json_int(&j, c->context);
    kn_json_key(&j, "layers"); kn_json_int(&j, c->layers);
    kn_json_key(&j, "width"); kn_json_int(&j, c->width);
    kn_json_key(&j, "heads"); kn_json_int(&j, c->heads);
    kn_json_end_object(&j);
    kn_json_key(&j, "results");
    kn_json_begin_array(&j);
    for (int i = 0; i < nr; i++) {
        kn_json_begin_object(&j);
        kn_json_key(&j, "workload"); kn_json_string(&j, r[i].workload);
        kn_json_key(&j, "batch"); kn_json_int(&j, r[i].batch);
        kn_json_key(&j, "prompt_tokens"); kn_json_int(&j, r[i].prompt);
        kn_json_key(&j, "new_tokens"); kn_json_int(&j, r[i].new_tokens);
        kn_json_key(&j, "requests"); kn_json_int(&j, r[i].requests);
        json_stat(&j, "ttft_ms", r[i].ttft);
        json_stat(&j, "tpot_ms", r[i].tpot);
        json_stat(&j, "itl_ms", r[i].itl);
        json_stat(&j, "e2e_ms", r[i].e2e);
        kn_json_key(&j, "tokens_per_s"); kn_json_number(&j, r[i].tokens_per_s);
        kn_json_key(&j, "peak_bytes"); kn_json_number(&j, r[i].peak_bytes);
        kn_json_key(&j, "decode_steps"); kn_json_int(&j, r[i].decode_steps);
        kn_json_key(&j, "decode_kernels"); kn_json_int(&j, r[i].decode_kernels);
        kn_json_end_object(&j);
    }
    kn_json_end_array(&j);
    kn_json_end_object(&j);
    kn_status st = kn_json_finish(&j, NULL);
    fputc('\n', f);
    if (fclose(f) != 0 && st == KN_OK) st = kn_error(KN_ERR_IO, "bench-infer: writing %s failed", path);
    return st;
}

static void print_table(const bi_result *r, int nr) {
    printf("\n%-10s %3s %6s %5s | %-23s | %-23s | %-23s | %-23s | %9s %9s\n", "workload", "B", "prompt", "new",
           "TTFT ms p50/p95/p99", "TPOT ms p50/p95/p99", "ITL ms p50/p95/p99", "E2E ms p50/p95/p99", "tok/s",
           "peak MiB");
    for (int i = 0; i < nr; i++) {
        const bi_result *x = &r[i];
        char c[4][32];
        const bi_stat *s[4] = {&x->ttft, &x->tpot, &x->itl, &x->e2e};
        for (int k = 0; k < 4; k++) /* one new token has no TPOT and no gap between tokens: "-" (null in JSON) */
            if (isnan(s[k]->p50)) snprintf(c[k], sizeof c[k], "-");
            else snprintf(c[k], sizeof c[k], "%.3g/%.3g/%.3g", s[k]->p50, s[k]->p95, s[k]->p99);
        printf("%-10s %3d %6d %5d | %-23s | %-23s | %-23s | %-23s | %9.1f %9.2f\n", x->workload, x->batch, x->prompt,
               x->new_tokens, c[0], c[1], c[2], c[3], x->tokens_per_s, x->peak_bytes / 1048576.0);
    }
}

/* ---------------------------------------------------------------- the command */

static int parse_list(const char *s, int *out, int max) {
    int n = 0;
    for (const char *p = s; *p && n < max;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 4096) return -1;
        out[n++] = (int)v;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

int kn_cli_bench_infer(int argc, char **argv) {
    bi_opts o = {.requests = 3, .warmup = 1, .seed = 1, .scale = 1.0};
    snprintf(o.device, sizeof o.device, "cpu");
    snprintf(o.mode, sizeof o.mode, "compiled");
    snprintf(o.batch, sizeof o.batch, "1,8");
    snprintf(o.workloads, sizeof o.workloads, "chat,long,mid,summarize");
    const kn_cli_opt opts[] = {
        {"--ckpt", O_STR, o.ckpt, 0, 0, sizeof o.ckpt},             {"--model", O_STR, o.model, 0, 0, sizeof o.model},
        {"--device", O_STR, o.device, 0, 0, sizeof o.device},       {"--mode", O_STR, o.mode, 0, 0, sizeof o.mode},
        {"--passes", O_STR, o.passes, 0, 0, sizeof o.passes},       {"--batch", O_STR, o.batch, 0, 0, sizeof o.batch},
        {"--workloads", O_STR, o.workloads, 0, 0, sizeof o.workloads}, {"--json", O_STR, o.json, 0, 0, sizeof o.json},
        {"--requests", O_INT, &o.requests, 1, 100000, 0},           {"--warmup", O_INT, &o.warmup, 0, 1000, 0},
        {"--seed", O_INT, &o.seed, 0, 2147483647, 0},               {"--scale", O_F64, &o.scale, 1e-6, 1, 0},
        {"--no-cuda-graph", O_FLAG, &o.no_graph, 0, 0, 0},
    };
    int rc = kn_cli_opts_parse("bench-infer", argc, argv, opts, (int)(sizeof opts / sizeof opts[0]), bi_usage);
    if (rc) return rc == 1 ? 0 : 2;
    kn_infer_opts io = {.passes = o.passes[0] ? o.passes : NULL};
    if (kn_device_parse(o.device, &io.device) != KN_OK || kn_cli_program_mode(o.mode, &io.mode) != KN_OK) {
        fprintf(stderr, "kiln bench-infer: %s\n", kn_last_error());
        return 2;
    }
    io.cuda_graph = io.device.type == KN_DEVICE_CUDA && io.mode == KN_PROGRAM_COMPILED && !o.no_graph;
    if (kn_device_check("kiln bench-infer", io.device) != KN_OK) {
        fprintf(stderr, "%s\n", kn_last_error());
        return 1;
    }
    int batches[MAXB];
    int nb = parse_list(o.batch, batches, MAXB);
    if (nb <= 0) {
        fprintf(stderr, "kiln bench-infer: --batch '%s': expected a list of sizes in [1, 4096] like 1,8\n", o.batch);
        return 2;
    }
    bi_workload work[NWORK];
    int nw = 0;
    char list[sizeof o.workloads];
    snprintf(list, sizeof list, "%s", o.workloads);
    for (char *save = NULL, *tokn = strtok_r(list, ",", &save); tokn; tokn = strtok_r(NULL, ",", &save)) {
        int k = 0;
        while (k < NWORK && strcmp(k_workloads[k].name, tokn)) k++;
        if (k == NWORK || nw == NWORK) {
            fprintf(stderr, "kiln bench-infer: --workloads: unknown or repeated '%s' (chat, long, mid, summarize, prefill)\n", tokn);
            return 2;
        }
        work[nw] = k_workloads[k];
        if (work[nw].prompt) work[nw].prompt = (int)fmax(1, round(work[nw].prompt * o.scale));
        work[nw].new_tokens = (int)fmax(1, round(work[nw].new_tokens * o.scale));
        nw++;
    }
    if (nw == 0) { fprintf(stderr, "kiln bench-infer: --workloads is empty\n"); return 2; }
    if (o.ckpt[0] && o.model[0]) { fprintf(stderr, "kiln bench-infer: --ckpt and --model exclude each other\n"); return 2; }
    kn_gpt g;
    const char *mname = o.ckpt[0] ? o.ckpt : o.model[0] ? o.model : io.device.type == KN_DEVICE_CUDA ? "124M" : "small";
    if (o.ckpt[0]) {
        kn_tokenizer tok;
        bool has_tok;
        if (kn_cli_load_model(o.ckpt, &g, &tok, &has_tok) != KN_OK) {
            fprintf(stderr, "kiln bench-infer: %s\n", kn_last_error());
            return 1;
        }
    } else {
        int k = 0;
        while (k < (int)(sizeof k_models / sizeof k_models[0]) && strcmp(k_models[k].name, mname)) k++;
        if (k == (int)(sizeof k_models / sizeof k_models[0])) {
            fprintf(stderr, "kiln bench-infer: --model '%s': use tiny, small or 124M\n", mname);
            return 2;
        }
        if (kn_gpt_new(&g, &k_models[k].cfg) != KN_OK) { fprintf(stderr, "kiln bench-infer: %s\n", kn_last_error()); return 1; }
        kn_gpt_init(&g, 1337);
    }
    kn_status st = KN_OK;
    for (int i = 0; i < nw; i++)
        if (work[i].prompt == 0) work[i].prompt = g.cfg.context; /* prefill: the whole context, not scaled */
    for (int i = 0; i < nw && st == KN_OK; i++)
        if (work[i].prompt > g.cfg.context)
            st = kn_error(KN_ERR_ARG, "workload %s: a prompt of %d tokens is longer than the context of %d (--scale)",
                          work[i].name, work[i].prompt, g.cfg.context);
    char devs[32];
    kn_device_str(io.device, devs, sizeof devs);
    printf("bench-infer: %s on %s, %s programs%s; %d layers, width %d, %d heads, context %d, vocab %d\n", mname, devs,
           o.mode, io.cuda_graph ? " (decode as a CUDA graph)" : "", g.cfg.layers, g.cfg.width, g.cfg.heads,
           g.cfg.context, g.cfg.vocab);
    const char *small = io.device.type != KN_DEVICE_CUDA ? "cpu" : kn_gemv_cuda_enabled() ? "gemv" : "cublas";
    if (io.device.type == KN_DEVICE_CUDA)
        printf("products of <= %d rows (bf16): %s%s\n", KN_GEMV_MAX_M, small,
               strcmp(small, "gemv") ? " (KILN_GEMV=1: kiln's GEMV)" : " (core/runtime/cuda_gemv.cu, KILN_GEMV=1)");
    bi_result res[NWORK * MAXB];
    int nres = 0;
    int64_t total = 0, done = 0;
    for (int b = 0; b < nb; b++)
        for (int i = 0; i < nw; i++) total += (int64_t)(o.requests + o.warmup) * work[i].new_tokens;
    kn_progress bar;
    kn_progress_begin(&bar, "bench-infer", total);
    for (int b = 0; st == KN_OK && b < nb; b++) {
        kn_infer inf;
        st = kn_infer_new(&inf, &g, batches[b], &io);
        if (st == KN_OK) { /* what one decode token launches: the count a test holds down */
            kn_program_stats ps = kn_program_get_stats(inf.decode);
            printf("decode step, B=%d: %d steps a token (%d generated kernels, %d library steps)\n", batches[b],
                   ps.nsteps, ps.nkernels, ps.nsteps - ps.nkernels);
        }
        for (int i = 0; st == KN_OK && i < nw; i++) {
            st = run_workload(&inf, &work[i], &o, &bar, &done, &res[nres]);
            if (st == KN_OK) nres++;
        }
        kn_infer_free(&inf);
    }
    kn_progress_end(&bar, NULL);
    if (st == KN_OK) print_table(res, nres);
    long long ngemv = 0, ncublas = 0;
    kn_gemv_cuda_counts(&ngemv, &ncublas);
    if (st == KN_OK && io.device.type == KN_DEVICE_CUDA)
        printf("products of <= %d rows queued: %lld by the GEMV, %lld by cuBLAS (a CUDA graph's replays not counted)\n",
               KN_GEMV_MAX_M, ngemv, ncublas);
    if (st == KN_OK && o.json[0]) st = write_json(o.json, devs, o.mode, mname, &g.cfg, res, nres, small, ngemv, ncublas);
    if (st != KN_OK) fprintf(stderr, "kiln bench-infer: %s\n", kn_last_error());
    kn_gpt_free(&g);
    return st == KN_OK ? 0 : 1;
}
