/* precision_error.c — the rounding error of bf16 and f16 over magnitudes, measured with
 * kiln's own conversions (lab 09's kn_f32_to_bf16 and kn_f32_to_f16, widened back with
 * kn_bf16_to_f32 and kn_f16_to_f32). For each eighth of an octave from 2^-32 to 2^20 it
 * rounds 256 f32 values spread over that interval and prints the largest and the mean
 * relative error |round(x) - x| / x of each format (1 when x rounds to zero, inf when it
 * overflows), tab-separated: x  bf16_max  bf16_mean  f16_max  f16_mean.
 * Built and run by plots/precision.sh; the figure is lesson 09's. */
#include <math.h>
#include <stdio.h>

#include "kiln/base.h"

int main(void) {
    printf("# x\tbf16_max\tbf16_mean\tf16_max\tf16_mean\n");
    for (int k = -32 * 8; k < 20 * 8; k++) {
        double lo = ldexp(1.0, 0) * pow(2.0, k / 8.0), hi = pow(2.0, (k + 1) / 8.0);
        double bmax = 0, bsum = 0, hmax = 0, hsum = 0;
        for (int i = 0; i < 256; i++) {
            float x = (float)(lo + (hi - lo) * (i + 0.5) / 256);
            double b = fabs((double)kn_bf16_to_f32(kn_f32_to_bf16(x)) - x) / x;
            double h = fabs((double)kn_f16_to_f32(kn_f32_to_f16(x)) - x) / x;
            bmax = fmax(bmax, b), bsum += b, hmax = fmax(hmax, h), hsum += h;
        }
        printf("%.9g\t%.9g\t%.9g\t%.9g\t%.9g\n", sqrt(lo * hi), bmax, bsum / 256, hmax, hsum / 256);
    }
    return 0;
}
