/* dp.c — data parallelism: DDP, ZeRO-1, ZeRO-2 and ZeRO-3 around the trainer's compiled
 * step (kiln/dist.h).
 *
 * Every rank runs the same joint forward+backward graph on its own rows of the global
 * batch. The gradients must then be averaged over the ranks before the optimizer step, and
 * the strategies differ in who keeps what:
 *   DDP     every rank keeps everything; each bucket of gradients is all-reduced.
 *   ZeRO-1  each rank keeps the optimizer state of its shard only (1/N of the slab): the
 *           buckets are reduce-scattered (each rank receives the sum of its shard's part),
 *           each rank updates its shard, and the parameters are all-gathered.
 *   ZeRO-2  as ZeRO-1, and the full gradient slab is gone: gradients wait in a bucket's
 *           staging buffer only until its reduce-scatter finishes.
 *   ZeRO-3  as ZeRO-2, and the full parameter slab is gone too: each bucket of parameters
 *           is all-gathered for the steps that read it, in the forward and again in the
 *           backward, and freed after (zero3.c); the optimizer updates the shard in place,
 *           and no all_gather follows the step. (FSDP is PyTorch's name for it.)
 * This file sets a strategy up and runs the step; dp_buckets.c moves the gradients
 * (buckets, the collectives, compression), dp_shard.c keeps ZeRO's shards and updates them.
 *
 * The step itself is the step runner's (kiln/step.h, core/nn/step.c): this file hands it
 * hooks (a micro-batch begins and ends, a sum over the ranks, the clip, the update) and
 * the strategy's pass, and the runner compiles the trainer's step with that pass, runs the
 * micro-batches, averages the loss, and with a loss scale (fp16) makes ONE overflow
 * decision for all ranks.
 *
 * Overlap: the strategy's pass (`ddp`, `zero`, `zero3`: core/passes/ddp.c) makes
 * communication part of the graph: each gradient
 * is stored into the slab by a grad_store node right after the node that makes it, a
 * bucket's all_reduce_start (reduce_scatter_start) node follows its last store, and
 * comm_wait nodes end the graph (ZeRO-3: and each parameter bucket's all_gather_start and
 * comm_wait come before its readers, zero3.c). The program runs them through this
 * strategy's kn_collectives context and polls it between steps (MPI progresses inside
 * MPI_Test), on CPU ranks (MPI) and GPU ranks (NCCL) alike, so communication runs while
 * the rest of the backward computes, where the IR says; the first gradient comm_wait
 * marks the backward's end for the overlap figure.
 *
 * Buckets are contiguous ranges of whole parameters of the slab, formed from the last
 * parameter backwards, as PyTorch's DDP forms them in reverse registration order: roughly
 * the order in which backward produces gradients (the output layers first). A bucket
 * starts when its last gradient exists, whatever the order.
 *
 * Gradient accumulation: with K micro-batches, DDP and ZeRO-1 add the micro-batches'
 * gradients locally and communicate in the last one only; ZeRO-2 and ZeRO-3 have no full
 * gradient slab to add into (keeping one would cost the 4P bytes they save), so they
 * reduce-scatter every micro-batch and add into the shard (DeepSpeed does the same, and
 * FSDP's no_sync() keeps full gradients instead). ZeRO-3 also gathers the parameters anew
 * for every micro-batch: 3P of traffic per micro-batch. Either way the result is (sum over
 * ranks and micro-batches) / (N K): the gradient of the global batch's mean loss. The
 * same code runs on CPU and GPU ranks: a gradient is added where it lives by the add
 * kernel of the trainer's device (kn_step_add), and ZeRO's shards (ZeRO-3's parameters
 * too) are allocated there (kn_dp_alloc), so the update is the device's optimizer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_impl.h"
#include "kiln/step.h"

static const char *const kn_dp_names[KN_DP_COUNT] = {"ddp", "zero1", "zero2", "zero3"};

kn_status kn_dp_strategy_parse(const char *s, kn_dp_strategy *out) {
    if (!s || !out) return kn_error(KN_ERR_ARG, "kn_dp_strategy_parse: NULL argument");
    for (int i = 0; i < KN_DP_COUNT; i++)
        if (!strcmp(s, kn_dp_names[i])) { *out = (kn_dp_strategy)i; return KN_OK; }
    if (!strcmp(s, "fsdp")) { *out = KN_DP_ZERO3; return KN_OK; } /* PyTorch's name for ZeRO-3 */
    return kn_error(KN_ERR_ARG, "--dist '%s': expected ddp, zero1, zero2 or zero3 (also called fsdp)", s);
}

const char *kn_dp_strategy_name(kn_dp_strategy s) { return (int)s >= 0 && s < KN_DP_COUNT ? kn_dp_names[s] : "?"; }

/* nb bytes (zeroed) where the step runs, and their release (nb as allocated). */
float *kn_dp_alloc(const kn_dp *d, size_t nb) {
    if (!kn_dp_on_gpu(d)) return kn_calloc(nb > 0 ? nb : 1, 1);
    void *p = NULL;
    if (kn_device_alloc(d->tr->dev, nb, &p) != KN_OK) return NULL;
    if (nb > 0 && kn_device_memset(d->tr->dev, p, 0, nb) != KN_OK) {
        kn_device_free(d->tr->dev, p, nb);
        return NULL;
    }
    return p;
}
void kn_dp_release(const kn_dp *d, void *p, size_t nb) {
    if (!p) return;
    if (kn_dp_on_gpu(d)) kn_device_free(d->tr->dev, p, nb);
    else kn_free(p);
}


void kn_dp_free(kn_dp *d) {
    if (!d) return;
    if (d->tr && d->tr->step.has_comm && d->tr->step.comm.ctx == d) {
        /* the trainer's runner forgets the hooks; its step program keeps the collective ops
         * and fails, naming them, if run again (kn_step_set_comm(tr, NULL, 1) recompiles) */
        d->tr->step.has_comm = false;
        d->tr->step.micro = 1;
        if (d->tr->prog) kn_program_set_collectives(d->tr->prog, NULL);
    }
    kn_dp_z3_free(d);
    for (int b = 0; d->staging && b < d->nbuckets; b++)
        if (d->staging[b]) kn_dp_release(d, d->staging[b], kn_dp_staging_size(d, b));
    /* the sizes come from shard_lo, so these go before it */
    if (d->grad_shard) kn_dp_release(d, d->grad_shard, (size_t)kn_dp_my_len(d) * sizeof(float));
    if (d->dshard_state) kn_dp_release(d, d->dshard_state, (size_t)d->shard_opt.state_len * sizeof(float));
    for (int b = 0; d->packed && b < d->nbuckets; b++) kn_free(d->packed[b]);
    kn_free(d->packed);
    kn_free(d->err);
    kn_free(d->staging);
    kn_free(d->in_flight);
    kn_free(d->buckets);
    kn_free(d->param_bucket);
    kn_free(d->reqs);
    kn_free(d->shard_lo);
    kn_free(d->t_launch);
    if (d->timeline) fclose(d->timeline);
    kn_free(d->ring_scratch);
    if (d->dscalar) kn_device_free(d->tr->dev, d->dscalar, sizeof(double));
    kn_optim_free(&d->shard_opt);
    memset(d, 0, sizeof *d);
}


static kn_status attach(kn_dp *d);

kn_status kn_dp_new(kn_dp *d, kn_comm *c, kn_trainer *tr, const kn_dp_config *cfg) {
    if (!d || !c || !tr || !cfg || !tr->model || !tr->prog) return kn_error(KN_ERR_ARG, "kn_dp_new: NULL argument");
    if ((int)cfg->strategy < 0 || cfg->strategy >= KN_DP_COUNT)
        return kn_error(KN_ERR_ARG, "kn_dp_new: strategy %d", (int)cfg->strategy);
    if (!(cfg->bucket_mb > 0) || cfg->accum < 1)
        return kn_error(KN_ERR_ARG, "kn_dp_new: --bucket-mb %g and --accum %d: need > 0 and >= 1", cfg->bucket_mb,
                        cfg->accum);
    if (tr->eager) return kn_error(KN_ERR_UNSUPPORTED, "kn_dp_new: data parallelism runs the compiled step (--mode graph)");
    bool gpu = tr->dev.type != KN_DEVICE_CPU;
    if (gpu != (c->be->type == KN_COMM_NCCL))
        return kn_error(KN_ERR_ARG, "kn_dp_new: a trainer on %s needs the %s communicator (got %s): CPU ranks "
                        "talk over MPI, GPU ranks over NCCL", gpu ? "a GPU" : "the CPU", gpu ? "nccl" : "mpi",
                        c->be->name);
    if (cfg->compress && (gpu || cfg->strategy != KN_DP_DDP || cfg->ring))
        return kn_error(KN_ERR_UNSUPPORTED, "kn_dp_new: --compress int8 compresses DDP's buckets on CPU ranks with the "
                        "library's all-gather (asked: --dist %s%s%s)", kn_dp_strategy_name(cfg->strategy),
                        gpu ? " on GPUs" : "", cfg->ring ? ", the ring" : "");
    if (gpu && cfg->ring)
        return kn_error(KN_ERR_UNSUPPORTED, "kn_dp_new: kiln's ring all-reduce (--allreduce ring) runs on CPU ranks: "
                        "it moves host buffers over MPI point to point; GPU ranks use NCCL's all-reduce (drop "
                        "--allreduce ring)");
    if (cfg->compress && tr->scale_in)
        return kn_error(KN_ERR_UNSUPPORTED, "kn_dp_new: --compress int8 with a loss scale: an overflow's inf would "
                        "enter the error feedback, which a skipped step cannot take back (use --loss-scale none, "
                        "or bf16, which needs no loss scale)");
    if (cfg->ring && cfg->strategy != KN_DP_DDP)
        return kn_error(KN_ERR_ARG, "kn_dp_new: the ring all-reduce is DDP's alternative (ZeRO reduce-scatters)");
    memset(d, 0, sizeof *d);
    d->comm = c;
    d->tr = tr;
    d->cfg = *cfg;
    /* the collectives are ops of the step's graph, placed by the strategy's pass (the
     * runner compiles the step with it: attach); the bucket size the pass is given as
     * text is the one the buckets here are made of */
    snprintf(d->pass, sizeof d->pass, "%s:%.9g", cfg->strategy == KN_DP_DDP ? "ddp" : cfg->strategy == KN_DP_ZERO3
             ? "zero3" : "zero", cfg->bucket_mb);
    d->cfg.bucket_mb = strtod(strchr(d->pass, ':') + 1, NULL);
    const kn_params *p = &tr->model->p;
    const kn_graph *g = kn_program_graph(tr->prog); /* node ids as the program runs them */
    int N = c->size;
    kn_status st = kn_dp_param_buckets(p, (size_t)(d->cfg.bucket_mb * 1048576.0), &d->buckets, &d->nbuckets);
    if (st != KN_OK) return st;
    d->param_bucket = kn_malloc((size_t)p->count * sizeof(int));
    d->reqs = kn_calloc((size_t)d->nbuckets, sizeof *d->reqs);
    d->in_flight = kn_calloc((size_t)d->nbuckets, sizeof *d->in_flight);
    d->staging = kn_calloc((size_t)d->nbuckets, sizeof *d->staging);
    d->shard_lo = kn_malloc((size_t)(N + 1) * sizeof(int64_t));
    if (!d->param_bucket || !d->reqs || !d->in_flight || !d->staging ||
        !d->shard_lo) {
        kn_dp_free(d);
        return kn_error(KN_ERR_OOM, "kn_dp_new: out of memory");
    }
    if (g->noutputs != 1 + p->count) {
        kn_dp_free(d);
        return kn_error(KN_ERR_INTERNAL, "kn_dp_new: the joint graph has %d outputs, expected the loss and %d "
                        "gradients", g->noutputs, p->count);
    }
    for (int b = 0; b < d->nbuckets; b++)
        for (int i = d->buckets[b].first_param; i <= d->buckets[b].last_param; i++) d->param_bucket[i] = b;
    st = kn_dp_shard_ranges(p->n, N, d->shard_lo);
    if (st == KN_OK && gpu) st = kn_device_alloc(tr->dev, sizeof(double), (void **)&d->dscalar);
    /* every rank starts from rank 0's parameters (on the trainer's device) */
    if (st == KN_OK) st = kn_comm_broadcast(c, kn_dp_slab_param(d), p->n, KN_DT_F32, 0);
    if (st == KN_OK && cfg->strategy != KN_DP_DDP) st = kn_dp_shard_new(d);
    if (st == KN_OK && cfg->compress) {
        d->err = kn_calloc((size_t)(p->n > 0 ? p->n : 1), sizeof(float));
        d->packed = kn_calloc((size_t)d->nbuckets, sizeof *d->packed);
        if (!d->err || !d->packed) st = kn_error(KN_ERR_OOM, "kn_dp_new: out of memory for the error feedback");
    }
    if (st == KN_OK && cfg->ring) {
        /* the ring's scratch: the largest chunk of the largest bucket */
        int64_t most = 1;
        for (int b = 0; b < d->nbuckets; b++)
            if ((d->buckets[b].hi - d->buckets[b].lo) / N + 1 > most) most = (d->buckets[b].hi - d->buckets[b].lo) / N + 1;
        d->ring_scratch = kn_malloc((size_t)most * sizeof(float));
        if (!d->ring_scratch) st = kn_error(KN_ERR_OOM, "kn_dp_new: out of memory for the ring's scratch");
    }
    /* KILN_DP_TIMELINE=FILE: rank 0 writes each step's times (the lesson's overlap plot) */
    const char *tl = getenv("KILN_DP_TIMELINE");
    if (st == KN_OK && tl && *tl && c->rank == 0) {
        d->t_launch = kn_calloc((size_t)d->nbuckets * 2, sizeof(double));
        d->timeline = fopen(tl, "w");
        if (!d->t_launch) st = kn_error(KN_ERR_OOM, "kn_dp_new: out of memory for the timeline");
        else if (!d->timeline) st = kn_error(KN_ERR_IO, "kn_dp_new: cannot write KILN_DP_TIMELINE=%s", tl);
        else
            fprintf(d->timeline, "# kn_dp timeline (%s, %d ranks, %d buckets), seconds from the step's start:\n"
                    "# step S backward_end comm_end step_end | bucket S B launch done bytes\n",
                    kn_dp_strategy_name(cfg->strategy), N, d->nbuckets);
    }
    /* ZeRO-3 last: it frees the model's slab, which everything above may read */
    if (st == KN_OK && cfg->strategy == KN_DP_ZERO3) st = kn_dp_z3_new(d);
    /* the collectives into the trainer's step: the runner compiles it with d->pass */
    if (st == KN_OK) st = attach(d);
    if (st != KN_OK) {
        kn_dp_free(d);
        return st;
    }
    return KN_OK;
}

/* ---------------------------------------------------------------- the step */

/* A blocking all-reduce of n doubles with a label for the timeout message (NCCL moves
 * device memory only: on a GPU the values go through d->dscalar, or for n > 1 a buffer
 * of their own). */
kn_status kn_dp_all_reduce_f64s(const kn_dp *d, double *v, int n, const char *what) {
    if (n < 1) return KN_OK;
    kn_comm_req r;
    bool gpu = kn_dp_on_gpu(d);
    size_t nb = (size_t)n * sizeof *v;
    double *buf = !gpu ? v : n == 1 ? d->dscalar : (double *)kn_dp_alloc(d, nb);
    if (!buf) return kn_error(KN_ERR_OOM, "kn_dp: out of device memory for the all-reduce of %s", what);
    kn_status st = gpu ? kn_device_memcpy(d->tr->dev, buf, KN_CPU, v, nb) : KN_OK;
    if (st == KN_OK) st = kn_comm_iall_reduce(d->comm, buf, buf, n, KN_DT_F64, what, &r);
    if (st == KN_OK) st = kn_comm_wait(&r);
    if (st == KN_OK && gpu) st = kn_device_memcpy(KN_CPU, v, d->tr->dev, buf, nb);
    if (gpu && n > 1) kn_dp_release(d, buf, nb);
    return st;
}
kn_status kn_dp_all_reduce_f64(const kn_dp *d, double *v, const char *what) { return kn_dp_all_reduce_f64s(d, v, 1, what); }


/* ---------------------------------------------------------------- the runner's hooks
 *
 * The step runner (kiln/step.h, core/nn/step.c) takes the step: the micro-batches, the
 * loss, the overflow decision with a loss scale. These hooks are what data parallelism
 * adds to it. */

static kn_status hook_micro_begin(void *ctx, int m, bool last) {
    kn_dp *d = ctx;
    d->micro = m;
    d->last_micro = last;
    d->ir_waits = 0;
    for (int b = 0; b < d->nbuckets; b++)
        d->buckets[b].pending = d->buckets[b].last_param - d->buckets[b].first_param + 1;
    return KN_OK;
}

/* After a micro-batch's run: ZeRO-3's gathers a failed run left in flight, then every
 * bucket of this micro-batch done before the next one reuses them. */
static kn_status hook_micro_end(void *ctx, int m, kn_status run) {
    kn_dp *d = ctx;
    kn_status zs = kn_dp_z3_end_run(d);
    KN_TRY(run);
    KN_TRY(zs);
    /* the backward's end: the IR's first gradient comm_wait (after every computing step) */
    if (m == d->cfg.accum - 1) d->t_backward_end = d->ir_waits ? d->t_ir_first_wait : kn_time_now();
    for (int b = 0; b < d->nbuckets; b++)
        if (d->in_flight[b]) {
            KN_TRY(kn_comm_wait(&d->reqs[b]));
            kn_dp_finished(d, b);
        }
    if (m == d->cfg.accum - 1) d->t_comm_end = kn_time_now();
    return KN_OK;
}

static kn_status hook_sum(void *ctx, double *v, const char *what) { return kn_dp_all_reduce_f64(ctx, v, what); }

/* The reduced gradients this rank keeps (DDP: the slab; ZeRO: the shard) scaled, the
 * global norm, the clip. */
static kn_status hook_clip(void *ctx, double scale, bool inject_inf, double *norm) {
    kn_dp *d = ctx;
    kn_trainer *t = d->tr;
    float *g = d->cfg.strategy == KN_DP_DDP ? kn_dp_slab_grad(d) : d->grad_shard;
    int64_t n = d->cfg.strategy == KN_DP_DDP ? t->model->p.n : kn_dp_my_len(d);
    if (inject_inf && n > 0) { /* the test hook: an overflow in this rank's first gradient */
        float inf = INFINITY;
        KN_TRY(kn_device_memcpy(t->dev, g, KN_CPU, &inf, sizeof inf));
    }
    if (d->cfg.strategy != KN_DP_DDP) return kn_dp_shard_clip(d, scale, norm);
    KN_TRY(kn_device_scale(t->dev, g, n, scale));
    return kn_device_clip_grad_norm(t->dev, g, n, t->clip, norm);
}

static kn_status hook_update(void *ctx, double lr) {
    kn_dp *d = ctx;
    kn_trainer *t = d->tr;
    if (d->cfg.strategy == KN_DP_DDP && t->optim_hook) /* ZeRO-Offload: the step on the host (offload.c) */
        KN_TRY(t->optim_hook(t->optim_hook_ctx, kn_dp_slab_param(d), kn_dp_slab_grad(d), lr));
    else if (d->cfg.strategy == KN_DP_DDP)
        KN_TRY(kn_device_optim_step(t->dev, &t->opt, kn_dp_slab_param(d), kn_dp_slab_grad(d), kn_dp_slab_state(d), lr));
    else
        KN_TRY(kn_dp_shard_update(d, lr));
    t->low_fresh = false; /* the low copies (if any) are rounded again before the next run */
    return KN_OK;
}

static kn_status attach(kn_dp *d) {
    kn_step_comm c = {.ctx = d, .rank = d->comm->rank, .ranks = d->comm->size, .pass = d->pass,
                      .coll = kn_dp_collectives(d), .compiled = kn_dp_step_compiled, .micro_begin = hook_micro_begin,
                      .micro_end = hook_micro_end, .sum = hook_sum, .clip = hook_clip, .update = hook_update};
    return kn_step_set_comm(d->tr, &c, d->cfg.accum);
}

/* ---------------------------------------------------------------- the step */

kn_status kn_dp_step(kn_dp *d, const int32_t *x, const int32_t *y, int global_batch, double lr, double *loss,
                     double *gnorm) {
    if (!d || !d->tr || !x || !y) return kn_error(KN_ERR_ARG, "kn_dp_step: NULL argument");
    kn_trainer *t = d->tr;
    int N = d->comm->size, K = d->cfg.accum;
    if ((int64_t)t->B * N * K != global_batch)
        return kn_error(KN_ERR_ARG, "kn_dp_step: global batch %d is not %d ranks x %d micro-batches x %d rows",
                        global_batch, N, K, t->B);
    if (!t->step.has_comm || t->step.comm.ctx != d)
        return kn_error(KN_ERR_ARG, "kn_dp_step: the trainer's step runner has another communication (a second kn_dp "
                        "on the same trainer?)");
    double t0 = kn_time_now();
    if (d->z3) KN_TRY(kn_dp_z3_begin_step(d));
    int64_t sent_before = d->bytes_sent;
    d->launched = 0;
    d->bytes_sent = 0;
    d->gathered_bytes = 0;
    d->stats.gather_s = d->stats.gather_wait_s = 0;
    d->stats.gathers = 0;
    d->t_first_launch = d->t_last_done = 0;
    KN_TRY(kn_step_run(t, x, y, global_batch, lr, loss, gnorm));
    double t1 = kn_time_now();
    /* a CUDA graph replayed the step: its collectives ran without the host's launch(), so
     * the payload is the captured run's (the same every step) */
    if (d->launched == 0 && t->cuda_graph) d->bytes_sent = sent_before;
    kn_device_mem_stats ms; /* what this rank keeps on its GPU between steps (kn_dp_memory.device) */
    if (kn_dp_on_gpu(d) && kn_device_mem_stats_get(t->dev, &ms) == KN_OK) d->device_held = (int64_t)ms.current;
    d->stats.step_s = t1 - t0;
    d->stats.backward_s = d->t_backward_end - t0;
    d->stats.comm_s = d->launched ? (d->t_last_done > d->t_first_launch ? d->t_last_done : d->t_comm_end) -
                                        d->t_first_launch : 0;
    d->stats.exposed_s = d->launched ? d->t_comm_end - d->t_backward_end : 0;
    if (d->timeline) {
        long long step = (long long)t->opt.step;
        fprintf(d->timeline, "step %lld %.6f %.6f %.6f\n", step, d->t_backward_end - t0, d->t_comm_end - t0, t1 - t0);
        for (int b = 0; b < d->nbuckets; b++)
            fprintf(d->timeline, "bucket %lld %d %.6f %.6f %lld\n", step, b, d->t_launch[b] - t0,
                    d->t_launch[d->nbuckets + b] - t0, (long long)(d->buckets[b].hi - d->buckets[b].lo) * 4);
        fflush(d->timeline);
    }
    return KN_OK;
}

/* ---------------------------------------------------------------- the schedule, printed */

kn_status kn_dp_schedule_print(FILE *f, const kn_dp *d) {
    if (!f || !d || !d->tr || !d->tr->prog) return kn_error(KN_ERR_ARG, "kn_dp_schedule_print: NULL argument");
    const kn_graph *g = kn_program_graph(d->tr->prog);
    const kn_params *p = &d->tr->model->p;
    size_t nn = (size_t)g->nnodes + 1;
    int32_t *last = kn_malloc(nn * sizeof *last), *root = kn_malloc(nn * sizeof *root), *waited_at = kn_calloc(nn, sizeof *waited_at);
    char *text = NULL;
    kn_status st = last && root && waited_at ? kn_graph_to_string(g, &text)
                                             : kn_error(KN_ERR_OOM, "kn_dp_schedule_print: out of memory");
    if (st != KN_OK) {
        kn_free(last);
        kn_free(root);
        kn_free(waited_at);
        return st;
    }
    /* a gathered buffer's last reader (through its views): where it is freed */
    for (int32_t i = 0; i < g->nnodes; i++) {
        const kn_node *n = &g->nodes[i];
        last[i] = -1;
        root[i] = n->nin == 1 && kn_ir_aliases(n, &g->nodes[n->in[0]].type) ? root[n->in[0]] : i;
        for (int k = 0; k < n->nin; k++) last[root[n->in[k]]] = i;
        if (n->op == KN_OP_COMM_WAIT && n->type.ndim == 1) waited_at[n->in[0]] = i; /* its phase is its wait's */
    }
    bool zero = d->cfg.strategy != KN_DP_DDP;
    const char *coll = zero ? "reduce_scatter" : d->cfg.ring ? "ring_all_reduce" : "all_reduce";
    fprintf(f, "# kiln train --dist %s: the step's graph of one rank (%d rows) after the pass %s, with its\n"
            "# collectives as ops. %d ranks, %d buckets: each gradient is stored into the slab (grad_store)\n"
            "# right after the node that makes it; a bucket's %s_start runs right after its last\n"
            "# store, nonblocking, while the nodes below it compute (%s);\n"
            "# the comm_waits end the graph, where the optimizer takes over. A comment names each bucket.\n",
            kn_dp_strategy_name(d->cfg.strategy), d->tr->B, d->pass, d->comm->size, d->nbuckets,
            zero ? "reduce_scatter" : "all_reduce", d->cfg.ring ? "kiln's ring: blocking, between two nodes"
            : "polled between the steps");
    if (d->z3)
        fprintf(f, "# ZeRO-3: the parameters are sharded; each bucket's all_gather_start fills a buffer that a\n"
                "# comm_wait gives back right before the bucket's first reader in the forward, and again in the\n"
                "# backward; the next bucket's gather starts right after each wait (the prefetch); the readers\n"
                "# read views of the buffer (slice, reshape), which is freed after its last reader.\n");
    for (char *line = text; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        int id = line[0] == '%' ? atoi(line + 1) : -1;
        fprintf(f, "%s\n", line);
        const kn_node *n = id >= 0 && id < g->nnodes ? &g->nodes[id] : NULL;
        int b = -1;
        for (int k = 0; n && k < d->nbuckets; k++)
            if (d->buckets[k].lo == n->attrs.start && d->buckets[k].hi == n->attrs.stop) b = k;
        const kn_dp_bucket *k = b >= 0 ? &d->buckets[b] : NULL;
        if (k && (n->op == KN_OP_ALL_REDUCE_START || n->op == KN_OP_REDUCE_SCATTER_START))
            fprintf(f, "#   ^ %s bucket %d: slab [%lld, %lld), %lld bytes, %s .. %s\n", coll, b, (long long)k->lo,
                    (long long)k->hi, (long long)((k->hi - k->lo) * 4), p->info[k->first_param].name,
                    p->info[k->last_param].name);
        if (k && n->op == KN_OP_ALL_GATHER_START)
            fprintf(f, "#   ^ all_gather bucket %d's parameters (%s): slab [%lld, %lld), %lld bytes, %s .. %s\n", b,
                    waited_at[id] > g->outputs[0] ? "backward" : "forward", (long long)k->lo, (long long)k->hi,
                    (long long)((k->hi - k->lo) * 4), p->info[k->first_param].name, p->info[k->last_param].name);
        if (k && n->op == KN_OP_COMM_WAIT && n->type.ndim == 1)
            fprintf(f, "#   ^ wait for bucket %d's parameters; freed after %%%d, their last reader\n", b, last[root[id]]);
        line = nl ? nl + 1 : NULL;
    }
    fprintf(f, "# after the graph: loss all_reduce (8 bytes);\n");
    if (d->z3)
        fprintf(f, "# gradient-norm all_reduce (8 bytes); clip and update this rank's shard (parameters, gradients\n"
                "# and optimizer state sharded); no all_gather after the update: the next forward gathers\n"
                "# each bucket when it needs it (%lld bytes per micro-batch, forward and backward)\n",
                (long long)kn_dp_z3_bytes_per_run(d));
    else if (zero)
        fprintf(f, "# gradient-norm all_reduce (8 bytes); clip and update this rank's shard (%s);\n"
                "# all_gather of the parameters (%lld bytes)\n",
                d->cfg.strategy == KN_DP_ZERO2 ? "gradients and optimizer state sharded" : "optimizer state sharded",
                (long long)(p->n * 4));
    else
        fprintf(f, "# clip by the global norm and update the whole slab (every rank the same)\n");
    kn_free(text);
    kn_free(last);
    kn_free(root);
    kn_free(waited_at);
    return KN_OK;
}
