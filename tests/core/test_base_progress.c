/* test_base_progress.c — the progress bar in log mode (a file), in terminal mode (forced
 * on a file), silenced by KILN_PROGRESS=0, and the duration format. */
#include <stdlib.h>
#include <string.h>

#include "kn_test.h"

static char text[8192];

/* Everything written to f, as a string (static buffer); closes f. */
static const char *slurp(FILE *f) {
    rewind(f);
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    return text;
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

KN_TEST(base_progress, log_mode_prints_every_ten_percent) {
    unsetenv("KILN_PROGRESS");
    FILE *f = tmpfile();
    cr_assert(f != NULL);
    kn_progress p;
    kn_progress_begin_file(&p, f, "train", 100);
    cr_assert(!p.tty, "a file is not a terminal");
    for (int i = 0; i <= 100; i++) kn_progress_update(&p, i, "loss 2.31");
    kn_progress_end(&p, "loss 1.02");
    kn_progress_update(&p, 50, "after the end"); /* ignored */
    const char *out = slurp(f);
    cr_assert_eq(count_lines(out), 10, "9 lines (10%% .. 90%%) and the end line:\n%s", out);
    cr_assert(!strncmp(out, "train  10/100  10%  loss 2.31  ETA ", 35), "first line: %s", out);
    cr_assert(strstr(out, "train  90/100  90%  loss 2.31  ETA ") != NULL, "%s", out);
    cr_assert(strstr(out, "train  100/100  100%  loss 1.02  done in 0:0") != NULL, "%s", out);
    cr_assert(strchr(out, '\r') == NULL && strchr(out, '\033') == NULL,
              "no terminal codes in a log");
    cr_assert(strstr(out, "after the end") == NULL);
}

KN_TEST(base_progress, log_mode_with_big_steps_and_custom_interval) {
    unsetenv("KILN_PROGRESS"); /* the caller's environment must not silence the bar */
    FILE *f = tmpfile();
    kn_progress p;
    kn_progress_begin_file(&p, f, "eval", 1000);
    p.quiet_every = 25;
    kn_progress_update(&p, 10, NULL);  /* 1%: nothing */
    kn_progress_update(&p, 600, NULL); /* jumps past 25 and 50: one line */
    kn_progress_update(&p, 700, NULL); /* 70%: nothing (no new multiple of 25) */
    kn_progress_update(&p, 760, NULL); /* 76%: a line */
    kn_progress_end(&p, NULL);
    const char *out = slurp(f);
    cr_assert_eq(count_lines(out), 3, "%s", out);
    cr_assert(!strncmp(out, "eval  600/1000  60%  ETA ", 25), "%s", out);
    cr_assert(strstr(out, "\neval  760/1000  76%  ETA ") != NULL, "%s", out);
    cr_assert(strstr(out, "\neval  760/1000  76%  done in ") != NULL,
              "the end line keeps the last count: %s", out);
}

KN_TEST(base_progress, unknown_total_prints_only_the_end) {
    unsetenv("KILN_PROGRESS"); /* the caller's environment must not silence the bar */
    FILE *f = tmpfile();
    kn_progress p;
    kn_progress_begin_file(&p, f, "scan", 0);
    for (int i = 0; i < 57; i++) kn_progress_update(&p, i + 1, NULL);
    kn_progress_end(&p, "x");
    const char *out = slurp(f);
    cr_assert(!strncmp(out, "scan  57  x  done in 0:0", 24) && count_lines(out) == 1, "got: %s",
              out);
}

KN_TEST(base_progress, environment_silences_it) {
    setenv("KILN_PROGRESS", "0", 1);
    FILE *f = tmpfile();
    kn_progress p;
    kn_progress_begin_file(&p, f, "train", 10);
    for (int i = 0; i <= 10; i++) kn_progress_update(&p, i, NULL);
    kn_progress_end(&p, NULL);
    cr_assert_str_eq(slurp(f), "");
}

KN_TEST(base_progress, terminal_mode_redraws_one_line) {
    unsetenv("KILN_PROGRESS");
    FILE *f = tmpfile();
    kn_progress p;
    kn_progress_begin_file(&p, f, "train", 200);
    p.tty = true; /* as if f were a terminal */
    kn_progress_update(&p, 100, "loss 2.31");
    cr_assert(p.t_last_draw >= p.t_start, "the first update draws");
    p.t_last_draw = kn_time_now() + 1000; /* pretend it just drew: the next is throttled */
    kn_progress_update(&p, 101, "skipped");
    kn_progress_end(&p, NULL);
    const char *out = slurp(f);
    cr_assert(
        !strncmp(out, "\rtrain  [##########..........]   50%  100/200  loss 2.31  ETA 0:0", 64),
        "got: %s", out);
    cr_assert(strstr(out, "\033[K\rtrain  [##########..........]   50%  101/200  done in 0:0") !=
                  NULL,
              "got: %s", out);
    cr_assert(strstr(out, "skipped") == NULL, "throttled draws are skipped");
    size_t n = strlen(out);
    cr_assert(n > 4 && !strcmp(out + n - 4, "\033[K\n"), "the end clears and ends the line");
    cr_assert_eq(count_lines(out), 1, "one line in the end");
}

KN_TEST(base_progress, durations) {
    struct {
        double s;
        const char *want;
    } c[] = {
        {0, "0:00"},        {0.4, "0:00"},         {0.6, "0:01"},   {42, "0:42"},
        {59.6, "1:00"},     {605, "10:05"},        {3599, "59:59"}, {3600, "1:00:00"},
        {3723, "1:02:03"},  {360000, "100:00:00"}, {-1, "?:??"},    {NAN, "?:??"},
        {INFINITY, "?:??"},
    };
    char buf[32];
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
        kn_format_duration(c[k].s, buf, sizeof buf);
        cr_assert_str_eq(buf, c[k].want, "%g seconds", c[k].s);
    }
    char small[4];
    kn_format_duration(3723, small, sizeof small);
    cr_assert_str_eq(small, "1:0", "cut to the buffer, still terminated");
}

KN_TEST(base_progress, monotonic_clock) {
    double a = kn_time_now(), b = kn_time_now();
    cr_assert(a > 0 && b >= a);
}
