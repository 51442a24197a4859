/* flash_tc.c — facts about flash attention that several layers read, kept with the op,
 * below them all, so that no pass reaches up into the runtime (core/mk/layers.py): which
 * tensor-core kernels it has (kn_flash_tc_kernel, contract in kiln/ir.h), the table the CUDA
 * backend launches by (core/runtime/cuda_flash_tc.cu) and the autocast pass decides by
 * (core/passes/autocast.c); and the op's two layouts (kn_flash_bthd, kn_flash_dims), which
 * the shape rule, the CPU and CUDA kernels and the cost read alike. */
#include <stdbool.h>
#include <stddef.h>

#include "kiln/ir.h"

const char *kn_flash_tc_kernel(int kind, int d) {
    if (kind == KN_FLASH_TC_TF32) return d == 32 ? "mma.m16n8k8 tf32, D 32" : d == 64 ? "mma.m16n8k8 tf32, D 64" : NULL;
    if (kind == KN_FLASH_TC_BF16)
        return d == 64 ? "mma.m16n8k16 bf16, D 64" : d == 128 ? "mma.m16n8k16 bf16, D 128" : NULL;
    return NULL;
}

bool kn_flash_bthd(const kn_attrs *a) {
    return a->nperm == 4 && a->perm[0] == 0 && a->perm[1] == 2 && a->perm[2] == 1 && a->perm[3] == 3;
}

void kn_flash_dims(const kn_type *q, const kn_attrs *a, int64_t *bh, int64_t *t, int64_t *d, int64_t *nh) {
    if (kn_flash_bthd(a) && q->ndim == 4) { /* [B, T, H, D] */
        *t = q->shape[1];
        *d = q->shape[3];
        *nh = q->shape[2];
        *bh = q->shape[0] * q->shape[2];
        return;
    }
    *t = q->shape[q->ndim - 2]; /* [..., T, D] (D may be 0: y still has L's column) */
    *d = q->shape[q->ndim - 1];
    *nh = 0;
    *bh = 1;
    for (int i = 0; i < q->ndim - 2; i++) *bh *= q->shape[i];
}
