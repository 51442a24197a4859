/* quant_units.c — lab 12's measurements for `make report LAB=12` (plots/report.sh): the
 * quantizer and the epilogue of the libkiln.a it is linked with (the student's lab 12
 * units there), on the weights of a trained checkpoint.
 *
 *   quant_units CKPT > units.tsv
 *
 * For every 2-D weight of CKPT: the relative error ||W - dq(q(W))|| / ||W|| of int8 codes
 * with one scale per tensor, one per input row and one per output channel (a column of W,
 * the scale kiln's int8 products use). Then the largest MLP weight's product against a
 * batch of activations with an outlier channel: the w8a8 product's error with per-token and
 * with per-tensor activation scales, and the time of each piece (the best of 7 runs):
 * quantizing the weight (kn_quant_cols_i8), the activations (kn_quant_rows_i8), the int8
 * product with its epilogue (kn_gemm_i8), against kiln's f32 product (kn_k_matmul_f32).
 * Lines: "err NAME KxN per_tensor per_row per_channel", "prod M K N err_token err_tensor",
 * "time WHAT ms". Stops (exit 1) with the skeleton's message when a unit is not written. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln/data.h"
#include "kiln/gemm.h"
#include "kiln/quant.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void stop_if_skeleton(void) {
    const char *m = kn_not_implemented_seen();
    if (m) {
        fprintf(stderr, "quant_units: %s\n", m);
        exit(1);
    }
}

/* ||w - dq||_2 / ||w||_2, dq[i][j] = q[idx(i,j)] * s[sidx(i,j)] for the three layouts. */
enum layout { PER_TENSOR, PER_ROW, PER_CHANNEL };
static double rel_error(const float *w, int64_t k, int64_t n, enum layout l, int8_t *q, float *s) {
    if (l == PER_TENSOR) kn_quant_rows_i8(w, 1, k * n, k * n, q, s);
    else if (l == PER_ROW) kn_quant_rows_i8(w, k, n, n, q, s);
    else kn_quant_cols_i8(w, k, n, q, s);
    stop_if_skeleton();
    double num = 0, den = 0;
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = 0; j < n; j++) {
            double dq = l == PER_TENSOR ? q[i * n + j] * (double)s[0]
                      : l == PER_ROW    ? q[i * n + j] * (double)s[i]
                                        : q[j * k + i] * (double)s[j];
            double d = w[i * n + j] - dq;
            num += d * d;
            den += (double)w[i * n + j] * w[i * n + j];
        }
    return den > 0 ? sqrt(num / den) : 0;
}

static double l2_rel(const float *c, const float *ref, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)c[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: quant_units CKPT\n");
        return 2;
    }
    kn_safetensors st;
    if (kn_safetensors_read(argv[1], &st) != KN_OK) {
        fprintf(stderr, "quant_units: %s\n", kn_last_error());
        return 1;
    }
    const kn_st_tensor *big = NULL;
    for (int t = 0; t < st.n_tensors; t++) {
        const kn_st_tensor *x = &st.tensors[t];
        if (x->ndim != 2 || x->dtype != KN_DT_F32 || !strstr(x->name, ".weight")) continue;
        int64_t k = x->shape[0], n = x->shape[1];
        int8_t *q = malloc((size_t)(k * n));
        float *s = malloc((size_t)(k > n ? k : n) * sizeof *s);
        /* the file's bytes are 8-byte aligned in the data section: copy to be sure */
        float *w = malloc((size_t)(k * n) * sizeof *w);
        memcpy(w, x->data, (size_t)(k * n) * sizeof *w);
        printf("err\t%s\t%lldx%lld\t%.6g\t%.6g\t%.6g\n", x->name, (long long)k, (long long)n,
               rel_error(w, k, n, PER_TENSOR, q, s), rel_error(w, k, n, PER_ROW, q, s),
               rel_error(w, k, n, PER_CHANNEL, q, s));
        free(q), free(s), free(w);
        if (strstr(x->name, "mlp.c_fc.weight") && (!big || x->shape[0] * x->shape[1] > big->shape[0] * big->shape[1]))
            big = x;
    }
    if (!big) {
        fprintf(stderr, "quant_units: %s has no mlp.c_fc.weight (not a kiln GPT checkpoint?)\n", argv[1]);
        return 1;
    }
    /* y = x W for a batch of M tokens, the MLP's first product */
    const int64_t m = 256, k = big->shape[0], n = big->shape[1];
    float *w = malloc((size_t)(k * n) * sizeof *w), *x = malloc((size_t)(m * k) * sizeof *x);
    float *y = malloc((size_t)(m * n) * sizeof *y), *ref = malloc((size_t)(m * n) * sizeof *ref);
    float *sw = malloc((size_t)n * sizeof *sw), *sx = malloc((size_t)m * sizeof *sx);
    int8_t *qw = malloc((size_t)(k * n)), *qx = malloc((size_t)(m * k));
    memcpy(w, big->data, (size_t)(k * n) * sizeof *w);
    unsigned seed = 1;
    for (int64_t i = 0; i < m * k; i++) {
        seed = seed * 1103515245u + 12345u;
        x[i] = (float)((seed >> 8) % 20001) / 10000.0f - 1.0f;
    }
    for (int64_t i = 0; i < m; i += 16) x[i * k + 3] = 60.0f; /* an outlier channel in a few tokens */
    kn_k_matmul_f32(x, w, ref, m, n, k, false, false);
    kn_quant_cols_i8(w, k, n, qw, sw);
    kn_quant_rows_i8(x, m, k, k, qx, sx);
    kn_gemm_i8(qx, qw, sx, sw, y, m, n, k);
    stop_if_skeleton();
    double err_token = l2_rel(y, ref, m * n);
    kn_quant_rows_i8(x, 1, m * k, m * k, qx, sx);
    for (int64_t i = 1; i < m; i++) sx[i] = sx[0];
    kn_gemm_i8(qx, qw, sx, sw, y, m, n, k);
    double err_tensor = l2_rel(y, ref, m * n);
    printf("prod\t%lld\t%lld\t%lld\t%.6g\t%.6g\n", (long long)m, (long long)k, (long long)n, err_token, err_tensor);
    double best[4] = {1e30, 1e30, 1e30, 1e30};
    for (int r = 0; r < 7; r++) {
        double t0 = now();
        kn_quant_cols_i8(w, k, n, qw, sw);
        double t1 = now();
        kn_quant_rows_i8(x, m, k, k, qx, sx);
        double t2 = now();
        kn_gemm_i8(qx, qw, sx, sw, y, m, n, k);
        double t3 = now();
        kn_k_matmul_f32(x, w, ref, m, n, k, false, false);
        double t4 = now();
        double d[4] = {t1 - t0, t2 - t1, t3 - t2, t4 - t3};
        for (int i = 0; i < 4; i++)
            if (d[i] < best[i]) best[i] = d[i];
    }
    const char *what[4] = {"quantize the weight (kn_quant_cols_i8)", "quantize the activations (kn_quant_rows_i8)",
                           "int8 product + epilogue (kn_gemm_i8)", "f32 product (kn_k_matmul_f32)"};
    for (int i = 0; i < 4; i++) printf("time\t%s\t%.4f\n", what[i], 1e3 * best[i]);
    free(w), free(x), free(y), free(ref), free(sw), free(sx), free(qw), free(qx);
    kn_safetensors_free(&st);
    return 0;
}
