/* dtype.c — the element types of kiln and every conversion between them.
 *
 * A kn_dtype is one of f32 f64 f16 bf16 i32 i64 u8 bool. This file holds the table of
 * their names and sizes, the promotion rule for mixed operands, the bit-exact half
 * precision conversions, and the slow generic element access (kn_dtype_load/store) that
 * reference kernels and tests use.
 *
 * Half precision formats (sign, exponent bits, mantissa bits, exponent bias):
 *   f16  (IEEE binary16)  1, 5, 10, 15: max 65504, smallest subnormal 2^-24;
 *   bf16 (bfloat16)       1, 8,  7, 127: the top half of an f32, same range, 8 bits of
 *                                        precision.
 * Narrowing rounds to nearest, ties to even, exactly once: f64 -> f16 is done from the
 * f64 bits, never through f32, because rounding twice can land on the other neighbour
 * (1 + 2^-11 + 2^-40 is just above the midpoint between two f16s, but rounds to the
 * exact midpoint in f32, and from there to even). NaN stays NaN: the sign and the top
 * payload bits are kept and the quiet bit is set. Overflow gives +-Inf; results below
 * the normal range become subnormals or signed zero, correctly rounded. Widening
 * (f16/bf16 -> f32) is exact. The narrowing from f32 by the bits (kn_f32_to_f16,
 * kn_f32_to_bf16) is lab 09's unit (labs/lab09-precision/); kn_dtype_convert calls it
 * for f32 sources, and the f64 path here is the reference its tests compare with.
 *
 * Float -> integer stores truncate toward zero and saturate at the type's range; NaN
 * becomes 0. Storing into bool keeps (x != 0), so NaN stores true, as in NumPy. */
#include <ctype.h>
#include <math.h>
#include <string.h>

#include "kiln/base.h"

/* ORDER DTYPE */
typedef struct kn_dtype_info {
    const char *name;       /* canonical short name */
    const char *aliases[4]; /* other accepted spellings, NULL-terminated */
    size_t size;            /* bytes per element */
    bool is_float;
    int rank; /* promotion rank: the higher wins */
} kn_dtype_info;

static const kn_dtype_info kn_dtypes[KN_DT_COUNT] = {
    [KN_DT_F32] = {"f32", {"float32", "float", "fp32", NULL}, 4, true, 6},
    [KN_DT_F64] = {"f64", {"float64", "double", "fp64", NULL}, 8, true, 7},
    [KN_DT_F16] = {"f16", {"float16", "half", "fp16", NULL}, 2, true, 5},
    [KN_DT_BF16] = {"bf16", {"bfloat16", NULL}, 2, true, 5},
    [KN_DT_I32] = {"i32", {"int32", "int", NULL}, 4, false, 3},
    [KN_DT_I64] = {"i64", {"int64", "long", NULL}, 8, false, 4},
    [KN_DT_U8] = {"u8", {"uint8", "byte", NULL}, 1, false, 2},
    [KN_DT_BOOL] = {"bool", {"boolean", NULL}, 1, false, 1},
};

bool kn_dtype_valid(kn_dtype dt) { return (int)dt >= 0 && dt < KN_DT_COUNT; }
size_t kn_dtype_size(kn_dtype dt) { return kn_dtype_valid(dt) ? kn_dtypes[dt].size : 0; }
const char *kn_dtype_name(kn_dtype dt) { return kn_dtype_valid(dt) ? kn_dtypes[dt].name : "?"; }
bool kn_dtype_is_float(kn_dtype dt) { return kn_dtype_valid(dt) && kn_dtypes[dt].is_float; }

/* ASCII case-insensitive equality ("F32" and "Float32" are accepted too). */
static bool kn_name_eq(const char *a, const char *b) {
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return false;
    return *a == *b;
}

kn_status kn_dtype_from_name(const char *name, kn_dtype *out) {
    if (!name || !out)
        return kn_error(KN_ERR_ARG, "kn_dtype_from_name: %s is NULL", name ? "out" : "name");
    for (int d = 0; d < KN_DT_COUNT; d++) {
        bool hit = kn_name_eq(name, kn_dtypes[d].name);
        for (int k = 0; !hit && kn_dtypes[d].aliases[k]; k++)
            hit = kn_name_eq(name, kn_dtypes[d].aliases[k]);
        if (hit) {
            *out = (kn_dtype)d;
            return KN_OK;
        }
    }
    return kn_error(KN_ERR_ARG,
                    "kn_dtype_from_name: unknown dtype \"%s\" (expected f32, f64, f16, bf16, i32, "
                    "i64, u8 or bool)",
                    name);
}

/* The higher-ranked of the two; f16 with bf16 gives f32, which holds both exactly.
 * Returns KN_DT_COUNT (not a valid dtype) when either operand is invalid. */
kn_dtype kn_dtype_promote(kn_dtype a, kn_dtype b) {
    if (!kn_dtype_valid(a) || !kn_dtype_valid(b)) return KN_DT_COUNT;
    if ((a == KN_DT_F16 && b == KN_DT_BF16) || (a == KN_DT_BF16 && b == KN_DT_F16))
        return KN_DT_F32;
    return kn_dtypes[a].rank >= kn_dtypes[b].rank ? a : b;
}

/* ---------------------------------------------------------------- half precision */

static uint64_t kn_f64_bits(double x) {
    uint64_t u;
    memcpy(&u, &x, 8);
    return u;
}
static float kn_f32_from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* Round a double to a 16-bit float with `mbits` mantissa bits and exponent bias `bias`
 * (f16: 10, 15; bf16: 7, 127), to nearest, ties to even, in one step.
 *
 * The double is M * 2^(E-52) with M the 53-bit significand. The result is q units of
 * its last place; a normal result's unit is 2^(E-mbits), a subnormal's is the fixed
 * 2^(1-bias-mbits). So q = M >> shift, rounded on the bits shifted out. The encoding
 * trick: for a normal result the bits are ((E + bias - 1) << mbits) + q, where q still
 * holds the implicit leading 1 that adds the missing 1 to the exponent field; a q that
 * rounded up to 2^(mbits+1) carries into the exponent by itself, a subnormal q that
 * rounded up to 2^mbits becomes the smallest normal, and a carry past the largest finite
 * value lands exactly on the Inf pattern. */
static uint16_t kn_f64_to_half(double x, int mbits, int bias) {
    uint64_t u = kn_f64_bits(x);
    uint16_t sign = (uint16_t)((u >> 48) & 0x8000);
    int e = (int)((u >> 52) & 0x7FF);
    uint64_t m = u & ((UINT64_C(1) << 52) - 1);
    uint16_t exp_all = (uint16_t)(((1u << (15 - mbits)) - 1) << mbits); /* Inf pattern */
    if (e == 0x7FF) {
        if (m == 0) return sign | exp_all;
        /* NaN: keep the top payload bits and set the quiet bit (the top mantissa bit). */
        return sign | exp_all | (uint16_t)(1u << (mbits - 1)) | (uint16_t)(m >> (52 - mbits));
    }
    int E = e ? e - 1023 : -1022;
    uint64_t M = e ? m | (UINT64_C(1) << 52) : m;
    if (M == 0) return sign;
    int emin = 1 - bias;
    if (E > bias) return sign | exp_all; /* 2^E is beyond the largest finite value */
    int shift = E >= emin ? 52 - mbits : 52 - mbits + (emin - E);
    if (shift > 54) return sign; /* below half the smallest subnormal: rounds to zero */
    uint64_t q = M >> shift;
    uint64_t rem = M & ((UINT64_C(1) << shift) - 1);
    uint64_t half = UINT64_C(1) << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    uint64_t bits = E >= emin ? ((uint64_t)(E + bias - 1) << mbits) + q : q;
    if (bits >= exp_all) return sign | exp_all;
    return sign | (uint16_t)bits;
}

uint16_t kn_f64_to_f16(double x) { return kn_f64_to_half(x, 10, 15); }
uint16_t kn_f64_to_bf16(double x) { return kn_f64_to_half(x, 7, 127); }

float kn_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
    if (e == 0x1F) /* Inf, or NaN made quiet with its payload kept */
        return kn_f32_from_bits(sign | 0x7F800000u | (m ? 0x400000u | (m << 13) : 0));
    if (e == 0) { /* zero or subnormal: m * 2^-24, exact in f32 */
        float v = (float)m * 0x1p-24f;
        return sign ? -v : v;
    }
    return kn_f32_from_bits(sign | ((e + 112) << 23) | (m << 13)); /* rebias 15 -> 127 */
}

float kn_bf16_to_f32(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) u |= 0x400000u; /* quiet NaN */
    return kn_f32_from_bits(u);
}

/* ---------------------------------------------------------------- generic element access */

double kn_dtype_load(kn_dtype dt, const void *base, int64_t i) {
    switch (dt) {
    case KN_DT_F32:
        return ((const float *)base)[i];
    case KN_DT_F64:
        return ((const double *)base)[i];
    case KN_DT_F16:
        return kn_f16_to_f32(((const uint16_t *)base)[i]);
    case KN_DT_BF16:
        return kn_bf16_to_f32(((const uint16_t *)base)[i]);
    case KN_DT_I32:
        return ((const int32_t *)base)[i];
    case KN_DT_I64:
        return (double)((const int64_t *)base)[i];
    case KN_DT_U8:
        return ((const uint8_t *)base)[i];
    case KN_DT_BOOL:
        return ((const uint8_t *)base)[i] != 0;
    case KN_DT_COUNT:
        break;
    }
    kn_check_failed("kn_dtype_load: valid dtype", __FILE__, __LINE__);
}

/* x truncated toward zero and clamped to [lo, hi_excl - 1]; NaN gives 0. The bounds are
 * powers of two (or 0 and 256), exact in a double, and compared before converting, so
 * the conversion itself never overflows. For lo = -2^63, lo - 1.0 rounds back to lo,
 * which is still right: no double lies strictly between -2^63 - 1 and -2^63. */
static int64_t kn_sat_trunc(double x, double lo, double hi_excl, int64_t lo_i, int64_t hi_i) {
    if (isnan(x)) return 0;
    if (x >= hi_excl) return hi_i;
    if (x <= lo - 1.0) return lo_i;
    return (int64_t)x;
}

void kn_dtype_store(kn_dtype dt, void *base, int64_t i, double x) {
    switch (dt) {
    case KN_DT_F32:
        ((float *)base)[i] = (float)x;
        break;
    case KN_DT_F64:
        ((double *)base)[i] = x;
        break;
    case KN_DT_F16:
        ((uint16_t *)base)[i] = kn_f64_to_f16(x);
        break;
    case KN_DT_BF16:
        ((uint16_t *)base)[i] = kn_f64_to_bf16(x);
        break;
    case KN_DT_I32:
        ((int32_t *)base)[i] = (int32_t)kn_sat_trunc(x, -0x1p31, 0x1p31, INT32_MIN, INT32_MAX);
        break;
    case KN_DT_I64:
        ((int64_t *)base)[i] = kn_sat_trunc(x, -0x1p63, 0x1p63, INT64_MIN, INT64_MAX);
        break;
    case KN_DT_U8:
        ((uint8_t *)base)[i] = (uint8_t)kn_sat_trunc(x, 0.0, 256.0, 0, 255);
        break;
    case KN_DT_BOOL:
        ((uint8_t *)base)[i] = x != 0;
        break;
    case KN_DT_COUNT:
        kn_check_failed("kn_dtype_store: valid dtype", __FILE__, __LINE__);
    }
}

/* An i64 as a double rounded to odd: exact when it fits in 53 bits, otherwise truncated
 * to 53 bits with the last bit set when anything nonzero was dropped. Rounding that
 * double once more to 24 bits or fewer (f32, f16, bf16) gives the correctly rounded
 * result, which a plain (double)x followed by a second rounding would not always give. */
static double kn_i64_to_f64_odd(int64_t x) {
    uint64_t u = x < 0 ? 0 - (uint64_t)x : (uint64_t)x;
    int sh = 0;
    while ((u >> sh) >= (UINT64_C(1) << 53)) sh++;
    uint64_t keep = u >> sh;
    if (sh && (u & ((UINT64_C(1) << sh) - 1))) keep |= 1;
    double d = ldexp((double)keep, sh);
    return x < 0 ? -d : d;
}

/* Convert n contiguous elements from src (src_dt) to dst (dst_dt), element by element
 * with kn_dtype_store's rules. Same dtype: a memmove. Otherwise dst and src must not
 * overlap. Integers keep their exact value whenever the destination can hold it
 * (i64 -> i64 does not pass through a double). */
void kn_dtype_convert(kn_dtype dst_dt, void *dst, kn_dtype src_dt, const void *src, int64_t n) {
    KN_CHECK(kn_dtype_valid(dst_dt) && kn_dtype_valid(src_dt));
    if (n <= 0) return;
    if (dst_dt == src_dt) {
        memmove(dst, src, (size_t)n * kn_dtype_size(dst_dt));
        return;
    }
    if (src_dt == KN_DT_F32 && (dst_dt == KN_DT_F16 || dst_dt == KN_DT_BF16)) {
        /* from f32 one rounding is all there is: lab 09's units, from the bits */
        const float *s = src;
        uint16_t *d = dst;
        if (dst_dt == KN_DT_F16)
            for (int64_t i = 0; i < n; i++) d[i] = kn_f32_to_f16(s[i]);
        else
            for (int64_t i = 0; i < n; i++) d[i] = kn_f32_to_bf16(s[i]);
        return;
    }
    if (src_dt == KN_DT_I64 &&
        (dst_dt == KN_DT_F32 || dst_dt == KN_DT_F16 || dst_dt == KN_DT_BF16)) {
        const int64_t *s = src;
        for (int64_t i = 0; i < n; i++) kn_dtype_store(dst_dt, dst, i, kn_i64_to_f64_odd(s[i]));
        return;
    }
    for (int64_t i = 0; i < n; i++) kn_dtype_store(dst_dt, dst, i, kn_dtype_load(src_dt, src, i));
}
