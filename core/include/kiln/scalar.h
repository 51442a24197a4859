/* kiln/scalar.h — the scalar math of every pointwise function, written once.
 *
 * The CPU kernels (core/tensor/elementwise.c for the tensor library, kernels_train.inc for
 * the interpreter and eager mode), the CUDA kernels (the .cu files of core/runtime) and, later, the
 * code renderers all compute the same per-element functions. Their formulas and constants
 * (GELU's tanh approximation, relu's NaN rule, ...) live here and nowhere else, so a CPU
 * result and a GPU result can only differ by the libm of each side, never by a formula.
 *
 * Every function exists for float (_f32) and double (_f64) and computes in its own type.
 * Under nvcc they are __host__ __device__, so device code calls the very same functions.
 *
 *   kn_sc_unary_S(op, x)      every kn_unary_op (a switch over all of them: -Wswitch-enum
 *                             makes a new enumerator without a case a compile error)
 *   kn_sc_binary_S(op, a, b)  the arithmetic kn_binary_ops (ADD SUB MUL DIV POW MAX MIN);
 *                             comparisons yield 0 or 1
 *   kn_sc_unary_expr(op)      the same function as a C expression of `x` (for renderers:
 *                             tinygrad's code_for_op), float or double by the math names
 *                             the renderer binds; kn_sc_binary_expr likewise of `a`, `b`.
 *
 * Semantics follow PyTorch where the two former CPU families disagreed: relu(NaN) = NaN,
 * and f32 gelu is tanhf's formula (the one the interpreter and the GPU always used). */
#ifndef KILN_SCALAR_H
#define KILN_SCALAR_H

#include <math.h>

#include "kiln/tensor.h"

#ifdef __CUDACC__
#define KN_SC_FN static inline __host__ __device__
#else
#define KN_SC_FN static inline
#endif

/* GELU, tanh approximation (as GPT-2): 0.5 x (1 + tanh(k (x + c x^3))), k = sqrt(2/pi). */
#define KN_SC_GELU_K 0.7978845608028654
#define KN_SC_GELU_C 0.044715

/* One instance per type: T the type, S its suffix, then the math functions of that type. */
#define KN_SC_DEFINE(T, S, EXP, LOG, SQRT, TANH, FABS, SIN, COS, POW)                          \
    KN_SC_FN T kn_sc_relu_##S(T x) { return x > 0 || x != x ? x : (T)0; }                       \
    KN_SC_FN T kn_sc_gelu_##S(T x) {                                                            \
        const T k = (T)KN_SC_GELU_K, c = (T)KN_SC_GELU_C;                                       \
        return (T)0.5 * x * ((T)1 + TANH(k * (x + c * x * x * x)));                             \
    }                                                                                           \
    /* d gelu / dx */                                                                           \
    KN_SC_FN T kn_sc_gelu_grad_##S(T x) {                                                       \
        const T k = (T)KN_SC_GELU_K, c = (T)KN_SC_GELU_C;                                       \
        T t = TANH(k * (x + c * x * x * x));                                                    \
        return (T)0.5 * ((T)1 + t) + (T)0.5 * x * ((T)1 - t * t) * k * ((T)1 + (T)3 * c * x * x); \
    }                                                                                           \
    /* relu's gradient: dy where x > 0, else 0 */                                               \
    KN_SC_FN T kn_sc_relu_grad_##S(T dy, T x) { return x > 0 ? dy : (T)0; }                     \
    KN_SC_FN T kn_sc_sigmoid_##S(T x) {                                                         \
        return x >= 0 ? (T)1 / ((T)1 + EXP(-x)) : EXP(x) / ((T)1 + EXP(x));                     \
    }                                                                                           \
    KN_SC_FN T kn_sc_unary_##S(kn_unary_op op, T x) {                                           \
        switch (op) {                                                                           \
        case KN_UNARY_NEG: return -x;                                                           \
        case KN_UNARY_ABS: return FABS(x);                                                      \
        case KN_UNARY_EXP: return EXP(x);                                                       \
        case KN_UNARY_LOG: return LOG(x);                                                       \
        case KN_UNARY_SQRT: return SQRT(x);                                                     \
        case KN_UNARY_RSQRT: return (T)1 / SQRT(x);                                             \
        case KN_UNARY_RECIP: return (T)1 / x;                                                   \
        case KN_UNARY_SQUARE: return x * x;                                                     \
        case KN_UNARY_TANH: return TANH(x);                                                     \
        case KN_UNARY_SIGMOID: return kn_sc_sigmoid_##S(x);                                     \
        case KN_UNARY_RELU: return kn_sc_relu_##S(x);                                           \
        case KN_UNARY_GELU: return kn_sc_gelu_##S(x);                                           \
        case KN_UNARY_SIN: return SIN(x);                                                       \
        case KN_UNARY_COS: return COS(x);                                                       \
        case KN_UNARY_COUNT: break;                                                             \
        }                                                                                       \
        return (T)NAN; /* not a kn_unary_op: callers check the op first */                     \
    }                                                                                           \
    KN_SC_FN T kn_sc_binary_##S(kn_binary_op op, T a, T b) {                                    \
        switch (op) {                                                                           \
        case KN_BINARY_ADD: return a + b;                                                       \
        case KN_BINARY_SUB: return a - b;                                                       \
        case KN_BINARY_MUL: return a * b;                                                       \
        case KN_BINARY_DIV: return a / b;                                                       \
        case KN_BINARY_POW: return POW(a, b);                                                   \
        case KN_BINARY_MAX: return (a > b || a != a) ? a : b; /* NaN propagates */             \
        case KN_BINARY_MIN: return (a < b || a != a) ? a : b;                                   \
        case KN_BINARY_EQ: return (T)(a == b);                                                  \
        case KN_BINARY_NE: return (T)(a != b);                                                  \
        case KN_BINARY_LT: return (T)(a < b);                                                   \
        case KN_BINARY_LE: return (T)(a <= b);                                                  \
        case KN_BINARY_GT: return (T)(a > b);                                                   \
        case KN_BINARY_GE: return (T)(a >= b);                                                  \
        case KN_BINARY_COUNT: break;                                                            \
        }                                                                                       \
        return (T)NAN;                                                                          \
    }

KN_SC_DEFINE(float, f32, expf, logf, sqrtf, tanhf, fabsf, sinf, cosf, powf)
KN_SC_DEFINE(double, f64, exp, log, sqrt, tanh, fabs, sin, cos, pow)

/* Whether a kn_binary_op is a comparison (a bool result: not for the arithmetic kernels). */
KN_SC_FN bool kn_sc_binary_is_compare(kn_binary_op op) {
    switch (op) {
    case KN_BINARY_EQ: case KN_BINARY_NE: case KN_BINARY_LT: case KN_BINARY_LE: case KN_BINARY_GT:
    case KN_BINARY_GE: return true;
    case KN_BINARY_ADD: case KN_BINARY_SUB: case KN_BINARY_MUL: case KN_BINARY_DIV: case KN_BINARY_POW:
    case KN_BINARY_MAX: case KN_BINARY_MIN: case KN_BINARY_COUNT: break;
    }
    return false;
}

/* The function of each kn_unary_op as a C expression of x (NULL for an invalid op). */
KN_SC_FN const char *kn_sc_unary_expr(kn_unary_op op) {
    switch (op) {
    case KN_UNARY_NEG: return "(-(x))";
    case KN_UNARY_ABS: return "fabs(x)";
    case KN_UNARY_EXP: return "exp(x)";
    case KN_UNARY_LOG: return "log(x)";
    case KN_UNARY_SQRT: return "sqrt(x)";
    case KN_UNARY_RSQRT: return "(1 / sqrt(x))";
    case KN_UNARY_RECIP: return "(1 / (x))";
    case KN_UNARY_SQUARE: return "((x) * (x))";
    case KN_UNARY_TANH: return "tanh(x)";
    case KN_UNARY_SIGMOID: return "((x) >= 0 ? 1 / (1 + exp(-(x))) : exp(x) / (1 + exp(x)))";
    case KN_UNARY_RELU: return "((x) > 0 || (x) != (x) ? (x) : 0)";
    case KN_UNARY_GELU: return "(0.5 * (x) * (1 + tanh(0.7978845608028654 * ((x) + 0.044715 * (x) * (x) * (x)))))";
    case KN_UNARY_SIN: return "sin(x)";
    case KN_UNARY_COS: return "cos(x)";
    case KN_UNARY_COUNT: break;
    }
    return 0;
}

/* The function of each kn_binary_op as a C expression of a and b (NULL when invalid). */
KN_SC_FN const char *kn_sc_binary_expr(kn_binary_op op) {
    switch (op) {
    case KN_BINARY_ADD: return "((a) + (b))";
    case KN_BINARY_SUB: return "((a) - (b))";
    case KN_BINARY_MUL: return "((a) * (b))";
    case KN_BINARY_DIV: return "((a) / (b))";
    case KN_BINARY_POW: return "pow(a, b)";
    case KN_BINARY_MAX: return "((a) > (b) || (a) != (a) ? (a) : (b))";
    case KN_BINARY_MIN: return "((a) < (b) || (a) != (a) ? (a) : (b))";
    case KN_BINARY_EQ: return "((a) == (b))";
    case KN_BINARY_NE: return "((a) != (b))";
    case KN_BINARY_LT: return "((a) < (b))";
    case KN_BINARY_LE: return "((a) <= (b))";
    case KN_BINARY_GT: return "((a) > (b))";
    case KN_BINARY_GE: return "((a) >= (b))";
    case KN_BINARY_COUNT: break;
    }
    return 0;
}

/* The activations' gradients as C expressions of dy = `a` and x = `b` (gelu_bwd and
 * relu_bwd in the IR), spelled as kn_sc_gelu_grad_S(x) * dy and kn_sc_relu_grad_S(dy, x)
 * are (same constants, same order of operations). gelu's uses `t`, the tanh, which the
 * renderer computes first from kn_sc_gelu_bwd_t_expr (x = `b`), so it is computed once. */
KN_SC_FN const char *kn_sc_gelu_bwd_t_expr(void) {
    return "tanh(0.7978845608028654 * ((b) + 0.044715 * (b) * (b) * (b)))";
}
KN_SC_FN const char *kn_sc_gelu_bwd_expr(void) {
    return "((a) * (0.5 * (1 + (t)) + 0.5 * (b) * (1 - (t) * (t)) * 0.7978845608028654 * (1 + 3 * 0.044715 * (b) * (b))))";
}
KN_SC_FN const char *kn_sc_relu_bwd_expr(void) { return "((b) > 0 ? (a) : 0)"; }

#endif /* KILN_SCALAR_H */
