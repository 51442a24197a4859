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
 * KILN_LT_EPILOGUE=0 forces that path (the GPU test compares both). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wswitch-enum"
#include <cublasLt.h>
#pragma GCC diagnostic pop
#include <array>
#include <map>
#include <mutex>

#include "runtime/cuda_impl.h"

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
    KNC_FOR_I(int64_t, i, total) p[i] = p[i] * knc_sc_gelu_grad(pre[i]);
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
        st = lt_get(knc_dev(in).index, &G);
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
