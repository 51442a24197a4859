/* test_hidden_cudagen.c — lab 07 hidden tests: the launch contract case by case, the
 * element loop's text and coverage in int and int64_t, the block reduce's corner cases
 * (every block size, NaN, -inf, consecutive calls sharing sh), and whole programs under the
 * emulator (random graphs, row kernels) and on a GPU when there is one. */
#include <math.h>

#include "../../labs/lab07-cudagen/tests/check.h"

static kn_cuda_launch cfg(bool reduces, int64_t outer, int64_t inner, kn_cuda_limits lim) {
    kn_kernel k = {.reduces = reduces, .outer_n = outer, .inner_n = inner};
    return l7_config(&k, &lim);
}

KN_TEST(lab07_hidden_launch, rows_take_about_eight_elements_a_thread) {
    const struct { int64_t inner; unsigned block; } c[] = {
        {1, 32}, {8, 32}, {256, 32}, {257, 64}, {512, 64}, {768, 96}, {1000, 128}, {1024, 128}, {1025, 160},
        {4096, 512}, {8192, 1024}, {8193, 1024}, {50304, 1024}};
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        kn_cuda_launch l = cfg(true, 10, c[i].inner, L7_H100);
        cr_assert_eq(l.block, c[i].block, "row of %lld: block %u, want %u", (long long)c[i].inner, l.block, c[i].block);
        cr_assert_eq(l.grid, 10u, "10 rows: a block each (got %u)", l.grid);
    }
}

KN_TEST(lab07_hidden_launch, grids_cap_at_what_fits) {
    cr_assert_eq(cfg(true, 1000000, 1024, L7_H100).grid, 132u * 16);
    cr_assert_eq(cfg(true, 1000000, 8192, L7_H100).grid, 132u * 2);
    cr_assert_eq(cfg(true, 2112, 1024, L7_H100).grid, 2112u);
    cr_assert_eq(cfg(true, 2113, 1024, L7_H100).grid, 2112u);
    cr_assert_eq(cfg(false, 1, 256 * 1056, L7_H100).grid, 1056u);
    cr_assert_eq(cfg(false, 1, 256 * 1056 + 1, L7_H100).grid, 1056u);
    cr_assert_eq(cfg(false, 1, 256 * 1055 + 1, L7_H100).grid, 1056u);
    cr_assert_eq(cfg(false, 1, 256 * 1055, L7_H100).grid, 1055u);
    cr_assert_eq(cfg(false, 1, 1, L7_H100).grid, 1u);
    cr_assert_eq(cfg(false, 0, 5, L7_H100).grid, 1u, "an empty space still launches one block");
    cr_assert_eq(cfg(true, 0, 5, L7_H100).grid, 1u);
    kn_cuda_launch l = cfg(false, 3, 7, L7_H100);
    cr_assert(l.block == 256 && l.grid == 1, "grid %u block %u", l.grid, l.block);
}

KN_TEST(lab07_hidden_launch, other_limits) {
    kn_cuda_limits small = {2, 64, 128}, odd = {4, 100, 1000}, one = {1, 1024, 1024};
    kn_cuda_launch l = cfg(false, 1, 300, small);
    cr_assert(l.block == 64 && l.grid == 4, "grid %u block %u", l.grid, l.block);
    l = cfg(true, 50, 1024, small);
    cr_assert(l.block == 64 && l.grid == 4, "grid %u block %u", l.grid, l.block);
    l = cfg(false, 1, 10000, odd);
    cr_assert(l.block == 96 && l.grid == 40, "max_threads 100: whole warps, 96 (grid %u block %u)", l.grid, l.block);
    l = cfg(true, 3, 100000, odd);
    cr_assert(l.block == 96 && l.grid == 3, "grid %u block %u", l.grid, l.block);
    l = cfg(true, 100, 4096, one);
    cr_assert(l.block == 512 && l.grid == 2, "grid %u block %u", l.grid, l.block);
    l = cfg(false, 1, 100000, one);
    cr_assert(l.block == 256 && l.grid == 4, "grid %u block %u", l.grid, l.block);
}

KN_TEST(lab07_hidden_launch, degenerate_limits) {
    kn_cuda_limits no_sms = {0, 1024, 2048}, no_tps = {1, 1024, 0}, warp_sm = {1, 32, 32}, tiny_block = {3, 16, 2048},
                   small_sm = {2, 1024, 512};
    kn_cuda_launch l = cfg(false, 1, 1 << 20, no_sms);
    cr_assert(l.block == 256 && l.grid == 8, "sm_count 0 counts as one SM: grid %u block %u", l.grid, l.block);
    l = cfg(true, 100, 1024, no_sms);
    cr_assert(l.block == 128 && l.grid == 16, "grid %u block %u", l.grid, l.block);
    l = cfg(false, 1, 1 << 20, no_tps);
    cr_assert(l.block == 256 && l.grid == 8, "threads_per_sm 0: 2048 assumed: grid %u block %u", l.grid, l.block);
    l = cfg(false, 1, 1 << 20, warp_sm);
    cr_assert(l.block == 32 && l.grid == 1, "an SM of one warp: grid %u block %u", l.grid, l.block);
    l = cfg(true, 100, 1 << 20, tiny_block);
    cr_assert(l.block == 32, "max_threads below a warp: still one whole warp (got %u)", l.block);
    l = cfg(true, 5, 0, L7_H100);
    cr_assert(l.block == 32 && l.grid == 5, "empty rows: a warp a row: grid %u block %u", l.grid, l.block);
    l = cfg(true, 100, 8192, small_sm);
    cr_assert(l.block == 1024 && l.grid == 2, "a block larger than an SM holds: one a SM: grid %u block %u", l.grid, l.block);
}

KN_TEST(lab07_hidden_element, the_text_in_int_and_int64) {
    kn_kernel k = {.outer_n = 12, .inner_n = 32};
    char out[512];
    KN_ASSERT_OK(l7_element_loop(&k, "int", out, sizeof out));
    cr_assert(strstr(out, "int e") && strstr(out, "e < 384") && strstr(out, "gridDim.x") && strstr(out, "{"), "%s", out);
    cr_assert(strstr(out, "const int o") && strstr(out, "/ 32") && strstr(out, "% 32"), "%s", out);
    cr_assert_null(strstr(out, "int64_t"), "int indexing has no 64-bit arithmetic: %s", out);
    k.outer_n = 3;
    k.inner_n = 1 << 30;
    KN_ASSERT_OK(l7_element_loop(&k, "int64_t", out, sizeof out));
    cr_assert(strstr(out, "int64_t e") && strstr(out, "e < 3221225472") && strstr(out, "const int64_t o"), "%s", out);
    const char *g = strstr(out, "gridDim.x"), *b = strstr(out, "blockIdx.x");
    cr_assert(g && b && strstr(out, "(int64_t)blockIdx.x") && strstr(out, "(int64_t)gridDim.x"),
              "the grid arithmetic must be 64-bit (the products wrap at 2^32): %s", out);
    size_t need = strlen(out) + 1;
    KN_ASSERT_OK(l7_element_loop(&k, "int64_t", out, need)); /* exactly enough, NUL included */
    KN_ASSERT_ERR(l7_element_loop(&k, "int64_t", out, need - 1), KN_ERR_ARG);
    cr_assert_str_eq(out, "", "a text that does not fit leaves out empty");
    KN_ASSERT_ERR(l7_element_loop(&k, "int64_t", out, 40), KN_ERR_ARG);
    cr_assert_str_eq(out, "", "a text that does not fit leaves out empty");
    KN_ASSERT_ERR(l7_element_loop(NULL, "int", out, sizeof out), KN_ERR_ARG);
}

/* An elementwise kernel with a broadcast and a transpose read in place, under launches
 * from one thread-block to more threads than points. */
KN_TEST(lab07_hidden_element, every_point_once_under_any_launch) {
    kn_graph *g = l7_parse("%0 = input {name=\"x\"} : f64[6,10]\n"
                           "%1 = permute %0 {perm=[1,0]} : f64[10,6]\n"
                           "%2 = input {name=\"b\"} : f64[6]\n"
                           "%3 = add %1, %2 : f64[10,6]\n"
                           "%4 = input {name=\"c\"} : f64[10,6]\n"
                           "%5 = mul %3, %4 : f64[10,6]\n"
                           "output %5\n");
    kn_kernel k = l7_kernel(g);
    cr_assert(!k.reduces && k.nbufs == 4, "one kernel reading x, b, c in place");
    double x[60], b[6], c[60], y[60];
    for (int i = 0; i < 60; i++) {
        x[i] = i * 0.5;
        c[i] = 60 - i;
    }
    for (int i = 0; i < 6; i++) b[i] = 100 * i;
    const kn_cuda_launch ls[4] = {{1, 32}, {2, 32}, {1, 64}, {3, 64}};
    for (int t = 0; t < 4; t++) {
        for (int i = 0; i < 60; i++) y[i] = NAN;
        void *bufs[8];
        for (int q = 0; q < k.nbufs; q++) {
            int32_t v = k.bufs[q].value;
            bufs[q] = v == 0 ? (void *)x : v == 2 ? (void *)b : v == 4 ? (void *)c : (void *)y;
        }
        l7_run(&k, ls[t], bufs);
        KN_OUT_N(y, 60);
        for (int i = 0; i < 10; i++)
            for (int j = 0; j < 6; j++) {
                double want = (x[j * 10 + i] + b[j]) * c[i * 6 + j];
                cr_assert_eq(y[i * 6 + j], want, "launch %u x %u: y[%d,%d] = %g, want %g", ls[t].grid, ls[t].block, i, j,
                             y[i * 6 + j], want);
            }
    }
    kn_kernel_clear(&k);
    kn_graph_free(g);
}

KN_TEST(lab07_hidden_reduce, every_block_size_and_uneven_rows) {
    kn_cc_module *m = l7_rows_module();
    double x[4 * 1100];
    for (int i = 0; i < 4 * 1100; i++) x[i] = (double)((i * 37) % 101) - 50;
    for (unsigned block = 32; block <= 1024; block *= 2) cr_assert_eq(l7_check_rows(m, x, 4, 1100, block), 0, "block %u", block);
    cr_assert_eq(l7_check_rows(m, x, 4, 5, 160), 0, "fewer values than threads");
    cr_assert_eq(l7_check_rows(m, x, 2, 1100, 992), 0, "31 warps");
    kn_cc_free(m);
}

KN_TEST(lab07_hidden_reduce, nan_and_minus_infinity) {
    kn_cc_module *m = l7_rows_module();
    double x[3 * 200];
    for (int i = 0; i < 3 * 200; i++) x[i] = -INFINITY;
    x[200 + 150] = NAN;    /* row 1: a NaN late in the row */
    x[400 + 3] = 7;        /* row 2: one finite value */
    x[400 + 199] = NAN;
    cr_assert_eq(l7_check_rows(m, x, 3, 200, 64), 0);
    cr_assert_eq(l7_check_rows(m, x, 3, 200, 128), 0);
    for (int i = 0; i < 3 * 200; i++) x[i] = i % 2 ? 1e300 : -1e300; /* sums cancel in order */
    cr_assert_eq(l7_check_rows(m, x, 3, 200, 32), 0);
    kn_cc_free(m);
}

static kn_gpt_config tiny(void) { return (kn_gpt_config){.vocab = 17, .context = 8, .layers = 2, .width = 16, .heads = 2}; }

KN_TEST(lab07_hidden_compiled, random_graphs_under_the_emulator, .timeout = 180) {
    kn_randgraph_opts ro = kn_randgraph_defaults();
    for (int dt = 0; dt < 2; dt++) {
        ro.dtype = dt ? KN_DT_F64 : KN_DT_F32;
        for (int s = 0; s < 25; s++) {
            kn_graph *g = NULL;
            KN_ASSERT_OK(kn_randgraph(&g, (uint64_t)(500 + s), &ro));
            double tol = dt ? 1e-12 : 2e-5;
            for (int i = 0; i < g->nnodes; i++)
                if (g->nodes[i].op == KN_OP_CAST && g->nodes[i].type.dtype == KN_DT_F32) tol = 2e-5;
            double err = l7_compare(g, KN_CPU, (uint64_t)s, NULL);
            cr_assert(err <= tol, "seed %d (%s): %.3g", 500 + s, dt ? "f64" : "f32", err);
            kn_graph_free(g);
        }
    }
}

KN_TEST(lab07_hidden_compiled, wide_rows_layernorm_and_softmax, .timeout = 120) {
    /* rows of 700: several strides of the block per thread, and a partial last one */
    kn_graph *g = l7_parse("%0 = input {name=\"x\"} : f32[6,700]\n"
                           "%1 = param {name=\"w\"} : f32[700]\n"
                           "%2 = param {name=\"b\"} : f32[700]\n"
                           "%3 = layernorm %0, %1, %2 {eps=1e-05} : f32[6,700]\n"
                           "%4 = softmax %3 : f32[6,700]\n"
                           "output %4\n");
    kn_program_stats st;
    double err = l7_compare(g, KN_CPU, 9, &st);
    cr_assert(err <= 2e-5, "%.3g", err);
    cr_assert_geq(st.nkernels, 1);
    kn_graph_free(g);
}

KN_TEST(lab07_hidden_compiled, gpt_training_follows_the_interpreter, .timeout = 180) {
    kn_gpt_config c = tiny();
    double loss[2][5] = {{0}};
    /* the compiled run is your units' (mode 1): the checker takes its losses from your run */
    for (int mode = 0; mode < (kn_out_checking() ? 1 : 2); mode++) {
        kn_gpt model;
        KN_ASSERT_OK(kn_gpt_new(&model, &c));
        kn_gpt_init(&model, 77);
        kn_optim_config oc = kn_optim_default();
        kn_trainer t;
        KN_ASSERT_OK(kn_trainer_new(&t, &model, 2, 8, &oc, 1.0));
        t.cuda_emu = mode == 1;
        KN_ASSERT_OK(kn_trainer_set_compiled(&t, mode == 1));
        int32_t x[16], y[16];
        for (int step = 0; step < 5; step++) {
            for (int i = 0; i < 16; i++) { x[i] = (i * 3 + step) % 17; y[i] = (i * 11 + step) % 17; }
            KN_ASSERT_OK(kn_trainer_step(&t, x, y, 1e-2, &loss[mode][step], NULL));
        }
        kn_trainer_free(&t);
        kn_gpt_free(&model);
    }
    kn_out("the compiled run's losses", loss[1], sizeof loss[1]);
    for (int s = 0; s < 5; s++)
        cr_assert(fabs(loss[0][s] - loss[1][s]) <= 1e-4 * (1 + fabs(loss[0][s])), "step %d: %.9g vs %.9g", s, loss[0][s],
                  loss[1][s]);
}

KN_TEST(lab07_hidden_gpu, random_graphs_on_the_gpu, .timeout = 180) {
    L7_SKIP_WITHOUT_GPU();
    kn_randgraph_opts ro = kn_randgraph_defaults();
    for (int s = 0; s < 20; s++) {
        kn_graph *g = NULL;
        KN_ASSERT_OK(kn_randgraph(&g, (uint64_t)(900 + s), &ro));
        double err = l7_compare(g, (kn_device){KN_DEVICE_CUDA, 0}, (uint64_t)s, NULL);
        cr_assert(err <= 2e-5, "seed %d: %.3g", 900 + s, err);
        kn_graph_free(g);
    }
}
