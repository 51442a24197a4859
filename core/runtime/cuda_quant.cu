/* cuda_quant.cu — the CUDA kernels of the INT8 products (matmul_w8, matmul_w8a8,
 * matmul_w8a8_tensor; kiln/quant.h states the arithmetic, core/ir/quant.c is the CPU
 * reference these are tested against).
 *
 * Three steps, as on the CPU: the weight quantized per output channel into k-contiguous
 * int8 rows [N][K] (one block per channel: a shared-memory absmax, then the codes), the
 * activations likewise per row (w8a8) or as one row (w8a8_tensor), then the product: one
 * thread per output element, an int32 dot product of two int8 rows four bytes at a time with
 * __dp4a when K is a multiple of 4 (else byte by byte), and the epilogue s_x[i] s_w[j] in f32.
 * The rounding (rintf of v * (127 / absmax), clamped to +-127) is the CPU's, so the codes, the
 * int32 sums and therefore the w8a8 results are the CPU's bit for bit; w8's f32 sums may
 * differ in the last bits (fused multiply-adds). A simple, correct kernel: not tuned (no
 * tiling, no IMMA tensor cores; cuBLASLt's int8 GEMM is the next step). */
#include <stdint.h>

#include "runtime/cuda_impl.h"

/* Row r of a [rows, cols] view (element (r, c) at x[r * rs + c * cs]) -> q[r * cols + c], s[r]. */
__global__ void knc_quant_rows_kernel(const float *x, int64_t rows, int64_t cols, int64_t rs, int64_t cs, int8_t *q,
                                      float *s) {
    __shared__ float red[KNC_THREADS];
    __shared__ int bad[1];
    int64_t r = blockIdx.x;
    if (r >= rows) return;
    const float *row = x + r * rs;
    float a = 0;
    int nonfinite = 0;
    if (threadIdx.x == 0) bad[0] = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        float v = fabsf(row[c * cs]);
        if (!isfinite(v)) nonfinite = 1;
        else a = fmaxf(a, v);
    }
    red[threadIdx.x] = a;
    __syncthreads();
    if (nonfinite) atomicOr(bad, 1);
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + w]);
        __syncthreads();
    }
    a = red[0];
    bool finite = bad[0] == 0;
    float inv = (finite && a > 0) ? 127.0f / a : 0.0f;
    if (threadIdx.x == 0) s[r] = finite ? a / 127.0f : __int_as_float(0x7fc00000);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        float v = rintf(row[c * cs] * inv);
        v = fminf(fmaxf(v, -127.0f), 127.0f);
        q[r * cols + c] = finite ? (int8_t)v : (int8_t)0;
    }
}

/* c[i][j] = sa[i * sas] * sb[j] * sum_k a[i][k] b[j][k] (int8, int32 sums); a8 false: a is
 * the f32 x and the sum is f32 (the weight's codes widened in the loop). */
__global__ void knc_gemm_q_kernel(const int8_t *a, const float *x, const int8_t *b, const float *sa, int64_t sas,
                                  const float *sb, float *c, int64_t m, int64_t n, int64_t k, bool a8) {
    int64_t total = m * n;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = e / n, j = e - i * n;
        const int8_t *br = b + j * k;
        if (a8) {
            const int8_t *ar = a + i * k;
            int32_t acc = 0;
            if (k % 4 == 0) {
                const int *a4 = (const int *)ar, *b4 = (const int *)br;
                for (int64_t t = 0; t < k / 4; t++) acc = __dp4a(a4[t], b4[t], acc);
            } else {
                for (int64_t t = 0; t < k; t++) acc += (int32_t)ar[t] * (int32_t)br[t];
            }
            c[e] = (float)acc * sa[i * sas] * sb[j];
        } else {
            const float *xr = x + i * k;
            float acc = 0;
            for (int64_t t = 0; t < k; t++) acc += xr[t] * (float)br[t];
            c[e] = acc * sb[j];
        }
    }
}

KNC_KERNEL(knc_matmul_q) {
    if (n->op != KN_OP_MATMUL_W8 && n->op != KN_OP_MATMUL_W8A8 && n->op != KN_OP_MATMUL_W8A8_TENSOR)
        return knc_no_kernel(n, "knc_matmul_q");
    const kn_tensor *x = in[0], *w = in[1];
    if (x->dtype != KN_DT_F32 || w->dtype != KN_DT_F32) return knc_unsupported(n, x->dtype);
    const bool tb = n->attrs.tb, a8 = n->op != KN_OP_MATMUL_W8, per_tensor = n->op == KN_OP_MATMUL_W8A8_TENSOR;
    const int64_t k = x->shape[x->ndim - 1], nn = tb ? w->shape[0] : w->shape[1];
    const int64_t m = k ? kn_tensor_numel(x) / k : 0;
    const kn_device dev = knc_dev(in);
    KN_TRY(knc_new_out(n, dev, out));
    if (m * nn == 0) return KN_OK;
    kn_tensor *qw = NULL, *sw = NULL, *qx = NULL, *sx = NULL;
    int64_t nqw = nn * k, nqx = a8 ? m * k : 1, nsw = nn, nsx = a8 ? m : 1;
    kn_status st = kn_tensor_empty_on(&qw, dev, KN_DT_U8, 1, &nqw);
    if (st == KN_OK) st = kn_tensor_empty_on(&sw, dev, KN_DT_F32, 1, &nsw);
    if (st == KN_OK) st = kn_tensor_empty_on(&qx, dev, KN_DT_U8, 1, &nqx);
    if (st == KN_OK) st = kn_tensor_empty_on(&sx, dev, KN_DT_F32, 1, &nsx);
    if (st == KN_OK) {
        const float *wd = (const float *)kn_tensor_data(w), *xd = (const float *)kn_tensor_data(x);
        int8_t *qwd = (int8_t *)kn_tensor_data(qw), *qxd = (int8_t *)kn_tensor_data(qx);
        float *swd = (float *)kn_tensor_data(sw), *sxd = (float *)kn_tensor_data(sx);
        /* channel j of W: row j of [N, K] (tb) or column j of [K, N] */
        knc_quant_rows_kernel<<<(unsigned)nn, KNC_THREADS, 0, knc_stream>>>(wd, nn, k, tb ? k : 1, tb ? 1 : nn, qwd, swd);
        st = knc_check_launch("knc_quant_rows_kernel", __FILE__, __LINE__);
        if (st == KN_OK && a8) {
            if (per_tensor)
                knc_quant_rows_kernel<<<1, KNC_THREADS, 0, knc_stream>>>(xd, 1, m * k, 0, 1, qxd, sxd);
            else
                knc_quant_rows_kernel<<<(unsigned)m, KNC_THREADS, 0, knc_stream>>>(xd, m, k, k, 1, qxd, sxd);
            st = knc_check_launch("knc_quant_rows_kernel", __FILE__, __LINE__);
        }
        if (st == KN_OK) {
            knc_gemm_q_kernel<<<knc_blocks(m * nn), KNC_THREADS, 0, knc_stream>>>(
                qxd, xd, qwd, sxd, per_tensor ? 0 : 1, swd, (float *)kn_tensor_data(*out), m, nn, k, a8);
            st = knc_check_launch("knc_gemm_q_kernel", __FILE__, __LINE__);
        }
    }
    kn_tensor_free(qw);
    kn_tensor_free(sw);
    kn_tensor_free(qx);
    kn_tensor_free(sx);
    if (st != KN_OK) { kn_tensor_free(*out); *out = NULL; }
    return st;
}
