/* test_flash_tc.c — the tensor-core flash attention (core/runtime/cuda_flash_tc.cu) and the
 * emulator's mma.sync under it (core/runtime/cuda_emu.c, core/runtime/cuda_mma.h).
 *
 * cuda_mma: one kernel per shape, two warps with different matrices, each lane loading its
 * A and B fragments from row-major matrices by the PTX ISA's formulas (written out here a
 * second time, independently of the emulator's table), one KN_MMA_*, each lane storing its
 * D fragment; D must equal C + A B computed in double on the rounded inputs (tf32:
 * cvt.rna, ties away from zero; bf16 exact) within one f32 rounding, and must differ from
 * the product of the unrounded inputs (so an emulator that forgot to round fails).
 *
 * flash_tc_emu: the kernels under the emulator against the CPU kernels
 * (core/tensor/kernels_flash.inc) on the same (rounded) operands, at T = 1, 17, 64, 100
 * (not multiples of the 64-row tiles) and 300 (three of the forward's 128-row blocks, the
 * last partial: a warp's two m16 tiles in full, diagonal and empty key tiles; run with
 * KILN_FLASH_TC_ROWS=64 for the 64-row forward), D 64 and the other instance (tf32 32, bf16 128),
 * dy with and without L's column, and rows whose L is -inf (a fully masked row: the
 * backward must leave it out); bf16 D 64's forward variants (v1, v2, v2-64) at T = 1, 127,
 * 128, 129 and 1000, also on operands that put each row's weight on its last keys. The
 * forward's O and L are judged apart (L, log T and more, would set the scale O is judged
 * at). Tolerance: max|got - want| / max(0.1, max|want|) below
 * 8e-3 for tf32 and 2e-2 for bf16. Why: each product operand is rounded, relatively by
 * at most u = 2^-11 (4.9e-4) in tf32 and u = 2^-9 (2.0e-3) in bf16: q, k, v, dO as
 * staged and P, dS as converted for the second product of each step (the reference gets
 * the same rounded q, k, v, dO, so only P and dS count: a few u relative to each result's
 * scale, since the sums carry errors of random sign). bf16 also rounds every result, L
 * included, and the backward recomputes P from that L: |L| u, about 1e-2 at the largest
 * |L| here if it added up, an upper bound. Measured worst over these cases: tf32 1.0e-3,
 * bf16 4.7e-3 (cr_log_info prints them): the bounds leave a factor 4, and a kernel that
 * drops a tile or misplaces one fragment is off by O(1) (0.14 to 1 when tried). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test_util.h"
#include "kiln/kernels.h"
#include "runtime/cuda_flash_tc.h"
#include "runtime/cuda_mma.h"

/* ---------------------------------------------------------------- the mma alone */
struct mma_args {
    const float *a, *b, *c; /* per warp: A [16, K], B [K, 8], C [16, 8], row-major */
    float *d;
    int bf16;
};

KN_KERNEL_DEF(mma_kernel, struct mma_args) {
    int lane = (int)threadIdx.x % 32, w = (int)threadIdx.x / 32, g = lane / 4, t = lane % 4, kk = a.bf16 ? 16 : 8;
    const float *A = a.a + w * 16 * kk, *B = a.b + w * kk * 8, *C = a.c + w * 128;
    unsigned ra[4], rb[2];
    float c[4], d[4];
    if (a.bf16) { /* row g (+8 for odd registers), columns 2t, 2t+1 (+8 for a2, a3) */
        for (int i = 0; i < 4; i++) {
            int row = g + 8 * (i % 2), col = 2 * t + 8 * (i / 2);
            ra[i] = kn_bf16x2(A[row * kk + col], A[row * kk + col + 1]);
        }
        for (int i = 0; i < 2; i++) rb[i] = kn_bf16x2(B[(2 * t + 8 * i) * 8 + g], B[(2 * t + 8 * i + 1) * 8 + g]);
    } else { /* a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4); b0 (t, g), b1 (t+4, g) */
        for (int i = 0; i < 4; i++) ra[i] = kn_tf32_bits(A[(g + 8 * (i % 2)) * kk + t + 4 * (i / 2)]);
        for (int i = 0; i < 2; i++) rb[i] = kn_tf32_bits(B[(t + 4 * i) * 8 + g]);
    }
    for (int i = 0; i < 4; i++) c[i] = C[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2];
    if (a.bf16) KN_MMA_BF16_16x8x16(d, ra, rb, c);
    else KN_MMA_TF32_16x8x8(d, ra, rb, c);
    for (int i = 0; i < 4; i++) a.d[w * 128 + (g + 8 * (i / 2)) * 8 + 2 * t + i % 2] = d[i];
}

/* cvt.rna.tf32.f32 and bf16's round-to-nearest-even, written out for the reference. */
static double tf32(float x) {
    double m = fabs(x);
    int e;
    frexp(m, &e);
    double ulp = ldexp(1.0, e - 11); /* 10 stored mantissa bits: ulp 2^(e - 1 - 10) */
    double r = floor(m / ulp + 0.5) * ulp;  /* ties away from zero */
    return x < 0 ? -r : r;
}
static double bf16(float x) { return kn_bf16_f32(kn_bf16_bits(x)); }

static void mma_case(int bf16_op) {
    const int kk = bf16_op ? 16 : 8;
    float A[2 * 16 * 16], B[2 * 16 * 8], C[2 * 128], D[2 * 128];
    uint64_t s = 12345 + (uint64_t)bf16_op;
    for (int i = 0; i < 2 * 16 * 16; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        float v = (float)((double)(s >> 11) / 9007199254740992.0 * 2 - 1);
        A[i] = v;
        B[i % (2 * 16 * 8)] = i < 2 * 16 * 8 ? v * 3 : B[i % (2 * 16 * 8)];
        if (i < 256) C[i] = v / 4;
    }
    A[0] = 1.0f + 0x1p-11f; /* a tie: rna gives 1 + 2^-10, round-to-even 1 */
    B[0] = 1.0f;
    struct mma_args a = {A, B, C, D, bf16_op};
    kn_dim3 grid = {1, 1, 1}, block = {64, 1, 1};
    cr_assert(KN_LAUNCH(mma_kernel, grid, block, a) == 0);
    double worst = 0, unrounded = 0;
    for (int w = 0; w < 2; w++)
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 8; j++) {
                double want = C[w * 128 + i * 8 + j], raw = want;
                for (int k = 0; k < kk; k++) {
                    float x = A[w * 16 * kk + i * kk + k], y = B[w * kk * 8 + k * 8 + j];
                    want += bf16_op ? bf16(x) * bf16(y) : tf32(x) * tf32(y);
                    raw += (double)x * y;
                }
                double got = D[w * 128 + i * 8 + j], e = fabs(got - want) / (fabs(want) + 1e-30);
                if (e > worst) worst = e;
                if (fabs(got - raw) > unrounded) unrounded = fabs(got - raw);
            }
    cr_assert(worst <= 0x1p-23, "%s: D off C + A B by %.3g (relative)", bf16_op ? "bf16" : "tf32", worst);
    cr_assert(unrounded > 1e-6, "%s: D equals the product of unrounded inputs", bf16_op ? "bf16" : "tf32");
}

KN_TEST(cuda_mma, tf32_16x8x8_is_a_matrix_product_of_rounded_inputs) { mma_case(0); }
KN_TEST(cuda_mma, bf16_16x8x16_is_a_matrix_product_of_rounded_inputs) { mma_case(1); }

KN_TEST(cuda_mma, tf32_rounding_ties_away_from_zero) {
    cr_assert(kn_bits_f32(kn_tf32_bits(1.0f + 0x1p-11f)) == 1.0f + 0x1p-10f);
    cr_assert(kn_bits_f32(kn_tf32_bits(-(1.0f + 0x1p-11f))) == -(1.0f + 0x1p-10f));
    cr_assert(kn_bits_f32(kn_tf32_bits(1.0f + 0x1p-12f)) == 1.0f);
    cr_assert(isinf(kn_bits_f32(kn_tf32_bits(INFINITY))));
    cr_assert(kn_bf16_f32(kn_bf16_bits(1.0f + 0x1p-8f)) == 1.0f, "bf16: a tie goes to even");
    cr_assert(kn_bf16_f32(kn_bf16_bits(1.0f + 0x1p-7f + 0x1p-8f)) == 1.0f + 0x1p-6f);
}

/* ldmatrix: a 16 x 24 bf16 tile (pitch 24), x4 with the rows an A fragment takes, x2 with
 * an n-major B's, x2.trans with a k-major B's; each lane's registers against the fragment
 * layouts written out (the mma test's formulas). */
struct ldm_args { unsigned *got; };
KN_KERNEL_DEF(ldm_kernel, struct ldm_args) {
    __shared__ unsigned short m[16 * 24];
    int l = (int)threadIdx.x;
    for (int i = l; i < 16 * 24; i += 32) m[i] = (unsigned short)(i * 7 + 1);
    __syncthreads();
    unsigned *r = a.got + l * 8;
    kn_ldmatrix_x4(r, m + l % 16 * 24 + l / 16 * 8);
    kn_ldmatrix_x2(r + 4, m + l % 8 * 24 + (l >> 3 & 1) * 8);
    kn_ldmatrix_x2_trans(r + 6, m + l % 16 * 24);
}

KN_TEST(cuda_mma, ldmatrix_loads_the_bf16_fragments) {
    unsigned got[32 * 8];
    struct ldm_args a = {got};
    kn_dim3 grid = {1, 1, 1}, block = {32, 1, 1};
    cr_assert(KN_LAUNCH(ldm_kernel, grid, block, a) == 0);
#define M(r, c) ((unsigned)(((r) * 24 + (c)) * 7 + 1) & 0xffffu)
    for (int l = 0; l < 32; l++) {
        int g = l / 4, t = l % 4;
        for (int i = 0; i < 4; i++) { /* A: row g (+8 for odd i), columns 2t.. (+8 for i >= 2) */
            int row = g + 8 * (i % 2), col = 2 * t + 8 * (i / 2);
            cr_assert_eq(got[l * 8 + i], M(row, col) | M(row, col + 1) << 16, "x4: lane %d register %d", l, i);
        }
        for (int i = 0; i < 2; i++) { /* n-major B: B[k][n] = m[n][k], k = 2t + 8i, n = g */
            cr_assert_eq(got[l * 8 + 4 + i], M(g, 2 * t + 8 * i) | M(g, 2 * t + 8 * i + 1) << 16, "x2: lane %d", l);
            cr_assert_eq(got[l * 8 + 6 + i], M(2 * t + 8 * i, g) | M(2 * t + 8 * i + 1, g) << 16, "x2.trans: lane %d", l);
        }
    }
#undef M
}

/* ---------------------------------------------------------------- the kernels */
/* max|got - want| / max(0.1, max|want|) over columns [c0, c0 + nc) of rows rows of ld. */
static double rel_cols(const float *got, const float *want, int64_t rows, int64_t ld, int64_t c0, int64_t nc) {
    double e = 0, m = 0.1;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = r * ld + c0; i < r * ld + c0 + nc; i++) {
            double g = got[i], w = want[i];
            if (isinf(w) && g == w) continue;
            if (!(fabs(g - w) <= e)) e = isnan(g) || isinf(g) ? INFINITY : fabs(g - w);
            if (fabs(w) > m) m = fabs(w);
        }
    return e / m;
}
static double rel(const float *got, const float *want, int64_t n) { return rel_cols(got, want, 1, n, 0, n); }

/* x (f32) as the kernel's operand type: tf32 keeps f32 (the kernel rounds), bf16 rounds
 * x in place and writes its bits to h. */
static void *operand(int kind, float *x, int64_t n) {
    if (kind == KN_FLASH_TC_TF32) return x;
    unsigned short *h = malloc((size_t)n * sizeof *h);
    for (int64_t i = 0; i < n; i++) {
        h[i] = kn_bf16_bits(x[i]);
        x[i] = kn_bf16_f32(h[i]);
    }
    return h;
}
static void widen(int kind, const void *p, float *x, int64_t n) {
    if (kind == KN_FLASH_TC_TF32) memcpy(x, p, (size_t)n * sizeof *x);
    else
        for (int64_t i = 0; i < n; i++) x[i] = kn_bf16_f32(((const unsigned short *)p)[i]);
}

static double worst_seen[2];

/* dyc < 0: the forward alone, at the scale 1; then recency > 0 adds recency j to key j's
 * score with every query (q[.][0] = 1, k[j][0] = recency j): each row's weight sits on its
 * last few visible keys, so a stale or missing diagonal tile, or a future key let through
 * the mask, moves the row by O(1) instead of by one term in T. recency < 0: the same
 * operands at the scale -1 (the weight on the first keys; a negative scale's path). */
static void tc_case(int kind, int64_t bh, int t, int d, int dyc, int masked_rows, uint64_t seed, float recency) {
    const int64_t n = bh * t * d, ny = bh * t * (d + 1), ndy = bh * t * (dyc < 0 ? 0 : dyc);
    const double tol = kind == KN_FLASH_TC_TF32 ? 8e-3 : 2e-2;
    const float scale = dyc < 0 ? (recency < 0 ? -1.0f : 1.0f) : 1.0f / sqrtf((float)d);
    const char *name = kn_flash_tc_kernel(kind, d);
    float *qkv = malloc((size_t)(3 * n) * sizeof(float)), *dy = malloc((size_t)ndy * sizeof(float));
    float *y = malloc((size_t)ny * sizeof(float)), *g = malloc((size_t)(3 * n) * sizeof(float));
    float *got = malloc((size_t)(ny > 3 * n ? ny : 3 * n) * sizeof(float));
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < 3 * n + ndy; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        float v = (float)(2.0 * (double)(s >> 11) / 9007199254740992.0 - 1.0);
        if (i < 3 * n) qkv[i] = v;
        else dy[i - 3 * n] = v;
    }
    for (int64_t r = 0; recency != 0 && r < bh * t; r++) {
        qkv[r * d] = 1.0f;
        qkv[n + r * d] = fabsf(recency) * (float)(r % t);
    }
    void *dq = operand(kind, qkv, 3 * n), *ddy = operand(kind, dy, ndy);
    const size_t es = kind == KN_FLASH_TC_TF32 ? 4 : 2;
    const char *dqc = dq;
    char *out = malloc((size_t)(ny > 3 * n ? ny : 3 * n) * es);
    memset(out, 0xFF, (size_t)ny * es); /* NaN: an element the kernel forgets shows */
    cr_assert(kn_k_flash_attn_f32(qkv, qkv + n, qkv + 2 * n, y, bh, t, d, scale));
    int rc = kn_flash_tc_emu(kind, dqc, dqc + n * es, dqc + 2 * n * es, NULL, NULL, 0, out, bh, t, d, scale, false, 0);
    cr_assert(rc == 0, "%s forward launch: %d", name, rc);
    widen(kind, out, got, ny);
    /* O and L each against its own scale (L, about log T or more, would hide O's errors) */
    double e = fmax(rel_cols(got, y, bh * t, d + 1, 0, d), rel_cols(got, y, bh * t, d + 1, d, 1));
    if (e > worst_seen[kind]) worst_seen[kind] = e;
    cr_assert(e < tol, "%s bh=%lld T=%d: forward off by %.3g", name, (long long)bh, t, e);
    if (dyc < 0) { /* the forward alone */
        if (kind != KN_FLASH_TC_TF32) free(dq), free(ddy);
        free(qkv), free(dy), free(y), free(g), free(got), free(out);
        return;
    }
    for (int r = 0; r < masked_rows && r < bh * t; r++) y[(r * 7 % (bh * t)) * (d + 1) + d] = -INFINITY;
    void *yk = operand(kind, y, ny); /* bf16: y as the bf16 forward would have stored it */
    cr_assert(kn_k_flash_attn_bwd_f32(qkv, qkv + n, qkv + 2 * n, y, dy, dyc, g, bh, t, d, scale));
    memset(out, 0xFF, (size_t)(3 * n) * es);
    rc = kn_flash_tc_emu(kind, dqc, dqc + n * es, dqc + 2 * n * es, yk, ddy, dyc, out, bh, t, d, scale, true, 0);
    cr_assert(rc == 0, "%s backward launch: %d", name, rc);
    widen(kind, out, got, 3 * n);
    for (int w = 0; w < 3; w++) {
        e = rel(got + w * n, g + w * n, n);
        if (e > worst_seen[kind]) worst_seen[kind] = e;
        cr_assert(e < tol, "%s bh=%lld T=%d dy cols %d, %d rows masked: d%c off by %.3g", name, (long long)bh, t,
                  dyc, masked_rows, "qkv"[w], e);
    }
    if (kind != KN_FLASH_TC_TF32) {
        free(dq);
        free(ddy);
        free(yk);
    }
    free(qkv), free(dy), free(y), free(g), free(got), free(out);
}

KN_TEST(flash_tc_emu, tf32_kernels_match_the_cpu, .timeout = 600) {
    static const int ts[] = {1, 17, 64, 100, 300};
    uint64_t seed = 1;
    for (int di = 0; di < 2; di++)
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
            int d = di ? 32 : 64;
            tc_case(KN_FLASH_TC_TF32, 1 + (int64_t)(i % 2), ts[i], d, (i + di) % 2 ? d + 1 : d, (int)i, seed++, 0);
        }
    cr_log_info("tf32: worst relative error %.3g", worst_seen[KN_FLASH_TC_TF32]);
}

KN_TEST(flash_tc_emu, bf16_kernels_match_the_cpu, .timeout = 600) {
    static const int ts[] = {1, 17, 64, 100, 300};
    uint64_t seed = 11;
    for (int di = 0; di < 2; di++)
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
            int d = di ? 128 : 64;
            if (d == 128 && ts[i] == 64) continue; /* the slowest case under the emulator, no new edge */
            tc_case(KN_FLASH_TC_BF16, 1 + (int64_t)(i % 2), ts[i], d, (i + di) % 2 ? d + 1 : d, (int)i, seed++, 0);
        }
    cr_log_info("bf16: worst relative error %.3g", worst_seen[KN_FLASH_TC_BF16]);
}

/* bf16 D 64's forward in the variant KILN_FLASH_FWD names (read once per process: each test
 * forks), at T on both sides of v2's 128-row blocks (1, 127, 128, 129) and T = 1000 (eight
 * blocks, the last partial; 16 64-key tiles), with bh 1 and 2, on random operands and on
 * operands whose rows look at their last keys (tc_case's recency); the variant must be the one
 * asked for (kn_flash_tc_fwd_variant), so a test of v2 cannot pass on v1. */
static void fwd_edges(const char *variant) {
    setenv("KILN_FLASH_FWD", variant, 1);
    const char *got = kn_flash_tc_fwd_variant(KN_FLASH_TC_BF16, 64);
    size_t len = strlen(variant);
    cr_assert(got && !strncmp(got, variant, len) && got[len] == ',', "KILN_FLASH_FWD=%s ran '%s'", variant,
              got ? got : "(none)");
    static const int ts[] = {1, 127, 128, 129, 1000};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
        tc_case(KN_FLASH_TC_BF16, 1 + (int64_t)(i % 2), ts[i], 64, -1, 0, 101 + i, 0);
        tc_case(KN_FLASH_TC_BF16, 1 + (int64_t)(i % 2), ts[i], 64, -1, 0, 201 + i, 0.5f);
    }
    tc_case(KN_FLASH_TC_BF16, 2, 129, 64, -1, 0, 301, -0.5f);
    cr_log_info("%s: worst relative error %.3g", variant, worst_seen[KN_FLASH_TC_BF16]);
}
KN_TEST(flash_tc_emu, bf16_forward_v2_at_block_edges, .timeout = 600) { fwd_edges("v2"); }
KN_TEST(flash_tc_emu, bf16_forward_v2_64_at_block_edges, .timeout = 600) { fwd_edges("v2-64"); }
KN_TEST(flash_tc_emu, bf16_forward_v1_at_block_edges, .timeout = 600) { fwd_edges("v1"); }

KN_TEST(flash_tc_emu, refusals) {
    float x[8] = {0};
    cr_assert(kn_flash_tc_kernel(KN_FLASH_TC_TF32, 64) && kn_flash_tc_kernel(KN_FLASH_TC_BF16, 128));
    cr_assert(kn_flash_tc_kernel(KN_FLASH_TC_TF32, 128) == NULL && kn_flash_tc_kernel(KN_FLASH_TC_BF16, 32) == NULL);
    cr_assert(kn_flash_tc_emu(KN_FLASH_TC_TF32, x, x, x, NULL, NULL, 0, x, 1, 1, 48, 1.0f, false, 0) == -2);
    cr_assert(kn_flash_tc_emu(KN_FLASH_TC_BF16, x, x, x, NULL, NULL, 0, x, 70000, 1, 64, 1.0f, false, 0) == -2);
    cr_assert(kn_flash_tc_emu(KN_FLASH_TC_TF32, x, x, x, NULL, NULL, 0, x, 0, 5, 64, 1.0f, false, 0) == 0,
              "no pairs: nothing to do");
}

/* ---------------------------------------------------------------- on a GPU */
/* A host copy of x (f32) in dtype dt (f32: a plain copy). */
static kn_tensor *as_dtype(const kn_tensor *x, kn_dtype dt) {
    kn_tensor *r = NULL;
    KN_ASSERT_OK(kn_tensor_empty(&r, dt, x->ndim, x->shape));
    kn_dtype_convert(dt, kn_tensor_data(r), x->dtype, kn_tensor_data(x), kn_tensor_numel(x));
    return r;
}

/* n on the GPU operands (host h in the kernel's dtype) against the f32 CPU kernel on
 * hw (the same values in f32); the f32 reference result (caller frees). */
static kn_tensor *tc_gpu_vs_cpu(kn_node *n, int nin, kn_tensor **h, kn_tensor **hw, double tol, const char *want) {
    kn_tensor *d[5] = {NULL}, *ref = NULL;
    gpu_operands(n, nin, h, NULL, d);
    kn_node nw = *n;
    nw.type.dtype = KN_DT_F32; /* the same node in f32: the reference */
    KN_ASSERT_OK(kn_node_eval(&nw, (const kn_tensor *const *)hw, &ref));
    kn_tensor *got = on_gpu(n, d), *gw = as_dtype(got, KN_DT_F32);
    cr_assert(!strncmp(kn_flash_cuda_kernel(), want, strlen(want)), "%s ran the kernel '%s', not '%s'",
              kn_op_name(n->op), kn_flash_cuda_kernel(), want);
    double e = rel(kn_tensor_data(gw), kn_tensor_data(ref), kn_tensor_numel(ref));
    cr_assert(e < tol, "%s (%s) on the GPU: off the CPU by %.3g", kn_op_name(n->op), kn_flash_cuda_kernel(), e);
    for (int i = 0; i < nin; i++) kn_tensor_free(d[i]);
    kn_tensor_free(got);
    kn_tensor_free(gw);
    return ref;
}

/* The backend's flash_attn and flash_attn_bwd on tensor cores: f32 with KILN_TF32=1 (the
 * tf32 kernels at D 32 and 64, the SIMT ones at D 128) and bf16 operands (D 64 and 128),
 * against the CPU's f32 kernels on the same values, at the emulator tests' tolerances. */
KN_TEST(cuda_flash_tc, ops_match_the_cpu_on_tensor_cores, .timeout = 120) {
    SKIP_WITHOUT_GPU();
    setenv("KILN_TF32", "1", 1); /* read once, by the first product of this (forked) test */
    kn_rng r = kn_rng_new(9);
    static const int64_t shapes[][4] = {{1, 1, 1, 64}, {2, 3, 33, 32}, {1, 12, 257, 64}, {2, 2, 100, 128}, {1, 2, 1030, 64}};
    for (int kind = 0; kind < 2; kind++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            kn_dtype dt = kind == KN_FLASH_TC_TF32 ? KN_DT_F32 : KN_DT_BF16;
            int d = (int)shapes[s][3];
            const char *k = kn_flash_tc_kernel(kind, d);
            if (!k && kind == KN_FLASH_TC_BF16) continue; /* bf16 has no SIMT fallback */
            if (!k) k = "simt f32";
            double tol = kind == KN_FLASH_TC_TF32 ? 8e-3 : 2e-2;
            kn_tensor *h[5] = {NULL}, *hw[5] = {NULL};
            for (int i = 0; i < 3; i++) {
                kn_tensor *x = randn(&r, KN_DT_F32, 4, shapes[s]);
                h[i] = as_dtype(x, dt);
                hw[i] = as_dtype(h[i], KN_DT_F32); /* the values the kernel sees */
                kn_tensor_free(x);
            }
            kn_node n = node(KN_OP_FLASH_ATTN), b = node(KN_OP_FLASH_ATTN_BWD);
            n.attrs.scale = b.attrs.scale = 1.0 / sqrt((double)d);
            kn_tensor *y = tc_gpu_vs_cpu(&n, 3, h, hw, tol, k);
            h[3] = as_dtype(y, dt);
            hw[3] = as_dtype(h[3], KN_DT_F32);
            kn_tensor_free(y);
            kn_tensor *dy = randn(&r, KN_DT_F32, 4, hw[3]->shape);
            h[4] = as_dtype(dy, dt);
            hw[4] = as_dtype(h[4], KN_DT_F32);
            kn_tensor_free(dy);
            kn_tensor_free(tc_gpu_vs_cpu(&b, 5, h, hw, tol, k));
            for (int i = 0; i < 5; i++) {
                kn_tensor_free(h[i]);
                kn_tensor_free(hw[i]);
            }
        }
}

/* bf16 D 64's forward on the GPU in the variant KILN_FLASH_FWD names (read once per process:
 * each test forks), at T on both sides of v2's 128-row blocks and T = 1000, in the
 * [B, H, T, D] and the GPT's [B, T, H, D] layout, on random operands and on operands that
 * weigh each row's last keys (tc_case's recency 0.5, scale 1), against the CPU's f32 kernel
 * on the same values, O and L judged apart at the emulator tests' tolerance; the forward
 * that ran must be that variant. */
static void gpu_fwd_edges(const char *variant) {
    SKIP_WITHOUT_GPU();
    setenv("KILN_FLASH_FWD", variant, 1);
    kn_rng r = kn_rng_new(21);
    static const int ts[] = {1, 127, 128, 129, 1000};
    const int p0213[4] = {0, 2, 1, 3};
    char want[64];
    snprintf(want, sizeof want, "; forward %s,", variant);
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        for (int c = 0; c < 4; c++) {
            const int bthd = c & 1, recent = c >> 1, T = ts[i], H = 3;
            int64_t shape[4] = {2, bthd ? T : H, bthd ? H : T, 64};
            kn_tensor *h[3], *hw[3], *d[3] = {NULL};
            for (int j = 0; j < 3; j++) {
                kn_tensor *x = randn(&r, KN_DT_F32, 4, shape);
                float *xv = kn_tensor_data(x);
                for (int64_t e = 0; recent && j < 2 && e < kn_tensor_numel(x); e += 64) { /* element 0 of a row */
                    int64_t row = e / 64, tpos = bthd ? row / H % T : row % T;
                    xv[e] = j == 0 ? 1.0f : 0.5f * (float)tpos;
                }
                h[j] = as_dtype(x, KN_DT_BF16);
                hw[j] = as_dtype(h[j], KN_DT_F32);
                kn_tensor_free(x);
            }
            kn_node n = node(KN_OP_FLASH_ATTN);
            n.attrs.scale = recent ? 1.0 : 0.125;
            if (bthd) {
                n.attrs.nperm = 4;
                for (int j = 0; j < 4; j++) n.attrs.perm[j] = p0213[j];
            }
            gpu_operands(&n, 3, h, NULL, d);
            kn_node nw = n;
            nw.type.dtype = KN_DT_F32;
            kn_tensor *ref = NULL;
            KN_ASSERT_OK(kn_node_eval(&nw, (const kn_tensor *const *)hw, &ref));
            kn_tensor *got = on_gpu(&n, d), *gw = as_dtype(got, KN_DT_F32);
            cr_assert(strstr(kn_flash_cuda_fwd_kernel(), want), "KILN_FLASH_FWD=%s ran '%s'", variant,
                      kn_flash_cuda_fwd_kernel());
            const float *g = kn_tensor_data(gw), *w = kn_tensor_data(ref);
            const int64_t rows = 2 * H * (int64_t)T, no = rows * 64;
            double eo = bthd ? rel_cols(g, w, 1, no, 0, no) : rel_cols(g, w, rows, 65, 0, 64);
            double el = bthd ? rel_cols(g + no, w + no, 1, rows, 0, rows) : rel_cols(g, w, rows, 65, 64, 1);
            cr_assert(eo < 2e-2 && el < 2e-2, "%s T=%d %s%s: O off by %.3g, L by %.3g", variant, T,
                      bthd ? "[B, T, H, D]" : "[B, H, T, D]", recent ? ", recent keys" : "", eo, el);
            kn_tensor_free(got);
            kn_tensor_free(gw);
            kn_tensor_free(ref);
            for (int j = 0; j < 3; j++) {
                kn_tensor_free(h[j]);
                kn_tensor_free(hw[j]);
                kn_tensor_free(d[j]);
            }
        }
}
KN_TEST(cuda_flash_tc, bf16_forward_v2_at_block_edges, .timeout = 120) { gpu_fwd_edges("v2"); }
KN_TEST(cuda_flash_tc, bf16_forward_v2_64_at_block_edges, .timeout = 120) { gpu_fwd_edges("v2-64"); }
KN_TEST(cuda_flash_tc, bf16_forward_v1_at_block_edges, .timeout = 120) { gpu_fwd_edges("v1"); }
