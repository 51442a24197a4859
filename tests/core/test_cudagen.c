/* test_cudagen.c — the CUDA renderer (core/codegen/render_cuda.c) against the interpreter.
 *
 * Without a GPU: every kernel runs under the CUDA emulator (the emulator dialect of the
 * same CUDA text, compiled by the host compiler; core/runtime/cuda_emu.c), in a compiled
 * program on the CPU: random graphs (f64, f32, bf16, f16), the f16/bf16 conversions bit
 * for bit, and the GPT's joint graph (the loss and every gradient). NVRTC compiles every kernel of the GPT step for sm_90. With a GPU the
 * same programs run for real (cuda_codegen suite: skipped here with one line). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kn_test.h"
#include "lowp_test_util.h"
#include "train_modes.h"
#include "kiln/codegen.h"
#include "kiln/nn.h"
#include "kiln/passes.h"
#include "kiln/program.h"
#include "ir/ir_impl.h" /* kn_ir_reduce_mask */
#if KN_HAVE_CUDA
#include "kiln/cuda.h"
#endif

static void private_cache(void) {
    char tmpl[] = "/tmp/kiln-cu-XXXXXX";
    char *d = mkdtemp(tmpl);
    cr_assert_not_null(d);
    setenv("KILN_CACHE_DIR", d, 1);
}

static kn_gpt_config tiny(void) { return (kn_gpt_config){.vocab = 17, .context = 8, .layers = 2, .width = 16, .heads = 2}; }

static double compare_on(const kn_graph *g, kn_device dev, bool emu, uint64_t seed, kn_program_stats *st) {
    kn_program_opts o = {.device = dev, .mode = KN_PROGRAM_COMPILED, .cuda_emu = emu};
    double worst = INFINITY;
    KN_ASSERT_OK(kn_program_compare(g, &o, seed, &worst, st));
    return worst;
}

/* Random graphs on a target: f64 within 1e-12 (sums in a tree instead of a line), f32 (or a
 * graph rounding through f32) within 2e-5, bf16 and f16 within 16 unit roundoffs
 * (lowp_test_util.h). */
static void random_graphs(kn_device dev, bool emu, kn_dtype dt, int nseeds) {
    private_cache();
    kn_randgraph_opts ro = kn_randgraph_defaults();
    ro.dtype = dt;
    int kernels = 0;
    for (int s = 0; s < nseeds; s++) {
        kn_graph *g = NULL;
        KN_ASSERT_OK(kn_randgraph(&g, (uint64_t)s, &ro));
        kn_program_stats st;
        double err = compare_on(g, dev, emu, (uint64_t)s + 7, &st);
        double tol = lowp_codegen_tolerance(dt);
        for (int i = 0; i < g->nnodes; i++)
            if (g->nodes[i].op == KN_OP_CAST && g->nodes[i].type.dtype == KN_DT_F32 && tol < 2e-5) tol = 2e-5;
        cr_assert(err <= tol, "seed %d (%s): the CUDA kernels differ from the interpreter by %.3g (tolerance %.3g)", s,
                  kn_dtype_name(dt), err, tol);
        kernels += st.nkernels;
        kn_graph_free(g);
    }
    cr_assert_gt(kernels, nseeds, "only %d generated kernels over %d graphs", kernels, nseeds);
}

KN_TEST(cudagen, random_graphs_f64_under_the_emulator, .timeout = 240) { random_graphs(KN_CPU, true, KN_DT_F64, 60); }
KN_TEST(cudagen, random_graphs_f32_under_the_emulator, .timeout = 240) { random_graphs(KN_CPU, true, KN_DT_F32, 40); }
KN_TEST(cudagen, random_graphs_bf16_under_the_emulator, .timeout = 240) { random_graphs(KN_CPU, true, KN_DT_BF16, 40); }
KN_TEST(cudagen, random_graphs_f16_under_the_emulator, .timeout = 240) { random_graphs(KN_CPU, true, KN_DT_F16, 30); }

/* The CUDA text's f16/bf16 conversions (the same as the C renderer's) under the emulator:
 * core/base's bit for bit. */
KN_TEST(cudagen, low_precision_conversions_under_the_emulator) {
    private_cache();
    kn_program_opts o = {.device = KN_CPU, .mode = KN_PROGRAM_COMPILED, .cuda_emu = true};
    lowp_check_conversions(&o);
}

static void gpt_joint(kn_device dev, bool emu) {
    private_cache();
    kn_gpt_config c = tiny();
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_gpt_graph(&c, 3, 8, true, &g));
    kn_program_stats st;
    double err = compare_on(g, dev, emu, 5, &st);
    cr_assert(err <= 2e-5, "GPT joint graph: the CUDA kernels differ by %.3g", err);
    cr_assert_gt(st.nkernels, 10);
    /* the values live in the memory plan's arena (host memory under the emulator, GPU
     * memory on the GPU), which shares bytes between values whose lifetimes do not meet */
    cr_assert(st.mem_planned > 0 && st.mem_planned < st.mem_sum && st.mem_planned >= st.mem_lower,
              "memory plan: arena %.0f bytes, sum of buffers %.0f, lower bound %.0f", st.mem_planned, st.mem_sum,
              st.mem_lower);
    kn_graph_free(g);
}

KN_TEST(cudagen, gpt_loss_and_every_gradient_under_the_emulator, .timeout = 240) { gpt_joint(KN_CPU, true); }

/* ---- column sums folded into the kernel that computes their operand (GPU schedules) */

/* g decomposed and scheduled for a GPU (kn_schedule_opts.gpu, as a compiled CUDA or emulator
 * program does): *lib the library `sum` steps over leading axes whose operand a generated
 * kernel computes (what the folding removes), *folded the column sums in generated kernels. */
static void colsum_counts(const kn_graph *g0, int *lib, int *folded) {
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_graph_copy(&g, g0));
    KN_ASSERT_OK(kn_pass_decompose(g, NULL));
    kn_schedule *s = NULL;
    kn_schedule_opts so = {.gpu = true};
    KN_ASSERT_OK(kn_schedule_build_opts(g, &so, &s));
    *lib = *folded = 0;
    for (int i = 0; i < s->ngroups; i++) {
        const kn_group *G = &s->groups[i];
        if (!G->fused) {
            const kn_node *n = &g->nodes[G->nodes[0]];
            if (n->op != KN_OP_SUM) continue;
            int32_t a = n->in[0];
            int ga = s->group_of[a];
            unsigned mask;
            kn_ir_reduce_mask(&n->attrs, g->nodes[a].type.ndim, &mask);
            *lib += (mask & 1u) && ga >= 0 && s->groups[ga].fused && s->level[a] == KN_LEVEL_FULL;
            continue;
        }
        kn_kernel k;
        KN_ASSERT_OK(kn_kernel_lower(g, s, i, &k));
        *folded += k.ncolsums;
        kn_kernel_clear(&k);
    }
    kn_schedule_free(s);
    kn_graph_free(g);
}

/* The GPT step (f32, and bf16 with flash and hfuse as `kiln bench --flash --hfuse
 * --precision bf16` runs it) has no column sum left as a library step re-reading a value a
 * generated kernel computed: each layer's bias and layernorm weight/bias gradients are summed
 * by that kernel. */
KN_TEST(cudagen, gpt_column_sums_are_folded_into_their_kernels, .timeout = 120) {
    static const char *const lists[] = {"none", "flash,autocast:bf16,lowparams:bf16,lowloss,lowsave,hfuse"};
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++) {
        kn_gpt_config c = tiny();
        kn_graph *g = NULL;
        KN_ASSERT_OK(kn_gpt_graph(&c, 2, 8, true, &g));
        kn_pass_report rep;
        if (strcmp(lists[i], "none")) KN_ASSERT_OK(kn_passes_run_on(g, lists[i], kn_program_target_default(), &rep));
        int lib, folded;
        colsum_counts(g, &lib, &folded);
        cr_assert_eq(lib, 0, "%s: %d column sums are library steps reading a generated kernel's value", lists[i], lib);
        /* per layer: 2 layernorms x (weight, bias) and the fc and fc2 biases at least */
        cr_assert_geq(folded, 6 * c.layers, "%s: %d column sums folded", lists[i], folded);
        kn_graph_free(g);
    }
    /* GPT-2 124M at B=8, T=1024 as `kiln bench --flash --hfuse --precision bf16` compiles it:
     * its 99 library column sums (the H100 profile of 2026-11-27) are folded, all but the
     * position embedding's (a sum of a reshaped value, which no kernel computes as such) */
    kn_gpt_config c2 = {.vocab = 50304, .context = 1024, .layers = 12, .width = 768, .heads = 12};
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_gpt_graph(&c2, 8, 1024, true, &g));
    kn_pass_report rep;
    KN_ASSERT_OK(kn_passes_run_on(g, lists[1], kn_program_target_default(), &rep));
    int lib, folded;
    colsum_counts(g, &lib, &folded);
    cr_assert(lib == 0 && folded >= 8 * c2.layers, "GPT-2: %d library column sums of kernels' values, %d folded", lib, folded);
    kn_graph_free(g);
}

/* The folded sums' values under the emulator against the interpreter: elementwise kernels
 * (columns of one or two trailing axes, keepdim, f32 and bf16 operands, two sums in one
 * kernel) and row kernels (layernorm-like: columns = the row; rows of whole blocks in slots,
 * a row of 700 in the strided loop), more rows than row groups. */
static void folded_sums(kn_device dev, bool emu) {
    private_cache();
    static const char *const graphs[] = {
        /* elementwise, two sums over [0, 1] of [5, 37, 40] */
        "%0 = input {name=\"x\"} : f32[5,37,40]\n%1 = input {name=\"y\"} : f32[5,37,40]\n"
        "%2 = mul %0, %1 : f32[5,37,40]\n%3 = tanh %2 : f32[5,37,40]\n"
        "%4 = sum %2 {axes=[0,1]} : f32[40]\n%5 = sum %3 {axes=[0,1], keepdim=1} : f32[1,1,40]\n"
        "%6 = exp %3 : f32[5,37,40]\noutput %4, %5, %6\n",
        /* elementwise, columns of two axes [6, 5] (30), only the sum stored */
        "%0 = input {name=\"x\"} : f32[33,6,5]\n%1 = input {name=\"y\"} : f32[33,6,5]\n"
        "%2 = sub %0, %1 : f32[33,6,5]\n%3 = mul %2, %2 : f32[33,6,5]\n%4 = sum %3 {axes=[0]} : f32[6,5]\noutput %4\n",
        /* a bf16 gradient cast up to f32 and summed (the bias gradient under autocast), a bf16 store beside */
        "%0 = input {name=\"x\"} : bf16[70,48]\n%1 = input {name=\"y\"} : f32[70,48]\n"
        "%2 = cast %0 {dtype=f32} : f32[70,48]\n%3 = mul %2, %1 : f32[70,48]\n%4 = sum %2 {axes=[0]} : f32[48]\n"
        "%5 = sum %3 {axes=[0]} : f32[48]\n%6 = cast %3 {dtype=bf16} : bf16[70,48]\noutput %4, %5, %6\n",
        /* row kernels: layernorm-like rows of 128 (slots) and 700 (strided), sums of the row's values */
        "%0 = input {name=\"x\"} : f32[3,41,128]\n%1 = mean %0 {axes=[-1], keepdim=1} : f32[3,41,1]\n"
        "%2 = sub %0, %1 : f32[3,41,128]\n%3 = mul %2, %0 : f32[3,41,128]\n"
        "%4 = sum %3 {axes=[0,1]} : f32[128]\n%5 = sum %0 {axes=[0,1]} : f32[128]\noutput %2, %4, %5\n",
        "%0 = input {name=\"x\"} : f32[19,700]\n%1 = mean %0 {axes=[-1], keepdim=1} : f32[19,1]\n"
        "%2 = sub %0, %1 : f32[19,700]\n%3 = sum %2 {axes=[0]} : f32[700]\noutput %2, %3\n",
    };
    for (size_t i = 0; i < sizeof graphs / sizeof graphs[0]; i++) {
        kn_graph *g = NULL;
        KN_ASSERT_OK(kn_graph_parse(graphs[i], strlen(graphs[i]), &g));
        int lib, folded;
        colsum_counts(g, &lib, &folded);
        cr_assert(lib == 0 && folded >= 1, "graph %zu: %d library column sums, %d folded", i, lib, folded);
        kn_program_stats st;
        double err = compare_on(g, dev, emu, 11 + i, &st);
        cr_assert(err <= 2e-5, "graph %zu: the folded column sums differ from the interpreter by %.3g", i, err);
        kn_graph_free(g);
    }
}

KN_TEST(cudagen, folded_column_sums_equal_the_interpreter, .timeout = 240) { folded_sums(KN_CPU, true); }

/* A bf16 GPT step (autocast, flash, hfuse) with its folded sums under the emulator. */
static void gpt_bf16_folded(kn_device dev, bool emu) {
    private_cache();
    kn_gpt_config c = tiny();
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_gpt_graph(&c, 3, 8, true, &g));
    kn_pass_report rep;
    KN_ASSERT_OK(kn_passes_run_on(g, "flash,autocast:bf16,lowparams:bf16,lowloss,lowsave,hfuse", kn_program_target_default(), &rep));
    kn_program_stats st;
    double err = compare_on(g, dev, emu, 5, &st);
    cr_assert(err <= lowp_codegen_tolerance(KN_DT_BF16), "bf16 GPT step: the CUDA kernels differ by %.3g", err);
    kn_graph_free(g);
}

KN_TEST(cudagen, gpt_bf16_step_with_folded_sums_under_the_emulator, .timeout = 240) { gpt_bf16_folded(KN_CPU, true); }

/* Rows of whole blocks (the emulator's 64 threads: 128, 256 and 512 wide) take the unrolled
 * slots; a row of 700 the strided loop. */
KN_TEST(cudagen, row_kernels_in_slots_and_strided, .timeout = 120) {
    private_cache();
    const int widths[4] = {128, 256, 512, 700};
    for (int i = 0; i < 4; i++) {
        char text[512];
        snprintf(text, sizeof text,
                 "%%0 = input {name=\"x\"} : f32[3,%d]\n%%1 = param {name=\"w\"} : f32[%d]\n"
                 "%%2 = param {name=\"b\"} : f32[%d]\n%%3 = layernorm %%0, %%1, %%2 {eps=1e-05} : f32[3,%d]\n"
                 "%%4 = softmax %%3 : f32[3,%d]\noutput %%4\n", widths[i], widths[i], widths[i], widths[i], widths[i]);
        kn_graph *g = NULL;
        KN_ASSERT_OK(kn_graph_parse(text, strlen(text), &g));
        kn_program_stats st;
        double err = compare_on(g, KN_CPU, true, 3, &st);
        cr_assert(err <= 2e-5, "rows of %d: %.3g", widths[i], err);
        kn_graph_free(g);
    }
}

/* loss = red(x * y) over `naxes` trailing axes (all when 0) of f32[rows, len]. */
static kn_graph *long_reduction(int64_t rows, int64_t len, int naxes, bool mean) {
    kn_builder *b;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
    int64_t s[2] = {rows, len};
    kn_val x = kn_input_typed(b, "x", KN_DT_F32, 2, s), y = kn_input_typed(b, "y", KN_DT_F32, 2, s);
    int ax[1] = {-1};
    kn_val m = kn_mul(b, kn_exp(b, x), y);
    kn_val r = mean ? kn_mean(b, m, naxes, ax, false) : kn_sum(b, m, naxes, ax, false);
    kn_builder_output(b, kn_mul(b, r, r));
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_builder_finish(b, &g));
    kn_builder_free(b);
    return g;
}

/* A reduction with few, long rows (a loss summed to a scalar) is a library step on a GPU
 * target (the library splits the rows over many blocks), its operand chain a kernel of its
 * own; on the C target, or with many rows or short ones, it stays fused. Under the
 * emulator the program still equals the interpreter. */
KN_TEST(cudagen, few_long_rows_reduce_in_the_library_on_a_gpu, .timeout = 120) {
    private_cache();
    struct { int64_t rows, len; int naxes; bool mean, library; } c[] = {
        {4, 65536, 0, false, true},        /* a full reduction to a scalar: 262144 elements */
        {3, 70000, 1, true, true},         /* 3 rows of 70000 */
        {KN_FUSE_GPU_FEW_ROWS, 256, 1, false, false},   /* many rows: a block each */
        {2, 4096, 0, false, false},        /* short: one block is enough */
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        kn_graph *g = long_reduction(c[i].rows, c[i].len, c[i].naxes, c[i].mean);
        kn_schedule *cpu = NULL, *gpu = NULL;
        kn_schedule_opts so = {.gpu = true};
        KN_ASSERT_OK(kn_schedule_build(g, &cpu));
        KN_ASSERT_OK(kn_schedule_build_opts(g, &so, &gpu));
        cr_assert_eq(cpu->nlibrary, 0, "case %zu: the C target fuses every node", i);
        cr_assert_eq(gpu->nlibrary, c[i].library ? 1 : 0, "case %zu: %d library steps\n%s", i, gpu->nlibrary, gpu->log);
        cr_assert_eq(gpu->nfused, c[i].library ? 2 : 1, "case %zu: %d kernels", i, gpu->nfused);
        if (c[i].library) cr_assert(strstr(gpu->log, "a library step"), "the decision is logged:\n%s", gpu->log);
        kn_schedule_free(cpu);
        kn_schedule_free(gpu);
        kn_program_stats st;
        double err = compare_on(g, KN_CPU, true, 11 + i, &st);
        cr_assert(err <= 2e-5, "case %zu: %.3g", i, err);
        cr_assert_eq(st.nkernels, c[i].library ? 2 : 1, "case %zu: %d kernels", i, st.nkernels);
        kn_graph_free(g);
    }
}

/* The launch shapes: warps whole, within the limits, a block per row for reductions with
 * about 8 elements a thread, no more blocks than fit at once. */
KN_TEST(cudagen, launch_configuration) {
    kn_kernel k = {.reduces = true, .outer_n = 98304, .inner_n = 1024};
    kn_cuda_limits h100 = {132, 1024, 2048};
    kn_cuda_launch l = kn_cuda_launch_config(&k, &h100);
    cr_assert_eq(l.block, 128u);
    cr_assert_eq(l.grid, 132u * 16);
    k.inner_n = 768;
    l = kn_cuda_launch_config(&k, &h100);
    cr_assert_eq(l.block, 96u);
    k.inner_n = 50304;
    l = kn_cuda_launch_config(&k, &h100);
    cr_assert_eq(l.block, 1024u);
    cr_assert_eq(l.grid, 132u * 2);
    k.inner_n = 3;
    k.outer_n = 7;
    l = kn_cuda_launch_config(&k, &h100);
    cr_assert_eq(l.block, 32u);
    cr_assert_eq(l.grid, 7u);
    k.reduces = false;
    k.outer_n = 1000;
    k.inner_n = 1000;
    l = kn_cuda_launch_config(&k, &h100);
    cr_assert_eq(l.block, 256u);
    cr_assert_eq(l.grid, 132u * 8);
    k.outer_n = 1;
    k.inner_n = 300;
    l = kn_cuda_launch_config(&k, &h100);
    cr_assert_eq(l.grid, 2u);
    kn_cuda_limits small = {2, 64, 128};
    l = kn_cuda_launch_config(&k, &small);
    cr_assert(l.block == 64u && l.grid == 4u, "block %u grid %u", l.block, l.grid);
}

#if KN_HAVE_CUDA
/* Every kernel of the GPT step, rendered as CUDA C, compiles with NVRTC for sm_90 (H100):
 * no GPU needed. */
/* g decomposed and scheduled, every generated kernel rendered for NVRTC after the prelude
 * (every other one with an H100's launch shape); *n kernels, *rows of them row kernels. */
static char *nvrtc_source_for(kn_graph *g, bool gpu, int *n, int *rows) {
    KN_ASSERT_OK(kn_pass_decompose(g, NULL));
    kn_schedule *s = NULL;
    kn_schedule_opts so = {.gpu = gpu};
    KN_ASSERT_OK(kn_schedule_build_opts(g, &so, &s));
    const char *pre = kn_render_cuda_prelude(KN_CUDA_NVRTC);
    char *src = malloc(strlen(pre) + 1);
    strcpy(src, pre);
    size_t len = strlen(pre), cap = len + 1;
    *n = *rows = 0;
    for (int i = 0; i < s->ngroups; i++) {
        if (!s->groups[i].fused) continue;
        kn_kernel k;
        KN_ASSERT_OK(kn_kernel_lower(g, s, i, &k));
        kn_cuda_limits h100 = {132, 1024, 2048};
        kn_cuda_launch l = kn_cuda_launch_config(&k, &h100);
        KN_ASSERT_OK(kn_render_cuda(&k, KN_CUDA_NVRTC, i % 2 ? &l : NULL, &src, &len, &cap));
        *rows += k.reduces;
        *n += 1 + (k.ncolsums > 0); /* with column sums, <name>_fin too */
        kn_kernel_clear(&k);
    }
    kn_schedule_free(s);
    return src;
}
static char *nvrtc_source(kn_graph *g, int *n, int *rows) { return nvrtc_source_for(g, false, n, rows); }

/* The GPU's schedule of the bf16 GPT step, with its column sums folded (a scratch of the
 * module, the <name>_fin kernels), compiles with NVRTC for sm_90: one entry per kernel. */
KN_TEST(cudagen, gpt_kernels_with_folded_column_sums_compile_with_nvrtc, .timeout = 240) {
    kn_gpt_config c = tiny();
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_gpt_graph(&c, 2, 8, true, &g));
    kn_pass_report rep;
    KN_ASSERT_OK(kn_passes_run_on(g, "flash,autocast:bf16,lowparams:bf16,lowloss,lowsave,hfuse", kn_program_target_default(), &rep));
    int n, rows;
    char *src = nvrtc_source_for(g, true, &n, &rows);
    cr_assert(strstr(src, "_fin(") && strstr(src, "static __device__ float kn_cs_"), "no folded column sums");
    char *ptx = NULL;
    size_t plen = 0;
    KN_ASSERT_OK(kn_cuda_nvrtc_compile(src, "gpt_colsums.cu", 9, 0, &ptx, &plen));
    int entries = 0;
    for (const char *q = ptx; (q = strstr(q, ".entry ")); q++) entries++;
    cr_assert_eq(entries, n, "one PTX entry per kernel: %d of %d", entries, n);
    kn_free(ptx);
    free(src);
    kn_graph_free(g);
}

KN_TEST(cudagen, every_gpt_kernel_compiles_with_nvrtc, .timeout = 240) {
    kn_gpt_config c = tiny();
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_gpt_graph(&c, 2, 8, true, &g));
    int n, rows;
    char *src = nvrtc_source(g, &n, &rows);
    cr_assert_gt(n, 10);
    cr_assert_gt(rows, 2, "the GPT step has row kernels (softmax, layernorm)");
    cr_assert(strstr(src, "kn_block_sum(") && strstr(src, "__shfl_xor_sync"), "row kernels combine with shuffles");
    char *ptx = NULL;
    size_t plen = 0;
    KN_ASSERT_OK(kn_cuda_nvrtc_compile(src, "gpt_step.cu", 9, 0, &ptx, &plen));
    int entries = 0;
    for (const char *q = ptx; (q = strstr(q, ".entry ")); q++) entries++;
    cr_assert_eq(entries, n, "one PTX entry per kernel: %d of %d", entries, n);
    kn_free(ptx);
    cr_assert_eq(kn_cuda_nvrtc_compile("extern \"C\" __global__ void bad() { undeclared = 1; }", "bad.cu", 9, 0, &ptx, &plen),
                 KN_ERR_INTERNAL);
    cr_assert(strstr(kn_last_error(), "undeclared") && strstr(kn_last_error(), "bad.cu"), "%s", kn_last_error());
    free(src);
    kn_graph_free(g);
}

/* After the hfuse pass (a concat and column slices of the merged product around the kernels)
 * every kernel of the GPT step still compiles, f32 and bf16 (autocast, lowparams, ...). */
KN_TEST(cudagen, gpt_kernels_after_hfuse_compile_with_nvrtc, .timeout = 240) {
    static const char *const lists[] = {"hfuse", "flash,autocast:bf16,lowparams:bf16,lowloss,lowsave,hfuse"};
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++) {
        kn_gpt_config c = tiny();
        kn_graph *g = NULL;
        KN_ASSERT_OK(kn_gpt_graph(&c, 2, 8, true, &g));
        kn_pass_report rep;
        KN_ASSERT_OK(kn_passes_run_on(g, lists[i], kn_program_target_default(), &rep));
        cr_assert_eq(kn_pass_stats_total(&rep.pass[rep.npasses - 1]), 4 * c.layers, "%s: the pass did not fire",
                     lists[i]);
        int n, rows;
        char *src = nvrtc_source(g, &n, &rows);
        char *ptx = NULL;
        size_t plen = 0;
        KN_ASSERT_OK(kn_cuda_nvrtc_compile(src, "gpt_hfuse.cu", 9, 0, &ptx, &plen));
        kn_free(ptx);
        free(src);
        kn_graph_free(g);
    }
}

/* The f16/bf16 kernels compile with NVRTC too: the cast kernel and every kernel of a few
 * random bf16 and f16 graphs, one source each. */
KN_TEST(cudagen, low_precision_kernels_compile_with_nvrtc, .timeout = 240) {
    kn_randgraph_opts ro = kn_randgraph_defaults();
    for (int s = -1; s < 6; s++) {
        kn_graph *g = NULL;
        ro.dtype = s % 2 ? KN_DT_BF16 : KN_DT_F16;
        if (s < 0) KN_ASSERT_OK(kn_graph_parse(lowp_cast_graph, strlen(lowp_cast_graph), &g));
        else KN_ASSERT_OK(kn_randgraph(&g, (uint64_t)s, &ro));
        int n, rows;
        char *src = nvrtc_source(g, &n, &rows);
        const char *pre = kn_render_cuda_prelude(KN_CUDA_NVRTC);
        cr_assert(s >= 0 || (strstr(src + strlen(pre), "kn_bf16_store(") && strstr(src + strlen(pre), "kn_f16_round(")),
                  "the cast kernel stores bf16 and rounds to f16: %s", src + strlen(pre));
        char *ptx = NULL;
        size_t plen = 0;
        if (n > 0) KN_ASSERT_OK(kn_cuda_nvrtc_compile(src, "lowp.cu", 9, 0, &ptx, &plen));
        kn_free(ptx);
        free(src);
        kn_graph_free(g);
    }
}

/* NVRTC is opened at run time: without it the compiled GPU program says what to install
 * (the rest of kiln does not need it). */
KN_TEST(cudagen, a_missing_nvrtc_says_what_to_install) {
    setenv("KILN_NVRTC", "/nonexistent/libnvrtc.so.13", 1);
    char *ptx = NULL;
    size_t n = 0;
    KN_ASSERT_ERR(kn_cuda_nvrtc_compile("extern \"C\" __global__ void k() {}", "k.cu", 9, 0, &ptx, &n), KN_ERR_UNSUPPORTED);
    cr_assert(strstr(kn_last_error(), "NVRTC is not installed") && strstr(kn_last_error(), "KILN_NVRTC") &&
              strstr(kn_last_error(), "--mode interp"), "%s", kn_last_error());
    cr_assert_null(ptx);
}

#define SKIP_WITHOUT_GPU()                                                                   \
    do {                                                                                     \
        if (kn_device_count(KN_DEVICE_CUDA) == 0) cr_skip_test("no CUDA device: GPU test skipped"); \
    } while (0)

static const kn_device gpu0 = {KN_DEVICE_CUDA, 0};

KN_TEST(cuda_codegen, random_graphs_f64_on_the_gpu, .timeout = 240) {
    SKIP_WITHOUT_GPU();
    random_graphs(gpu0, false, KN_DT_F64, 40);
}
KN_TEST(cuda_codegen, random_graphs_f32_on_the_gpu, .timeout = 240) {
    SKIP_WITHOUT_GPU();
    random_graphs(gpu0, false, KN_DT_F32, 30);
}
KN_TEST(cuda_codegen, gpt_loss_and_every_gradient_on_the_gpu, .timeout = 240) {
    SKIP_WITHOUT_GPU();
    gpt_joint(gpu0, false);
}

/* The folded column sums (elementwise and row kernels, the bf16 GPT step) on the GPU. */
KN_TEST(cuda_codegen, folded_column_sums_on_the_gpu, .timeout = 240) {
    SKIP_WITHOUT_GPU();
    folded_sums(gpu0, false);
    gpt_bf16_folded(gpu0, false);
}

/* Ten AdamW steps of the compiled GPU program follow the node-by-node GPU program; a second
 * compile comes from the cubin cache. */
KN_TEST(cuda_codegen, compiled_training_on_the_gpu_follows_node_by_node, .timeout = 240) {
    SKIP_WITHOUT_GPU();
    private_cache();
    kn_gpt_config c = tiny();
    kn_test_compiled_training_follows(&c, gpu0);
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_gpt_graph(&c, 2, 8, true, &g));
    kn_program_opts o = {.device = gpu0, .mode = KN_PROGRAM_COMPILED};
    kn_program *p1 = NULL, *p2 = NULL;
    KN_ASSERT_OK(kn_program_compile(&p1, g, &o));
    KN_ASSERT_OK(kn_program_compile(&p2, g, &o));
    cr_assert(kn_program_get_stats(p2).cached, "the second compile reads the cubin cache");
    kn_program_free(p1);
    kn_program_free(p2);
    kn_graph_free(g);
}
/* The step replayed as a CUDA graph gives the same numbers as the same compiled step run
 * kernel by kernel, bit for bit, over ten AdamW steps whose batches change (the inputs are
 * copied into the buffers the graph reads), with evaluations between them (run in the
 * graph's arena, which they share); the graph was launched for the runs after the
 * warm-up and the capture, and freeing it leaves no allocation behind. */
KN_TEST(cuda_codegen, a_cuda_graph_replays_the_step_bit_for_bit, .timeout = 240) {
    SKIP_WITHOUT_GPU();
    private_cache();
    kn_gpt_config c = tiny();
    double loss[2][10], evals[2][2];
    float *params[2] = {NULL, NULL};
    int64_t np = 0;
    for (int graph = 0; graph < 2; graph++) {
        kn_gpt model;
        KN_ASSERT_OK(kn_gpt_new(&model, &c));
        kn_gpt_init(&model, 1234);
        kn_optim_config oc = kn_optim_default();
        kn_trainer t;
        KN_ASSERT_OK(kn_trainer_new(&t, &model, 2, 8, &oc, 1.0));
        KN_ASSERT_OK(kn_trainer_to_device(&t, gpu0));
        t.cuda_graph = graph == 1;
        KN_ASSERT_OK(kn_trainer_set_compiled(&t, true));
        int32_t x[16], y[16];
        for (int step = 0; step < 10; step++) {
            for (int i = 0; i < 16; i++) { x[i] = (i * 7 + step * 3) % c.vocab; y[i] = (i * 5 + step) % c.vocab; }
            KN_ASSERT_OK(kn_trainer_step(&t, x, y, 1e-2, &loss[graph][step], NULL));
            /* an evaluation between steps runs in the graph's idle arena (shared) */
            if (step % 4 == 3) KN_ASSERT_OK(kn_trainer_eval(&t, y, x, &evals[graph][step / 4]));
        }
        cr_assert_eq(kn_program_get_stats(t.prog).graph_launches, graph ? 9 : 0, "graph launches");
        kn_tensor *host = NULL;
        KN_ASSERT_OK(kn_tensor_to(&host, t.params, KN_CPU));
        np = kn_tensor_numel(host);
        params[graph] = kn_malloc(sizeof(float) * (size_t)np);
        memcpy(params[graph], kn_tensor_data(host), sizeof(float) * (size_t)np);
        kn_tensor_free(host);
        kn_trainer_free(&t);
        kn_gpt_free(&model);
    }
    for (int s = 0; s < 10; s++)
        cr_assert(loss[0][s] == loss[1][s], "step %d: loss %.17g kernel by kernel, %.17g as a CUDA graph", s, loss[0][s],
                  loss[1][s]);
    for (int e = 0; e < 2; e++)
        cr_assert(evals[0][e] == evals[1][e], "evaluation %d: %.17g, %.17g beside a CUDA graph", e, evals[0][e],
                  evals[1][e]);
    cr_assert(memcmp(params[0], params[1], sizeof(float) * (size_t)np) == 0, "the parameters after ten steps differ");
    kn_free(params[0]);
    kn_free(params[1]);
}

/* What a graph cannot replay is refused with a reason: a program on the CPU, a hook. */
KN_TEST(cuda_codegen, a_cuda_graph_refuses_what_it_cannot_replay) {
    kn_gpt_config c = tiny();
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_gpt_graph(&c, 2, 8, true, &g));
    kn_program *p = NULL;
    KN_ASSERT_OK(kn_program_compile(&p, g, NULL));
    cr_assert_eq(kn_program_set_cuda_graph(p, true), KN_ERR_UNSUPPORTED);
    cr_assert(strstr(kn_last_error(), "compiled program on a GPU"), "%s", kn_last_error());
    kn_program_free(p);
    kn_graph_free(g);
}
#endif
