/* cuda_emu.c: the scheduler behind cuda_emu.h: threads, barriers, warp meetings and
 * launches (the checks are in cuda_emu_check.c).
 *
 * Each thread of a block is a ucontext coroutine; the scheduler resumes every thread in
 * turn (in a seeded random order, KN_EMU_SEED) until it either returns or parks at
 * __syncthreads() or a warp meeting (a shuffle, mma.sync, ldmatrix). When all live threads
 * wait at the same barrier, the barrier opens. If some returned while others wait, or the
 * waiting threads wait at different barriers, no thread can ever move on as the program
 * means: a deadlock or a divergent barrier on the GPU (synccheck's finding), reported here
 * with the kernel, block, threads and barrier lines instead of hanging.
 *
 * The scheduler keeps the epochs the race check reads (cuda_emu_state.h): one per barrier
 * and block, and one per warp meeting; a thread stopped by an out-of-bounds access
 * (kn_emu_fault) ends its block. After each block it has cuda_emu_check.c print what the
 * checks found; a launch with findings returns -1 after that block. */
#define _GNU_SOURCE
#include "cuda_emu.h"
#include "cuda_emu_state.h"
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

enum { KN_EMU_STACK = 64 * 1024 };
enum { RUNNING, AT_BARRIER, AT_WARP, DONE, FAULTED };

kn_dim3 kn_emu_thread_idx, kn_emu_block_idx, kn_emu_block_dim, kn_emu_grid_dim;

static ucontext_t sched_ctx;
static ucontext_t *thread_ctx;
static int *thread_state;
static const char **bar_fn; /* where each thread waits: the barrier's function and line */
static int *bar_line;
static void (*cur_fn)(void *);
static void *cur_args;

/* Shared with the checks (cuda_emu_state.h says what each means). */
unsigned kn_emu_cur;
int kn_emu_active;
unsigned kn_emu_epoch = 1;
unsigned kn_emu_warp_epoch[KN_EMU_MAX_THREADS / 32];
char kn_emu_kernel[128];

/* A hooked access out of bounds: the thread stops before it touches the memory (the hook
 * runs before the access), as a GPU kernel stops at an illegal address; the scheduler ends
 * the block. */
static int emu_faulted;
void kn_emu_fault(void)
{
    emu_faulted = 1;
    thread_state[kn_emu_cur] = FAULTED;
    swapcontext(&thread_ctx[kn_emu_cur], &sched_ctx); /* never resumed */
}

static void kn_emu_entry(void)
{
    cur_fn(cur_args);
    thread_state[kn_emu_cur] = DONE;
    swapcontext(&thread_ctx[kn_emu_cur], &sched_ctx);
}

void kn_emu_syncthreads_at(const char *fn, int line)
{
    bar_fn[kn_emu_cur] = fn;
    bar_line[kn_emu_cur] = line;
    thread_state[kn_emu_cur] = AT_BARRIER;
    swapcontext(&thread_ctx[kn_emu_cur], &sched_ctx);
}

void kn_emu_syncthreads(void) { kn_emu_syncthreads_at(NULL, 0); }

/* A warp shuffle: every lane posts its value, the warp meets, each reads its source
 * lane's value, the warp meets again (so no slot is overwritten before it is read). Values
 * travel as double, which holds a float or an int exactly. */
static double warp_slot[KN_EMU_MAX_THREADS];

static void kn_emu_warp_meet(void)
{
    thread_state[kn_emu_cur] = AT_WARP;
    swapcontext(&thread_ctx[kn_emu_cur], &sched_ctx);
}

static double kn_emu_shfl(double v, unsigned src_lane)
{
    warp_slot[kn_emu_cur] = v;
    kn_emu_warp_meet();
    unsigned base = kn_emu_cur / 32 * 32, src = base + src_lane;
    unsigned nt = kn_emu_block_dim.x * kn_emu_block_dim.y * kn_emu_block_dim.z;
    double r = src_lane < 32 && src < nt ? warp_slot[src] : v;
    kn_emu_warp_meet();
    return r;
}

/* Lanes past the warp's end keep their own value, as on the GPU. */
double kn_emu_shfl_down(double v, unsigned delta) { return kn_emu_shfl(v, kn_emu_cur % 32 + delta); }
double kn_emu_shfl_xor(double v, unsigned lanemask) { return kn_emu_shfl(v, (kn_emu_cur % 32) ^ lanemask); }
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
    unsigned nt = kn_emu_block_dim.x * kn_emu_block_dim.y * kn_emu_block_dim.z, base = kn_emu_cur / 32 * 32;
    memcpy(mma_slot[kn_emu_cur].a, a, sizeof mma_slot[kn_emu_cur].a);
    memcpy(mma_slot[kn_emu_cur].b, b, sizeof mma_slot[kn_emu_cur].b);
    for (unsigned l = nt; l < base + 32 && l < KN_EMU_MAX_THREADS; l++)
        memset(&mma_slot[l], 0, sizeof mma_slot[l]);
    kn_emu_warp_meet();
    int g = (int)(kn_emu_cur % 32) / 4, t = (int)(kn_emu_cur % 4), kk = kind == KN_EMU_MMA_TF32_16x8x8 ? 8 : 16;
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

/* Where thread t waits: "line 12 of f" or "an unmarked __syncthreads()". */
static void emu_site(unsigned t, char *out, size_t cap)
{
    if (bar_fn[t])
        snprintf(out, cap, "__syncthreads() in %s, line %d", bar_fn[t], bar_line[t]);
    else
        snprintf(out, cap, "a __syncthreads()");
}

static int same_site(unsigned a, unsigned b)
{
    return bar_line[a] == bar_line[b] && (bar_fn[a] == bar_fn[b] || (bar_fn[a] && bar_fn[b] && !strcmp(bar_fn[a], bar_fn[b])));
}

/* xorshift64*: the seeded thread order. */
static uint64_t emu_rng;
static unsigned emu_rand(unsigned n)
{
    emu_rng ^= emu_rng >> 12;
    emu_rng ^= emu_rng << 25;
    emu_rng ^= emu_rng >> 27;
    return (unsigned)((emu_rng * 2685821657736338717ull) >> 33) % n;
}

/* Fresh contexts for a block's nt threads, each on its stack in stacks, all RUNNING, in
 * order 0..nt-1. Its own function: GCC treats getcontext as returning twice, and would
 * otherwise warn (-Wclobbered) about the launch's loop variables. */
static __attribute__((noinline)) void emu_threads_start(unsigned nt, char *stacks, unsigned *order)
{
    for (unsigned t = 0; t < nt; t++) {
        getcontext(&thread_ctx[t]);
        thread_ctx[t].uc_stack.ss_sp = stacks + (size_t)t * KN_EMU_STACK;
        thread_ctx[t].uc_stack.ss_size = KN_EMU_STACK;
        thread_ctx[t].uc_link = &sched_ctx;
        makecontext(&thread_ctx[t], kn_emu_entry, 0);
        thread_state[t] = RUNNING;
        order[t] = t;
    }
}

static const char *launch_name; /* kn_emu_launch_named's, for the next launch */

int kn_emu_launch_named(const char *name, void (*fn)(void *), kn_dim3 grid, kn_dim3 block, void *args)
{
    launch_name = name;
    int rc = kn_emu_launch(fn, grid, block, args);
    launch_name = NULL;
    return rc;
}

int kn_emu_launch(void (*fn)(void *), kn_dim3 grid, kn_dim3 block, void *args)
{
    unsigned nt = block.x * block.y * block.z, nb = grid.x * grid.y * grid.z;
    if (nt == 0 || nt > KN_EMU_MAX_THREADS || nb == 0) {
        fprintf(stderr, "kn_emu_launch: bad launch shape: block %ux%ux%u (1..%d threads), grid %ux%ux%u\n",
                block.x, block.y, block.z, KN_EMU_MAX_THREADS, grid.x, grid.y, grid.z);
        kn_emu_checks_end();
        return -1;
    }
    int rc = 0;
    thread_ctx = calloc(nt, sizeof *thread_ctx);
    thread_state = calloc(nt, sizeof *thread_state);
    bar_fn = calloc(nt, sizeof *bar_fn);
    bar_line = calloc(nt, sizeof *bar_line);
    unsigned *order = calloc(nt, sizeof *order);
    char *stacks = malloc((size_t)nt * KN_EMU_STACK);
    if (!thread_ctx || !thread_state || !bar_fn || !bar_line || !order || !stacks) {
        fprintf(stderr, "kn_emu_launch: out of memory for %u thread stacks\n", nt);
        rc = -1;
        goto out;
    }
    Dl_info di;
    void *fp;
    memcpy(&fp, &fn, sizeof fp);
    snprintf(kn_emu_kernel, sizeof kn_emu_kernel, "%s",
             launch_name ? launch_name : dladdr(fp, &di) && di.dli_sname ? di.dli_sname : "(a static function)");
    const char *seed = getenv("KN_EMU_SEED");
    uint64_t seed0 = seed && *seed ? strtoull(seed, NULL, 0) : 1;
    cur_fn = fn;
    cur_args = args;
    kn_emu_block_dim = block;
    kn_emu_grid_dim = grid;
    kn_emu_checks_begin();
    emu_faulted = 0;
    kn_emu_active = 1;
    for (unsigned b = 0; b < nb && rc == 0; b++) {
        emu_threads_start(nt, stacks, order);
        kn_emu_block_idx = kn_emu_unflatten(b, grid);
        emu_rng = (seed0 + b) * 0x9E3779B97F4A7C15ull | 1;
        kn_emu_epoch++; /* a new block: new shared memory */
        for (;;) {
            unsigned waiting = 0, done = 0;
            for (unsigned i = nt - 1; i > 0; i--) { /* this round's order: a seeded shuffle */
                unsigned j = emu_rand(i + 1), o = order[i];
                order[i] = order[j];
                order[j] = o;
            }
            for (unsigned i = 0; i < nt; i++) {
                kn_emu_cur = order[i];
                if (thread_state[kn_emu_cur] != RUNNING)
                    continue;
                kn_emu_thread_idx = kn_emu_unflatten(kn_emu_cur, block);
                swapcontext(&sched_ctx, &thread_ctx[kn_emu_cur]);
            }
            for (unsigned t = 0; t < nt; t++) {
                waiting += thread_state[t] == AT_BARRIER;
                done += thread_state[t] == DONE;
            }
            if (done == nt || emu_faulted)
                break;
            int moved = 0; /* open every warp whose live lanes all wait at a shuffle */
            for (unsigned w = 0; w < nt; w += 32) {
                unsigned end = w + 32 < nt ? w + 32 : nt, at = 0, live = 0;
                for (unsigned t = w; t < end; t++) {
                    at += thread_state[t] == AT_WARP;
                    live += thread_state[t] != DONE;
                }
                if (at > 0 && at == live) {
                    kn_emu_warp_epoch[w / 32]++;
                    for (unsigned t = w; t < end; t++)
                        if (thread_state[t] == AT_WARP)
                            thread_state[t] = RUNNING;
                    moved = 1;
                }
            }
            if (moved)
                continue;
            unsigned w0 = 0, gone = 0, split = nt;
            while (w0 < nt && thread_state[w0] != AT_BARRIER)
                w0++;
            for (unsigned t = 0; t < nt; t++) {
                if (thread_state[t] == DONE && gone == 0)
                    gone = t + 1;
                if (thread_state[t] == AT_BARRIER && split == nt && !same_site(t, w0))
                    split = t;
            }
            char s0[200], s1[200];
            if (w0 < nt)
                emu_site(w0, s0, sizeof s0);
            kn_dim3 tw = kn_emu_unflatten(w0 < nt ? w0 : 0, block);
            if (done > 0 || waiting + done != nt) {
                kn_dim3 tg = kn_emu_unflatten(gone ? gone - 1 : 0, block);
                fprintf(stderr, "kn_emu: deadlock: %u threads wait at __syncthreads() that %u returned threads never "
                        "reach (a barrier in divergent code?)\n    kernel %s, block (%u,%u,%u): thread (%u,%u,%u) "
                        "waits at %s; thread (%u,%u,%u) %s\n",
                        waiting, done, kn_emu_kernel, kn_emu_block_idx.x, kn_emu_block_idx.y, kn_emu_block_idx.z, tw.x,
                        tw.y, tw.z, w0 < nt ? s0 : "(none)", tg.x, tg.y, tg.z,
                        gone ? "returned" : "waits at a warp shuffle");
                rc = -1;
                break;
            }
            if (split < nt) {
                kn_dim3 ts = kn_emu_unflatten(split, block);
                emu_site(split, s1, sizeof s1);
                fprintf(stderr, "kn_emu: divergent barrier: the threads of a block wait at different __syncthreads()\n"
                        "    kernel %s, block (%u,%u,%u): thread (%u,%u,%u) waits at %s; thread (%u,%u,%u) at %s\n",
                        kn_emu_kernel, kn_emu_block_idx.x, kn_emu_block_idx.y, kn_emu_block_idx.z, tw.x, tw.y, tw.z, s0,
                        ts.x, ts.y, ts.z, s1);
                rc = -1;
                break;
            }
            kn_emu_epoch++; /* the barrier opens */
            for (unsigned t = 0; t < nt; t++)
                thread_state[t] = RUNNING;
        }
        if (kn_emu_report() > 0)
            rc = -1;
    }
out:
    kn_emu_active = 0;
    kn_emu_checks_end();
    free(stacks);
    free(order);
    free(bar_line);
    free(bar_fn);
    free(thread_state);
    free(thread_ctx);
    thread_ctx = NULL;
    thread_state = NULL;
    bar_fn = NULL;
    bar_line = NULL;
    return rc;
}

void kn_emu_ldmatrix(unsigned *r, int n, int trans, const unsigned short *row)
{
    unsigned base = kn_emu_cur / 32 * 32, g = kn_emu_cur % 32 / 4, t = kn_emu_cur % 4;
    ldm_slot[kn_emu_cur] = row;
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
