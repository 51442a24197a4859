/* storage.c — the table of storage backends and the checked entry points kn_device_*
 * (contracts in kiln/storage.h).
 *
 * One table indexed by kn_device_type holds a pointer to each storage backend built into
 * this binary. The CPU backend (storage_cpu.c) is always there. The CUDA backend
 * (storage_cuda.cu) is compiled only by nvcc; when kiln is built without it, its slot stays
 * NULL and every CUDA request fails with KN_ERR_UNSUPPORTED. This file is the only place
 * that knows that: the one #ifdef below leaves a whole backend out, no logic forks on it.
 *
 * Invariant: every kn_device_* function validates its kn_device through kn_device_check
 * before touching a backend, so backends only ever see an index in [0, count()). */
#include <stdlib.h>
#include <string.h>

#include "kiln/storage.h"

extern const kn_storage_backend kn_storage_cpu_backend;
#ifdef KN_HAVE_CUDA
extern const kn_storage_backend kn_storage_cuda_backend;
#endif

/* ORDER DEVICE_TYPE: one entry per kn_device_type. */
static const kn_storage_backend *const kn_storage_table[KN_DEVICE_TYPE_COUNT] = {
    &kn_storage_cpu_backend,
#ifdef KN_HAVE_CUDA
    &kn_storage_cuda_backend,
#else
    NULL,
#endif
};
static const char *const kn_device_type_names[KN_DEVICE_TYPE_COUNT] = {"cpu", "cuda"};

const kn_storage_backend *kn_storage_backend_get(kn_device_type type) {
    if ((int)type < 0 || type >= KN_DEVICE_TYPE_COUNT) return NULL;
    return kn_storage_table[type];
}

const char *kn_device_type_name(kn_device_type type) {
    if ((int)type < 0 || type >= KN_DEVICE_TYPE_COUNT) return "?";
    return kn_device_type_names[type];
}

const char *kn_device_str(kn_device dev, char *buf, size_t size) {
    if (!buf || size == 0) return buf;
    if (dev.type == KN_DEVICE_CPU && dev.index == 0)
        snprintf(buf, size, "cpu");
    else
        snprintf(buf, size, "%s:%d", kn_device_type_name(dev.type), dev.index);
    return buf;
}

bool kn_device_equal(kn_device a, kn_device b) { return a.type == b.type && a.index == b.index; }

int kn_device_count(kn_device_type type) {
    const kn_storage_backend *be = kn_storage_backend_get(type);
    if (!be) return 0;
    int n = be->count(be->ctx);
    return n < 0 ? 0 : n;
}

kn_status kn_device_parse(const char *s, kn_device *out) {
    if (!s || !out) return kn_error(KN_ERR_ARG, "kn_device_parse: NULL argument");
    *out = KN_CPU;
    if (!strcmp(s, "auto")) {
        if (kn_device_count(KN_DEVICE_CUDA) > 0) *out = (kn_device){KN_DEVICE_CUDA, 0};
        return KN_OK;
    }
    if (!strcmp(s, "cpu")) return KN_OK;
    if (!strcmp(s, "cuda")) {
        *out = (kn_device){KN_DEVICE_CUDA, 0};
        return KN_OK;
    }
    long idx = -1;
    if (!strncmp(s, "cuda:", 5) && s[5] >= '0' && s[5] <= '9' && strlen(s + 5) <= 4) {
        char *end = NULL;
        idx = strtol(s + 5, &end, 10);
        if (*end) idx = -1;
    }
    if (idx < 0 || idx > 1023)
        return kn_error(KN_ERR_ARG, "device '%s': expected auto, cpu, cuda or cuda:N", s);
    *out = (kn_device){KN_DEVICE_CUDA, (int)idx};
    return KN_OK;
}

kn_status kn_device_check(const char *fn, kn_device dev) {
    char ds[32];
    if (!fn) fn = "kn_device_check";
    if ((int)dev.type < 0 || dev.type >= KN_DEVICE_TYPE_COUNT)
        return kn_error(KN_ERR_ARG, "%s: device type %d is not a kn_device_type (0..%d)", fn, (int)dev.type,
                        KN_DEVICE_TYPE_COUNT - 1);
    if (dev.index < 0)
        return kn_error(KN_ERR_ARG, "%s: device index %d is negative", fn, dev.index);
    const kn_storage_backend *be = kn_storage_table[dev.type];
    if (!be)
        return kn_error(KN_ERR_UNSUPPORTED, "%s: device %s: kiln was built without %s (no %s backend)", fn,
                        kn_device_str(dev, ds, sizeof ds), dev.type == KN_DEVICE_CUDA ? "CUDA" : "it",
                        kn_device_type_name(dev.type));
    kn_clear_error();
    int n = be->count(be->ctx);
    if (n < 0) {
        /* The backend recorded why (the driver's message); prefix it with the caller. */
        char why[512];
        snprintf(why, sizeof why, "%s", kn_last_error());
        return kn_error(KN_ERR_DEVICE, "%s: device %s cannot be used: %s", fn, kn_device_str(dev, ds, sizeof ds),
                        why[0] ? why : "the backend reported no devices");
    }
    if (dev.index >= n)
        return kn_error(KN_ERR_DEVICE, "%s: device %s does not exist (%d %s device%s present)", fn,
                        kn_device_str(dev, ds, sizeof ds), n, be->name, n == 1 ? "" : "s");
    return KN_OK;
}

/* Re-record the backend's message prefixed with the caller's name. */
static kn_status kn_device_wrap(const char *fn, kn_device dev, kn_status st) {
    if (st == KN_OK) return st;
    char why[512], ds[32];
    snprintf(why, sizeof why, "%s", kn_last_error());
    return kn_error(st, "%s: on %s: %s", fn, kn_device_str(dev, ds, sizeof ds), why);
}

kn_status kn_device_alloc(kn_device dev, size_t nbytes, void **out) {
    if (!out) return kn_error(KN_ERR_ARG, "kn_device_alloc: out is NULL");
    KN_TRY(kn_device_check("kn_device_alloc", dev));
    const kn_storage_backend *be = kn_storage_table[dev.type];
    void *p = NULL;
    KN_TRY(kn_device_wrap("kn_device_alloc", dev, be->alloc(be->ctx, dev.index, nbytes, &p)));
    *out = p;
    return KN_OK;
}

void kn_device_free(kn_device dev, void *ptr, size_t nbytes) {
    const kn_storage_backend *be = kn_storage_backend_get(dev.type);
    if (!be || dev.index < 0) return;
    be->free(be->ctx, dev.index, ptr, nbytes);
}

kn_status kn_device_host_alloc(kn_device dev, size_t nbytes, void **out) {
    if (!out) return kn_error(KN_ERR_ARG, "kn_device_host_alloc: out is NULL");
    *out = NULL;
    KN_TRY(kn_device_check("kn_device_host_alloc", dev));
    const kn_storage_backend *be = kn_storage_table[dev.type];
    void *p = NULL;
    if (be->host_alloc) {
        KN_TRY(kn_device_wrap("kn_device_host_alloc", dev, be->host_alloc(be->ctx, dev.index, nbytes, &p)));
    } else if (!(p = kn_malloc(nbytes > 0 ? nbytes : 1))) {
        return kn_error(KN_ERR_OOM, "kn_device_host_alloc: out of host memory for %zu bytes", nbytes);
    }
    memset(p, 0, nbytes);
    *out = p;
    return KN_OK;
}

void kn_device_host_free(kn_device dev, void *ptr) {
    const kn_storage_backend *be = kn_storage_backend_get(dev.type);
    if (!ptr || !be) return;
    if (be->host_free) be->host_free(be->ctx, dev.index, ptr);
    else kn_free(ptr);
}

kn_status kn_device_memcpy(kn_device dst_dev, void *dst, kn_device src_dev, const void *src, size_t nbytes) {
    char d1[32], d2[32];
    KN_TRY(kn_device_check("kn_device_memcpy", dst_dev));
    KN_TRY(kn_device_check("kn_device_memcpy", src_dev));
    if (nbytes == 0) return KN_OK;
    if (!dst || !src) return kn_error(KN_ERR_ARG, "kn_device_memcpy: %s pointer is NULL for %zu bytes",
                                      !dst ? "dst" : "src", nbytes);
    bool dst_host = dst_dev.type == KN_DEVICE_CPU, src_host = src_dev.type == KN_DEVICE_CPU;
    if (dst_host && src_host) {
        memmove(dst, src, nbytes);
        return KN_OK;
    }
    if (!dst_host && !src_host && dst_dev.type != src_dev.type)
        return kn_error(KN_ERR_UNSUPPORTED, "kn_device_memcpy: no direct copy from %s to %s",
                        kn_device_str(src_dev, d2, sizeof d2), kn_device_str(dst_dev, d1, sizeof d1));
    kn_device dev = dst_host ? src_dev : dst_dev;
    const kn_storage_backend *be = kn_storage_table[dev.type];
    return kn_device_wrap("kn_device_memcpy", dev,
                          be->copy(be->ctx, dev.index, dst, !dst_host, src, !src_host, nbytes));
}

kn_status kn_device_memcpy_2d(kn_device dev, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                              size_t height) {
    KN_TRY(kn_device_check("kn_device_memcpy_2d", dev));
    if (width == 0 || height == 0) return KN_OK;
    if (!dst || !src || width > dpitch || width > spitch)
        return kn_error(KN_ERR_ARG, "kn_device_memcpy_2d: NULL pointer, or rows of %zu bytes wider than the pitches "
                        "%zu (dst) and %zu (src)", width, dpitch, spitch);
    const kn_storage_backend *be = kn_storage_table[dev.type];
    bool host = dev.type == KN_DEVICE_CPU;
    if (!host && be->copy_2d)
        return kn_device_wrap("kn_device_memcpy_2d", dev,
                              be->copy_2d(be->ctx, dev.index, dst, dpitch, src, spitch, width, height));
    for (size_t r = 0; r < height; r++) {
        char *d = (char *)dst + r * dpitch;
        const char *s = (const char *)src + r * spitch;
        if (host) memmove(d, s, width);
        else KN_TRY(kn_device_wrap("kn_device_memcpy_2d", dev, be->copy(be->ctx, dev.index, d, true, s, true, width)));
    }
    return KN_OK;
}

kn_status kn_device_memset(kn_device dev, void *ptr, int byte, size_t nbytes) {
    KN_TRY(kn_device_check("kn_device_memset", dev));
    if (nbytes == 0) return KN_OK;
    if (!ptr) return kn_error(KN_ERR_ARG, "kn_device_memset: ptr is NULL for %zu bytes", nbytes);
    const kn_storage_backend *be = kn_storage_table[dev.type];
    return kn_device_wrap("kn_device_memset", dev, be->fill(be->ctx, dev.index, ptr, byte, nbytes));
}

kn_status kn_device_synchronize(kn_device dev) {
    KN_TRY(kn_device_check("kn_device_synchronize", dev));
    const kn_storage_backend *be = kn_storage_table[dev.type];
    return kn_device_wrap("kn_device_synchronize", dev, be->synchronize(be->ctx, dev.index));
}

kn_status kn_device_mem_stats_get(kn_device dev, kn_device_mem_stats *out) {
    if (!out) return kn_error(KN_ERR_ARG, "kn_device_mem_stats_get: out is NULL");
    KN_TRY(kn_device_check("kn_device_mem_stats_get", dev));
    memset(out, 0, sizeof *out);
    const kn_storage_backend *be = kn_storage_table[dev.type];
    return kn_device_wrap("kn_device_mem_stats_get", dev, be->mem_stats(be->ctx, dev.index, out));
}

kn_status kn_device_mem_reset_peak(kn_device dev) {
    KN_TRY(kn_device_check("kn_device_mem_reset_peak", dev));
    const kn_storage_backend *be = kn_storage_table[dev.type];
    be->mem_reset_peak(be->ctx, dev.index);
    return KN_OK;
}

/* ---------------------------------------------------------------- streams and events */

struct kn_stream {
    kn_device dev;
    void *native;
};

struct kn_event {
    kn_device dev;
    void *native;
    bool recorded;
};

kn_status kn_stream_new(kn_device dev, kn_stream **out) {
    if (!out) return kn_error(KN_ERR_ARG, "kn_stream_new: out is NULL");
    *out = NULL;
    KN_TRY(kn_device_check("kn_stream_new", dev));
    kn_stream *s = kn_calloc(1, sizeof *s);
    if (!s) return kn_error(KN_ERR_OOM, "kn_stream_new: out of memory");
    const kn_storage_backend *be = kn_storage_table[dev.type];
    kn_status st = kn_device_wrap("kn_stream_new", dev, be->stream_new(be->ctx, dev.index, &s->native));
    if (st != KN_OK) { kn_free(s); return st; }
    s->dev = dev;
    *out = s;
    return KN_OK;
}

void kn_stream_free(kn_stream *s) {
    if (!s) return;
    const kn_storage_backend *be = kn_storage_table[s->dev.type];
    be->stream_free(be->ctx, s->dev.index, s->native);
    kn_free(s);
}

kn_device kn_stream_device(const kn_stream *s) { return s ? s->dev : KN_CPU; }

kn_status kn_stream_synchronize(kn_stream *s) {
    if (!s) return kn_error(KN_ERR_ARG, "kn_stream_synchronize: NULL stream (kn_device_synchronize waits for a device)");
    const kn_storage_backend *be = kn_storage_table[s->dev.type];
    return kn_device_wrap("kn_stream_synchronize", s->dev, be->stream_sync(be->ctx, s->dev.index, s->native));
}

/* An event that is there and recorded, else KN_ERR_ARG naming fn. */
static kn_status recorded(const char *fn, const kn_event *e) {
    if (!e) return kn_error(KN_ERR_ARG, "%s: NULL event", fn);
    if (!e->recorded) return kn_error(KN_ERR_ARG, "%s: the event was never recorded (kn_event_record it first)", fn);
    return KN_OK;
}

kn_status kn_stream_wait_event(kn_stream *s, const kn_event *e) {
    char d1[32], d2[32];
    KN_TRY(recorded("kn_stream_wait_event", e));
    if (s && !kn_device_equal(s->dev, e->dev))
        return kn_error(KN_ERR_ARG, "kn_stream_wait_event: the stream is on %s, the event on %s",
                        kn_device_str(s->dev, d1, sizeof d1), kn_device_str(e->dev, d2, sizeof d2));
    const kn_storage_backend *be = kn_storage_table[e->dev.type];
    return kn_device_wrap("kn_stream_wait_event", e->dev,
                          be->stream_wait(be->ctx, e->dev.index, s ? s->native : NULL, e->native));
}

kn_status kn_device_memcpy_async(kn_stream *s, kn_device dst_dev, void *dst, kn_device src_dev, const void *src,
                                 size_t nbytes) {
    char d1[32], d2[32];
    KN_TRY(kn_device_check("kn_device_memcpy_async", dst_dev));
    KN_TRY(kn_device_check("kn_device_memcpy_async", src_dev));
    bool dst_host = dst_dev.type == KN_DEVICE_CPU, src_host = src_dev.type == KN_DEVICE_CPU;
    kn_device dev = dst_host ? src_dev : dst_dev;
    if (!dst_host && !src_host && dst_dev.type != src_dev.type)
        return kn_error(KN_ERR_UNSUPPORTED, "kn_device_memcpy_async: no direct copy from %s to %s",
                        kn_device_str(src_dev, d2, sizeof d2), kn_device_str(dst_dev, d1, sizeof d1));
    if (s && s->dev.type != dev.type)
        return kn_error(KN_ERR_ARG, "kn_device_memcpy_async: a copy between %s and %s cannot run on a stream of %s",
                        kn_device_str(src_dev, d2, sizeof d2), kn_device_str(dst_dev, d1, sizeof d1),
                        kn_device_type_name(s->dev.type));
    if (nbytes == 0) return KN_OK;
    if (!dst || !src)
        return kn_error(KN_ERR_ARG, "kn_device_memcpy_async: %s pointer is NULL for %zu bytes", !dst ? "dst" : "src",
                        nbytes);
    if (s) dev = s->dev;
    const kn_storage_backend *be = kn_storage_table[dev.type];
    return kn_device_wrap("kn_device_memcpy_async", dev,
                          be->copy_async(be->ctx, dev.index, dst, !dst_host, src, !src_host, nbytes,
                                         s ? s->native : NULL));
}

kn_status kn_event_new(kn_device dev, kn_event **out) {
    if (!out) return kn_error(KN_ERR_ARG, "kn_event_new: out is NULL");
    *out = NULL;
    KN_TRY(kn_device_check("kn_event_new", dev));
    kn_event *e = kn_calloc(1, sizeof *e);
    if (!e) return kn_error(KN_ERR_OOM, "kn_event_new: out of memory");
    const kn_storage_backend *be = kn_storage_table[dev.type];
    kn_status st = kn_device_wrap("kn_event_new", dev, be->event_new(be->ctx, dev.index, &e->native));
    if (st != KN_OK) { kn_free(e); return st; }
    e->dev = dev;
    *out = e;
    return KN_OK;
}

void kn_event_free(kn_event *e) {
    if (!e) return;
    const kn_storage_backend *be = kn_storage_table[e->dev.type];
    be->event_free(be->ctx, e->dev.index, e->native);
    kn_free(e);
}

kn_status kn_event_record(kn_event *e, kn_stream *s) {
    char d1[32], d2[32];
    if (!e) return kn_error(KN_ERR_ARG, "kn_event_record: NULL event");
    if (s && !kn_device_equal(s->dev, e->dev))
        return kn_error(KN_ERR_ARG, "kn_event_record: the event is on %s, the stream on %s",
                        kn_device_str(e->dev, d1, sizeof d1), kn_device_str(s->dev, d2, sizeof d2));
    const kn_storage_backend *be = kn_storage_table[e->dev.type];
    KN_TRY(kn_device_wrap("kn_event_record", e->dev, be->event_record(be->ctx, e->dev.index, e->native,
                                                                      s ? s->native : NULL)));
    e->recorded = true;
    return KN_OK;
}

kn_status kn_event_synchronize(kn_event *e) {
    KN_TRY(recorded("kn_event_synchronize", e));
    const kn_storage_backend *be = kn_storage_table[e->dev.type];
    return kn_device_wrap("kn_event_synchronize", e->dev, be->event_sync(be->ctx, e->dev.index, e->native));
}

kn_status kn_event_query(kn_event *e, bool *done) {
    if (!done) return kn_error(KN_ERR_ARG, "kn_event_query: done is NULL");
    KN_TRY(recorded("kn_event_query", e));
    const kn_storage_backend *be = kn_storage_table[e->dev.type];
    return kn_device_wrap("kn_event_query", e->dev, be->event_query(be->ctx, e->dev.index, e->native, done));
}

kn_status kn_event_elapsed_ms(kn_event *start, kn_event *stop, double *ms) {
    char d1[32], d2[32];
    if (!ms) return kn_error(KN_ERR_ARG, "kn_event_elapsed_ms: ms is NULL");
    KN_TRY(recorded("kn_event_elapsed_ms (start)", start));
    KN_TRY(recorded("kn_event_elapsed_ms (stop)", stop));
    if (!kn_device_equal(start->dev, stop->dev))
        return kn_error(KN_ERR_ARG, "kn_event_elapsed_ms: start is on %s, stop on %s",
                        kn_device_str(start->dev, d1, sizeof d1), kn_device_str(stop->dev, d2, sizeof d2));
    const kn_storage_backend *be = kn_storage_table[start->dev.type];
    return kn_device_wrap("kn_event_elapsed_ms", start->dev,
                          be->event_elapsed(be->ctx, start->dev.index, start->native, stop->native, ms));
}
