/* main.c — the `kiln` command: a table of subcommands, each in its own file of core/cli/.
 *
 * The table is KN_CLI_COMMANDS of cli/cli.h (ir, train, bench, bench-attn, compile, dump,
 * bench-comm, tune-gemm, roofline, generate, bench-infer, eval: each a name, a function
 * and a line of help) plus `kiln version` (what this build has: CUDA or not), defined here.
 * `kiln` or `kiln --help` prints the table; an unknown command is bad usage.
 *
 * A subcommand is `int fn(int argc, char **argv)` with argv[0] the subcommand's name; it
 * returns the process exit status (0 ok, 1 failure, 2 bad usage). */
#include <stdio.h>
#include <string.h>

#include "kiln/base.h"
#include "cli/cli.h"

typedef struct kn_cli_command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} kn_cli_command;

static int cli_version(int argc, char **argv) {
    (void)argc; (void)argv;
#ifdef KN_HAVE_CUDA
    printf("kiln 0.1 (CUDA backend built in)\n");
#else
    printf("kiln 0.1 (CPU only: built without CUDA: make CUDA=1 with nvcc for the GPU backend)\n");
#endif
    return 0;
}

static const kn_cli_command kn_cli_commands[] = {
    KN_CLI_COMMANDS
    {"version", cli_version, "print the version and the backends built in"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: kiln <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof kn_cli_commands / sizeof kn_cli_commands[0]; i++)
        fprintf(f, "  %-10s %s\n", kn_cli_commands[i].name, kn_cli_commands[i].help);
    fprintf(f, "\n'kiln <command> --help' describes a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof kn_cli_commands / sizeof kn_cli_commands[0]; i++)
        if (!strcmp(argv[1], kn_cli_commands[i].name)) return kn_cli_commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "kiln: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
