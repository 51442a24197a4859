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
 * Overlap: the trainer's program calls a hook after every node (kn_program_set_hook). When the
 * node is a parameter's gradient, the hook stores it; when it is the last missing gradient
 * of a bucket, the hook starts the bucket's nonblocking collective at once, and every
 * later node polls the requests in flight (MPI progresses inside MPI_Test), so
 * communication runs while the rest of the backward computes.
 *
 * Buckets are contiguous ranges of whole parameters of the slab, formed from the last
 * parameter backwards, as PyTorch's DDP forms them in reverse registration order: roughly
 * the order in which backward produces gradients (the output layers first). A bucket
 * starts when its last gradient exists, whatever the order.
 *
 * Compression (--compress int8, DDP on CPU ranks): each bucket travels as one signed byte
 * per gradient plus a float scale per 256 of them, instead of four bytes. A rank adds its
 * error feedback (what quantization lost last time) to the bucket, scales each block of
 * 256 so its largest magnitude is 127, rounds, keeps the new error, and all-gathers
 * (scales, codes) from every rank; each
 * rank then sums scale_r x code_r over the ranks in rank order, so every rank gets the same
 * floats. Sums of int8 codes would overflow, hence an all-gather, which moves about N m
 * bytes per rank against the ring all-reduce's 2 (N-1)/N 4m: 4x less on 2 ranks, and it
 * stops paying from about 8 ranks (top-k or a reduce-scatter of codes would scale).
 * Error feedback makes the rounding errors cancel over steps instead of adding up
 * (1-bit SGD, Seide et al. 2014; EF-SGD, Karimireddy et al. 2019).
 *
 * Gradient accumulation: with K micro-batches, DDP and ZeRO-1 add the micro-batches'
 * gradients locally and communicate in the last one only; ZeRO-2 and ZeRO-3 have no full
 * gradient slab to add into (keeping one would cost the 4P bytes they save), so they
 * reduce-scatter every micro-batch and add into the shard (DeepSpeed does the same, and
 * FSDP's no_sync() keeps full gradients instead). ZeRO-3 also gathers the parameters anew
 * for every micro-batch: 3P of traffic per micro-batch. Either way the result is (sum over
 * ranks and micro-batches) / (N K): the gradient of the global batch's mean loss. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_impl.h"

static const char *const kn_dp_names[KN_DP_COUNT] = {"ddp", "zero1", "zero2", "zero3"};

kn_status kn_dp_strategy_parse(const char *s, kn_dp_strategy *out) {
    if (!s || !out) return kn_error(KN_ERR_ARG, "kn_dp_strategy_parse: NULL argument");
    for (int i = 0; i < KN_DP_COUNT; i++)
        if (!strcmp(s, kn_dp_names[i])) { *out = (kn_dp_strategy)i; return KN_OK; }
    if (!strcmp(s, "fsdp")) { *out = KN_DP_ZERO3; return KN_OK; } /* PyTorch's name for ZeRO-3 */
    return kn_error(KN_ERR_ARG, "--dist '%s': expected ddp, zero1, zero2 or zero3 (also called fsdp)", s);
}

const char *kn_dp_strategy_name(kn_dp_strategy s) { return (int)s >= 0 && s < KN_DP_COUNT ? kn_dp_names[s] : "?"; }

/* kn_dp_shard_ranges and kn_dp_buckets are lab 10 units (labs/lab10-dataparallel/). */

void kn_dp_shard_counts(const kn_dp *d, int64_t lo, int64_t hi, int64_t *counts) {
    for (int r = 0; r < d->comm->size; r++) {
        int64_t a = lo > d->shard_lo[r] ? lo : d->shard_lo[r], b = hi < d->shard_lo[r + 1] ? hi : d->shard_lo[r + 1];
        counts[r] = b > a ? b - a : 0;
    }
}

/* (short names for this file) */
#define my_lo kn_dp_my_lo
#define my_len kn_dp_my_len

/* The trainer's slabs, where its step runs (kiln/nn.h: one set, on tr->dev). DDP on a GPU
 * calls only the device table (copies, scale, clip, optimizer) and NCCL, so no gradient
 * crosses to the host. */
static bool on_gpu(const kn_dp *d) { return d->tr->dev.type != KN_DEVICE_CPU; }
static float *slab_param(const kn_dp *d) { return kn_tensor_data(d->tr->params); }
static float *slab_grad(const kn_dp *d) { return d->tr->grad ? kn_tensor_data(d->tr->grad) : NULL; }
static float *slab_state(const kn_dp *d) { return d->tr->state ? kn_tensor_data(d->tr->state) : d->tr->opt.state; }
static float *shard_state(const kn_dp *d) { return on_gpu(d) ? d->dshard_state : d->shard_opt.state; }

/* nb bytes (zeroed) where the step runs, and their release (nb as allocated). */
static float *dp_alloc(const kn_dp *d, size_t nb) {
    if (!on_gpu(d)) return kn_calloc(nb > 0 ? nb : 1, 1);
    void *p = NULL;
    if (kn_device_alloc(d->tr->dev, nb, &p) != KN_OK) return NULL;
    if (nb > 0 && kn_device_memset(d->tr->dev, p, 0, nb) != KN_OK) {
        kn_device_free(d->tr->dev, p, nb);
        return NULL;
    }
    return p;
}
static void dp_free(const kn_dp *d, void *p, size_t nb) {
    if (!p) return;
    if (on_gpu(d)) kn_device_free(d->tr->dev, p, nb);
    else kn_free(p);
}

/* Bytes of bucket b's ZeRO-2 staging buffer: its gradients, then the part this rank owns. */
static size_t staging_size(const kn_dp *d, int b) {
    const kn_dp_bucket *k = &d->buckets[b];
    int64_t a = k->lo > my_lo(d) ? k->lo : my_lo(d), e = k->hi < my_lo(d) + my_len(d) ? k->hi : my_lo(d) + my_len(d);
    return (size_t)((k->hi - k->lo) + (e > a ? e - a : 0)) * sizeof(float);
}

void kn_dp_free(kn_dp *d) {
    if (!d) return;
    if (d->tr && d->tr->prog) kn_program_set_hook(d->tr->prog, NULL, NULL);
    kn_dp_z3_free(d);
    for (int b = 0; d->staging && b < d->nbuckets; b++)
        if (d->staging[b]) dp_free(d, d->staging[b], staging_size(d, b));
    /* the sizes come from shard_lo, so these go before it */
    if (d->grad_shard) dp_free(d, d->grad_shard, (size_t)my_len(d) * sizeof(float));
    if (d->dshard_state) dp_free(d, d->dshard_state, (size_t)d->shard_opt.state_len * sizeof(float));
    for (int b = 0; d->packed && b < d->nbuckets; b++) kn_free(d->packed[b]);
    kn_free(d->packed);
    kn_free(d->err);
    kn_free(d->staging);
    kn_free(d->in_flight);
    kn_free(d->buckets);
    kn_free(d->param_bucket);
    kn_free(d->node_first);
    kn_free(d->param_next);
    kn_free(d->reqs);
    kn_free(d->shard_lo);
    kn_free(d->t_launch);
    if (d->timeline) fclose(d->timeline);
    kn_free(d->ring_scratch);
    if (d->dscalar) kn_device_free(d->tr->dev, d->dscalar, sizeof(double));
    kn_optim_free(&d->shard_opt);
    memset(d, 0, sizeof *d);
}

static kn_status dp_hook(void *ctx, int32_t node, const kn_tensor *value);

kn_status kn_dp_new(kn_dp *d, kn_comm *c, kn_trainer *tr, const kn_dp_config *cfg) {
    if (!d || !c || !tr || !cfg || !tr->model || !tr->prog) return kn_error(KN_ERR_ARG, "kn_dp_new: NULL argument");
    if ((int)cfg->strategy < 0 || cfg->strategy >= KN_DP_COUNT)
        return kn_error(KN_ERR_ARG, "kn_dp_new: strategy %d", (int)cfg->strategy);
    if (!(cfg->bucket_mb > 0) || cfg->accum < 1)
        return kn_error(KN_ERR_ARG, "kn_dp_new: --bucket-mb %g and --accum %d: need > 0 and >= 1", cfg->bucket_mb,
                        cfg->accum);
    if (tr->eager) return kn_error(KN_ERR_UNSUPPORTED, "kn_dp_new: data parallelism runs the compiled step (--mode graph)");
    if (tr->scale_in)
        return kn_error(KN_ERR_UNSUPPORTED, "kn_dp_new: loss scaling with data parallelism is not supported yet (the "
                        "strategies' update does not unscale or skip): turn it off (--loss-scale none)");
    bool gpu = tr->dev.type != KN_DEVICE_CPU;
    if (gpu != (c->be->type == KN_COMM_NCCL))
        return kn_error(KN_ERR_ARG, "kn_dp_new: a trainer on %s needs the %s communicator (got %s): CPU ranks "
                        "talk over MPI, GPU ranks over NCCL", gpu ? "a GPU" : "the CPU", gpu ? "nccl" : "mpi",
                        c->be->name);
    if (cfg->compress && (gpu || cfg->strategy != KN_DP_DDP || cfg->ring))
        return kn_error(KN_ERR_UNSUPPORTED, "kn_dp_new: --compress int8 compresses DDP's buckets on CPU ranks with the "
                        "library's all-gather (asked: --dist %s%s%s)", kn_dp_strategy_name(cfg->strategy),
                        gpu ? " on GPUs" : "", cfg->ring ? ", the ring" : "");
    if (gpu && (cfg->accum > 1 || cfg->ring))
        return kn_error(KN_ERR_UNSUPPORTED, "kn_dp_new: on GPUs kiln runs one micro-batch per step with the library's "
                        "collectives (asked: --accum %d%s); accumulation and the ring run on CPU ranks", cfg->accum,
                        cfg->ring ? ", the ring" : "");
    if (gpu && cfg->strategy == KN_DP_ZERO3)
        return kn_error(KN_ERR_UNSUPPORTED, "kn_dp_new: --dist zero3 runs on CPU ranks (--comm mpi) so far: its gathered "
                        "parameter buckets are host tensors; on GPUs use --dist zero2");
    if (cfg->ring && cfg->strategy != KN_DP_DDP)
        return kn_error(KN_ERR_ARG, "kn_dp_new: the ring all-reduce is DDP's alternative (ZeRO reduce-scatters)");
    memset(d, 0, sizeof *d);
    d->comm = c;
    d->tr = tr;
    d->cfg = *cfg;
    const kn_params *p = &tr->model->p;
    const kn_graph *g = kn_program_graph(tr->prog); /* node ids as the program runs them */
    int N = c->size;
    kn_status st = kn_dp_buckets(p, (size_t)(cfg->bucket_mb * 1048576.0), &d->buckets, &d->nbuckets);
    if (st != KN_OK) return st;
    d->nnodes = g->nnodes;
    d->param_bucket = kn_malloc((size_t)p->count * sizeof(int));
    d->param_next = kn_malloc((size_t)p->count * sizeof(int));
    d->node_first = kn_malloc((size_t)g->nnodes * sizeof(int));
    d->reqs = kn_calloc((size_t)d->nbuckets, sizeof *d->reqs);
    d->in_flight = kn_calloc((size_t)d->nbuckets, sizeof *d->in_flight);
    d->staging = kn_calloc((size_t)d->nbuckets, sizeof *d->staging);
    d->shard_lo = kn_malloc((size_t)(N + 1) * sizeof(int64_t));
    if (!d->param_bucket || !d->param_next || !d->node_first || !d->reqs || !d->in_flight || !d->staging ||
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
    for (int i = 0; i < g->nnodes; i++) d->node_first[i] = -1;
    for (int i = p->count - 1; i >= 0; i--) {
        int32_t node = g->outputs[1 + i];
        d->param_next[i] = d->node_first[node];
        d->node_first[node] = i;
    }
    st = kn_dp_shard_ranges(p->n, N, d->shard_lo);
    if (st == KN_OK && gpu) st = kn_device_alloc(tr->dev, sizeof(double), (void **)&d->dscalar);
    /* every rank starts from rank 0's parameters (on the trainer's device) */
    if (st == KN_OK) st = kn_comm_broadcast(c, slab_param(d), p->n, KN_DT_F32, 0);
    if (st == KN_OK && cfg->strategy != KN_DP_DDP) {
        int64_t lo = my_lo(d), len = my_len(d), n = p->n;
        int64_t decay = p->n_decay - lo;
        decay = decay < 0 ? 0 : decay > len ? len : decay;
        st = kn_optim_init(&d->shard_opt, &tr->opt.cfg, len, decay);
        size_t state_bytes = (size_t)d->shard_opt.state_len * sizeof(float);
        if (st == KN_OK && gpu && !(d->dshard_state = dp_alloc(d, state_bytes)))
            st = kn_error(KN_ERR_OOM, "kn_dp_new: out of device memory for the shard's optimizer state");
        int slabs = n > 0 ? (int)(tr->opt.state_len / n) : 0;
        for (int k = 0; st == KN_OK && k < slabs; k++) /* this rank's range of each state slab */
            st = kn_device_memcpy(tr->dev, shard_state(d) + k * len, tr->dev, slab_state(d) + k * n + lo,
                                  (size_t)len * sizeof(float));
        d->shard_opt.step = tr->opt.step;
        d->grad_shard = st == KN_OK ? dp_alloc(d, (size_t)len * sizeof(float)) : NULL;
        if (st == KN_OK && !d->grad_shard) st = kn_error(KN_ERR_OOM, "kn_dp_new: out of memory for the shard");
        if (st == KN_OK) {
            /* the full state is gone: this rank keeps its shard (kn_dp_gather_state brings it back) */
            if (gpu) {
                kn_tensor_free(tr->state);
                tr->state = NULL;
            } else {
                kn_free(tr->opt.state);
                tr->opt.state = NULL;
            }
        }
    }
    if (st == KN_OK && cfg->strategy >= KN_DP_ZERO2) {
        /* no full gradient slab: gradients live in the buckets' staging buffers */
        kn_params_views_free(p, tr->grad_views);
        kn_tensor_free(tr->grad);
        tr->grad_views = NULL;
        tr->grad = NULL;
    }
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
    if (st != KN_OK) {
        kn_dp_free(d);
        return st;
    }
    kn_program_set_hook(tr->prog, dp_hook, d);
    return KN_OK;
}

/* ---------------------------------------------------------------- the hook */

/* dst[0..n) = src (first micro-batch) or += src (CPU ranks only: kn_dp_new refuses
 * accumulation on a GPU). On a GPU the copy is queued on the compute stream, behind the
 * kernel that made src; the bucket's NCCL operation waits for it (comm_nccl.c). */
static kn_status store(const kn_dp *d, float *dst, const float *src, int64_t n, bool add) {
    if (on_gpu(d)) return kn_device_memcpy(d->tr->dev, dst, d->tr->dev, src, (size_t)n * sizeof(float));
    if (add) {
        for (int64_t i = 0; i < n; i++) dst[i] += src[i];
    } else {
        memcpy(dst, src, (size_t)n * sizeof(float));
    }
    return KN_OK;
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
        float *g = slab_grad(d) + k->lo;
        if (d->cfg.ring) {
            /* kiln's ring is blocking: it runs here, between two nodes of the backward */
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
        int64_t a = k->lo > my_lo(d) ? k->lo : my_lo(d);
        const float *src = d->cfg.strategy == KN_DP_ZERO1 ? slab_grad(d) + k->lo : d->staging[b];
        /* ZeRO-1 receives straight into its shard; ZeRO-2 behind the bucket in its staging
         * buffer (added into the shard when done, for accumulation) */
        float *dst = d->cfg.strategy == KN_DP_ZERO1 ? d->grad_shard + (a - my_lo(d)) : d->staging[b] + (k->hi - k->lo);
        d->bytes_sent += (k->hi - k->lo) * (int64_t)sizeof(float);
        KN_TRY(kn_comm_ireduce_scatter(d->comm, src, dst, counts, KN_DT_F32, what, &d->reqs[b]));
    }
    d->in_flight[b] = true;
    return KN_OK;
}

/* Bucket b finished: ZeRO-2 moves its part into the shard and frees the staging buffer. */
static void finished(kn_dp *d, int b) {
    d->in_flight[b] = false;
    d->t_last_done = kn_time_now();
    if (d->t_launch) d->t_launch[d->nbuckets + b] = d->t_last_done;
    if (d->cfg.compress && d->packed[b]) {
        kn_dp_bucket *k = &d->buckets[b];
        int8_decode(d, d->packed[b], k->hi - k->lo, slab_grad(d) + k->lo);
        kn_free(d->packed[b]);
        d->packed[b] = NULL;
    }
    if (d->cfg.strategy < KN_DP_ZERO2) return;
    kn_dp_bucket *k = &d->buckets[b];
    int64_t a = k->lo > my_lo(d) ? k->lo : my_lo(d), e = k->hi < my_lo(d) + my_len(d) ? k->hi : my_lo(d) + my_len(d);
    if (e > a) (void)store(d, d->grad_shard + (a - my_lo(d)), d->staging[b] + (k->hi - k->lo), e - a, d->micro > 0);
    dp_free(d, d->staging[b], staging_size(d, b));
    d->staging[b] = NULL;
    d->staging_bytes -= (int64_t)staging_size(d, b);
}

static kn_status poll_all(kn_dp *d) {
    for (int b = 0; b < d->nbuckets; b++) {
        if (!d->in_flight[b]) continue;
        bool done = false;
        KN_TRY(kn_comm_test(&d->reqs[b], &done));
        if (done) finished(d, b);
    }
    return kn_dp_z3_poll(d);
}

static kn_status contiguous_f32(const kn_tensor *v, int64_t numel, int param, const float **out, kn_tensor **tmp) {
    if (!v || v->dtype != KN_DT_F32 || kn_tensor_numel(v) != numel)
        return kn_error(KN_ERR_SHAPE, "kn_dp_step: gradient of parameter %d is not f32 with %lld elements", param,
                        (long long)numel);
    KN_TRY(kn_device_contiguous("kn_dp_step", v, tmp)); /* an alias when v already is */
    *out = kn_tensor_data(*tmp);
    return KN_OK;
}

static kn_status dp_hook(void *ctx, int32_t node, const kn_tensor *value) {
    kn_dp *d = ctx;
    if (node < 0 || node >= d->nnodes) return KN_OK;
    const kn_params *p = &d->tr->model->p;
    bool comm_now = d->last_micro || d->cfg.strategy >= KN_DP_ZERO2;
    for (int i = d->node_first[node]; i >= 0; i = d->param_next[i]) {
        const kn_param_info *pi = &p->info[i];
        const float *src = NULL;
        kn_tensor *tmp = NULL;
        KN_TRY(contiguous_f32(value, pi->numel, i, &src, &tmp));
        int b = d->param_bucket[i];
        kn_dp_bucket *k = &d->buckets[b];
        kn_status st = KN_OK;
        if (d->cfg.strategy >= KN_DP_ZERO2) {
            if (!d->staging[b]) {
                size_t nb = staging_size(d, b);
                d->staging[b] = dp_alloc(d, nb);
                if (!d->staging[b]) st = kn_error(KN_ERR_OOM, "kn_dp_step: out of memory for bucket %d", b);
                d->staging_bytes += (int64_t)nb;
                if (d->staging_bytes > d->staging_peak) d->staging_peak = d->staging_bytes;
            }
            if (st == KN_OK) st = store(d, d->staging[b] + (pi->offset - k->lo), src, pi->numel, false);
        } else {
            st = store(d, slab_grad(d) + pi->offset, src, pi->numel, d->micro > 0);
        }
        kn_tensor_free(tmp);
        KN_TRY(st);
        if (comm_now && --k->pending == 0) KN_TRY(launch(d, b));
    }
    /* drive the collectives in flight (MPI progresses inside MPI_Test) */
    return poll_all(d);
}

/* ---------------------------------------------------------------- the step */

/* A blocking all-reduce of one double with a label for the timeout message (NCCL moves
 * device memory only: on a GPU the value goes through d->dscalar). */
static kn_status all_reduce_f64(kn_dp *d, double *v, const char *what) {
    kn_comm_req r;
    double *buf = on_gpu(d) ? d->dscalar : v;
    if (on_gpu(d)) KN_TRY(kn_device_memcpy(d->tr->dev, buf, KN_CPU, v, sizeof *v));
    KN_TRY(kn_comm_iall_reduce(d->comm, buf, buf, 1, KN_DT_F64, what, &r));
    KN_TRY(kn_comm_wait(&r));
    if (on_gpu(d)) KN_TRY(kn_device_memcpy(KN_CPU, v, d->tr->dev, buf, sizeof *v));
    return KN_OK;
}

/* The value of the 0-d loss wherever it lives (reading it from a GPU waits for the
 * forward and backward: the copy is ordered behind them). */
static kn_status loss_item(const kn_tensor *o, double *out) {
    if (!o) return kn_error(KN_ERR_ARG, "kn_dp_step: the joint graph has no loss output");
    return kn_tensor_item_any(o, out);
}

/* Run the joint graph on this rank's micro-batch m (its rows of the global batch). */
static kn_status run_micro(kn_dp *d, const int32_t *x, const int32_t *y, int m, double *loss) {
    kn_trainer *t = d->tr;
    size_t row = (size_t)t->T, rows = (size_t)t->B;
    size_t first = ((size_t)d->comm->rank * (size_t)d->cfg.accum + (size_t)m) * rows;
    size_t bytes = rows * row * sizeof(int32_t);
    KN_TRY(kn_device_memcpy(t->dev, kn_tensor_data(t->x), KN_CPU, x + first * row, bytes));
    KN_TRY(kn_device_memcpy(t->dev, kn_tensor_data(t->y), KN_CPU, y + first * row, bytes));
    d->micro = m;
    d->last_micro = m == d->cfg.accum - 1;
    for (int b = 0; b < d->nbuckets; b++)
        d->buckets[b].pending = d->buckets[b].last_param - d->buckets[b].first_param + 1;
    KN_TRY(kn_trainer_low_refresh(t)); /* the weights' low copies (lowparams), after an update made here */
    kn_status st = kn_program_run(t->prog);
    kn_status zs = kn_dp_z3_end_run(d); /* ZeRO-3: the last gathered buckets go */
    KN_TRY(st);
    KN_TRY(zs);
    return loss_item(kn_program_output(t->prog, 0), loss);
}

kn_status kn_dp_step(kn_dp *d, const int32_t *x, const int32_t *y, int global_batch, double lr, double *loss,
                     double *gnorm) {
    if (!d || !d->tr || !x || !y) return kn_error(KN_ERR_ARG, "kn_dp_step: NULL argument");
    kn_trainer *t = d->tr;
    int N = d->comm->size, K = d->cfg.accum;
    if ((int64_t)t->B * N * K != global_batch)
        return kn_error(KN_ERR_ARG, "kn_dp_step: global batch %d is not %d ranks x %d micro-batches x %d rows",
                        global_batch, N, K, t->B);
    const kn_params *p = &t->model->p;
    double t0 = kn_time_now(), lsum = 0;
    if (d->z3) KN_TRY(kn_dp_z3_begin_step(d));
    d->launched = 0;
    d->bytes_sent = 0;
    d->gathered_bytes = 0;
    d->stats.gather_s = d->stats.gather_wait_s = 0;
    d->stats.gathers = 0;
    d->t_first_launch = d->t_last_done = 0;
    for (int m = 0; m < K; m++) {
        double l = 0;
        KN_TRY(run_micro(d, x, y, m, &l));
        lsum += l;
        if (m == K - 1) d->t_backward_end = kn_time_now();
        /* every bucket of this micro-batch must be done before the next one reuses them */
        for (int b = 0; b < d->nbuckets; b++)
            if (d->in_flight[b]) {
                KN_TRY(kn_comm_wait(&d->reqs[b]));
                finished(d, b);
            }
    }
    double t_comm_end = kn_time_now();
    /* the global batch's loss: the mean of every rank's micro-batch means */
    double gl = lsum / K;
    KN_TRY(all_reduce_f64(d, &gl, "loss"));
    gl /= N;
    double scale = 1.0 / ((double)N * K), norm;
    if (d->cfg.strategy == KN_DP_DDP) {
        KN_TRY(kn_device_scale(t->dev, slab_grad(d), p->n, scale));
        KN_TRY(kn_device_clip_grad_norm(t->dev, slab_grad(d), p->n, t->clip, &norm));
    } else if (on_gpu(d)) {
        /* the shard's sum of squares (its norm, unclipped), summed over the ranks */
        int64_t len = my_len(d);
        double local = 0, ss;
        KN_TRY(kn_device_scale(t->dev, d->grad_shard, len, scale));
        KN_TRY(kn_device_clip_grad_norm(t->dev, d->grad_shard, len, 0.0, &local));
        ss = local * local;
        KN_TRY(all_reduce_f64(d, &ss, "gradient norm"));
        norm = sqrt(ss);
        if (t->clip > 0 && norm > t->clip) KN_TRY(kn_device_scale(t->dev, d->grad_shard, len, t->clip / (norm + 1e-6)));
    } else {
        int64_t len = my_len(d);
        double ss = 0;
        for (int64_t i = 0; i < len; i++) {
            d->grad_shard[i] = (float)((double)d->grad_shard[i] * scale);
            ss += (double)d->grad_shard[i] * (double)d->grad_shard[i];
        }
        KN_TRY(all_reduce_f64(d, &ss, "gradient norm"));
        norm = sqrt(ss);
        if (t->clip > 0 && norm > t->clip) {
            double s = t->clip / (norm + 1e-6);
            for (int64_t i = 0; i < len; i++) d->grad_shard[i] = (float)((double)d->grad_shard[i] * s);
        }
    }
    if (!isfinite(gl) || !isfinite(norm))
        return kn_error(KN_ERR_ARG, "kn_dp_step: loss %g, gradient norm %g at optimizer step %lld (diverged: lower "
                        "the learning rate)", gl, norm, (long long)t->opt.step);
    if (d->cfg.strategy == KN_DP_DDP) {
        KN_TRY(kn_device_optim_step(t->dev, &t->opt, slab_param(d), slab_grad(d), slab_state(d), lr));
    } else if (d->cfg.strategy == KN_DP_ZERO3) {
        /* the shard is the parameters: the next forward gathers it, bucket by bucket */
        KN_TRY(kn_device_optim_step(t->dev, &d->shard_opt, d->param_shard, d->grad_shard, shard_state(d), lr));
        t->opt.step = d->shard_opt.step;
    } else {
        KN_TRY(kn_device_optim_step(t->dev, &d->shard_opt, slab_param(d) + my_lo(d), d->grad_shard, shard_state(d), lr));
        t->opt.step = d->shard_opt.step;
        int64_t counts[1024];
        if (N > 1024) return kn_error(KN_ERR_ARG, "kn_dp: more than 1024 ranks");
        for (int r = 0; r < N; r++) counts[r] = d->shard_lo[r + 1] - d->shard_lo[r];
        kn_comm_req r;
        KN_TRY(kn_comm_iall_gather(d->comm, slab_param(d) + my_lo(d), slab_param(d), counts, KN_DT_F32, "parameters", &r));
        KN_TRY(kn_comm_wait(&r));
    }
    t->low_fresh = false; /* the low copies (if any) are rounded again before the next run */
    double t1 = kn_time_now();
    d->stats.step_s = t1 - t0;
    d->stats.backward_s = d->t_backward_end - t0;
    d->stats.comm_s = d->launched ? (d->t_last_done > d->t_first_launch ? d->t_last_done : t_comm_end) -
                                        d->t_first_launch : 0;
    d->stats.exposed_s = d->launched ? t_comm_end - d->t_backward_end : 0;
    if (d->timeline) {
        long long step = (long long)t->opt.step;
        fprintf(d->timeline, "step %lld %.6f %.6f %.6f\n", step, d->t_backward_end - t0, t_comm_end - t0, t1 - t0);
        for (int b = 0; b < d->nbuckets; b++)
            fprintf(d->timeline, "bucket %lld %d %.6f %.6f %lld\n", step, b, d->t_launch[b] - t0,
                    d->t_launch[d->nbuckets + b] - t0, (long long)(d->buckets[b].hi - d->buckets[b].lo) * 4);
        fflush(d->timeline);
    }
    if (loss) *loss = gl;
    if (gnorm) *gnorm = norm;
    return KN_OK;
}

kn_status kn_dp_gather_state(kn_dp *d) {
    if (!d || !d->tr) return kn_error(KN_ERR_ARG, "kn_dp_gather_state: NULL argument");
    if (d->cfg.strategy == KN_DP_DDP) return KN_OK;
    kn_optim *o = &d->tr->opt;
    int64_t n = d->tr->model->p.n, len = my_len(d), counts[1024];
    int N = d->comm->size;
    if (N > 1024) return kn_error(KN_ERR_ARG, "kn_dp: more than 1024 ranks");
    for (int r = 0; r < N; r++) counts[r] = d->shard_lo[r + 1] - d->shard_lo[r];
    if (on_gpu(d) && !d->tr->state) {
        /* the trainer's state slab comes back on its device (kn_trainer_sync_host copies it) */
        int64_t sn[1] = {o->state_len};
        KN_TRY(kn_tensor_empty_on(&d->tr->state, d->tr->dev, KN_DT_F32, 1, sn));
    }
    if (!on_gpu(d) && !o->state) {
        o->state = kn_malloc((size_t)(o->state_len > 0 ? o->state_len : 1) * sizeof(float));
        if (!o->state) return kn_error(KN_ERR_OOM, "kn_dp_gather_state: out of memory");
    }
    int slabs = n > 0 ? (int)(o->state_len / n) : 0;
    for (int k = 0; k < slabs; k++)
        KN_TRY(kn_comm_all_gather(d->comm, shard_state(d) + k * len, slab_state(d) + k * n, counts, KN_DT_F32));
    o->step = d->shard_opt.step;
    return d->z3 ? kn_dp_z3_gather_params(d) : KN_OK;
}

kn_dp_memory kn_dp_memory_of(const kn_dp *d) {
    kn_dp_memory m = {0};
    if (!d || !d->tr) return m;
    int64_t P = d->tr->model->p.n, f = (int64_t)sizeof(float);
    m.params = d->cfg.strategy == KN_DP_ZERO3 ? my_len(d) * f : P * f;
    m.grads = (slab_grad(d) ? P * f : 0) + (d->grad_shard ? my_len(d) * f : 0);
    m.optim = (d->cfg.strategy == KN_DP_DDP ? d->tr->opt.state_len : d->shard_opt.state_len) * f;
    m.staging_peak = d->staging_peak;
    m.gathered_peak = d->gathered_peak;
    return m;
}

kn_dp_memory kn_dp_memory_expected(kn_dp_strategy s, int64_t P, int n) {
    kn_dp_memory m = {.params = 4 * P, .grads = 4 * P, .optim = 8 * P};
    if (s != KN_DP_DDP) m.optim = 8 * P / n;
    if (s >= KN_DP_ZERO2) m.grads = 4 * P / n;
    if (s == KN_DP_ZERO3) m.params = 4 * P / n;
    return m;
}

/* ---------------------------------------------------------------- the schedule, printed */

kn_status kn_dp_schedule_print(FILE *f, const kn_dp *d) {
    if (!f || !d || !d->tr || !d->tr->prog) return kn_error(KN_ERR_ARG, "kn_dp_schedule_print: NULL argument");
    const kn_graph *g = kn_program_graph(d->tr->prog);
    const kn_params *p = &d->tr->model->p;
    int32_t *done_at = kn_malloc((size_t)d->nbuckets * sizeof *done_at);
    char *text = NULL;
    kn_status st = done_at ? kn_graph_to_string(g, &text) : kn_error(KN_ERR_OOM, "kn_dp_schedule_print: out of memory");
    if (st != KN_OK) {
        kn_free(done_at);
        return st;
    }
    /* a bucket starts after the node that makes its last gradient */
    for (int b = 0; b < d->nbuckets; b++) {
        done_at[b] = -1;
        for (int i = d->buckets[b].first_param; i <= d->buckets[b].last_param; i++)
            if (g->outputs[1 + i] > done_at[b]) done_at[b] = g->outputs[1 + i];
    }
    bool zero = d->cfg.strategy != KN_DP_DDP;
    const char *coll = zero ? "reduce_scatter" : d->cfg.ring ? "ring_all_reduce" : "all_reduce";
    fprintf(f, "# kiln train --dist %s: the joint graph of one rank (%d rows) and where each collective starts.\n"
            "# %d ranks, %d buckets; a bucket's %s starts (nonblocking) right after the node that makes its\n"
            "# last gradient, and runs while the nodes below it compute.\n",
            kn_dp_strategy_name(d->cfg.strategy), d->tr->B, d->comm->size, d->nbuckets, coll);
    if (d->z3)
        fprintf(f, "# ZeRO-3: the parameters are sharded; each bucket's all_gather is waited for before the first\n"
                "# step (of the program's steps: a generated kernel is the step of its last node) that reads it in\n"
                "# the forward, and again in the backward, and freed after its last reader; the next one is\n"
                "# prefetched while the steps before its use compute.\n");
    for (char *line = text; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        int id = -1;
        if (line[0] == '%') id = atoi(line + 1);
        if (id >= 0 && d->z3) kn_dp_z3_print_notes(f, d, id);
        fprintf(f, "%s\n", line);
        for (int b = 0; id >= 0 && b < d->nbuckets; b++) {
            if (done_at[b] != id) continue;
            const kn_dp_bucket *k = &d->buckets[b];
            fprintf(f, "#   <- %s bucket %d: slab [%lld, %lld), %lld bytes, %s .. %s\n", coll, b, (long long)k->lo,
                    (long long)k->hi, (long long)((k->hi - k->lo) * 4), p->info[k->first_param].name,
                    p->info[k->last_param].name);
        }
        line = nl ? nl + 1 : NULL;
    }
    fprintf(f, "# after the graph: wait for every bucket; loss all_reduce (8 bytes);\n");
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
    kn_free(done_at);
    return KN_OK;
}
