/* generate.c — `kiln generate`: text from a trained checkpoint, streamed token by token.
 *
 * The prompt is encoded with the checkpoint's byte tokenizer, the model runs with a KV
 * cache (kiln/infer.h: a prefill of the prompt, then one decode step per token, compiled
 * programs on the CPU or a GPU), and each token is written to stdout and flushed as soon
 * as it is drawn. Timing goes to stderr (--stats), so stdout is the text alone. */
#include <string.h>

#include "cli/cli.h"
#include "cli/infer_cli.h"
#include "kiln/device.h"

typedef struct gen_opts {
    char ckpt[1024], prompt[8192], device[16], mode[16], passes[192];
    int max_new, top_k, seed;
    double temperature, top_p;
    bool stats, no_graph;
} gen_opts;

static void gen_usage(FILE *f) {
    fprintf(f, "usage: kiln generate --ckpt FILE --prompt TEXT [--max-new N] [--temperature T] [--top-k K]\n"
               "                     [--top-p P] [--seed S] [--device cpu|cuda|cuda:N|auto] [--mode nodes|compiled]\n"
               "                     [--passes LIST] [--no-cuda-graph] [--stats]\n"
               "Continues TEXT with the model of a checkpoint written by kiln train, streaming each new\n"
               "character to stdout as it is drawn. The model runs with a KV cache: one prefill of the prompt,\n"
               "then one decode step per token (compiled programs; on a GPU the decode step is one CUDA graph\n"
               "unless --no-cuda-graph). Sampling: temperature 0 is greedy (the most likely token); otherwise\n"
               "softmax(logits / T), kept to the K most likely tokens (--top-k, 0: all) and to the smallest set\n"
               "of them whose probability reaches P (--top-p, 1: all). Past the context the window slides (each\n"
               "token then re-runs the prefill). --stats prints the time to the first token and per token on\n"
               "stderr. Defaults: --max-new 200, --temperature 0.8, --top-k 0, --top-p 1, --seed 1337,\n"
               "--device cpu, --mode compiled.\n");
}

/* Each token as its byte, flushed at once: the stream. */
typedef struct gen_stream {
    const kn_tokenizer *tok;
    double t_first, t_last;
    int count;
} gen_stream;

static kn_status gen_emit(void *ctx, int i, const int32_t *tok) {
    (void)i;
    gen_stream *s = ctx;
    uint8_t c;
    KN_TRY(kn_tokenizer_decode(s->tok, tok, 1, &c));
    fputc(c, stdout);
    fflush(stdout);
    s->t_last = kn_time_now();
    if (s->count++ == 0) s->t_first = s->t_last;
    return KN_OK;
}

int kn_cli_generate(int argc, char **argv) {
    gen_opts o = {.max_new = 200, .temperature = 0.8, .top_k = 0, .top_p = 1.0, .seed = 1337};
    snprintf(o.device, sizeof o.device, "cpu");
    snprintf(o.mode, sizeof o.mode, "compiled");
    const kn_cli_opt opts[] = {
        {"--ckpt", O_STR, o.ckpt, 0, 0, sizeof o.ckpt},           {"--prompt", O_STR, o.prompt, 0, 0, sizeof o.prompt},
        {"--device", O_STR, o.device, 0, 0, sizeof o.device},     {"--mode", O_STR, o.mode, 0, 0, sizeof o.mode},
        {"--passes", O_STR, o.passes, 0, 0, sizeof o.passes},     {"--max-new", O_INT, &o.max_new, 0, 1 << 20, 0},
        {"--temperature", O_F64, &o.temperature, 0, 1e6, 0},      {"--top-k", O_INT, &o.top_k, 0, 1 << 24, 0},
        {"--top-p", O_F64, &o.top_p, 1e-9, 1, 0},                 {"--seed", O_INT, &o.seed, 0, 2147483647, 0},
        {"--stats", O_FLAG, &o.stats, 0, 0, 0},                   {"--no-cuda-graph", O_FLAG, &o.no_graph, 0, 0, 0},
    };
    int rc = kn_cli_opts_parse("generate", argc, argv, opts, (int)(sizeof opts / sizeof opts[0]), gen_usage);
    if (rc) return rc == 1 ? 0 : 2;
    if (!o.ckpt[0] || !o.prompt[0]) {
        fprintf(stderr, "kiln generate: --ckpt FILE and --prompt TEXT are required (kiln generate --help)\n");
        return 2;
    }
    kn_infer_opts io = {.passes = o.passes[0] ? o.passes : NULL};
    if (kn_device_parse(o.device, &io.device) != KN_OK || kn_cli_program_mode(o.mode, &io.mode) != KN_OK) {
        fprintf(stderr, "kiln generate: %s\n", kn_last_error());
        return 2;
    }
    io.cuda_graph = io.device.type == KN_DEVICE_CUDA && io.mode == KN_PROGRAM_COMPILED && !o.no_graph;
    kn_gpt g;
    kn_tokenizer tok;
    bool has_tok;
    if (kn_cli_load_model(o.ckpt, &g, &tok, &has_tok) != KN_OK) {
        fprintf(stderr, "kiln generate: %s\n", kn_last_error());
        return 1;
    }
    const int n0 = (int)strlen(o.prompt), n = n0 + o.max_new;
    int32_t *ids = kn_malloc((size_t)n * sizeof *ids);
    kn_infer inf;
    memset(&inf, 0, sizeof inf);
    kn_status st = ids ? KN_OK : kn_error(KN_ERR_OOM, "out of memory");
    if (st == KN_OK && !has_tok)
        st = kn_error(KN_ERR_FORMAT, "%s has no tokenizer (kiln.tokenizer) and a vocabulary of %d, not 256 bytes",
                      o.ckpt, g.cfg.vocab);
    if (st == KN_OK) st = kn_tokenizer_encode(&tok, (const uint8_t *)o.prompt, (size_t)n0, ids);
    if (st == KN_OK && n0 > g.cfg.context)
        st = kn_error(KN_ERR_ARG, "the prompt has %d tokens, longer than the model's context of %d", n0, g.cfg.context);
    if (st == KN_OK) st = kn_infer_new(&inf, &g, 1, &io);
    gen_stream s = {.tok = &tok};
    kn_sampling samp = {o.temperature, o.top_k, o.top_p};
    kn_rng rng = kn_rng_new((uint64_t)o.seed);
    double t0 = kn_time_now();
    if (st == KN_OK) {
        fputs(o.prompt, stdout);
        fflush(stdout);
        st = kn_infer_generate(&inf, ids, n0, n, &samp, &rng, gen_emit, &s);
        fputc('\n', stdout);
    }
    char devs[32];
    kn_device_str(io.device, devs, sizeof devs);
    if (st == KN_OK && o.stats && s.count > 0)
        fprintf(stderr, "generate: %d tokens; time to first token %.2f ms, then %.3f ms per token (%.0f tokens/s), "
                "%s %s\n", s.count, 1e3 * (s.t_first - t0),
                s.count > 1 ? 1e3 * (s.t_last - s.t_first) / (s.count - 1) : 0.0,
                s.count > 1 ? (s.count - 1) / (s.t_last - s.t_first) : 0.0, devs, o.mode);
    if (st != KN_OK) fprintf(stderr, "kiln generate: %s\n", kn_last_error());
    kn_infer_free(&inf);
    kn_free(ids);
    kn_gpt_free(&g);
    return st == KN_OK ? 0 : 1;
}
