/* kiln/quant.h — INT8 post-training quantization: the quantizers, the int8 kernels and the
 * `quantize` pass.
 *
 * Symmetric int8: a row of values v with absmax a gets the scale s = a / 127 and the codes
 * q = round(v / s) in [-127, 127] (-128 is never made, so negation is exact); v ~ q * s with
 * an error of at most s / 2 per element, the code computed as v * (127 / a) rounded half to
 * even. A row of zeros gets s = 0 and q = 0, as does a row whose 127 / a overflows (every
 * value below 127 / FLT_MAX ~ 3.7e-37). The quantizers are lab 12's units
 * (core/ir/quant_scale.c), as is the epilogue kn_i8_dequant (core/ir/quant_epilogue.c).
 *
 * Two products (the ops matmul_w8 and matmul_w8a8 of core/ir/ops.def, the kernels below):
 *   w8    the weight quantized per output channel (one scale per column of the product);
 *         the activations stay f32: c[i][j] = s_w[j] * sum_k x[i][k] * q_w[j][k], the int8
 *         codes widened to f32 inside the loop (dequantize in the loop, f32 accumulation).
 *   w8a8  the activations quantized too, per token (one scale per row of x, computed at run
 *         time from the row's absmax: dynamic): c[i][j] = s_x[i] s_w[j] sum_k q_x[i][k] q_w[j][k],
 *         the sum in int32 (exact: |q| <= 127, so K up to 133,000 cannot overflow), the two
 *         scales applied in the epilogue.
 *
 * w8a8-tensor (matmul_w8a8_tensor) is w8a8 with one activation scale for all of x: the naive
 * per-tensor baseline, kept to show what the per-token scales buy.
 *
 * The IR has no int8 dtype: the ops read the f32 weight and quantize it inside the kernel on
 * every run (O(K N), against the product's O(M K N)); the numbers are those of a stored int8
 * weight, the memory is not saved yet. For a few rows that dominates: on the CPU (2-core
 * AMD EPYC, 2026-11-27) quantizing a [768, 3072] weight takes 30-60 ms, the int8 product of
 * one row with it under 1 ms; a prefill's 8192 rows take ~250 ms (5x kiln's f32 GEMM, make
 * bench-int8). Storing the codes once per program is the next step.
 *
 * The CPU products (core/ir/gemm_i8.c) pack their operands and run a microkernel chosen at
 * run time for the CPU (AVX-512 VNNI, AVX-VNNI, AVX2 or plain C), all giving the same bits;
 * on CUDA (core/runtime/cuda_quant.cu) the int8 product is cuBLASLt's (IMMA), the same bits
 * again. */
#ifndef KILN_QUANT_H
#define KILN_QUANT_H

#include <stdbool.h>
#include <stdint.h>

#include "kiln/base.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KN_QMAX 127

/* Quantize each of the `rows` rows of x (row-major, `cols` floats each, row stride ld) into
 * q (rows x cols int8, contiguous) and scale[rows]. Non-finite input: scale becomes NaN
 * (the product then reads NaN, as the f32 product would). */
void kn_quant_rows_i8(const float *x, int64_t rows, int64_t cols, int64_t ld, int8_t *q, float *scale);
/* Quantize the columns of w [k, n] (row-major) into q [n][k] (each column contiguous, the
 * layout the kernels read) and scale[n]. */
void kn_quant_cols_i8(const float *w, int64_t k, int64_t n, int8_t *q, float *scale);
/* c [m, n] (f32) = sa[i] * sb[j] * sum_k a[i][k] b[j][k]: a [m][k], b [n][k] int8 codes in
 * [-127, 127] (-128 is never made; the avx2 path's sign trick relies on it), int32
 * accumulation (exact), the epilogue kn_i8_dequant; sa NULL: 1 per row. Packs b and a
 * (core/ir/gemm_i8.c), then runs the fastest microkernel this CPU has, threaded
 * (kn_k_parallel). Every path gives bitwise the same c. KN_ERR_OOM when the packed copies
 * cannot be allocated (c untouched). */
kn_status kn_gemm_i8(const int8_t *a, const int8_t *b, const float *sa, const float *sb, float *c, int64_t m, int64_t n,
                     int64_t k);
/* A weight's codes b [n][k] packed once for many products (kn_gemm_i8_packed): panels of 32
 * columns, k in groups of four (zero-padded), and 128 * each column's code sum (the
 * vpdpbusd kernels' correction). About n * k bytes. */
typedef struct kn_i8_weight {
    int64_t n, k, kg, np; /* kg = ceil(k / 4) groups, np = ceil(n / 32) panels */
    int8_t *panels;
    int32_t *comp;
} kn_i8_weight;
/* Pack b [n][k] into w (free with kn_i8_weight_free). KN_ERR_ARG / KN_ERR_OOM, w zeroed. */
kn_status kn_i8_weight_pack(const int8_t *b, int64_t n, int64_t k, kn_i8_weight *w);
void kn_i8_weight_free(kn_i8_weight *w);
/* kn_gemm_i8 with the weight packed: c [m, w->n] from a [m][w->k]. */
kn_status kn_gemm_i8_packed(const int8_t *a, const kn_i8_weight *w, const float *sa, const float *sb, float *c,
                            int64_t m);
/* The CPU paths of kn_gemm_i8: "generic" (plain C, any CPU), "avx2" (vpmaddubsw),
 * "avxvnni" and "avx512vnni" (vpdpbusd on 256/512 bits), chosen at run time. kn_gemm_i8_path:
 * the one products take now; kn_gemm_i8_set_path: force one ("auto" or NULL: the best this
 * CPU has again; KN_ERR_UNSUPPORTED when this CPU lacks it, KN_ERR_ARG for an unknown name;
 * not thread-safe against concurrent products: for tests and benchmarks);
 * kn_gemm_i8_paths: how many paths this CPU can run, their names into names[0..cap). */
const char *kn_gemm_i8_path(void);
kn_status kn_gemm_i8_set_path(const char *name);
int kn_gemm_i8_paths(const char **names, int cap);
/* The dequantizing epilogue of the int8 product, shared by every kernel that makes int32
 * sums (the CPU microkernels and, as the reference, the GPU's): rows x cols int32 sums acc
 * (row stride ldacc) become c[i][j] = (float)acc[i][j] * sa[i] * sb[j] (row stride ldc),
 * the multiplications in that order, in f32. sa NULL: 1 for every row. sa/sb are indexed
 * from the tile's first row/column (callers pass sa + i0, sb + j0). */
void kn_i8_dequant(const int32_t *acc, int64_t rows, int64_t cols, int64_t ldacc, const float *sa, const float *sb,
                   float *c, int64_t ldc);
/* c [m, n] = sb[j] * sum_k x[i][k] b[j][k]: x f32 [m][k], b [n][k] int8, f32 accumulation
 * (eight lanes of partial sums, vectorized at the baseline ISA; not tuned further). */
void kn_gemm_w8(const float *x, const int8_t *b, const float *sb, float *c, int64_t m, int64_t n, int64_t k);

/* The pass itself (kn_pass_quantize) is declared in kiln/passes.h, the held-out loss that
 * compares the programs (kn_gpt_heldout_loss) in kiln/nn.h: this header is the kernels'. */

/* ---------------------------------------------------------------- calibration and SmoothQuant
 * (core/ir/quant_calib.c; the calibrated programs: core/nn/quant_eval.c, kn_gpt_heldout_loss_q)
 *
 * Static activation scales: one clipping threshold amax per product, measured once on
 * calibration batches of the training split, then baked into the graph as the attribute
 * `value` of matmul_w8a8_static (ops.def): x is quantized with the step amax / 127, values
 * beyond +-amax clip to +-127. Three observers choose amax from what the batches showed:
 *   minmax      the largest |x| seen (no clipping, the coarsest step);
 *   percentile  the P-th percentile of |x| (default 99.99; the rare values above it clip);
 *   mse         the threshold whose quantization error (rounding inside, clipping outside)
 *               over the seen |x| is least.
 * Percentile and MSE read a histogram of |x| over [0, absmax] (KN_CALIB_BINS bins, filled on
 * a second pass over the batches, once absmax is known).
 *
 * SmoothQuant (Xiao et al., 2023): a product x W whose x has outlier channels j is the same
 * function as (x / s) (s W) for any s > 0 per input channel: s_j = max|x_j|^alpha /
 * max|W_j|^(1 - alpha) moves part of the activations' range into the weight, so that per-token
 * scales of x / s are not set by a few channels. When x is a layernorm's output, x / s is that
 * layernorm with gain / s and bias / s: the folding changes parameters only, not the graph. */
#define KN_CALIB_BINS 2048
#define KN_CALIB_PCT_DEFAULT 99.99

typedef enum kn_calib_observer { KN_CALIB_MINMAX, KN_CALIB_PERCENTILE, KN_CALIB_MSE } kn_calib_observer;

/* A histogram of |x| over [0, absmax]: bin b counts the values in [b w, (b + 1) w), w =
 * absmax / KN_CALIB_BINS (values above absmax count in the last bin, non-finite ones not at
 * all). */
typedef struct kn_calib_hist {
    float absmax;
    int64_t total;
    int64_t count[KN_CALIB_BINS];
} kn_calib_hist;

/* What quantize:w8a8-static and quantize:w8a8-smooth ask for (kn_quantize_parse_arg). */
typedef enum kn_quant_scheme {
    KN_QUANT_W8, KN_QUANT_W8A8, KN_QUANT_W8A8_TENSOR, KN_QUANT_W8A8_STATIC, KN_QUANT_W8A8_SMOOTH
} kn_quant_scheme;
typedef struct kn_quant_arg {
    kn_quant_scheme scheme;
    kn_calib_observer observer; /* static: default minmax */
    double percentile;          /* static, percentile: in (0, 100], default KN_CALIB_PCT_DEFAULT */
    double alpha;               /* smooth: in [0, 1], default 0.5 */
} kn_quant_arg;

/* Parse the option of the pass quantize: "w8", "w8a8", "w8a8-tensor",
 * "w8a8-static[:minmax|:percentile[:P]|:mse]", "w8a8-smooth[:ALPHA]". KN_ERR_ARG naming the
 * bad part (an unknown observer, P outside (0, 100], ALPHA outside [0, 1]). */
kn_status kn_quantize_parse_arg(const char *arg, kn_quant_arg *out);
/* "minmax", "percentile", "percentile:P", "mse" into *obs (and *pct); KN_ERR_ARG otherwise. */
kn_status kn_calib_observer_parse(const char *s, kn_calib_observer *obs, double *pct);
const char *kn_calib_observer_name(kn_calib_observer obs);

/* The running max of |x| over n values (prev: the max so far); non-finite values are skipped. */
float kn_calib_absmax(const float *x, int64_t n, float prev);
/* amax[j] = max(amax[j], max_i |x[i][j]|) over rows x k values (row-major): per input channel. */
void kn_calib_channel_absmax(const float *x, int64_t rows, int64_t k, float *amax);
/* An empty histogram over [0, absmax] (absmax >= 0), and adding n values to it. */
void kn_calib_hist_init(kn_calib_hist *h, float absmax);
void kn_calib_hist_add(kn_calib_hist *h, const float *x, int64_t n);
/* The observer's clipping threshold from h: minmax h->absmax; percentile the smallest t with
 * at least pct% of the values at or below t (linear inside a bin); mse the bin edge t that
 * minimizes sum over bins of count * err(centre, t), err = centre^2 for a centre that rounds
 * to 0, step^2 / 12 for one inside (+-t), (centre - t)^2 for one that clips (step = t / 127).
 * An empty histogram gives 0. KN_ERR_ARG: pct outside (0, 100]. */
kn_status kn_calib_threshold(const kn_calib_hist *h, kn_calib_observer obs, double pct, float *amax);
/* Codes of x with the clipping threshold amax: q = round(x * 127 / amax) clamped to +-127 (the
 * same arithmetic as kn_quant_rows_i8, whose threshold is the row's absmax); amax 0: q = 0.
 * Returns false (and q = 0) when x holds a non-finite value. */
bool kn_quant_static_i8(const float *x, int64_t n, float amax, int8_t *q);

/* SmoothQuant's factors: s[j] = xmax[j]^alpha / wmax[j]^(1 - alpha) for j < k, clamped to
 * [1e-5, 1e5]; 1 where xmax[j] or wmax[j] is 0 or not finite (nothing to move). KN_ERR_ARG:
 * alpha outside [0, 1]. */
kn_status kn_smooth_scales(const float *xmax, const float *wmax, int64_t k, double alpha, float *s);
/* wmax[j] = max(wmax[j], max |W_j|) over input channel j of a product's weight: w [k, n]
 * (tb = false: row j) or [n, k] (tb = true: column j). */
void kn_smooth_weight_absmax(const float *w, int64_t k, int64_t n, bool tb, float *wmax);
/* The folding: gain[j] /= s[j] and bias[j] /= s[j] (a layernorm's; bias NULL: none), and
 * input channel j of a weight (layout as above) times s[j]. Together: the same function. */
void kn_smooth_fold_norm(float *gain, float *bias, int64_t k, const float *s);
void kn_smooth_fold_weight(float *w, int64_t k, int64_t n, bool tb, const float *s);

/* Whether node i of g is a product the pass quantize rewrites: matmul, ta = 0, f32 x, its
 * right operand a 2-D f32 param (the weight). */
struct kn_graph;
bool kn_quantize_candidate(const struct kn_graph *g, int32_t i);
/* Static w8a8 from a calibration table: every candidate product of g whose weight is
 * names[t] becomes matmul_w8a8_static with value = amax[t]. KN_ERR_ARG: a candidate whose
 * weight has no entry (uncalibrated), or a negative or non-finite amax. */
struct kn_pass_stats;
kn_status kn_quantize_static(struct kn_graph *g, const char *const *names, const float *amax, int n,
                             struct kn_pass_stats *st);

/* The held-out loss of kn_gpt_heldout_loss (kiln/nn.h), with what the calibrated schemes and
 * the outlier demonstration need: calibration batches from `calib` (the training split; B x T
 * windows drawn by kn_batch_sample, stream 2) and the injection of outlier channels. */
typedef struct kn_quant_eval_opts {
    const int32_t *calib;   /* calibration tokens (the training split) */
    int64_t ncalib;
    int calib_batches;      /* >= 1 */
    double outliers;        /* > 1: multiply KN_OUTLIER_CHANNELS channels of every layernorm that
                             * feeds only quantizable products by this factor and divide the
                             * products' matching weight rows by it (the same function, with
                             * outlier channels in the products' input); 0 or 1: none */
    char outlier_note[160]; /* out: what the outlier injection did ("" if nothing) */
    char smooth_note[256];  /* out: what the smoothing folded and left ("" if nothing) */
} kn_quant_eval_opts;
#define KN_OUTLIER_CHANNELS 3
struct kn_gpt;
/* passes as for kn_gpt_heldout_loss, plus "quantize:w8a8-static[:OBS]" and
 * "quantize:w8a8-smooth[:ALPHA]" alone (they need q; NULL q: KN_ERR_ARG). */
kn_status kn_gpt_heldout_loss_q(const struct kn_gpt *g, const char *passes, kn_quant_eval_opts *q,
                                const int32_t *tokens, int64_t n, int B, int T, uint64_t seed, int nbatches,
                                double *loss);

#ifdef __cplusplus
}
#endif
#endif
