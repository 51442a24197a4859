/* test_flash_layout.c — flash attention's [B, T, H, D] layout (flash_attn(_bwd) with
 * perm [0, 2, 1, 3], kiln/ir.h; emitted by the flash pass, core/passes/flash.c), the one
 * the GPT's projections have, so that no permute or slice copy stands around attention.
 *
 *   - The CPU kernels (core/ir/eval_rows.c) in the new layout give the very bits of the
 *     [..., T, D] layout on the permuted operands: O, L, and dq, dk, dv in f32, f64 and bf16
 *     (the GPU's widened arithmetic), with and without L's gradient.
 *   - The tensor-core kernels under the CUDA emulator (cuda_flash_tc.cu, strides in their
 *     arguments) likewise: bf16 at D 64, tf32 at D 32 and 64, bit for bit.
 *   - The pass on a GPT's training step, with the bench's best pass list (flash, autocast
 *     bf16, lowparams, lowloss, lowsave, hfuse): every flash op takes the new layout, no
 *     permute is left in the step, and every slice of a flash op's result is a view (no
 *     copy); the qkv projection's backward products read the stacked gradient reshaped.
 *     Without the layout the same step holds 6 permutes and 1 strided slice per layer.
 *     With flash alone (no hfuse) the three gradients are slices of the stacked one, 3
 *     copies a layer where the old layout had 4 (3 permutes and O's slice).
 *   - Its shape rules refuse another perm. */
#include <math.h>
#include <string.h>

#include "kn_test.h"
#include "kiln/ir.h"
#include "kiln/nn.h"
#include "kiln/passes.h"
#include "kiln/program.h"
#include "kiln/tensor.h"
#include "runtime/cuda_flash_tc.h"

/* Uniform values in [-a, a) from a 64-bit LCG. */
static void fill(float *x, int64_t n, uint64_t seed, float a) {
    uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = a * (float)(2.0 * (double)(s >> 11) / 9007199254740992.0 - 1.0);
    }
}

/* A tensor of dtype dt and shape from the floats x (rounded to dt). */
static kn_tensor *tensor_of(kn_dtype dt, int nd, const int64_t *shape, const float *x) {
    kn_tensor *t;
    KN_ASSERT_OK(kn_tensor_empty(&t, dt, nd, shape));
    kn_dtype_convert(dt, kn_tensor_data(t), KN_DT_F32, x, kn_tensor_numel(t));
    return t;
}

/* A node of op with operands of types in[] (inferred type; must succeed). */
static kn_node node_of(kn_op op, int nin, const kn_tensor *const *in, bool bthd, double scale) {
    kn_node n = {.op = op, .nin = nin, .attrs = kn_attrs_default()};
    n.attrs.scale = scale;
    if (bthd) {
        n.attrs.nperm = 4;
        const int64_t p[4] = {0, 2, 1, 3};
        memcpy(n.attrs.perm, p, sizeof p);
    }
    kn_type ty[5];
    const kn_type *tin[5];
    for (int i = 0; i < nin; i++) {
        ty[i] = (kn_type){in[i]->dtype, in[i]->ndim, {0}};
        memcpy(ty[i].shape, in[i]->shape, sizeof(int64_t) * (size_t)in[i]->ndim);
        tin[i] = &ty[i];
    }
    char msg[256];
    KN_ASSERT_OK(kn_node_infer(&n, tin, &n.type, msg, sizeof msg));
    return n;
}

static kn_tensor *permuted(const kn_tensor *x, const int *perm) {
    kn_tensor *v, *c;
    KN_ASSERT_OK(kn_tensor_permute(&v, x, perm));
    KN_ASSERT_OK(kn_tensor_contiguous(&c, v));
    kn_tensor_free(v);
    return c;
}

static bool same_bytes(const void *a, const void *b, size_t n) { return memcmp(a, b, n) == 0; }

/* One case on the CPU: [B, T, H, D] against [B, H, T, D] on the permuted operands. */
static void cpu_case(kn_dtype dt, int64_t b, int64_t t, int64_t h, int64_t d, bool dl, uint64_t seed) {
    const int64_t sh[4] = {b, t, h, d}, n = b * t * h * d, rows = b * h * t;
    const int p0213[4] = {0, 2, 1, 3};
    float *x = malloc((size_t)(4 * n + rows) * sizeof *x);
    fill(x, 4 * n + rows, seed, 1.5f);
    kn_tensor *q = tensor_of(dt, 4, sh, x), *k = tensor_of(dt, 4, sh, x + n), *v = tensor_of(dt, 4, sh, x + 2 * n);
    kn_tensor *qp = permuted(q, p0213), *kp = permuted(k, p0213), *vp = permuted(v, p0213);
    const kn_tensor *in_new[5] = {q, k, v}, *in_old[5] = {qp, kp, vp};
    double scale = 1.0 / sqrt((double)d);
    kn_node fn = node_of(KN_OP_FLASH_ATTN, 3, in_new, true, scale), fo = node_of(KN_OP_FLASH_ATTN, 3, in_old, false, scale);
    cr_assert(fn.type.ndim == 1 && fn.type.shape[0] == n + rows, "y is the flat [B T H D + B H T]");
    kn_tensor *yn = NULL, *yo = NULL;
    KN_ASSERT_OK(kn_node_eval(&fn, in_new, &yn));
    KN_ASSERT_OK(kn_node_eval(&fo, in_old, &yo));
    size_t es = kn_dtype_size(dt);
    /* O: yo[..., :D] permuted to [B, T, H, D]; L: yo[..., D] in [B, H, T] order */
    kn_tensor *os, *ob;
    KN_ASSERT_OK(kn_tensor_slice(&os, yo, 3, 0, d, 1));
    ob = permuted(os, p0213);
    cr_assert(same_bytes(kn_tensor_data(yn), kn_tensor_data(ob), (size_t)n * es), "O differs (%s)", kn_dtype_name(dt));
    for (int64_t r = 0; r < rows; r++)
        cr_assert(same_bytes((char *)kn_tensor_data(yn) + (size_t)(n + r) * es,
                             (char *)kn_tensor_data(yo) + (size_t)(r * (d + 1) + d) * es, es),
                  "L of row %lld differs", (long long)r);
    /* dy: [B, T, H, D], or y's type (L's gradient too) */
    kn_tensor *dyn, *dyo;
    if (dl) {
        dyn = tensor_of(dt, 1, fn.type.shape, x + 3 * n);
        float *w = malloc((size_t)(rows * (d + 1)) * sizeof *w); /* the same values in y's old layout */
        for (int64_t bb = 0; bb < b; bb++)
            for (int64_t hh = 0; hh < h; hh++)
                for (int64_t i = 0; i < t; i++) {
                    int64_t r = (bb * h + hh) * t + i;
                    for (int64_t c = 0; c < d; c++) w[r * (d + 1) + c] = x[3 * n + ((bb * t + i) * h + hh) * d + c];
                    w[r * (d + 1) + d] = x[3 * n + n + r];
                }
        const int64_t sy[4] = {b, h, t, d + 1};
        dyo = tensor_of(dt, 4, sy, w);
        free(w);
    } else {
        dyn = tensor_of(dt, 4, sh, x + 3 * n);
        dyo = permuted(dyn, p0213);
    }
    const kn_tensor *bn[5] = {q, k, v, yn, dyn}, *bo[5] = {qp, kp, vp, yo, dyo};
    kn_node gn = node_of(KN_OP_FLASH_ATTN_BWD, 5, bn, true, scale), go = node_of(KN_OP_FLASH_ATTN_BWD, 5, bo, false, scale);
    cr_assert(gn.type.ndim == 5 && gn.type.shape[2] == 3 && gn.type.shape[3] == h, "the gradient is [B, T, 3, H, D]");
    kn_tensor *g_n = NULL, *g_o = NULL;
    KN_ASSERT_OK(kn_node_eval(&gn, bn, &g_n));
    KN_ASSERT_OK(kn_node_eval(&go, bo, &g_o));
    const int to_bt3hd[5] = {1, 3, 0, 2, 4}; /* [3, B, H, T, D] -> [B, T, 3, H, D] */
    kn_tensor *gp = permuted(g_o, to_bt3hd);
    cr_assert(same_bytes(kn_tensor_data(g_n), kn_tensor_data(gp), (size_t)(3 * n) * es),
              "dq, dk, dv differ (%s, dL %d)", kn_dtype_name(dt), dl);
    kn_tensor *all[] = {q, k, v, qp, kp, vp, yn, yo, os, ob, dyn, dyo, g_n, g_o, gp};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) kn_tensor_free(all[i]);
    free(x);
}

KN_TEST(flash_layout, cpu_kernels_give_the_bits_of_the_old_layout) {
    const kn_dtype dts[] = {KN_DT_F32, KN_DT_F64, KN_DT_BF16};
    for (int i = 0; i < 3; i++) {
        cpu_case(dts[i], 2, 5, 3, 4, false, 1);
        cpu_case(dts[i], 1, 70, 2, 8, true, 2); /* more than a tile (64) of rows */
        cpu_case(dts[i], 2, 17, 1, 3, false, 3);
    }
}

/* The tensor-core kernels under the emulator: the same bits in both layouts. kind's
 * element is float (tf32) or bf16 bits. */
static void tc_case(int kind, int64_t b, int t, int h, int d, bool dl, uint64_t seed) {
    const int64_t n = b * t * h * d, bh = b * h, rows = bh * t;
    const size_t es = kind == KN_FLASH_TC_BF16 ? 2 : 4;
    float *x = malloc((size_t)(4 * n + rows) * sizeof *x);
    fill(x, 4 * n + rows, seed, 1.5f);
    char *nw = malloc((size_t)(4 * n + rows) * es); /* q, k, v, dy (+ dL) in [B, T, H, D] */
    char *od = malloc((size_t)(3 * n + rows * (d + 1)) * es); /* q, k, v [B, H, T, D], dy [B, H, T, dyc] */
    int dyc = dl ? d + 1 : d;
    kn_dtype_convert(es == 2 ? KN_DT_BF16 : KN_DT_F32, nw, KN_DT_F32, x, 4 * n + rows);
    for (int part = 0; part < 4; part++)
        for (int64_t bb = 0; bb < b; bb++)
            for (int hh = 0; hh < h; hh++)
                for (int i = 0; i < t; i++) {
                    int64_t r = (bb * h + hh) * t + i, cols = part == 3 ? dyc : d;
                    char *dst = od + (size_t)(part * n + r * cols) * es;
                    memcpy(dst, nw + (size_t)(part * n + ((bb * t + i) * h + hh) * d) * es, (size_t)d * es);
                    if (part == 3 && dl) memcpy(dst + d * es, nw + (size_t)(4 * n + r) * es, es);
                }
    size_t ny = (size_t)(n + rows) * es;
    char *yn = malloc(ny), *yo = malloc(ny), *gn = malloc((size_t)(3 * n) * es), *go = malloc((size_t)(3 * n) * es);
    float scale = 0.125f;
    cr_assert(kn_flash_tc_emu(kind, nw, nw + n * es, nw + 2 * n * es, NULL, NULL, 0, yn, bh, t, d, scale, false, h) == 0);
    cr_assert(kn_flash_tc_emu(kind, od, od + n * es, od + 2 * n * es, NULL, NULL, 0, yo, bh, t, d, scale, false, 0) == 0);
    for (int64_t r = 0; r < rows; r++) { /* O and L */
        int64_t pr = r / t, i = r % t, bb = pr / h, hh = pr % h;
        cr_assert(same_bytes(yn + (size_t)(((bb * t + i) * h + hh) * d) * es, yo + (size_t)(r * (d + 1)) * es, (size_t)d * es),
                  "O of row %lld differs (kind %d, D %d)", (long long)r, kind, d);
        cr_assert(same_bytes(yn + (size_t)(n + r) * es, yo + (size_t)(r * (d + 1) + d) * es, es), "L of row %lld", (long long)r);
    }
    /* dy in the new layout: [B, T, H, D] (+ dL after it, as y's type) */
    cr_assert(kn_flash_tc_emu(kind, nw, nw + n * es, nw + 2 * n * es, yn, nw + 3 * n * es, dyc, gn, bh, t, d, scale, true,
                              h) == 0);
    cr_assert(kn_flash_tc_emu(kind, od, od + n * es, od + 2 * n * es, yo, od + 3 * n * es, dyc, go, bh, t, d, scale, true,
                              0) == 0);
    for (int part = 0; part < 3; part++)
        for (int64_t r = 0; r < rows; r++) {
            int64_t pr = r / t, i = r % t, bb = pr / h, hh = pr % h;
            cr_assert(same_bytes(gn + (size_t)(((bb * t + i) * 3 + part) * h * d + hh * d) * es,
                                 go + (size_t)(part * n + r * d) * es, (size_t)d * es),
                      "gradient %d of row %lld differs (kind %d, D %d, dL %d)", part, (long long)r, kind, d, dl);
        }
    free(x), free(nw), free(od), free(yn), free(yo), free(gn), free(go);
}

KN_TEST(flash_layout, tensor_core_kernels_give_the_bits_of_the_old_layout, .timeout = 300) {
    tc_case(KN_FLASH_TC_BF16, 1, 80, 2, 64, false, 4);
    tc_case(KN_FLASH_TC_BF16, 2, 33, 2, 64, true, 5);
    tc_case(KN_FLASH_TC_BF16, 1, 129, 2, 64, true, 8); /* past one of the forward's 128-row blocks (v2) */
    tc_case(KN_FLASH_TC_TF32, 1, 70, 3, 32, true, 6);
    tc_case(KN_FLASH_TC_TF32, 1, 40, 2, 64, false, 7);
    float z[8] = {0};
    cr_assert(kn_flash_tc_emu(KN_FLASH_TC_BF16, z, z, z, NULL, NULL, 0, z, 3, 1, 64, 1.0f, false, 2) == -2,
              "pairs not a multiple of the heads are refused");
}

/* ---------------------------------------------------------------- the pass on a GPT step */

/* Nodes of op that something reads (or that are outputs). */
static int count_ops(const kn_graph *g, kn_op op) {
    int c = 0;
    int32_t *uses = malloc((size_t)g->nnodes * sizeof *uses);
    kn_graph_uses(g, uses);
    for (int i = 0; i < g->nnodes; i++) c += g->nodes[i].op == op && (uses[i] > 0 || op == KN_OP_FLASH_ATTN_BWD);
    free(uses);
    return c;
}

/* Slices of a flash op's result that copy (not a view, kn_ir_aliases) and that something
 * reads (a dead node left by a pass is never scheduled). */
static int copying_slices_of_flash(const kn_graph *g) {
    int c = 0;
    int32_t *uses = malloc((size_t)g->nnodes * sizeof *uses);
    kn_graph_uses(g, uses);
    for (int i = 0; i < g->nnodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->op != KN_OP_SLICE || uses[i] == 0) continue;
        const kn_node *x = &g->nodes[n->in[0]];
        if ((x->op == KN_OP_FLASH_ATTN || x->op == KN_OP_FLASH_ATTN_BWD) && !kn_ir_aliases(n, &x->type)) c++;
    }
    free(uses);
    return c;
}

KN_TEST(flash_layout, gpt_step_has_no_permute_or_slice_copy_around_attention, .timeout = 120) {
    /* head dim 64: the bf16 kernels take it, so autocast lowers flash as on the GPU */
    const kn_gpt_config cfg = {.vocab = 17, .context = 16, .layers = 2, .width = 128, .heads = 2};
    /* "all" first: the trainer's step graph is the simplified one (views, algebra, cse, dce) */
    const char *lists[] = {"all,flash", "all,flash,autocast:bf16,lowparams:bf16,lowloss,lowsave,hfuse"};
    for (int l = 0; l < 2; l++) {
        kn_graph *g;
        KN_ASSERT_OK(kn_gpt_graph(&cfg, 2, 16, true, &g));
        int before = count_ops(g, KN_OP_PERMUTE);
        cr_assert(before >= 6 * cfg.layers, "the GPT's attention: q, k, v, o, do and the gradients: %d permutes", before);
        kn_pass_report rep;
        KN_ASSERT_OK(kn_passes_run_on(g, lists[l], kn_program_target_default(), &rep)); /* the GPU's bf16 kernels */
        KN_ASSERT_OK(kn_passes_run(g, "dce", &rep)); /* what hfuse leaves dead: never scheduled in a program */
        KN_ASSERT_OK(kn_graph_verify(g));
        cr_assert(count_ops(g, KN_OP_FLASH_ATTN) == cfg.layers && count_ops(g, KN_OP_FLASH_ATTN_BWD) == cfg.layers);
        for (int i = 0; i < g->nnodes; i++)
            if (g->nodes[i].op == KN_OP_FLASH_ATTN || g->nodes[i].op == KN_OP_FLASH_ATTN_BWD)
                cr_assert(kn_flash_bthd(&g->nodes[i].attrs), "%s not in the [B, T, H, D] layout (%s)",
                          kn_op_name(g->nodes[i].op), lists[l]);
        int perms = count_ops(g, KN_OP_PERMUTE), copies = copying_slices_of_flash(g);
        cr_assert(perms == 0, "%d permutes left after %s", perms, lists[l]);
        /* without hfuse the three products of q, k and v each read their gradient whole: dq,
         * dk, dv are slices of the stacked one (copies, where the old layout had 3 permutes
         * and O's slice); with hfuse none */
        cr_assert(copies == (l == 0 ? 3 * cfg.layers : 0), "%d slices of flash results copy after %s", copies, lists[l]);
        if (l == 1) { /* hfuse: the qkv backward products read the stacked gradient itself, reshaped */
            for (int i = 0; i < g->nnodes; i++) {
                const kn_node *n = &g->nodes[i];
                if (n->op != KN_OP_FLASH_ATTN_BWD) continue;
                bool reshaped = false;
                for (int j = i + 1; j < g->nnodes; j++)
                    if (g->nodes[j].in[0] == i && g->nodes[j].nin >= 1)
                        reshaped |= g->nodes[j].op == KN_OP_RESHAPE && g->nodes[j].type.ndim == 2;
                cr_assert(reshaped, "the stacked gradient %%%d is not read reshaped", i);
            }
            cr_assert(count_ops(g, KN_OP_CONCAT) == 0, "a concat of the gradients is left");
        }
        kn_graph_free(g);
    }
}

KN_TEST(flash_layout, shape_rules_take_only_perm_0213) {
    const int64_t sh[4] = {2, 3, 4, 8};
    float x[192] = {0};
    kn_tensor *q = tensor_of(KN_DT_F32, 4, sh, x);
    const kn_tensor *in[3] = {q, q, q};
    kn_node n = {.op = KN_OP_FLASH_ATTN, .nin = 3, .attrs = kn_attrs_default()};
    n.attrs.nperm = 4;
    const int64_t bad[4] = {0, 1, 2, 3};
    memcpy(n.attrs.perm, bad, sizeof bad);
    kn_type ty = {KN_DT_F32, 4, {2, 3, 4, 8}}, out;
    const kn_type *tin[3] = {&ty, &ty, &ty};
    char msg[256];
    cr_assert(kn_node_infer(&n, tin, &out, msg, sizeof msg) == KN_ERR_ARG && strstr(msg, "[0, 2, 1, 3]"), "%s", msg);
    kn_node ok = node_of(KN_OP_FLASH_ATTN, 3, in, true, 1.0);
    cr_assert(ok.type.ndim == 1 && ok.type.shape[0] == 2 * 3 * 4 * 8 + 2 * 4 * 3);
    kn_tensor_free(q);
}
