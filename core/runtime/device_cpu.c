/* device_cpu.c — the CPU device backend: host memory from kn_malloc, plain memcpy/memset,
 * streams that are tokens and events that record the wall clock.
 *
 * It counts bytes so kn_device_mem_stats_get works the same on every device. The counters
 * are C11 atomics: tensors may be created and freed from several threads. Because memory
 * comes from kn_malloc, the test-only fault injection (kn_alloc_fail_after) reaches tensor
 * storage, and allocation failures surface as KN_ERR_OOM. */
#include <stdatomic.h>
#include <string.h>

#include "ir/ir_impl.h"
#include "kiln/device.h"

static _Atomic size_t kn_cpu_current, kn_cpu_peak;
static _Atomic int64_t kn_cpu_allocs;

static int cpu_count(void *ctx) {
    (void)ctx;
    return 1;
}

static kn_status cpu_alloc(void *ctx, int index, size_t nbytes, void **out) {
    (void)ctx; (void)index;
    void *p = kn_malloc(nbytes);
    if (!p) return kn_error(KN_ERR_OOM, "out of host memory allocating %zu bytes", nbytes);
    size_t now = atomic_fetch_add(&kn_cpu_current, nbytes) + nbytes;
    size_t peak = atomic_load(&kn_cpu_peak);
    while (now > peak && !atomic_compare_exchange_weak(&kn_cpu_peak, &peak, now)) {
    }
    atomic_fetch_add(&kn_cpu_allocs, 1);
    *out = p;
    return KN_OK;
}

static void cpu_free(void *ctx, int index, void *ptr, size_t nbytes) {
    (void)ctx; (void)index;
    if (!ptr) return;
    kn_free(ptr);
    atomic_fetch_sub(&kn_cpu_current, nbytes);
}

static kn_status cpu_memcpy(void *ctx, int index, void *dst, bool dst_on_dev, const void *src, bool src_on_dev,
                            size_t nbytes) {
    (void)ctx; (void)index; (void)dst_on_dev; (void)src_on_dev;
    memmove(dst, src, nbytes);
    return KN_OK;
}

static kn_status cpu_memset(void *ctx, int index, void *ptr, int byte, size_t nbytes) {
    (void)ctx; (void)index;
    memset(ptr, byte, nbytes);
    return KN_OK;
}

static kn_status cpu_synchronize(void *ctx, int index) {
    (void)ctx; (void)index;
    return KN_OK;
}

static kn_status cpu_mem_stats(void *ctx, int index, kn_device_mem_stats *out) {
    (void)ctx; (void)index;
    out->current = atomic_load(&kn_cpu_current);
    out->peak = atomic_load(&kn_cpu_peak);
    out->allocs = atomic_load(&kn_cpu_allocs);
    return KN_OK;
}

static void cpu_mem_reset_peak(void *ctx, int index) {
    (void)ctx; (void)index;
    atomic_store(&kn_cpu_peak, atomic_load(&kn_cpu_current));
}

/* Streams and events: CPU work is done when its call returns, so a stream is a token (a
 * byte of host memory, so that creating one can fail like any allocation) and an event is
 * the wall-clock time of its record. */
static kn_status cpu_stream_new(void *ctx, int index, void **out) {
    (void)ctx; (void)index;
    *out = kn_malloc(1);
    return *out ? KN_OK : kn_error(KN_ERR_OOM, "out of host memory for a stream");
}

static void cpu_stream_free(void *ctx, int index, void *stream) {
    (void)ctx; (void)index;
    kn_free(stream);
}

static kn_status cpu_stream_sync(void *ctx, int index, void *stream) {
    (void)ctx; (void)index; (void)stream;
    return KN_OK;
}

static kn_status cpu_stream_wait(void *ctx, int index, void *stream, void *event) {
    (void)ctx; (void)index; (void)stream; (void)event;
    return KN_OK;
}

static kn_status cpu_copy_async(void *ctx, int index, void *dst, bool dst_on_dev, const void *src, bool src_on_dev,
                                size_t nbytes, void *stream) {
    (void)stream;
    return cpu_memcpy(ctx, index, dst, dst_on_dev, src, src_on_dev, nbytes);
}

static kn_status cpu_event_new(void *ctx, int index, void **out) {
    (void)ctx; (void)index;
    *out = kn_calloc(1, sizeof(double));
    return *out ? KN_OK : kn_error(KN_ERR_OOM, "out of host memory for an event");
}

static void cpu_event_free(void *ctx, int index, void *event) {
    (void)ctx; (void)index;
    kn_free(event);
}

static kn_status cpu_event_record(void *ctx, int index, void *event, void *stream) {
    (void)ctx; (void)index; (void)stream;
    *(double *)event = kn_time_now();
    return KN_OK;
}

static kn_status cpu_event_query(void *ctx, int index, void *event, bool *done) {
    (void)ctx; (void)index; (void)event;
    *done = true;
    return KN_OK;
}

static kn_status cpu_event_elapsed(void *ctx, int index, void *start, void *stop, double *ms) {
    (void)ctx; (void)index;
    *ms = (*(double *)stop - *(double *)start) * 1e3;
    return KN_OK;
}

/* ---------------------------------------------------------------- compute */

static bool cpu_supports_op(void *ctx, kn_op op) {
    (void)ctx;
    return (unsigned)op < KN_OP_COUNT && kn_op_impls[op].kernel != kern_none;
}

static kn_status cpu_node_eval(void *ctx, int index, const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    (void)ctx; (void)index;
    return kn_cpu_node_eval(n, in, out);
}

static kn_status cpu_contiguous(void *ctx, const char *fn, const kn_tensor *t, kn_tensor **out) {
    (void)ctx; (void)fn;
    return kn_tensor_is_contiguous(t) ? kn_tensor_alias(out, t) : kn_tensor_contiguous(out, t);
}

static kn_status cpu_optim_step(void *ctx, int index, kn_optim *o, float *param, const float *grad, float *state,
                                double lr, kn_dtype low_dt, void *low) {
    (void)ctx; (void)index;
    return kn_optim_step_low(o, param, grad, state, lr, low_dt, low);
}

static kn_status cpu_scale(void *ctx, int index, float *x, int64_t n, double s) {
    (void)ctx; (void)index;
    for (int64_t i = 0; i < n; i++) x[i] = (float)((double)x[i] * s);
    return KN_OK;
}

static kn_status cpu_clip_grad_norm(void *ctx, int index, float *grad, int64_t n, double max_norm, double *norm) {
    (void)ctx; (void)index;
    *norm = kn_clip_grad_norm(grad, n, max_norm);
    return KN_OK;
}

static kn_status cpu_profile_start(void *ctx, int index) {
    (void)ctx; (void)index;
    return kn_error(KN_ERR_UNSUPPORTED, "the cpu backend has no per-op profile (it is a GPU tool)");
}

static kn_status cpu_profile_report(void *ctx, FILE *f, FILE *tsv, double step_ms, int top, double *ops_ms) {
    (void)ctx; (void)f; (void)tsv; (void)step_ms; (void)top; (void)ops_ms;
    return kn_error(KN_ERR_UNSUPPORTED, "the cpu backend has no per-op profile (it is a GPU tool)");
}

const kn_device_backend kn_device_cpu_backend = {
    .name = "cpu",
    .type = KN_DEVICE_CPU,
    .ctx = NULL,
    .count = cpu_count,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy = cpu_memcpy,
    .fill = cpu_memset,
    .synchronize = cpu_synchronize,
    .mem_stats = cpu_mem_stats,
    .stream_new = cpu_stream_new,
    .stream_free = cpu_stream_free,
    .stream_sync = cpu_stream_sync,
    .stream_wait = cpu_stream_wait,
    .copy_async = cpu_copy_async,
    .event_new = cpu_event_new,
    .event_free = cpu_event_free,
    .event_record = cpu_event_record,
    .event_sync = cpu_stream_sync,
    .event_query = cpu_event_query,
    .event_elapsed = cpu_event_elapsed,
    .supports_op = cpu_supports_op,
    .node_eval = cpu_node_eval,
    .contiguous = cpu_contiguous,
    .optim_step = cpu_optim_step,
    .clip_grad_norm = cpu_clip_grad_norm,
    .profile_start = cpu_profile_start,
    .profile_report = cpu_profile_report,
    .scale = cpu_scale,
    .mem_reset_peak = cpu_mem_reset_peak,
};
