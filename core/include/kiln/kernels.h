/* kiln/kernels.h — the raw CPU kernels behind the IR interpreter and eager mode.
 *
 * These work on plain contiguous row-major buffers, not on kn_tensor: the caller (the op
 * kernels of core/ir/eval.c) has already checked dtypes and shapes and allocated the
 * result. Each kernel exists for float (_f32) and double (_f64) and computes in its own
 * type (reductions over many elements and normalization statistics accumulate in
 * double), with no per-element dtype dispatch in the hot loops: this is what makes
 * training a small GPT on the CPU take minutes, not hours.
 *
 * Determinism: every kernel is a fixed sequence of operations for given sizes, so the
 * same inputs give bitwise the same outputs, whoever calls it (eager or interpreted).
 *
 * Implemented in core/tensor/kernels_train.c (+ kernels_train.inc and kernels_matmul.inc, the type templates). */
#ifndef KILN_KERNELS_H
#define KILN_KERNELS_H

#include "kiln/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Copy a strided array into another (both in elements of esize bytes: 1, 2, 4 or 8):
 * dst[i0*dstr0 + ...] = src[i0*sstr0 + ...] for every index of shape. Strides may be 0
 * on the source (broadcast). ndim 0 copies one element. */
void kn_k_strided_copy(size_t esize, int ndim, const int64_t *shape, const void *src,
                       const int64_t *sstr, void *dst, const int64_t *dstr);

#define KN_K_DECLARE(T, S)                                                                 \
    /* y = op(x) for every kn_unary_op; y may equal x. */                                 \
    void kn_k_unary_##S(kn_unary_op op, const T *x, T *y, int64_t n);                     \
    /* out = a op b (ADD SUB MUL DIV), out contiguous of shape; as/bs: element strides of \
     * a and b over that shape (0 where broadcast). */                                     \
    void kn_k_binary_##S(kn_binary_op op, int ndim, const int64_t *shape, const T *a,     \
                         const int64_t *as, const T *b, const int64_t *bs, T *out);        \
    /* dx = f'(x) dy, op's gradient column (kiln/pointwise.def; op must have one); dx    \
     * may equal dy or x. */                                                               \
    void kn_k_unary_grad_##S(kn_unary_op op, const T *dy, const T *x, T *dx, int64_t n);  \
    /* c[m,n] = op(a) @ op(b); a is [m,k] ([k,m] when ta), b is [k,n] ([n,k] when tb).    \
     * c is overwritten. */                                                                \
    void kn_k_matmul_##S(const T *a, const T *b, T *c, int64_t m, int64_t n, int64_t k,   \
                         bool ta, bool tb);                                                \
    /* x viewed as [outer, r, inner] reduced over r into y [outer, inner] (SUM MEAN MAX). \
     * r == 0: sum 0, mean NaN, max -inf. */                                              \
    void kn_k_reduce_##S(kn_reduce_op op, const T *x, T *y, int64_t outer, int64_t r,     \
                         int64_t inner);                                                   \
    /* Softmax (or log-softmax) of x viewed as [outer, n, inner] along n. */              \
    void kn_k_softmax_##S(const T *x, T *y, int64_t outer, int64_t n, int64_t inner,      \
                          bool log);                                                       \
    /* dx from dy and the forward output y: softmax: y*(dy - sum(dy*y));                 \
     * log-softmax: dy - exp(y)*sum(dy). */                                                \
    void kn_k_softmax_bwd_##S(const T *dy, const T *y, T *dx, int64_t outer, int64_t n,   \
                              int64_t inner, bool log);                                    \
    /* Rows of c: y = (x - mean) * rstd * w + b; w and b may both be NULL (normalize). */  \
    void kn_k_layernorm_##S(const T *x, const T *w, const T *b, T *y, int64_t rows,       \
                            int64_t c, double eps);                                        \
    /* dx of layernorm from dy, x, w (statistics recomputed). */                          \
    void kn_k_layernorm_dx_##S(const T *dy, const T *x, const T *w, T *dx, int64_t rows,  \
                               int64_t c, double eps);                                     \
    /* Mean over rows of -log_softmax(logits[row])[t[row]]; t is i32 or i64 (tdt). False  \
     * (with *bad = the offending row) when a target is outside [0, v). */                \
    bool kn_k_cross_entropy_##S(const T *logits, const void *t, kn_dtype tdt, int64_t rows, \
                                int64_t v, T *loss, int64_t *bad);                         \
    /* dlogits = (softmax(logits) - onehot(t)) * dloss / rows. */                         \
    bool kn_k_cross_entropy_bwd_##S(T dloss, const T *logits, const void *t, kn_dtype tdt, \
                                    int64_t rows, int64_t v, T *dlogits, int64_t *bad);    \
    /* Both of the above in one pass over the rows: *loss and dlogits (which may be logits \
     * itself), bitwise as the two; targets checked before anything is written. */        \
    bool kn_k_cross_entropy_fused_##S(T dloss, const T *logits, const void *t, kn_dtype tdt, \
                                      int64_t rows, int64_t v, T *loss, T *dlogits,       \
                                      int64_t *bad);                                       \
    /* out[i, :] = w[idx[i], :] for n indices (i32 or i64) into w [v, d]. */              \
    bool kn_k_embedding_##S(const T *w, int64_t v, int64_t d, const void *idx,            \
                            kn_dtype idt, int64_t n, T *out, int64_t *bad);                \
    /* dw = 0, then dw[idx[i], :] += dy[i, :] (scatter-add, in index order). */           \
    bool kn_k_embedding_grad_##S(const T *dy, const void *idx, kn_dtype idt, int64_t n,   \
                                 int64_t v, int64_t d, T *dw, int64_t *bad);               \
    /* y_i = x_i / (1 - p) when unit(word(seed, stream 0, offset + i)) >= p, else 0. */   \
    void kn_k_dropout_##S(const T *x, T *y, int64_t n, double p, uint64_t seed,           \
                          uint64_t offset);                                                \
    /* batch matrices [rows, cols]: y = x with y[r, c] = value where c > r + cols - rows. */ \
    void kn_k_causal_fill_##S(const T *x, T *y, int64_t batch, int64_t rows, int64_t cols, \
                              T value);                                                    \
    /* batch matrices [tq, tk]: row r is the softmax of x * scale over the columns        \
     * c <= r + tk - tq and 0 at the others (all 0 when none, or all of them -inf).       */ \
    void kn_k_causal_softmax_##S(const T *x, T *y, int64_t batch, int64_t tq, int64_t tk,  \
                                 T scale);                                                 \
    /* Its backward from dy and its output y: dx = y * (dy - sum(dy * y)) * scale over the \
     * kept columns, 0 at the masked ones.                                                 */ \
    void kn_k_causal_softmax_bwd_##S(const T *dy, const T *y, T *dx, int64_t batch,       \
                                     int64_t tq, int64_t tk, T scale);                     \
    /* Flash attention (kn_flash_attn in kiln/ir.h) of bh [t, d] matrices q, k, v:       \
     * y [bh, t, d + 1] holds O = causal_softmax(q k^T, scale) v and the logsumexp L.    \
     * False when the scratch tiles cannot be allocated (y then undefined).              */ \
    bool kn_k_flash_attn_##S(const T *q, const T *k, const T *v, T *y, int64_t bh,        \
                             int64_t t, int64_t d, T scale);                               \
    /* Its backward from y and dy [bh, t, dy_cols] (dy_cols d, or d + 1 with the        \
     * gradient of L): dqkv [3, bh, t, d] gets dQ, dK, dV. False on no memory.           */ \
    bool kn_k_flash_attn_bwd_##S(const T *q, const T *k, const T *v, const T *y,          \
                                 const T *dy, int64_t dy_cols, T *dqkv, int64_t bh,        \
                                 int64_t t, int64_t d, T scale);

KN_K_DECLARE(float, f32)
KN_K_DECLARE(double, f64)
#undef KN_K_DECLARE

/* Threads the kernels may use: KILN_THREADS, else the online CPUs (1..16). */
/* Cache blocking of the CPU matrix product (kn_k_matmul_*): kc, the depth of one k block
 * (a kc x NR slice of a packed b panel stays in L1), and mc, the rows of a per L2 block.
 * Any positive values give bitwise the same results; they only change the speed. */
typedef struct kn_gemm_config {
    int64_t kc, mc;
} kn_gemm_config;
/* Shape classes of a product m x n x k, by the geometric mean side g: 0 (g < 128),
 * 1 (g < 512), 2 (larger). The autotuner keys its choice by class. */
#define KN_GEMM_CLASSES 3
int kn_k_gemm_class(int64_t m, int64_t n, int64_t k);
/* The blocking used for a product of element size esize (4 or 8) and shape m x n x k: the
 * one set by kn_k_gemm_config_set for that element size and class, else the default. */
kn_gemm_config kn_k_gemm_config(size_t esize, int64_t m, int64_t n, int64_t k);
/* Set (or, with kc == 0, reset to the default) the blocking for element size esize and
 * shape class cls (-1: every class): the autotuner's choice. Not thread-safe against
 * concurrent products. */
void kn_k_gemm_config_set(size_t esize, int cls, kn_gemm_config cfg);
int kn_k_threads(void);
/* Run fn over [0, n) split into contiguous ranges, one per thread when worth_it (the
 * caller judges the work large enough), else in this thread. Each range is processed by
 * exactly one call, so results do not depend on the thread count when fn's ranges are
 * independent. */
void kn_k_parallel(int64_t n, bool worth_it, void (*fn)(void *ctx, int64_t lo, int64_t hi), void *ctx);

/* The keep decision of dropout for element i (shared by the kernels and tests). */
bool kn_k_dropout_keep(double p, uint64_t seed, uint64_t offset, int64_t i);

#ifdef __cplusplus
}
#endif

#endif /* KILN_KERNELS_H */
