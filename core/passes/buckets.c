/* buckets.c — lab 10 unit: the assignment of gradients to buckets (kiln/passes.h,
 * "data-parallel buckets").
 *
 * DDP does not all-reduce each gradient alone (thousands of small messages: the alpha term
 * of every one) nor the whole slab at the end (no overlap with the backward). It groups the
 * parameters into buckets of about `bucket_bytes` and starts a bucket's collective as soon
 * as its last gradient exists, while the backward goes on (core/passes/ddp.c places that
 * start in the graph; core/dist/dp_buckets.c runs it). The buckets need only the slab's
 * layout (kn_slab_layout: each parameter's offset, numel and decay flag), so this unit
 * sits with the passes, below the model and the ranks (core/mk/layers.py).
 *
 * A bucket is a contiguous range of whole parameters of the slab. They are formed from the
 * LAST parameter backwards, as PyTorch's DDP forms them in reverse registration order:
 * backward produces the gradients of the output layers first, so the slab's end fills first.
 *   - walk i = count-1 down to 0; a bucket takes parameters until it holds >= bucket_bytes
 *     (4 bytes a float: info[i].numel * sizeof(float)), then a new bucket starts;
 *   - a bucket also ends where info[i].decay changes (the slab turns from the small
 *     undecayed tensors, biases and gains, to the matrices): a late bias must not hold back
 *     the matrices of the last layers;
 *   - the result is in SLAB order: bucket 0 holds the slab's start. Each bucket has
 *     first_param <= last_param, lo = info[first_param].offset and
 *     hi = info[last_param].offset + info[last_param].numel; pending is 0.
 *   Example: numels {4, 4, 2, 2} (decay: yes yes no no), 16-byte buckets
 *     -> walking back: {3, 2} holds 16 bytes: closed; {1}: 16 bytes: closed; {0}
 *     -> in slab order: [0,4) params 0..0, [4,8) 1..1, [8,12) 2..3.
 * Rules: p == NULL, p->count < 1, out == NULL or n == NULL is KN_ERR_ARG; bucket_bytes 0
 * is KN_ERR_ARG. *out is allocated with kn_calloc (p->count entries are always enough) and
 * freed by the caller with kn_free; on an error nothing is allocated. */
#include <stdbool.h>

#include "kiln/passes.h"

kn_status kn_dp_buckets(const kn_slab_layout *p, size_t bucket_bytes, kn_dp_bucket **out, int *n) {
    if (!p || !out || !n || p->count < 1) return kn_error(KN_ERR_ARG, "kn_dp_buckets: no parameters");
    if (bucket_bytes < 1) return kn_error(KN_ERR_ARG, "kn_dp_buckets: bucket size 0");
    kn_dp_bucket *b = kn_calloc((size_t)p->count, sizeof *b);
    if (!b) return kn_error(KN_ERR_OOM, "kn_dp_buckets: out of memory");
    /* BEGIN SOLUTION */
    int nb = 0;
    for (int i = p->count - 1; i >= 0;) {
        kn_dp_bucket *k = &b[nb++];
        k->last_param = i;
        size_t bytes = 0;
        bool decay = p->info[i].decay;
        while (i >= 0 && bytes < bucket_bytes && p->info[i].decay == decay)
            bytes += (size_t)p->info[i--].numel * sizeof(float);
        k->first_param = i + 1;
        k->lo = p->info[k->first_param].offset;
        k->hi = p->info[k->last_param].offset + p->info[k->last_param].numel;
    }
    /* slab order: reverse the list (bucket 0 holds the slab's start) */
    for (int i = 0; i < nb / 2; i++) {
        kn_dp_bucket t = b[i];
        b[i] = b[nb - 1 - i];
        b[nb - 1 - i] = t;
    }
    *out = b;
    *n = nb;
    return KN_OK;
    /* SKELETON
    kn_free(b);
    return kn_not_implemented("lab10", "kn_dp_buckets: the buckets over the slab (buckets.c)");
    END SOLUTION */
}
