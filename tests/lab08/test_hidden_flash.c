/* test_hidden_flash.c — lab 08 hidden tests of the flash attention forward kernel
 * (cuda_flash_fwd.c) under the CUDA emulator against kiln's CPU kernel: prime lengths and
 * every head dim (0, odd, the largest), many pairs at once, a maximum that rises or falls
 * from tile to tile and a negative scale, a tile of -inf scores between finite ones, the
 * causal edge (a row never sees a later key, bit for bit); then awkward sizes on a GPU. */
#include "../../labs/lab08-memory/tests/flash_check.h"

KN_TEST(lab08_hidden_flash, prime_lengths_and_every_head_dim, .timeout = 240) {
    static const int ts[] = {3, 5, 13, 37, 61, 97, 131};
    static const int ds[] = {0, 2, 3, 17, 100, 128};
    uint64_t seed = 11;
    for (int dt = 0; dt < 2; dt++)
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
            for (size_t j = 0; j < sizeof ds / sizeof ds[0]; j++)
                if (ts[i] * ds[j] <= 131 * 17 || i % 2) /* the largest both ways, not every pair of them */
                    l8_flash_random(dt ? KN_DT_F64 : KN_DT_F32, 1, ts[i], ds[j], 1.0, seed++);
}

KN_TEST(lab08_hidden_flash, many_pairs_stay_apart, .timeout = 60) {
    l8_flash_random(KN_DT_F32, 7, 45, 5, 1.0, 21);
    l8_flash_random(KN_DT_F64, 5, 19, 3, 1.0, 22);
    l8_flash_random(KN_DT_F32, 40, 2, 2, 1.0, 23);
}

/* q_i = u for every row and k_j = (dir * j / t) u: the scores grow (dir 1) or shrink
 * (dir -1) with j, so with dir 1 every tile raises each row's maximum and rescales what
 * was summed, and with dir -1 none does. */
static void ramp(kn_dtype dt, int t, int d, double dir, double scale, uint64_t seed) {
    l8_flash c = {dt, 1, t, d, scale};
    double *u = l8_random(d, 1.0, seed), *q = malloc(sizeof(double) * (size_t)(t * d));
    double *k = malloc(sizeof(double) * (size_t)(t * d)), *v = l8_random(t * d, 1.0, seed + 1);
    for (int i = 0; i < t; i++)
        for (int c2 = 0; c2 < d; c2++) {
            q[i * d + c2] = 2 * u[c2];
            k[i * d + c2] = dir * (double)i / t * 4 * u[c2];
        }
    l8_flash_check(&c, q, k, v);
    free(u);
    free(q);
    free(k);
    free(v);
}

KN_TEST(lab08_hidden_flash, a_maximum_that_rises_or_falls_across_tiles, .timeout = 60) {
    ramp(KN_DT_F32, 100, 6, 1, 0.5, 31);
    ramp(KN_DT_F32, 100, 6, -1, 0.5, 32);
    ramp(KN_DT_F64, 50, 6, 1, 0.5, 33);
    ramp(KN_DT_F64, 50, 6, -1, 0.5, 34);
    ramp(KN_DT_F32, 77, 9, 1, -0.75, 35); /* a negative scale turns the ramp around */
}

KN_TEST(lab08_hidden_flash, a_tile_of_minus_infinity_between_finite_ones, .timeout = 60) {
    /* f32 tiles are 32 keys: keys 32..63 score -inf for every row (k[0] = -inf, q[0] > 0),
     * so rows past 63 meet a finite tile, a dead one, then finite ones again. */
    for (int dt = 0; dt < 2; dt++) {
        const int t = 101, d = 3;
        l8_flash c = {dt ? KN_DT_F64 : KN_DT_F32, 2, t, d, 0.6};
        double *q = l8_random(2 * t * d, 1.0, 41), *k = l8_random(2 * t * d, 1.0, 42), *v = l8_random(2 * t * d, 1.0, 43);
        for (int i = 0; i < 2 * t; i++) q[i * d] = 0.25 + fabs(q[i * d]);
        for (int j = 32; j < 64; j++) k[j * d] = k[(t + j) * d] = -INFINITY;
        l8_flash_check(&c, q, k, v);
        free(q);
        free(k);
        free(v);
    }
}

KN_TEST(lab08_hidden_flash, the_causal_edge_bit_for_bit, .timeout = 60) {
    /* Changing keys and values after row p changes none of rows 0..p, not even a bit. */
    const int t = 70, d = 8;
    const int64_t n = t * d, ny = t * (d + 1);
    float *in = malloc(sizeof(float) * (size_t)(3 * n)), *a = malloc(sizeof(float) * (size_t)ny);
    float *b = malloc(sizeof(float) * (size_t)ny);
    double *x = l8_random(3 * n, 1.0, 51);
    for (int64_t e = 0; e < 3 * n; e++) in[e] = (float)x[e];
    static const int ps[] = {0, 30, 31, 32, 45, 68};
    for (size_t s = 0; s < sizeof ps / sizeof ps[0]; s++) {
        const int p = ps[s];
        /* your kernel's runs: their results and outputs through kn_out (the checker runs none) */
        const bool mine = !kn_out_checking();
        int rc = mine ? kn_flash_emu_f32(in, in + n, in + 2 * n, NULL, NULL, 0, a, 1, t, d, 0.3f, false) : 0;
        kn_out("the launch's result", &rc, sizeof rc);
        kn_out("your kernel's y", a, sizeof(float) * (size_t)ny);
        cr_assert_eq(rc, 0, "%s", kn_last_error());
        float *k2 = malloc(sizeof(float) * (size_t)(2 * n));
        memcpy(k2, in + n, sizeof(float) * (size_t)(2 * n));
        for (int64_t e = (int64_t)(p + 1) * d; e < n; e++) k2[e] = k2[n + e] = 50.0f; /* keys and values after p */
        rc = mine ? kn_flash_emu_f32(in, k2, k2 + n, NULL, NULL, 0, b, 1, t, d, 0.3f, false) : 0;
        kn_out("the launch's result", &rc, sizeof rc);
        kn_out("your kernel's y", b, sizeof(float) * (size_t)ny);
        cr_assert_eq(rc, 0, "%s", kn_last_error());
        for (int64_t e = 0; e < (int64_t)(p + 1) * (d + 1); e++)
            cr_assert(memcmp(&a[e], &b[e], sizeof(float)) == 0, "row %lld (column %lld) changed when keys after row %d "
                      "did: %.9g, then %.9g (a key j > i in row i's softmax?)", (long long)(e / (d + 1)),
                      (long long)(e % (d + 1)), p, a[e], b[e]);
        free(k2);
    }
    free(x);
    free(in);
    free(a);
    free(b);
}

KN_TEST(lab08_hidden_flash_gpu, awkward_sizes_on_the_gpu, .timeout = 180) {
    L8_SKIP_WITHOUT_GPU();
    static const int ts[] = {1, 31, 32, 33, 97, 1023};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
        l8_flash_gpu(KN_DT_F32, 1 + (int64_t)i % 3, ts[i], 64, 60 + i);
        l8_flash_gpu(KN_DT_F64, 2, ts[i], 3, 70 + i);
    }
    l8_flash_gpu(KN_DT_F32, 96, 1024, 64, 80); /* GPT-2's heads x 8: 3072 blocks */
    l8_flash_gpu(KN_DT_F32, 1, 129, 128, 81);
}
