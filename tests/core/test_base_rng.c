/* test_base_rng.c — Philox4x32-10 against the Random123 known answers, the stream
 * layout, position-based draws, splitting, and loose (fixed-seed) statistics. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kn_test.h"

/* Random123 kat_vectors, philox4x32_10: counter, key -> output. */
KN_TEST(base_rng, random123_known_answers) {
    static const uint32_t ctr[3][4] = {{0, 0, 0, 0},
                                       {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
                                       {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}};
    static const uint32_t key[3][2] = {{0, 0}, {0xffffffff, 0xffffffff}, {0xa4093822, 0x299f31d0}};
    static const uint32_t want[3][4] = {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
                                        {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
                                        {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}};
    for (int t = 0; t < 3; t++) {
        uint32_t out[4];
        kn_philox4x32_10(ctr[t], key[t], out);
        for (int w = 0; w < 4; w++)
            cr_assert_eq(out[w], want[t][w], "vector %d word %d: %08x, want %08x", t, w, out[w],
                         want[t][w]);
    }
}

KN_TEST(base_rng, stream_layout_is_curand_like) {
    uint64_t seed = 0x0123456789ABCDEFull, stream = (1ull << 33) + 5,
             i = (1ull << 40) * 4 + 4 * 7 + 2;
    uint32_t ctr[4] = {(uint32_t)(i / 4), (uint32_t)((i / 4) >> 32), (uint32_t)stream,
                       (uint32_t)(stream >> 32)};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)}, out[4];
    kn_philox4x32_10(ctr, key, out);
    cr_assert_eq(kn_rng_word_at(seed, stream, i), out[2]);
    /* stream 0, seed 0, first block is the first known answer */
    cr_assert_eq(kn_rng_word_at(0, 0, 0), 0x6627e8d5u);
    cr_assert_eq(kn_rng_word_at(0, 0, 3), 0x9b00dbd8u);
}

KN_TEST(base_rng, sequential_equals_word_at) {
    kn_rng r = kn_rng_new(7);
    r.stream = 3;
    for (uint64_t i = 0; i < 1000; i++) {
        cr_assert_eq(r.offset, i);
        cr_assert_eq(kn_rng_u32(&r), kn_rng_word_at(7, 3, i), "word %llu", (unsigned long long)i);
    }
    kn_rng a = kn_rng_new(99), b = kn_rng_new(99), c = kn_rng_new(100);
    int same = 0;
    for (int i = 0; i < 100; i++) {
        uint32_t x = kn_rng_u32(&a);
        cr_assert_eq(x, kn_rng_u32(&b), "same seed, same numbers");
        same += x == kn_rng_u32(&c);
    }
    cr_assert(same < 3, "another seed, other numbers");
}

KN_TEST(base_rng, unit_f32_range) {
    cr_assert_eq(kn_u32_to_unit_f32(0), 0.0f);
    cr_assert_eq(kn_u32_to_unit_f32(0xFFFFFFFFu), 1.0f - 0x1p-24f);
    cr_assert(kn_u32_to_unit_f32(0xFFFFFFFFu) < 1.0f);
    cr_assert_eq(kn_u32_to_unit_f32(0x80000000u), 0.5f);
    cr_assert_eq(kn_u32_to_unit_f32(0xFF), 0.0f, "the low 8 bits are dropped");
}

/* Each uniform value is the documented function of the word at its position, from an
 * unaligned start, across the internal chunk size. */
KN_TEST(base_rng, uniform_values_are_position_based) {
    enum { N = 1001 };
    static float f[N];
    static double d[N];
    kn_rng r = kn_rng_new(2024);
    (void)kn_rng_u32(&r);
    (void)kn_rng_u32(&r);
    (void)kn_rng_u32(&r); /* offset 3: not at a block boundary */
    kn_rng_uniform_f32(&r, f, N);
    cr_assert_eq(r.offset, 3 + N);
    for (int j = 0; j < N; j++) {
        cr_assert_eq(f[j], kn_u32_to_unit_f32(kn_rng_word_at(2024, 0, 3 + (uint64_t)j)), "value %d",
                     j);
        cr_assert(f[j] >= 0.0f && f[j] < 1.0f);
    }
    uint64_t o = r.offset;
    kn_rng_uniform_f64(&r, d, N);
    cr_assert_eq(r.offset, o + 2 * N);
    for (int j = 0; j < N; j++) {
        uint32_t a = kn_rng_word_at(2024, 0, o + 2 * (uint64_t)j),
                 b = kn_rng_word_at(2024, 0, o + 2 * (uint64_t)j + 1);
        double want = ((double)(a >> 5) * 67108864.0 + (double)(b >> 6)) / 9007199254740992.0;
        cr_assert_eq(d[j], want, "value %d", j);
        cr_assert(d[j] >= 0.0 && d[j] < 1.0);
    }
    kn_rng_uniform_f32(&r, f, 0);
    cr_assert_eq(r.offset, o + 2 * N, "n = 0 uses nothing");
}

/* Normal value j, recomputed from kn_rng_word_at as a GPU thread would. */
static double normal_f32_at(uint64_t seed, uint64_t stream, uint64_t o, uint64_t j) {
    uint32_t a = kn_rng_word_at(seed, stream, o + (j & ~1ull)),
             b = kn_rng_word_at(seed, stream, o + (j | 1));
    double u1 = ((double)(a >> 8) + 1.0) / 16777216.0, u2 = (double)(b >> 8) / 16777216.0;
    double r = sqrt(-2.0 * log(u1)), th = 6.283185307179586 * u2;
    return (j & 1) ? r * sin(th) : r * cos(th);
}

KN_TEST(base_rng, normal_values_are_position_based) {
    enum { N = 777 };
    static float f[N];
    static double d[N];
    kn_rng r = kn_rng_new(5);
    r.stream = 11;
    r.offset = 13;
    kn_rng_normal_f32(&r, f, N);
    cr_assert_eq(r.offset, 13 + N + 1, "odd n rounds up to a whole pair");
    for (uint64_t j = 0; j < N; j++) {
        double want = normal_f32_at(5, 11, 13, j);
        KN_ASSERT_CLOSE(f[j], want, 1e-6, 1e-6);
    }
    uint64_t o = r.offset;
    kn_rng_normal_f64(&r, d, N);
    cr_assert_eq(r.offset, o + 2 * (N + 1));
    for (uint64_t j = 0; j < N; j++) {
        uint64_t p = o + 4 * (j / 2);
        uint32_t w[4];
        for (int k = 0; k < 4; k++) w[k] = kn_rng_word_at(5, 11, p + (uint64_t)k);
        double u1 =
            1.0 - ((double)(w[0] >> 5) * 67108864.0 + (double)(w[1] >> 6)) / 9007199254740992.0;
        double u2 = ((double)(w[2] >> 5) * 67108864.0 + (double)(w[3] >> 6)) / 9007199254740992.0;
        double rad = sqrt(-2.0 * log(u1)), th = 6.283185307179586 * u2;
        double want = (j & 1) ? rad * sin(th) : rad * cos(th);
        KN_ASSERT_CLOSE(d[j], want, 1e-12, 1e-12);
    }
}

KN_TEST(base_rng, batching_does_not_change_values) {
    float whole[10], parts[10];
    kn_rng a = kn_rng_new(1), b = kn_rng_new(1);
    kn_rng_normal_f32(&a, whole, 10);
    kn_rng_normal_f32(&b, parts, 6);
    kn_rng_normal_f32(&b, parts + 6, 4);
    cr_assert(memcmp(whole, parts, sizeof whole) == 0);
    cr_assert_eq(a.offset, b.offset);
    kn_rng_uniform_f32(&a, whole, 10);
    kn_rng_uniform_f32(&b, parts, 3);
    kn_rng_uniform_f32(&b, parts + 3, 7);
    cr_assert(memcmp(whole, parts, sizeof whole) == 0);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

KN_TEST(base_rng, split_is_pure_and_does_not_overlap) {
    kn_rng parent = kn_rng_new(42);
    parent.stream = 9;
    parent.offset = 1234;
    kn_rng before = parent;
    kn_rng c1 = kn_rng_split(&parent, 1), c1b = kn_rng_split(&parent, 1);
    cr_assert(memcmp(&parent, &before, sizeof parent) == 0, "the parent is unchanged");
    cr_assert(c1.seed == c1b.seed && c1.stream == c1b.stream && c1.offset == 0, "pure function");
    parent.offset = 0;
    kn_rng c1c = kn_rng_split(&parent, 1);
    cr_assert(c1c.seed == c1.seed && c1c.stream == c1.stream,
              "the parent's offset does not matter");
    kn_rng other_stream = parent;
    other_stream.stream = 10;
    kn_rng c1d = kn_rng_split(&other_stream, 1);
    cr_assert(c1d.seed != c1.seed || c1d.stream != c1.stream);

    /* the parent, 15 children and a grandchild: no 64-bit word pair in common among their
     * first 4096 words */
    enum { S = 17, W = 4096 };
    static uint64_t pairs[S * W / 2];
    size_t n = 0;
    for (int s = 0; s < S; s++) {
        kn_rng r = s == 0   ? parent
                   : s < 16 ? kn_rng_split(&parent, (uint64_t)s)
                            : kn_rng_split(&c1, 1);
        for (int k = 0; k < W / 2; k++) {
            uint64_t lo = kn_rng_u32(&r), hi = kn_rng_u32(&r);
            pairs[n++] = lo | hi << 32;
        }
    }
    qsort(pairs, n, sizeof pairs[0], cmp_u64);
    for (size_t k = 1; k < n; k++) cr_assert_neq(pairs[k], pairs[k - 1], "streams overlap");
}

/* Loose bounds on fixed seeds: deterministic, so they cannot flake; wide enough to allow
 * any reasonable generator, tight enough to catch a wrong formula (a missing factor,
 * a wrong shift, values outside the range). */
KN_TEST(base_rng, statistics_are_sane) {
    enum { N = 200000 };
    static float f[N];
    static double d[N];
    kn_rng r = kn_rng_new(12345);
    kn_rng_uniform_f32(&r, f, N);
    double m = 0, v = 0;
    for (int i = 0; i < N; i++) m += f[i];
    m /= N;
    for (int i = 0; i < N; i++) v += (f[i] - m) * (f[i] - m);
    v /= N;
    KN_ASSERT_CLOSE(m, 0.5, 0.005, 0);
    KN_ASSERT_CLOSE(v, 1.0 / 12, 0.002, 0);

    kn_rng_normal_f32(&r, f, N);
    kn_rng_normal_f64(&r, d, N);
    for (int pass = 0; pass < 2; pass++) {
        double mean = 0, var = 0, m4 = 0;
        int beyond3 = 0;
        for (int i = 0; i < N; i++) mean += pass ? d[i] : f[i];
        mean /= N;
        for (int i = 0; i < N; i++) {
            double x = (pass ? d[i] : f[i]) - mean;
            cr_assert(isfinite(x));
            var += x * x;
            m4 += x * x * x * x;
            beyond3 += fabs(x) > 3;
        }
        var /= N;
        m4 /= N;
        KN_ASSERT_CLOSE(mean, 0.0, 0.01, 0);
        KN_ASSERT_CLOSE(var, 1.0, 0.02, 0);
        KN_ASSERT_CLOSE(m4 / (var * var), 3.0, 0.1, 0); /* kurtosis of a Gaussian */
        KN_ASSERT_CLOSE(beyond3 / (double)N, 0.0027, 0.0008, 0);
    }
}
