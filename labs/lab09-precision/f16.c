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
    // sign, exponent and fraction from the bits of x (memcpy); then NaN and Inf, too
    // large (Inf), normal (rebias, round 13 bits), subnormal (shift to units of 2^-24 and
    // round what is shifted out), each rounded to nearest, ties to even (see above).
    (void)x;
    kn_not_implemented("lab09", "kn_f32_to_f16: round to nearest even from the f32 bits");
    return 0;
}
