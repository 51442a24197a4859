/* quant_calib.c — static activation scales from calibration (the min-max, percentile and
 * MSE observers), SmoothQuant's factors and folding, and the op matmul_w8a8_static on the CPU.
 *
 * kiln/quant.h states the arithmetic. The observers read what the calibration batches showed
 * of one product's input: its absmax (minmax) or a histogram of |x| over [0, absmax]
 * (percentile, mse). matmul_w8a8_static is w8a8_tensor with the threshold fixed: its
 * attribute `value` (amax) replaces the absmax of the run's own x, so given the same
 * threshold the two ops make the same codes and the same product (tests/core/
 * test_quant_calib.c checks that). The weight is quantized per output channel and the int8
 * product made by the shared kernels of core/ir/quant.c (kn_quant_rows_i8 / kn_quant_cols_i8,
 * kn_gemm_i8). There is no CUDA kernel: the CUDA table (core/runtime/cuda_ops.cu) says so,
 * and a GPU program with this op is refused at compile time. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir_impl.h"
#include "kiln/kernels.h"
#include "kiln/quant.h"

/* ---------------------------------------------------------------- observers */

const char *kn_calib_observer_name(kn_calib_observer obs) {
    return obs == KN_CALIB_MINMAX ? "minmax" : obs == KN_CALIB_PERCENTILE ? "percentile" : "mse";
}

/* A number that is all of s (no trailing text), into *v. */
static bool parse_num(const char *s, double *v) {
    char *end;
    if (!s || !*s) return false;
    *v = strtod(s, &end);
    return *end == '\0' && isfinite(*v);
}

kn_status kn_calib_observer_parse(const char *s, kn_calib_observer *obs, double *pct) {
    if (!s || !obs || !pct) return kn_error(KN_ERR_ARG, "kn_calib_observer_parse: NULL argument");
    *pct = KN_CALIB_PCT_DEFAULT;
    if (!strcmp(s, "minmax")) *obs = KN_CALIB_MINMAX;
    else if (!strcmp(s, "mse")) *obs = KN_CALIB_MSE;
    else if (!strcmp(s, "percentile")) *obs = KN_CALIB_PERCENTILE;
    else if (!strncmp(s, "percentile:", 11)) {
        *obs = KN_CALIB_PERCENTILE;
        if (!parse_num(s + 11, pct) || !(*pct > 0 && *pct <= 100))
            return kn_error(KN_ERR_ARG, "calibration observer '%s': the percentile must be a number in (0, 100]", s);
    } else {
        return kn_error(KN_ERR_ARG, "unknown calibration observer '%s' (known: minmax, percentile[:P], mse)", s);
    }
    return KN_OK;
}

float kn_calib_absmax(const float *x, int64_t n, float prev) {
    float a = prev;
    for (int64_t i = 0; i < n; i++) {
        float v = fabsf(x[i]);
        if (isfinite(v) && v > a) a = v;
    }
    return a;
}

void kn_calib_channel_absmax(const float *x, int64_t rows, int64_t k, float *amax) {
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < k; j++) {
            float v = fabsf(x[i * k + j]);
            if (isfinite(v) && v > amax[j]) amax[j] = v;
        }
}

void kn_calib_hist_init(kn_calib_hist *h, float absmax) {
    memset(h, 0, sizeof *h);
    h->absmax = absmax > 0 && isfinite(absmax) ? absmax : 0;
}

void kn_calib_hist_add(kn_calib_hist *h, const float *x, int64_t n) {
    const double per = h->absmax > 0 ? KN_CALIB_BINS / (double)h->absmax : 0;
    for (int64_t i = 0; i < n; i++) {
        double v = fabs((double)x[i]);
        if (!isfinite(v)) continue;
        double b = v * per;
        int64_t bin = b >= KN_CALIB_BINS ? KN_CALIB_BINS - 1 : (int64_t)b;
        h->count[bin]++;
        h->total++;
    }
}

/* The quantization error of a value v under the threshold t (step t / 127), as the MSE
 * observer counts it (kiln/quant.h). */
static double q_err(double v, double t) {
    if (v > t) return (v - t) * (v - t);
    double step = t / KN_QMAX;
    return v < step / 2 ? v * v : step * step / 12.0;
}

kn_status kn_calib_threshold(const kn_calib_hist *h, kn_calib_observer obs, double pct, float *amax) {
    if (!h || !amax) return kn_error(KN_ERR_ARG, "kn_calib_threshold: NULL argument");
    if (obs == KN_CALIB_PERCENTILE && !(pct > 0 && pct <= 100))
        return kn_error(KN_ERR_ARG, "kn_calib_threshold: percentile %g outside (0, 100]", pct);
    *amax = 0;
    if (h->total == 0 || h->absmax <= 0) return KN_OK;
    const double w = (double)h->absmax / KN_CALIB_BINS;
    if (obs == KN_CALIB_MINMAX) {
        *amax = h->absmax;
    } else if (obs == KN_CALIB_PERCENTILE) {
        const double want = pct / 100.0 * (double)h->total;
        double seen = 0;
        int64_t b = 0;
        while (b < KN_CALIB_BINS - 1 && seen + (double)h->count[b] < want) seen += (double)h->count[b++];
        double frac = h->count[b] ? (want - seen) / (double)h->count[b] : 1.0;
        if (frac > 1) frac = 1;
        *amax = (float)((double)b * w + frac * w);
    } else {
        double best = INFINITY;
        int64_t arg = KN_CALIB_BINS;
        for (int64_t e = 1; e <= KN_CALIB_BINS; e++) { /* t = e w, the upper edge of bin e - 1 */
            const double t = (double)e * w;
            double err = 0;
            for (int64_t b = 0; b < KN_CALIB_BINS; b++)
                if (h->count[b]) err += (double)h->count[b] * q_err(((double)b + 0.5) * w, t);
            if (err < best) best = err, arg = e;
        }
        *amax = (float)((double)arg * w);
    }
    return KN_OK;
}

bool kn_quant_static_i8(const float *x, int64_t n, float amax, int8_t *q) {
    const float inv = amax > 0 ? KN_QMAX / amax : 0;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) {
            memset(q, 0, (size_t)n);
            return false;
        }
    for (int64_t i = 0; i < n; i++) {
        float r = nearbyintf(x[i] * inv); /* kn_quant_rows_i8's rounding, with the threshold given */
        if (r > KN_QMAX) r = KN_QMAX;
        if (r < -KN_QMAX) r = -KN_QMAX;
        q[i] = (int8_t)r;
    }
    return true;
}

/* ---------------------------------------------------------------- SmoothQuant */

kn_status kn_smooth_scales(const float *xmax, const float *wmax, int64_t k, double alpha, float *s) {
    if (!xmax || !wmax || !s || k < 0) return kn_error(KN_ERR_ARG, "kn_smooth_scales: NULL argument or k < 0");
    if (!(alpha >= 0 && alpha <= 1)) return kn_error(KN_ERR_ARG, "SmoothQuant's alpha %g is outside [0, 1]", alpha);
    for (int64_t j = 0; j < k; j++) {
        double a = xmax[j], b = wmax[j];
        if (!(a > 0 && b > 0 && isfinite(a) && isfinite(b))) {
            s[j] = 1;
            continue;
        }
        double v = pow(a, alpha) / pow(b, 1 - alpha);
        s[j] = (float)(v < 1e-5 ? 1e-5 : v > 1e5 ? 1e5 : v);
    }
    return KN_OK;
}

void kn_smooth_weight_absmax(const float *w, int64_t k, int64_t n, bool tb, float *wmax) {
    for (int64_t j = 0; j < k; j++) {
        float a = wmax[j];
        for (int64_t c = 0; c < n; c++) {
            float v = fabsf(tb ? w[c * k + j] : w[j * n + c]);
            if (isfinite(v) && v > a) a = v;
        }
        wmax[j] = a;
    }
}

void kn_smooth_fold_norm(float *gain, float *bias, int64_t k, const float *s) {
    for (int64_t j = 0; j < k; j++) {
        gain[j] /= s[j];
        if (bias) bias[j] /= s[j];
    }
}

void kn_smooth_fold_weight(float *w, int64_t k, int64_t n, bool tb, const float *s) {
    for (int64_t j = 0; j < k; j++)
        for (int64_t c = 0; c < n; c++) *(tb ? &w[c * k + j] : &w[j * n + c]) *= s[j];
}

/* ---------------------------------------------------------------- the op */

kn_status infer_matmul_q_static(const kn_node *n, const kn_type *const *in, kn_type *out, char *msg, size_t msz) {
    if (!(n->attrs.value >= 0) || !isfinite(n->attrs.value)) {
        snprintf(msg, msz, "matmul_w8a8_static's value (x's clipping threshold) must be finite and >= 0 (got %g)",
                 n->attrs.value);
        return KN_ERR_ARG;
    }
    return infer_matmul_q(n, in, out, msg, msz);
}

kn_status kern_matmul_q_static(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    if (n->op != KN_OP_MATMUL_W8A8_STATIC)
        return kn_error(KN_ERR_UNSUPPORTED, "%s: the cpu backend's kern_matmul_q_static does not compute this op",
                        kn_op_name(n->op));
    const kn_tensor *x = in[0], *w = in[1];
    if (x->dtype != KN_DT_F32 || w->dtype != KN_DT_F32)
        return kn_error(KN_ERR_UNSUPPORTED, "matmul_w8a8_static: f32 operands only (got %s)", kn_dtype_name(x->dtype));
    const bool tb = n->attrs.tb;
    const int64_t k = x->shape[x->ndim - 1], nn = tb ? w->shape[0] : w->shape[1];
    const int64_t m = kn_tensor_numel(x) / (k ? k : 1);
    if (*out) {
        if (kn_tensor_numel(*out) != m * nn || (*out)->dtype != KN_DT_F32 || !kn_tensor_is_contiguous(*out))
            return kn_error(KN_ERR_INTERNAL, "matmul_w8a8_static: the output given is not of the node's type");
    } else {
        KN_TRY(kn_tensor_empty(out, n->type.dtype, n->type.ndim, n->type.shape));
    }
    int8_t *qw = kn_malloc((size_t)(nn * k) + 1), *qx = kn_malloc((size_t)(m * k) + 1);
    float *sw = kn_malloc((size_t)(nn + 1) * sizeof *sw), *sx = kn_malloc((size_t)(m + 1) * sizeof *sx);
    if (!qw || !qx || !sw || !sx) {
        kn_free(qw); kn_free(qx); kn_free(sw); kn_free(sx);
        kn_tensor_free(*out);
        *out = NULL;
        return kn_error(KN_ERR_OOM, "matmul_w8a8_static: out of memory for the int8 operands");
    }
    const float *wd = kn_tensor_data(w);
    if (tb) kn_quant_rows_i8(wd, nn, k, k, qw, sw); /* [N, K]: a row is an output channel */
    else kn_quant_cols_i8(wd, k, nn, qw, sw);
    const float amax = (float)n->attrs.value;
    /* kn_quant_rows_i8's scale for a row whose absmax is amax; NaN (as the f32 product) for a non-finite x */
    const float s = kn_quant_static_i8(kn_tensor_data(x), m * k, amax, qx) ? amax / KN_QMAX : NAN;
    for (int64_t i = 0; i < m; i++) sx[i] = s;
    kn_gemm_i8(qx, qw, sx, sw, kn_tensor_data(*out), m, nn, k);
    kn_free(qw); kn_free(qx); kn_free(sw); kn_free(sx);
    return KN_OK;
}
