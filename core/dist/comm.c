/* comm.c — the communicator table and what every backend shares: argument checks,
 * sequence numbers, the polled wait with its deadline, blocking forms, sub-communicators
 * and the device mesh (kiln/dist.h).
 *
 * A backend only starts operations and answers "finished?". Waiting is done here, the same
 * way for all of them: poll, sleep 1 us, poll again. That keeps an oversubscribed machine
 * (4 ranks on 2 cores) responsive, because a sleeping rank gives its core to the rank it
 * is waiting for, and it gives every wait a deadline. Past it the rank says what it was
 * waiting for (which operation, its sequence number on the communicator, the label and
 * the size), aborts the backend and ends the job: a dead or stalled peer never leaves the
 * others hanging. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kiln/dist.h"

extern const kn_comm_backend kn_comm_mpi_backend;
#ifdef KN_HAVE_NCCL
extern const kn_comm_backend kn_comm_nccl_backend;
#endif

static const kn_comm_backend *const kn_comm_table[KN_COMM_TYPE_COUNT] = {
    [KN_COMM_MPI] = &kn_comm_mpi_backend,
#ifdef KN_HAVE_NCCL
    [KN_COMM_NCCL] = &kn_comm_nccl_backend,
#endif
};

const kn_comm_backend *kn_comm_backend_get(kn_comm_type type) {
    if ((int)type < 0 || type >= KN_COMM_TYPE_COUNT) return NULL;
    return kn_comm_table[type];
}

static const char *const kn_comm_op_names[KN_COP_COUNT] = {"send", "recv", "all_reduce", "reduce_scatter",
                                                           "all_gather", "broadcast", "barrier", "fence"};

const char *kn_comm_op_name(kn_comm_op op) {
    return (int)op >= 0 && op < KN_COP_COUNT ? kn_comm_op_names[op] : "?";
}

/* KILN_COMM_TIMEOUT in seconds (default 300). */
static double comm_timeout(void) {
    const char *s = getenv("KILN_COMM_TIMEOUT");
    char *end = NULL;
    double v = s ? strtod(s, &end) : 0;
    return s && end != s && v > 0 ? v : 300.0;
}

static kn_status comm_wrap(kn_comm **out, const kn_comm_backend *be, void *ctx, int rank, int size) {
    kn_comm *c = kn_calloc(1, sizeof *c);
    if (!c) {
        be->free(ctx);
        return kn_error(KN_ERR_OOM, "kn_comm: out of memory");
    }
    c->be = be;
    c->ctx = ctx;
    c->rank = rank;
    c->size = size;
    c->timeout = comm_timeout();
    *out = c;
    return KN_OK;
}

kn_status kn_comm_world(kn_comm **out, kn_comm_type type) {
    if (!out) return kn_error(KN_ERR_ARG, "kn_comm_world: out is NULL");
    const kn_comm_backend *be = kn_comm_backend_get(type);
    if (!be)
        return kn_error(KN_ERR_UNSUPPORTED, "kn_comm_world: the %s backend is not built in (%s)",
                        type == KN_COMM_NCCL ? "nccl" : "mpi",
                        type == KN_COMM_NCCL ? "needs CUDA, nccl.h and MPI at build time" : "needs mpicc at build time");
    void *ctx = NULL;
    int rank = 0, size = 1;
    KN_TRY(be->world(&ctx, &rank, &size));
    return comm_wrap(out, be, ctx, rank, size);
}

kn_status kn_comm_split(kn_comm *c, int color, int key, kn_comm **out) {
    if (!c || !out) return kn_error(KN_ERR_ARG, "kn_comm_split: NULL argument");
    if (color < 0) return kn_error(KN_ERR_ARG, "kn_comm_split: color %d: need >= 0", color);
    void *ctx = NULL;
    int rank = 0, size = 1;
    KN_TRY(c->be->split(c->ctx, color, key, &ctx, &rank, &size));
    return comm_wrap(out, c->be, ctx, rank, size);
}

void kn_comm_free(kn_comm *c) {
    if (!c) return;
    for (int i = 0; i < c->npending; i++) c->be->release(c->ctx, &c->pending[i]);
    kn_free(c->pending);
    c->be->free(c->ctx);
    kn_free(c);
}

kn_status kn_comm_mesh(kn_comm *c, int ndims, const int *dims, kn_comm **axes, int *coords) {
    if (!c || !dims || !axes) return kn_error(KN_ERR_ARG, "kn_comm_mesh: NULL argument");
    if (ndims < 1 || ndims > KN_MESH_MAX_DIMS)
        return kn_error(KN_ERR_ARG, "kn_comm_mesh: %d dimensions: need 1..%d", ndims, KN_MESH_MAX_DIMS);
    int64_t prod = 1;
    for (int a = 0; a < ndims; a++) {
        if (dims[a] < 1) return kn_error(KN_ERR_ARG, "kn_comm_mesh: dims[%d] = %d: need >= 1", a, dims[a]);
        prod *= dims[a];
    }
    if (prod != c->size)
        return kn_error(KN_ERR_ARG, "kn_comm_mesh: the mesh has %lld ranks, the communicator %d",
                        (long long)prod, c->size);
    int co[KN_MESH_MAX_DIMS];
    for (int a = ndims - 1, r = c->rank; a >= 0; a--) {
        co[a] = r % dims[a];
        r /= dims[a];
    }
    for (int a = 0; a < ndims; a++) axes[a] = NULL;
    for (int a = 0; a < ndims; a++) {
        /* color: the rank's coordinates with axis a zeroed, flattened; key: the coordinate on a */
        int color = 0;
        for (int b = 0; b < ndims; b++) color = color * dims[b] + (b == a ? 0 : co[b]);
        kn_status st = kn_comm_split(c, color, co[a], &axes[a]);
        if (st != KN_OK) {
            for (int b = 0; b < a; b++) { kn_comm_free(axes[b]); axes[b] = NULL; }
            return st;
        }
    }
    if (coords) memcpy(coords, co, sizeof(int) * (size_t)ndims);
    return KN_OK;
}

/* ---------------------------------------------------------------- starting operations */

static size_t bytes_of(int64_t count, kn_dtype dt) { return (size_t)count * kn_dtype_size(dt); }

static kn_status begin(kn_comm *c, kn_comm_op op, const char *what, size_t bytes, kn_comm_req *r) {
    if (!c || !r) return kn_error(KN_ERR_ARG, "kn_comm_%s: NULL communicator or request", kn_comm_op_name(op));
    memset(r, 0, sizeof *r);
    r->comm = c;
    r->op = op;
    r->seq = ++c->seq[op];
    r->bytes = bytes;
    snprintf(r->what, sizeof r->what, "%s", what ? what : "-");
    r->t_start = kn_time_now();
    return KN_OK;
}

static kn_status check_buf(const char *fn, const void *p, int64_t count, kn_dtype dt) {
    if (count < 0) return kn_error(KN_ERR_ARG, "%s: count %lld < 0", fn, (long long)count);
    if (count > 0 && !p) return kn_error(KN_ERR_ARG, "%s: NULL buffer for %lld elements", fn, (long long)count);
    if ((int)dt < 0 || dt >= KN_DT_COUNT) return kn_error(KN_ERR_DTYPE, "%s: invalid dtype %d", fn, (int)dt);
    return KN_OK;
}

static kn_status check_peer(const char *fn, const kn_comm *c, int peer) {
    if (peer < 0 || peer >= c->size)
        return kn_error(KN_ERR_ARG, "%s: peer %d outside [0, %d)", fn, peer, c->size);
    return KN_OK;
}

/* Mark r active after the backend accepted it. */
static kn_status started(kn_status st, kn_comm_req *r) {
    if (st == KN_OK) r->active = true;
    return st;
}

kn_status kn_comm_isend(kn_comm *c, const void *buf, int64_t count, kn_dtype dt, int peer, const char *what,
                        kn_comm_req *r) {
    KN_TRY(begin(c, KN_COP_SEND, what, bytes_of(count, dt), r));
    KN_TRY(check_buf("kn_comm_isend", buf, count, dt));
    KN_TRY(check_peer("kn_comm_isend", c, peer));
    return started(c->be->isend(c->ctx, buf, count, dt, peer, r), r);
}

kn_status kn_comm_irecv(kn_comm *c, void *buf, int64_t count, kn_dtype dt, int peer, const char *what,
                        kn_comm_req *r) {
    KN_TRY(begin(c, KN_COP_RECV, what, bytes_of(count, dt), r));
    KN_TRY(check_buf("kn_comm_irecv", buf, count, dt));
    KN_TRY(check_peer("kn_comm_irecv", c, peer));
    return started(c->be->irecv(c->ctx, buf, count, dt, peer, r), r);
}

kn_status kn_comm_iall_reduce(kn_comm *c, const void *send, void *recv, int64_t count, kn_dtype dt,
                              const char *what, kn_comm_req *r) {
    KN_TRY(begin(c, KN_COP_ALL_REDUCE, what, bytes_of(count, dt), r));
    KN_TRY(check_buf("kn_comm_iall_reduce", send, count, dt));
    KN_TRY(check_buf("kn_comm_iall_reduce", recv, count, dt));
    return started(c->be->iall_reduce(c->ctx, send, recv, count, dt, r), r);
}

/* counts must be size entries >= 0; *total gets their sum. */
static kn_status check_counts(const char *fn, const kn_comm *c, const int64_t *counts, int64_t *total) {
    if (!counts) return kn_error(KN_ERR_ARG, "%s: counts is NULL", fn);
    *total = 0;
    for (int i = 0; i < c->size; i++) {
        if (counts[i] < 0) return kn_error(KN_ERR_ARG, "%s: counts[%d] = %lld < 0", fn, i, (long long)counts[i]);
        *total += counts[i];
    }
    return KN_OK;
}

kn_status kn_comm_ireduce_scatter(kn_comm *c, const void *send, void *recv, const int64_t *counts, kn_dtype dt,
                                  const char *what, kn_comm_req *r) {
    int64_t total = 0;
    KN_TRY(begin(c, KN_COP_REDUCE_SCATTER, what, 0, r));
    KN_TRY(check_counts("kn_comm_ireduce_scatter", c, counts, &total));
    r->bytes = bytes_of(total, dt);
    KN_TRY(check_buf("kn_comm_ireduce_scatter", send, total, dt));
    KN_TRY(check_buf("kn_comm_ireduce_scatter", recv, counts[c->rank], dt));
    return started(c->be->ireduce_scatter(c->ctx, send, recv, counts, dt, r), r);
}

kn_status kn_comm_iall_gather(kn_comm *c, const void *send, void *recv, const int64_t *counts, kn_dtype dt,
                              const char *what, kn_comm_req *r) {
    int64_t total = 0;
    KN_TRY(begin(c, KN_COP_ALL_GATHER, what, 0, r));
    KN_TRY(check_counts("kn_comm_iall_gather", c, counts, &total));
    r->bytes = bytes_of(total, dt);
    KN_TRY(check_buf("kn_comm_iall_gather", send, counts[c->rank], dt));
    KN_TRY(check_buf("kn_comm_iall_gather", recv, total, dt));
    return started(c->be->iall_gather(c->ctx, send, recv, counts, dt, r), r);
}

kn_status kn_comm_ibroadcast(kn_comm *c, void *buf, int64_t count, kn_dtype dt, int root, const char *what,
                             kn_comm_req *r) {
    KN_TRY(begin(c, KN_COP_BROADCAST, what, bytes_of(count, dt), r));
    KN_TRY(check_buf("kn_comm_ibroadcast", buf, count, dt));
    KN_TRY(check_peer("kn_comm_ibroadcast", c, root));
    return started(c->be->ibroadcast(c->ctx, buf, count, dt, root, r), r);
}

kn_status kn_comm_ibarrier(kn_comm *c, const char *what, kn_comm_req *r) {
    KN_TRY(begin(c, KN_COP_BARRIER, what, 0, r));
    return started(c->be->ibarrier(c->ctx, r), r);
}

kn_status kn_comm_ifence(kn_comm *c, const char *what, kn_comm_req *r) {
    KN_TRY(begin(c, KN_COP_FENCE, what, 0, r));
    if (!c->be->ifence) return KN_OK; /* no device stream: nothing to wait for (r is not active) */
    return started(c->be->ifence(c->ctx, r), r);
}

/* ---------------------------------------------------------------- waiting */

kn_status kn_comm_test(kn_comm_req *r, bool *done) {
    if (!r || !done) return kn_error(KN_ERR_ARG, "kn_comm_test: NULL argument");
    if (!r->active) { *done = true; return KN_OK; }
    kn_comm *c = r->comm;
    kn_status st = c->be->test(c->ctx, r, done);
    if (st != KN_OK || *done) {
        c->be->release(c->ctx, r);
        r->active = false;
    }
    if (st != KN_OK) {
        /* a failed peer shows up here: say which operation it broke */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", kn_last_error());
        *done = true;
        return kn_error(st, "rank %d: %s #%lld (%s, %zu bytes) failed: %s", kn_dist_rank(), kn_comm_op_name(r->op),
                        (long long)r->seq, r->what, r->bytes, msg);
    }
    return KN_OK;
}

/* The deadline passed: say what we waited for, then end the job. */
static _Noreturn void timed_out(kn_comm_req *r, double waited) {
    kn_comm *c = r->comm;
    fprintf(stderr, "rank %d: %s #%lld (%s, %zu bytes) timed out after %.0f s (KILN_COMM_TIMEOUT=%g); a peer "
            "died or stalled: aborting the job\n", kn_dist_rank(), kn_comm_op_name(r->op), (long long)r->seq,
            r->what, r->bytes, waited, c->timeout);
    fflush(stderr);
    /* the message leaves through a pipe to the launcher, which forwards it; MPI_Abort can
     * tear the launcher's proxy down before it has (seen once in make test on a loaded
     * 2-core machine: the job ended, exit 3, without the line). Half a second lets it. */
    struct timespec linger = {0, 500000000};
    nanosleep(&linger, NULL);
    /* the last resort: should aborting NCCL or MPI itself hang (seen once with a stopped
     * peer and a CUDA graph's collectives in flight, 2026-11-28: the line above came, the
     * job ran on), SIGALRM's default action ends this rank in 10 s and the launcher, which
     * sees a rank die, ends the job */
    alarm(10);
    c->be->abort(c->ctx);
    kn_dist_abort(3);
}

/* Polling: the first moments spin (sched_yield between polls, so an oversubscribed CPU
 * still runs the other ranks), then each poll sleeps. A 1 us nanosleep lasts about 55 us
 * on Linux (timer slack), which was most of the time of a 4 MB NCCL all-reduce on H200s
 * (45 us): GPU ranks spin for 5 ms, since their host thread has nothing else to do; CPU
 * ranks for 0.2 ms, since with more ranks than cores a spinning rank takes a core from a
 * computing one. */
kn_status kn_comm_wait(kn_comm_req *r) {
    if (!r) return kn_error(KN_ERR_ARG, "kn_comm_wait: request is NULL");
    struct timespec nap = {0, 1000};
    double spin = r->comm && r->comm->be->type == KN_COMM_NCCL ? 5e-3 : 2e-4;
    for (;;) {
        bool done = false;
        KN_TRY(kn_comm_test(r, &done));
        if (done) return KN_OK;
        double waited = kn_time_now() - r->t_start;
        if (waited > r->comm->timeout) timed_out(r, waited);
        if (waited < spin) sched_yield();
        else nanosleep(&nap, NULL);
    }
}

kn_status kn_comm_wait_all(int n, kn_comm_req *r) {
    for (int i = 0; i < n; i++) KN_TRY(kn_comm_wait(&r[i]));
    return KN_OK;
}

kn_status kn_comm_wait_device(kn_comm_req *r) {
    if (!r) return kn_error(KN_ERR_ARG, "kn_comm_wait_device: request is NULL");
    if (!r->active) return KN_OK;
    kn_comm *c = r->comm;
    /* The host waits (kn_comm_wait) unless a CUDA graph is being captured or
     * KILN_COMM_STREAM_ORDER=1: a stream-ordered wait let the host run ahead, but a blocking
     * copy queued behind it then waits for a stalled peer with no deadline (a SIGSTOPped
     * rank was never reported, 2026-11-28), and tp=2 measured no faster for it. */
    static int stream_order = -1;
    if (stream_order < 0) stream_order = getenv("KILN_COMM_STREAM_ORDER") && atoi(getenv("KILN_COMM_STREAM_ORDER")) > 0;
    if (!c->be->device_wait || (!stream_order && !(c->be->capturing && c->be->capturing()))) return kn_comm_wait(r);
    if (c->npending == c->cap_pending) { /* bounded in practice: reap first, then grow */
        KN_TRY(kn_comm_reap(c));
        if (c->npending == c->cap_pending) {
            int cap = c->cap_pending ? 2 * c->cap_pending : 64;
            kn_comm_req *p = kn_realloc(c->pending, (size_t)cap * sizeof *p);
            if (!p) {
                KN_TRY(kn_comm_wait(r));
                return kn_error(KN_ERR_OOM, "kn_comm_wait_device: out of memory (the request was waited for)");
            }
            c->pending = p, c->cap_pending = cap;
        }
    }
    bool keep = true;
    kn_status st = c->be->device_wait(c->ctx, r, &keep);
    if (st == KN_OK && !keep) { /* captured into a CUDA graph: nothing for the host to see end */
        c->be->release(c->ctx, r);
        r->active = false;
        return KN_OK;
    }
    if (st != KN_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", kn_last_error());
        (void)kn_comm_wait(r);
        return kn_error(st, "rank %d: %s #%lld (%s): the stream-ordered wait failed: %s", kn_dist_rank(),
                        kn_comm_op_name(r->op), (long long)r->seq, r->what, msg);
    }
    c->pending[c->npending++] = *r;
    r->active = false; /* the communicator's copy owns it now */
    return KN_OK;
}

/* Drop the first k pending requests (they ended and were released). */
static void pending_shift(kn_comm *c, int k) {
    if (k <= 0) return; /* nothing ended (and pending may still be NULL: no memmove of NULL) */
    if (c->npending > k) memmove(c->pending, c->pending + k, (size_t)(c->npending - k) * sizeof *c->pending);
    c->npending -= k;
}

kn_status kn_comm_reap(kn_comm *c) {
    if (!c) return kn_error(KN_ERR_ARG, "kn_comm_reap: communicator is NULL");
    int k = 0;
    kn_status st = KN_OK;
    for (; k < c->npending; k++) {
        bool done = false;
        st = kn_comm_test(&c->pending[k], &done);
        if (st != KN_OK) { k++; break; }
        if (!done) {
            double waited = kn_time_now() - c->pending[k].t_start;
            if (waited > c->timeout) timed_out(&c->pending[k], waited);
            break;
        }
    }
    pending_shift(c, k);
    return st;
}

kn_status kn_comm_drain(kn_comm *c) {
    if (!c) return kn_error(KN_ERR_ARG, "kn_comm_drain: communicator is NULL");
    kn_status st = KN_OK;
    int k = 0;
    for (; k < c->npending && st == KN_OK; k++) st = kn_comm_wait(&c->pending[k]);
    pending_shift(c, k);
    return st;
}

/* ---------------------------------------------------------------- blocking forms */

#define KN_BLOCKING(call)        \
    do {                         \
        kn_comm_req r_;          \
        KN_TRY(call);            \
        return kn_comm_wait(&r_); \
    } while (0)

kn_status kn_comm_send(kn_comm *c, const void *buf, int64_t count, kn_dtype dt, int peer) {
    KN_BLOCKING(kn_comm_isend(c, buf, count, dt, peer, NULL, &r_));
}
kn_status kn_comm_recv(kn_comm *c, void *buf, int64_t count, kn_dtype dt, int peer) {
    KN_BLOCKING(kn_comm_irecv(c, buf, count, dt, peer, NULL, &r_));
}
kn_status kn_comm_all_reduce(kn_comm *c, const void *send, void *recv, int64_t count, kn_dtype dt) {
    KN_BLOCKING(kn_comm_iall_reduce(c, send, recv, count, dt, NULL, &r_));
}
kn_status kn_comm_reduce_scatter(kn_comm *c, const void *send, void *recv, const int64_t *counts, kn_dtype dt) {
    KN_BLOCKING(kn_comm_ireduce_scatter(c, send, recv, counts, dt, NULL, &r_));
}
kn_status kn_comm_all_gather(kn_comm *c, const void *send, void *recv, const int64_t *counts, kn_dtype dt) {
    KN_BLOCKING(kn_comm_iall_gather(c, send, recv, counts, dt, NULL, &r_));
}
kn_status kn_comm_broadcast(kn_comm *c, void *buf, int64_t count, kn_dtype dt, int root) {
    KN_BLOCKING(kn_comm_ibroadcast(c, buf, count, dt, root, NULL, &r_));
}
kn_status kn_comm_barrier(kn_comm *c) { KN_BLOCKING(kn_comm_ibarrier(c, NULL, &r_)); }
