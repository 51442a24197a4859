/* test_base_dtype.c — the dtype table, promotion, and the bit-exact f16/bf16 conversions:
 * exhaustive over all 65536 patterns of each, every rounding midpoint, overflow,
 * subnormals, and the f64 cases where rounding through f32 would differ. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kn_test.h"

static float f32_from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}
static uint32_t f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

/* Independent references: the value of an f16 / bf16 pattern from its definition. */
static double ref_f16(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return s ? -v : v;
}
static double ref_bf16(uint16_t b) {
    int s = b >> 15, e = (b >> 7) & 255, m = b & 127;
    double v = e == 0 ? ldexp(m, -133) : e == 255 ? (m ? NAN : INFINITY) : ldexp(128 + m, e - 134);
    return s ? -v : v;
}

KN_TEST(base_dtype, table) {
    size_t sizes[KN_DT_COUNT] = {4, 8, 2, 2, 4, 8, 1, 1};
    const char *names[KN_DT_COUNT] = {"f32", "f64", "f16", "bf16", "i32", "i64", "u8", "bool"};
    for (int d = 0; d < KN_DT_COUNT; d++) {
        cr_assert(kn_dtype_valid((kn_dtype)d));
        cr_assert_eq(kn_dtype_size((kn_dtype)d), sizes[d]);
        cr_assert_str_eq(kn_dtype_name((kn_dtype)d), names[d]);
        cr_assert_eq(kn_dtype_is_float((kn_dtype)d), d <= KN_DT_BF16);
        kn_dtype back;
        KN_ASSERT_OK(kn_dtype_from_name(names[d], &back));
        cr_assert_eq(back, (kn_dtype)d);
    }
    cr_assert(!kn_dtype_valid(KN_DT_COUNT));
    cr_assert(!kn_dtype_valid((kn_dtype)-1));
    cr_assert_eq(kn_dtype_size(KN_DT_COUNT), 0);
    cr_assert_str_eq(kn_dtype_name(KN_DT_COUNT), "?");
    cr_assert(!kn_dtype_is_float(KN_DT_COUNT));
}

KN_TEST(base_dtype, names_and_aliases) {
    struct {
        const char *s;
        kn_dtype d;
    } cases[] = {
        {"float32", KN_DT_F32}, {"float", KN_DT_F32},     {"F32", KN_DT_F32},
        {"double", KN_DT_F64},  {"float64", KN_DT_F64},   {"half", KN_DT_F16},
        {"float16", KN_DT_F16}, {"bfloat16", KN_DT_BF16}, {"BF16", KN_DT_BF16},
        {"int32", KN_DT_I32},   {"int64", KN_DT_I64},     {"uint8", KN_DT_U8},
        {"bool", KN_DT_BOOL},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        kn_dtype d = KN_DT_COUNT;
        KN_ASSERT_OK(kn_dtype_from_name(cases[k].s, &d));
        cr_assert_eq(d, cases[k].d, "%s", cases[k].s);
    }
    kn_dtype d = KN_DT_I32;
    KN_ASSERT_ERR(kn_dtype_from_name("float8", &d), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "\"float8\"") != NULL, "message: %s", kn_last_error());
    cr_assert_eq(d, KN_DT_I32, "out untouched on failure");
    KN_ASSERT_ERR(kn_dtype_from_name("", &d), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_dtype_from_name("f3", &d), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_dtype_from_name("f322", &d), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_dtype_from_name(NULL, &d), KN_ERR_ARG);
}

KN_TEST(base_dtype, promotion) {
    cr_assert_eq(kn_dtype_promote(KN_DT_F32, KN_DT_F64), KN_DT_F64);
    cr_assert_eq(kn_dtype_promote(KN_DT_F16, KN_DT_BF16), KN_DT_F32);
    cr_assert_eq(kn_dtype_promote(KN_DT_BF16, KN_DT_F16), KN_DT_F32);
    cr_assert_eq(kn_dtype_promote(KN_DT_BF16, KN_DT_I64), KN_DT_BF16);
    cr_assert_eq(kn_dtype_promote(KN_DT_F16, KN_DT_F32), KN_DT_F32);
    cr_assert_eq(kn_dtype_promote(KN_DT_I32, KN_DT_I64), KN_DT_I64);
    cr_assert_eq(kn_dtype_promote(KN_DT_U8, KN_DT_I32), KN_DT_I32);
    cr_assert_eq(kn_dtype_promote(KN_DT_BOOL, KN_DT_U8), KN_DT_U8);
    cr_assert_eq(kn_dtype_promote(KN_DT_BOOL, KN_DT_BOOL), KN_DT_BOOL);
    cr_assert_eq(kn_dtype_promote(KN_DT_F32, KN_DT_COUNT), KN_DT_COUNT);
    for (int a = 0; a < KN_DT_COUNT; a++)
        for (int b = 0; b < KN_DT_COUNT; b++) {
            kn_dtype p = kn_dtype_promote((kn_dtype)a, (kn_dtype)b);
            cr_assert_eq(p, kn_dtype_promote((kn_dtype)b, (kn_dtype)a), "symmetric");
            cr_assert_eq(kn_dtype_promote(p, (kn_dtype)a), p, "p holds a");
        }
}

/* All 65536 f16 patterns: exact widening, and narrowing back gives the same bits. */
KN_TEST(base_dtype, f16_exhaustive_round_trip) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = kn_f16_to_f32((uint16_t)h);
        double want = ref_f16((uint16_t)h);
        if (isnan(want)) {
            cr_assert(isnan(f), "f16 %04x must widen to NaN", h);
            cr_assert_eq(signbit(f) != 0, (h & 0x8000) != 0, "sign of NaN %04x", h);
            uint16_t back = kn_f32_to_f16(f), back64 = kn_f64_to_f16((double)f);
            cr_assert((back & 0x7C00) == 0x7C00 && (back & 0x3FF) && (back & 0x200), "%04x -> %04x",
                      h, back);
            cr_assert_eq(back & 0x8000, h & 0x8000);
            cr_assert_eq(back | 0x200, h | 0x200, "payload kept, quiet bit set");
            cr_assert_eq(back64, back);
            continue;
        }
        cr_assert((double)f == want && !signbit(f) == !signbit(want), "f16 %04x -> %a, want %a", h,
                  f, want);
        cr_assert_eq(kn_f32_to_f16(f), h, "f16 %04x does not round-trip through f32", h);
        cr_assert_eq(kn_f64_to_f16(want), h, "f16 %04x does not round-trip through f64", h);
    }
}

KN_TEST(base_dtype, bf16_exhaustive_round_trip) {
    for (uint32_t b = 0; b < 65536; b++) {
        float f = kn_bf16_to_f32((uint16_t)b);
        double want = ref_bf16((uint16_t)b);
        if (isnan(want)) {
            cr_assert(isnan(f), "bf16 %04x must widen to NaN", b);
            uint16_t back = kn_f32_to_bf16(f);
            cr_assert_eq(back, b | 0x40, "bf16 NaN %04x -> %04x (quiet, same sign and payload)", b,
                         back);
            cr_assert_eq(kn_f64_to_bf16((double)f), back);
            continue;
        }
        cr_assert((double)f == want && !signbit(f) == !signbit(want), "bf16 %04x -> %a, want %a", b,
                  f, want);
        cr_assert_eq(f32_bits(f), b << 16);
        cr_assert_eq(kn_f32_to_bf16(f), b);
        cr_assert_eq(kn_f64_to_bf16(want), b);
    }
}

/* Every midpoint between neighbouring finite values (subnormals included): exactly on it
 * goes to the even neighbour, a hair above goes up, a hair below goes down. The f16
 * midpoints need 12 bits and the bf16 ones 9, so they are exact in f32 and f64. */
KN_TEST(base_dtype, every_midpoint_rounds_to_even) {
    for (int fmt = 0; fmt < 2; fmt++) {
        uint32_t top = fmt == 0 ? 0x7C00 : 0x7F80; /* Inf: the neighbour above the largest */
        for (uint32_t lo = 0; lo < top; lo++) {
            uint32_t hi = lo + 1;
            double a = fmt == 0 ? ref_f16((uint16_t)lo) : ref_bf16((uint16_t)lo);
            double b = hi == top  ? ldexp(1, fmt == 0 ? 16 : 128)
                       : fmt == 0 ? ref_f16((uint16_t)hi)
                                  : ref_bf16((uint16_t)hi);
            double mid = (a + b) / 2;
            uint32_t even = (lo & 1) ? hi : lo;
            for (int sign = 0; sign < 2; sign++) {
                double s = sign ? -1 : 1;
                uint32_t sb = sign ? 0x8000 : 0;
                float mf = (float)(s * mid);
                cr_assert_eq((double)mf, s * mid, "midpoint must be exact in f32");
                float up = nextafterf(mf, s * INFINITY), down = nextafterf(mf, 0.0f);
                double up64 = nextafter(s * mid, s * INFINITY), down64 = nextafter(s * mid, 0.0);
                if (fmt == 0) {
                    cr_assert_eq(kn_f32_to_f16(mf), even | sb, "f16 midpoint %a above %04x",
                                 s * mid, lo);
                    cr_assert_eq(kn_f32_to_f16(up), hi | sb, "f16 just above %a", s * mid);
                    cr_assert_eq(kn_f32_to_f16(down), lo | sb, "f16 just below %a", s * mid);
                    cr_assert_eq(kn_f64_to_f16(s * mid), even | sb);
                    cr_assert_eq(kn_f64_to_f16(up64), hi | sb, "f64 just above %a", s * mid);
                    cr_assert_eq(kn_f64_to_f16(down64), lo | sb, "f64 just below %a", s * mid);
                } else {
                    cr_assert_eq(kn_f32_to_bf16(mf), even | sb, "bf16 midpoint %a above %04x",
                                 s * mid, lo);
                    cr_assert_eq(kn_f32_to_bf16(up), hi | sb);
                    cr_assert_eq(kn_f32_to_bf16(down), lo | sb);
                    cr_assert_eq(kn_f64_to_bf16(s * mid), even | sb);
                    cr_assert_eq(kn_f64_to_bf16(up64), hi | sb);
                    cr_assert_eq(kn_f64_to_bf16(down64), lo | sb);
                }
            }
        }
    }
}

KN_TEST(base_dtype, overflow_infinity_and_tiny_values) {
    cr_assert_eq(kn_f32_to_f16(65504.0f), 0x7BFF);
    cr_assert_eq(kn_f32_to_f16(65519.99f), 0x7BFF);
    cr_assert_eq(kn_f32_to_f16(65520.0f), 0x7C00, "the tie above the largest goes to Inf");
    cr_assert_eq(kn_f32_to_f16(1e10f), 0x7C00);
    cr_assert_eq(kn_f32_to_f16(-1e10f), 0xFC00);
    cr_assert_eq(kn_f32_to_f16(INFINITY), 0x7C00);
    cr_assert_eq(kn_f32_to_f16(-INFINITY), 0xFC00);
    cr_assert_eq(kn_f64_to_f16(1e300), 0x7C00);
    cr_assert_eq(kn_f64_to_f16(DBL_MAX), 0x7C00);
    cr_assert_eq(kn_f32_to_bf16(FLT_MAX), 0x7F80);
    cr_assert_eq(kn_f64_to_bf16(1e39), 0x7F80);
    cr_assert_eq(kn_f64_to_bf16(-1e300), 0xFF80);
    /* subnormals and underflow */
    cr_assert_eq(kn_f32_to_f16(0x1p-24f), 0x0001);
    cr_assert_eq(kn_f32_to_f16(0x1p-25f), 0x0000, "half the smallest subnormal ties to 0");
    cr_assert_eq(kn_f32_to_f16(-0x1p-25f), 0x8000);
    cr_assert_eq(kn_f32_to_f16(0x1.000002p-25f), 0x0001);
    cr_assert_eq(kn_f32_to_f16(0x1.8p-24f), 0x0002, "1.5 units ties to 2");
    cr_assert_eq(kn_f32_to_f16(0x1p-14f), 0x0400, "smallest normal");
    cr_assert_eq(kn_f32_to_f16(0x1.ff8p-15f), 0x03FF, "largest subnormal");
    cr_assert_eq(kn_f32_to_f16(0x1.ffcp-15f), 0x0400, "the tie rounds up into the normals");
    cr_assert_eq(kn_f32_to_f16(0x1.ffbp-15f), 0x03FF);
    cr_assert_eq(kn_f32_to_f16(1e-30f), 0x0000);
    cr_assert_eq(kn_f32_to_f16(-0.0f), 0x8000);
    cr_assert_eq(kn_f64_to_f16(4.9e-324), 0x0000, "an f64 subnormal");
    cr_assert_eq(kn_f64_to_f16(-4.9e-324), 0x8000);
    cr_assert_eq(kn_f64_to_bf16(0x1p-133), 0x0001, "smallest bf16 subnormal");
    cr_assert_eq(kn_f64_to_bf16(0x1p-134), 0x0000);
    cr_assert_eq(kn_f32_to_bf16(0x1p-133f), 0x0001);
    cr_assert_eq(kn_f32_to_bf16(0x1.8p-133f), 0x0002);
    cr_assert_eq(kn_f32_to_bf16(f32_from_bits(0x00000001)), 0x0000, "tiny f32 subnormal");
    cr_assert_eq(kn_bf16_to_f32(0x0001), 0x1p-133f);
    cr_assert_eq(kn_f16_to_f32(0x0001), 0x1p-24f);
    cr_assert_eq(kn_f16_to_f32(0x7BFF), 65504.0f);
    cr_assert_eq(kn_f16_to_f32(0x3C00), 1.0f);
    cr_assert_eq(kn_f16_to_f32(0xC000), -2.0f);
}

KN_TEST(base_dtype, nan_stays_quiet_nan_with_sign) {
    uint32_t snan = 0x7F800001u, qnan_neg = 0xFFC12345u;
    uint16_t h = kn_f32_to_f16(f32_from_bits(snan));
    cr_assert((h & 0x7E00) == 0x7E00 && !(h & 0x8000),
              "signalling f32 NaN -> quiet f16 NaN, got %04x", h);
    h = kn_f32_to_f16(f32_from_bits(qnan_neg));
    cr_assert((h & 0xFE00) == 0xFE00, "negative NaN keeps its sign, got %04x", h);
    uint16_t b = kn_f32_to_bf16(f32_from_bits(snan));
    cr_assert((b & 0x7FC0) == 0x7FC0, "bf16 quiet NaN, got %04x", b);
    b = kn_f32_to_bf16(f32_from_bits(0x7F80FFFFu));
    cr_assert_eq(b, 0x7FC0,
                 "a NaN whose payload is all in the dropped bits must not become Inf: %04x", b);
    cr_assert(isnan(kn_f16_to_f32(0x7C01)) && isnan(kn_bf16_to_f32(0xFF81)));
    cr_assert(signbit(kn_bf16_to_f32(0xFF81)));
    cr_assert(isnan(kn_f16_to_f32(kn_f64_to_f16(-NAN))) && (kn_f64_to_f16(-NAN) & 0x8000));
    cr_assert(isnan(kn_bf16_to_f32(kn_f64_to_bf16(NAN))));
}

/* Rounding once from f64 differs from rounding through f32 on these: the f32 step lands
 * exactly on an f16/bf16 midpoint and the second step then goes to even. */
KN_TEST(base_dtype, f64_rounds_once_not_through_f32) {
    double x = 1.0 + 0x1p-11 + 0x1p-40; /* just above the midpoint of 1 and 1+2^-10 */
    cr_assert_eq(kn_f32_to_f16((float)x), 0x3C00, "through f32: the tie goes to even");
    cr_assert_eq(kn_f64_to_f16(x), 0x3C01);
    cr_assert_eq(kn_f64_to_f16(-x), 0xBC01);
    double sub = 0x1p-25 + 0x1p-60; /* just above half the smallest subnormal */
    cr_assert_eq(kn_f32_to_f16((float)sub), 0x0000);
    cr_assert_eq(kn_f64_to_f16(sub), 0x0001);
    double big = 65520.0 - 0x1p-30; /* just below the overflow tie */
    cr_assert_eq(kn_f32_to_f16((float)big), 0x7C00);
    cr_assert_eq(kn_f64_to_f16(big), 0x7BFF);
    double y = 1.0 + 0x1p-8 + 0x1p-30;
    cr_assert_eq(kn_f32_to_bf16((float)y), 0x3F80);
    cr_assert_eq(kn_f64_to_bf16(y), 0x3F81);
}

/* The bit-level kn_f32_to_f16 against the general rounding of kn_f64_to_f16: both signs,
 * every exponent from below f16's underflow edge to past its overflow edge, every value of
 * the 13 low significand bits (where normal f16s round; subnormals drop more) under 14
 * patterns of the 10 high ones (all zeros and all ones: the carries), plus NaNs,
 * infinities and zeros. */
KN_TEST(base_dtype, f32_to_f16_matches_general_rounding) {
    const uint32_t his[] = {0, 1, 2, 3, 255, 256, 511, 512, 513, 700, 1000, 1021, 1022, 1023};
    for (uint32_t sign = 0; sign < 2; sign++)
        for (uint32_t e = 90; e <= 150; e++)
            for (size_t h = 0; h < sizeof his / sizeof his[0]; h++)
                for (uint32_t lo = 0; lo < 0x2000; lo++) {
                uint32_t u = (sign << 31) | (e << 23) | (his[h] << 13) | lo;
                float f = f32_from_bits(u);
                uint16_t a = kn_f32_to_f16(f), b = kn_f64_to_f16((double)f);
                cr_assert_eq(a, b, "f32 %08x: %04x vs %04x", u, a, b);
            }
    const uint32_t edge[] = {0, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00001u, 0x7F800001u, 1, 0x33000000u,
                             0x33000001u, 0x387FFFFFu, 0x38800000u, 0x477FEFFFu, 0x477FF000u, 0x7F7FFFFFu};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++)
        cr_assert_eq(kn_f32_to_f16(f32_from_bits(edge[i])), kn_f64_to_f16((double)f32_from_bits(edge[i])), "f32 %08x",
                     edge[i]);
}

/* The bit-trick kn_f32_to_bf16 against the general rounding of kn_f64_to_bf16, on a
 * million pseudo-random f32 patterns (every exponent, both signs, NaNs included). */
KN_TEST(base_dtype, f32_to_bf16_matches_general_rounding) {
    uint32_t s = 0x9E3779B9u;
    for (int i = 0; i < 1000000; i++) {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        float f = f32_from_bits(s);
        uint16_t a = kn_f32_to_bf16(f), b = kn_f64_to_bf16((double)f);
        cr_assert_eq(a, b, "f32 %08x: %04x vs %04x", s, a, b);
        uint16_t h = kn_f32_to_f16(f);
        if (!isnan(f)) {
            double back = ref_f16(h), err = fabs(back - (double)f);
            /* the neighbour on the other side is never strictly closer */
            uint16_t other = (double)f > back ? (uint16_t)(h + ((h & 0x8000) ? -1 : 1))
                                              : (uint16_t)(h - ((h & 0x8000) ? -1 : 1));
            if ((h & 0x7FFF) != 0 && (h & 0x7FFF) < 0x7C00 && (other & 0x7FFF) < 0x7C00)
                cr_assert(fabs(ref_f16(other) - (double)f) >= err, "f32 %08x -> %04x not nearest",
                          s, h);
        }
    }
}

KN_TEST(base_dtype, store_truncates_and_saturates) {
    int32_t i32[1];
    int64_t i64[1];
    uint8_t u8[1];
    uint8_t bl[1];
    struct {
        double x;
        int32_t i32;
        int64_t i64;
        uint8_t u8;
        uint8_t b;
    } c[] = {
        {2.9, 2, 2, 2, 1},
        {-2.9, -2, -2, 0, 1},
        {-0.5, 0, 0, 0, 1},
        {0.0, 0, 0, 0, 0},
        {-0.0, 0, 0, 0, 0},
        {255.9, 255, 255, 255, 1},
        {300.0, 300, 300, 255, 1},
        {-5.0, -5, -5, 0, 1},
        {1e10, INT32_MAX, 10000000000LL, 255, 1},
        {-1e10, INT32_MIN, -10000000000LL, 0, 1},
        {2147483647.9, INT32_MAX, 2147483647, 255, 1},
        {-2147483648.9, INT32_MIN, -2147483648LL, 0, 1},
        {1e19, INT32_MAX, INT64_MAX, 255, 1},
        {-1e19, INT32_MIN, INT64_MIN, 0, 1},
        {0x1p63, INT32_MAX, INT64_MAX, 255, 1},
        {-0x1p63, INT32_MIN, INT64_MIN, 0, 1},
        {0x1.fffffffffffffp62, INT32_MAX, 0x7FFFFFFFFFFFFC00LL, 255, 1},
        {INFINITY, INT32_MAX, INT64_MAX, 255, 1},
        {-INFINITY, INT32_MIN, INT64_MIN, 0, 1},
        {NAN, 0, 0, 0, 1},
    };
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
        kn_dtype_store(KN_DT_I32, i32, 0, c[k].x);
        kn_dtype_store(KN_DT_I64, i64, 0, c[k].x);
        kn_dtype_store(KN_DT_U8, u8, 0, c[k].x);
        kn_dtype_store(KN_DT_BOOL, bl, 0, c[k].x);
        cr_assert_eq(i32[0], c[k].i32, "i32 <- %a gave %d", c[k].x, i32[0]);
        cr_assert_eq(i64[0], c[k].i64, "i64 <- %a gave %lld", c[k].x, (long long)i64[0]);
        cr_assert_eq(u8[0], c[k].u8, "u8 <- %a gave %d", c[k].x, u8[0]);
        cr_assert_eq(bl[0], c[k].b, "bool <- %a gave %d", c[k].x, bl[0]);
        cr_assert_eq(kn_dtype_load(KN_DT_BOOL, bl, 0), (double)c[k].b);
    }
}

KN_TEST(base_dtype, load_and_store_every_dtype) {
    double vals[] = {0, 1, -3, 2.5, 100};
    for (int d = 0; d < KN_DT_COUNT; d++) {
        uint64_t buf[8] = {0};
        for (int i = 0; i < 5; i++) kn_dtype_store((kn_dtype)d, buf, i, vals[i]);
        for (int i = 0; i < 5; i++) {
            double want = vals[i];
            if (!kn_dtype_is_float((kn_dtype)d)) want = trunc(want);
            if (d == KN_DT_U8 && want < 0) want = 0;
            if (d == KN_DT_BOOL) want = want != 0;
            cr_assert_eq(kn_dtype_load((kn_dtype)d, buf, i), want, "%s element %d",
                         kn_dtype_name((kn_dtype)d), i);
        }
    }
    float f = 0.1f;
    cr_assert_eq(kn_dtype_load(KN_DT_F32, &f, 0), (double)0.1f);
    uint16_t h = 0x3555; /* 0.333251953125 */
    cr_assert_eq(kn_dtype_load(KN_DT_F16, &h, 0), 0.333251953125);
}

KN_TEST(base_dtype, convert_between_every_pair) {
    double vals[] = {0, 1, 3, -2, 7.75, 64};
    uint64_t src[8], dst[8], back[8];
    for (int a = 0; a < KN_DT_COUNT; a++)
        for (int b = 0; b < KN_DT_COUNT; b++) {
            for (int i = 0; i < 6; i++) kn_dtype_store((kn_dtype)a, src, i, vals[i]);
            kn_dtype_convert((kn_dtype)b, dst, (kn_dtype)a, src, 6);
            for (int i = 0; i < 6; i++) {
                double want = kn_dtype_load((kn_dtype)a, src, i);
                kn_dtype_store((kn_dtype)b, back, 0, want);
                cr_assert_eq(kn_dtype_load((kn_dtype)b, dst, i),
                             kn_dtype_load((kn_dtype)b, back, 0), "%s -> %s element %d",
                             kn_dtype_name((kn_dtype)a), kn_dtype_name((kn_dtype)b), i);
            }
        }
}

KN_TEST(base_dtype, convert_keeps_integers_exact) {
    int64_t big[3] = {(INT64_C(1) << 62) + 1, INT64_MIN, INT64_MAX}, out[3];
    kn_dtype_convert(KN_DT_I64, out, KN_DT_I64, big, 3);
    cr_assert(out[0] == big[0] && out[1] == big[1] && out[2] == big[2]);
    /* i64 -> f32 rounds once: 2^60 + 2^36 + 1 is just above an f32 midpoint, but
     * (double)x drops the +1 and lands on the midpoint itself. */
    int64_t x = (INT64_C(1) << 60) + (INT64_C(1) << 36) + 1;
    float f;
    kn_dtype_convert(KN_DT_F32, &f, KN_DT_I64, &x, 1);
    cr_assert_eq(f, 0x1p60f + 0x1p37f, "got %a", f);
    int64_t y = (INT64_C(1) << 60) + (INT64_C(1) << 52) + 1;
    uint16_t b;
    kn_dtype_convert(KN_DT_BF16, &b, KN_DT_I64, &y, 1);
    cr_assert_eq(kn_bf16_to_f32(b), 0x1p60f + 0x1p53f, "got %a", kn_bf16_to_f32(b));
    int64_t z = -y;
    kn_dtype_convert(KN_DT_BF16, &b, KN_DT_I64, &z, 1);
    cr_assert_eq(kn_bf16_to_f32(b), -(0x1p60f + 0x1p53f));
    int32_t i32[3];
    kn_dtype_convert(KN_DT_I32, i32, KN_DT_I64, big, 3);
    cr_assert(i32[0] == INT32_MAX && i32[1] == INT32_MIN && i32[2] == INT32_MAX, "saturated");
}
