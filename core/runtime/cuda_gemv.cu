/* cuda_gemv.cu — the product of a few rows (m <= 8) by a bf16 weight matrix, as a stream of
 * the weights (contract: core/runtime/cuda_gemv.h). A decode step multiplies one row per
 * sequence by every weight matrix of the model: cuBLAS's GEMM kernels, tiled for many rows,
 * read GPT-2's 768 x 768 bf16 weight (1.2 MB) at a few hundred GB/s and take ~10 us for
 * what the H100's ~3 TB/s could do in well under 1 us plus the launch. Here every byte of
 * the weights is read once, 16 bytes a load (8 bf16), with many loads in flight on every
 * SM, and each loaded weight meets all m rows of a (kept in shared memory as f32).
 *
 * Two layouts of w, two kernels (cuda_gemv.inc, instantiated for m rounded up to 1, 2, 4, 8):
 *   w [k, n] (a linear layer's weight): a block owns 64 columns, i.e. 128 contiguous bytes
 *     of each row, and a range of rows (a k-split); thread t loads the 8 columns 8 (t % 8)..
 *     of rows t / 8, t / 8 + 32, ... (KNV_U loads in flight) and keeps m x 8 sums. The
 *     sums of the 4 k-lanes of a warp meet by shuffles (xor 8, then 16), the 8 warps' in
 *     shared memory, in warp order.
 *   w [n, k] (tb: the tied head reads the embedding [V, D]): warp wp owns 4 columns, rows
 *     of w contiguous over k; lane l loads their 8-element chunks l, l + 32, ... (8 loads in
 *     flight) and keeps m x 4 sums, which the 32 lanes add in a butterfly (xor 16, 8, 4, 2,
 *     1: every lane ends with the same bits).
 * Each thread's first weight loads are issued before a's tile is staged (a barrier), and
 * every later batch before the one in hand is summed, so the weights' latency overlaps the
 * rest. Small problems are split over k so that the grid has ~256 blocks (GPT-2's [768, 768]
 * weight: 12 column tiles x 8 splits of 96 rows): each block writes its m x 64 (32) sums to
 * a workspace, and the block that finishes last for its column tile (an integer ticket per
 * tile, atomicAdd after a __threadfence; it puts the ticket back to 0) adds the splits' sums
 * in split order and writes the result. Only the ticket is atomic: which block adds does
 * not change the order of the additions, so the bits are those of the shape alone.
 * kn_gemv_plan chooses the splits from (m, n, k, layout), never from the device or the run.
 * Epilogue on the final sum x: + bias[n], then gelu (aux = x), rounded once to c's type.
 *
 * Precision: products and sums in f32 by fmaf (fma.rn.f32 under nvcc, the C library's
 * correctly rounded fmaf under the emulator), so the GPU and the emulator give the same
 * bits; against cuBLAS (f32 accumulation in another order) the results differ by f32
 * rounding, then the one rounding to bf16.
 *
 * Written in the CUDA emulator's subset (core/runtime/cuda_emu.h), as cuda_flash_tc.cu is:
 * nvcc compiles this file for the GPU, core/runtime/cuda_gemv_emu.c includes it as C11, so
 * `make test` runs these kernels on the CPU (tests/core/test_gemv_cuda.c). The GPU's
 * entry, knc_gemv, keeps one workspace per device (4 MiB of partial sums and 256 tickets,
 * made at its first use and zeroed then, never moved, so a CUDA graph that captured a
 * launch stays valid). It runs only when asked, KILN_GEMV=1: inside the decode step's CUDA graph
 * on an H100 (2026-11-28) it was slower than cuBLAS (TPOT 0.702 against 0.647 ms at B=1,
 * 1.04 against 0.78 at B=8), so cuBLAS stays the default. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda_gemv.h"
#include "runtime/cuda_mma.h" /* kn_bf16_f32, kn_bf16_bits, kn_bits_f32 in both compilers */
#include "kiln/scalar.h"      /* kn_sc_gelu_f32 */

#define KNV_NT 256           /* threads a block */
#define KNV_WARPS (KNV_NT / 32)
#define KNV_KT0 256          /* rows of a staged at a time (w [k, n]) */
#define KNV_KT1 1024         /* columns of a staged at a time (w [n, k]) */
#define KNV_U 4              /* rows in flight a thread (w [k, n]) */
#define KNV_TARGET 256       /* blocks the k-splits aim at */
#define KNV_MAX_TILES 256    /* tickets: a split problem has fewer column tiles than KNV_TARGET */
#define KNV_WS_FLOATS (1LL << 20) /* the workspace's partial sums: 4 MiB */
#define KNV_FN_(name, s) name##_##s
#define KNV_FN(name, s) KNV_FN_(name, s)
#ifdef __CUDACC__
/* minb blocks an SM at least: ptxas keeps a thread's registers to 65536 / (minb KNV_NT) */
#define KNV_KERNEL(name, args, minb) __global__ void __launch_bounds__(KNV_NT, minb) name(args a)
#define KN_UNROLL _Pragma("unroll")
#define KNV_FENCE() __threadfence()
#define KNV_LDCG(p) __ldcg(p)
#define KNV_DEV static __device__ __forceinline__
#else
#define KNV_KERNEL(name, args, minb) KN_KERNEL_DEF(name, args)
#define KN_UNROLL
#define KNV_FENCE() ((void)0)
#define KNV_LDCG(p) (*(p))
#define KNV_DEV static inline
#endif

/* The kernels' arguments: kn_gemv_args plus the plan and the workspace. */
struct knv_args {
    const void *a;
    const unsigned short *w;
    const float *bias;
    void *c, *aux;
    float *ws;          /* [splits, m, n] partial sums (splits > 1) */
    unsigned *tickets;  /* [tiles], 0 between launches */
    long long n, k, kper, splits;
    int m, a_f32, ta, vec, gelu, c_f32;
};

/* One result element a thread holds at the end: (m, n) and its sum (ok: inside c). */
typedef struct knv_item {
    float v;
    long long n;
    int m, ok;
} knv_item;

/* a's rows [k0, k0 + kt) as f32 into sa [mm][ld]; zeros in the rows past m and up to the
 * next multiple of 8 columns (the [n, k] kernel reads 8 at a time). */
KNV_DEV void knv_stage(float *sa, int mm, int ld, const void *a, int a_f32, int ta, int m, long long k, long long k0,
                       int kt) {
    const int kp = (kt + 7) / 8 * 8;
    for (int i = (int)threadIdx.x; i < mm * kp; i += KNV_NT) {
        const int r = i / kp, kk = i % kp;
        float x = 0.0f;
        if (r < m && kk < kt) {
            const long long off = ta ? (k0 + kk) * m + r : r * k + k0 + kk;
            x = a_f32 ? ((const float *)a)[off] : kn_bf16_f32(((const unsigned short *)a)[off]);
        }
        sa[r * ld + kk] = x;
    }
}

/* Eight bf16 weights at p, kept packed as they are in memory (two a 32-bit word, element
 * 2i in the low half of u[i]: half the registers of f32, so twice the loads in flight):
 * one 16-byte load when vec (p 16-byte aligned) and all 8 are inside (valid >= 8), else
 * one at a time, 0 for those past valid. KNV_W(u, j) is element j as f32 (exact). */
KNV_DEV void knv_load8(unsigned *u, const unsigned short *p, int vec, long long valid) {
    if (vec && valid >= 8) {
#ifdef __CUDACC__
        const uint4 q = __ldg((const uint4 *)p);
        u[0] = q.x; u[1] = q.y; u[2] = q.z; u[3] = q.w;
#else
        memcpy(u, p, 4 * sizeof *u);
#endif
    } else {
        KN_UNROLL for (int j = 0; j < 4; j++)
            u[j] = (2 * j < valid ? (unsigned)p[2 * j] : 0u) | (2 * j + 1 < valid ? (unsigned)p[2 * j + 1] << 16 : 0u);
    }
}
#define KNV_W(u, j) kn_bits_f32((j) % 2 ? (u)[(j) / 2] & 0xffff0000u : (u)[(j) / 2] << 16)

/* w [k, n]: the KNV_U rows r, r + 32, ... (below kt) of the staged tile at k0, the 8 columns
 * from n0; rows past kt are left unread (and unused). */
KNV_DEV void knv_rows_kn(unsigned (*w)[4], const unsigned short *wp, long long n, int vec, long long k0, int r, int kt,
                         long long n0) {
    KN_UNROLL for (int u = 0; u < KNV_U; u++) {
        const int rr = r + 32 * u;
        if (rr < kt) knv_load8(w[u], wp + (k0 + rr) * n + n0, vec, n - n0);
    }
}

/* w [n, k]: the chunks kk and kk + 256 (columns of the tile at k0) of the 4 rows nb.. of w;
 * zeros past kt or past n. */
KNV_DEV void knv_chunks_nk(unsigned (*w)[4][4], const unsigned short *wp, long long n, long long k, int vec, long long k0,
                           int kk, int kt, long long nb) {
    KN_UNROLL for (int u = 0; u < 2; u++) {
        const int ku = kk + 256 * u;
        KN_UNROLL for (int c = 0; c < 4; c++) {
            if (ku < kt && nb + c < n) {
                knv_load8(w[u][c], wp + (nb + c) * k + k0 + ku, vec, kt - ku);
            } else {
                KN_UNROLL for (int j = 0; j < 4; j++) w[u][c][j] = 0u;
            }
        }
    }
}

/* The epilogue of one final sum, stored. */
KNV_DEV void knv_store(const struct knv_args *a, int m, long long n, float x) {
    if (a->bias) x += a->bias[n];
    const long long at = (long long)m * a->n + n;
    if (a->gelu) {
        if (a->c_f32) ((float *)a->aux)[at] = x;
        else ((unsigned short *)a->aux)[at] = kn_bf16_bits(x);
        x = kn_sc_gelu_f32(x);
    }
    if (a->c_f32) ((float *)a->c)[at] = x;
    else ((unsigned short *)a->c)[at] = kn_bf16_bits(x);
}

/* Every thread of the block calls it with its nit items: one split stores them; else the
 * split's sums go to the workspace and the tile's last block adds the splits in order. */
KNV_DEV void knv_finish(const struct knv_args *a, const knv_item *it, int nit) {
    __shared__ unsigned last;
    if (a->splits == 1) {
        for (int q = 0; q < nit; q++)
            if (it[q].ok) knv_store(a, it[q].m, it[q].n, it[q].v);
        return;
    }
    for (int q = 0; q < nit; q++)
        if (it[q].ok) a->ws[((long long)blockIdx.y * a->m + it[q].m) * a->n + it[q].n] = it[q].v;
    KNV_FENCE(); /* the sums are visible before the ticket says so */
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(&a->tickets[blockIdx.x], 1u) == (unsigned)(a->splits - 1);
    __syncthreads();
    if (!last) return;
    KNV_FENCE();
    for (int q = 0; q < nit; q++) {
        if (!it[q].ok) continue;
        const float *p = a->ws + (long long)it[q].m * a->n + it[q].n;
        float s = KNV_LDCG(p);
        for (long long sp = 1; sp < a->splits; sp++) s += KNV_LDCG(p + sp * a->m * a->n);
        knv_store(a, it[q].m, it[q].n, s);
    }
    if (threadIdx.x == 0) a->tickets[blockIdx.x] = 0; /* for the next launch */
}

#define KNV_MM 1
#define KNV_S m1
#include "runtime/cuda_gemv.inc"
#undef KNV_MM
#undef KNV_S
#define KNV_MM 2
#define KNV_S m2
#include "runtime/cuda_gemv.inc"
#undef KNV_MM
#undef KNV_S
#define KNV_MM 4
#define KNV_S m4
#include "runtime/cuda_gemv.inc"
#undef KNV_MM
#undef KNV_S
#define KNV_MM 8
#define KNV_S m8
#include "runtime/cuda_gemv.inc"
#undef KNV_MM
#undef KNV_S

/* The launch: grid (tiles, splits), KNV_NT threads. 0, or -1 when the launch failed. */
static int knv_launch(const kn_gemv_args *g, float *ws, unsigned *tickets) {
    long long tiles, splits, kper;
    kn_gemv_plan(g->m, g->n, g->k, g->tb, &tiles, &splits, &kper);
    struct knv_args a;
    memset(&a, 0, sizeof a);
    a.a = g->a;
    a.w = g->w;
    a.bias = g->bias;
    a.c = g->c;
    a.aux = g->aux;
    a.ws = ws;
    a.tickets = tickets;
    a.n = g->n;
    a.k = g->k;
    a.kper = kper;
    a.splits = splits;
    a.m = g->m;
    a.a_f32 = g->a_f32;
    a.ta = g->ta;
    a.gelu = g->gelu;
    a.c_f32 = g->c_f32;
    /* 16-byte loads: every row of w starts 16-byte aligned */
    a.vec = ((uintptr_t)g->w & 15u) == 0 && (g->tb ? g->k : g->n) % 8 == 0;
    kn_dim3 grid = {(unsigned)tiles, (unsigned)splits, 1}, block = {KNV_NT, 1, 1};
    const int mm = g->m <= 1 ? 1 : g->m <= 2 ? 2 : g->m <= 4 ? 4 : 8;
    if (g->tb) return mm == 1 ? KN_LAUNCH(knv_nk_m1, grid, block, a) : mm == 2 ? KN_LAUNCH(knv_nk_m2, grid, block, a)
                    : mm == 4 ? KN_LAUNCH(knv_nk_m4, grid, block, a) : KN_LAUNCH(knv_nk_m8, grid, block, a);
    return mm == 1 ? KN_LAUNCH(knv_kn_m1, grid, block, a) : mm == 2 ? KN_LAUNCH(knv_kn_m2, grid, block, a)
           : mm == 4 ? KN_LAUNCH(knv_kn_m4, grid, block, a) : KN_LAUNCH(knv_kn_m8, grid, block, a);
}

#ifdef __CUDACC__
/* ---------------------------------------------------------------- the CUDA backend's entry */
#include <atomic>
#include <mutex>

#include "runtime/cuda_impl.h"

#define KNV_MAX_GPUS 64
static float *knv_ws[KNV_MAX_GPUS];
static unsigned *knv_tickets[KNV_MAX_GPUS];
static std::mutex knv_mu;
static std::atomic<long long> knv_n_gemv{0}, knv_n_cublas{0};
static int knv_forced = -1;

bool kn_gemv_cuda_enabled(void) {
    static int v = -1;
    if (knv_forced >= 0) return knv_forced == 1;
    if (v < 0) {
        const char *s = getenv("KILN_GEMV");
        v = s && s[0] && s[0] != '0';
    }
    return v == 1;
}

void kn_gemv_cuda_force(int on) { knv_forced = on < 0 ? -1 : on ? 1 : 0; }

void kn_gemv_cuda_counts(long long *gemv, long long *cublas) {
    if (gemv) *gemv = knv_n_gemv.load();
    if (cublas) *cublas = knv_n_cublas.load();
}

void knc_gemv_count_cublas(void) { knv_n_cublas++; }

/* The device's workspace, made (and its tickets zeroed) at the first split problem. */
static kn_status knv_workspace(int dev, float **ws, unsigned **tickets) {
    if (dev < 0 || dev >= KNV_MAX_GPUS) return kn_error(KN_ERR_DEVICE, "gemv: GPU index %d out of range", dev);
    std::lock_guard<std::mutex> lock(knv_mu);
    if (!knv_ws[dev]) {
        void *p = NULL;
        size_t bytes = (size_t)KNV_WS_FLOATS * sizeof(float) + KNV_MAX_TILES * sizeof(unsigned);
        KN_CUDA_TRY(cudaSetDevice(dev));
        KN_CUDA_TRY(cudaMalloc(&p, bytes));
        cudaError_t e = cudaMemset((char *)p + (size_t)KNV_WS_FLOATS * sizeof(float), 0, KNV_MAX_TILES * sizeof(unsigned));
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            KN_CUDA_WARN(cudaFree(p));
            return kn_error(KN_ERR_DEVICE, "gemv: zeroing the workspace's tickets failed: %s", cudaGetErrorString(e));
        }
        knv_ws[dev] = (float *)p;
        knv_tickets[dev] = (unsigned *)((char *)p + (size_t)KNV_WS_FLOATS * sizeof(float));
    }
    *ws = knv_ws[dev];
    *tickets = knv_tickets[dev];
    return KN_OK;
}

kn_status knc_gemv(const kn_gemv_args *g, int dev, bool *done) {
    *done = false;
    if (!kn_gemv_cuda_enabled() || kn_gemv_refuses(g)) {
        knv_n_cublas++;
        return KN_OK;
    }
    long long tiles, splits, kper;
    kn_gemv_plan(g->m, g->n, g->k, g->tb, &tiles, &splits, &kper);
    float *ws = NULL;
    unsigned *tickets = NULL;
    if (splits > 1) KN_TRY(knv_workspace(dev, &ws, &tickets));
    if (knv_launch(g, ws, tickets) != 0) /* KN_LAUNCH read (and cleared) the launch's error */
        return kn_error(KN_ERR_DEVICE, "gemv: launching the kernel failed (m=%d n=%lld k=%lld tb=%d)", g->m, g->n, g->k,
                        (int)g->tb);
    knv_n_gemv++;
    *done = true;
    return KN_OK;
}

#else
/* ---------------------------------------------------------------- the plan (C: defined once,
 * by the emulator's compile, which every build has; the GPU's entry calls it too) */

void kn_gemv_plan(int m, long long n, long long k, bool tb, long long *tiles, long long *splits, long long *kper) {
    const long long cols = tb ? 32 : 64, minrows = tb ? 256 : 64; /* rows (k) a split keeps at least */
    const long long t = (n + cols - 1) / cols;
    long long s = 1;
    while (t * s < KNV_TARGET && (k + 2 * s - 1) / (2 * s) >= minrows) s *= 2;
    while (s > 1 && (t > KNV_MAX_TILES || s * (long long)m * n > KNV_WS_FLOATS)) s /= 2;
    long long kp = (k + s - 1) / s;
    kp = (kp + 7) / 8 * 8; /* a split starts on a 16-byte chunk of a [n, k] row */
    *tiles = t;
    *kper = kp > 0 ? kp : 8;
    *splits = k > 0 ? (k + *kper - 1) / *kper : 1;
}

const char *kn_gemv_refuses(const kn_gemv_args *g) {
    if (!g) return "no arguments";
    if (g->m < 1 || g->m > KN_GEMV_MAX_M) return "m outside 1..8";
    if (g->n < 1 || g->k < 1) return "an empty product";
    if (g->n > 0x7fffffffLL * 32 || g->k > 0x7fffffffLL) return "sizes past the grid's";
    if (!g->a || !g->w || !g->c || (g->gelu && !g->aux)) return "a NULL operand";
    return NULL;
}

/* ---------------------------------------------------------------- the emulator's entry */

kn_status kn_gemv_emu(const kn_gemv_args *g) {
    const char *why = kn_gemv_refuses(g);
    if (why) return kn_error(KN_ERR_ARG, "kn_gemv_emu: %s", why);
    long long tiles, splits, kper;
    kn_gemv_plan(g->m, g->n, g->k, g->tb, &tiles, &splits, &kper);
    float *ws = NULL;
    unsigned *tickets = NULL;
    if (splits > 1) {
        ws = kn_malloc((size_t)(splits * g->m * g->n) * sizeof *ws);
        tickets = kn_calloc((size_t)tiles, sizeof *tickets);
        if (!ws || !tickets) {
            kn_free(ws);
            kn_free(tickets);
            return kn_error(KN_ERR_OOM, "kn_gemv_emu: out of memory for the workspace");
        }
        memset(ws, 0xFF, (size_t)(splits * g->m * g->n) * sizeof *ws); /* NaN: a partial read but never written shows */
    }
    int rc = knv_launch(g, ws, tickets);
    bool reset = true;
    for (long long i = 0; tickets && i < tiles; i++) reset = reset && tickets[i] == 0;
    kn_free(ws);
    kn_free(tickets);
    if (rc != 0) return kn_error(KN_ERR_DEVICE, "kn_gemv_emu: the launch failed (the emulator said why on stderr)");
    if (!reset) return kn_error(KN_ERR_INTERNAL, "kn_gemv_emu: a tile's ticket was not put back to 0");
    return KN_OK;
}

#if !KN_HAVE_CUDA /* cuda_gemv.cu's own otherwise */
bool kn_gemv_cuda_enabled(void) { return false; }
void kn_gemv_cuda_force(int on) { (void)on; }
void kn_gemv_cuda_counts(long long *gemv, long long *cublas) {
    if (gemv) *gemv = 0;
    if (cublas) *cublas = 0;
}
#endif
#endif
