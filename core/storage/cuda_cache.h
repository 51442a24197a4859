/* cuda_cache.h — a caching allocator over any raw allocator (the CUDA backend's cudaMalloc).
 *
 * Why: cudaMalloc and cudaFree are slow (cudaFree synchronizes the whole device), and a
 * training step allocates and frees the same sizes every step. The cache keeps freed blocks
 * in free lists by size class and hands them out again, so after the first step the raw
 * allocator is never called (the "steady state").
 *
 * Size classes: a request is rounded up to its class, and only blocks of exactly that class
 * are reused (no splitting, no coalescing: simple, and a block is always freed with its
 * own size). Classes are multiples of 512 bytes up to 4 KiB, then four classes per power of
 * two (2^k, 1.25 2^k, 1.5 2^k, 1.75 2^k): at most 25% of a block is waste.
 *
 * Invariants: reserved = in-use class bytes + cached class bytes; every cached block came
 * from raw_alloc with its class size and goes back to raw_free with that size. The caller
 * frees each block with the nbytes it asked for (the class is recomputed from it). When
 * raw_alloc fails, the cache gives back every cached block and tries once more.
 *
 * Plain C with no CUDA in it, so it builds everywhere and is unit-tested on the CPU with a
 * fake raw allocator (tests/core/test_cuda_cache.c). Thread-safe: one mutex per cache. */
#ifndef KILN_CUDA_CACHE_H
#define KILN_CUDA_CACHE_H

#include "kiln/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The raw allocator below the cache. raw_alloc returns KN_OK and a block of exactly nbytes,
 * or an error status (recorded with kn_error) when it cannot. */
typedef struct kn_cache_raw {
    void *ctx;
    kn_status (*raw_alloc)(void *ctx, size_t nbytes, void **out);
    void (*raw_free)(void *ctx, void *ptr, size_t nbytes);
} kn_cache_raw;

typedef struct kn_cache_stats {
    size_t current;        /* bytes requested and not yet freed (what the program uses) */
    size_t peak;           /* the largest `current` seen */
    size_t reserved;       /* bytes held from the raw allocator (in use + cached) */
    size_t peak_reserved;  /* the largest `reserved` seen */
    size_t cached;         /* bytes in the free lists */
    int64_t allocs;        /* kn_cache_alloc calls that returned a block */
    int64_t hits;          /* of those, served from a free list */
    int64_t raw_allocs;    /* raw_alloc calls that succeeded */
    int64_t raw_frees;     /* raw_free calls */
} kn_cache_stats;

typedef struct kn_cache kn_cache;

/* A new empty cache over raw. */
kn_status kn_cache_new(kn_cache **out, kn_cache_raw raw);
/* Give every cached block back, then free the cache. Blocks still in use are not freed
 * (they are leaked: the caller must free them first). NULL is fine. */
void kn_cache_destroy(kn_cache *c);
/* The class size a request of nbytes is rounded up to (0 for 0). */
size_t kn_cache_class_size(size_t nbytes);
/* A block of at least nbytes. nbytes == 0 gives *out = NULL and KN_OK. On failure the raw
 * allocator's status (its message prefixed with "kn_cache_alloc: ") and *out untouched. */
kn_status kn_cache_alloc(kn_cache *c, size_t nbytes, void **out);
/* Put a block from kn_cache_alloc(c, nbytes) back in its free list. NULL is ignored. */
void kn_cache_free(kn_cache *c, void *ptr, size_t nbytes);
/* Give every cached block back to the raw allocator; returns the bytes released. */
size_t kn_cache_empty(kn_cache *c);
kn_cache_stats kn_cache_get_stats(kn_cache *c);
/* Reset peak and peak_reserved to the current values (to measure one phase). */
void kn_cache_reset_peak(kn_cache *c);

#ifdef __cplusplus
}
#endif

#endif /* KILN_CUDA_CACHE_H */
