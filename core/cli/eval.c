/* eval.c — `kiln eval`: the held-out loss and perplexity of a checkpoint, under pass lists.
 *
 * The checkpoint of `kiln train` carries its run's settings (data, context, batch, seed):
 * they are read back as --resume reads them, the same data is loaded and split (the last
 * 10% held out), and the loss is averaged over the same evaluation batches `kiln train`
 * used, so the fp32 line repeats the held-out loss the training run printed. --passes
 * evaluates one program (e.g. quantize:w8); --compare puts fp32, bf16 (autocast:bf16), w8,
 * w8a8 (per token), w8a8-tensor (naive per tensor), static w8a8 from calibration with each
 * observer (minmax, percentile, mse) and SmoothQuant's w8a8 side by side, each with its
 * change against fp32 (kiln/quant.h). The calibrated programs calibrate on --calib-batches
 * batches of the training split, never the held-out one. --outliers F first gives the model
 * outlier channels without changing its function (kn_quant_eval_opts): the demonstration of
 * what per-tensor scales lose. CPU, node by node (core/nn/quant_eval.c). */
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
    int batches, calib_batches;
    double outliers;
    bool compare;
} eval_opts;

static void eval_usage(FILE *f) {
    fprintf(f, "usage: kiln eval --ckpt FILE [--passes LIST | --compare] [--batches N] [--calib-batches N]\n"
               "                 [--outliers F]\n"
               "The held-out loss (nats/token) and perplexity of a checkpoint written by kiln train, on the\n"
               "held-out 10%% of the data it was trained on, over the evaluation batches kiln train used (the\n"
               "run's --eval-batches, or N). --passes LIST compiles the forward graph with those passes first\n"
               "(e.g. quantize:w8, quantize:w8a8, autocast:bf16, or, calibrated, quantize:w8a8-static[:minmax|\n"
               "percentile[:P]|mse] and quantize:w8a8-smooth[:ALPHA]); --compare prints fp32, bf16, w8, w8a8\n"
               "(activations per token), w8a8-tensor (one activation scale per tensor, the naive baseline),\n"
               "static w8a8 with each calibration observer and SmoothQuant's (alpha 0.5) side by side with the\n"
               "change of each against fp32. Calibration reads --calib-batches batches (default 8) of the\n"
               "training split. --outliers F (> 1) multiplies 3 channels of each layernorm that feeds only\n"
               "quantized products by F and divides the matching weight rows by F: the same fp32 function, with\n"
               "outlier channels in the products' input. CPU only.\n");
}

int kn_cli_eval(int argc, char **argv) {
    eval_opts o = {.batches = 0, .calib_batches = 8};
    const kn_cli_opt opts[] = {
        {"--ckpt", O_STR, o.ckpt, 0, 0, sizeof o.ckpt},
        {"--passes", O_STR, o.passes, 0, 0, sizeof o.passes},
        {"--batches", O_INT, &o.batches, 1, 100000, 0},
        {"--compare", O_FLAG, &o.compare, 0, 0, 0},
        {"--calib-batches", O_INT, &o.calib_batches, 1, 100000, 0},
        {"--outliers", O_F64, &o.outliers, 1, 1e6, 0},
    };
    int rc = kn_cli_opts_parse("eval", argc, argv, opts, (int)(sizeof opts / sizeof opts[0]), eval_usage);
    if (rc) return rc == 1 ? 0 : 2;
    if (!o.ckpt[0]) {
        fprintf(stderr, "kiln eval: --ckpt FILE is required (kiln eval --help)\n");
        return 2;
    }
    if (o.compare && o.passes[0]) {
        fprintf(stderr, "kiln eval: --passes and --compare exclude each other (--compare runs its own lists)\n");
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
    enum { NV = 9 };
    static const char *const names[NV] = {"fp32", "bf16", "w8", "w8a8", "w8a8-tensor", "w8a8-minmax", "w8a8-pct",
                                          "w8a8-mse", "w8a8-smooth"};
    static const char *const lists[NV] = {"", "autocast:bf16", "quantize:w8", "quantize:w8a8", "quantize:w8a8-tensor",
                                          "quantize:w8a8-static:minmax", "quantize:w8a8-static:percentile",
                                          "quantize:w8a8-static:mse", "quantize:w8a8-smooth"};
    int nv = o.compare ? NV : 1;
    double loss[NV] = {0};
    kn_quant_eval_opts q = {.calib = d.tokens, .ncalib = d.n_train, .calib_batches = o.calib_batches,
                            .outliers = o.outliers};
    char notes[2][sizeof q.smooth_note] = {"", ""};
    printf("eval: %s: %d layers, width %d, context %d; %d held-out batches of %d x %d tokens (data %s)%s\n", o.ckpt,
           g.cfg.layers, g.cfg.width, g.cfg.context, nb, to.batch, to.context, to.data,
           o.outliers > 1 ? "; with outlier channels" : "");
    printf("  %-48s %10s %12s %10s\n", "program", "loss", "perplexity", "vs fp32");
    for (int v = 0; st == KN_OK && v < nv; v++) {
        const char *list = o.compare ? lists[v] : o.passes;
        st = kn_gpt_heldout_loss_q(&g, list, &q, d.tokens + d.n_train, d.n - d.n_train, to.batch, to.context, to.seed,
                                   nb, &loss[v]);
        if (st != KN_OK) break;
        if (q.outlier_note[0]) snprintf(notes[0], sizeof notes[0], "%s", q.outlier_note);
        if (q.smooth_note[0]) snprintf(notes[1], sizeof notes[1], "%s", q.smooth_note);
        char label[512];
        snprintf(label, sizeof label, "%s%s%s%s", o.compare ? names[v] : list[0] ? list : "fp32",
                 o.compare && list[0] ? " (" : "", o.compare ? list : "", o.compare && list[0] ? ")" : "");
        if (o.compare && v > 0)
            printf("  %-48s %10.4f %12.3f %+9.3f%%\n", label, loss[v], exp(loss[v]), 100.0 * (loss[v] - loss[0]) / loss[0]);
        else
            printf("  %-48s %10.4f %12.3f %10s\n", label, loss[v], exp(loss[v]), "");
    }
    for (int i = 0; st == KN_OK && i < 2; i++)
        if (notes[i][0]) printf("  note: %s\n", notes[i]);
    if (st != KN_OK) fprintf(stderr, "kiln eval: %s\n", kn_last_error());
    kn_free(d.tokens);
    kn_gpt_free(&g);
    return st == KN_OK ? 0 : 1;
}
