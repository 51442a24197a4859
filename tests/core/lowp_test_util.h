/* lowp_test_util.h — what the C renderer's tests (test_codegen.c) and the CUDA renderer's
 * (test_cudagen.c) check alike about f16 and bf16 in generated code: the tolerance of a
 * compiled program against the interpreter per dtype, and the conversions the kernels
 * emit (core/codegen/render_c.c, kn_lowp_source) bit for bit against core/base's.
 * All functions are static: each test file gets its own copy. */
#ifndef KILN_TESTS_LOWP_UTIL_H
#define KILN_TESTS_LOWP_UTIL_H

#include <math.h>
#include <string.h>

#include "kn_test.h"
#include "kiln/ir.h"
#include "kiln/program.h"

/* How far a compiled output may be from the interpreter's, relative to 1 + |x|. f64 and
 * f32: a few ulp times these graphs' reduction lengths. f16 and bf16: the interpreter
 * rounds every node's value, a fused kernel only the values it stores, so the two differ
 * by the roundings of a chain of up to ~24 nodes, amplified by the divisions and
 * exponentials on the way: 16 unit roundoffs (bf16 u = 2^-8, f16 u = 2^-11); the worst
 * measured on these seeds (2026-11-25) was 3.9 u in bf16 and 2.5 u in f16, in generated
 * C and under the CUDA emulator alike. */
static inline double lowp_codegen_tolerance(kn_dtype dt) {
    switch (dt) {
    case KN_DT_F64: return 1e-12;
    case KN_DT_BF16: return 16 * 0x1p-8;
    case KN_DT_F16: return 16 * 0x1p-11;
    case KN_DT_F32: case KN_DT_I32: case KN_DT_I64: case KN_DT_U8: case KN_DT_BOOL: case KN_DT_COUNT: break;
    }
    return 2e-5;
}

/* x (f32) -> bf16, f16, and each rounded in a register and widened back to f32, in one
 * generated kernel (outputs: bf16, f16, f32 via bf16, f32 via f16). */
static const char lowp_cast_graph[] = "%0 = input {name=\"x\"} : f32[4096]\n"
                                      "%1 = cast %0 {dtype=bf16} : bf16[4096]\n"
                                      "%2 = cast %0 {dtype=f16} : f16[4096]\n"
                                      "%3 = cast %1 {dtype=f32} : f32[4096]\n"
                                      "%4 = cast %2 {dtype=f32} : f32[4096]\n"
                                      "output %1, %2, %3, %4\n";

/* Every bit pattern class of f32: random words (NaNs, infinities, subnormals, any
 * exponent), then the edges: ties to even in both formats, f16's largest finite value
 * and its rounding edge to Inf, f16's subnormal range and its underflow edge. */
static inline kn_tensor *lowp_special_values(void) {
    kn_tensor *t = NULL;
    int64_t n = 4096;
    KN_ASSERT_OK(kn_tensor_empty(&t, KN_DT_F32, 1, &n));
    float *p = kn_tensor_data(t);
    kn_rng r = kn_rng_new(11);
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = kn_rng_u32(&r);
        if (i % 4 == 1) u = (u & 0x807fffffu) | ((uint32_t)(100 + i % 45) << 23); /* f16's subnormal and low range */
        if (i % 4 == 2) u &= 0xffff0000u | (i % 8 == 2 ? 0x8000u : 0x7fffu);     /* bf16 ties and near-ties */
        if (i % 4 == 3) u &= 0xffffe000u | (i % 8 == 3 ? 0x1000u : 0x0fffu);     /* f16 ties and near-ties */
        memcpy(&p[i], &u, 4);
    }
    const float edge[] = {0.0f, -0.0f, 1.0f, 1.00390625f, 1.01171875f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 1e5f,
                          0x1p-24f, 0x1p-25f, 0x1.8p-25f, 0x1.8p-24f, 0x1p-14f, 0x1.ffcp-15f, 0x1p-149f, 3.4e38f,
                          INFINITY, -INFINITY, NAN};
    memcpy(p, edge, sizeof edge);
    return t;
}

/* The kernel's conversions equal core/base's bit for bit (NaN: a NaN) under program options o. */
static inline void lowp_check_conversions(const kn_program_opts *o) {
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_graph_parse(lowp_cast_graph, strlen(lowp_cast_graph), &g));
    kn_program *p = NULL;
    KN_ASSERT_OK(kn_program_compile(&p, g, o));
    kn_program_stats st = kn_program_get_stats(p);
    cr_assert_eq(st.nkernels, 1, "the four casts are one generated kernel (%d)", st.nkernels);
    kn_tensor *x = lowp_special_values();
    KN_ASSERT_OK(kn_program_bind(p, "x", x));
    KN_ASSERT_OK(kn_program_run(p));
    const float *xs = kn_tensor_data(x);
    for (int k = 0; k < 4; k++) {
        kn_dtype low = k % 2 ? KN_DT_F16 : KN_DT_BF16;
        kn_tensor *want = NULL, *w32 = NULL, *got = NULL;
        KN_ASSERT_OK(kn_tensor_cast(&want, x, low));
        if (k >= 2) {
            KN_ASSERT_OK(kn_tensor_cast(&w32, want, KN_DT_F32));
            kn_tensor_free(want);
            want = w32;
        }
        KN_ASSERT_OK(kn_tensor_to(&got, kn_program_output(p, k), KN_CPU));
        size_t es = kn_dtype_size(want->dtype);
        for (int64_t i = 0; i < 4096; i++) {
            const char *a = (const char *)kn_tensor_data(got) + i * (int64_t)es, *b = (const char *)kn_tensor_data(want) + i * (int64_t)es;
            if (isnan(xs[i])) cr_assert(isnan(kn_dtype_load(got->dtype, kn_tensor_data(got), i)), "output %d: NaN lost", k);
            else cr_assert(!memcmp(a, b, es), "output %d (%s): x = %a gives %a, core/base %a", k,
                           kn_dtype_name(got->dtype), (double)xs[i],
                           kn_dtype_load(got->dtype, kn_tensor_data(got), i), kn_dtype_load(want->dtype, kn_tensor_data(want), i));
        }
        kn_tensor_free(want);
        kn_tensor_free(got);
    }
    kn_tensor_free(x);
    kn_program_free(p);
    kn_graph_free(g);
}

#endif
