/* kiln/dist.h — communicators for training on several processes, and the data-parallel
 * strategies built on them (DDP, ZeRO-1, ZeRO-2, ZeRO-3/FSDP).
 *
 * One process per device, launched by `mpiexec -n N kiln ...`. A communicator (kn_comm) is
 * a group of those processes ("ranks" 0..size-1) and a backend that moves bytes between
 * them. Backends are structs of function pointers plus a context, registered in one table
 * like the devices (kiln/device.h): MPI for CPU buffers, NCCL for GPU buffers (its unique
 * id broadcast over MPI, one rank per GPU, the GPU picked from the ranks on the same host).
 * A backend left out of the build answers KN_ERR_UNSUPPORTED.
 *
 * Every operation has an asynchronous form (kn_comm_i*) that returns a request; the
 * blocking form is the asynchronous one plus kn_comm_wait. Waits poll (MPI_Test or an event
 * query, then a 1 us sleep), because MPICH spins inside its blocking calls and 4 ranks on 2
 * cores then take 18 ms per small all-reduce instead of 0.5 ms. No wait is endless: past
 * KILN_COMM_TIMEOUT seconds (default 300) the rank prints
 *     rank R: all_reduce #N (what, bytes) timed out after S s
 * aborts the NCCL communicator and calls MPI_Abort, which ends the whole job.
 *
 * Buffers are counts of elements of a kn_dtype. Reductions are sums. The "v" collectives
 * (reduce_scatter, all_gather) take per-rank counts, like MPI's: rank r's block is
 * counts[r] elements at offset counts[0] + ... + counts[r-1] of the full buffer. */
#ifndef KILN_DIST_H
#define KILN_DIST_H

#include "kiln/nn.h"
#include "kiln/passes.h"
#include "kiln/placement.h"
#include "kiln/pipeline.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kn_comm_type { KN_COMM_MPI = 0, KN_COMM_NCCL, KN_COMM_TYPE_COUNT } kn_comm_type;

/* The collective operations, for sequence numbers and messages. */
typedef enum kn_comm_op {
    KN_COP_SEND = 0, KN_COP_RECV, KN_COP_ALL_REDUCE, KN_COP_REDUCE_SCATTER, KN_COP_ALL_GATHER,
    KN_COP_BROADCAST, KN_COP_BARRIER, KN_COP_FENCE, KN_COP_COUNT
} kn_comm_op;
const char *kn_comm_op_name(kn_comm_op op);  /* "all_reduce", ... */

typedef struct kn_comm kn_comm;
typedef struct kn_comm_req kn_comm_req;

/* A backend: `ctx` is the backend's state of one communicator (owned by it). Each i* call
 * starts an operation and fills req's backend part; test says whether it finished. */
typedef struct kn_comm_backend {
    const char *name;      /* "mpi", "nccl" */
    kn_comm_type type;
    /* A communicator over every rank of the job (after kn_dist_init). */
    kn_status (*world)(void **ctx, int *rank, int *size);
    /* Ranks with the same color form one new communicator, ordered by key then rank. */
    kn_status (*split)(void *ctx, int color, int key, void **out, int *rank, int *size);
    void (*free)(void *ctx);
    kn_status (*isend)(void *ctx, const void *buf, int64_t count, kn_dtype dt, int peer, kn_comm_req *r);
    kn_status (*irecv)(void *ctx, void *buf, int64_t count, kn_dtype dt, int peer, kn_comm_req *r);
    kn_status (*iall_reduce)(void *ctx, const void *send, void *recv, int64_t count, kn_dtype dt, kn_comm_req *r);
    kn_status (*ireduce_scatter)(void *ctx, const void *send, void *recv, const int64_t *counts, kn_dtype dt,
                                 kn_comm_req *r);
    kn_status (*iall_gather)(void *ctx, const void *send, void *recv, const int64_t *counts, kn_dtype dt,
                             kn_comm_req *r);
    kn_status (*ibroadcast)(void *ctx, void *buf, int64_t count, kn_dtype dt, int root, kn_comm_req *r);
    kn_status (*ibarrier)(void *ctx, kn_comm_req *r);
    kn_status (*test)(void *ctx, kn_comm_req *r, bool *done);
    /* Stream order (NULL where there are no device streams: MPI): the device's compute
     * stream waits for r's end before its next work; the host does not wait. *keep false:
     * the host need not look at r again (queued into a CUDA graph being captured: its end
     * is an edge of the graph, a replay's end the caller's fence). */
    kn_status (*device_wait)(void *ctx, kn_comm_req *r, bool *keep);
    /* A request that ends when the compute stream reaches this point (NULL: no device
     * streams; a fence then ends at once). */
    kn_status (*ifence)(void *ctx, kn_comm_req *r);
    bool (*capturing)(void);  /* a CUDA graph is being captured (NULL: never) */
    void (*release)(void *ctx, kn_comm_req *r);  /* free what i* made for r (done or not) */
    void (*abort)(void *ctx);                     /* before MPI_Abort: NCCL's ncclCommAbort */
} kn_comm_backend;

/* The registered backend of a type; NULL when it is not built in. */
const kn_comm_backend *kn_comm_backend_get(kn_comm_type type);

/* A request: which operation, for messages; the backend's handles. */
#define KN_COMM_REQ_HANDLES 2
struct kn_comm_req {
    kn_comm *comm;
    kn_comm_op op;
    int64_t seq;           /* the op's sequence number on this communicator (1, 2, ...) */
    size_t bytes;
    char what[48];         /* the caller's label ("bucket 3", "ring step 2") */
    double t_start;        /* kn_time_now() at the start */
    bool active;
    void *h[KN_COMM_REQ_HANDLES];  /* backend handles (MPI_Request, cudaEvent_t) */
    int64_t hv[2];
};

struct kn_comm {
    const kn_comm_backend *be;
    void *ctx;
    int rank, size;
    int64_t seq[KN_COP_COUNT];
    double timeout;        /* seconds (KILN_COMM_TIMEOUT) */
    /* requests the compute stream waits for and the host has not seen end (kn_comm_wait_device) */
    kn_comm_req *pending;
    int npending, cap_pending;
};

/* ---------------------------------------------------------------- the job */

/* True when this process was started by a launcher (mpiexec sets PMI_RANK, PMIX_RANK or
 * OMPI_COMM_WORLD_RANK). */
bool kn_dist_launched(void);
/* MPI_Init (once). KN_ERR_ARG when not launched by mpiexec ("run it as mpiexec -n N ...",
 * naming `who`), KN_ERR_UNSUPPORTED when built without MPI. */
kn_status kn_dist_init(const char *who);
/* MPI_Finalize when kn_dist_init ran; safe to call otherwise. */
void kn_dist_finalize(void);
/* The rank and size of the whole job (0 and 1 before kn_dist_init). */
int kn_dist_rank(void);
int kn_dist_size(void);
/* This rank's index among the ranks on its host (0 before kn_dist_init): the GPU a rank
 * takes under NCCL (one GPU per rank). Collective over the job: every rank calls it. */
int kn_dist_local_rank(void);
/* End the whole job now (MPI_Abort; exit when MPI is not running). */
_Noreturn void kn_dist_abort(int code);

/* ---------------------------------------------------------------- communicators */

/* Every rank of the job, on a backend (NCCL: one GPU per rank, chosen by the rank's index
 * among the ranks of its host; KN_ERR_DEVICE when there is no GPU or too few). */
kn_status kn_comm_world(kn_comm **out, kn_comm_type type);
/* Sub-communicator of the ranks giving the same color, ordered by key (then rank). */
kn_status kn_comm_split(kn_comm *c, int color, int key, kn_comm **out);
void kn_comm_free(kn_comm *c);  /* NULL is fine */

/* A device mesh: the ranks of c laid out row-major over dims[0] x ... x dims[ndims-1]
 * (their product must be c's size); axes[a] receives the communicator along axis a: the
 * ranks whose coordinates differ only in axis a (data x tensor x pipeline, say). */
#define KN_MESH_MAX_DIMS 4
kn_status kn_comm_mesh(kn_comm *c, int ndims, const int *dims, kn_comm **axes, int *coords);

/* Asynchronous operations: *r is filled (a request owned by the caller, on its stack or
 * heap); finish it with kn_comm_wait (or poll with kn_comm_test). `what` labels it for
 * messages (may be NULL). send == recv is in place where allowed (all_reduce). */
kn_status kn_comm_isend(kn_comm *c, const void *buf, int64_t count, kn_dtype dt, int peer, const char *what,
                        kn_comm_req *r);
kn_status kn_comm_irecv(kn_comm *c, void *buf, int64_t count, kn_dtype dt, int peer, const char *what,
                        kn_comm_req *r);
kn_status kn_comm_iall_reduce(kn_comm *c, const void *send, void *recv, int64_t count, kn_dtype dt,
                              const char *what, kn_comm_req *r);
/* send holds sum(counts) elements; recv gets this rank's block, summed over ranks. */
kn_status kn_comm_ireduce_scatter(kn_comm *c, const void *send, void *recv, const int64_t *counts, kn_dtype dt,
                                  const char *what, kn_comm_req *r);
/* send holds counts[rank] elements; recv gets every rank's block, in rank order. */
kn_status kn_comm_iall_gather(kn_comm *c, const void *send, void *recv, const int64_t *counts, kn_dtype dt,
                              const char *what, kn_comm_req *r);
kn_status kn_comm_ibroadcast(kn_comm *c, void *buf, int64_t count, kn_dtype dt, int root, const char *what,
                             kn_comm_req *r);
kn_status kn_comm_ibarrier(kn_comm *c, const char *what, kn_comm_req *r);

/* Poll once: *done true when finished (the request is then released). */
kn_status kn_comm_test(kn_comm_req *r, bool *done);
/* Poll until done, sleeping 1 us between polls; on the deadline, report and abort the job. */
kn_status kn_comm_wait(kn_comm_req *r);
kn_status kn_comm_wait_all(int n, kn_comm_req *r);
/* Stream-ordered waiting, for values the device reads next (tensor parallelism's
 * all-reduces, DDP's buckets): while a CUDA graph is captured (or with
 * KILN_COMM_STREAM_ORDER=1) on a backend with device streams (NCCL), the compute stream
 * waits for r and the host goes on queueing work; outside a capture r (copied) joins its
 * communicator's pending list, which kn_comm_reap polls and kn_comm_drain finishes.
 * Otherwise (the default, and MPI): kn_comm_wait, whose deadline a blocking copy behind a
 * stream-ordered wait would not have. */
kn_status kn_comm_wait_device(kn_comm_req *r);
/* Poll the pending requests once, oldest first, releasing those that ended (a failure is
 * reported as kn_comm_test's, a deadline passed as kn_comm_wait's). */
kn_status kn_comm_reap(kn_comm *c);
/* Wait for every pending request (kn_comm_wait each): before the host reads what they made. */
kn_status kn_comm_drain(kn_comm *c);
/* A fence: a request that ends when the device's compute stream has run everything queued
 * before it (NCCL; at once where there are no device streams), waited for with the
 * deadline and NCCL's error check like any other. After a CUDA graph that holds
 * collectives is launched, waiting on a fence is how a stalled peer is still reported. */
kn_status kn_comm_ifence(kn_comm *c, const char *what, kn_comm_req *r);
/* Whether data parallelism's collectives may go into the step's CUDA graph: only with
 * KILN_DIST_GRAPH=1 until the GPU check of tests/dist/test_dist_gpu.sh has passed (dp_buckets.c). */
bool kn_dp_dist_graph_allowed(void);

/* Blocking forms (i* then wait). */
kn_status kn_comm_send(kn_comm *c, const void *buf, int64_t count, kn_dtype dt, int peer);
kn_status kn_comm_recv(kn_comm *c, void *buf, int64_t count, kn_dtype dt, int peer);
kn_status kn_comm_all_reduce(kn_comm *c, const void *send, void *recv, int64_t count, kn_dtype dt);
kn_status kn_comm_reduce_scatter(kn_comm *c, const void *send, void *recv, const int64_t *counts, kn_dtype dt);
kn_status kn_comm_all_gather(kn_comm *c, const void *send, void *recv, const int64_t *counts, kn_dtype dt);
kn_status kn_comm_broadcast(kn_comm *c, void *buf, int64_t count, kn_dtype dt, int root);
kn_status kn_comm_barrier(kn_comm *c);

/* ---------------------------------------------------------------- data parallelism */

typedef enum kn_dp_strategy { KN_DP_DDP = 0, KN_DP_ZERO1, KN_DP_ZERO2, KN_DP_ZERO3, KN_DP_COUNT } kn_dp_strategy;
/* "ddp", "zero1", "zero2", "zero3" (or its other name, "fsdp"); KN_ERR_ARG for anything else. */
kn_status kn_dp_strategy_parse(const char *s, kn_dp_strategy *out);
const char *kn_dp_strategy_name(kn_dp_strategy s);

typedef struct kn_dp_config {
    kn_dp_strategy strategy;
    double bucket_mb;      /* bucket size in MiB (> 0; PyTorch's default is 25) */
    int accum;             /* micro-batches per step (>= 1): communicate on the last only */
    bool ring;             /* DDP: kiln's ring all-reduce instead of the library's */
    bool compress;         /* DDP: int8 gradients with error feedback (CPU ranks; see dp.c) */
} kn_dp_config;

/* Timing of the last step, for the overlap figure. */
typedef struct kn_dp_stats {
    double backward_s;     /* forward + backward (the joint graph) */
    double comm_s;         /* time from the first bucket's start to the last one's end */
    double exposed_s;      /* communication waited for after the backward ended */
    double step_s;
    /* ZeRO-3: the parameter all_gathers of the step (every micro-batch's forward and backward) */
    double gather_s;       /* summed over the gathers: from the start to the moment it was seen done */
    double gather_wait_s;  /* of it, the time the step stood waiting for a gather at its first use */
    int gathers;
} kn_dp_stats;

typedef struct kn_dp_z3 kn_dp_z3; /* ZeRO-3's plan and gathered buckets (zero3.c) */

/* Data-parallel training state of one rank, around a trainer whose batch is the rank's
 * micro-batch (global batch / (size * accum) sequences). */
typedef struct kn_dp {
    kn_comm *comm;           /* borrowed */
    kn_trainer *tr;          /* borrowed */
    kn_dp_config cfg;
    int nbuckets;
    kn_dp_bucket *buckets;   /* owned, in slab order (launched from the last) */
    int *param_bucket;       /* owned: bucket of each parameter */
    kn_comm_req *reqs;       /* owned: one per bucket */
    int64_t *shard_lo;       /* owned: size+1 bounds; rank r owns slab [shard_lo[r], shard_lo[r+1]) */
    kn_optim shard_opt;      /* ZeRO: the optimizer of this rank's shard */
    float *grad_shard;       /* ZeRO: owned, the reduced gradient of this rank's shard */
    float *ring_scratch;     /* DDP with the ring: owned, one chunk */
    float **staging;         /* ZeRO-2: per bucket, its gradients while in flight, then the
                              * reduced part this rank owns */
    bool *in_flight;         /* per bucket: its request is active */
    double t_last_done;
    int64_t staging_bytes, staging_peak;
    int micro;               /* micro-batch index within the step */
    bool last_micro;         /* communicate in this micro-batch */
    kn_dp_stats stats;
    double t_backward_end;
    double t_comm_end;       /* the last micro-batch's buckets all done */
    double t_first_launch;
    int launched;
    double *t_launch;        /* owned, KILN_DP_TIMELINE on rank 0: per bucket its launch time, then
                              * (at nbuckets + b) its completion time, in this step */
    FILE *timeline;          /* owned: the KILN_DP_TIMELINE file (rank 0), else NULL */
    double *dscalar;         /* on a GPU: owned, one device double for the loss and norm sums */
    float *err;              /* --compress int8: owned, the error feedback, one float per slab entry */
    uint8_t **packed;        /* --compress int8: per bucket in flight, every rank's scale and codes */
    int64_t bytes_sent;      /* collective payload bytes this rank sent in the last step */
    float *dshard_state;     /* ZeRO on a GPU: owned, the shard's optimizer state there (shard_opt
                              * keeps the config and step; its host state goes unused) */
    /* ZeRO-3: the parameters live as this rank's shard; the model's full slab is gone while
     * training (kn_dp_gather_state brings it back for evaluation, sampling and checkpoints) */
    float *param_shard;      /* owned: this rank's range of the parameter slab */
    kn_dp_z3 *z3;            /* owned: the gathers in flight (zero3.c) */
    int64_t gathered_bytes;  /* parameter bytes all-gathered in the last step (every bucket, each time) */
    int64_t gathered_peak;   /* bytes of gathered buckets live at once at the most (the step's graph) */
    /* The collectives are ops of the step's graph (the `ddp`, `zero` or `zero3` pass; the
     * trainer's step runner compiles the step with it, kiln/step.h), run by dp_buckets.c's
     * kn_collectives context, on CPU and GPU ranks */
    char pass[32];           /* the pass it ran: "ddp:0.05" */
    int64_t device_held;     /* on a GPU: kiln's device bytes right after the last step (kn_dp_memory) */
    int ir_waits;            /* comm_wait nodes run in this run */
    double t_ir_first_wait;  /* when the first ran: the backward's end, as the IR places it */
} kn_dp;

/* Set up: checks the trainer's batch against the global one, builds the buckets, gives the
 * trainer's step runner (kiln/step.h) this strategy's hooks and pass (ddp, zero or zero3:
 * the runner recompiles the step with it, now and whenever the trainer's step is compiled
 * again, and gives it dp's kn_collectives context: MPI on CPU ranks, NCCL on GPU ranks),
 * and shards the optimizer state (ZeRO), taking this rank's range of the
 * state the trainer holds (so a resumed run continues). The parameters of every rank are
 * made equal to rank 0's. ZeRO-3 then keeps this rank's range of them (param_shard), frees
 * the model's parameter slab (model->p.slab, data and views are NULL until
 * kn_dp_gather_state) and defers the evaluation program's parameters (kn_program_defer):
 * the step program, whose pass removed its params, gathers each bucket for the nodes that
 * read it; the evaluation program fails with a clear message until the slab is gathered.
 * On GPU ranks (NCCL) every strategy and accum > 1 run as on CPU ranks, the shards (ZeRO-3's
 * parameters too), gathers and updates in the rank's device memory (a GPU trainer's device
 * parameter slab goes with the model's host slab); kiln's ring (cfg.ring) and int8
 * compression are CPU ranks' (KN_ERR_UNSUPPORTED on a GPU). A trainer with a loss scale
 * (fp16) keeps it: every rank applies the same scale and an overflow on any rank skips the
 * step on all; int8 compression with a loss scale is refused (KN_ERR_UNSUPPORTED). After
 * kn_dp_new the trainer steps only through kn_dp_step (kn_trainer_step refuses); kn_dp_free
 * takes the hooks back. */
kn_status kn_dp_new(kn_dp *d, kn_comm *c, kn_trainer *tr, const kn_dp_config *cfg);
/* The buckets of p's slab (param_buckets.c): lab 10's kn_dp_buckets (kiln/passes.h) over p's
 * layout (each parameter's offset, numel and decay); the same errors, and KN_ERR_OOM. */
kn_status kn_dp_param_buckets(const kn_params *p, size_t bucket_bytes, kn_dp_bucket **out, int *n);
void kn_dp_free(kn_dp *d);
/* One optimizer step on the global batch x, y (B_global x T each; this rank takes its
 * rows), taken by the trainer's step runner with d's hooks: accum micro-batches of
 * forward+backward, gradients averaged over ranks as the strategy says (and unscaled),
 * clipped by the global norm, the overflow check, the optimizer step, parameters gathered.
 * *loss gets the global batch's mean loss (the same on every rank). */
kn_status kn_dp_step(kn_dp *d, const int32_t *x, const int32_t *y, int global_batch, double lr, double *loss,
                     double *gnorm);
/* ZeRO: gather the full optimizer state into tr->opt.state (on every rank) before a
 * checkpoint. ZeRO-3 also gathers the parameters into a new model slab (model->p.slab, its
 * views, tr->params) and binds the evaluation program to it (on a GPU the state and
 * tr->params are gathered on the device and the host slab is made for kn_trainer_sync_host
 * to fill): evaluation, sampling and checkpoints then work as after any strategy; the next kn_dp_step frees the slab again
 * (the shard is what trains). kn_dp_free leaves a gathered slab bound to both programs.
 * No-op for DDP. Collective: every rank calls it. */
kn_status kn_dp_gather_state(kn_dp *d);
/* ZeRO-1's gather after the update, for the meshes' local slabs (kn_tp_set_zero1,
 * kn_pp_set_zero1; dp_shard.c): this rank's updated range [lo, hi) of `slab` (f32 on dev)
 * copied to a buffer of its own (the send buffer must not lie inside the receive buffer),
 * then every dp rank's range all-gathered into slab, in rank order: counts[q] is dp rank
 * q's range's length (counts[dp->rank] == hi - lo; they sum to the slab's length), so each
 * replica holds the whole slab again. KN_ERR_ARG for a NULL pointer, a bad range or a
 * count that disagrees with it; an allocation's, copy's or the collective's status is
 * passed on. Collective over dp. */
kn_status kn_zero1_gather(kn_comm *dp, kn_device dev, float *slab, int64_t lo, int64_t hi, const int64_t *counts);

/* The step's graph (kiln/ir.h) and where the communication runs (kiln train --dist ...
 * --emit-ir FILE): the graph after the strategy's pass, with its collectives as ops and a
 * comment naming each bucket after its start (ZeRO-3: each gather and its wait, with the
 * last reader after which the buffer is freed); the collectives of the optimizer step at
 * the end. The comments keep it parseable. */
kn_status kn_dp_schedule_print(FILE *f, const kn_dp *d);

/* Bytes per rank held for parameters, gradients and optimizer state by the strategy during
 * the steps (ZeRO-3: the shard, even while kn_dp_gather_state's full slab is there);
 * staging_peak: ZeRO-2/3's gradient buckets in flight at the most; gathered_peak: ZeRO-3's
 * gathered parameter buckets at the most (the "+ one layer gathered" of the table);
 * device: on a GPU rank, the bytes kiln held on its device right after the last
 * kn_dp_step (kn_device_mem_stats.current: the shards and slabs above plus the batch and
 * the programs' buffers; measured, not computed), 0 on a CPU rank or before a step. */
typedef struct kn_dp_memory {
    int64_t params, grads, optim, staging_peak, gathered_peak, device;
} kn_dp_memory;
kn_dp_memory kn_dp_memory_of(const kn_dp *d);
/* Every rank's kn_dp_memory_of, in rank order (all: comm->size entries), on every rank: the
 * per-rank figures kiln train prints (ZeRO-3's parameter bytes are each about 4P/N).
 * Collective: every rank calls it. */
kn_status kn_dp_memory_ranks(const kn_dp *d, kn_dp_memory *all);
/* The table's prediction for fp32 Adam with P parameters on n ranks (distributed.md). */
kn_dp_memory kn_dp_memory_expected(kn_dp_strategy s, int64_t P, int n);

/* ---------------------------------------------------------------- tensor parallelism
 * (core/dist/tp.c; the placement pass that makes a rank's graph: kiln/placement.h)
 *
 * A device mesh from the command line: `--mesh dp=2,tp=2` lays the ranks out over named
 * axes, in any order; the sizes multiply to the rank count. The axis indices of the value
 * collectives' {mesh=A} are fixed whatever the order: 0 dp, 1 tp, 2 pp. */
enum { KN_MESH_DP = 0, KN_MESH_TP = 1, KN_MESH_PP = 2, KN_MESH_AXES = 3 };

typedef struct kn_mesh {
    int size[KN_MESH_AXES];  /* ranks along dp, tp, pp (1: the axis is absent) */
    int order[KN_MESH_AXES]; /* the axes in the order written (row-major, the last fastest) */
    int naxes;               /* how many were written */
} kn_mesh;

/* Parse "tp=2", "dp=2,tp=2", "tp=2,pp=2,dp=2" for a job of `ranks` ranks. KN_ERR_ARG with
 * a message naming the problem: an unknown axis ("--mesh: unknown axis 'xp' (dp, tp,
 * pp)"), a repeated one, a size that is not an integer >= 1, or sizes whose product is not
 * the rank count ("--mesh dp=2,tp=2: 4 ranks, but the job has 2"; ranks <= 0: any count,
 * for kiln compile). */
kn_status kn_mesh_parse(const char *text, int ranks, kn_mesh *out);
/* Whether a GPT can be split tp ways (Megatron): heads, width and 4 * width must be
 * multiples of tp. KN_ERR_ARG naming the first that is not. A vocabulary that is not a
 * multiple keeps the token embedding (and the logits) replicated: kn_tp does that, and
 * kn_mesh_vocab_split says which. */
kn_status kn_mesh_check_gpt(const kn_mesh *m, const kn_gpt_config *cfg);
bool kn_mesh_vocab_split(const kn_mesh *m, const kn_gpt_config *cfg);
/* The placement tensor parallelism gives a GPT's parameter (kn_place_opts.param; ctx: a
 * kn_tp_split): Megatron's (kn_place_gpt_param), the token embedding replicated when the
 * vocabulary is not a multiple of the ranks. */
typedef struct kn_tp_split { int vocab, parts; } kn_tp_split;
kn_status kn_tp_gpt_param(void *ctx, const char *name, kn_placement *out);
/* The communicators of the mesh over c (kn_comm_mesh, in the written order): axes[A] gets
 * the one along axis A (NULL for an absent axis), coords[A] this rank's index along it. */
kn_status kn_mesh_comms(const kn_mesh *m, kn_comm *c, kn_comm **axes, int *coords);

/* The value collectives of a rank's graph (all_reduce, all_gather, reduce_scatter, send,
 * recv: kiln/ir.h) run over the communicator of their {mesh=A} axis: MPI for CPU tensors,
 * NCCL for GPU ones (whatever backend the communicator has). An all_gather or a
 * reduce_scatter along a dim other than the leading one rearranges the blocks locally
 * (kn_device_memcpy_2d), so it works on any device. `axes` is copied (borrowed comms). */
typedef struct kn_tp_comms {
    kn_comm *axes[KN_MESH_AXES];
} kn_tp_comms;
void kn_tp_collectives(kn_tp_comms *t, kn_collectives *out);

/* A tensor-parallel trainer around a kn_trainer (core/dist/tp_train.c): the trainer's model
 * (the full one, initialized like one process's, or loaded from a checkpoint: every rank
 * starts from the same values) and its optimizer state (and step count) are cut into this
 * rank's shards (kn_place_scatter, Megatron's kn_place_gpt_param; the
 * token embedding replicated when the vocabulary does not split), its
 * joint graph becomes the rank's local graph (kn_place_graph along KN_MESH_TP), compiled on
 * the trainer's device with the trainer's pass list and mode, its value collectives run
 * over `comm` (kn_tp_collectives); flags are the pass's (KN_PLACE_SEQUENCE_PARALLEL: Megatron's
 * sequence parallelism). The step is the trainer's step runner's (kiln/step.h) with this
 * state's hooks (kn_tp_new sets them; kn_tp_free takes them back): every tp rank runs the
 * local program on the same rows, the loss comes out R; the gradients land in a local slab
 * laid out like the model's (matrices first, so weight decay covers the same parameters);
 * the clip's global norm counts a replicated parameter once and sums the sharded ones'
 * squares over the ranks; the optimizer updates the local shards (AdamW and SGD are
 * elementwise, so that is the one-process update). A loss scale (fp16: the trainer's,
 * kn_trainer_set_loss_scale, set before kn_tp_new) is the runner's: its overflow decision is
 * one for the mesh (the norm summed over tp, the flag over dp), a skipped step leaves every
 * shard and its state as they were. kn_tp_gather_state puts the full parameters and
 * optimizer state back into the trainer's model and optimizer (checkpoints, evaluation, the
 * sample). */
typedef struct kn_tp {
    kn_comm *comm;           /* borrowed: the tp axis */
    kn_trainer *tr;          /* borrowed */
    int parts, rank;
    kn_place_result placed;  /* owned: the pass's result (the local graph, its placements) */
    kn_tp_comms comms;
    kn_collectives coll;
    kn_program *prog;        /* owned: the local joint graph compiled */
    int np;                  /* the model's parameters */
    kn_placement *place;     /* owned: each parameter's placement */
    kn_tp_split split;       /* kn_tp_gpt_param's context */
    int64_t *loff, *lnum;    /* owned: each parameter's offset and size in the local slab */
    int64_t n, n_decay;      /* floats in the local slab; the decayed ones first */
    kn_tensor *params, *grads, *state; /* owned, on the trainer's device: the local slabs */
    kn_tensor **pviews, **gviews;      /* owned: views of them shaped like the local parameters */
    kn_tensor *x, *y;        /* owned, on the device: the batch, i32 [B, T] */
    kn_optim opt;            /* over the local slab */
    kn_comm *dp;             /* borrowed, NULL: none; the data-parallel axis (kn_tp_set_dp) */
    int accum;               /* micro-batches per step (kn_tp_set_accum; 0 or 1: one) */
    bool zero1;              /* the optimizer state sharded over dp (kn_tp_set_zero1): this rank
                              * keeps (and updates) local slab [zlo, zhi) only */
    int64_t zlo, zhi;
    kn_tensor *acc;          /* owned, accum > 1: the micro-batches' gradients summed (local slab) */
    bool scaled;             /* the local graph differentiates loss x "loss_scale" (fp16) */
} kn_tp;
kn_status kn_tp_new(kn_tp *t, kn_comm *comm, kn_trainer *tr, unsigned flags);
/* Compose with data parallelism (a dp x tp mesh): the dp axis's ranks each take their
 * equal share of the global batch (the trainer's B rows: rows [dp_rank B, ...)); the local
 * gradient slab is averaged over dp (one all-reduce, before the clip), and so is the loss. */
kn_status kn_tp_set_dp(kn_tp *t, kn_comm *dp);
/* Gradient accumulation (--accum): each step runs the local program on accum micro-batches
 * of the trainer's B rows (dp group g: micro-batches g accum .. g accum + accum - 1 of the
 * global batch), their gradients summed in a local slab of their own and averaged, the
 * loss too, before the dp average and the clip: the one process's step on the same global
 * batch. */
kn_status kn_tp_set_accum(kn_tp *t, int accum);
/* ZeRO-1 on the dp axis of a dp x tp mesh (after kn_tp_set_dp, before the first step):
 * the local slab cut into dp nearly equal ranges, dp rank r keeping the
 * optimizer state of range r only (1/dp of it, taken from the local state: a resumed run's
 * continues) and updating those parameters, then the
 * ranges all-gathered over dp. The gradients are still all-reduced over dp (each rank's
 * norm needs the whole local slab). kn_tp_gather_state gathers the state back. */
kn_status kn_tp_set_zero1(kn_tp *t);
/* One step on the global batch x, y (dp x accum x the trainer's B rows of T tokens, the
 * same on every rank) through the trainer's step runner; *loss the mean loss, *gnorm (may
 * be NULL) the global gradient norm; the trainer's `skipped` says whether a loss-scale
 * overflow (on any rank of the mesh) skipped the update. */
kn_status kn_tp_step(kn_tp *t, const int32_t *x, const int32_t *y, double lr, double *loss, double *gnorm);
/* Every rank's shards gathered into the trainer's model slab and optimizer state (and its
 * step count), on every rank. */
kn_status kn_tp_gather_state(kn_tp *t);
void kn_tp_free(kn_tp *t);
/* ---------------------------------------------------------------- pipeline parallelism
 *
 * p ranks (the pp axis of the mesh, mesh axis 2) hold p*v stages of consecutive blocks of
 * the GPT (core/dist/pp.c): rank r holds chunks c = 0..v-1, model stage c*p + r (v = 1
 * unless the schedule is interleaved). Stage 0 also holds the embeddings (wte, wpe), the
 * last stage ln_f and the logits tied to wte, and the loss: wte lives on both ends, and
 * their gradients are summed between those two ranks before the update (Megatron's
 * embedding group), so both copies stay equal. Each stage is two programs compiled from
 * the model's pieces (kn_gpt_build_part) and autograd: its forward (a recv of the previous
 * stage's activation, or idx, in; a send of its activation, or the loss, out; plus the
 * activations its backward reads, which the runner stashes per micro-batch) and its
 * backward (a recv of its output's gradient in, a send of its input's gradient out, plus
 * its parameters' gradients). The send and recv are IR ops ({mesh=2, parts=p, peer}),
 * run by this rank's context over the pp communicator: a send copies its tensor and
 * completes later (MPI isend / NCCL send), a recv blocks. One optimizer step runs the
 * rank's actions of kn_pp_schedule (kiln/pipeline.h) through the step runner (kiln/step.h:
 * the runner's `grads` hook), sums the parameters' gradients over the micro-batches, and
 * clips by the norm over every stage (each parameter counted once). */

typedef struct kn_pp_config {
    kn_pp_kind schedule;   /* gpipe, 1f1b, interleaved */
    int micro;             /* m: micro-batches per step (>= 1) */
    int chunks;            /* v: chunks per rank; 0: implied (2 for interleaved, else 1) */
    int accum;             /* rounds of the schedule per step, gradients summed (--accum); 0: 1 */
    kn_comm *tp;           /* borrowed, NULL: none; the tensor-parallel axis (a tp x pp mesh): every
                            * stage's graph is placed along it (Megatron's split, kn_place_graph,
                            * mesh axis 1) before it is cut into forward and backward */
    unsigned tp_flags;     /* the placement pass's flags with tp (KN_PLACE_SEQUENCE_PARALLEL: --sp) */
    bool remat_selective;  /* --remat selective: the cut recomputes in a stage's backward the forward
                            * values kn_remat_selective calls cheap (elementwise, views, layernorm)
                            * instead of stashing them; the stash holds their inputs */
} kn_pp_config;

/* One action of the last step, for the timeline: F or B of (micro, chunk), started at t0
 * (seconds from the step's common start, a barrier), its input there at t_ready (after
 * the recv; t0 when none), done at t1. Busy is [t_ready, t1); the rest idle. */
typedef struct kn_pp_record {
    int op, micro, chunk;  /* op: KN_PP_FWD or KN_PP_BWD */
    double t0, t_ready, t1;
    double t_sent;         /* when its send left (after its compute; t1 when it sends nothing) */
} kn_pp_record;

typedef struct kn_pp_stage kn_pp_stage; /* pp.c */

typedef struct kn_pp {
    kn_comm *comm;           /* borrowed: the pp axis (this rank's index: comm->rank) */
    kn_comm **link;          /* owned, 2 p: the axis again, link[d p + s] carrying direction d's
                              * messages (0 activations, 1 gradients) sent by rank s: each
                              * communicator then holds one kind of message from one sender, sent
                              * and received in the same order, and a rank's sends and receives
                              * never share one (NCCL runs a communicator's operations in order on
                              * its stream: a send waiting for its receiver there would hold up
                              * a receive queued behind it) */
    kn_comm *embed;          /* owned: ranks 0 and p-1 (the tied wte's group); NULL elsewhere and
                              * for p = 1 */
    kn_comm *dp;             /* borrowed, NULL: none; the data-parallel axis (kn_pp_set_dp): this
                              * pipeline is replica dp->rank of dp->size */
    kn_comm *tp;             /* borrowed, NULL: none; the tensor-parallel axis (kn_pp_config.tp) */
    int tp_parts, tp_rank;   /* its size and this rank's index (1 and 0 without one) */
    kn_tp_split split;       /* kn_tp_gpt_param's context: each parameter's placement along tp */
    kn_tp_comms tpc;         /* the stages' all_reduce / all_gather / reduce_scatter run over tp */
    kn_placement *place;     /* owned: per parameter its placement along tp (R without tp) */
    kn_param_info *linfo;    /* owned: per parameter its local layout: the tp shard's shape and size,
                              * offsets in the model's order (the model's own without tp) */
    int64_t ln, ln_decay;    /* floats of that layout; the decayed ones first */
    int tp_all_reduce, tp_all_gather, tp_reduce_scatter; /* the conversions the placement pass put in
                              * this rank's stages */
    kn_trainer *tr;          /* borrowed: its batch is one micro-batch */
    kn_pp_config cfg;        /* chunks and accum made explicit */
    int p, rank, v, stages;  /* stages = p * v */
    int round;               /* the schedule's round now running (0 .. accum-1) */
    bool scaled;             /* the stages differentiate loss x "loss_scale" (the trainer's, at
                              * kn_pp_new: fp16's loss scaling) */
    kn_pp_stage *stage;      /* owned: v, chunk c at [c] */
    kn_pp_action *actions;   /* owned: this rank's schedule */
    int nactions;
    /* the parameters this rank owns: contiguous slab ranges, each with its optimizer. They
     * live in this rank's own slabs (the trainer's device), range k at [loff[k], loff[k] +
     * hi[k] - lo[k]): `held` floats of parameters, as many of gradients, the optimizer's
     * state per range. The trainer's whole-model slabs (parameters, gradients, optimizer
     * state, low copies) are freed while the steps run; kn_pp_gather makes them again. */
    int nranges;
    int64_t *lo, *hi;        /* owned: slab offsets */
    int64_t *loff;           /* owned: each range's offset in the local slabs */
    int64_t held;            /* floats of parameters this rank holds */
    kn_tensor *lparam, *lgrad;   /* owned: f32 [held] each, on the trainer's device */
    kn_tensor **lview, **lgview; /* owned: per parameter a view of lparam / lgrad (NULL: not held) */
    kn_dtype low_dt;         /* the weights' low copies the stages read (f32: none) */
    kn_tensor *llow;         /* owned: low_dt [held], rounded from lparam (NULL: none) */
    kn_tensor **llow_view;   /* owned: per parameter a view of llow (NULL: not held) */
    bool low_fresh;          /* llow is lparam rounded (cleared by every update) */
    bool full;               /* the trainer's whole-model slabs exist (after kn_pp_gather) */
    kn_optim *opt;           /* owned: one per range (the trainer's config, its step) */
    kn_tensor **state;       /* owned: per range its optimizer state on the trainer's device */
    bool *owned;             /* owned: per parameter, this rank holds it */
    bool zero1;              /* the optimizer state sharded over dp (kn_pp_set_zero1): this rank
                              * updates local slab [zlo, zhi) only; range k's optimizer and state
                              * then cover [loff[k] + zoff[k], + opt[k].n) of the local slab */
    int64_t zlo, zhi;
    int64_t *zoff;           /* owned (ZeRO-1): per range, where its updated part starts in it */
    /* stashed activations: a slot per (micro, chunk) between its F and its B */
    struct kn_pp_slot *slots;
    int nslots;
    int stash_alive, stash_peak;      /* slots in use now / at the most in the last step */
    int64_t stash_bytes, stash_peak_bytes;
    /* the last step */
    kn_pp_record *events;     /* owned: nactions */
    double t_step0;
    double loss_sum;         /* the last stage's micro-batch losses summed (this rank) */
    double t_ready;          /* set by a recv: when its data arrived */
    double t_sent;           /* set by a send: when it left */
    bool recv_seen;
    bool sent;               /* the action's program ran its send */
    struct kn_pp_sends *sends;   /* owned: sends in flight */
    double test_sleep[2];    /* a test hook (seconds, 0: none): every forward [0] and backward [1]
                              * also sleeps this long (before its send, or after its program when
                              * it sends nothing), so a step's timing is the schedule's and not the
                              * loaded machine's (tests/dist/test_pp.c checks the bubble) */
} kn_pp;

/* The checks a pipeline makes before anything runs, the same on every rank: KN_ERR_ARG with
 * a message naming the fix for: ranks != p, p < 1, layers not divisible into p*v stages, m
 * fewer than p (1f1b, interleaved), a global batch not divisible by m, interleaved with m
 * not a multiple of p or v < 2, gpipe/1f1b with v != 1. */
kn_status kn_pp_check(const kn_gpt_config *g, int p, int ranks, int global_batch, const kn_pp_config *c);
/* Set up on communicator c (the pp axis: p = c->size): the stages of this rank, their
 * programs, the schedule, the owned ranges and their optimizers, and the trainer's step
 * runner's hooks (kn_step_set_comm: from now on kn_pp_step takes the steps). The trainer's
 * batch must be one micro-batch (global batch / (m accum) rows). A loss scale (fp16), set on
 * the trainer before, is differentiated by the last stage and agreed by the step runner
 * (an overflow on any stage's rank skips the step on all: the norm is summed over pp, the
 * overflow flag over dp).
 * Every rank's parameters are made rank 0's; this rank's are copied into its own slabs
 * (kn_pp.lparam) and the trainer's whole-model slabs freed (model->p.slab on the CPU, the
 * device copies on a GPU; the gradient and optimizer-state slabs; the low copies): the
 * trainer is not stepped on its own after this, and its parameters are read only after
 * kn_pp_gather. With cfg->tp (a tp x pp mesh; c is then the pp axis of this rank's tp and dp
 * coordinates) every stage's joint graph is placed along tp before it is cut (Megatron's
 * split; KN_ERR_ARG when the heads or the width do not split, kn_mesh_check_gpt's message),
 * the rank's slabs hold its shards (kn_pp.linfo's layout), the tied wte's gradients are
 * summed per tp coordinate and the norm over tp and pp. */
kn_status kn_pp_new(kn_pp *pp, kn_comm *c, kn_trainer *tr, const kn_pp_config *cfg);
void kn_pp_free(kn_pp *pp);
/* Compose with data parallelism (a dp x pp mesh): call after kn_pp_new, before the first
 * step, on every rank; dp is the axis of the ranks holding the same stages in the other
 * pipelines (NULL or size 1: none). Each pipeline then takes its equal share of the global
 * batch (replica d: micro-batches d m .. d m + m - 1 of the global batch's d_size m), and
 * after its schedule every stage's gradients are summed over dp (one all-reduce of the
 * rank's gradient slab) before the clip, so the update is the one process's on the whole
 * batch; the loss is averaged over dp. Every replica is made dp rank 0's (parameters and
 * optimizer state). Collective over dp. */
kn_status kn_pp_set_dp(kn_pp *pp, kn_comm *dp);
/* ZeRO-1 on the dp axis of a dp x pp (or dp x tp x pp) mesh: after kn_pp_set_dp (with a dp
 * axis), before the first step, on every rank. The rank's local slab (kn_pp.held floats, its
 * ranges one after the other) is cut into dp ranges (kn_dp_shard_ranges); dp rank r keeps
 * the optimizer state of range r only (cut from its ranges' state: a resumed run's
 * continues), updates those parameters, and the ranges are all-gathered over dp after the
 * update. The gradients are still all-reduced over dp (the clip needs the whole slab's
 * norm). kn_pp_gather gathers the state back first. KN_ERR_ARG without a dp axis. */
kn_status kn_pp_set_zero1(kn_pp *pp);
/* One optimizer step on the global batch x, y (global_batch x T each; global_batch = dp
 * size x accum x m x the trainer's rows; pipeline d takes rows of micro-batches d accum m
 * .. (d + 1) accum m - 1, round r its r-th m of them): the schedule's forwards and
 * backwards (accum rounds), the tied gradient summed, the pipelines' gradients summed, the
 * clip over every stage, the update of this rank's parameters (skipped on every rank when
 * a loss scale overflowed anywhere). *loss: the global batch's mean loss on every rank. */
kn_status kn_pp_step(kn_pp *pp, const int32_t *x, const int32_t *y, int global_batch, double lr, double *loss,
                     double *gnorm);
/* Every rank's parameters and optimizer state brought to every rank (each range broadcast
 * by its owner) into the trainer's slabs, made again for it (the parameters, the optimizer
 * state, the low copies; not the gradients), the evaluation program bound to them: before
 * evaluation, sampling, a checkpoint, or a comparison. The next kn_pp_step frees them again
 * (the local slabs are what trains: a change made to the gathered slab is not seen).
 * Collective over the pp axis (and the tp axis: the shards put together, kn_place_gather). */
kn_status kn_pp_gather(kn_pp *pp);
/* The last step's timeline of every rank, gathered (collective); rank 0 writes it to path
 * as TSV ("rank op micro chunk t0 t_ready t1 idle", seconds; idle: the wait before t_ready since
 * the rank's previous action ended) when path is not NULL. *bubble (may
 * be NULL): 1 - busy / (p * makespan) over every rank. */
kn_status kn_pp_timeline(kn_pp *pp, const char *path, double *bubble);
/* Every rank's figures (collective): out[KN_PP_STATS r + k] for rank r < p: k = 0 its stash at
 * the peak of the last step (micro-batch chunks alive), 1 their bytes, 2 the parameters its
 * stages read, differentiate and update (floats: kn_pp.held), then the bytes its own slabs
 * allocated: 3 parameters, 4 gradients, 5 optimizer state, 6 the low copies (0: none). */
enum { KN_PP_STATS = 7 };
kn_status kn_pp_rank_stats(kn_pp *pp, double *out);
/* This rank's stages as text (kiln/ir.h's format, parseable): for each chunk a comment naming
 * the model stage and its blocks, its forward graph, its backward graph. */
kn_status kn_pp_print(FILE *f, const kn_pp *pp);

/* ---------------------------------------------------------------- lab 10 units */
/* Written by the student in labs/lab10-dataparallel/ (the staff's reference units are
 * linked for every other lab); the core calls them: DDP's `--allreduce ring`, ZeRO's
 * shards, every strategy's buckets, `kiln bench-comm`. A skeleton returns
 * KN_ERR_NOT_IMPLEMENTED. */

/* ring.c. kiln's own all-reduce (sum, in place on buf) over send and recv: the buffer is
 * cut into `size` chunks (kn_ring_chunk); in size-1 reduce-scatter steps each rank sends one
 * chunk to the next rank and adds the one it receives from the previous, after which rank r
 * holds the full sum of chunk (r+1) % size; in size-1 all-gather steps the summed chunks
 * travel once more around the ring. Each rank sends 2 (size-1)/size of the buffer:
 * bandwidth-optimal. `scratch` holds the largest chunk. f32 and f64. */
kn_status kn_ring_all_reduce(kn_comm *c, void *buf, int64_t count, kn_dtype dt, void *scratch);
/* Chunk i of n elements cut into `parts` nearly equal chunks (the first n % parts one
 * larger): [*lo, *hi). */
kn_status kn_ring_chunk(int64_t n, int parts, int i, int64_t *lo, int64_t *hi);
/* Which chunk rank `rank` sends at reduce-scatter step `step` of a ring of `size` ranks:
 * *chunk = (rank - step) mod size; it receives chunk (rank - 1 - step) mod size from its
 * left neighbour. */
kn_status kn_ring_send_chunk(int rank, int size, int step, int *chunk);

/* shard.c. ZeRO's shard ranges: n elements over `parts` ranks, nearly equal (the ring's
 * chunks): rank r owns [lo[r], lo[r+1]); lo has parts+1 entries. */
kn_status kn_dp_shard_ranges(int64_t n, int parts, int64_t *lo);

/* buckets.c, lab 10's kn_dp_buckets, is declared with the slab layout it works on in
 * kiln/passes.h (the ddp pass takes its buckets too). */

#ifdef __cplusplus
}
#endif

#endif /* KILN_DIST_H */
