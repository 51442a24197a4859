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


kn_status kn_mem_assign_offsets(const kn_mem_buffer *bufs, int n, size_t *offsets, size_t *arena) {
    if (n < 0) return kn_error(KN_ERR_ARG, "kn_mem_assign_offsets: negative count %d", n);
    if (!arena || (n > 0 && (!bufs || !offsets))) return kn_error(KN_ERR_ARG, "kn_mem_assign_offsets: NULL argument");
    for (int i = 0; i < n; i++)
        if (bufs[i].first > bufs[i].last)
            return kn_error(KN_ERR_ARG, "kn_mem_assign_offsets: buffer %d lives from step %d to step %d (first > last)",
                            i, bufs[i].first, bufs[i].last);
    // Largest first (ties: lower index first); each at the lowest offset where it overlaps
    // no placed buffer whose lifetime meets its own. Write offsets[] and *arena.
    return kn_not_implemented("lab08", "kn_mem_assign_offsets: greedy-by-size offsets in one arena");
}
