/* offload.c — ZeRO-Offload (kiln/offload.h): the optimizer's state and step on the host, and
 * the hook of a one-process GPU trainer (data parallelism's: core/dist/offload_dp.c).
 *
 * The host keeps, in pinned memory (kn_device_host_alloc), a master copy of the range it
 * updates, a gradient buffer and the optimizer state. A step is a three-stage pipeline over
 * chunks of the range:
 *     down stream   D2H of chunk k's gradients, an event recorded after each chunk
 *     host          waits for chunk k's event, runs kn_optim_step_range on it
 *     up stream     H2D of chunk k's updated master copy into the device's parameters
 * so the link carries chunk k+1 down and chunk k-1 up while the host computes chunk k (on
 * every core: kiln's CPU worker pool cuts each chunk, the same bits however cut). The
 * down stream first waits for the default stream (the clip's kernels, which made the
 * gradients final); the step returns after the up stream is done, so the next forward reads
 * updated parameters. On KN_CPU the streams are tokens and the copies synchronous: the same
 * code, the same bits, without a GPU (tests/core/test_offload.c).
 *
 * Invariant: between steps the device's parameters of the range equal the host master copy
 * bit for bit (the master is what the host steps; the device gets its copy). Data
 * parallelism's all-gather (ZeRO-1/2) writes the other ranks' ranges, never this one. */
#include <string.h>

#include "kiln/kernels.h"
#include "kiln/offload.h"
#include "nn/nn_impl.h"
#include "nn/offload_impl.h"

kn_status kn_offload_parse(const char *text, bool *on) {
    if (!text || !on) return kn_error(KN_ERR_ARG, "kn_offload_parse: NULL argument");
    if (!strcmp(text, "none")) *on = false;
    else if (!strcmp(text, "optimizer")) *on = true;
    else return kn_error(KN_ERR_ARG, "--offload '%s': expected none or optimizer", text);
    return KN_OK;
}

void kn_offload_free(kn_offload *f) {
    if (!f) return;
    if (f->t && f->t->optim_hook_ctx == f) {
        f->t->optim_hook = NULL;
        f->t->optim_hook_ctx = NULL;
    }
    kn_stream_free(f->down); /* waits for their copies first */
    kn_stream_free(f->up);
    kn_event_free(f->ready);
    for (int64_t k = 0; f->arrived && k < f->nchunks; k++) kn_event_free(f->arrived[k]);
    kn_free(f->arrived);
    kn_device_host_free(f->dev, f->master);
    kn_device_host_free(f->dev, f->grad);
    kn_device_host_free(f->dev, f->state);
    kn_free(f);
}

kn_status kn_offload_new(kn_offload **out, kn_device dev, const kn_optim *o, const float *param, const float *state,
                         int64_t chunk) {
    if (!out || !o || (o->n > 0 && !param)) return kn_error(KN_ERR_ARG, "kn_offload_new: NULL argument");
    *out = NULL;
    if (chunk < 0) return kn_error(KN_ERR_ARG, "kn_offload_new: chunk %lld: need >= 0", (long long)chunk);
    kn_offload *f = kn_calloc(1, sizeof *f);
    if (!f) return kn_error(KN_ERR_OOM, "kn_offload_new: out of memory");
    f->dev = dev;
    f->opt = *o;
    f->opt.state = NULL;
    int64_t n = o->n;
    f->chunk = chunk > 0 ? chunk : (int64_t)1 << 22;
    f->nchunks = n > 0 ? (n + f->chunk - 1) / f->chunk : 0;
    size_t pb = (size_t)n * sizeof(float), sb = (size_t)o->state_len * sizeof(float);
    kn_status st = kn_device_host_alloc(dev, pb, (void **)&f->master);
    if (st == KN_OK) st = kn_device_host_alloc(dev, pb, (void **)&f->grad);
    if (st == KN_OK) st = kn_device_host_alloc(dev, sb, (void **)&f->state);
    if (st == KN_OK) st = kn_stream_new(dev, &f->down);
    if (st == KN_OK) st = kn_stream_new(dev, &f->up);
    if (st == KN_OK) st = kn_event_new(dev, &f->ready);
    if (st == KN_OK && !(f->arrived = kn_calloc((size_t)(f->nchunks > 0 ? f->nchunks : 1), sizeof *f->arrived)))
        st = kn_error(KN_ERR_OOM, "kn_offload_new: out of memory for %lld events", (long long)f->nchunks);
    for (int64_t k = 0; st == KN_OK && k < f->nchunks; k++) st = kn_event_new(dev, &f->arrived[k]);
    if (st == KN_OK) st = kn_device_memcpy(KN_CPU, f->master, dev, param, pb);
    if (st == KN_OK && state) st = kn_device_memcpy(KN_CPU, f->state, dev, state, sb);
    if (st != KN_OK) {
        kn_offload_free(f);
        return st;
    }
    f->opt.state = f->state;
    f->stats = (kn_offload_stats){.n = n, .chunks = f->nchunks, .host_bytes = (int64_t)(2 * pb + sb),
                                  .bytes_down = (int64_t)pb, .bytes_up = (int64_t)pb};
    *out = f;
    return KN_OK;
}

/* One chunk's update, cut over kiln's CPU worker pool (kn_k_parallel: KILN_THREADS, the
 * cores by default): elementwise, so any cut gives the same bits. The arguments were
 * checked before the first chunk (kn_offload_step), so a part cannot fail. */
typedef struct chunk_job {
    kn_offload *f;
    int64_t lo;
    double lr;
} chunk_job;

static void chunk_part(void *ctx, int64_t a, int64_t b) {
    const chunk_job *j = ctx;
    kn_status st = kn_optim_step_range(&j->f->opt, j->f->master, j->f->grad, j->f->state, j->lr, j->lo + a, j->lo + b);
    KN_CHECK(st == KN_OK);
}

kn_status kn_offload_step(kn_offload *f, float *param, const float *grad, double lr) {
    if (!f || (f->opt.n > 0 && (!param || !grad))) return kn_error(KN_ERR_ARG, "kn_offload_step: NULL argument");
    /* the learning rate and the slabs checked once (an empty range), before any copy */
    KN_TRY(kn_optim_step_range(&f->opt, f->master, f->grad, f->state, lr, 0, 0));
    double t0 = kn_time_now(), wait_down = 0, host = 0;
    const int64_t n = f->opt.n, C = f->chunk;
    /* the gradients are final once the default stream's work (the clip) is done */
    KN_TRY(kn_event_record(f->ready, NULL));
    KN_TRY(kn_stream_wait_event(f->down, f->ready));
    for (int64_t k = 0; k < f->nchunks; k++) {
        int64_t lo = k * C, len = n - lo < C ? n - lo : C;
        KN_TRY(kn_device_memcpy_async(f->down, KN_CPU, f->grad + lo, f->dev, grad + lo, (size_t)len * sizeof(float)));
        KN_TRY(kn_event_record(f->arrived[k], f->down));
    }
    kn_status st = KN_OK;
    for (int64_t k = 0; st == KN_OK && k < f->nchunks; k++) {
        int64_t lo = k * C, hi = lo + C < n ? lo + C : n;
        double a = kn_time_now();
        st = kn_event_synchronize(f->arrived[k]);
        double b = kn_time_now();
        if (st == KN_OK) {
            chunk_job j = {.f = f, .lo = lo, .lr = lr};
            kn_k_parallel(hi - lo, hi - lo >= ((int64_t)1 << 16), chunk_part, &j);
        }
        double c = kn_time_now();
        wait_down += b - a;
        host += c - b;
        if (st == KN_OK)
            st = kn_device_memcpy_async(f->up, f->dev, param + lo, KN_CPU, f->master + lo, (size_t)(hi - lo) * sizeof(float));
    }
    /* every chunk up before the next forward reads the parameters (and before a failed
     * step's caller frees anything): the up stream's queue drained whatever happened */
    double d = kn_time_now();
    kn_status ss = kn_stream_synchronize(f->up);
    kn_status sd = kn_stream_synchronize(f->down);
    KN_TRY(st);
    KN_TRY(ss);
    KN_TRY(sd);
    f->opt.step++;
    double e = kn_time_now();
    f->stats.steps++;
    f->stats.step_s = e - t0;
    f->stats.wait_down_s = wait_down;
    f->stats.host_s = host;
    f->stats.wait_up_s = e - d;
    return KN_OK;
}

kn_status kn_offload_state(const kn_offload *f, kn_device dst_dev, float *dst) {
    if (!f || (f->opt.state_len > 0 && !dst)) return kn_error(KN_ERR_ARG, "kn_offload_state: NULL argument");
    return kn_device_memcpy(dst_dev, dst, KN_CPU, f->state, (size_t)f->opt.state_len * sizeof(float));
}

const kn_optim *kn_offload_optim(const kn_offload *f) { return f ? &f->opt : NULL; }

kn_offload_stats kn_offload_stats_of(const kn_offload *f) {
    kn_offload_stats s = {0};
    return f ? f->stats : s;
}

/* ---------------------------------------------------------------- one process */

kn_status kn_offload_hook_trainer(void *ctx, float *param, const float *grad, double lr) {
    kn_offload *f = ctx;
    KN_TRY(kn_offload_step(f, param, grad, lr));
    f->t->opt.step = f->opt.step;
    return KN_OK;
}

kn_status kn_offload_refuse(const kn_trainer *t, const char *fn) {
    if (!t || !t->model) return kn_error(KN_ERR_ARG, "%s: no trainer", fn);
    if (t->optim_hook) return kn_error(KN_ERR_ARG, "%s: the trainer's optimizer is offloaded already", fn);
    return KN_OK;
}

kn_status kn_offload_trainer(kn_offload **out, kn_trainer *t, int64_t chunk) {
    if (!out) return kn_error(KN_ERR_ARG, "kn_offload_trainer: NULL argument");
    KN_TRY(kn_offload_refuse(t, "kn_offload_trainer"));
    if (t->step.has_comm)
        return kn_error(KN_ERR_UNSUPPORTED, "kn_offload_trainer: the trainer steps through communication hooks "
                        "(data parallelism: kn_offload_dp)");
    if (!t->params) return kn_trainer_check_slabs(t, "kn_offload_trainer");
    /* a GPU trainer's state is its device copy (given back below); a CPU trainer's is the
     * optimizer's own, which stays (checkpoints read it: kn_offload_sync) */
    const float *state = t->state ? kn_tensor_data(t->state) : t->opt.state;
    KN_TRY(kn_offload_new(out, t->dev, &t->opt, kn_tensor_data(t->params), state, chunk));
    kn_offload *f = *out;
    if (t->state) {
        f->stats.device_freed = t->opt.state_len * (int64_t)sizeof(float);
        kn_tensor_free(t->state); /* the moments live on the host now */
        t->state = NULL;
    }
    f->t = t;
    t->optim_hook = kn_offload_hook_trainer;
    t->optim_hook_ctx = f;
    return KN_OK;
}

kn_status kn_offload_sync(kn_offload *f) {
    if (!f || !f->t) return kn_error(KN_ERR_ARG, "kn_offload_sync: not attached to a trainer");
    if (f->sync_shard) return f->sync_shard(f);
    kn_trainer *t = f->t;
    if (t->opt.state_len != f->opt.state_len || (t->opt.state_len > 0 && !t->opt.state))
        return kn_error(KN_ERR_INTERNAL, "kn_offload_sync: the trainer's host state holds %lld floats, not %lld",
                        (long long)t->opt.state_len, (long long)f->opt.state_len);
    t->opt.step = f->opt.step;
    return kn_offload_state(f, KN_CPU, t->opt.state);
}
