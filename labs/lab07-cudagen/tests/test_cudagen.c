/* test_cudagen.c — lab 07 public tests: the launch shapes, the elementwise thread loop and
 * the block reduce under the CUDA emulator, and the GPT step compiled to CUDA (your units
 * inside kiln's renderer) against the interpreter: under the emulator, and on a GPU when
 * there is one. */
#include <math.h>

#include "check.h"

KN_TEST(lab07_launch, shapes_on_an_h100) {
    kn_kernel k = {.reduces = true, .outer_n = 98304, .inner_n = 1024};
    kn_clear_error();
    kn_cuda_launch l = l7_config(&k, &L7_H100);
    cr_assert_eq(l.block, 128u, "a 1024-wide row: 8 elements a thread, 128 threads (got %u) %s", l.block,
                 kn_last_error()); /* the skeleton's "not implemented (lab07: ...)" */
    cr_assert_eq(l.grid, 132u * 16, "no more blocks than fit at once (got %u)", l.grid);
    k.reduces = false;
    k.outer_n = 8192;
    k.inner_n = 768;
    l = l7_config(&k, &L7_H100);
    cr_assert(l.block == 256u && l.grid == 132u * 8, "elementwise: got grid %u block %u", l.grid, l.block);
}

/* The contract's rounding at sizes that are not multiples of anything: a row of 1025 needs
 * 129 threads for 8 elements each, so 5 warps; a grid is the blocks the points need, rounded
 * up, capped at what fits. The emulator's limits (2 SMs, 64 threads a block, 128 an SM) are
 * what the compiled program uses on a machine without a GPU. */
KN_TEST(lab07_launch, rounding_at_awkward_sizes) {
    const kn_cuda_limits emu = {2, 64, 128};
    const struct { bool reduces; int64_t outer, inner; const kn_cuda_limits *lim; unsigned grid, block; } c[] = {
        {true, 7, 1025, &L7_H100, 7, 160},      {true, 3000, 100, &L7_H100, 3000, 32},
        {true, 5, 9000, &L7_H100, 5, 1024},     {true, 4, 8, &L7_H100, 4, 32},
        {false, 1, 1000, &L7_H100, 4, 256},     {false, 1, 10, &L7_H100, 1, 256},
        {false, 3, 300000, &L7_H100, 1056, 256}, {false, 37, 29, &emu, 4, 64},
        {false, 1, 100, &emu, 2, 64},           {true, 10, 600, &emu, 4, 64},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        kn_kernel k = {.reduces = c[i].reduces, .outer_n = c[i].outer, .inner_n = c[i].inner};
        kn_cuda_launch l = l7_config(&k, c[i].lim);
        cr_assert(l.grid == c[i].grid && l.block == c[i].block,
                  "%s %lld x %lld on %d SMs (%d threads a block, %d an SM): grid %u block %u, want grid %u block %u",
                  c[i].reduces ? "rows" : "elementwise", (long long)c[i].outer, (long long)c[i].inner, c[i].lim->sm_count,
                  c[i].lim->max_threads, c[i].lim->threads_per_sm, l.grid, l.block, c[i].grid, c[i].block);
    }
}

KN_TEST(lab07_element, every_point_once_with_a_small_grid) {
    kn_graph *g = l7_parse("%0 = input {name=\"x\"} : f32[37,29]\n"
                           "%1 = full {value=2} : f32[]\n"
                           "%2 = mul %0, %1 : f32[37,29]\n"
                           "%3 = exp %2 : f32[37,29]\n"
                           "output %3\n");
    kn_kernel k = l7_kernel(g);
    cr_assert(!k.reduces);
    float x[37 * 29], y[37 * 29];
    for (int i = 0; i < 37 * 29; i++) {
        x[i] = (float)(i % 13) * 0.1f;
        y[i] = -1;
    }
    void *bufs[2] = {x, y};
    l7_run(&k, (kn_cuda_launch){3, 64}, bufs); /* 192 threads for 1073 points: grid-stride */
    KN_OUT_N(y, 37 * 29);
    for (int i = 0; i < 37 * 29; i++)
        cr_assert(fabsf(y[i] - expf(2 * x[i])) <= 1e-6f * expf(2 * x[i]), "point %d: %g, want %g", i, y[i], expf(2 * x[i]));
    kn_kernel_clear(&k);
    kn_graph_free(g);
}

/* y = x + b with a bias b broadcast over the rows: the kernel has 37 rows of 29 (o picks the
 * row of x and y, r the element of b), so a loop that runs one point too far (e <= N)
 * reads and writes row 37, past both buffers: the CUDA emulator reports it, with the line
 * (on a GPU it would be a silent write into whatever follows y). */
KN_TEST(lab07_element, rows_and_a_broadcast_stay_inside_their_buffers) {
    kn_graph *g = l7_parse("%0 = input {name=\"x\"} : f32[37,29]\n"
                           "%1 = input {name=\"b\"} : f32[29]\n"
                           "%2 = add %0, %1 : f32[37,29]\n"
                           "output %2\n");
    kn_kernel k = l7_kernel(g);
    cr_assert(!k.reduces && k.outer_n == 37, "one kernel over 37 rows (got %lld)", (long long)k.outer_n);
    float *x = malloc(37 * 29 * sizeof *x), *b = malloc(29 * sizeof *b), *y = malloc(37 * 29 * sizeof *y);
    for (int i = 0; i < 37 * 29; i++) x[i] = (float)(i % 11), y[i] = -1;
    for (int i = 0; i < 29; i++) b[i] = 0.5f * (float)i;
    void *bufs[3];
    cr_assert_eq(k.nbufs, 3);
    for (int i = 0; i < 3; i++) /* the kernel's buffers by their values: %0 x, %1 b, %2 y */
        bufs[i] = k.bufs[i].value == 0 ? (void *)x : k.bufs[i].value == 1 ? (void *)b : (void *)y;
    l7_run(&k, (kn_cuda_launch){3, 64}, bufs);
    KN_OUT_N(y, 37 * 29);
    for (int i = 0; i < 37 * 29; i++)
        cr_assert(y[i] == x[i] + b[i % 29], "point %d: %g, want %g", i, y[i], x[i] + b[i % 29]);
    free(x), free(b), free(y);
    kn_kernel_clear(&k);
    kn_graph_free(g);
}

KN_TEST(lab07_reduce, block_sum_and_max_for_several_block_sizes) {
    kn_cc_module *m = l7_rows_module();
    double x[3 * 300];
    for (int i = 0; i < 3 * 300; i++) x[i] = (double)((i * 7) % 23) - 11;
    const unsigned blocks[3] = {32, 96, 256};
    for (int i = 0; i < 3; i++) cr_assert_eq(l7_check_rows(m, x, 3, 300, blocks[i]), 0, "block %u", blocks[i]);
    kn_cc_free(m);
}

static kn_gpt_config tiny(void) { return (kn_gpt_config){.vocab = 17, .context = 8, .layers = 2, .width = 16, .heads = 2}; }

KN_TEST(lab07_compiled, gpt_step_under_the_emulator, .timeout = 120) {
    kn_gpt_config c = tiny();
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_gpt_graph(&c, 2, 8, true, &g));
    kn_program_stats st;
    double err = l7_compare(g, KN_CPU, 3, &st);
    cr_assert(err <= 2e-5, "the GPT step's loss and gradients differ from the interpreter by %.3g", err);
    cr_assert_gt(st.nkernels, 10);
    kn_graph_free(g);
}

KN_TEST(lab07_gpu, gpt_step_on_the_gpu, .timeout = 120) {
    L7_SKIP_WITHOUT_GPU();
    kn_gpt_config c = tiny();
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_gpt_graph(&c, 2, 8, true, &g));
    double err = l7_compare(g, (kn_device){KN_DEVICE_CUDA, 0}, 3, NULL);
    cr_assert(err <= 2e-5, "on the GPU the GPT step differs from the interpreter by %.3g", err);
    kn_graph_free(g);
}
