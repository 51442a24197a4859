/* cuda_matmul.cu — matmul on the GPU through cuBLAS (cublasGemmStridedBatchedEx), and for
 * a bf16 product of at most 8 rows through the GEMV of cuda_gemv.cu.
 *
 * kiln's tensors are row-major and cuBLAS is column-major. A row-major [m, n] matrix is the
 * column-major [n, m] matrix of the same bytes, so C = op(A) op(B) (row-major) is computed
 * as C^T = op(B)^T op(A)^T (column-major): pass B first, A second, and swap m and n. The
 * ta/tb attributes become the transpose flags of those two operands.
 *
 * Batch axes: cuBLAS's strided batch takes one stride per operand. An operand whose batch
 * axes are all absent or size 1 (a weight shared by the batch) gets stride 0; one whose
 * batch axes equal the output's gets stride rows*cols; any other broadcast (e.g. [2,1] with
 * [1,3]) is first materialized to the full batch with a strided copy.
 *
 * Precision: f64 computes in f64 (CUBLAS_COMPUTE_64F); f32 in f32 (CUBLAS_COMPUTE_32F,
 * pedantic enough to keep TF32 off) unless KILN_TF32=1, which allows TF32 tensor cores
 * (CUBLAS_COMPUTE_32F_FAST_TF32: ~1e-3 relative error). bf16 and f16 operands and results
 * (mixed precision) accumulate in f32 on the tensor cores (CUBLAS_COMPUTE_32F), rounded once
 * to the low precision on the store. Except in f64, the product goes through the autotuner
 * (cuda_matmul_lt.cu, knc_matmul_tuned): cuBLAS's own choice is one candidate beside
 * cuBLASLt's, and the fastest for the problem runs from then on. One cuBLAS handle per GPU, made on first use, on kiln's
 * stream (knc_stream). Every cuBLAS call is checked (KN_CUBLAS_TRY, cuda_impl.h) and its
 * failure reported with cublasGetStatusString. */
/* cuBLAS's own header has switches that -Wswitch-enum (kiln's rule, not cuBLAS's) rejects */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wswitch-enum"
#include <cublas_v2.h>
#pragma GCC diagnostic pop
#include <mutex>

#include "runtime/cuda_gemv.h"
#include "runtime/cuda_impl.h"

#define KNC_MAX_GPUS 64
#define KNC_CUBLAS_WORKSPACE ((size_t)32 << 20)

static cublasHandle_t knc_handles[KNC_MAX_GPUS];
static std::mutex knc_handles_mu;

static kn_status get_handle(int dev, cublasHandle_t *out) {
    if (dev < 0 || dev >= KNC_MAX_GPUS) return kn_error(KN_ERR_DEVICE, "matmul: GPU index %d out of range", dev);
    std::lock_guard<std::mutex> lock(knc_handles_mu);
    if (!knc_handles[dev]) {
        KN_CUBLAS_TRY(cublasCreate(&knc_handles[dev]));
        KN_CUBLAS_TRY(cublasSetPointerMode(knc_handles[dev], CUBLAS_POINTER_MODE_HOST));
        /* a workspace of its own, so that cuBLAS allocates nothing while a CUDA graph is
         * captured (32 MiB: what cuBLAS asks for on Hopper); held for the process */
        void *ws = NULL;
        KN_CUDA_TRY(cudaSetDevice(dev));
        KN_CUDA_TRY(cudaMalloc(&ws, KNC_CUBLAS_WORKSPACE));
        KN_CUBLAS_TRY(cublasSetWorkspace(knc_handles[dev], ws, KNC_CUBLAS_WORKSPACE));
    }
    /* on kiln's stream of the moment (a capture's, or the legacy default stream) */
    KN_CUBLAS_TRY(cublasSetStream(knc_handles[dev], knc_stream));
    *out = knc_handles[dev];
    return KN_OK;
}

bool knc_tf32_allowed(void) {
    static int v = -1;
    if (v < 0) {
        const char *s = getenv("KILN_TF32");
        v = s && s[0] == '1';
    }
    return v == 1;
}

/* How an operand's batch axes (bnd of them, shape sh) map onto the output's nb batch axes
 * (oshape): 0 shared (stride 0), 1 full (stride = matrix size), 2 needs materializing. */
static int batch_kind(int bnd, const int64_t *sh, int nb, const int64_t *oshape) {
    bool all_one = true, full = bnd == nb;
    for (int i = 0; i < bnd; i++) {
        if (sh[i] != 1) all_one = false;
        if (full && sh[i] != oshape[i]) full = false;
    }
    return all_one ? 0 : full ? 1 : 2;
}

/* A contiguous copy of x broadcast to [oshape (nb axes), r, c] on the device. */
static kn_status materialize(const kn_tensor *x, int nb, const int64_t *oshape, kn_tensor **out) {
    int64_t shape[KN_MAX_DIMS], sst[KN_MAX_DIMS], dst[KN_MAX_DIMS], s = 1;
    for (int i = 0; i < nb; i++) shape[i] = oshape[i];
    shape[nb] = x->shape[x->ndim - 2];
    shape[nb + 1] = x->shape[x->ndim - 1];
    kn_ir_broadcast_strides(x->ndim, x->shape, nb + 2, shape, sst);
    for (int i = nb + 1; i >= 0; i--) { dst[i] = s; s *= shape[i]; }
    KN_TRY(kn_tensor_empty_on(out, x->storage->device, x->dtype, nb + 2, shape));
    kn_status st = knc_strided_copy(kn_dtype_size(x->dtype), nb + 2, shape, kn_tensor_data(x), sst, kn_tensor_data(*out), dst);
    if (st != KN_OK) { kn_tensor_free(*out); *out = NULL; }
    return st;
}

/* One cublasGemmStridedBatchedEx, its arguments kept so that the autotuner
 * (knc_matmul_tuned) can time it beside cuBLASLt's candidates. */
typedef struct gemm_call {
    cublasHandle_t h;
    cublasOperation_t opb, opa;
    int n, m, k;
    const void *alpha, *b;
    cudaDataType_t ct;
    int ldb;
    long long sb;
    const void *a;
    int lda;
    long long sa;
    const void *beta;
    void *c;
    int ldc;
    long long sc;
    int batch;
    cublasComputeType_t comp;
    int64_t mm, nn, kk, nbatch; /* for the message */
    bool ta, tb;
} gemm_call;

static kn_status gemm_run(void *ctx) {
    const gemm_call *g = (const gemm_call *)ctx;
    cublasStatus_t s = cublasGemmStridedBatchedEx(g->h, g->opb, g->opa, g->n, g->m, g->k, g->alpha, g->b, g->ct, g->ldb,
                                                  g->sb, g->a, g->ct, g->lda, g->sa, g->beta, g->c, g->ct, g->ldc, g->sc,
                                                  g->batch, g->comp, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS)
        return kn_error(KN_ERR_DEVICE, "matmul: cublasGemmStridedBatchedEx(m=%lld, n=%lld, k=%lld, batch=%lld, ta=%d, tb=%d) "
                        "failed at %s:%d: %s (%s)", (long long)g->mm, (long long)g->nn, (long long)g->kk,
                        (long long)g->nbatch, (int)g->ta, (int)g->tb, __FILE__, __LINE__, cublasGetStatusString(s),
                        cublasGetStatusName(s));
    return KN_OK;
}

KNC_KERNEL(knc_matmul) {
    const kn_tensor *a = in[0], *b = in[1];
    const kn_type *t = &n->type;
    kn_dtype dt = t->dtype;
    if (dt != KN_DT_F32 && dt != KN_DT_F64 && dt != KN_DT_BF16 && dt != KN_DT_F16) return knc_unsupported(n, dt);
    if (a->dtype != dt || b->dtype != dt) return knc_unsupported(n, a->dtype != dt ? a->dtype : b->dtype);
    bool ta = n->attrs.ta, tb = n->attrs.tb;
    int64_t m = t->shape[t->ndim - 2], nn = t->shape[t->ndim - 1];
    int64_t k = ta ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1];
    int nb = t->ndim - 2;
    int64_t nbatch = 1;
    for (int i = 0; i < nb; i++) nbatch *= t->shape[i];
    if (m > INT32_MAX || nn > INT32_MAX || k > INT32_MAX || nbatch > INT32_MAX)
        return kn_error(KN_ERR_UNSUPPORTED, "matmul: sizes m=%lld n=%lld k=%lld batch=%lld exceed cuBLAS's int range",
                        (long long)m, (long long)nn, (long long)k, (long long)nbatch);
    KN_TRY(knc_new_out(n, knc_dev(in), out));
    if (m * nn * nbatch == 0) return KN_OK;
    kn_tensor *ma = NULL, *mb = NULL;
    kn_status st = KN_OK;
    int ka = batch_kind(a->ndim - 2, a->shape, nb, t->shape), kb = batch_kind(b->ndim - 2, b->shape, nb, t->shape);
    if (ka == 2) { st = materialize(a, nb, t->shape, &ma); a = ma; ka = 1; }
    if (st == KN_OK && kb == 2) { st = materialize(b, nb, t->shape, &mb); b = mb; kb = 1; }
    bool done = false;
    if (st == KN_OK && m <= KN_GEMV_MAX_M) { /* a few rows: the GEMV streams the weights */
        if (dt == KN_DT_BF16 && nbatch == 1 && k > 0) {
            kn_gemv_args g = {.m = (int)m, .n = nn, .k = k, .a = kn_tensor_data(a), .a_f32 = false, .ta = ta,
                              .w = (const unsigned short *)kn_tensor_data(b), .tb = tb, .bias = NULL, .gelu = false,
                              .c = kn_tensor_data(*out), .c_f32 = false, .aux = NULL};
            st = knc_gemv(&g, knc_dev(in).index, &done);
        } else if (dt == KN_DT_BF16)
            knc_gemv_count_cublas();
    }
    cublasHandle_t h = NULL;
    if (st == KN_OK && !done) st = get_handle(knc_dev(in).index, &h);
    if (st == KN_OK && !done && k == 0) { /* an empty sum: zeros (cuBLAS would reject lda = 0) */
        cudaError_t e = cudaMemsetAsync(kn_tensor_data(*out), 0, (size_t)(m * nn * nbatch) * kn_dtype_size(dt), knc_stream);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            st = kn_error(KN_ERR_DEVICE, "matmul: cudaMemsetAsync failed: %s", cudaGetErrorString(e));
        }
    } else if (st == KN_OK && !done) {
        /* Column-major view: C^T[n, m] = op(B)^T [n, k] * op(A)^T [k, m]. */
        cublasOperation_t opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
        int ldb = (int)(tb ? k : nn), lda = (int)(ta ? m : k), ldc = (int)nn;
        long long sa = ka ? (long long)(m * k) : 0, sb = kb ? (long long)(k * nn) : 0, sc = (long long)(m * nn);
        double one64 = 1.0, zero64 = 0.0;
        float one32 = 1.0f, zero32 = 0.0f;
        bool f64 = dt == KN_DT_F64;
        cudaDataType_t ct = f64 ? CUDA_R_64F : dt == KN_DT_BF16 ? CUDA_R_16BF : dt == KN_DT_F16 ? CUDA_R_16F : CUDA_R_32F;
        cublasComputeType_t comp = f64 ? CUBLAS_COMPUTE_64F
                                   : dt == KN_DT_F32 && knc_tf32_allowed() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
        gemm_call g = {h, opb, opa, (int)nn, (int)m, (int)k, f64 ? (const void *)&one64 : (const void *)&one32,
                       kn_tensor_data(b), ct, ldb, sb, kn_tensor_data(a), lda, sa,
                       f64 ? (const void *)&zero64 : (const void *)&zero32, kn_tensor_data(*out), ldc, sc, (int)nbatch, comp,
                       m, nn, k, nbatch, ta, tb};
        /* f64, kiln's reference precision, keeps cuBLAS's own choice; the others are tuned */
        if (!f64 && knc_matmul_tune_on())
            st = knc_matmul_tuned(knc_dev(in).index, dt, ta, tb, m, nn, k, nbatch, sa, sb, kn_tensor_data(a),
                                  kn_tensor_data(b), kn_tensor_data(*out), gemm_run, &g);
        else st = gemm_run(&g);
    }
    kn_tensor_free(ma);
    kn_tensor_free(mb);
    if (st != KN_OK) { kn_tensor_free(*out); *out = NULL; }
    return st;
}
