/* storage_cuda.cu — the CUDA storage backend (kiln/storage.h): memory from a caching
 * allocator over cudaMalloc/cudaFree, cudaMemcpy, cudaMemset, cudaDeviceSynchronize, byte
 * counters per GPU, CUDA streams and events, and the capture of CUDA graphs (which holds
 * the blocks freed while it records).
 *
 * Compiled only when nvcc is found (the Makefile then defines KN_HAVE_CUDA=1 and
 * storage.c registers this backend). Every CUDA runtime call goes through KN_CUDA_TRY
 * (storage/cuda_check.h), which turns a failure into KN_ERR_DEVICE with the call's text, file:line
 * and the driver's message — so a machine without a GPU reports, e.g.,
 *   "cudaGetDeviceCount(&n) failed at core/storage/storage_cuda.cu:40: no CUDA-capable
 *    device is detected (cudaErrorNoDevice)".
 *
 * Allocation: one kn_cache (cuda_cache.c) per GPU, created on first use, with cudaMalloc
 * and cudaFree as its raw allocator. Freed blocks go back to size-class free lists and are
 * reused, so a training step that repeats the same allocations calls cudaMalloc only in
 * its first step. Reusing a block right after its previous owner freed it is safe without
 * any event because every kernel and copy runs on the default stream, in order: work that
 * used the old contents is queued before work that uses the new ones.
 * Copies use cudaMemcpyDefault (unified addressing), which works for every direction. */
#include <execinfo.h>
#include <stdio.h>
#include <stdlib.h>
#include <mutex>

#include "kiln/storage.h"
#include "storage/cuda_cache.h"
#include "storage/cuda_check.h"

#define KN_CUDA_MAX_DEVICES 64

static kn_cache *kn_cuda_caches[KN_CUDA_MAX_DEVICES];
static std::mutex kn_cuda_caches_mu;

static kn_status cuda_raw_alloc(void *ctx, size_t nbytes, void **out) {
    int index = (int)(intptr_t)ctx;
    KN_CUDA_TRY(cudaSetDevice(index));
    KN_CUDA_TRY(cudaMalloc(out, nbytes));
    return KN_OK;
}

static void cuda_raw_free(void *ctx, void *ptr, size_t nbytes) {
    (void)nbytes;
    KN_CUDA_WARN(cudaSetDevice((int)(intptr_t)ctx));
    KN_CUDA_WARN(cudaFree(ptr));
}

/* The cache of GPU index (created on first use); NULL only when out of host memory. */
static kn_cache *cuda_cache(int index) {
    std::lock_guard<std::mutex> lock(kn_cuda_caches_mu);
    if (!kn_cuda_caches[index]) {
        kn_cache_raw raw = {(void *)(intptr_t)index, cuda_raw_alloc, cuda_raw_free};
        if (kn_cache_new(&kn_cuda_caches[index], raw) != KN_OK) return nullptr;
    }
    return kn_cuda_caches[index];
}

static kn_status cuda_count_status(int *out) {
    int n = 0;
    KN_CUDA_TRY(cudaGetDeviceCount(&n));
    n = n < KN_CUDA_MAX_DEVICES ? n : KN_CUDA_MAX_DEVICES;
    for (int i = 0; i < n; i++) { /* the architectures the Makefile builds for (CUDA_ARCH): sm_80, sm_90 */
        cudaDeviceProp pr;
        KN_CUDA_TRY(cudaGetDeviceProperties(&pr, i));
        if (pr.major < 8)
            return kn_error(KN_ERR_DEVICE, "GPU %d (%s) has compute capability %d.%d; kiln's kernels are built for 8.0 "
                            "and 9.0 (A100, H100 and later): use --device cpu, or add the architecture to CUDA_ARCH and "
                            "rebuild", i, pr.name, pr.major, pr.minor);
    }
    *out = n;
    return KN_OK;
}

static int cuda_count(void *ctx) {
    (void)ctx;
    int n = 0;
    return cuda_count_status(&n) == KN_OK ? n : -1;
}

/* KILN_CUDA_ALLOC_TRACE=MIB: every allocation of at least MIB MiB is printed to stderr with
 * the bytes live after it and the call stack that asked (the symbols need the executable's
 * -rdynamic, which kiln's link has): the way to find who holds memory a memory plan does
 * not account for. Read once. */
static double knc_alloc_trace_mib(void) {
    static double mib = -2;
    if (mib == -2) {
        const char *s = getenv("KILN_CUDA_ALLOC_TRACE");
        mib = s && *s ? atof(s) : -1;
    }
    return mib;
}

static kn_status cuda_alloc(void *ctx, int index, size_t nbytes, void **out) {
    (void)ctx;
    kn_cache *c = cuda_cache(index);
    if (!c) return kn_error(KN_ERR_OOM, "cuda_alloc: out of host memory for the allocator of cuda:%d", index);
    kn_status st = kn_cache_alloc(c, nbytes, out);
    double trace = knc_alloc_trace_mib();
    if (st == KN_OK && trace >= 0 && (double)nbytes >= trace * 1048576.0) {
        kn_cache_stats cs = kn_cache_get_stats(c);
        fprintf(stderr, "kiln: cuda:%d allocates %.1f MiB (%.1f MiB live after; peak %.1f MiB), asked by:\n", index,
                (double)nbytes / 1048576.0, (double)cs.current / 1048576.0, (double)cs.peak / 1048576.0);
        void *frames[16];
        backtrace_symbols_fd(frames, backtrace(frames, 16), 2);
    }
    return st;
}

/* ---- CUDA graphs
 *
 * A capture queues kiln's work on a stream of its own (knc_stream; the legacy default
 * stream cannot be captured) and records it instead of running it. The graph keeps the
 * addresses it was captured with, so every block the captured work touches must stay the
 * graph's while it lives: during a capture, a freed block is held (kn_cuda_hold), not put
 * back in the cache where other work could take it, and the program that owns the graph
 * releases the hold when it frees the graph. Relaxed capture mode lets a cache miss call
 * cudaMalloc during the capture. */
cudaStream_t knc_stream = 0;

struct kn_cuda_hold {
    int device;
    size_t n, cap;
    struct held { void *ptr; size_t nbytes; } *blocks;
};

static kn_cuda_hold *knc_hold; /* the capture in progress, or NULL */
static cudaStream_t knc_capture_streams[KN_CUDA_MAX_DEVICES];

static void cuda_free(void *ctx, int index, void *ptr, size_t nbytes) {
    (void)ctx;
    if (!ptr) return;
    if (knc_hold && knc_hold->device == index) {
        if (knc_hold->n == knc_hold->cap) {
            size_t cap = knc_hold->cap ? 2 * knc_hold->cap : 64;
            void *b = kn_realloc(knc_hold->blocks, cap * sizeof *knc_hold->blocks);
            if (b) { knc_hold->blocks = (kn_cuda_hold::held *)b; knc_hold->cap = cap; }
        }
        if (knc_hold->n < knc_hold->cap) { knc_hold->blocks[knc_hold->n++] = {ptr, nbytes}; return; }
        /* out of host memory for the list: the block leaks rather than being reused */
        kn_log(KN_LOG_WARN, "CUDA graph capture: out of host memory; a %zu-byte block is leaked", nbytes);
        return;
    }
    kn_cache_free(cuda_cache(index), ptr, nbytes);
}

extern "C" void *kn_cuda_stream(void) { return (void *)knc_stream; }
extern "C" bool kn_cuda_capturing(void) { return knc_hold != NULL; }

extern "C" kn_status kn_cuda_graph_begin(int device) {
    if (knc_hold) return kn_error(KN_ERR_ARG, "kn_cuda_graph_begin: a capture is already in progress");
    if (device < 0 || device >= KN_CUDA_MAX_DEVICES) return kn_error(KN_ERR_ARG, "kn_cuda_graph_begin: bad GPU %d", device);
    KN_CUDA_TRY(cudaSetDevice(device));
    if (!knc_capture_streams[device]) KN_CUDA_TRY(cudaStreamCreateWithFlags(&knc_capture_streams[device], cudaStreamNonBlocking));
    kn_cuda_hold *h = (kn_cuda_hold *)kn_calloc(1, sizeof *h);
    if (!h) return kn_error(KN_ERR_OOM, "kn_cuda_graph_begin: out of memory");
    h->device = device;
    /* what the legacy stream queued before the capture is done before the captured work */
    KN_CUDA_TRY(cudaDeviceSynchronize());
    cudaError_t e = cudaStreamBeginCapture(knc_capture_streams[device], cudaStreamCaptureModeRelaxed);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        kn_free(h);
        return kn_error(KN_ERR_DEVICE, "cudaStreamBeginCapture failed: %s", cudaGetErrorString(e));
    }
    knc_hold = h;
    knc_stream = knc_capture_streams[device];
    return KN_OK;
}

extern "C" kn_status kn_cuda_graph_end(bool ok, void **exec, kn_cuda_hold **hold) {
    *exec = NULL;
    *hold = knc_hold;
    if (!knc_hold) return kn_error(KN_ERR_ARG, "kn_cuda_graph_end: no capture in progress");
    cudaStream_t s = knc_stream;
    knc_stream = 0;
    knc_hold = NULL;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(s, &g);
    if (e != cudaSuccess || !ok) {
        (void)cudaGetLastError();
        if (g) cudaGraphDestroy(g);
        return ok ? kn_error(KN_ERR_DEVICE, "cudaStreamEndCapture failed: %s (a call during the capture that a "
                             "graph cannot hold, e.g. a synchronous copy)", cudaGetErrorString(e))
                  : KN_OK;
    }
    cudaGraphExec_t x = NULL;
    e = cudaGraphInstantiate(&x, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return kn_error(KN_ERR_DEVICE, "cudaGraphInstantiate failed: %s", cudaGetErrorString(e));
    }
    *exec = (void *)x;
    return KN_OK;
}

extern "C" kn_status kn_cuda_graph_launch(void *exec) {
    KN_CUDA_TRY(cudaGraphLaunch((cudaGraphExec_t)exec, 0));
    return KN_OK;
}

extern "C" void kn_cuda_graph_free(void *exec, kn_cuda_hold *hold) {
    if (exec) KN_CUDA_WARN(cudaGraphExecDestroy((cudaGraphExec_t)exec));
    if (!hold) return;
    /* the graph's last launch may still run: wait before its blocks can be reused */
    KN_CUDA_WARN(cudaDeviceSynchronize());
    for (size_t i = 0; i < hold->n; i++) kn_cache_free(cuda_cache(hold->device), hold->blocks[i].ptr, hold->blocks[i].nbytes);
    kn_free(hold->blocks);
    kn_free(hold);
}

/* A device-to-device copy queued on kiln's stream (a graph's input refreshed before a launch). */
extern "C" kn_status kn_cuda_copy_async(void *dst, const void *src, size_t nbytes) {
    KN_CUDA_TRY(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, knc_stream));
    return KN_OK;
}

static kn_status cuda_copy(void *ctx, int index, void *dst, bool dst_on_dev, const void *src, bool src_on_dev,
                           size_t nbytes) {
    (void)ctx; (void)dst_on_dev; (void)src_on_dev;
    KN_CUDA_TRY(cudaSetDevice(index));
    KN_CUDA_TRY(cudaMemcpy(dst, src, nbytes, cudaMemcpyDefault));
    return KN_OK;
}

static kn_status cuda_copy_2d(void *ctx, int index, void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height) {
    (void)ctx;
    KN_CUDA_TRY(cudaSetDevice(index));
    KN_CUDA_TRY(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDeviceToDevice, knc_stream));
    return KN_OK;
}

static kn_status cuda_fill(void *ctx, int index, void *ptr, int byte, size_t nbytes) {
    (void)ctx;
    KN_CUDA_TRY(cudaSetDevice(index));
    KN_CUDA_TRY(cudaMemset(ptr, byte, nbytes));
    KN_CUDA_TRY(cudaDeviceSynchronize());
    return KN_OK;
}

static kn_status cuda_synchronize(void *ctx, int index) {
    (void)ctx;
    KN_CUDA_TRY(cudaSetDevice(index));
    KN_CUDA_TRY(cudaDeviceSynchronize());
    return KN_OK;
}

static kn_status cuda_mem_stats(void *ctx, int index, kn_device_mem_stats *out) {
    (void)ctx;
    kn_cache_stats s = kn_cache_get_stats(cuda_cache(index));
    out->current = s.current;
    out->peak = s.peak;
    out->allocs = s.allocs;
    out->peak_reserved = s.peak_reserved;
    return KN_OK;
}

static void cuda_mem_reset_peak(void *, int index) { kn_cache_reset_peak(cuda_cache(index)); }

/* Streams: blocking CUDA streams (ordered with the legacy default stream, which NULL
 * means); events with timing. cudaEventQuery's cudaErrorNotReady is "not done", not an
 * error. Freeing a stream waits for its work, so memory it used can be freed after. */
static kn_status cuda_stream_new(void *ctx, int index, void **out) {
    (void)ctx;
    cudaStream_t s = nullptr;
    KN_CUDA_TRY(cudaSetDevice(index));
    KN_CUDA_TRY(cudaStreamCreate(&s));
    *out = (void *)s;
    return KN_OK;
}

static void cuda_stream_free(void *ctx, int index, void *stream) {
    (void)ctx;
    KN_CUDA_WARN(cudaSetDevice(index));
    KN_CUDA_WARN(cudaStreamSynchronize((cudaStream_t)stream));
    KN_CUDA_WARN(cudaStreamDestroy((cudaStream_t)stream));
}

static kn_status cuda_stream_sync(void *ctx, int index, void *stream) {
    (void)ctx;
    KN_CUDA_TRY(cudaSetDevice(index));
    KN_CUDA_TRY(cudaStreamSynchronize((cudaStream_t)stream));
    return KN_OK;
}

static kn_status cuda_stream_wait(void *ctx, int index, void *stream, void *event) {
    (void)ctx;
    KN_CUDA_TRY(cudaSetDevice(index));
    KN_CUDA_TRY(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0));
    return KN_OK;
}

/* Page-locked host memory (ZeRO-Offload's optimizer state): the DMA engines read and write it
 * directly, so copies from and to it are asynchronous and run at the link's bandwidth. */
static kn_status cuda_host_alloc(void *ctx, int index, size_t nbytes, void **out) {
    (void)ctx;
    KN_CUDA_TRY(cudaSetDevice(index));
    KN_CUDA_TRY(cudaHostAlloc(out, nbytes > 0 ? nbytes : 1, cudaHostAllocDefault));
    return KN_OK;
}

static void cuda_host_free(void *ctx, int index, void *ptr) {
    (void)ctx;
    KN_CUDA_WARN(cudaSetDevice(index));
    KN_CUDA_WARN(cudaFreeHost(ptr));
}

static kn_status cuda_copy_async(void *ctx, int index, void *dst, bool dst_on_dev, const void *src, bool src_on_dev,
                                 size_t nbytes, void *stream) {
    (void)ctx; (void)dst_on_dev; (void)src_on_dev;
    KN_CUDA_TRY(cudaSetDevice(index));
    KN_CUDA_TRY(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, (cudaStream_t)stream));
    return KN_OK;
}

static kn_status cuda_event_new(void *ctx, int index, void **out) {
    (void)ctx;
    cudaEvent_t e = nullptr;
    KN_CUDA_TRY(cudaSetDevice(index));
    KN_CUDA_TRY(cudaEventCreate(&e));
    *out = (void *)e;
    return KN_OK;
}

static void cuda_event_free(void *ctx, int index, void *event) {
    (void)ctx;
    KN_CUDA_WARN(cudaSetDevice(index));
    KN_CUDA_WARN(cudaEventDestroy((cudaEvent_t)event));
}

static kn_status cuda_event_record(void *ctx, int index, void *event, void *stream) {
    (void)ctx;
    KN_CUDA_TRY(cudaSetDevice(index));
    KN_CUDA_TRY(cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream));
    return KN_OK;
}

static kn_status cuda_event_sync(void *ctx, int index, void *event) {
    (void)ctx;
    KN_CUDA_TRY(cudaSetDevice(index));
    KN_CUDA_TRY(cudaEventSynchronize((cudaEvent_t)event));
    return KN_OK;
}

static kn_status cuda_event_query(void *ctx, int index, void *event, bool *done) {
    (void)ctx;
    KN_CUDA_TRY(cudaSetDevice(index));
    cudaError_t e = cudaEventQuery((cudaEvent_t)event);
    if (e == cudaErrorNotReady) {
        (void)cudaGetLastError();
        *done = false;
        return KN_OK;
    }
    KN_CUDA_TRY(e);
    *done = true;
    return KN_OK;
}

static kn_status cuda_event_elapsed(void *ctx, int index, void *start, void *stop, double *ms) {
    (void)ctx;
    float f = 0;
    KN_CUDA_TRY(cudaSetDevice(index));
    KN_CUDA_TRY(cudaEventSynchronize((cudaEvent_t)stop));
    KN_CUDA_TRY(cudaEventElapsedTime(&f, (cudaEvent_t)start, (cudaEvent_t)stop));
    *ms = (double)f;
    return KN_OK;
}

/* Positional, in the order of kn_storage_backend's members (C++17 has no designators). */
extern "C" const kn_storage_backend kn_storage_cuda_backend = {
    "cuda", KN_DEVICE_CUDA, nullptr, cuda_count, cuda_alloc, cuda_free,
    cuda_copy, cuda_fill, cuda_synchronize, cuda_mem_stats,
    cuda_stream_new, cuda_stream_free, cuda_stream_sync, cuda_stream_wait, cuda_copy_async,
    cuda_event_new, cuda_event_free, cuda_event_record, cuda_event_sync, cuda_event_query, cuda_event_elapsed,
    cuda_mem_reset_peak, cuda_copy_2d, cuda_host_alloc, cuda_host_free,
};


extern "C" kn_status kn_cuda_mem_info_get(int device, kn_cuda_mem_info *out) {
    if (!out) return kn_error(KN_ERR_ARG, "kn_cuda_mem_info_get: out is NULL");
    KN_TRY(kn_device_check("kn_cuda_mem_info_get", kn_device{KN_DEVICE_CUDA, device}));
    kn_cache_stats s = kn_cache_get_stats(cuda_cache(device));
    *out = kn_cuda_mem_info{s.current, s.peak, s.reserved, s.peak_reserved, s.cached,
                            s.allocs, s.hits, s.raw_allocs, s.raw_frees};
    return KN_OK;
}

extern "C" kn_status kn_cuda_empty_cache(int device, size_t *released) {
    KN_TRY(kn_device_check("kn_cuda_empty_cache", kn_device{KN_DEVICE_CUDA, device}));
    KN_CUDA_TRY(cudaSetDevice(device));
    KN_CUDA_TRY(cudaDeviceSynchronize()); /* no queued kernel may still use a cached block */
    size_t n = kn_cache_empty(cuda_cache(device));
    if (released) *released = n;
    return KN_OK;
}
