/* test_base_alloc.c — the allocation hook: zero sizes, overflow, fault injection. */
#include <stdint.h>
#include <string.h>

#include "kn_test.h"

KN_TEST(base_alloc, zero_size_gives_unique_pointers) {
    void *a = kn_malloc(0), *b = kn_malloc(0), *c = kn_calloc(0, 8), *d = kn_calloc(8, 0);
    cr_assert(a && b && c && d);
    cr_assert(a != b && a != c && b != c && c != d);
    void *e = kn_realloc(a, 0);
    cr_assert(e != NULL);
    kn_free(e);
    kn_free(b);
    kn_free(c);
    kn_free(d);
    kn_free(NULL);
}

KN_TEST(base_alloc, calloc_zeroes_and_rejects_overflow) {
    unsigned char *p = kn_calloc(100, 3);
    cr_assert(p != NULL);
    for (int i = 0; i < 300; i++) cr_assert_eq(p[i], 0);
    kn_free(p);
    cr_assert_null(kn_calloc(SIZE_MAX / 2, 3));
    cr_assert_null(kn_calloc(3, SIZE_MAX / 2));
    cr_assert_null(kn_calloc((size_t)1 << 33, (size_t)1 << 33));
    cr_assert_null(kn_malloc(SIZE_MAX));
    cr_assert_null(kn_malloc((size_t)PTRDIFF_MAX + 1));
}

KN_TEST(base_alloc, realloc_keeps_contents) {
    char *p = kn_realloc(NULL, 4);
    cr_assert(p != NULL);
    memcpy(p, "abc", 4);
    p = kn_realloc(p, 1 << 20);
    cr_assert(p != NULL);
    cr_assert_str_eq(p, "abc");
    p[(1 << 20) - 1] = 'z';
    kn_free(p);
}

KN_TEST(base_alloc, strdup_copies) {
    char *s = kn_strdup("kiln");
    cr_assert_str_eq(s, "kiln");
    kn_free(s);
    cr_assert_null(kn_strdup(NULL));
}

KN_TEST(base_alloc, nth_allocation_fails_then_recovers) {
    long c0 = kn_alloc_count();
    kn_alloc_fail_after(2);
    void *a = kn_malloc(8), *b = kn_calloc(1, 8);
    cr_assert(a && b);
    cr_assert_null(kn_malloc(8));
    cr_assert_null(kn_calloc(1, 8));
    cr_assert_null(kn_strdup("x"));
    cr_assert_null(kn_malloc(0));
    cr_assert_eq(kn_alloc_count(), c0 + 2, "failed allocations must not be counted");
    kn_alloc_fail_after(-1);
    void *c = kn_malloc(8);
    cr_assert(c != NULL);
    cr_assert_eq(kn_alloc_count(), c0 + 3);
    kn_free(a);
    kn_free(b);
    kn_free(c);
}

KN_TEST(base_alloc, fail_after_zero_fails_the_next) {
    char *p = kn_strdup("keep me");
    kn_alloc_fail_after(0);
    cr_assert_null(kn_realloc(p, 4096), "realloc must fail under injection");
    cr_assert_str_eq(p, "keep me", "a failed realloc leaves the block untouched");
    kn_alloc_fail_after(-1);
    kn_free(p);
}

/* The sweep that other areas use: fail the 1st, 2nd, ... allocation of an operation. */
static kn_status three_allocations(void) {
    void *a = kn_malloc(1), *b = NULL, *c = NULL;
    if (!a) return kn_error(KN_ERR_OOM, "three: first");
    if (!(b = kn_malloc(2))) goto oom;
    if (!(c = kn_malloc(3))) goto oom;
    kn_free(a);
    kn_free(b);
    kn_free(c);
    return KN_OK;
oom:
    kn_free(a);
    kn_free(b);
    return kn_error(KN_ERR_OOM, "three: out of memory");
}

KN_TEST(base_alloc, sweep_over_failure_points) {
    long before = kn_alloc_count();
    KN_ASSERT_OK(three_allocations());
    long needed = kn_alloc_count() - before;
    cr_assert_eq(needed, 3);
    for (long k = 0; k < needed; k++) {
        kn_alloc_fail_after(k);
        KN_ASSERT_ERR(three_allocations(), KN_ERR_OOM);
        kn_alloc_fail_after(-1);
    }
    kn_alloc_fail_after(needed);
    KN_ASSERT_OK(three_allocations());
    kn_alloc_fail_after(-1);
}

/* A request no machine can satisfy (1 PiB is beyond the 128 TiB x86-64 user address
 * space) returns NULL, also under AddressSanitizer, which would abort by default. */
KN_TEST(base_alloc, impossible_request_returns_null) {
    size_t pib = (size_t)1 << 50;
    cr_assert_null(kn_malloc(pib));
    cr_assert_null(kn_calloc(pib / 8, 8));
    char *p = kn_strdup("still here");
    cr_assert_null(kn_realloc(p, pib));
    cr_assert_str_eq(p, "still here");
    kn_free(p);
}
