/* cuda_emu.h: a tiny CUDA emulator that runs a kernel's threads on the CPU.
 *
 * Why: kiln's generated CUDA must be testable on machines without a GPU. Here each
 * thread of a block is a coroutine (ucontext) with its own stack; the block's threads
 * run one at a time and switch only at __syncthreads(), so a barrier means exactly
 * what it means on the GPU: every live thread of the block reaches it before any
 * goes on. __shared__ memory is simply memory shared by the block's coroutines.
 *
 * Supported subset (this first state): blockIdx/threadIdx/blockDim/gridDim,
 * __syncthreads(), launch through kn_emu_launch(fn, grid, block, args) where fn has
 * the signature void fn(void *args). A __syncthreads() that some threads of a block
 * never reach (they returned, e.g. a barrier inside divergent code) is reported as a
 * deadlock: kn_emu_launch returns -1 with a message naming the block, instead of
 * hanging. atomicAdd/atomicMax on int, unsigned and float (plain read-modify-write:
 * threads never interleave between switch points, so it is atomic here).
 * __shfl_sync, __shfl_down_sync and __shfl_xor_sync on float, double and int (the warp
 * meets at each shuffle; the mask is not checked: every lane of the warp must take part).
 * The warp-level tensor-core products mma.sync.m16n8k8 (tf32) and m16n8k16 (bf16), f32
 * accumulators, through kn_emu_mma (core/runtime/cuda_mma.h wraps them for kernels that
 * also compile under nvcc): every lane deposits its A and B fragment registers (the PTX
 * ISA's fragment layouts), the warp meets as at a shuffle, each lane computes its four
 * D elements from the deposited fragments, and the warp meets again; ldmatrix (x1, x2, x4,
 * .trans) of 16-bit matrices the same way (kn_emu_ldmatrix). cp.async of 16 bytes (kn_cp_async16
 * in cuda_mma.h) as a plain copy at once, its commit_group and wait_group as nothing. __shared__
 * arrays (static storage: one block runs at a time). The launch macro:
 *
 *     KN_KERNEL_DEF(scale, struct scale_args)     // a kernel taking one struct by value, a
 *     { ... a.x[i] *= a.s; ... }                  // (the name of the argument is a)
 *     int rc = KN_LAUNCH(scale, grid, block, args);   // scale<<<grid, block, 0, knc_stream>>>(args) under nvcc
 *
 * Kernels the CUDA renderer emits use kn_emu_launch directly (their emulator dialect,
 * core/codegen/render_cuda.c, declares the same built-ins). Not emulated: votes, the up
 * shuffle, other mma shapes, dynamic shared memory, streams.
 *
 * Checks (what compute-sanitizer's memcheck, racecheck and synccheck find on a GPU), each
 * finding printed with the kernel, block, thread and source line, and the launch returns -1:
 *   - divergent barriers: the threads of a block waiting at different __syncthreads() (the
 *     macro passes its function and line), or some returned while others wait;
 *   - out-of-bounds global accesses of generated kernels: the renderer indexes every buffer
 *     through KN_EMU_AT with the range its view reaches; an index outside it is reported
 *     (kn_emu_oob) and goes to a scratch element, so memory stays intact;
 *   - in code compiled with the access hooks (KN_EMU_HOOK_FLAGS, core/codegen/emu_dialect.h:
 *     gcc's -fsanitize=kernel-address calling __asan_loadN/storeN_noabort, which
 *     cuda_emu_check.c defines; cc.c compiles the emulator dialect so, core/emu.mk the
 *     *_emu.c kernels, lab 08's flash unit and tests/emu's kernels): shared-memory races (a byte written by one thread and read or
 *     written by another with no barrier between, nor, for two lanes of one warp, a shuffle:
 *     a shadow record per byte), and accesses just outside the block's shared memory (every
 *     __shared__ array lives in the kn_emu_shared section; the thread stops there, as a GPU
 *     kernel at an illegal address) or outside a buffer given to kn_emu_watch.
 * Threads run between switch points in a seeded random order (KN_EMU_SEED, default 1; the
 * same seed gives the same order), so an unsynchronized kernel does not get one lucky order
 * every time. Not checked: races on global memory. */
#ifndef KN_CUDA_EMU_H
#define KN_CUDA_EMU_H

#include <stddef.h>

#include "codegen/emu_dialect.h" /* KN_EMU_HOOK_FLAGS, KN_EMU_CHECKS_SOURCE: the dialect codegen emits */

typedef struct { unsigned x, y, z; } kn_dim3;

extern kn_dim3 kn_emu_thread_idx, kn_emu_block_idx, kn_emu_block_dim, kn_emu_grid_dim;

/* Runs fn(args) over grid x block threads; 0 on success, -1 on a deadlock
 * (message on stderr) or a bad launch shape. */
int kn_emu_launch(void (*fn)(void *), kn_dim3 grid, kn_dim3 block, void *args);
/* The same, with the kernel's name for the reports (KN_LAUNCH passes it: its kernels are static). */
int kn_emu_launch_named(const char *name, void (*fn)(void *), kn_dim3 grid, kn_dim3 block, void *args);
void kn_emu_syncthreads(void);
void kn_emu_syncthreads_at(const char *fn, int line); /* the barrier at line of fn (for reports) */
/* Watch [p, p + bytes) as a global buffer named name during the next launch (hooked code
 * only): an access within 256 bytes outside it, and in no other watched buffer, is out of
 * bounds. kn_emu_launch forgets the list when it returns. */
void kn_emu_watch(const void *p, size_t bytes, const char *name);
/* [lo, hi) holds __shared__ arrays (add 1), or no longer (add 0): the modules of the
 * emulator dialect call it from a constructor and a destructor. */
void kn_emu_shared_window(const void *lo, const void *hi, int add);
/* KN_EMU_AT's report of element i of buffer number buf outside [lo, hi); returns a zeroed
 * scratch element to read or write instead. */
void *kn_emu_oob(long long i, long long lo, long long hi, int buf, int write, const char *file, const char *fn, int line);

double kn_emu_shfl_down(double v, unsigned delta);
double kn_emu_shfl_xor(double v, unsigned lanemask);
double kn_emu_shfl_idx(double v, unsigned src_lane);

/* d = A B + c for the warp: A [16, K] row-major and B [K, 8] column-major, spread over the
 * lanes' a[4] and b[2] (32-bit registers) as the PTX ISA lays out mma.m16n8k8 .tf32 (K 8,
 * one tf32 a register; inputs rounded as cvt.rna.tf32.f32 does, a no-op on values already
 * rounded) or mma.m16n8k16 .bf16 (K 16, two bf16 a register, the lower-indexed element in
 * the low half); c and d [16, 8] f32, c0..c3 at (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)
 * with g = lane / 4, t = lane % 4. Products are exact and summed in double, then added to
 * c and rounded once to f32 (the GPU's adder tree rounds differently, within f32 roundoff).
 * Every lane of the warp must call it (as mma.sync.aligned requires). */
enum { KN_EMU_MMA_TF32_16x8x8, KN_EMU_MMA_BF16_16x8x16 };
void kn_emu_mma(int kind, float d[4], const unsigned a[4], const unsigned b[2], const float c[4]);
/* ldmatrix.sync.aligned.m8n8.xN{.trans}.shared.b16: n (1, 2, 4) 8 x 8 matrices of 16-bit
 * elements, the rows of matrix i at the addresses lanes 8i..8i+7 pass (row: 8 contiguous
 * elements); lane (g, t) receives r[i] = elements (g, 2t) and (g, 2t + 1) of matrix i, the
 * first in the low half, or with trans (2t, g) and (2t + 1, g). Every lane calls it. */
void kn_emu_ldmatrix(unsigned *r, int n, int trans, const unsigned short *row);

#if !defined(__CUDACC__) && !defined(KN_EMU_NO_BUILTINS)
#define threadIdx kn_emu_thread_idx
#define blockIdx kn_emu_block_idx
#define blockDim kn_emu_block_dim
#define gridDim kn_emu_grid_dim
#define __syncthreads() kn_emu_syncthreads_at(__func__, __LINE__)
#define __shfl_down_sync(mask, v, d) ((void)(mask), (__typeof__(v))kn_emu_shfl_down((v), (d)))
#define __shfl_xor_sync(mask, v, m) ((void)(mask), (__typeof__(v))kn_emu_shfl_xor((v), (m)))
#define __shfl_sync(mask, v, l) ((void)(mask), (__typeof__(v))kn_emu_shfl_idx((v), (l)))
#define __shared__ static __attribute__((section("kn_emu_shared"), aligned(16)))
/* The generated kernels' checked element access (see KN_EMU_CHECKS_SOURCE), for hand-written ones */
#define KN_EMU_AT(p, i, lo, hi, b, w)                                                                   \
    ((long long)(i) >= (lo) && (long long)(i) < (hi) ? &(p)[i]                                          \
                                                     : (__typeof__(&(p)[0]))kn_emu_oob((long long)(i), (lo), (hi), (b), (w), __FILE__, __func__, __LINE__))
#define KN_KERNEL_DEF(name, T)                                        \
    static void name##_body(T a);                                     \
    static void name(void *p) { name##_body(*(T *)p); }               \
    static void name##_body(T a)
#define KN_EMU_STR_(x) #x
#define KN_EMU_STR(x) KN_EMU_STR_(x) /* the name after macro expansion (KNF_FN(...) in flash) */
#define KN_LAUNCH(name, grid, block, args) kn_emu_launch_named(KN_EMU_STR(name), name, (grid), (block), &(args))
#define __global__
#define __device__
static inline int atomicAdd_i(int *p, int v) { int o = *p; *p = o + v; return o; }
static inline unsigned atomicAdd_u(unsigned *p, unsigned v) { unsigned o = *p; *p = o + v; return o; }
static inline float atomicAdd_f(float *p, float v) { float o = *p; *p = o + v; return o; }
static inline int atomicMax_i(int *p, int v) { int o = *p; if (v > o) *p = v; return o; }
#define atomicAdd(p, v) _Generic((p), int *: atomicAdd_i, unsigned *: atomicAdd_u, float *: atomicAdd_f)(p, v)
#define atomicMax(p, v) atomicMax_i(p, v)
#elif defined(__CUDACC__)
/* kiln's stream (core/runtime/cuda_impl.h): the legacy stream, or a CUDA graph's capture
 * stream while one is captured, so these launches are recorded with the rest of the step */
extern cudaStream_t knc_stream;
#define KN_KERNEL_DEF(name, T) __global__ void name(T a)
#define KN_LAUNCH(name, grid, block, args)                                                                   \
    (name<<<dim3((grid).x, (grid).y, (grid).z), dim3((block).x, (block).y, (block).z), 0, knc_stream>>>(args), \
     cudaGetLastError() == cudaSuccess ? 0 : -1)
#endif

#endif
