/* infer_cli.h — what `kiln generate` and `kiln bench-infer` share (core/cli/infer_cli.c): a
 * table-driven option parser and loading a model (and its tokenizer) from a checkpoint. */
#ifndef KILN_CLI_INFER_H
#define KILN_CLI_INFER_H

#include "kiln/data.h"
#include "kiln/infer.h"

/* One option: `--name VALUE` into *i (O_INT, in [lo, hi]), *d (O_F64, in [lo, hi]), *s
 * (O_STR, a buffer of n bytes), or the flag `--name` (O_FLAG: *b = true). */
typedef enum { O_INT, O_F64, O_STR, O_FLAG } kn_cli_opt_kind;
typedef struct kn_cli_opt {
    const char *name;
    kn_cli_opt_kind kind;
    void *dst;
    double lo, hi;
    size_t n;
} kn_cli_opt;

/* Parse argv[1..argc) against opts; `cmd` names the command in messages. Returns 0 when
 * every argument was an option with a valid value, 1 after --help (usage printed on
 * stdout), 2 after a message on stderr for a bad one. */
int kn_cli_opts_parse(const char *cmd, int argc, char **argv, const kn_cli_opt *opts, int nopts,
                      void (*usage)(FILE *));

/* Build *g from the checkpoint at path (its config, then its parameters). *tok receives
 * its byte tokenizer when it has one (*has_tok true), else all 256 bytes when the vocab is
 * 256, else *has_tok false. Errors name the file. */
kn_status kn_cli_load_model(const char *path, kn_gpt *g, kn_tokenizer *tok, bool *has_tok);

/* "nodes" or "compiled" into *mode (KN_ERR_ARG otherwise). */
kn_status kn_cli_program_mode(const char *s, kn_program_mode *mode);

#endif
