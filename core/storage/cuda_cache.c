/* cuda_cache.c — the caching allocator of cuda_cache.h: size-class free lists over a raw
 * allocator, with byte statistics.
 *
 * Each size class has one bin: a stack (LIFO, so the most recently freed block, likely
 * still in L2, is reused first) of free blocks of exactly that class size. Allocation pops
 * from the bin of the request's class or calls the raw allocator; freeing pushes. Nothing
 * is ever split or merged, so a block's class is a pure function of the size it was asked
 * with, and the caller's nbytes at free time is all we need (no pointer map).
 *
 * Plain C (no CUDA): the CUDA backend (device_cuda.cu) plugs cudaMalloc/cudaFree in as the
 * raw allocator; the tests plug in a counting fake. */
#include <pthread.h>
#include <string.h>

#include "storage/cuda_cache.h"

/* 8 classes of 512 bytes up to 4 KiB, then 4 per power of two from 2^12 up to 2^63. */
#define KN_CACHE_SMALL 4096u
#define KN_CACHE_NBINS (8 + 4 * 52)

typedef struct kn_cache_bin {
    void **ptrs;
    int64_t len, cap;
} kn_cache_bin;

struct kn_cache {
    kn_cache_raw raw;
    pthread_mutex_t mu;
    kn_cache_bin bins[KN_CACHE_NBINS];
    kn_cache_stats st;
};

static int floor_log2(size_t x) {
    int k = 0;
    while (x >>= 1) k++;
    return k;
}

size_t kn_cache_class_size(size_t n) {
    if (n == 0) return 0;
    if (n <= KN_CACHE_SMALL) return (n + 511) / 512 * 512;
    if (n > ((size_t)1 << 62)) return 0; /* no class: too large to round up safely */
    int k = floor_log2(n);
    size_t step = (size_t)1 << (k - 2);
    return (n + step - 1) / step * step;
}

/* Bin index of a class size (as returned by kn_cache_class_size, nonzero). */
static int bin_of(size_t cls) {
    if (cls <= KN_CACHE_SMALL) return (int)(cls / 512) - 1;
    int k = floor_log2(cls);
    int q = (int)(cls >> (k - 2)) - 4;
    return 8 + (k - 12) * 4 + q;
}

kn_status kn_cache_new(kn_cache **out, kn_cache_raw raw) {
    if (!out || !raw.raw_alloc || !raw.raw_free)
        return kn_error(KN_ERR_ARG, "kn_cache_new: out or a raw allocator function is NULL");
    kn_cache *c = kn_calloc(1, sizeof *c);
    if (!c) return kn_error(KN_ERR_OOM, "kn_cache_new: out of memory");
    c->raw = raw;
    pthread_mutex_init(&c->mu, NULL);
    *out = c;
    return KN_OK;
}

static void note_reserved(kn_cache *c, size_t cls) {
    c->st.reserved += cls;
    if (c->st.reserved > c->st.peak_reserved) c->st.peak_reserved = c->st.reserved;
}

/* Release every cached block; the mutex is held. */
static size_t empty_locked(kn_cache *c) {
    size_t freed = 0;
    for (int b = 0; b < KN_CACHE_NBINS; b++) {
        kn_cache_bin *bin = &c->bins[b];
        size_t cls = b < 8 ? (size_t)(b + 1) * 512
                           : ((size_t)(4 + (b - 8) % 4)) << (12 + (b - 8) / 4 - 2);
        for (int64_t i = 0; i < bin->len; i++) {
            c->raw.raw_free(c->raw.ctx, bin->ptrs[i], cls);
            c->st.raw_frees++;
            freed += cls;
        }
        bin->len = 0;
    }
    c->st.reserved -= freed;
    c->st.cached -= freed;
    return freed;
}

kn_status kn_cache_alloc(kn_cache *c, size_t nbytes, void **out) {
    if (!c || !out) return kn_error(KN_ERR_ARG, "kn_cache_alloc: cache or out is NULL");
    if (nbytes == 0) { *out = NULL; return KN_OK; }
    size_t cls = kn_cache_class_size(nbytes);
    if (cls == 0) return kn_error(KN_ERR_OOM, "kn_cache_alloc: %zu bytes is more than any device holds", nbytes);
    kn_cache_bin *bin = &c->bins[bin_of(cls)];
    pthread_mutex_lock(&c->mu);
    void *p = NULL;
    kn_status st = KN_OK;
    if (bin->len > 0) {
        p = bin->ptrs[--bin->len];
        c->st.cached -= cls;
        c->st.hits++;
    } else {
        st = c->raw.raw_alloc(c->raw.ctx, cls, &p);
        if (st != KN_OK && empty_locked(c) > 0) { /* out of memory: drop the cache, retry once */
            kn_clear_error();
            st = c->raw.raw_alloc(c->raw.ctx, cls, &p);
        }
        if (st == KN_OK) { c->st.raw_allocs++; note_reserved(c, cls); }
    }
    if (st == KN_OK) {
        c->st.allocs++;
        c->st.current += nbytes;
        if (c->st.current > c->st.peak) c->st.peak = c->st.current;
        *out = p;
    }
    size_t live = c->st.current, held = c->st.reserved, peak = c->st.peak;
    pthread_mutex_unlock(&c->mu);
    if (st != KN_OK) {
        char why[400];
        snprintf(why, sizeof why, "%s", kn_last_error());
        return kn_error(st, "kn_cache_alloc: %zu bytes (%.1f MiB, class %zu) asked while kiln holds %.1f MiB live (%.1f MiB "
                        "reserved, peak %.1f MiB): %s; a smaller --batch or --context, or --remat, needs less", nbytes,
                        nbytes / 1048576.0, cls, live / 1048576.0, held / 1048576.0, peak / 1048576.0, why);
    }
    return KN_OK;
}

void kn_cache_free(kn_cache *c, void *ptr, size_t nbytes) {
    if (!c || !ptr) return;
    size_t cls = kn_cache_class_size(nbytes);
    KN_CHECK(cls > 0);
    kn_cache_bin *bin = &c->bins[bin_of(cls)];
    pthread_mutex_lock(&c->mu);
    c->st.current -= nbytes;
    if (bin->len == bin->cap) {
        int64_t cap = bin->cap ? 2 * bin->cap : 16;
        void **np = kn_realloc(bin->ptrs, (size_t)cap * sizeof *np);
        if (!np) { /* no room to remember it: give it straight back */
            c->raw.raw_free(c->raw.ctx, ptr, cls);
            c->st.raw_frees++;
            c->st.reserved -= cls;
            pthread_mutex_unlock(&c->mu);
            return;
        }
        bin->ptrs = np;
        bin->cap = cap;
    }
    bin->ptrs[bin->len++] = ptr;
    c->st.cached += cls;
    pthread_mutex_unlock(&c->mu);
}

size_t kn_cache_empty(kn_cache *c) {
    if (!c) return 0;
    pthread_mutex_lock(&c->mu);
    size_t n = empty_locked(c);
    pthread_mutex_unlock(&c->mu);
    return n;
}

kn_cache_stats kn_cache_get_stats(kn_cache *c) {
    kn_cache_stats s = {0};
    if (!c) return s;
    pthread_mutex_lock(&c->mu);
    s = c->st;
    pthread_mutex_unlock(&c->mu);
    return s;
}

void kn_cache_reset_peak(kn_cache *c) {
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    c->st.peak = c->st.current;
    c->st.peak_reserved = c->st.reserved;
    pthread_mutex_unlock(&c->mu);
}

void kn_cache_destroy(kn_cache *c) {
    if (!c) return;
    kn_cache_empty(c);
    for (int b = 0; b < KN_CACHE_NBINS; b++) kn_free(c->bins[b].ptrs);
    pthread_mutex_destroy(&c->mu);
    kn_free(c);
}
