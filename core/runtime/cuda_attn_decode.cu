/* cuda_attn_decode.cu — the CUDA kernels of attn_decode: one new token's attention over a
 * static KV cache (contract in kiln/ir.h, the arithmetic and the CPU reference in
 * core/ir/attn_decode.c).
 *
 * Split over the positions, as flash-decoding does: with batch 1 there are only H (b, h)
 * pairs, 12 blocks for GPT-2 on a GPU of 132 multiprocessors, and one block walking a
 * pair's 1,024 positions is a chain of dependent loads (a first version, one block per
 * pair, took 20-50 us a layer on an H100). So the positions 0..Tmax (the last one is the
 * new token) are cut into chunks of KND_CHUNK, one block per (pair, chunk):
 *   1. kernel A, block (pair, c): the scores of its chunk's valid positions (two threads per
 *      key, each half of the head dimension, a shuffle adds them), their max m_c, exp(s -
 *      m_c) and their sum z_c, and the partial output o_c = sum_t exp(s_t - m_c) v_t (the
 *      threads in groups over the columns, each group a stride of the positions, loads
 *      unrolled so several are in flight); a chunk past len[b] + 1 writes m_c = -inf;
 *   2. kernel B, block (pair): M = max_c m_c, y = sum_c exp(m_c - M) o_c / sum_c exp(m_c - M) z_c.
 * The grid depends on Tmax, not on len (a device value): blocks past the valid positions
 * return at once, so one launch serves every position and a CUDA graph replays it. Only
 * valid positions are read, unlike the general ops attn_decode replaces, which read the
 * whole static cache under a mask. q, k and v come packed in one row per batch element
 * ([B, 3 * H * D]), y leaves as [B, H * D], and kernel B, after the chunks are read, also
 * appends the new k and v to the cache at position len[b] (no block of kernel A reads that
 * position: the new token's key and value come from qkv). */
#include "runtime/cuda_impl.h"

#define KND_CHUNK 64
#define KND_THREADS 128

template <typename T>
__device__ T knd_reduce(T v, bool is_max, T *red) {
    for (int o = 16; o > 0; o >>= 1) {
        T w = __shfl_down_sync(0xffffffffu, v, o);
        v = is_max ? (w > v ? w : v) : v + w;
    }
    __syncthreads(); /* red may still be read by the previous reduction */
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
    __syncthreads();
    T r = red[0];
    for (int i = 1; i < KND_THREADS / 32; i++) r = is_max ? (red[i] > r ? red[i] : r) : r + red[i];
    return r;
}

/* Kernel A: grid (pairs, chunks). part: [pairs][chunks][D + 2] = o_c, then m_c, z_c. */
template <typename T>
__global__ void __launch_bounds__(KND_THREADS) knd_chunk_kernel(const T *qkv, const T *kc, const T *vc,
                                                                const int *len, int H, int Tm, int D, T scale,
                                                                T *part) {
    extern __shared__ unsigned char knd_smem[];
    T *qs = (T *)knd_smem;   /* [D] */
    T *s = qs + D;           /* [KND_CHUNK] scores, then weights */
    T *acc = s + KND_CHUNK;  /* [G][D] the column groups' partial outputs */
    __shared__ T red[KND_THREADS / 32];
    const int r = blockIdx.x, c = blockIdx.y, nch = gridDim.y, b = r / H;
    const size_t HD = (size_t)H * D;
    const T *q = qkv + (size_t)b * 3 * HD + (size_t)(r % H) * D, *kn = q + HD, *vn = q + 2 * HD; /* row r's */
    int L = len[b];
    L = L < 0 ? 0 : L > Tm ? Tm : L;
    const int t0 = c * KND_CHUNK, n = min(KND_CHUNK, L + 1 - t0); /* positions t0 .. t0+n-1; L is the new token */
    T *out = part + ((size_t)r * nch + c) * (size_t)(D + 2);
    if (n <= 0) {
        if (threadIdx.x == 0) out[D] = -INFINITY, out[D + 1] = 0;
        return;
    }
    const size_t base = (size_t)r * Tm * D;
    for (int j = threadIdx.x; j < D; j += KND_THREADS) qs[j] = q[j];
    __syncthreads();
    { /* scores: thread pair (2i, 2i+1) takes position t0 + i, each half of D */
        const int i = threadIdx.x / 2, h = threadIdx.x % 2, half = (D + 1) / 2, j0 = h * half, j1 = min(D, j0 + half);
        T d = 0;
        if (i < n) {
            const int t = t0 + i;
            const T *k = t < L ? kc + base + (size_t)t * D : kn;
#pragma unroll 8
            for (int j = j0; j < j1; j++) d += qs[j] * k[j];
        }
        d += __shfl_xor_sync(0xffffffffu, d, 1);
        if (i < n && h == 0) s[i] = scale * d;
    }
    __syncthreads();
    T m = -INFINITY;
    for (int i = threadIdx.x; i < n; i += KND_THREADS) m = s[i] > m ? s[i] : m;
    m = knd_reduce<T>(m, true, red);
    T z = 0;
    for (int i = threadIdx.x; i < n; i += KND_THREADS) z += s[i] = exp(s[i] - m);
    z = knd_reduce<T>(z, false, red); /* its barriers also publish the weights in s[] */
    const int gsz = D < KND_THREADS ? D : KND_THREADS, G = KND_THREADS / gsz, g = threadIdx.x / gsz,
              jj = threadIdx.x % gsz;
    if (g < G)
        for (int j = jj; j < D; j += gsz) {
            T a = 0;
#pragma unroll 8
            for (int i = g; i < n; i += G) {
                const int t = t0 + i;
                a += s[i] * (t < L ? vc[base + (size_t)t * D + j] : vn[j]);
            }
            acc[g * D + j] = a;
        }
    __syncthreads();
    for (int j = threadIdx.x; j < D; j += KND_THREADS) {
        T a = 0;
        for (int i = 0; i < G; i++) a += acc[i * D + j];
        out[j] = a;
    }
    if (threadIdx.x == 0) out[D] = m, out[D + 1] = z;
}

/* Kernel B: grid (pairs): the chunks' partial softmaxes combined, then the append. */
template <typename T>
__global__ void knd_combine_kernel(const T *part, int nch, int D, T *y, const T *qkv, T *kc, T *vc, const int *len,
                                   int H, int Tm) {
    const int r = blockIdx.x, b = r / H;
    int L = len[b];
    L = L < 0 ? 0 : L > Tm ? Tm : L;
    if (L < Tm) { /* the new token's k and v into the cache at position L */
        const size_t HD = (size_t)H * D, at = ((size_t)r * Tm + L) * D;
        const T *kn = qkv + (size_t)b * 3 * HD + HD + (size_t)(r % H) * D;
        for (int j = threadIdx.x; j < D; j += blockDim.x) kc[at + j] = kn[j], vc[at + j] = kn[HD + j];
    }
    const T *p = part + (size_t)r * nch * (size_t)(D + 2);
    T M = -INFINITY;
    for (int c = 0; c < nch; c++) M = p[(size_t)c * (D + 2) + D] > M ? p[(size_t)c * (D + 2) + D] : M;
    T Z = 0;
    for (int c = 0; c < nch; c++) {
        T mc = p[(size_t)c * (D + 2) + D];
        if (mc != -INFINITY) Z += exp(mc - M) * p[(size_t)c * (D + 2) + D + 1];
    }
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
        T a = 0;
        for (int c = 0; c < nch; c++) {
            T mc = p[(size_t)c * (D + 2) + D];
            if (mc != -INFINITY) a += exp(mc - M) * p[(size_t)c * (D + 2) + j];
        }
        y[(size_t)r * D + j] = a / Z;
    }
}

KNC_KERNEL(knc_attn_decode) {
    if (n->op != KN_OP_ATTN_DECODE) return knc_no_kernel(n, "knc_attn_decode");
    const kn_dtype dt = n->type.dtype;
    if (dt != KN_DT_F32 && dt != KN_DT_F64) return knc_unsupported(n, dt);
    const long long B = in[1]->shape[0], H = in[1]->shape[1], D = in[1]->shape[3], Tm = in[1]->shape[2];
    const long long nch = (Tm + 1 + KND_CHUNK - 1) / KND_CHUNK, G = D < KND_THREADS ? KND_THREADS / D : 1;
    const size_t es = kn_dtype_size(dt), smem = ((size_t)D + KND_CHUNK + (size_t)(G * D)) * es;
    if (smem > 48 * 1024 || B * H > (1ll << 31) - 1 || nch > 65535 || D < 1)
        return kn_error(KN_ERR_UNSUPPORTED, "attn_decode: the cuda kernels take head dims whose rows fit 48 KiB of "
                        "shared memory and caches of up to %d positions (got head dim %lld, %lld positions, %s)",
                        65535 * KND_CHUNK - 1, D, Tm, kn_dtype_name(dt));
    const kn_device dev = knc_dev(in);
    KN_TRY(knc_new_out(n, dev, out));
    if (B * H == 0) return KN_OK;
    kn_tensor *part = NULL;
    int64_t np = B * H * nch * (D + 2);
    kn_status st = kn_tensor_empty_on(&part, dev, dt, 1, &np);
    const int *len = (const int *)kn_tensor_data(in[3]);
    dim3 grid((unsigned)(B * H), (unsigned)nch);
    unsigned cthreads = (unsigned)(D < 256 ? D : 256);
#define KND_LAUNCH(T)                                                                                              \
    do {                                                                                                           \
        knd_chunk_kernel<T><<<grid, KND_THREADS, smem, knc_stream>>>(                                              \
            (const T *)kn_tensor_data(in[0]), (const T *)kn_tensor_data(in[1]), (const T *)kn_tensor_data(in[2]),   \
            len, (int)H, (int)Tm, (int)D, (T)n->attrs.scale, (T *)kn_tensor_data(part));                           \
        st = knc_check_launch("knd_chunk_kernel", __FILE__, __LINE__);                                             \
        if (st == KN_OK) {                                                                                         \
            knd_combine_kernel<T><<<(unsigned)(B * H), cthreads, 0, knc_stream>>>(                                 \
                (const T *)kn_tensor_data(part), (int)nch, (int)D, (T *)kn_tensor_data(*out),                     \
                (const T *)kn_tensor_data(in[0]), (T *)kn_tensor_data(in[1]), (T *)kn_tensor_data(in[2]), len,      \
                (int)H, (int)Tm);                                                                                  \
            st = knc_check_launch("knd_combine_kernel", __FILE__, __LINE__);                                       \
        }                                                                                                          \
    } while (0)
    if (st == KN_OK) {
        if (dt == KN_DT_F32) KND_LAUNCH(float);
        else KND_LAUNCH(double);
    }
#undef KND_LAUNCH
    kn_tensor_free(part);
    if (st != KN_OK) { kn_tensor_free(*out); *out = NULL; }
    return st;
}
