/* cuda_optim.cu — the optimizer step and global-norm gradient clipping on GPU slabs
 * (contracts in kiln/cuda.h), for `kiln train --device cuda`.
 *
 * The formulas are kn_optim_step's and kn_clip_grad_norm's (core/runtime/optim.c) element for
 * element: each element's arithmetic is done in double and rounded once when stored. The
 * update's products are __dmul_rn: nvcc contracts a product and a sum into one fused
 * multiply-add by default (-fmad=true), the CPU's C11 build never does, and a fused
 * b1 * m + (1 - b1) * g rounds once where the CPU rounds twice; the result then differed
 * in the last bit of the double, now and then in the stored float. A product that is
 * __dmul_rn is never fused, and division and sqrt are correctly rounded on both, so an
 * update on the GPU is the CPU's bit for bit (kn_optim_step_range: ZeRO-Offload's host
 * step is checked against the GPU's update byte for byte, tests/dist/test_offload_gpu.sh).
 * The bias corrections c1, c2 are computed once on the host, exactly as the CPU does.
 *
 * The sum of squares of the clip is deterministic: a fixed grid (KNC_NORM_BLOCKS blocks of
 * KNC_THREADS threads, grid-stride) writes one double partial per block with the fixed
 * shuffle tree of knc_block_sum, and one block then sums the partials in the same fixed
 * order. The order differs from the CPU's left-to-right loop, so the norm agrees with the
 * CPU's to rounding (about 1e-15 relative), not bitwise. Reading the norm back is the one
 * synchronization of the clip.
 *
 * Mixed precision: given a low slab, the update also writes each updated weight rounded
 * to bf16 or f16 (the weights' copies the step's products read), in the same kernel, so
 * the f32 slab is read once per step, not once more by a cast. The rounding is the bit
 * level of the generated kernels' kn_bf16_store / kn_f16_store (kn_lowp_source), so the
 * copy is bitwise what a cast kernel of the updated slab would store. */
#include "runtime/cuda_impl.h"

#define KNC_NORM_BLOCKS 512

/* low_bf16: 1 for bf16 copies, 0 for f16; low NULL: none. */
__device__ static inline void knc_store_low(unsigned short *low, int low_bf16, int64_t i, float x) {
    if (low) low[i] = low_bf16 ? knc_bf16_bits(x) : knc_f16_bits(x);
}

/* The CPU's expressions (optim.c's adamw_step and sgd_step) in the CPU's order, each
 * product rounded on its own (knc_dmul: never fused into the sum that follows it). */
__device__ static inline double knc_dmul(double a, double b) { return __dmul_rn(a, b); }

__global__ void knc_adamw_kernel(float *p, const float *g, float *m, float *v, int64_t n, int64_t n_decay, double lr,
                                 double b1, double b2, double eps, double wd, double c1, double c2,
                                 unsigned short *low, int low_bf16) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        double pi = (double)p[i], gi = (double)g[i];
        if (i < n_decay) pi -= knc_dmul(knc_dmul(lr, wd), pi);
        double mi = knc_dmul(b1, (double)m[i]) + knc_dmul(1.0 - b1, gi);
        double vi = knc_dmul(b2, (double)v[i]) + knc_dmul(knc_dmul(1.0 - b2, gi), gi);
        float mf = (float)mi, vf = (float)vi;
        m[i] = mf;
        v[i] = vf;
        pi -= knc_dmul(lr, (double)mf / c1) / (sqrt((double)vf / c2) + eps);
        float pf = (float)pi;
        p[i] = pf;
        knc_store_low(low, low_bf16, i, pf);
    }
}

__global__ void knc_sgd_kernel(float *p, const float *g, float *buf, int64_t n, int64_t n_decay, double lr, double mu,
                               double wd, int first, unsigned short *low, int low_bf16) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        double gi = (double)g[i];
        if (i < n_decay) gi += knc_dmul(wd, (double)p[i]);
        double b = gi;
        if (mu > 0.0) {
            b = first ? gi : knc_dmul(mu, (double)buf[i]) + gi;
            buf[i] = (float)b;
        }
        float pf = (float)((double)p[i] - knc_dmul(lr, b));
        p[i] = pf;
        knc_store_low(low, low_bf16, i, pf);
    }
}

__global__ void knc_sumsq_partial(const float *g, int64_t n, double *partial) {
    __shared__ double sh[32];
    double s = 0.0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        s += (double)g[i] * (double)g[i];
    s = knc_block_sum(s, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void knc_sum_partials(double *partial, int count) {
    __shared__ double sh[32];
    double s = 0.0;
    for (int i = threadIdx.x; i < count; i += blockDim.x) s += partial[i];
    s = knc_block_sum(s, sh);
    if (threadIdx.x == 0) partial[0] = s;
}

__global__ void knc_scale_kernel(float *g, int64_t n, double s) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        g[i] = (float)((double)g[i] * s);
}

extern "C" kn_status kn_cuda_optim_step(int device, kn_optim *o, float *param, const float *grad, float *state,
                                        double lr, kn_dtype low_dt, void *low) {
    if (!o || (o->n && (!param || !grad || !state)))
        return kn_error(KN_ERR_ARG, "kn_cuda_optim_step: optimizer not initialized or NULL slab");
    if (low && low_dt != KN_DT_BF16 && low_dt != KN_DT_F16)
        return kn_error(KN_ERR_ARG, "kn_cuda_optim_step: the weights' low copies are bf16 or f16, not %s",
                        kn_dtype_name(low_dt));
    unsigned short *lw = (unsigned short *)low;
    int lb = low_dt == KN_DT_BF16;
    if (!isfinite(lr) || lr < 0.0) return kn_error(KN_ERR_ARG, "kn_cuda_optim_step: learning rate %g is not >= 0", lr);
    if (device < 0) return kn_error(KN_ERR_ARG, "kn_cuda_optim_step: device index %d", device);
    KN_CUDA_TRY(cudaSetDevice(device));
    if (o->n > 0) {
        unsigned blocks = knc_blocks(o->n);
        if (o->cfg.kind == KN_OPTIM_SGD) {
            knc_sgd_kernel<<<blocks, KNC_THREADS, 0, knc_stream>>>(param, grad, state, o->n, o->n_decay, lr, o->cfg.momentum,
                                                    o->cfg.weight_decay, o->step == 0, lw, lb);
            KNC_LAUNCHED(knc_sgd_kernel);
        } else {
            const double t = (double)(o->step + 1);
            const double c1 = 1.0 - pow(o->cfg.beta1, t), c2 = 1.0 - pow(o->cfg.beta2, t);
            knc_adamw_kernel<<<blocks, KNC_THREADS, 0, knc_stream>>>(param, grad, state, state + o->n, o->n, o->n_decay, lr,
                                                      o->cfg.beta1, o->cfg.beta2, o->cfg.eps, o->cfg.weight_decay,
                                                      c1, c2, lw, lb);
            KNC_LAUNCHED(knc_adamw_kernel);
        }
    }
    o->step++;
    return KN_OK;
}

extern "C" kn_status kn_cuda_scale(int device, float *x, int64_t n, double s) {
    if (n < 0 || (n > 0 && !x)) return kn_error(KN_ERR_ARG, "kn_cuda_scale: NULL slab or n %lld < 0", (long long)n);
    if (device < 0) return kn_error(KN_ERR_ARG, "kn_cuda_scale: device index %d", device);
    if (n == 0) return KN_OK;
    KN_CUDA_TRY(cudaSetDevice(device));
    knc_scale_kernel<<<knc_blocks(n), KNC_THREADS, 0, knc_stream>>>(x, n, s);
    KNC_LAUNCHED(knc_scale_kernel);
    return KN_OK;
}

extern "C" kn_status kn_cuda_clip_grad_norm(int device, float *grad, int64_t n, double max_norm, double *norm) {
    if (!norm || (n > 0 && !grad) || n < 0)
        return kn_error(KN_ERR_ARG, "kn_cuda_clip_grad_norm: NULL argument or n %lld < 0", (long long)n);
    if (device < 0) return kn_error(KN_ERR_ARG, "kn_cuda_clip_grad_norm: device index %d", device);
    *norm = 0.0;
    if (n == 0) return KN_OK;
    KN_CUDA_TRY(cudaSetDevice(device));
    kn_device dev = {KN_DEVICE_CUDA, device};
    void *buf = NULL;
    KN_TRY(kn_device_alloc(dev, KNC_NORM_BLOCKS * sizeof(double), &buf));
    double *partial = (double *)buf, ss = 0.0;
    knc_sumsq_partial<<<KNC_NORM_BLOCKS, KNC_THREADS, 0, knc_stream>>>(grad, n, partial);
    kn_status st = knc_check_launch("knc_sumsq_partial", __FILE__, __LINE__);
    if (st == KN_OK) {
        knc_sum_partials<<<1, KNC_THREADS, 0, knc_stream>>>(partial, KNC_NORM_BLOCKS);
        st = knc_check_launch("knc_sum_partials", __FILE__, __LINE__);
    }
    if (st == KN_OK) st = kn_device_memcpy(KN_CPU, &ss, dev, partial, sizeof ss);
    kn_device_free(dev, buf, KNC_NORM_BLOCKS * sizeof(double));
    KN_TRY(st);
    *norm = sqrt(ss);
    if (max_norm > 0.0 && *norm > max_norm) {
        knc_scale_kernel<<<knc_blocks(n), KNC_THREADS, 0, knc_stream>>>(grad, n, max_norm / (*norm + 1e-6));
        KNC_LAUNCHED(knc_scale_kernel);
    }
    return KN_OK;
}
