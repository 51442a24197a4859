/* test_cuda_runtime.c — the GPU path end to end: a small transformer's forward and
 * backward graph (with dropout) run by the interpreter with its params and inputs bound on
 * cuda:0 agrees with the same graph run on the CPU, every value stays on the GPU, and the
 * caching allocator reaches a steady state with no cudaMalloc after the first step.
 * Without a GPU each test skips with one line. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/cuda.h"
#include "kiln/device.h"
#include "test_ir_util.h"

#define CUDA0 ((kn_device){KN_DEVICE_CUDA, 0})
#define SKIP_WITHOUT_GPU()                                                          \
    do {                                                                            \
        if (kn_device_count(KN_DEVICE_CUDA) == 0) cr_skip_test("no CUDA device: GPU test skipped"); \
    } while (0)

/* The tiny model's loss and gradients as a graph (outputs: loss, then one per param). */
static kn_graph *model_graph(const irt_model *m, double dropout) { return irt_joint_graph(m, dropout); }

static void bind_on(kn_interp *it, const irt_model *m, kn_device dev) {
    const char *names[IRT_NP + 2];
    const kn_tensor *ts[IRT_NP + 2];
    for (int i = 0; i < IRT_NP; i++) { names[i] = irt_pnames[i]; ts[i] = m->p[i]; }
    names[IRT_NP] = "tok"; ts[IRT_NP] = m->tok;
    names[IRT_NP + 1] = "tgt"; ts[IRT_NP + 1] = m->tgt;
    for (int i = 0; i < IRT_NP + 2; i++) {
        kn_tensor *d = NULL;
        KN_ASSERT_OK(kn_tensor_to(&d, ts[i], dev));
        KN_ASSERT_OK(kn_interp_bind(it, names[i], d));
        kn_tensor_free(d);
    }
}

/* max|a - b| / max|b| over two tensors (b on the CPU, a anywhere). */
static double rel_err(const kn_tensor *a, const kn_tensor *b) {
    kn_tensor *h = NULL;
    KN_ASSERT_OK(kn_tensor_to(&h, a, KN_CPU));
    int64_t n = kn_tensor_numel(b);
    double md = 0, mr = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = kn_dtype_load(h->dtype, kn_tensor_data(h), i), y = kn_dtype_load(b->dtype, kn_tensor_data(b), i);
        if (isnan(x)) { md = INFINITY; break; }
        md = fmax(md, fabs(x - y));
        mr = fmax(mr, fabs(y));
    }
    kn_tensor_free(h);
    return md / (mr > 1e-30 ? mr : 1e-30);
}

static void model_agrees(kn_dtype dt, double tol) {
    irt_model m;
    irt_model_init(&m, dt, 42);
    kn_graph *g = model_graph(&m, 0.1);
    kn_interp *cpu = NULL, *gpu = NULL;
    KN_ASSERT_OK(kn_interp_new(&cpu, g));
    KN_ASSERT_OK(kn_interp_new(&gpu, g));
    bind_on(cpu, &m, KN_CPU);
    bind_on(gpu, &m, CUDA0);
    KN_ASSERT_OK(kn_interp_run(cpu));
    KN_ASSERT_OK(kn_interp_run(gpu));
    for (int i = 0; i <= IRT_NP; i++) {
        const kn_tensor *o = kn_interp_output(gpu, i);
        cr_assert_eq(o->storage->device.type, KN_DEVICE_CUDA, "output %d left the GPU", i);
        double e = rel_err(o, kn_interp_output(cpu, i));
        cr_assert(e < tol, "%s: relative error %.3g >= %.0e (%s)", i ? irt_pnames[i - 1] : "loss", e, tol, kn_dtype_name(dt));
    }
    kn_tensor *loss = NULL;
    KN_ASSERT_OK(kn_tensor_empty(&loss, dt, 0, NULL));
    KN_ASSERT_OK(kn_interp_output_copy(gpu, 0, loss));
    double a, b;
    KN_ASSERT_OK(kn_tensor_item(loss, &a));
    KN_ASSERT_OK(kn_tensor_item(kn_interp_output(cpu, 0), &b));
    cr_assert(fabs(a - b) <= tol * fabs(b), "loss copied back: %.9g vs CPU %.9g", a, b);
    kn_tensor_free(loss);
    kn_interp_free(cpu);
    kn_interp_free(gpu);
    kn_graph_free(g);
    irt_model_free(&m);
}

KN_TEST(cuda_runtime, model_forward_backward_with_dropout_matches_cpu_f32) {
    SKIP_WITHOUT_GPU();
    model_agrees(KN_DT_F32, 1e-4);
}

KN_TEST(cuda_runtime, model_forward_backward_with_dropout_matches_cpu_f64) {
    SKIP_WITHOUT_GPU();
    model_agrees(KN_DT_F64, 1e-10);
}

#ifdef KN_HAVE_CUDA /* the CUDA allocator's own controls (kiln/cuda.h) exist only with CUDA */
KN_TEST(cuda_runtime, caching_allocator_reaches_a_steady_state) {
    SKIP_WITHOUT_GPU();
    irt_model m;
    irt_model_init(&m, KN_DT_F32, 7);
    kn_graph *g = model_graph(&m, 0.0);
    kn_interp *it = NULL;
    KN_ASSERT_OK(kn_interp_new(&it, g));
    bind_on(it, &m, CUDA0);
    kn_cuda_mem_info before, after1, after3;
    KN_ASSERT_OK(kn_interp_run(it));
    KN_ASSERT_OK(kn_cuda_mem_info_get(0, &before));
    KN_ASSERT_OK(kn_interp_run(it));
    KN_ASSERT_OK(kn_cuda_mem_info_get(0, &after1));
    KN_ASSERT_OK(kn_interp_run(it));
    KN_ASSERT_OK(kn_interp_run(it));
    KN_ASSERT_OK(kn_cuda_mem_info_get(0, &after3));
    cr_assert_eq(after3.raw_allocs, after1.raw_allocs, "cudaMalloc calls in the steady state: %lld -> %lld",
                 (long long)after1.raw_allocs, (long long)after3.raw_allocs);
    cr_assert(after3.hits > after1.hits, "the steady state is served from the free lists");
    cr_assert_eq(after3.current, before.current, "a run leaves the same live bytes");
    cr_assert(after3.peak >= after3.current && after3.reserved >= after3.current);
    kn_device_mem_stats ds;
    KN_ASSERT_OK(kn_device_mem_stats_get(CUDA0, &ds));
    cr_assert_eq(ds.current, after3.current);
    kn_interp_free(it);
    size_t released = 0;
    KN_ASSERT_OK(kn_cuda_empty_cache(0, &released));
    kn_cuda_mem_info e;
    KN_ASSERT_OK(kn_cuda_mem_info_get(0, &e));
    cr_assert(released > 0 && e.cached == 0, "released %zu, cached %zu", released, e.cached);
    cr_assert(e.reserved >= e.current && e.reserved < before.reserved, "after emptying only live blocks stay reserved");
    kn_graph_free(g);
    irt_model_free(&m);
}
#endif

KN_TEST(cuda_runtime, gpu_runs_are_bitwise_deterministic) {
    SKIP_WITHOUT_GPU();
    irt_model m;
    irt_model_init(&m, KN_DT_F32, 99);
    kn_graph *g = model_graph(&m, 0.2);
    kn_interp *it = NULL;
    KN_ASSERT_OK(kn_interp_new(&it, g));
    bind_on(it, &m, CUDA0);
    kn_tensor *first[IRT_NP + 1];
    KN_ASSERT_OK(kn_interp_run(it));
    for (int i = 0; i <= IRT_NP; i++) KN_ASSERT_OK(kn_tensor_to(&first[i], kn_interp_output(it, i), KN_CPU));
    for (int rep = 0; rep < 3; rep++) {
        KN_ASSERT_OK(kn_interp_run(it));
        for (int i = 0; i <= IRT_NP; i++) {
            kn_tensor *h = NULL;
            KN_ASSERT_OK(kn_tensor_to(&h, kn_interp_output(it, i), KN_CPU));
            cr_assert(irt_same_bits(h, first[i]), "run %d: output %d differs from the first run", rep + 2, i);
            kn_tensor_free(h);
        }
    }
    for (int i = 0; i <= IRT_NP; i++) kn_tensor_free(first[i]);
    kn_interp_free(it);
    kn_graph_free(g);
    irt_model_free(&m);
}

/* The per-op profile: without a start, report is an error; with one, a run of the model
 * lists its ops (matmul among them) with times, a per-op summary, and the time outside
 * ops; the report ends the profile. The CPU backend has none; built without CUDA, a CUDA
 * profile is KN_ERR_UNSUPPORTED like any CUDA request. */
KN_TEST(cuda_runtime, per_op_profile_lists_the_ops_it_timed) {
    KN_ASSERT_ERR(kn_device_profile_start(KN_CPU), KN_ERR_UNSUPPORTED);
    if (kn_device_backend_get(KN_DEVICE_CUDA) == NULL) {
        KN_ASSERT_ERR(kn_device_profile_start(CUDA0), KN_ERR_UNSUPPORTED);
        return;
    }
    KN_ASSERT_ERR(kn_device_profile_start((kn_device){KN_DEVICE_CUDA, -1}), KN_ERR_ARG);
    if (kn_device_count(KN_DEVICE_CUDA) == 0) KN_ASSERT_ERR(kn_device_profile_start(CUDA0), KN_ERR_DEVICE);
    SKIP_WITHOUT_GPU();
    KN_ASSERT_ERR(kn_device_profile_report(CUDA0, stdout, NULL, 0, 0, NULL), KN_ERR_ARG); /* not started */
    irt_model m;
    irt_model_init(&m, KN_DT_F32, 5);
    kn_graph *g = model_graph(&m, 0.0);
    kn_interp *it = NULL;
    KN_ASSERT_OK(kn_interp_new(&it, g));
    bind_on(it, &m, CUDA0);
    KN_ASSERT_OK(kn_device_profile_start(CUDA0));
    KN_ASSERT_OK(kn_interp_run(it));
    char *text = NULL, *tsv = NULL;
    size_t len = 0, tlen = 0;
    FILE *f = open_memstream(&text, &len), *t = open_memstream(&tsv, &tlen);
    cr_assert(f && t);
    double ops_ms = -1;
    KN_ASSERT_OK(kn_device_profile_report(CUDA0, f, t, 1000.0, 5, &ops_ms));
    cr_assert(ops_ms > 0, "the ops' GPU time comes back: %g ms", ops_ms);
    fclose(f);
    fclose(t);
    /* the TSV: a comment with the bandwidth, a header, then 9 fields per group */
    cr_assert(!strncmp(tsv, "# kiln per-op profile; copy bandwidth ", 38), "%.200s", tsv);
    double bw = atof(tsv + 38);
    cr_assert(bw > 10 && bw < 100000, "copy bandwidth %g GB/s", bw);
    char *line = strchr(tsv, '\n') + 1;
    const char *header = "key\top\tcalls\tms\tbytes\tflops\tgbs\tgflops\tof_copy\n";
    cr_assert(!strncmp(line, header, strlen(header)), "%.200s", line);
    int groups = 0, matmuls = 0;
    for (line = strchr(line, '\n') + 1; *line; line = strchr(line, '\n') + 1) {
        int tabs = 0;
        for (char *c = line; *c != '\n'; c++) tabs += *c == '\t';
        cr_assert_eq(tabs, 8, "%.80s", line);
        matmuls += !strncmp(line, "matmul ", 7);
        groups++;
    }
    cr_assert(groups > 5 && matmuls > 0, "%d groups, %d matmul", groups, matmuls);
    free(tsv);
    cr_assert_not_null(strstr(text, "per-op GPU time ("), "%s", text);
    cr_assert_not_null(strstr(text, "measured copy bandwidth "), "%s", text);
    cr_assert_not_null(strstr(text, "per op:\n"), "%s", text);
    cr_assert_not_null(strstr(text, " matmul"), "%s", text);
    cr_assert_not_null(strstr(text, "smaller groups"), "top 5 of more groups: %s", text);
    cr_assert_not_null(strstr(text, "outside ops: "), "%s", text);
    free(text);
    KN_ASSERT_ERR(kn_device_profile_report(CUDA0, stdout, NULL, 0, 0, NULL), KN_ERR_ARG); /* ended */
    kn_interp_free(it);
    kn_graph_free(g);
    irt_model_free(&m);
}
