/* eval_impl.h — what the CPU kernels of eval.c and eval_rows.c share: the f32/f64
 * dispatch, the output allocated then filled (KN_RUN), and the errors every kernel gives
 * (a dtype without a kernel, an op routed to a kernel that does not compute it, an index
 * out of range). Internal to core/ir. */
#ifndef KILN_IR_EVAL_IMPL_H
#define KILN_IR_EVAL_IMPL_H

#include "ir/ir_impl.h"
#include "kiln/kernels.h"
#include "kiln/scalar.h"

/* Call fn##_f32 or fn##_f64 by dtype; evaluates to false for other dtypes. */
#define KN_DISPATCH(dt, fn, ...)                                                   \
    ((dt) == KN_DT_F32 ? (fn##_f32(__VA_ARGS__), true)                             \
     : (dt) == KN_DT_F64 ? (fn##_f64(__VA_ARGS__), true) : false)
#define KN_DISPATCH_OK(dt, ok, fn, ...)                                            \
    ((dt) == KN_DT_F32 ? ((ok) = fn##_f32(__VA_ARGS__), true)                      \
     : (dt) == KN_DT_F64 ? ((ok) = fn##_f64(__VA_ARGS__), true) : false)

/* A dtype the kernel has no family for (the low-precision floats are widened before:
 * node_eval.c). */
static inline kn_status kn_eval_unsupported(const kn_node *n, kn_dtype dt) {
    return kn_error(KN_ERR_UNSUPPORTED, "%s: no CPU kernel for dtype %s (cast to f32 or f64)",
                    kn_op_name(n->op), kn_dtype_name(dt));
}

/* An op routed to a kernel that does not compute it (a new op of ops.def given a shared
 * kernel before that kernel learned it): an error naming the op, never another op's math. */
static inline kn_status kn_eval_no_kernel(const kn_node *n, const char *kernel) {
    return kn_error(KN_ERR_UNSUPPORTED, "%s: the cpu backend's %s does not compute this op", kn_op_name(n->op), kernel);
}

#define D(t) kn_tensor_data(t)
#define NUMEL(t) kn_tensor_numel(t)

/* Allocate *out, then run STMT (which evaluates to false for an unsupported dtype). */
#define KN_RUN(n, out, dt, STMT)                                        \
    do {                                                                \
        KN_TRY(kn_eval_new_out(n, out));                                \
        if (!(STMT)) {                                                  \
            kn_tensor_free(*out);                                       \
            *out = NULL;                                                \
            return kn_eval_unsupported(n, dt);                          \
        }                                                               \
        return KN_OK;                                                   \
    } while (0)

/* An index operand (targets, token ids) with the value at pos outside [0, v). */
static inline kn_status kn_eval_bad_index(const kn_node *n, const kn_tensor *idx, int64_t pos, int64_t v) {
    return kn_error(KN_ERR_ARG, "%s: index %lld at position %lld is outside [0, %lld)", kn_op_name(n->op),
                    (long long)kn_dtype_load(idx->dtype, D(idx), pos), (long long)pos, (long long)v);
}

#endif /* KILN_IR_EVAL_IMPL_H */
