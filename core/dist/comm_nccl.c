/* comm_nccl.c — the NCCL backend of the communicator table: collectives on GPU buffers.
 *
 * One rank per GPU (NCCL refuses two ranks on one GPU): the ranks of a host find each
 * other with MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), and local rank i takes GPU i.
 * Rank 0 makes the NCCL unique id and broadcasts it over MPI. Every operation is enqueued
 * on the communicator's own stream followed by an event, and "finished?" is cudaEventQuery
 * plus ncclCommGetAsyncError, so the host never waits inside NCCL for a peer. The
 * communicator is blocking by default (comm_blocking says why; KILN_NCCL_NONBLOCKING=1
 * makes it non-blocking: then a call may answer ncclInProgress and settle() polls). On a
 * timeout the generic wait (comm.c) calls ncclCommAbort here before MPI_Abort.
 *
 * Every CUDA and NCCL call goes through a checking macro naming the call, file:line and
 * the library's message. Built only with CUDA, nccl.h and MPI (KN_HAVE_NCCL). */
#ifdef KN_HAVE_NCCL
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln/dist.h"
#include "kiln/storage.h" /* kn_cuda_stream: the compute stream (a capture's, while one runs) */

typedef struct nccl_ctx {
    ncclComm_t comm;
    cudaStream_t stream;
    int device;
    float *one;          /* a device float for the barrier */
    cudaEvent_t ready;   /* recorded on the compute stream before each operation */
} nccl_ctx;

#define KN_CUDA_CHECK(call)                                                                                   \
    do {                                                                                                      \
        cudaError_t kn_e_ = (call);                                                                           \
        if (kn_e_ != cudaSuccess)                                                                             \
            return kn_error(KN_ERR_DEVICE, "%s failed at %s:%d: %s", #call, __FILE__, __LINE__,              \
                            cudaGetErrorString(kn_e_));                                                       \
    } while (0)

#define KN_NCCL_CHECK(call)                                                                                   \
    do {                                                                                                      \
        ncclResult_t kn_n_ = (call);                                                                          \
        if (kn_n_ != ncclSuccess && kn_n_ != ncclInProgress)                                                  \
            return kn_error(KN_ERR_DEVICE, "%s failed at %s:%d: %s (%s)", #call, __FILE__, __LINE__,         \
                            ncclGetErrorString(kn_n_), ncclGetLastError(NULL));                               \
    } while (0)

#define KN_MPI_CHECK(call)                                                                                    \
    do {                                                                                                      \
        int kn_m_ = (call);                                                                                   \
        if (kn_m_ != MPI_SUCCESS) {                                                                           \
            char kn_s_[MPI_MAX_ERROR_STRING] = "";                                                            \
            int kn_l_ = 0;                                                                                    \
            MPI_Error_string(kn_m_, kn_s_, &kn_l_);                                                           \
            return kn_error(KN_ERR_DEVICE, "%s failed at %s:%d: %s", #call, __FILE__, __LINE__, kn_s_);      \
        }                                                                                                     \
    } while (0)

/* A non-blocking communicator may answer ncclInProgress: wait (polling, bounded) until the
 * call has really been issued. The first 5 ms spin (sched_yield), as kn_comm_wait's do: a
 * 1 us nanosleep lasts about 55 us (timer slack), longer than a whole 4 MB all-reduce on
 * NVLink, and paying it on every enqueue made small collectives a third of NCCL's speed. */
static kn_status settle(ncclComm_t comm, const char *what) {
    double t0 = kn_time_now();
    struct timespec nap = {0, 1000};
    for (;;) {
        ncclResult_t st = ncclSuccess;
        KN_NCCL_CHECK(ncclCommGetAsyncError(comm, &st));
        if (st == ncclSuccess) return KN_OK;
        if (st != ncclInProgress)
            return kn_error(KN_ERR_DEVICE, "%s: NCCL: %s (%s)", what, ncclGetErrorString(st), ncclGetLastError(comm));
        double waited = kn_time_now() - t0;
        if (waited > 300) return kn_error(KN_ERR_DEVICE, "%s: NCCL still in progress after 300 s", what);
        if (waited < 5e-3) sched_yield();
        else nanosleep(&nap, NULL);
    }
}

/* Blocking unless KILN_NCCL_NONBLOCKING is set. Measured on 4 H100s (2026-11-27, kiln
 * bench-comm's "enqueue us" column): a non-blocking communicator hands every collective to
 * a background thread and answers ncclInProgress until it is issued, so each enqueue waited
 * 80-90 us, longer than a whole 1-4 MB all-reduce (a third of NCCL's speed at those sizes);
 * a blocking one issues it in the call, in 9-10 us, as PyTorch's default does. A stalled
 * peer is still found: the wait (comm.c) polls the operation's event against
 * KILN_COMM_TIMEOUT and aborts the communicator; what a blocking communicator gives up is
 * a guarantee that the enqueue itself never waits (NCCL connects peers lazily, at their
 * first operation). */
static int comm_blocking(void) { return getenv("KILN_NCCL_NONBLOCKING") ? 0 : 1; }

static kn_status nccl_type(const char *fn, kn_dtype dt, ncclDataType_t *out) {
    switch (dt) {
    case KN_DT_F32: *out = ncclFloat32; return KN_OK;
    case KN_DT_F64: *out = ncclFloat64; return KN_OK;
    case KN_DT_F16: *out = ncclFloat16; return KN_OK;
    case KN_DT_BF16: *out = ncclBfloat16; return KN_OK;
    case KN_DT_I32: *out = ncclInt32; return KN_OK;
    case KN_DT_I64: *out = ncclInt64; return KN_OK;
    case KN_DT_U8: *out = ncclUint8; return KN_OK;
    case KN_DT_BOOL:
    case KN_DT_COUNT: break;
    }
    return kn_error(KN_ERR_DTYPE, "%s: the NCCL backend cannot move %s", fn, kn_dtype_name(dt));
}

static kn_status ctx_finish(nccl_ctx *n, void **out) {
    KN_TRY(settle(n->comm, "ncclCommInitRankConfig"));
    KN_CUDA_CHECK(cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking));
    KN_CUDA_CHECK(cudaEventCreateWithFlags(&n->ready, cudaEventDisableTiming));
    KN_CUDA_CHECK(cudaMalloc((void **)&n->one, sizeof(float)));
    *out = n;
    return KN_OK;
}

static void nccl_free(void *ctx) {
    nccl_ctx *n = ctx;
    if (!n) return;
    cudaSetDevice(n->device);
    if (n->comm) {
        ncclCommFinalize(n->comm);
        (void)settle(n->comm, "ncclCommFinalize");
        ncclCommDestroy(n->comm);
    }
    if (n->one) cudaFree(n->one);
    if (n->stream) cudaStreamDestroy(n->stream);
    if (n->ready) cudaEventDestroy(n->ready);
    kn_free(n);
}

static kn_status nccl_world(void **out, int *rank, int *size) {
    int running = 0;
    MPI_Initialized(&running);
    if (!running) return kn_error(KN_ERR_ARG, "kn_comm_world(nccl): call kn_dist_init first (MPI carries NCCL's id)");
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1)
        return kn_error(KN_ERR_DEVICE, "kn_comm_world(nccl): NCCL was asked for, but this machine has no usable GPU "
                        "(use the mpi backend for CPU ranks)");
    MPI_Comm local;
    int lrank, lsize;
    KN_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, rank));
    KN_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, size));
    KN_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, *rank, MPI_INFO_NULL, &local));
    MPI_Comm_rank(local, &lrank);
    MPI_Comm_size(local, &lsize);
    MPI_Comm_free(&local);
    if (lsize > ndev)
        return kn_error(KN_ERR_DEVICE, "kn_comm_world(nccl): %d ranks on this host but %d GPU%s: NCCL needs one GPU "
                        "per rank (run at most %d ranks per host)", lsize, ndev, ndev == 1 ? "" : "s", ndev);
    nccl_ctx *n = kn_calloc(1, sizeof *n);
    if (!n) return kn_error(KN_ERR_OOM, "kn_comm_world(nccl): out of memory");
    n->device = lrank;
    kn_status st = KN_OK;
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (cudaSetDevice(n->device) != cudaSuccess)
        st = kn_error(KN_ERR_DEVICE, "kn_comm_world(nccl): cudaSetDevice(%d) failed", n->device);
    if (st == KN_OK && *rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) st = kn_error(KN_ERR_DEVICE, "ncclGetUniqueId: %s", ncclGetErrorString(r));
    }
    /* every rank takes part in the broadcast, even one that failed above, so none waits forever */
    int bad = st != KN_OK, any_bad = 0;
    if (MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS ||
        MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD) != MPI_SUCCESS)
        st = kn_error(KN_ERR_DEVICE, "kn_comm_world(nccl): broadcasting the NCCL id over MPI failed");
    else if (any_bad && st == KN_OK)
        st = kn_error(KN_ERR_DEVICE, "kn_comm_world(nccl): another rank could not set up its GPU");
    if (st == KN_OK) {
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        cfg.blocking = comm_blocking();
        ncclResult_t r = ncclCommInitRankConfig(&n->comm, *size, id, *rank, &cfg);
        if (r != ncclSuccess && r != ncclInProgress)
            st = kn_error(KN_ERR_DEVICE, "ncclCommInitRankConfig (rank %d of %d, GPU %d) failed: %s", *rank, *size,
                          n->device, ncclGetErrorString(r));
    }
    if (st == KN_OK) st = ctx_finish(n, out);
    if (st != KN_OK) nccl_free(n);
    return st;
}

static kn_status nccl_split(void *ctx, int color, int key, void **out, int *rank, int *size) {
    nccl_ctx *p = ctx, *n = kn_calloc(1, sizeof *n);
    if (!n) return kn_error(KN_ERR_OOM, "kn_comm_split(nccl): out of memory");
    n->device = p->device;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = comm_blocking();
    kn_status st = KN_OK;
    ncclResult_t r = ncclCommSplit(p->comm, color, key, &n->comm, &cfg);
    if (r != ncclSuccess && r != ncclInProgress)
        st = kn_error(KN_ERR_DEVICE, "ncclCommSplit(color %d, key %d) failed: %s", color, key, ncclGetErrorString(r));
    if (st == KN_OK) st = settle(p->comm, "ncclCommSplit");
    if (st == KN_OK && (ncclCommUserRank(n->comm, rank) != ncclSuccess || ncclCommCount(n->comm, size) != ncclSuccess))
        st = kn_error(KN_ERR_DEVICE, "kn_comm_split(nccl): cannot read the new communicator's rank");
    if (st == KN_OK) st = ctx_finish(n, out);
    if (st != KN_OK) nccl_free(n);
    return st;
}

/* Before enqueueing: the communicator's stream is non-blocking, so it does not wait for
 * kiln's kernels on the legacy default stream by itself. Every operation first waits for
 * what that stream has queued so far (the gradient a bucket sends was written there a
 * moment ago), without blocking the host: an event recorded there, waited on here. */
static kn_status after_compute(nccl_ctx *n) {
    KN_CUDA_CHECK(cudaSetDevice(n->device));
    KN_CUDA_CHECK(cudaEventRecord(n->ready, (cudaStream_t)kn_cuda_stream()));
    KN_CUDA_CHECK(cudaStreamWaitEvent(n->stream, n->ready, 0));
    return KN_OK;
}

/* After enqueueing: wait until NCCL has issued it, then mark its end with an event. */
static kn_status enqueued(nccl_ctx *n, kn_comm_req *r, const char *what) {
    KN_TRY(settle(n->comm, what));
    cudaEvent_t ev;
    KN_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    r->h[0] = ev;
    KN_CUDA_CHECK(cudaEventRecord(ev, n->stream));
    return KN_OK;
}

static kn_status nccl_isend(void *ctx, const void *buf, int64_t count, kn_dtype dt, int peer, kn_comm_req *r) {
    nccl_ctx *n = ctx;
    ncclDataType_t t = ncclFloat32;
    KN_TRY(nccl_type("kn_comm_isend", dt, &t));
    KN_TRY(after_compute(n));
    KN_NCCL_CHECK(ncclSend(buf, (size_t)count, t, peer, n->comm, n->stream));
    return enqueued(n, r, "ncclSend");
}

static kn_status nccl_irecv(void *ctx, void *buf, int64_t count, kn_dtype dt, int peer, kn_comm_req *r) {
    nccl_ctx *n = ctx;
    ncclDataType_t t = ncclFloat32;
    KN_TRY(nccl_type("kn_comm_irecv", dt, &t));
    KN_TRY(after_compute(n));
    KN_NCCL_CHECK(ncclRecv(buf, (size_t)count, t, peer, n->comm, n->stream));
    return enqueued(n, r, "ncclRecv");
}

static kn_status nccl_iall_reduce(void *ctx, const void *send, void *recv, int64_t count, kn_dtype dt,
                                  kn_comm_req *r) {
    nccl_ctx *n = ctx;
    ncclDataType_t t = ncclFloat32;
    KN_TRY(nccl_type("kn_comm_iall_reduce", dt, &t));
    KN_TRY(after_compute(n));
    KN_NCCL_CHECK(ncclAllReduce(send, recv, (size_t)count, t, ncclSum, n->comm, n->stream));
    return enqueued(n, r, "ncclAllReduce");
}

static bool all_equal(const int64_t *counts, int size) {
    for (int i = 1; i < size; i++)
        if (counts[i] != counts[0]) return false;
    return true;
}

/* Unequal blocks: one ncclReduce per root (or ncclBroadcast per root) in a group. */
static kn_status nccl_ireduce_scatter(void *ctx, const void *send, void *recv, const int64_t *counts, kn_dtype dt,
                                      kn_comm_req *r) {
    nccl_ctx *n = ctx;
    ncclDataType_t t = ncclFloat32;
    int size;
    KN_TRY(nccl_type("kn_comm_ireduce_scatter", dt, &t));
    KN_NCCL_CHECK(ncclCommCount(n->comm, &size));
    KN_TRY(after_compute(n));
    if (all_equal(counts, size)) {
        KN_NCCL_CHECK(ncclReduceScatter(send, recv, (size_t)counts[0], t, ncclSum, n->comm, n->stream));
    } else {
        size_t es = kn_dtype_size(dt), off = 0;
        KN_NCCL_CHECK(ncclGroupStart());
        for (int i = 0; i < size; off += (size_t)counts[i], i++)
            KN_NCCL_CHECK(ncclReduce((const char *)send + off * es, recv, (size_t)counts[i], t, ncclSum, i, n->comm,
                                     n->stream));
        KN_NCCL_CHECK(ncclGroupEnd());
    }
    return enqueued(n, r, "ncclReduceScatter");
}

static kn_status nccl_iall_gather(void *ctx, const void *send, void *recv, const int64_t *counts, kn_dtype dt,
                                  kn_comm_req *r) {
    nccl_ctx *n = ctx;
    ncclDataType_t t = ncclFloat32;
    int size, rank;
    KN_TRY(nccl_type("kn_comm_iall_gather", dt, &t));
    KN_NCCL_CHECK(ncclCommCount(n->comm, &size));
    KN_NCCL_CHECK(ncclCommUserRank(n->comm, &rank));
    KN_TRY(after_compute(n));
    if (all_equal(counts, size)) {
        KN_NCCL_CHECK(ncclAllGather(send, recv, (size_t)counts[0], t, n->comm, n->stream));
    } else {
        size_t es = kn_dtype_size(dt), off = 0;
        KN_NCCL_CHECK(ncclGroupStart());
        for (int i = 0; i < size; off += (size_t)counts[i], i++)
            KN_NCCL_CHECK(ncclBroadcast(i == rank ? send : NULL, (char *)recv + off * es, (size_t)counts[i], t, i,
                                        n->comm, n->stream));
        KN_NCCL_CHECK(ncclGroupEnd());
    }
    return enqueued(n, r, "ncclAllGather");
}

static kn_status nccl_ibroadcast(void *ctx, void *buf, int64_t count, kn_dtype dt, int root, kn_comm_req *r) {
    nccl_ctx *n = ctx;
    ncclDataType_t t = ncclFloat32;
    KN_TRY(nccl_type("kn_comm_ibroadcast", dt, &t));
    KN_TRY(after_compute(n));
    KN_NCCL_CHECK(ncclBroadcast(buf, buf, (size_t)count, t, root, n->comm, n->stream));
    return enqueued(n, r, "ncclBroadcast");
}

static kn_status nccl_ibarrier(void *ctx, kn_comm_req *r) {
    nccl_ctx *n = ctx;
    KN_TRY(after_compute(n));
    KN_NCCL_CHECK(ncclAllReduce(n->one, n->one, 1, ncclFloat32, ncclSum, n->comm, n->stream));
    return enqueued(n, r, "barrier");
}

static kn_status nccl_test(void *ctx, kn_comm_req *r, bool *done) {
    nccl_ctx *n = ctx;
    if (!r->h[0]) { *done = true; return KN_OK; } /* a fence made during a capture */
    cudaError_t e = cudaEventQuery((cudaEvent_t)r->h[0]);
    if (e == cudaSuccess) { *done = true; return KN_OK; }
    if (e != cudaErrorNotReady)
        return kn_error(KN_ERR_DEVICE, "cudaEventQuery (%s #%lld) failed: %s", kn_comm_op_name(r->op),
                        (long long)r->seq, cudaGetErrorString(e));
    ncclResult_t st = ncclSuccess;
    KN_NCCL_CHECK(ncclCommGetAsyncError(n->comm, &st));
    if (st != ncclSuccess && st != ncclInProgress)
        return kn_error(KN_ERR_DEVICE, "NCCL %s #%lld failed: %s (%s)", kn_comm_op_name(r->op), (long long)r->seq,
                        ncclGetErrorString(st), ncclGetLastError(n->comm));
    *done = false;
    return KN_OK;
}

/* The compute stream waits for the operation's end event; the host goes on. */
static kn_status nccl_device_wait(void *ctx, kn_comm_req *r, bool *keep) {
    nccl_ctx *n = ctx;
    KN_CUDA_CHECK(cudaSetDevice(n->device));
    KN_CUDA_CHECK(cudaStreamWaitEvent((cudaStream_t)kn_cuda_stream(), (cudaEvent_t)r->h[0], 0));
    /* in a capture the record and the wait are an edge of the graph: the event is not
     * recorded, and querying it would be an error (cudaErrorCapturedEvent) */
    *keep = !kn_cuda_capturing();
    return KN_OK;
}

/* An event on the compute stream. During a capture there is nothing to wait for: the
 * fence is complete at once (the launch's fence is made after the launch). */
static kn_status nccl_ifence(void *ctx, kn_comm_req *r) {
    nccl_ctx *n = ctx;
    if (kn_cuda_capturing()) return KN_OK;
    KN_CUDA_CHECK(cudaSetDevice(n->device));
    cudaEvent_t ev;
    KN_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    r->h[0] = ev;
    KN_CUDA_CHECK(cudaEventRecord(ev, (cudaStream_t)kn_cuda_stream()));
    return KN_OK;
}

static void nccl_release(void *ctx, kn_comm_req *r) {
    (void)ctx;
    if (r->h[0]) cudaEventDestroy((cudaEvent_t)r->h[0]);
    r->h[0] = NULL;
}

static void nccl_abort(void *ctx) {
    nccl_ctx *n = ctx;
    if (n && n->comm) ncclCommAbort(n->comm);
    if (n) n->comm = NULL;
}

const kn_comm_backend kn_comm_nccl_backend = {
    .name = "nccl", .type = KN_COMM_NCCL, .world = nccl_world, .split = nccl_split, .free = nccl_free,
    .isend = nccl_isend, .irecv = nccl_irecv, .iall_reduce = nccl_iall_reduce,
    .ireduce_scatter = nccl_ireduce_scatter, .iall_gather = nccl_iall_gather, .ibroadcast = nccl_ibroadcast,
    .ibarrier = nccl_ibarrier, .test = nccl_test, .device_wait = nccl_device_wait, .ifence = nccl_ifence,
    .release = nccl_release, .abort = nccl_abort,
};
#else
/* Built without NCCL (no CUDA, nccl.h or MPI): the table has no NCCL entry (comm.c). */
typedef int kn_comm_nccl_unused;
#endif
