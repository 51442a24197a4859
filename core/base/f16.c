/* f16.c — lab 09 unit: rounding an f32 to the nearest IEEE half (f16), ties to even, from
 * its bits (kn_f32_to_f16; contract in kiln/base.h).
 *
 *     f32   s eeeeeeee fffffffffffffffffffffff   bias 127, normals from 2^-126
 *     f16   s eeeee    ffffffffff                bias  15, normals from 2^-14, max 65504
 *
 * Unlike bf16, f16 has fewer exponent bits than f32, so three ranges need care:
 *
 *   - normal results (|x| >= 2^-14): rebias the exponent (e - 127 + 15) and round the 13
 *     dropped fraction bits, ties to even. Write the result as (biased exponent << 10) +
 *     fraction and add the rounding carry to the whole: a fraction that rounds up past
 *     0x3FF carries into the exponent by itself, and 65520 (the tie above 65504, whose
 *     even neighbour is 2^16) carries onto 0x7C00, infinity. An exponent too large for
 *     f16 at all is infinity.
 *   - subnormal results (|x| < 2^-14): f16 counts these in units of 2^-24, so the result is
 *     the 24-bit significand (with its implicit 1) shifted right until its unit is 2^-24,
 *     rounded on the bits shifted out. A significand that rounds up to 0x400 is exactly
 *     the smallest normal: the same bits, no special case. Shifted past everything (below
 *     half of 2^-24), the result is a signed zero.
 *   - Inf stays Inf; NaN stays NaN, made quiet (0x200), its top fraction bits kept.
 *
 * The core calls this for every f32 -> f16 conversion (kn_dtype_convert); its answer must
 * equal the core's f64 rounding, kn_f64_to_f16((double)x), for every f32 x. */
#include <string.h>

#include "kiln/base.h"

uint16_t kn_f32_to_f16(float x) {
    /* BEGIN SOLUTION */
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t e = (u >> 23) & 0xFFu, f = u & 0x7FFFFFu;
    if (e == 0xFF) return f ? (uint16_t)(sign | 0x7E00u | (f >> 13)) : (uint16_t)(sign | 0x7C00u);
    if (e > 142) return (uint16_t)(sign | 0x7C00u); /* 2^16 and above: beyond 65504 */
    if (e >= 113) { /* a normal f16: exponent e - 112, 13 fraction bits dropped */
        uint32_t h = ((e - 112) << 10) | (f >> 13), rem = f & 0x1FFFu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
        return (uint16_t)(sign | h);
    }
    /* a subnormal f16: the significand in units of 2^-24 */
    uint32_t m = e ? f | 0x800000u : f;
    uint32_t shift = e ? 126 - e : 125;
    if (shift > 24) return sign; /* below half of 2^-24 */
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    return (uint16_t)(sign | q);
    /* SKELETON
    // sign, exponent and fraction from the bits of x (memcpy); then NaN and Inf, too
    // large (Inf), normal (rebias, round 13 bits), subnormal (shift to units of 2^-24 and
    // round what is shifted out), each rounded to nearest, ties to even (see above).
    (void)x;
    kn_not_implemented("lab09", "kn_f32_to_f16: round to nearest even from the f32 bits");
    return 0;
    END SOLUTION */
}
