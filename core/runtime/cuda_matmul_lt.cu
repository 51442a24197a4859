/* cuda_matmul_lt.cu — the products with an epilogue (matmul_bias, matmul_bias_gelu,
 * matmul_dgelu, matmul_bgrad; the `epilogue` pass makes them) through cuBLASLt.
 *
 * cublasLtMatmul runs the product and, in the same kernel, an epilogue on the tile it just
 * computed, before the tile reaches memory (CUBLASLT_MATMUL_DESC_EPILOGUE):
 *
 *     matmul_bias       BIAS           D = A B + bias                  (bias: BIAS_POINTER)
 *     matmul_bias_gelu  GELU_AUX_BIAS  D = gelu(A B + bias), aux = A B + bias (AUX_POINTER, AUX_LD)
 *     matmul_dgelu      DGELU          D = A B * gelu'(aux)            (aux: the pre-activation)
 *     matmul_bgrad      BGRADA         D = A B, bias = sum of A over k (BIAS_POINTER is written)
 *
 * cuBLASLt's GELU is the tanh approximation, kiln's (kiln/scalar.h): the same function, not
 * the same bits. The layout is cuda_matmul.cu's: row-major C = op(a) op(b) is column-major
 * C^T = op(b)^T op(a)^T, so kiln's b is cuBLASLt's A and kiln's a its B; a bias per column of
 * kiln's row-major result is then a bias per row of D, which is what BIAS adds and BGRADA
 * (the sum over k of A = kiln's b [K, N]: a weight gradient's bias gradient) gives. The two
 * results of matmul_bias_gelu and matmul_bgrad are stacked rows of one buffer (ops.def): the
 * aux matrix starts m * n elements after D, and so does the bias gradient.
 *
 * Precision as knc_matmul's: f32 in f32 (TF32 with KILN_TF32=1), f64 in f64, bf16/f16
 * operands with an f32 result in f32 on the tensor cores. The algorithm is cuBLASLt's
 * heuristic's first answer, asked once per shape, dtypes, epilogue and pointer alignment and
 * cached. One handle and one 32 MiB workspace per GPU, made on first use (so nothing is
 * allocated while a CUDA graph is captured); every call on knc_stream. Where cuBLASLt has no
 * algorithm for an epilogue (f64, say, or a layout it does not fuse), or its matmul refuses
 * it, the product runs without the epilogue and small kernels here apply it (bias add, gelu
 * keeping the aux, gelu', and sum's own column sum kernel): the same results, about the speed
 * of the unfused step. The GELU epilogues in f64 always take that path: cuBLASLt's GELU
 * and GELU' are 4e-12 and 3e-10 off in f64, outside kiln's 1e-12 for f64.
 * KILN_LT_EPILOGUE=0 forces that path (the GPU test compares both). matmul_bias and
 * matmul_bias_gelu of at most KN_GEMV_MAX_M rows with bf16 operands (a decode step's) run
 * the weight-streaming GEMV with the epilogue in its last step instead where KILN_GEMV=1
 * (cuda_gemv.cu; otherwise cuBLASLt as above); its gelu is kiln's (kiln/scalar.h). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wswitch-enum"
#include <cublasLt.h>
#pragma GCC diagnostic pop
#include <array>
#include <map>
#include <mutex>

#include "runtime/cuda_gemv.h"
#include "runtime/cuda_impl.h"
extern "C" {
#include "kiln/gemm.h" /* the cache directory (kn_gemm_cache_dir) */
}

#define KNC_LT_MAX_GPUS 64
#define KNC_LT_WORKSPACE ((size_t)32 << 20)

typedef struct lt_gpu {
    cublasLtHandle_t h;
    void *ws;
} lt_gpu;

static lt_gpu lt_gpus[KNC_LT_MAX_GPUS];
static std::mutex lt_mu;

/* The heuristic's answer for one problem: ok false when cuBLASLt has no algorithm for it. */
typedef struct lt_plan {
    bool ok;
    cublasLtMatmulAlgo_t algo;
} lt_plan;
typedef std::array<int64_t, 14> lt_key;
static std::map<lt_key, lt_plan> lt_plans;

static kn_status lt_get(int dev, lt_gpu *out) {
    if (dev < 0 || dev >= KNC_LT_MAX_GPUS) return kn_error(KN_ERR_DEVICE, "cuBLASLt: GPU index %d out of range", dev);
    std::lock_guard<std::mutex> lock(lt_mu);
    if (!lt_gpus[dev].h) {
        KN_CUDA_TRY(cudaSetDevice(dev));
        void *ws = NULL;
        KN_CUDA_TRY(cudaMalloc(&ws, KNC_LT_WORKSPACE));
        cublasLtHandle_t h = NULL;
        cublasStatus_t s = cublasLtCreate(&h);
        if (s != CUBLAS_STATUS_SUCCESS) {
            KN_CUDA_WARN(cudaFree(ws));
            return kn_error(KN_ERR_DEVICE, "cublasLtCreate failed: %s", cublasLtGetStatusString(s));
        }
        lt_gpus[dev].h = h;
        lt_gpus[dev].ws = ws;
    }
    *out = lt_gpus[dev];
    return KN_OK;
}

static bool lt_epilogue_allowed(void) {
    static int v = -1;
    if (v < 0) {
        const char *s = getenv("KILN_LT_EPILOGUE");
        v = !(s && s[0] == '0');
    }
    return v == 1;
}

/* The largest power of two (up to 256) that divides the address: cuBLASLt's kernels need
 * their pointers at least as aligned as the heuristic was told. */
static int64_t lt_align(const void *p) {
    uintptr_t a = (uintptr_t)p;
    int64_t al = 256;
    while (al > 1 && (a % (uintptr_t)al)) al /= 2;
    return al;
}

static cudaDataType_t lt_type(kn_dtype dt) {
    return dt == KN_DT_F64 ? CUDA_R_64F : dt == KN_DT_BF16 ? CUDA_R_16BF : dt == KN_DT_F16 ? CUDA_R_16F : CUDA_R_32F;
}

/* ---------------------------------------------------------------- the epilogues by hand */

template <typename T>
__global__ void lt_bias_kernel(T *p, const T *bias, int64_t n, int64_t total) {
    KNC_FOR_I(int64_t, i, total) p[i] = p[i] + bias[i % n];
}

template <typename T>
__global__ void lt_gelu_kernel(const T *x, T *y, int64_t total) {
    KNC_FOR_I(int64_t, i, total) y[i] = knc_sc_unary(KN_UNARY_GELU, x[i]);
}

template <typename T>
__global__ void lt_dgelu_kernel(T *p, const T *pre, int64_t total) {
    KNC_FOR_I(int64_t, i, total) p[i] = knc_sc_unary_grad(KN_UNARY_GELU, p[i], pre[i]);
}

/* The epilogue of op applied to the plain product in c (c's first m*n elements; for
 * matmul_bias_gelu the product goes to the aux rows first); bt is kiln's b, whose column
 * sum matmul_bgrad appends. */
template <typename T>
static kn_status lt_epilogue_by_hand(kn_op op, T *c, const kn_tensor *bt, const T *e, int64_t m, int64_t nn) {
    int64_t mn = m * nn;
    unsigned g = knc_blocks(mn);
    if (op == KN_OP_MATMUL_BIAS || op == KN_OP_MATMUL_BIAS_GELU) {
        T *p = op == KN_OP_MATMUL_BIAS_GELU ? c + mn : c;
        lt_bias_kernel<T><<<g, KNC_THREADS, 0, knc_stream>>>(p, e, nn, mn);
        KNC_LAUNCHED(lt_bias_kernel);
        if (op == KN_OP_MATMUL_BIAS_GELU) {
            lt_gelu_kernel<T><<<g, KNC_THREADS, 0, knc_stream>>>(p, c, mn);
            KNC_LAUNCHED(lt_gelu_kernel);
        }
    } else if (op == KN_OP_MATMUL_DGELU) {
        lt_dgelu_kernel<T><<<g, KNC_THREADS, 0, knc_stream>>>(c, e, mn);
        KNC_LAUNCHED(lt_dgelu_kernel);
    } else if (op == KN_OP_MATMUL_BGRAD) { /* sum's own column sum (chunks of rows in a fixed order), then copied */
        kn_node s;
        memset(&s, 0, sizeof s);
        s.op = KN_OP_SUM;
        s.nin = 1;
        s.attrs = kn_attrs_default();
        s.attrs.naxes = 1;
        s.type.dtype = bt->dtype;
        s.type.ndim = 1;
        s.type.shape[0] = nn;
        kn_tensor *cs = NULL;
        KN_TRY(knc_reduce(&s, &bt, &cs));
        cudaError_t ce = cudaMemcpyAsync(c + mn, kn_tensor_data(cs), (size_t)nn * sizeof(T), cudaMemcpyDeviceToDevice,
                                         knc_stream);
        kn_tensor_free(cs); /* stream order: the copy reading it runs before any reuse */
        if (ce != cudaSuccess) {
            (void)cudaGetLastError();
            return kn_error(KN_ERR_DEVICE, "matmul_bgrad: cudaMemcpyAsync failed: %s", cudaGetErrorString(ce));
        }
    }
    return KN_OK;
}

/* ---------------------------------------------------------------- cuBLASLt */

/* One cublasLtMatmul of the problem; fused: with op's epilogue (else DEFAULT, the plain
 * product, into the aux rows for matmul_bias_gelu). *done false: cuBLASLt has no algorithm
 * for it (nothing was queued). */
static kn_status lt_matmul(const lt_gpu &G, int dev, kn_op op, bool fused, kn_dtype idt, kn_dtype odt, bool ta, bool tb,
                           int64_t m, int64_t nn, int64_t k, const void *a, const void *b, const void *e, void *c,
                           bool *done) {
    bool f64 = odt == KN_DT_F64, low = idt == KN_DT_BF16 || idt == KN_DT_F16;
    cublasComputeType_t comp = f64 ? CUBLAS_COMPUTE_64F
                               : !low && knc_tf32_allowed() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    if (fused)
        epi = op == KN_OP_MATMUL_BIAS        ? CUBLASLT_EPILOGUE_BIAS
              : op == KN_OP_MATMUL_BIAS_GELU ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
              : op == KN_OP_MATMUL_DGELU     ? CUBLASLT_EPILOGUE_DGELU
                                             : CUBLASLT_EPILOGUE_BGRADA;
    void *d = c, *aux = NULL, *bias = NULL;
    int64_t ld_aux = nn;
    if (op == KN_OP_MATMUL_BIAS_GELU) {
        if (fused) aux = (char *)c + (size_t)(m * nn) * kn_dtype_size(odt);
        else d = (char *)c + (size_t)(m * nn) * kn_dtype_size(odt); /* the by-hand epilogue starts from the aux rows */
    }
    if (fused && op == KN_OP_MATMUL_DGELU) aux = (void *)e;
    if (fused && (op == KN_OP_MATMUL_BIAS || op == KN_OP_MATMUL_BIAS_GELU)) bias = (void *)e;
    if (fused && op == KN_OP_MATMUL_BGRAD) bias = (char *)c + (size_t)(m * nn) * kn_dtype_size(odt);
    cudaDataType_t it = lt_type(idt), ot = lt_type(odt), st = f64 ? CUDA_R_64F : CUDA_R_32F;
    cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    /* cuBLASLt's A is kiln's b (op(A) [nn, k]), its B kiln's a (op(B) [k, m]), D is [nn, m] */
    const void *A = b, *B = a;
    lt_key key = {dev, (int64_t)epi, m, nn, k, ta, tb, (int64_t)idt, (int64_t)odt, (int64_t)comp,
                  lt_align(A) * 1000 + lt_align(B), lt_align(d), aux ? lt_align(aux) : 0, bias ? lt_align(bias) : 0};
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    kn_status s = KN_OK;
    *done = false;
#define LT(call)                                                                                          \
    do {                                                                                                  \
        cublasStatus_t q_ = (call);                                                                       \
        if (q_ != CUBLAS_STATUS_SUCCESS && s == KN_OK)                                                    \
            s = kn_error(KN_ERR_DEVICE, "%s: %s failed at %s:%d: %s (%s)", kn_op_name(op), #call, __FILE__, \
                         __LINE__, cublasLtGetStatusString(q_), cublasLtGetStatusName(q_));                \
    } while (0)
    LT(cublasLtMatmulDescCreate(&desc, comp, st));
    if (s == KN_OK) {
        int32_t oa = opa, ob = opb;
        LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa));
        LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob));
        LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        if (bias) LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
        if (aux) {
            LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
            LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld_aux, sizeof ld_aux));
        }
        LT(cublasLtMatrixLayoutCreate(&la, it, (uint64_t)(tb ? k : nn), (uint64_t)(tb ? nn : k), tb ? k : nn));
        LT(cublasLtMatrixLayoutCreate(&lb, it, (uint64_t)(ta ? m : k), (uint64_t)(ta ? k : m), ta ? m : k));
        LT(cublasLtMatrixLayoutCreate(&ld, ot, (uint64_t)nn, (uint64_t)m, nn));
    }
    lt_plan plan = {false, {}};
    bool known = false;
    if (s == KN_OK) {
        std::lock_guard<std::mutex> lock(lt_mu);
        auto it2 = lt_plans.find(key);
        if (it2 != lt_plans.end()) { plan = it2->second; known = true; }
    }
    if (s == KN_OK && !known) { /* ask the heuristic once for this problem */
        LT(cublasLtMatmulPreferenceCreate(&pref));
        uint64_t wsz = KNC_LT_WORKSPACE;
        uint32_t al_a = (uint32_t)lt_align(A), al_b = (uint32_t)lt_align(B), al_d = (uint32_t)lt_align(d);
        LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsz, sizeof wsz));
        LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
        LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
        LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof al_d));
        LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d));
        bool aligned = (!bias || lt_align(bias) >= 16) && (!aux || lt_align(aux) >= 16);
        if (s == KN_OK && !aligned) { /* the epilogue's vectors are read 16 bytes at a time: by hand */
            kn_log(KN_LOG_INFO, "%s: the bias or aux pointer is not 16-byte aligned; the epilogue runs as separate "
                   "kernels", kn_op_name(op));
            std::lock_guard<std::mutex> lock(lt_mu);
            lt_plans[key] = plan;
        } else if (s == KN_OK) {
            cublasLtMatmulHeuristicResult_t r = {};
            int nres = 0;
            cublasStatus_t q = cublasLtMatmulAlgoGetHeuristic(G.h, desc, la, lb, ld, ld, pref, 1, &r, &nres);
            plan.ok = q == CUBLAS_STATUS_SUCCESS && nres > 0 && r.state == CUBLAS_STATUS_SUCCESS;
            if (plan.ok) plan.algo = r.algo;
            else if (q != CUBLAS_STATUS_SUCCESS && q != CUBLAS_STATUS_NOT_SUPPORTED)
                s = kn_error(KN_ERR_DEVICE, "%s: cublasLtMatmulAlgoGetHeuristic failed: %s (%s)", kn_op_name(op),
                             cublasLtGetStatusString(q), cublasLtGetStatusName(q));
            if (s == KN_OK && !plan.ok && fused)
                kn_log(KN_LOG_INFO, "%s: cuBLASLt has no algorithm for this epilogue (m=%lld n=%lld k=%lld ta=%d tb=%d %s); "
                       "the epilogue runs as separate kernels", kn_op_name(op), (long long)m, (long long)nn, (long long)k,
                       (int)ta, (int)tb, kn_dtype_name(odt));
            std::lock_guard<std::mutex> lock(lt_mu);
            if (s == KN_OK) lt_plans[key] = plan;
        }
    }
    if (s == KN_OK && plan.ok) {
        double one64 = 1.0, zero64 = 0.0;
        float one32 = 1.0f, zero32 = 0.0f;
        const void *alpha = f64 ? (const void *)&one64 : (const void *)&one32;
        const void *beta = f64 ? (const void *)&zero64 : (const void *)&zero32;
        cublasStatus_t q = cublasLtMatmul(G.h, desc, alpha, A, la, B, lb, beta, d, ld, d, ld, &plan.algo, G.ws,
                                          KNC_LT_WORKSPACE, knc_stream);
        if (q == CUBLAS_STATUS_SUCCESS) *done = true;
        else if (fused) { /* refused before anything was queued: the epilogue by hand, from now on */
            kn_log(KN_LOG_INFO, "%s: cublasLtMatmul refused the epilogue (%s); it runs as separate kernels",
                   kn_op_name(op), cublasLtGetStatusName(q));
            std::lock_guard<std::mutex> lock(lt_mu);
            lt_plans[key].ok = false;
        } else
            s = kn_error(KN_ERR_DEVICE, "%s: cublasLtMatmul(m=%lld, n=%lld, k=%lld, ta=%d, tb=%d) failed at %s:%d: %s (%s)",
                         kn_op_name(op), (long long)m, (long long)nn, (long long)k, (int)ta, (int)tb, __FILE__, __LINE__,
                         cublasLtGetStatusString(q), cublasLtGetStatusName(q));
    }
#undef LT
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (desc) cublasLtMatmulDescDestroy(desc);
    return s;
}

KNC_KERNEL(knc_matmul_ep) {
    const kn_tensor *a = in[0], *b = in[1], *e = n->nin > 2 ? in[2] : NULL;
    kn_op op = n->op;
    if (op != KN_OP_MATMUL_BIAS && op != KN_OP_MATMUL_BIAS_GELU && op != KN_OP_MATMUL_DGELU && op != KN_OP_MATMUL_BGRAD)
        return knc_no_kernel(n, "knc_matmul_ep");
    kn_dtype odt = n->type.dtype, idt = a->dtype;
    if (odt != KN_DT_F32 && odt != KN_DT_F64) return knc_unsupported(n, odt);
    if (b->dtype != idt || (e && e->dtype != odt) ||
        (idt != odt && !(odt == KN_DT_F32 && (idt == KN_DT_BF16 || idt == KN_DT_F16))))
        return knc_unsupported(n, idt);
    bool ta = n->attrs.ta, tb = n->attrs.tb;
    int64_t m = ta ? a->shape[1] : a->shape[0], k = ta ? a->shape[0] : a->shape[1], nn = tb ? b->shape[0] : b->shape[1];
    if (m > INT32_MAX || nn > INT32_MAX || k > INT32_MAX)
        return kn_error(KN_ERR_UNSUPPORTED, "%s: sizes m=%lld n=%lld k=%lld exceed cuBLASLt's int range", kn_op_name(op),
                        (long long)m, (long long)nn, (long long)k);
    KN_TRY(knc_new_out(n, knc_dev(in), out));
    kn_status st = KN_OK;
    void *c = kn_tensor_data(*out);
    size_t es = kn_dtype_size(odt);
    if (m * nn == 0 || k == 0) { /* an empty product: zeros, then the epilogue */
        cudaError_t ce = cudaMemsetAsync(c, 0, (size_t)kn_tensor_numel(*out) * es, knc_stream);
        if (ce != cudaSuccess) {
            (void)cudaGetLastError();
            st = kn_error(KN_ERR_DEVICE, "%s: cudaMemsetAsync failed: %s", kn_op_name(op), cudaGetErrorString(ce));
        }
        /* the epilogue of a zero product: a bias, gelu' of zeros, b's column sum (k rows) */
        bool ep = op == KN_OP_MATMUL_BGRAD ? k > 0 && nn > 0 : m * nn > 0;
        const void *ev = e ? kn_tensor_data(e) : NULL;
        if (st == KN_OK && ep && odt == KN_DT_F64)
            st = lt_epilogue_by_hand<double>(op, (double *)c, b, (const double *)ev, m, nn);
        else if (st == KN_OK && ep)
            st = lt_epilogue_by_hand<float>(op, (float *)c, b, (const float *)ev, m, nn);
    } else {
        lt_gpu G;
        bool done = false;
        if (m <= KN_GEMV_MAX_M && idt == KN_DT_BF16 && odt == KN_DT_F32) {
            if (op == KN_OP_MATMUL_BIAS || op == KN_OP_MATMUL_BIAS_GELU) { /* a few rows: the GEMV, epilogue and all */
                kn_gemv_args g = {.m = (int)m, .n = nn, .k = k, .a = kn_tensor_data(a), .a_f32 = false, .ta = ta,
                                  .w = (const unsigned short *)kn_tensor_data(b), .tb = tb,
                                  .bias = (const float *)kn_tensor_data(e), .gelu = op == KN_OP_MATMUL_BIAS_GELU,
                                  .c = c, .c_f32 = true,
                                  .aux = op == KN_OP_MATMUL_BIAS_GELU ? (float *)c + m * nn : NULL};
                st = knc_gemv(&g, knc_dev(in).index, &done);
                if (st == KN_OK && done) return KN_OK;
            } else
                knc_gemv_count_cublas();
        }
        if (st == KN_OK) st = lt_get(knc_dev(in).index, &G);
        /* f64 is kiln's reference precision (the CPU within 1e-12): cuBLASLt's GELU and
         * GELU' epilogues in f64 differ by up to 3e-10 (H100, 2026-11-25), so f64 takes
         * them by hand */
        bool gelu = op == KN_OP_MATMUL_BIAS_GELU || op == KN_OP_MATMUL_DGELU;
        if (st == KN_OK && lt_epilogue_allowed() && !(gelu && odt == KN_DT_F64))
            st = lt_matmul(G, knc_dev(in).index, op, true, idt, odt, ta, tb, m, nn, k, kn_tensor_data(a),
                           kn_tensor_data(b), e ? kn_tensor_data(e) : NULL, c, &done);
        if (st == KN_OK && !done) { /* the plain product, then the epilogue by hand */
            st = lt_matmul(G, knc_dev(in).index, op, false, idt, odt, ta, tb, m, nn, k, kn_tensor_data(a),
                           kn_tensor_data(b), NULL, c, &done);
            if (st == KN_OK && !done)
                st = kn_error(KN_ERR_UNSUPPORTED, "%s: cuBLASLt has no algorithm for the plain product (m=%lld n=%lld "
                              "k=%lld, %s operands)", kn_op_name(op), (long long)m, (long long)nn, (long long)k,
                              kn_dtype_name(idt));
            done = false; /* the epilogue is still to apply */
        }
        if (st == KN_OK && !done) {
            const void *ev = e ? kn_tensor_data(e) : NULL;
            if (odt == KN_DT_F64) st = lt_epilogue_by_hand<double>(op, (double *)c, b, (const double *)ev, m, nn);
            else st = lt_epilogue_by_hand<float>(op, (float *)c, b, (const float *)ev, m, nn);
        }
    }
    if (st != KN_OK) { kn_tensor_free(*out); *out = NULL; }
    return st;
}

/* ---------------------------------------------------------------- the plain product, autotuned
 *
 * cuBLAS's own choice for a problem (cublasGemmStridedBatchedEx with CUBLAS_GEMM_DEFAULT) is
 * a heuristic's guess, and for some of a GPT step's shapes a poor one: on the H100 (TF32,
 * 2026-11-25) the weight gradients X^T dY with k = 8192 and a [768, 768] result ran at 122
 * TFLOP/s, where [768, 3072] products reached 310. So the matmul op's product is tuned, as
 * compilers tune kernels: the first time a problem is seen (shape, transposes, batch, dtypes,
 * compute type, pointer alignment), cuBLAS's own choice and up to KNC_TUNE_CANDIDATES of
 * cuBLASLt's heuristic answers are each run once to warm up and then KNC_TUNE_RUNS times
 * between two events on the problem's own operands (the output is written each time; the
 * last, real run writes it again), and the fastest runs from then on. The choice (-1:
 * cuBLAS's own; i: the heuristic's i-th answer, a list that is the same for the same cuBLAS,
 * GPU and problem) is remembered in memory and written to <cache>/matmul-tune/, so later
 * processes take the same algorithm without timing: every algorithm is deterministic (cuBLAS
 * gives the same bits on the same GPU model), so a run stays bit for bit reproducible across
 * processes as long as the cache holds the choice. Nothing is timed while a CUDA graph is
 * captured (events and waits are not allowed): a problem first seen there runs cuBLAS's own
 * choice, unremembered (a graph's warm-up run, uncaptured, tunes first). KILN_MATMUL_TUNE=0
 * keeps cuBLAS's own choice everywhere. Measured on the H100 (2026-11-25, GPT-2 124M step):
 * TF32 62.96 -> 60.36 ms a step (the [768, 3072] weight gradient 3.48 -> 2.55 ms over its
 * 12 calls); bf16 unchanged (32.1 ms with flash and a graph). Split-K by 2, 4 and 8 (k cut
 * into chunks computed as one strided batch into f32 partials, summed in order) was tried as
 * a further candidate and never won on those shapes, so it is not one. */
#define KNC_TUNE_CANDIDATES 8
#define KNC_TUNE_RUNS 3

typedef struct tune_plan {
    int choice; /* -1: cuBLAS's own; else the heuristic's answer of that index */
    cublasLtMatmulAlgo_t algo;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
} tune_plan;
typedef std::array<int64_t, 14> tune_key;
static std::map<tune_key, tune_plan> tune_plans;

bool knc_matmul_tune_on(void) {
    static int v = -1;
    if (v < 0) {
        const char *s = getenv("KILN_MATMUL_TUNE");
        v = !(s && s[0] == '0');
    }
    return v == 1;
}

/* The cache file of a problem: <cache>/matmul-tune/<GPU>-<key>; false when there is none to
 * use (no cache directory: the choice then lives in memory only). */
static bool tune_path(int dev, const tune_key &key, char *out, size_t cap) {
    char dir[640], sub[704];
    if (kn_gemm_cache_dir(dir, sizeof dir) != KN_OK) {
        kn_clear_error();
        return false;
    }
    cudaDeviceProp pr;
    if (cudaGetDeviceProperties(&pr, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    char name[sizeof pr.name + 1];
    snprintf(name, sizeof name, "%s", pr.name);
    for (char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9'))) *p = '_';
    snprintf(sub, sizeof sub, "%s/matmul-tune", dir);
    if (kn_cache_mkdirs(sub) != KN_OK) {
        kn_clear_error();
        return false;
    }
    int w = snprintf(out, cap, "%s/%s-cublas%d", sub, name, (int)cublasLtGetVersion());
    for (size_t i = 1; i < key.size() && w > 0 && (size_t)w < cap; i++) w += snprintf(out + w, cap - (size_t)w, "-%lld", (long long)key[i]);
    return w > 0 && (size_t)w < cap;
}

/* The descriptors of a problem (column-major, as lt_matmul: kiln's b is cuBLASLt's A). */
static kn_status tune_describe(kn_dtype dt, cublasComputeType_t comp, bool ta, bool tb, int64_t m, int64_t nn,
                               int64_t k, int64_t batch, int64_t sa, int64_t sb, tune_plan *p) {
    cudaDataType_t t = lt_type(dt);
    int32_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N, nb = (int32_t)batch;
    int64_t sd = m * nn;
    kn_status s = KN_OK;
#define TL(call)                                                                                                       \
    do {                                                                                                               \
        cublasStatus_t q_ = (call);                                                                                    \
        if (q_ != CUBLAS_STATUS_SUCCESS && s == KN_OK)                                                                 \
            s = kn_error(KN_ERR_DEVICE, "matmul: %s failed: %s (%s)", #call, cublasLtGetStatusString(q_),             \
                         cublasLtGetStatusName(q_));                                                                   \
    } while (0)
    TL(cublasLtMatmulDescCreate(&p->desc, comp, CUDA_R_32F));
    if (s != KN_OK) return s;
    TL(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    TL(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    TL(cublasLtMatrixLayoutCreate(&p->la, t, (uint64_t)(tb ? k : nn), (uint64_t)(tb ? nn : k), tb ? k : nn));
    TL(cublasLtMatrixLayoutCreate(&p->lb, t, (uint64_t)(ta ? m : k), (uint64_t)(ta ? k : m), ta ? m : k));
    TL(cublasLtMatrixLayoutCreate(&p->ld, t, (uint64_t)nn, (uint64_t)m, nn));
    if (s == KN_OK && batch > 1) {
        TL(cublasLtMatrixLayoutSetAttribute(p->la, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &nb, sizeof nb));
        TL(cublasLtMatrixLayoutSetAttribute(p->la, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sb, sizeof sb));
        TL(cublasLtMatrixLayoutSetAttribute(p->lb, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &nb, sizeof nb));
        TL(cublasLtMatrixLayoutSetAttribute(p->lb, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sa, sizeof sa));
        TL(cublasLtMatrixLayoutSetAttribute(p->ld, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &nb, sizeof nb));
        TL(cublasLtMatrixLayoutSetAttribute(p->ld, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sd, sizeof sd));
    }
#undef TL
    return s;
}

static void tune_forget(tune_plan *p) {
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->ld) cublasLtMatrixLayoutDestroy(p->ld);
    if (p->desc) cublasLtMatmulDescDestroy(p->desc);
    memset(p, 0, sizeof *p);
}

static kn_status tune_run(const lt_gpu &G, const tune_plan &p, const cublasLtMatmulAlgo_t *algo, const void *a,
                          const void *b, void *c) {
    float one = 1.0f, zero = 0.0f;
    cublasStatus_t q = cublasLtMatmul(G.h, p.desc, &one, b, p.la, a, p.lb, &zero, c, p.ld, c, p.ld, algo, G.ws,
                                      KNC_LT_WORKSPACE, knc_stream);
    if (q != CUBLAS_STATUS_SUCCESS)
        return kn_error(KN_ERR_DEVICE, "matmul: cublasLtMatmul failed: %s (%s)", cublasLtGetStatusString(q),
                        cublasLtGetStatusName(q));
    return KN_OK;
}

/* Milliseconds of KNC_TUNE_RUNS runs of candidate i (-1: base) after one warm-up; a
 * candidate that fails (cuBLASLt may refuse an answer at run time) gets +inf. */
static double tune_time(const lt_gpu &G, const tune_plan &p, const cublasLtMatmulAlgo_t *algo, const void *a,
                        const void *b, void *c, kn_status (*base)(void *), void *ctx, cudaEvent_t e0, cudaEvent_t e1) {
    kn_status s = algo ? tune_run(G, p, algo, a, b, c) : base(ctx);
    if (s == KN_OK && cudaEventRecord(e0, knc_stream) != cudaSuccess) s = KN_ERR_DEVICE;
    for (int r = 0; s == KN_OK && r < KNC_TUNE_RUNS; r++) s = algo ? tune_run(G, p, algo, a, b, c) : base(ctx);
    float ms = 0;
    if (s == KN_OK && (cudaEventRecord(e1, knc_stream) != cudaSuccess || cudaEventSynchronize(e1) != cudaSuccess ||
                       cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess))
        s = KN_ERR_DEVICE;
    if (s != KN_OK) {
        (void)cudaGetLastError();
        kn_clear_error();
        return INFINITY;
    }
    return ms;
}

kn_status knc_matmul_tuned(int dev, kn_dtype dt, bool ta, bool tb, int64_t m, int64_t nn, int64_t k, int64_t batch,
                           int64_t sa, int64_t sb, const void *a, const void *b, void *c, kn_status (*base)(void *),
                           void *ctx) {
    bool low = dt == KN_DT_BF16 || dt == KN_DT_F16;
    cublasComputeType_t comp = !low && knc_tf32_allowed() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    tune_key key = {dev, m, nn, k, ta, tb, batch, sa != 0, sb != 0, (int64_t)dt, (int64_t)comp,
                    lt_align(a), lt_align(b), lt_align(c)};
    tune_plan plan;
    bool known = false;
    {
        std::lock_guard<std::mutex> lock(lt_mu);
        auto f = tune_plans.find(key);
        if (f != tune_plans.end()) { plan = f->second; known = true; }
    }
    if (!known && knc_capturing()) return base(ctx); /* no timing inside a capture */
    lt_gpu G;
    KN_TRY(lt_get(dev, &G));
    if (!known) {
        memset(&plan, 0, sizeof plan);
        plan.choice = -1;
        kn_status s = tune_describe(dt, comp, ta, tb, m, nn, k, batch, sa, sb, &plan);
        cublasLtMatmulHeuristicResult_t r[KNC_TUNE_CANDIDATES];
        int nres = 0;
        cublasLtMatmulPreference_t pref = NULL;
        if (s == KN_OK && cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS) {
            uint64_t wsz = KNC_LT_WORKSPACE;
            uint32_t al[3] = {(uint32_t)lt_align(b), (uint32_t)lt_align(a), (uint32_t)lt_align(c)};
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsz, sizeof wsz);
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], sizeof al[0]);
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], sizeof al[1]);
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], sizeof al[2]);
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[2], sizeof al[2]);
            if (cublasLtMatmulAlgoGetHeuristic(G.h, plan.desc, plan.la, plan.lb, plan.ld, plan.ld, pref,
                                               KNC_TUNE_CANDIDATES, r, &nres) != CUBLAS_STATUS_SUCCESS)
                nres = 0;
            cublasLtMatmulPreferenceDestroy(pref);
        }
        if (s != KN_OK) nres = 0; /* no cuBLASLt descriptors: cuBLAS's own choice */
        char path[1024];
        bool cached = false, has_path = tune_path(dev, key, path, sizeof path);
        if (has_path) { /* an earlier process's choice */
            FILE *fp = fopen(path, "r");
            int i = -2;
            if (fp) {
                if (fscanf(fp, "%d", &i) == 1 && i >= -1 && i < nres && (i < 0 || r[i].state == CUBLAS_STATUS_SUCCESS)) {
                    plan.choice = i;
                    cached = true;
                }
                fclose(fp);
            }
        }
        if (!cached && nres > 0) { /* time cuBLAS's own choice and every answer */
            cudaEvent_t e0 = NULL, e1 = NULL;
            if (cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess) {
                double best = tune_time(G, plan, NULL, a, b, c, base, ctx, e0, e1), own = best;
                for (int i = 0; i < nres; i++) {
                    if (r[i].state != CUBLAS_STATUS_SUCCESS) continue;
                    double t = tune_time(G, plan, &r[i].algo, a, b, c, base, ctx, e0, e1);
                    if (t < best) { best = t; plan.choice = i; }
                }
                kn_log(KN_LOG_INFO, "matmul m=%lld n=%lld k=%lld batch=%lld ta=%d tb=%d %s: %s (%.4f ms; cuBLAS's own "
                       "choice %.4f ms; %d candidates)", (long long)m, (long long)nn, (long long)k, (long long)batch,
                       (int)ta, (int)tb, kn_dtype_name(dt), plan.choice < 0 ? "cuBLAS's own choice" : "a cuBLASLt answer",
                       best / KNC_TUNE_RUNS, own / KNC_TUNE_RUNS, nres);
            } else (void)cudaGetLastError();
            if (e0) cudaEventDestroy(e0);
            if (e1) cudaEventDestroy(e1);
            FILE *fp = has_path ? fopen(path, "w") : NULL;
            if (fp) {
                fprintf(fp, "%d\n", plan.choice);
                fclose(fp);
            }
        }
        if (plan.choice >= 0) plan.algo = r[plan.choice].algo;
        std::lock_guard<std::mutex> lock(lt_mu);
        auto f = tune_plans.find(key);
        if (f == tune_plans.end()) tune_plans[key] = plan;
        else { /* another thread tuned it meanwhile: keep the first */
            tune_forget(&plan);
            plan = f->second;
        }
    }
    return plan.choice < 0 ? base(ctx) : tune_run(G, plan, &plan.algo, a, b, c);
}
