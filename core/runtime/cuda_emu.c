/* cuda_emu.c: the scheduler behind cuda_emu.h. Each thread of a block is a ucontext
 * coroutine; the scheduler resumes every thread in turn until it either returns or
 * parks at __syncthreads(). When all live threads are parked, the barrier opens.
 * If some threads returned while others wait at a barrier, no thread can ever move
 * again: that is a deadlock on the GPU, reported here instead of hanging. */
#define _XOPEN_SOURCE 700
#define _DEFAULT_SOURCE
#include "cuda_emu.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

enum { KN_EMU_STACK = 64 * 1024, KN_EMU_MAX_THREADS = 1024 };
enum { RUNNING, AT_BARRIER, AT_WARP, DONE };

kn_dim3 kn_emu_thread_idx, kn_emu_block_idx, kn_emu_block_dim, kn_emu_grid_dim;

static ucontext_t sched_ctx;
static ucontext_t *thread_ctx;
static int *thread_state;
static unsigned cur;
static void (*cur_fn)(void *);
static void *cur_args;

static void kn_emu_entry(void)
{
    cur_fn(cur_args);
    thread_state[cur] = DONE;
    swapcontext(&thread_ctx[cur], &sched_ctx);
}

void kn_emu_syncthreads(void)
{
    thread_state[cur] = AT_BARRIER;
    swapcontext(&thread_ctx[cur], &sched_ctx);
}

/* A warp shuffle: every lane posts its value, the warp meets, each reads its source
 * lane's value, the warp meets again (so no slot is overwritten before it is read). Values
 * travel as double, which holds a float or an int exactly. */
static double warp_slot[KN_EMU_MAX_THREADS];

static void kn_emu_warp_meet(void)
{
    thread_state[cur] = AT_WARP;
    swapcontext(&thread_ctx[cur], &sched_ctx);
}

static double kn_emu_shfl(double v, unsigned src_lane)
{
    warp_slot[cur] = v;
    kn_emu_warp_meet();
    unsigned base = cur / 32 * 32, src = base + src_lane;
    unsigned nt = kn_emu_block_dim.x * kn_emu_block_dim.y * kn_emu_block_dim.z;
    double r = src_lane < 32 && src < nt ? warp_slot[src] : v;
    kn_emu_warp_meet();
    return r;
}

/* Lanes past the warp's end keep their own value, as on the GPU. */
double kn_emu_shfl_down(double v, unsigned delta) { return kn_emu_shfl(v, cur % 32 + delta); }
double kn_emu_shfl_xor(double v, unsigned lanemask) { return kn_emu_shfl(v, (cur % 32) ^ lanemask); }
double kn_emu_shfl_idx(double v, unsigned src_lane) { return kn_emu_shfl(v, src_lane % 32); }

/* mma.sync: the lanes' fragment registers meet in mma_slot (a lane past the block's end
 * reads as zeros: every lane must take part). */
static struct { unsigned a[4], b[2]; } mma_slot[KN_EMU_MAX_THREADS];
static const unsigned short *ldm_slot[KN_EMU_MAX_THREADS];

static double emu_bits_f32(unsigned u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* cvt.rna.tf32.f32: to 10 mantissa bits, ties away from zero; NaN and infinities stay. */
static double emu_tf32(unsigned u)
{
    if ((u & 0x7f800000u) != 0x7f800000u)
        u = (u + 0x1000u) & 0xffffe000u;
    return emu_bits_f32(u);
}

/* Element (row, k) of A or (k, col) of B from the lanes' slots, per the PTX ISA layouts. */
static double emu_mma_a(int kind, unsigned base, int row, int k)
{
    int g = row % 8, hi = row >= 8;
    if (kind == KN_EMU_MMA_TF32_16x8x8) /* a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4) */
        return emu_tf32(mma_slot[base + g * 4 + k % 4].a[hi + 2 * (k >= 4)]);
    /* bf16: a0 (g, 2t..2t+1), a1 (g+8, ...), a2 (g, 2t+8..), a3 (g+8, 2t+8..) */
    unsigned r = mma_slot[base + g * 4 + (k % 8) / 2].a[hi + 2 * (k >= 8)];
    return emu_bits_f32((k % 2 ? r >> 16 : r & 0xffffu) << 16);
}

static double emu_mma_b(int kind, unsigned base, int k, int col)
{
    if (kind == KN_EMU_MMA_TF32_16x8x8) /* b0 (t, g), b1 (t+4, g) */
        return emu_tf32(mma_slot[base + col * 4 + k % 4].b[k >= 4]);
    unsigned r = mma_slot[base + col * 4 + (k % 8) / 2].b[k >= 8]; /* b0 (2t..2t+1, g), b1 (2t+8.., g) */
    return emu_bits_f32((k % 2 ? r >> 16 : r & 0xffffu) << 16);
}

void kn_emu_mma(int kind, float d[4], const unsigned a[4], const unsigned b[2], const float c[4])
{
    unsigned nt = kn_emu_block_dim.x * kn_emu_block_dim.y * kn_emu_block_dim.z, base = cur / 32 * 32;
    memcpy(mma_slot[cur].a, a, sizeof mma_slot[cur].a);
    memcpy(mma_slot[cur].b, b, sizeof mma_slot[cur].b);
    for (unsigned l = nt; l < base + 32 && l < KN_EMU_MAX_THREADS; l++)
        memset(&mma_slot[l], 0, sizeof mma_slot[l]);
    kn_emu_warp_meet();
    int g = (int)(cur % 32) / 4, t = (int)(cur % 4), kk = kind == KN_EMU_MMA_TF32_16x8x8 ? 8 : 16;
    float r[4];
    for (int e = 0; e < 4; e++) {
        int row = g + 8 * (e >= 2), col = 2 * t + e % 2;
        double s = 0;
        for (int k = 0; k < kk; k++)
            s += emu_mma_a(kind, base, row, k) * emu_mma_b(kind, base, k, col);
        r[e] = (float)(s + c[e]);
    }
    kn_emu_warp_meet(); /* every lane has read the slots before any deposits again */
    memcpy(d, r, sizeof r);
}

static kn_dim3 kn_emu_unflatten(unsigned i, kn_dim3 d)
{
    kn_dim3 r = { i % d.x, (i / d.x) % d.y, i / (d.x * d.y) };
    return r;
}

int kn_emu_launch(void (*fn)(void *), kn_dim3 grid, kn_dim3 block, void *args)
{
    unsigned nt = block.x * block.y * block.z, nb = grid.x * grid.y * grid.z;
    if (nt == 0 || nt > KN_EMU_MAX_THREADS || nb == 0) {
        fprintf(stderr, "kn_emu_launch: bad launch shape: block %ux%ux%u (1..%d threads), grid %ux%ux%u\n",
                block.x, block.y, block.z, KN_EMU_MAX_THREADS, grid.x, grid.y, grid.z);
        return -1;
    }
    int rc = 0;
    thread_ctx = calloc(nt, sizeof *thread_ctx);
    thread_state = calloc(nt, sizeof *thread_state);
    char *stacks = malloc((size_t)nt * KN_EMU_STACK);
    if (!thread_ctx || !thread_state || !stacks) {
        fprintf(stderr, "kn_emu_launch: out of memory for %u thread stacks\n", nt);
        rc = -1;
        goto out;
    }
    cur_fn = fn;
    cur_args = args;
    kn_emu_block_dim = block;
    kn_emu_grid_dim = grid;
    for (unsigned b = 0; b < nb && rc == 0; b++) {
        for (unsigned t = 0; t < nt; t++) {
            getcontext(&thread_ctx[t]);
            thread_ctx[t].uc_stack.ss_sp = stacks + (size_t)t * KN_EMU_STACK;
            thread_ctx[t].uc_stack.ss_size = KN_EMU_STACK;
            thread_ctx[t].uc_link = &sched_ctx;
            makecontext(&thread_ctx[t], kn_emu_entry, 0);
            thread_state[t] = RUNNING;
        }
        kn_emu_block_idx = kn_emu_unflatten(b, grid);
        for (;;) {
            unsigned waiting = 0, done = 0;
            for (cur = 0; cur < nt; cur++) {
                if (thread_state[cur] != RUNNING)
                    continue;
                kn_emu_thread_idx = kn_emu_unflatten(cur, block);
                swapcontext(&sched_ctx, &thread_ctx[cur]);
            }
            for (unsigned t = 0; t < nt; t++) {
                waiting += thread_state[t] == AT_BARRIER;
                done += thread_state[t] == DONE;
            }
            if (done == nt)
                break;
            int moved = 0; /* open every warp whose live lanes all wait at a shuffle */
            for (unsigned w = 0; w < nt; w += 32) {
                unsigned end = w + 32 < nt ? w + 32 : nt, at = 0, live = 0;
                for (unsigned t = w; t < end; t++) {
                    at += thread_state[t] == AT_WARP;
                    live += thread_state[t] != DONE;
                }
                if (at > 0 && at == live) {
                    for (unsigned t = w; t < end; t++)
                        if (thread_state[t] == AT_WARP)
                            thread_state[t] = RUNNING;
                    moved = 1;
                }
            }
            if (moved)
                continue;
            if (done > 0 || waiting + done != nt) {
                fprintf(stderr, "kn_emu_launch: deadlock in block (%u,%u,%u): %u threads wait at "
                        "__syncthreads() that %u returned threads never reach (a barrier in divergent code?)\n",
                        kn_emu_block_idx.x, kn_emu_block_idx.y, kn_emu_block_idx.z, waiting, done);
                rc = -1;
                break;
            }
            for (unsigned t = 0; t < nt; t++)
                thread_state[t] = RUNNING;
        }
    }
out:
    free(stacks);
    free(thread_state);
    free(thread_ctx);
    thread_ctx = NULL;
    thread_state = NULL;
    return rc;
}

void kn_emu_ldmatrix(unsigned *r, int n, int trans, const unsigned short *row)
{
    unsigned base = cur / 32 * 32, g = cur % 32 / 4, t = cur % 4;
    ldm_slot[cur] = row;
    kn_emu_warp_meet();
    unsigned out[4] = {0};
    for (int i = 0; i < n && i < 4; i++) {
        const unsigned short *lo = trans ? ldm_slot[base + 8 * i + 2 * t] + g : ldm_slot[base + 8 * i + g] + 2 * t;
        const unsigned short *hi = trans ? ldm_slot[base + 8 * i + 2 * t + 1] + g : lo + 1;
        out[i] = (unsigned)*lo | (unsigned)*hi << 16;
    }
    kn_emu_warp_meet();
    for (int i = 0; i < n && i < 4; i++)
        r[i] = out[i];
}
