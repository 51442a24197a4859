/* zero3.c — ZeRO-3 / FSDP: the parameters sharded like the optimizer state, and gathered a
 * bucket at a time for the steps that read them (kiln/dist.h; dp.c runs the rest of the
 * step as for ZeRO-2: gradients reduce-scattered into the shard, the optimizer on the shard).
 *
 * Each rank keeps 1/N of the parameter slab (param_shard), and the optimizer updates only
 * that. No rank holds the whole model between steps: the model's slab is freed, and the
 * trainer's step program has no params at all: it is compiled with the `zero3` pass
 * (core/passes/ddp.c), which replaces them by views into gathered buckets:
 *
 *   %b = all_gather_start %t {start, stop}   this file starts the bucket's all_gather from
 *                                            every rank's shard into %b (the program's
 *                                            buffer: its arena slot, compiled, or a tensor)
 *   %p = comm_wait %b {start, stop}          this file waits for it; %p is %b, complete
 *   %w = reshape (slice %p {...})            a parameter, read by the nodes after
 *
 * The pass puts a bucket's wait right before its first reader in the forward, and again in
 * the backward (FSDP "reshards" after the forward), and the next bucket's start right after
 * each wait: the prefetch, which runs while the steps up to that bucket's first reader
 * compute (the program polls this context between steps: MPI moves data inside MPI_Test).
 * The buffer is a value of the graph: it lives until its last reader, then a node-by-node
 * program frees it and a compiled one's memory plan gives its bytes to later values. Every
 * rank runs the same program and so starts the gathers in the same order, which MPI's
 * nonblocking collectives require. `kiln train --dist zero3 --emit-ir` prints the graph.
 *
 * Traffic per micro-batch: P gathered for the forward, P for the backward, P of gradients
 * reduce-scattered: 3P against DDP's 2P, the price of holding 16P/N bytes.
 *
 * Between steps, kn_dp_gather_state can bring the whole slab back (evaluation, sampling,
 * a checkpoint); the next step frees it again. The shard is what trains. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_impl.h"

struct kn_dp_z3 {
    kn_comm_req *req;   /* per bucket: its gather in flight */
    kn_tensor **buf;    /* per bucket: the buffer it fills (held from the start to the wait) */
    bool *in_flight;    /* per bucket: started and not yet waited for */
    bool *done;         /* ... and seen finished by a poll */
    double *t_start;
    int64_t bytes_per_run; /* the step graph's gathers, summed */
};

/* Start bucket b's all_gather into out: every rank sends its part, all receive it whole. */
kn_status kn_dp_z3_start(kn_dp *d, int b, const kn_tensor *out) {
    kn_dp_z3 *z = d->z3;
    const kn_dp_bucket *k = &d->buckets[b];
    int64_t counts[1024], a = k->lo > kn_dp_my_lo(d) ? k->lo : kn_dp_my_lo(d);
    if (!z) return kn_error(KN_ERR_ARG, "kn_dp_step: all_gather_start: parameters are gathered under --dist zero3 only");
    if (z->in_flight[b])
        return kn_error(KN_ERR_ARG, "kn_dp_step: all_gather_start: bucket %d's parameters are already in flight", b);
    if (d->comm->size > 1024) return kn_error(KN_ERR_ARG, "kn_dp: more than 1024 ranks");
    kn_dp_shard_counts(d, k->lo, k->hi, counts);
    char what[48];
    snprintf(what, sizeof what, "parameters of bucket %d", b);
    const float *mine = d->param_shard + (counts[d->comm->rank] > 0 ? a - kn_dp_my_lo(d) : 0);
    KN_TRY(kn_tensor_alias(&z->buf[b], out));
    z->t_start[b] = kn_time_now();
    kn_status st = kn_comm_iall_gather(d->comm, mine, kn_tensor_data(z->buf[b]), counts, KN_DT_F32, what, &z->req[b]);
    if (st != KN_OK) {
        kn_tensor_free(z->buf[b]);
        z->buf[b] = NULL;
        return st;
    }
    z->in_flight[b] = true;
    d->gathered_bytes += (k->hi - k->lo) * (int64_t)sizeof(float);
    d->stats.gathers++;
    return KN_OK;
}

/* Bucket b's gather seen finished (its time in flight counted once). */
static void gathered(kn_dp *d, int b) {
    kn_dp_z3 *z = d->z3;
    if (!z->done[b]) d->stats.gather_s += kn_time_now() - z->t_start[b];
    z->done[b] = true;
}

/* ... and waited for: the buffer is the program's again. */
static void waited(kn_dp *d, int b) {
    kn_dp_z3 *z = d->z3;
    gathered(d, b);
    z->in_flight[b] = z->done[b] = false;
    kn_tensor_free(z->buf[b]);
    z->buf[b] = NULL;
}

kn_status kn_dp_z3_wait(kn_dp *d, int b) {
    if (!d->z3 || !d->z3->in_flight[b])
        return kn_error(KN_ERR_ARG, "kn_dp_step: comm_wait: bucket %d's parameters were not being gathered", b);
    if (d->z3->done[b]) {
        waited(d, b);
        return KN_OK;
    }
    double t0 = kn_time_now();
    kn_status st = kn_comm_wait(&d->z3->req[b]);
    d->stats.gather_wait_s += kn_time_now() - t0;
    waited(d, b);
    return st;
}

kn_status kn_dp_z3_poll(kn_dp *d) {
    for (int b = 0; d->z3 && b < d->nbuckets; b++) {
        if (!d->z3->in_flight[b] || d->z3->done[b]) continue;
        bool done = false;
        KN_TRY(kn_comm_test(&d->z3->req[b], &done));
        if (done) gathered(d, b);
    }
    return KN_OK;
}

kn_status kn_dp_z3_end_run(kn_dp *d) {
    kn_status st = KN_OK;
    for (int b = 0; d->z3 && b < d->nbuckets; b++) {
        if (!d->z3->in_flight[b]) continue;
        /* a gather in flight (a failed run) must finish before its buffer goes */
        kn_status ws = d->z3->done[b] ? KN_OK : kn_comm_wait(&d->z3->req[b]);
        if (st == KN_OK) st = ws;
        waited(d, b);
    }
    return st;
}

/* The evaluation program's parameters deferred, and the parameter slab freed: between steps
 * this rank holds its shard only. On a GPU the trainer's device copy (params, views) goes
 * and so does the model's host slab (kn_trainer_sync_host fills it again after
 * kn_dp_z3_gather_params); on the CPU the trainer borrows the model's, which goes. */
static kn_status drop_slab(kn_dp *d) {
    kn_trainer *tr = d->tr;
    kn_params *p = &tr->model->p;
    for (int i = 0; i < p->count; i++) KN_TRY(kn_program_defer(tr->eval, p->info[i].name));
    if (kn_dp_on_gpu(d)) {
        kn_params_views_free(p, tr->views);
        kn_tensor_free(tr->params);
    }
    kn_params_views_free(p, p->views);
    kn_tensor_free(p->slab);
    p->views = NULL;
    p->slab = NULL;
    p->data = NULL;
    tr->params = NULL;
    tr->views = NULL;
    return KN_OK;
}

kn_status kn_dp_z3_new(kn_dp *d) {
    kn_trainer *tr = d->tr;
    int64_t len = kn_dp_my_len(d);
    size_t nb = (size_t)(d->nbuckets > 0 ? d->nbuckets : 1);
    kn_dp_z3 *z = d->z3 = kn_calloc(1, sizeof *d->z3);
    if (z) {
        z->req = kn_calloc(nb, sizeof *z->req);
        z->buf = kn_calloc(nb, sizeof *z->buf);
        z->in_flight = kn_calloc(nb, sizeof *z->in_flight);
        z->done = kn_calloc(nb, sizeof *z->done);
        z->t_start = kn_calloc(nb, sizeof *z->t_start);
    }
    /* the shard where the step runs (host memory, or the rank's GPU), from the trainer's slab
     * (the model's on the CPU, its device copy on a GPU) */
    d->param_shard = kn_dp_alloc(d, (size_t)len * sizeof(float));
    if (!z || !z->req || !z->buf || !z->in_flight || !z->done || !z->t_start || !d->param_shard)
        return kn_error(KN_ERR_OOM, "kn_dp_new: out of memory for the parameters' shard (%lld bytes)",
                        (long long)len * (long long)sizeof(float));
    KN_TRY(kn_device_memcpy(tr->dev, d->param_shard, tr->dev, kn_dp_slab_param(d) + kn_dp_my_lo(d),
                            (size_t)len * sizeof(float)));
    return drop_slab(d);
}

/* What the step graph gathers: the bytes per run, and the most bytes of gathered buffers
 * live at once in node order (a buffer lives from its start to the last node reading it or
 * a view of it: the wait, the slices, the reshapes). */
kn_status kn_dp_z3_plan(kn_dp *d) {
    const kn_graph *g = kn_program_graph(d->tr->prog);
    int32_t *root = kn_malloc((size_t)(g->nnodes + 1) * sizeof *root), *last = kn_malloc((size_t)(g->nnodes + 1) * sizeof *last);
    if (!root || !last) {
        kn_free(root);
        kn_free(last);
        return kn_error(KN_ERR_OOM, "kn_dp_new: out of memory");
    }
    d->z3->bytes_per_run = 0;
    for (int32_t i = 0; i < g->nnodes; i++) {
        const kn_node *n = &g->nodes[i];
        last[i] = -1;
        root[i] = n->nin == 1 && kn_ir_aliases(n, &g->nodes[n->in[0]].type) ? root[n->in[0]] : i;
        for (int k = 0; k < n->nin; k++) last[root[n->in[k]]] = i;
        if (n->op == KN_OP_ALL_GATHER_START) d->z3->bytes_per_run += kn_type_numel(&n->type) * (int64_t)sizeof(float);
    }
    int64_t live = 0;
    d->gathered_peak = 0;
    for (int32_t i = 0; i < g->nnodes; i++) {
        if (g->nodes[i].op == KN_OP_ALL_GATHER_START) live += kn_type_numel(&g->nodes[i].type) * (int64_t)sizeof(float);
        if (live > d->gathered_peak) d->gathered_peak = live;
        for (int32_t v = 0; v <= i; v++) /* the buffers whose last reader this is */
            if (last[v] == i && g->nodes[v].op == KN_OP_ALL_GATHER_START) live -= kn_type_numel(&g->nodes[v].type) * (int64_t)sizeof(float);
    }
    kn_free(root);
    kn_free(last);
    return KN_OK;
}

kn_status kn_dp_z3_begin_step(kn_dp *d) { return d->tr->params ? drop_slab(d) : KN_OK; }

kn_status kn_dp_z3_gather_params(kn_dp *d) {
    kn_trainer *tr = d->tr;
    kn_params *p = &tr->model->p;
    if (tr->params) return KN_OK;
    int64_t counts[1024], n = p->n;
    int N = d->comm->size;
    if (N > 1024) return kn_error(KN_ERR_ARG, "kn_dp: more than 1024 ranks");
    for (int r = 0; r < N; r++) counts[r] = d->shard_lo[r + 1] - d->shard_lo[r];
    /* the model's host slab (on a GPU filled by kn_trainer_sync_host), and the trainer's:
     * the same one on the CPU, a device copy on a GPU; the shards are gathered into the
     * trainer's, where they live */
    kn_status st = kn_tensor_empty(&p->slab, KN_DT_F32, 1, &n);
    if (st == KN_OK) {
        p->data = kn_tensor_data(p->slab);
        st = kn_params_views(p, p->slab, &p->views);
    }
    if (st == KN_OK && kn_dp_on_gpu(d)) {
        st = kn_tensor_empty_on(&tr->params, tr->dev, KN_DT_F32, 1, &n);
        if (st == KN_OK) st = kn_params_views(p, tr->params, &tr->views);
    } else if (st == KN_OK) {
        tr->params = p->slab;
        tr->views = p->views;
    }
    if (st == KN_OK) st = kn_comm_all_gather(d->comm, d->param_shard, kn_tensor_data(tr->params), counts, KN_DT_F32);
    for (int i = 0; st == KN_OK && i < p->count; i++) st = kn_program_bind(tr->eval, p->info[i].name, tr->views[i]);
    if (st != KN_OK) {
        (void)drop_slab(d);
        return st;
    }
    return KN_OK;
}

void kn_dp_z3_free(kn_dp *d) {
    if (d->z3) {
        (void)kn_dp_z3_end_run(d);
        /* a gathered slab: the evaluation program reads it; else it says what is missing */
        const kn_params *p = &d->tr->model->p;
        for (int i = 0; d->tr->params && i < p->count; i++)
            (void)kn_program_bind(d->tr->eval, p->info[i].name, d->tr->views[i]);
        kn_free(d->z3->req);
        kn_free(d->z3->buf);
        kn_free(d->z3->in_flight);
        kn_free(d->z3->done);
        kn_free(d->z3->t_start);
        kn_free(d->z3);
        d->z3 = NULL;
    }
    if (d->param_shard) kn_dp_release(d, d->param_shard, (size_t)kn_dp_my_len(d) * sizeof(float));
    d->param_shard = NULL;
}

int64_t kn_dp_z3_bytes_per_run(const kn_dp *d) { return d->z3 ? d->z3->bytes_per_run : 0; }
