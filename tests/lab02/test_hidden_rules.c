/* test_hidden_rules.c — lab 02 hidden tests: every backward rule of the lab checked by
 * finite differences in fp64 on random shapes (size-1 axes, broadcasting both ways,
 * batch axes, transposed matmul operands, every reduction axis set, every permutation
 * of up to 4 axes), and f32 gradients that match the f64 ones. */
/* The helpers of the public tests (tensors from arrays, the fp64 finite-difference check):
 * the grader takes only unit files from a submission, so this is always the staff copy. */
#include "../../labs/lab02-autograd/tests/check.h"

/* A random shape of ndim axes with sizes in [1, hi]. */
static void rand_shape(kn_rng *r, int ndim, int64_t hi, int64_t *s) {
    for (int i = 0; i < ndim; i++) s[i] = 1 + (int64_t)(kn_rng_u32(r) % (uint32_t)hi);
}

/* Two shapes that broadcast: b is a suffix of a with some axes set to 1, or the reverse. */
static void rand_broadcast_pair(kn_rng *r, int *na, int64_t *a, int *nb, int64_t *b) {
    *na = 1 + (int)(kn_rng_u32(r) % 3);
    rand_shape(r, *na, 3, a);
    *nb = 1 + (int)(kn_rng_u32(r) % (uint32_t)*na);
    for (int i = 0; i < *nb; i++) {
        b[i] = a[*na - *nb + i];
        if (kn_rng_u32(r) % 3 == 0) b[i] = 1;
    }
    if (kn_rng_u32(r) % 2) { /* let a have the size-1 axes instead */
        int64_t t[KN_MAX_DIMS];
        int n = *na;
        memcpy(t, a, sizeof t);
        for (int i = 0; i < *nb; i++)
            if (b[i] == 1 && kn_rng_u32(r) % 2) { t[n - *nb + i] = 1; b[i] = a[n - *nb + i]; }
        memcpy(a, t, sizeof t);
    }
}

typedef struct { int kind; } bin_ctx; /* 0 mul, 1 div */
static kn_val f_bin(kn_builder *b, const kn_val *x, void *c) {
    return ((bin_ctx *)c)->kind ? kn_div(b, x[0], x[1]) : kn_mul(b, x[0], x[1]);
}

KN_TEST(lab02_hidden_rules, mul_div_random_broadcasting) {
    kn_rng r = kn_rng_new(101);
    for (int trial = 0; trial < 12; trial++) {
        int na, nb;
        int64_t a[KN_MAX_DIMS], bs[KN_MAX_DIMS];
        rand_broadcast_pair(&r, &na, a, &nb, bs);
        bin_ctx c = {trial % 2};
        bool swap = trial % 3 == 0;
        kn_tensor *xs[2] = {l2_rand(KN_DT_F64, swap ? nb : na, swap ? bs : a, 0.5, 2, 200 + trial),
                            l2_rand(KN_DT_F64, swap ? na : nb, swap ? a : bs, 0.5, 2, 300 + trial)};
        char what[64];
        snprintf(what, sizeof what, "%s, trial %d", c.kind ? "div" : "mul", trial);
        l2_gradcheck(what, f_bin, &c, 2, xs, 400 + trial);
        kn_tensor_free(xs[0]);
        kn_tensor_free(xs[1]);
    }
}

typedef struct { int kind; } un_ctx; /* 0 exp, 1 log, 2 tanh */
static kn_val f_un(kn_builder *b, const kn_val *x, void *c) {
    switch (((un_ctx *)c)->kind) {
    case 0: return kn_exp(b, x[0]);
    case 1: return kn_ln(b, x[0]);
    default: return kn_tanh(b, x[0]);
    }
}

KN_TEST(lab02_hidden_rules, exp_log_tanh_random_shapes) {
    kn_rng r = kn_rng_new(102);
    for (int trial = 0; trial < 9; trial++) {
        int nd = (int)(kn_rng_u32(&r) % 4);
        int64_t s[KN_MAX_DIMS];
        rand_shape(&r, nd, 3, s);
        un_ctx c = {trial % 3};
        kn_tensor *x = l2_rand(KN_DT_F64, nd, s, c.kind == 1 ? 0.2 : -2, 2, 500 + trial);
        char what[64];
        snprintf(what, sizeof what, "unary %d, %d-d, trial %d", c.kind, nd, trial);
        l2_gradcheck(what, f_un, &c, 1, &x, 600 + trial);
        kn_tensor_free(x);
    }
}

/* x * x * x via exp(3 ln x) chains three lab rules: the chain rule through all of them. */
static kn_val f_cube(kn_builder *b, const kn_val *x, void *c) {
    (void)c;
    return kn_exp(b, kn_mul_scalar(b, kn_ln(b, x[0]), 3.0));
}

KN_TEST(lab02_hidden_rules, chain_of_rules) {
    int64_t s[] = {5};
    kn_tensor *x = l2_rand(KN_DT_F64, 1, s, 0.5, 2, 700);
    l2_gradcheck("exp(3 ln x)", f_cube, NULL, 1, &x, 701);
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
    kn_val xv = kn_input(b, "x", x), g;
    KN_ASSERT_OK(kn_backward(b, kn_sum(b, f_cube(b, &xv, NULL), 0, NULL, false), 1, &xv, &g));
    for (int i = 0; i < 5; i++) KN_ASSERT_CLOSE(l2_at(l2_tensor(b, g), i), 3 * pow(l2_at(x, i), 2), 1e-12, 1e-12);
    kn_builder_free(b);
    kn_tensor_free(x);
}

typedef struct { int mean, naxes, keep; int axes[KN_MAX_DIMS]; } red_ctx;
static kn_val f_red(kn_builder *b, const kn_val *x, void *c) {
    red_ctx *k = c;
    return k->mean ? kn_mean(b, x[0], k->naxes, k->axes, k->keep) : kn_sum(b, x[0], k->naxes, k->axes, k->keep);
}

KN_TEST(lab02_hidden_rules, sum_mean_every_axis_set) {
    kn_rng r = kn_rng_new(103);
    for (int nd = 1; nd <= 3; nd++) {
        int64_t s[KN_MAX_DIMS];
        rand_shape(&r, nd, 3, s);
        kn_tensor *x = l2_rand(KN_DT_F64, nd, s, -1, 1, 800 + nd);
        for (unsigned mask = 0; mask < (1u << nd); mask++)
            for (int mean = 0; mean < 2; mean++) {
                red_ctx c = {mean, 0, (int)((mask + (unsigned)mean) % 2), {0}};
                for (int i = 0; i < nd; i++)
                    if (mask & (1u << i)) c.axes[c.naxes++] = (kn_rng_u32(&r) % 2) ? i : i - nd; /* negative too */
                char what[96];
                snprintf(what, sizeof what, "%s, %d-d, axis mask %u (0: all), keepdim %d", mean ? "mean" : "sum", nd,
                         mask, c.keep);
                l2_gradcheck(what, f_red, &c, 1, &x, 900 + mask);
            }
        kn_tensor_free(x);
    }
}

typedef struct { bool ta, tb; } mm_ctx;
static kn_val f_mm(kn_builder *b, const kn_val *x, void *c) {
    mm_ctx *k = c;
    return kn_matmul_t(b, x[0], x[1], k->ta, k->tb);
}

KN_TEST(lab02_hidden_rules, matmul_random_batches_and_transposes) {
    kn_rng r = kn_rng_new(104);
    for (int trial = 0; trial < 12; trial++) {
        int64_t m = 1 + kn_rng_u32(&r) % 3, k = 1 + kn_rng_u32(&r) % 3, n = 1 + kn_rng_u32(&r) % 3;
        mm_ctx c = {trial % 2 == 1, (trial / 2) % 2 == 1};
        int kind = trial % 4; /* 0: 2-d @ 2-d, 1: batch @ 2-d, 2: batch @ batch, 3: broadcast batches */
        int64_t as[4], bs[4];
        int na = 2, nb = 2;
        if (kind == 2) { as[0] = bs[0] = 2; na = nb = 3; }
        if (kind == 1) { as[0] = 2; as[1] = 2; na = 4; }
        if (kind == 3) { as[0] = 2; as[1] = 1; bs[0] = 3; na = 4; nb = 3; }
        as[na - 2] = c.ta ? k : m; as[na - 1] = c.ta ? m : k;
        bs[nb - 2] = c.tb ? n : k; bs[nb - 1] = c.tb ? k : n;
        kn_tensor *xs[2] = {l2_rand(KN_DT_F64, na, as, -1, 1, 1000 + trial), l2_rand(KN_DT_F64, nb, bs, -1, 1, 1100 + trial)};
        char what[96];
        snprintf(what, sizeof what, "matmul kind %d, ta %d, tb %d, trial %d", kind, c.ta, c.tb, trial);
        l2_gradcheck(what, f_mm, &c, 2, xs, 1200 + trial);
        kn_tensor_free(xs[0]);
        kn_tensor_free(xs[1]);
    }
}

typedef struct { int nd; int perm[KN_MAX_DIMS]; } perm_ctx;
static kn_val f_perm(kn_builder *b, const kn_val *x, void *c) {
    perm_ctx *k = c;
    return kn_permute(b, x[0], k->nd, k->perm);
}

KN_TEST(lab02_hidden_rules, permute_random_permutations) {
    kn_rng r = kn_rng_new(105);
    for (int trial = 0; trial < 10; trial++) {
        perm_ctx c = {2 + trial % 3, {0}};
        int64_t s[KN_MAX_DIMS];
        rand_shape(&r, c.nd, 3, s);
        for (int i = 0; i < c.nd; i++) c.perm[i] = i;
        for (int i = c.nd - 1; i > 0; i--) { /* Fisher-Yates */
            int j = (int)(kn_rng_u32(&r) % (uint32_t)(i + 1)), t = c.perm[i];
            c.perm[i] = c.perm[j];
            c.perm[j] = t;
        }
        if (trial % 2) c.perm[0] -= c.nd; /* a negative entry */
        if (trial % 4 == 2) c.perm[c.nd - 1] -= c.nd; /* a negative entry that is not the first */
        kn_tensor *x = l2_rand(KN_DT_F64, c.nd, s, -1, 1, 1300 + trial);
        char what[64];
        snprintf(what, sizeof what, "permute trial %d", trial);
        l2_gradcheck(what, f_perm, &c, 1, &x, 1400 + trial);
        kn_tensor_free(x);
    }
}

/* A float32 graph gets float32 gradients equal (to f32 precision) to the f64 ones. */
KN_TEST(lab02_hidden_rules, f32_gradients_match_f64) {
    int64_t as[] = {3, 4}, bs[] = {4, 2};
    kn_tensor *a64 = l2_rand(KN_DT_F64, 2, as, 0.5, 1.5, 1500), *b64 = l2_rand(KN_DT_F64, 2, bs, 0.5, 1.5, 1501);
    const kn_tensor *g64[2];
    kn_builder *bb[2] = {NULL, NULL};
    kn_tensor *src[2][2] = {{a64, b64}, {NULL, NULL}};
    KN_ASSERT_OK(kn_tensor_cast(&src[1][0], a64, KN_DT_F32));
    KN_ASSERT_OK(kn_tensor_cast(&src[1][1], b64, KN_DT_F32));
    for (int p = 0; p < 2; p++) {
        KN_ASSERT_OK(kn_builder_new(&bb[p], KN_MODE_EAGER));
        kn_builder *b = bb[p];
        kn_val x[2] = {kn_input(b, "a", src[p][0]), kn_input(b, "b", src[p][1])}, g[2];
        kn_val y = kn_tanh(b, kn_div(b, kn_exp(b, kn_matmul(b, x[0], x[1])), kn_add_scalar(b, kn_ln(b, kn_matmul(b, x[0], x[1])), 2.0)));
        int ax[] = {0};
        kn_val loss = kn_mean(b, kn_sum(b, y, 1, ax, false), 0, NULL, false);
        KN_ASSERT_OK(kn_backward(b, loss, 2, x, g));
        cr_assert(l2_type(b, g[0])->dtype == (p ? KN_DT_F32 : KN_DT_F64), "gradient dtype follows the graph");
        if (p == 0) { g64[0] = l2_tensor(b, g[0]); g64[1] = l2_tensor(b, g[1]); }
        else
            for (int i = 0; i < 2; i++) {
                const kn_tensor *gi = l2_tensor(b, g[i]);
                for (int64_t j = 0; j < kn_tensor_numel(g64[i]); j++)
                    KN_ASSERT_CLOSE(l2_at(gi, j), l2_at(g64[i], j), 1e-5, 1e-4);
            }
    }
    kn_builder_free(bb[0]);
    kn_builder_free(bb[1]);
    kn_tensor_free(src[1][0]);
    kn_tensor_free(src[1][1]);
    kn_tensor_free(a64);
    kn_tensor_free(b64);
}

/* x @ y^T with a batched x [2,3,4] and a 2-d y [5,4]: y's gradient folds the batch into rows
 * (dy^T x, not x^T dy); and the same with x transposed. */
typedef struct { bool ta, tb; } mmt_ctx;
static kn_val f_mmt(kn_builder *b, const kn_val *x, void *c) {
    mmt_ctx *k = c;
    return kn_matmul_t(b, x[0], x[1], k->ta, k->tb);
}

KN_TEST(lab02_hidden_rules, matmul_batched_by_2d_transposed) {
    int64_t a[] = {2, 3, 4}, bt[] = {5, 4}, bn[] = {4, 5}, at[] = {2, 4, 3};
    mmt_ctx c1 = {false, true}, c2 = {false, false}, c3 = {true, true};
    kn_tensor *x = l2_rand(KN_DT_F64, 3, a, -1, 1, 1500), *yt = l2_rand(KN_DT_F64, 2, bt, -1, 1, 1501);
    kn_tensor *yn = l2_rand(KN_DT_F64, 2, bn, -1, 1, 1502), *xt = l2_rand(KN_DT_F64, 3, at, -1, 1, 1503);
    kn_tensor *p1[2] = {x, yt}, *p2[2] = {x, yn}, *p3[2] = {xt, yt};
    l2_gradcheck("[2,3,4] @ [5,4]^T", f_mmt, &c1, 2, p1, 1504);
    l2_gradcheck("[2,3,4] @ [4,5]", f_mmt, &c2, 2, p2, 1505);
    l2_gradcheck("[2,4,3]^T @ [5,4]^T", f_mmt, &c3, 2, p3, 1506);
    kn_tensor_free(x);
    kn_tensor_free(yt);
    kn_tensor_free(yn);
    kn_tensor_free(xt);
}

/* Only the first operand wants a gradient (the second is an input not in wrt): the rule
 * must still answer it. d sum(x*y)/dx = y, d sum(x/y)/dx = 1/y, d sum(A@B)/dA = rows of B summed. */
KN_TEST(lab02_hidden_rules, only_the_first_operand_wanted) {
    int64_t s[] = {2, 3}, sb[] = {3, 4};
    kn_tensor *xt = l2_rand(KN_DT_F64, 2, s, -1, 1, 1600), *yt = l2_rand(KN_DT_F64, 2, s, 0.5, 2, 1601);
    kn_tensor *bt = l2_rand(KN_DT_F64, 2, sb, -1, 1, 1602);
    for (int kind = 0; kind < 3; kind++) {
        kn_builder *b = NULL;
        KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_EAGER));
        kn_val x = kn_input(b, "x", xt), y = kn_input(b, "y", kind == 2 ? bt : yt);
        kn_val z = kind == 0 ? kn_mul(b, x, y) : kind == 1 ? kn_div(b, x, y) : kn_matmul(b, x, y);
        kn_val loss = kn_sum(b, z, 0, NULL, false), g;
        KN_ASSERT_OK(kn_backward(b, loss, 1, &x, &g));
        const kn_tensor *gt = l2_tensor(b, g);
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++) {
                double want = 0;
                if (kind == 0) want = l2_at(yt, 3 * i + j);
                else if (kind == 1) want = 1 / l2_at(yt, 3 * i + j);
                else for (int n = 0; n < 4; n++) want += l2_at(bt, 4 * j + n);
                KN_ASSERT_CLOSE(l2_at(gt, 3 * i + j), want, 1e-14, 1e-12);
            }
        kn_builder_free(b);
    }
    kn_tensor_free(xt);
    kn_tensor_free(yt);
    kn_tensor_free(bt);
}
