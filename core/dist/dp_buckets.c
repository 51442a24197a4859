/* dp_buckets.c — the gradients' way to the other ranks, bucket by bucket (kiln/dist.h).
 *
 * A bucket (lab 10's kn_dp_buckets over the slab's layout: kn_dp_param_buckets) is a
 * contiguous slab range of whole parameters. Each
 * gradient is stored where the strategy keeps it (the slab, or ZeRO-2's staging buffer of
 * its bucket); when a bucket's last gradient is in, its collective starts, nonblocking:
 * DDP all-reduces it (or runs kiln's ring, or all-gathers int8 codes), ZeRO reduce-scatters
 * it over the ranks' shards; requests in flight are polled between the steps of the
 * program (MPI progresses inside MPI_Test) and finished when waited for.
 *
 * The driver is the step's graph: the step runner (core/nn/step.c) compiles the step
 * program with the `ddp`, `zero` or `zero3` pass (core/passes/ddp.c), whose grad_store, all_reduce_start /
 * reduce_scatter_start and comm_wait nodes (and ZeRO-3's all_gather_start, zero3.c) the
 * program hands to this file's kn_collectives context, on CPU ranks (MPI) and GPU ranks
 * (NCCL) alike. Where each collective runs is then the schedule's doing, printed by kiln
 * compile --emit-ir --dist and kiln train --dist --emit-ir.
 *
 * Compression (--compress int8, DDP on CPU ranks): each bucket travels as one signed byte
 * per gradient plus a float scale per 256 of them, instead of four bytes. A rank adds its
 * error feedback (what quantization lost last time) to the bucket, scales each block of
 * 256 so its largest magnitude is 127, rounds, keeps the new error, and all-gathers
 * (scales, codes) from every rank; each rank then sums scale_r x code_r over the ranks in
 * rank order, so every rank gets the same floats. Sums of int8 codes would overflow, hence
 * an all-gather, which moves about N m bytes per rank against the ring all-reduce's
 * 2 (N-1)/N 4m: 4x less on 2 ranks, and it stops paying from about 8 ranks (top-k or a
 * reduce-scatter of codes would scale). Error feedback makes the rounding errors cancel
 * over steps instead of adding up (1-bit SGD, Seide et al. 2014; EF-SGD, Karimireddy et
 * al. 2019). */
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "dp_impl.h"
#include "kiln/step.h"

/* Bytes of bucket b's ZeRO-2 staging buffer: its gradients, then the part this rank owns. */
size_t kn_dp_staging_size(const kn_dp *d, int b) {
    const kn_dp_bucket *k = &d->buckets[b];
    int64_t a = k->lo > kn_dp_my_lo(d) ? k->lo : kn_dp_my_lo(d), e = k->hi < kn_dp_my_lo(d) + kn_dp_my_len(d) ? k->hi : kn_dp_my_lo(d) + kn_dp_my_len(d);
    return (size_t)((k->hi - k->lo) + (e > a ? e - a : 0)) * sizeof(float);
}

/* dst[0..n) = src (first micro-batch) or += src (the later ones: accumulation), where the
 * step runs (kn_step_add: the add kernel of the trainer's device, the same sums on CPU
 * and GPU ranks). On a GPU the copy and the add are queued on the compute stream, behind
 * the kernel that made src; the bucket's NCCL operation waits for them (comm_nccl.c). */
static kn_status store(const kn_dp *d, float *dst, const float *src, int64_t n, bool add) {
    if (add) return kn_step_add(d->tr->dev, dst, dst, src, n);
#if KN_HAVE_CUDA
    /* queued on the compute stream, so a CUDA graph captures it (a synchronous copy would
     * run once, at capture, and every replay would all-reduce that step's gradients) */
    if (kn_dp_on_gpu(d)) return kn_cuda_copy_async(dst, src, (size_t)n * sizeof(float));
#endif
    return kn_device_memcpy(d->tr->dev, dst, d->tr->dev, src, (size_t)n * sizeof(float));
}

/* --compress int8: one scale per KN_DP_QBLOCK gradients (a bucket mixes parameters whose
 * gradients differ by orders of magnitude; one scale per bucket would round the small
 * ones to zero). A rank's block of `packed`: the scales, then one signed byte a gradient. */
#define KN_DP_QBLOCK 256
static int64_t qblocks(int64_t m) { return (m + KN_DP_QBLOCK - 1) / KN_DP_QBLOCK; }
static int64_t packed_size(int64_t m) { return qblocks(m) * (int64_t)sizeof(float) + m; }

/* Bucket b's gradients g (m of them, slab offset lo) plus the error feedback, encoded into
 * this rank's block; the new error kept. */
static void int8_encode(kn_dp *d, const float *g, int64_t lo, int64_t m, uint8_t *block) {
    float *e = d->err + lo;
    int8_t *q = (int8_t *)(block + qblocks(m) * (int64_t)sizeof(float));
    for (int64_t c = 0; c < qblocks(m); c++) {
        int64_t a = c * KN_DP_QBLOCK, z = a + KN_DP_QBLOCK < m ? a + KN_DP_QBLOCK : m;
        float amax = 0;
        for (int64_t i = a; i < z; i++) {
            float v = fabsf(g[i] + e[i]);
            if (v > amax) amax = v;
        }
        float s = amax > 0 ? amax / 127.0f : 1.0f;
        memcpy(block + c * (int64_t)sizeof(float), &s, sizeof s);
        for (int64_t i = a; i < z; i++) {
            float v = g[i] + e[i];
            long k = lrintf(v / s);
            k = k > 127 ? 127 : k < -127 ? -127 : k;
            q[i] = (int8_t)k;
            e[i] = v - (float)k * s;
        }
    }
}

/* Every rank's blocks back into the bucket: g[i] = sum over ranks (in rank order) of
 * scale_r x code_r[i], the same floats on every rank. */
static void int8_decode(const kn_dp *d, const uint8_t *packed, int64_t m, float *g) {
    int64_t size = packed_size(m), nq = qblocks(m) * (int64_t)sizeof(float);
    for (int64_t i = 0; i < m; i++) {
        double acc = 0;
        for (int r = 0; r < d->comm->size; r++) {
            const uint8_t *blk = packed + r * size;
            float s;
            memcpy(&s, blk + (i / KN_DP_QBLOCK) * (int64_t)sizeof(float), sizeof s);
            acc += (double)s * (double)((const int8_t *)(blk + nq))[i];
        }
        g[i] = (float)acc;
    }
}

/* Start bucket b's collective. */
static kn_status launch(kn_dp *d, int b) {
    kn_dp_bucket *k = &d->buckets[b];
    int64_t counts[1024];
    char what[48];
    snprintf(what, sizeof what, "bucket %d of %d", b, d->nbuckets);
    if (d->launched++ == 0) d->t_first_launch = kn_time_now();
    if (d->t_launch) d->t_launch[b] = kn_time_now();
    if (d->cfg.strategy == KN_DP_DDP) {
        float *g = kn_dp_slab_grad(d) + k->lo;
        if (d->cfg.ring) {
            /* kiln's ring is blocking: it runs here, between two nodes of the backward; its
             * payload counts in "gradients sent" as the library all-reduce's does */
            d->bytes_sent += (k->hi - k->lo) * (int64_t)sizeof(float);
            kn_status st = kn_ring_all_reduce(d->comm, g, k->hi - k->lo, KN_DT_F32, d->ring_scratch);
            d->t_last_done = kn_time_now();
            if (d->t_launch) d->t_launch[d->nbuckets + b] = d->t_last_done;
            return st;
        }
        if (d->cfg.compress) {
            int64_t m = k->hi - k->lo, block = packed_size(m), counts[1024];
            if (d->comm->size > 1024) return kn_error(KN_ERR_ARG, "kn_dp: more than 1024 ranks");
            d->packed[b] = kn_malloc((size_t)(block * d->comm->size));
            if (!d->packed[b]) return kn_error(KN_ERR_OOM, "kn_dp_step: out of memory for bucket %d's codes", b);
            uint8_t *mine = d->packed[b] + (size_t)(block * d->comm->rank);
            int8_encode(d, g, k->lo, m, mine);
            for (int r = 0; r < d->comm->size; r++) counts[r] = block;
            d->bytes_sent += block;
            KN_TRY(kn_comm_iall_gather(d->comm, mine, d->packed[b], counts, KN_DT_U8, what, &d->reqs[b]));
        } else {
            d->bytes_sent += (k->hi - k->lo) * (int64_t)sizeof(float);
            KN_TRY(kn_comm_iall_reduce(d->comm, g, g, k->hi - k->lo, KN_DT_F32, what, &d->reqs[b]));
        }
    } else {
        if (d->comm->size > 1024) return kn_error(KN_ERR_ARG, "kn_dp: more than 1024 ranks");
        kn_dp_shard_counts(d, k->lo, k->hi, counts);
        int64_t a = k->lo > kn_dp_my_lo(d) ? k->lo : kn_dp_my_lo(d);
        const float *src = d->cfg.strategy == KN_DP_ZERO1 ? kn_dp_slab_grad(d) + k->lo : d->staging[b];
        /* ZeRO-1 receives straight into its shard; ZeRO-2 behind the bucket in its staging
         * buffer (added into the shard when done, for accumulation) */
        float *dst = d->cfg.strategy == KN_DP_ZERO1 ? d->grad_shard + (a - kn_dp_my_lo(d)) : d->staging[b] + (k->hi - k->lo);
        d->bytes_sent += (k->hi - k->lo) * (int64_t)sizeof(float);
        KN_TRY(kn_comm_ireduce_scatter(d->comm, src, dst, counts, KN_DT_F32, what, &d->reqs[b]));
    }
    d->in_flight[b] = true;
    return KN_OK;
}

/* Bucket b finished: ZeRO-2 moves its part into the shard and frees the staging buffer. */
void kn_dp_finished(kn_dp *d, int b) {
    d->in_flight[b] = false;
    d->t_last_done = kn_time_now();
    if (d->t_launch) d->t_launch[d->nbuckets + b] = d->t_last_done;
    if (d->cfg.compress && d->packed[b]) {
        kn_dp_bucket *k = &d->buckets[b];
        int8_decode(d, d->packed[b], k->hi - k->lo, kn_dp_slab_grad(d) + k->lo);
        kn_free(d->packed[b]);
        d->packed[b] = NULL;
    }
    if (d->cfg.strategy < KN_DP_ZERO2) return;
    kn_dp_bucket *k = &d->buckets[b];
    int64_t a = k->lo > kn_dp_my_lo(d) ? k->lo : kn_dp_my_lo(d), e = k->hi < kn_dp_my_lo(d) + kn_dp_my_len(d) ? k->hi : kn_dp_my_lo(d) + kn_dp_my_len(d);
    if (e > a) (void)store(d, d->grad_shard + (a - kn_dp_my_lo(d)), d->staging[b] + (k->hi - k->lo), e - a, d->micro > 0);
    kn_dp_release(d, d->staging[b], kn_dp_staging_size(d, b));
    d->staging[b] = NULL;
    d->staging_bytes -= (int64_t)kn_dp_staging_size(d, b);
}

static kn_status poll_all(kn_dp *d) {
    for (int b = 0; b < d->nbuckets; b++) {
        if (!d->in_flight[b]) continue;
        bool done = false;
        KN_TRY(kn_comm_test(&d->reqs[b], &done));
        if (done) kn_dp_finished(d, b);
    }
    return kn_dp_z3_poll(d);
}

/* A gradient of bucket b (n floats for slab offset off) where the strategy keeps it: ZeRO-2
 * in the bucket's staging buffer (made at its first gradient), the others in the slab
 * (added to after the first micro-batch). */
static kn_status store_grad(kn_dp *d, int b, int64_t off, const float *src, int64_t n) {
    kn_dp_bucket *k = &d->buckets[b];
    if (d->cfg.strategy < KN_DP_ZERO2) return store(d, kn_dp_slab_grad(d) + off, src, n, d->micro > 0);
    if (!d->staging[b]) {
        size_t nb = kn_dp_staging_size(d, b);
        d->staging[b] = kn_dp_alloc(d, nb);
        if (!d->staging[b]) return kn_error(KN_ERR_OOM, "kn_dp_step: out of memory for bucket %d", b);
        d->staging_bytes += (int64_t)nb;
        if (d->staging_bytes > d->staging_peak) d->staging_peak = d->staging_bytes;
    }
    return store(d, d->staging[b] + (off - k->lo), src, n, false);
}

/* ---------------------------------------------------------------- the collectives in the graph
 *
 * A store goes where the strategy keeps the gradient (the slab, added to after the first
 * micro-batch, or ZeRO-2/3's staging buffer); a start launches the bucket (only in the last
 * micro-batch, except ZeRO-2/3, which communicate in every one); a wait waits for it. On a
 * GPU the store is a copy queued on the compute stream and the bucket's NCCL operation
 * waits for it (comm_nccl.c): no gradient crosses to the host. The first gradient wait of
 * a run is where the backward ends: the overlap figure comes from there. */

/* The bucket holding slab offset off (buckets are sorted and contiguous), or -1. */
static int bucket_at(const kn_dp *d, int64_t off) {
    int lo = 0, hi = d->nbuckets - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (off < d->buckets[mid].lo) hi = mid - 1;
        else if (off >= d->buckets[mid].hi) lo = mid + 1;
        else return mid;
    }
    return -1;
}

/* The bucket whose range a start or wait names, or an error naming the node. */
static kn_status bucket_of_node(const kn_dp *d, int32_t id, const kn_node *n, int *b) {
    *b = bucket_at(d, n->attrs.start);
    if (*b < 0 || d->buckets[*b].lo != n->attrs.start || d->buckets[*b].hi != n->attrs.stop)
        return kn_error(KN_ERR_ARG, "kn_dp_step: %%%d = %s: slab range [%lld, %lld) is not one of the %d buckets (the "
                        "graph's pass and kn_dp disagree on the bucket size)", id, kn_op_name(n->op),
                        (long long)n->attrs.start, (long long)n->attrs.stop, d->nbuckets);
    return KN_OK;
}

static kn_status ir_run(void *ctx, int32_t id, const kn_node *n, const kn_tensor *const *in, kn_tensor *out) {
    kn_dp *d = ctx;
    bool comm_now = d->last_micro || d->cfg.strategy >= KN_DP_ZERO2;
    int b;
    if (n->op == KN_OP_GRAD_STORE) {
        int64_t m = kn_tensor_numel(in[0]), off = n->attrs.offset;
        b = bucket_at(d, off);
        if (b < 0 || off + m > d->buckets[b].hi)
            return kn_error(KN_ERR_ARG, "kn_dp_step: %%%d = grad_store: [%lld, %lld) is not inside one bucket", id,
                            (long long)off, (long long)(off + m));
        return store_grad(d, b, off, kn_tensor_data(in[0]), m);
    }
    KN_TRY(bucket_of_node(d, id, n, &b));
    if (n->op == KN_OP_ALL_GATHER_START) return kn_dp_z3_start(d, b, out);
    if (n->op == KN_OP_COMM_WAIT && in[0]->ndim == 1) return kn_dp_z3_wait(d, b); /* a gather's */
    if (n->op == KN_OP_COMM_WAIT) {
        if (d->ir_waits++ == 0) d->t_ir_first_wait = kn_time_now(); /* the backward's end, as placed */
        if (!d->in_flight[b]) return KN_OK; /* a micro-batch that does not communicate */
        /* NCCL: the compute stream waits for the bucket, the host queues on (the optimizer
         * and ZeRO-2's move into the shard read it in stream order); MPI: the host waits */
        KN_TRY(kn_comm_wait_device(&d->reqs[b]));
        kn_dp_finished(d, b);
        return KN_OK;
    }
    kn_op want = d->cfg.strategy == KN_DP_DDP ? KN_OP_ALL_REDUCE_START : KN_OP_REDUCE_SCATTER_START;
    if (n->op != want)
        return kn_error(KN_ERR_ARG, "kn_dp_step: %%%d = %s: --dist %s runs %s", id, kn_op_name(n->op),
                        kn_dp_strategy_name(d->cfg.strategy), kn_op_name(want));
    return comm_now ? launch(d, b) : KN_OK;
}

static kn_status ir_poll(void *ctx) {
    kn_dp *d = ctx;
    if (d->comm->npending) KN_TRY(kn_comm_reap(d->comm));
    return poll_all(d);
}

/* The run's end: the host sees the buckets the GPU waited for end, under the deadline; on
 * a GPU also the compute stream's end (a fence), which after a CUDA graph's launch is the
 * only way a stalled peer is still reported instead of hanging the next copy. */
static kn_status ir_finish(void *ctx) {
    kn_dp *d = ctx;
    KN_TRY(kn_comm_drain(d->comm));
    if (!kn_dp_on_gpu(d)) return KN_OK;
    kn_comm_req r;
    KN_TRY(kn_comm_ifence(d->comm, "the step's end", &r));
    return kn_comm_wait(&r);
}

/* A CUDA graph can hold the step's collectives where each is device-ordered and the same in
 * every run: NCCL, one micro-batch, the library's collectives (not the ring, not int8
 * codes), DDP or ZeRO-1 (ZeRO-2 makes its staging buffers during the run, ZeRO-3 gathers the
 * parameters). */
static bool graphable(const kn_dp *d) {
    return kn_dp_on_gpu(d) && d->comm->be->device_wait && d->cfg.accum == 1 &&
           !d->cfg.ring && !d->cfg.compress && d->cfg.strategy <= KN_DP_ZERO1;
}

kn_collectives kn_dp_collectives(kn_dp *d) {
    return (kn_collectives){.ctx = d, .run = ir_run, .poll = ir_poll, .finish = ir_finish, .graph = graphable(d)};
}

/* The step runner compiled the trainer's step with the strategy's pass: check that the
 * graph's buckets are d's (ZeRO-3: and read what it gathers). */
kn_status kn_dp_step_compiled(void *ctx, kn_program *p) {
    kn_dp *d = ctx;
    const kn_graph *g = kn_program_graph(p);
    int starts = 0;
    for (int i = 0; i < g->nnodes; i++) {
        int b;
        if (g->nodes[i].op != KN_OP_ALL_REDUCE_START && g->nodes[i].op != KN_OP_REDUCE_SCATTER_START) continue;
        KN_TRY(bucket_of_node(d, i, &g->nodes[i], &b));
        starts++;
    }
    if (starts != d->nbuckets)
        return kn_error(KN_ERR_INTERNAL, "kn_dp_new: the step's graph starts %d buckets, kn_dp has %d", starts, d->nbuckets);
    return d->z3 ? kn_dp_z3_plan(d) : KN_OK;
}
