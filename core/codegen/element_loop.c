/* element_loop.c — lab 07 unit: the thread mapping of an elementwise kernel
 * (kn_render_cuda_element_loop; contract in kiln/codegen.h).
 *
 * An elementwise kernel's space has outer_n x inner_n points. On the CPU a thread takes a
 * range of rows and loops over each row. On the GPU each thread takes ONE point e of the
 * flattened space, and the row o and inner index r follow from it:
 *
 *     for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < 384; e += gridDim.x * blockDim.x) {
 *         const int o = e / 16, r = e % 16;
 *
 * Consecutive threads of a warp get consecutive e, so consecutive r: their loads and
 * stores hit consecutive addresses, and the hardware coalesces a warp's 32 accesses into a
 * few 32-byte transactions. (Give a thread a whole row instead and a warp's accesses are a
 * row apart: 32 transactions for 32 floats.) The loop is grid-stride: a grid smaller than
 * the space (the launch caps it at what fits on the GPU) still covers every point, each
 * exactly once.
 *
 * ix is the index type the renderer chose: "int" when every index fits in 30 bits (a GPU
 * has no 64-bit divider: int64_t division is emulated, several times slower), else
 * "int64_t", and then the products blockIdx.x * blockDim.x and gridDim.x * blockDim.x
 * must be computed in 64 bits: (int64_t)blockIdx.x * blockDim.x, or they wrap at 2^32. */
#include <stdio.h>
#include <string.h>

#include "kiln/codegen.h"

kn_status kn_render_cuda_element_loop(const kn_kernel *k, const char *ix, char *out, size_t cap) {
    if (!k || !ix || !out || cap == 0) return kn_error(KN_ERR_ARG, "kn_render_cuda_element_loop: NULL argument");
    out[0] = 0;
    /* BEGIN SOLUTION */
    const char *wide = strcmp(ix, "int") ? "(int64_t)" : "";
    int w = snprintf(out, cap,
                     "    for (%s e = %sblockIdx.x * blockDim.x + threadIdx.x; e < %lld; e += %sgridDim.x * blockDim.x) {\n"
                     "        const %s o = e / %lld, r = e %% %lld;\n",
                     ix, wide, (long long)(k->outer_n * k->inner_n), wide, ix, (long long)k->inner_n, (long long)k->inner_n);
    if (w < 0 || (size_t)w >= cap) {
        out[0] = 0;
        return kn_error(KN_ERR_ARG, "kn_render_cuda_element_loop: %zu bytes are too few", cap);
    }
    return KN_OK;
    /* SKELETON
    // Write the grid-stride loop's head and the definitions of o and r (see above).
    return kn_not_implemented("lab07", "kn_render_cuda_element_loop: a thread per element, grid-stride, o and r from e");
    END SOLUTION */
}
