/* test_rowmath.c — softmax, layernorm and cross-entropy: one definition, three
 * implementations that agree.
 *
 * core/tensor/rowmath.h holds the formulas the row ops' kernels share (a statistic from a
 * row's sums, an element from the statistics); the CPU kernels (kernels_train.inc) and the
 * CUDA kernels (cuda_norm.cu, cuda_cross_entropy.cu, cuda_reduce.cu) call them, and the
 * decomposition (core/passes/decompose.c) writes them as graph ops in the same order.
 * Checked here:
 *   - each formula is the textbook one (a row of known values);
 *   - every row op (softmax, log_softmax and their backwards, layernorm, normalize,
 *     layernorm_dx, cross_entropy and its backward) decomposed and compiled to C, and in
 *     the CUDA text under the emulator, against the interpreter's kernels: f64 within
 *     1e-12, f32 within 2e-5 (the decomposition rounds its statistics to the row's dtype,
 *     the kernels keep them in double);
 *   - on a GPU (skipped here with one line): the CUDA library kernels (node by node) and
 *     the compiled program against the interpreter. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kn_test.h"
#include "kiln/device.h"
#include "kiln/ir.h"
#include "kiln/program.h"
#include "tensor/rowmath.h"

KN_TEST(rowmath, the_formulas_on_a_known_row) {
    const double x[4] = {1, 2, 3, 6}; /* mean 3, sum of squared deviations 14 */
    double s = 0, q = 0;
    for (int j = 0; j < 4; j++) s += x[j];
    double m = kn_rm_mean(s, 4);
    for (int j = 0; j < 4; j++) q += (x[j] - m) * (x[j] - m);
    cr_assert_eq(m, 3.0);
    double r = kn_rm_rstd_f64(q, 4, 0.5); /* 1 / sqrt(14 / 4 + 0.5) = 1 / 2 */
    cr_assert_eq(r, 0.5);
    cr_assert_eq(kn_rm_normalize_f64(6, m, r), 1.5);
    cr_assert_eq(kn_rm_affine_f64(6, m, r, 2, 1), 4.0);
    cr_assert_eq(kn_rm_layernorm_dx_f64(3, 1.5, 1, 2, 0.5), 0.5 * (3 - 1 - 1.5 * 2));
    cr_assert_eq(kn_rm_softmax_dx_f64(0.25, 2, 0.5), 0.25 * 1.5);
    cr_assert_eq(kn_rm_log_softmax_dx_f64(2, 0.25, 4), 1.0);
    cr_assert_eq(kn_rm_lse(exp(0.0) + exp(-1.0), 2), log(1 + exp(-1.0)) + 2);
    cr_assert_eq(kn_rm_ce_scale_f64(3, 6), 0.5);
    cr_assert_eq(kn_rm_ce_scale_f32(3, 0), 0.0f);
    cr_assert_eq(kn_rm_rstd_f32(q, 4, 0.5), 0.5f);
}

static const char *row_ops(const char *dt) {
    static char buf[2048];
    snprintf(buf, sizeof buf,
             "%%0 = input {name=\"x\"} : %s[3,4,9]\n"
             "%%1 = input {name=\"dy\"} : %s[3,4,9]\n"
             "%%2 = param {name=\"w\"} : %s[9]\n"
             "%%3 = param {name=\"b\"} : %s[9]\n"
             "%%4 = input {name=\"t\"} : i32[3,4]\n"
             "%%5 = input {name=\"g\"} : %s[]\n"
             "%%6 = softmax %%0 : %s[3,4,9]\n"
             "%%7 = softmax_bwd %%1, %%6 : %s[3,4,9]\n"
             "%%8 = log_softmax %%0 {axis=1} : %s[3,4,9]\n"
             "%%9 = log_softmax_bwd %%1, %%8 {axis=1} : %s[3,4,9]\n"
             "%%10 = layernorm %%0, %%2, %%3 : %s[3,4,9]\n"
             "%%11 = normalize %%0 : %s[3,4,9]\n"
             "%%12 = layernorm_dx %%1, %%0, %%2 : %s[3,4,9]\n"
             "%%13 = cross_entropy %%0, %%4 : %s[]\n"
             "%%14 = cross_entropy_bwd %%5, %%0, %%4 : %s[3,4,9]\n"
             "output %%6, %%7, %%8, %%9, %%10, %%11, %%12, %%13, %%14\n",
             dt, dt, dt, dt, dt, dt, dt, dt, dt, dt, dt, dt, dt, dt);
    return buf;
}

static kn_graph *parse(const char *text) {
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_graph_parse(text, strlen(text), &g));
    KN_ASSERT_OK(kn_graph_verify(g));
    return g;
}

static void private_cache(void) {
    char tmpl[] = "/tmp/kiln-rm-XXXXXX";
    char *d = mkdtemp(tmpl);
    cr_assert_not_null(d);
    setenv("KILN_CACHE_DIR", d, 1);
}

/* The row ops on dev in mode m (emu: the CUDA text under the emulator) against the
 * interpreter, f64 and f32. */
static void agree(kn_device dev, kn_program_mode m, bool emu) {
    private_cache();
    for (int k = 0; k < 2; k++) {
        kn_graph *g = parse(row_ops(k ? "f32" : "f64"));
        kn_program_opts o = {.device = dev, .passes = NULL, .mode = m, .cuda_emu = emu};
        kn_program_stats st;
        double worst = INFINITY, tol = k ? 2e-5 : 1e-12;
        KN_ASSERT_OK(kn_program_compare(g, &o, 17 + (uint64_t)k, &worst, &st));
        cr_assert(worst <= tol, "%s, mode %d%s: %.3g from the interpreter (tolerance %.3g)", k ? "f32" : "f64", (int)m,
                  emu ? " (emulator)" : "", worst, tol);
        kn_graph_free(g);
    }
}

KN_TEST(rowmath, decomposed_and_compiled_to_c_agree_with_the_cpu_kernels, .timeout = 240) {
    agree(KN_CPU, KN_PROGRAM_COMPILED, false);
}
KN_TEST(rowmath, decomposed_under_the_cuda_emulator_agree_with_the_cpu_kernels, .timeout = 240) {
    agree(KN_CPU, KN_PROGRAM_COMPILED, true);
}
KN_TEST(cuda_rowmath, the_cuda_kernels_and_the_compiled_gpu_program_agree_with_the_cpu_kernels, .timeout = 240) {
    if (kn_device_count(KN_DEVICE_CUDA) == 0) cr_skip_test("no CUDA device: GPU test skipped");
    agree((kn_device){KN_DEVICE_CUDA, 0}, KN_PROGRAM_NODES, false);
    agree((kn_device){KN_DEVICE_CUDA, 0}, KN_PROGRAM_COMPILED, false);
}
