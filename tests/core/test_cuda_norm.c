/* test_cuda_norm.c — the row kernels of core/runtime/cuda_norm.cu (layernorm, normalize,
 * layernorm_dx) and cuda_cross_entropy.cu (cross_entropy and its backward, the fused pair)
 * against the CPU kernels, on the shapes that
 * pick each variant.
 *
 * Layernorm: row lengths c = 1, 7, 31, 32, 33, 768 and 1024 take the warp-per-row kernels
 * (one per-lane count K each side of 32, 64, 768 and 1024), 1025 and 3000 the block-per-row
 * fallback; 21 rows (not a multiple of the 4 rows of a block) and 2 rows (fewer than a
 * block), rows centered on 0 and rows shifted by 30 (the two-pass variance). Cross entropy:
 * v = 5, 50304 (16-byte groups) and 50305 (rows not 16-byte aligned: element loads), a
 * logits tensor that starts one element past a 16-byte boundary, i32 and i64 targets, and
 * special rows: the target's logit the row's max, half the row -inf, a row that is -inf but
 * at the target, a rising ramp (the running max moves at every group), and a row that is
 * -inf everywhere (NaN loss, NaN gradient row, as on the CPU). Results agree normwise with
 * the CPU (1e-4 for f32, 1e-12 for f64, NaN and infinities exactly; see
 * cuda_test_util.h); outputs are poisoned first, so an element a kernel forgets shows up as
 * NaN. Where asked, the GPU runs the node twice on the same operands and must give the
 * same bits. The fused pair (kn_cuda_cross_entropy_fused, knc_ce_fused_rows) gives the
 * bits of the two nodes on the GPU, its gradient into a buffer of its own and over the
 * logits, for f32, f64, bf16 and f16 logits, aligned or not; a compiled GPU program pairs
 * a loss and its backward into it (the gradient over the logits) and gives the outputs of
 * the node-by-node program, which runs them apart, bit for bit.
 *
 * Without a GPU each test skips with one line (the harness counts it as skipped). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kiln/cuda.h"
#include "kiln/device.h"
#include "kiln/program.h"
#include "cuda_test_util.h"

static const kn_dtype float_dts[2] = {KN_DT_F32, KN_DT_F64};

/* Infer n's type, run it on the CPU operands host[] and on the GPU operands dev[] (NULL, or
 * a NULL entry: a copy of host[i]), compare; twice: a second GPU run must give the same
 * bits. Frees host[] and dev[]. */
static void check_dev(kn_node *n, int nin, kn_tensor **host, kn_tensor **dev, bool twice) {
    kn_tensor *d[KN_MAX_OPERANDS] = {NULL};
    gpu_operands(n, nin, host, dev, d);
    kn_tensor *want = NULL;
    KN_ASSERT_OK(kn_node_eval(n, (const kn_tensor *const *)host, &want));
    kn_tensor *got = on_gpu(n, d);
    compare(n, got, want, TOL_REDUCE);
    if (twice) {
        char ts[96];
        kn_tensor *again = on_gpu(n, d);
        cr_assert(irt_same_bits(got, again), "%s -> %s: two runs on the same operands differ", kn_op_name(n->op),
                  kn_type_str(&n->type, ts, sizeof ts));
        kn_tensor_free(again);
    }
    kn_tensor_free(got);
    kn_tensor_free(want);
    for (int i = 0; i < nin; i++) { kn_tensor_free(d[i]); kn_tensor_free(host[i]); }
}

static void check(kn_node *n, int nin, kn_tensor **host, bool twice) { check_dev(n, nin, host, NULL, twice); }

/* randn + shift. */
static kn_tensor *shifted(kn_rng *r, kn_dtype dt, int nd, const int64_t *shape, double shift) {
    kn_tensor *t = randn(r, dt, nd, shape);
    for (int64_t i = 0; i < kn_tensor_numel(t); i++)
        kn_dtype_store(dt, kn_tensor_data(t), i, kn_dtype_load(dt, kn_tensor_data(t), i) + shift);
    return t;
}

/* layernorm, normalize and layernorm_dx on x of shape sh (nd axes, rows of sh[nd - 1]). */
static void norm_case(kn_rng *r, kn_dtype dt, int nd, const int64_t *sh, double shift, bool twice) {
    int64_t csh[1] = {sh[nd - 1]};
    kn_node n = node(KN_OP_LAYERNORM);
    kn_tensor *in[3] = {shifted(r, dt, nd, sh, shift), randn(r, dt, 1, csh), randn(r, dt, 1, csh)};
    check(&n, 3, in, twice);
    n = node(KN_OP_NORMALIZE);
    in[0] = shifted(r, dt, nd, sh, shift);
    check(&n, 1, in, twice);
    n = node(KN_OP_LAYERNORM_DX);
    in[0] = randn(r, dt, nd, sh);
    in[1] = shifted(r, dt, nd, sh, shift);
    in[2] = randn(r, dt, 1, csh);
    check(&n, 3, in, twice);
}

/* Row lengths around every per-lane count of the warp kernels, and past them. */
static const int64_t norm_cs[] = {1, 7, 31, 32, 33, 64, 65, 768, 1024, 1025, 3000};

KN_TEST(cuda_norm, layernorm_warp_and_block_paths) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(60);
    for (size_t k = 0; k < sizeof norm_cs / sizeof norm_cs[0]; k++)
        for (int d = 0; d < 2; d++) {
            int64_t c = norm_cs[k], many[3] = {3, 7, c}, few[2] = {2, c};
            norm_case(&r, float_dts[d], 3, many, 0.0, false); /* 21 rows */
            norm_case(&r, float_dts[d], 2, few, 30.0, false);
        }
}

KN_TEST(cuda_norm, layernorm_is_deterministic) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(61);
    const int64_t warp[2] = {37, 768}, block[2] = {5, 3000};
    norm_case(&r, KN_DT_F32, 2, warp, 0.0, true);
    norm_case(&r, KN_DT_F64, 2, warp, 0.0, true);
    norm_case(&r, KN_DT_F32, 2, block, 0.0, true);
}

static kn_tensor *targets(kn_rng *r, kn_dtype it, int64_t rows, int64_t v) {
    kn_tensor *t = NULL;
    int64_t sh[1] = {rows};
    KN_ASSERT_OK(kn_tensor_zeros(&t, it, 1, sh));
    for (int64_t i = 0; i < rows; i++) kn_dtype_store(it, kn_tensor_data(t), i, (double)(kn_rng_u32(r) % (uint32_t)v));
    return t;
}

/* Logits [rows >= 5, v] = 4 randn, with special rows 1..4 (see the file comment), and
 * their targets; a row of -inf last when nan_row. */
static void ce_operands(kn_rng *r, kn_dtype dt, kn_dtype it, int64_t rows, int64_t v, bool nan_row, kn_tensor **lg,
                        kn_tensor **tg) {
    int64_t sh[2] = {rows, v};
    *lg = shifted(r, dt, 2, sh, 0.0);
    *tg = targets(r, it, rows, v);
    void *x = kn_tensor_data(*lg), *t = kn_tensor_data(*tg);
    for (int64_t i = 0; i < rows * v; i++) kn_dtype_store(dt, x, i, 4.0 * kn_dtype_load(dt, x, i));
    double mx = -INFINITY;
    for (int64_t j = 0; j < v; j++) mx = fmax(mx, kn_dtype_load(dt, x, v + j));
    kn_dtype_store(dt, x, v + (int64_t)kn_dtype_load(it, t, 1), mx + 3.0); /* row 1: the target is the max */
    int64_t t2 = (v - 1) % 7 == 3 ? v - 2 : v - 1;                     /* row 2: -inf at j < v/2, j % 7 == 3 */
    for (int64_t j = 0; j < v; j++)
        if (j < v / 2 || j % 7 == 3) kn_dtype_store(dt, x, 2 * v + j, -INFINITY);
    kn_dtype_store(it, t, 2, (double)t2);
    int64_t t3 = (int64_t)kn_dtype_load(it, t, 3); /* row 3: -inf but at the target */
    for (int64_t j = 0; j < v; j++)
        if (j != t3) kn_dtype_store(dt, x, 3 * v + j, -INFINITY);
    for (int64_t j = 0; j < v; j++) kn_dtype_store(dt, x, 4 * v + j, 1e-3 * (double)j); /* row 4: a ramp */
    if (nan_row)
        for (int64_t j = 0; j < v; j++) kn_dtype_store(dt, x, (rows - 1) * v + j, -INFINITY);
}

/* A contiguous view on the GPU of x's values that starts one element into its buffer
 * (never 16-byte aligned: buffers are). */
static kn_tensor *one_past(const kn_tensor *x) {
    int64_t n = kn_tensor_numel(x), big[1] = {n + 1};
    kn_tensor *h = NULL, *db = NULL, *ds = NULL, *dv = NULL;
    KN_ASSERT_OK(kn_tensor_zeros(&h, x->dtype, 1, big));
    memcpy((char *)kn_tensor_data(h) + kn_dtype_size(x->dtype), kn_tensor_data(x), (size_t)n * kn_dtype_size(x->dtype));
    KN_ASSERT_OK(kn_tensor_to(&db, h, CUDA0));
    KN_ASSERT_OK(kn_tensor_slice(&ds, db, 0, 1, n + 1, 1));
    KN_ASSERT_OK(kn_tensor_view(&dv, ds, x->ndim, x->shape));
    cr_assert(kn_tensor_is_contiguous(dv));
    cr_assert_neq((uintptr_t)kn_tensor_data(dv) % 16, 0, "the view is 16-byte aligned");
    kn_tensor_free(h);
    kn_tensor_free(db);
    kn_tensor_free(ds);
    return dv;
}

/* cross_entropy and cross_entropy_bwd on the same operands (see ce_operands); misaligned:
 * the GPU reads the logits through one_past views. */
static void ce_case(kn_rng *r, kn_dtype dt, kn_dtype it, int64_t rows, int64_t v, bool nan_row, bool misaligned,
                    bool twice) {
    kn_tensor *lg = NULL, *tg = NULL, *lg2 = NULL, *tg2 = NULL;
    ce_operands(r, dt, it, rows, v, nan_row, &lg, &tg);
    KN_ASSERT_OK(kn_tensor_clone(&lg2, lg));
    KN_ASSERT_OK(kn_tensor_clone(&tg2, tg));
    kn_node n = node(KN_OP_CROSS_ENTROPY);
    kn_tensor *in[3] = {lg, tg, NULL}, *dev[3] = {misaligned ? one_past(lg) : NULL, NULL, NULL};
    check_dev(&n, 2, in, dev, twice);
    n = node(KN_OP_CROSS_ENTROPY_BWD);
    KN_ASSERT_OK(kn_tensor_scalar(&in[0], dt, 0.5 + (double)(kn_rng_u32(r) % 4)));
    in[1] = lg2;
    in[2] = tg2;
    dev[0] = NULL;
    dev[1] = misaligned ? one_past(lg2) : NULL;
    check_dev(&n, 3, in, dev, twice);
}

KN_TEST(cuda_norm, cross_entropy_vocabularies_and_special_rows) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(62);
    const int64_t vs[3] = {5, 50304, 50305};
    for (int k = 0; k < 3; k++)
        for (int d = 0; d < 2; d++) {
            kn_dtype it = (k + d) % 2 ? KN_DT_I32 : KN_DT_I64;
            ce_case(&r, float_dts[d], it, 6, vs[k], false, false, false);
            ce_case(&r, float_dts[d], it, 5, vs[k], true, false, false); /* NaN loss, as on the CPU */
        }
}

KN_TEST(cuda_norm, cross_entropy_on_logits_not_16_byte_aligned) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(63);
    ce_case(&r, KN_DT_F32, KN_DT_I64, 6, 50304, false, true, false); /* v % 4 == 0, base misaligned */
    ce_case(&r, KN_DT_F64, KN_DT_I32, 6, 50304, false, true, false);
    ce_case(&r, KN_DT_F32, KN_DT_I32, 5, 50305, true, true, false);
}

KN_TEST(cuda_norm, cross_entropy_is_deterministic) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(64);
    ce_case(&r, KN_DT_F32, KN_DT_I64, 8, 50304, false, false, true);
    ce_case(&r, KN_DT_F64, KN_DT_I32, 8, 50305, false, false, true);
}

/* cross_entropy_bwd with its output placed over the logits (the memory plan's in place,
 * kn_op_inplace_operand: knc_ce_bwd_rows_inplace) gives the bits of the kernel that writes
 * a buffer of its own; misaligned: the logits through a one_past view (element loads). */
static void ce_bwd_inplace_case(kn_rng *r, kn_dtype dt, kn_dtype it, int64_t rows, int64_t v, bool misaligned) {
    kn_tensor *lg = NULL, *tg = NULL, *dl = NULL, *d[3] = {NULL}, *back = NULL;
    bool low = dt == KN_DT_BF16 || dt == KN_DT_F16;
    ce_operands(r, dt, it, rows, v, true, &lg, &tg);
    KN_ASSERT_OK(kn_tensor_scalar(&dl, low ? KN_DT_F32 : dt, 0.5 + (double)(kn_rng_u32(r) % 4)));
    kn_node n = node(KN_OP_CROSS_ENTROPY_BWD);
    kn_tensor *host[3] = {dl, lg, tg}, *dev[3] = {NULL, misaligned ? one_past(lg) : NULL, NULL};
    gpu_operands(&n, 3, host, dev, d);
    kn_tensor *want = on_gpu(&n, d), *over = NULL;
    KN_ASSERT_OK(kn_tensor_wrap(&over, CUDA0, kn_tensor_data(d[1]), dt, d[1]->ndim, d[1]->shape));
    kn_tensor *placed = over;
    KN_ASSERT_OK(kn_node_eval(&n, (const kn_tensor *const *)d, &over));
    cr_assert_eq(over, placed, "the kernel kept the output it was given");
    KN_ASSERT_OK(kn_tensor_to(&back, d[1], KN_CPU));
    KN_ASSERT_OK(kn_device_synchronize(CUDA0));
    char ts[96];
    cr_assert(irt_same_bits(back, want), "%s%s: in place differs from out of place", kn_type_str(&n.type, ts, sizeof ts),
              misaligned ? " (misaligned)" : "");
    kn_tensor_free(back);
    kn_tensor_free(over);
    kn_tensor_free(want);
    for (int i = 0; i < 3; i++) { kn_tensor_free(d[i]); kn_tensor_free(host[i]); }
}

KN_TEST(cuda_norm, cross_entropy_bwd_over_its_logits_is_bitwise_out_of_place) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(65);
    const kn_dtype dts[4] = {KN_DT_F32, KN_DT_F64, KN_DT_BF16, KN_DT_F16};
    const int64_t vs[3] = {5, 50304, 50305};
    for (int d = 0; d < 4; d++)
        for (int k = 0; k < 3; k++) {
            ce_bwd_inplace_case(&r, dts[d], (k + d) % 2 ? KN_DT_I32 : KN_DT_I64, 6, vs[k], false);
            if (k > 0) ce_bwd_inplace_case(&r, dts[d], KN_DT_I64, 5, vs[k], true);
        }
}

/* kn_cuda_cross_entropy_fused against cross_entropy and cross_entropy_bwd on the GPU: the
 * same loss and gradient bits, the gradient into its own buffer and over (a copy of) the
 * logits; misaligned: the logits through one_past views (element loads). */
static void ce_fused_case(kn_rng *r, kn_dtype dt, kn_dtype it, int64_t rows, int64_t v, bool misaligned) {
    kn_tensor *lg = NULL, *tg = NULL, *dl = NULL, *d[3] = {NULL}, *x2 = NULL;
    bool low = dt == KN_DT_BF16 || dt == KN_DT_F16;
    ce_operands(r, dt, it, rows, v, true, &lg, &tg);
    KN_ASSERT_OK(kn_tensor_scalar(&dl, low ? KN_DT_F32 : dt, 0.5 + (double)(kn_rng_u32(r) % 4)));
    kn_node bn = node(KN_OP_CROSS_ENTROPY_BWD), ln = node(KN_OP_CROSS_ENTROPY);
    kn_tensor *host[3] = {dl, lg, tg}, *dev[3] = {NULL, misaligned ? one_past(lg) : NULL, NULL};
    gpu_operands(&bn, 3, host, dev, d);
    kn_tensor *ld[2] = {d[1], d[2]};
    const kn_type lt[2] = {{dt, 2, {rows, v}}, {it, 1, {rows}}}, *lp[2] = {&lt[0], &lt[1]};
    char msg[256];
    ln.nin = 2;
    cr_assert_eq(kn_node_infer(&ln, lp, &ln.type, msg, sizeof msg), KN_OK, "%s", msg);
    kn_tensor *want_d = on_gpu(&bn, d), *want_l = on_gpu(&ln, ld);
    kn_tensor *l = NULL, *g = NULL, *l2 = NULL, *over = NULL, *hl = NULL, *hg = NULL, *hl2 = NULL, *hx = NULL;
    KN_ASSERT_OK(kn_cuda_cross_entropy_fused((const kn_tensor *const *)d, &l, &g));
    x2 = misaligned ? one_past(lg) : NULL;
    if (!x2) KN_ASSERT_OK(kn_tensor_to(&x2, lg, CUDA0));
    KN_ASSERT_OK(kn_tensor_wrap(&over, CUDA0, kn_tensor_data(x2), dt, x2->ndim, x2->shape));
    kn_tensor *placed = over;
    const kn_tensor *in2[3] = {d[0], x2, d[2]};
    KN_ASSERT_OK(kn_cuda_cross_entropy_fused(in2, &l2, &over));
    cr_assert_eq(over, placed, "the call kept the gradient's tensor it was given");
    KN_ASSERT_OK(kn_tensor_to(&hl, l, KN_CPU));
    KN_ASSERT_OK(kn_tensor_to(&hg, g, KN_CPU));
    KN_ASSERT_OK(kn_tensor_to(&hl2, l2, KN_CPU));
    KN_ASSERT_OK(kn_tensor_to(&hx, x2, KN_CPU));
    KN_ASSERT_OK(kn_device_synchronize(CUDA0));
    char ts[96];
    snprintf(ts, sizeof ts, "%s [%lld, %lld]%s", kn_dtype_name(dt), (long long)rows, (long long)v,
             misaligned ? " (misaligned)" : "");
    cr_assert(irt_same_bits(hl, want_l), "%s: the fused loss differs from cross_entropy's", ts);
    cr_assert(irt_same_bits(hg, want_d), "%s: the fused gradient differs from cross_entropy_bwd's", ts);
    cr_assert(irt_same_bits(hl2, want_l), "%s: the loss with the gradient over the logits differs", ts);
    cr_assert(irt_same_bits(hx, want_d), "%s: the gradient written over the logits differs", ts);
    kn_tensor *all[] = {want_d, want_l, l, g, l2, over, hl, hg, hl2, hx, x2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kn_tensor_free(all[i]);
    for (int i = 0; i < 3; i++) { kn_tensor_free(d[i]); kn_tensor_free(host[i]); }
}

KN_TEST(cuda_norm, fused_cross_entropy_is_the_pair_bitwise) {
    SKIP_WITHOUT_GPU();
    kn_rng r = kn_rng_new(66);
    const kn_dtype dts[4] = {KN_DT_F32, KN_DT_F64, KN_DT_BF16, KN_DT_F16};
    const int64_t vs[3] = {5, 50304, 50305};
    for (int dd = 0; dd < 4; dd++)
        for (int k = 0; k < 3; k++) {
            ce_fused_case(&r, dts[dd], (k + dd) % 2 ? KN_DT_I32 : KN_DT_I64, 6, vs[k], false);
            if (k > 0) ce_fused_case(&r, dts[dd], KN_DT_I64, 5, vs[k], true);
        }
}

/* A compiled program on dev (logits made by a step, the gradient written over them,
 * read by one exact op) pairs the loss and its backward (stats.ce_fused) and gives the
 * NODES program's outputs, bit for bit; dt: the logits' dtype, lt: the loss's. */
static void program_case(kn_device dev, const char *dt, const char *lt, kn_dtype ldt) {
    /* the logits a step of the program makes (so the gradient may be written over them)
     * and one exact op reading the gradient: neg for f32; for 16-bit logits a cast from the
     * f32 input and back (a node-by-node GPU program has no bf16 `neg`; casts it has) */
    bool f32 = !strcmp(dt, "f32");
    char op3[64], op7[64], text[1024];
    snprintf(op3, sizeof op3, f32 ? "neg %%0" : "cast %%0 {dtype=%s}", dt);
    snprintf(op7, sizeof op7, f32 ? "neg %%6 : f32[8,40]" : "cast %%6 {dtype=f32} : f32[8,40]");
    snprintf(text, sizeof text,
             "%%0 = input {name=\"x\"} : f32[2,4,40]\n"
             "%%1 = input {name=\"t\"} : i64[8]\n"
             "%%2 = input {name=\"dl\"} : %s[]\n"
             "%%3 = %s : %s[2,4,40]\n"
             "%%4 = reshape %%3 {shape=[8,40]} : %s[8,40]\n"
             "%%5 = cross_entropy %%4, %%1 : %s[]\n"
             "%%6 = cross_entropy_bwd %%2, %%4, %%1 : %s[8,40]\n"
             "%%7 = %s\n"
             "output %%5, %%7\n",
             lt, op3, dt, dt, lt, dt, op7);
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_graph_parse(text, strlen(text), &g));
    KN_ASSERT_OK(kn_graph_verify(g));
    kn_rng r = kn_rng_new(67);
    kn_tensor *x = NULL, *t = NULL, *dl = NULL;
    ce_operands(&r, KN_DT_F32, KN_DT_I64, 8, 40, false, &x, &t);
    int64_t sh[3] = {2, 4, 40};
    kn_tensor *x3 = NULL;
    KN_ASSERT_OK(kn_tensor_view(&x3, x, 3, sh));
    KN_ASSERT_OK(kn_tensor_scalar(&dl, ldt, 1.0));
    kn_tensor *out[2][2] = {{NULL}};
    for (int m = 0; m < 2; m++) {
        kn_program_opts o = {.device = dev, .mode = m ? KN_PROGRAM_COMPILED : KN_PROGRAM_NODES, .keep_loss = true};
        kn_program *p = NULL;
        KN_ASSERT_OK(kn_program_compile(&p, g, &o));
        KN_ASSERT_OK(kn_program_bind(p, "x", x3));
        KN_ASSERT_OK(kn_program_bind(p, "t", t));
        KN_ASSERT_OK(kn_program_bind(p, "dl", dl));
        KN_ASSERT_OK(kn_program_run(p));
        kn_program_stats st = kn_program_get_stats(p);
        cr_assert_eq(st.ce_fused, m, "%s logits, %s program: %d pairs", dt, m ? "compiled" : "node-by-node", st.ce_fused);
        if (m) cr_assert_geq(st.mem_inplace, 1, "%s: the gradient over the logits", dt);
        for (int i = 0; i < 2; i++) KN_ASSERT_OK(kn_tensor_to(&out[m][i], kn_program_output(p, i), KN_CPU));
        KN_ASSERT_OK(kn_device_synchronize(dev));
        kn_program_free(p);
    }
    cr_assert(irt_same_bits(out[0][0], out[1][0]), "%s: the paired loss differs from the node-by-node one", dt);
    cr_assert(irt_same_bits(out[0][1], out[1][1]), "%s: the paired gradient differs from the node-by-node one", dt);
    kn_tensor *all[] = {out[0][0], out[0][1], out[1][0], out[1][1], x, x3, t, dl};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kn_tensor_free(all[i]);
    kn_graph_free(g);
}

KN_TEST(cuda_norm, a_compiled_gpu_program_pairs_the_loss_and_its_backward) {
    SKIP_WITHOUT_GPU();
    program_case(CUDA0, "f32", "f32", KN_DT_F32);
    program_case(CUDA0, "bf16", "f32", KN_DT_F32);
}

/* The same programs on the CPU (keep_loss: the GPU's library loss steps), so the test's
 * own logic runs where there is no GPU. */
KN_TEST(cuda_norm, a_compiled_cpu_program_keeping_its_loss_pairs_it_too) {
    program_case(KN_CPU, "f32", "f32", KN_DT_F32);
    program_case(KN_CPU, "bf16", "f32", KN_DT_F32);
}
