/* offsets.c — lab 08 unit: placing buffers in one arena (kn_mem_assign_offsets, contract
 * in kiln/passes.h).
 *
 * Two buffers whose lifetimes do not overlap can use the same bytes. Choosing offsets so
 * that no two live buffers overlap, with the arena as small as possible, is interval
 * colouring with weights (dynamic storage allocation): NP-hard in general, and a
 * simple greedy rule is close to the bound in practice. The bound: at every step the
 * buffers live then must all fit side by side, so no arena is smaller than the most bytes
 * live at one step.
 *
 * Greedy by size (Pisarchyk and Lee, "Efficient memory management for deep neural net
 * inference", 2020; TFLite's arena planner): the big buffers are the hard ones to fit, so
 * place them first; each buffer goes to the lowest offset where it overlaps, in bytes, no
 * already placed buffer whose lifetime meets its own. Buffers that are never live at the
 * same time may land on the same bytes; that is the whole point.
 *
 * Finding the lowest offset: take the placed buffers that conflict in time, sorted by
 * offset, and slide a candidate offset up past each one it would overlap. */
#include <stdlib.h>

#include "kiln/passes.h"

/* BEGIN SOLUTION */
typedef struct kn_mem_order { const kn_mem_buffer *bufs; int32_t i; } kn_mem_order;

static int by_size(const void *a, const void *b) {
    const kn_mem_order *x = a, *y = b;
    size_t sx = x->bufs[x->i].size, sy = y->bufs[y->i].size;
    if (sx != sy) return sx > sy ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

typedef struct kn_mem_slot { size_t off, size; } kn_mem_slot;

static int by_offset(const void *a, const void *b) {
    const kn_mem_slot *x = a, *y = b;
    return (x->off > y->off) - (x->off < y->off);
}
/* END SOLUTION */

kn_status kn_mem_assign_offsets(const kn_mem_buffer *bufs, int n, size_t *offsets, size_t *arena) {
    if (n < 0) return kn_error(KN_ERR_ARG, "kn_mem_assign_offsets: negative count %d", n);
    if (!arena || (n > 0 && (!bufs || !offsets))) return kn_error(KN_ERR_ARG, "kn_mem_assign_offsets: NULL argument");
    for (int i = 0; i < n; i++)
        if (bufs[i].first > bufs[i].last)
            return kn_error(KN_ERR_ARG, "kn_mem_assign_offsets: buffer %d lives from step %d to step %d (first > last)",
                            i, bufs[i].first, bufs[i].last);
    /* BEGIN SOLUTION */
    kn_mem_order *order = kn_malloc(sizeof *order * (size_t)n);
    if (!order) return kn_error(KN_ERR_OOM, "kn_mem_assign_offsets: out of memory for %d buffers", n);
    kn_mem_slot *near = kn_malloc(sizeof *near * (size_t)n);
    if (!near) {
        kn_free(order);
        return kn_error(KN_ERR_OOM, "kn_mem_assign_offsets: out of memory for %d buffers", n);
    }
    for (int i = 0; i < n; i++) order[i] = (kn_mem_order){bufs, i};
    qsort(order, (size_t)n, sizeof *order, by_size);
    size_t top = 0;
    for (int k = 0; k < n; k++) { /* order[0..k) are placed */
        const kn_mem_buffer *b = &bufs[order[k].i];
        int nnear = 0;
        for (int j = 0; j < k; j++) { /* the placed buffers live at some step b is */
            const kn_mem_buffer *u = &bufs[order[j].i];
            if (u->first <= b->last && b->first <= u->last) near[nnear++] = (kn_mem_slot){offsets[order[j].i], u->size};
        }
        qsort(near, (size_t)nnear, sizeof *near, by_offset);
        size_t off = 0; /* a zero-size buffer stops at the first neighbour: 0 */
        for (int j = 0; j < nnear; j++) {
            if (near[j].off >= off + b->size) break; /* the gap below it holds b */
            if (near[j].off + near[j].size > off) off = near[j].off + near[j].size;
        }
        offsets[order[k].i] = off;
        if (off + b->size > top) top = off + b->size;
    }
    *arena = top;
    kn_free(order);
    kn_free(near);
    return KN_OK;
    /* SKELETON
    // Largest first (ties: lower index first); each at the lowest offset where it overlaps
    // no placed buffer whose lifetime meets its own. Write offsets[] and *arena.
    return kn_not_implemented("lab08", "kn_mem_assign_offsets: greedy-by-size offsets in one arena");
    END SOLUTION */
}
