/* arena.c — a bump allocator: many small allocations, one release.
 *
 * An arena hands out memory from big blocks by moving an offset forward ("bumping"); it
 * never frees a single allocation. Everything goes at once with kn_arena_reset (keep one
 * block for reuse) or kn_arena_free. Graph passes and the memory planner use it for the
 * many small objects whose lifetime is the lifetime of a graph.
 *
 * Layout: blocks form a singly linked list from a->head (the block being bumped) to the
 * oldest. Each block is one kn_malloc: a header followed by `cap` usable bytes.
 *
 * Invariants:
 *   - an allocation never moves (blocks are never reallocated);
 *   - a request that does not fit in a default-size block (n plus worst-case padding
 *     larger than block_size) gets a block of its own, linked *behind* the head, so the
 *     head keeps its free space for the small allocations that follow;
 *   - alignment is a power of two up to 4096 (0 means the malloc alignment,
 *     _Alignof(max_align_t)); padding is computed on the address, so any alignment works
 *     whatever the block's own address is;
 *   - a->used counts bytes handed out, padding included;
 *   - on failure (bad alignment, size overflow, OOM) kn_arena_alloc returns NULL, records
 *     a message (kn_last_error) and leaves the arena as it was. */
#include <stdint.h>
#include <string.h>

#include "kiln/base.h"

#define KN_ARENA_DEFAULT_BLOCK ((size_t)64 * 1024)
#define KN_ARENA_MAX_ALIGN ((size_t)4096)

struct kn_arena_block {
    kn_arena_block *next; /* the next older block, or NULL */
    size_t cap;           /* usable bytes in data[] */
    size_t off;           /* bytes of data[] used so far */
    _Alignas(max_align_t) unsigned char data[];
};

/* Initialize an empty arena whose blocks have block_size usable bytes (0: 64 KiB).
 * No memory is taken until the first allocation. */
void kn_arena_init(kn_arena *a, size_t block_size) {
    a->head = NULL;
    a->block_size = block_size ? block_size : KN_ARENA_DEFAULT_BLOCK;
    a->used = 0;
}

/* Bytes of padding needed to align the next free byte of b to `align`. */
static size_t kn_arena_pad(const kn_arena_block *b, size_t align) {
    uintptr_t p = (uintptr_t)(b->data + b->off);
    return (size_t)((align - (p & (align - 1))) & (align - 1));
}

static kn_arena_block *kn_arena_new_block(size_t cap) {
    kn_arena_block *b = kn_malloc(sizeof *b + cap);
    if (!b) return NULL;
    b->next = NULL;
    b->cap = cap;
    b->off = 0;
    return b;
}

/* Take n bytes aligned to `align` from b, which the caller has checked has room. */
static void *kn_arena_take(kn_arena *a, kn_arena_block *b, size_t n, size_t align) {
    size_t pad = kn_arena_pad(b, align);
    void *p = b->data + b->off + pad;
    b->off += pad + n;
    a->used += pad + n;
    return p;
}

/* n bytes aligned to `align` (a power of two <= 4096, or 0 for the malloc alignment),
 * valid until kn_arena_reset/kn_arena_free. n == 0 gives a valid, distinct one-byte
 * allocation. Returns NULL on bad alignment, on overflow and when out of memory. */
void *kn_arena_alloc(kn_arena *a, size_t n, size_t align) {
    if (!a) {
        kn_error(KN_ERR_ARG, "kn_arena_alloc: arena is NULL");
        return NULL;
    }
    if (align == 0) align = _Alignof(max_align_t);
    if (align > KN_ARENA_MAX_ALIGN || (align & (align - 1)) != 0) {
        kn_error(KN_ERR_ARG, "kn_arena_alloc: alignment %zu is not a power of two up to %zu", align,
                 KN_ARENA_MAX_ALIGN);
        return NULL;
    }
    if (n == 0) n = 1;
    kn_arena_block *h = a->head;
    if (h && h->cap - h->off >= n && h->cap - h->off - n >= kn_arena_pad(h, align))
        return kn_arena_take(a, h, n, align);

    /* A fresh block: room for n bytes after at most align-1 bytes of padding. */
    if (n > (size_t)PTRDIFF_MAX - sizeof(kn_arena_block) - align) {
        kn_error(KN_ERR_OOM, "kn_arena_alloc: %zu bytes (alignment %zu) is too large", n, align);
        return NULL;
    }
    size_t need = n + align - 1;
    bool own_block = need > a->block_size;
    kn_arena_block *b = kn_arena_new_block(own_block ? need : a->block_size);
    if (!b) {
        kn_error(KN_ERR_OOM, "kn_arena_alloc: out of memory allocating a block for %zu bytes", n);
        return NULL;
    }
    if (own_block && h) {
        b->next = h->next; /* behind the head: the head keeps bumping small requests */
        h->next = b;
    } else {
        b->next = h;
        a->head = b;
    }
    return kn_arena_take(a, b, n, align);
}

/* Forget every allocation. One default-size block is kept for reuse (none when the arena
 * only ever held oversized blocks); the others are released. */
void kn_arena_reset(kn_arena *a) {
    if (!a) return;
    kn_arena_block *keep = NULL;
    for (kn_arena_block *b = a->head, *next; b; b = next) {
        next = b->next;
        if (!keep && b->cap == a->block_size)
            keep = b;
        else
            kn_free(b);
    }
    if (keep) {
        keep->next = NULL;
        keep->off = 0;
    }
    a->head = keep;
    a->used = 0;
}

/* Release every block; the arena is left empty and may be used again. */
void kn_arena_free(kn_arena *a) {
    if (!a) return;
    for (kn_arena_block *b = a->head, *next; b; b = next) {
        next = b->next;
        kn_free(b);
    }
    a->head = NULL;
    a->used = 0;
}
