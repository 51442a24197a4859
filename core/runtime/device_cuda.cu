/* device_cuda.cu — the CUDA device backend: cudaMalloc/cudaFree, cudaMemcpy, cudaMemset,
 * cudaDeviceSynchronize, and byte counters per GPU.
 *
 * Compiled only when nvcc is found (the Makefile then defines KN_HAVE_CUDA=1 and
 * device.c registers this backend). It is deliberately small: no streams, no caching
 * allocator (a later lab adds one). Every CUDA runtime call goes through KN_CUDA_TRY, which
 * turns a failure into KN_ERR_DEVICE with the call's text, file:line and the driver's
 * message — so a machine without a GPU reports, e.g.,
 *   "cudaGetDeviceCount(&n) failed at core/runtime/device_cuda.cu:40: no CUDA-capable
 *    device is detected (cudaErrorNoDevice)".
 * Copies use cudaMemcpyDefault (unified addressing), which works for every direction. */
#include <atomic>

#include <cuda_runtime.h>

#include "kiln/device.h"

#define KN_CUDA_MAX_DEVICES 64

/* Run a CUDA runtime call; on failure record KN_ERR_DEVICE and return it. */
#define KN_CUDA_TRY(call)                                                                          \
    do {                                                                                           \
        cudaError_t kn_cu_e_ = (call);                                                             \
        if (kn_cu_e_ != cudaSuccess) {                                                             \
            (void)cudaGetLastError();                                                              \
            return kn_error(KN_ERR_DEVICE, "%s failed at %s:%d: %s (%s)", #call, __FILE__, __LINE__, \
                            cudaGetErrorString(kn_cu_e_), cudaGetErrorName(kn_cu_e_));             \
        }                                                                                          \
    } while (0)

/* The same for calls whose failure can only be reported (in free paths). */
#define KN_CUDA_WARN(call)                                                                            \
    do {                                                                                              \
        cudaError_t kn_cu_e_ = (call);                                                                \
        if (kn_cu_e_ != cudaSuccess) {                                                                \
            (void)cudaGetLastError();                                                                 \
            kn_log(KN_LOG_WARN, "%s failed at %s:%d: %s (%s)", #call, __FILE__, __LINE__,             \
                   cudaGetErrorString(kn_cu_e_), cudaGetErrorName(kn_cu_e_));                         \
        }                                                                                             \
    } while (0)

static std::atomic<size_t> kn_cuda_current[KN_CUDA_MAX_DEVICES], kn_cuda_peak[KN_CUDA_MAX_DEVICES];
static std::atomic<int64_t> kn_cuda_allocs[KN_CUDA_MAX_DEVICES];

static kn_status cuda_count_status(int *out) {
    int n = 0;
    KN_CUDA_TRY(cudaGetDeviceCount(&n));
    *out = n < KN_CUDA_MAX_DEVICES ? n : KN_CUDA_MAX_DEVICES;
    return KN_OK;
}

static int cuda_count(void *ctx) {
    (void)ctx;
    int n = 0;
    return cuda_count_status(&n) == KN_OK ? n : -1;
}

static kn_status cuda_alloc(void *ctx, int index, size_t nbytes, void **out) {
    (void)ctx;
    void *p = nullptr;
    KN_CUDA_TRY(cudaSetDevice(index));
    if (nbytes > 0) KN_CUDA_TRY(cudaMalloc(&p, nbytes));
    size_t now = kn_cuda_current[index].fetch_add(nbytes) + nbytes;
    size_t peak = kn_cuda_peak[index].load();
    while (now > peak && !kn_cuda_peak[index].compare_exchange_weak(peak, now)) {
    }
    kn_cuda_allocs[index].fetch_add(1);
    *out = p;
    return KN_OK;
}

static void cuda_free(void *ctx, int index, void *ptr, size_t nbytes) {
    (void)ctx;
    kn_cuda_current[index].fetch_sub(nbytes);
    if (!ptr) return;
    KN_CUDA_WARN(cudaSetDevice(index));
    KN_CUDA_WARN(cudaFree(ptr));
}

static kn_status cuda_copy(void *ctx, int index, void *dst, bool dst_on_dev, const void *src, bool src_on_dev,
                           size_t nbytes) {
    (void)ctx; (void)dst_on_dev; (void)src_on_dev;
    KN_CUDA_TRY(cudaSetDevice(index));
    KN_CUDA_TRY(cudaMemcpy(dst, src, nbytes, cudaMemcpyDefault));
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
    out->current = kn_cuda_current[index].load();
    out->peak = kn_cuda_peak[index].load();
    out->allocs = kn_cuda_allocs[index].load();
    return KN_OK;
}

/* Positional, in the order of kn_device_backend's members (C++17 has no designators). */
extern "C" const kn_device_backend kn_device_cuda_backend = {
    "cuda", KN_DEVICE_CUDA, nullptr, cuda_count, cuda_alloc, cuda_free,
    cuda_copy, cuda_fill, cuda_synchronize, cuda_mem_stats,
};
