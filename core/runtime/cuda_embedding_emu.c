/* cuda_embedding_emu.c — core/runtime/cuda_embedding.cu compiled as C11 for the CUDA
 * emulator (core/runtime/cuda_emu.h maps threadIdx, __shared__, __syncthreads and the
 * launch to the emulator), so the GPU's embedding gradient kernels run, and are tested, on
 * any machine. Its entry is declared in cuda_embedding.h. */
#include "runtime/cuda_embedding.cu"
