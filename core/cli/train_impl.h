/* train_impl.h — what the files of `kiln train` share: train.c runs the training,
 * train_data.c loads the tokens it trains on and writes the checkpoint's metadata,
 * train_dist.c sets up data parallelism (--dist) around the run, train_tp.c tensor
 * parallelism (--mesh tp=N). */
#ifndef KILN_CLI_TRAIN_IMPL_H
#define KILN_CLI_TRAIN_IMPL_H

#include "kiln/data.h"
#include "kiln/mesh.h"
#include "kiln/nn.h"
#include "kiln/offload.h"
#include "nn/train_opts.h"

/* ---------------------------------------------------------------- train_data.c */

/* The tokens of --data: a text (the bundled grammar's or a file's, tokenized by a fitted
 * byte tokenizer) or a token file; the last 10% is held out. */
typedef struct kn_train_data {
    int32_t *tokens;   /* owned */
    int64_t n, n_train;
    kn_tokenizer tok;
    bool has_tok;
    int vocab;
    double unigram;    /* nats, over the whole corpus */
} kn_train_data;

/* Load --data into d (owned: free d->tokens); an error when it is too short for the context. */
kn_status kn_train_data_load(const kn_train_opts *o, kn_train_data *d);
/* The tokenizer table as hex, for the checkpoint ("0a2021..."); buf holds 513 bytes. */
void kn_train_tok_hex(const kn_train_data *d, char *buf);
/* Write the checkpoint --out at step: the model, the optimizer state and the run's settings
 * as metadata (what --resume reads back). */
kn_status kn_train_save(const kn_train_opts *o, const kn_trainer *tr, const kn_train_data *d, int64_t step);

/* ---------------------------------------------------------------- train_dist.c */

/* --dist: this process's rank and the data-parallel step (off: on is false, size 1). */
typedef struct kn_train_dist {
    bool on;
    kn_comm *comm;
    kn_dp dp;
    int rank, size, rows;   /* rows: the trainer's batch, batch / (size x accum) (--pp: / micro-batches) */
    bool pp_on;             /* --pp: pipeline parallelism (train_pp.c) instead of dp (on is set too) */
    kn_pp pp;
    kn_pp_config pp_cfg;
    /* --mesh (train_tp.c): tensor parallelism; `on` stays false (it means --dist) */
    bool tp_on;
    kn_mesh mesh;
    kn_tp tp;
    kn_comm *axes[KN_MESH_AXES]; /* owned: the mesh's communicators (NULL: an absent axis) */
} kn_train_dist;

/* Before the run: --dist needs mpiexec and a batch the ranks and micro-batches divide.
 * Returns -1 to go on, else the exit status (a message printed). */
int kn_train_dist_begin(kn_train_opts *o, kn_train_dist *rd);
/* After MPI is up (rd->rank, rd->size set): the device this rank takes (--comm nccl: the
 * GPU of its index on the host; mpi: the CPU), and ranks other than 0 silenced. Returns -1
 * to go on, else the exit status (a message printed). */
int kn_train_dist_ranks(kn_train_opts *o, kn_train_dist *rd);
/* After the trainer is built (and loaded): the communicator and the strategy. */
kn_status kn_train_dist_attach(const kn_train_opts *o, kn_train_dist *rd, kn_trainer *tr);
/* Rank 0's report: memory per rank against distributed.md's table, and the overlap. */
void kn_train_dist_report(const kn_train_dist *rd, int64_t P);
/* After the run: the strategy, the communicator, MPI. */
void kn_train_dist_end(kn_train_dist *rd);

/* --offload optimizer (kiln/offload.h), after --dist attached: the checks (a GPU, no mesh
 * or pipeline, not ZeRO-3; refused with the reason) and the offload of what this rank
 * updates into *out (NULL with --offload none). */
kn_status kn_train_offload_attach(const kn_train_opts *o, kn_train_dist *rd, kn_trainer *tr, kn_offload **out);
/* Rank 0's lines on the offload: host bytes, device bytes given back, the last step's times. */
void kn_train_offload_report(const kn_offload *f);

/* ---------------------------------------------------------------- train_tp.c */

/* --mesh tp=N or dp=D,tp=N: under mpiexec, the mesh's checks every rank makes alike (its
 * size is the job's, no pp yet, heads and width split, the batch split over dp x --accum,
 * no --dist but zero1 with a dp axis).
 * Returns -1 to go on (rd->tp_on), else the exit status (a message printed). */
int kn_train_tp_begin(kn_train_opts *o, kn_train_dist *rd);
/* After the trainer is built: the model must split tp ways; the communicator and the
 * tensor-parallel state (kn_tp). Nothing when --mesh is not given. */
kn_status kn_train_tp_attach(const kn_train_opts *o, kn_train_dist *rd, kn_trainer *tr);
/* ---------------------------------------------------------------- train_pp.c */

/* --pp N --schedule S --microbatches M [--chunks V] under mpiexec -n N (dp pipelines: -n
 * dp x N): the checks every rank makes alike (kn_pp_check's messages), MPI, the device each
 * rank takes. The entry point for a mesh's pp axis too (`--mesh pp=N` maps to pp = N,
 * `--mesh dp=D,pp=N` to dp = D; rd->mesh holds that mesh). Returns -1 to go on, else the
 * exit status (a message printed). */
int kn_train_pp_begin(kn_train_opts *o, kn_train_dist *rd, int pp, int dp, const char *schedule, int micro,
                      int chunks);
/* After the trainer is built: the communicators and the stages (kn_pp_new; with dp > 1
 * the mesh's axes and kn_pp_set_dp). */
kn_status kn_train_pp_attach(const kn_train_opts *o, kn_train_dist *rd, kn_trainer *tr);
/* After the run (collective): the last step's timeline (--timeline FILE), the measured bubble
 * beside (p-1)/(m+p-1), the stash's peak. */
void kn_train_pp_report(const kn_train_opts *o, kn_train_dist *rd);

#endif
