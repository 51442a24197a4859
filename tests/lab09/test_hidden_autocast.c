/* test_hidden_autocast.c — lab 09 hidden tests of the autocast pass's decisions: the
 * class of every op; kn_autocast_decide node by node against its contract (sources and
 * casts, f64 and the other 16-bit dtype, bool results, `full` constants, mixed operands,
 * which operands get an early copy, bad arguments); in the GPT step: where every cast
 * stands, no cast of a cast, one cast per value and dtype, a second pass that changes
 * nothing, the counts of casts of each kind per layer, and every f32-only op in f32. */
#include "../../labs/lab09-precision/tests/check.h"

static kn_autocast_class want_class(kn_op op) {
    static const kn_op f32[] = {
        KN_OP_SUM,          KN_OP_MEAN,         KN_OP_MAX,           KN_OP_SOFTMAX,
        KN_OP_SOFTMAX_BWD,  KN_OP_LOG_SOFTMAX,  KN_OP_LOG_SOFTMAX_BWD, KN_OP_CAUSAL_SOFTMAX,
        KN_OP_CAUSAL_SOFTMAX_BWD, KN_OP_LAYERNORM, KN_OP_LAYERNORM_DX, KN_OP_NORMALIZE,
        KN_OP_CROSS_ENTROPY, KN_OP_CROSS_ENTROPY_BWD, KN_OP_EMBEDDING_GRAD,
        KN_OP_MATMUL_W8,    KN_OP_MATMUL_W8A8,  KN_OP_MATMUL_W8A8_TENSOR,
        KN_OP_MATMUL_W8A8_STATIC, KN_OP_ATTN_DECODE,
    };
    if (op == KN_OP_MATMUL || op == KN_OP_FLASH_ATTN || op == KN_OP_FLASH_ATTN_BWD) return KN_AUTOCAST_LOW;
    for (size_t i = 0; i < sizeof f32 / sizeof f32[0]; i++)
        if (f32[i] == op) return KN_AUTOCAST_F32;
    return KN_AUTOCAST_KEEP;
}

KN_TEST(lab09_hidden_autocast, every_op_has_its_class) {
    const char *name[] = {"KEEP", "LOW", "F32"};
    for (int op = 0; op < KN_OP_COUNT; op++) {
        kn_clear_error();
        kn_autocast_class got = kn_autocast_policy((kn_op)op), want = want_class((kn_op)op);
        cr_assert_eq(got, want, "kn_autocast_policy(%s) = %s, want %s %s", kn_op_name((kn_op)op), name[got],
                     name[want], l9_why());
    }
}

/* One graph with a node for each rule of the contract (ids in the comments). */
enum { XB, X, XD, XH, C, MM, ADDC, NEGC, MIX, EQ, CASTUP, MMD, MMH, MMB, SM, WHERE, WMIX, GELUB, NNODES };
static kn_graph *contract_graph(void) {
    kn_builder *b = l9_builder();
    const int64_t s[] = {4, 4};
    kn_val xb = kn_input_typed(b, "xb", KN_DT_BF16, 2, s);   /* XB: first (operand slots past nin read 0) */
    kn_val x = kn_input_typed(b, "x", KN_DT_F32, 2, s);      /* X */
    kn_val xd = kn_input_typed(b, "xd", KN_DT_F64, 2, s);    /* XD */
    kn_val xh = kn_input_typed(b, "xh", KN_DT_F16, 2, s);    /* XH */
    kn_val c = kn_scalar(b, KN_DT_F32, 2.0);                 /* C */
    kn_val m = kn_matmul(b, x, x);                           /* MM */
    kn_val o[11];
    o[0] = kn_add(b, m, c);                                  /* ADDC */
    o[1] = kn_neg(b, c);                                     /* NEGC: only a constant */
    o[2] = kn_add(b, m, x);                                  /* MIX */
    kn_val eq = kn_eq(b, m, m);                              /* EQ */
    o[3] = kn_cast(b, xb, KN_DT_F32);                        /* CASTUP */
    o[4] = kn_matmul(b, xd, xd);                             /* MMD */
    o[5] = kn_matmul(b, xh, xh);                             /* MMH */
    o[6] = kn_matmul(b, xb, xb);                             /* MMB */
    o[7] = kn_softmax(b, m, -1);                             /* SM */
    o[8] = kn_where(b, eq, m, c);                            /* WHERE */
    o[9] = kn_where(b, eq, x, m);                            /* WMIX */
    o[10] = kn_gelu(b, xb);                                  /* GELUB */
    kn_graph *g = l9_finish(b, 11, o);
    cr_assert_eq(g->nnodes, NNODES, "the test's graph has %d nodes", (int)g->nnodes);
    return g;
}

typedef struct { kn_dtype dt; bool reads_low; } want_node;

static void decide_all(const kn_graph *g, kn_dtype low, kn_dtype *dt, bool *rl, bool *early) {
    for (int32_t i = 0; i < g->nnodes; i++) {
        kn_clear_error();
        kn_status st = kn_autocast_decide(g, i, low, dt, rl, early);
        cr_assert_eq(st, KN_OK, "kn_autocast_decide(%%%d = %s): %s", i, kn_op_name(g->nodes[i].op), kn_last_error());
    }
}

KN_TEST(lab09_hidden_autocast, decide_follows_the_contract) {
    kn_graph *g = contract_graph();
    kn_dtype dt[NNODES];
    bool rl[NNODES], early[NNODES] = {false};
    early[XD] = true; /* set before: never cleared */
    decide_all(g, KN_DT_BF16, dt, rl, early);
    const kn_dtype B = KN_DT_BF16, F = KN_DT_F32;
    const want_node w[NNODES] = {
        [X] = {F, false},     [XB] = {B, false},   [XD] = {KN_DT_F64, false}, [XH] = {KN_DT_F16, false},
        [C] = {F, false},     [MM] = {B, true},    [ADDC] = {B, true},        [NEGC] = {F, false},
        [MIX] = {F, false},   [EQ] = {KN_DT_BOOL, true}, [CASTUP] = {F, false}, [MMD] = {KN_DT_F64, false},
        [MMH] = {KN_DT_F16, false}, [MMB] = {B, false}, [SM] = {F, false},   [WHERE] = {B, true},
        [WMIX] = {F, false},  [GELUB] = {B, false}, /* not an f32 node */
    };
    const bool want_early[NNODES] = {[X] = true, [XD] = true, [C] = true};
    for (int i = 0; i < NNODES; i++) {
        const char *op = kn_op_name(g->nodes[i].op);
        cr_assert_eq(dt[i], w[i].dt, "bf16: %%%d = %s: dtype %s, want %s", i, op, kn_dtype_name(dt[i]),
                     kn_dtype_name(w[i].dt));
        cr_assert_eq(rl[i], w[i].reads_low, "bf16: %%%d = %s: reads_low %d, want %d", i, op, rl[i], w[i].reads_low);
        cr_assert_eq(early[i], want_early[i], "bf16: early[%%%d = %s] = %d, want %d", i, op, early[i], want_early[i]);
    }
    /* fp16: the f16 input is now low and the bf16 one another dtype */
    memset(early, 0, sizeof early);
    decide_all(g, KN_DT_F16, dt, rl, early);
    cr_assert(dt[MM] == KN_DT_F16 && rl[MM] && dt[ADDC] == KN_DT_F16, "fp16: the product and its add run in f16");
    cr_assert(dt[MMH] == KN_DT_F16 && !rl[MMH], "fp16: a product already in f16 is left as it is");
    cr_assert(dt[MMB] == KN_DT_BF16 && !rl[MMB], "fp16: a bf16 product is not touched");
    cr_assert(dt[GELUB] == KN_DT_BF16 && !rl[GELUB], "fp16: gelu of a bf16 value is not touched");
    cr_assert(dt[MIX] == KN_DT_F32 && !rl[MIX] && dt[SM] == KN_DT_F32 && !rl[SM], "fp16: mixed operands and softmax stay f32");
    cr_assert(early[X] && early[C] && !early[XB] && !early[XH], "fp16: early copies of x and the constant only");
    /* bad arguments: refused, nothing written */
    kn_dtype d2[NNODES];
    bool r2[NNODES], e2[NNODES];
    for (int i = 0; i < NNODES; i++) d2[i] = KN_DT_I32, r2[i] = e2[i] = true;
    const struct { const kn_graph *g; int32_t i; kn_dtype low; kn_dtype *dt; bool *rl, *early; const char *what; } bad[] = {
        {NULL, 0, KN_DT_BF16, d2, r2, e2, "a NULL graph"},      {g, MM, KN_DT_BF16, NULL, r2, e2, "a NULL dt"},
        {g, MM, KN_DT_BF16, d2, NULL, e2, "a NULL reads_low"},  {g, MM, KN_DT_BF16, d2, r2, NULL, "a NULL early"},
        {g, -1, KN_DT_BF16, d2, r2, e2, "node -1"},             {g, NNODES, KN_DT_BF16, d2, r2, e2, "a node past the end"},
        {g, MM, KN_DT_F32, d2, r2, e2, "low f32"},              {g, MM, KN_DT_F64, d2, r2, e2, "low f64"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        kn_status st = kn_autocast_decide(bad[k].g, bad[k].i, bad[k].low, bad[k].dt, bad[k].rl, bad[k].early);
        cr_assert_eq(st, KN_ERR_ARG, "%s must be refused with KN_ERR_ARG (got %d)", bad[k].what, st);
    }
    for (int i = 0; i < NNODES; i++)
        cr_assert(d2[i] == KN_DT_I32 && r2[i] && e2[i], "a refused call wrote node %d", i);
    kn_graph_free(g);
}

static kn_graph *gpt_step(int layers) {
    kn_gpt_config cfg = L9_GPT;
    cfg.layers = layers;
    kn_graph *g;
    KN_ASSERT_OK(kn_gpt_graph(&cfg, L9_B, L9_T, true, &g));
    return g;
}

static bool reads(const kn_node *n, int32_t v) {
    for (int k = 0; k < n->nin; k++)
        if (n->in[k] == v) return true;
    return false;
}

static bool is_low(kn_dtype d) { return d == KN_DT_BF16 || d == KN_DT_F16; }

KN_TEST(lab09_hidden_autocast, casts_stand_where_they_fuse) {
    const char *lists[] = {"autocast:bf16", "autocast:fp16"};
    kn_graph *g = gpt_step(2);
    for (int k = 0; k < 2; k++) {
        kn_graph *a = l9_autocast(g, lists[k], NULL);
        for (int32_t i = 0; i < a->nnodes; i++) {
            const kn_node *n = &a->nodes[i];
            if (n->op != KN_OP_CAST) continue;
            int32_t v = n->in[0];
            if (is_low(n->type.dtype)) { /* a copy down: right after its value, which computes both */
                cr_assert_eq(i, v + 1, "%s: the low copy %%%d of %%%d (%s) must stand right after it", lists[k], i, v,
                             kn_op_name(a->nodes[v].op));
                continue;
            }
            int32_t r = i + 1; /* a copy up: right before its first reader (only casts between) */
            while (r < a->nnodes && !reads(&a->nodes[r], i)) r++;
            for (int32_t j = i + 1; j < r; j++)
                cr_assert_eq(a->nodes[j].op, KN_OP_CAST, "%s: the f32 copy %%%d of %%%d stands before %%%d = %s, "
                             "not right before its first reader %%%d", lists[k], i, v, j, kn_op_name(a->nodes[j].op), r);
            bool output = false;
            for (int o = 0; o < a->noutputs; o++) output |= a->outputs[o] == i;
            cr_assert(r < a->nnodes || output, "%s: the f32 copy %%%d is read by nothing", lists[k], i);
        }
        kn_graph_free(a);
    }
    kn_graph_free(g);
}

KN_TEST(lab09_hidden_autocast, no_cast_chains_and_a_second_pass_changes_nothing) {
    kn_graph *g = gpt_step(2);
    int64_t casts, again;
    kn_graph *a = l9_autocast(g, "autocast:bf16", &casts);
    cr_assert_gt(casts, 0, "the pass inserted casts %s", l9_why());
    for (int32_t i = 0; i < a->nnodes; i++) {
        const kn_node *n = &a->nodes[i];
        if (n->op != KN_OP_CAST) continue;
        cr_assert_neq(a->nodes[n->in[0]].op, KN_OP_CAST, "%%%d casts the cast %%%d", i, n->in[0]);
        cr_assert_neq(a->nodes[n->in[0]].type.dtype, n->type.dtype, "%%%d casts to its operand's dtype", i);
        l9_cast_of(a, n->in[0], n->type.dtype); /* fails on a second cast of the same value to the same dtype */
    }
    kn_graph *b = l9_autocast(a, "autocast:bf16", &again);
    cr_assert(again == 0 && b->nnodes == a->nnodes, "a second autocast:bf16 made %lld casts (%d -> %d nodes)",
              (long long)again, (int)a->nnodes, (int)b->nnodes);
    for (int32_t i = 0; i < a->nnodes; i++)
        cr_assert_eq(b->nodes[i].type.dtype, a->nodes[i].type.dtype, "a second pass changed %%%d's dtype", i);
    kn_graph_free(b), kn_graph_free(a), kn_graph_free(g);
}

/* Per layer of the GPT step: the low copies of 3 weights (attention's projection, the
 * MLP's two; the tied embedding once more for the whole model), of 6 views (attention's
 * q, k, v slices of the fused weight and their permuted heads), of 8 computed values (2
 * layernorms, the attention probabilities, gelu and 4 gradients that feed products;
 * plus the final layernorm and the loss's gradient), and 18 f32 copies of results of
 * products that f32 ops read (plus 3 outside the layers). */
KN_TEST(lab09_hidden_autocast, the_gpt_steps_casts) {
    const char *lists[] = {"autocast:bf16", "autocast:fp16"};
    for (int layers = 1; layers <= 2; layers++) {
        kn_graph *g = gpt_step(layers);
        for (int k = 0; k < 2; k++) {
            int64_t casts;
            kn_graph *a = l9_autocast(g, lists[k], &casts);
            int params = 0, views = 0, computed = 0, up = 0;
            for (int32_t i = 0; i < a->nnodes; i++) {
                const kn_node *n = &a->nodes[i];
                if (n->op != KN_OP_CAST) continue;
                const kn_node *v = &a->nodes[n->in[0]];
                if (!is_low(n->type.dtype)) up++;
                else if (v->op == KN_OP_PARAM) params++;
                else if (kn_op_get(v->op)->category == KN_CAT_VIEW) views++;
                else computed++;
            }
            int L = layers;
            cr_assert(params == 1 + 3 * L && views == 6 * L && computed == 8 * L + 2 && up == 18 * L + 3,
                      "%s, %d layers: casts down of params %d (want %d), of views %d (want %d), of computed values "
                      "%d (want %d); up %d (want %d)", lists[k], L, params, 1 + 3 * L, views, 6 * L, computed,
                      8 * L + 2, up, 18 * L + 3);
            cr_assert_eq(casts, params + views + computed + up, "the pass's count of casts");
            kn_graph_free(a);
        }
        kn_graph_free(g);
    }
}

KN_TEST(lab09_hidden_autocast, f32_only_ops_stay_f32) {
    kn_graph *g = gpt_step(2);
    kn_graph *a = l9_autocast(g, "autocast:bf16", NULL);
    int f32_ops = 0, matmuls = 0;
    for (int32_t i = 0; i < a->nnodes; i++) {
        const kn_node *n = &a->nodes[i];
        if (n->op == KN_OP_MATMUL) {
            matmuls++;
            cr_assert_eq(n->type.dtype, KN_DT_BF16, "%%%d = matmul is %s", i, kn_dtype_name(n->type.dtype));
            continue;
        }
        if (want_class(n->op) != KN_AUTOCAST_F32) continue;
        f32_ops++;
        cr_assert_eq(n->type.dtype, KN_DT_F32, "%%%d = %s is %s", i, kn_op_name(n->op), kn_dtype_name(n->type.dtype));
        for (int k = 0; k < n->nin; k++)
            cr_assert(!is_low(a->nodes[n->in[k]].type.dtype), "%%%d = %s reads the %s %%%d", i, kn_op_name(n->op),
                      kn_dtype_name(a->nodes[n->in[k]].type.dtype), n->in[k]);
    }
    cr_assert(f32_ops > 10 && matmuls > 20, "%d f32 ops, %d matmuls", f32_ops, matmuls);
    for (int src = 0; src < 2; src++) { /* the k-th param (input) keeps the k-th's dtype: master weights stay f32 */
        kn_op op = src ? KN_OP_INPUT : KN_OP_PARAM;
        for (int k = 0; l9_nth(g, op, k) >= 0; k++)
            cr_assert(l9_nth(a, op, k) >= 0 && a->nodes[l9_nth(a, op, k)].type.dtype ==
                      g->nodes[l9_nth(g, op, k)].type.dtype, "%s %d changed dtype", kn_op_name(op), k);
    }
    cr_assert_eq(a->noutputs, g->noutputs);
    for (int i = 0; i < g->noutputs; i++)
        cr_assert_eq(a->nodes[a->outputs[i]].type.dtype, g->nodes[g->outputs[i]].type.dtype, "output %d's dtype", i);
    kn_graph_free(a), kn_graph_free(g);
}
