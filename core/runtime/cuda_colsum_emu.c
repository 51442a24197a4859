/* cuda_colsum_emu.c — core/runtime/cuda_colsum.cu compiled as C11 for the CUDA emulator
 * (core/runtime/cuda_emu.h), so the GPU's column reduction runs, and is tested, on any
 * machine. Its entries are declared in cuda_colsum.h. */
#include "runtime/cuda_colsum.cu"
