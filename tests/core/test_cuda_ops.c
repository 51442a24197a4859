/* test_cuda_ops.c — every op's CUDA kernel (forward and backward ops alike) against its CPU
 * kernel, on fresh random shapes and values from kn_rng.
 *
 * Each check builds one node, infers its type, runs kn_node_eval on CPU operands (the
 * reference) and on copies of them on cuda:0 (the dispatch sends it to the CUDA kernel),
 * and compares. Outputs are poisoned first: a block of the output's size is filled with
 * 0xFF bytes (NaN for floats) and freed into the caching allocator, whose LIFO free list
 * hands that same block to the kernel's output, so an element the kernel forgets to write
 * shows up as NaN (or as 255 in a bool). Tolerances are normwise: max|gpu - cpu| /
 * max|cpu| < 1e-5 for f32 elementwise ops, < 1e-4 for reductions and matmul (TF32 off),
 * 1e-12 for f64; integer, bool, movement and dropout results must match exactly.
 *
 * Without a GPU each test skips with one line (the harness counts it as skipped). */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln/cuda.h"
#include "kiln/device.h"
#include "kiln/scalar.h"
#include "cuda_test_util.h"
#include "runtime/cuda_embedding.h"

static int64_t rnd(kn_rng *r, int64_t lo, int64_t hi) { return lo + (int64_t)(kn_rng_u32(r) % (uint32_t)(hi - lo + 1)); }

/* |x| + 0.2: operands of log, sqrt, rsqrt and divisors. */
static kn_tensor *randpos(kn_rng *r, kn_dtype dt, int nd, const int64_t *shape) {
    kn_tensor *t = randn(r, dt, nd, shape);
    for (int64_t i = 0; i < kn_tensor_numel(t); i++)
        kn_dtype_store(dt, kn_tensor_data(t), i, fabs(kn_dtype_load(dt, kn_tensor_data(t), i)) + 0.2);
    return t;
}

static kn_tensor *randint(kn_rng *r, kn_dtype dt, int nd, const int64_t *shape, int64_t hi) {
    kn_tensor *t = NULL;
    KN_ASSERT_OK(kn_tensor_zeros(&t, dt, nd, shape));
    for (int64_t i = 0; i < kn_tensor_numel(t); i++) kn_dtype_store(dt, kn_tensor_data(t), i, (double)(kn_rng_u32(r) % (uint32_t)hi));
    return t;
}

/* The most times one row of [0, v) is named in idx. */
static int64_t most_named(const kn_tensor *idx, int64_t v) {
    int64_t most = 0, *count = calloc((size_t)v, sizeof *count);
    cr_assert(count);
    for (int64_t i = 0; i < kn_tensor_numel(idx); i++) {
        int64_t c = ++count[(int64_t)kn_dtype_load(idx->dtype, kn_tensor_data(idx), i)];
        if (c > most) most = c;
    }
    free(count);
    return most;
}

static void random_shape(kn_rng *r, int *nd, int64_t *shape, int maxnd, int64_t maxdim) {
    *nd = (int)rnd(r, 1, maxnd);
    for (int i = 0; i < *nd; i++) shape[i] = rnd(r, 1, maxdim);
}

/* Infer n's type from the operands, run it on the CPU and on cuda:0, compare; frees in[]. */
static void check(kn_node *n, int nin, kn_tensor **in, int tol) {
    kn_tensor *want = NULL, *dev[KN_MAX_OPERANDS] = {NULL};
    gpu_operands(n, nin, in, NULL, dev);
    KN_ASSERT_OK(kn_node_eval(n, (const kn_tensor *const *)in, &want));
    kn_tensor *hc = on_gpu(n, dev);
    compare(n, hc, want, tol);
    kn_tensor_free(hc);
    kn_tensor_free(want);
    for (int i = 0; i < nin; i++) { kn_tensor_free(dev[i]); kn_tensor_free(in[i]); }
}

static const kn_dtype float_dts[2] = {KN_DT_F32, KN_DT_F64};

KN_TEST(cuda_ops, every_op_has_a_cuda_kernel_or_is_a_source) {
    bool built = kn_device_backend_get(KN_DEVICE_CUDA) != NULL;
    for (int op = 0; op < KN_OP_COUNT; op++) {
        /* sources are bound; collectives run in the program's context, never a device kernel */
        kn_op_category cat = kn_op_get((kn_op)op)->category;
        bool source = cat == KN_CAT_SOURCE || cat == KN_CAT_COLLECTIVE;
        cr_assert_eq(kn_device_supports_op(KN_DEVICE_CUDA, (kn_op)op), built && !source, "%s", kn_op_name((kn_op)op));
    }
}

KN_TEST(cuda_ops, binary_with_broadcasting) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(11);
    const kn_op ops[4] = {KN_OP_ADD, KN_OP_SUB, KN_OP_MUL, KN_OP_DIV};
    for (int trial = 0; trial < 24; trial++) {
        int nd;
        int64_t sh[KN_MAX_DIMS], sa[KN_MAX_DIMS], sb[KN_MAX_DIMS];
        random_shape(&r, &nd, sh, 4, 7);
        int na = (int)rnd(&r, 1, nd), nb = (int)rnd(&r, 1, nd);
        for (int i = 0; i < na; i++) sa[i] = rnd(&r, 0, 2) ? sh[nd - na + i] : 1;
        for (int i = 0; i < nb; i++) sb[i] = rnd(&r, 0, 2) ? sh[nd - nb + i] : 1;
        kn_op op = ops[trial % 4];
        kn_dtype dt = float_dts[trial / 4 % 2];
        kn_tensor *in[2] = {randn(&r, dt, na, sa), op == KN_OP_DIV ? randpos(&r, dt, nb, sb) : randn(&r, dt, nb, sb)};
        kn_node n = node(op);
        check(&n, 2, in, TOL_ELEM);
    }
}

/* Every pointwise function of kiln/pointwise.def with an IR op, and the unary_grad of every
 * one with a gradient column, f32 and f64: the table's rows, so a new row is tested here. */
KN_TEST(cuda_ops, unary_and_unary_grad_every_row) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(12);
    for (int f = 0; f < KN_UNARY_COUNT; f++)
        for (int bwd = 0; bwd < 2; bwd++)
            for (int d = 0; d < 2; d++) {
                kn_op op = bwd ? KN_OP_UNARY_GRAD : kn_unary_ir_op((kn_unary_op)f);
                if (op == KN_OP_COUNT || (bwd && !kn_sc_unary_has_grad((kn_unary_op)f))) continue;
                int nd;
                int64_t sh[KN_MAX_DIMS];
                random_shape(&r, &nd, sh, 3, 40);
                kn_dtype dt = float_dts[d];
                bool pos = !bwd && (f == KN_UNARY_LOG || f == KN_UNARY_SQRT || f == KN_UNARY_RSQRT);
                kn_tensor *in[2] = {pos ? randpos(&r, dt, nd, sh) : randn(&r, dt, nd, sh), randn(&r, dt, nd, sh)};
                kn_node n = node(op);
                if (bwd) n.attrs.fn = f;
                if (!bwd) kn_tensor_free(in[1]);
                check(&n, bwd ? 2 : 1, in, TOL_ELEM);
            }
}

KN_TEST(cuda_ops, eq_where_cast) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(13);
    for (int trial = 0; trial < 6; trial++) {
        int64_t sh[2] = {rnd(&r, 1, 9), rnd(&r, 1, 9)}, row[1] = {sh[1]};
        kn_dtype dt = trial % 2 ? KN_DT_I64 : KN_DT_F32;
        kn_tensor *in[3] = {randint(&r, dt, 2, sh, 3), randint(&r, dt, 1, row, 3), NULL};
        kn_node n = node(KN_OP_EQ);
        check(&n, 2, in, TOL_EXACT);
        in[0] = randint(&r, KN_DT_BOOL, 2, sh, 2);
        in[1] = randn(&r, KN_DT_F32, 1, row);
        in[2] = randn(&r, KN_DT_F32, 2, sh);
        n = node(KN_OP_WHERE);
        check(&n, 3, in, TOL_EXACT);
    }
    const kn_dtype pairs[][2] = {{KN_DT_F32, KN_DT_F64}, {KN_DT_F64, KN_DT_F32}, {KN_DT_F32, KN_DT_I32}, {KN_DT_I64, KN_DT_F32},
                                 {KN_DT_F32, KN_DT_BOOL}, {KN_DT_I32, KN_DT_I64}, {KN_DT_F32, KN_DT_F16}, {KN_DT_F64, KN_DT_BF16},
                                 {KN_DT_F16, KN_DT_F32}, {KN_DT_I64, KN_DT_U8}, {KN_DT_F64, KN_DT_I64}, {KN_DT_BOOL, KN_DT_F32}};
    for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++) {
        int64_t sh[1] = {rnd(&r, 1, 300)};
        kn_tensor *src = randn(&r, KN_DT_F64, 1, sh), *in[1] = {NULL};
        for (int64_t i = 0; i < sh[0]; i++) ((double *)kn_tensor_data(src))[i] *= 300.0; /* saturates u8, i32 fine */
        KN_ASSERT_OK(kn_tensor_cast(&in[0], src, pairs[p][0]));
        kn_tensor_free(src);
        kn_node n = node(KN_OP_CAST);
        n.attrs.dtype = pairs[p][1];
        check(&n, 1, in, TOL_EXACT);
    }
}

KN_TEST(cuda_ops, dropout_draws_the_cpu_mask_and_causal_fill) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(14);
    for (int trial = 0; trial < 6; trial++) {
        int64_t sh[2] = {rnd(&r, 1, 50), rnd(&r, 1, 300)};
        kn_tensor *in[1] = {randn(&r, float_dts[trial % 2], 2, sh)};
        kn_node n = node(KN_OP_DROPOUT);
        n.attrs.p = 0.1 + 0.1 * (double)trial;
        n.attrs.seed = (int64_t)kn_rng_u32(&r) << 20 | kn_rng_u32(&r);
        n.attrs.offset = trial % 2 ? ((int64_t)1 << 33) + rnd(&r, 0, 7) : rnd(&r, 0, 1000);
        check(&n, 1, in, TOL_EXACT); /* same mask, same scaling: bit for bit */
    }
    for (int trial = 0; trial < 4; trial++) {
        int64_t sh[3] = {rnd(&r, 1, 4), rnd(&r, 1, 20), rnd(&r, 1, 20)};
        kn_tensor *in[1] = {randn(&r, float_dts[trial % 2], 3, sh)};
        kn_node n = node(KN_OP_CAUSAL_FILL);
        n.attrs.value = trial < 2 ? -INFINITY : 0.5;
        check(&n, 1, in, TOL_EXACT);
    }
}

KN_TEST(cuda_ops, reductions_over_random_axes) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(15);
    const kn_op ops[3] = {KN_OP_SUM, KN_OP_MEAN, KN_OP_MAX};
    for (int trial = 0; trial < 30; trial++) {
        int nd;
        int64_t sh[KN_MAX_DIMS];
        random_shape(&r, &nd, sh, 4, 12);
        if (trial % 5 == 0) sh[nd - 1] = rnd(&r, 1000, 5000); /* long rows: many warps per row */
        kn_node n = node(ops[trial % 3]);
        n.attrs.keepdim = trial % 2;
        for (int i = 0; i < nd; i++)
            if (rnd(&r, 0, 1)) n.attrs.axes[n.attrs.naxes++] = rnd(&r, 0, 1) ? i : i - nd;
        kn_tensor *in[1] = {randn(&r, float_dts[trial / 3 % 2], nd, sh)};
        check(&n, 1, in, TOL_REDUCE);
    }
    for (int trial = 0; trial < 6; trial++) { /* bias gradients: [rows, C] summed over rows */
        int64_t sh[3] = {rnd(&r, 1, 3), rnd(&r, 20, 3000), rnd(&r, 1, 100)};
        kn_node n = node(ops[trial % 3]);
        n.attrs.naxes = 2;
        n.attrs.axes[0] = 0;
        n.attrs.axes[1] = 1;
        kn_tensor *in[1] = {randn(&r, float_dts[trial % 2], 3, sh)};
        check(&n, 1, in, TOL_REDUCE);
    }
}

KN_TEST(cuda_ops, matmul_with_transposes_and_broadcast_batches) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(16);
    for (int trial = 0; trial < 24; trial++) {
        int64_t m = rnd(&r, 1, 70), k = rnd(&r, 1, 70), nn = rnd(&r, 1, 70);
        int64_t sa[5], sb[5];
        int nba = (int)rnd(&r, 0, 2), nbb = (int)rnd(&r, 0, 2);
        int64_t batch[2] = {rnd(&r, 1, 3), rnd(&r, 1, 3)};
        for (int i = 0; i < nba; i++) sa[i] = rnd(&r, 0, 1) ? batch[2 - nba + i] : 1;
        for (int i = 0; i < nbb; i++) sb[i] = rnd(&r, 0, 1) ? batch[2 - nbb + i] : 1;
        kn_node n = node(KN_OP_MATMUL);
        n.attrs.ta = trial % 2;
        n.attrs.tb = trial / 2 % 2;
        sa[nba] = n.attrs.ta ? k : m; sa[nba + 1] = n.attrs.ta ? m : k;
        sb[nbb] = n.attrs.tb ? nn : k; sb[nbb + 1] = n.attrs.tb ? k : nn;
        kn_dtype dt = float_dts[trial / 4 % 2];
        kn_tensor *in[2] = {randn(&r, dt, nba + 2, sa), randn(&r, dt, nbb + 2, sb)};
        check(&n, 2, in, TOL_REDUCE);
    }
}

KN_TEST(cuda_ops, views_and_slice_grad) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(17);
    for (int trial = 0; trial < 8; trial++) {
        int64_t sh[4] = {rnd(&r, 1, 5), rnd(&r, 1, 6), rnd(&r, 1, 7), rnd(&r, 1, 8)};
        kn_dtype dt = trial % 2 ? KN_DT_F64 : KN_DT_F32;
        kn_node n = node(KN_OP_PERMUTE);
        int64_t perm[4] = {0, 1, 2, 3};
        for (int i = 3; i > 0; i--) { int j = (int)rnd(&r, 0, i); int64_t t = perm[i]; perm[i] = perm[j]; perm[j] = t; }
        n.attrs.nperm = 4;
        memcpy(n.attrs.perm, perm, sizeof perm);
        kn_tensor *in[1] = {randn(&r, dt, 4, sh)};
        check(&n, 1, in, TOL_EXACT);

        n = node(KN_OP_RESHAPE);
        n.attrs.nshape = 2;
        n.attrs.shape[0] = sh[0] * sh[1];
        n.attrs.shape[1] = -1;
        in[0] = randn(&r, dt, 4, sh);
        check(&n, 1, in, TOL_EXACT);

        n = node(KN_OP_BROADCAST_TO);
        int64_t small[3] = {1, sh[2], 1};
        n.attrs.nshape = 4;
        memcpy(n.attrs.shape, sh, sizeof sh);
        in[0] = randn(&r, dt, 3, small);
        check(&n, 1, in, TOL_EXACT);

        int ax = (int)rnd(&r, 0, 3);
        n = node(KN_OP_SLICE);
        n.attrs.axis = ax;
        n.attrs.start = rnd(&r, 0, sh[ax]);
        n.attrs.stop = rnd(&r, 0, sh[ax] + 1);
        n.attrs.step = rnd(&r, 1, 3);
        in[0] = randn(&r, dt, 4, sh);
        check(&n, 1, in, TOL_EXACT);

        kn_node g = n; /* slice_grad scatters the slice back into zeros of sh */
        g.op = KN_OP_SLICE_GRAD;
        g.attrs.nshape = 4;
        memcpy(g.attrs.shape, sh, sizeof sh);
        in[0] = randn(&r, dt, n.type.ndim, n.type.shape);
        check(&g, 1, in, TOL_EXACT);
    }
}

KN_TEST(cuda_ops, embedding_and_its_deterministic_gradient) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(18);
    for (int trial = 0; trial < 8; trial++) {
        int64_t v = rnd(&r, 1, 60), d = rnd(&r, 1, 300), ish[2] = {rnd(&r, 1, 8), rnd(&r, 1, 64)};
        kn_dtype dt = float_dts[trial % 2], it = trial / 2 % 2 ? KN_DT_I32 : KN_DT_I64;
        int64_t wsh[2] = {v, d}, gsh[3] = {ish[0], ish[1], d};
        kn_tensor *in[2] = {randn(&r, dt, 2, wsh), randint(&r, it, 2, ish, v)};
        kn_node n = node(KN_OP_EMBEDDING);
        check(&n, 2, in, TOL_EXACT);
        in[0] = randn(&r, dt, 3, gsh);
        in[1] = randint(&r, it, 2, ish, trial < 4 ? v : (v + 3) / 4); /* many repeats */
        n = node(KN_OP_EMBEDDING_GRAD);
        n.attrs.nshape = 2;
        n.attrs.shape[0] = v;
        n.attrs.shape[1] = d;
        /* a row named at most KN_EMBEDDING_CHUNK times is the CPU's sum in the CPU's order; a
         * longer one is summed in chunks (cuda_embedding.cu), equal to rounding */
        check(&n, 2, in, most_named(in[1], v) <= KN_EMBEDDING_CHUNK ? TOL_EXACT : TOL_REDUCE);
    }
}

/* GPT-2's shape (B 8, T 1024, C 768, vocab 50304): the gradient for uniform indices, every
 * index the same (one row of 8192 positions) and a skewed distribution, against the CPU to
 * rounding, and bit for bit the same in a second run on the GPU. */
KN_TEST(cuda_ops, embedding_grad_at_gpt2_shape_is_deterministic, .timeout = 120) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(20);
    int64_t ish[2] = {8, 1024}, gsh[3] = {8, 1024, 768}, v = 50304;
    for (int dist = 0; dist < 3; dist++) {
        kn_tensor *dy = randn(&r, KN_DT_F32, 3, gsh), *idx = randint(&r, KN_DT_I32, 2, ish, v);
        int32_t *ix = (int32_t *)kn_tensor_data(idx);
        for (int64_t i = 0; i < 8192; i++)
            if (dist == 1) ix[i] = 464;
            else if (dist == 2 && ix[i] % 10 < 7) ix[i] %= 3; /* 70% of the positions on three rows */
        kn_node n = node(KN_OP_EMBEDDING_GRAD);
        n.attrs.nshape = 2;
        n.attrs.shape[0] = v;
        n.attrs.shape[1] = 768;
        kn_tensor *in[2] = {dy, idx}, *dev[2] = {NULL}, *want = NULL;
        gpu_operands(&n, 2, in, NULL, dev);
        KN_ASSERT_OK(kn_node_eval(&n, (const kn_tensor *const *)in, &want));
        kn_tensor *a = on_gpu(&n, dev), *b = on_gpu(&n, dev);
        compare(&n, a, want, TOL_REDUCE);
        cr_assert(!memcmp(kn_tensor_data(a), kn_tensor_data(b), (size_t)(v * 768) * sizeof(float)),
                  "distribution %d: two runs on the GPU differ", dist);
        kn_tensor *all[] = {a, b, want, dev[0], dev[1], dy, idx};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kn_tensor_free(all[i]);
    }
}

KN_TEST(cuda_ops, softmax_family_forward_and_backward) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(19);
    for (int trial = 0; trial < 16; trial++) {
        int nd;
        int64_t sh[KN_MAX_DIMS];
        random_shape(&r, &nd, sh, 3, 9);
        if (trial % 4 == 0) sh[nd - 1] = rnd(&r, 500, 3000);
        kn_dtype dt = float_dts[trial % 2];
        bool lg = trial / 2 % 2;
        int axis = trial % 3 == 0 ? (int)rnd(&r, 0, nd - 1) : -1;
        kn_node n = node(lg ? KN_OP_LOG_SOFTMAX : KN_OP_SOFTMAX);
        n.attrs.axis = axis;
        kn_tensor *x = randn(&r, dt, nd, sh);
        if (trial % 5 == 1) kn_dtype_store(dt, kn_tensor_data(x), 0, -INFINITY); /* a masked entry */
        kn_tensor *y = NULL, *in[2] = {x, NULL};
        kn_node fwd = n;
        KN_ASSERT_OK(kn_tensor_clone(&in[0], x));
        check(&fwd, 1, in, TOL_REDUCE); /* frees in[0] */
        KN_ASSERT_OK(kn_node_eval(&fwd, (const kn_tensor *const *)&x, &y));
        kn_node b = node(lg ? KN_OP_LOG_SOFTMAX_BWD : KN_OP_SOFTMAX_BWD);
        b.attrs.axis = axis;
        in[0] = randn(&r, dt, nd, sh);
        in[1] = y;
        check(&b, 2, in, TOL_REDUCE);
        kn_tensor_free(x);
    }
}

/* Fused attention softmax: square and rectangular score matrices, rows from one warp's
 * worth through every kernel variant (a warp per row up to 1024 columns, a block per row
 * with registers up to 2048, re-reading beyond), rows fully masked (Tq > Tk), -inf
 * logits; masked probabilities must be exactly 0 on the GPU too. */
KN_TEST(cuda_ops, causal_softmax_forward_and_backward) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(23);
    for (int trial = 0; trial < 16; trial++) {
        int64_t tq, tk;
        switch (trial % 4) {
        case 0: { /* every register count of the warp-per-row kernels: <= 32, 128, 256 columns */
            const int64_t lo[4] = {1, 33, 129, 1}, hi[4] = {32, 128, 256, 256};
            tq = tk = rnd(&r, lo[trial / 4], hi[trial / 4]);
            break;
        }
        case 1: tq = tk = rnd(&r, 257, 1100); break;
        case 2: tq = rnd(&r, 1, 12); tk = rnd(&r, 1500, 3000); break;
        default: tk = rnd(&r, 1, 20); tq = rnd(&r, tk, 60); break;
        }
        int nd = 2 + trial % 3;
        int64_t sh[4] = {rnd(&r, 1, 2), rnd(&r, 1, 3), 0, 0};
        sh[nd - 2] = tq;
        sh[nd - 1] = tk;
        kn_dtype dt = float_dts[trial / 4 % 2];
        kn_node n = node(KN_OP_CAUSAL_SOFTMAX);
        n.attrs.scale = 0.05 + (double)rnd(&r, 0, 100) / 40.0;
        kn_tensor *x = randn(&r, dt, nd, sh), *y = NULL, *in[2] = {NULL, NULL};
        if (trial % 5 == 1) kn_dtype_store(dt, kn_tensor_data(x), 0, -INFINITY);
        KN_ASSERT_OK(kn_tensor_clone(&in[0], x));
        kn_node fwd = n;
        check(&fwd, 1, in, TOL_REDUCE); /* frees in[0] */
        /* the masked entries, exactly */
        kn_tensor *dx = NULL, *dy = NULL, *hy = NULL;
        KN_ASSERT_OK(kn_tensor_to(&dx, x, CUDA0));
        KN_ASSERT_OK(kn_node_eval(&fwd, (const kn_tensor *const *)&dx, &dy));
        KN_ASSERT_OK(kn_tensor_to(&hy, dy, KN_CPU));
        KN_ASSERT_OK(kn_device_synchronize(CUDA0));
        for (int64_t e = 0; e < kn_tensor_numel(hy); e++) {
            int64_t j = e % tk, i = e / tk % tq;
            if (j > i + tk - tq)
                cr_assert(kn_dtype_load(dt, kn_tensor_data(hy), e) == 0.0, "causal_softmax: masked element %lld is %g",
                          (long long)e, kn_dtype_load(dt, kn_tensor_data(hy), e));
        }
        kn_tensor_free(hy); kn_tensor_free(dy); kn_tensor_free(dx);
        KN_ASSERT_OK(kn_node_eval(&fwd, (const kn_tensor *const *)&x, &y));
        kn_node b = node(KN_OP_CAUSAL_SOFTMAX_BWD);
        b.attrs.scale = n.attrs.scale;
        in[0] = randn(&r, dt, nd, sh);
        in[1] = y;
        check(&b, 2, in, TOL_REDUCE);
        kn_tensor_free(x);
    }
}

KN_TEST(cuda_ops, layernorm_normalize_and_dx) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(20);
    for (int trial = 0; trial < 8; trial++) {
        int64_t c = trial % 3 == 0 ? rnd(&r, 700, 3000) : rnd(&r, 1, 100);
        int64_t sh[3] = {rnd(&r, 1, 4), rnd(&r, 1, 9), c}, csh[1] = {c};
        kn_dtype dt = float_dts[trial % 2];
        kn_node n = node(KN_OP_LAYERNORM);
        kn_tensor *in[3] = {randn(&r, dt, 3, sh), randn(&r, dt, 1, csh), randn(&r, dt, 1, csh)};
        check(&n, 3, in, TOL_REDUCE);
        n = node(KN_OP_NORMALIZE);
        in[0] = randn(&r, dt, 3, sh);
        check(&n, 1, in, TOL_REDUCE);
        n = node(KN_OP_LAYERNORM_DX);
        in[0] = randn(&r, dt, 3, sh);
        in[1] = randn(&r, dt, 3, sh);
        in[2] = randn(&r, dt, 1, csh);
        check(&n, 3, in, TOL_REDUCE);
    }
}

KN_TEST(cuda_ops, cross_entropy_and_backward) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(21);
    for (int trial = 0; trial < 8; trial++) {
        int64_t v = trial % 3 == 0 ? rnd(&r, 1000, 6000) : rnd(&r, 1, 50);
        int64_t sh[3] = {rnd(&r, 1, 4), rnd(&r, 1, 20), v};
        kn_dtype dt = float_dts[trial % 2], it = trial / 2 % 2 ? KN_DT_I32 : KN_DT_I64;
        kn_node n = node(KN_OP_CROSS_ENTROPY);
        kn_tensor *in[3] = {randn(&r, dt, 3, sh), randint(&r, it, 2, sh, v), NULL};
        check(&n, 2, in, TOL_REDUCE);
        n = node(KN_OP_CROSS_ENTROPY_BWD);
        KN_ASSERT_OK(kn_tensor_scalar(&in[0], dt, 0.5 + (double)trial));
        in[1] = randn(&r, dt, 3, sh);
        in[2] = randint(&r, it, 2, sh, v);
        check(&n, 3, in, TOL_REDUCE);
    }
}

KN_TEST(cuda_ops, bad_input_is_an_error_not_a_crash) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(22);
    int64_t wsh[2] = {5, 3}, ish[1] = {4};
    kn_tensor *w = randn(&r, KN_DT_F32, 2, wsh), *idx = randint(&r, KN_DT_I64, 1, ish, 5), *dw = NULL, *di = NULL, *out = NULL;
    ((int64_t *)kn_tensor_data(idx))[2] = 7;
    KN_ASSERT_OK(kn_tensor_to(&dw, w, CUDA0));
    KN_ASSERT_OK(kn_tensor_to(&di, idx, CUDA0));
    kn_node n = node(KN_OP_EMBEDDING);
    n.nin = 2;
    n.type = (kn_type){KN_DT_F32, 2, {4, 3}};
    const kn_tensor *ops[2] = {dw, di};
    KN_ASSERT_ERR(kn_node_eval(&n, ops, &out), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "index 7 at position 2"), "message: %s", kn_last_error());
    cr_assert_null(out);
    kn_tensor *h = NULL, *dh = NULL;
    KN_ASSERT_OK(kn_tensor_cast(&h, w, KN_DT_F16));
    KN_ASSERT_OK(kn_tensor_to(&dh, h, CUDA0));
    kn_node a = node(KN_OP_ADD);
    a.nin = 2;
    a.type = (kn_type){KN_DT_F16, 2, {5, 3}};
    const kn_tensor *ops2[2] = {dh, dh};
    KN_ASSERT_ERR(kn_node_eval(&a, ops2, &out), KN_ERR_UNSUPPORTED);
    cr_assert(strstr(kn_last_error(), "add") && strstr(kn_last_error(), "f16"), "message: %s", kn_last_error());
    kn_tensor_free(h); kn_tensor_free(dh); kn_tensor_free(w); kn_tensor_free(idx); kn_tensor_free(dw); kn_tensor_free(di);
}

/* The matmul autotuner (cuda_matmul_lt.cu): the tuned product agrees with the CPU, in f32
 * and in a batch with a shared operand, and each problem's choice is written to
 * <KILN_CACHE_DIR>/matmul-tune as one integer (-1: cuBLAS's own; i >= 0: cuBLASLt's i-th),
 * which a later process reads instead of timing again. */
KN_TEST(cuda_ops, matmul_autotune_agrees_and_remembers) {
    SKIP_WITHOUT_GPU();
    char dir[] = "/tmp/kiln-tune-XXXXXX";
    cr_assert(mkdtemp(dir) != NULL, "mkdtemp failed");
    setenv("KILN_CACHE_DIR", dir, 1);
    setenv("KILN_MATMUL_TUNE", "1", 1);
    kn_rng r = kn_rng_new(18);
    int64_t sa[3] = {3, 70, 50}, sb[2] = {50, 40}, pa[2] = {300, 260}, pb[2] = {260, 200};
    kn_node n = node(KN_OP_MATMUL);
    kn_tensor *in[2] = {randn(&r, KN_DT_F32, 2, pa), randn(&r, KN_DT_F32, 2, pb)};
    check(&n, 2, in, TOL_REDUCE);
    kn_tensor *in2[2] = {randn(&r, KN_DT_F32, 3, sa), randn(&r, KN_DT_F32, 2, sb)};
    check(&n, 2, in2, TOL_REDUCE);
    char sub[128];
    snprintf(sub, sizeof sub, "%s/matmul-tune", dir);
    DIR *d = opendir(sub);
    cr_assert(d != NULL, "no %s after two tuned products", sub);
    int files = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", sub, e->d_name);
        FILE *f = fopen(path, "r");
        int choice = -9;
        cr_assert(f && fscanf(f, "%d", &choice) == 1 && choice >= -1 && choice < 8, "%s does not hold a choice", path);
        fclose(f);
        remove(path);
        files++;
    }
    closedir(d);
    cr_assert_eq(files, 2, "%d choices in %s, expected 2", files, sub);
    rmdir(sub);
    rmdir(dir);
}
