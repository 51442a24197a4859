/* cuda_optim_stub.c — the GPU optimizer, timer and profile entry points of kiln/cuda.h in a build
 * without CUDA: each reports KN_ERR_UNSUPPORTED ("built without CUDA"), so the trainer and
 * `kiln bench` link and `--device cuda` fails cleanly. With CUDA, cuda_optim.cu,
 * cuda_timer.cu and cuda_profile.cu define them and this file compiles to nothing. */
#include "kiln/cuda.h"

#ifndef KN_HAVE_CUDA
kn_status kn_cuda_optim_step(int device, kn_optim *o, float *param, const float *grad, float *state, double lr) {
    (void)device; (void)o; (void)param; (void)grad; (void)state; (void)lr;
    return kn_error(KN_ERR_UNSUPPORTED, "kn_cuda_optim_step: kiln was built without CUDA");
}
kn_status kn_cuda_clip_grad_norm(int device, float *grad, int64_t n, double max_norm, double *norm) {
    (void)device; (void)grad; (void)n; (void)max_norm; (void)norm;
    return kn_error(KN_ERR_UNSUPPORTED, "kn_cuda_clip_grad_norm: kiln was built without CUDA");
}
kn_status kn_cuda_timer_start(int device, kn_cuda_timer **out) {
    (void)device;
    if (out) *out = NULL;
    return kn_error(KN_ERR_UNSUPPORTED, "kn_cuda_timer_start: kiln was built without CUDA");
}
kn_status kn_cuda_timer_stop(kn_cuda_timer *t, double *ms) {
    (void)t; (void)ms;
    return kn_error(KN_ERR_UNSUPPORTED, "kn_cuda_timer_stop: kiln was built without CUDA");
}
kn_status kn_cuda_profile_start(int device) {
    (void)device;
    return kn_error(KN_ERR_UNSUPPORTED, "kn_cuda_profile_start: kiln was built without CUDA");
}
kn_status kn_cuda_profile_report(FILE *f, FILE *tsv, double step_ms, int top) {
    (void)f; (void)tsv; (void)step_ms; (void)top;
    return kn_error(KN_ERR_UNSUPPORTED, "kn_cuda_profile_report: kiln was built without CUDA");
}
#else
typedef int kn_cuda_optim_stub_unused; /* ISO C wants at least one declaration per file */
#endif
