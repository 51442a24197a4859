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
 * __shfl_down_sync on float (the warp meets at each shuffle; the mask is not checked).
 * Not yet: other shuffles, votes, race reports, the <<<>>> launch macro. */
#ifndef KN_CUDA_EMU_H
#define KN_CUDA_EMU_H

typedef struct { unsigned x, y, z; } kn_dim3;

extern kn_dim3 kn_emu_thread_idx, kn_emu_block_idx, kn_emu_block_dim, kn_emu_grid_dim;

/* Runs fn(args) over grid x block threads; 0 on success, -1 on a deadlock
 * (message on stderr) or a bad launch shape. */
int kn_emu_launch(void (*fn)(void *), kn_dim3 grid, kn_dim3 block, void *args);
void kn_emu_syncthreads(void);
float kn_emu_shfl_down(float v, unsigned delta);

#ifndef __CUDACC__
#define threadIdx kn_emu_thread_idx
#define blockIdx kn_emu_block_idx
#define blockDim kn_emu_block_dim
#define gridDim kn_emu_grid_dim
#define __syncthreads() kn_emu_syncthreads()
#define __shfl_down_sync(mask, v, d) ((void)(mask), kn_emu_shfl_down((v), (d)))
#define __global__
#define __device__
static inline int atomicAdd_i(int *p, int v) { int o = *p; *p = o + v; return o; }
static inline unsigned atomicAdd_u(unsigned *p, unsigned v) { unsigned o = *p; *p = o + v; return o; }
static inline float atomicAdd_f(float *p, float v) { float o = *p; *p = o + v; return o; }
static inline int atomicMax_i(int *p, int v) { int o = *p; if (v > o) *p = v; return o; }
#define atomicAdd(p, v) _Generic((p), int *: atomicAdd_i, unsigned *: atomicAdd_u, float *: atomicAdd_f)(p, v)
#define atomicMax(p, v) atomicMax_i(p, v)
#endif

#endif
