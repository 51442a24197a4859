/* kiln/cuda.h — the eager GPU path: CUDA kernels for the ops of the graph IR, and the CUDA
 * caching allocator's controls.
 *
 * kn_node_eval (core/ir/node_eval.c) sends a node whose operands live on a CUDA device here: the
 * op's CUDA kernel runs on that device and the result stays there (kn_tensor_to brings it
 * back). One kernel (or one cuBLAS call) per op, on the default stream, in program order:
 * a result is ready for the next op without any synchronization, and only copies to the
 * host wait. Every CUDA and cuBLAS call is checked; a failure is KN_ERR_DEVICE naming the
 * call, file:line and the library's message.
 *
 * Numerics (checked against the CPU kernels by tests/core/test_cuda_ops.c on a GPU): the
 * same formulas as kernels_train.inc; sums, means and normalization statistics accumulate
 * in double in a fixed order (each output by one thread, or one block with a fixed-shape
 * shuffle tree), so results are deterministic run to run. embedding_grad uses no float
 * atomics: the indices are bucketed by row on the host and each row's gradients are summed
 * in index order, exactly as on the CPU. Dropout draws the same Philox words as the CPU,
 * so both give the same mask. Matrix products go through cuBLAS with TF32 off unless the
 * environment sets KILN_TF32=1. KILN_CUDA_SYNC=1 synchronizes after every op (to pin an
 * asynchronous error on the op that caused it).
 *
 * Dtypes: float ops take f32 and f64; cast takes any pair of dtypes; eq/where take any.
 * Anything else is KN_ERR_UNSUPPORTED naming the op and dtype.
 *
 * Code above core/runtime/ does not call these: it asks the device table (kiln/device.h:
 * kn_node_eval, kn_device_contiguous, kn_device_optim_step, kn_device_profile_start, ...),
 * whose CUDA backend (device_cuda.cu) is these functions. Built without CUDA, none of this
 * exists: the table has no CUDA backend, and its requests fail with KN_ERR_UNSUPPORTED. */
#ifndef KILN_CUDA_H
#define KILN_CUDA_H

#include "kiln/codegen.h"
#include "kiln/device.h"
#include "kiln/ir.h"
#include "kiln/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Run node n on the CUDA device of its operands. in[] are contiguous tensors; those on the
 * CPU (a `full` scalar, say) are copied to the device first. Operands on two different GPUs
 * are KN_ERR_DEVICE. *out: a new contiguous tensor of n->type on that device. */
kn_status kn_cuda_node_eval(const kn_node *n, const kn_tensor *const *in, kn_tensor **out);

/* cross_entropy and cross_entropy_bwd of one training step in one pass over the logits:
 * in[] = {dloss, logits, targets} on one GPU, as cross_entropy_bwd's operands; *loss gets
 * cross_entropy(logits, targets) (bit for bit: the same row statistics and the same sum)
 * and *dlogits cross_entropy_bwd(dloss, logits, targets) (the same bits too). Each row is
 * read from memory once: a block per row takes its statistics and writes the row's
 * gradient on a second pass that L2 serves. *dlogits NULL: a new tensor; else a
 * contiguous tensor of the logits' type, either the logits themselves (written over them:
 * ~1 read + 1 write of the logits in all, against the pair's 2 reads + 1 write) or a
 * buffer that does not overlap them. Targets outside [0, V) are KN_ERR_ARG (checked on the
 * host, skipped while a CUDA graph is captured: then a NaN loss term). */
kn_status kn_cuda_cross_entropy_fused(const kn_tensor *const *in, kn_tensor **loss, kn_tensor **dlogits);
/* Compile CUDA C (src, a kernel named `name` for messages) to PTX for compute capability
 * major.minor with NVRTC: no GPU needed. *ptx (kn_free it) and *ptx_len on success;
 * KN_ERR_INTERNAL with NVRTC's log when it does not compile. */
kn_status kn_cuda_nvrtc_compile(const char *src, const char *name, int major, int minor, char **ptx, size_t *ptx_len);
/* NVRTC's version; KN_ERR_UNSUPPORTED, saying what to install, when NVRTC cannot be
 * opened (it is opened at run time: $KILN_NVRTC, else libnvrtc.so.<CUDA major>). */
kn_status kn_cuda_nvrtc_version(int *major, int *minor);
/* The same with cubin: true for SASS of sm_<major><minor> (loadable as it is) instead of PTX. */
kn_status kn_cuda_nvrtc_build(const char *src, const char *name, int major, int minor, bool cubin, char **out,
                              size_t *len);

/* Generated kernels on the GPU (core/runtime/cuda_module.cu). kn_cuda_module_load compiles
 * src (CUDA C from kn_render_cuda) with NVRTC for device's architecture, or reads the cubin
 * from the kernel cache ($KILN_CACHE_DIR/kernels/<hash>.cubin), and loads it; *cached and
 * *ms (either may be NULL) say which and how long it took. A compile error is
 * KN_ERR_INTERNAL with NVRTC's log. kn_cuda_module_kernel finds a kernel by name;
 * kn_cuda_launch_kernel launches it on the default stream with args as cudaLaunchKernel
 * takes them (one pointer to each argument). kn_cuda_limits_get: the device's limits for
 * kn_cuda_launch_config, and its compute capability. */
typedef struct kn_cuda_module kn_cuda_module;
kn_status kn_cuda_module_load(int device, const char *src, const char *name, kn_cuda_module **out, bool *cached,
                              double *ms);
kn_status kn_cuda_module_kernel(const kn_cuda_module *m, const char *name, void **fn);
kn_status kn_cuda_launch_kernel(void *fn, const char *name, kn_cuda_launch l, void **args);
void kn_cuda_module_free(kn_cuda_module *m);
kn_status kn_cuda_limits_get(int device, kn_cuda_limits *lim, int *major, int *minor);

/* Whether op has a CUDA kernel (false for sources, which have no operand on a GPU: a
 * `full` runs on the CPU and its consumer copies it over; false for invalid ops). */
bool kn_cuda_has_kernel(kn_op op);

/* A contiguous tensor on t's CUDA device with t's contents: an alias when t already is
 * contiguous, else a copy made by a strided-copy kernel. fn names the caller in errors. */
kn_status kn_cuda_contiguous(const char *fn, const kn_tensor *t, kn_tensor **out);

/* The optimizer on GPU slabs (core/runtime/cuda_optim.cu): kn_optim_step's update of
 * param[0..o->n) with grad on CUDA device `device`, the state slab (o->state_len floats:
 * SGD's momentum buffer, or AdamW's m then v) also on the device; o->state (host) is not
 * touched, o->step advances. Same formulas, per-element double arithmetic, as the CPU.
 * low (may be NULL): o->n 16-bit words on the device that receive each updated parameter
 * rounded to low_dt (bf16 or f16, the bit-level rounding of kn_lowp_source), in the same
 * kernel (kn_optim_step_low). Asynchronous: queued on the default stream. */
kn_status kn_cuda_optim_step(int device, kn_optim *o, float *param, const float *grad, float *state, double lr,
                             kn_dtype low_dt, void *low);
/* kn_clip_grad_norm on a device slab: *norm receives the norm before clipping (summed in
 * double in a fixed order: deterministic, equal to the CPU's to rounding); grad is scaled
 * by max_norm / (norm + 1e-6) when norm > max_norm > 0. Waits for the norm. */
kn_status kn_cuda_clip_grad_norm(int device, float *grad, int64_t n, double max_norm, double *norm);
/* x[i] = (float)((double)x[i] * s) on a device slab, queued on the default stream. */
kn_status kn_cuda_scale(int device, float *x, int64_t n, double s);

/* A per-op profile of the eager path (core/runtime/cuda_profile.cu), for "where does the
 * step go". Between start and report, kn_cuda_node_eval brackets every op with two CUDA
 * events and waits for the second, so each op's GPU time is exact but the run is slower
 * (the host no longer runs ahead). Ops are grouped by op, operand shapes and (for matmul)
 * transposes. report prints the groups by total time, the top `top` of them (0: all),
 * each with calls, ms, share of the profiled time, and GB/s or GFLOP/s from the bytes read
 * and written and the matmul flops, and the GB/s as a share of the device's copy bandwidth
 * (measured by start on `device`: a device-to-device copy, bytes read + written); then the
 * sum per op; then, when step_ms > 0, how much of step_ms ran outside any op (copies,
 * optimizer, host waits). When tsv is not NULL it also gets one tab-separated line per
 * group (plots/profile.sh plots them). It ends the profile. */
kn_status kn_cuda_profile_start(int device);
kn_status kn_cuda_profile_report(FILE *f, FILE *tsv, double step_ms, int top, double *ops_ms);
/* The GPU ceilings for `kiln roofline` (cuda_roofline.cu): device-to-device copy bandwidth
 * (GB/s, read + write) and cuBLAS 4096^3 matmul peaks (TFLOP/s) in fp32 with TF32 off and
 * in bf16 with fp32 accumulation. KN_ERR_DEVICE at once without that device. */
kn_status kn_cuda_ceilings(int device, double *copy_gbs, double *f32_tflops, double *bf16_tflops);
/* The int8 GEMM against cuBLAS's bf16 GEMM for `make bench-int8 --device cuda`
 * (cuda_quant.cu): c [m, n] = a [m, k] b^T, random operands made on the GPU, best of reps
 * after a warm-up, CUDA events, the variants interleaved. bf16_ms: cublasGemmEx bf16 x bf16,
 * f32 accumulate, bf16 out (bf16_f32out_ms: f32 out); i8_core_ms: cuBLASLt's int8 product
 * alone, int32 out (-1 where cuBLASLt refuses the shape); i8_ms: the int8 codes' product
 * (cuBLASLt IMMA, i8_lt true, or the dp4a kernel) with its dequantizing epilogue, f32 out,
 * what matmul_w8a8 runs after quantizing; i8_quant_ms: the same plus quantizing the f32
 * activations per row; i8_fused_ms: an experiment, cuBLASLt applying both scales itself
 * (OUTER_VEC_32F scale modes, f32 out; -1 where this cuBLASLt has no such int8 kernel) and
 * i8_fused_maxrel its largest difference from the unfused result over the largest |c|.
 * KN_ERR_DEVICE at once without that device. */
typedef struct kn_int8_gpu_times {
    double bf16_ms, bf16_f32out_ms, i8_core_ms, i8_ms, i8_quant_ms, i8_fused_ms, i8_fused_maxrel;
    bool i8_lt;
    char device[128];
} kn_int8_gpu_times;
kn_status kn_cuda_bench_int8(int device, int64_t m, int64_t n, int64_t k, int reps, kn_int8_gpu_times *t);

#ifdef __cplusplus
}
#endif

#endif /* KILN_CUDA_H */
