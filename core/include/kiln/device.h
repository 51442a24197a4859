/* kiln/device.h — compute backends: what each device computes (the kernels of the IR's
 * ops, contiguous copies, the optimizer, the per-op profile), beside its storage
 * (kiln/storage.h, which this header includes).
 *
 * A backend is a struct of function pointers plus a context pointer (like ggml's backends),
 * registered in one table indexed by kn_device_type (core/runtime/device.c). The CPU
 * backend (device_cpu.c) is always there; the CUDA backend (device_cuda.cu) exists only
 * when kiln was built with nvcc (KN_HAVE_CUDA). Code above this layer never #ifdefs on
 * CUDA: it asks the table. The functions below validate their kn_device as kiln/storage.h
 * says (the same errors and messages) and dispatch. */
#ifndef KILN_DEVICE_H
#define KILN_DEVICE_H

#include <stdio.h>

#include "kiln/ir.h"
#include "kiln/optim.h"
#include "kiln/storage.h"
#include "kiln/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A compute backend. Every member is required; `index` is the device's index, already
 * checked against its storage backend's count(). */
typedef struct kn_device_backend {
    const char *name;      /* "cpu", "cuda": the prefix of kn_device_str */
    kn_device_type type;   /* its slot in the table */
    void *ctx;             /* backend state, handed to every call */
    /* Compute (ggml's backend interface): the backend owns the kernels of its device.
     * supports_op: whether node_eval computes op (a table lookup: no device needed).
     * node_eval: run node n on device `index`; in[] contiguous, on this device or (small
     * sources such as a `full`) on the host; *out a new contiguous tensor there.
     * contiguous: a contiguous tensor on t's device with t's contents (an alias when t is
     * contiguous already). optim_step / clip_grad_norm: kn_optim_step_low and
     * kn_clip_grad_norm on slabs in this device's memory (state: o->state_len floats);
     * the same formulas and bits on every backend. profile_start / profile_report: the
     * per-op profile of node_eval (KN_ERR_UNSUPPORTED where the backend has none). */
    bool (*supports_op)(void *ctx, kn_op op);
    kn_status (*node_eval)(void *ctx, int index, const kn_node *n, const kn_tensor *const *in, kn_tensor **out);
    kn_status (*contiguous)(void *ctx, const char *fn, const kn_tensor *t, kn_tensor **out);
    kn_status (*optim_step)(void *ctx, int index, kn_optim *o, float *param, const float *grad, float *state,
                            double lr, kn_dtype low_dt, void *low);
    kn_status (*clip_grad_norm)(void *ctx, int index, float *grad, int64_t n, double max_norm, double *norm);
    kn_status (*profile_start)(void *ctx, int index);
    kn_status (*profile_report)(void *ctx, FILE *f, FILE *tsv, double step_ms, int top, double *ops_ms);
    /* scale: x[i] = (float)((double)x[i] * s) over n floats in this device's memory (the
     * data-parallel average of summed gradients; the same bits on every backend). */
    kn_status (*scale)(void *ctx, int index, float *x, int64_t n, double s);
    /* cross_entropy_fused: a training step's cross_entropy and cross_entropy_bwd in one
     * pass over the logits. in[] = cross_entropy_bwd's operands {dloss, logits, targets},
     * contiguous, on this device; *loss gets cross_entropy(logits, targets) and *dlogits
     * cross_entropy_bwd(dloss, logits, targets), the bits the two nodes give. Each is a new
     * tensor, or the one the caller placed there (a program's memory plan); *dlogits may be
     * the logits themselves (written over them). A compiled program pairs the two steps
     * into this call (core/program/plan.c, kn_program_pair_losses). */
    kn_status (*cross_entropy_fused)(void *ctx, int index, const kn_tensor *const *in, kn_tensor **loss,
                                     kn_tensor **dlogits);
    /* argmax_rows: out[r] (int32, this device's memory) = the first index of the largest of
     * row r of x [rows, n] (f32, this device's memory), NaN never chosen unless at index 0
     * (kn_sample_row's greedy scan, kiln/infer.h); asynchronous on a GPU. Greedy decoding
     * (kn_infer_generate) takes its tokens so instead of copying the logits to the host. */
    kn_status (*argmax_rows)(void *ctx, int index, const float *x, int64_t rows, int64_t n, int32_t *out);
} kn_device_backend;

/* The registered backend of a device type, or NULL when it is not built in (or `type` is
 * out of range). */
const kn_device_backend *kn_device_backend_get(kn_device_type type);

/* ---------------------------------------------------------------- compute
 *
 * What code above core/runtime/ calls instead of branching on a device type: each asks
 * the backend of the device concerned. */

/* Whether the backend of `type` is built in and computes op. */
bool kn_device_supports_op(kn_device_type type, kn_op op);
/* A contiguous tensor on t's device with t's contents (an alias when t already is). */
kn_status kn_device_contiguous(const char *fn, const kn_tensor *t, kn_tensor **out);
/* The optimizer update of slabs that live on dev (param, grad: o->n floats; state:
 * o->state_len floats, on the CPU usually o->state); o->step advances. Asynchronous on a
 * GPU (queued on the default stream). */
kn_status kn_device_optim_step(kn_device dev, kn_optim *o, float *param, const float *grad, float *state,
                               double lr);
/* The same, also writing the updated parameters rounded to low_dt (bf16 or f16) into low
 * (o->n 16-bit words on dev) in the same pass: kn_optim_step_low on every backend. */
kn_status kn_device_optim_step_low(kn_device dev, kn_optim *o, float *param, const float *grad, float *state,
                                   double lr, kn_dtype low_dt, void *low);
/* x[i] = (float)((double)x[i] * s) for a slab of n floats on dev (asynchronous on a GPU). */
kn_status kn_device_scale(kn_device dev, float *x, int64_t n, double s);
/* The backend's argmax_rows on dev: x [rows, n] f32 and out [rows] int32 in dev's memory.
 * KN_ERR_ARG for NULL arrays or n < 1. */
kn_status kn_device_argmax_rows(kn_device dev, const float *x, int64_t rows, int64_t n, int32_t *out);
/* Global-norm clipping of a gradient slab on dev; *norm: the norm before clipping. Waits
 * for the norm. */
kn_status kn_device_clip_grad_norm(kn_device dev, float *grad, int64_t n, double max_norm, double *norm);
/* The per-op profile of the backend of dev (kiln bench --profile): start, then report
 * prints it and ends it; *ops_ms (may be NULL) receives the ops' total GPU time in ms.
 * KN_ERR_UNSUPPORTED on a backend without one (the CPU). */
kn_status kn_device_profile_start(kn_device dev);
kn_status kn_device_profile_report(kn_device dev, FILE *f, FILE *tsv, double step_ms, int top, double *ops_ms);

#ifdef __cplusplus
}
#endif

#endif /* KILN_DEVICE_H */
