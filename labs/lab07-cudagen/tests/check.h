/* check.h — helpers for lab 07's tests (public and hidden): CUDA C compiled for the CUDA
 * emulator and launched there, and compiled programs (whose CUDA kernels run under the
 * emulator, or on a GPU when there is one) against the interpreter.
 *
 * Every value a test checks that your units produced passes through kn_out
 * (tests/harness/kn_out.h) first: the launch configurations, the element loop's text, the
 * buffers the kernels wrote, the compiled programs' outputs. Under `make test-lab07` that
 * does nothing; under the grader your run only writes them, and the staff's build of the
 * same test (no code of yours in it) checks them, with its own interpreter. */
#ifndef LAB07_CHECK_H
#define LAB07_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kn_out_program.h"
#include "kn_test.h"
#include "kiln/codegen.h"
#include "kiln/nn.h"
#include "kiln/passes.h"
#include "kiln/program.h"
#define KN_EMU_NO_BUILTINS
#include "runtime/cuda_emu.h"

static inline void l7_cache(void) {
    char d[96];
    snprintf(d, sizeof d, "/tmp/kiln-test-cache-%ld", (long)getuid());
    setenv("KILN_CACHE_DIR", d, 0);
}

static const kn_cuda_limits L7_H100 = {132, 1024, 2048};

/* kn_cuda_launch_config, its result through kn_out. */
static inline kn_cuda_launch l7_config(const kn_kernel *k, const kn_cuda_limits *lim) {
    kn_cuda_launch l = kn_cuda_launch_config(k, lim);
    kn_out("kn_cuda_launch_config", &l, sizeof l);
    return l;
}

/* kn_render_cuda_element_loop, its status (and message) and text through kn_out. */
static inline kn_status l7_element_loop(const kn_kernel *k, const char *ix, char *out, size_t cap) {
    kn_status st = kn_out_status("kn_render_cuda_element_loop", kn_render_cuda_element_loop(k, ix, out, cap));
    if (out && cap) kn_out_text("the element loop", out, cap);
    return st;
}

/* Compile `body` (CUDA C in the emulator dialect, after the prelude: your block reduce is
 * in it) with the host compiler; the module stays loaded for the test process. The checker
 * compiles and launches nothing of yours (NULL; l7_launch and l7_run do nothing there): it
 * takes what your kernels wrote from your run. */
static inline kn_cc_module *l7_compile(const char *body) {
    if (kn_out_checking()) return NULL;
    l7_cache();
    const char *pre = kn_render_cuda_prelude(KN_CUDA_EMU);
    char *src = malloc(strlen(pre) + strlen(body) + 1);
    strcpy(src, pre);
    strcat(src, body);
    kn_cc_module *m = NULL;
    KN_ASSERT_OK(kn_cc_compile(src, &m, NULL));
    free(src);
    return m;
}

/* Launch entry `name` (a void name(void *args) function of m) on the emulator. */
static inline int l7_launch(kn_cc_module *m, const char *name, unsigned grid, unsigned block, void **args) {
    if (kn_out_checking()) return 0;
    void *f = kn_cc_symbol(m, name);
    cr_assert_not_null(f, "no function %s in the compiled module", name);
    void (*fn)(void *);
    memcpy(&fn, &f, sizeof f);
    kn_dim3 g = {grid, 1, 1}, b = {block, 1, 1};
    return kn_emu_launch(fn, g, b, args);
}

static inline kn_graph *l7_parse(const char *text) {
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_graph_parse(text, strlen(text), &g));
    KN_ASSERT_OK(kn_graph_verify(g));
    return g;
}

/* The first fused kernel of g's schedule, lowered. */
static inline kn_kernel l7_kernel(const kn_graph *g) {
    kn_schedule *s = NULL;
    KN_ASSERT_OK(kn_schedule_build(g, &s));
    kn_kernel k;
    int gi = 0;
    while (gi < s->ngroups && !s->groups[gi].fused) gi++;
    cr_assert_lt(gi, s->ngroups, "the graph has no fused kernel");
    KN_ASSERT_OK(kn_kernel_lower(g, s, gi, &k));
    kn_schedule_free(s);
    return k;
}

/* Render k in the emulator dialect for launch l, compile it, and run it on bufs (one pointer
 * per buffer of k, in its order). */
static inline void l7_run(const kn_kernel *k, kn_cuda_launch l, void **bufs) {
    if (kn_out_checking()) return;
    char *src = NULL;
    size_t len = 0, cap = 0;
    KN_ASSERT_OK(kn_render_cuda(k, KN_CUDA_EMU, &l, &src, &len, &cap));
    kn_cc_module *m = l7_compile(src);
    kn_free(src);
    void *args[16];
    for (int b = 0; b < k->nbufs; b++) args[b] = &bufs[b];
    char name[48];
    snprintf(name, sizeof name, "%s__emu", k->name);
    cr_assert_eq(l7_launch(m, name, l.grid, l.block, args), 0,
                 "%s failed under the CUDA emulator: its report (kn_emu: ...: an out-of-bounds access, a race, a "
                 "barrier not all threads reach) names the block, the thread and the line of the kernel", name);
}

/* The compiled program on dev (the CPU: CUDA kernels under the emulator) against the
 * interpreter on the same random inputs (kn_graph_random_input): the largest
 * |a - b| / (1 + |a|) over every output element (NaN against NaN 0, against a number
 * +inf), as kn_program_compare measures it for graphs without collectives. The program's
 * outputs and stats pass through kn_out (tests/harness/kn_out_program.h); the checker
 * (kn_out_checking) does not compile or run the program at all, only the interpreter.
 * *st may be NULL. */
static inline double l7_compare(const kn_graph *g, kn_device dev, uint64_t seed, kn_program_stats *st) {
    l7_cache();
    kn_program_opts o = {.device = dev, .mode = KN_PROGRAM_COMPILED, .cuda_emu = dev.type == KN_DEVICE_CPU};
    return kn_out_compare(g, &o, seed, st);
}

#define L7_SKIP_WITHOUT_GPU()                                                                \
    do {                                                                                     \
        if (kn_device_count(KN_DEVICE_CUDA) == 0) cr_skip_test("no CUDA device: GPU test skipped"); \
    } while (0)

/* A row kernel written by hand around your block reduce: thread t of block b adds
 * x[b * n + i] for i = t, t + blockDim.x, ...; every thread writes what kn_block_sum and
 * kn_block_max returned to sum[b * blockDim.x + t], max[...]; then a second pair of calls
 * on other values (sh reused) to sum2. */
static const char L7_ROWS[] =
    "KN_KERNEL rows(const double *x, double *sum, double *max, double *sum2, int n)\n{\n"
    "    __shared__ double sh[32];\n"
    "    double v = 0, m = -(double)INFINITY;\n"
    "    for (int i = threadIdx.x; i < n; i += blockDim.x) {\n"
    "        v += x[blockIdx.x * n + i];\n"
    "        m = kn_max2(m, x[blockIdx.x * n + i]);\n"
    "    }\n"
    "    const unsigned at = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    sum[at] = kn_block_sum(v, sh);\n"
    "    max[at] = kn_block_max(m, sh);\n"
    "    sum2[at] = kn_block_sum((double)threadIdx.x, sh);\n"
    "}\n"
    "void rows__emu(void *a)\n{\n"
    "    void **p = (void **)a;\n"
    "    rows(*(const double **)p[0], *(double **)p[1], *(double **)p[2], *(double **)p[3], *(int *)p[4]);\n"
    "}\n";

/* Run L7_ROWS over `rows` rows of n values with `block` threads; check every thread's
 * answers; returns the number of wrong answers (details printed). */
/* L7_ROWS compiled with your block reduce (a clean failure while it is a skeleton). */
static inline kn_cc_module *l7_rows_module(void) {
    kn_clear_error();
    if (!kn_out_checking())
        cr_assert_not_null(kn_cuda_block_reduce_source(), "kn_cuda_block_reduce_source returned NULL: %s", kn_last_error());
    return l7_compile(L7_ROWS);
}

static inline int l7_check_rows(kn_cc_module *m, const double *x, int rows, int n, unsigned block) {
    int total = rows * (int)block, bad = 0;
    double *sum = calloc((size_t)total, sizeof *sum), *mx = calloc((size_t)total, sizeof *mx),
           *sum2 = calloc((size_t)total, sizeof *sum2);
    void *a[5] = {&x, &sum, &mx, &sum2, &n};
    cr_assert_eq(l7_launch(m, "rows__emu", (unsigned)rows, block, a), 0,
                 "your block reduce failed under the CUDA emulator (blocks of %u threads): its report (kn_emu: ...) "
                 "names the block, the thread and the line; a race on sh means a __syncthreads() is missing", block);
    KN_OUT_N(sum, total);
    KN_OUT_N(mx, total);
    KN_OUT_N(sum2, total);
    double tid = (double)block * (block - 1) / 2;
    for (int b = 0; b < rows; b++) {
        double want = 0, wmax = -INFINITY;
        int nan = 0;
        for (int i = 0; i < n; i++) {
            want += x[b * n + i];
            if (isnan(x[b * n + i])) nan = 1;
            else if (x[b * n + i] > wmax) wmax = x[b * n + i];
        }
        for (unsigned t = 0; t < block; t++) {
            int at = b * (int)block + (int)t;
            bool ok_sum = nan ? isnan(sum[at]) : sum[at] == want;
            bool ok_max = nan ? isnan(mx[at]) : mx[at] == wmax;
            if (!ok_sum || !ok_max || sum2[at] != tid) {
                if (bad < 5)
                    printf("block %u, row %d, thread %u: sum %.17g (want %.17g), max %g (want %g), second sum %g "
                           "(want %g)\n", block, b, t, sum[at], want, mx[at], nan ? NAN : wmax, sum2[at], tid);
                bad++;
            }
        }
    }
    free(sum);
    free(mx);
    free(sum2);
    return bad;
}

#endif
