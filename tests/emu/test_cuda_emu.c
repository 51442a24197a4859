/* test_cuda_emu.c: kernels run on the CUDA emulator (core/runtime/cuda_emu.h): a
 * shared-memory block reduction whose answer depends on __syncthreads() being a real
 * barrier, a barrier in divergent code that must be reported, not hang, and a race whose
 * outcome the seeded thread order changes (reproducibly, per seed). The checks that need
 * the access hooks are in test_emu_checks.c. */
#define _DEFAULT_SOURCE
#include "runtime/cuda_emu.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct red_args { const float *x; float *out; };

__global__ static void block_sum(void *p)
{
    struct red_args *a = p;
    static float sh[256]; /* __shared__: one block runs at a time in the emulator */
    unsigned t = threadIdx.x;
    sh[t] = a->x[blockIdx.x * blockDim.x + t];
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
        if (t < s)
            sh[t] += sh[t + s];
        __syncthreads();
    }
    if (t == 0)
        a->out[blockIdx.x] = sh[0];
}

__global__ static void warp_sum(void *p)
{
    struct red_args *a = p;
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = a->x[i];
    for (unsigned d = 16; d > 0; d /= 2)
        v += __shfl_down_sync(0xffffffffu, v, d);
    if (threadIdx.x % 32 == 0)
        a->out[i / 32] = v;
}

/* Every lane ends with the warp's maximum (a butterfly over xor partners). */
__global__ static void warp_max_xor(void *p)
{
    struct red_args *a = p;
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = a->x[i];
    for (unsigned d = 16; d > 0; d /= 2) {
        float o = __shfl_xor_sync(0xffffffffu, v, d);
        v = o > v ? o : v;
    }
    a->out[i] = v;
}

/* A shared-memory tile transpose through the launch macro (<<<>>> under nvcc). */
struct tr_args { const float *in; float *out; unsigned n; };
KN_KERNEL_DEF(transpose, struct tr_args)
{
    __shared__ float tile[16][17];
    unsigned bx = blockIdx.x * 16, by = blockIdx.y * 16, tx = threadIdx.x, ty = threadIdx.y;
    tile[ty][tx] = a.in[(by + ty) * a.n + bx + tx];
    __syncthreads();
    a.out[(bx + ty) * a.n + by + tx] = tile[tx][ty];
}

struct hist_args { const int *x; unsigned *bins; int n; };

__global__ static void histogram(void *p)
{
    struct hist_args *a = p;
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < a->n)
        atomicAdd(&a->bins[a->x[i] % 8], 1u);
}

__global__ static void divergent_barrier(void *p)
{
    (void)p;
    if (threadIdx.x < 16)
        __syncthreads();
}

/* Thread t writes a[t] = 1, then reads a[t - 1] with no barrier between: a race. Run in
 * thread order every read would see 1, every time; the emulator's seeded shuffle runs some
 * threads before their left neighbour, as a GPU may. */
__global__ static void neighbour_read(void *p)
{
    float *a = p;
    unsigned t = threadIdx.x;
    a[t] = 1;
    a[64 + t] = t ? a[t - 1] : 1;
}

/* Stale reads of neighbour_read under the current KN_EMU_SEED; the outputs into out. */
static int stale_reads(float *out)
{
    float a[128] = {0};
    kn_dim3 g1 = {1, 1, 1}, b64 = {64, 1, 1};
    if (kn_emu_launch(neighbour_read, g1, b64, a) != 0)
        return -1;
    int stale = 0;
    for (int t = 0; t < 64; t++) {
        stale += a[64 + t] == 0;
        out[t] = a[64 + t];
    }
    return stale;
}

/* Compares got[g] with the sum of x over group g of `size` elements; returns the misses. */
static int check_sums(const char *name, const float *x, const float *got, int groups, int size)
{
    int miss = 0;
    for (int g = 0; g < groups; g++) {
        float want = 0;
        for (int i = 0; i < size; i++)
            want += x[g * size + i];
        if (got[g] != want) {
            printf("%s: group %d got %g want %g\n", name, g, got[g], want);
            miss++;
        }
    }
    return miss;
}

int main(void)
{
    float x[4 * 256], out[4] = {0};
    for (int i = 0; i < 4 * 256; i++)
        x[i] = (float)(i % 7);
    struct red_args a = { x, out };
    kn_dim3 grid = {4, 1, 1}, block = {256, 1, 1};
    int fails = 0;
    if (kn_emu_launch(block_sum, grid, block, &a) != 0)
        fails++;
    fails += check_sums("block_sum", x, out, 4, 256);
    float wout[32];
    struct red_args wa = { x, wout };
    if (kn_emu_launch(warp_sum, grid, block, &wa) != 0)
        fails++;
    fails += check_sums("warp_sum", x, wout, 32, 32);
    float mx[4 * 256];
    struct red_args ma = { x, mx };
    if (kn_emu_launch(warp_max_xor, grid, block, &ma) != 0)
        fails++;
    for (int i = 0; i < 4 * 256; i++) {
        float want = 0;
        for (int j = i / 32 * 32; j < i / 32 * 32 + 32; j++)
            want = x[j] > want ? x[j] : want;
        if (mx[i] != want) {
            printf("warp_max_xor: lane %d got %g want %g\n", i, mx[i], want);
            fails++;
            break;
        }
    }
    static float tin[32 * 32], tout[32 * 32];
    for (int i = 0; i < 32 * 32; i++)
        tin[i] = (float)i;
    struct tr_args ta = { tin, tout, 32 };
    kn_dim3 tg = {2, 2, 1}, tb = {16, 16, 1};
    if (KN_LAUNCH(transpose, tg, tb, ta) != 0)
        fails++;
    for (int i = 0; i < 32; i++)
        for (int j = 0; j < 32; j++)
            if (tout[j * 32 + i] != tin[i * 32 + j]) {
                printf("transpose: (%d,%d) got %g want %g\n", i, j, tout[j * 32 + i], tin[i * 32 + j]);
                fails++;
                i = j = 32;
            }
    int hx[1000];
    unsigned bins[8] = {0}, want_bins[8] = {0};
    for (int i = 0; i < 1000; i++) {
        hx[i] = (i * 37) % 101;
        want_bins[hx[i] % 8]++;
    }
    struct hist_args h = { hx, bins, 1000 };
    kn_dim3 hg = {4, 1, 1};
    if (kn_emu_launch(histogram, hg, block, &h) != 0)
        fails++;
    for (int k = 0; k < 8; k++)
        if (bins[k] != want_bins[k]) {
            printf("histogram: bin %d got %u want %u\n", k, bins[k], want_bins[k]);
            fails++;
        }
    kn_dim3 g1 = {1, 1, 1}, b32 = {32, 1, 1};
    if (kn_emu_launch(divergent_barrier, g1, b32, NULL) != -1) {
        printf("divergent_barrier: deadlock not reported\n");
        fails++;
    }
    float r1[64], r2[64], r3[64];
    int s1 = stale_reads(r1), s2 = stale_reads(r2);
    setenv("KN_EMU_SEED", "12345", 1);
    int s3 = stale_reads(r3);
    unsetenv("KN_EMU_SEED");
    if (s1 <= 0 || s3 <= 0) {
        printf("neighbour_read: %d and %d stale reads: the thread order is not shuffled\n", s1, s3);
        fails++;
    }
    if (s1 != s2 || memcmp(r1, r2, sizeof r1)) {
        printf("neighbour_read: the same seed gave %d, then %d stale reads: the order must be reproducible\n", s1, s2);
        fails++;
    }
    if (s1 == s3 && !memcmp(r1, r3, sizeof r1)) {
        printf("neighbour_read: seeds 1 and 12345 gave the same order\n");
        fails++;
    }
    printf("test_cuda_emu: %s\n", fails ? "FAIL" : "ok");
    return fails != 0;
}
