/* cuda_argmax.cu — greedy decoding's argmax over rows of logits (contract:
 * core/runtime/cuda_argmax.h), so that a greedy decode step hands the host B token ids
 * instead of its [B, V] logits (GPT-2: 201 KB a token at B 1).
 *
 * One block per row, KNA_NT threads: thread t scans elements t, t + KNA_NT, ... keeping the
 * best (value, index), where x at i beats (v, j) when x is not NaN and x > v, or x == v and
 * i < j; the start (-inf, n) loses to every number. That order is total on the pairs, so the
 * warps' shuffles (xor 16 .. 1) and then the warps' bests in shared memory meet in any order
 * and give the same winner: the first largest non-NaN. x[0] NaN gives 0, as the CPU's scan.
 * Written in the CUDA emulator's subset (core/runtime/cuda_emu.h): cuda_argmax_emu.c runs it
 * on the CPU (tests/core/test_gemv_cuda.c). */
#include <math.h>
#include <stdint.h>

#include "runtime/cuda_argmax.h"
#include "runtime/cuda_emu.h"

#define KNA_NT 256
#ifdef __CUDACC__
#define KNA_DEV static __device__ __forceinline__
#else
#define KNA_DEV static inline
#endif

struct kna_args {
    const float *x;
    int32_t *out;
    long long n;
};

/* Whether (x, i) beats (v, j). */
KNA_DEV int kna_beats(float x, long long i, float v, long long j) { return !isnan(x) && (x > v || (x == v && i < j)); }

KN_KERNEL_DEF(kna_rows, struct kna_args) {
    __shared__ float sv[KNA_NT / 32];
    __shared__ long long si[KNA_NT / 32];
    const float *row = a.x + (long long)blockIdx.x * a.n;
    const int t = (int)threadIdx.x;
    float v = -INFINITY;
    long long j = a.n;
    for (long long i = t; i < a.n; i += KNA_NT)
        if (kna_beats(row[i], i, v, j)) { v = row[i]; j = i; }
    for (int off = 16; off > 0; off /= 2) {
        float ov = __shfl_xor_sync(0xffffffffu, v, off);
        long long oj = __shfl_xor_sync(0xffffffffu, j, off);
        if (kna_beats(ov, oj, v, j)) { v = ov; j = oj; }
    }
    if (t % 32 == 0) { sv[t / 32] = v; si[t / 32] = j; }
    __syncthreads();
    if (t == 0) {
        for (int w = 1; w < KNA_NT / 32; w++)
            if (kna_beats(sv[w], si[w], v, j)) { v = sv[w]; j = si[w]; }
        a.out[blockIdx.x] = isnan(row[0]) || j >= a.n ? 0 : (int32_t)j;
    }
}

static kn_status kna_check(const float *x, int64_t rows, int64_t n, const int32_t *out) {
    if (rows < 0 || rows > 0x7fffffffLL || n < 1 || n > 0x7fffffffLL || (rows > 0 && (!x || !out)))
        return kn_error(KN_ERR_ARG, "argmax_rows: %lld rows of %lld (rows in [0, 2^31), n in [1, 2^31)) or NULL arrays",
                        (long long)rows, (long long)n);
    return KN_OK;
}

static int kna_launch(const float *x, int64_t rows, int64_t n, int32_t *out) {
    struct kna_args a = {x, out, (long long)n};
    kn_dim3 grid = {(unsigned)rows, 1, 1}, block = {KNA_NT, 1, 1};
    return rows == 0 ? 0 : KN_LAUNCH(kna_rows, grid, block, a);
}

#ifdef __CUDACC__
kn_status knc_argmax_rows(const float *x, int64_t rows, int64_t n, int32_t *out) {
    KN_TRY(kna_check(x, rows, n, out));
    if (kna_launch(x, rows, n, out) != 0) /* KN_LAUNCH read (and cleared) the launch's error */
        return kn_error(KN_ERR_DEVICE, "argmax_rows: launching the kernel failed (%lld rows of %lld)", (long long)rows,
                        (long long)n);
    return KN_OK;
}
#else
kn_status kn_argmax_rows_emu(const float *x, int64_t rows, int64_t n, int32_t *out) {
    KN_TRY(kna_check(x, rows, n, out));
    if (kna_launch(x, rows, n, out) != 0)
        return kn_error(KN_ERR_DEVICE, "kn_argmax_rows_emu: the launch failed (the emulator said why on stderr)");
    return KN_OK;
}
#endif
