/* device_cpu.c — the CPU device backend: host memory from kn_malloc, plain memcpy/memset.
 *
 * It counts bytes so kn_device_mem_stats_get works the same on every device. The counters
 * are C11 atomics: tensors may be created and freed from several threads. Because memory
 * comes from kn_malloc, the test-only fault injection (kn_alloc_fail_after) reaches tensor
 * storage, and allocation failures surface as KN_ERR_OOM. */
#include <stdatomic.h>
#include <string.h>

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
};
