/* test_gemm_cuda.c — the GPU GEMM that kiln's CUDA code generation renders
 * (core/codegen/gemm_cuda.c): every candidate compiles with NVRTC (no GPU needed); under
 * the CUDA emulator the kernels equal a double-precision product on awkward shapes (1, primes,
 * sizes that are not multiples of the tile), scalar and float4 alike; bad configurations are
 * refused with the reason; on a GPU the autotuner checks every candidate against cuBLAS and
 * caches its choice. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kn_test.h"
#include "kiln/device.h"
#include "kiln/codegen.h"
#include "kiln/gemm.h"
#if KN_HAVE_CUDA
#include "kiln/cuda.h"
#endif
#define KN_EMU_NO_BUILTINS
#include "runtime/cuda_emu.h"

/* C = A B under the emulator with configuration c; the largest |c - ref| / (1 + |ref|). */
static double emu_product(kn_cuda_gemm_cfg c, int m, int n, int k, unsigned seed) {
    char *src = NULL;
    KN_ASSERT_OK(kn_cuda_gemm_render(c, KN_CUDA_EMU, &src));
    kn_cc_module *mod = NULL;
    KN_ASSERT_OK(kn_cc_compile(src, &mod, NULL));
    void (*fn)(void *) = (void (*)(void *))kn_cc_symbol(mod, "kn_sgemm__emu");
    cr_assert_not_null(fn, "the emulator entry kn_sgemm__emu");
    float *a = kn_malloc(sizeof(float) * (size_t)(m * k + 1)), *b = kn_malloc(sizeof(float) * (size_t)(k * n + 1)),
          *cc = kn_malloc(sizeof(float) * (size_t)(m * n + 1));
    srand(seed);
    for (int i = 0; i < m * k; i++) a[i] = (float)rand() / RAND_MAX * 2 - 1;
    for (int i = 0; i < k * n; i++) b[i] = (float)rand() / RAND_MAX * 2 - 1;
    for (int i = 0; i < m * n; i++) cc[i] = NAN; /* every element must be written */
    kn_cuda_launch l = kn_cuda_gemm_launch(c, m, n);
    cr_assert(kn_cuda_gemm_fits(c, m, n, k));
    void *args[6] = {&a, &b, &cc, &m, &n, &k};
    cr_assert_eq(kn_emu_launch(fn, (kn_dim3){l.grid, 1, 1}, (kn_dim3){l.block, 1, 1}, args), 0);
    double worst = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int p = 0; p < k; p++) s += (double)a[i * k + p] * b[p * n + j];
            double e = fabs(cc[i * n + j] - s) / (1 + fabs(s));
            if (!(e <= worst)) worst = e;
        }
    kn_free(a);
    kn_free(b);
    kn_free(cc);
    kn_cc_free(mod);
    kn_free(src);
    return worst;
}

KN_TEST(gemm_cuda, scalar_kernels_under_the_emulator_on_awkward_shapes, .timeout = 120) {
    kn_cuda_gemm_cfg c = {32, 32, 8, 4, 4, false}; /* 64 threads: a cheap emulation */
    static const int shapes[][3] = {{1, 1, 1}, {7, 13, 5}, {33, 31, 9}, {67, 45, 33}, {32, 64, 16}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        double e = emu_product(c, shapes[s][0], shapes[s][1], shapes[s][2], (unsigned)s + 1);
        cr_assert(e <= 1e-5, "%dx%dx%d: error %.3g", shapes[s][0], shapes[s][1], shapes[s][2], e);
    }
}

KN_TEST(gemm_cuda, float4_kernels_under_the_emulator, .timeout = 120) {
    kn_cuda_gemm_cfg cs[] = {{32, 32, 8, 4, 4, true}, {64, 32, 8, 8, 4, true}};
    static const int shapes[][3] = {{1, 4, 4}, {37, 44, 12}, {64, 32, 64}, {70, 36, 20}};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            double e = emu_product(cs[i], shapes[s][0], shapes[s][1], shapes[s][2], (unsigned)(10 * i + s));
            cr_assert(e <= 1e-5, "config %zu, %dx%dx%d: error %.3g", i, shapes[s][0], shapes[s][1], shapes[s][2], e);
        }
    /* float4 rows need k and n multiples of 4 */
    cr_assert_not(kn_cuda_gemm_fits(cs[0], 8, 6, 4));
    cr_assert_not(kn_cuda_gemm_fits(cs[0], 8, 4, 5));
    cr_assert(kn_cuda_gemm_fits((kn_cuda_gemm_cfg){32, 32, 8, 4, 4, false}, 8, 6, 5));
}

KN_TEST(gemm_cuda, bad_configurations_say_why) {
    struct { kn_cuda_gemm_cfg c; const char *why; } bad[] = {
        {{64, 64, 8, 3, 4, false}, "TM must divide BM"},
        {{16, 16, 8, 4, 4, false}, "16 threads"},
        {{64, 64, 8, 16, 16, false}, "threads a block"},
        {{128, 128, 64, 8, 8, false}, "shared memory"},
        {{64, 64, 8, 2, 8, true}, "float4"},
        {{64, 64, 8, 0, 4, false}, "positive"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(kn_cuda_gemm_check(bad[i].c), KN_ERR_ARG, "case %zu", i);
        cr_assert(strstr(kn_last_error(), bad[i].why), "case %zu: %s", i, kn_last_error());
        char *src = (char *)1;
        cr_assert_eq(kn_cuda_gemm_render(bad[i].c, KN_CUDA_NVRTC, &src), KN_ERR_ARG);
        cr_assert_null(src);
    }
    kn_cuda_gemm_cfg ok = {64, 64, 8, 4, 4, true};
    char *src = NULL;
    cr_assert_eq(kn_cuda_gemm_render(ok, (kn_cuda_dialect)7, &src), KN_ERR_ARG);
    int n = kn_cuda_gemm_candidates(NULL, 0);
    cr_assert(n >= 8 && n <= KN_CUDA_GEMM_MAX_TRIALS, "%d candidates", n);
}

#if KN_HAVE_CUDA
/* Every candidate the autotuner tries compiles with NVRTC for sm_90 (no GPU needed), with
 * shared memory for the slabs and float4 loads where asked. */
KN_TEST(gemm_cuda, every_candidate_compiles_with_nvrtc, .timeout = 240) {
    kn_cuda_gemm_cfg cands[KN_CUDA_GEMM_MAX_TRIALS];
    int n = kn_cuda_gemm_candidates(cands, KN_CUDA_GEMM_MAX_TRIALS);
    int vec = 0;
    for (int i = 0; i < n; i++) {
        char *src = NULL, *ptx = NULL;
        size_t len = 0;
        KN_ASSERT_OK(kn_cuda_gemm_render(cands[i], KN_CUDA_NVRTC, &src));
        cr_assert(strstr(src, "__shared__") && strstr(src, "kn_sgemm"));
        if (cands[i].vec) {
            cr_assert(strstr(src, "float4"));
            vec++;
        }
        KN_ASSERT_OK(kn_cuda_nvrtc_compile(src, "kn_sgemm.cu", 9, 0, &ptx, &len));
        cr_assert(strstr(ptx, ".entry kn_sgemm"), "candidate %d has its entry", i);
        kn_free(ptx);
        kn_free(src);
    }
    cr_assert_gt(vec, n / 2, "most candidates load float4s");
}

/* On a GPU: every candidate agrees with cuBLAS fp32 at an awkward size, the winner is cached
 * and read back. */
KN_TEST(gemm_cuda, the_gpu_autotuner_checks_and_caches, .timeout = 240) {
    int ngpu = kn_device_count(KN_DEVICE_CUDA);
    if (ngpu <= 0) {
        cr_skip_test("no GPU here: the GPU GEMM autotuner runs on a machine with one");
        return;
    }
    char dir[] = "/tmp/kiln-gemm-cuda-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    kn_cuda_gemm_tune_result r;
    KN_ASSERT_OK(kn_cuda_gemm_tune(0, 300, 260, 132, dir, false, &r));
    cr_assert_gt(r.ntrials, 4);
    cr_assert_not(r.from_cache);
    for (int i = 0; i < r.ntrials; i++) cr_assert(r.trials[i].max_rel_err <= 1e-4 && r.trials[i].ms > 0);
    cr_assert(r.cublas_ms > 0 && r.best_ms > 0 && access(r.path, R_OK) == 0);
    kn_cuda_gemm_cfg best = r.best;
    KN_ASSERT_OK(kn_cuda_gemm_tune(0, 300, 260, 132, dir, false, &r));
    cr_assert(r.from_cache && r.ntrials == 1 && kn_cuda_gemm_cfg_equal(r.trials[0].cfg, best));
    /* k = 131 is no multiple of 4: only the scalar kernel fits */
    KN_ASSERT_OK(kn_cuda_gemm_tune(0, 33, 17, 131, dir, true, &r));
    cr_assert(r.ntrials == 1 && !r.best.vec);
}
#endif
