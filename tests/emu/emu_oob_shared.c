/* emu_oob_shared.c: a kernel for test_emu_checks.c whose last thread writes one element
 * past its __shared__ array. Its own file, linked last, so that its array is the last of the
 * executable's shared memory (the kn_emu_shared section): the write leaves the block's shared
 * memory, which is what the emulator (as compute-sanitizer) can see. Compiled with the
 * emulator's access hooks (core/emu.mk). */
#include "runtime/cuda_emu.h"

void emu_shift_left(void *p);

__global__ void emu_shift_left(void *p)
{
    float *out = p;
    __shared__ float tile[64];
    unsigned t = threadIdx.x;
    tile[t + 1] = (float)t; /* thread 63 writes tile[64]: out of bounds */
    __syncthreads();
    out[t] = tile[t];
}
