/* kiln/storage.h — where a tensor's bytes live and how they move: devices, the storage
 * backends (memory, copies, streams, events) and their checked entry points kn_device_*.
 *
 * A storage backend is a struct of function pointers plus a context pointer, registered in
 * one table indexed by kn_device_type (core/storage/storage.c). The CPU backend
 * (storage_cpu.c: kn_malloc, memcpy) is always there; the CUDA backend (storage_cuda.cu: a
 * caching allocator over cudaMalloc, cudaMemcpy, CUDA streams and events) exists only when
 * kiln was built with nvcc (KN_HAVE_CUDA), and reports KN_ERR_DEVICE at run time when no
 * GPU can be used. Code above this layer never #ifdefs on CUDA: it asks the table.
 *
 * This is the layer below tensors (core/mk/layers.py): a kn_storage is allocated, copied
 * and freed here, so core/tensor/ needs nothing above it. What a device computes (the op
 * kernels, the optimizer) is its compute backend, kiln/device.h, in core/runtime/.
 *
 * The functions below take a kn_device (type + index), validate it and dispatch:
 *   - a type outside kn_device_type, or a negative index: KN_ERR_ARG;
 *   - a backend left out of this build: KN_ERR_UNSUPPORTED ("built without CUDA");
 *   - a backend that is built but cannot run (no GPU, index past the device count, a failing
 *     driver call): KN_ERR_DEVICE with the driver's message, the call and file:line.
 * Every message starts with the name of the kn_device_* function that failed. */
#ifndef KILN_STORAGE_H
#define KILN_STORAGE_H

#include "kiln/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kn_device_type { KN_DEVICE_CPU = 0, KN_DEVICE_CUDA, KN_DEVICE_TYPE_COUNT } kn_device_type;

typedef struct kn_device {
    kn_device_type type;
    int index; /* which GPU; 0 for the CPU */
} kn_device;

#define KN_CPU ((kn_device){KN_DEVICE_CPU, 0})

/* Memory figures of one device, in bytes of kiln allocations (not the driver's view). */
typedef struct kn_device_mem_stats {
    size_t current; /* bytes allocated now */
    size_t peak;    /* the most bytes allocated at once since the program started */
    int64_t allocs; /* number of allocations made */
    size_t peak_reserved; /* a caching allocator's most bytes held from the driver (0 on the CPU) */
} kn_device_mem_stats;

/* A storage backend. Every member is required; `index` is the device's index, already
 * checked against count(). `nbytes` is passed to free so backends can keep exact stats. */
typedef struct kn_storage_backend {
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
    /* Streams and events (see kn_stream below): native handles are the backend's own
     * (cudaStream_t, cudaEvent_t; on the CPU small records). stream NULL means the
     * device's default stream. */
    kn_status (*stream_new)(void *ctx, int index, void **out);
    void (*stream_free)(void *ctx, int index, void *stream);
    kn_status (*stream_sync)(void *ctx, int index, void *stream);
    kn_status (*stream_wait)(void *ctx, int index, void *stream, void *event);
    kn_status (*copy_async)(void *ctx, int index, void *dst, bool dst_on_dev, const void *src, bool src_on_dev,
                            size_t nbytes, void *stream);
    kn_status (*event_new)(void *ctx, int index, void **out);
    void (*event_free)(void *ctx, int index, void *event);
    kn_status (*event_record)(void *ctx, int index, void *event, void *stream);
    kn_status (*event_sync)(void *ctx, int index, void *event);
    kn_status (*event_query)(void *ctx, int index, void *event, bool *done);
    kn_status (*event_elapsed)(void *ctx, int index, void *start, void *stop, double *ms);
    /* mem_reset_peak: peak (and peak_reserved) := the current figures, to measure one phase */
    void (*mem_reset_peak)(void *ctx, int index);
    /* Optional (NULL: kn_device_memcpy_2d copies row by row with `copy`): height rows of
     * width bytes from src (rows spitch bytes apart) to dst (dpitch apart), both in this
     * device's memory, in stream order (a KV cache's new position, kiln/infer.h). */
    kn_status (*copy_2d)(void *ctx, int index, void *dst, size_t dpitch, const void *src, size_t spitch,
                         size_t width, size_t height);
    /* Optional (NULL: plain host memory from kn_malloc): host memory this device copies to and
     * from at full speed, asynchronously (CUDA: page-locked, cudaHostAlloc), and its release.
     * ZeRO-Offload keeps the optimizer state there (kiln/offload.h). */
    kn_status (*host_alloc)(void *ctx, int index, size_t nbytes, void **out);
    void (*host_free)(void *ctx, int index, void *ptr);
} kn_storage_backend;

/* The registered storage backend of a device type, or NULL when it is not built in (or
 * `type` is out of range). */
const kn_storage_backend *kn_storage_backend_get(kn_device_type type);

/* "cpu", "cuda" ("?" when invalid). */
const char *kn_device_type_name(kn_device_type type);
/* "cpu", "cuda:1" into buf (always NUL-terminated); returns buf. */
const char *kn_device_str(kn_device dev, char *buf, size_t size);
bool kn_device_equal(kn_device a, kn_device b);
/* Number of usable devices of a type: 1 for the CPU, the GPU count for CUDA; 0 when the
 * backend is not built in or no device can be used (never negative). */
int kn_device_count(kn_device_type type);
/* Parse a device name as the command line spells it: "cpu", "cuda" (= "cuda:0"), "cuda:N",
 * or "auto": the first GPU when one is usable, else the CPU. Anything else is KN_ERR_ARG
 * ("expected auto, cpu, cuda or cuda:N"). It does not check that the device exists
 * (kn_device_check does). */
kn_status kn_device_parse(const char *s, kn_device *out);
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
/* Copy height rows of width bytes from src to dst, both on dev, rows spitch and dpitch
 * bytes apart (width <= both pitches; the rows may not overlap): one call, where a
 * backend has a 2-D copy (cudaMemcpy2D). Ordered after the work queued on dev before it. */
kn_status kn_device_memcpy_2d(kn_device dev, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                              size_t height);
kn_status kn_device_memset(kn_device dev, void *ptr, int byte, size_t nbytes);
/* nbytes of HOST memory (zeroed) that dev copies to and from fastest: pinned (page-locked)
 * on a GPU, so kn_device_memcpy_async overlaps with compute and runs at the link's speed;
 * kn_malloc'd memory on the CPU (fault injection reaches it). Released with
 * kn_device_host_free(dev, ptr) (NULL is fine). KN_ERR_OOM when the host has no room. */
kn_status kn_device_host_alloc(kn_device dev, size_t nbytes, void **out);
void kn_device_host_free(kn_device dev, void *ptr);
/* Wait for all work queued on dev. */
kn_status kn_device_synchronize(kn_device dev);
kn_status kn_device_mem_stats_get(kn_device dev, kn_device_mem_stats *out);
/* Start a new peak: peak and peak_reserved become the current figures (a training run
 * measures its steps apart from its set-up). */
kn_status kn_device_mem_reset_peak(kn_device dev);

/* ---------------------------------------------------------------- streams and events
 *
 * A stream is an ordered queue of work on one device; an event marks a point in a stream,
 * to wait for it from the host, to make another stream wait for it, or to time the work
 * between two events. kiln's op kernels all run on each device's default stream, in
 * program order (NULL below means that stream); more streams are for overlapping copies
 * (and, later, communication) with compute.
 *
 * On a GPU a new stream is a blocking CUDA stream: its work is ordered after earlier work
 * on the default stream and before later work there, so the caching allocator may hand a
 * block freed by default-stream code to anything queued afterwards. Memory that work on
 * another stream still uses must not be freed before that work is done (synchronize the
 * stream, or record an event there and make the default stream wait for it).
 *
 * On the CPU every call finishes its work before it returns: a stream is only a token,
 * synchronizing and waiting return at once, and an event records the wall clock, so
 * elapsed time between two CPU events is host time.
 *
 * Errors: NULL handles or outputs, an event used before it was recorded, and events or
 * streams of two different devices are KN_ERR_ARG; the device errors are those above. */
typedef struct kn_stream kn_stream;
typedef struct kn_event kn_event;

kn_status kn_stream_new(kn_device dev, kn_stream **out);
void kn_stream_free(kn_stream *s); /* NULL is fine; waits for the stream's work first */
kn_device kn_stream_device(const kn_stream *s);
/* Wait on the host until all work queued on s is done. */
kn_status kn_stream_synchronize(kn_stream *s);
/* Work queued on s after this call starts only after the work before e's record (e
 * recorded on s's device). s NULL: the device's default stream (the device of e). */
kn_status kn_stream_wait_event(kn_stream *s, const kn_event *e);
/* kn_device_memcpy queued on s (NULL: the default stream of the device side): returns
 * before the bytes are there on a GPU; host memory must stay valid until then. */
kn_status kn_device_memcpy_async(kn_stream *s, kn_device dst_dev, void *dst, kn_device src_dev, const void *src,
                                 size_t nbytes);

kn_status kn_event_new(kn_device dev, kn_event **out);
void kn_event_free(kn_event *e); /* NULL is fine */
/* Mark the current end of s (NULL: the default stream of e's device). */
kn_status kn_event_record(kn_event *e, kn_stream *s);
/* Wait on the host until the work before e's record is done. */
kn_status kn_event_synchronize(kn_event *e);
/* *done: whether that work is done already (never waits). */
kn_status kn_event_query(kn_event *e, bool *done);
/* Milliseconds between two recorded events of one device (waits for stop). */
kn_status kn_event_elapsed_ms(kn_event *start, kn_event *stop, double *ms);

/* ---------------------------------------------------------------- CUDA memory
 * (declared in every build; defined where nvcc built core/storage/storage_cuda.cu) */

/* CUDA graphs (core/storage/storage_cuda.cu): kn_cuda_graph_begin starts capturing what kiln
 * queues on GPU `device` (kn_cuda_stream() is then the capture's stream; blocks freed during
 * the capture are held for the graph); kn_cuda_graph_end stops, and with ok instantiates the
 * graph (*exec) and hands over the held blocks (*hold), both released by kn_cuda_graph_free
 * (after the graph's last launch is done). kn_cuda_graph_launch replays on the legacy
 * default stream, in order with the rest of kiln's work. */
typedef struct kn_cuda_hold kn_cuda_hold;
void *kn_cuda_stream(void);
bool kn_cuda_capturing(void); /* a capture is in progress (kn_cuda_graph_begin .. _end) */
kn_status kn_cuda_graph_begin(int device);
kn_status kn_cuda_graph_end(bool ok, void **exec, kn_cuda_hold **hold);
kn_status kn_cuda_graph_launch(void *exec);
void kn_cuda_graph_free(void *exec, kn_cuda_hold *hold);
kn_status kn_cuda_copy_async(void *dst, const void *src, size_t nbytes);

/* The caching allocator of one GPU (core/storage/cuda_cache.c). */
typedef struct kn_cuda_mem_info {
    size_t current;       /* bytes of live kiln allocations */
    size_t peak;          /* the most at once */
    size_t reserved;      /* bytes held from cudaMalloc (live + cached) */
    size_t peak_reserved;
    size_t cached;        /* bytes in the free lists */
    int64_t allocs;       /* allocations served */
    int64_t hits;         /* of those, from the free lists (no cudaMalloc) */
    int64_t raw_allocs;   /* cudaMalloc calls */
    int64_t raw_frees;    /* cudaFree calls */
} kn_cuda_mem_info;

kn_status kn_cuda_mem_info_get(int device, kn_cuda_mem_info *out);
/* Give every cached block of a GPU back to the driver (cudaFree); *released (may be NULL)
 * receives the byte count. */
kn_status kn_cuda_empty_cache(int device, size_t *released);

#ifdef __cplusplus
}
#endif

#endif /* KILN_STORAGE_H */
