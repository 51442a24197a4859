/* kiln/scalar.h — the scalar math of every pointwise function, compiled from one table.
 *
 * The unary functions and their gradients are the rows of kiln/pointwise.def, written
 * there once as C; this header compiles each row for float (_f32) and double (_f64), each
 * computing in its own type (S is f32 or f64 below; the f32 and f64 functions are the
 * same table expanded twice, kiln/scalar_type.inc), and stringizes the same rows for the
 * code renderers. The CPU kernels (core/tensor/elementwise.c for the tensor library,
 * kernels_train.inc for the IR's kernels that the interpreter and eager mode run,
 * rowmath.h's softmax, layernorm and cross-entropy rows), the CUDA kernels (the .cu files
 * of core/runtime: under nvcc every function is __host__ __device__) and the C/CUDA
 * renderers (core/codegen) all compute these functions, so a CPU result and a GPU result
 * can only differ by the libm of each side, never by a formula.
 *
 *   kn_sc_unary_S(op, x)          every kn_unary_op (NaN for a value that is not one)
 *   kn_sc_unary_grad_S(op, d, x)  dx = f'(x) d for a row with a gradient column (NaN for
 *                                 one without: kn_sc_unary_has_grad says which)
 *   kn_sc_<name>_S(x), kn_sc_<name>_t_S(x), kn_sc_<name>_grad_S(d, x)  the same, one
 *                                 function per row (t: the part of f'(x) the gradient
 *                                 reuses, such as gelu's tanh)
 *   kn_sc_binary_S(op, a, b)      every kn_binary_op: the arithmetic ones (ADD SUB MUL DIV
 *                                 POW MAX MIN, NaN propagating through MAX and MIN) and
 *                                 the comparisons, which yield 0 or 1
 *                                 (kn_sc_binary_is_compare says which)
 *   kn_sc_unary_expr(op)          the row's function as a C expression of x for the
 *                                 renderers (tinygrad's code_for_op), double math names
 *                                 and constants, which kn_render_c_bind turns to float;
 *   kn_sc_unary_grad_t_expr(op), kn_sc_unary_grad_expr(op)  its t(x) and its dx(d, x, t)
 *                                 (kn_sc_unary_grad_needs_t: whether dx reads t);
 *                                 kn_sc_binary_expr likewise of a, b.
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

/* The rows for float, then for double (kiln/scalar_type.inc: KN_SC_T, KN_SC_S, the math spelling). */
#define KN_SC_T float
#define KN_SC_S f32
#define exp_ expf
#define log_ logf
#define sqrt_ sqrtf
#define tanh_ tanhf
#define fabs_ fabsf
#define sin_ sinf
#define cos_ cosf
#define pow_ powf
#define K(v) v##f
#include "kiln/scalar_type.inc"
#define KN_SC_T double
#define KN_SC_S f64
#define exp_ exp
#define log_ log
#define sqrt_ sqrt
#define tanh_ tanh
#define fabs_ fabs
#define sin_ sin
#define cos_ cos
#define pow_ pow
#define K(v) v
#include "kiln/scalar_type.inc"

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

/* The rows as the renderers' C expressions (NULL for an invalid op, and for the gradient
 * of a row without one): the same tokens as the functions above, with the math functions
 * and constants spelled for double. */
#define exp_ exp
#define log_ log
#define sqrt_ sqrt
#define tanh_ tanh
#define fabs_ fabs
#define sin_ sin
#define cos_ cos
#define pow_ pow
#define K(v) v
#define KN_SC_STR_(...) #__VA_ARGS__
#define KN_SC_STR(...) KN_SC_STR_(__VA_ARGS__)
#define KN_SC_G_GRAD(tx, dx) kn_sc_has, tx, dx
#define KN_SC_G_NOGRAD kn_sc_none, 0, 0
#define KN_SC_CALL(m, ...) m(__VA_ARGS__)
KN_SC_FN const char *kn_sc_unary_expr(kn_unary_op op) {
    switch (op) {
#define KN_PW(E, name, dtypes, f, grad, ir, autocast) case KN_UNARY_##E: return KN_SC_STR((f));
#include "kiln/pointwise.def"
    case KN_UNARY_COUNT: break;
    }
    return 0;
}
#define KN_SC_GSTR(which, tag, tx, dx) KN_SC_GSTR_##tag##_##which(tx, dx)
#define KN_SC_GSTR_kn_sc_has_t(tx, dx) KN_SC_STR((tx))
#define KN_SC_GSTR_kn_sc_has_dx(tx, dx) KN_SC_STR((dx))
#define KN_SC_GSTR_kn_sc_none_t(tx, dx) 0
#define KN_SC_GSTR_kn_sc_none_dx(tx, dx) 0
/* t(x), computed once before dx; "0" when the gradient needs none. */
KN_SC_FN const char *kn_sc_unary_grad_t_expr(kn_unary_op op) {
    switch (op) {
#define KN_PW(E, name, dtypes, f, grad, ir, autocast) case KN_UNARY_##E: return KN_SC_CALL(KN_SC_GSTR, t, KN_SC_G_##grad);
#include "kiln/pointwise.def"
    case KN_UNARY_COUNT: break;
    }
    return 0;
}
/* dx as a C expression of d (dy), x and t. */
KN_SC_FN const char *kn_sc_unary_grad_expr(kn_unary_op op) {
    switch (op) {
#define KN_PW(E, name, dtypes, f, grad, ir, autocast) case KN_UNARY_##E: return KN_SC_CALL(KN_SC_GSTR, dx, KN_SC_G_##grad);
#include "kiln/pointwise.def"
    case KN_UNARY_COUNT: break;
    }
    return 0;
}
/* Whether the row has a gradient column (the IR's unary_grad computes only those). */
KN_SC_FN bool kn_sc_unary_has_grad(kn_unary_op op) { return kn_sc_unary_grad_expr(op) != 0; }
/* Whether its gradient reads t (a t column other than 0): the renderers compute t first. */
KN_SC_FN bool kn_sc_unary_grad_needs_t(kn_unary_op op) {
    const char *t = kn_sc_unary_grad_t_expr(op);
    return t && !(t[0] == '(' && t[1] == '0' && t[2] == ')' && t[3] == 0);
}
#undef KN_SC_STR_
#undef KN_SC_STR
#undef KN_SC_G_GRAD
#undef KN_SC_G_NOGRAD
#undef KN_SC_CALL
#undef KN_SC_GSTR
#undef KN_SC_GSTR_kn_sc_has_t
#undef KN_SC_GSTR_kn_sc_has_dx
#undef KN_SC_GSTR_kn_sc_none_t
#undef KN_SC_GSTR_kn_sc_none_dx
#undef exp_
#undef log_
#undef sqrt_
#undef tanh_
#undef fabs_
#undef sin_
#undef cos_
#undef pow_
#undef K

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

#endif /* KILN_SCALAR_H */
