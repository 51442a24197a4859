/* cuda_check.h — the checks of every CUDA runtime call (nvcc only): a failure becomes
 * KN_ERR_DEVICE naming the call, file:line and CUDA's message. Used by the CUDA storage
 * backend (storage_cuda.cu) and, through runtime/cuda_impl.h, by every CUDA kernel file. */
#ifndef KILN_CUDA_CHECK_H
#define KILN_CUDA_CHECK_H

#include <cuda_runtime.h>

#include "kiln/base.h"

/* KN_OK for cudaSuccess; else KN_ERR_DEVICE naming the call, file:line and CUDA's message
 * (the sticky last error cleared): what every CUDA check below reports. */
static inline kn_status knc_cuda_check(cudaError_t e, const char *call, const char *file, int line) {
    if (e == cudaSuccess) return KN_OK;
    (void)cudaGetLastError();
    return kn_error(KN_ERR_DEVICE, "%s failed at %s:%d: %s (%s)", call, file, line, cudaGetErrorString(e),
                    cudaGetErrorName(e));
}

/* Run a CUDA runtime call; on failure record KN_ERR_DEVICE and return it. */
#define KN_CUDA_TRY(call) KN_TRY(knc_cuda_check((call), #call, __FILE__, __LINE__))

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

/* For functions that own resources to release: a CUDA runtime call whose failure sets the
 * caller's `kn_status st` (knc_cuda_check's error) and jumps to its `done:` label. */
#define KNC_CUDA_GOTO(call)                                                                           \
    do {                                                                                              \
        if ((st = knc_cuda_check((call), #call, __FILE__, __LINE__)) != KN_OK) goto done;             \
    } while (0)

#endif /* KILN_CUDA_CHECK_H */
