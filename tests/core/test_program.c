/* test_program.c — kn_program against the reference interpreter: the tiny model's joint
 * graph compiled for the CPU (and for a GPU when there is one) gives the interpreter's
 * outputs (bitwise on the CPU), a run can be repeated after rebinding, and the
 * compile-time errors (an unknown pass, an unbound input, a bad binding, a device that is
 * absent) are clear errors. A program compiled with every pass still computes the same
 * outputs, and the per-step hook sees every step's value in order. A deferred param
 * fails by name until bound again. The
 * roofline table of a profiled compiled program accounts for every FLOP of its graph. */
#include <math.h>
#include <string.h>

#include "test_ir_util.h"
#include "kiln/program.h"

static void bind_all(kn_program *p, const irt_model *m) {
    for (int i = 0; i < IRT_NP; i++) KN_ASSERT_OK(kn_program_bind(p, irt_pnames[i], m->p[i]));
    KN_ASSERT_OK(kn_program_bind(p, "tok", m->tok));
    KN_ASSERT_OK(kn_program_bind(p, "tgt", m->tgt));
}

/* The reference: g run by the interpreter on m's parameters and batch. */
static kn_interp *reference_run(const kn_graph *g, const irt_model *m) {
    kn_interp *it = NULL;
    KN_ASSERT_OK(kn_interp_new(&it, g));
    irt_model_bind(it, m);
    KN_ASSERT_OK(kn_interp_run(it));
    return it;
}

static kn_program *compile_cpu(const kn_graph *g, const char *passes) {
    kn_program *p = NULL;
    kn_program_opts o = {.device = KN_CPU, .passes = passes, .mode = KN_PROGRAM_NODES};
    KN_ASSERT_OK(kn_program_compile(&p, g, &o));
    return p;
}

KN_TEST(program, cpu_program_equals_the_interpreter_bitwise) {
    for (int k = 0; k < 2; k++) {
        kn_dtype dt = k ? KN_DT_F64 : KN_DT_F32;
        irt_model m;
        irt_model_init(&m, dt, 11);
        kn_graph *g = irt_joint_graph(&m, 0.1);
        kn_interp *it = reference_run(g, &m);
        kn_program *p = compile_cpu(g, "none");
        int computing = 0;
        for (int i = 0; i < g->nnodes; i++) computing += g->nodes[i].op != KN_OP_INPUT && g->nodes[i].op != KN_OP_PARAM;
        cr_assert_eq(kn_program_nsteps(p), computing, "one step per computing node");
        cr_assert_eq(kn_program_graph(p)->nnodes, g->nnodes);
        cr_assert_neq(kn_program_graph(p), g, "the program owns its copy");
        bind_all(p, &m);
        for (int run = 0; run < 2; run++) {
            KN_ASSERT_OK(kn_program_run(p));
            for (int i = 0; i <= IRT_NP; i++)
                cr_assert(irt_same_bits(kn_program_output(p, i), kn_interp_output(it, i)), "output %d (%s, run %d)", i,
                          kn_dtype_name(dt), run);
        }
        cr_assert_null(kn_program_output(p, IRT_NP + 1));
        kn_program_free(p);
        kn_interp_free(it);
        kn_graph_free(g);
        irt_model_free(&m);
    }
}

KN_TEST(program, errors_are_clear) {
    irt_model m;
    irt_model_init(&m, KN_DT_F32, 3);
    kn_graph *g = irt_joint_graph(&m, 0.1);
    kn_program *p = NULL;
    kn_program_opts o = {.device = KN_CPU, .passes = "fold,bogus", .mode = KN_PROGRAM_NODES};
    KN_ASSERT_ERR(kn_program_compile(&p, g, &o), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "unknown pass 'bogus'"), "%s", kn_last_error());
    cr_assert_null(p);
    KN_ASSERT_ERR(kn_program_compile(&p, NULL, NULL), KN_ERR_ARG);
    o = (kn_program_opts){.device = {KN_DEVICE_TYPE_COUNT, 0}, .mode = KN_PROGRAM_NODES};
    KN_ASSERT_ERR(kn_program_compile(&p, g, &o), KN_ERR_ARG);
    if (kn_device_count(KN_DEVICE_CUDA) == 0) {
        o = (kn_program_opts){.device = {KN_DEVICE_CUDA, 0}, .mode = KN_PROGRAM_NODES};
        kn_status st = kn_program_compile(&p, g, &o);
        cr_assert(st == KN_ERR_DEVICE || st == KN_ERR_UNSUPPORTED, "no GPU: %s", kn_last_error());
    }
    KN_ASSERT_OK(kn_program_compile(&p, g, NULL));
    KN_ASSERT_ERR(kn_program_run(p), KN_ERR_ARG); /* nothing bound */
    cr_assert(strstr(kn_last_error(), "is not bound"), "%s", kn_last_error());
    KN_ASSERT_ERR(kn_program_bind(p, "nope", m.tok), KN_ERR_ARG);
    KN_ASSERT_ERR(kn_program_bind(p, "tok", m.p[0]), KN_ERR_DTYPE);
    kn_program_free(p);
    kn_graph_free(g);
    irt_model_free(&m);
}

KN_TEST(program, gpu_program_agrees_with_the_cpu) {
    if (kn_device_count(KN_DEVICE_CUDA) == 0) { cr_log_info("program: no GPU, skipped"); return; }
    irt_model m;
    irt_model_init(&m, KN_DT_F64, 13);
    kn_graph *g = irt_joint_graph(&m, 0.1);
    kn_program *pc = NULL, *pg = NULL;
    kn_program_opts oc = {.device = KN_CPU, .mode = KN_PROGRAM_NODES}, og = {.device = {KN_DEVICE_CUDA, 0}, .mode = KN_PROGRAM_NODES};
    KN_ASSERT_OK(kn_program_compile(&pc, g, &oc));
    KN_ASSERT_OK(kn_program_compile(&pg, g, &og));
    bind_all(pc, &m);
    bind_all(pg, &m); /* host tensors: copied to the GPU */
    KN_ASSERT_OK(kn_program_run(pc));
    KN_ASSERT_OK(kn_program_run(pg));
    for (int i = 0; i <= IRT_NP; i++) {
        const kn_tensor *a = kn_program_output(pg, i), *b = kn_program_output(pc, i);
        cr_assert_eq(a->storage->device.type, KN_DEVICE_CUDA, "output %d left the GPU", i);
        kn_tensor *h = NULL;
        KN_ASSERT_OK(kn_tensor_to(&h, a, KN_CPU));
        double worst = 0, scale = 0;
        for (int64_t j = 0; j < kn_tensor_numel(b); j++) {
            double x = ((const double *)kn_tensor_data(h))[j], y = ((const double *)kn_tensor_data(b))[j];
            worst = fmax(worst, fabs(x - y));
            scale = fmax(scale, fabs(y));
        }
        cr_assert(worst <= 1e-10 * (scale + 1), "output %d: max |gpu - cpu| %g", i, worst);
        kn_tensor_free(h);
    }
    kn_program_free(pc);
    kn_program_free(pg);
    kn_graph_free(g);
    irt_model_free(&m);
}

static kn_status device_of_views(void *ctx, int32_t node, const kn_tensor *value) {
    int *on_gpu = ctx; /* [0]: broadcasts seen, [1]: of them on the GPU */
    (void)node;
    if (value && value->ndim == 2) on_gpu[0]++, on_gpu[1] += value->storage->device.type == KN_DEVICE_CUDA;
    return KN_OK;
}

/* loss = sum(x * r): its gradient is broadcast_to(full 1) * r. Node by node on a GPU, the
 * broadcast of the host constant runs on the GPU (from the constant's device copy, made
 * once), not on the host and uploaded in every run; the gradient is r in every run. */
KN_TEST(program, gpu_steps_read_host_constants_copied_once) {
    if (kn_device_count(KN_DEVICE_CUDA) == 0) { cr_log_info("program: no GPU, skipped"); return; }
    int64_t s[2] = {64, 33};
    kn_builder *b;
    KN_ASSERT_OK(kn_builder_new(&b, KN_MODE_GRAPH));
    kn_val x = kn_param_typed(b, "x", KN_DT_F32, 2, s), r = kn_input_typed(b, "r", KN_DT_F32, 2, s);
    kn_val loss = kn_sum(b, kn_mul(b, x, r), 0, NULL, false);
    kn_builder_output(b, loss);
    kn_graph *fwd = NULL, *g = NULL;
    KN_ASSERT_OK(kn_builder_finish(b, &fwd));
    kn_builder_free(b);
    KN_ASSERT_OK(kn_autograd(fwd, loss, 1, &x, &g, NULL));
    kn_program *p = NULL;
    kn_program_opts o = {.device = {KN_DEVICE_CUDA, 0}, .mode = KN_PROGRAM_NODES};
    KN_ASSERT_OK(kn_program_compile(&p, g, &o));
    kn_rng rng = kn_rng_new(3);
    kn_tensor *hx = NULL, *hr = NULL;
    KN_ASSERT_OK(kn_tensor_randn(&hx, KN_DT_F32, 2, s, &rng));
    KN_ASSERT_OK(kn_tensor_randn(&hr, KN_DT_F32, 2, s, &rng));
    KN_ASSERT_OK(kn_program_bind(p, "x", hx));
    KN_ASSERT_OK(kn_program_bind(p, "r", hr));
    int seen[2] = {0, 0};
    kn_program_set_hook(p, device_of_views, seen);
    for (int run = 0; run < 3; run++) {
        KN_ASSERT_OK(kn_program_run(p));
        kn_tensor *dx = NULL;
        KN_ASSERT_OK(kn_tensor_to(&dx, kn_program_output(p, 1), KN_CPU));
        cr_assert(!memcmp(kn_tensor_data(dx), kn_tensor_data(hr), sizeof(float) * 64 * 33), "run %d: dx is not r", run);
        kn_tensor_free(dx);
    }
    cr_assert(seen[0] >= 3 && seen[1] == seen[0], "%d of %d [64, 33] values on the GPU", seen[1], seen[0]);
    kn_tensor_free(hx);
    kn_tensor_free(hr);
    kn_program_free(p);
    kn_graph_free(fwd);
    kn_graph_free(g);
}

/* The tiny model's joint graph (f64), its interpreter run and a bound program of it. */
typedef struct fixture {
    irt_model m;
    kn_graph *g;
    kn_interp *it;
    kn_program *p;
} fixture;

static void fixture_init(fixture *f, uint64_t seed, const char *passes) {
    irt_model_init(&f->m, KN_DT_F64, seed);
    f->g = irt_joint_graph(&f->m, 0.1);
    f->it = reference_run(f->g, &f->m);
    f->p = compile_cpu(f->g, passes);
    bind_all(f->p, &f->m);
}

static void fixture_free(fixture *f) {
    kn_program_free(f->p);
    kn_interp_free(f->it);
    kn_graph_free(f->g);
    irt_model_free(&f->m);
}

typedef struct hook_log {
    int calls, last_node, fail_at;
    bool ordered, valued;
} hook_log;

static kn_status log_hook(void *ctx, int32_t node, const kn_tensor *value) {
    hook_log *h = ctx;
    h->ordered = h->ordered && node > h->last_node;
    h->valued = h->valued && value != NULL;
    h->last_node = node;
    if (++h->calls == h->fail_at) return kn_error(KN_ERR_ARG, "log_hook: stop at call %d", h->calls);
    return KN_OK;
}

KN_TEST(program, passes_keep_the_outputs_and_the_hook_sees_every_step) {
    fixture f;
    fixture_init(&f, 5, "all");
    kn_program *p = f.p;
    kn_interp *it = f.it;
    cr_assert_leq(kn_program_graph(p)->nnodes, f.g->nnodes, "passes never add nodes to this graph");
    hook_log h = {0, -1, 0, true, true};
    kn_program_set_hook(p, log_hook, &h);
    KN_ASSERT_OK(kn_program_run(p));
    cr_assert_eq(h.calls, kn_program_nsteps(p), "one hook call per step");
    cr_assert(h.ordered && h.valued, "the hook sees each step's node, in order, with its value");
    for (int i = 0; i <= IRT_NP; i++)
        cr_assert(irt_same_bits(kn_program_output(p, i), kn_interp_output(it, i)), "output %d after every pass", i);
    h = (hook_log){0, -1, 3, true, true};
    KN_ASSERT_ERR(kn_program_run(p), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "stop at call 3"), "%s", kn_last_error());
    cr_assert_eq(h.calls, 3, "the run stops at the hook's error");
    kn_program_set_hook(p, NULL, NULL);
    KN_ASSERT_OK(kn_program_run(p));
    fixture_free(&f);
}

/* A deferred param (ZeRO-3's evaluation program) has no binding and no memory of the
 * program's: a run fails naming it, and binding it again gives the same bits. */
KN_TEST(program, deferred_params_fail_by_name_until_bound_again) {
    fixture f;
    fixture_init(&f, 9, "none");
    kn_program *p = f.p;
    const irt_model *mm = &f.m;
    int64_t before = mm->p[0]->storage->refcount;
    for (int i = 0; i < IRT_NP; i++) KN_ASSERT_OK(kn_program_defer(p, irt_pnames[i]));
    cr_assert_eq(mm->p[0]->storage->refcount, before - 1, "the binding's reference to the memory went");
    KN_ASSERT_ERR(kn_program_run(p), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "deferred and was not supplied"), "%s", kn_last_error());
    KN_ASSERT_ERR(kn_program_defer(p, "tok"), KN_ERR_ARG); /* inputs are bound, not deferred */
    KN_ASSERT_ERR(kn_program_defer(p, "nope"), KN_ERR_ARG);
    bind_all(p, mm); /* binding undoes the deferral */
    KN_ASSERT_OK(kn_program_run(p));
    for (int i = 0; i <= IRT_NP; i++)
        cr_assert(irt_same_bits(kn_program_output(p, i), kn_interp_output(f.it, i)), "output %d, bound again", i);
    fixture_free(&f);
}

/* kn_program_roofline_tsv: refused before a profiled run and with roofs that are not
 * positive; after one, every computing step is a line or in the unplaced sum, and the
 * lines' FLOPs add up to the cost model's for the whole graph (a generated kernel's are
 * its members'). */
KN_TEST(program, the_roofline_table_accounts_for_every_flop) {
    irt_model m;
    irt_model_init(&m, KN_DT_F32, 5);
    kn_graph *g = irt_joint_graph(&m, 0.1);
    kn_program *p = NULL;
    kn_program_opts o = {.device = KN_CPU, .mode = KN_PROGRAM_COMPILED};
    KN_ASSERT_OK(kn_program_compile(&p, g, &o));
    bind_all(p, &m);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_assert_not_null(f);
    KN_ASSERT_ERR(kn_program_roofline_tsv(f, p, 100, 10, NULL, NULL), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "no profiled run"), "%s", kn_last_error());
    kn_program_set_profile(p, true);
    for (int r = 0; r < 2; r++) KN_ASSERT_OK(kn_program_run(p));
    KN_ASSERT_ERR(kn_program_roofline_tsv(f, p, 0, 10, NULL, NULL), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "must be positive"), "%s", kn_last_error());
    int placed = 0;
    double placed_ms = 0;
    KN_ASSERT_OK(kn_program_roofline_tsv(f, p, 100, 10, &placed, &placed_ms));
    fclose(f);
    int rows = 0, fused = 0, unplaced = -1;
    double flops = 0;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        if (!strncmp(line, "# unplaced\t", 11)) unplaced = atoi(line + 11);
        if (line[0] != '%') continue;
        char node[16], op[64];
        double fl = 0;
        cr_assert_eq(sscanf(line, "%15s %63s %lf", node, op, &fl), 3, "line: %s", line);
        cr_assert_gt(fl, 0, "%s", line);
        flops += fl, rows++, fused += !strncmp(op, "fused:", 6);
    }
    kn_program_stats st = kn_program_get_stats(p);
    cr_assert_eq(rows, placed);
    cr_assert_gt(placed_ms, 0);
    cr_assert(unplaced >= 0 && rows + unplaced <= st.nsteps, "%d lines, %d unplaced, %d steps", rows, unplaced, st.nsteps);
    if (st.mode == KN_PROGRAM_COMPILED) cr_assert_gt(fused, 0, "generated kernels are placed as fused:...");
    double want = kn_graph_cost(kn_program_graph(p)).flops;
    cr_assert(flops > 0 && fabs(flops - want) <= 1e-9 * want, "the lines' FLOPs %.0f, the graph's %.0f", flops, want);
    free(buf);
    kn_program_free(p);
    kn_graph_free(g);
    irt_model_free(&m);
}

/* kn_program_bind_output: every output of the tiny model's joint graph (the loss and each
 * gradient) written into one slab, node by node and compiled, equals the unbound run bit
 * for bit, and every output is placed in the slab, none copied. An IR graph covers the
 * cases that must be copied: an input handed back, a view of part of a value, and a value
 * already placed for another output. */
static void bound_outputs_equal_unbound(kn_program_mode mode) {
    irt_model m;
    irt_model_init(&m, KN_DT_F32, 5);
    kn_graph *g = irt_joint_graph(&m, 0.0);
    kn_program_opts o = {.device = KN_CPU, .mode = mode};
    kn_program *ref = NULL, *p = NULL;
    KN_ASSERT_OK(kn_program_compile(&ref, g, &o));
    KN_ASSERT_OK(kn_program_compile(&p, g, &o));
    bind_all(ref, &m);
    bind_all(p, &m);
    int64_t total = 0;
    for (int i = 0; i < g->noutputs; i++) total += kn_type_numel(&g->nodes[g->outputs[i]].type);
    kn_tensor *slab = NULL, *views[IRT_NP + 1] = {0};
    KN_ASSERT_OK(kn_tensor_full(&slab, KN_DT_F32, 1, &total, -7.0)); /* poisoned */
    int64_t off = 0;
    for (int i = 0; i < g->noutputs; i++) {
        const kn_type *t = &g->nodes[g->outputs[i]].type;
        int64_t n = kn_type_numel(t);
        kn_tensor *flat = NULL;
        KN_ASSERT_OK(kn_tensor_slice(&flat, slab, 0, off, off + n, 1));
        KN_ASSERT_OK(kn_tensor_reshape(&views[i], flat, t->ndim, t->shape));
        kn_tensor_free(flat);
        KN_ASSERT_OK(kn_program_bind_output(p, i, views[i]));
        off += n;
    }
    for (int run = 0; run < 2; run++) {
        KN_ASSERT_OK(kn_program_run(ref));
        KN_ASSERT_OK(kn_program_run(p));
        for (int i = 0; i < g->noutputs; i++) {
            cr_assert(irt_same_bits(views[i], kn_program_output(ref, i)), "output %d, run %d", i, run);
            cr_assert_eq(kn_tensor_data(kn_program_output(p, i)), kn_tensor_data(views[i]), "output %d is the slab", i);
        }
        cr_assert_eq(kn_program_get_stats(p).outputs_copied, 0, "every output written in place (mode %d)", mode);
    }
    /* a bad binding: the wrong shape, dtype or device, a missing output */
    int64_t two = 2;
    kn_tensor *bad = NULL;
    KN_ASSERT_OK(kn_tensor_zeros(&bad, KN_DT_F32, 1, &two));
    KN_ASSERT_ERR(kn_program_bind_output(p, 1, bad), KN_ERR_SHAPE);
    cr_assert(strstr(kn_last_error(), "output 1 is f32["), "%s", kn_last_error());
    KN_ASSERT_ERR(kn_program_bind_output(p, g->noutputs, bad), KN_ERR_ARG);
    kn_tensor_free(bad);
    KN_ASSERT_OK(kn_program_bind_output(p, 1, NULL)); /* unbound again: its own memory */
    KN_ASSERT_OK(kn_program_run(p));
    cr_assert_neq(kn_tensor_data(kn_program_output(p, 1)), kn_tensor_data(views[1]));
    for (int i = 0; i < g->noutputs; i++) kn_tensor_free(views[i]);
    kn_tensor_free(slab);
    kn_program_free(p);
    kn_program_free(ref);
    kn_graph_free(g);
    irt_model_free(&m);
}

KN_TEST(program, bound_outputs_are_written_in_place) {
    bound_outputs_equal_unbound(KN_PROGRAM_NODES);
    bound_outputs_equal_unbound(KN_PROGRAM_COMPILED);
}

KN_TEST(program, bound_outputs_that_cannot_be_placed_are_copied) {
    static const char ir[] = "%0 = input {name=\"x\"} : f32[4,6]\n"
                             "%1 = exp %0 : f32[4,6]\n"
                             "%2 = slice %1 {axis=0, start=1, stop=3, step=1} : f32[2,6]\n"
                             "%3 = reshape %1 {shape=[24]} : f32[24]\n"
                             "output %0, %2, %3, %1, %1\n";
    kn_graph *g = NULL;
    KN_ASSERT_OK(kn_graph_parse(ir, strlen(ir), &g));
    for (int mode = 0; mode < 2; mode++) {
        kn_program_opts o = {.device = KN_CPU, .mode = mode ? KN_PROGRAM_COMPILED : KN_PROGRAM_NODES};
        kn_program *p = NULL;
        KN_ASSERT_OK(kn_program_compile(&p, g, &o));
        int64_t s[2] = {4, 6};
        kn_tensor *x = irt_randn(KN_DT_F32, 2, s, 3), *outs[5] = {0};
        KN_ASSERT_OK(kn_program_bind(p, "x", x));
        for (int i = 0; i < 5; i++) {
            const kn_type *t = &g->nodes[g->outputs[i]].type;
            KN_ASSERT_OK(kn_tensor_full(&outs[i], KN_DT_F32, t->ndim, t->shape, -7.0));
            KN_ASSERT_OK(kn_program_bind_output(p, i, outs[i]));
        }
        KN_ASSERT_OK(kn_program_run(p));
        const float *e = kn_tensor_data(outs[3]), *xs = kn_tensor_data(x);
        for (int k = 0; k < 24; k++) {
            cr_assert_float_eq(e[k], expf(xs[k]), 1e-6f * expf(xs[k]), "the value (mode %d)", mode);
            cr_assert_eq(((const float *)kn_tensor_data(outs[0]))[k], xs[k], "the input, copied (mode %d)", mode);
            cr_assert_eq(((const float *)kn_tensor_data(outs[2]))[k], e[k], "the whole view (mode %d)", mode);
            cr_assert_eq(((const float *)kn_tensor_data(outs[4]))[k], e[k], "the value, copied (mode %d)", mode);
        }
        for (int k = 0; k < 12; k++)
            cr_assert_eq(((const float *)kn_tensor_data(outs[1]))[k], e[6 + k], "part of a value, copied (mode %d)", mode);
        for (int i = 0; i < 5; i++) cr_assert_eq(kn_tensor_data(kn_program_output(p, i)), kn_tensor_data(outs[i]));
        /* %1 is placed for output 2 (its whole view), bound first: outputs 3 and 4 are copies */
        cr_assert_eq(kn_program_get_stats(p).outputs_copied, 4, "the input, the part, %%1 twice (mode %d)", mode);
        for (int i = 0; i < 5; i++) kn_tensor_free(outs[i]);
        kn_tensor_free(x);
        kn_program_free(p);
    }
    kn_graph_free(g);
}
