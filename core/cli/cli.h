/* cli.h — the subcommands of the `kiln` command. Adding one: write core/cli/<name>.c with
 * `int kn_cli_<name>(int argc, char **argv)`, declare it here and add its line to
 * KN_CLI_COMMANDS (main.c turns the list into its table). */
#ifndef KILN_CLI_H
#define KILN_CLI_H

int kn_cli_ir(int argc, char **argv);
int kn_cli_train(int argc, char **argv);
int kn_cli_bench(int argc, char **argv);
int kn_cli_bench_attn(int argc, char **argv);
int kn_cli_dump(int argc, char **argv);
int kn_cli_compile(int argc, char **argv);
int kn_cli_bench_comm(int argc, char **argv);
int kn_cli_tune_gemm(int argc, char **argv);
int kn_cli_roofline(int argc, char **argv);
int kn_cli_generate(int argc, char **argv);
int kn_cli_bench_infer(int argc, char **argv);
int kn_cli_eval(int argc, char **argv);
int kn_cli_pp_sim(int argc, char **argv);
#define KN_CLI_COMMANDS /* {"name", kn_cli_name, "one line of help"}, */ \
    {"ir", kn_cli_ir, "print, verify or run an IR text file"}, \
    {"train", kn_cli_train, "train a small GPT on the CPU or a GPU (kiln train --help)"}, \
    {"bench", kn_cli_bench, "time GPT training steps on random tokens (kiln bench --help)"}, \
    {"bench-attn", kn_cli_bench_attn, "time causal attention's forward + backward, materialized or flash (kiln bench-attn --help)"}, \
    {"compile", kn_cli_compile, "run graph passes on an IR file or a GPT graph, check and report (kiln compile --help)"}, \
    {"dump", kn_cli_dump, "write a GPT step's weights, logits, gradients, losses (kiln dump --help)"}, \
    {"bench-comm", kn_cli_bench_comm, "under mpiexec: kiln's ring all-reduce against MPI's own"}, \
    {"tune-gemm", kn_cli_tune_gemm, "time the CPU GEMM's cache blockings for a shape, cache the winner (kiln tune-gemm --help)"}, \
    {"roofline", kn_cli_roofline, "CPU ceilings and the GPT step's kernels on the roofline (TSV; make roofline plots it)"}, \
    {"generate", kn_cli_generate, "continue a prompt with a checkpoint's model, streaming (KV cache; kiln generate --help)"}, \
    {"bench-infer", kn_cli_bench_infer, "inference latency: TTFT, TPOT, ITL, end to end, tokens/s (kiln bench-infer --help)"}, \
    {"eval", kn_cli_eval, "held-out loss and perplexity of a checkpoint: fp32, bf16, w8, w8a8 (kiln eval --help)"}, \
    {"pp-sim", kn_cli_pp_sim, "pipeline schedules on a clock: each rank's list, the bubble, a timeline (kiln pp-sim --help)"},

#endif
