/* test_framework.c — lab 01 public tests: the framework's own ops, run on your units.
 *
 * The eager tensor ops call your units: the batched matmul finds its batch shape with
 * kn_shape_broadcast, reads the operands through kn_tensor_expand and walks the batches
 * with kn_index_next; `where` broadcasts three operands; cast and contiguous copy with
 * kn_tensor_copy_into; the elementwise kernels walk views row by row with kn_index_next.
 * Each case here is one the model or the trainer runs; its message names it. */
#include <math.h>

#include "check.h"

/* a [2,1,2,3] @ b [3,3,2] -> [2,3,2,2]: batch axes [2,1] and [3] broadcast to [2,3]. */
KN_TEST(lab01_framework, batched_matmul_broadcasts_its_batch_axes) {
    int64_t as[] = {2, 1, 2, 3}, bs[] = {3, 3, 2}, os[] = {2, 3, 2, 2};
    double av[12], bv[18], want[24];
    for (int i = 0; i < 12; i++) av[i] = i - 5;
    for (int i = 0; i < 18; i++) bv[i] = (i % 7) - 3;
    for (int p = 0; p < 2; p++)
        for (int q = 0; q < 3; q++)
            for (int m = 0; m < 2; m++)
                for (int n = 0; n < 2; n++) {
                    double s = 0;
                    for (int k = 0; k < 3; k++) s += av[p * 6 + m * 3 + k] * bv[q * 6 + k * 2 + n];
                    want[((p * 3 + q) * 2 + m) * 2 + n] = s;
                }
    kn_tensor *a = lab01_make(KN_DT_F64, 4, as, av), *b = lab01_make(KN_DT_F64, 3, bs, bv), *o = NULL;
    KN_ASSERT_OK(kn_tensor_matmul(&o, a, b));
    lab01_expect(o, KN_DT_F64, 4, os, want, 1e-12, "matmul f64[2,1,2,3] @ f64[3,3,2]");
    kn_tensor_free(o);
    kn_tensor_free(b);
    kn_tensor_free(a);
}

/* where(cond [2,1], a [3], b scalar) -> [2,3]. */
KN_TEST(lab01_framework, where_broadcasts_three_operands) {
    int64_t cs[] = {2, 1}, as[] = {3}, os[] = {2, 3};
    double cv[] = {1, 0}, av[] = {1, 2, 3}, bv[] = {-7}, want[] = {1, 2, 3, -7, -7, -7};
    kn_tensor *c = lab01_make(KN_DT_BOOL, 2, cs, cv), *a = lab01_make(KN_DT_F32, 1, as, av);
    kn_tensor *b = lab01_make(KN_DT_F32, 0, NULL, bv), *o = NULL;
    KN_ASSERT_OK(kn_tensor_where(&o, c, a, b));
    lab01_expect(o, KN_DT_F32, 2, os, want, 0, "where(bool[2,1], f32[3], f32[])");
    kn_tensor_free(o);
    kn_tensor_free(b);
    kn_tensor_free(a);
    kn_tensor_free(c);
}

/* The cast of a transposed view, and exp of a transposed view: both walk the view's
 * strides, not its memory order. */
KN_TEST(lab01_framework, cast_and_unary_of_a_transposed_view) {
    int64_t xs[] = {2, 3}, ts[] = {3, 2};
    double xv[] = {0, 1, 2, 3, 4, 5}, want[] = {0, 3, 1, 4, 2, 5}, want_exp[6];
    for (int i = 0; i < 6; i++) want_exp[i] = exp(want[i]);
    kn_tensor *x = lab01_make(KN_DT_F64, 2, xs, xv), *t = NULL, *c = NULL, *e = NULL;
    KN_ASSERT_OK(kn_tensor_transpose(&t, x, 0, 1));
    KN_ASSERT_OK(kn_tensor_cast(&c, t, KN_DT_F32));
    lab01_expect(c, KN_DT_F32, 2, ts, want, 0, "cast to f32 of the transpose of f64[2,3]");
    KN_ASSERT_OK(kn_tensor_unary(&e, KN_UNARY_EXP, t));
    lab01_expect(e, KN_DT_F64, 2, ts, want_exp, 1e-12, "exp of the transpose of f64[2,3]");
    kn_tensor_free(e);
    kn_tensor_free(c);
    kn_tensor_free(t);
    kn_tensor_free(x);
}
