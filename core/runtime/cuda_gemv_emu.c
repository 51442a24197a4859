/* cuda_gemv_emu.c — core/runtime/cuda_gemv.cu compiled as C11 for the CUDA emulator
 * (core/runtime/cuda_emu.h maps threadIdx, __shared__, __syncthreads, the shuffles and the
 * launch to the emulator), so the GPU's GEMV kernels run, and are tested, on any machine.
 * It also holds the plan (kn_gemv_plan, kn_gemv_refuses) the GPU's entry shares. Entries
 * in cuda_gemv.h. */
#include "runtime/cuda_gemv.cu"
