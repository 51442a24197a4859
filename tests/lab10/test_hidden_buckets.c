/* test_hidden_buckets.c — lab 10 hidden tests: ZeRO's shard ranges (shard.c) and the
 * buckets of gradients (buckets.c), against independent reference versions on many
 * random slab layouts (kiln/passes.h) and sizes, plus a real model's (its kn_params).
 * Run as MPI ranks like every lab 10 test; no communication (every rank checks the same
 * thing). */
#include <stdbool.h>
#include <stdlib.h>

#include "kiln/nn.h"
#include "mpi/kn_mpi_test.h"
#include "../../labs/lab10-dataparallel/tests/outputs.h"

KN_MPI_TEST(lab10_hidden_shard, ranges_exhaustive) {
    (void)c;
    int bad = 0;
    for (int64_t n = 0; n <= 50; n++)
        for (int parts = 1; parts <= 9; parts++) {
            int64_t lo[10], want = 0;
            for (int r = 0; r <= parts; r++) lo[r] = -9;
            kn_status st = out_dp_shard_ranges(n, parts, lo);
            for (int r = 0; r <= parts; r++) {
                if ((st != KN_OK || lo[r] != want) && bad++ < 3)
                    KN_MCHECK(0, "out_dp_shard_ranges(%lld, %d): %s, lo[%d] = %lld, expected %lld", (long long)n, parts,
                              kn_status_name(st), r, (long long)lo[r], (long long)want);
                want += n / parts + (r < n % parts);
            }
        }
}

KN_MPI_TEST(lab10_hidden_shard, ranges_errors) {
    (void)c;
    int64_t lo[5];
    KN_MERR(out_dp_shard_ranges(10, 0, lo), KN_ERR_ARG);
    KN_MERR(out_dp_shard_ranges(-3, 2, lo), KN_ERR_ARG);
    KN_MERR(out_dp_shard_ranges(10, 2, NULL), KN_ERR_ARG);
}

/* The reference: the same rule written differently — decide for each parameter, from the
 * last, whether it opens a new bucket, then read the buckets off in slab order. */
static int ref_buckets(const kn_slab_layout *p, size_t bytes_max, kn_dp_bucket *out) {
    int opens[512], nb = 0;
    size_t held = 0;
    for (int i = p->count - 1; i >= 0; i--) {
        bool open = i == p->count - 1 || held >= bytes_max || p->info[i].decay != p->info[i + 1].decay;
        if (open) held = 0;
        opens[i] = open;
        held += (size_t)p->info[i].numel * 4;
    }
    for (int i = 0; i < p->count; i++) nb += opens[i];
    int b = 0;
    for (int i = 0; i < p->count; i++) {
        if (i == 0 || opens[i - 1]) { /* a bucket starts at i: the previous parameter closed one */
            out[b].first_param = i;
            out[b].lo = p->info[i].offset;
        }
        if (opens[i]) { /* the last parameter of its bucket */
            out[b].last_param = i;
            out[b].hi = p->info[i].offset + p->info[i].numel;
            b++;
        }
    }
    return nb;
}

static kn_slab_layout random_params(kn_slab_param *info, int count, unsigned *seed, bool mixed_decay) {
    int split = 1 + rand_r(seed) % count;
    int64_t n = 0;
    for (int i = 0; i < count; i++) {
        int64_t numel = 1 + rand_r(seed) % 9;
        if (rand_r(seed) % 4 == 0) numel *= 4;
        bool decay = mixed_decay ? rand_r(seed) % 3 != 0 : i < split;
        info[i] = (kn_slab_param){.offset = n, .numel = numel, .decay = decay};
        n += numel;
    }
    return (kn_slab_layout){.count = count, .info = info};
}

static void compare(const kn_slab_layout *p, size_t bytes, const char *what, int *bad) {
    kn_dp_bucket want[512], *b = NULL;
    int nw = ref_buckets(p, bytes, want), nb = -1;
    kn_status st = out_dp_buckets(p, bytes, &b, &nb);
    int ok = st == KN_OK && nb == nw;
    for (int i = 0; ok && i < nb; i++)
        ok = b[i].lo == want[i].lo && b[i].hi == want[i].hi && b[i].first_param == want[i].first_param &&
             b[i].last_param == want[i].last_param && b[i].pending == 0;
    if (!ok && (*bad)++ < 2) {
        int i = 0;
        while (st == KN_OK && i < nb && i < nw && b[i].lo == want[i].lo && b[i].hi == want[i].hi &&
               b[i].first_param == want[i].first_param && b[i].last_param == want[i].last_param)
            i++;
        KN_MCHECK(0, "%s, %d parameters, %zu-byte buckets: %s, %d buckets (expected %d); first difference at bucket "
                  "%d: got [%lld, %lld) params %d..%d, expected [%lld, %lld) params %d..%d",
                  what, p->count, bytes, kn_status_name(st), nb, nw, i, st == KN_OK && i < nb ? (long long)b[i].lo : -1LL,
                  st == KN_OK && i < nb ? (long long)b[i].hi : -1LL, st == KN_OK && i < nb ? b[i].first_param : -1,
                  st == KN_OK && i < nb ? b[i].last_param : -1, i < nw ? (long long)want[i].lo : -1LL,
                  i < nw ? (long long)want[i].hi : -1LL, i < nw ? want[i].first_param : -1,
                  i < nw ? want[i].last_param : -1);
    }
    if (st == KN_OK) kn_free(b);
}

KN_MPI_TEST(lab10_hidden_buckets, random_tables_decayed_first) {
    (void)c;
    unsigned seed = 12345;
    kn_slab_param info[64];
    int bad = 0;
    for (int trial = 0; trial < 300; trial++) {
        int count = 1 + rand_r(&seed) % 40;
        kn_slab_layout p = random_params(info, count, &seed, false);
        size_t sizes[] = {1, 4, 8, 16, 20, 32, 36, 64, 100, 256, (size_t)1 << 40};
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) compare(&p, sizes[k], "decayed first", &bad);
    }
}

KN_MPI_TEST(lab10_hidden_buckets, random_tables_mixed_decay) {
    (void)c;
    unsigned seed = 777;
    kn_slab_param info[64];
    int bad = 0;
    for (int trial = 0; trial < 200; trial++) {
        int count = 1 + rand_r(&seed) % 60;
        kn_slab_layout p = random_params(info, count, &seed, true);
        size_t sizes[] = {1, 12, 16, 24, 48, 80, (size_t)1 << 40};
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) compare(&p, sizes[k], "mixed decay", &bad);
    }
}

KN_MPI_TEST(lab10_hidden_buckets, exact_fill_closes_the_bucket) {
    (void)c;
    /* four parameters of 2 floats (8 bytes): 16-byte buckets hold exactly two each */
    kn_slab_param info[4];
    kn_slab_layout p = {.count = 4, .info = info};
    for (int i = 0; i < 4; i++) info[i] = (kn_slab_param){.offset = 2 * i, .numel = 2, .decay = true};
    kn_dp_bucket *b = NULL;
    int nb = 0;
    if (KN_MOK(out_dp_buckets(&p, 16, &b, &nb))) {
        KN_MCHECK(nb == 2 && b[0].first_param == 0 && b[0].last_param == 1 && b[1].first_param == 2 &&
                      b[1].last_param == 3,
                  "16-byte buckets of four 8-byte parameters: %d buckets, expected {0,1} {2,3}", nb);
        kn_free(b);
    }
    /* one parameter: one bucket */
    p.count = 1;
    if (KN_MOK(out_dp_buckets(&p, 4, &b, &nb))) {
        KN_MCHECK(nb == 1 && b[0].lo == 0 && b[0].hi == 2 && b[0].first_param == 0 && b[0].last_param == 0,
                  "one parameter: %d buckets", nb);
        kn_free(b);
    }
}

KN_MPI_TEST(lab10_hidden_buckets, a_real_model) {
    (void)c;
    kn_gpt g = {0};
    kn_gpt_config cfg = {.vocab = 13, .context = 8, .layers = 2, .width = 16, .heads = 2};
    if (!KN_MOK(kn_gpt_new(&g, &cfg))) return;
    kn_slab_param info[64]; /* the model's slab layout, as kn_dp_param_buckets (kiln/dist.h) passes it */
    KN_MCHECK(g.p.count <= 64, "%d parameters", g.p.count);
    for (int i = 0; i < g.p.count && i < 64; i++)
        info[i] = (kn_slab_param){.offset = g.p.info[i].offset, .numel = g.p.info[i].numel, .decay = g.p.info[i].decay};
    kn_slab_layout l = {.count = g.p.count <= 64 ? g.p.count : 64, .info = info};
    int bad = 0;
    size_t sizes[] = {1, 256, 1024, 4096, 50000, (size_t)25 << 20};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) compare(&l, sizes[k], "the GPT of 2 layers", &bad);
    kn_gpt_free(&g);
}

KN_MPI_TEST(lab10_hidden_buckets, argument_errors) {
    (void)c;
    kn_slab_param info[1] = {{.numel = 3, .decay = true}};
    kn_slab_layout p = {.count = 1, .info = info}, empty = {0};
    kn_dp_bucket *b = NULL;
    int nb = 0;
    KN_MERR(out_dp_buckets(NULL, 16, &b, &nb), KN_ERR_ARG);
    KN_MERR(out_dp_buckets(&empty, 16, &b, &nb), KN_ERR_ARG);
    KN_MERR(out_dp_buckets(&p, 16, NULL, &nb), KN_ERR_ARG);
    KN_MERR(out_dp_buckets(&p, 16, &b, NULL), KN_ERR_ARG);
    KN_MERR(out_dp_buckets(&p, 0, &b, &nb), KN_ERR_ARG);
}
