/* device_cuda.cu — the CUDA compute backend (kiln/device.h): the CUDA op table
 * (cuda_ops.cu), contiguous copies, the optimizer (cuda_optim.cu) and the per-op profile
 * (cuda_profile.cu), greedy decoding's argmax (cuda_argmax.cu). Compiled only when nvcc is found (KN_HAVE_CUDA=1; device.c registers
 * it). Its memory, copies, streams, events and graph capture are the CUDA storage backend,
 * core/storage/storage_cuda.cu. */
#include "runtime/cuda_argmax.h"
#include "runtime/cuda_impl.h"

/* Compute: the CUDA op table (cuda_ops.cu), the optimizer (cuda_optim.cu), the profile
 * (cuda_profile.cu). */
static bool cuda_supports_op(void *, kn_op op) { return kn_cuda_has_kernel(op); }
static kn_status cuda_node_eval(void *, int, const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    return kn_cuda_node_eval(n, in, out);
}
static kn_status cuda_contiguous(void *, const char *fn, const kn_tensor *t, kn_tensor **out) {
    return kn_cuda_contiguous(fn, t, out);
}
static kn_status cuda_optim(void *, int index, kn_optim *o, float *param, const float *grad, float *state, double lr,
                            kn_dtype low_dt, void *low) {
    return kn_cuda_optim_step(index, o, param, grad, state, lr, low_dt, low);
}
static kn_status cuda_clip(void *, int index, float *grad, int64_t n, double max_norm, double *norm) {
    return kn_cuda_clip_grad_norm(index, grad, n, max_norm, norm);
}
static kn_status cuda_scale(void *, int index, float *x, int64_t n, double s) { return kn_cuda_scale(index, x, n, s); }
static kn_status cuda_profile_start(void *, int index) { return kn_cuda_profile_start(index); }
static kn_status cuda_profile_report(void *, FILE *f, FILE *tsv, double step_ms, int top, double *ops_ms) {
    return kn_cuda_profile_report(f, tsv, step_ms, top, ops_ms);
}

static kn_status cuda_ce_fused(void *, int index, const kn_tensor *const *in, kn_tensor **loss, kn_tensor **dlogits) {
    KN_CUDA_TRY(cudaSetDevice(index));
    return kn_cuda_cross_entropy_fused(in, loss, dlogits);
}

static kn_status cuda_argmax(void *, int index, const float *x, int64_t rows, int64_t n, int32_t *out) {
    KN_CUDA_TRY(cudaSetDevice(index));
    return knc_argmax_rows(x, rows, n, out);
}

/* Positional, in the order of kn_device_backend's members (C++17 has no designators). */
extern "C" const kn_device_backend kn_device_cuda_backend = {
    "cuda", KN_DEVICE_CUDA, nullptr,
    cuda_supports_op, cuda_node_eval, cuda_contiguous, cuda_optim, cuda_clip, cuda_profile_start, cuda_profile_report,
    cuda_scale, cuda_ce_fused, cuda_argmax,
};
