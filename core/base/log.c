/* log.c — leveled messages to stderr: "kiln: warn: checkpoint is older than the model".
 *
 * One global level decides what is printed. It starts at KN_LOG_INFO, or at the level
 * named by the environment variable KILN_LOG (debug, info, warn, error, off), read once on
 * first use. kn_log_set_level overrides both.
 *
 * Each message is formatted into a local buffer and written with one fputs, so lines from
 * different threads do not interleave mid-line. A trailing newline in the message is not
 * doubled; a message longer than the buffer is cut with "...". */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/base.h"

#define KN_LOG_UNSET (-1)
#define KN_LOG_LINE_MAX 2048

static _Atomic int kn_log_level_now = KN_LOG_UNSET;

/* ORDER LOG: follows kn_log_level. */
static const char *const kn_log_names[] = {"debug", "info", "warn", "error", "off"};

/* The level named by KILN_LOG, KN_LOG_INFO when unset; an unknown value is reported once
 * and ignored. */
static kn_log_level kn_log_level_from_env(void) {
    const char *s = getenv("KILN_LOG");
    if (!s || !*s) return KN_LOG_INFO;
    for (int l = KN_LOG_DEBUG; l <= KN_LOG_OFF; l++)
        if (!strcmp(s, kn_log_names[l])) return (kn_log_level)l;
    fprintf(stderr,
            "kiln: warn: KILN_LOG=%s is not one of debug, info, warn, error, off; "
            "using info\n",
            s);
    return KN_LOG_INFO;
}

void kn_log_set_level(kn_log_level level) {
    if ((int)level < KN_LOG_DEBUG) level = KN_LOG_DEBUG;
    if (level > KN_LOG_OFF) level = KN_LOG_OFF;
    atomic_store(&kn_log_level_now, (int)level);
}

kn_log_level kn_log_get_level(void) {
    int l = atomic_load(&kn_log_level_now);
    if (l == KN_LOG_UNSET) {
        int want = (int)kn_log_level_from_env();
        /* Only the first thread to get here installs the environment's level, so a
         * kn_log_set_level that raced ahead of us is not overwritten. */
        if (!atomic_compare_exchange_strong(&kn_log_level_now, &l, want)) return (kn_log_level)l;
        l = want;
    }
    return (kn_log_level)l;
}

void kn_log(kn_log_level level, const char *fmt, ...) {
    if ((int)level < KN_LOG_DEBUG || level >= KN_LOG_OFF || level < kn_log_get_level()) return;
    char line[KN_LOG_LINE_MAX];
    int head = snprintf(line, sizeof line, "kiln: %s: ", kn_log_names[level]);
    size_t room = sizeof line - (size_t)head - 1; /* keep one byte for the newline */
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line + head, room, fmt, ap);
    va_end(ap);
    if (n < 0) n = snprintf(line + head, room, "(unformattable message: %s)", fmt);
    size_t len = (size_t)head + ((size_t)n < room ? (size_t)n : room - 1);
    if ((size_t)n >= room) memcpy(line + len - 3, "...", 3);
    if (len == 0 || line[len - 1] != '\n') line[len++] = '\n';
    line[len] = '\0';
    fputs(line, stderr);
}
