/* test_hidden_broadcast.c — hidden tests of lab 01's broadcasting units: kn_shape_broadcast
 * and kn_tensor_expand, directly and through kn_tensor_binary.
 *
 * Random shapes up to 6-D (size-0 and size-1 axes included), random layouts (permuted,
 * stepped, gapped, stride-0), every dtype; properties: broadcasting is commutative, an
 * expanded view shares storage and reads the right elements, expand-then-contiguous equals
 * a repeat written by hand. Expected values come from hidden_ref.c, never from the units. */
#include <string.h>

#include "../../labs/lab01-tensors/tests/check.h"
#include "hidden_ref.h"

#define CASES 1000

/* NumPy broadcasting by hand: false when the shapes do not broadcast. */
static bool hand_broadcast(int na, const int64_t *a, int nb, const int64_t *b, int *n,
                           int64_t *out) {
    *n = na > nb ? na : nb;
    for (int k = 0; k < *n; k++) {
        int ia = k - (*n - na), ib = k - (*n - nb);
        int64_t sa = ia >= 0 ? a[ia] : 1, sb = ib >= 0 ? b[ib] : 1;
        if (sa != sb && sa != 1 && sb != 1) return false;
        out[k] = sa == 1 ? sb : sa;
    }
    return true;
}

/* A shape that broadcasts to target: a suffix of it, some axes replaced by 1. */
static int rand_operand(kn_rng *r, int ndim, const int64_t *target, int64_t *shape) {
    int n = (int)href_randint(r, 0, ndim);
    for (int k = 0; k < n; k++) {
        shape[k] = target[ndim - n + k];
        if (href_randint(r, 0, 2) == 0) shape[k] = 1;
    }
    return n;
}

static bool shape_eq(int na, const int64_t *a, int nb, const int64_t *b) {
    if (na != nb) return false;
    for (int k = 0; k < na; k++) if (a[k] != b[k]) return false;
    return true;
}

KN_TEST(lab01_hidden_broadcast, shapes_random_commutative) {
    kn_rng r = kn_rng_new(101);
    for (int c = 0; c < CASES; c++) {
        int64_t t[KN_MAX_DIMS], a[KN_MAX_DIMS], b[KN_MAX_DIMS], want[KN_MAX_DIMS];
        int nt = href_rand_shape(&r, 6, true, t);
        int na = rand_operand(&r, nt, t, a), nb = rand_operand(&r, nt, t, b), nw;
        cr_assert(hand_broadcast(na, a, nb, b, &nw, want));
        for (int order = 0; order < 2; order++) {
            int64_t got[KN_MAX_DIMS];
            int ng = -1;
            for (int k = 0; k < KN_MAX_DIMS; k++) got[k] = -7;
            if (order == 0) KN_ASSERT_OK(kn_shape_broadcast(na, a, nb, b, &ng, got));
            else KN_ASSERT_OK(kn_shape_broadcast(nb, b, na, a, &ng, got));
            char sa[96], sb[96], sw[96], sg[96];
            cr_assert(shape_eq(ng, got, nw, want),
                      "kn_shape_broadcast(%s, %s) (case %d): expected %s, got %s",
                      href_shape_str(order ? nb : na, order ? b : a, sa, sizeof sa),
                      href_shape_str(order ? na : nb, order ? a : b, sb, sizeof sb), c,
                      href_shape_str(nw, want, sw, sizeof sw),
                      href_shape_str(ng < 0 || ng > KN_MAX_DIMS ? 0 : ng, got, sg, sizeof sg));
        }
        /* The result may be written over either input (kiln folds n shapes that way). */
        int64_t inplace[KN_MAX_DIMS];
        bool over_a = c % 2 == 0;
        memcpy(inplace, over_a ? a : b, sizeof inplace);
        int ni = -1;
        if (over_a) KN_ASSERT_OK(kn_shape_broadcast(na, inplace, nb, b, &ni, inplace));
        else KN_ASSERT_OK(kn_shape_broadcast(na, a, nb, inplace, &ni, inplace));
        char sw[96];
        cr_assert(shape_eq(ni, inplace, nw, want),
                  "kn_shape_broadcast (case %d) with out the same array as %s: expected %s", c,
                  over_a ? "a" : "b", href_shape_str(nw, want, sw, sizeof sw));
    }
}

KN_TEST(lab01_hidden_broadcast, shapes_random_incompatible) {
    kn_rng r = kn_rng_new(102);
    for (int c = 0; c < CASES; c++) {
        int64_t a[KN_MAX_DIMS], b[KN_MAX_DIMS], got[KN_MAX_DIMS];
        int na = (int)href_randint(&r, 1, 6);
        for (int k = 0; k < na; k++) a[k] = href_randint(&r, 1, 4);
        int nb = (int)href_randint(&r, 1, na);
        memcpy(b, a + (na - nb), (size_t)nb * sizeof *b);
        int kb = (int)href_randint(&r, 0, nb - 1), ka = kb + (na - nb);
        if (href_randint(&r, 0, 4) == 0) { a[ka] = 0; b[kb] = href_randint(&r, 2, 4); }
        else { a[ka] = href_randint(&r, 2, 4); b[kb] = a[ka] + href_randint(&r, 1, 2); }
        if (href_randint(&r, 0, 1)) {   /* the longer shape second */
            int64_t tmp[KN_MAX_DIMS];
            memcpy(tmp, a, sizeof tmp); memcpy(a, b, sizeof tmp); memcpy(b, tmp, sizeof tmp);
            int tn = na; na = nb; nb = tn;
        }
        int ng = 0;
        char sa[96], sb[96];
        href_shape_str(na, a, sa, sizeof sa);
        href_shape_str(nb, b, sb, sizeof sb);
        KN_ASSERT_ERR(kn_shape_broadcast(na, a, nb, b, &ng, got), KN_ERR_SHAPE);
        cr_assert(strstr(kn_last_error(), sa) && strstr(kn_last_error(), sb),
                  "kn_shape_broadcast(%s, %s): the message should name both shapes, got \"%s\"",
                  sa, sb, kn_last_error());
        KN_ASSERT_ERR(kn_shape_broadcast(nb, b, na, a, &ng, got), KN_ERR_SHAPE);
    }
}

/* expand: a view (same storage, stride 0 where it repeats) that reads the right elements;
 * made contiguous it equals a repeat written by hand. */
KN_TEST(lab01_hidden_broadcast, expand_random_views_and_repeat) {
    kn_rng r = kn_rng_new(103);
    for (int c = 0; c < CASES; c++) {
        kn_dtype dt = href_all_dtypes[c % KN_DT_COUNT];
        int64_t t[KN_MAX_DIMS], xs[KN_MAX_DIMS];
        int nt = href_rand_shape(&r, 6, true, t);
        int nx = rand_operand(&r, nt, t, xs), lead = nt - nx;
        kn_tensor *x = href_rand_layout(&r, dt, nx, xs, true, HREF_VALUES_ANY);
        kn_tensor *e = NULL, *dense = NULL;
        char sx[96], st[96];
        href_shape_str(nx, xs, sx, sizeof sx);
        href_shape_str(nt, t, st, sizeof st);
        KN_ASSERT_OK(kn_tensor_expand(&e, x, nt, t));
        href_expect_shape(e, dt, nt, t, "kn_tensor_expand");
        cr_assert(e->storage == x->storage, "expand %s -> %s must be a view (no copy)", sx, st);
        for (int k = 0; k < nt; k++) {
            bool repeats = k < lead || (xs[k - lead] == 1 && t[k] != 1);
            cr_assert(!repeats || t[k] <= 1 || e->strides[k] == 0,
                      "expand %s -> %s (%s): axis %d repeats, its stride should be 0, got %lld",
                      sx, st, kn_dtype_name(dt), k, (long long)e->strides[k]);
        }
        KN_ASSERT_OK(kn_tensor_contiguous(&dense, e));
        href_expect_shape(dense, dt, nt, t, "kn_tensor_contiguous of an expanded view");
        cr_assert(kn_tensor_is_contiguous(dense));
        int64_t n = href_numel(nt, t);
        for (int64_t i = 0; i < n; i++) {
            int64_t it[KN_MAX_DIMS], ix[KN_MAX_DIMS];
            href_unravel(i, nt, t, it);
            for (int k = 0; k < nx; k++) ix[k] = xs[k] == 1 ? 0 : it[k + lead];
            double want = href_at(x, ix), got_view = href_at(e, it), got_dense = href_at(dense, it);
            cr_assert(got_view == want && got_dense == want,
                      "expand %s -> %s (%s), element %lld: expected %g, the view reads %g, its "
                      "contiguous copy holds %g", sx, st, kn_dtype_name(dt), (long long)i, want,
                      got_view, got_dense);
        }
        kn_tensor_free(dense);
        kn_tensor_free(e);
        kn_tensor_free(x);
    }
}

KN_TEST(lab01_hidden_broadcast, expand_random_errors) {
    kn_rng r = kn_rng_new(104);
    for (int c = 0; c < CASES; c++) {
        int64_t xs[KN_MAX_DIMS], t[KN_MAX_DIMS];
        int nx = (int)href_randint(&r, 1, 5);
        for (int k = 0; k < nx; k++) xs[k] = href_randint(&r, 1, 3);
        int k = (int)href_randint(&r, 0, nx - 1), nt = nx;
        memcpy(t, xs, sizeof xs);
        switch (c % 3) {
        case 0: xs[k] = href_randint(&r, 2, 3); t[k] = xs[k] + 1; break;   /* 2 -> 3 */
        case 1: xs[k] = href_randint(&r, 2, 3); t[k] = 1; break;            /* 3 -> 1 */
        default: /* fewer axes than x, dropping an axis that is not 1 */
            xs[0] = href_randint(&r, 2, 3);
            nt = nx - 1;
            memmove(t, xs + 1, (size_t)nt * sizeof *t);
            break;
        }
        kn_tensor *x = href_rand_layout(&r, KN_DT_F32, nx, xs, false, HREF_VALUES_ANY);
        kn_tensor *e = NULL;
        KN_ASSERT_ERR(kn_tensor_expand(&e, x, nt, t), KN_ERR_SHAPE);
        cr_assert(e == NULL, "kn_tensor_expand must leave *out untouched when it fails");
        kn_tensor_free(x);
    }
}

/* kn_tensor_binary on random broadcastable operands of random layouts, every numeric dtype,
 * against an fp64 reference rounded to the result dtype. */
KN_TEST(lab01_hidden_broadcast, binary_random_broadcasting) {
    static const kn_binary_op ops[] = {KN_BINARY_ADD, KN_BINARY_MUL, KN_BINARY_MAX, KN_BINARY_LT};
    kn_rng r = kn_rng_new(105);
    for (int c = 0; c < CASES; c++) {
        kn_dtype dt = href_all_dtypes[c % (KN_DT_COUNT - 1)]; /* every dtype but bool */
        kn_binary_op op = ops[href_randint(&r, 0, 3)];
        int64_t t[KN_MAX_DIMS], as[KN_MAX_DIMS], bs[KN_MAX_DIMS], os[KN_MAX_DIMS];
        int nt = href_rand_shape(&r, 6, true, t);
        int na = rand_operand(&r, nt, t, as), nb = rand_operand(&r, nt, t, bs), no;
        cr_assert(hand_broadcast(na, as, nb, bs, &no, os));
        kn_tensor *a = href_rand_layout(&r, dt, na, as, true, HREF_VALUES_ANY);
        kn_tensor *b = href_rand_layout(&r, dt, nb, bs, true, HREF_VALUES_ANY);
        kn_tensor *o = NULL;
        char sa[96], sb[96];
        href_shape_str(na, as, sa, sizeof sa);
        href_shape_str(nb, bs, sb, sizeof sb);
        KN_ASSERT_OK(kn_tensor_binary(&o, op, a, b));
        kn_dtype odt = op == KN_BINARY_LT ? KN_DT_BOOL : dt;
        href_expect_shape(o, odt, no, os, "kn_tensor_binary of broadcast operands");
        int64_t n = href_numel(no, os);
        for (int64_t i = 0; i < n; i++) {
            int64_t io[KN_MAX_DIMS], ia[KN_MAX_DIMS], ib[KN_MAX_DIMS];
            href_unravel(i, no, os, io);
            for (int k = 0; k < na; k++) ia[k] = as[k] == 1 ? 0 : io[k + no - na];
            for (int k = 0; k < nb; k++) ib[k] = bs[k] == 1 ? 0 : io[k + no - nb];
            double x = href_at(a, ia), y = href_at(b, ib), want = 0;
            switch (op) {
            case KN_BINARY_ADD: want = x + y; break;
            case KN_BINARY_MUL: want = x * y; break;
            case KN_BINARY_MAX: want = x > y ? x : y; break;
            case KN_BINARY_LT: want = x < y; break;
            case KN_BINARY_SUB: case KN_BINARY_DIV: case KN_BINARY_POW: case KN_BINARY_MIN:
            case KN_BINARY_EQ: case KN_BINARY_NE: case KN_BINARY_LE: case KN_BINARY_GT:
            case KN_BINARY_GE: case KN_BINARY_COUNT:
                cr_assert_fail("op %d is not one this test draws", (int)op); return;
            }
            want = href_roundtrip(odt, want);
            double got = href_at(o, io);
            cr_assert(href_close(got, want, href_eps(odt) * fabs(want)),
                      "%s(%s %s, %s %s) element %lld: expected %.9g, got %.9g",
                      kn_binary_op_name(op), kn_dtype_name(dt), sa, kn_dtype_name(dt), sb,
                      (long long)i, want, got);
        }
        kn_tensor_free(o);
        kn_tensor_free(b);
        kn_tensor_free(a);
    }
}

KN_TEST(lab01_hidden_broadcast, binary_incompatible_shapes) {
    int64_t as[] = {2, 0, 3}, bs[] = {2, 1, 4}, cs[] = {5};
    kn_tensor *a = NULL, *b = NULL, *c = NULL, *o = NULL;
    KN_ASSERT_OK(kn_tensor_zeros(&a, KN_DT_F32, 3, as));
    KN_ASSERT_OK(kn_tensor_zeros(&b, KN_DT_F32, 3, bs));
    KN_ASSERT_OK(kn_tensor_zeros(&c, KN_DT_F32, 1, cs));
    KN_ASSERT_ERR(kn_tensor_binary(&o, KN_BINARY_ADD, a, b), KN_ERR_SHAPE);
    KN_ASSERT_ERR(kn_tensor_binary(&o, KN_BINARY_MUL, b, c), KN_ERR_SHAPE);
    KN_ASSERT_ERR(kn_tensor_binary(&o, KN_BINARY_SUB, c, a), KN_ERR_SHAPE);
    cr_assert(o == NULL, "kn_tensor_binary must leave *out untouched when it fails");
    kn_tensor_free(a);
    kn_tensor_free(b);
    kn_tensor_free(c);
}
