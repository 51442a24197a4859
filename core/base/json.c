/* json.c — a streaming JSON writer: results files, metrics logs, Gradescope reports.
 *
 * The writer emits text as it goes, to a FILE or into a growing string, and keeps only
 * what is needed to put commas and colons in the right places: for each open container
 * (up to KN_JSON_MAX_DEPTH) whether it is an object and whether it already has an entry,
 * and whether a key is waiting for its value.
 *
 * What it guarantees:
 *   - the text it writes is valid JSON (RFC 8259) or kn_json_finish reports an error:
 *     every misuse (a value where a key is expected, a key in an array, an unbalanced
 *     end, a second top-level value, nesting deeper than KN_JSON_MAX_DEPTH) is recorded
 *     in j->err and j->errmsg at the first occurrence, every later call is ignored, and
 *     kn_json_finish returns it (KN_ERR_ARG; KN_ERR_OOM or KN_ERR_IO for those failures);
 *   - strings are escaped: '"' and '\' with a backslash, control characters below 0x20 as
 *     \b \f \n \r \t or \u00XX; bytes that are not valid UTF-8 (stray continuation bytes,
 *     overlong forms, surrogates, truncated sequences, code points past U+10FFFF) become
 *     U+FFFD, one per maximal invalid subsequence as Unicode recommends;
 *   - numbers: non-finite doubles are written as null (JSON has no NaN or Inf); finite
 *     ones with the fewest of 15, 16 or 17 significant digits that read back to the same
 *     double (so 0.1 prints as 0.1, and every value round-trips); integers exactly;
 *   - pretty mode puts each entry on its own line, indented by two spaces per level, and
 *     ends the document with a newline; empty containers print as {} and [].
 * Numbers assume the "C" locale (kiln never calls setlocale). */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/base.h"

static void kn_json_init(kn_json *j, FILE *f, bool pretty) {
    memset(j, 0, sizeof *j);
    j->f = f;
    j->pretty = pretty;
    j->err = KN_OK;
}

void kn_json_init_file(kn_json *j, FILE *f, bool pretty) {
    kn_json_init(j, f, pretty);
    if (!f) {
        j->err = KN_ERR_ARG;
        snprintf(j->errmsg, sizeof j->errmsg, "kn_json_init_file: FILE is NULL");
    }
}

void kn_json_init_string(kn_json *j, bool pretty) { kn_json_init(j, NULL, pretty); }

/* Record the first misuse; later ones are consequences and are not reported. */
static void kn_json_fail(kn_json *j, kn_status st, const char *what) {
    if (j->err != KN_OK) return;
    j->err = st;
    snprintf(j->errmsg, sizeof j->errmsg, "%s", what);
}

static void kn_json_put(kn_json *j, const char *s, size_t n) {
    if (j->err != KN_OK || n == 0) return;
    if (j->f) {
        if (fwrite(s, 1, n, j->f) != n)
            kn_json_fail(j, KN_ERR_IO, "kn_json: write to the file failed");
        return;
    }
    if (j->len + n + 1 > j->cap) {
        size_t cap = j->cap ? j->cap : 256;
        while (cap < j->len + n + 1) cap *= 2;
        char *b = kn_realloc(j->buf, cap);
        if (!b) {
            kn_json_fail(j, KN_ERR_OOM, "kn_json: out of memory growing the output string");
            return;
        }
        j->buf = b;
        j->cap = cap;
    }
    memcpy(j->buf + j->len, s, n);
    j->len += n;
    j->buf[j->len] = '\0';
}

static void kn_json_puts(kn_json *j, const char *s) { kn_json_put(j, s, strlen(s)); }

static void kn_json_newline(kn_json *j, int depth) {
    if (!j->pretty) return;
    kn_json_put(j, "\n", 1);
    for (int d = 0; d < depth; d++) kn_json_put(j, "  ", 2);
}

/* Everything a value needs before it: a check that a value may come here, then the
 * comma and indentation of an array entry (an object entry's were written by its key).
 * `what` names the caller for the error message. Returns false on misuse. */
static bool kn_json_before_value(kn_json *j, const char *what) {
    if (j->err != KN_OK) return false;
    char msg[sizeof j->errmsg];
    if (j->depth == 0 && j->need_comma[0]) {
        snprintf(msg, sizeof msg, "%s: a second top-level value (a document holds one value)",
                 what);
        kn_json_fail(j, KN_ERR_ARG, msg);
        return false;
    }
    if (j->is_object[j->depth] && !j->expect_value) {
        snprintf(msg, sizeof msg,
                 "%s: a value inside an object at depth %d where a key is expected", what,
                 j->depth);
        kn_json_fail(j, KN_ERR_ARG, msg);
        return false;
    }
    if (j->expect_value) {
        j->expect_value = false;
    } else if (j->depth > 0) {
        if (j->need_comma[j->depth]) kn_json_put(j, ",", 1);
        kn_json_newline(j, j->depth);
    }
    j->need_comma[j->depth] = true;
    return true;
}

/* Length of the valid UTF-8 sequence at s (1 to 4), or 0 when it is invalid; *bad then
 * receives the length of the maximal invalid subsequence to replace by one U+FFFD. */
static size_t kn_utf8_seq(const unsigned char *s, size_t avail, size_t *bad) {
    unsigned c = s[0];
    size_t need;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF)
        need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0)
            lo = 0xA0; /* no overlong forms */
        else if (c == 0xED)
            hi = 0x9F; /* no UTF-16 surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0)
            lo = 0x90; /* no overlong forms */
        else if (c == 0xF4)
            hi = 0x8F; /* nothing past U+10FFFF */
    } else {
        *bad = 1; /* a continuation byte or a byte never used in UTF-8 */
        return 0;
    }
    size_t k = 1;
    for (; k < need && k < avail; k++) {
        unsigned b = s[k];
        if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) break;
    }
    if (k == need) return need;
    *bad = k;
    return 0;
}

static void kn_json_quoted(kn_json *j, const char *str) {
    const unsigned char *s = (const unsigned char *)str;
    size_t n = strlen(str), i = 0, run = 0; /* run: bytes since i that need no escape */
    kn_json_put(j, "\"", 1);
    while (i + run < n) {
        const unsigned char *p = s + i + run;
        const char *esc = NULL;
        char ubuf[8];
        size_t bad = 0, len = 1;
        if (*p == '"')
            esc = "\\\"";
        else if (*p == '\\')
            esc = "\\\\";
        else if (*p == '\n')
            esc = "\\n";
        else if (*p == '\t')
            esc = "\\t";
        else if (*p == '\r')
            esc = "\\r";
        else if (*p == '\b')
            esc = "\\b";
        else if (*p == '\f')
            esc = "\\f";
        else if (*p < 0x20) {
            snprintf(ubuf, sizeof ubuf, "\\u%04x", *p);
            esc = ubuf;
        } else if (*p >= 0x80) {
            len = kn_utf8_seq(p, n - i - run, &bad);
            if (len == 0) esc = "\xEF\xBF\xBD"; /* U+FFFD */
        }
        if (!esc) {
            run += len; /* copied later in one piece */
            continue;
        }
        kn_json_put(j, (const char *)s + i, run);
        kn_json_puts(j, esc);
        i += run + (bad ? bad : 1);
        run = 0;
    }
    kn_json_put(j, (const char *)s + i, run);
    kn_json_put(j, "\"", 1);
}

static void kn_json_begin(kn_json *j, bool object, const char *what) {
    if (!kn_json_before_value(j, what)) return;
    if (j->depth + 1 >= KN_JSON_MAX_DEPTH) {
        char msg[sizeof j->errmsg];
        snprintf(msg, sizeof msg, "%s: nesting deeper than %d levels", what, KN_JSON_MAX_DEPTH - 1);
        kn_json_fail(j, KN_ERR_ARG, msg);
        return;
    }
    kn_json_put(j, object ? "{" : "[", 1);
    j->depth++;
    j->is_object[j->depth] = object;
    j->need_comma[j->depth] = false;
}

static void kn_json_end(kn_json *j, bool object, const char *what) {
    if (j->err != KN_OK) return;
    char msg[sizeof j->errmsg];
    if (j->depth == 0 || j->is_object[j->depth] != object) {
        snprintf(msg, sizeof msg, "%s: no open %s to end (%s)", what, object ? "object" : "array",
                 j->depth == 0 ? "nothing is open"
                 : object      ? "an array is open"
                               : "an object is open");
        kn_json_fail(j, KN_ERR_ARG, msg);
        return;
    }
    if (j->expect_value) {
        snprintf(msg, sizeof msg, "%s: the last key has no value", what);
        kn_json_fail(j, KN_ERR_ARG, msg);
        return;
    }
    if (j->need_comma[j->depth]) kn_json_newline(j, j->depth - 1);
    kn_json_put(j, object ? "}" : "]", 1);
    j->depth--;
}

void kn_json_begin_object(kn_json *j) { kn_json_begin(j, true, "kn_json_begin_object"); }
void kn_json_begin_array(kn_json *j) { kn_json_begin(j, false, "kn_json_begin_array"); }
void kn_json_end_object(kn_json *j) { kn_json_end(j, true, "kn_json_end_object"); }
void kn_json_end_array(kn_json *j) { kn_json_end(j, false, "kn_json_end_array"); }

void kn_json_key(kn_json *j, const char *key) {
    if (j->err != KN_OK) return;
    char msg[sizeof j->errmsg];
    if (!j->is_object[j->depth] || j->expect_value) {
        snprintf(msg, sizeof msg, "kn_json_key: key \"%.60s\" %s", key ? key : "(NULL)",
                 j->expect_value ? "follows a key that has no value yet"
                                 : "outside an object (keys only go inside objects)");
        kn_json_fail(j, KN_ERR_ARG, msg);
        return;
    }
    if (!key) {
        kn_json_fail(j, KN_ERR_ARG, "kn_json_key: key is NULL");
        return;
    }
    if (j->need_comma[j->depth]) kn_json_put(j, ",", 1);
    kn_json_newline(j, j->depth);
    kn_json_quoted(j, key);
    kn_json_puts(j, j->pretty ? ": " : ":");
    j->need_comma[j->depth] = true;
    j->expect_value = true;
}

void kn_json_string(kn_json *j, const char *s) {
    if (!s) {
        kn_json_fail(j, KN_ERR_ARG, "kn_json_string: string is NULL (use kn_json_null for null)");
        return;
    }
    if (kn_json_before_value(j, "kn_json_string")) kn_json_quoted(j, s);
}

void kn_json_number(kn_json *j, double x) {
    if (!kn_json_before_value(j, "kn_json_number")) return;
    if (!isfinite(x)) {
        kn_json_puts(j, "null");
        return;
    }
    char buf[40];
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, x);
        if (strtod(buf, NULL) == x) break;
    }
    kn_json_puts(j, buf);
}

void kn_json_int(kn_json *j, int64_t x) {
    if (!kn_json_before_value(j, "kn_json_int")) return;
    char buf[24];
    snprintf(buf, sizeof buf, "%" PRId64, x);
    kn_json_puts(j, buf);
}

void kn_json_bool(kn_json *j, bool x) {
    if (kn_json_before_value(j, "kn_json_bool")) kn_json_puts(j, x ? "true" : "false");
}

void kn_json_null(kn_json *j) {
    if (kn_json_before_value(j, "kn_json_null")) kn_json_puts(j, "null");
}

/* Check that exactly one complete value was written, flush, and hand over the text
 * (string mode: *out owns it, kn_free it; on error *out is NULL and the buffer is freed).
 * Returns the first misuse or I/O error with its message in kn_last_error(). */
kn_status kn_json_finish(kn_json *j, char **out) {
    if (out) *out = NULL;
    if (j->err == KN_OK) {
        char msg[sizeof j->errmsg];
        if (j->depth > 0) {
            snprintf(msg, sizeof msg, "kn_json_finish: %d container%s still open (innermost: %s)",
                     j->depth, j->depth > 1 ? "s" : "",
                     j->is_object[j->depth] ? "object" : "array");
            kn_json_fail(j, KN_ERR_ARG, msg);
        } else if (!j->need_comma[0]) {
            kn_json_fail(j, KN_ERR_ARG,
                         "kn_json_finish: nothing was written (a document holds one value)");
        } else if (j->pretty) {
            kn_json_put(j, "\n", 1);
        }
    }
    if (j->f && j->err == KN_OK && (fflush(j->f) != 0 || ferror(j->f)))
        kn_json_fail(j, KN_ERR_IO, "kn_json_finish: writing the file failed");
    if (j->err != KN_OK) {
        kn_free(j->buf);
        j->buf = NULL;
        j->len = j->cap = 0;
        return kn_error(j->err, "%s", j->errmsg);
    }
    if (!j->f) {
        if (!j->buf) { /* cannot happen after a value was written, but stay total */
            kn_json_fail(j, KN_ERR_INTERNAL, "kn_json_finish: empty buffer");
            return kn_error(j->err, "%s", j->errmsg);
        }
        if (out)
            *out = j->buf;
        else
            kn_free(j->buf);
        j->buf = NULL;
        j->len = j->cap = 0;
    }
    return KN_OK;
}
