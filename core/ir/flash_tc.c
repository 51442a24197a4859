/* flash_tc.c — which tensor-core kernels flash attention has (kn_flash_tc_kernel, contract
 * in kiln/ir.h): the table the CUDA backend launches by (core/runtime/cuda_flash_tc.cu)
 * and the autocast pass decides by (core/passes/autocast.c). It lives with the op, below
 * both, so the pass does not reach up into the runtime (core/mk/layers.py). */
#include <stddef.h>

#include "kiln/ir.h"

const char *kn_flash_tc_kernel(int kind, int d) {
    if (kind == KN_FLASH_TC_TF32) return d == 32 ? "mma.m16n8k8 tf32, D 32" : d == 64 ? "mma.m16n8k8 tf32, D 64" : NULL;
    if (kind == KN_FLASH_TC_BF16)
        return d == 64 ? "mma.m16n8k16 bf16, D 64" : d == 128 ? "mma.m16n8k16 bf16, D 128" : NULL;
    return NULL;
}
