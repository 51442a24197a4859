/* status.c — kn_status names and the thread-local error message.
 *
 * The message buffer is per thread (_Thread_local), so concurrent callers never see each
 * other's errors. A message longer than the buffer (1023 bytes) is cut and ends with
 * "..." rather than lost. Recording an error never allocates, so it works when out of
 * memory. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/base.h"

#define KN_ERROR_MAX 1024

static _Thread_local char kn_error_buf[KN_ERROR_MAX];

/* ORDER STATUS */
static const char *const kn_status_names[KN_STATUS_COUNT] = {
    "KN_OK",
    "KN_ERR_ARG",
    "KN_ERR_SHAPE",
    "KN_ERR_DTYPE",
    "KN_ERR_AXIS",
    "KN_ERR_OOM",
    "KN_ERR_IO",
    "KN_ERR_FORMAT",
    "KN_ERR_DEVICE",
    "KN_ERR_UNSUPPORTED",
    "KN_ERR_NOT_IMPLEMENTED",
    "KN_ERR_INTERNAL",
};

const char *kn_status_name(kn_status st) {
    if ((int)st < 0 || st >= KN_STATUS_COUNT) return "KN_ERR_<invalid>";
    return kn_status_names[st];
}

/* The message is formatted into a scratch buffer first, so that wrapping the previous
 * error with context, kn_error(st, "loading %s: %s", path, kn_last_error()), is safe
 * (formatting straight into kn_error_buf would read and write the same bytes). */
kn_status kn_verror(kn_status st, const char *fmt, va_list ap) {
    char tmp[KN_ERROR_MAX];
    int n = fmt ? vsnprintf(tmp, sizeof tmp, fmt, ap) : -1;
    if (n < 0)
        snprintf(tmp, sizeof tmp, "%s (unformattable message)", kn_status_name(st));
    else if (n >= (int)sizeof tmp)
        memcpy(tmp + sizeof tmp - 4, "...", 4);
    memcpy(kn_error_buf, tmp, sizeof tmp);
    return st;
}

kn_status kn_error(kn_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    kn_verror(st, fmt, ap);
    va_end(ap);
    return st;
}

const char *kn_last_error(void) { return kn_error_buf; }

void kn_clear_error(void) { kn_error_buf[0] = '\0'; }

/* The first skeleton message of the process, whatever thread it was on: a unit that cannot
 * return a status (lab 06's GEMM pieces, called on worker threads) is still reported by the
 * caller that checks kn_not_implemented_seen() (kiln train, after each step). 0: none yet,
 * 1: being written, 2: written. */
static _Atomic int kn_skeleton_state;
static char kn_skeleton_msg[KN_ERROR_MAX];

kn_status kn_not_implemented(const char *lab, const char *what) {
    kn_status st = kn_error(KN_ERR_NOT_IMPLEMENTED, "not implemented (%s: %s)", lab ? lab : "lab??",
                            what ? what : "this unit");
    int none = 0;
    if (atomic_compare_exchange_strong(&kn_skeleton_state, &none, 1)) {
        memcpy(kn_skeleton_msg, kn_error_buf, sizeof kn_skeleton_msg);
        atomic_store(&kn_skeleton_state, 2);
    }
    return st;
}

const char *kn_not_implemented_seen(void) {
    return atomic_load(&kn_skeleton_state) == 2 ? kn_skeleton_msg : NULL;
}

_Noreturn void kn_check_failed(const char *cond, const char *file, int line) {
    fflush(stdout);
    fprintf(stderr,
            "kiln: internal invariant broken at %s:%d: %s\n"
            "kiln: this is a bug in kiln, not in your input; please report it\n",
            file, line, cond);
    abort();
}
