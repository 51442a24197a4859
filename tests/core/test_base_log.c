/* test_base_log.c — leveled logging to stderr and the KILN_LOG variable.
 * Each Criterion test runs in its own process, so the global level and the environment
 * start fresh in every test. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kn_test.h"

/* Run fn with stderr sent to a temporary file; return what it wrote (static buffer). */
static const char *capture_stderr(void (*fn)(void)) {
    static char out[4096];
    fflush(stderr);
    FILE *tmp = tmpfile();
    cr_assert(tmp != NULL);
    int saved = dup(2);
    dup2(fileno(tmp), 2);
    fn();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    size_t n = fread(out, 1, sizeof out - 1, tmp);
    out[n] = '\0';
    fclose(tmp);
    return out;
}

static void log_each_level(void) {
    kn_log(KN_LOG_DEBUG, "d%d", 1);
    kn_log(KN_LOG_INFO, "i%d", 2);
    kn_log(KN_LOG_WARN, "w%d", 3);
    kn_log(KN_LOG_ERROR, "e%d", 4);
}

KN_TEST(base_log, default_level_is_info) {
    unsetenv("KILN_LOG");
    cr_assert_eq(kn_log_get_level(), KN_LOG_INFO);
    cr_assert_str_eq(capture_stderr(log_each_level),
                     "kiln: info: i2\nkiln: warn: w3\nkiln: error: e4\n");
}

KN_TEST(base_log, set_level_filters) {
    kn_log_set_level(KN_LOG_WARN);
    cr_assert_str_eq(capture_stderr(log_each_level), "kiln: warn: w3\nkiln: error: e4\n");
    kn_log_set_level(KN_LOG_DEBUG);
    cr_assert_str_eq(capture_stderr(log_each_level),
                     "kiln: debug: d1\nkiln: info: i2\nkiln: warn: w3\nkiln: error: e4\n");
    kn_log_set_level(KN_LOG_OFF);
    cr_assert_str_eq(capture_stderr(log_each_level), "");
}

KN_TEST(base_log, env_sets_the_level) {
    setenv("KILN_LOG", "error", 1);
    cr_assert_eq(kn_log_get_level(), KN_LOG_ERROR);
    cr_assert_str_eq(capture_stderr(log_each_level), "kiln: error: e4\n");
}

static void get_level(void) { cr_assert_eq(kn_log_get_level(), KN_LOG_INFO); }

KN_TEST(base_log, unknown_env_value_warns_and_uses_info) {
    setenv("KILN_LOG", "loud", 1);
    const char *out = capture_stderr(get_level);
    cr_assert(strstr(out, "KILN_LOG=loud") != NULL, "got: %s", out);
}

static void log_newline_and_long(void) {
    kn_log(KN_LOG_WARN, "ends with newline\n");
    char big[5000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    kn_log(KN_LOG_WARN, "%s", big);
}

KN_TEST(base_log, newline_not_doubled_and_long_lines_cut) {
    const char *out = capture_stderr(log_newline_and_long);
    cr_assert(!strncmp(out, "kiln: warn: ends with newline\nkiln: warn: xxx", 45), "got: %.60s",
              out);
    size_t n = strlen(out);
    cr_assert(n < 2100 && n > 2000, "length %zu", n);
    cr_assert_str_eq(out + n - 4, "...\n");
}
