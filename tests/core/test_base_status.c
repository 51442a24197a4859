/* test_base_status.c — status names, the thread-local error message, KN_TRY, KN_CHECK. */
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kn_test.h"

KN_TEST(base_status, every_code_has_a_distinct_name) {
    cr_assert_str_eq(kn_status_name(KN_OK), "KN_OK");
    cr_assert_str_eq(kn_status_name(KN_ERR_SHAPE), "KN_ERR_SHAPE");
    cr_assert_str_eq(kn_status_name(KN_ERR_NOT_IMPLEMENTED), "KN_ERR_NOT_IMPLEMENTED");
    cr_assert_str_eq(kn_status_name(KN_ERR_INTERNAL), "KN_ERR_INTERNAL");
    for (int a = 0; a < KN_STATUS_COUNT; a++) {
        const char *na = kn_status_name((kn_status)a);
        cr_assert(na && !strncmp(na, "KN_", 3), "status %d has name %s", a, na ? na : "(null)");
        cr_assert(strcmp(na, "KN_ERR_<invalid>") != 0, "status %d has no name", a);
        for (int b = 0; b < a; b++) cr_assert_str_neq(na, kn_status_name((kn_status)b));
    }
    cr_assert_str_eq(kn_status_name(KN_STATUS_COUNT), "KN_ERR_<invalid>");
    cr_assert_str_eq(kn_status_name((kn_status)-1), "KN_ERR_<invalid>");
}

KN_TEST(base_status, error_records_and_clears) {
    kn_clear_error();
    cr_assert_str_eq(kn_last_error(), "");
    kn_status st = kn_error(KN_ERR_SHAPE, "kn_x: shapes [%d,%d] and [%d]", 2, 3, 4);
    cr_assert_eq(st, KN_ERR_SHAPE);
    cr_assert_str_eq(kn_last_error(), "kn_x: shapes [2,3] and [4]");
    kn_clear_error();
    cr_assert_str_eq(kn_last_error(), "");
}

KN_TEST(base_status, long_messages_are_cut_with_dots) {
    char big[3000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    kn_error(KN_ERR_ARG, "%s", big);
    const char *m = kn_last_error();
    size_t n = strlen(m);
    cr_assert_eq(n, 1023, "length %zu", n);
    cr_assert_str_eq(m + n - 3, "...");
    cr_assert_eq(m[0], 'a');
    /* exactly fitting messages are not cut */
    big[1023] = '\0';
    kn_error(KN_ERR_ARG, "%s", big);
    cr_assert_eq(strlen(kn_last_error()), 1023);
    cr_assert_eq(kn_last_error()[1022], 'a');
}

KN_TEST(base_status, wrapping_the_last_error_is_safe) {
    kn_error(KN_ERR_IO, "cannot open %s", "x.bin");
    kn_error(KN_ERR_IO, "loading checkpoint: %s", kn_last_error());
    cr_assert_str_eq(kn_last_error(), "loading checkpoint: cannot open x.bin");
}

KN_TEST(base_status, not_implemented_names_the_lab) {
    KN_ASSERT_ERR(kn_not_implemented("lab03", "the CSE pass"), KN_ERR_NOT_IMPLEMENTED);
    cr_assert_str_eq(kn_last_error(), "not implemented (lab03: the CSE pass)");
}

static kn_status fails_with(kn_status st) {
    return st == KN_OK ? KN_OK : kn_error(st, "inner failed");
}
static int try_steps;
static kn_status two_steps(kn_status first) {
    try_steps = 0;
    KN_TRY(fails_with(first));
    try_steps++;
    KN_TRY(fails_with(KN_OK));
    try_steps++;
    return KN_OK;
}

KN_TEST(base_status, try_propagates_the_first_failure) {
    KN_ASSERT_OK(two_steps(KN_OK));
    cr_assert_eq(try_steps, 2);
    KN_ASSERT_ERR(two_steps(KN_ERR_DTYPE), KN_ERR_DTYPE);
    cr_assert_eq(try_steps, 0);
}

static void *other_thread(void *arg) {
    (void)arg;
    kn_error(KN_ERR_DEVICE, "from the other thread");
    return (void *)(kn_last_error()[0] == 'f' ? (void *)1 : NULL);
}

KN_TEST(base_status, messages_are_per_thread) {
    kn_error(KN_ERR_ARG, "main thread");
    pthread_t t;
    void *ok = NULL;
    cr_assert_eq(pthread_create(&t, NULL, other_thread, NULL), 0);
    pthread_join(t, &ok);
    cr_assert(ok != NULL);
    cr_assert_str_eq(kn_last_error(), "main thread");
}

/* KN_CHECK aborts: run it in a child so this test itself reaches its end. */
KN_TEST(base_status, check_failure_aborts_with_location) {
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        int one = 1;
        KN_CHECK(one == 2);
        _exit(0);
    }
    close(fds[1]);
    char buf[512] = {0};
    size_t got = 0;
    ssize_t k;
    while (got < sizeof buf - 1 && (k = read(fds[0], buf + got, sizeof buf - 1 - got)) > 0)
        got += (size_t)k;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "status %d", status);
    cr_assert(strstr(buf, "test_base_status.c:") != NULL, "message: %s", buf);
    cr_assert(strstr(buf, "one == 2") != NULL, "message: %s", buf);
}
