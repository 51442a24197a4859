/* block_reduce.c — lab 07 unit: the block combine of a row reduction, in CUDA C
 * (kn_cuda_block_reduce_source; contract in kiln/codegen.h).
 *
 * A row kernel gives a block one row; each thread sums its part of the row into a double
 * partial. The block must turn blockDim.x partials into one total that EVERY thread knows
 * (the epilogue, x / sum, runs in all of them). Two levels:
 *
 *   1. within a warp: the 32 lanes exchange registers directly with __shfl_xor_sync. After
 *      the steps d = 16, 8, 4, 2, 1 (v += the value of lane ^ d) every lane holds the warp's
 *      total: a butterfly. No memory, no barrier: the warp meets at each shuffle.
 *   2. across warps: lane 0 of each warp writes its total to shared memory sh[warp]; a
 *      __syncthreads() makes every write visible; every thread adds sh[0..warps) in the
 *      same order (so all threads get the same bits); a second __syncthreads() keeps a
 *      fast thread from overwriting sh in the NEXT reduction while a slow one still reads.
 *
 * kn_block_max is the same with max instead of +; it must propagate NaN (a NaN anywhere
 * in the row gives NaN, as the CPU's max does): kn_max2(a, b) = (b > a || b != b) ? b : a.
 * Define kn_max2 in the text as well: the row kernels the renderer writes call it for each
 * thread's partial max (s = kn_max2(s, x)). So the text defines KN_DEVICE functions
 * kn_max2, kn_block_sum and kn_block_max (and whatever helpers you like).
 *
 * The text is compiled twice: by NVRTC for the GPU, and by the host C compiler for the
 * CUDA emulator (core/runtime/cuda_emu.c), where each thread is a coroutine that switches
 * only at barriers and shuffles. So it must be C as well as CUDA: KN_DEVICE (defined by
 * the prelude) instead of __device__, no references, no templates. The emulator catches a
 * missing barrier: a thread runs ahead until the next one, reading what others have not
 * yet written. */
#include "kiln/codegen.h"

const char *kn_cuda_block_reduce_source(void) {
    /* BEGIN SOLUTION */
    return "KN_DEVICE double kn_warp_sum(double v)\n{\n"
           "    for (int d = 16; d > 0; d /= 2) v += __shfl_xor_sync(0xffffffffu, v, d);\n"
           "    return v;\n}\n"
           "KN_DEVICE double kn_max2(double a, double b) { return (b > a || b != b) ? b : a; }\n"
           "KN_DEVICE double kn_warp_max(double v)\n{\n"
           "    for (int d = 16; d > 0; d /= 2) v = kn_max2(v, __shfl_xor_sync(0xffffffffu, v, d));\n"
           "    return v;\n}\n"
           "KN_DEVICE double kn_block_sum(double v, double *sh)\n{\n"
           "    v = kn_warp_sum(v);\n"
           "    if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = v;\n"
           "    __syncthreads();\n"
           "    double t = 0;\n"
           "    for (unsigned w = 0; w < (blockDim.x + 31) / 32; w++) t += sh[w];\n"
           "    __syncthreads();\n"
           "    return t;\n}\n"
           "KN_DEVICE double kn_block_max(double v, double *sh)\n{\n"
           "    v = kn_warp_max(v);\n"
           "    if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = v;\n"
           "    __syncthreads();\n"
           "    double t = sh[0];\n"
           "    for (unsigned w = 1; w < (blockDim.x + 31) / 32; w++) t = kn_max2(t, sh[w]);\n"
           "    __syncthreads();\n"
           "    return t;\n}\n\n";
    /* SKELETON
    // Return the CUDA C text of kn_block_sum(double v, double *sh) and
    // kn_block_max(double v, double *sh) (and any helpers they use), as above.
    kn_not_implemented("lab07", "kn_cuda_block_reduce_source: warp shuffles, then the warps' totals through shared memory");
    return NULL;
    END SOLUTION */
}
