/* test_cuda_fast.c — the fast paths of the eager CUDA kernels against the CPU kernels:
 * collapsed layouts, 32-bit indices, 16-byte packs with their element-by-element tails,
 * widened strided copies and chunked (two-pass) reductions.
 *
 * Every case is chosen to reach one kernel variant (see core/runtime/cuda_elementwise.cu,
 * cuda_ops.cu and cuda_reduce.cu): sizes that are not multiples of the pack width, views
 * whose first element is not 16-byte aligned (a 1-D slice at an offset, reshaped), bias,
 * column and scalar broadcasts, broadcasts that keep 3 to 5 axes after collapsing, the GPT
 * permute and slice shapes in small, real transposes (shared-memory tiles) and thin ones
 * (no tiles), and column/row reductions on both sides of the chunking threshold, aligned
 * and not. Elementwise arithmetic, copies and max are a single operation per output
 * element on both devices, so they must agree bit for bit; sums and means accumulate in
 * double in a different order and must agree normwise to 1e-4 (f32) or 1e-12 (f64), as in
 * test_cuda_ops.c; gelu, whose tanh may differ in the last bits, to 1e-5 or 1e-12.
 * Outputs are poisoned first (0xFF bytes freed into the caching allocator), so an element
 * a kernel forgets shows up as NaN.
 *
 * Without a GPU each test skips with one line (the harness counts it as skipped). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kiln/cuda.h"
#include "kiln/device.h"
#include "cuda_test_util.h"

/* |x| + 0.5: divisors. */
static kn_tensor *randpos(kn_rng *r, kn_dtype dt, int nd, const int64_t *shape) {
    kn_tensor *t = randn(r, dt, nd, shape);
    for (int64_t i = 0; i < kn_tensor_numel(t); i++)
        kn_dtype_store(dt, kn_tensor_data(t), i, fabs(kn_dtype_load(dt, kn_tensor_data(t), i)) + 0.5);
    return t;
}

/* Infer n's type, run it on the CPU operands host[] and on the GPU operands dev[] (NULL:
 * copies of host[]), compare, return the GPU result on the host (caller frees); frees
 * host[] and dev[]. */
static kn_tensor *check_dev(kn_node *n, int nin, kn_tensor **host, kn_tensor **dev, int tol) {
    kn_tensor *d[KN_MAX_OPERANDS] = {NULL};
    gpu_operands(n, nin, host, dev, d);
    kn_tensor *want = NULL;
    KN_ASSERT_OK(kn_node_eval(n, (const kn_tensor *const *)host, &want));
    kn_tensor *hc = on_gpu(n, d);
    compare(n, hc, want, tol);
    kn_tensor_free(want);
    for (int i = 0; i < nin; i++) { kn_tensor_free(d[i]); kn_tensor_free(host[i]); }
    return hc;
}

static void check(kn_node *n, int nin, kn_tensor **host, int tol) { kn_tensor_free(check_dev(n, nin, host, NULL, tol)); }

static const kn_op arith[4] = {KN_OP_ADD, KN_OP_SUB, KN_OP_MUL, KN_OP_DIV};
static const kn_dtype float_dts[2] = {KN_DT_F32, KN_DT_F64};

/* a op b for operand shapes sa (na axes) and sb (nb axes), exact. */
static void binary_case(kn_rng *r, kn_op op, kn_dtype dt, int na, const int64_t *sa, int nb, const int64_t *sb) {
    kn_tensor *in[2] = {randn(r, dt, na, sa), op == KN_OP_DIV ? randpos(r, dt, nb, sb) : randn(r, dt, nb, sb)};
    kn_node n = node(op);
    check(&n, 2, in, TOL_EXACT);
}

KN_TEST(cuda_fast, contiguous_binary_on_sizes_not_divisible_by_the_pack) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(41);
    const int64_t sizes[] = {1, 2, 3, 5, 7, 9, 1001, 4099, 65537};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int k = 0; k < 8; k++) {
            int64_t sh[1] = {sizes[s]};
            binary_case(&r, arith[k % 4], float_dts[k / 4], 1, sh, 1, sh);
        }
    const int64_t sh3[3] = {3, 5, 7}, sh4[4] = {2, 3, 4, 8};
    for (int k = 0; k < 8; k++) {
        binary_case(&r, arith[k % 4], float_dts[k / 4], 3, sh3, 3, sh3);
        binary_case(&r, arith[k % 4], float_dts[k / 4], 4, sh4, 4, sh4);
    }
}

/* A contiguous view of shape (nd axes) on the GPU whose first element is `off` elements
 * into a larger buffer, and the same values as a contiguous CPU tensor in *host. */
static kn_tensor *offset_view(kn_rng *r, kn_dtype dt, int nd, const int64_t *shape, int64_t off, kn_tensor **host) {
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= shape[i];
    int64_t bs[1] = {n + off + 3};
    kn_tensor *big = randn(r, dt, 1, bs), *dbig = NULL, *ds = NULL, *dv = NULL, *hs = NULL, *hv = NULL;
    KN_ASSERT_OK(kn_tensor_to(&dbig, big, CUDA0));
    KN_ASSERT_OK(kn_tensor_slice(&ds, dbig, 0, off, off + n, 1));
    KN_ASSERT_OK(kn_tensor_view(&dv, ds, nd, shape));
    KN_ASSERT_OK(kn_tensor_slice(&hs, big, 0, off, off + n, 1));
    KN_ASSERT_OK(kn_tensor_view(&hv, hs, nd, shape));
    KN_ASSERT_OK(kn_tensor_contiguous(host, hv));
    cr_assert(kn_tensor_is_contiguous(dv));
    size_t align = ((uintptr_t)kn_tensor_data(dv)) % 16;
    cr_assert_eq(align, (size_t)(off * (int64_t)kn_dtype_size(dt)) % 16, "the view starts %zu bytes past 16", align);
    kn_tensor_free(big); kn_tensor_free(dbig); kn_tensor_free(ds); kn_tensor_free(hs); kn_tensor_free(hv);
    return dv;
}

KN_TEST(cuda_fast, misaligned_and_offset_views) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(42);
    const int64_t sh[2] = {37, 16}, row[1] = {16};
    for (int trial = 0; trial < 16; trial++) {
        kn_dtype dt = float_dts[trial % 2];
        int64_t oa = trial / 2 % 4 + (trial >= 8 ? 4 : 0), ob = (trial + 1) % 3; /* 0..7 and 0..2 elements */
        kn_tensor *host[2] = {NULL, NULL}, *dev[2];
        dev[0] = offset_view(&r, dt, 2, sh, oa, &host[0]);
        dev[1] = offset_view(&r, dt, trial % 3 ? 2 : 1, trial % 3 ? sh : row, ob, &host[1]);
        kn_node n = node(arith[trial % 3]);
        kn_tensor_free(check_dev(&n, 2, host, dev, TOL_EXACT));
        /* unary and activation backward read contiguous operands at any alignment */
        dev[0] = offset_view(&r, dt, 2, sh, oa, &host[0]);
        n = node(trial % 4 < 2 ? KN_OP_GELU : KN_OP_NEG); /* tanh may differ in the last bits */
        kn_tensor_free(check_dev(&n, 1, host, dev, n.op == KN_OP_GELU ? TOL_ELEM : TOL_EXACT));
        dev[0] = offset_view(&r, dt, 2, sh, ob, &host[0]);
        dev[1] = offset_view(&r, dt, 2, sh, oa, &host[1]);
        n = node(KN_OP_UNARY_GRAD);
        n.attrs.fn = KN_UNARY_RELU;
        kn_tensor_free(check_dev(&n, 2, host, dev, TOL_EXACT));
    }
}

KN_TEST(cuda_fast, bias_row_and_column_broadcasts) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(43);
    const int64_t nc[][2] = {{64, 768}, {33, 3}, {5, 1027}, {7, 6}, {9, 8}, {2, 4}};
    for (size_t c = 0; c < sizeof nc / sizeof nc[0]; c++)
        for (int k = 0; k < 8; k++) {
            kn_op op = arith[k % 4];
            kn_dtype dt = float_dts[k / 4];
            int64_t full[2] = {nc[c][0], nc[c][1]}, bias[1] = {nc[c][1]}, colv[2] = {nc[c][0], 1};
            binary_case(&r, op, dt, 2, full, 1, bias); /* [N,C] op [C] */
            binary_case(&r, op, dt, 1, bias, 2, full); /* [C] op [N,C] */
            binary_case(&r, op, dt, 2, full, 2, colv); /* [N,C] op [N,1]: one value per pack */
            binary_case(&r, op, dt, 2, colv, 1, bias); /* [N,1] op [C] -> [N,C] */
        }
}

KN_TEST(cuda_fast, scalar_broadcasts) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(44);
    const int64_t big[4] = {2, 3, 64, 64}, odd[3] = {3, 7, 5}, one[1] = {1};
    for (int k = 0; k < 8; k++) {
        kn_op op = arith[k % 4];
        kn_dtype dt = float_dts[k / 4];
        binary_case(&r, op, dt, 4, big, 0, one);
        binary_case(&r, op, dt, 0, one, 4, big);
        binary_case(&r, op, dt, 3, odd, 1, one);
        binary_case(&r, op, dt, 1, one, 3, odd);
        binary_case(&r, op, dt, 0, one, 0, one);
    }
}

KN_TEST(cuda_fast, broadcasts_that_keep_three_or_more_axes) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(45);
    for (int k = 0; k < 8; k++) {
        kn_op op = arith[k % 4];
        kn_dtype dt = float_dts[k / 4];
        const int64_t a1[3] = {4, 1, 8}, b1[3] = {1, 5, 8};          /* 3 axes, packs of the last one */
        const int64_t a2[3] = {4, 1, 7}, b2[3] = {1, 5, 7};          /* 3 axes, element by element */
        const int64_t a3[4] = {3, 1, 6, 4}, b3[4] = {3, 5, 1, 4};    /* 4 axes */
        const int64_t a4[5] = {2, 3, 1, 5, 1}, b4[3] = {4, 1, 6};    /* [2,3,4,5,6], 5 axes */
        binary_case(&r, op, dt, 3, a1, 3, b1);
        binary_case(&r, op, dt, 3, a2, 3, b2);
        binary_case(&r, op, dt, 4, a3, 4, b3);
        binary_case(&r, op, dt, 5, a4, 3, b4);
    }
    /* eq and where on collapsed broadcasts, any dtypes */
    for (int trial = 0; trial < 4; trial++) {
        const int64_t sh[3] = {4, 9, 12}, col[3] = {4, 9, 1}, row[1] = {12};
        kn_tensor *in[3] = {NULL, NULL, NULL}, *a = randn(&r, KN_DT_F32, 3, sh), *b = randn(&r, KN_DT_F32, 1, row);
        for (int64_t i = 0; i < 12; i += 3) /* some equal elements */
            ((float *)kn_tensor_data(a))[i] = ((float *)kn_tensor_data(b))[i];
        KN_ASSERT_OK(kn_tensor_cast(&in[0], a, trial % 2 ? KN_DT_F64 : KN_DT_F32));
        KN_ASSERT_OK(kn_tensor_cast(&in[1], b, trial % 2 ? KN_DT_F64 : KN_DT_F32));
        kn_node n = node(KN_OP_EQ);
        check(&n, 2, in, TOL_EXACT);
        kn_tensor *c = randn(&r, KN_DT_F32, 3, col);
        for (int64_t i = 0; i < kn_tensor_numel(c); i++) ((float *)kn_tensor_data(c))[i] = (float)(kn_rng_u32(&r) & 1u);
        KN_ASSERT_OK(kn_tensor_cast(&in[0], c, KN_DT_BOOL));
        KN_ASSERT_OK(kn_tensor_cast(&in[1], b, KN_DT_F32));
        in[2] = randn(&r, KN_DT_F32, 3, sh);
        n = node(KN_OP_WHERE);
        check(&n, 3, in, TOL_EXACT);
        kn_tensor_free(a); kn_tensor_free(b); kn_tensor_free(c);
    }
}

static void permute_case(kn_rng *r, kn_dtype dt, int nd, const int64_t *shape, const int64_t *perm) {
    kn_tensor *f = randn(r, KN_DT_F64, nd, shape), *in[1] = {NULL};
    for (int64_t i = 0; i < kn_tensor_numel(f); i++) ((double *)kn_tensor_data(f))[i] *= 100.0;
    KN_ASSERT_OK(kn_tensor_cast(&in[0], f, dt));
    kn_tensor_free(f);
    kn_node n = node(KN_OP_PERMUTE);
    n.attrs.nperm = nd;
    memcpy(n.attrs.perm, perm, sizeof(int64_t) * (size_t)nd);
    check(&n, 1, in, TOL_EXACT);
}

KN_TEST(cuda_fast, large_permutes_and_transposes) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(46);
    const kn_dtype dts[5] = {KN_DT_F32, KN_DT_F64, KN_DT_I32, KN_DT_U8, KN_DT_F16};
    for (int k = 0; k < 5; k++) {
        const int64_t qkv[5] = {8, 64, 3, 4, 32}, qkvp[5] = {2, 0, 3, 1, 4};
        const int64_t heads[4] = {8, 12, 64, 16}, headsp[4] = {0, 2, 1, 3};
        const int64_t odd[5] = {3, 5, 3, 2, 7}, oddp[5] = {2, 0, 3, 1, 4};
        const int64_t tr[2] = {33, 65}, trp[2] = {1, 0};
        const int64_t rot[3] = {6, 10, 32}, rotp[3] = {2, 0, 1};
        const int64_t bt[3] = {8, 300, 17}, btp[3] = {0, 2, 1};          /* batched, partial tiles */
        const int64_t mix[4] = {3, 40, 5, 36}, mixp[4] = {3, 0, 2, 1};   /* tiles with 2 batch axes */
        const int64_t thin[2] = {5000, 3}, thinp[2] = {1, 0};            /* too thin to tile */
        permute_case(&r, dts[k], 3, bt, btp);
        permute_case(&r, dts[k], 4, mix, mixp);
        permute_case(&r, dts[k], 2, thin, thinp);
        permute_case(&r, dts[k], 5, qkv, qkvp);
        permute_case(&r, dts[k], 4, heads, headsp);
        permute_case(&r, dts[k], 5, odd, oddp);
        permute_case(&r, dts[k], 2, tr, trp);
        permute_case(&r, dts[k], 3, rot, rotp);
    }
}

KN_TEST(cuda_fast, slices_slice_grads_broadcast_to_and_contiguous) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(47);
    const int64_t sh[5] = {3, 8, 4, 64, 16};
    /* axis, start, stop, step: the q/k/v split, strided and odd slices */
    const int64_t cases[][4] = {{0, 0, 1, 1}, {0, 1, 2, 1}, {0, 2, 3, 1}, {0, 0, 3, 2}, {3, 1, 64, 3},
                                {4, 0, 16, 2}, {4, 3, 10, 1}, {-1, 1, 16, 1}, {1, 2, 7, 1}, {3, 5, 6, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        kn_dtype dt = float_dts[c % 2];
        kn_node n = node(KN_OP_SLICE);
        n.attrs.axis = cases[c][0];
        n.attrs.start = cases[c][1];
        n.attrs.stop = cases[c][2];
        n.attrs.step = cases[c][3];
        kn_tensor *in[1] = {randn(&r, dt, 5, sh)};
        check(&n, 1, in, TOL_EXACT);
        kn_node g = n;
        g.op = KN_OP_SLICE_GRAD;
        g.attrs.nshape = 5;
        memcpy(g.attrs.shape, sh, sizeof sh);
        in[0] = randn(&r, dt, n.type.ndim, n.type.shape);
        check(&g, 1, in, TOL_EXACT);
    }
    for (int k = 0; k < 2; k++) { /* broadcast_to: a bias row, a column, a scalar */
        const int64_t small[3][3] = {{1, 1, 24}, {5, 1, 1}, {1, 1, 1}}, to[3] = {5, 6, 24};
        for (int c = 0; c < 3; c++) {
            kn_node n = node(KN_OP_BROADCAST_TO);
            n.attrs.nshape = 3;
            memcpy(n.attrs.shape, to, sizeof to);
            kn_tensor *in[1] = {randn(&r, float_dts[k], 3, small[c])};
            check(&n, 1, in, TOL_EXACT);
        }
    }
    /* kn_cuda_contiguous of strided, permuted views of a GPU tensor (rows kept, transposed) */
    const int64_t vs[3] = {6, 10, 40};
    const int perms[2][3] = {{1, 0, 2}, {2, 1, 0}};
    for (int k = 0; k < 2; k++) {
        kn_tensor *h = randn(&r, KN_DT_F32, 3, vs), *d = NULL, *ds = NULL, *dp = NULL, *hs = NULL, *hp = NULL;
        kn_tensor *want = NULL, *got = NULL, *back = NULL;
        KN_ASSERT_OK(kn_tensor_to(&d, h, CUDA0));
        KN_ASSERT_OK(kn_tensor_slice(&ds, d, 2, 4, 36, 1));
        KN_ASSERT_OK(kn_tensor_permute(&dp, ds, perms[k]));
        KN_ASSERT_OK(kn_tensor_slice(&hs, h, 2, 4, 36, 1));
        KN_ASSERT_OK(kn_tensor_permute(&hp, hs, perms[k]));
        KN_ASSERT_OK(kn_tensor_contiguous(&want, hp));
        KN_ASSERT_OK(kn_device_contiguous(NULL, dp, &got));
        KN_ASSERT_OK(kn_tensor_to(&back, got, KN_CPU));
        KN_ASSERT_OK(kn_device_synchronize(CUDA0));
        cr_assert(irt_same_bits(back, want), "kn_cuda_contiguous (perm %d) differs from the CPU copy", k);
        kn_tensor *list[] = {h, d, ds, dp, hs, hp, want, got, back};
        for (size_t i = 0; i < sizeof list / sizeof list[0]; i++) kn_tensor_free(list[i]);
    }
}

/* op over the given axes of shape, checked; NaN planted at element nan_at (< 0: none). */
static void reduce_case(kn_rng *r, kn_op op, kn_dtype dt, int nd, const int64_t *shape, int naxes, const int *axes,
                        int64_t nan_at) {
    kn_node n = node(op);
    n.attrs.naxes = naxes;
    for (int i = 0; i < naxes; i++) n.attrs.axes[i] = axes[i];
    kn_tensor *in[1] = {randn(r, dt, nd, shape)};
    if (nan_at >= 0) kn_dtype_store(dt, kn_tensor_data(in[0]), nan_at, NAN);
    check(&n, 1, in, op == KN_OP_MAX ? TOL_EXACT : TOL_REDUCE);
}

KN_TEST(cuda_fast, column_reductions_across_the_chunking_threshold) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(48);
    const kn_op ops[3] = {KN_OP_SUM, KN_OP_MEAN, KN_OP_MAX};
    const int64_t s3[3] = {2, 1000, 40}, s5000[2] = {5000, 3}, s8192[2] = {8192, 96}, sbias[2] = {8192, 768};
    const int64_t s200[2] = {200, 700}, sfew[2] = {100, 5};
    const int ax0[1] = {0}, ax1[1] = {1}, ax01[2] = {0, 1}, axm[2] = {-3, -2};
    for (int k = 0; k < 6; k++) {
        kn_op op = ops[k % 3];
        kn_dtype dt = float_dts[k / 3];
        reduce_case(&r, op, dt, 3, s3, 1, ax0, -1);
        reduce_case(&r, op, dt, 3, s3, 1, ax1, -1);
        reduce_case(&r, op, dt, 3, s3, 2, ax01, -1);
        reduce_case(&r, op, dt, 3, s3, 2, axm, k == 2 ? 4321 : -1);
        reduce_case(&r, op, dt, 2, s5000, 1, ax0, k == 2 ? 3 * 4000 + 1 : -1);
        reduce_case(&r, op, dt, 2, s8192, 1, ax0, k == 5 ? 95 : -1);
        reduce_case(&r, op, dt, 2, s200, 1, ax0, -1);
        reduce_case(&r, op, dt, 2, sfew, 1, ax0, -1);
        if (k % 3 == 0) reduce_case(&r, op, dt, 2, sbias, 1, ax0, -1);
    }
    /* operands at offsets: 16-byte loads of 4 (f32) or 2 (f64) columns only when aligned */
    for (int k = 0; k < 12; k++) {
        const int64_t sh[2] = {300, 40};
        kn_tensor *host[1] = {NULL}, *dev[1] = {offset_view(&r, float_dts[k % 2], 2, sh, k / 2 % 6, &host[0])};
        kn_node n = node(ops[k % 3]);
        n.attrs.naxes = 1;
        n.attrs.axes[0] = 0;
        kn_tensor_free(check_dev(&n, 1, host, dev, n.op == KN_OP_MAX ? TOL_EXACT : TOL_REDUCE));
    }
}

KN_TEST(cuda_fast, row_reductions_short_long_and_whole) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(49);
    const kn_op ops[3] = {KN_OP_SUM, KN_OP_MEAN, KN_OP_MAX};
    const int64_t shorts[2] = {4099, 7}, mid[2] = {300, 1024}, longr[2] = {3, 20000}, one[1] = {100003};
    const int64_t whole[2] = {300, 500};
    const int axl[1] = {-1}, ax01[2] = {0, 1};
    for (int k = 0; k < 6; k++) {
        kn_op op = ops[k % 3];
        kn_dtype dt = float_dts[k / 3];
        reduce_case(&r, op, dt, 2, shorts, 1, axl, k == 2 ? 7 * 100 + 3 : -1);
        reduce_case(&r, op, dt, 2, mid, 1, axl, -1);
        reduce_case(&r, op, dt, 2, longr, 1, axl, k == 5 ? 20000 + 17 : -1);
        reduce_case(&r, op, dt, 1, one, 0, NULL, k == 2 ? 99999 : -1);
        reduce_case(&r, op, dt, 2, whole, 2, ax01, -1);
    }
}

/* The same reduction twice on the GPU: the same bits. */
static void same_twice(kn_rng *r, kn_op op, int nd, const int64_t *shape, int naxes, const int *axes) {
    kn_node n = node(op);
    n.attrs.naxes = naxes;
    for (int i = 0; i < naxes; i++) n.attrs.axes[i] = axes[i];
    kn_tensor *h = randn(r, KN_DT_F32, nd, shape), *h2 = NULL, *in[1] = {h};
    KN_ASSERT_OK(kn_tensor_clone(&h2, h));
    kn_tensor *a = check_dev(&n, 1, in, NULL, TOL_REDUCE); /* frees h */
    in[0] = h2;
    kn_tensor *b = check_dev(&n, 1, in, NULL, TOL_REDUCE); /* frees h2 */
    cr_assert(irt_same_bits(a, b), "%s: two runs of the same reduction differ", kn_op_name(op));
    kn_tensor_free(a);
    kn_tensor_free(b);
}

KN_TEST(cuda_fast, chunked_reductions_are_deterministic) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(50);
    const int64_t cols[2] = {8192, 96}, bias[2] = {8192, 768}, rows[2] = {3, 50000};
    const int ax0[1] = {0}, axl[1] = {-1};
    same_twice(&r, KN_OP_SUM, 2, cols, 1, ax0);
    same_twice(&r, KN_OP_MEAN, 2, bias, 1, ax0);
    same_twice(&r, KN_OP_SUM, 2, rows, 1, axl);
    same_twice(&r, KN_OP_SUM, 2, rows, 0, NULL);
}
