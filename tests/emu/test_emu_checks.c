/* test_emu_checks.c: the CUDA emulator's checks (core/runtime/cuda_emu.h), each on a kernel
 * with the bug and on one without: a shared-memory race (a block reduction that drops its
 * second __syncthreads(), as a lab 07 student might), out-of-bounds shared and global
 * accesses, a divergent barrier. Each report must name the kernel, the block, the thread and
 * the line; the correct kernels must run with no report. This file and emu_oob_shared.c are
 * compiled with the emulator's access hooks (core/emu.mk), as cc.c compiles the generated
 * kernels. */
#define _GNU_SOURCE
#include "runtime/cuda_emu.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void emu_shift_left(void *p); /* emu_oob_shared.c */

static int fails;

/* Runs the launch with stderr captured; returns kn_emu_launch's code, the text in out. */
static int launch_captured(void (*fn)(void *), kn_dim3 grid, kn_dim3 block, void *args, char *out, size_t cap)
{
    fflush(stderr);
    FILE *tmp = tmpfile();
    int saved = dup(2);
    if (!tmp || saved < 0) {
        printf("cannot capture stderr\n");
        exit(1);
    }
    dup2(fileno(tmp), 2);
    int rc = kn_emu_launch(fn, grid, block, args);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    size_t n = fread(out, 1, cap - 1, tmp);
    out[n] = 0;
    fclose(tmp);
    return rc;
}

/* The launch must fail and its report hold every one of the NULL-terminated needles. */
static void expect_report(const char *name, int rc, const char *text, const char *const *needles)
{
    int ok = rc == -1;
    for (int i = 0; needles[i]; i++)
        ok &= strstr(text, needles[i]) != NULL;
    if (getenv("KN_EMU_TEST_VERBOSE")) /* =1: show every report */
        printf("%s:\n%s\n", name, text);
    if (!ok) {
        printf("%s: want a failed launch (got %d) with a report naming", name, rc);
        for (int i = 0; needles[i]; i++)
            printf(" [%s]", needles[i]);
        printf("; the report:\n%s\n", text);
        fails++;
    }
}

static void expect_clean(const char *name, int rc, const char *text)
{
    if (rc != 0 || text[0]) {
        printf("%s: want a clean launch, got %d and:\n%s\n", name, rc, text);
        fails++;
    }
}

/* Two block sums in a row through one shared array, as lab 07's kn_block_sum: lane 0 of
 * each warp writes its warp's total, a barrier, every thread adds the totals, and (when
 * `second`) a barrier before the array is written again. */
struct red_args { const float *x; float *out; int second; };

static float block_sum(float v, float *sh, int second)
{
    for (unsigned d = 16; d > 0; d /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, d);
    if (threadIdx.x % 32 == 0)
        sh[threadIdx.x / 32] = v; /* the write the next call races with */
    __syncthreads();
    float t = 0;
    for (unsigned w = 0; w < blockDim.x / 32; w++)
        t += sh[w]; /* LINE_READ */
    if (second)
        __syncthreads();
    return t;
}

__global__ static void two_sums(void *p)
{
    struct red_args *a = p;
    __shared__ float sh[32];
    float v = a->x[blockIdx.x * blockDim.x + threadIdx.x];
    float s1 = block_sum(v, sh, a->second);
    float s2 = block_sum(2 * v, sh, a->second);
    a->out[blockIdx.x * blockDim.x + threadIdx.x] = s1 + s2;
}

/* y[i] = x[i] for i <= n: one element too many (the lab 07 bug `e <= N`), once through the
 * generated kernels' checked access, once with the buffers watched. */
struct copy_args { const float *x; float *y; int n, len; }; /* len: the buffers' length */

__global__ static void copy_checked(void *p)
{
    struct copy_args *a = p;
    for (int e = (int)(blockIdx.x * blockDim.x + threadIdx.x); e <= a->n; e += (int)(gridDim.x * blockDim.x))
        *KN_EMU_AT(a->y, e, 0, a->len, 1, 1) = *KN_EMU_AT(a->x, e, 0, a->len, 0, 0);
}

__global__ static void copy_watched(void *p)
{
    struct copy_args *a = p;
    int e = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (e <= a->n)
        a->y[e] = 1.0f; /* LINE_WATCHED */
}

__global__ static void two_barriers(void *p)
{
    (void)p;
    if (threadIdx.x < 16)
        __syncthreads();
    else
        __syncthreads();
}

/* Within one warp: lane t writes w[t] and reads its partner's w[t ^ 1]. With no meeting
 * between (`meet` 0) that is a race on a GPU whose lanes run independently (Volta on);
 * a shuffle between orders them. Each lane also writes its own 2-byte half of h: two
 * halves of one word are different bytes, not a race. */
struct lane_args { float *out; int meet; };

__global__ static void lane_exchange(void *p)
{
    struct lane_args *a = p;
    __shared__ float w[32];
    __shared__ unsigned short h[32];
    unsigned t = threadIdx.x;
    w[t] = (float)t;
    h[t] = (unsigned short)t;
    float v = a->meet ? __shfl_xor_sync(0xffffffffu, 0.0f, 1) : 0.0f;
    a->out[t] = v + w[t ^ 1] + (a->meet ? 0.0f * h[t] : 0.0f); /* LINE_LANE */
}

/* The line of the first line of this file holding marker. */
static int line_of(const char *marker)
{
    FILE *f = fopen(__FILE__, "r");
    char buf[512];
    int line = 0, at = 0;
    while (f && fgets(buf, sizeof buf, f)) {
        line++;
        if (strstr(buf, marker) && !strstr(buf, "line_of(")) {
            at = line;
            break;
        }
    }
    if (f)
        fclose(f);
    return at;
}

int main(void)
{
    enum { N = 4 * 128 };
    static char text[16384];
    char want[64], want2[64];
    float *x = malloc(N * sizeof *x), *out = malloc(N * sizeof *out);
    for (int i = 0; i < N; i++)
        x[i] = (float)(i % 5);
    kn_dim3 grid = {4, 1, 1}, block = {128, 1, 1};

    /* the reduction with both barriers: right answers, nothing reported */
    struct red_args r = {x, out, 1};
    expect_clean("block sum with both barriers", launch_captured(two_sums, grid, block, &r, text, sizeof text), text);
    for (int b = 0; b < 4; b++) {
        float s = 0;
        for (int i = 0; i < 128; i++)
            s += x[b * 128 + i];
        if (out[b * 128 + 7] != 3 * s) {
            printf("block sum: block %d got %g want %g\n", b, out[b * 128 + 7], 3 * s);
            fails++;
        }
    }
    /* without the second barrier: a write-after-read race on sh, at the write's line */
    r.second = 0;
    int rc = launch_captured(two_sums, grid, block, &r, text, sizeof text);
    snprintf(want, sizeof want, "test_emu_checks.c:%d", line_of("the write the next call races with"));
    expect_report("block sum without its second barrier", rc, text,
                  (const char *const[]){"shared-memory race (write after read)", "kernel", "block (0,0,0)", "thread (",
                                        want, NULL});

    /* out of bounds: a generated kernel's checked access, a watched buffer, shared memory */
    float *y = malloc(N * sizeof *y);
    struct copy_args c = {x, y, N, N};
    kn_dim3 g1 = {1, 1, 1}, g5 = {5, 1, 1};
    rc = launch_captured(copy_checked, g5, block, &c, text, sizeof text);
    snprintf(want, sizeof want, "block (4,0,0), thread (0,0,0)");
    snprintf(want2, sizeof want2, "in copy_checked, tests/emu/test_emu_checks.c:%d", line_of("*KN_EMU_AT(a->y"));
    expect_report("copy with e <= n (checked access)", rc, text,
                  (const char *const[]){"out-of-bounds global read: element 512 of buffer p0",
                                        "out-of-bounds global write: element 512 of buffer p1", want, want2, NULL});
    c.n = N - 1; /* in bounds now: e <= n - 1 */
    expect_clean("copy in bounds (checked access)", launch_captured(copy_checked, g5, block, &c, text, sizeof text), text);
    c.n = N;
    kn_emu_watch(x, N * sizeof *x, "x");
    kn_emu_watch(y, N * sizeof *y, "y");
    rc = launch_captured(copy_watched, g5, block, &c, text, sizeof text);
    snprintf(want2, sizeof want2, "test_emu_checks.c:%d", line_of("LINE_WATCHED"));
    expect_report("copy with e <= n (watched buffers)", rc, text,
                  (const char *const[]){"out-of-bounds global write of 4 bytes at byte 2048 of buffer y", want,
                                        want2, NULL});
    c.n = N - 1;
    kn_emu_watch(x, N * sizeof *x, "x");
    kn_emu_watch(y, N * sizeof *y, "y");
    expect_clean("copy in bounds (watched buffers)", launch_captured(copy_watched, g5, block, &c, text, sizeof text), text);
    kn_dim3 b64 = {64, 1, 1};
    rc = launch_captured(emu_shift_left, g1, b64, out, text, sizeof text);
    expect_report("shared tile[t + 1]", rc, text,
                  (const char *const[]){"out-of-bounds shared-memory write of 4 bytes", "thread (63,0,0)",
                                        "emu_shift_left", "emu_oob_shared.c:", NULL});

    /* lanes of one warp: a race without a meeting, none with a shuffle between */
    struct lane_args la = {out, 0};
    kn_dim3 b32w = {32, 1, 1};
    rc = launch_captured(lane_exchange, g1, b32w, &la, text, sizeof text);
    snprintf(want, sizeof want, "test_emu_checks.c:%d", line_of("LINE_LANE"));
    expect_report("lanes of one warp with no meeting", rc, text,
                  (const char *const[]){"shared-memory race (read after write)", want, NULL});
    la.meet = 1;
    expect_clean("lanes of one warp after a shuffle", launch_captured(lane_exchange, g1, b32w, &la, text, sizeof text),
                 text);

    /* a barrier in each branch: divergent, named by both lines */
    kn_dim3 b32 = {32, 1, 1};
    rc = launch_captured(two_barriers, g1, b32, NULL, text, sizeof text);
    expect_report("__syncthreads() in each branch", rc, text,
                  (const char *const[]){"divergent barrier", "two_barriers, line", "thread (0,0,0)", "thread (16,0,0)",
                                        NULL});
    free(x);
    free(y);
    free(out);
    printf("test_emu_checks: %s\n", fails ? "FAIL" : "ok");
    return fails != 0;
}
