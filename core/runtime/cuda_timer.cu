/* cuda_timer.cu — a stopwatch of CUDA events on the default stream (kiln/cuda.h), for
 * benchmarks: start records an event, stop records a second one, waits for it and returns
 * the GPU time between them in milliseconds. Since kiln queues every kernel on the default
 * stream in program order, this is the device time of everything queued in between,
 * without the host's launch latency hidden behind it. */
#include "runtime/cuda_impl.h"

struct kn_cuda_timer {
    int device;
    cudaEvent_t start, stop;
};

extern "C" kn_status kn_cuda_timer_start(int device, kn_cuda_timer **out) {
    if (!out || device < 0) return kn_error(KN_ERR_ARG, "kn_cuda_timer_start: NULL out or device %d", device);
    *out = NULL;
    KN_CUDA_TRY(cudaSetDevice(device));
    kn_cuda_timer *t = (kn_cuda_timer *)kn_calloc(1, sizeof *t);
    if (!t) return kn_error(KN_ERR_OOM, "kn_cuda_timer_start: out of memory");
    t->device = device;
    cudaError_t e = cudaEventCreate(&t->start);
    if (e == cudaSuccess) {
        e = cudaEventCreate(&t->stop);
        if (e != cudaSuccess) cudaEventDestroy(t->start);
    }
    if (e == cudaSuccess) {
        e = cudaEventRecord(t->start, 0);
        if (e != cudaSuccess) { cudaEventDestroy(t->start); cudaEventDestroy(t->stop); }
    }
    if (e != cudaSuccess) {
        kn_free(t);
        (void)cudaGetLastError();
        return kn_error(KN_ERR_DEVICE, "kn_cuda_timer_start: CUDA events on device %d: %s (%s)", device,
                        cudaGetErrorString(e), cudaGetErrorName(e));
    }
    *out = t;
    return KN_OK;
}

extern "C" kn_status kn_cuda_timer_stop(kn_cuda_timer *t, double *ms) {
    if (!t || !ms) return kn_error(KN_ERR_ARG, "kn_cuda_timer_stop: NULL argument");
    float f = 0;
    cudaError_t e = cudaSetDevice(t->device);
    if (e == cudaSuccess) e = cudaEventRecord(t->stop, 0);
    if (e == cudaSuccess) e = cudaEventSynchronize(t->stop);
    if (e == cudaSuccess) e = cudaEventElapsedTime(&f, t->start, t->stop);
    cudaEventDestroy(t->start);
    cudaEventDestroy(t->stop);
    kn_free(t);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return kn_error(KN_ERR_DEVICE, "kn_cuda_timer_stop: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
    }
    *ms = (double)f;
    return KN_OK;
}
