/* kn_mpi_relay.c — the relay: a lab's code runs in a process of its own, and every byte it
 * sends to another rank passes through the harness's process, which counts it (issue 36).
 *
 * Why: a test that checks HOW a unit communicates (lab 10's ring: 2 (N-1) messages of one
 * chunk each, no library collective) cannot trust counters kept in the process the unit
 * runs in: any code there can rewrite them, or reach MPI through pointers it finds in its
 * own memory. So for a test declared with KN_MPI_RELAY_TEST, each rank is two processes:
 *   - the relay: the MPI rank (this harness, the test's body; under the grader the STAFF's
 *     build of the test, which links no student code). It starts the worker, and for each
 *     unit call the test makes (kn_mpi_relay_call, from a lab's outputs.h wrapper) sends
 *     the arguments and buffers to it, then carries out the worker's communication
 *     requests on the real communicator, where MPI's profiling interface counts them
 *     (kn_mpi_test_sent, kn_mpi_test.c), and takes the results back;
 *   - the worker: the test program linked with the lab's units (under the grader the
 *     student's build), started with `--relay-worker-fd 3`, NOT an MPI process: no
 *     launcher variables, no inherited descriptors but its socket, nothing of MPI to reach.
 *     It runs each unit call on a communicator whose backend (relay_be below) turns
 *     isend / irecv / test and the library's collectives into requests over the socket.
 * The worker can compute what it likes; it can move bytes to other ranks only through the
 * relay, which counts every message and every collective in a process the worker cannot
 * touch (another program; non-dumpable under the grader, so no ptrace or /proc/PID/mem).
 * Its counters in its own memory are never read.
 *
 * Protocol (one SOCK_STREAM socketpair, both ends on this machine): a relay_msg header,
 * then its payloads (len[0] and len[1] bytes; -1 means a NULL pointer, no bytes). The relay
 * sends CALL; until the worker answers DONE, it serves the worker's ISEND, IRECV,
 * IALLREDUCE, IBCAST, IBARRIER and TEST, each answered by a REPLY. The relay treats all of
 * it as hostile input: every field is bounded, a violation ends the job with a message.
 *
 * Residue (tests/grader/README.md, "What the grader does not stop"): the workers of one job
 * run as one user and share a folder, so they could exchange data through files and send
 * ring-shaped dummy messages; the relay sees only what passes through it. */
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <time.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>

enum { R_CALL = 1, R_DONE, R_ISEND, R_IRECV, R_IALLREDUCE, R_IBCAST, R_IBARRIER, R_TEST, R_REPLY };

typedef struct {
    int32_t op, comm, rank, size; /* comm: the relay's id of the communicator, -1 for NULL */
    int32_t peer, dt;             /* peer: destination, source or broadcast root */
    int64_t count, h, st;         /* h: a request's slot; st: a status (REPLY, DONE) */
    int64_t a[4];                 /* a CALL's integer arguments */
    int64_t len[2];               /* payload bytes that follow; -1: a NULL pointer */
    char name[32];                /* a CALL's unit */
} relay_msg;

#define RELAY_MAX_BYTES ((int64_t)1 << 30)
#define RELAY_COMMS 64
#define RELAY_SLOTS 256
#define RELAY_UNITS 16

static int rd_all(int fd, void *p, size_t n) {
    char *c = p;
    while (n > 0) {
        ssize_t r = read(fd, c, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return 0;
        c += r;
        n -= (size_t)r;
    }
    return 1;
}

static int wr_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return 0;
        c += w;
        n -= (size_t)w;
    }
    return 1;
}

/* A header and its payloads (p[i] NULL when len[i] <= 0). */
static int relay_send(int fd, const relay_msg *m, const void *p0, const void *p1) {
    return wr_all(fd, m, sizeof *m) && (m->len[0] <= 0 || wr_all(fd, p0, (size_t)m->len[0])) &&
           (m->len[1] <= 0 || wr_all(fd, p1, (size_t)m->len[1]));
}

/* ------------------------------------------------------------------ units the worker runs */

static struct {
    const char *name;
    kn_mpi_unit_fn fn;
} g_units[RELAY_UNITS];
static int g_nunits;

void kn_mpi_relay_unit(const char *name, kn_mpi_unit_fn fn) {
    for (int i = 0; i < g_nunits; i++)
        if (!strcmp(g_units[i].name, name)) return; /* outputs.h is included by several files */
    if (g_nunits == RELAY_UNITS || strlen(name) >= sizeof ((relay_msg *)0)->name) {
        fprintf(stderr, "kn_mpi_relay_unit: cannot register %s (raise RELAY_UNITS, or a shorter name)\n", name);
        exit(2);
    }
    g_units[g_nunits].name = name;
    g_units[g_nunits++].fn = fn;
}

/* ------------------------------------------------------------------ the relay (MPI rank) */

static int g_relay_fd = -1;       /* the socket to the worker; -1: no worker */
static pid_t g_worker = -1;
static bool g_relay_on;           /* the running test is a relay test */
static const char *g_relay_unit;  /* the unit call in progress, for messages */
static int g_call_comm = -1;      /* its communicator's id: the only one requests may name */
static int64_t g_call_no;         /* calls so far: a request is tested only in its own call */
static kn_comm *g_rcomm[RELAY_COMMS];
static struct {
    bool used, back;              /* back: the payload goes back to the worker when done */
    int64_t call;                 /* the call that made it (requests left in flight at the
                                   * call's end stay used: MPI may still write their data) */
    kn_comm_req req;
    void *data;
    int64_t bytes;
} g_slot[RELAY_SLOTS];

bool kn_mpi_relay_active(void) { return g_relay_on; }

/* The worker went away or broke the protocol: say so and end the job (its peers wait on
 * this rank's messages; MPI_Abort ends them at once, as a timeout does). */
static _Noreturn void relay_lost(const char *why) {
    int status = 0;
    char how[96] = "still running";
    if (g_worker > 0) {
        for (int i = 0; i < 50; i++) { /* it may be in the middle of exiting: 0.5 s */
            pid_t w = waitpid(g_worker, &status, WNOHANG);
            if (w == g_worker) {
                if (WIFEXITED(status)) snprintf(how, sizeof how, "exit status %d", WEXITSTATUS(status));
                else if (WIFSIGNALED(status)) snprintf(how, sizeof how, "killed by signal %d", WTERMSIG(status));
                break;
            }
            struct timespec t = {0, 10000000};
            nanosleep(&t, NULL);
        }
        if (!strcmp(how, "still running")) kill(g_worker, SIGKILL);
    }
    fprintf(stderr, "rank %d: the process running the lab's code (the relay's worker) %s during %s (%s): aborting "
            "the job\n", g_rank, why, g_relay_unit ? g_relay_unit : "no call", how);
    fflush(stderr);
    struct timespec linger = {0, 300000000};
    nanosleep(&linger, NULL);
    kn_dist_abort(3);
}

/* Start the worker (before MPI starts: no fork in an MPI process). It waits for one byte
 * (relay_go) before it runs anything of the lab's: by then every relay of the job has read
 * and deleted its secret file (the constructors ran before MPI_Init's barrier). */
static void relay_start(const char *worker) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        fprintf(stderr, "kn_mpi_test: socketpair: %s\n", strerror(errno));
        exit(2);
    }
    /* the worker's environment: what a test needs, nothing of MPI or of the grader */
    static char *env[32];
    int ne = 0;
    for (char **e = environ; e && *e && ne < 30; e++)
        if (!strncmp(*e, "PATH=", 5) || !strncmp(*e, "HOME=", 5) || !strncmp(*e, "TMPDIR=", 7) ||
            !strncmp(*e, "LANG=", 5) || !strncmp(*e, "LC_ALL=", 7) || !strncmp(*e, "KILN_", 5))
            env[ne++] = *e;
    env[ne] = NULL;
    pid_t p = fork();
    if (p < 0) {
        fprintf(stderr, "kn_mpi_test: fork: %s\n", strerror(errno));
        exit(2);
    }
    if (p == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0); /* the relay's end is the worker's */
        if (dup2(sv[1], 3) != 3) _exit(127);
        long top = sysconf(_SC_OPEN_MAX);
        for (long fd = 4; fd < (top > 0 && top < 1048576 ? top : 65536); fd++) close((int)fd); /* nothing of the relay's but stdio */
        char go = 0;
        if (!rd_all(3, &go, 1) || go != 'g') _exit(0); /* the relay went away first */
        char fdarg[] = "3";
        char *argv[] = {(char *)worker, "--relay-worker-fd", fdarg, NULL};
        execve(worker, argv, env);
        fprintf(stderr, "kn_mpi_test: cannot start the relay's worker %s: %s\n", worker, strerror(errno));
        _exit(127);
    }
    close(sv[1]);
    g_relay_fd = sv[0];
    g_worker = p;
}

static void relay_go(void) {
    char go = 'g';
    if (g_relay_fd >= 0 && !wr_all(g_relay_fd, &go, 1)) relay_lost("ended before it started");
}

static void relay_stop(void) {
    if (g_relay_fd < 0) return;
    close(g_relay_fd); /* the worker reads the end and exits */
    g_relay_fd = -1;
    int status;
    waitpid(g_worker, &status, 0);
}

static int relay_comm_id(kn_comm *c) {
    if (!c) return -1;
    for (int i = 0; i < RELAY_COMMS; i++)
        if (g_rcomm[i] == c) return i;
    /* a freed communicator's pointer may come back for a new one: ids are by pointer, and
     * kn_comm_free is never called while a call is in progress */
    for (int i = 0; i < RELAY_COMMS; i++)
        if (!g_rcomm[i]) return g_rcomm[i] = c, i;
    fprintf(stderr, "kn_mpi_relay_call: more than %d communicators\n", RELAY_COMMS);
    kn_dist_abort(2);
}

/* Carry out one request of the worker's; answers with a REPLY. */
static void relay_serve(const relay_msg *m) {
    relay_msg r = {.op = R_REPLY};
    char err[512] = "";
    void *data = NULL, *back = NULL;
    int64_t backn = 0;
    kn_status st = KN_OK;
    if (m->op == R_TEST) {
        if (m->h < 0 || m->h >= RELAY_SLOTS || !g_slot[m->h].used || g_slot[m->h].call != g_call_no)
            relay_lost("asked about a request it never made in this call");
        bool done = false;
        st = kn_comm_test(&g_slot[m->h].req, &done);
        r.count = done;
        if (st == KN_OK && done && g_slot[m->h].back) back = g_slot[m->h].data, backn = g_slot[m->h].bytes;
        if (st != KN_OK) snprintf(err, sizeof err, "%s", kn_last_error());
        r.st = st;
        r.len[0] = back ? backn : 0;
        r.len[1] = err[0] ? (int64_t)strlen(err) + 1 : 0;
        if (!relay_send(g_relay_fd, &r, back, err)) relay_lost("ended");
        if (st != KN_OK || done) {
            kn_free(g_slot[m->h].data);
            g_slot[m->h].used = false;
        }
        return;
    }
    /* a new operation: its communicator, peer, type and size, all bounded */
    /* only the call's own communicator: another id may name one the test has freed since */
    if (m->comm < 0 || m->comm != g_call_comm || !g_rcomm[m->comm]) relay_lost("named a communicator it was not given");
    kn_comm *c = g_rcomm[m->comm];
    size_t es = m->op == R_IBARRIER ? 1 : kn_dtype_size((kn_dtype)m->dt);
    if (es == 0 || m->count < 0 || m->count > RELAY_MAX_BYTES) relay_lost("asked for a message of a bad type or size");
    int64_t bytes = m->op == R_IBARRIER ? 0 : m->count * (int64_t)es; /* both bounded: no overflow */
    if (bytes > RELAY_MAX_BYTES) relay_lost("asked for a message of a bad type or size");
    if (m->op != R_IBARRIER && (m->peer < 0 || m->peer >= c->size)) relay_lost("named a rank outside its communicator");
    int64_t want = m->op == R_ISEND || m->op == R_IALLREDUCE || m->op == R_IBCAST ? bytes : 0;
    if (m->len[0] != want || m->len[1] != 0) relay_lost("sent a payload of the wrong size");
    int s = 0;
    while (s < RELAY_SLOTS && g_slot[s].used) s++;
    data = kn_malloc((size_t)(bytes > 0 ? bytes : 1));
    if (!data) relay_lost("asked for more memory than the relay has");
    if (want > 0 && !rd_all(g_relay_fd, data, (size_t)want)) relay_lost("ended");
    if (s == RELAY_SLOTS) {
        st = kn_error(KN_ERR_ARG, "the relay holds %d requests in flight already: wait for some", RELAY_SLOTS);
    } else {
        kn_comm_req *q = &g_slot[s].req;
        const char *what = "lab code";
        switch (m->op) {
        case R_ISEND: st = kn_comm_isend(c, data, m->count, (kn_dtype)m->dt, m->peer, what, q); break;
        case R_IRECV: st = kn_comm_irecv(c, data, m->count, (kn_dtype)m->dt, m->peer, what, q); break;
        case R_IALLREDUCE: st = kn_comm_iall_reduce(c, data, data, m->count, (kn_dtype)m->dt, what, q); break;
        case R_IBCAST: st = kn_comm_ibroadcast(c, data, m->count, (kn_dtype)m->dt, m->peer, what, q); break;
        case R_IBARRIER: st = kn_comm_ibarrier(c, what, q); break;
        default: relay_lost("sent a request the relay does not know");
        }
    }
    if (st == KN_OK) {
        g_slot[s].used = true;
        g_slot[s].call = g_call_no;
        g_slot[s].back = m->op != R_ISEND && m->op != R_IBARRIER;
        g_slot[s].data = data;
        g_slot[s].bytes = bytes;
        r.h = s;
    } else {
        snprintf(err, sizeof err, "%s", kn_last_error());
        kn_free(data);
    }
    r.st = st;
    r.len[1] = err[0] ? (int64_t)strlen(err) + 1 : 0;
    if (!relay_send(g_relay_fd, &r, NULL, err)) relay_lost("ended");
}

kn_status kn_mpi_relay_call(const char *name, kn_comm *c, const int64_t a[4], void *buf[2], const int64_t len[2]) {
    if (g_relay_fd < 0) return kn_error(KN_ERR_INTERNAL, "kn_mpi_relay_call: no relay worker");
    relay_msg m = {.op = R_CALL, .comm = relay_comm_id(c), .rank = c ? c->rank : 0, .size = c ? c->size : 0};
    snprintf(m.name, sizeof m.name, "%s", name);
    for (int i = 0; i < 4; i++) m.a[i] = a[i];
    for (int i = 0; i < 2; i++) m.len[i] = buf[i] ? len[i] : -1;
    g_relay_unit = name;
    g_call_comm = m.comm;
    g_call_no++;
    if (!relay_send(g_relay_fd, &m, buf[0], buf[1])) relay_lost("ended");
    for (;;) {
        relay_msg w;
        if (!rd_all(g_relay_fd, &w, sizeof w)) relay_lost("ended");
        if (w.op != R_DONE) {
            relay_serve(&w);
            continue;
        }
        /* the results: the same buffers, the same sizes, then the error message */
        for (int i = 0; i < 2; i++)
            if (w.len[i] != m.len[i]) relay_lost("answered with buffers of other sizes");
        if (w.h < 0 || w.h > 1024) relay_lost("answered with a message too long");
        for (int i = 0; i < 2; i++)
            if (w.len[i] > 0 && !rd_all(g_relay_fd, buf[i], (size_t)w.len[i])) relay_lost("ended");
        char err[1025] = "";
        if (w.h > 0 && !rd_all(g_relay_fd, err, (size_t)w.h)) relay_lost("ended");
        err[w.h > 0 ? w.h - 1 : 0] = '\0';
        g_relay_unit = NULL;
        g_call_comm = -1;
        if (w.st < 0 || w.st > 1000) relay_lost("answered with a status that is none");
        if (w.st != KN_OK) return kn_error((kn_status)w.st, "%s", err);
        kn_clear_error();
        return KN_OK;
    }
}

/* ------------------------------------------------------------------ the worker (lab code) */

static int g_wfd = -1;

/* A request to the relay and its REPLY (a received payload into in, exactly cap bytes). */
static kn_status w_rpc(const relay_msg *m, const void *payload, relay_msg *r, void *in, int64_t cap) {
    if (!relay_send(g_wfd, m, payload, NULL) || !rd_all(g_wfd, r, sizeof *r) || r->op != R_REPLY) _exit(4);
    if (r->len[0] != 0 && r->len[0] != cap) _exit(4);
    if (r->len[0] > 0 && !rd_all(g_wfd, in, (size_t)r->len[0])) _exit(4);
    char err[600] = "";
    if (r->len[1] < 0 || r->len[1] > 512) _exit(4);
    if (r->len[1] > 0 && !rd_all(g_wfd, err, (size_t)r->len[1])) _exit(4);
    err[sizeof err - 1] = '\0';
    if (r->st != KN_OK) return kn_error((kn_status)r->st, "%s", err[0] ? err : "failed in the relay");
    return KN_OK;
}

static int w_comm(void *ctx) { return (int)(intptr_t)ctx - 1; }

static kn_status w_start(void *ctx, int op, const void *send, void *recv, int64_t count, kn_dtype dt, int peer,
                         kn_comm_req *q) {
    relay_msg m = {.op = op, .comm = w_comm(ctx), .peer = peer, .dt = dt, .count = count}, r;
    int64_t bytes = op == R_IBARRIER ? 0 : count * (int64_t)kn_dtype_size(dt);
    m.len[0] = send ? bytes : 0;
    KN_TRY(w_rpc(&m, send, &r, NULL, 0));
    q->hv[0] = r.h;
    q->h[0] = recv;
    q->hv[1] = recv ? bytes : 0;
    return KN_OK;
}

static kn_status w_isend(void *ctx, const void *buf, int64_t count, kn_dtype dt, int peer, kn_comm_req *r) {
    return w_start(ctx, R_ISEND, buf, NULL, count, dt, peer, r);
}
static kn_status w_irecv(void *ctx, void *buf, int64_t count, kn_dtype dt, int peer, kn_comm_req *r) {
    return w_start(ctx, R_IRECV, NULL, buf, count, dt, peer, r);
}
static kn_status w_iall_reduce(void *ctx, const void *send, void *recv, int64_t count, kn_dtype dt, kn_comm_req *r) {
    return w_start(ctx, R_IALLREDUCE, send, recv, count, dt, 0, r);
}
static kn_status w_ibroadcast(void *ctx, void *buf, int64_t count, kn_dtype dt, int root, kn_comm_req *r) {
    return w_start(ctx, R_IBCAST, buf, buf, count, dt, root, r);
}
static kn_status w_ibarrier(void *ctx, kn_comm_req *r) { return w_start(ctx, R_IBARRIER, NULL, NULL, 0, 0, 0, r); }
static kn_status w_ireduce_scatter(void *ctx, const void *send, void *recv, const int64_t *counts, kn_dtype dt,
                                   kn_comm_req *r) {
    (void)ctx; (void)send; (void)recv; (void)counts; (void)dt; (void)r;
    return kn_error(KN_ERR_UNSUPPORTED, "kn_comm_reduce_scatter: not available to a lab's code under the test "
                    "harness's relay (tests/harness/mpi/kn_mpi_relay.c); use kn_comm_isend and kn_comm_irecv");
}
static kn_status w_iall_gather(void *ctx, const void *send, void *recv, const int64_t *counts, kn_dtype dt,
                               kn_comm_req *r) {
    (void)ctx; (void)send; (void)recv; (void)counts; (void)dt; (void)r;
    return kn_error(KN_ERR_UNSUPPORTED, "kn_comm_all_gather: not available to a lab's code under the test "
                    "harness's relay (tests/harness/mpi/kn_mpi_relay.c); use kn_comm_isend and kn_comm_irecv");
}
static kn_status w_split(void *ctx, int color, int key, void **out, int *rank, int *size) {
    (void)ctx; (void)color; (void)key; (void)out; (void)rank; (void)size;
    return kn_error(KN_ERR_UNSUPPORTED, "kn_comm_split: not available to a lab's code under the test harness's relay");
}
static kn_status w_test(void *ctx, kn_comm_req *q, bool *done) {
    relay_msg m = {.op = R_TEST, .comm = w_comm(ctx), .h = q->hv[0]}, r;
    /* a receive's bytes come back once it is done; a send's nothing */
    kn_status st = w_rpc(&m, NULL, &r, q->h[0], q->hv[1]);
    *done = r.count != 0;
    return st;
}
static void w_free(void *ctx) { (void)ctx; }
static void w_release(void *ctx, kn_comm_req *r) { (void)ctx; (void)r; }
static void w_abort(void *ctx) { (void)ctx; }

static const kn_comm_backend relay_be = {
    .name = "relay", .type = KN_COMM_MPI, .split = w_split, .free = w_free, .isend = w_isend, .irecv = w_irecv,
    .iall_reduce = w_iall_reduce, .ireduce_scatter = w_ireduce_scatter, .iall_gather = w_iall_gather,
    .ibroadcast = w_ibroadcast, .ibarrier = w_ibarrier, .test = w_test, .release = w_release, .abort = w_abort,
};

/* The worker: runs CALLs until the relay closes the socket. */
static int worker_main(int fd) {
    g_wfd = fd;
    kn_comm *comms[RELAY_COMMS] = {0};
    const char *ts = getenv("KILN_COMM_TIMEOUT");
    double timeout = ts && atof(ts) > 0 ? atof(ts) : 300.0;
    for (;;) {
        relay_msg m;
        if (!rd_all(fd, &m, sizeof m)) return 0; /* the relay is done */
        if (m.op != R_CALL || m.comm < -1 || m.comm >= RELAY_COMMS || m.len[0] < -1 || m.len[1] < -1 ||
            m.len[0] > RELAY_MAX_BYTES || m.len[1] > RELAY_MAX_BYTES)
            return 4;
        m.name[sizeof m.name - 1] = '\0';
        kn_mpi_unit_fn fn = NULL;
        for (int i = 0; i < g_nunits; i++)
            if (!strcmp(g_units[i].name, m.name)) fn = g_units[i].fn;
        void *b[2] = {NULL, NULL};
        for (int i = 0; i < 2; i++)
            if (m.len[i] >= 0) {
                b[i] = calloc(1, (size_t)(m.len[i] > 0 ? m.len[i] : 1));
                if (!b[i] || !rd_all(fd, b[i], (size_t)m.len[i])) return 4;
            }
        kn_comm *c = NULL;
        if (m.comm >= 0) {
            if (!comms[m.comm] && !(comms[m.comm] = kn_calloc(1, sizeof(kn_comm)))) return 4;
            c = comms[m.comm];
            c->be = &relay_be;
            c->ctx = (void *)(intptr_t)(m.comm + 1);
            c->rank = m.rank;
            c->size = m.size;
            c->timeout = timeout;
        }
        kn_clear_error();
        kn_status st = fn ? fn(c, m.a, b, m.len)
                          : kn_error(KN_ERR_INTERNAL, "the relay's worker has no unit %s (kn_mpi_relay_unit)", m.name);
        char err[1024];
        snprintf(err, sizeof err, "%s", st == KN_OK ? "" : kn_last_error());
        relay_msg d = {.op = R_DONE, .st = st, .h = err[0] ? (int64_t)strlen(err) + 1 : 0};
        d.len[0] = m.len[0];
        d.len[1] = m.len[1];
        if (!relay_send(fd, &d, b[0], b[1]) || (d.h > 0 && !wr_all(fd, err, (size_t)d.h))) return 4;
        free(b[0]);
        free(b[1]);
    }
}
