/* rowmath.h — the arithmetic of the row ops (softmax, layernorm, cross-entropy), written once.
 *
 * A row op makes statistics of a row (a max, sums), then writes each element from them. How
 * the sums are made differs by backend, and must: the CPU kernels (core/tensor/
 * kernels_train.inc) add the row in a loop, the CUDA kernels (core/runtime/cuda_norm.cu,
 * cuda_cross_entropy.cu) add per-thread partials through shuffles or shared memory, the decomposition
 * (core/passes/decompose.c) builds max/sum reductions the scheduler fuses. What must not
 * differ is the formula that turns the sums into a statistic and the statistics into an
 * element; those are these functions, compiled by both the host compiler and nvcc
 * (static inline __host__ __device__: KN_SC_FN of kiln/scalar.h). decompose.c writes the
 * same formulas as graph ops, in the same order of operations, and names the function it
 * follows at each one; tests/core/test_rowmath.c checks the three agree.
 *
 * Every statistic is made in double from the row's sums (also for float rows), then
 * rounded once to the row's type T; each element is computed in T.
 *
 *   layernorm   mean = kn_rm_mean(sum x, c)
 *               rstd = kn_rm_rstd_S(sum (x - mean)^2, c, eps)          (1 / sqrt(var + eps))
 *               y    = kn_rm_affine_S(x, mean, rstd, w, b)             ((x - mean) rstd w + b)
 *               y    = kn_rm_normalize_S(x, mean, rstd)                (normalize: no affine)
 *   its dx      g = dy w, xh = kn_rm_normalize_S(x, mean, rstd),
 *               mg = kn_rm_mean(sum g, c), mgx = kn_rm_mean(sum g xh, c) (rounded to T)
 *               dx   = kn_rm_layernorm_dx_S(g, xh, mg, mgx, rstd)      (rstd (g - mg - xh mgx))
 *   softmax dx  dx   = kn_rm_softmax_dx_S(y, dy, sum dy y)             (y (dy - s))
 *   log_softmax dx   = kn_rm_log_softmax_dx_S(dy, exp(y), sum dy)      (dy - exp(y) s)
 *   cross-entropy  lse = kn_rm_lse(sum exp(x - max), max)              (log(s) + max)
 *               loss = mean over rows of (lse - x[target])
 *               scale = kn_rm_ce_scale_S(dloss, rows)                  (dloss / rows)
 *               dx   = exp(x - lse) scale, minus scale at the target */
#ifndef KILN_TENSOR_ROWMATH_H
#define KILN_TENSOR_ROWMATH_H

#include <stdint.h>

#include "kiln/scalar.h"

/* The mean of a row of c elements from its sum (c > 0). */
KN_SC_FN double kn_rm_mean(double sum, int64_t c) { return sum / (double)c; }
/* log(sum exp(x - max)) + max from s = sum exp(x - max) and the max. */
KN_SC_FN double kn_rm_lse(double s, double max) { return log(s) + max; }

#define KN_RM_DEFINE(T, S)                                                                       \
    /* 1 / sqrt(var + eps), var = sqdev / c: sqdev the sum of (x - mean)^2 over the row */      \
    KN_SC_FN T kn_rm_rstd_##S(double sqdev, int64_t c, double eps) {                            \
        return (T)(1.0 / sqrt(sqdev / (double)c + eps));                                         \
    }                                                                                            \
    KN_SC_FN T kn_rm_normalize_##S(T x, T mean, T rstd) { return (x - mean) * rstd; }           \
    KN_SC_FN T kn_rm_affine_##S(T x, T mean, T rstd, T w, T b) { return (x - mean) * rstd * w + b; } \
    KN_SC_FN T kn_rm_layernorm_dx_##S(T g, T xh, T mg, T mgx, T rstd) { return rstd * (g - mg - xh * mgx); } \
    KN_SC_FN T kn_rm_softmax_dx_##S(T y, T dy, T s) { return y * (dy - s); }                    \
    KN_SC_FN T kn_rm_log_softmax_dx_##S(T dy, T ey, T s) { return dy - ey * s; }                \
    /* the loss's gradient per logit: dloss / rows (0 for no rows) */                            \
    KN_SC_FN T kn_rm_ce_scale_##S(T dloss, int64_t rows) {                                       \
        return rows > 0 ? (T)((double)dloss / (double)rows) : (T)0;                              \
    }

KN_RM_DEFINE(float, f32)
KN_RM_DEFINE(double, f64)
#undef KN_RM_DEFINE

#endif /* KILN_TENSOR_ROWMATH_H */
