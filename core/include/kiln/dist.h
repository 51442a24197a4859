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
 * counts[r] elements at offset counts[0] + ... + counts[r-1] of the full buffer.
 *
 * The mesh's other axes, tensor and pipeline parallelism (kn_mesh, kn_tp, kn_pp), are
 * declared in kiln/mesh.h, which builds on this header. */
#ifndef KILN_DIST_H
#define KILN_DIST_H

#include "kiln/nn.h"
#include "kiln/passes.h"

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
