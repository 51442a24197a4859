/* eval.c — `kiln eval`: the held-out loss and perplexity of a checkpoint, under pass lists.
 *
 * The checkpoint of `kiln train` carries its run's settings (data, context, batch, seed):
 * they are read back as --resume reads them, the same data is loaded and split (the last
 * 10% held out), and the loss is averaged over the same evaluation batches `kiln train`
 * used, so the fp32 line repeats the held-out loss the training run printed. --passes
 * evaluates one program (e.g. quantize:w8); --compare puts fp32, bf16 (autocast:bf16), w8
 * and w8a8 (quantize:w8, quantize:w8a8; kiln/quant.h) side by side, each with its change
 * against fp32. CPU, node by node (core/nn/quant_eval.c). */
#include <math.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/infer_cli.h"
#include "cli/train_impl.h"
#include "kiln/nn.h"
#include "kiln/passes.h"
#include "kiln/quant.h"

typedef struct eval_opts {
    char ckpt[1024], passes[192];
    int batches;
    bool compare;
} eval_opts;

static void eval_usage(FILE *f) {
    fprintf(f, "usage: kiln eval --ckpt FILE [--passes LIST | --compare] [--batches N]\n"
               "The held-out loss (nats/token) and perplexity of a checkpoint written by kiln train, on the\n"
               "held-out 10%% of the data it was trained on, over the evaluation batches kiln train used (the\n"
               "run's --eval-batches, or N). --passes LIST compiles the forward graph with those passes first\n"
               "(e.g. quantize:w8, quantize:w8a8, autocast:bf16); --compare prints fp32, bf16, w8, w8a8 (activations\n"
               "per token) and w8a8-tensor (one activation scale per tensor, the naive baseline) side by side\n"
               "with the change of each against fp32. CPU only.\n");
}

int kn_cli_eval(int argc, char **argv) {
    eval_opts o = {.batches = 0};
    const kn_cli_opt opts[] = {
        {"--ckpt", O_STR, o.ckpt, 0, 0, sizeof o.ckpt},
        {"--passes", O_STR, o.passes, 0, 0, sizeof o.passes},
        {"--batches", O_INT, &o.batches, 1, 100000, 0},
        {"--compare", O_FLAG, &o.compare, 0, 0, 0},
    };
    int rc = kn_cli_opts_parse("eval", argc, argv, opts, (int)(sizeof opts / sizeof opts[0]), eval_usage);
    if (rc) return rc == 1 ? 0 : 2;
    if (!o.ckpt[0]) {
        fprintf(stderr, "kiln eval: --ckpt FILE is required (kiln eval --help)\n");
        return 2;
    }
    if (o.compare && o.passes[0]) {
        fprintf(stderr, "kiln eval: --passes and --compare exclude each other (--compare runs its own four lists)\n");
        return 2;
    }
    if (o.passes[0] && kn_passes_check(o.passes, NULL) != KN_OK) {
        fprintf(stderr, "kiln eval: --passes: %s\n", kn_last_error());
        return 2;
    }
    kn_gpt g;
    kn_tokenizer tok;
    bool has_tok;
    if (kn_cli_load_model(o.ckpt, &g, &tok, &has_tok) != KN_OK) {
        fprintf(stderr, "kiln eval: %s\n", kn_last_error());
        return 1;
    }
    /* the run's settings (data, context, batch, seed), read as `kiln train --resume` reads them */
    kn_train_opts to;
    char *targv[] = {"train", "--resume", o.ckpt};
    if (kn_train_opts_parse(&to, 3, targv) != -1) {
        fprintf(stderr, "kiln eval: %s: not a checkpoint of kiln train with its run's settings\n", o.ckpt);
        kn_gpt_free(&g);
        return 1;
    }
    kn_train_data d;
    if (kn_train_data_load(&to, &d) != KN_OK) {
        fprintf(stderr, "kiln eval: the checkpoint's data: %s\n", kn_last_error());
        kn_gpt_free(&g);
        return 1;
    }
    int nb = o.batches ? o.batches : to.eval_batches > 0 ? to.eval_batches : 1;
    kn_status st = d.vocab == g.cfg.vocab ? KN_OK
                                          : kn_error(KN_ERR_FORMAT, "the data has a vocabulary of %d, the model %d",
                                                     d.vocab, g.cfg.vocab);
    static const char *const names[] = {"fp32", "bf16", "w8", "w8a8", "w8a8-tensor"};
    static const char *const lists[] = {"", "autocast:bf16", "quantize:w8", "quantize:w8a8", "quantize:w8a8-tensor"};
    int nv = o.compare ? 5 : 1;
    double loss[5] = {0};
    printf("eval: %s: %d layers, width %d, context %d; %d held-out batches of %d x %d tokens (data %s)\n", o.ckpt,
           g.cfg.layers, g.cfg.width, g.cfg.context, nb, to.batch, to.context, to.data);
    printf("  %-36s %10s %12s %10s\n", "program", "loss", "perplexity", "vs fp32");
    for (int v = 0; st == KN_OK && v < nv; v++) {
        const char *list = o.compare ? lists[v] : o.passes;
        st = kn_gpt_heldout_loss(&g, list, d.tokens + d.n_train, d.n - d.n_train, to.batch, to.context, to.seed, nb,
                                 &loss[v]);
        if (st != KN_OK) break;
        char label[512];
        snprintf(label, sizeof label, "%s%s%s%s", o.compare ? names[v] : list[0] ? list : "fp32",
                 o.compare && list[0] ? " (" : "", o.compare ? list : "", o.compare && list[0] ? ")" : "");
        if (o.compare && v > 0)
            printf("  %-36s %10.4f %12.3f %+9.3f%%\n", label, loss[v], exp(loss[v]), 100.0 * (loss[v] - loss[0]) / loss[0]);
        else
            printf("  %-36s %10.4f %12.3f %10s\n", label, loss[v], exp(loss[v]), "");
    }
    if (st != KN_OK) fprintf(stderr, "kiln eval: %s\n", kn_last_error());
    kn_free(d.tokens);
    kn_gpt_free(&g);
    return st == KN_OK ? 0 : 1;
}
