/* cuda_quant.cu — the CUDA kernels of the INT8 products (matmul_w8, matmul_w8a8,
 * matmul_w8a8_tensor; kiln/quant.h states the arithmetic, core/ir/quant.c and gemm_i8.c are
 * the CPU reference these are tested against), and the GPU int8 benchmark.
 *
 * Three steps, as on the CPU: the weight quantized per output channel into k-contiguous
 * int8 rows [N][K] (one block per channel: a shared-memory absmax, then the codes), the
 * activations likewise per row (w8a8) or as one row (w8a8_tensor), then the product.
 *
 * The int8 product (w8a8, w8a8_tensor) runs on the tensor cores through cuBLASLt: int8
 * operands (CUDA_R_8I), int32 accumulation (CUBLAS_COMPUTE_32I, alpha 1 and beta 0 in
 * int32) and an int32 result, then a dequantizing kernel c = (float)acc * s_x[i] * s_w[j]
 * (kn_i8_dequant's order). Row-major c [m, n] = a [m, k] b [n, k]^T is column-major
 * c^T = b a^T, so kiln's b is cuBLASLt's A, transposed, and kiln's a its B, not: the "TN"
 * form that IMMA kernels with the ordinary (column-major) layout require, with cuBLASLt's m
 * (our n) and k multiples of 4 (so are the leading dimensions, k and n) and 4-byte aligned
 * pointers (the heuristic is told the pointers' actual alignment). cuBLASLt has no int8
 * product with a float result and per-row and per-column scales, so the epilogue is a
 * second pass; the int32 sums are written into the f32 output's own memory (same size) and
 * converted in place, so no scratch is allocated. That pass reads and writes 4 m n bytes
 * again: at GPT-2's [8192, 768] x [768, 3072] (100 MB each way) it costs about as much as
 * the int8 product itself on an H100, so the speed-up over bf16 is bounded by it (a fused
 * epilogue, CUTLASS-style, would remove it; make bench-int8 --device cuda measures both).
 * Where the shape breaks those rules, cuBLASLt finds no algorithm, or KILN_I8_LT=0, the
 * product is the simple kernel: one thread per output, __dp4a four bytes at a time when K
 * is a multiple of 4 (else byte by byte). Either way the int32 sums are exact, so the
 * codes, the sums and the w8a8 results are the CPU's bit for bit. The cuBLASLt handle is
 * this file's own (one per GPU, made on first use, no workspace: nothing is allocated on a
 * later call, so a captured CUDA graph may hold the product); the heuristic's answer is
 * cached per shape. KILN_I8_FUSED=1 tries, before that, cuBLASLt applying both scales in
 * its own epilogue (OUTER_VEC_32F scale modes, per-token w8a8 only): no second pass, but
 * not kn_i8_dequant's rounding, and offered for int8 only by some cuBLASLt versions and
 * GPUs (where not, the unfused path runs); the benchmark times it beside the others.
 *
 * w8 (f32 activations) keeps the simple kernel: an f32 sum with the codes widened; its
 * sums may differ from the CPU's in the last bits (fused multiply-adds). Not tuned. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wswitch-enum"
#include <cublasLt.h>
#include <cublas_v2.h>
#pragma GCC diagnostic pop
#include <stdint.h>
#include <stdlib.h>

#include <array>
#include <map>
#include <mutex>

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
    /* as lab 12's quant_scale.c: a row whose 127 / absmax is not finite (zeros, or values
     * below 127 / FLT_MAX) gets scale 0 and codes 0; a non-finite row scale NaN, codes 0 */
    const float inv = 127.0f / a;
    const bool coded = finite && isfinite(inv);
    if (threadIdx.x == 0) s[r] = !finite ? __int_as_float(0x7fc00000) : coded ? a / 127.0f : 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        float v = coded ? rintf(row[c * cs] * inv) : 0.0f;
        v = fminf(fmaxf(v, -127.0f), 127.0f);
        q[r * cols + c] = (int8_t)v;
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
            c[e] = __fmul_rn(__fmul_rn((float)acc, sa[i * sas]), sb[j]);
        } else {
            const float *xr = x + i * k;
            float acc = 0;
            for (int64_t t = 0; t < k; t++) acc += xr[t] * (float)br[t];
            c[e] = acc * sb[j];
        }
    }
}

/* In place: c[i][j] (holding the int32 sum) = (float)acc * sa[i * sas] * sb[j], four columns
 * per thread (16-byte loads and stores: n is a multiple of 4 on the cuBLASLt path and c is
 * 16-byte aligned there, checked by the caller), rows over blockIdx.y (grid-stride: a grid
 * has at most 65,535 rows of blocks), so no thread divides by n. */
__global__ void knc_i8_dequant4_kernel(float *c, const float *sa, int64_t sas, const float *sb, int64_t m, int64_t n) {
    const int64_t j = 4 * ((int64_t)blockIdx.x * blockDim.x + threadIdx.x);
    if (j >= n) return;
    const float4 s4 = *reinterpret_cast<const float4 *>(sb + j);
    for (int64_t i = blockIdx.y; i < m; i += gridDim.y) {
        int4 *p = reinterpret_cast<int4 *>(c + i * n + j);
        const int4 q = *p;
        const float s = sa[i * sas];
        float4 r;
        r.x = __fmul_rn(__fmul_rn((float)q.x, s), s4.x);
        r.y = __fmul_rn(__fmul_rn((float)q.y, s), s4.y);
        r.z = __fmul_rn(__fmul_rn((float)q.z, s), s4.z);
        r.w = __fmul_rn(__fmul_rn((float)q.w, s), s4.w);
        *reinterpret_cast<float4 *>(p) = r;
    }
}

/* The same one element per thread, for any n and alignment. */
__global__ void knc_i8_dequant_kernel(float *c, const float *sa, int64_t sas, const float *sb, int64_t m, int64_t n) {
    int64_t total = m * n;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = e / n, j = e - i * n;
        int32_t acc = reinterpret_cast<const int32_t *>(c)[e];
        c[e] = __fmul_rn(__fmul_rn((float)acc, sa[i * sas]), sb[j]);
    }
}

#define KNC_I8_MAX_GPUS 64
static cublasLtHandle_t i8_handles[KNC_I8_MAX_GPUS];
static std::mutex i8_mu;
typedef std::array<int64_t, 6> i8_key; /* device, m, n, k, pointer alignment, fused */
typedef struct i8_plan {
    bool ok;
    cublasLtMatmulAlgo_t algo;
} i8_plan;
static std::map<i8_key, i8_plan> i8_plans;

/* Whether the cuBLASLt path may run this product: IMMA's rules (above) and KILN_I8_LT. */
static bool i8_lt_allowed(int64_t m, int64_t n, int64_t k, const void *a, const void *b, const void *c) {
    const char *e = getenv("KILN_I8_LT");
    if (e && e[0] == '0') return false;
    if (m < 1 || n < 1 || k < 1 || n % 4 || k % 4) return false;
    return ((uintptr_t)a % 4 == 0) && ((uintptr_t)b % 4 == 0) && ((uintptr_t)c % 4 == 0);
}

/* acc [m, n] (int32, row-major) = a [m][k] . b [n][k]^T through cuBLASLt on stream s. *done
 * false (and KN_OK) when cuBLASLt has no algorithm for it: the caller runs the dp4a kernel.
 * With sa and sb (the fused variant, an experiment: KILN_I8_FUSED=1 and the benchmark), acc
 * is instead the f32 result with the scales applied by cuBLASLt itself (A and B scale mode
 * OUTER_VEC_32F: element (i, j) times sa[i] sb[j]), f32 scale type and output; cuBLASLt may
 * have no such int8 kernel (then *done is false, remembered per shape), and where it has
 * one the rounding need not be kn_i8_dequant's, so it is not the default. */
static kn_status i8_lt_product(int dev, const int8_t *a, const int8_t *b, void *acc, int64_t m, int64_t n, int64_t k,
                               cudaStream_t s, bool *done, const float *sa = NULL, const float *sb = NULL) {
    *done = false;
    if (dev < 0 || dev >= KNC_I8_MAX_GPUS) return KN_OK;
    cublasLtHandle_t h;
    {
        std::lock_guard<std::mutex> lock(i8_mu);
        if (!i8_handles[dev]) {
            cublasStatus_t q = cublasLtCreate(&i8_handles[dev]);
            if (q != CUBLAS_STATUS_SUCCESS) {
                i8_handles[dev] = NULL;
                return kn_error(KN_ERR_DEVICE, "cublasLtCreate failed: %s", cublasLtGetStatusString(q));
            }
        }
        h = i8_handles[dev];
    }
    kn_status st = KN_OK;
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    const int32_t one = 1, zero = 0;
    const float onef = 1.0f, zerof = 0.0f;
    const bool fused = sa && sb;
    const int32_t outer = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    /* the heuristic assumes 256-byte aligned pointers unless told: tell it the least aligned */
    const uintptr_t any = (uintptr_t)a | (uintptr_t)b | (uintptr_t)acc;
    int64_t al = 256;
    while (al > 4 && any % (uintptr_t)al) al /= 2;
    const uint32_t al32 = (uint32_t)al;
    const i8_key key = {dev, m, n, k, al, fused};
    i8_plan plan = {false, {}};
    bool have = false;
#define I8_LT(call)                                                                                                     \
    do {                                                                                                                \
        cublasStatus_t q_ = (call);                                                                                     \
        if (q_ != CUBLAS_STATUS_SUCCESS) {                                                                              \
            if (!fused) st = kn_error(KN_ERR_DEVICE, "%s failed at %s:%d: %s", #call, __FILE__, __LINE__,           \
                                      cublasLtGetStatusString(q_));                                                     \
            goto done; /* the fused variant: this cuBLASLt has no such descriptor; *done stays false */                 \
        }                                                                                                               \
    } while (0)
    I8_LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32I, fused ? CUDA_R_32F : CUDA_R_32I));
    if (fused) { /* cuBLASLt's A is our b (its rows: our columns, sb), its B our a (sa) */
        I8_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &outer, sizeof outer));
        I8_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &outer, sizeof outer));
        I8_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sb, sizeof sb));
        I8_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sa, sizeof sa));
    }
    I8_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    I8_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    /* A: b as column-major [k, n] (ld k), used transposed; B: a as column-major [k, m]; D: [n, m] */
    I8_LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_8I, (uint64_t)k, (uint64_t)n, k));
    I8_LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8I, (uint64_t)k, (uint64_t)m, k));
    I8_LT(cublasLtMatrixLayoutCreate(&ld, fused ? CUDA_R_32F : CUDA_R_32I, (uint64_t)n, (uint64_t)m, n));
    {
        std::lock_guard<std::mutex> lock(i8_mu);
        auto it = i8_plans.find(key);
        if (it != i8_plans.end()) plan = it->second, have = true;
    }
    if (!have) {
        I8_LT(cublasLtMatmulPreferenceCreate(&pref));
        const uint64_t wsz = 0;
        I8_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsz, sizeof wsz));
        I8_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al32, sizeof al32));
        I8_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al32, sizeof al32));
        I8_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al32, sizeof al32));
        I8_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al32, sizeof al32));
        cublasLtMatmulHeuristicResult_t r = {};
        int nres = 0;
        cublasStatus_t q = cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, ld, ld, pref, 1, &r, &nres);
        plan.ok = q == CUBLAS_STATUS_SUCCESS && nres > 0;
        if (plan.ok) plan.algo = r.algo;
        std::lock_guard<std::mutex> lock(i8_mu);
        i8_plans[key] = plan;
    }
    if (plan.ok) {
        cublasStatus_t q = cublasLtMatmul(h, desc, fused ? (const void *)&onef : (const void *)&one, b, la, a, lb,
                                          fused ? (const void *)&zerof : (const void *)&zero, acc, ld, acc, ld, &plan.algo,
                                          NULL, 0, s);
        if (q == CUBLAS_STATUS_SUCCESS) *done = true;
        else if (q == CUBLAS_STATUS_NOT_SUPPORTED || (fused && q == CUBLAS_STATUS_INVALID_VALUE)) { /* unfused / dp4a */
            std::lock_guard<std::mutex> lock(i8_mu);
            i8_plans[key].ok = false;
        } else {
            st = kn_error(KN_ERR_DEVICE, "cublasLtMatmul (int8, m=%lld, n=%lld, k=%lld) failed: %s", (long long)m,
                          (long long)n, (long long)k, cublasLtGetStatusString(q));
        }
    }
done:
#undef I8_LT
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (desc) cublasLtMatmulDescDestroy(desc);
    return st;
}

/* The int8 product c [m, n] = sa[i * sas] sb[j] a b^T (f32 out) on stream s: cuBLASLt then
 * the in-place epilogue where allowed, else the dp4a kernel. *lt: which one ran. */
static kn_status i8_product(int dev, const int8_t *a, const int8_t *b, const float *sa, int64_t sas, const float *sb,
                            float *c, int64_t m, int64_t n, int64_t k, cudaStream_t s, bool *lt) {
    bool done = false;
    const char *fe = getenv("KILN_I8_FUSED");
    if (fe && fe[0] == '1' && sas == 1 && i8_lt_allowed(m, n, k, a, b, c)) {
        KN_TRY(i8_lt_product(dev, a, b, c, m, n, k, s, &done, sa, sb));
        if (done) { *lt = true; return KN_OK; }
    }
    if (i8_lt_allowed(m, n, k, a, b, c)) KN_TRY(i8_lt_product(dev, a, b, c, m, n, k, s, &done));
    *lt = done;
    if (done) {
        if (n % 4 == 0 && (uintptr_t)c % 16 == 0 && (uintptr_t)sb % 16 == 0) {
            const dim3 grid((unsigned)((n / 4 + KNC_THREADS - 1) / KNC_THREADS), (unsigned)(m < 65535 ? m : 65535));
            knc_i8_dequant4_kernel<<<grid, KNC_THREADS, 0, s>>>(c, sa, sas, sb, m, n);
            return knc_check_launch("knc_i8_dequant4_kernel", __FILE__, __LINE__);
        }
        knc_i8_dequant_kernel<<<knc_blocks(m * n), KNC_THREADS, 0, s>>>(c, sa, sas, sb, m, n);
        return knc_check_launch("knc_i8_dequant_kernel", __FILE__, __LINE__);
    }
    knc_gemm_q_kernel<<<knc_blocks(m * n), KNC_THREADS, 0, s>>>(a, NULL, b, sa, sas, sb, c, m, n, k, true);
    return knc_check_launch("knc_gemm_q_kernel", __FILE__, __LINE__);
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
        if (st == KN_OK && a8) {
            bool lt;
            st = i8_product(dev.index, qxd, qwd, sxd, per_tensor ? 0 : 1, swd, (float *)kn_tensor_data(*out), m, nn, k,
                            knc_stream, &lt);
        } else if (st == KN_OK) {
            knc_gemm_q_kernel<<<knc_blocks(m * nn), KNC_THREADS, 0, knc_stream>>>(
                qxd, xd, qwd, sxd, 0, swd, (float *)kn_tensor_data(*out), m, nn, k, false);
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

/* ---------------------------------------------------------------- the benchmark */

/* x[i] uniform in [-a, a) from a hash of (seed, i). */
__global__ void knc_i8_bench_fill(float *x, int64_t n, uint32_t seed, float a) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ (uint32_t)(i >> 32) ^ seed * 0x9e3779b9u;
        h ^= h >> 16, h *= 0x7feb352du, h ^= h >> 15, h *= 0x846ca68bu, h ^= h >> 16;
        x[i] = a * ((float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f);
    }
}

__global__ void knc_i8_bench_bf16(const float *x, __nv_bfloat16 *y, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = __float2bfloat16(x[i]);
}

extern "C" kn_status kn_cuda_bench_int8(int device, int64_t m, int64_t n, int64_t k, int reps, kn_int8_gpu_times *t) {
    int count = 0;
    if (!t || m < 1 || n < 1 || k < 1) return kn_error(KN_ERR_ARG, "kn_cuda_bench_int8: bad shape or NULL result");
    if (cudaGetDeviceCount(&count) != cudaSuccess || count <= device || device < 0) {
        cudaGetLastError();
        return kn_error(KN_ERR_DEVICE, "kn_cuda_bench_int8: no CUDA device %d", device);
    }
    memset(t, 0, sizeof *t);
    if (reps < 1) reps = 1;
    kn_status st = KN_OK;
    float *x = NULL, *w = NULL, *c = NULL, *sx = NULL, *sw = NULL, *cf = NULL, *cu = NULL, *hc = NULL, *hu = NULL;
    int8_t *qx = NULL, *qw = NULL;
    __nv_bfloat16 *xb = NULL, *wb = NULL, *cb = NULL;
    cublasHandle_t h = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    cudaDeviceProp prop;
    const float one = 1.0f, zero = 0.0f;
    double best[6] = {1e30, 1e30, 1e30, 1e30, 1e30, 1e30};
    bool fused_ok = true;
    KNC_CUDA_GOTO(cudaSetDevice(device));
    KNC_CUDA_GOTO(cudaGetDeviceProperties(&prop, device));
    snprintf(t->device, sizeof t->device, "%.127s", prop.name);
    KNC_CUDA_GOTO(cudaEventCreate(&e0));
    KNC_CUDA_GOTO(cudaEventCreate(&e1));
    KNC_CUDA_GOTO(cudaMalloc(&x, (size_t)(m * k) * 4));
    KNC_CUDA_GOTO(cudaMalloc(&w, (size_t)(n * k) * 4));
    KNC_CUDA_GOTO(cudaMalloc(&c, (size_t)(m * n) * 4));
    KNC_CUDA_GOTO(cudaMalloc(&cf, (size_t)(m * n) * 4));
    KNC_CUDA_GOTO(cudaMalloc(&cu, (size_t)(m * n) * 4));
    KNC_CUDA_GOTO(cudaMalloc(&sx, (size_t)m * 4));
    KNC_CUDA_GOTO(cudaMalloc(&sw, (size_t)n * 4));
    KNC_CUDA_GOTO(cudaMalloc(&qx, (size_t)(m * k)));
    KNC_CUDA_GOTO(cudaMalloc(&qw, (size_t)(n * k)));
    KNC_CUDA_GOTO(cudaMalloc(&xb, (size_t)(m * k) * 2));
    KNC_CUDA_GOTO(cudaMalloc(&wb, (size_t)(n * k) * 2));
    KNC_CUDA_GOTO(cudaMalloc(&cb, (size_t)(m * n) * 2));
    knc_i8_bench_fill<<<knc_blocks(m * k), KNC_THREADS>>>(x, m * k, 1, 1.0f);
    knc_i8_bench_fill<<<knc_blocks(n * k), KNC_THREADS>>>(w, n * k, 2, 0.05f);
    knc_i8_bench_bf16<<<knc_blocks(m * k), KNC_THREADS>>>(x, xb, m * k);
    knc_i8_bench_bf16<<<knc_blocks(n * k), KNC_THREADS>>>(w, wb, n * k);
    knc_quant_rows_kernel<<<(unsigned)n, KNC_THREADS>>>(w, n, k, k, 1, qw, sw);
    knc_quant_rows_kernel<<<(unsigned)m, KNC_THREADS>>>(x, m, k, k, 1, qx, sx);
    if ((st = knc_check_launch("knc_i8_bench setup", __FILE__, __LINE__)) != KN_OK) goto done;
    KNC_CUBLAS_GOTO(cublasCreate(&h));
    for (int r = -1; r < reps; r++)
        for (int v = 0; v < 6; v++) {
            bool lt = false;
            float ms = 0;
            KNC_CUDA_GOTO(cudaEventRecord(e0, 0));
            if (v < 2) /* bf16 x bf16, f32 accumulate; c in bf16 (v 0) or f32 (v 1) */
                KNC_CUBLAS_GOTO(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)n, (int)m, (int)k, &one, wb, CUDA_R_16BF,
                                             (int)k, xb, CUDA_R_16BF, (int)k, &zero, v == 0 ? (void *)cb : (void *)cf,
                                             v == 0 ? CUDA_R_16BF : CUDA_R_32F, (int)n, CUBLAS_COMPUTE_32F,
                                             CUBLAS_GEMM_DEFAULT));
            else if (v == 2) { /* the int32 sums alone */
                bool done2 = false;
                if (i8_lt_allowed(m, n, k, qx, qw, c))
                    st = i8_lt_product(device, qx, qw, c, m, n, k, 0, &done2);
                if (st != KN_OK) goto done;
                if (!done2) {
                    t->i8_core_ms = -1;
                    continue;
                }
            } else if (v == 5) { /* the fused experiment: cuBLASLt applies both scales itself */
                bool done5 = false;
                if (fused_ok && i8_lt_allowed(m, n, k, qx, qw, cu))
                    st = i8_lt_product(device, qx, qw, cu, m, n, k, 0, &done5, sx, sw);
                if (st != KN_OK) goto done;
                if (!done5) {
                    fused_ok = false;
                    continue;
                }
            } else {
                if (v == 4) {
                    knc_quant_rows_kernel<<<(unsigned)m, KNC_THREADS>>>(x, m, k, k, 1, qx, sx);
                    if ((st = knc_check_launch("knc_quant_rows_kernel", __FILE__, __LINE__)) != KN_OK) goto done;
                }
                if ((st = i8_product(device, qx, qw, sx, 1, sw, c, m, n, k, 0, &lt)) != KN_OK) goto done;
                t->i8_lt = lt;
            }
            KNC_CUDA_GOTO(cudaEventRecord(e1, 0));
            KNC_CUDA_GOTO(cudaEventSynchronize(e1));
            KNC_CUDA_GOTO(cudaEventElapsedTime(&ms, e0, e1));
            if (r >= 0 && ms < best[v]) best[v] = ms;
        }
    t->bf16_ms = best[0], t->bf16_f32out_ms = best[1], t->i8_ms = best[3], t->i8_quant_ms = best[4];
    t->i8_fused_ms = fused_ok ? best[5] : -1;
    if (fused_ok) { /* how far the fused rounding is from kn_i8_dequant's (c holds the unfused result) */
        hc = (float *)malloc((size_t)(m * n) * 4), hu = (float *)malloc((size_t)(m * n) * 4);
        if (!hc || !hu) { st = kn_error(KN_ERR_OOM, "kn_cuda_bench_int8: no host memory to compare"); goto done; }
        KNC_CUDA_GOTO(cudaMemcpy(hc, c, (size_t)(m * n) * 4, cudaMemcpyDeviceToHost));
        KNC_CUDA_GOTO(cudaMemcpy(hu, cu, (size_t)(m * n) * 4, cudaMemcpyDeviceToHost));
        double emax = 0, cmax = 0;
        for (int64_t e = 0; e < m * n; e++) {
            double d = fabs((double)hc[e] - hu[e]);
            if (!(d <= emax)) emax = d; /* NaN sticks */
            if (fabs((double)hc[e]) > cmax) cmax = fabs((double)hc[e]);
        }
        t->i8_fused_maxrel = cmax > 0 ? emax / cmax : emax;
    }
    if (t->i8_core_ms == 0) t->i8_core_ms = best[2];
done:
    if (h) cublasDestroy(h);
    cudaFree(x), cudaFree(w), cudaFree(c), cudaFree(cf), cudaFree(sx), cudaFree(sw), cudaFree(qx), cudaFree(qw);
    cudaFree(xb), cudaFree(wb), cudaFree(cb), cudaFree(cu);
    free(hc), free(hu);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    return st;
}
