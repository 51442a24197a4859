/* quant_check.h — helpers for lab 12's tests (public and hidden): random rows with planted
 * outliers, the quantizer's and the epilogue's contracts written out as plain loops (the
 * reference the units are compared with, bit for bit), and the skeleton's message.
 *
 * The reference code of one value v of a group with largest magnitude a is
 * nearbyintf(v * (127 / a)), the scale a / 127, in f32; a group of zeros (or of values so
 * small that 127 / a overflows) has the scale 0 and the codes 0, a group with a NaN or an
 * infinity the scale NaN and the codes 0 (kiln/quant.h, quant_scale.c's comment). kiln's
 * int8 kernels compute exactly this, so the tests ask for the same bits. */
#ifndef LAB12_QUANT_CHECK_H
#define LAB12_QUANT_CHECK_H

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_test.h"
#include "kiln/quant.h"

/* The quantizers and the epilogue return nothing (void): an untouched skeleton records
 * "not implemented (lab12: ...)" process-wide (kn_not_implemented_seen) and writes zeros
 * and NaN scales; appended to a wrong result's message ("" when every unit is written). */
static inline const char *l12_why(void) {
    static char w[1100];
    const char *m = kn_not_implemented_seen();
    snprintf(w, sizeof w, "%s%s", m ? ": " : "", m ? m : "");
    return w;
}

/* n values in [-1, 1) from a small LCG (the same on every machine). */
static inline void l12_fill(float *x, int64_t n, unsigned seed) {
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        x[i] = (float)((seed >> 8) % 20001) / 10000.0f - 1.0f;
    }
}

/* Bitwise equality of two floats, NaN equal to NaN (scales of non-finite rows). */
static inline bool l12_same(float a, float b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return memcmp(&a, &b, sizeof a) == 0;
}

/* The reference quantizer of n values `stride` apart: codes into q (contiguous), the scale. */
static inline float l12_ref_quant(const float *v, int64_t n, int64_t stride, int8_t *q) {
    float a = 0;
    bool finite = true;
    for (int64_t i = 0; i < n; i++) {
        float m = fabsf(v[i * stride]);
        if (!isfinite(m)) finite = false;
        else if (m > a) a = m;
    }
    /* 127 / a is +inf for a = 0 and for a below 127 / FLT_MAX: a row of zeros */
    const float inv = (float)KN_QMAX / a;
    const bool coded = finite && isfinite(inv);
    for (int64_t i = 0; i < n; i++) {
        float r = coded ? nearbyintf(v[i * stride] * inv) : 0;
        if (r > KN_QMAX || r < -KN_QMAX) return -1; /* impossible: |v| <= a */
        q[i] = (int8_t)r;
    }
    return !finite ? NAN : coded ? a / (float)KN_QMAX : 0;
}

/* The reference epilogue: ((float)acc * sa) * sb, left to right, in f32. */
static inline float l12_ref_dequant(int32_t acc, const float *sa, int64_t i, float sb) {
    float s = sa ? sa[i] : 1.0f;
    return (float)acc * s * sb;
}

/* y = x w in double: x [m, k], w [k, n]. */
static inline void l12_matmul_ref(const float *x, const float *w, double *y, int64_t m, int64_t n, int64_t k) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t t = 0; t < k; t++) s += (double)x[i * k + t] * w[t * n + j];
            y[i * n + j] = s;
        }
}

#endif
