/* test_cuda_cache.c — the caching allocator's bookkeeping (core/storage/cuda_cache.c), run on
 * the CPU with a fake raw allocator that counts calls and can be told to run out of memory.
 * The same code sits under cudaMalloc in the CUDA backend. */
#include <string.h>

#include "kn_test.h"
#include "storage/cuda_cache.h"

typedef struct fake_raw {
    int64_t allocs, frees;
    size_t live, limit; /* bytes handed out now; raw_alloc fails past limit (0: none) */
} fake_raw;

static kn_status fake_alloc(void *ctx, size_t n, void **out) {
    fake_raw *f = ctx;
    if (f->limit && f->live + n > f->limit) return kn_error(KN_ERR_DEVICE, "fake: out of memory for %zu bytes", n);
    void *p = kn_malloc(n);
    if (!p) return kn_error(KN_ERR_OOM, "fake: host out of memory");
    memset(p, 0xAB, n); /* touch every byte: ASan catches a class smaller than asked */
    f->allocs++;
    f->live += n;
    *out = p;
    return KN_OK;
}

static void fake_free(void *ctx, void *p, size_t n) {
    fake_raw *f = ctx;
    f->frees++;
    f->live -= n;
    kn_free(p);
}

static kn_cache *new_cache(fake_raw *f) {
    kn_cache *c = NULL;
    KN_ASSERT_OK(kn_cache_new(&c, (kn_cache_raw){f, fake_alloc, fake_free}));
    return c;
}

KN_TEST(cuda_cache, class_sizes_round_up_with_bounded_waste) {
    cr_assert_eq(kn_cache_class_size(0), 0);
    cr_assert_eq(kn_cache_class_size(1), 512);
    cr_assert_eq(kn_cache_class_size(512), 512);
    cr_assert_eq(kn_cache_class_size(513), 1024);
    cr_assert_eq(kn_cache_class_size(4096), 4096);
    cr_assert_eq(kn_cache_class_size(4097), 5120);
    cr_assert_eq(kn_cache_class_size(8192), 8192);
    cr_assert_eq(kn_cache_class_size(8193), 10240);
    cr_assert_eq(kn_cache_class_size(7169), 8192);
    kn_rng r = kn_rng_new(7);
    for (int i = 0; i < 2000; i++) {
        size_t n = 1 + (size_t)(kn_rng_u32(&r) % (1u << (1 + kn_rng_u32(&r) % 30)));
        size_t c = kn_cache_class_size(n);
        cr_assert(c >= n && (n <= 4096 || c - n <= n / 4), "n=%zu class=%zu", n, c);
        cr_assert_eq(kn_cache_class_size(c), c, "a class size is its own class (n=%zu)", n);
    }
}

KN_TEST(cuda_cache, steady_state_makes_no_raw_allocations) {
    fake_raw f = {0};
    kn_cache *c = new_cache(&f);
    const size_t sizes[] = {4, 1000, 4097, 1 << 20, 3 * (1 << 20) + 5, 40000};
    void *p[6];
    for (int step = 0; step < 5; step++) {
        for (int i = 0; i < 6; i++) KN_ASSERT_OK(kn_cache_alloc(c, sizes[i], &p[i]));
        for (int i = 0; i < 6; i++) memset(p[i], i, sizes[i]);
        for (int i = 5; i >= 0; i--) kn_cache_free(c, p[i], sizes[i]);
        cr_assert_eq(f.allocs, 6, "step %d: raw allocations %lld, expected only the first step's 6", step,
                     (long long)f.allocs);
    }
    kn_cache_stats s = kn_cache_get_stats(c);
    cr_assert_eq(s.allocs, 30);
    cr_assert_eq(s.hits, 24);
    cr_assert_eq(s.current, 0);
    size_t want_peak = 0, want_res = 0;
    for (int i = 0; i < 6; i++) { want_peak += sizes[i]; want_res += kn_cache_class_size(sizes[i]); }
    cr_assert_eq(s.peak, want_peak);
    cr_assert_eq(s.reserved, want_res);
    cr_assert_eq(s.cached, want_res);
    cr_assert_eq(s.peak_reserved, want_res);
    cr_assert_eq(f.live, want_res);
    cr_assert_eq(kn_cache_empty(c), want_res);
    s = kn_cache_get_stats(c);
    cr_assert_eq(s.reserved, 0);
    cr_assert_eq(s.cached, 0);
    cr_assert_eq(f.live, 0);
    cr_assert_eq(f.frees, 6);
    kn_cache_destroy(c);
}

KN_TEST(cuda_cache, same_class_blocks_are_reused_lifo_and_distinct_while_live) {
    fake_raw f = {0};
    kn_cache *c = new_cache(&f);
    void *a, *b, *x;
    KN_ASSERT_OK(kn_cache_alloc(c, 600, &a));
    KN_ASSERT_OK(kn_cache_alloc(c, 1000, &b)); /* same class (1024) */
    cr_assert_neq(a, b);
    kn_cache_free(c, a, 600);
    kn_cache_free(c, b, 1000);
    KN_ASSERT_OK(kn_cache_alloc(c, 700, &x));
    cr_assert_eq(x, b, "the last block freed is handed out first");
    KN_ASSERT_OK(kn_cache_alloc(c, 2000, &a)); /* another class: a fresh block */
    cr_assert_eq(f.allocs, 3);
    kn_cache_stats s = kn_cache_get_stats(c);
    cr_assert_eq(s.current, 2700);
    cr_assert_eq(s.cached, 1024);
    kn_cache_free(c, x, 700);
    kn_cache_free(c, a, 2000);
    kn_cache_destroy(c);
    cr_assert_eq(f.live, 0, "destroy gives every cached block back");
}

KN_TEST(cuda_cache, out_of_memory_drops_the_cache_and_retries) {
    fake_raw f = {.limit = 1 << 20};
    kn_cache *c = new_cache(&f);
    void *a, *b;
    KN_ASSERT_OK(kn_cache_alloc(c, 600 << 10, &a));
    kn_cache_free(c, a, 600 << 10); /* cached: 640 KiB of the 1 MiB held */
    KN_ASSERT_OK(kn_cache_alloc(c, 900 << 10, &b));
    cr_assert_eq(f.frees, 1, "the cached block was released to make room");
    kn_cache_stats s = kn_cache_get_stats(c);
    cr_assert_eq(s.cached, 0);
    cr_assert_eq(s.reserved, kn_cache_class_size(900 << 10));
    /* Nothing cached left: a request that cannot fit fails with the raw status. */
    void *z = (void *)&f;
    KN_ASSERT_ERR(kn_cache_alloc(c, 800 << 10, &z), KN_ERR_DEVICE);
    cr_assert_eq(z, (void *)&f, "out is untouched on failure");
    cr_assert(strstr(kn_last_error(), "kn_cache_alloc") && strstr(kn_last_error(), "fake: out of memory"),
              "message: %s", kn_last_error());
    cr_assert(strstr(kn_last_error(), "0.8 MiB") && strstr(kn_last_error(), "0.9 MiB live"),
              "the size asked and the sizes in use: %s", kn_last_error());
    kn_cache_free(c, b, 900 << 10);
    kn_cache_destroy(c);
    cr_assert_eq(f.live, 0);
}

KN_TEST(cuda_cache, zero_bytes_and_bad_arguments) {
    fake_raw f = {0};
    kn_cache *c = new_cache(&f);
    void *p = (void *)&f;
    KN_ASSERT_OK(kn_cache_alloc(c, 0, &p));
    cr_assert_null(p);
    kn_cache_free(c, NULL, 0);
    cr_assert_eq(f.allocs, 0);
    KN_ASSERT_ERR(kn_cache_alloc(NULL, 8, &p), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_cache_alloc(c, SIZE_MAX, &p), KN_ERR_OOM);
    kn_cache *d = NULL;
    KN_ASSERT_ERR(kn_cache_new(&d, (kn_cache_raw){NULL, NULL, fake_free}), KN_ERR_ARG);
    void *small = NULL;
    KN_ASSERT_OK(kn_cache_alloc(c, 100, &small));
    KN_ASSERT_OK(kn_cache_alloc(c, 5000, &p)); /* leave 100 B in use, 0 cached */
    kn_cache_reset_peak(c);
    kn_cache_stats s = kn_cache_get_stats(c);
    cr_assert_eq(s.peak, 5100);
    cr_assert_eq(s.peak_reserved, 512 + 5120);
    kn_cache_free(c, p, 5000);
    kn_cache_destroy(c);
    cr_assert_eq(f.live, 512, "a block still in use is not freed by destroy");
    fake_free(&f, small, 512);
}
