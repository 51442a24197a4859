/* train_opts.h — the settings of a training run (`kiln train`): one table of options that
 * drives the flag parser, the key=value config file reader, the usage text and the
 * checkpoint metadata. Internal to kiln (core/nn and core/cli).
 *
 * Every option has a name ("lr"), read as the flag --lr VALUE or --lr=VALUE and as the
 * config-file line `lr = VALUE`. Options that define the run (model shape, data, schedule,
 * optimizer, seed) are saved in a checkpoint's metadata as "kiln.opt.<name>"; a run with
 * --resume takes them from the checkpoint and refuses flags that would change them, so it
 * continues exactly. */
#ifndef KILN_NN_TRAIN_OPTS_H
#define KILN_NN_TRAIN_OPTS_H

#include "kiln/optim.h"

#define KN_TRAIN_STR 512
#define KN_TRAIN_META_MAX 48

typedef struct kn_train_opts {
    /* model */
    int layers, width, heads, context;
    /* data */
    char data[KN_TRAIN_STR];     /* "grammar" (the bundled generator), a text file or a KNTK file */
    uint64_t data_seed;          /* grammar seed */
    int64_t data_bytes;          /* grammar size */
    /* optimization */
    int batch;
    int64_t steps, warmup;       /* warmup < 0: steps / 10, at most 100 */
    double lr, min_lr;           /* min_lr < 0: lr / 10 */
    char optimizer[16];          /* "adamw" or "sgd" */
    double momentum, weight_decay, clip;
    uint64_t seed;               /* initialization, batches and sampling */
    char precision[8];           /* "fp32", "tf32", "bf16" or "fp16" (the autocast pass) */
    /* this invocation only (allowed with --resume) */
    char device[16];
    char mode[16];               /* "graph" (compile the step once) or "eager" (op by op) */
    char remat[32];              /* activation checkpointing policy (kiln/passes.h): "none", "full", ... */
    char passes[96];             /* graph passes run first, "none" or a kn_passes_run list ("all", "cse,dce") */
    char cuda_graph[8];          /* "on": the compiled GPU step replayed as a CUDA graph; "off" */
    char offload[16];            /* "none" or "optimizer": ZeRO-Offload, the optimizer on the host (kiln/offload.h) */
    char loss_scale[48];         /* "auto" (dynamic for fp16, else none), "none", "dynamic[:INIT[:INTERVAL]]", a number */
    int flash;                   /* 1: the flash pass (flash attention) on the step's graph */
    int epilogue;                /* 1: the epilogue pass (matmul epilogues) on the step's graph */
    int hfuse;                   /* 1: the hfuse pass (q, k, v as one wide product) on the step's graph */
    char out[KN_TRAIN_STR];      /* checkpoint to write; "none" for no checkpoint */
    char resume[KN_TRAIN_STR];   /* checkpoint to continue; "" for a fresh run */
    char log[KN_TRAIN_STR];      /* per-step "step loss lr gnorm" lines; "" for none */
    int64_t stop_after;          /* stop (and save) after this step; 0: run to `steps` */
    int sample;                  /* characters to sample at the end */
    double temperature;
    int eval_batches;            /* held-out batches evaluated at the end */
    /* data parallelism (core/dist/; this invocation only) */
    char dist[16];               /* "" (one process), "ddp", "zero1", "zero2", "zero3" (or "fsdp") */
    double bucket_mb;            /* gradient bucket size in MiB */
    int accum;                   /* micro-batches per step */
    char comm[16];               /* "mpi" or "nccl" */
    char allreduce[16];          /* "library" or "ring" (kiln's own, DDP) */
    char compress[16];           /* "none" or "int8" (DDP's buckets, error feedback) */
    char emit_ir[KN_TRAIN_STR];  /* write the step's joint graph with its collectives here */
    char mesh[64];               /* "" or a device mesh, "tp=2", "dp=2,tp=2" (kn_mesh_parse) */
    int sp;                      /* --mesh: sequence parallelism (1) or not (0) */
    /* pipeline parallelism (core/dist/pp*.c; this invocation only) */
    int pp;                      /* stages (ranks) on the pp axis; 0: off */
    char schedule[16];           /* "gpipe", "1f1b" or "interleaved" */
    int microbatches;            /* micro-batches per step; 0: 4 x pp */
    int chunks;                  /* chunks per rank; 0: implied by the schedule */
    char timeline[KN_TRAIN_STR]; /* --pp: write the last step's timeline (TSV) here */
} kn_train_opts;

/* Parse argv (argv[0] is the subcommand). Returns -1 when the run should go ahead, 0 after
 * printing --help, 2 after printing a usage error to stderr. Applies defaults, then (with
 * --resume) the checkpoint's saved options, then config files and flags in order. */
int kn_train_opts_parse(kn_train_opts *o, int argc, char **argv);
/* The run-defining options as checkpoint metadata: keys[i] = "kiln.opt.<name>", vals[i]
 * its text; returns the count (< KN_TRAIN_META_MAX - 4, leaving room for the caller). */
int kn_train_opts_to_meta(const kn_train_opts *o, const char **keys, char vals[][600]);
/* The optimizer settings. */
kn_optim_config kn_train_opts_optim(const kn_train_opts *o);
/* The usage text. */
void kn_train_opts_usage(FILE *f);

#endif /* KILN_NN_TRAIN_OPTS_H */
