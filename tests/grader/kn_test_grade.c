/* kn_test_grade.c — the grader's KN_TEST completion hook. The grader copies it over
 * tests/harness/kn_test.c in its private copy of the tree; `make test` keeps using the
 * plain hook.
 *
 * Why: a test passes only when Criterion says ok AND this hook recorded that the test body
 * reached its end, so a unit that calls exit(0) or _exit(0) halfway cannot pass. The plain
 * hook writes to the file named by $KN_TEST_DONE at the end of the test, so the code under
 * test could read that variable and write the record itself. Here:
 *   - the grader gives each test its own record "PATH TOKEN": PATH is a random name in a
 *     directory the test may write to but not list, TOKEN a random word the record must
 *     contain. Both, and the TAP report's path, are in a secret file (named by
 *     $KN_GRADE_SECRET, never on a command line) that the runner reads and deletes before
 *     main(); it passes them to its worker in the environment as $KN_GRADE_DONE and
 *     $CRITERION_OUTPUTS;
 *   - in the Criterion worker (the process that runs the test body) a constructor copies
 *     the value into this file's static memory, then wipes it, every other KN_GRADE_*
 *     variable and CRITERION_OUTPUTS (where the runner writes its TAP report) from the
 *     environment and from the initial environment block (/proc/self/environ) before
 *     main() starts, so no unit code ever sees them there;
 *   - every process marks itself non-dumpable, so another process of the same user cannot
 *     read its /proc/PID/environ or memory.
 * Limits (honest): the unit runs in the same address space, so code written to attack this
 * file could still find the copy in static memory. The grader adds what it can from
 * outside: units may not define constructors nor reference kn_test_done or Criterion, and
 * each test runs under its own user id (tests/grader/README.md). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "kn_test.h"

extern char **environ;

static char kn_rec_path[512];  /* where the record goes; empty: record nothing */
static char kn_rec_token[128]; /* the word the record must carry */

/* Wipe the values of the grader's variables in place, then remove them. */
static void kn_grade_scrub(void) {
    for (;;) {
        char name[64] = "";
        for (char **e = environ; e && *e; e++) {
            if (strncmp(*e, "KN_GRADE_", 9) != 0 && strncmp(*e, "CRITERION_OUTPUTS=", 18) != 0) continue;
            char *eq = strchr(*e, '=');
            size_t n = eq ? (size_t)(eq - *e) : strlen(*e);
            if (n >= sizeof name) n = sizeof name - 1;
            memcpy(name, *e, n);
            name[n] = '\0';
            if (eq) memset(eq + 1, 0, strlen(eq + 1));
            break;
        }
        if (!name[0] || unsetenv(name) != 0) return;
    }
}

/* The runner reads the grader's secret file ($KN_GRADE_SECRET, "RECORD TOKEN", the TAP path,
 * then the prefix of the test's outputs for the checker or an empty line), deletes it, and hands both to the worker it starts through its own environment
 * (a non-dumpable process's environment is unreadable to the test's user): nothing secret
 * is ever on a command line or in an environment another process of the test can read. */
static void kn_grade_from_secret(void) {
    const char *sf = getenv("KN_GRADE_SECRET");
    if (!sf || !*sf) return;
    /* under mpiexec (a Criterion binary run as MPI ranks: demo/) each rank has its own file */
    const char *r = getenv("PMI_RANK");
    if (!r) r = getenv("PMI_ID");
    if (!r) r = getenv("OMPI_COMM_WORLD_RANK");
    char path[600], rec[700] = "", tap[600] = "", res[600] = "";
    snprintf(path, sizeof path, "%s/%d", sf, r ? atoi(r) : 0);
    FILE *f = fopen(path, "r");
    if (!f) return;
    if (!fgets(rec, sizeof rec, f) || !fgets(tap, sizeof tap, f)) rec[0] = tap[0] = '\0';
    if (!fgets(res, sizeof res, f)) res[0] = '\0';
    fclose(f);
    unlink(path);
    rec[strcspn(rec, "\n")] = '\0';
    tap[strcspn(tap, "\n")] = '\0';
    res[strcspn(res, "\n")] = '\0';
    if (rec[0] && tap[0]) {
        char out[620];
        snprintf(out, sizeof out, "tap:%s", tap);
        setenv("KN_GRADE_DONE", rec, 1);
        setenv("CRITERION_OUTPUTS", out, 1);
    }
    /* the producer's outputs for the checker (kn_out.h): not a secret of the verdict, but
     * named only here so no other process can find (and spoil) them */
    if (res[0]) setenv("KN_RESULTS_OUT", res, 1);
    memset(rec, 0, sizeof rec);
    memset(tap, 0, sizeof tap);
}

/* Runs before main() in the runner and in each worker (Criterion re-executes itself). */
__attribute__((constructor(101))) static void kn_grade_capture(void) {
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    if (!getenv("BXFI_MAP")) { /* the runner: keep the secrets for the workers it starts */
        kn_grade_from_secret();
        unsetenv("KN_GRADE_SECRET");
        return;
    }
    char *v = getenv("KN_GRADE_DONE");
    if (!v) return;
    const char *sp = strchr(v, ' ');
    size_t plen = sp ? (size_t)(sp - v) : 0;
    if (sp && plen < sizeof kn_rec_path && strlen(sp + 1) < sizeof kn_rec_token) {
        memcpy(kn_rec_path, v, plen);
        kn_rec_path[plen] = '\0';
        strcpy(kn_rec_token, sp + 1);
    }
    kn_grade_scrub();
}

/* KN_TEST's .init: the grader sets every limit from outside (prlimit in run-one.sh), where
 * the code under test cannot raise it; inside, only the start of the test's outputs
 * (kn_out.h: the producer's header, or the checker's reading of it). */
void kn_test_init(void) { kn_test_out_begin_(); }

void kn_test_done(void) {
    kn_out_end();
    if (!kn_rec_path[0]) return;
    char line[768];
    int n = snprintf(line, sizeof line, "%s::%s %s\n", criterion_current_test->category,
                     criterion_current_test->name, kn_rec_token);
    if (n <= 0 || n >= (int)sizeof line) return;
    int fd = open(kn_rec_path, O_WRONLY | O_APPEND | O_CREAT, 0600);
    if (fd < 0) return;
    ssize_t w = write(fd, line, (size_t)n);
    (void)w;
    close(fd);
}
