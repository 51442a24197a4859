/* kiln/device.h — device backends: where tensor storage lives and how bytes move.
 *
 * A backend is a struct of function pointers plus a context pointer (like ggml's backends),
 * registered in one table indexed by kn_device_type. The CPU backend is always there; the
 * CUDA backend exists only when kiln was built with nvcc (KN_HAVE_CUDA), and reports
 * KN_ERR_DEVICE at run time when no GPU can be used. Code above this layer never #ifdefs on
 * CUDA: it asks the table.
 *
 * The functions below take a kn_device (type + index), validate it and dispatch:
 *   - a type outside kn_device_type, or a negative index: KN_ERR_ARG;
 *   - a backend left out of this build: KN_ERR_UNSUPPORTED ("built without CUDA");
 *   - a backend that is built but cannot run (no GPU, index past the device count, a failing
 *     driver call): KN_ERR_DEVICE with the driver's message, the call and file:line.
 * Every message starts with the name of the kn_device_* function that failed. */
#ifndef KILN_DEVICE_H
#define KILN_DEVICE_H

#include "kiln/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Memory figures of one device, in bytes of kiln allocations (not the driver's view). */
typedef struct kn_device_mem_stats {
    size_t current; /* bytes allocated now */
    size_t peak;    /* the most bytes allocated at once since the program started */
    int64_t allocs; /* number of allocations made */
} kn_device_mem_stats;

/* A device backend. Every member is required; `index` is the device's index, already
 * checked against count(). `nbytes` is passed to free so backends can keep exact stats. */
typedef struct kn_device_backend {
    const char *name;      /* "cpu", "cuda": the prefix of kn_device_str */
    kn_device_type type;   /* its slot in the table */
    void *ctx;             /* backend state, handed to every call */
    /* Number of usable devices (0 when none; the CPU backend says 1). On failure the
     * backend records the reason and returns a negative value. */
    int (*count)(void *ctx);
    kn_status (*alloc)(void *ctx, int index, size_t nbytes, void **out);
    void (*free)(void *ctx, int index, void *ptr, size_t nbytes);
    /* memcpy between host memory and this backend's memory; `dst_on_dev`/`src_on_dev` say
     * which side is device memory (both false is never asked of a non-CPU backend). */
    kn_status (*copy)(void *ctx, int index, void *dst, bool dst_on_dev, const void *src, bool src_on_dev,
                      size_t nbytes);
    kn_status (*fill)(void *ctx, int index, void *ptr, int byte, size_t nbytes); /* memset */
    kn_status (*synchronize)(void *ctx, int index);
    kn_status (*mem_stats)(void *ctx, int index, kn_device_mem_stats *out);
} kn_device_backend;

/* The registered backend of a device type, or NULL when it is not built in (or `type` is
 * out of range). */
const kn_device_backend *kn_device_backend_get(kn_device_type type);

/* "cpu", "cuda" ("?" when invalid). */
const char *kn_device_type_name(kn_device_type type);
/* "cpu", "cuda:1" into buf (always NUL-terminated); returns buf. */
const char *kn_device_str(kn_device dev, char *buf, size_t size);
bool kn_device_equal(kn_device a, kn_device b);
/* Number of usable devices of a type: 1 for the CPU, the GPU count for CUDA; 0 when the
 * backend is not built in or no device can be used (never negative). */
int kn_device_count(kn_device_type type);
/* KN_OK when dev can be used; the errors above otherwise. `fn` names the caller in the
 * message ("kn_tensor_empty_on: ..."). */
kn_status kn_device_check(const char *fn, kn_device dev);

/* Allocate nbytes on dev (nbytes == 0 is valid; *out may then be NULL for a GPU). CPU memory
 * comes from kn_malloc, so fault injection (kn_alloc_fail_after) reaches it: KN_ERR_OOM. */
kn_status kn_device_alloc(kn_device dev, size_t nbytes, void **out);
/* Release memory from kn_device_alloc; nbytes must be the size it was allocated with. */
void kn_device_free(kn_device dev, void *ptr, size_t nbytes);
/* Copy nbytes from src (on src_dev) to dst (on dst_dev): host<->device, device<->device
 * (same type), host<->host. Synchronous: the bytes are there when it returns. */
kn_status kn_device_memcpy(kn_device dst_dev, void *dst, kn_device src_dev, const void *src, size_t nbytes);
kn_status kn_device_memset(kn_device dev, void *ptr, int byte, size_t nbytes);
/* Wait for all work queued on dev. */
kn_status kn_device_synchronize(kn_device dev);
kn_status kn_device_mem_stats_get(kn_device dev, kn_device_mem_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* KILN_DEVICE_H */
