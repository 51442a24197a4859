/* storage_cpu.c — the CPU storage backend (kiln/storage.h): host memory from kn_malloc,
 * plain memcpy/memset, streams that are tokens and events that record the wall clock.
 *
 * It counts bytes so kn_device_mem_stats_get works the same on every device. The counters
 * are C11 atomics: tensors may be created and freed from several threads. Because memory
 * comes from kn_malloc, the test-only fault injection (kn_alloc_fail_after) reaches tensor
 * storage, and allocation failures surface as KN_ERR_OOM. */
#include <stdatomic.h>
#include <string.h>

#include "kiln/storage.h"

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

const kn_storage_backend kn_storage_cpu_backend = {
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
    .mem_reset_peak = cpu_mem_reset_peak,
};
