/* test_broadcast.c — lab 01 public tests: kn_shape_broadcast and kn_tensor_expand, on their
 * own and inside kn_tensor_binary (which broadcasts its operands with them).
 *
 * The rule under test (NumPy's): line the two shapes up from the right; each pair of sizes
 * must be equal or one of them 1; the result takes the larger; missing leading axes count
 * as 1. A size-1 axis is stretched by giving it stride 0 in a view: no data is copied. */
#include "check.h"

typedef struct bcast_case {
    int na, nb, nwant;
    int64_t a[4], b[4], want[4];
} bcast_case;

KN_TEST(lab01_broadcast, shapes_that_broadcast) {
    static const bcast_case cases[] = {
        {1, 1, 1, {3}, {3}, {3}},                              /* equal shapes */
        {2, 1, 2, {2, 3}, {3}, {2, 3}},                        /* a row added to every row */
        {2, 2, 2, {2, 1}, {1, 4}, {2, 4}},                     /* column x row: an outer sum */
        {3, 2, 3, {5, 1, 3}, {4, 1}, {5, 4, 3}},
        {4, 3, 4, {8, 1, 6, 1}, {7, 1, 5}, {8, 7, 6, 5}},      /* the NumPy manual's example */
        {0, 2, 2, {0}, {2, 2}, {2, 2}},                        /* a 0-d scalar goes anywhere */
        {1, 1, 1, {1}, {0}, {0}},                              /* 1 stretches to 0 as well */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const bcast_case *k = &cases[c];
        for (int swap = 0; swap < 2; swap++) { /* broadcasting is symmetric */
            int64_t out[KN_MAX_DIMS];
            int nout = -1;
            char sa[64], sb[64], sw[64], sg[64];
            int n1 = swap ? k->nb : k->na, n2 = swap ? k->na : k->nb;
            const int64_t *s1 = swap ? k->b : k->a, *s2 = swap ? k->a : k->b;
            KN_ASSERT_OK(kn_shape_broadcast(n1, s1, n2, s2, &nout, out));
            cr_assert(nout == k->nwant && memcmp(out, k->want, (size_t)nout * sizeof *out) == 0,
                      "kn_shape_broadcast(%s, %s): expected %s, got %s",
                      lab01_shape(n1, s1, sa, sizeof sa), lab01_shape(n2, s2, sb, sizeof sb),
                      lab01_shape(k->nwant, k->want, sw, sizeof sw),
                      nout >= 0 && nout <= KN_MAX_DIMS ? lab01_shape(nout, out, sg, sizeof sg)
                                                      : "an invalid ndim");
        }
    }
}

KN_TEST(lab01_broadcast, shapes_that_do_not_broadcast) {
    static const bcast_case cases[] = {
        {2, 1, 0, {2, 3}, {4}, {0}},       /* 3 vs 4 */
        {2, 2, 0, {2, 1}, {3, 4}, {0}},    /* 2 vs 3 (the 1 vs 4 would be fine) */
        {1, 1, 0, {0}, {2}, {0}},          /* 0 vs 2: only 1 stretches */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const bcast_case *k = &cases[c];
        int64_t out[KN_MAX_DIMS];
        int nout;
        char sa[64], sb[64];
        lab01_shape(k->na, k->a, sa, sizeof sa);
        lab01_shape(k->nb, k->b, sb, sizeof sb);
        KN_ASSERT_ERR(kn_shape_broadcast(k->na, k->a, k->nb, k->b, &nout, out), KN_ERR_SHAPE);
        cr_assert(strstr(kn_last_error(), sa) && strstr(kn_last_error(), sb),
                  "kn_shape_broadcast(%s, %s): the error message should name both shapes "
                  "(as kn_shape_str writes them), got \"%s\"", sa, sb, kn_last_error());
    }
}

/* kiln broadcasts n operands by folding: shape = broadcast(shape, next operand's shape),
 * passing the same array as `a` and as `out` (core/tensor/elementwise.c). So out may alias
 * an input: read all of it before you overwrite it (build the result in a local array). */
KN_TEST(lab01_broadcast, result_may_overwrite_an_input) {
    int64_t a[KN_MAX_DIMS] = {4}, b[KN_MAX_DIMS] = {2, 3, 1};
    int n = 0;
    char got[64];
    KN_ASSERT_OK(kn_shape_broadcast(1, a, 3, b, &n, a)); /* out is a */
    cr_assert(n == 3 && a[0] == 2 && a[1] == 3 && a[2] == 4,
              "kn_shape_broadcast([4], [2,3,1]) written over the first shape: expected [2,3,4], got %s",
              lab01_shape(n >= 0 && n <= KN_MAX_DIMS ? n : 0, a, got, sizeof got));
    int64_t c[KN_MAX_DIMS] = {5, 1}, d[KN_MAX_DIMS] = {7};
    KN_ASSERT_OK(kn_shape_broadcast(1, d, 2, c, &n, c)); /* out is b */
    cr_assert(n == 2 && c[0] == 5 && c[1] == 7,
              "kn_shape_broadcast([7], [5,1]) written over the second shape: expected [5,7], got %s",
              lab01_shape(n >= 0 && n <= KN_MAX_DIMS ? n : 0, c, got, sizeof got));
}

/* x = [[10], [20], [30]] of shape [3,1], expanded to [2,3,4]: every out[i][j][k] is x[j][0].
 * The view shares x's storage; the new axis 0 and the stretched axis 2 get stride 0. */
KN_TEST(lab01_broadcast, expand_is_a_view_with_zero_strides) {
    int64_t xs[] = {3, 1}, ts[] = {2, 3, 4};
    double xv[] = {10, 20, 30};
    kn_tensor *x = lab01_make(KN_DT_F32, 2, xs, xv), *e = NULL, *d = NULL;
    KN_ASSERT_OK(kn_tensor_expand(&e, x, 3, ts));
    double want[24];
    for (int i = 0; i < 24; i++) want[i] = xv[(i / 4) % 3];
    lab01_expect(e, KN_DT_F32, 3, ts, want, 0, "expand [3,1] -> [2,3,4]");
    cr_assert(e->storage == x->storage, "expand must make a view of x's storage, not a copy");
    cr_assert(e->strides[0] == 0 && e->strides[1] == x->strides[0] && e->strides[2] == 0,
              "expand [3,1] (strides [%lld,%lld]) -> [2,3,4]: expected strides [0,%lld,0], got "
              "[%lld,%lld,%lld]", (long long)x->strides[0], (long long)x->strides[1],
              (long long)x->strides[0], (long long)e->strides[0], (long long)e->strides[1],
              (long long)e->strides[2]);
    /* Made contiguous, the view becomes a real repeat of x. */
    KN_ASSERT_OK(kn_tensor_contiguous(&d, e));
    lab01_expect(d, KN_DT_F32, 3, ts, want, 0, "contiguous(expand [3,1] -> [2,3,4])");
    cr_assert(kn_tensor_is_contiguous(d));
    kn_tensor_free(d);
    kn_tensor_free(e);
    kn_tensor_free(x);
}

KN_TEST(lab01_broadcast, expand_rejects_what_does_not_broadcast) {
    int64_t xs[] = {3, 4};
    kn_tensor *x = NULL, *e = NULL;
    KN_ASSERT_OK(kn_tensor_zeros(&x, KN_DT_F32, 2, xs));
    int64_t t1[] = {3, 5};      /* 4 is not 1: it cannot become 5 */
    int64_t t2[] = {3, 1};      /* expand never shrinks: [3,4] -> [3,1] is wrong */
    int64_t t3[] = {4};         /* fewer axes than x */
    KN_ASSERT_ERR(kn_tensor_expand(&e, x, 2, t1), KN_ERR_SHAPE);
    KN_ASSERT_ERR(kn_tensor_expand(&e, x, 2, t2), KN_ERR_SHAPE);
    KN_ASSERT_ERR(kn_tensor_expand(&e, x, 1, t3), KN_ERR_SHAPE);
    cr_assert(e == NULL, "a failing kn_tensor_expand must leave *out untouched");
    kn_tensor_free(x);
}

/* a [2,3,1] + b [4] -> [2,3,4]: out[i][j][k] = a[i][j][0] + b[k]. kn_tensor_binary finds the
 * result shape with kn_shape_broadcast and reads both operands through kn_tensor_expand. */
KN_TEST(lab01_broadcast, binary_add_broadcasts_both_operands) {
    int64_t as[] = {2, 3, 1}, bs[] = {4}, os[] = {2, 3, 4};
    double av[] = {0, 10, 20, 30, 40, 50}, bv[] = {1, 2, 3, 4};
    kn_tensor *a = lab01_make(KN_DT_F32, 3, as, av), *b = lab01_make(KN_DT_F32, 1, bs, bv);
    kn_tensor *o = NULL;
    KN_ASSERT_OK(kn_tensor_binary(&o, KN_BINARY_ADD, a, b));
    double want[24];
    for (int i = 0; i < 24; i++) want[i] = av[i / 4] + bv[i % 4];
    lab01_expect(o, KN_DT_F32, 3, os, want, 0, "add f32[2,3,1] + f32[4]");
    kn_tensor_free(o);
    kn_tensor_free(b);
    kn_tensor_free(a);
}

KN_TEST(lab01_broadcast, binary_with_a_scalar_and_a_row) {
    int64_t xs[] = {2, 3}, rs[] = {3};
    double xv[] = {1, 2, 3, 4, 5, 6}, rv[] = {1, 1, 2};
    kn_tensor *x = lab01_make(KN_DT_F64, 2, xs, xv), *row = lab01_make(KN_DT_F64, 1, rs, rv);
    kn_tensor *s = NULL, *o1 = NULL, *o2 = NULL;
    KN_ASSERT_OK(kn_tensor_scalar(&s, KN_DT_F64, 10));
    KN_ASSERT_OK(kn_tensor_binary(&o1, KN_BINARY_MUL, s, x));   /* 0-d * [2,3] */
    double w1[] = {10, 20, 30, 40, 50, 60};
    lab01_expect(o1, KN_DT_F64, 2, xs, w1, 0, "mul f64[] * f64[2,3]");
    KN_ASSERT_OK(kn_tensor_binary(&o2, KN_BINARY_SUB, x, row)); /* [2,3] - [3] */
    double w2[] = {0, 1, 1, 3, 4, 4};
    lab01_expect(o2, KN_DT_F64, 2, xs, w2, 0, "sub f64[2,3] - f64[3]");
    kn_tensor_free(o2);
    kn_tensor_free(o1);
    kn_tensor_free(s);
    kn_tensor_free(row);
    kn_tensor_free(x);
}

KN_TEST(lab01_broadcast, binary_rejects_shapes_that_do_not_broadcast) {
    int64_t as[] = {2, 3}, bs[] = {4};
    kn_tensor *a = NULL, *b = NULL, *o = NULL;
    KN_ASSERT_OK(kn_tensor_zeros(&a, KN_DT_F32, 2, as));
    KN_ASSERT_OK(kn_tensor_zeros(&b, KN_DT_F32, 1, bs));
    KN_ASSERT_ERR(kn_tensor_binary(&o, KN_BINARY_ADD, a, b), KN_ERR_SHAPE);
    cr_assert(strstr(kn_last_error(), "[2,3]") && strstr(kn_last_error(), "[4]"),
              "add [2,3] + [4]: the message should name both shapes, got \"%s\"", kn_last_error());
    cr_assert(o == NULL, "a failing kn_tensor_binary must leave *out untouched");
    kn_tensor_free(b);
    kn_tensor_free(a);
}
