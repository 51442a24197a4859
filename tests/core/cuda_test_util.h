/* cuda_test_util.h — what the GPU op tests share (test_cuda_ops.c, test_cuda_fast.c):
 * the device, the one-line skip without a GPU, random operands, a bare node, the
 * comparison of a GPU result with the CPU reference, and output poisoning.
 *
 * compare: floats (f32, f64) agree normwise, max|gpu - cpu| / max|cpu| below 1e-5 (f32
 * TOL_ELEM), 1e-4 (f32 TOL_REDUCE) or 1e-12 (f64), with NaN and infinities matched
 * exactly; every other dtype, and TOL_EXACT, must match element for element. poison fills
 * a block of the output's size class with 0xFF bytes and frees it into the caching
 * allocator, whose LIFO free list hands that block to the next output of that size: an
 * element a kernel forgets to write shows up as NaN (or 255 in a bool). */
#ifndef KILN_TEST_CUDA_UTIL_H
#define KILN_TEST_CUDA_UTIL_H

#include <math.h>
#include <string.h>

#include "kiln/cuda.h"
#include "kiln/device.h"
#include "test_ir_util.h"

#define CUDA0 ((kn_device){KN_DEVICE_CUDA, 0})
#define SKIP_WITHOUT_GPU()                                                          \
    do {                                                                            \
        if (kn_device_count(KN_DEVICE_CUDA) == 0) cr_skip_test("no CUDA device: GPU test skipped"); \
    } while (0)

enum { TOL_EXACT = 0, TOL_ELEM, TOL_REDUCE };

static inline kn_tensor *randn(kn_rng *r, kn_dtype dt, int nd, const int64_t *shape) {
    kn_tensor *t = NULL;
    KN_ASSERT_OK(kn_tensor_randn(&t, dt, nd, shape, r));
    return t;
}

static inline kn_node node(kn_op op) {
    kn_node n;
    memset(&n, 0, sizeof n);
    n.op = op;
    n.attrs = kn_attrs_default();
    return n;
}

/* Compare a GPU result (copied back) with the CPU reference. */
static inline void compare(const kn_node *n, const kn_tensor *got, const kn_tensor *want, int tol) {
    char ts[96];
    cr_assert_eq(got->dtype, want->dtype);
    cr_assert_eq(kn_tensor_numel(got), kn_tensor_numel(want), "%s: element counts differ", kn_op_name(n->op));
    int64_t k = kn_tensor_numel(want);
    kn_dtype dt = want->dtype;
    if (dt != KN_DT_F32 && dt != KN_DT_F64) tol = TOL_EXACT;
    double maxref = 0, maxdiff = 0;
    for (int64_t i = 0; i < k; i++) {
        double g = kn_dtype_load(dt, kn_tensor_data(got), i), w = kn_dtype_load(dt, kn_tensor_data(want), i);
        if (tol == TOL_EXACT || isinf(w) || isnan(w)) {
            bool same = (isnan(g) && isnan(w)) || g == w;
            if (dt == KN_DT_BOOL) same = ((const uint8_t *)kn_tensor_data(got))[i] == ((const uint8_t *)kn_tensor_data(want))[i];
            cr_assert(same, "%s -> %s: element %lld is %.9g on the GPU, %.9g on the CPU", kn_op_name(n->op),
                      kn_type_str(&n->type, ts, sizeof ts), (long long)i, g, w);
            continue;
        }
        cr_assert(!isnan(g), "%s -> %s: element %lld is NaN on the GPU (unwritten?), %.9g on the CPU",
                  kn_op_name(n->op), kn_type_str(&n->type, ts, sizeof ts), (long long)i, w);
        if (fabs(w) > maxref) maxref = fabs(w);
        if (fabs(g - w) > maxdiff) maxdiff = fabs(g - w);
    }
    if (tol == TOL_EXACT) return;
    double bound = dt == KN_DT_F64 ? 1e-12 : tol == TOL_ELEM ? 1e-5 : 1e-4;
    double rel = maxdiff / (maxref > 1e-30 ? maxref : 1e-30);
    cr_assert(rel < bound, "%s -> %s: relative error %.3g >= %.0e", kn_op_name(n->op), kn_type_str(&n->type, ts, sizeof ts),
              rel, bound);
}

/* Poison the next block of the output's size class: 0xFF bytes, freed into the cache. */
static inline void poison(const kn_type *t) {
    kn_tensor *p = NULL;
    KN_ASSERT_OK(kn_tensor_empty_on(&p, CUDA0, t->dtype, t->ndim, t->shape));
    size_t nb = (size_t)kn_type_numel(t) * kn_dtype_size(t->dtype);
    if (nb) KN_ASSERT_OK(kn_device_memset(CUDA0, kn_tensor_data(p), 0xFF, nb));
    kn_tensor_free(p);
}

/* Set n's operand count, infer its type from host[] (asserting it is valid), and fill
 * d[0..nin) with the GPU operands: dev[i] when given (dev and dev[i] non-NULL), else a copy
 * of host[i] on cuda:0. */
static inline void gpu_operands(kn_node *n, int nin, kn_tensor **host, kn_tensor **dev, kn_tensor **d) {
    const kn_type *tp[KN_MAX_OPERANDS];
    kn_type types[KN_MAX_OPERANDS];
    char msg[256];
    n->nin = nin;
    for (int i = 0; i < nin; i++) {
        types[i] = (kn_type){host[i]->dtype, host[i]->ndim, {0}};
        memcpy(types[i].shape, host[i]->shape, sizeof(int64_t) * (size_t)host[i]->ndim);
        tp[i] = &types[i];
        if (dev && dev[i]) d[i] = dev[i];
        else KN_ASSERT_OK(kn_tensor_to(&d[i], host[i], CUDA0));
    }
    kn_status st = kn_node_infer(n, tp, &n->type, msg, sizeof msg);
    cr_assert_eq(st, KN_OK, "%s: test built an invalid node: %s", kn_op_name(n->op), msg);
}

/* n on the GPU operands d[] into a poisoned output (the result must stay on the GPU): the
 * result, copied to the host and made contiguous (caller frees). */
static inline kn_tensor *on_gpu(const kn_node *n, kn_tensor *const *d) {
    kn_tensor *got = NULL, *back = NULL, *hc = NULL;
    poison(&n->type);
    KN_ASSERT_OK(kn_node_eval(n, (const kn_tensor *const *)d, &got));
    cr_assert_eq(got->storage->device.type, KN_DEVICE_CUDA, "%s: the result left the GPU", kn_op_name(n->op));
    KN_ASSERT_OK(kn_tensor_to(&back, got, KN_CPU));
    KN_ASSERT_OK(kn_device_synchronize(CUDA0));
    KN_ASSERT_OK(kn_tensor_contiguous(&hc, back));
    kn_tensor_free(back);
    kn_tensor_free(got);
    return hc;
}

#endif
