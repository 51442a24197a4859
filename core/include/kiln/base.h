/* kiln/base.h — the ground floor: status codes and error messages, logging, the one
 * allocation hook, arenas, dtypes (f32 f64 f16 bf16 i32 i64 u8 bool) and their conversions,
 * the Philox counter-based RNG, a JSON writer and a TTY-aware progress bar.
 *
 * Every other kiln header includes this one. Nothing here knows about tensors or graphs.
 *
 * Failure model (see ARCHITECTURE.md, "Three kinds of failure"):
 *   - what a caller can get wrong (bad shapes, files, arguments) returns a kn_status other
 *     than KN_OK and leaves a message in a thread-local buffer, read with kn_last_error();
 *   - a broken invariant of the library itself is caught by KN_CHECK, always on, which
 *     prints file:line and aborts;
 *   - expensive invariants use KN_DEBUG_ASSERT, compiled out with NDEBUG.
 * Input is never validated inside an assert. */
#ifndef KILN_BASE_H
#define KILN_BASE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#define KN_NORETURN [[noreturn]]
#else
#define KN_NORETURN _Noreturn
#endif

/* ---------------------------------------------------------------- status and errors */

/* ORDER STATUS: kn_status_name() in core/base/status.c follows this order. */
typedef enum kn_status {
    KN_OK = 0,
    KN_ERR_ARG,             /* a bad argument: NULL, out of range, inconsistent */
    KN_ERR_SHAPE,           /* shapes that do not fit the operation */
    KN_ERR_DTYPE,           /* a dtype the operation does not accept */
    KN_ERR_AXIS,            /* an axis out of range or repeated */
    KN_ERR_OOM,             /* an allocation failed */
    KN_ERR_IO,              /* a file could not be opened, read or written */
    KN_ERR_FORMAT,          /* a file or text is malformed */
    KN_ERR_DEVICE,          /* a device (CUDA, ...) call failed or no device */
    KN_ERR_UNSUPPORTED,     /* valid, but not supported by this build or backend */
    KN_ERR_NOT_IMPLEMENTED, /* a lab unit that is still a skeleton */
    KN_ERR_INTERNAL,        /* should not happen; a bug in kiln */
    KN_STATUS_COUNT
} kn_status;

/* Record an error: formats the message into the thread-local error buffer, prefixed by
 * nothing (callers name the operation: "kn_tensor_add: shapes [2,3] and [4] do not
 * broadcast"). Returns st, so `return kn_error(KN_ERR_SHAPE, ...)` reads naturally. */
kn_status kn_error(kn_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
kn_status kn_verror(kn_status st, const char *fmt, va_list ap);

/* The message of the last error recorded on this thread ("" when none). */
const char *kn_last_error(void);
/* Forget the last error. */
void kn_clear_error(void);
/* A short name for a status: "KN_ERR_SHAPE". */
const char *kn_status_name(kn_status st);

/* What a lab skeleton returns: records "not implemented (labNN: what)" and returns
 * KN_ERR_NOT_IMPLEMENTED. `lab` is "lab01", `what` says what the student writes. */
kn_status kn_not_implemented(const char *lab, const char *what);
/* The message of the first kn_not_implemented call of the process, on any thread (NULL
 * when none): how a caller learns that a unit which returns no status (void) was a skeleton. */
const char *kn_not_implemented_seen(void);

/* Propagate a failing status: KN_TRY(kn_tensor_empty(&t, ...)); */
#define KN_TRY(expr)                          \
    do {                                      \
        kn_status kn_try_st_ = (expr);        \
        if (kn_try_st_ != KN_OK) return kn_try_st_; \
    } while (0)

/* Always-on invariant check of the library itself (never for user input). */
#define KN_CHECK(cond)                                                   \
    do {                                                                 \
        if (!(cond)) kn_check_failed(#cond, __FILE__, __LINE__);         \
    } while (0)
KN_NORETURN void kn_check_failed(const char *cond, const char *file, int line);

#ifdef NDEBUG
#define KN_DEBUG_ASSERT(cond) ((void)0)
#else
#define KN_DEBUG_ASSERT(cond) KN_CHECK(cond)
#endif

/* ---------------------------------------------------------------- logging */

typedef enum kn_log_level { KN_LOG_DEBUG, KN_LOG_INFO, KN_LOG_WARN, KN_LOG_ERROR, KN_LOG_OFF } kn_log_level;

/* Messages at or above the level are written to stderr as "kiln: warn: ...", one line
 * each (the newline is added; a trailing one in fmt is not doubled).
 * The initial level is KN_LOG_INFO, or KILN_LOG=debug|info|warn|error|off. */
void kn_log_set_level(kn_log_level level);
kn_log_level kn_log_get_level(void);
void kn_log(kn_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---------------------------------------------------------------- allocation */

/* Every allocation in kiln goes through these. kn_malloc(0) returns a unique non-NULL
 * pointer. On failure they return NULL (they never abort): callers turn that into
 * KN_ERR_OOM. */
void *kn_malloc(size_t n);
void *kn_calloc(size_t count, size_t size); /* overflow of count*size fails cleanly */
void *kn_realloc(void *p, size_t n);
void kn_free(void *p);
char *kn_strdup(const char *s);

/* Fault injection for tests: after `n` more successful allocations, every later one fails
 * (n = 0: the very next fails). kn_alloc_fail_after(-1) turns injection off.
 * kn_alloc_count() is the number of successful allocations so far (for sweeps that make
 * the 1st, 2nd, ... allocation of an operation fail and check it fails cleanly). */
void kn_alloc_fail_after(long n);
long kn_alloc_count(void);
/* Blocks allocated through these and not yet kn_free'd: equal before and after an
 * operation that frees what it allocates (tests' leak check, no sanitizer needed). */
long kn_alloc_live(void);
/* Bytes in live kiln blocks (malloc_usable_size: padding included), the most since the
 * last kn_alloc_reset_peak, and that reset (to what is live now): the CPU's peak memory
 * of an operation, as kiln allocates it. */
size_t kn_alloc_bytes(void);
size_t kn_alloc_peak_bytes(void);
void kn_alloc_reset_peak(void);

/* ---------------------------------------------------------------- arena */

/* A bump allocator: many allocations, one release. Blocks are chained; an allocation never
 * moves. Alignment is a power of two up to 4096. */
typedef struct kn_arena_block kn_arena_block;
typedef struct kn_arena {
    kn_arena_block *head;  /* newest block, owns its successors */
    size_t block_size;     /* default size of a new block */
    size_t used;           /* bytes handed out, padding included */
} kn_arena;

void kn_arena_init(kn_arena *a, size_t block_size);
/* NULL on failure (OOM or bad alignment), with a message in kn_last_error(); never aborts.
 * align 0 means _Alignof(max_align_t); n 0 gives a distinct one-byte allocation. */
void *kn_arena_alloc(kn_arena *a, size_t n, size_t align);
void kn_arena_reset(kn_arena *a); /* forget everything, keep one block for reuse */
void kn_arena_free(kn_arena *a);  /* release every block */

/* ---------------------------------------------------------------- dtypes */

/* ORDER DTYPE: the table in core/base/dtype.c follows this order. */
typedef enum kn_dtype {
    KN_DT_F32 = 0,
    KN_DT_F64,
    KN_DT_F16,
    KN_DT_BF16,
    KN_DT_I32,
    KN_DT_I64,
    KN_DT_U8,
    KN_DT_BOOL,
    KN_DT_COUNT
} kn_dtype;

size_t kn_dtype_size(kn_dtype dt);          /* bytes per element; 0 for an invalid dtype */
const char *kn_dtype_name(kn_dtype dt);     /* "f32", "bf16", ...; "?" when invalid */
bool kn_dtype_valid(kn_dtype dt);
bool kn_dtype_is_float(kn_dtype dt);        /* f32 f64 f16 bf16 */
/* Parse "f32", "float32", "bf16", ...: KN_ERR_ARG naming the text when unknown. */
kn_status kn_dtype_from_name(const char *name, kn_dtype *out);
/* The dtype two operands promote to (f64 > f32 > bf16/f16 > i64 > i32 > u8 > bool;
 * f16 with bf16 gives f32). KN_DT_COUNT (invalid) when either operand is invalid. */
kn_dtype kn_dtype_promote(kn_dtype a, kn_dtype b);

/* Half-precision conversions. Rounding is to nearest, ties to even; NaN stays NaN (quiet),
 * +-Inf stays +-Inf, overflow goes to +-Inf, subnormals are produced and read exactly.
 * The narrowing from f32 (kn_f32_to_f16, kn_f32_to_bf16) is lab 09's, below. */
float kn_f16_to_f32(uint16_t h);
float kn_bf16_to_f32(uint16_t b);
uint16_t kn_f64_to_f16(double x);  /* rounds once from f64 (no double rounding via f32) */
uint16_t kn_f64_to_bf16(double x); /* likewise */

/* ---------------------------------------------------------------- lab 09 units
 * Written by the student in labs/lab09-precision/ (the staff's units are linked for every
 * other lab); the core calls them for every f32 -> f16/bf16 conversion (kn_dtype_convert,
 * and so every cast of an f32 tensor). A skeleton records "not implemented (lab09: ...)"
 * and returns 0. The loss scaler's unit is in kiln/optim.h.
 *
 * kn_f32_to_bf16 (bf16.c): the bf16 nearest to x, ties to even, from x's bits alone: bf16
 *   is the top 16 bits of an f32 (1 sign, 8 exponent, 7 fraction bits), so rounding adds
 *   to the dropped 16 bits and keeps the top half; a carry may ripple into the exponent
 *   (and past the largest finite value onto +-Inf). NaN gives a quiet NaN (the top payload
 *   bits kept, fraction bit 6 set): 0x7FC0 | sign for the default NaN.
 * kn_f32_to_f16 (f16.c): the f16 nearest to x (1, 5, 10 bits, bias 15), ties to even, from
 *   x's bits: the exponent rebiased; fewer than 2^-14 in magnitude: a subnormal (units of
 *   2^-24) or a signed zero, correctly rounded; 65520 and above (the tie above the largest,
 *   65504, included): +-Inf; NaN: sign | 0x7E00 | (x's 23 fraction bits >> 13). Equal to
 *   kn_f64_to_f16((double)x) for every x. */
uint16_t kn_f32_to_bf16(float x);
uint16_t kn_f32_to_f16(float x);

/* Read element i of a buffer of dtype dt as a double, and write a double into one.
 * Writing a float into an integer dtype truncates toward zero and saturates at the
 * dtype's range; NaN becomes 0. Writing into bool stores (x != 0). These are the slow,
 * obviously-correct path used by reference kernels and tests. */
double kn_dtype_load(kn_dtype dt, const void *base, int64_t i);
void kn_dtype_store(kn_dtype dt, void *base, int64_t i, double x);
/* Convert n elements between dtypes (contiguous buffers). */
void kn_dtype_convert(kn_dtype dst_dt, void *dst, kn_dtype src_dt, const void *src, int64_t n);

/* ---------------------------------------------------------------- RNG: Philox4x32-10 */

/* Counter-based: the numbers are a pure function of (seed, stream, position), so any
 * element can be computed independently, on the CPU or on the GPU, in any order, and a
 * stream can be split into independent sub-streams without state.
 *
 * Element i of stream (seed, stream) is word (i % 4) of
 *     philox4x32_10(counter = {i/4 lo, i/4 hi, stream lo, stream hi}, key = {seed lo, seed hi})
 * (the same layout as cuRAND's Philox4_32_10 with subsequence = stream, offset = i). */
typedef struct kn_rng {
    uint64_t seed;    /* the key */
    uint64_t stream;  /* which independent stream of that seed */
    uint64_t offset;  /* how many 32-bit words of the stream are used up */
} kn_rng;

void kn_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]);
kn_rng kn_rng_new(uint64_t seed);
/* An independent child stream, a pure function of (parent seed, parent stream, id); the
 * parent is unchanged. Splitting with different ids gives non-overlapping streams. */
kn_rng kn_rng_split(const kn_rng *r, uint64_t id);
uint32_t kn_rng_u32(kn_rng *r);                 /* next word; advances offset by 1 */
/* Fill n values, starting at the word `offset`, and advance offset by the words used:
 *   uniform_f32: n (value j from word j);   uniform_f64: 2n (words 2j, 2j+1);
 *   normal_f32: n rounded up to even (values 2p, 2p+1 from words 2p, 2p+1);
 *   normal_f64: 2 * (n rounded up to even) (values 2p, 2p+1 from words 4p .. 4p+3).
 * base/rng.c gives the exact formulas, which the GPU kernels reproduce. */
void kn_rng_uniform_f32(kn_rng *r, float *out, int64_t n);   /* in [0, 1) */
void kn_rng_normal_f32(kn_rng *r, float *out, int64_t n);    /* N(0, 1), Box-Muller */
void kn_rng_uniform_f64(kn_rng *r, double *out, int64_t n);  /* in [0, 1), 53 bits */
void kn_rng_normal_f64(kn_rng *r, double *out, int64_t n);
/* The word at absolute position i of a stream (no state): what a GPU thread computes. */
uint32_t kn_rng_word_at(uint64_t seed, uint64_t stream, uint64_t i);
/* u32 -> float in [0,1): (x >> 8) * 2^-24. Shared by CPU and GPU code. */
float kn_u32_to_unit_f32(uint32_t x);

/* ---------------------------------------------------------------- JSON writer */

/* A streaming writer with comma and nesting bookkeeping, writing to a FILE or to a
 * growing string. Strings are escaped (control characters, quotes, backslash, and
 * invalid UTF-8 replaced by U+FFFD); non-finite numbers are written as null.
 * Misuse (a value where a key is expected, unbalanced end) makes kn_json_finish return
 * KN_ERR_ARG with a message; it never writes invalid JSON silently. */
#define KN_JSON_MAX_DEPTH 64
typedef struct kn_json {
    FILE *f;              /* destination, or NULL to write into buf */
    char *buf;            /* owned, NUL-terminated when f == NULL */
    size_t len, cap;
    int depth;
    bool need_comma[KN_JSON_MAX_DEPTH];
    bool is_object[KN_JSON_MAX_DEPTH];
    bool expect_value;    /* a key was written, its value is next */
    bool pretty;          /* newlines and two-space indentation */
    kn_status err;        /* first misuse or I/O error, KN_OK otherwise */
    char errmsg[192];     /* its message, reported by kn_json_finish */
} kn_json;

void kn_json_init_file(kn_json *j, FILE *f, bool pretty);
void kn_json_init_string(kn_json *j, bool pretty);
void kn_json_begin_object(kn_json *j);
void kn_json_end_object(kn_json *j);
void kn_json_begin_array(kn_json *j);
void kn_json_end_array(kn_json *j);
void kn_json_key(kn_json *j, const char *key);
void kn_json_string(kn_json *j, const char *s);
void kn_json_number(kn_json *j, double x);
void kn_json_int(kn_json *j, int64_t x);
void kn_json_bool(kn_json *j, bool x);
void kn_json_null(kn_json *j);
/* Checks balance; for string mode, *out receives the owned text (caller kn_free()s). */
kn_status kn_json_finish(kn_json *j, char **out);

/* ---------------------------------------------------------------- progress bar */

/* On a terminal: one line redrawn in place,
 *   "train  [#########.........]  45%  450/1000  loss 2.31  1.2k tok/s  ETA 0:42"
 * Not on a terminal (CI, logs): a plain line at most every `quiet_every` percent (10 by
 * default) and at the end, so logs stay short. KILN_PROGRESS=0 silences it. */
typedef struct kn_progress {
    FILE *out;           /* stderr by default */
    const char *label;
    int64_t total, done;
    double t_start;      /* seconds, monotonic */
    double t_last_draw;
    int last_pct_printed;
    bool tty;
    bool enabled;
    int quiet_every;     /* percent between plain lines when not a terminal (10) */
} kn_progress;

/* Start a bar on stderr. total <= 0 means unknown: a count without bar, percent or ETA. */
void kn_progress_begin(kn_progress *p, const char *label, int64_t total);
/* The same on another stream (a log file, a test's tmpfile); a terminal is detected with
 * isatty on its descriptor. */
void kn_progress_begin_file(kn_progress *p, FILE *out, const char *label, int64_t total);
/* Set the count of done items and an optional extra text ("loss 2.31  1.2k tok/s"). */
void kn_progress_update(kn_progress *p, int64_t done, const char *extra);
void kn_progress_end(kn_progress *p, const char *extra);
/* Monotonic seconds. */
double kn_time_now(void);
/* A duration as "m:ss" (under an hour) or "h:mm:ss", e.g. 42 -> "0:42", 3723 -> "1:02:03";
 * negative, NaN or absurdly long (over 9999 hours) -> "?:??". Writes at most n bytes. */
void kn_format_duration(double seconds, char *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* KILN_BASE_H */
