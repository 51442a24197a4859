/* cuda_flash_fwd.c — lab 08 unit: the flash attention forward kernel in CUDA, knf_fwd, and
 * its launch (contract: kn_flash_attn in kiln/ir.h and KNF_FWD_ENTRY in
 * runtime/cuda_flash_kernel.h; CPU reference: core/tensor/kernels_flash.inc).
 *
 * Attention for one (batch, head) pair is O = softmax(scale * Q K^T, causal) V over [t, d]
 * matrices. The materialized form stores the [t, t] probabilities; this kernel never does:
 * it walks K and V one tile of KNF_BC keys at a time and keeps, per query row, the online
 * softmax (Milakov and Gimelshein, 2018; FlashAttention, Dao et al., 2022):
 *     m  the largest score seen so far (-inf before any),
 *     l  the sum of exp(s_j - m) over the keys seen,
 *     acc the sum of exp(s_j - m) v_j (O unnormalized).
 * A tile whose largest score mx exceeds m rescales l and acc by alpha = exp(m - mx) (what
 * was summed under the old maximum), then adds its own exp(s_j - mx) and exp(s_j - mx) v_j.
 * At the end O_i = acc / l and the logsumexp L_i = m + log l, which the backward kernels
 * (core/runtime/cuda_flash.inc) use to recompute P exactly. y is the packed [t, d + 1] row:
 * columns 0..d-1 are O, column d is L. A row with no finite score (l = 0) is a zero row with
 * L = -inf, as causal_softmax gives.
 *
 * The GPU's shape of it (FlashAttention-2's, in its plainest form): a block of KNF_BC
 * threads takes one (tile of KNF_BC query rows, pair); thread r owns query row
 * i = blockIdx.x * KNF_BC + r and keeps q_i, m, l and acc in registers. The block walks the
 * key tiles its rows can reach under the causal mask (keys j <= i), loading each tile of K
 * and V into shared memory once for all its threads: every thread loads a share, then
 * __syncthreads() before anyone reads it, and again before the next tile overwrites it.
 *
 * This file is CUDA C in the emulator's subset (runtime/cuda_emu.h: KN_KERNEL_DEF kernels
 * taking one struct `a`, __shared__ arrays, __syncthreads, KN_LAUNCH). The Makefile
 * compiles it twice: by cc as C, to run on the CPU under the emulator (the tests do, on
 * any machine), and by nvcc for the GPU where there is one. It includes itself once per
 * float type, like a C++ template: below, KNF_T is float or double, KNF_BC 32 or 16,
 * KNF_EXP expf or exp; KNF_FN(knf_fwd, KNF_S) is knf_fwd_f32 or knf_fwd_f64. */
#ifndef KNF_S
#include <math.h>

#include "kiln/base.h"
#include "runtime/cuda_emu.h"
#include "runtime/cuda_flash_kernel.h"

#define KNF_S f32
#include "cuda_flash_fwd.c"
#undef KNF_S
#define KNF_S f64
#include "cuda_flash_fwd.c"
#undef KNF_S

#else
/* kn:region knf_fwd */
/* Block (query tile blockIdx.x, pair blockIdx.y), thread r owns query row i. */
KNF_KERNEL(KNF_FN(knf_fwd, KNF_S), struct KNF_FN(knf_args, KNF_S)) {
    __shared__ KNF_T ks[KNF_BC][KNF_DMAX]; /* the key tile: ks[jj] is key j0 + jj */
    __shared__ KNF_T vs[KNF_BC][KNF_DMAX]; /* the value tile */
    const int t = a.t, d = a.d, r = (int)threadIdx.x, i0 = (int)blockIdx.x * KNF_BC, i = i0 + r;
    const long long pair = blockIdx.y;
    const KNF_T *q = a.q + pair * t * d, *k = a.k + pair * t * d, *v = a.v + pair * t * d;
    KNF_T qi[KNF_DMAX], acc[KNF_DMAX];
    KNF_T m = -INFINITY, l = 0;
    for (int c = 0; c < d; c++) { /* rows past t (the last tile's padding) hold zeros */
        qi[c] = i < t ? q[(long long)i * d + c] : 0;
        acc[c] = 0;
    }
    /* BEGIN SOLUTION */
    KNF_T s[KNF_BC];
    const int reach = i0 + KNF_BC < t ? i0 + KNF_BC : t; /* keys j < reach: the tile's causal reach */
    for (int j0 = 0; j0 < reach; j0 += KNF_BC) {
        __syncthreads(); /* the previous tile is no longer read */
        for (int e = r; e < KNF_BC * d; e += KNF_BC) { /* neighbouring threads, neighbouring columns */
            int jj = e / d, c = e % d;
            ks[jj][c] = j0 + jj < t ? k[(long long)(j0 + jj) * d + c] : 0;
            vs[jj][c] = j0 + jj < t ? v[(long long)(j0 + jj) * d + c] : 0;
        }
        __syncthreads();
        int n = i < t ? i + 1 - j0 : 0; /* keys j <= i of this tile */
        if (n > KNF_BC) n = KNF_BC;
        KNF_T mx = m;
        for (int jj = 0; jj < n; jj++) {
            KNF_T dot = 0;
            for (int c = 0; c < d; c++) dot += qi[c] * ks[jj][c];
            s[jj] = dot * a.scale;
            if (s[jj] > mx) mx = s[jj];
        }
        if (n > 0 && mx > -INFINITY) {
            KNF_T alpha = KNF_EXP(m - mx); /* 0 while nothing was summed */
            l *= alpha;
            for (int c = 0; c < d; c++) acc[c] *= alpha;
            m = mx;
            for (int jj = 0; jj < n; jj++) {
                KNF_T p = KNF_EXP(s[jj] - mx);
                l += p;
                for (int c = 0; c < d; c++) acc[c] += p * vs[jj][c];
            }
        }
    }
    if (i < t) {
        KNF_T *yr = a.out + (pair * t + i) * (d + 1);
        bool any = l > 0;
        for (int c = 0; c < d; c++) yr[c] = any ? acc[c] / l : 0;
        yr[d] = any ? m + KNF_LOG(l) : -INFINITY;
    }
    /* SKELETON
    // 1. The tile loop: for j0 = 0, KNF_BC, 2 KNF_BC, ... while j0 is below the block's
    //    causal reach (its last row's key, or t). Every thread of the block runs every
    //    iteration (a __syncthreads() that some threads skip deadlocks), even a row past t.
    //    - __syncthreads(), then load the tile: keys j0 .. j0 + KNF_BC - 1 of k and v into
    //      ks and vs, the block's KNF_BC threads sharing the KNF_BC * d elements (thread r
    //      takes elements r, r + KNF_BC, ...; keys past t load zeros), then __syncthreads().
    //    - the row's keys in this tile: j <= i (none for a row past t). Their scores
    //      s_j = scale * q_i . k_j and the tile's maximum mx.
    //    - the online softmax: rescale l and acc by exp(m - mx), m = mx, then
    //      l += exp(s_j - mx) and acc += exp(s_j - mx) v_j. Careful with -inf: a row whose
    //      scores are all -inf so far must stay at m = -inf, l = 0 (exp(-inf - -inf) is NaN).
    // 2. Row i < t writes y's row a.out + (pair * t + i) * (d + 1): O = acc / l and
    //    L = m + log l in column d, or zeros and L = -inf when l is 0.
    (void)ks; (void)vs; (void)k; (void)v; (void)qi; (void)acc; (void)m; (void)l; (void)i0;
    END SOLUTION */
}
/* kn:endregion knf_fwd */

int KNF_FWD_ENTRY(KNF_S)(struct KNF_FN(knf_args, KNF_S) a, long long bh) {
    /* BEGIN SOLUTION */
    kn_dim3 grid = {(unsigned)((a.t + KNF_BC - 1) / KNF_BC), (unsigned)bh, 1}, block = {KNF_BC, 1, 1};
    return KN_LAUNCH(KNF_FN(knf_fwd, KNF_S), grid, block, a);
    /* SKELETON
    // Launch knf_fwd (KN_LAUNCH(KNF_FN(knf_fwd, KNF_S), grid, block, a)): a block of KNF_BC
    // threads per tile of KNF_BC query rows (grid.x, the last tile partial) and per pair
    // (grid.y = bh); return what KN_LAUNCH returns.
    (void)a; (void)bh; (void)KNF_FN(knf_fwd, KNF_S);
    kn_not_implemented("lab08", "cuda_flash_fwd.c: the flash attention forward kernel knf_fwd and its launch");
    return KNF_NOT_IMPLEMENTED;
    END SOLUTION */
}
#endif
