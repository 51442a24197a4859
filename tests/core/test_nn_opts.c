/* test_nn_opts.c — the options of `kiln train`: defaults, flags, config files, usage
 * errors, and the run-defining options saved into checkpoint metadata and fixed on resume. */
#include <string.h>
#include <unistd.h>

#include "kiln/nn.h"
#include "kn_test.h"
#include "nn/train_opts.h"

static int parse(kn_train_opts *o, int n, const char **args) {
    char *argv[32];
    argv[0] = "train";
    for (int i = 0; i < n; i++) argv[i + 1] = (char *)args[i];
    return kn_train_opts_parse(o, n + 1, argv);
}

KN_TEST(nn_opts, defaults_and_flags) {
    kn_train_opts o;
    cr_assert_eq(parse(&o, 0, NULL), -1);
    cr_assert(o.layers >= 1 && o.width % o.heads == 0 && o.steps > 0);
    cr_assert_str_eq(o.data, "grammar");
    KN_ASSERT_CLOSE(o.min_lr, o.lr / 10, 0, 1e-12);
    cr_assert(o.warmup >= 0 && o.warmup < o.steps);
    const char *a[] = {"--layers", "3", "--lr=0.5", "--optimizer", "sgd", "--out", "x.st", "--steps", "40"};
    cr_assert_eq(parse(&o, 9, a), -1);
    cr_assert_eq(o.layers, 3);
    KN_ASSERT_CLOSE(o.lr, 0.5, 0, 0);
    cr_assert_eq(o.warmup, 4, "steps/10");
    cr_assert_str_eq(o.out, "x.st");
    cr_assert_eq(kn_train_opts_optim(&o).kind, KN_OPTIM_SGD);
}

KN_TEST(nn_opts, usage_errors_exit_2) {
    kn_train_opts o;
    const char *bad[][2] = {{"--nope", "1"}, {"--lr", "abc"}, {"--layers", "0"}, {"--steps", "1.5"},
                            {"--optimizer", "rmsprop"}, {"--width", "30"}, {"stray", "x"}, {"--seed", "-1"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(parse(&o, 2, bad[i]), 2, "%s %s must be a usage error", bad[i][0], bad[i][1]);
    const char *missing[] = {"--lr"};
    cr_assert_eq(parse(&o, 1, missing), 2);
    const char *help[] = {"--help"};
    cr_assert_eq(parse(&o, 1, help), 0);
}

KN_TEST(nn_opts, config_file) {
    char path[96];
    snprintf(path, sizeof path, "/tmp/kiln-test-opts-%ld.cfg", (long)getpid());
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fprintf(f, "# a run\nlayers = 4\n  width=32   # trailing comment\n\nlr = 0.25\n");
    fclose(f);
    kn_train_opts o;
    const char *a[] = {"--config", path, "--lr", "0.125"};
    cr_assert_eq(parse(&o, 4, a), -1);
    cr_assert_eq(o.layers, 4);
    cr_assert_eq(o.width, 32);
    KN_ASSERT_CLOSE(o.lr, 0.125, 0, 0); /* the later flag wins */
    f = fopen(path, "w");
    fprintf(f, "layers 4\n");
    fclose(f);
    const char *b[] = {"--config", path};
    cr_assert_eq(parse(&o, 2, b), 2);
    remove(path);
    const char *c[] = {"--config", "/nonexistent/x.cfg"};
    cr_assert_eq(parse(&o, 2, c), 2);
}

KN_TEST(nn_opts, resume_takes_the_checkpoint_settings) {
    kn_train_opts o;
    const char *a[] = {"--layers", "1", "--width", "8", "--heads", "2", "--context", "8", "--lr", "0.0123"};
    cr_assert_eq(parse(&o, 10, a), -1);
    kn_gpt g;
    kn_gpt_config cfg = {.vocab = 5, .context = 8, .layers = 1, .width = 8, .heads = 2};
    KN_ASSERT_OK(kn_gpt_new(&g, &cfg));
    const char *keys[KN_TRAIN_META_MAX];
    char vals[KN_TRAIN_META_MAX][600];
    int n = kn_train_opts_to_meta(&o, keys, vals);
    cr_assert(n > 10 && n < KN_TRAIN_META_MAX - 4);
    const char *pv[KN_TRAIN_META_MAX];
    for (int i = 0; i < n; i++) pv[i] = vals[i];
    char path[96];
    snprintf(path, sizeof path, "/tmp/kiln-test-opts-%ld.safetensors", (long)getpid());
    KN_ASSERT_OK(kn_checkpoint_save(path, &g, NULL, n, keys, pv));
    kn_train_opts r;
    const char *b[] = {"--resume", path, "--sample", "5"};
    cr_assert_eq(parse(&r, 4, b), -1);
    cr_assert_eq(r.layers, 1);
    cr_assert_eq(r.width, 8);
    cr_assert(r.lr == 0.0123, "lr %.17g comes back exactly", r.lr);
    cr_assert_eq(r.sample, 5);
    const char *c[] = {"--resume", path, "--lr", "0.5"};
    cr_assert_eq(parse(&r, 4, c), 2, "a run-defining flag with --resume is refused");
    kn_gpt_free(&g);
    remove(path);
}
