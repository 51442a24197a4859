/* test_buckets.c — lab 10 public tests: ZeRO's shard ranges (shard.c) and the buckets
 * of gradients (buckets.c). They need no communication, but run on every rank like the
 * others (tests/harness/mpi/kn_mpi_test.h). */
#include <stdbool.h>

#include "mpi/kn_mpi_test.h"
#include "outputs.h"

KN_MPI_TEST(lab10_shard, ranges_of_ten_over_four) {
    (void)c;
    int64_t lo[5] = {-1, -1, -1, -1, -1}, want[5] = {0, 3, 6, 8, 10};
    if (KN_MOK(out_dp_shard_ranges(10, 4, lo)))
        for (int r = 0; r <= 4; r++)
            KN_MCHECK(lo[r] == want[r], "lo[%d] = %lld, expected %lld", r, (long long)lo[r], (long long)want[r]);
}

KN_MPI_TEST(lab10_shard, ranges_over_this_job) {
    /* the shards of the world's ranks tile the slab */
    int64_t lo[65];
    if (c->size > 64) return;
    if (KN_MOK(out_dp_shard_ranges(1001, c->size, lo))) {
        KN_MCHECK(lo[0] == 0 && lo[c->size] == 1001, "shards span [%lld, %lld), expected [0, 1001)", (long long)lo[0],
                  (long long)lo[c->size]);
        for (int r = 0; r < c->size; r++)
            KN_MCHECK(lo[r + 1] - lo[r] == 1001 / c->size + (r < 1001 % c->size), "shard %d holds %lld", r,
                      (long long)(lo[r + 1] - lo[r]));
    }
}

/* A slab's layout by hand (kiln/passes.h): numels in slab order, decayed or not. */
static kn_slab_layout params_of(kn_slab_param *info, const int64_t *numel, const bool *decay, int count) {
    int64_t n = 0;
    for (int i = 0; i < count; i++) {
        info[i] = (kn_slab_param){.offset = n, .numel = numel[i], .decay = decay[i]};
        n += numel[i];
    }
    return (kn_slab_layout){.count = count, .info = info};
}

KN_MPI_TEST(lab10_buckets, the_handout_example) {
    (void)c;
    kn_slab_param info[4];
    int64_t numel[4] = {4, 4, 2, 2};
    bool decay[4] = {true, true, false, false};
    kn_slab_layout p = params_of(info, numel, decay, 4);
    kn_dp_bucket *b = NULL;
    int nb = 0;
    if (KN_MOK(out_dp_buckets(&p, 16, &b, &nb))) {
        KN_MCHECK(nb == 3, "%d buckets, expected 3", nb);
        int64_t lo[3] = {0, 4, 8}, hi[3] = {4, 8, 12};
        int first[3] = {0, 1, 2}, last[3] = {0, 1, 3};
        for (int i = 0; i < 3 && nb == 3; i++)
            KN_MCHECK(b[i].lo == lo[i] && b[i].hi == hi[i] && b[i].first_param == first[i] && b[i].last_param == last[i],
                      "bucket %d: [%lld, %lld) params %d..%d, expected [%lld, %lld) params %d..%d", i, (long long)b[i].lo,
                      (long long)b[i].hi, b[i].first_param, b[i].last_param, (long long)lo[i], (long long)hi[i],
                      first[i], last[i]);
        kn_free(b);
    }
}

KN_MPI_TEST(lab10_buckets, a_huge_size_splits_at_decay_only) {
    (void)c;
    kn_slab_param info[5];
    int64_t numel[5] = {6, 6, 6, 1, 1};
    bool decay[5] = {true, true, true, false, false};
    kn_slab_layout p = params_of(info, numel, decay, 5);
    kn_dp_bucket *b = NULL;
    int nb = 0;
    if (KN_MOK(out_dp_buckets(&p, (size_t)1 << 30, &b, &nb))) {
        KN_MCHECK(nb == 2, "%d buckets, expected 2 (the matrices, the undecayed tensors)", nb);
        if (nb == 2)
            KN_MCHECK(b[0].lo == 0 && b[0].hi == 18 && b[1].lo == 18 && b[1].hi == 20, "buckets [%lld, %lld) [%lld, %lld)",
                      (long long)b[0].lo, (long long)b[0].hi, (long long)b[1].lo, (long long)b[1].hi);
        kn_free(b);
    }
}

KN_MPI_TEST(lab10_buckets, rejects_a_zero_size) {
    (void)c;
    kn_slab_param info[1];
    int64_t numel[1] = {3};
    bool decay[1] = {true};
    kn_slab_layout p = params_of(info, numel, decay, 1);
    kn_dp_bucket *b = NULL;
    int nb = 0;
    KN_MERR(out_dp_buckets(&p, 0, &b, &nb), KN_ERR_ARG);
}
