/* kn_mpi_test.c — the main of every MPI test program (lab 10): the launcher and the ranks.
 *
 * kn_mpi_test.h says why this is not Criterion. Two modes:
 *
 *   test-lab10 [--tap=FILE] [--timeout=S] [Criterion's other flags, ignored]
 *       The launcher (what you run, and what tests/harness/run-suite.sh runs). For each rank
 *       count in $KN_MPI_TEST_RANKS ("2 4" unless set) it runs
 *           timeout S $MPIEXEC -n N <this program> --rank-mode RESULTS
 *       then merges the results: one TAP line per test, like Criterion's --tap, and the
 *       "suite::name" record of every passed test appended to $KN_TEST_DONE (run-suite.sh
 *       counts a test only when both are there). It sets KILN_COMM_TIMEOUT=10 when unset,
 *       so a collective nobody answers ends its job in seconds with a message, and MPICH's
 *       yield settings, so 4 ranks share 2 cores without spinning. Exit 0 when all passed.
 *
 *   <program> --rank-mode RESULTS      (under mpiexec: one rank)
 *       Runs every test in registration order on the world communicator; after each, the
 *       ranks add up their failures with the library's all-reduce (never the student's
 *       ring), the first failing rank's message is broadcast, and rank 0 appends
 *       "ok NAME" or "fail NAME K" plus "# message" lines to RESULTS and flushes, so a job
 *       that dies later keeps what it had.
 *
 *   <program> [--filter SUITE/NAME] ...  (under mpiexec, started by the grader)
 *       The grader's protocol for Criterion binaries (tests/grader/run-one.sh, rubric tag
 *       mpi=N): every rank runs the tests the filter matches (fnmatch), writes its own TAP
 *       report and appends "suite::name TOKEN" to its record for each test it passed. The
 *       paths and the token are in the secret file $KN_GRADE_SECRET/RANK, which a
 *       constructor reads and deletes before main() (then wipes every KN_GRADE_* variable),
 *       so they are on no command line and in no environment; the ranks are non-dumpable.
 *       A rank knows it runs under mpiexec from PMI_RANK / PMI_ID / OMPI_COMM_WORLD_RANK.
 *
 *   <program> --list       the tests, in Criterion's --list format. */
#include <errno.h>
#include <fnmatch.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kn_mpi_test.h"
#include "kn_out.h"
/* The outputs for the grader's checker (kn_out.h): one file for Criterion binaries and MPI
 * programs alike; included here because MPI programs link no other harness object. */
#include "../kn_out.c"

/* Messages are cut to their buffers on purpose (a failure report, not data). */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#define KN_MPI_TEST_MAX 256
#define KN_MPI_MSG 1024

typedef struct {
    const char *suite, *name;
    kn_mpi_test_fn fn;
    int ranks; /* graded on this many ranks */
    int relay; /* KN_MPI_RELAY_TEST: its units run in the relay's worker (kn_mpi_relay.c) */
} mpi_test;

static mpi_test g_tests[KN_MPI_TEST_MAX];
static int g_ntests, g_rank, g_fails;
static char g_msg[KN_MPI_MSG];

void kn_mpi_test_register(const char *suite, const char *name, kn_mpi_test_fn fn, int ranks, int relay) {
    if (g_ntests == KN_MPI_TEST_MAX) {
        fprintf(stderr, "kn_mpi_test_register: more than %d tests (raise KN_MPI_TEST_MAX)\n", KN_MPI_TEST_MAX);
        exit(2);
    }
    g_tests[g_ntests++] = (mpi_test){suite, name, fn, ranks > 0 ? ranks : 2, relay};
}

void kn_mpi_test_fail(const char *file, int line, const char *fmt, ...) {
    char m[KN_MPI_MSG];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    const char *base = strrchr(file, '/');
    fprintf(stderr, "rank %d: %s:%d: %s\n", g_rank, base ? base + 1 : file, line, m);
    if (g_fails++ == 0) snprintf(g_msg, sizeof g_msg, "rank %d: %s:%d: %s", g_rank, base ? base + 1 : file, line, m);
}

/* ------------------------------------------------------------------ what a rank sends */

/* MPI's profiling interface: these definitions replace the library's for every caller in
 * this program (the communicator's MPI backend, core/dist/comm_mpi.c), count, and call the
 * PMPI_ originals. Lab units may not name MPI_* themselves (the grader refuses them), so
 * every message a unit sends passes here. */
static kn_mpi_sent g_sent;

/* Under the grader's checker (kn_out.h) the counts are the producer's: the test's checks
 * then judge what the student's run sent, not what the staff's units did. */
kn_mpi_sent kn_mpi_test_sent(void) {
    kn_mpi_sent s = g_sent;
    kn_out("kn_mpi_test_sent", &s, sizeof s);
    return s;
}
void kn_mpi_test_sent_mark(void) { g_sent.largest = 0; }

#ifdef KN_HAVE_MPI
#include <mpi.h>

int MPI_Isend(const void *buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm, MPI_Request *req) {
    int es = 0;
    PMPI_Type_size(t, &es);
    int64_t b = (int64_t)count * es;
    g_sent.messages++;
    g_sent.bytes += b;
    if (b > g_sent.largest) g_sent.largest = b;
    return PMPI_Isend(buf, count, t, dest, tag, comm, req);
}
int MPI_Iallreduce(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c, MPI_Request *q) {
    g_sent.collectives++;
    return PMPI_Iallreduce(s, r, n, t, op, c, q);
}
int MPI_Ireduce_scatter(const void *s, void *r, const int counts[], MPI_Datatype t, MPI_Op op, MPI_Comm c,
                        MPI_Request *q) {
    g_sent.collectives++;
    return PMPI_Ireduce_scatter(s, r, counts, t, op, c, q);
}
int MPI_Iallgatherv(const void *s, int n, MPI_Datatype st, void *r, const int counts[], const int displs[],
                    MPI_Datatype rt, MPI_Comm c, MPI_Request *q) {
    g_sent.collectives++;
    return PMPI_Iallgatherv(s, n, st, r, counts, displs, rt, c, q);
}
int MPI_Ibcast(void *b, int n, MPI_Datatype t, int root, MPI_Comm c, MPI_Request *q) {
    g_sent.collectives++;
    return PMPI_Ibcast(b, n, t, root, c, q);
}
int MPI_Ibarrier(MPI_Comm c, MPI_Request *q) {
    g_sent.collectives++;
    return PMPI_Ibarrier(c, q);
}
#endif

/* ------------------------------------------------------------------ the grader's variables */

extern char **environ;
static char g_rec_path[512], g_rec_token[128], g_tap_path[512];

/* The relay and its worker (KN_MPI_RELAY_TEST): one file with the rest of the harness, since
 * MPI test programs link no other harness object (core/dist.mk). */
#include "kn_mpi_relay.c"

/* Under the grader, rank R's record "PATH TOKEN", TAP path and outputs' prefix (kn_out.h;
 * an empty line when the test has no checker) are in the secret file
 * $KN_GRADE_SECRET/R (never on mpiexec's command line nor in its environment), which the
 * rank reads and deletes here, before main(). */
static void kn_mpi_test_secret(void) {
    const char *sf = getenv("KN_GRADE_SECRET");
    const char *r = getenv("PMI_RANK");
    if (!r) r = getenv("PMI_ID");
    if (!r) r = getenv("OMPI_COMM_WORLD_RANK");
    if (!sf || !*sf || !r) return;
    char path[600], rec[700] = "", tap[600] = "", res[600] = "";
    snprintf(path, sizeof path, "%s/%d", sf, atoi(r));
    FILE *f = fopen(path, "r");
    if (!f) return;
    if (!fgets(rec, sizeof rec, f) || !fgets(tap, sizeof tap, f)) rec[0] = tap[0] = '\0';
    if (!fgets(res, sizeof res, f)) res[0] = '\0';
    fclose(f);
    unlink(path);
    rec[strcspn(rec, "\n")] = '\0';
    tap[strcspn(tap, "\n")] = '\0';
    res[strcspn(res, "\n")] = '\0';
    if (res[0]) setenv("KN_RESULTS_OUT", res, 1); /* the outputs for the grader's checker (kn_out.h) */
    const char *sp = strchr(rec, ' ');
    if (sp && (size_t)(sp - rec) < sizeof g_rec_path && strlen(sp + 1) < sizeof g_rec_token && tap[0]) {
        memcpy(g_rec_path, rec, (size_t)(sp - rec));
        snprintf(g_rec_token, sizeof g_rec_token, "%s", sp + 1);
        snprintf(g_tap_path, sizeof g_tap_path, "%s", tap);
    }
    memset(rec, 0, sizeof rec);
}

__attribute__((constructor(101))) static void kn_mpi_test_capture(void) {
    if (getenv("KN_GRADE_SECRET")) prctl(PR_SET_DUMPABLE, 0, 0, 0, 0); /* graded: unreadable to others */
    kn_mpi_test_secret();
    for (;;) { /* wipe the values in place, then remove the variables */
        char name[64] = "";
        for (char **e = environ; e && *e; e++) {
            if (strncmp(*e, "KN_GRADE_", 9) && strncmp(*e, "CRITERION_OUTPUTS=", 18)) continue;
            char *eq = strchr(*e, '=');
            size_t n = eq ? (size_t)(eq - *e) : strlen(*e);
            if (n >= sizeof name) n = sizeof name - 1;
            memcpy(name, *e, n);
            if (eq) memset(eq + 1, 0, strlen(eq + 1));
            break;
        }
        if (!name[0] || unsetenv(name) != 0) return;
    }
}

static bool under_mpiexec(void) {
    return getenv("PMI_RANK") || getenv("PMI_ID") || getenv("OMPI_COMM_WORLD_RANK");
}

/* ------------------------------------------------------------------ one rank */

/* A checker failure (kn_out.h) is a failed check of the running test. */
static void kn_mpi_out_fail(const char *msg) { kn_mpi_test_fail(__FILE__, __LINE__, "%s", msg); }

/* results: the launcher's file (rank 0 writes it), or NULL under the grader (filter, TAP
 * and record per rank). worker: the program the relay tests' units run in (kn_mpi_relay.c),
 * NULL to run them in this process. */
static int rank_main(const char *results, const char *filter, const char *worker) {
    int relays = 0;
    for (int t = 0; t < g_ntests; t++) {
        char full[512];
        snprintf(full, sizeof full, "%s/%s", g_tests[t].suite, g_tests[t].name);
        relays += g_tests[t].relay && (!filter || !fnmatch(filter, full, 0));
    }
    if (worker && relays) relay_start(worker); /* before MPI: no fork in an MPI process */
    if (kn_dist_init("kn_mpi_test") != KN_OK) {
        fprintf(stderr, "kn_mpi_test: %s\n", kn_last_error());
        return 2;
    }
    g_rank = kn_dist_rank();
    kn_comm *c = NULL;
    if (kn_comm_world(&c, KN_COMM_MPI) != KN_OK) {
        fprintf(stderr, "kn_mpi_test: %s\n", kn_last_error());
        return 2;
    }
    if (g_relay_fd >= 0) {
        /* every rank's constructors ran (its secret file is read and gone) before any
         * worker runs a line of the lab's code */
        if (kn_comm_barrier(c) != KN_OK) {
            fprintf(stderr, "kn_mpi_test: %s\n", kn_last_error());
            kn_dist_abort(2);
        }
        relay_go();
    }
    FILE *f = NULL, *tap = NULL;
    if (!results && g_tap_path[0] && !(tap = fopen(g_tap_path, "w"))) {
        fprintf(stderr, "kn_mpi_test: rank %d: cannot write its TAP report: %s\n", g_rank, strerror(errno));
        kn_dist_abort(2);
    }
    int selected = 0;
    for (int t = 0; t < g_ntests; t++) {
        char full[512];
        snprintf(full, sizeof full, "%s/%s", g_tests[t].suite, g_tests[t].name);
        selected += !filter || !fnmatch(filter, full, 0);
    }
    if (tap) fprintf(tap, "TAP version 13\n1..%d\n", selected);
    if (results && g_rank == 0 && !(f = fopen(results, "w"))) {
        fprintf(stderr, "kn_mpi_test: cannot write %s: %s\n", results, strerror(errno));
        kn_dist_abort(2);
    }
    int n = c->size;
    int *failed = kn_malloc((size_t)n * sizeof(int));
    char *msg = kn_malloc(KN_MPI_MSG);
    if (!failed || !msg) kn_dist_abort(2);
    for (int t = 0; t < g_ntests; t++) {
        char sel[512];
        snprintf(sel, sizeof sel, "%s/%s", g_tests[t].suite, g_tests[t].name);
        if (filter && fnmatch(filter, sel, 0)) continue;
        if (f) {
            /* so the launcher can name the test that was running if the job dies in it */
            fprintf(f, "start %s::%s\n", g_tests[t].suite, g_tests[t].name);
            fflush(f);
        }
        g_fails = 0;
        g_msg[0] = '\0';
        kn_clear_error();
        if (!results && n != g_tests[t].ranks)
            kn_mpi_test_fail(__FILE__, __LINE__, "this test is graded on %d ranks (its KN_MPI_TEST) but runs on %d: "
                             "the rubric's mpi= tag disagrees (make rubric-check)", g_tests[t].ranks, n);
        else {
            g_relay_on = g_tests[t].relay && g_relay_fd >= 0;
            kn_out_begin(g_tests[t].suite, g_tests[t].name, kn_mpi_out_fail);
            g_tests[t].fn(c);
            kn_out_end();
            g_relay_on = false;
        }
        memset(failed, 0, (size_t)n * sizeof(int));
        failed[g_rank] = g_fails > 0;
        if (kn_comm_all_reduce(c, failed, failed, n, KN_DT_I32) != KN_OK) {
            fprintf(stderr, "kn_mpi_test: rank %d: %s\n", g_rank, kn_last_error());
            kn_dist_abort(2);
        }
        int first = -1, k = 0;
        for (int r = 0; r < n; r++)
            if (failed[r]) {
                k++;
                if (first < 0) first = r;
            }
        if (first >= 0) {
            memcpy(msg, g_msg, KN_MPI_MSG);
            if (kn_comm_broadcast(c, msg, KN_MPI_MSG / 4, KN_DT_I32, first) != KN_OK) kn_dist_abort(2);
            msg[KN_MPI_MSG - 1] = '\0';
        }
        if (tap) { /* this rank's own verdict; the grader wants every rank's ok */
            if (!g_fails) fprintf(tap, "ok - %s::%s\n", g_tests[t].suite, g_tests[t].name);
            else fprintf(tap, "not ok - %s::%s\n  %s\n", g_tests[t].suite, g_tests[t].name, g_msg);
            fflush(tap);
        }
        if (!g_fails && g_rec_path[0]) {
            FILE *rf = fopen(g_rec_path, "a");
            if (rf) {
                fprintf(rf, "%s::%s %s\n", g_tests[t].suite, g_tests[t].name, g_rec_token);
                fclose(rf);
            }
        }
        if (f) {
            if (!k) fprintf(f, "ok %s::%s\n", g_tests[t].suite, g_tests[t].name);
            else {
                fprintf(f, "fail %s::%s %d\n# failed on %d of %d ranks; the first: ", g_tests[t].suite,
                        g_tests[t].name, k, k, n);
                for (const char *p = msg; *p; p++) fputs(*p == '\n' ? "\n# " : (char[2]){*p, 0}, f);
                fputc('\n', f);
            }
            fflush(f);
        }
    }
    kn_free(failed);
    kn_free(msg);
    if (f) fclose(f);
    if (tap) fclose(tap);
    relay_stop();
    kn_comm_free(c);
    kn_dist_finalize();
    return 0;
}

/* ------------------------------------------------------------------ the launcher */

enum { NOT_RUN = 0, PASSED, FAILED };
typedef struct {
    int state;
    char why[2048];
} verdict;

static void append(char *dst, size_t cap, const char *s) {
    size_t l = strlen(dst);
    if (l + 1 < cap) snprintf(dst + l, cap - l, "%s", s);
}

/* Run one job of `np` ranks; fold its results into v[]. Returns 1 when the job ended cleanly. */
static int run_job(const char *self, int np, int timeout_s, verdict *v) {
    char dir[] = "/tmp/kn_mpi_test.XXXXXX";
    if (!mkdtemp(dir)) {
        fprintf(stderr, "kn_mpi_test: mkdtemp: %s\n", strerror(errno));
        return 0;
    }
    char results[600], log[600], cmd[2400];
    snprintf(results, sizeof results, "%s/results", dir);
    snprintf(log, sizeof log, "%s/log", dir);
    const char *mpiexec = getenv("MPIEXEC");
    if (!mpiexec || !*mpiexec) mpiexec = "mpiexec";
    snprintf(cmd, sizeof cmd, "timeout --kill-after=5 %d %s -n %d '%s' --rank-mode '%s' > '%s' 2>&1", timeout_s,
             mpiexec, np, self, results, log);
    int rc = system(cmd);
    int status = rc == -1 ? -1 : WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
    /* the job's own words about why it died: the timeout message, an abort, a crash */
    char tail[1500] = "", first[1100] = "";
    FILE *lf = fopen(log, "r");
    char line[1024];
    int nt = 0, more = 0;
    while (lf && fgets(line, sizeof line, lf) && nt < 8) {
        /* a rank's own failed check ("rank 1: test_ring.c:48: ... KN_ERR_ARG ..."), printed
         * before the job ended: often the cause of the rest (its partner then waits out
         * KILN_COMM_TIMEOUT), so the last one before the end leads the report */
        int rk = 0, pos = 0;
        if (sscanf(line, "rank %d: %*[^:]:%*d:%n", &rk, &pos) == 1 && pos > 0) {
            snprintf(first, sizeof first, " %s", line);
            more = 3; /* its indented lines after it: "    returned KN_ERR_ARG: ..." */
            continue;
        }
        if (more > 0 && line[0] == ' ') {
            append(first, sizeof first, "  ");
            append(first, sizeof first, line);
            more--;
            continue;
        }
        more = 0;
        if (strstr(line, "timed out") || strstr(line, "abort") || strstr(line, "ABORT") || strstr(line, "signal") ||
            strstr(line, "kn_mpi_test:")) {
            append(tail, sizeof tail, "    ");
            append(tail, sizeof tail, line);
            nt++;
        }
    }
    if (lf) fclose(lf);
    int seen[KN_MPI_TEST_MAX] = {0};
    FILE *f = fopen(results, "r");
    int cur = -1;
    char running[512] = "";
    while (f && fgets(line, sizeof line, f)) {
        char name[512];
        if (line[0] == '#' && cur >= 0) {
            char pre[64];
            snprintf(pre, sizeof pre, "    on %d ranks:", np);
            append(v[cur].why, sizeof v[cur].why, pre);
            append(v[cur].why, sizeof v[cur].why, line + 1);
            continue;
        }
        if (sscanf(line, "start %511s", name) == 1) {
            snprintf(running, sizeof running, "%s", name);
            continue;
        }
        int ok = sscanf(line, "ok %511s", name) == 1, bad = !ok && sscanf(line, "fail %511s", name) == 1;
        cur = -1;
        for (int t = 0; (ok || bad) && t < g_ntests; t++) {
            char full[512];
            snprintf(full, sizeof full, "%s::%s", g_tests[t].suite, g_tests[t].name);
            if (!strcmp(full, name)) cur = t;
        }
        if (cur < 0) continue;
        seen[cur] = 1;
        if (bad) v[cur].state = FAILED;
        else if (v[cur].state == NOT_RUN) v[cur].state = PASSED;
    }
    if (f) fclose(f);
    int clean = status == 0;
    for (int t = 0; t < g_ntests; t++) {
        if (seen[t]) continue;
        char w[1200], full[512];
        snprintf(full, sizeof full, "%s::%s", g_tests[t].suite, g_tests[t].name);
        const char *why = status == 124 || status == 137 ? "the job's time limit: a loop that never ends?"
                          : status == 3 ? "MPI_Abort: a send or receive not answered within KILN_COMM_TIMEOUT, "
                                          "or the program aborted"
                                        : "a crash or an abort";
        if (!strcmp(full, running))
            snprintf(w, sizeof w, " timed out or crashed: the mpiexec -n %d job ended IN THIS TEST (status %d: %s)\n",
                     np, status, why);
        else
            snprintf(w, sizeof w, " timed out or crashed: not run: the mpiexec -n %d job ended in %s (status %d: %s)\n",
                     np, running[0] ? running : "its start", status, why);
        v[t].state = FAILED;
        if (!strstr(v[t].why, "timed out or crashed")) {
            /* the reason goes first: it is the TAP line's own text */
            char old[sizeof v[t].why];
            snprintf(old, sizeof old, "%s", v[t].why);
            /* in the test the job ended in, a rank's failed check is the TAP line's text */
            if (first[0] && !strcmp(full, running))
                snprintf(v[t].why, sizeof v[t].why, "%s   then the job ended:%s%s%s", first, w, tail, old);
            else
                snprintf(v[t].why, sizeof v[t].why, "%s%s%s", w, tail, old);
        }
        clean = 0;
    }
    if (!clean) fprintf(stderr, "kn_mpi_test: mpiexec -n %d ended with status %d; its output is in %s\n", np, status, log);
    else {
        unlink(results);
        unlink(log);
        rmdir(dir);
    }
    return clean;
}

static int launcher(int argc, char **argv) {
    const char *tap_path = NULL;
    int timeout_s = 120;
    for (int i = 1; i < argc; i++) {
        if (!strncmp(argv[i], "--tap=", 6)) tap_path = argv[i] + 6;
        else if (!strncmp(argv[i], "--timeout=", 10)) timeout_s = atoi(argv[i] + 10);
        else if (!strcmp(argv[i], "--timeout") && i + 1 < argc) timeout_s = atoi(argv[++i]);
    }
    if (timeout_s < 10) timeout_s = 10;
    char self[4096];
    ssize_t l = readlink("/proc/self/exe", self, sizeof self - 1);
    if (l <= 0) {
        fprintf(stderr, "kn_mpi_test: cannot find this program (/proc/self/exe)\n");
        return 2;
    }
    self[l] = '\0';
    setenv("KILN_COMM_TIMEOUT", "10", 0);
    setenv("MPIR_CVAR_POLLS_BEFORE_YIELD", "1", 0);
    setenv("MPIR_CVAR_CH4_OFI_ENABLE_PROGRESS_THREAD", "0", 0);
    const char *ranks = getenv("KN_MPI_TEST_RANKS");
    if (!ranks || !*ranks) ranks = "2 4";
    static verdict v[KN_MPI_TEST_MAX];
    char buf[256];
    snprintf(buf, sizeof buf, "%s", ranks);
    for (char *tok = strtok(buf, " ,"); tok; tok = strtok(NULL, " ,")) {
        int np = atoi(tok);
        if (np < 1) {
            fprintf(stderr, "kn_mpi_test: KN_MPI_TEST_RANKS='%s': expected rank counts like \"2 4\"\n", ranks);
            return 2;
        }
        run_job(self, np, timeout_s, v);
    }
    FILE *tap = tap_path ? fopen(tap_path, "w") : NULL;
    if (tap_path && !tap) {
        fprintf(stderr, "kn_mpi_test: cannot write %s: %s\n", tap_path, strerror(errno));
        return 2;
    }
    const char *done = getenv("KN_TEST_DONE");
    FILE *df = done && *done ? fopen(done, "a") : NULL;
    if (tap) fprintf(tap, "TAP version 13\n1..%d\n", g_ntests);
    int pass = 0;
    for (int t = 0; t < g_ntests; t++) {
        char full[512];
        snprintf(full, sizeof full, "%s::%s", g_tests[t].suite, g_tests[t].name);
        int ok = v[t].state == PASSED;
        pass += ok;
        printf("%s %s\n%s", ok ? "PASS" : "FAIL", full, ok ? "" : v[t].why);
        if (tap) {
            if (ok) fprintf(tap, "ok - %s\n", full);
            else {
                /* "timed out" on the TAP line itself marks it abnormal for run-suite.sh */
                const char *w = v[t].why;
                int head = !strncmp(w, " timed out", 10);
                const char *nl = strchr(w, '\n');
                if (head && nl) fprintf(tap, "not ok - %s%.*s\n%s  ...\n", full, (int)(nl - w), w, nl + 1);
                else fprintf(tap, "not ok - %s\n%s  ...\n", full, w);
            }
        }
        if (ok && df) fprintf(df, "%s\n", full);
    }
    if (df) fclose(df);
    if (tap) fclose(tap);
    printf("%d passed, %d failed (rank counts: %s)\n", pass, g_ntests - pass, ranks);
    return pass == g_ntests ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--relay-worker-fd")) return worker_main(atoi(argv[2]));
    if (argc == 3 && !strcmp(argv[1], "--rank-mode")) {
        /* make test: this program is its own relay's worker (KN_MPI_TEST_RELAY=0: none) */
        static char self[4096];
        ssize_t l = readlink("/proc/self/exe", self, sizeof self - 1);
        const char *no = getenv("KN_MPI_TEST_RELAY");
        if (l > 0) self[l] = '\0';
        return rank_main(argv[2], NULL, l > 0 && !(no && !strcmp(no, "0")) ? self : NULL);
    }
    if (argc == 2 && !strcmp(argv[1], "--list")) {
        for (int t = 0; t < g_ntests; t++) {
            int n = 0, last = t;
            for (int u = 0; u < g_ntests; u++)
                if (!strcmp(g_tests[u].suite, g_tests[t].suite)) n++, last = u;
            bool first = true;
            for (int u = 0; u < t; u++) first = first && strcmp(g_tests[u].suite, g_tests[t].suite);
            if (first) printf("%s: %d test%s\n", g_tests[t].suite, n, n == 1 ? "" : "s");
            printf("%s %s\n", t == last ? "`--" : "|--", g_tests[t].name);
        }
        return 0;
    }
    if (under_mpiexec()) {
        const char *filter = NULL, *worker = NULL;
        for (int i = 1; i < argc; i++)
            if (!strcmp(argv[i], "--filter") && i + 1 < argc) filter = argv[++i];
            else if (!strncmp(argv[i], "--filter=", 9)) filter = argv[i] + 9;
            else if (!strcmp(argv[i], "--relay-worker") && i + 1 < argc) worker = argv[++i];
        return rank_main(NULL, filter, worker);
    }
    return launcher(argc, argv);
}
