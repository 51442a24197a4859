/* cuda_roofline.cu — the GPU ceilings for `kiln roofline`: device-to-device copy bandwidth
 * (cudaMemcpy of 1 GiB, best of 5, counting read + write) and the cuBLAS matmul peaks at
 * 4096^3: fp32 with TF32 off (CUBLAS_COMPUTE_32F_PEDANTIC) and bf16 inputs with fp32
 * accumulation (cublasGemmEx, CUBLAS_COMPUTE_32F), best of 5 after a warm-up, timed with
 * CUDA events. Without a GPU it returns KN_ERR_DEVICE at once ("no CUDA device"), so the
 * CPU roofline goes on and says the GPU part was skipped. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wswitch-enum"
#include <cublas_v2.h>
#pragma GCC diagnostic pop

#include "runtime/cuda_impl.h"

extern "C" kn_status kn_cuda_ceilings(int device, double *copy_gbs, double *f32_tflops, double *bf16_tflops) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count <= device || device < 0) {
        cudaGetLastError();
        return kn_error(KN_ERR_DEVICE, "kn_cuda_ceilings: no CUDA device %d", device);
    }
    kn_status st = KN_OK;
    const int n = 4096;
    const size_t copy_bytes = (size_t)1 << 30;
    void *a = NULL, *b = NULL, *c = NULL, *x = NULL, *y = NULL;
    cublasHandle_t h = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    float ms, one = 1.0f, zero = 0.0f;
    double best;
    KNC_CUDA_GOTO(cudaSetDevice(device));
    KNC_CUDA_GOTO(cudaEventCreate(&e0));
    KNC_CUDA_GOTO(cudaEventCreate(&e1));
    KNC_CUDA_GOTO(cudaMalloc(&x, copy_bytes));
    KNC_CUDA_GOTO(cudaMalloc(&y, copy_bytes));
    KNC_CUDA_GOTO(cudaMemset(x, 0, copy_bytes));
    best = 0;
    for (int r = 0; r < 6; r++) {
        KNC_CUDA_GOTO(cudaEventRecord(e0));
        KNC_CUDA_GOTO(cudaMemcpy(y, x, copy_bytes, cudaMemcpyDeviceToDevice));
        KNC_CUDA_GOTO(cudaEventRecord(e1));
        KNC_CUDA_GOTO(cudaEventSynchronize(e1));
        KNC_CUDA_GOTO(cudaEventElapsedTime(&ms, e0, e1));
        if (r > 0 && 2.0 * (double)copy_bytes / (ms * 1e-3) > best) best = 2.0 * (double)copy_bytes / (ms * 1e-3);
    }
    *copy_gbs = best * 1e-9;
    KNC_CUDA_GOTO(cudaMalloc(&a, (size_t)n * n * 4));
    KNC_CUDA_GOTO(cudaMalloc(&b, (size_t)n * n * 4));
    KNC_CUDA_GOTO(cudaMalloc(&c, (size_t)n * n * 4));
    KNC_CUDA_GOTO(cudaMemset(a, 0, (size_t)n * n * 4));
    KNC_CUDA_GOTO(cudaMemset(b, 0, (size_t)n * n * 4));
    KNC_CUBLAS_GOTO(cublasCreate(&h));
    for (int prec = 0; prec < 2; prec++) {
        cudaDataType_t dt = prec == 0 ? CUDA_R_32F : CUDA_R_16BF;
        cublasComputeType_t ct = prec == 0 ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F;
        best = 0;
        for (int r = 0; r < 6; r++) {
            KNC_CUDA_GOTO(cudaEventRecord(e0));
            KNC_CUBLAS_GOTO(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, dt, n, b, dt, n, &zero, c,
                                        CUDA_R_32F, n, ct, CUBLAS_GEMM_DEFAULT));
            KNC_CUDA_GOTO(cudaEventRecord(e1));
            KNC_CUDA_GOTO(cudaEventSynchronize(e1));
            KNC_CUDA_GOTO(cudaEventElapsedTime(&ms, e0, e1));
            double fl = 2.0 * n * (double)n * n / (ms * 1e-3);
            if (r > 0 && fl > best) best = fl;
        }
        *(prec == 0 ? f32_tflops : bf16_tflops) = best * 1e-12;
    }
done:
    if (h) cublasDestroy(h);
    cudaFree(a), cudaFree(b), cudaFree(c), cudaFree(x), cudaFree(y);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    return st;
}
