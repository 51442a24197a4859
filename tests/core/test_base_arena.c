/* test_base_arena.c — the bump allocator: alignment, many blocks, oversized requests,
 * reset, out of memory. */
#include <stdint.h>
#include <string.h>

#include "kn_test.h"

KN_TEST(base_arena, every_alignment_is_honoured) {
    kn_arena a;
    kn_arena_init(&a, 1000);
    for (int rep = 0; rep < 3; rep++)
        for (size_t align = 1; align <= 4096; align *= 2) {
            unsigned char *p = kn_arena_alloc(&a, 3 + rep, align);
            cr_assert(p != NULL, "align %zu", align);
            cr_assert_eq((uintptr_t)p % align, 0, "pointer %p not aligned to %zu", (void *)p,
                         align);
            memset(p, 0xAB, 3 + (size_t)rep);
        }
    unsigned char *q = kn_arena_alloc(&a, 16, 0);
    cr_assert(q && (uintptr_t)q % _Alignof(max_align_t) == 0, "align 0 means max_align_t");
    kn_arena_free(&a);
}

KN_TEST(base_arena, bad_alignment_fails_cleanly) {
    kn_arena a;
    kn_arena_init(&a, 0);
    size_t bad[] = {3, 6, 12, 8192, 1u << 20, SIZE_MAX};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        kn_clear_error();
        cr_assert_null(kn_arena_alloc(&a, 8, bad[k]), "align %zu", bad[k]);
        cr_assert(strstr(kn_last_error(), "kn_arena_alloc") != NULL, "message: %s",
                  kn_last_error());
    }
    cr_assert_eq(a.used, 0);
    cr_assert_null(kn_arena_alloc(&a, SIZE_MAX - 10, 8));
    cr_assert_null(kn_arena_alloc(NULL, 8, 8));
    kn_arena_free(&a);
}

/* Thousands of allocations over many small blocks: none overlaps another, none moves. */
KN_TEST(base_arena, many_blocks_no_overlap) {
    enum { N = 5000 };
    kn_arena a;
    kn_arena_init(&a, 256);
    static unsigned char *ptr[N];
    static size_t len[N];
    size_t sum = 0;
    uint32_t x = 12345;
    for (int i = 0; i < N; i++) {
        x = x * 1664525u + 1013904223u;
        len[i] = (x >> 8) % 300; /* some exceed the block size */
        size_t align = (size_t)1 << ((x >> 24) % 7);
        ptr[i] = kn_arena_alloc(&a, len[i], align);
        cr_assert(ptr[i] != NULL);
        cr_assert_eq((uintptr_t)ptr[i] % align, 0);
        memset(ptr[i], i & 0xFF, len[i]);
        sum += len[i];
    }
    cr_assert(a.used >= sum, "used %zu < requested %zu", a.used, sum);
    for (int i = 0; i < N; i++)
        for (size_t k = 0; k < len[i]; k++)
            cr_assert_eq(ptr[i][k], (unsigned char)(i & 0xFF), "allocation %d byte %zu overwritten",
                         i, k);
    kn_arena_free(&a);
    cr_assert_null(a.head);
}

KN_TEST(base_arena, oversized_request_keeps_the_current_block) {
    kn_arena a;
    kn_arena_init(&a, 1024);
    char *s1 = kn_arena_alloc(&a, 16, 1);
    char *big = kn_arena_alloc(&a, 100000, 64);
    char *s2 = kn_arena_alloc(&a, 16, 1);
    cr_assert(s1 && big && s2);
    cr_assert_eq(s2, s1 + 16, "the small allocation after a big one continues the same block");
    memset(big, 1, 100000);
    kn_arena_free(&a);
}

KN_TEST(base_arena, reset_reuses_one_block) {
    kn_arena a;
    kn_arena_init(&a, 4096);
    for (int i = 0; i < 100; i++) cr_assert(kn_arena_alloc(&a, 1000, 8));
    cr_assert(kn_arena_alloc(&a, 50000, 8));
    kn_arena_reset(&a);
    cr_assert_eq(a.used, 0);
    cr_assert(a.head != NULL, "one block is kept");
    long before = kn_alloc_count();
    for (int i = 0; i < 4; i++) cr_assert(kn_arena_alloc(&a, 1000, 8));
    cr_assert_eq(kn_alloc_count(), before, "allocations that fit the kept block allocate nothing");
    kn_arena_free(&a);
    /* an arena stays usable after kn_arena_free */
    cr_assert(kn_arena_alloc(&a, 10, 1));
    kn_arena_free(&a);
}

KN_TEST(base_arena, zero_size_gives_distinct_pointers) {
    kn_arena a;
    kn_arena_init(&a, 64);
    void *p = kn_arena_alloc(&a, 0, 1), *q = kn_arena_alloc(&a, 0, 1);
    cr_assert(p && q && p != q);
    kn_arena_free(&a);
}

KN_TEST(base_arena, out_of_memory_returns_null_and_recovers) {
    kn_arena a;
    kn_arena_init(&a, 128);
    char *p = kn_arena_alloc(&a, 100, 1);
    cr_assert(p != NULL);
    size_t used = a.used;
    kn_alloc_fail_after(0);
    kn_clear_error();
    cr_assert_null(kn_arena_alloc(&a, 100, 1), "a new block is needed and cannot be had");
    cr_assert(strstr(kn_last_error(), "out of memory") != NULL, "message: %s", kn_last_error());
    cr_assert_null(kn_arena_alloc(&a, 5000, 1));
    cr_assert_eq(a.used, used, "a failed allocation changes nothing");
    cr_assert(kn_arena_alloc(&a, 10, 1) != NULL, "what still fits the block needs no malloc");
    kn_alloc_fail_after(-1);
    cr_assert(kn_arena_alloc(&a, 100, 1) != NULL);
    kn_arena_free(&a);
}
