/* cuda_ops.cu — the CUDA op table and kn_cuda_node_eval, the helpers every CUDA op kernel
 * shares, and the data-movement ops: views (materialized by one strided-copy kernel),
 * slice_grad, embedding and its gradient (whose kernels are cuda_embedding.cu's).
 *
 * The table maps each kn_op to its CUDA entry point (cuda_impl.h). It is generated from
 * ops.def's CPU-kernel column, so an op added to ops.def whose kernel the CUDA column
 * does not name fails to compile; the shared kernels (knc_unary, knc_binary, knc_reduce,
 * ...) check the op they are given and report KN_ERR_UNSUPPORTED naming it and the
 * backend, never compute another op. */
#include <string.h>

#include "runtime/cuda_impl.h"

/* ---------------------------------------------------------------- shared helpers */

kn_status knc_check_launch(const char *kernel, const char *file, int line) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return KN_OK;
    return kn_error(KN_ERR_DEVICE, "launch of %s failed at %s:%d: %s (%s)", kernel, file, line,
                    cudaGetErrorString(e), cudaGetErrorName(e));
}

/* The node's output: a new tensor, or the one the caller placed in *out (a compiled
 * program's memory plan: contiguous, of the node's type, on this GPU). */
kn_status knc_new_out(const kn_node *n, kn_device dev, kn_tensor **out) {
    if (*out) {
        const kn_tensor *t = *out;
        bool ok = t->dtype == n->type.dtype && t->ndim == n->type.ndim && kn_tensor_is_contiguous(t) &&
                  kn_device_equal(t->storage->device, dev);
        for (int d = 0; ok && d < t->ndim; d++) ok = t->shape[d] == n->type.shape[d];
        return ok ? KN_OK : kn_error(KN_ERR_INTERNAL, "%s: the output given is not a contiguous tensor of the node's "
                                     "type on this GPU", kn_op_name(n->op));
    }
    return kn_tensor_empty_on(out, dev, n->type.dtype, n->type.ndim, n->type.shape);
}

kn_status knc_no_kernel(const kn_node *n, const char *kernel) {
    return kn_error(KN_ERR_UNSUPPORTED, "%s: the cuda backend's %s does not compute this op", kn_op_name(n->op), kernel);
}

kn_status knc_unsupported(const kn_node *n, kn_dtype dt) {
    return kn_error(KN_ERR_UNSUPPORTED, "%s: no CUDA kernel for dtype %s (cast to f32 or f64)", kn_op_name(n->op),
                    kn_dtype_name(dt));
}

static int knc_sync_mode = -1; /* KILN_CUDA_SYNC, read once */

kn_status knc_after_op(const kn_node *n) {
    if (knc_sync_mode < 0) {
        const char *s = getenv("KILN_CUDA_SYNC");
        knc_sync_mode = s && s[0] == '1';
    }
    if (!knc_sync_mode) return KN_OK;
    cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess) return KN_OK;
    (void)cudaGetLastError();
    return kn_error(KN_ERR_DEVICE, "%s: the kernel failed: %s (%s)", kn_op_name(n->op), cudaGetErrorString(e),
                    cudaGetErrorName(e));
}

/* The strided copy behind every materialized view (permute, slice, broadcast_to,
 * slice_grad, kn_cuda_contiguous, matmul's broadcast batches). The layout of source and
 * destination is collapsed first (knc_collapse), so a slice of whole rows is a 1-D copy
 * and the GPT permute [8,1024,3,12,64] -> [3,8,12,1024,64] keeps 4 axes with its 64-wide
 * rows innermost. Then, while both operands step by 1 along the last axis, that axis holds
 * an even count, every other stride is even and both pointers are aligned to twice the
 * element, two elements are copied as one twice as wide (up to 16 bytes: uint4 loads and
 * stores): the rows of the GPT permute move as 16 uint4. A real transpose (the
 * destination's last axis L is not the source's innermost axis P, which is another axis
 * of the collapsed layout) goes through 32x32 tiles in shared memory instead
 * (knc_transpose_kernel), so that reads along P and writes along L are both coalesced.
 * Indices are 32-bit when knc_fits_u32 says they fit. A copy moves bits, so no path can
 * change a value. */
template <typename E, typename I>
__global__ void knc_copy_kernel(knc_layout<I> s, I total, const E *src, E *dst) {
    KNC_FOR_I(I, i, total) {
        I off[2];
        knc_offsets<2>(s, i, off);
        dst[off[1]] = src[off[0]];
    }
}

/* Tiles of 32 (along L) x 32 (along P) elements of batch z (the other axes: layout b),
 * blockDim (32, 8): read with threadIdx.x along P (source stride 1), written with
 * threadIdx.x along L (destination stride 1). sl: source stride along L; dp: destination
 * stride along P. The tile has 33 columns so that the column reads hit 32 banks. */
template <typename E, typename I>
__global__ void knc_transpose_kernel(knc_layout<I> b, I nbatch, I nl, I np, I sl, I dp, const E *src, E *dst) {
    __shared__ E tile[32][33];
    I l0 = blockIdx.x * (I)32, p0 = blockIdx.y * (I)32;
    for (I z = blockIdx.z; z < nbatch; z += gridDim.z) {
        I off[2];
        knc_offsets<2>(b, z, off);
        for (unsigned k = threadIdx.y; k < 32; k += blockDim.y) {
            I l = l0 + k, p = p0 + threadIdx.x;
            if (l < nl && p < np) tile[k][threadIdx.x] = src[off[0] + l * sl + p];
        }
        __syncthreads();
        for (unsigned k = threadIdx.y; k < 32; k += blockDim.y) {
            I p = p0 + k, l = l0 + threadIdx.x;
            if (l < nl && p < np) dst[off[1] + p * dp + l] = tile[threadIdx.x][k];
        }
        __syncthreads();
    }
}

/* The axis P < L = nd - 1 along which the source steps by 1 when s is a real transpose
 * worth tiling (the destination steps by 1 along L, the source by neither 0 nor 1, both
 * axes hold at least 8 elements, and P's tiles fit a grid's y dimension); -1 otherwise. */
static int transpose_axis(const knc_strides &s) {
    int last = s.nd - 1;
    if (s.nd < 2 || s.st[last][1] != 1 || s.st[last][0] == 0 || s.st[last][0] == 1 || s.shape[last] < 8) return -1;
    for (int p = 0; p < last; p++)
        if (s.st[p][0] == 1) return s.shape[p] >= 8 && (s.shape[p] + 31) / 32 <= 65535 ? p : -1;
    return -1;
}

template <typename E, typename I>
static void transpose_launch(const knc_strides &s, int p, const void *src, void *dst) {
    int last = s.nd - 1;
    knc_strides b; /* the batch axes: all but p and last */
    memset(&b, 0, sizeof b);
    for (int d = 0; d < last; d++)
        if (d != p) {
            b.shape[b.nd] = s.shape[d];
            b.st[b.nd][0] = s.st[d][0];
            b.st[b.nd][1] = s.st[d][1];
            b.nd++;
        }
    int64_t nbatch = 1;
    for (int d = 0; d < b.nd; d++) nbatch *= b.shape[d];
    knc_collapse(&b, 2);
    knc_layout<I> bi;
    if constexpr (sizeof(I) == 4) bi = knc_narrow(b);
    else bi = b;
    dim3 grid((unsigned)((s.shape[last] + 31) / 32), (unsigned)((s.shape[p] + 31) / 32),
              (unsigned)(nbatch < 65535 ? nbatch : 65535));
    knc_transpose_kernel<E, I><<<grid, dim3(32, 8), 0, knc_stream>>>(bi, (I)nbatch, (I)s.shape[last], (I)s.shape[p], (I)s.st[last][0],
                                                    (I)s.st[p][1], (const E *)src, (E *)dst);
}

template <typename E>
static void copy_launch(const knc_strides &s, int64_t total, const void *src, void *dst) {
    bool u32 = knc_fits_u32(s, 2, total);
    int p = transpose_axis(s);
    if (p >= 0 && u32) transpose_launch<E, uint32_t>(s, p, src, dst);
    else if (p >= 0) transpose_launch<E, int64_t>(s, p, src, dst);
    else if (u32)
        knc_copy_kernel<E, uint32_t><<<knc_blocks(total), KNC_THREADS, 0, knc_stream>>>(knc_narrow(s), (uint32_t)total,
                                                                          (const E *)src, (E *)dst);
    else
        knc_copy_kernel<E, int64_t><<<knc_blocks(total), KNC_THREADS, 0, knc_stream>>>(s, total, (const E *)src, (E *)dst);
}

kn_status knc_strided_copy(size_t es, int ndim, const int64_t *shape, const void *src, const int64_t *sstr,
                           void *dst, const int64_t *dstr) {
    knc_strides s;
    int64_t total = 1;
    memset(&s, 0, sizeof s);
    s.nd = ndim;
    for (int d = 0; d < ndim; d++) {
        s.shape[d] = shape[d];
        s.st[d][0] = sstr[d];
        s.st[d][1] = dstr[d];
        total *= shape[d];
    }
    if (total == 0) return KN_OK;
    knc_collapse(&s, 2);
    int last = s.nd - 1;
    while (es < 16 && s.st[last][0] == 1 && s.st[last][1] == 1 && s.shape[last] % 2 == 0 &&
           ((uintptr_t)src % (2 * es)) == 0 && ((uintptr_t)dst % (2 * es)) == 0) {
        bool even = true;
        for (int d = 0; d < last; d++) even = even && s.st[d][0] % 2 == 0 && s.st[d][1] % 2 == 0;
        if (!even) break;
        s.shape[last] /= 2;
        for (int d = 0; d < last; d++) { s.st[d][0] /= 2; s.st[d][1] /= 2; }
        es *= 2;
        total /= 2;
    }
    switch (es) {
    case 1: copy_launch<uint8_t>(s, total, src, dst); break;
    case 2: copy_launch<uint16_t>(s, total, src, dst); break;
    case 4: copy_launch<uint32_t>(s, total, src, dst); break;
    case 8: copy_launch<uint64_t>(s, total, src, dst); break;
    default: KN_CHECK(es == 16); copy_launch<uint4>(s, total, src, dst); break;
    }
    KNC_LAUNCHED(knc_copy_kernel);
    return KN_OK;
}

kn_status knc_indices_to_host(const kn_tensor *idx, int64_t **out) {
    int64_t n = kn_tensor_numel(idx);
    int64_t *h = (int64_t *)kn_malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
    if (!h) return kn_error(KN_ERR_OOM, "out of host memory for %lld indices", (long long)n);
    size_t es = kn_dtype_size(idx->dtype);
    cudaError_t e = cudaMemcpy(h, kn_tensor_data(idx), (size_t)n * es, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        kn_free(h);
        (void)cudaGetLastError();
        return kn_error(KN_ERR_DEVICE, "cudaMemcpy of %lld indices failed at %s:%d: %s (%s)", (long long)n,
                        __FILE__, __LINE__, cudaGetErrorString(e), cudaGetErrorName(e));
    }
    if (idx->dtype == KN_DT_I32) /* widen in place, from the end */
        for (int64_t i = n - 1; i >= 0; i--) h[i] = ((const int32_t *)h)[i];
    *out = h;
    return KN_OK;
}

static void contig_strides(int ndim, const int64_t *shape, int64_t *st) {
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) { st[i] = s; s *= shape[i]; }
}

extern "C" kn_status kn_cuda_contiguous(const char *fn, const kn_tensor *t, kn_tensor **out) {
    if (!fn) fn = "kn_cuda_contiguous";
    if (!t || !out) return kn_error(KN_ERR_ARG, "%s: tensor or out is NULL", fn);
    if (t->storage->device.type != KN_DEVICE_CUDA) return kn_error(KN_ERR_DEVICE, "%s: the tensor is not on a GPU", fn);
    if (kn_tensor_is_contiguous(t)) return kn_tensor_alias(out, t);
    kn_tensor *c = NULL;
    KN_CUDA_TRY(cudaSetDevice(t->storage->device.index));
    KN_TRY(kn_tensor_empty_on(&c, t->storage->device, t->dtype, t->ndim, t->shape));
    int64_t st[KN_MAX_DIMS];
    contig_strides(t->ndim, t->shape, st);
    kn_status s = knc_strided_copy(kn_dtype_size(t->dtype), t->ndim, t->shape, kn_tensor_data(t), t->strides,
                                   kn_tensor_data(c), st);
    if (s != KN_OK) { kn_tensor_free(c); return s; }
    *out = c;
    return KN_OK;
}

/* ---------------------------------------------------------------- views */

KNC_KERNEL(knc_reshape) { return kn_tensor_view(out, in[0], n->type.ndim, n->type.shape); }

/* out = strided read of x (source strides sst, element offset soff) over n->type. */
static kn_status strided_out(const kn_node *n, const kn_tensor *x, const int64_t *sst, int64_t soff, kn_tensor **out) {
    int64_t dst[KN_MAX_DIMS];
    KN_TRY(knc_new_out(n, x->storage->device, out));
    size_t es = kn_dtype_size(x->dtype);
    contig_strides(n->type.ndim, n->type.shape, dst);
    kn_status st = knc_strided_copy(es, n->type.ndim, n->type.shape, (const char *)kn_tensor_data(x) + soff * (int64_t)es,
                                    sst, kn_tensor_data(*out), dst);
    if (st != KN_OK) { kn_tensor_free(*out); *out = NULL; }
    return st;
}

KNC_KERNEL(knc_permute) {
    int64_t pst[KN_MAX_DIMS];
    kn_ir_permute_strides(in[0]->ndim, in[0]->shape, n->attrs.perm, pst);
    return strided_out(n, in[0], pst, 0, out);
}

KNC_KERNEL(knc_broadcast_to) {
    int64_t st[KN_MAX_DIMS];
    kn_ir_broadcast_strides(in[0]->ndim, in[0]->shape, n->type.ndim, n->type.shape, st);
    return strided_out(n, in[0], st, 0, out);
}

KNC_KERNEL(knc_slice) {
    int64_t st[KN_MAX_DIMS], first, len;
    int nd = in[0]->ndim, ax = (int)(n->attrs.axis < 0 ? n->attrs.axis + nd : n->attrs.axis);
    contig_strides(nd, in[0]->shape, st);
    kn_ir_slice_range(in[0]->shape[ax], n->attrs.start, n->attrs.stop, n->attrs.step, &first, &len);
    kn_type xt = {in[0]->dtype, nd, {0}};
    memcpy(xt.shape, in[0]->shape, sizeof(int64_t) * (size_t)nd);
    if (!*out && kn_ir_aliases(n, &xt)) return kn_tensor_slice(out, in[0], ax, first, first + len, 1); /* a block: a view */
    int64_t off = first * st[ax];
    st[ax] *= n->attrs.step;
    return strided_out(n, in[0], st, len ? off : 0, out);
}

/* slice_grad: out (the parent's shape) is zero but where the slice came from, which holds
 * the gradient. One pass over out, a thread per element: [outer, n, inner] around the
 * sliced axis, element (o, c, i) takes g[o, (c - first) / step, i] when c is one of the
 * slice's indices, else 0. (It was a memset of out and a strided copy: two launches, which
 * for a bias-sized slice cost more than the bytes.) */
template <typename E, typename I>
__global__ void knc_slice_grad_kernel(const E *g, E *out, I total, I n, I inner, I first, I len, I step) {
    KNC_FOR_I(I, e, total) {
        I i = e % inner, oc = e / inner, c = oc % n, o = oc / n, q = c - first;
        bool hit = c >= first && q % step == 0 && q / step < len;
        out[e] = hit ? g[(o * len + q / step) * inner + i] : (E)0;
    }
}

template <typename E>
static void slice_grad_launch(const E *g, E *out, int64_t total, int64_t n, int64_t inner, int64_t first, int64_t len,
                              int64_t step) {
    if (total < ((int64_t)1 << 31))
        knc_slice_grad_kernel<E, uint32_t><<<knc_blocks(total), KNC_THREADS, 0, knc_stream>>>(
            g, out, (uint32_t)total, (uint32_t)n, (uint32_t)inner, (uint32_t)first, (uint32_t)len, (uint32_t)step);
    else knc_slice_grad_kernel<E, int64_t><<<knc_blocks(total), KNC_THREADS, 0, knc_stream>>>(g, out, total, n, inner, first, len, step);
}

KNC_KERNEL(knc_slice_grad) {
    int64_t first, len;
    const kn_type *t = &n->type;
    int ax = (int)(n->attrs.axis < 0 ? n->attrs.axis + t->ndim : n->attrs.axis);
    KN_TRY(knc_new_out(n, knc_dev(in), out));
    kn_ir_slice_range(t->shape[ax], n->attrs.start, n->attrs.stop, n->attrs.step, &first, &len);
    int64_t inner = 1, total = kn_tensor_numel(*out);
    for (int d = ax + 1; d < t->ndim; d++) inner *= t->shape[d];
    if (total == 0) return KN_OK;
    const void *g = kn_tensor_data(in[0]);
    void *o = kn_tensor_data(*out);
    size_t es = kn_dtype_size(t->dtype); /* a copy moves bits: an unsigned type of the element's size */
    if (es == 8) slice_grad_launch((const uint64_t *)g, (uint64_t *)o, total, t->shape[ax], inner, first, len, n->attrs.step);
    else if (es == 4) slice_grad_launch((const uint32_t *)g, (uint32_t *)o, total, t->shape[ax], inner, first, len, n->attrs.step);
    else if (es == 2) slice_grad_launch((const uint16_t *)g, (uint16_t *)o, total, t->shape[ax], inner, first, len, n->attrs.step);
    else slice_grad_launch((const uint8_t *)g, (uint8_t *)o, total, t->shape[ax], inner, first, len, n->attrs.step);
    kn_status s = knc_check_launch("knc_slice_grad", __FILE__, __LINE__);
    if (s != KN_OK) { kn_tensor_free(*out); *out = NULL; }
    return s;
}

/* concat: each operand (any strides: a view the interpreter kept) copied by the strided
 * copy into its block of the contiguous out, x's block first along the axis. Two launches;
 * a copy moves bits, so every dtype (f32, f64, bf16, f16, ...) takes the same path. */
KNC_KERNEL(knc_concat) {
    int64_t st[KN_MAX_DIMS];
    const kn_type *t = &n->type;
    int ax = (int)(n->attrs.axis < 0 ? n->attrs.axis + t->ndim : n->attrs.axis);
    KN_TRY(knc_new_out(n, knc_dev(in), out));
    size_t es = kn_dtype_size(t->dtype);
    contig_strides(t->ndim, t->shape, st);
    char *dst = (char *)kn_tensor_data(*out);
    kn_status s = KN_OK;
    for (int k = 0; k < 2 && s == KN_OK; k++) {
        s = knc_strided_copy(es, in[k]->ndim, in[k]->shape, kn_tensor_data(in[k]), in[k]->strides, dst, st);
        dst += in[k]->shape[ax] * st[ax] * (int64_t)es;
    }
    if (s != KN_OK) { kn_tensor_free(*out); *out = NULL; }
    return s;
}

/* ---------------------------------------------------------------- embedding */

static kn_status bad_index(const kn_node *n, int64_t value, int64_t pos, int64_t v) {
    return kn_error(KN_ERR_ARG, "%s: index %lld at position %lld is outside [0, %lld)", kn_op_name(n->op),
                    (long long)value, (long long)pos, (long long)v);
}

/* First position whose index is outside [0, v), or -1 (host array). */
static int64_t first_bad(const int64_t *h, int64_t n, int64_t v) {
    for (int64_t i = 0; i < n; i++)
        if (h[i] < 0 || h[i] >= v) return i;
    return -1;
}

/* The index tensor's element i (i32 or i64), read on the device. */
__device__ inline int64_t knc_index_at(const void *idx, bool i32, int64_t i) {
    return i32 ? (int64_t)((const int32_t *)idx)[i] : ((const int64_t *)idx)[i];
}

/* out[i, :] = w[idx[i], :]. An index outside the table (possible only in a captured graph,
 * where the host does not check the indices first) gives a row of NaN, never a read
 * outside the table. */
template <typename T>
__global__ void knc_embedding_kernel(const T *w, const void *idx, bool i32, int64_t n, int64_t v, int64_t d, T *out) {
    int64_t total = n * d;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = e / d, j = e - i * d, r = knc_index_at(idx, i32, i);
        out[e] = r >= 0 && r < v ? w[r * d + j] : (T)NAN;
    }
}

/* Indices checked on the host, as the CPU does (KN_ERR_ARG naming the first bad one). A
 * copy to the host is a synchronization, which a captured graph cannot hold: there the
 * kernels guard themselves instead. */
static kn_status check_indices(const kn_node *n, const kn_tensor *idx, int64_t v) {
    if (knc_capturing()) return KN_OK;
    int64_t *h = NULL;
    KN_TRY(knc_indices_to_host(idx, &h));
    int64_t bad = first_bad(h, kn_tensor_numel(idx), v);
    kn_status st = bad >= 0 ? bad_index(n, h[bad], bad, v) : KN_OK;
    kn_free(h);
    return st;
}

KNC_KERNEL(knc_embedding) {
    const kn_tensor *w = in[0], *idx = in[1];
    int64_t v = w->shape[0], d = w->shape[1], cnt = kn_tensor_numel(idx);
    if (w->dtype != KN_DT_F32 && w->dtype != KN_DT_F64) return knc_unsupported(n, w->dtype);
    KN_TRY(check_indices(n, idx, v));
    KN_TRY(knc_new_out(n, knc_dev(in), out));
    if (cnt * d == 0) return KN_OK;
    unsigned g = knc_blocks(cnt * d);
    bool i32 = idx->dtype == KN_DT_I32;
    if (w->dtype == KN_DT_F32)
        knc_embedding_kernel<float><<<g, KNC_THREADS, 0, knc_stream>>>((const float *)kn_tensor_data(w), kn_tensor_data(idx), i32, cnt, v, d, (float *)kn_tensor_data(*out));
    else
        knc_embedding_kernel<double><<<g, KNC_THREADS, 0, knc_stream>>>((const double *)kn_tensor_data(w), kn_tensor_data(idx), i32, cnt, v, d, (double *)kn_tensor_data(*out));
    kn_status st = knc_check_launch("knc_embedding_kernel", __FILE__, __LINE__);
    if (st != KN_OK) { kn_tensor_free(*out); *out = NULL; }
    return st;
}

/* embedding_grad: its kernels are cuda_embedding.cu's (deterministic, all on the device). */
KNC_KERNEL(knc_embedding_grad) {
    const kn_tensor *dy = in[0], *idx = in[1];
    if (dy->dtype != KN_DT_F32 && dy->dtype != KN_DT_F64) return knc_unsupported(n, dy->dtype);
    KN_TRY(check_indices(n, idx, n->type.shape[0]));
    KN_TRY(knc_new_out(n, knc_dev(in), out));
    kn_status st = knc_embedding_grad_sum(dy, idx, *out);
    if (st != KN_OK) { kn_tensor_free(*out); *out = NULL; }
    return st;
}

/* ---------------------------------------------------------------- the op table */

typedef kn_status (*knc_kernel_fn)(const kn_node *, const kn_tensor *const *, kn_tensor **);

/* The CUDA column of ops.def: for each CPU kernel name of the table, the CUDA kernel that
 * computes the same ops. The table below is generated from ops.def in op order, so an op
 * whose CPU kernel has no line here does not compile ("'kern_x' is not a member of
 * 'knc_col'"); nullptr says, explicitly, that the op has no CUDA kernel. */
namespace knc_col {
const knc_kernel_fn kern_none = nullptr; /* input, param: bound, never evaluated */
const knc_kernel_fn kern_full = nullptr; /* runs on the host; its consumer copies it over */
/* grad_store, all_reduce_start, all_gather_start, comm_wait: run by the program's collectives
 * context (kn_collective_eval: NCCL on GPU ranks), never a device kernel */
const knc_kernel_fn kern_collective = nullptr;
const knc_kernel_fn kern_binary = knc_binary, kern_eq = knc_eq, kern_where = knc_where, kern_unary = knc_unary;
const knc_kernel_fn kern_unary_grad = knc_unary_grad, kern_cast = knc_cast, kern_dropout = knc_dropout;
const knc_kernel_fn kern_causal_fill = knc_causal_fill, kern_onehot = knc_onehot, kern_reduce = knc_reduce, kern_matmul = knc_matmul;
const knc_kernel_fn kern_reshape = knc_reshape, kern_permute = knc_permute, kern_broadcast_to = knc_broadcast_to;
const knc_kernel_fn kern_slice = knc_slice, kern_slice_grad = knc_slice_grad, kern_embedding = knc_embedding;
const knc_kernel_fn kern_concat = knc_concat;
const knc_kernel_fn kern_embedding_grad = knc_embedding_grad, kern_softmax = knc_softmax;
const knc_kernel_fn kern_softmax_bwd = knc_softmax_bwd, kern_causal_softmax = knc_causal_softmax;
const knc_kernel_fn kern_causal_softmax_bwd = knc_causal_softmax_bwd, kern_layernorm = knc_layernorm;
const knc_kernel_fn kern_layernorm_dx = knc_layernorm_dx, kern_normalize = knc_normalize;
const knc_kernel_fn kern_cross_entropy = knc_cross_entropy, kern_cross_entropy_bwd = knc_cross_entropy_bwd;
const knc_kernel_fn kern_flash_attn = knc_flash_attn, kern_flash_attn_bwd = knc_flash_attn_bwd;
const knc_kernel_fn kern_attn_decode = knc_attn_decode; /* cuda_attn_decode.cu */
const knc_kernel_fn kern_matmul_ep = knc_matmul_ep; /* cuda_matmul_lt.cu: cuBLASLt's epilogues */
const knc_kernel_fn kern_matmul_q = knc_matmul_q; /* cuda_quant.cu: the int8 products */
const knc_kernel_fn kern_matmul_q_static = knc_matmul_q_static; /* cuda_quant_static.cu */
} // namespace knc_col

static const knc_kernel_fn knc_kernels[KN_OP_COUNT] = {
#define KN_OP(E, name, arity, cat, req, opt, infer, kernel, backward, cost) knc_col::kernel,
#include "kiln/ops.def"
};

static knc_kernel_fn knc_kernel_of(kn_op op) { return (unsigned)op < KN_OP_COUNT ? knc_kernels[op] : nullptr; }

/* Whether the CUDA table's kernel for op computes it: the shared kernels know a set of
 * ops each (the same checks they make before a launch). */
static bool knc_computes(kn_op op) {
    knc_kernel_fn f = knc_kernel_of(op);
    kn_reduce_op r;
    if (!f) return false;
    if (f == knc_unary) return kn_op_unary(op, nullptr);
    kn_binary_op b;
    if (f == knc_binary) return kn_op_binary(op, &b) && !kn_sc_binary_is_compare(b);
    if (f == knc_reduce) return kn_op_reduce(op, &r) && (r == KN_REDUCE_SUM || r == KN_REDUCE_MEAN || r == KN_REDUCE_MAX);
    if (f == knc_unary_grad) return op == KN_OP_UNARY_GRAD; /* every fn with a gradient: the attribute check */
    if (f == knc_softmax) return op == KN_OP_SOFTMAX || op == KN_OP_LOG_SOFTMAX;
    if (f == knc_softmax_bwd) return op == KN_OP_SOFTMAX_BWD || op == KN_OP_LOG_SOFTMAX_BWD;
    return true;
}

extern "C" bool kn_cuda_has_kernel(kn_op op) { return knc_computes(op); }

extern "C" kn_status kn_cuda_node_eval(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    if (!n || !out || (n->nin > 0 && !in)) return kn_error(KN_ERR_ARG, "kn_cuda_node_eval: NULL argument");
    if ((unsigned)n->op >= KN_OP_COUNT) return kn_error(KN_ERR_ARG, "kn_cuda_node_eval: invalid op %d", (int)n->op);
    knc_kernel_fn fn = knc_kernel_of(n->op);
    if (!fn || !knc_computes(n->op))
        return kn_error(KN_ERR_UNSUPPORTED, "kn_cuda_node_eval: %s: the cuda backend has no kernel for it",
                        kn_op_name(n->op));
    if (n->nin == 0 || n->nin > KN_MAX_OPERANDS)
        return kn_error(KN_ERR_ARG, "kn_cuda_node_eval: %s: no operand says which GPU to run on", kn_op_name(n->op));
    kn_device dev = {KN_DEVICE_CPU, 0};
    for (int i = 0; i < n->nin; i++) {
        if (!in[i]) return kn_error(KN_ERR_ARG, "kn_cuda_node_eval: %s: operand %d is NULL", kn_op_name(n->op), i);
        kn_device d = in[i]->storage->device;
        if (d.type != KN_DEVICE_CUDA) continue;
        if (dev.type == KN_DEVICE_CUDA && d.index != dev.index)
            return kn_error(KN_ERR_DEVICE, "kn_cuda_node_eval: %s: operands on cuda:%d and cuda:%d", kn_op_name(n->op),
                            dev.index, d.index);
        dev = d;
    }
    if (dev.type != KN_DEVICE_CUDA)
        return kn_error(KN_ERR_ARG, "kn_cuda_node_eval: %s: no operand is on a GPU", kn_op_name(n->op));
    KN_CUDA_TRY(cudaSetDevice(dev.index));
    /* Operands on the CPU (a `full` scalar) are copied over; all must be contiguous. */
    kn_tensor *moved[KN_MAX_OPERANDS] = {nullptr};
    const kn_tensor *ops[KN_MAX_OPERANDS];
    kn_status st = KN_OK;
    for (int i = 0; i < n->nin && st == KN_OK; i++) {
        ops[i] = in[i];
        if (in[i]->storage->device.type == KN_DEVICE_CPU) {
            st = kn_tensor_to(&moved[i], in[i], dev);
            ops[i] = moved[i];
        }
        if (st == KN_OK && !kn_tensor_is_contiguous(ops[i]))
            st = kn_error(KN_ERR_ARG, "kn_cuda_node_eval: %s: operand %d is not contiguous", kn_op_name(n->op), i);
    }
    bool prof = st == KN_OK && knc_profile_on();
    if (prof) st = knc_profile_begin();
    if (st == KN_OK) st = fn(n, ops, out);
    if (st == KN_OK && prof) {
        st = knc_profile_end(n, ops, *out);
        if (st != KN_OK) { kn_tensor_free(*out); *out = NULL; }
    }
    if (st == KN_OK) {
        st = knc_after_op(n);
        if (st != KN_OK) { kn_tensor_free(*out); *out = NULL; }
    }
    for (int i = 0; i < n->nin; i++) kn_tensor_free(moved[i]);
    return st;
}
