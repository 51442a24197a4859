/* kn_out.c — the producer and checker sides of kn_out.h (why: there).
 *
 * The file PREFIX.RANK ($KN_RESULTS_OUT or $KN_RESULTS_IN, then the MPI rank, 0 outside MPI) is a sequence of records: the name (NUL-terminated, at most
 * KN_OUT_NAME bytes), the length (8 bytes, little-endian host order: both runs are on the
 * same machine), the bytes. The first record of a test is named "test" and holds
 * "suite::name". The checker treats the file as hostile input: every length is bounded by
 * the space the test itself gives the value, a name is read only up to KN_OUT_NAME bytes,
 * and any mismatch fails the test (never a crash, never an unbounded read).
 *
 * Plain C without Criterion: Criterion binaries link it (every .c of tests/harness/), and the MPI
 * harness (mpi/kn_mpi_test.c) includes it, so one file serves both. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kn_out.h"

#define KN_OUT_NAME 256

enum { KN_OUT_OFF, KN_OUT_PRODUCE, KN_OUT_CHECK };

static int g_mode = -1; /* -1: not decided yet */
static int g_fd = -1;
static FILE *g_in;
static void (*g_fail)(const char *msg);
static char g_test[512];    /* suite::name */
static char g_problem[900]; /* the first mismatch of this test, in the checker */
static long g_read;         /* values read in this test, in the checker */
static int g_reported;      /* g_problem was reported */

static int kn_out_rank(void) {
    const char *r = getenv("PMI_RANK");
    if (!r) r = getenv("PMI_ID");
    if (!r) r = getenv("OMPI_COMM_WORLD_RANK");
    return r ? atoi(r) : 0;
}

/* Decide the mode once, from the environment, and open the rank's file. */
static void kn_out_setup(void) {
    if (g_mode >= 0) return;
    g_mode = KN_OUT_OFF;
    const char *out = getenv("KN_RESULTS_OUT"), *in = getenv("KN_RESULTS_IN");
    char path[700];
    if (in && *in) {
        snprintf(path, sizeof path, "%s.%d", in, kn_out_rank());
        g_mode = KN_OUT_CHECK;
        g_in = fopen(path, "rb"); /* none: every value is missing */
    } else if (out && *out) {
        snprintf(path, sizeof path, "%s.%d", out, kn_out_rank());
        g_mode = KN_OUT_PRODUCE;
        g_fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
    }
}

static void kn_out_write_all(const void *p, size_t n) {
    const char *c = p;
    while (g_fd >= 0 && n > 0) {
        ssize_t w = write(g_fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            close(g_fd); /* the grader's file is gone or full: the checker sees the rest missing */
            g_fd = -1;
            return;
        }
        c += w;
        n -= (size_t)w;
    }
}

static void kn_out_put(const char *what, const void *p, size_t n) {
    size_t l = strnlen(what, KN_OUT_NAME - 1);
    char name[KN_OUT_NAME];
    memcpy(name, what, l);
    name[l] = '\0';
    uint64_t len = n;
    kn_out_write_all(name, l + 1);
    kn_out_write_all(&len, sizeof len);
    kn_out_write_all(p, n);
}

__attribute__((format(printf, 1, 2))) static void kn_out_problem(const char *fmt, ...) {
    if (g_problem[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_problem, sizeof g_problem, fmt, ap);
    va_end(ap);
}

/* Read the next record's header into name and *len; 0 at the end of the file. */
static int kn_out_next(char *name, uint64_t *len) {
    if (!g_in) return 0;
    int ch, i = 0;
    while ((ch = fgetc(g_in)) != EOF && ch != '\0')
        if (i < KN_OUT_NAME - 1) name[i++] = (char)ch;
    name[i] = '\0';
    if (ch == EOF) return 0;
    return fread(len, sizeof *len, 1, g_in) == 1;
}

static void kn_out_report(void) {
    if (g_problem[0] && g_fail && !g_reported) {
        g_reported = 1; /* once a test: an MPI check does not stop the test */
        char m[sizeof g_problem];
        memcpy(m, g_problem, sizeof m);
        g_fail(m);
    }
}

void kn_out_begin(const char *suite, const char *name, void (*fail)(const char *msg)) {
    kn_out_setup();
    g_fail = fail;
    g_problem[0] = '\0';
    g_read = 0;
    g_reported = 0;
    snprintf(g_test, sizeof g_test, "%s::%s", suite, name);
    if (g_mode == KN_OUT_PRODUCE) {
        kn_out_put("test", g_test, strlen(g_test) + 1);
    } else if (g_mode == KN_OUT_CHECK) {
        char rn[KN_OUT_NAME], got[sizeof g_test] = "";
        uint64_t len = 0;
        if (!kn_out_next(rn, &len)) {
            kn_out_problem("your code's run of this test wrote no results at all: it stopped (a failed check, a "
                           "fault, exit() or a limit) before its first result, or never started");
            return;
        }
        if (strcmp(rn, "test") != 0 || len >= sizeof got || fread(got, 1, (size_t)len, g_in) != len ||
            strncmp(got, g_test, sizeof g_test) != 0) {
            got[sizeof got - 1] = '\0';
            kn_out_problem("the results are not those of this test: they name %s, not %s", got, g_test);
        }
    }
}

void kn_out_end(void) {
    if (g_mode != KN_OUT_CHECK || g_reported || (g_read > 0 && !g_problem[0])) return;
    /* a checked test that read nothing of the student's (a staff error), or a mismatch no
     * later kn_out call reported (the test ended first): tell the grader, which fails the
     * test (the harness's .fini cannot fail a Criterion test itself) */
    const char *in = getenv("KN_RESULTS_IN");
    char path[700];
    snprintf(path, sizeof path, "%s.unchecked.%d", in, kn_out_rank());
    FILE *f = fopen(path, "w");
    if (f) {
        if (g_problem[0]) fprintf(f, "failed: %s\n", g_problem);
        else fprintf(f, "unchecked: %s\n", g_test);
        fclose(f);
    }
}

bool kn_out_checking(void) {
    kn_out_setup();
    return g_mode == KN_OUT_CHECK;
}

/* The checker's side of one value of n bytes (at most cap for a text): 1 when p now holds
 * the producer's value. */
static int kn_out_take(const char *what, void *p, size_t n, int text) {
    if (g_problem[0]) { /* the test failed here: report it (once) and stop using values */
        kn_out_report();
        return 0;
    }
    char rn[KN_OUT_NAME];
    uint64_t len = 0;
    if (!kn_out_next(rn, &len)) {
        kn_out_problem("your code's run of this test ended before it produced %s (a failed check there, a fault, "
                       "exit() or a limit)", what);
    } else if (strncmp(rn, what, KN_OUT_NAME - 1) != 0) {
        kn_out_problem("your code's run of this test produced %s where %s was due (it took another path)", rn, what);
    } else if (text ? len == 0 || len > n : len != n) {
        kn_out_problem("your code's run of this test produced %s with %llu bytes, not %s%llu", what,
                       (unsigned long long)len, text ? "at most " : "", (unsigned long long)n);
    } else if (fread(p, 1, (size_t)len, g_in) != len) {
        kn_out_problem("your code's run of this test ended in the middle of %s", what);
    } else {
        if (text) ((char *)p)[len - 1] = '\0';
        g_read++;
        return 1;
    }
    kn_out_report();
    return 0;
}

void kn_out(const char *what, void *p, size_t n) {
    kn_out_setup();
    if (g_mode == KN_OUT_PRODUCE) kn_out_put(what, p, n);
    else if (g_mode == KN_OUT_CHECK) kn_out_take(what, p, n, 0);
}

void kn_out_text(const char *what, char *s, size_t cap) {
    kn_out_setup();
    if (cap == 0) return;
    if (g_mode == KN_OUT_PRODUCE) kn_out_put(what, s, strnlen(s, cap - 1) + 1);
    else if (g_mode == KN_OUT_CHECK) kn_out_take(what, s, cap, 1);
}
