/* test_attn_decode.c — the op attn_decode (kiln/ir.h; core/ir/attn_decode.c): one new
 * token's attention over a static KV cache, reading q, k and v packed in one [B, 3 * H * D]
 * row and writing y as [B, H * D], against an f64 softmax written here over the valid
 * positions and the new token; lengths 0, some, all, and out of range (clamped); rows of
 * one batch with different lengths; positions past len[b] never read (poisoned with NaN);
 * the append: the new k and v land in the cache at position len[b] and nothing else of it
 * changes; the shape rule's refusals; the CUDA kernels against the CPU's, the result and the
 * appended caches (skipped without a GPU), at GPT-2's head dim and others (one group per
 * head dim up to 256, a loop above). The decode step built on it is tested end to end in
 * test_infer.c (greedy generation equal to the no-cache sampler). */
#include <math.h>
#include <string.h>

#include "kn_test.h"
#include "cuda_test_util.h"

/* Element j of head h of third w (0 q, 1 the new k, 2 the new v) of row b of qkv. */
static double qkv_at(const kn_tensor *qkv, int64_t H, int64_t D, int w, int64_t b, int64_t h, int64_t j) {
    return kn_dtype_load(qkv->dtype, kn_tensor_data(qkv), b * 3 * H * D + w * H * D + h * D + j);
}

/* The f64 reference of row (b, h): over t < L the cache, then the new token. */
static void reference(const kn_tensor *const *in, int64_t b, int64_t h, int64_t L, double scale, double *y) {
    const kn_tensor *qkv = in[0], *kc = in[1];
    const int64_t H = kc->shape[1], T = kc->shape[2], D = kc->shape[3], r = b * H + h;
    double s[64], m = -INFINITY, z = 0;
    cr_assert(L + 1 <= 64);
    kn_dtype dt = qkv->dtype;
    for (int64_t t = 0; t <= L; t++) {
        double d = 0;
        for (int64_t j = 0; j < D; j++)
            d += qkv_at(qkv, H, D, 0, b, h, j) *
                 (t < L ? kn_dtype_load(dt, kn_tensor_data(kc), (r * T + t) * D + j) : qkv_at(qkv, H, D, 1, b, h, j));
        s[t] = scale * d;
        if (s[t] > m) m = s[t];
    }
    for (int64_t t = 0; t <= L; t++) z += s[t] = exp(s[t] - m);
    for (int64_t j = 0; j < D; j++) {
        double a = 0;
        for (int64_t t = 0; t <= L; t++)
            a += s[t] * (t < L ? kn_dtype_load(dt, kn_tensor_data(in[2]), (r * T + t) * D + j)
                               : qkv_at(qkv, H, D, 2, b, h, j));
        y[j] = a / z;
    }
}

/* Operands for B, H, T, D of dtype dt with lengths len[0..B): random qkv and caches; every
 * cache position at or past its row's clamped length poisoned with NaN (read it and the
 * result is NaN). */
static void operands(kn_rng *r, kn_dtype dt, int64_t B, int64_t H, int64_t T, int64_t D, const int32_t *len,
                     kn_tensor **in) {
    int64_t sq[2] = {B, 3 * H * D}, sc[4] = {B, H, T, D}, sl[2] = {B, 1};
    in[0] = randn(r, dt, 2, sq);
    in[1] = randn(r, dt, 4, sc);
    in[2] = randn(r, dt, 4, sc);
    KN_ASSERT_OK(kn_tensor_from_data(&in[3], KN_DT_I32, 2, sl, len));
    for (int64_t b = 0; b < B; b++) {
        int64_t L = len[b] < 0 ? 0 : len[b] > T ? T : len[b];
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = L; t < T; t++)
                for (int64_t j = 0; j < D; j++)
                    for (int c = 1; c <= 2; c++) kn_dtype_store(dt, kn_tensor_data(in[c]), ((b * H + h) * T + t) * D + j, NAN);
    }
}

static void free_all(kn_tensor **t, int n) {
    for (int i = 0; i < n; i++) kn_tensor_free(t[i]);
}

/* After a run: cache c (1: k, 2: v) of `after` is `before`'s with, per (b, h), position L
 * (when L < T) holding the new k or v from qkv; NaN matches NaN. */
static void check_append(const kn_tensor *qkv, const kn_tensor *before, const kn_tensor *after, int c,
                         const int32_t *len) {
    const int64_t B = before->shape[0], H = before->shape[1], T = before->shape[2], D = before->shape[3];
    const kn_dtype dt = before->dtype;
    for (int64_t b = 0; b < B; b++) {
        const int64_t L = len[b] < 0 ? 0 : len[b] > T ? T : len[b];
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++)
                for (int64_t j = 0; j < D; j++) {
                    const int64_t i = ((b * H + h) * T + t) * D + j;
                    double want = t == L ? qkv_at(qkv, H, D, c, b, h, j) : kn_dtype_load(dt, kn_tensor_data(before), i);
                    double got = kn_dtype_load(dt, kn_tensor_data(after), i);
                    cr_assert(got == want || (isnan(got) && isnan(want)),
                              "cache %c[%lld, %lld, %lld, %lld] (len %d) = %g after the op, want %g",
                              c == 1 ? 'k' : 'v',
                              (long long)b, (long long)h, (long long)t, (long long)j, (int)len[b], got, want);
                }
    }
}

KN_TEST(attn_decode, matches_an_f64_softmax_over_the_valid_positions) {
    kn_rng r = kn_rng_new(5);
    const int32_t lens[2][4] = {{0, 3, 7, 1}, {9, -2, 5, 6}}; /* 9 and -2 are clamped to 7 and 0 */
    const kn_dtype dts[2] = {KN_DT_F32, KN_DT_F64};
    for (int di = 0; di < 2; di++)
        for (int li = 0; li < 2; li++) {
            const int64_t B = 4, H = 3, T = 7, D = 5;
            kn_tensor *in[4], *got = NULL, *before[3] = {NULL};
            operands(&r, dts[di], B, H, T, D, lens[li], in);
            for (int c = 1; c <= 2; c++) KN_ASSERT_OK(kn_tensor_clone(&before[c], in[c]));
            kn_node n = node(KN_OP_ATTN_DECODE);
            n.attrs.scale = 0.37;
            n.nin = 4;
            const kn_type *tp[4];
            kn_type types[4];
            char msg[256];
            for (int i = 0; i < 4; i++) {
                types[i] = (kn_type){in[i]->dtype, in[i]->ndim, {0}};
                memcpy(types[i].shape, in[i]->shape, sizeof(int64_t) * (size_t)in[i]->ndim);
                tp[i] = &types[i];
            }
            cr_assert_eq(kn_node_infer(&n, tp, &n.type, msg, sizeof msg), KN_OK, "%s", msg);
            cr_assert(n.type.ndim == 2 && n.type.shape[0] == B && n.type.shape[1] == H * D, "y is not [B, H * D]");
            KN_ASSERT_OK(kn_node_eval(&n, (const kn_tensor *const *)in, &got));
            double tol = dts[di] == KN_DT_F64 ? 1e-13 : 2e-6;
            for (int64_t b = 0; b < B; b++)
                for (int64_t h = 0; h < H; h++) {
                    int64_t L = lens[li][b] < 0 ? 0 : lens[li][b] > T ? T : lens[li][b];
                    double want[8];
                    const kn_tensor *ref[3] = {in[0], before[1], before[2]}; /* the caches as they were */
                    reference(ref, b, h, L, 0.37, want);
                    for (int64_t j = 0; j < D; j++) {
                        double g = kn_dtype_load(dts[di], kn_tensor_data(got), (b * H + h) * D + j);
                        cr_assert(fabs(g - want[j]) <= tol * (1 + fabs(want[j])),
                                  "%s, len %d: y[%lld, %lld * D + %lld] = %.17g, want %.17g", kn_dtype_name(dts[di]),
                                  (int)lens[li][b], (long long)b, (long long)h, (long long)j, g, want[j]);
                    }
                }
            for (int c = 1; c <= 2; c++) check_append(in[0], before[c], in[c], c, lens[li]);
            kn_tensor_free(got);
            free_all(in, 4);
            free_all(before + 1, 2);
        }
}

/* With len 0 the only key is the new one: y is the new value exactly. */
KN_TEST(attn_decode, empty_cache_gives_the_new_value) {
    kn_rng r = kn_rng_new(6);
    const int32_t len[2] = {0, 0};
    const int64_t B = 2, H = 2, D = 8;
    kn_tensor *in[4], *got = NULL;
    operands(&r, KN_DT_F32, B, H, 4, D, len, in);
    kn_node n = node(KN_OP_ATTN_DECODE);
    n.attrs.scale = 1.0;
    n.nin = 4;
    n.type = (kn_type){KN_DT_F32, 2, {B, H * D}};
    KN_ASSERT_OK(kn_node_eval(&n, (const kn_tensor *const *)in, &got));
    for (int64_t b = 0; b < B; b++) /* row b's v third */
        cr_assert_eq(memcmp((const float *)kn_tensor_data(got) + b * H * D,
                            (const float *)kn_tensor_data(in[0]) + b * 3 * H * D + 2 * H * D, H * D * sizeof(float)),
                     0, "len 0: y[%lld] is not the new value", (long long)b);
    kn_tensor_free(got);
    free_all(in, 4);
}

/* The shape rule names what is wrong. */
KN_TEST(attn_decode, refuses_bad_operands) {
    struct {
        kn_type t[4];
        kn_status want;
        const char *says;
    } cases[] = {
        {{{KN_DT_F32, 3, {2, 1, 36}}, {KN_DT_F32, 4, {2, 3, 8, 4}}, {KN_DT_F32, 4, {2, 3, 8, 4}}, {KN_DT_I32, 2, {2, 1}}},
         KN_ERR_SHAPE, "one new token per row"},
        {{{KN_DT_F32, 2, {2, 36}}, {KN_DT_F32, 4, {2, 3, 8, 5}}, {KN_DT_F32, 4, {2, 3, 8, 5}}, {KN_DT_I32, 2, {2, 1}}},
         KN_ERR_SHAPE, "caches"},
        {{{KN_DT_F32, 2, {2, 36}}, {KN_DT_F64, 4, {2, 3, 8, 4}}, {KN_DT_F64, 4, {2, 3, 8, 4}}, {KN_DT_I32, 2, {2, 1}}},
         KN_ERR_DTYPE, "caches"},
        {{{KN_DT_F32, 2, {2, 36}}, {KN_DT_F32, 4, {2, 3, 8, 4}}, {KN_DT_F32, 4, {2, 3, 9, 4}}, {KN_DT_I32, 2, {2, 1}}},
         KN_ERR_SHAPE, "caches"},
        {{{KN_DT_F32, 2, {3, 36}}, {KN_DT_F32, 4, {2, 3, 8, 4}}, {KN_DT_F32, 4, {2, 3, 8, 4}}, {KN_DT_I32, 2, {2, 1}}},
         KN_ERR_SHAPE, "caches"},
        {{{KN_DT_F32, 2, {2, 36}}, {KN_DT_F32, 4, {2, 3, 8, 4}}, {KN_DT_F32, 4, {2, 3, 8, 4}}, {KN_DT_F32, 2, {2, 1}}},
         KN_ERR_DTYPE, "len"},
        {{{KN_DT_F32, 2, {2, 36}}, {KN_DT_F32, 4, {2, 3, 8, 4}}, {KN_DT_F32, 4, {2, 3, 8, 4}}, {KN_DT_I32, 2, {3, 1}}},
         KN_ERR_SHAPE, "one count per row"},
        {{{KN_DT_I32, 2, {2, 36}}, {KN_DT_I32, 4, {2, 3, 8, 4}}, {KN_DT_I32, 4, {2, 3, 8, 4}}, {KN_DT_I32, 2, {2, 1}}},
         KN_ERR_DTYPE, "qkv"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        kn_node n = node(KN_OP_ATTN_DECODE);
        n.nin = 4;
        const kn_type *tp[4];
        for (int i = 0; i < 4; i++) tp[i] = &cases[c].t[i];
        char msg[256] = "";
        kn_type out;
        kn_status st = kn_node_infer(&n, tp, &out, msg, sizeof msg);
        cr_assert_eq(st, cases[c].want, "case %zu: status %d, want %d (%s)", c, (int)st, (int)cases[c].want, msg);
        cr_assert(strstr(msg, cases[c].says), "case %zu: the message '%s' does not say '%s'", c, msg, cases[c].says);
    }
}

/* The CUDA kernels against the CPU's, the result and both caches after the append: GPT-2's
 * heads (D 64, a cache of 1024, lengths from 0 to full), a head dim that does not divide the
 * block (48), one above it (300: one group, a loop over columns), and f64. */
KN_TEST(attn_decode, cuda_matches_cpu) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(7);
    struct { kn_dtype dt; int64_t B, H, T, D; int32_t len[4]; } cases[] = {
        {KN_DT_F32, 4, 12, 1024, 64, {0, 1, 517, 1024}},
        {KN_DT_F32, 2, 3, 40, 48, {39, 2}},
        {KN_DT_F32, 2, 2, 16, 300, {16, 5}},
        {KN_DT_F64, 3, 2, 33, 64, {33, 0, 20}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        kn_tensor *host[4], *d[4], *want = NULL;
        operands(&r, cases[c].dt, cases[c].B, cases[c].H, cases[c].T, cases[c].D, cases[c].len, host);
        kn_node n = node(KN_OP_ATTN_DECODE);
        n.attrs.scale = 0.125;
        gpu_operands(&n, 4, host, NULL, d);
        KN_ASSERT_OK(kn_node_eval(&n, (const kn_tensor *const *)host, &want));
        kn_tensor *got = on_gpu(&n, d);
        compare(&n, got, want, TOL_REDUCE);
        for (int k = 1; k <= 2; k++) { /* the appended caches: copies, so equal bit for bit */
            kn_tensor *back = NULL;
            KN_ASSERT_OK(kn_tensor_to(&back, d[k], KN_CPU));
            cr_assert_eq(memcmp(kn_tensor_data(back), kn_tensor_data(host[k]),
                                (size_t)kn_tensor_numel(back) * kn_dtype_size(back->dtype)), 0,
                         "case %zu: the GPU's cache %c after the append differs from the CPU's", c, k == 1 ? 'k' : 'v');
            kn_tensor_free(back);
        }
        kn_tensor_free(got);
        kn_tensor_free(want);
        free_all(host, 4);
        free_all(d, 4);
    }
}
