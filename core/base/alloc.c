/* alloc.c — the one allocation hook of kiln, with fault injection for tests.
 *
 * Every allocation in the library goes through kn_malloc / kn_calloc / kn_realloc /
 * kn_strdup and every release through kn_free. Having one door means a test can make the
 * n-th allocation fail (kn_alloc_fail_after) and check that the code under test returns
 * KN_ERR_OOM cleanly instead of crashing or leaking: the SQLite and Lua test strategy.
 *
 * Invariants:
 *   - kn_malloc(0) and kn_realloc(p, 0) return a unique, non-NULL pointer (one byte is
 *     really allocated), so "NULL means failure" holds without exceptions;
 *   - nothing here aborts: on failure the functions return NULL and leave errno alone;
 *   - requests above PTRDIFF_MAX fail up front (no object may be that large in C, and
 *     sanitizer allocators would otherwise abort instead of returning NULL).
 *
 * The injection state is two C11 atomics, so concurrent threads may allocate while a test
 * counts; the countdown is meant for single-threaded tests (with several threads it is
 * still race-free, but which thread's allocation fails first is not determined). */
#define _GNU_SOURCE /* malloc_usable_size */
#include <limits.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/base.h"

/* Successful allocations so far (kn_malloc, kn_calloc, kn_realloc, kn_strdup). */
static _Atomic long kn_alloc_successes = 0;
/* Allocations still allowed to succeed before every later one fails; -1: injection off. */
static _Atomic long kn_alloc_budget = -1;

void kn_alloc_fail_after(long n) { atomic_store(&kn_alloc_budget, n < 0 ? -1 : n); }

long kn_alloc_count(void) { return atomic_load(&kn_alloc_successes); }

/* Blocks allocated and not yet freed: a test reads it before and after an operation to
 * show that the operation frees what it allocates (a leak check that needs no sanitizer). */
static _Atomic long kn_alloc_blocks = 0;

long kn_alloc_live(void) { return atomic_load(&kn_alloc_blocks); }

/* True when the injected fault says this allocation must fail; otherwise uses up one unit
 * of the budget. A compare-and-swap loop keeps two threads from spending the same unit. */
static bool kn_alloc_should_fail(void) {
    long b = atomic_load(&kn_alloc_budget);
    for (;;) {
        if (b < 0) return false; /* injection off */
        if (b == 0) return true; /* budget spent: fail from now on */
        if (atomic_compare_exchange_weak(&kn_alloc_budget, &b, b - 1)) return false;
    }
}

static void *kn_alloc_done(void *p) {
    if (p) atomic_fetch_add(&kn_alloc_successes, 1);
    return p;
}

/* Bytes in live blocks (as malloc_usable_size counts them: padding included) and the most
 * there were since the last reset: the CPU's memory statistics (kn_alloc_bytes). */
static _Atomic long long kn_alloc_bytes_now = 0, kn_alloc_bytes_top = 0;

static void kn_alloc_count_bytes(void *p, int sign) {
    if (!p) return;
    long long n = (long long)malloc_usable_size(p) * sign;
    long long now = atomic_fetch_add(&kn_alloc_bytes_now, n) + n;
    long long top = atomic_load(&kn_alloc_bytes_top);
    while (now > top && !atomic_compare_exchange_weak(&kn_alloc_bytes_top, &top, now)) {}
}

size_t kn_alloc_bytes(void) { long long b = atomic_load(&kn_alloc_bytes_now); return b > 0 ? (size_t)b : 0; }
size_t kn_alloc_peak_bytes(void) { long long b = atomic_load(&kn_alloc_bytes_top); return b > 0 ? (size_t)b : 0; }
void kn_alloc_reset_peak(void) { atomic_store(&kn_alloc_bytes_top, atomic_load(&kn_alloc_bytes_now)); }

/* A new block (not a realloc'ed one). */
static void *kn_alloc_new(void *p) {
    if (p) atomic_fetch_add(&kn_alloc_blocks, 1);
    kn_alloc_count_bytes(p, 1);
    return kn_alloc_done(p);
}

void *kn_malloc(size_t n) {
    if (n > (size_t)PTRDIFF_MAX || kn_alloc_should_fail()) return NULL;
    return kn_alloc_new(malloc(n ? n : 1));
}

void *kn_calloc(size_t count, size_t size) {
    /* count * size must not wrap around: a wrapped product would allocate a tiny block
     * that the caller then overruns. */
    if (size != 0 && count > (size_t)PTRDIFF_MAX / size) return NULL;
    if (kn_alloc_should_fail()) return NULL;
    size_t n = count * size;
    return kn_alloc_new(calloc(n ? n : 1, 1));
}

/* Like realloc(3), except that n == 0 keeps one byte alive instead of freeing, and on
 * failure p is left untouched and still owned by the caller. kn_realloc(NULL, n) is
 * kn_malloc(n). */
void *kn_realloc(void *p, size_t n) {
    if (!p) return kn_malloc(n);
    if (n > (size_t)PTRDIFF_MAX || kn_alloc_should_fail()) return NULL;
    size_t before = malloc_usable_size(p);
    void *q = realloc(p, n ? n : 1);
    if (q) {
        atomic_fetch_sub(&kn_alloc_bytes_now, (long long)before);
        kn_alloc_count_bytes(q, 1);
    }
    return kn_alloc_done(q);
}

void kn_free(void *p) {
    if (p) atomic_fetch_sub(&kn_alloc_blocks, 1);
    kn_alloc_count_bytes(p, -1);
    free(p);
}

#if defined(__SANITIZE_ADDRESS__)
/* Under AddressSanitizer (make SAN=1) a malloc that cannot be satisfied aborts the process
 * by default ("allocation-size-too-big", "out of memory"). kiln's contract is that it
 * returns NULL, and tests check that, so the sanitizer is asked to behave like libc. This
 * is ASan's documented hook; ASAN_OPTIONS in the environment still overrides it. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }
#endif

/* A kn_malloc'ed copy of s (kn_free it); NULL when s is NULL or on failure. */
char *kn_strdup(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = kn_malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}
