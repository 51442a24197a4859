/* bf16.c — lab 09 unit: rounding an f32 to the nearest bf16, ties to even
 * (kn_f32_to_bf16; contract in kiln/base.h).
 *
 * bf16 is the top half of an f32: the same sign bit, the same 8 exponent bits, and the
 * first 7 of the 23 fraction bits. Narrowing keeps the top 16 bits and rounds on the 16
 * it drops, as integer arithmetic on the bits:
 *
 *     dropped <  0x8000   round down (keep the top half as it is)
 *     dropped >  0x8000   round up   (add one unit to the kept half)
 *     dropped == 0x8000   a tie: go to the even neighbour (the kept half's last bit 0)
 *
 * All three at once: add 0x7FFF (just under half) plus the kept half's lowest bit, then
 * keep the top half. A carry out of the fraction ripples into the exponent — 1.99999
 * rounds to 2 — and past the largest finite value it lands exactly on the bits of
 * infinity. NaN is the exception: rounding its payload could carry it into Inf (or, with
 * a payload only in the dropped bits, turn it into Inf directly), so a NaN keeps its top
 * bits and gets the quiet bit (0x40 of the bf16, the top fraction bit).
 *
 * The core calls this for every f32 -> bf16 conversion (kn_dtype_convert: the cast op,
 * tensors converted to bf16). */
#include <string.h>

#include "kiln/base.h"

uint16_t kn_f32_to_bf16(float x) {
    /* BEGIN SOLUTION */
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40); /* a quiet NaN */
    u += 0x7FFFu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
    /* SKELETON
    // the bits of x (memcpy), NaN first (keep the top half, set 0x40), then round the
    // dropped 16 bits to nearest, ties to even, and keep the top 16 (see above).
    (void)x;
    kn_not_implemented("lab09", "kn_f32_to_bf16: round to nearest even from the f32 bits");
    return 0;
    END SOLUTION */
}
