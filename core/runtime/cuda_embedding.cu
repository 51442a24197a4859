/* cuda_embedding.cu — embedding_grad on the GPU: dw [v, d] = for each table row r, the sum
 * of the rows of dy [n, d] whose index is r (contract: kn_embedding in kiln/ir.h; CPU
 * reference: kn_k_embedding_grad, core/tensor/kernels_train.inc, which adds dy's rows in
 * position order).
 *
 * Written in the CUDA C subset the CUDA emulator runs (core/runtime/cuda_emu.h), as
 * cuda_flash.cu is: nvcc compiles this file for the GPU (the entry at the bottom is the
 * CUDA backend's, called by cuda_ops.cu), core/runtime/cuda_embedding_emu.c includes the
 * same text as C, so `make test` runs these kernels on the CPU against the CPU kernel
 * (tests/core/test_embedding_cuda.c). The summing kernels are instantiated for float and
 * double (cuda_embedding.inc, KNE_S).
 *
 * Deterministic, without float atomics, and all on the device (no copy to the host, so a
 * CUDA graph can hold it):
 *   1. keys[i] = idx[i] (v for an index outside the table: sorted last, summed by no row),
 *      pos[i] = i;
 *   2. a stable sort by key (CUB's radix sort on the GPU; a counting sort on the host
 *      under the emulator): the positions grouped by row, each row's in increasing order;
 *   3. start[r] = the first sorted entry whose key is >= r, for r in [0, v];
 *   4. dw zeroed (the rows no index names stay 0);
 *   5. the sorted entries in tiles of L = KN_EMBEDDING_CHUNK (64): a block per (tile,
 *      group of 128 columns), a thread per column. A row's entries are cut into chunks of L
 *      from its start; the block of the tile where a chunk starts sums it, in position
 *      order, into dw (the row's first chunk) or into a partial slot (a later chunk);
 *   6. the block of the tile where a row of more than L entries starts adds the row's
 *      later chunks to dw, in order.
 * So dw[r] = ((c0 + c1) + c2) + ..., each chunk c a sum in position order; a row named at
 * most L times (every row, for GPT-2's 8192 tokens drawn uniformly from 50k) is the CPU's
 * sum bit for bit, a longer one differs from it by rounding (its sum is better
 * conditioned: chunks of 64). The same indices give the same bits on every run. No thread
 * adds more than 2 L - 1 rows of dy in step 5, nor more than n / L partials in step 6: the
 * thread-per-row kernel this replaces added all n rows of dy in one thread when every
 * index was the same (6 ms for GPT-2's shape, B 8 x T 1024, C 768, on an H100).
 *
 * Limits: n below 2^31 (CUB's sort counts in int) and d below 65535 x 128 (the grid's y);
 * larger is KN_ERR_UNSUPPORTED, saying which. */
#include <stdlib.h>
#include <string.h>

#include "kiln/base.h"
#include "runtime/cuda_emu.h"
#include "runtime/cuda_embedding.h"

#define KNE_FN_(name, s) name##_##s
#define KNE_FN(name, s) KNE_FN_(name, s)
/* KN_KERNEL_DEF pastes onto the name: expand KNE_FN(...) first. */
#define KNE_KERNEL(name, args) KN_KERNEL_DEF(name, args)

/* The arguments of the index kernels (steps 1 and 3). */
struct kne_index_args {
    const void *idx;          /* [n] indices, i32 or i64 */
    long long *keys, *pos;    /* [n] each: step 1's output */
    const long long *skeys;   /* [n] the keys sorted */
    long long *start;         /* [v + 1] step 3's output */
    long long n, v;
    int i32;
};

/* The arguments of the summing kernels (steps 5 and 6), per float type. */
#define KNE_ARGS(T, S)                                                                  \
    struct kne_args_##S {                                                               \
        const T *dy;                  /* [n, d] */                                      \
        const long long *skeys, *order; /* [n]: the sorted keys and their positions */  \
        const long long *start;       /* [v + 1] */                                     \
        T *part;                      /* [tiles, d]: the later chunks' sums */          \
        T *dw;                        /* [v, d], zeroed */                              \
        long long n, v, d;                                                              \
    }
KNE_ARGS(float, f32);
KNE_ARGS(double, f64);

static long long kne_tiles(long long n) { return (n + KN_EMBEDDING_CHUNK - 1) / KN_EMBEDDING_CHUNK; }

/* Sizes the kernels take (the grids' limits). */
static kn_status kne_check(long long n, long long d) {
    if (n < 0 || n > 0x7fffffffLL)
        return kn_error(KN_ERR_UNSUPPORTED, "embedding_grad: %lld indices exceed the sort's int range", n);
    if (d < 0 || d > 65535LL * 128)
        return kn_error(KN_ERR_UNSUPPORTED, "embedding_grad: %lld columns exceed the grid's %lld", d, 65535LL * 128);
    return KN_OK;
}

/* Step 1: a thread per position, grid-stride. */
KN_KERNEL_DEF(kne_keys, struct kne_index_args) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += (long long)gridDim.x * blockDim.x) {
        long long r = a.i32 ? (long long)((const int *)a.idx)[i] : ((const long long *)a.idx)[i];
        a.keys[i] = r >= 0 && r < a.v ? r : a.v;
        a.pos[i] = i;
    }
}

/* Step 3: a thread per row r in [0, v], a binary search of the sorted keys. */
KN_KERNEL_DEF(kne_starts, struct kne_index_args) {
    for (long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x; r <= a.v; r += (long long)gridDim.x * blockDim.x) {
        long long lo = 0, hi = a.n;
        while (lo < hi) {
            long long mid = lo + (hi - lo) / 2;
            if (a.skeys[mid] < r) lo = mid + 1;
            else hi = mid;
        }
        a.start[r] = lo;
    }
}

/* The 1-D launches of the index kernels: 256 threads a block, a grid of at most 4096
 * blocks (the loops stride over the rest). */
static kn_dim3 kne_grid(long long work) {
    long long b = (work + 255) / 256;
    kn_dim3 g = {(unsigned)(b < 1 ? 1 : b > 4096 ? 4096 : b), 1, 1};
    return g;
}
static kn_dim3 kne_block(void) {
    kn_dim3 b = {256, 1, 1};
    return b;
}

#define KNE_S f32
#define KNE_T float
#include "runtime/cuda_embedding.inc"
#undef KNE_T
#undef KNE_S
#define KNE_S f64
#define KNE_T double
#include "runtime/cuda_embedding.inc"
#undef KNE_T
#undef KNE_S

#ifdef __CUDACC__
/* ---------------------------------------------------------------- the CUDA backend's entry */
#include <cub/device/device_radix_sort.cuh>

#include "runtime/cuda_impl.h"

/* KN_LAUNCH has read (and cleared) the launch's error already. */
static kn_status launch_failed(const char *kernel, long long n, long long v, long long d) {
    return kn_error(KN_ERR_DEVICE, "embedding_grad: launching %s failed (%lld indices, table [%lld, %lld])", kernel, n,
                    v, d);
}

kn_status knc_embedding_grad_sum(const kn_tensor *dy, const kn_tensor *idx, kn_tensor *dw) {
    long long n = kn_tensor_numel(idx), v = dw->shape[0], d = dw->shape[1];
    KN_TRY(kne_check(n, d));
    size_t es = kn_dtype_size(dw->dtype);
    if (v * d == 0) return KN_OK;
    cudaError_t e = cudaMemsetAsync(kn_tensor_data(dw), 0, (size_t)(v * d) * es, knc_stream); /* step 4 */
    if (e != cudaSuccess) return kn_error(KN_ERR_DEVICE, "embedding_grad: cudaMemsetAsync failed: %s", cudaGetErrorString(e));
    if (n == 0) return KN_OK;
    int end_bit = 64 - __builtin_clzll((unsigned long long)v); /* keys lie in [0, v] */
    size_t sort_bytes = 0;
    e = cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, (const int64_t *)nullptr, (int64_t *)nullptr,
                                        (const int64_t *)nullptr, (int64_t *)nullptr, (int)n, 0, end_bit, knc_stream);
    if (e != cudaSuccess) return kn_error(KN_ERR_DEVICE, "embedding_grad: CUB's sort size query failed: %s", cudaGetErrorString(e));
    /* one scratch block: keys and positions in and out, v + 1 starts, the partials, CUB's bytes */
    size_t lists = (size_t)(4 * n + v + 1) * sizeof(long long), parts = (size_t)(kne_tiles(n) * d) * es;
    size_t tmp_at = (lists + parts + 255) / 256 * 256;
    int64_t sshape[1] = {(int64_t)(tmp_at + sort_bytes)};
    kn_tensor *scratch = NULL;
    KN_TRY(kn_tensor_empty_on(&scratch, dw->storage->device, KN_DT_U8, 1, sshape));
    char *base = (char *)kn_tensor_data(scratch);
    long long *keys = (long long *)base, *pos = keys + n, *skeys = pos + n, *order = skeys + n, *start = order + n;
    struct kne_index_args ia = {kn_tensor_data(idx), keys, pos, skeys, start, n, v, idx->dtype == KN_DT_I32};
    kn_status st = KN_LAUNCH(kne_keys, kne_grid(n), kne_block(), ia) == 0 ? KN_OK : launch_failed("kne_keys", n, v, d);
    if (st == KN_OK) {
        e = cub::DeviceRadixSort::SortPairs(base + tmp_at, sort_bytes, (const int64_t *)keys, (int64_t *)skeys,
                                            (const int64_t *)pos, (int64_t *)order, (int)n, 0, end_bit, knc_stream);
        if (e != cudaSuccess) st = kn_error(KN_ERR_DEVICE, "embedding_grad: CUB's radix sort failed: %s", cudaGetErrorString(e));
    }
    if (st == KN_OK && KN_LAUNCH(kne_starts, kne_grid(v + 1), kne_block(), ia) != 0)
        st = launch_failed("kne_starts", n, v, d);
    if (st == KN_OK) {
        int rc;
        if (dw->dtype == KN_DT_F32) {
            struct kne_args_f32 a = {(const float *)kn_tensor_data(dy), skeys, order, start, (float *)(base + lists),
                                     (float *)kn_tensor_data(dw), n, v, d};
            rc = kne_launch_sums_f32(a);
        } else {
            struct kne_args_f64 a = {(const double *)kn_tensor_data(dy), skeys, order, start, (double *)(base + lists),
                                     (double *)kn_tensor_data(dw), n, v, d};
            rc = kne_launch_sums_f64(a);
        }
        if (rc != 0) st = launch_failed("kne_chunks or kne_rows", n, v, d);
    }
    kn_tensor_free(scratch); /* stream order: the kernels reading it run before any reuse */
    return st;
}

#else
/* ---------------------------------------------------------------- the emulator's entry */

kn_status kn_embedding_grad_emu(kn_dtype dt, const void *dy, const void *idx, bool i32, long long n, long long v,
                                long long d, void *dw) {
    if (dt != KN_DT_F32 && dt != KN_DT_F64)
        return kn_error(KN_ERR_ARG, "kn_embedding_grad_emu: dtype %s (f32 or f64)", kn_dtype_name(dt));
    if (v < 0 || (n > 0 && !idx) || (v * d > 0 && (!dw || (n > 0 && !dy))))
        return kn_error(KN_ERR_ARG, "kn_embedding_grad_emu: NULL array or negative table size");
    KN_TRY(kne_check(n, d));
    size_t es = kn_dtype_size(dt);
    if (v * d == 0) return KN_OK;
    memset(dw, 0, (size_t)(v * d) * es); /* step 4 */
    if (n == 0) return KN_OK;
    long long *lists = kn_malloc((size_t)(4 * n + 2 * (v + 1)) * sizeof *lists);
    void *parts = kn_malloc((size_t)(kne_tiles(n) * d) * es);
    if (!lists || !parts) {
        kn_free(lists);
        kn_free(parts);
        return kn_error(KN_ERR_OOM, "kn_embedding_grad_emu: out of memory for %lld indices", n);
    }
    long long *keys = lists, *pos = keys + n, *skeys = pos + n, *order = skeys + n, *start = order + n, *at = start + v + 1;
    memset(parts, 0xFF, (size_t)(kne_tiles(n) * d) * es); /* NaN: a slot read but never written shows */
    struct kne_index_args ia = {idx, keys, pos, skeys, start, n, v, i32};
    int rc = KN_LAUNCH(kne_keys, kne_grid(n), kne_block(), ia);
    if (rc == 0) { /* step 2, CUB's stand-in: a stable counting sort by key */
        memset(at, 0, (size_t)(v + 1) * sizeof *at);
        for (long long i = 0; i < n; i++) at[keys[i]]++;
        for (long long r = 0, sum = 0; r <= v; r++) {
            long long c = at[r];
            at[r] = sum;
            sum += c;
        }
        for (long long i = 0; i < n; i++) {
            long long k = at[keys[i]]++;
            skeys[k] = keys[i];
            order[k] = pos[i];
        }
        rc = KN_LAUNCH(kne_starts, kne_grid(v + 1), kne_block(), ia);
    }
    if (rc == 0 && dt == KN_DT_F32) {
        struct kne_args_f32 a = {(const float *)dy, skeys, order, start, (float *)parts, (float *)dw, n, v, d};
        rc = kne_launch_sums_f32(a);
    } else if (rc == 0) {
        struct kne_args_f64 a = {(const double *)dy, skeys, order, start, (double *)parts, (double *)dw, n, v, d};
        rc = kne_launch_sums_f64(a);
    }
    kn_free(lists);
    kn_free(parts);
    return rc == 0 ? KN_OK : kn_error(KN_ERR_DEVICE, "kn_embedding_grad_emu: a kernel's launch failed (the emulator "
                                      "said why on stderr)");
}
#endif
