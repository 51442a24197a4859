/* test_flash.c — lab 08 public tests of the flash attention forward kernel
 * (cuda_flash_fwd.c): under the CUDA emulator against kiln's CPU kernel at lengths that are
 * not a multiple of the tile (32 rows in f32, 16 in f64), with scores large enough that
 * exp overflows without the running maximum, and with rows that have nothing to attend;
 * then the same kernel compiled by nvcc on a GPU (skipped without one). */
#include "flash_check.h"

KN_TEST(lab08_flash, awkward_lengths_under_the_emulator, .timeout = 120) {
    static const int ts32[] = {1, 2, 7, 31, 32, 33, 64, 70}, ts64[] = {1, 15, 16, 17, 33};
    static const int ds[] = {1, 8, 64};
    uint64_t seed = 1;
    for (size_t i = 0; i < sizeof ts32 / sizeof ts32[0]; i++)
        for (size_t j = 0; j < sizeof ds / sizeof ds[0]; j++)
            l8_flash_random(KN_DT_F32, 1 + (int64_t)((i + j) % 2), ts32[i], ds[j], 1.0, seed++);
    for (size_t i = 0; i < sizeof ts64 / sizeof ts64[0]; i++)
        for (size_t j = 0; j < sizeof ds / sizeof ds[0]; j++)
            l8_flash_random(KN_DT_F64, 1 + (int64_t)((i + j) % 2), ts64[i], ds[j], 1.0, seed++);
}

KN_TEST(lab08_flash, large_scores_and_the_logsumexp, .timeout = 60) {
    /* |q . k| * scale up to 12 * 12 * 16 / 4 = 576: exp overflows float beyond 88, so only
     * a kernel that subtracts the running maximum gets O and L = m + log l right. */
    l8_flash_random(KN_DT_F32, 2, 70, 16, 12.0, 101);
    l8_flash_random(KN_DT_F64, 1, 40, 16, 12.0, 102);
}

/* Keys 0..dead-1 have k[0] = -inf and every q[0] is positive: their scores are -inf. Rows
 * i < dead have nothing to attend (y's row is zeros, L = -inf); the later rows attend only
 * keys dead..i, which may start in the middle of a tile or in a later tile. */
static void dead_keys(kn_dtype dt, int t, int d, int dead, uint64_t seed) {
    l8_flash c = {dt, 1, t, d, 1.0 / sqrt((double)d)};
    double *q = l8_random(t * d, 1.0, seed), *k = l8_random(t * d, 1.0, seed + 1), *v = l8_random(t * d, 1.0, seed + 2);
    for (int i = 0; i < t; i++) q[i * d] = 0.5 + fabs(q[i * d]);
    for (int j = 0; j < dead; j++) k[j * d] = -INFINITY;
    l8_flash_check(&c, q, k, v);
    free(q);
    free(k);
    free(v);
}

KN_TEST(lab08_flash, rows_with_nothing_to_attend, .timeout = 60) {
    static const int dead[] = {1, 20, 32, 40};
    for (size_t i = 0; i < sizeof dead / sizeof dead[0]; i++) {
        dead_keys(KN_DT_F32, 45, 4, dead[i], 200 + i);
        dead_keys(KN_DT_F64, 45, 4, dead[i], 300 + i);
    }
}

KN_TEST(lab08_flash_gpu, the_kernel_on_the_gpu, .timeout = 120) {
    L8_SKIP_WITHOUT_GPU();
    l8_flash_gpu(KN_DT_F32, 1, 1, 8, 1);
    l8_flash_gpu(KN_DT_F32, 3, 33, 17, 2);
    l8_flash_gpu(KN_DT_F32, 12, 257, 64, 3);
    l8_flash_gpu(KN_DT_F32, 2, 100, 128, 4);
    l8_flash_gpu(KN_DT_F64, 2, 33, 17, 5);
}
