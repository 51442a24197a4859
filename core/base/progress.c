/* progress.c — a progress bar that behaves on a terminal and in a log file.
 *
 * On a terminal the bar is one line redrawn in place with a carriage return:
 *     train  [#########...........]  45%  450/1000  loss 2.31  ETA 0:42
 * at most ten times a second (redrawing faster only costs time), and the last draw in
 * kn_progress_end ends the line. Anywhere else (CI, `2> log`, a pipe) carriage returns
 * would pile up as garbage, so the bar prints a plain line only when the percentage
 * crosses a multiple of quiet_every (10 by default), and one final line at the end:
 *     train  450/1000  45%  loss 2.31  ETA 0:42
 *     train  1000/1000  100%  loss 1.02  done in 1:23
 * KILN_PROGRESS=0 in the environment silences every bar.
 *
 * The ETA assumes the remaining items go at the average speed so far:
 *     eta = elapsed * (total - done) / done.
 * Time comes from CLOCK_MONOTONIC, which never jumps when the wall clock is set. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kiln/base.h"

#define KN_PROGRESS_WIDTH 20     /* characters inside the brackets */
#define KN_PROGRESS_REDRAW_S 0.1 /* at most this often on a terminal */

double kn_time_now(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return 0.0;
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void kn_format_duration(double seconds, char *buf, size_t n) {
    if (!buf || n == 0) return;
    if (!(seconds >= 0.0) || seconds > 9999.0 * 3600.0) {
        snprintf(buf, n, "?:??");
        return;
    }
    long s = (long)(seconds + 0.5);
    if (s < 3600)
        snprintf(buf, n, "%ld:%02ld", s / 60, s % 60);
    else
        snprintf(buf, n, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
}

void kn_progress_begin_file(kn_progress *p, FILE *out, const char *label, int64_t total) {
    const char *env = getenv("KILN_PROGRESS");
    memset(p, 0, sizeof *p);
    p->out = out;
    p->label = label ? label : "";
    p->total = total;
    p->done = 0;
    p->t_start = kn_time_now();
    p->t_last_draw = -1e300; /* the first update on a terminal draws */
    p->last_pct_printed = 0;
    p->tty = out && isatty(fileno(out));
    p->enabled = out && !(env && !strcmp(env, "0"));
    p->quiet_every = 10;
}

void kn_progress_begin(kn_progress *p, const char *label, int64_t total) {
    kn_progress_begin_file(p, stderr, label, total);
}

/* Percent done, 0..100, or -1 when the total is unknown. */
static int kn_progress_pct(const kn_progress *p) {
    if (p->total <= 0) return -1;
    int64_t d = p->done < 0 ? 0 : p->done > p->total ? p->total : p->done;
    if (d <= INT64_MAX / 100) return (int)(d * 100 / p->total);
    return (int)((double)d * 100.0 / (double)p->total);
}

/* Write one state of the bar. `final`: the line of kn_progress_end (elapsed time instead
 * of an ETA). The whole line is formatted first and written with one fputs. */
static void kn_progress_draw(kn_progress *p, const char *extra, bool final, double now) {
    char line[512];
    size_t len = 0;
    int pct = kn_progress_pct(p);
#define KN_APPEND(...)                                                                             \
    do {                                                                                           \
        if (len < sizeof line) {                                                                   \
            int k_ = snprintf(line + len, sizeof line - len, __VA_ARGS__);                         \
            if (k_ > 0) len += (size_t)k_;                                                         \
        }                                                                                          \
    } while (0)
    if (p->tty) KN_APPEND("\r");
    KN_APPEND("%s", p->label);
    if (p->tty && pct >= 0) {
        char bar[KN_PROGRESS_WIDTH + 1];
        int fill = pct * KN_PROGRESS_WIDTH / 100;
        for (int k = 0; k < KN_PROGRESS_WIDTH; k++) bar[k] = k < fill ? '#' : '.';
        bar[KN_PROGRESS_WIDTH] = '\0';
        KN_APPEND("  [%s]  %3d%%  %lld/%lld", bar, pct, (long long)p->done, (long long)p->total);
    } else if (pct >= 0) {
        KN_APPEND("  %lld/%lld  %d%%", (long long)p->done, (long long)p->total, pct);
    } else {
        KN_APPEND("  %lld", (long long)p->done);
    }
    if (extra && *extra) KN_APPEND("  %s", extra);
    char dur[32];
    double elapsed = now - p->t_start;
    if (final) {
        kn_format_duration(elapsed, dur, sizeof dur);
        KN_APPEND("  done in %s", dur);
    } else if (pct >= 0 && p->done > 0) {
        kn_format_duration(elapsed * (double)(p->total - p->done) / (double)p->done, dur,
                           sizeof dur);
        KN_APPEND("  ETA %s", dur);
    }
    if (p->tty) KN_APPEND("\033[K"); /* clear what a longer previous draw left */
    if (!p->tty || final) KN_APPEND("\n");
#undef KN_APPEND
    if (len >= sizeof line) { /* cut: keep the line ending */
        len = sizeof line - 1;
        line[len - 1] = '\n';
        line[len] = '\0';
    }
    fputs(line, p->out);
    fflush(p->out);
    p->t_last_draw = now;
}

void kn_progress_update(kn_progress *p, int64_t done, const char *extra) {
    if (!p || !p->enabled) return;
    p->done = done;
    double now = kn_time_now();
    if (p->tty) {
        if (now - p->t_last_draw >= KN_PROGRESS_REDRAW_S) kn_progress_draw(p, extra, false, now);
        return;
    }
    int pct = kn_progress_pct(p);
    int every = p->quiet_every > 0 ? p->quiet_every : 10;
    if (pct < 0 || pct >= 100) return; /* unknown total, or the end line says it */
    if (pct / every > p->last_pct_printed / every) {
        kn_progress_draw(p, extra, false, now);
        p->last_pct_printed = pct;
    }
}

void kn_progress_end(kn_progress *p, const char *extra) {
    if (!p || !p->enabled) return;
    kn_progress_draw(p, extra, true, kn_time_now());
    p->enabled = false; /* later updates are ignored */
}
