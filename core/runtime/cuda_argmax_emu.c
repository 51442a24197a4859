/* cuda_argmax_emu.c — core/runtime/cuda_argmax.cu compiled as C11 for the CUDA emulator
 * (core/runtime/cuda_emu.h), so greedy decoding's GPU argmax runs, and is tested, on any
 * machine. Its entry is declared in cuda_argmax.h. */
#include "runtime/cuda_argmax.cu"
