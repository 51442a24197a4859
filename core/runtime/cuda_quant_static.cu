/* cuda_quant_static.cu — the CUDA kernel of matmul_w8a8_static: the int8 product with one
 * activation threshold fixed by calibration (its attribute `value`, amax; kiln/quant.h;
 * core/ir/quant_calib.c is the CPU reference it is tested against, tests/core/
 * test_quant_calib.c).
 *
 * Three launches, as the CPU's steps: the weight quantized per output channel into
 * k-contiguous int8 rows [N][K] by cuda_quant.cu's knc_quant_rows_kernel (the dynamic
 * products' quantizer, declared in runtime/cuda_impl.h), x's codes with the given threshold (rintf of v * (127 / amax), clamped to +-127: the
 * CPU's rounding, so the codes are the CPU's; a non-finite x raises a flag that makes the
 * scale NaN, as the CPU's), then one thread per output element: an int32 dot product (__dp4a
 * when K is a multiple of 4) and the epilogue acc * s_x * s_w[j] in that order (the CPU's
 * kn_i8_dequant), so the results are the CPU's bit for bit. Kept apart from cuda_quant.cu (the
 * dynamic products) so that each file has one owner; simple and untuned. */
#include <stdint.h>

#include "runtime/cuda_impl.h"

/* x's n codes with the threshold amax; *bad set when a value is not finite. */
static __global__ void qs_act_kernel(const float *x, int64_t n, float amax, int8_t *q, int *bad) {
    const float inv = amax > 0 ? 127.0f / amax : 0.0f;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = x[i];
        if (!isfinite(v)) atomicOr(bad, 1);
        q[i] = (int8_t)fminf(fmaxf(rintf(v * inv), -127.0f), 127.0f);
    }
}

static __global__ void qs_gemm_kernel(const int8_t *a, const int8_t *b, const int *bad, float amax, const float *sb,
                                      float *c, int64_t m, int64_t n, int64_t k) {
    const float sa = *bad ? __int_as_float(0x7fc00000) : amax / 127.0f;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < m * n; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = e / n, j = e - i * n;
        const int8_t *ar = a + i * k, *br = b + j * k;
        int32_t acc = 0;
        if (k % 4 == 0) {
            const int *a4 = (const int *)ar, *b4 = (const int *)br;
            for (int64_t t = 0; t < k / 4; t++) acc = __dp4a(a4[t], b4[t], acc);
        } else {
            for (int64_t t = 0; t < k; t++) acc += (int32_t)ar[t] * (int32_t)br[t];
        }
        c[e] = (float)acc * sa * sb[j];
    }
}

KNC_KERNEL(knc_matmul_q_static) {
    if (n->op != KN_OP_MATMUL_W8A8_STATIC) return knc_no_kernel(n, "knc_matmul_q_static");
    const kn_tensor *x = in[0], *w = in[1];
    if (x->dtype != KN_DT_F32 || w->dtype != KN_DT_F32) return knc_unsupported(n, x->dtype);
    const bool tb = n->attrs.tb;
    const int64_t k = x->shape[x->ndim - 1], nn = tb ? w->shape[0] : w->shape[1];
    const int64_t m = k ? kn_tensor_numel(x) / k : 0;
    const float amax = (float)n->attrs.value;
    const kn_device dev = knc_dev(in);
    KN_TRY(knc_new_out(n, dev, out));
    if (m * nn == 0) return KN_OK;
    kn_tensor *qw = NULL, *sw = NULL, *qx = NULL, *flag = NULL;
    int64_t nqw = nn * k, nqx = m * k, nsw = nn, one = 1;
    kn_status st = kn_tensor_empty_on(&qw, dev, KN_DT_U8, 1, &nqw);
    if (st == KN_OK) st = kn_tensor_empty_on(&sw, dev, KN_DT_F32, 1, &nsw);
    if (st == KN_OK) st = kn_tensor_empty_on(&qx, dev, KN_DT_U8, 1, &nqx);
    if (st == KN_OK) st = kn_tensor_empty_on(&flag, dev, KN_DT_I32, 1, &one);
    if (st == KN_OK) {
        int8_t *qwd = (int8_t *)kn_tensor_data(qw), *qxd = (int8_t *)kn_tensor_data(qx);
        float *swd = (float *)kn_tensor_data(sw);
        int *bad = (int *)kn_tensor_data(flag);
        if (cudaMemsetAsync(bad, 0, sizeof *bad, knc_stream) != cudaSuccess)
            st = kn_error(KN_ERR_DEVICE, "matmul_w8a8_static: clearing the non-finite flag failed");
        /* channel j of W: row j of [N, K] (tb) or column j of [K, N] */
        if (st == KN_OK) knc_quant_rows_kernel<<<(unsigned)nn, KNC_THREADS, 0, knc_stream>>>((const float *)kn_tensor_data(w), nn, k,
                                                                        tb ? k : 1, tb ? 1 : nn, qwd, swd);
        if (st == KN_OK) st = knc_check_launch("knc_quant_rows_kernel", __FILE__, __LINE__);
        if (st == KN_OK) {
            qs_act_kernel<<<knc_blocks(m * k), KNC_THREADS, 0, knc_stream>>>((const float *)kn_tensor_data(x), m * k,
                                                                             amax, qxd, bad);
            st = knc_check_launch("qs_act_kernel", __FILE__, __LINE__);
        }
        if (st == KN_OK) {
            qs_gemm_kernel<<<knc_blocks(m * nn), KNC_THREADS, 0, knc_stream>>>(qxd, qwd, bad, amax, swd,
                                                                               (float *)kn_tensor_data(*out), m, nn, k);
            st = knc_check_launch("qs_gemm_kernel", __FILE__, __LINE__);
        }
    }
    kn_tensor_free(qw);
    kn_tensor_free(sw);
    kn_tensor_free(qx);
    kn_tensor_free(flag);
    if (st != KN_OK) { kn_tensor_free(*out); *out = NULL; }
    return st;
}
