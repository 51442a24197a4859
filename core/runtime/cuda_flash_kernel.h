/* cuda_flash_kernel.h — what the flash attention kernels of core/runtime/cuda_flash.cu
 * share with lab 08's unit cuda_flash_fwd.c (solutions/ or labs/lab08-memory/), which holds
 * the forward kernel, knf_fwd, and its launch: the kernels' argument struct, the naming
 * macros and the forward's entry.
 *
 * Both files are CUDA C in the emulator's subset (runtime/cuda_emu.h) and are compiled
 * twice: by nvcc for the GPU and by cc, as C, for the emulator. The two builds of the unit
 * are linked side by side (the emulator's always, the GPU's where nvcc is), so the
 * forward's entry has a name per build, KNF_FWD_ENTRY(S): kn_flash_fwd_gpu_S under nvcc,
 * kn_flash_fwd_emu_S as C. */
#ifndef KN_CUDA_FLASH_KERNEL_H
#define KN_CUDA_FLASH_KERNEL_H

#include "runtime/cuda_flash.h"

#define KNF_DMAX KN_FLASH_CUDA_DMAX
#define KNF_FN_(name, s) name##_##s
#define KNF_FN(name, s) KNF_FN_(name, s)
/* KN_KERNEL_DEF pastes onto the name: expand KNF_FN(...) first. */
#define KNF_KERNEL(name, args) KN_KERNEL_DEF(name, args)

/* The float types. A file that holds kernel text includes it once per type with KNF_S set
 * (f32, f64); the text names the element type KNF_T, the tile KNF_BC (rows of a tile and
 * threads of a block: 32 in f32, 16 in f64, so that two [KNF_BC, KNF_DMAX] tiles fit the
 * 48 KiB of static shared memory) and the math KNF_EXP, KNF_LOG. */
#define KNF_T KNF_FN(knf_real, KNF_S)
#define KNF_BC KNF_FN(knf_tile, KNF_S)
#define KNF_EXP KNF_FN(knf_exp, KNF_S)
#define KNF_LOG KNF_FN(knf_log, KNF_S)
#define knf_real_f32 float
#define knf_tile_f32 32
#define knf_exp_f32 expf
#define knf_log_f32 logf
#define knf_real_f64 double
#define knf_tile_f64 16
#define knf_exp_f64 exp
#define knf_log_f64 log

/* The arguments of every flash kernel (one struct, by value: the emulator's convention):
 * bh (batch x head) pairs of [t, d] matrices q, k, v; y [bh, t, d + 1] (O and the
 * logsumexp L: the forward writes it to out, the backward reads it); dy [bh, t, dyc]. */
#define KNF_ARGS(T, S)                                                                 \
    struct knf_args_##S {                                                              \
        const T *q, *k, *v, *y, *dy;                                                   \
        T *out;                                                                        \
        int t, d, dyc; /* rows, head dim, columns of dy (d, or d + 1 with L's gradient) */ \
        T scale;                                                                       \
    }
KNF_ARGS(float, f32);
KNF_ARGS(double, f64);

#ifdef __CUDACC__
#define KNF_FWD_ENTRY(s) KNF_FN(kn_flash_fwd_gpu, s)
#else
#define KNF_FWD_ENTRY(s) KNF_FN(kn_flash_fwd_emu, s)
#endif

/* The forward (the lab 08 unit): launches knf_fwd_S over a's bh pairs, one block of KNF_BC
 * threads per (tile of KNF_BC query rows, pair), and writes y = a.out. Returns 0, -1 when
 * the launch failed, or KNF_NOT_IMPLEMENTED (the unit's skeleton; kn_last_error says what
 * to write). The caller has checked the sizes (d <= KNF_DMAX, bh <= 65535, t >= 1). */
#define KNF_NOT_IMPLEMENTED (-3)
int KNF_FWD_ENTRY(f32)(struct knf_args_f32 a, long long bh);
int KNF_FWD_ENTRY(f64)(struct knf_args_f64 a, long long bh);

#endif
