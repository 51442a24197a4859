/* gemm_i8.c — the CPU int8 products: kn_gemm_i8 (int8 x int8 -> int32 -> f32, the
 * matmul_w8a8 kernel) as a packed, cache-blocked microkernel with runtime ISA dispatch, and
 * kn_gemm_w8 (f32 activations x int8 weight codes, f32 sums).
 *
 * kiln is built for the baseline x86-64 ISA (SSE2, no -march), so a plain C loop cannot use
 * the integer dot-product instructions that make int8 worth it. The int8 product therefore
 * has four microkernels, each compiled for its own ISA with a target attribute and chosen at
 * run time (__builtin_cpu_supports), every one computing the same exact int32 sums (so every
 * path gives bitwise the same floats; tests/core/test_quantize.c checks each one this CPU
 * can run against a scalar reference):
 *
 *   avx512vnni  vpdpbusd on 512-bit vectors: 64 u8 x s8 products per instruction, summed
 *               in fours into 16 int32 lanes. Its first operand is unsigned, so the
 *               activation codes go in shifted, a + 128 (a byte xor 0x80), and the sum
 *               carries 128 * sum_k b[j][k] too: each column's 128 * (its codes' sum) is
 *               computed when the weight is packed and subtracted at the end. The int32
 *               lanes may wrap on the way (|a + 128| <= 255); the difference is the exact
 *               sum mod 2^32, which is the sum itself since that fits (quant.h).
 *   avxvnni     the same instruction on 256-bit vectors (VEX encoding; CPUs with AVX-VNNI
 *               but no AVX-512).
 *   avx2        vpmaddubsw + vpmaddwd, with the signs moved onto the weight: |a| (u8) times
 *               b * sign(a) (s8), pairs summed in int16 (at most 2 * 127 * 127 = 32,258:
 *               never saturates, since codes are in [-127, 127]), then in int32.
 *   generic     plain C on the same packed layout (any CPU, any compiler), vectorized by the
 *               compiler at the baseline ISA: the correct fallback, not a fast one (about
 *               0.3x kiln's f32 GEMM here, where the others are 2-10x).
 *
 * Layout. The weight's codes b [n][k] are packed into panels of NR = 32 columns; within a
 * panel, for each group of four k (k padded with zeros to a multiple of 4) the 32 columns'
 * four bytes are adjacent: 128 bytes, two 512-bit loads. The activations a [m][k] are
 * packed likewise into blocks of MR = 8 rows: for each group of four k, the 8 rows' four
 * bytes (32 bytes; the vector kernels broadcast each row's four to every lane). One
 * microkernel call makes an 8 x 32 tile of int32 sums over all of k, and the epilogue
 * (kn_i8_dequant, quant.h) turns the tile into f32 with the two scales.
 *
 * Blocking. Packed a is walked in chunks of about 192 KiB (a share of L2); for each chunk,
 * panel by panel (a panel, 32 k bytes, stays in L1 while the chunk's row blocks pass),
 * block by block. Threads (kn_k_parallel) take ranges of row blocks, or of panels when
 * there are fewer than 8 row blocks (a decode step's few rows). Packing costs O((m + n) k)
 * against the product's O(m n k); kn_i8_weight_pack packs a weight once for many products.
 *
 * kn_gemm_w8 keeps f32 sums: the weight's codes widened to f32, eight lanes of partial sums
 * (a loop the compiler vectorizes at the baseline ISA), and where the CPU has AVX2 (and
 * kn_gemm_i8's path is not forced to generic) the same lanes on 256-bit vectors for four
 * columns at once: bitwise the same floats, about twice as fast. */
#include <stdlib.h>
#include <string.h>

#include "ir/ir_impl.h"
#include "kiln/kernels.h"
#include "kiln/quant.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define KN_I8_X86 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define KN_I8_X86 0
#endif

#define MR 8  /* rows of a microkernel tile */
#define NR 32 /* columns of a panel (and of a tile) */

enum { P_GENERIC, P_AVX2, P_AVXVNNI, P_AVX512VNNI, P_N };
static const char *const path_names[P_N] = {"generic", "avx2", "avxvnni", "avx512vnni"};
static int path_forced = -1; /* kn_gemm_i8_set_path; -1: the best this CPU has */

static bool path_ok(int p) {
    if (p == P_GENERIC) return true;
#if KN_I8_X86
    __builtin_cpu_init();
    switch (p) {
    case P_AVX2: return __builtin_cpu_supports("avx2");
    case P_AVXVNNI: { /* CPUID.(7,1):EAX bit 4 (not every compiler's __builtin_cpu_supports knows it) */
        unsigned ax = 0, bx = 0, cx = 0, dx = 0;
        return __builtin_cpu_supports("avx2") && __get_cpuid_count(7, 1, &ax, &bx, &cx, &dx) && (ax >> 4 & 1);
    }
    case P_AVX512VNNI:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vnni");
    default: return false;
    }
#else
    return false;
#endif
}

static int path_now(void) {
    if (path_forced >= 0) return path_forced;
    static int best = -1;
    if (best < 0) {
        int b = P_GENERIC;
        for (int p = P_N - 1; p > P_GENERIC; p--)
            if (path_ok(p)) { b = p; break; }
        best = b;
    }
    return best;
}

const char *kn_gemm_i8_path(void) { return path_names[path_now()]; }

kn_status kn_gemm_i8_set_path(const char *name) {
    if (!name || !strcmp(name, "auto")) { path_forced = -1; return KN_OK; }
    for (int p = 0; p < P_N; p++)
        if (!strcmp(name, path_names[p])) {
            if (!path_ok(p)) return kn_error(KN_ERR_UNSUPPORTED, "kn_gemm_i8_set_path: this CPU cannot run the %s path", name);
            path_forced = p;
            return KN_OK;
        }
    return kn_error(KN_ERR_ARG, "kn_gemm_i8_set_path: no path '%s' (auto, generic, avx2, avxvnni, avx512vnni)", name);
}

int kn_gemm_i8_paths(const char **names, int cap) {
    int c = 0;
    for (int p = 0; p < P_N; p++)
        if (path_ok(p)) {
            if (names && c < cap) names[c] = path_names[p];
            c++;
        }
    return c;
}

/* ---------------------------------------------------------------- packing */

/* The weight: panel p's bytes at panels + p * kg * 128, [kg][NR][4]; comp[j] = 128 * the sum
 * of column j's codes, in uint32 arithmetic (wraps like the vector lanes; 0 for padding). */
kn_status kn_i8_weight_pack(const int8_t *b, int64_t n, int64_t k, kn_i8_weight *w) {
    if (!w) return kn_error(KN_ERR_ARG, "kn_i8_weight_pack: w is NULL");
    memset(w, 0, sizeof *w);
    if (n < 0 || k < 0 || (!b && n * k > 0))
        return kn_error(KN_ERR_ARG, "kn_i8_weight_pack: bad operand (n %lld, k %lld, b %p)", (long long)n, (long long)k,
                        (const void *)b);
    const int64_t kg = (k + 3) / 4, np = (n + NR - 1) / NR;
    w->panels = kn_malloc((size_t)(np * kg * NR * 4) + 1);
    w->comp = kn_malloc((size_t)(np * NR + 1) * sizeof *w->comp);
    if (!w->panels || !w->comp) {
        kn_i8_weight_free(w);
        return kn_error(KN_ERR_OOM, "kn_i8_weight_pack: out of memory for a %lld x %lld weight", (long long)n, (long long)k);
    }
    w->n = n, w->k = k, w->kg = kg, w->np = np;
    const int64_t kf = k / 4; /* whole groups; the last, partial one is zero-padded */
    for (int64_t p = 0; p < np; p++) {
        int8_t *dst = w->panels + p * kg * NR * 4;
        for (int c = 0; c < NR; c++) {
            const int64_t j = p * NR + c;
            uint32_t sum = 0;
            if (j < n) { /* row j's codes, four at a time, each group to its slot */
                const int8_t *src = b + j * k;
                for (int64_t g = 0; g < kf; g++) memcpy(dst + g * NR * 4 + c * 4, src + g * 4, 4);
                if (kf < kg) {
                    int8_t last[4] = {0, 0, 0, 0};
                    memcpy(last, src + kf * 4, (size_t)(k - kf * 4));
                    memcpy(dst + kf * NR * 4 + c * 4, last, 4);
                }
                for (int64_t t = 0; t < k; t++) sum += (uint32_t)(int32_t)src[t];
            } else {
                for (int64_t g = 0; g < kg; g++) memset(dst + g * NR * 4 + c * 4, 0, 4);
            }
            w->comp[j] = (int32_t)(sum * 128u);
        }
    }
    return KN_OK;
}

void kn_i8_weight_free(kn_i8_weight *w) {
    if (!w) return;
    kn_free(w->panels);
    kn_free(w->comp);
    memset(w, 0, sizeof *w);
}

/* Rows [8 blk, 8 blk + 8) of a into dst [kg][MR][4], each byte xor flip (0x80: a + 128 as
 * u8, for vpdpbusd); rows past m and k past k are 0. */
static void pack_a_block(const int8_t *a, int64_t m, int64_t k, int64_t kg, int64_t blk, uint8_t flip, uint8_t *dst) {
    for (int r = 0; r < MR; r++) {
        const int64_t i = blk * MR + r;
        for (int64_t t = 0; t < kg * 4; t++)
            dst[(t / 4) * MR * 4 + r * 4 + t % 4] = (i < m && t < k) ? (uint8_t)((uint8_t)a[i * k + t] ^ flip) : 0;
    }
}

/* ---------------------------------------------------------------- microkernels */

/* acc [MR][NR] = the tile's int32 sums over kg groups of four k: ap [kg][MR][4], bp
 * [kg][NR][4]; comp: the panel's 128 * column sums (the vpdpbusd kernels subtract it). */
typedef void ukr_fn(const uint8_t *ap, const int8_t *bp, int64_t kg, const int32_t *comp, int32_t *acc);

/* Plain C: per group of four k, the panel's 32 x 4 codes are spread into four int16 rows of
 * 32 (one per k), so the inner loop is a contiguous multiply-add of 32 lanes with constant
 * trip counts, which compilers vectorize at the baseline ISA (SSE2's pmullw / pmaddwd). */
static void ukr_generic(const uint8_t *ap, const int8_t *bp, int64_t kg, const int32_t *comp, int32_t *acc) {
    (void)comp;
    int32_t s[MR][NR];
    int16_t bu[4][NR];
    memset(s, 0, sizeof s);
    for (int64_t t = 0; t < kg; t++) {
        const int8_t *a = (const int8_t *)ap + t * MR * 4, *b = bp + t * NR * 4;
        for (int u = 0; u < 4; u++)
            for (int c = 0; c < NR; c++) bu[u][c] = b[c * 4 + u];
        for (int r = 0; r < MR; r++) {
            const int16_t a0 = a[r * 4], a1 = a[r * 4 + 1], a2 = a[r * 4 + 2], a3 = a[r * 4 + 3];
            for (int c = 0; c < NR; c++)
                s[r][c] += (int32_t)(a0 * bu[0][c]) + (int32_t)(a1 * bu[1][c]) + (int32_t)(a2 * bu[2][c]) +
                           (int32_t)(a3 * bu[3][c]);
        }
    }
    memcpy(acc, s, sizeof s);
}

#if KN_I8_X86
static inline int32_t load4(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* The 8 x 32 tile in 16 zmm accumulators: per group of four k, two loads of the panel (the
 * 32 columns' four codes), then per row one broadcast of its four shifted codes and two
 * vpdpbusd; at the end the columns' 128 * code sums come off. */
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static void
ukr_avx512vnni(const uint8_t *ap, const int8_t *bp, int64_t kg, const int32_t *comp, int32_t *acc) {
    __m512i c0[MR], c1[MR];
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) c0[r] = _mm512_setzero_si512(), c1[r] = _mm512_setzero_si512();
    for (int64_t t = 0; t < kg; t++) {
        const __m512i b0 = _mm512_loadu_si512((const void *)(bp + t * NR * 4));
        const __m512i b1 = _mm512_loadu_si512((const void *)(bp + t * NR * 4 + 64));
        const uint8_t *a = ap + t * MR * 4;
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++) {
            const __m512i av = _mm512_set1_epi32(load4(a + r * 4));
            c0[r] = _mm512_dpbusd_epi32(c0[r], av, b0);
            c1[r] = _mm512_dpbusd_epi32(c1[r], av, b1);
        }
    }
    const __m512i k0 = _mm512_loadu_si512((const void *)comp), k1 = _mm512_loadu_si512((const void *)(comp + 16));
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) {
        _mm512_storeu_si512((void *)(acc + r * NR), _mm512_sub_epi32(c0[r], k0));
        _mm512_storeu_si512((void *)(acc + r * NR + 16), _mm512_sub_epi32(c1[r], k1));
    }
}

/* The 256-bit kernels make the tile in four 4 x 16 quarters (8 accumulators of the 16 ymm
 * registers), each over all of kg: the quarter's operands are in L1. */
__attribute__((target("avx2,avxvnni"))) static void ukr_avxvnni(const uint8_t *ap, const int8_t *bp, int64_t kg,
                                                                 const int32_t *comp, int32_t *acc) {
    for (int rh = 0; rh < MR; rh += 4)
        for (int ch = 0; ch < NR; ch += 16) {
            __m256i c0[4], c1[4];
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) c0[r] = _mm256_setzero_si256(), c1[r] = _mm256_setzero_si256();
            for (int64_t t = 0; t < kg; t++) {
                const __m256i b0 = _mm256_loadu_si256((const __m256i *)(bp + t * NR * 4 + ch * 4));
                const __m256i b1 = _mm256_loadu_si256((const __m256i *)(bp + t * NR * 4 + ch * 4 + 32));
                const uint8_t *a = ap + t * MR * 4 + rh * 4;
#pragma GCC unroll 4
                for (int r = 0; r < 4; r++) {
                    const __m256i av = _mm256_set1_epi32(load4(a + r * 4));
                    c0[r] = _mm256_dpbusd_avx_epi32(c0[r], av, b0);
                    c1[r] = _mm256_dpbusd_avx_epi32(c1[r], av, b1);
                }
            }
            const __m256i k0 = _mm256_loadu_si256((const __m256i *)(comp + ch));
            const __m256i k1 = _mm256_loadu_si256((const __m256i *)(comp + ch + 8));
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                _mm256_storeu_si256((__m256i *)(acc + (rh + r) * NR + ch), _mm256_sub_epi32(c0[r], k0));
                _mm256_storeu_si256((__m256i *)(acc + (rh + r) * NR + ch + 8), _mm256_sub_epi32(c1[r], k1));
            }
        }
}

__attribute__((target("avx2"))) static void ukr_avx2(const uint8_t *ap, const int8_t *bp, int64_t kg,
                                                     const int32_t *comp, int32_t *acc) {
    (void)comp;
    const __m256i ones = _mm256_set1_epi16(1);
    for (int rh = 0; rh < MR; rh += 4)
        for (int ch = 0; ch < NR; ch += 16) {
            __m256i c0[4], c1[4];
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) c0[r] = _mm256_setzero_si256(), c1[r] = _mm256_setzero_si256();
            for (int64_t t = 0; t < kg; t++) {
                const __m256i b0 = _mm256_loadu_si256((const __m256i *)(bp + t * NR * 4 + ch * 4));
                const __m256i b1 = _mm256_loadu_si256((const __m256i *)(bp + t * NR * 4 + ch * 4 + 32));
                const uint8_t *a = ap + t * MR * 4 + rh * 4;
#pragma GCC unroll 4
                for (int r = 0; r < 4; r++) {
                    const __m256i av = _mm256_set1_epi32(load4(a + r * 4)), aa = _mm256_abs_epi8(av);
                    const __m256i p0 = _mm256_maddubs_epi16(aa, _mm256_sign_epi8(b0, av));
                    const __m256i p1 = _mm256_maddubs_epi16(aa, _mm256_sign_epi8(b1, av));
                    c0[r] = _mm256_add_epi32(c0[r], _mm256_madd_epi16(p0, ones));
                    c1[r] = _mm256_add_epi32(c1[r], _mm256_madd_epi16(p1, ones));
                }
            }
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                _mm256_storeu_si256((__m256i *)(acc + (rh + r) * NR + ch), c0[r]);
                _mm256_storeu_si256((__m256i *)(acc + (rh + r) * NR + ch + 8), c1[r]);
            }
        }
}
#endif

static ukr_fn *path_kernel(int p) {
#if KN_I8_X86
    if (p == P_AVX512VNNI) return ukr_avx512vnni;
    if (p == P_AVXVNNI) return ukr_avxvnni;
    if (p == P_AVX2) return ukr_avx2;
#endif
    (void)p;
    return ukr_generic;
}

/* ---------------------------------------------------------------- the driver */

typedef struct gemm_i8_job {
    const uint8_t *ap; /* packed a: nblk blocks of kg * MR * 4 bytes */
    const kn_i8_weight *w;
    const float *sa, *sb;
    float *c;
    int64_t m, nblk, chunk; /* chunk: row blocks per L2 chunk */
    bool by_panel;          /* thread ranges are panels (else row blocks) */
    ukr_fn *ukr;
} gemm_i8_job;

static void gemm_i8_tiles(const gemm_i8_job *g, int64_t b0, int64_t b1, int64_t p0, int64_t p1) {
    const kn_i8_weight *w = g->w;
    const int64_t kg = w->kg, n = w->n;
    int32_t acc[MR * NR];
    for (int64_t cb = b0; cb < b1; cb += g->chunk) {
        const int64_t ce = cb + g->chunk < b1 ? cb + g->chunk : b1;
        for (int64_t p = p0; p < p1; p++) {
            const int64_t j = p * NR, cols = n - j < NR ? n - j : NR;
            for (int64_t blk = cb; blk < ce; blk++) {
                const int64_t i = blk * MR, rows = g->m - i < MR ? g->m - i : MR;
                g->ukr(g->ap + blk * kg * MR * 4, w->panels + p * kg * NR * 4, kg, w->comp + j, acc);
                kn_i8_dequant(acc, rows, cols, NR, g->sa ? g->sa + i : NULL, g->sb + j, g->c + i * n + j, n);
            }
        }
    }
}

static void gemm_i8_range(void *vctx, int64_t lo, int64_t hi) {
    const gemm_i8_job *g = vctx;
    if (g->by_panel) gemm_i8_tiles(g, 0, g->nblk, lo, hi);
    else gemm_i8_tiles(g, lo, hi, 0, g->w->np);
}

static bool worth_threads(int64_t m, int64_t n, int64_t k) { return 2.0 * (double)m * (double)n * (double)k >= 4e6; }

kn_status kn_gemm_i8_packed(const int8_t *a, const kn_i8_weight *w, const float *sa, const float *sb, float *c,
                            int64_t m) {
    if (!w || m < 0 || (m > 0 && (!a || !c)) || (w->n > 0 && !sb))
        return kn_error(KN_ERR_ARG, "kn_gemm_i8_packed: NULL operand or negative m (%lld)", (long long)m);
    const int64_t n = w->n, k = w->k, kg = w->kg;
    if (m == 0 || n == 0) return KN_OK;
    const int path = path_now();
    const int64_t nblk = (m + MR - 1) / MR;
    uint8_t *ap = kn_malloc((size_t)(nblk * kg * MR * 4) + 1);
    if (!ap) return kn_error(KN_ERR_OOM, "kn_gemm_i8: out of memory for %lld packed rows of %lld", (long long)m, (long long)k);
    const uint8_t flip = (path == P_AVX512VNNI || path == P_AVXVNNI) ? 0x80 : 0;
    for (int64_t blk = 0; blk < nblk; blk++) pack_a_block(a, m, k, kg, blk, flip, ap + blk * kg * MR * 4);
    int64_t chunk = (192 << 10) / (kg * MR * 4 + 1);
    gemm_i8_job g = {.ap = ap, .w = w, .sa = sa, .sb = sb, .c = c, .m = m, .nblk = nblk,
                     .chunk = chunk < 1 ? 1 : chunk, .by_panel = nblk < 8, .ukr = path_kernel(path)};
    kn_k_parallel(g.by_panel ? w->np : nblk, worth_threads(m, n, k), gemm_i8_range, &g);
    kn_free(ap);
    return KN_OK;
}

kn_status kn_gemm_i8(const int8_t *a, const int8_t *b, const float *sa, const float *sb, float *c, int64_t m, int64_t n,
                     int64_t k) {
    kn_i8_weight w;
    KN_TRY(kn_i8_weight_pack(b, n, k, &w));
    kn_status st = kn_gemm_i8_packed(a, &w, sa, sb, c, m);
    kn_i8_weight_free(&w);
    return st;
}

/* ---------------------------------------------------------------- the weight-only product */

typedef struct gemm_w8_job {
    const float *x, *sb;
    const int8_t *b;
    float *c;
    int64_t n, k;
} gemm_w8_job;

/* The chunk the inner loop runs over: a constant trip count, so that the compiler vectorizes
 * it at -O2, and the tail after the last whole chunk runs scalar. */
#define QCHUNK 32

/* x . b in f32 with the codes widened in the loop: eight lanes of partial sums (each lane
 * its own sequence, so the lanes vectorize without reordering any one sum), then added. */
static float dot_w8(const float *x, const int8_t *b, int64_t k) {
    float lane[8] = {0};
    int64_t t = 0;
    for (; t + QCHUNK <= k; t += QCHUNK)
        for (int u = 0; u < QCHUNK; u += 8)
            for (int l = 0; l < 8; l++) lane[l] += x[t + u + l] * (float)b[t + u + l];
    float s = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
    for (; t < k; t++) s += x[t] * (float)b[t];
    return s;
}

#if KN_I8_X86
/* dot_w8 of x with four weight rows at once on 256-bit vectors: each of the eight lanes of a
 * column's sum is dot_w8's lane (the same elements, multiplied then added, in the same
 * order; no fused multiply-add), reduced in dot_w8's order, so the floats are dot_w8's bit
 * for bit; x is loaded once for the four columns. */
__attribute__((target("avx2"))) static void dot4_w8_avx2(const float *x, const int8_t *const *b, int64_t k,
                                                         float *out) {
    __m256 l[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t t = 0;
    for (; t + QCHUNK <= k; t += QCHUNK)
        for (int u = 0; u < QCHUNK; u += 8) {
            const __m256 xv = _mm256_loadu_ps(x + t + u);
#pragma GCC unroll 4
            for (int q = 0; q < 4; q++) {
                const __m128i b8 = _mm_loadl_epi64((const __m128i *)(b[q] + t + u));
                l[q] = _mm256_add_ps(l[q], _mm256_mul_ps(xv, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b8))));
            }
        }
    for (int q = 0; q < 4; q++) {
        float lane[8];
        _mm256_storeu_ps(lane, l[q]);
        float sum = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
        for (int64_t r = t; r < k; r++) sum += x[r] * (float)b[q][r];
        out[q] = sum;
    }
}
#endif

/* Rows [lo, hi) of the weight-only product: columns in blocks of four outside, rows inside,
 * so the block's four weight rows stay in L1 while every activation row passes by. With a
 * kn_gemm_i8 path of AVX2 or better, four columns at once (dot4_w8_avx2: the same bits). */
static void gemm_w8_rows(void *vctx, int64_t lo, int64_t hi) {
    const gemm_w8_job *g = vctx;
    const int64_t n = g->n, k = g->k;
#if KN_I8_X86
    const bool wide = path_now() != P_GENERIC;
#endif
    for (int64_t j = 0; j < n; j += 4) {
        const int64_t nj = n - j < 4 ? n - j : 4;
#if KN_I8_X86
        if (wide && nj == 4) {
            const int8_t *b[4] = {g->b + j * k, g->b + (j + 1) * k, g->b + (j + 2) * k, g->b + (j + 3) * k};
            for (int64_t i = lo; i < hi; i++) {
                float d[4];
                dot4_w8_avx2(g->x + i * k, b, k, d);
                for (int q = 0; q < 4; q++) g->c[i * n + j + q] = d[q] * g->sb[j + q];
            }
            continue;
        }
#endif
        for (int64_t i = lo; i < hi; i++)
            for (int q = 0; q < nj; q++) g->c[i * n + j + q] = dot_w8(g->x + i * k, g->b + (j + q) * k, k) * g->sb[j + q];
    }
}

void kn_gemm_w8(const float *x, const int8_t *b, const float *sb, float *c, int64_t m, int64_t n, int64_t k) {
    gemm_w8_job g = {.x = x, .b = b, .sb = sb, .c = c, .n = n, .k = k};
    kn_k_parallel(m, worth_threads(m, n, k), gemm_w8_rows, &g);
}
