/* cuda_stub.c — kiln/cuda.h in a build without CUDA (no nvcc): every entry point reports
 * KN_ERR_UNSUPPORTED, so callers (kn_node_eval) link and fail cleanly. With CUDA this file
 * compiles to nothing and the .cu files define the functions. */
#include "kiln/cuda.h"

#ifndef KN_HAVE_CUDA
static kn_status no_cuda(const char *fn) {
    return kn_error(KN_ERR_UNSUPPORTED, "%s: kiln was built without CUDA", fn);
}

kn_status kn_cuda_node_eval(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    (void)n; (void)in; (void)out;
    return no_cuda("kn_cuda_node_eval");
}
bool kn_cuda_has_kernel(kn_op op) { (void)op; return false; }
kn_status kn_cuda_contiguous(const char *fn, const kn_tensor *t, kn_tensor **out) {
    (void)t; (void)out;
    return no_cuda(fn ? fn : "kn_cuda_contiguous");
}
kn_status kn_cuda_mem_info_get(int device, kn_cuda_mem_info *out) {
    (void)device; (void)out;
    return no_cuda("kn_cuda_mem_info_get");
}
kn_status kn_cuda_empty_cache(int device, size_t *released) {
    (void)device; (void)released;
    return no_cuda("kn_cuda_empty_cache");
}
#else
typedef int kn_cuda_stub_unused; /* ISO C wants at least one declaration per file */
#endif
