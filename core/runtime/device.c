/* device.c — the table of device backends and the checked entry points kn_device_*.
 *
 * One table indexed by kn_device_type holds a pointer to each backend built into this
 * binary. The CPU backend (device_cpu.c) is always there. The CUDA backend
 * (device_cuda.cu) is compiled only by nvcc; when kiln is built without it, its slot stays
 * NULL and every CUDA request fails with KN_ERR_UNSUPPORTED. This file is the only place
 * that knows that: the one #ifdef below leaves a whole backend out, no logic forks on it.
 *
 * Invariant: every kn_device_* function validates its kn_device through kn_device_check
 * before touching a backend, so backends only ever see an index in [0, count()). */
#include <string.h>

#include "kiln/device.h"

extern const kn_device_backend kn_device_cpu_backend;
#ifdef KN_HAVE_CUDA
extern const kn_device_backend kn_device_cuda_backend;
#endif

/* ORDER DEVICE_TYPE: one entry per kn_device_type. */
static const kn_device_backend *const kn_device_table[KN_DEVICE_TYPE_COUNT] = {
    &kn_device_cpu_backend,
#ifdef KN_HAVE_CUDA
    &kn_device_cuda_backend,
#else
    NULL,
#endif
};
static const char *const kn_device_type_names[KN_DEVICE_TYPE_COUNT] = {"cpu", "cuda"};

const kn_device_backend *kn_device_backend_get(kn_device_type type) {
    if ((int)type < 0 || type >= KN_DEVICE_TYPE_COUNT) return NULL;
    return kn_device_table[type];
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
    const kn_device_backend *be = kn_device_backend_get(type);
    if (!be) return 0;
    int n = be->count(be->ctx);
    return n < 0 ? 0 : n;
}

kn_status kn_device_check(const char *fn, kn_device dev) {
    char ds[32];
    if (!fn) fn = "kn_device_check";
    if ((int)dev.type < 0 || dev.type >= KN_DEVICE_TYPE_COUNT)
        return kn_error(KN_ERR_ARG, "%s: device type %d is not a kn_device_type (0..%d)", fn, (int)dev.type,
                        KN_DEVICE_TYPE_COUNT - 1);
    if (dev.index < 0)
        return kn_error(KN_ERR_ARG, "%s: device index %d is negative", fn, dev.index);
    const kn_device_backend *be = kn_device_table[dev.type];
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
    const kn_device_backend *be = kn_device_table[dev.type];
    void *p = NULL;
    KN_TRY(kn_device_wrap("kn_device_alloc", dev, be->alloc(be->ctx, dev.index, nbytes, &p)));
    *out = p;
    return KN_OK;
}

void kn_device_free(kn_device dev, void *ptr, size_t nbytes) {
    const kn_device_backend *be = kn_device_backend_get(dev.type);
    if (!be || dev.index < 0) return;
    be->free(be->ctx, dev.index, ptr, nbytes);
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
    const kn_device_backend *be = kn_device_table[dev.type];
    return kn_device_wrap("kn_device_memcpy", dev,
                          be->copy(be->ctx, dev.index, dst, !dst_host, src, !src_host, nbytes));
}

kn_status kn_device_memset(kn_device dev, void *ptr, int byte, size_t nbytes) {
    KN_TRY(kn_device_check("kn_device_memset", dev));
    if (nbytes == 0) return KN_OK;
    if (!ptr) return kn_error(KN_ERR_ARG, "kn_device_memset: ptr is NULL for %zu bytes", nbytes);
    const kn_device_backend *be = kn_device_table[dev.type];
    return kn_device_wrap("kn_device_memset", dev, be->fill(be->ctx, dev.index, ptr, byte, nbytes));
}

kn_status kn_device_synchronize(kn_device dev) {
    KN_TRY(kn_device_check("kn_device_synchronize", dev));
    const kn_device_backend *be = kn_device_table[dev.type];
    return kn_device_wrap("kn_device_synchronize", dev, be->synchronize(be->ctx, dev.index));
}

kn_status kn_device_mem_stats_get(kn_device dev, kn_device_mem_stats *out) {
    if (!out) return kn_error(KN_ERR_ARG, "kn_device_mem_stats_get: out is NULL");
    KN_TRY(kn_device_check("kn_device_mem_stats_get", dev));
    const kn_device_backend *be = kn_device_table[dev.type];
    return kn_device_wrap("kn_device_mem_stats_get", dev, be->mem_stats(be->ctx, dev.index, out));
}
