/* test_pointwise.c — every row of the pointwise table (kiln/pointwise.def) on every backend.
 *
 * The table writes each function and its gradient once; these tests walk its rows, so a
 * new row is tested with no test to write:
 *   - each gradient column against central differences of its function (fp64, and the
 *     f32 instance within f32 rounding of the f64 one);
 *   - the renderers' strings are the C functions' own expressions (the same tokens, spelled
 *     for double: no f suffix, no K());
 *   - each row's IR op, and unary_grad {fn} of each row with a gradient, compiled to C
 *     against the interpreter (f32 and f64), and in the CUDA text under the CUDA emulator;
 *   - on a GPU (skipped here with one line): the same compiled programs for real (the
 *     library kernels' table-driven test is cuda_ops.unary_and_unary_grad_every_row). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kn_test.h"
#include "kiln/device.h"
#include "kiln/ir.h"
#include "kiln/program.h"
#include "kiln/scalar.h"

static void private_cache(void) {
    char tmpl[] = "/tmp/kiln-pw-XXXXXX";
    char *d = mkdtemp(tmpl);
    cr_assert_not_null(d);
    setenv("KILN_CACHE_DIR", d, 1);
}

/* A function that is NaN at -0.75 (log, sqrt, rsqrt) is tested on positive operands. */
static bool positive_domain(kn_unary_op f) { return isnan(kn_sc_unary_f64(f, -0.75)); }

KN_TEST(pointwise, every_gradient_column_matches_finite_differences) {
    int rows = 0;
    for (int f = 0; f < KN_UNARY_COUNT; f++) {
        kn_unary_op u = (kn_unary_op)f;
        if (!kn_sc_unary_has_grad(u)) continue;
        rows++;
        for (int i = 0; i < 40; i++) {
            double x = -3.9 + 0.2 * i + 0.013; /* never 0: relu's kink */
            if (positive_domain(u)) x = fabs(x) + 0.1;
            const double h = 1e-6, d = 0.7;
            double num = d * (kn_sc_unary_f64(u, x + h) - kn_sc_unary_f64(u, x - h)) / (2 * h);
            double ana = kn_sc_unary_grad_f64(u, d, x);
            cr_assert(fabs(num - ana) <= 1e-7 + 1e-6 * fabs(num), "%s'(%g): gradient column %.12g, differences %.12g",
                      kn_unary_op_name(u), x, ana, num);
            float a32 = kn_sc_unary_grad_f32(u, (float)d, (float)x);
            cr_assert(fabs(a32 - ana) <= 1e-5 * (1 + fabs(ana)), "%s'(%g): f32 %.9g against f64 %.12g",
                      kn_unary_op_name(u), x, (double)a32, ana);
        }
    }
    cr_assert_geq(rows, 2, "only %d rows with a gradient column", rows);
}

KN_TEST(pointwise, the_renderers_strings_are_the_tables_expressions) {
    for (int f = 0; f < KN_UNARY_COUNT; f++) {
        kn_unary_op u = (kn_unary_op)f;
        const char *e = kn_sc_unary_expr(u), *g = kn_sc_unary_grad_expr(u), *t = kn_sc_unary_grad_t_expr(u);
        cr_assert(e && e[0] == '(' && strchr(e, 'x'), "%s: %s", kn_unary_op_name(u), e ? e : "NULL");
        cr_assert_eq(g != NULL, kn_sc_unary_has_grad(u), "%s", kn_unary_op_name(u));
        cr_assert_eq(t != NULL, kn_sc_unary_has_grad(u), "%s", kn_unary_op_name(u));
        const char *all[3] = {e, g, t};
        for (int k = 0; k < 3; k++) /* the spelling of the C functions is gone: double names */
            cr_assert(!all[k] || (!strstr(all[k], "K(") && !strstr(all[k], "_(") && !strstr(all[k], "0f")),
                      "%s: %s", kn_unary_op_name(u), all[k]);
    }
    cr_assert_str_eq(kn_sc_unary_expr(KN_UNARY_GELU),
                     "(0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))))");
    cr_assert(!kn_sc_unary_grad_needs_t(KN_UNARY_RELU) && kn_sc_unary_grad_needs_t(KN_UNARY_GELU));
    cr_assert_null(kn_sc_unary_expr(KN_UNARY_COUNT));
    cr_assert_null(kn_sc_unary_grad_expr(KN_UNARY_COUNT));
}

/* silu (added as one row of the table): x sigmoid(x) and its derivative
 * sigmoid(x) (1 + x (1 - sigmoid(x))) at -1, 0.5 and 1, reference values computed apart
 * (Python float64, math.exp); every other path (kernels, renderers, emulator, GPU, the
 * backward) is walked for this row by the table-driven tests of this file and
 * test_cuda_ops.c, test_op_tables.c, test_autograd_ops.c. */
KN_TEST(pointwise, silu_is_pytorchs_silu) {
    const double x[3] = {-1, 0.5, 1};
    const double y[3] = {-0.2689414213699951, 0.3112296656009273, 0.7310585786300049};
    const double dy[3] = {0.07232948812851325, 0.7399611873026519, 0.9276705118714869};
    for (int i = 0; i < 3; i++) {
        cr_assert_float_eq(kn_sc_unary_f64(KN_UNARY_SILU, x[i]), y[i], 1e-15, "silu(%g)", x[i]);
        cr_assert_float_eq(kn_sc_unary_grad_f64(KN_UNARY_SILU, 1, x[i]), dy[i], 1e-15, "silu'(%g)", x[i]);
        cr_assert_float_eq(kn_sc_unary_f32(KN_UNARY_SILU, (float)x[i]), y[i], 1e-7, "silu(%g) in f32", x[i]);
    }
    cr_assert_str_eq(kn_unary_op_name(KN_UNARY_SILU), "silu");
    cr_assert_eq(kn_op_from_name("silu", 4), kn_unary_ir_op(KN_UNARY_SILU));
    cr_assert(kn_op_get(kn_unary_ir_op(KN_UNARY_SILU))->differentiable);
    cr_assert_eq(kn_sc_unary_f64(KN_UNARY_SILU, -1000), 0, "no overflow to NaN far left");
}

/* y = f(x) (f(exp(x)) for a positive domain) and, for a row with a gradient, unary_grad
 * {fn=f}(dy, x): the row's two IR ops in one graph of two outputs. NULL for a row that is
 * the library's only. */
static kn_graph *row_graph(kn_unary_op f, kn_dtype dt) {
    if (kn_unary_ir_op(f) == KN_OP_COUNT) return NULL;
    kn_builder *b = NULL;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
    const int64_t s[2] = {5, 37};
    kn_val x = kn_input_typed(b, "x", dt, 2, s), dy = kn_input_typed(b, "dy", dt, 2, s);
    if (positive_domain(f)) x = kn_exp(b, x);
    kn_builder_output(b, kn_unary(b, f, x));
    if (kn_sc_unary_has_grad(f)) kn_builder_output(b, kn_unary_grad(b, f, dy, x));
    kn_graph *g = NULL;
    cr_assert(kn_builder_status(b) == KN_OK, "%s: %s", kn_unary_op_name(f), kn_builder_error(b));
    KN_ASSERT_OK(kn_builder_finish(b, &g));
    kn_builder_free(b);
    return g;
}

/* Every row with an IR op, f32 and f64, compiled on dev (emu: the CUDA text under the
 * emulator) against the interpreter: f64 within 1e-12, f32 within 2e-6 relative (the same
 * float formula; only the libm and the compiler's contractions differ). */
static void every_row(kn_device dev, bool emu) {
    private_cache();
    int programs = 0;
    for (int f = 0; f < KN_UNARY_COUNT; f++)
        for (int k = 0; k < 2; k++) {
            kn_dtype dt = k ? KN_DT_F64 : KN_DT_F32;
            kn_graph *g = row_graph((kn_unary_op)f, dt);
            if (!g) continue;
            kn_program_opts o = {.device = dev, .passes = NULL, .mode = KN_PROGRAM_COMPILED, .cuda_emu = emu};
            kn_program_stats st;
            double worst = INFINITY;
            KN_ASSERT_OK(kn_program_compare(g, &o, 31 + (uint64_t)f, &worst, &st));
            cr_assert(st.mode != KN_PROGRAM_COMPILED || st.nkernels >= 1, "%s: no generated kernel",
                      kn_unary_op_name((kn_unary_op)f));
            double tol = dt == KN_DT_F64 ? 1e-12 : 2e-6;
            cr_assert(worst <= tol, "%s %s%s: compiled against the interpreter: %.3g (tolerance %.3g)",
                      kn_unary_op_name((kn_unary_op)f), kn_dtype_name(dt), emu ? " (CUDA emulator)" : "", worst, tol);
            programs++;
            kn_graph_free(g);
        }
    cr_assert_geq(programs, 2 * 8, "only %d programs", programs);
}

KN_TEST(pointwise, every_row_compiled_to_c_matches_the_interpreter, .timeout = 240) { every_row(KN_CPU, false); }
KN_TEST(pointwise, every_row_under_the_cuda_emulator_matches_the_interpreter, .timeout = 240) { every_row(KN_CPU, true); }

KN_TEST(cuda_pointwise, every_row_compiled_on_the_gpu_matches_the_interpreter, .timeout = 240) {
    if (kn_device_count(KN_DEVICE_CUDA) == 0) cr_skip_test("no CUDA device: GPU test skipped");
    every_row((kn_device){KN_DEVICE_CUDA, 0}, false);
}
