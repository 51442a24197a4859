/* test_ir_util.h — helpers shared by tests/core/test_ir_*.c and test_autograd_*.c: random
 * tensors and a tiny GPT-like model written once against the builder, so every test can
 * run it eagerly, capture it, differentiate it and print it.
 * All functions are static: each test file gets its own copy. */
#ifndef KILN_TESTS_IR_UTIL_H
#define KILN_TESTS_IR_UTIL_H

#include <math.h>
#include <string.h>

#include "kn_test.h"
#include "kiln/autograd.h"
#include "kiln/ir.h"

static inline kn_tensor *irt_randn(kn_dtype dt, int ndim, const int64_t *shape, uint64_t seed) {
    kn_rng r = kn_rng_new(seed);
    kn_tensor *t = NULL;
    KN_ASSERT_OK(kn_tensor_randn(&t, dt, ndim, shape, &r));
    return t;
}

/* Integers in [0, hi) as i64. */
static inline kn_tensor *irt_randint(int ndim, const int64_t *shape, int64_t hi, uint64_t seed) {
    kn_tensor *t = NULL;
    KN_ASSERT_OK(kn_tensor_zeros(&t, KN_DT_I64, ndim, shape));
    kn_rng r = kn_rng_new(seed);
    int64_t n = kn_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) ((int64_t *)kn_tensor_data(t))[i] = (int64_t)(kn_rng_u32(&r) % (uint32_t)hi);
    return t;
}

/* Bitwise equality of two contiguous tensors. */
static inline bool irt_same_bits(const kn_tensor *a, const kn_tensor *b) {
    if (!a || !b || a->dtype != b->dtype || kn_tensor_numel(a) != kn_tensor_numel(b)) return false;
    return !memcmp(kn_tensor_data(a), kn_tensor_data(b), (size_t)kn_tensor_numel(a) * kn_dtype_size(a->dtype));
}

/* The tiny model's sizes and parameters. */
enum { IRT_B = 2, IRT_T = 4, IRT_C = 8, IRT_V = 11, IRT_H = 2, IRT_NP = 10 };
static const char *const irt_pnames[IRT_NP] = {"wte", "wpe", "ln1_w", "ln1_b", "wqkv", "wo", "ln2_w", "ln2_b", "w1", "w2"};

typedef struct irt_model {
    kn_tensor *p[IRT_NP];
    kn_tensor *tok, *tgt;
} irt_model;

static inline void irt_model_init(irt_model *m, kn_dtype dt, uint64_t seed) {
    const int64_t C = IRT_C;
    int64_t shapes[IRT_NP][2] = {{IRT_V, C}, {IRT_T, C}, {C, 0}, {C, 0}, {C, 3 * C}, {C, C}, {C, 0}, {C, 0}, {C, 4 * C}, {4 * C, C}};
    for (int i = 0; i < IRT_NP; i++) {
        m->p[i] = irt_randn(dt, shapes[i][1] ? 2 : 1, shapes[i], seed + (uint64_t)i);
        for (int64_t j = 0; j < kn_tensor_numel(m->p[i]); j++) /* std 0.3 keeps logits tame */
            kn_dtype_store(dt, kn_tensor_data(m->p[i]), j, 0.3 * kn_dtype_load(dt, kn_tensor_data(m->p[i]), j));
        /* layer-norm weights near 1 */
        if (i == 2 || i == 6) {
            for (int64_t j = 0; j < C; j++) {
                double v;
                KN_ASSERT_OK(kn_tensor_get(m->p[i], &j, &v));
                KN_ASSERT_OK(kn_tensor_set(m->p[i], &j, 1.0 + v));
            }
        }
    }
    int64_t bt[2] = {IRT_B, IRT_T};
    m->tok = irt_randint(2, bt, IRT_V, seed + 100);
    m->tgt = irt_randint(2, bt, IRT_V, seed + 101);
}

static inline void irt_model_free(irt_model *m) {
    for (int i = 0; i < IRT_NP; i++) kn_tensor_free(m->p[i]);
    kn_tensor_free(m->tok);
    kn_tensor_free(m->tgt);
}

/* One pre-norm transformer block and a tied output layer; returns the loss. pv receives
 * the param values. `dropout` > 0 adds attention dropout. Works in both builder modes. */
static inline kn_val irt_model_forward(kn_builder *b, const irt_model *m, kn_val *pv, double dropout) {
    const int64_t B = IRT_B, T = IRT_T, C = IRT_C, H = IRT_H, D = IRT_C / IRT_H;
    for (int i = 0; i < IRT_NP; i++) pv[i] = kn_param(b, irt_pnames[i], m->p[i]);
    kn_val tok = kn_input(b, "tok", m->tok), tgt = kn_input(b, "tgt", m->tgt);
    kn_val x = kn_add(b, kn_embedding(b, pv[0], tok), pv[1]);
    kn_val h = kn_layernorm(b, x, pv[2], pv[3], 1e-5);
    kn_val qkv = kn_matmul(b, h, pv[4]);
    int64_t s4[4] = {B, T, H, D};
    int perm[4] = {0, 2, 1, 3};
    kn_val q = kn_permute(b, kn_reshape(b, kn_slice(b, qkv, -1, 0, C, 1), 4, s4), 4, perm);
    kn_val k = kn_permute(b, kn_reshape(b, kn_slice(b, qkv, -1, C, 2 * C, 1), 4, s4), 4, perm);
    kn_val v = kn_permute(b, kn_reshape(b, kn_slice(b, qkv, -1, 2 * C, 3 * C, 1), 4, s4), 4, perm);
    kn_val att = kn_mul_scalar(b, kn_matmul_t(b, q, k, false, true), 1.0 / sqrt((double)D));
    att = kn_softmax(b, kn_causal_fill(b, att, -INFINITY), -1);
    if (dropout > 0) att = kn_dropout(b, att, dropout, 1234, 0);
    kn_val y = kn_matmul(b, att, v);
    int64_t s3[3] = {B, T, C};
    y = kn_reshape(b, kn_permute(b, y, 4, perm), 3, s3);
    x = kn_add(b, x, kn_matmul(b, y, pv[5]));
    kn_val mlp = kn_gelu(b, kn_matmul(b, kn_layernorm(b, x, pv[6], pv[7], 1e-5), pv[8]));
    x = kn_add(b, x, kn_matmul(b, mlp, pv[9]));
    kn_val logits = kn_matmul_t(b, x, pv[0], false, true);
    return kn_cross_entropy(b, logits, tgt);
}

/* Bind the model's tensors to an interpreter. */
static inline void irt_model_bind(kn_interp *it, const irt_model *m) {
    for (int i = 0; i < IRT_NP; i++) KN_ASSERT_OK(kn_interp_bind(it, irt_pnames[i], m->p[i]));
    KN_ASSERT_OK(kn_interp_bind(it, "tok", m->tok));
    KN_ASSERT_OK(kn_interp_bind(it, "tgt", m->tgt));
}

/* The tiny model's joint graph: outputs the loss, then the gradient of each parameter. */
static inline kn_graph *irt_joint_graph(const irt_model *m, double dropout) {
    kn_builder *b = NULL;
    kn_val pv[IRT_NP], g[IRT_NP];
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
    kn_val loss = irt_model_forward(b, m, pv, dropout);
    KN_ASSERT_OK(kn_backward(b, loss, IRT_NP, pv, g));
    kn_builder_output(b, loss);
    for (int i = 0; i < IRT_NP; i++) kn_builder_output(b, g[i]);
    kn_graph *joint = NULL;
    KN_ASSERT_OK(kn_builder_finish(b, &joint));
    kn_builder_free(b);
    return joint;
}

#endif /* KILN_TESTS_IR_UTIL_H */
