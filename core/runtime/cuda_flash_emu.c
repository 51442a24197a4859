/* cuda_flash_emu.c — core/runtime/cuda_flash.cu compiled as C11 for the CUDA emulator
 * (core/runtime/cuda_emu.h maps threadIdx, __shared__, __syncthreads and the launch to
 * the emulator), so the GPU's flash attention kernels run, and are tested, on any machine.
 * Its entries are declared in cuda_flash.h. */
#include "runtime/cuda_flash.cu"
