/* cuda_flash_tc_emu.c — core/runtime/cuda_flash_tc.cu compiled as C11 for the CUDA emulator
 * (core/runtime/cuda_emu.h; the mma products are core/runtime/cuda_mma.h's emulated
 * kn_emu_mma), so the tensor-core flash attention kernels run, and are tested, on any
 * machine. Its entries are declared in cuda_flash_tc.h. */
#include "runtime/cuda_flash_tc.cu"
