/* device_cpu.c — the CPU compute backend (kiln/device.h): the interpreter's kernels for
 * every op (ir/eval*.c), contiguous copies, the optimizer (optim.c) and no profile. Its
 * storage (host memory, copies, streams, events) is core/storage/storage_cpu.c. */
#include "ir/ir_impl.h"
#include "kiln/device.h"

/* ---------------------------------------------------------------- compute */

static bool cpu_supports_op(void *ctx, kn_op op) {
    (void)ctx;
    return (unsigned)op < KN_OP_COUNT && kn_op_impls[op].kernel != kern_none;
}

static kn_status cpu_node_eval(void *ctx, int index, const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    (void)ctx; (void)index;
    return kn_cpu_node_eval(n, in, out);
}

static kn_status cpu_contiguous(void *ctx, const char *fn, const kn_tensor *t, kn_tensor **out) {
    (void)ctx; (void)fn;
    return kn_tensor_is_contiguous(t) ? kn_tensor_alias(out, t) : kn_tensor_contiguous(out, t);
}

static kn_status cpu_optim_step(void *ctx, int index, kn_optim *o, float *param, const float *grad, float *state,
                                double lr, kn_dtype low_dt, void *low) {
    (void)ctx; (void)index;
    return kn_optim_step_low(o, param, grad, state, lr, low_dt, low);
}

static kn_status cpu_scale(void *ctx, int index, float *x, int64_t n, double s) {
    (void)ctx; (void)index;
    for (int64_t i = 0; i < n; i++) x[i] = (float)((double)x[i] * s);
    return KN_OK;
}

static kn_status cpu_clip_grad_norm(void *ctx, int index, float *grad, int64_t n, double max_norm, double *norm) {
    (void)ctx; (void)index;
    *norm = kn_clip_grad_norm(grad, n, max_norm);
    return KN_OK;
}

static kn_status cpu_profile_start(void *ctx, int index) {
    (void)ctx; (void)index;
    return kn_error(KN_ERR_UNSUPPORTED, "the cpu backend has no per-op profile (it is a GPU tool)");
}

static kn_status cpu_profile_report(void *ctx, FILE *f, FILE *tsv, double step_ms, int top, double *ops_ms) {
    (void)ctx; (void)f; (void)tsv; (void)step_ms; (void)top; (void)ops_ms;
    return kn_error(KN_ERR_UNSUPPORTED, "the cpu backend has no per-op profile (it is a GPU tool)");
}

static kn_status cpu_cross_entropy_fused(void *ctx, int index, const kn_tensor *const *in, kn_tensor **loss,
                                         kn_tensor **dlogits) {
    (void)ctx; (void)index;
    return kn_cpu_cross_entropy_fused(in, loss, dlogits);
}

/* The scan kn_sample_row makes at temperature 0 (kiln/infer.h), a row at a time. */
static kn_status cpu_argmax_rows(void *ctx, int index, const float *x, int64_t rows, int64_t n, int32_t *out) {
    (void)ctx; (void)index;
    if (n > INT32_MAX) return kn_error(KN_ERR_ARG, "argmax_rows: rows of %lld exceed int32 indices", (long long)n);
    for (int64_t r = 0; r < rows; r++) {
        const float *row = x + r * n;
        int64_t best = 0;
        for (int64_t v = 1; v < n; v++)
            if (row[v] > row[best]) best = v;
        out[r] = (int32_t)best;
    }
    return KN_OK;
}

const kn_device_backend kn_device_cpu_backend = {
    .name = "cpu",
    .type = KN_DEVICE_CPU,
    .ctx = NULL,
    .supports_op = cpu_supports_op,
    .node_eval = cpu_node_eval,
    .contiguous = cpu_contiguous,
    .optim_step = cpu_optim_step,
    .clip_grad_norm = cpu_clip_grad_norm,
    .profile_start = cpu_profile_start,
    .profile_report = cpu_profile_report,
    .scale = cpu_scale,
    .cross_entropy_fused = cpu_cross_entropy_fused,
    .argmax_rows = cpu_argmax_rows,
};
