/* shard.c — lab 10 unit: ZeRO's shard ranges over the parameter slab (kiln/dist.h,
 * "lab 10 units").
 *
 * ZeRO-1, ZeRO-2 and ZeRO-3 (core/dist/dp_shard.c, zero3.c) give each of N ranks one contiguous
 * 1/N of the parameter slab: the rank keeps the optimizer state (Adam's two moments) of its
 * shard only, receives the reduced gradient of its shard from each bucket's reduce-scatter,
 * updates its shard, and all-gathers the parameters (ZeRO-3 keeps only its shard of them
 * too, and all-gathers each bucket when a step needs it). The shards are the ring's chunks
 * (kn_ring_chunk), so a rank's shard is exactly what a ring reduce-scatter would leave on it.
 *
 *   kn_dp_shard_ranges(n, parts, lo) writes parts+1 bounds: rank r owns [lo[r], lo[r+1]),
 *   lo[0] = 0 and lo[parts] = n; sizes differ by at most one, the larger ones first.
 *     n = 10, parts = 4  ->  lo = {0, 3, 6, 8, 10}
 * Rules: n < 0, parts < 1 or lo == NULL is KN_ERR_ARG; a failing kn_ring_chunk's status is
 * passed on. A rank whose shard is empty (n < parts) is fine: it owns [lo[r], lo[r]). */
#include "kiln/dist.h"

kn_status kn_dp_shard_ranges(int64_t n, int parts, int64_t *lo) {
    if (!lo) return kn_error(KN_ERR_ARG, "kn_dp_shard_ranges: NULL lo");
    if (n < 0 || parts < 1)
        return kn_error(KN_ERR_ARG, "kn_dp_shard_ranges: %lld elements over %d ranks", (long long)n, parts);
    /* BEGIN SOLUTION */
    for (int r = 0; r < parts; r++) {
        int64_t hi;
        KN_TRY(kn_ring_chunk(n, parts, r, &lo[r], &hi));
        lo[r + 1] = hi;
    }
    return KN_OK;
    /* SKELETON
    return kn_not_implemented("lab10", "kn_dp_shard_ranges: each rank's range of the slab (shard.c)");
    END SOLUTION */
}
