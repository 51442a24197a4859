/* test_ddp_pass.c — DDP as a pass (core/passes/ddp.c) and the collective ops (kiln/ir.h):
 * where the pass places each bucket's all_reduce_start (right after its last gradient's
 * store, before the backward matmuls of the layer below), that the slab then holds every
 * gradient bit for bit, that programs (node by node and compiled, on the CPU and a GPU) run
 * the collectives as the interpreter does, the order a context sees, and clear errors;
 * ZeRO-3's pass: the params gone, each bucket gathered before its first reader in the
 * forward and again in the backward, the next one prefetched, the same gradients. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_test.h"
#include "kiln/dist.h"
#include "kiln/nn.h"
#include "kiln/passes.h"
#include "kiln/program.h"

static const kn_gpt_config cfg = {.vocab = 17, .context = 8, .layers = 3, .width = 16, .heads = 2};

static kn_graph *ddp_of(const kn_graph *g, const char *list) {
    kn_graph *c;
    KN_ASSERT_OK(kn_graph_copy(&c, g));
    KN_ASSERT_OK(kn_passes_run(c, list, NULL));
    KN_ASSERT_OK(kn_graph_verify(c));
    return c;
}

static int count_op(const kn_graph *g, kn_op op) {
    int n = 0;
    for (int i = 0; i < g->nnodes; i++) n += g->nodes[i].op == op;
    return n;
}

/* The param node called name, or -1. */
static int32_t param_node(const kn_graph *g, const char *name) {
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i].op == KN_OP_PARAM && !strcmp(g->nodes[i].attrs.name, name)) return i;
    return -1;
}

KN_TEST(ddp_pass, each_start_follows_its_last_gradient_and_precedes_the_layer_below) {
    kn_graph *g;
    KN_ASSERT_OK(kn_gpt_graph(&cfg, 2, 8, true, &g));
    kn_gpt m;
    KN_ASSERT_OK(kn_gpt_new(&m, &cfg));
    const kn_params *p = &m.p;
    cr_assert_eq(g->noutputs, 1 + p->count);
    /* 4 KB buckets: one or two matrices each at width 16 */
    kn_graph *d = ddp_of(g, "ddp:0.004");
    kn_dp_bucket *bk;
    int nb;
    KN_ASSERT_OK(kn_dp_param_buckets(p, (size_t)(0.004 * 1048576.0), &bk, &nb));
    cr_assert_gt(nb, 4);
    cr_assert_eq(count_op(d, KN_OP_GRAD_STORE), p->count);
    cr_assert_eq(count_op(d, KN_OP_ALL_REDUCE_START), nb);
    cr_assert_eq(count_op(d, KN_OP_COMM_WAIT), nb);
    cr_assert_eq(d->noutputs, 1 + nb);
    int checked_below = 0;
    for (int b = 0; b < nb; b++) {
        int32_t s = -1, w = d->outputs[1 + b];
        for (int i = 0; i < d->nnodes; i++)
            if (d->nodes[i].op == KN_OP_ALL_REDUCE_START && d->nodes[i].attrs.start == bk[b].lo) s = i;
        cr_assert_geq(s, 0, "bucket %d has no start", b);
        cr_assert_eq(d->nodes[s].attrs.stop, bk[b].hi);
        /* the wait is the output in slab order, after every computing node */
        cr_assert_eq(d->nodes[w].op, KN_OP_COMM_WAIT);
        cr_assert_eq(d->nodes[w].in[0], s);
        for (int i = w; i < d->nnodes; i++) cr_assert_eq(d->nodes[i].op, KN_OP_COMM_WAIT, "%%%d after a wait", i);
        /* every store of the bucket comes before the start; the last producer's store is
         * followed by nothing but collectives up to the start */
        int stores = 0;
        int32_t last_producer = -1;
        for (int i = 0; i < s; i++) {
            const kn_node *n = &d->nodes[i];
            if (n->op != KN_OP_GRAD_STORE || n->attrs.offset < bk[b].lo || n->attrs.offset >= bk[b].hi) continue;
            stores++;
            if (n->in[0] > last_producer) last_producer = n->in[0];
        }
        cr_assert_eq(stores, bk[b].last_param - bk[b].first_param + 1, "bucket %d: %d stores before its start", b, stores);
        for (int i = last_producer + 1; i < s; i++)
            cr_assert(kn_op_get(d->nodes[i].op)->category == KN_CAT_COLLECTIVE || d->nodes[i].op == KN_OP_FULL,
                      "bucket %d: %%%d = %s computes between its last gradient (%%%d) and its start (%%%d)", b, i,
                      kn_op_name(d->nodes[i].op), last_producer, s);
        /* a bucket of layer L >= 1's matrices starts before the backward matmuls of layer L - 1
         * (the ones that read that layer's weights): that is the overlap */
        const char *first = p->info[bk[b].first_param].name;
        int layer;
        if (sscanf(first, "h.%d.", &layer) == 1 && layer >= 1 && p->info[bk[b].first_param].decay) {
            char below[64];
            snprintf(below, sizeof below, "h.%d.mlp.c_fc.weight", layer - 1);
            int32_t wb = param_node(d, below);
            cr_assert_geq(wb, 0);
            bool later = false;
            for (int i = s + 1; i < d->nnodes; i++)
                later |= d->nodes[i].op == KN_OP_MATMUL && (d->nodes[i].in[0] == wb || d->nodes[i].in[1] == wb);
            cr_assert(later, "bucket %d (%s..) starts after every backward matmul of layer %d", b, first, layer - 1);
            checked_below++;
        }
    }
    cr_assert_geq(checked_below, 2);
    kn_free(bk);
    kn_gpt_free(&m);
    kn_graph_free(d);
    kn_graph_free(g);
}

KN_TEST(ddp_pass, the_slab_holds_every_gradient_bit_for_bit) {
    kn_graph *g;
    KN_ASSERT_OK(kn_gpt_graph(&cfg, 2, 8, true, &g));
    const char *lists[] = {"ddp", "ddp:0.004", "ddp:0.0001"};
    for (int k = 0; k < 3; k++) {
        kn_graph *d = ddp_of(g, lists[k]);
        double delta = -1;
        KN_ASSERT_OK(kn_graph_compare(g, d, 3, &delta));
        cr_assert_eq(delta, 0.0, "%s: max |delta| %g", lists[k], delta);
        kn_graph_free(d);
    }
    kn_graph_free(g);
}

KN_TEST(ddp_pass, programs_run_the_collectives_as_the_interpreter_does) {
    kn_graph *g;
    KN_ASSERT_OK(kn_gpt_graph(&cfg, 2, 8, true, &g));
    kn_graph *d = ddp_of(g, "ddp:0.004");
    kn_program_opts modes[2] = {{.device = KN_CPU, .mode = KN_PROGRAM_NODES}, {.device = KN_CPU, .mode = KN_PROGRAM_COMPILED}};
    for (int k = 0; k < 2; k++) {
        double rel = -1;
        KN_ASSERT_OK(kn_program_compare(d, &modes[k], 5, &rel, NULL));
        cr_assert_lt(rel, k ? 1e-5 : 1e-12, "mode %d: %g", k, rel);
    }
    kn_graph_free(d);
    kn_graph_free(g);
}

/* A context that checks what it is asked, in order: a start only once every float of its
 * range was stored in this run, a wait only after its start, and counts the polls. */
typedef struct order_ctx {
    int64_t n;
    int *stored;
    int starts, waits, polls, polls_at_first_wait;
    int64_t started_lo[64];
} order_ctx;

static kn_status order_run(void *ctx, int32_t id, const kn_node *n, const kn_tensor *const *in, kn_tensor *out) {
    order_ctx *o = ctx;
    (void)id;
    (void)out;
    if (n->op == KN_OP_GRAD_STORE) {
        for (int64_t i = 0; i < kn_tensor_numel(in[0]); i++) o->stored[n->attrs.offset + i]++;
        return KN_OK;
    }
    if (n->op == KN_OP_ALL_REDUCE_START) {
        for (int64_t i = n->attrs.start; i < n->attrs.stop; i++)
            if (o->stored[i] != 1) return kn_error(KN_ERR_INTERNAL, "start of [%lld, %lld) before float %lld was stored",
                                                    (long long)n->attrs.start, (long long)n->attrs.stop, (long long)i);
        o->started_lo[o->starts++] = n->attrs.start;
        return KN_OK;
    }
    bool started = false;
    for (int k = 0; k < o->starts; k++) started |= o->started_lo[k] == n->attrs.start;
    if (!started) return kn_error(KN_ERR_INTERNAL, "wait before its start");
    if (o->waits++ == 0) o->polls_at_first_wait = o->polls;
    return KN_OK;
}

static kn_status order_poll(void *ctx) {
    ((order_ctx *)ctx)->polls++;
    return KN_OK;
}

KN_TEST(ddp_pass, a_context_sees_stores_then_starts_then_waits_and_is_polled_between) {
    kn_graph *g;
    KN_ASSERT_OK(kn_gpt_graph(&cfg, 2, 8, true, &g));
    kn_graph *d = ddp_of(g, "ddp:0.004");
    int64_t n = 0;
    for (int i = 1; i < g->noutputs; i++) n += kn_type_numel(&g->nodes[g->outputs[i]].type);
    for (int k = 0; k < 2; k++) {
        order_ctx o = {.n = n, .stored = calloc((size_t)n, sizeof(int))};
        kn_collectives c = {.ctx = &o, .run = order_run, .poll = order_poll};
        kn_program *p;
        kn_program_opts opts = {.device = KN_CPU, .mode = k ? KN_PROGRAM_COMPILED : KN_PROGRAM_NODES};
        KN_ASSERT_OK(kn_program_compile(&p, d, &opts));
        for (int i = 0; i < d->nnodes; i++) {
            const kn_node *nd = &d->nodes[i];
            if (nd->op != KN_OP_INPUT && nd->op != KN_OP_PARAM) continue;
            kn_tensor *t;
            KN_ASSERT_OK(kn_graph_random_input(d, i, 1, &t));
            KN_ASSERT_OK(kn_program_bind(p, nd->attrs.name, t));
            kn_tensor_free(t);
        }
        KN_ASSERT_ERR(kn_program_run(p), KN_ERR_UNSUPPORTED); /* no context yet: refused, naming it */
        cr_assert(strstr(kn_last_error(), "no collectives context"), "%s", kn_last_error());
        kn_program_set_collectives(p, &c);
        KN_ASSERT_OK(kn_program_run(p));
        cr_assert_eq(o.starts, o.waits);
        cr_assert_gt(o.starts, 4);
        cr_assert_gt(o.polls_at_first_wait, o.starts, "polled %d times before the waits", o.polls_at_first_wait);
        for (int64_t i = 0; i < n; i++) cr_assert_eq(o.stored[i], 1, "float %lld stored %d times", (long long)i, o.stored[i]);
        kn_program_free(p);
        free(o.stored);
    }
    kn_graph_free(d);
    kn_graph_free(g);
}

KN_TEST(ddp_pass, bad_graphs_arguments_and_protocols_are_clear_errors) {
    kn_graph *g;
    KN_ASSERT_OK(kn_gpt_graph(&cfg, 2, 8, true, &g));
    KN_ASSERT_ERR(kn_passes_run(g, "ddp:0", NULL), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "bucket size '0'"), "%s", kn_last_error());
    KN_ASSERT_ERR(kn_passes_run(g, "ddp:lots", NULL), KN_ERR_ARG);
    kn_graph *d = ddp_of(g, "ddp");
    KN_ASSERT_ERR(kn_passes_run(d, "ddp", NULL), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "already has collectives"), "%s", kn_last_error());
    /* a wait for a range that was never started */
    kn_graph *h;
    KN_ASSERT_OK(kn_graph_copy(&h, d));
    int32_t w = h->outputs[1];
    h->nodes[w].attrs.start += 1;
    KN_ASSERT_OK(kn_graph_verify(h));
    double delta;
    KN_ASSERT_ERR(kn_graph_compare(g, h, 1, &delta), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "was not started"), "%s", kn_last_error());
    /* a graph with no gradient outputs */
    kn_graph *one;
    KN_ASSERT_OK(kn_graph_new(&one));
    kn_node n = {0};
    n.op = KN_OP_INPUT;
    n.attrs = kn_attrs_default();
    strcpy(n.attrs.name, "x");
    n.type = (kn_type){KN_DT_F32, 0, {0}};
    int32_t id;
    KN_ASSERT_OK(kn_graph_add_node(one, &n, &id));
    KN_ASSERT_OK(kn_graph_add_output(one, id));
    KN_ASSERT_ERR(kn_passes_run(one, "ddp", NULL), KN_ERR_ARG);
    cr_assert(strstr(kn_last_error(), "a joint graph has the loss"), "%s", kn_last_error());
    kn_graph_free(one);
    kn_graph_free(h);
    kn_graph_free(d);
    kn_graph_free(g);
}

/* ZeRO-3's pass: no params left; per bucket and phase one all_gather_start, whose wait
 * comes right before the first node reading a view of it, and the next gather right after
 * each wait; the slab holds the same gradients bit for bit, and programs agree. */
KN_TEST(ddp_pass, zero3_gathers_each_bucket_before_its_first_reader_forward_and_backward) {
    kn_graph *g;
    KN_ASSERT_OK(kn_gpt_graph(&cfg, 2, 8, true, &g));
    const char *lists[] = {"zero3", "zero3:0.004", "zero3:0.0001"};
    for (int k = 0; k < 3; k++) {
        kn_graph *d = ddp_of(g, lists[k]);
        int starts = count_op(d, KN_OP_ALL_GATHER_START), rs = count_op(d, KN_OP_REDUCE_SCATTER_START);
        cr_assert_eq(count_op(d, KN_OP_PARAM), 0, "%s: params left", lists[k]);
        /* every bucket is read in the forward; in the backward, those whose readers' gradients need them */
        cr_assert(starts > rs && starts <= 2 * rs, "%s: %d gathers for %d buckets", lists[k], starts, rs);
        int32_t loss = d->outputs[0];
        int forward = 0;
        for (int32_t i = 0; i < d->nnodes; i++) {
            const kn_node *n = &d->nodes[i];
            if (n->op != KN_OP_COMM_WAIT || n->type.ndim != 1) continue;
            forward += i < loss;
            /* the next node that is not the prefetch reads the wait (a view of the bucket) */
            int32_t j = i + 1;
            if (j < d->nnodes && d->nodes[j].op == KN_OP_ALL_GATHER_START) j++;
            cr_assert(j < d->nnodes && d->nodes[j].nin == 1 && d->nodes[j].in[0] == i, "%s: %%%d = %s does not read "
                      "the wait %%%d", lists[k], j, kn_op_name(d->nodes[j].op), i);
            cr_assert(kn_ir_aliases(&d->nodes[j], &n->type), "%s: %%%d is a view of the bucket", lists[k], j);
        }
        cr_assert_eq(forward, rs, "%s: %d gathers waited for before the loss for %d buckets", lists[k], forward, rs);
        double delta = -1;
        KN_ASSERT_OK(kn_graph_compare(g, d, 3, &delta));
        cr_assert_eq(delta, 0.0, "%s: max |delta| %g", lists[k], delta);
        kn_program_opts modes[2] = {{.device = KN_CPU, .mode = KN_PROGRAM_NODES}, {.device = KN_CPU, .mode = KN_PROGRAM_COMPILED}};
        for (int m = 0; m < 2; m++) {
            double rel = -1;
            KN_ASSERT_OK(kn_program_compare(d, &modes[m], 5, &rel, NULL));
            cr_assert_lt(rel, m ? 1e-5 : 1e-12, "%s mode %d: %g", lists[k], m, rel);
        }
        kn_graph_free(d);
    }
    /* a graph whose params are not its gradients' (a forward graph) is refused by name */
    kn_graph *f;
    KN_ASSERT_OK(kn_gpt_graph(&cfg, 2, 8, false, &f));
    KN_ASSERT_ERR(kn_passes_run(f, "zero3", NULL), KN_ERR_ARG);
    kn_graph_free(f);
    kn_graph_free(g);
}

/* A context that works on any device: stores copied to a host slab, gathers filled from a
 * host parameter slab (a GPU rank's NCCL reads and writes device memory the same way). */
typedef struct host_ctx {
    float *slab, *params;
    int starts, waits;
} host_ctx;

static kn_status host_run(void *ctx, int32_t id, const kn_node *n, const kn_tensor *const *in, kn_tensor *out) {
    host_ctx *h = ctx;
    (void)id;
    if (n->op == KN_OP_GRAD_STORE) {
        kn_tensor *c = NULL;
        KN_TRY(kn_tensor_to(&c, in[0], KN_CPU));
        memcpy(h->slab + n->attrs.offset, kn_tensor_data(c), (size_t)kn_tensor_numel(c) * sizeof(float));
        kn_tensor_free(c);
        return KN_OK;
    }
    if (n->op == KN_OP_ALL_GATHER_START && ++h->starts)
        return kn_device_memcpy(out->storage->device, kn_tensor_data(out), KN_CPU, h->params + n->attrs.start,
                                (size_t)(n->attrs.stop - n->attrs.start) * sizeof(float));
    if (n->op == KN_OP_COMM_WAIT) h->waits++;
    else h->starts++;
    return KN_OK;
}

/* Run d (ZeRO-3's graph: inputs only) on dev in a mode; the loss and the slab come back. */
static void run_on(const kn_graph *d, kn_device dev, kn_program_mode mode, const float *params, int64_t n, double *loss,
                   float *slab) {
    host_ctx h = {slab, (float *)params, 0, 0};
    kn_collectives c = {.ctx = &h, .run = host_run};
    kn_program *p;
    kn_program_opts o = {.device = dev, .mode = mode};
    KN_ASSERT_OK(kn_program_compile(&p, d, &o));
    for (int i = 0; i < d->nnodes; i++) {
        if (d->nodes[i].op != KN_OP_INPUT) continue;
        kn_tensor *t, *on;
        KN_ASSERT_OK(kn_graph_random_input(d, i, 1, &t));
        KN_ASSERT_OK(kn_tensor_to(&on, t, dev));
        KN_ASSERT_OK(kn_program_bind(p, d->nodes[i].attrs.name, on));
        kn_tensor_free(t);
        kn_tensor_free(on);
    }
    memset(slab, 0, (size_t)n * sizeof(float));
    kn_program_set_collectives(p, &c);
    KN_ASSERT_OK(kn_program_run(p));
    KN_ASSERT_OK(kn_tensor_item_any(kn_program_output(p, 0), loss));
    cr_assert_eq(h.starts, h.waits, "every start waited for");
    cr_assert_gt(h.starts, 4);
    kn_program_free(p);
}

/* Programs on a GPU run the collectives through their context as CPU programs do (GPU
 * ranks drive NCCL this way): node by node and compiled, the same loss and gradients. */
KN_TEST(ddp_pass, gpu_programs_run_the_collectives_through_their_context) {
    kn_graph *g;
    KN_ASSERT_OK(kn_gpt_graph(&cfg, 2, 8, true, &g));
    kn_graph *d = ddp_of(g, "zero3:0.004");
    int64_t n = 0;
    for (int i = 1; i < g->noutputs; i++) n += kn_type_numel(&g->nodes[g->outputs[i]].type);
    float *params = malloc((size_t)n * sizeof(float)), *ref = malloc((size_t)n * sizeof(float)),
          *got = malloc((size_t)n * sizeof(float));
    kn_rng r = kn_rng_new(7);
    kn_rng_normal_f32(&r, params, n);
    for (int64_t i = 0; i < n; i++) params[i] *= 0.1f;
    double lref, l;
    run_on(d, KN_CPU, KN_PROGRAM_NODES, params, n, &lref, ref);
    run_on(d, KN_CPU, KN_PROGRAM_COMPILED, params, n, &l, got); /* the context's path on the CPU */
    cr_assert_float_eq(l, lref, 1e-5);
    bool gpu = kn_device_count(KN_DEVICE_CUDA) > 0;
    for (int mode = 0; gpu && mode < 2; mode++) {
        run_on(d, (kn_device){KN_DEVICE_CUDA, 0}, mode ? KN_PROGRAM_COMPILED : KN_PROGRAM_NODES, params, n, &l, got);
        cr_assert_float_eq(l, lref, 1e-3, "mode %d: loss %g on the GPU, %g on the CPU", mode, l, lref);
        double worst = 0, big = 0;
        for (int64_t i = 0; i < n; i++) {
            double e = fabs((double)got[i] - ref[i]);
            if (e > worst) worst = e;
            if (fabs(ref[i]) > big) big = fabs(ref[i]);
        }
        cr_assert_lt(worst, 1e-2 * big, "mode %d: gradients differ by %g (largest %g)", mode, worst, big);
    }
    free(params);
    free(ref);
    free(got);
    kn_graph_free(d);
    kn_graph_free(g);
    if (!gpu) cr_skip_test("no CUDA device: the GPU half skipped (the CPU half ran)");
}
