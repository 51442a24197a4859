/* test_embedding_cuda.c — the GPU's embedding gradient kernels (core/runtime/cuda_embedding.cu)
 * against the CPU kernel (kn_k_embedding_grad, core/tensor/kernels_train.inc).
 *
 * embedding_emu: the very kernel text nvcc compiles, run on the CPU under the CUDA emulator
 * (core/runtime/cuda_embedding_emu.c), over index distributions that stress the summing:
 * uniform over a large table (rows named once or twice), every index the same (one row of
 * all n positions: the case the thread-per-row kernel took 6 ms for), a skewed one (a few
 * rows take most positions, the rest once: text), and rows named exactly KN_EMBEDDING_CHUNK
 * and one more times. Each result is checked three ways: bit for bit against the sum in the
 * order cuda_embedding.cu promises (chunks of KN_EMBEDDING_CHUNK positions, each in position
 * order, added in order; written out plainly below), which makes every row named at most
 * KN_EMBEDDING_CHUNK times equal to the CPU's sum; against the CPU kernel to the GPU tests'
 * tolerance (max|gpu - cpu| / max|cpu| below 1e-4 in f32, 1e-12 in f64: cuda_test_util.h's
 * TOL_REDUCE); and bit for bit against a second run. The output starts as NaN, so an element
 * the kernels forget shows. On a GPU the cuda_ops suite runs the same kernels through the
 * CUDA backend (test_cuda_ops.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kernels.h"
#include "kn_test.h"
#include "runtime/cuda_embedding.h"

enum { UNIFORM, SAME, SKEWED, EDGES };

static double value(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return 2.0 * (double)(*s >> 11) / 9007199254740992.0 - 1.0;
}

/* EDGES: row r is named edge_counts[r] times: one less, exactly and one more than a chunk
 * or two, and long rows whose first position falls at different offsets within a tile. */
static const int64_t edge_counts[] = {10, 190, KN_EMBEDDING_CHUNK - 1, KN_EMBEDDING_CHUNK, KN_EMBEDDING_CHUNK + 1,
                                      2 * KN_EMBEDDING_CHUNK, 2 * KN_EMBEDDING_CHUNK + 1, 1, 200, 77, 333};
#define EDGE_ROWS ((int64_t)(sizeof edge_counts / sizeof edge_counts[0]))
static int64_t edge_total(void) {
    int64_t n = 0;
    for (int64_t r = 0; r < EDGE_ROWS; r++) n += edge_counts[r];
    return n;
}

/* n indices over [0, v) drawn from the distribution (EDGES: edge_total() of them over
 * EDGE_ROWS rows, shuffled), then `bad` of them (all when bad >= n) replaced by -1 or v
 * (outside the table). */
static void indices(int dist, int64_t *idx, int64_t n, int64_t v, int bad, uint64_t seed) {
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++) {
        double u = 0.5 * (value(&s) + 1.0); /* [0, 1) */
        if (dist == UNIFORM) idx[i] = (int64_t)(u * (double)v);
        else if (dist == SAME) idx[i] = v / 2;
        else if (dist == SKEWED) idx[i] = u < 0.5 ? 0 : u < 0.7 ? 1 : u < 0.8 ? 2 : (int64_t)(u * 1e6) % v; /* Zipf-like */
        else {
            int64_t k = i, r = 0;
            while (r < EDGE_ROWS - 1 && k >= edge_counts[r]) k -= edge_counts[r++];
            idx[i] = r % v;
        }
    }
    if (dist == EDGES) /* shuffle: a row's positions spread over the whole batch */
        for (int64_t i = n - 1; i > 0; i--) {
            int64_t j = (int64_t)(0.5 * (value(&s) + 1.0) * (double)(i + 1)), t = idx[i];
            idx[i] = idx[j];
            idx[j] = t;
        }
    for (int b = 0; b < bad && bad < n; b++) idx[(int64_t)(0.5 * (value(&s) + 1.0) * (double)n)] = b % 2 ? v : -1;
    for (int64_t i = 0; i < n && bad >= n; i++) idx[i] = i % 2 ? v : -1;
}

/* The order cuda_embedding.cu promises, written plainly: per row, its positions in
 * increasing order cut into chunks of L; each chunk summed from 0 in order; the chunks'
 * sums added in order. Indices outside [0, v) add nowhere. */
#define ORACLE(T, S)                                                                                   \
    static void oracle_##S(const T *dy, const int64_t *idx, int64_t n, int64_t v, int64_t d, T *dw) {   \
        for (int64_t r = 0; r < v; r++)                                                                \
            for (int64_t j = 0; j < d; j++) {                                                          \
                T total = 0, chunk = 0;                                                                \
                int64_t k = 0;                                                                         \
                for (int64_t i = 0; i < n; i++) {                                                      \
                    if (idx[i] != r) continue;                                                         \
                    chunk += dy[i * d + j];                                                            \
                    if (++k % KN_EMBEDDING_CHUNK == 0) {                                               \
                        total = k == KN_EMBEDDING_CHUNK ? chunk : total + chunk;                       \
                        chunk = 0;                                                                     \
                    }                                                                                  \
                }                                                                                      \
                if (k % KN_EMBEDDING_CHUNK) total = k < KN_EMBEDDING_CHUNK ? chunk : total + chunk;    \
                dw[r * d + j] = total;                                                                 \
            }                                                                                          \
    }
ORACLE(float, f32)
ORACLE(double, f64)

/* One case: the emulated kernels against the promised order, the CPU kernel and a rerun. */
static void emu_case(kn_dtype dt, int dist, int64_t n, int64_t v, int64_t d, bool i32, int bad, uint64_t seed) {
    const size_t es = kn_dtype_size(dt);
    const char *what[] = {"uniform", "all the same", "skewed", "chunk edges"};
    int64_t *idx = malloc((size_t)n * sizeof *idx);
    int32_t *idx32 = malloc((size_t)n * sizeof *idx32);
    char *dy = malloc((size_t)(n * d) * es + 8), *want = malloc((size_t)(v * d) * es + 8);
    char *got = malloc((size_t)(v * d) * es + 8), *again = malloc((size_t)(v * d) * es + 8);
    char *cpu = malloc((size_t)(v * d) * es + 8);
    indices(dist, idx, n, v, bad, seed);
    for (int64_t i = 0; i < n; i++) idx32[i] = (int32_t)idx[i];
    uint64_t s = seed + 99;
    for (int64_t i = 0; i < n * d; i++) kn_dtype_store(dt, dy, i, value(&s));
    const void *ix = i32 ? (const void *)idx32 : (const void *)idx;
    memset(got, 0xFF, (size_t)(v * d) * es); /* NaN: an element the kernels forget shows */
    memset(again, 0xFF, (size_t)(v * d) * es);
    KN_ASSERT_OK(kn_embedding_grad_emu(dt, dy, ix, i32, n, v, d, got));
    KN_ASSERT_OK(kn_embedding_grad_emu(dt, dy, ix, i32, n, v, d, again));
    cr_assert(!memcmp(got, again, (size_t)(v * d) * es), "%s, n %lld: two runs differ", what[dist], (long long)n);
    if (dt == KN_DT_F32) oracle_f32((const float *)dy, idx, n, v, d, (float *)want);
    else oracle_f64((const double *)dy, idx, n, v, d, (double *)want);
    for (int64_t e = 0; e < v * d; e++)
        cr_assert(!memcmp(got + e * es, want + e * es, es),
                  "%s %s, n %lld, v %lld, d %lld: dw[%lld][%lld] = %.9g, the promised order gives %.9g", what[dist],
                  kn_dtype_name(dt), (long long)n, (long long)v, (long long)d, (long long)(e / d), (long long)(e % d),
                  kn_dtype_load(dt, got, e), kn_dtype_load(dt, want, e));
    if (bad == 0) { /* the CPU kernel refuses indices outside the table */
        int64_t badpos = -1;
        bool ok = dt == KN_DT_F32 ? kn_k_embedding_grad_f32((const float *)dy, ix, i32 ? KN_DT_I32 : KN_DT_I64, n, v, d,
                                                            (float *)cpu, &badpos)
                                  : kn_k_embedding_grad_f64((const double *)dy, ix, i32 ? KN_DT_I32 : KN_DT_I64, n, v,
                                                            d, (double *)cpu, &badpos);
        cr_assert(ok);
        double maxref = 0, maxdiff = 0;
        int64_t *count = calloc((size_t)v, sizeof *count);
        for (int64_t i = 0; i < n; i++) count[idx[i]]++;
        for (int64_t e = 0; e < v * d; e++) {
            double g = kn_dtype_load(dt, got, e), w = kn_dtype_load(dt, cpu, e);
            if (count[e / d] <= KN_EMBEDDING_CHUNK) /* the CPU's sum, in the CPU's order */
                cr_assert(g == w, "%s: dw[%lld][%lld], a row named %lld times: %.9g, the CPU %.9g", what[dist],
                          (long long)(e / d), (long long)(e % d), (long long)count[e / d], g, w);
            if (fabs(w) > maxref) maxref = fabs(w);
            if (fabs(g - w) > maxdiff) maxdiff = fabs(g - w);
        }
        double tol = dt == KN_DT_F32 ? 1e-4 : 1e-12, rel = maxdiff / (maxref > 1e-30 ? maxref : 1e-30);
        cr_assert(rel < tol, "%s %s, n %lld: relative error %.3g against the CPU", what[dist], kn_dtype_name(dt),
                  (long long)n, rel);
        free(count);
    }
    free(idx);
    free(idx32);
    free(dy);
    free(want);
    free(got);
    free(again);
    free(cpu);
}

KN_TEST(embedding_emu, uniform_same_and_skewed_indices, .timeout = 240) {
    for (int dt = 0; dt < 2; dt++) {
        kn_dtype t = dt ? KN_DT_F64 : KN_DT_F32;
        emu_case(t, UNIFORM, 2000, 1500, 37, dt == 0, 0, 1);
        emu_case(t, SAME, 1000, 5, 130, dt == 1, 0, 2);   /* 16 chunks; two column groups */
        emu_case(t, SKEWED, 3001, 300, 20, dt == 0, 0, 3);
        emu_case(t, EDGES, edge_total(), EDGE_ROWS, 9, dt == 1, 0, 4);
    }
}

KN_TEST(embedding_emu, small_shapes_and_indices_outside_the_table, .timeout = 120) {
    emu_case(KN_DT_F32, SAME, 1, 1, 1, false, 0, 5);                              /* one position, one row */
    emu_case(KN_DT_F32, SAME, KN_EMBEDDING_CHUNK, 3, 3, true, 0, 6);              /* one full chunk */
    emu_case(KN_DT_F32, SAME, KN_EMBEDDING_CHUNK + 1, 3, 3, true, 0, 7);          /* and one more */
    emu_case(KN_DT_F64, UNIFORM, 129, 2, 200, false, 0, 8);                       /* d over a block's 128 */
    emu_case(KN_DT_F32, SKEWED, 700, 40, 5, false, 9, 9);                         /* -1 and v: add nowhere */
    emu_case(KN_DT_F32, SAME, 300, 4, 3, true, 300, 10);                          /* all outside: zeros */
    float x[4] = {1, 2, 3, 4}, w[6];
    int64_t one = 0;
    memset(w, 0xFF, sizeof w);
    KN_ASSERT_OK(kn_embedding_grad_emu(KN_DT_F32, x, &one, false, 0, 3, 2, w)); /* no positions: zeros */
    for (int i = 0; i < 6; i++) cr_assert(w[i] == 0.0f);
    cr_assert(kn_embedding_grad_emu(KN_DT_I32, x, &one, false, 1, 3, 2, w) == KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "f32 or f64"), "%s", kn_last_error());
    cr_assert(kn_embedding_grad_emu(KN_DT_F32, x, &one, false, 1, 3, 65535LL * 128 + 1, w) == KN_ERR_UNSUPPORTED);
    cr_assert(strstr(kn_last_error(), "columns"), "%s", kn_last_error());
}
