/* cuda_colsum.cu — the column reduction on the GPU: sum, mean or max of x [outer, r, inner]
 * over r (a strided axis: the bias gradient [8192, 768] summed over its rows), for the CUDA
 * backend's reduce (cuda_reduce.cu, when inner > 1).
 *
 * Written in the CUDA C subset the emulator runs (core/runtime/cuda_emu.h), like
 * cuda_flash.cu: nvcc compiles it for the GPU, core/runtime/cuda_colsum_emu.c includes the
 * same text as C, so the kernel is tested on any machine (tests/core/test_cuda_colsum.c).
 *
 * A block is 32 x KNR_BY threads over a strip of 32 KNR_V columns and a chunk of rows.
 * Thread (tx, ty) sums columns col = strip + tx, col + 32, ... (KNR_V of them) over rows
 * ty, ty + KNR_BY, ... of the chunk: every load of a warp reads 32 adjacent elements (128
 * bytes of f32, one transaction), and a thread keeps 4 rows x KNR_V loads in flight. The
 * KNR_BY partial sums of a column meet in a fixed tree in shared memory. Sums are in
 * double, as the CPU's.
 *
 * Few columns (the bias gradient's 768 make 6 strips) would leave most SMs idle, so when one
 * pass would launch fewer than KNR_TARGET blocks the rows are cut into nchunk chunks, one
 * block each. A block writes its chunk's partial sums to a scratch buffer, then takes a
 * ticket (an atomic counter per strip, the CUDA samples' "threadFenceReduction"); the
 * block that takes the last ticket adds the nchunk partials of its strip, thread row ty
 * chunks ty, ty + KNR_BY, ... in order and then the same fixed tree, and writes y. Which
 * block comes last varies from run to run; what it adds, and in which order, does not: the
 * result is deterministic. One launch, no second pass: a bias-sized reduction is a few
 * microseconds, where a second kernel's launch is not free. The split depends on the shape
 * alone (not on the GPU), so a given reduction is the same sequence of additions on every
 * GPU. The tickets live in device memory of their own (knr_ticket), zero when a reduction
 * starts, put back to zero by each strip's last block. */
#include <math.h>

#include "runtime/cuda_emu.h"
#include "runtime/cuda_colsum.h"

#ifdef __CUDACC__
#define KNR_LDCG(p) __ldcg(p) /* the other blocks' partials: from L2, not a stale L1 line */
#define KNR_UNROLL _Pragma("unroll")
#else
#define KNR_LDCG(p) (*(p))
#define KNR_UNROLL
#define __threadfence() ((void)0) /* the emulator runs one block at a time */
#endif

static __device__ inline double knr_add(int is_max, double a, double v) {
    if (!is_max) return a + v;
    return a != a ? a : v != v ? v : a > v ? a : v; /* NaN wins, as the CPU's max */
}

static __device__ inline double knr_final(int mean, double a, long long r) { return mean ? a / (double)r : a; }

/* The block's KNR_BY partials of each of its columns (acc) -> their sum in sh[0], in a fixed
 * tree; every thread passes the barriers. */
static __device__ inline void knr_tree(int is_max, double (*sh)[32 * KNR_V + 1], const double *acc) {
    const int tx = (int)threadIdx.x, ty = (int)threadIdx.y;
    for (int j = 0; j < KNR_V; j++) sh[ty][32 * j + tx] = acc[j];
    for (int h = KNR_BY / 2; h > 0; h >>= 1) {
        __syncthreads();
        if (ty < h)
            for (int j = 0; j < KNR_V; j++) sh[ty][32 * j + tx] = knr_add(is_max, sh[ty][32 * j + tx], sh[ty + h][32 * j + tx]);
    }
    __syncthreads();
}

knr_plan knr_cols_plan(long long outer, long long r, long long inner) {
    knr_plan p;
    p.gx = (unsigned)((inner + 32 * KNR_V - 1) / (32 * KNR_V));
    p.gy = (unsigned)(outer < 65535 ? outer : 65535);
    p.nchunk = 1;
    long long blocks = (long long)p.gx * p.gy;
    if (blocks < KNR_TARGET && r >= 2 * KNR_MIN_CHUNK) {
        p.nchunk = (KNR_TARGET + blocks - 1) / blocks;
        if (p.nchunk > r / KNR_MIN_CHUNK) p.nchunk = r / KNR_MIN_CHUNK;
    }
    p.chunk = (r + p.nchunk - 1) / p.nchunk;
    if (p.nchunk > 1) p.chunk = (p.chunk + 4 * KNR_BY - 1) / (4 * KNR_BY) * (4 * KNR_BY); /* whole batches of loads */
    if (p.chunk < 1) p.chunk = 1;
    p.nchunk = (r + p.chunk - 1) / p.chunk; /* no empty chunk */
    if (p.nchunk < 1) p.nchunk = 1;
    return p;
}

#define KNR_CAT2(a, b) a##_##b
#define KNR_CAT(a, b) KNR_CAT2(a, b)
#define KNR_FN(name) KNR_CAT(name, KNR_S)
#define KNR_KERNEL(name, args) KN_KERNEL_DEF(name, args) /* KN_KERNEL_DEF pastes: expand KNR_FN first */
#define KNR_LAUNCH(name, grid, block, args) KN_LAUNCH(name, grid, block, args)
#define KNR_S f32
#define KNR_T float
#include "runtime/cuda_colsum.inc"
#undef KNR_S
#undef KNR_T
#define KNR_S f64
#define KNR_T double
#include "runtime/cuda_colsum.inc"
#undef KNR_S
#undef KNR_T

#ifdef __CUDACC__
/* ---------------------------------------------------------------- the CUDA backend's entry */
#include "runtime/cuda_impl.h"

static __device__ unsigned knr_ticket[KNR_TICKETS];

/* y = reduce of x [outer, r, inner] over r (outer * inner > 0; dt f32 or f64), through a
 * scratch tensor of partials on dev when the rows are split. */
kn_status knc_colsum(kn_device dev, kn_dtype dt, int op, const void *x, void *y, int64_t outer, int64_t r, int64_t inner) {
    static unsigned *tickets[64]; /* per device: knr_ticket's address there */
    knr_plan pl = knr_cols_plan(outer, r, inner);
    kn_tensor *tmp = NULL;
    double *part = NULL;
    if (pl.nchunk > 1) {
        if ((long long)pl.gx * pl.gy > KNR_TICKETS || pl.gy != outer || dev.index < 0 || dev.index >= 64)
            return kn_error(KN_ERR_INTERNAL, "knc_colsum: a split over %u x %u strips (device %d)", pl.gx, pl.gy, dev.index);
        if (!tickets[dev.index]) KN_CUDA_TRY(cudaGetSymbolAddress((void **)&tickets[dev.index], knr_ticket));
        int64_t pshape[1] = {outer * pl.nchunk * inner};
        KN_TRY(kn_tensor_empty_on(&tmp, dev, KN_DT_F64, 1, pshape));
        part = (double *)kn_tensor_data(tmp);
    }
    int is_max = op == KN_OP_MAX, mean = op == KN_OP_MEAN;
    unsigned *tk = part ? tickets[dev.index] : NULL;
    int rc = dt == KN_DT_F32 ? knr_cols_launch_f32((const float *)x, (float *)y, part, tk, outer, r, inner, is_max, mean)
                             : knr_cols_launch_f64((const double *)x, (double *)y, part, tk, outer, r, inner, is_max, mean);
    kn_tensor_free(tmp); /* stream order: the kernel reading it runs before any reuse */
    if (rc == 0) return KN_OK;
    return kn_error(KN_ERR_DEVICE, "knr_cols: launching the column reduction failed (grid %u x %u x %lld, [%lld, %lld, "
                    "%lld])", pl.gx, pl.gy, pl.nchunk, (long long)outer, (long long)r, (long long)inner);
}

#else
/* ---------------------------------------------------------------- the emulator's entries */
int kn_colsum_emu_f32(const float *x, float *y, double *part, unsigned *ticket, long long outer, long long r,
                      long long inner, int is_max, int mean) {
    return knr_cols_launch_f32(x, y, part, ticket, outer, r, inner, is_max, mean);
}
int kn_colsum_emu_f64(const double *x, double *y, double *part, unsigned *ticket, long long outer, long long r,
                      long long inner, int is_max, int mean) {
    return knr_cols_launch_f64(x, y, part, ticket, outer, r, inner, is_max, mean);
}
#endif
