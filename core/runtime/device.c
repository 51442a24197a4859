/* device.c — the table of compute backends, the checked entry points of kiln/device.h
 * (kn_device_supports_op, kn_device_contiguous, the optimizer, the profile) and the IR's
 * device hooks, which lead to them.
 *
 * One table indexed by kn_device_type holds a pointer to each compute backend built into
 * this binary. The CPU backend (device_cpu.c) is always there. The CUDA backend
 * (device_cuda.cu) is built only in a CUDA build (KN_HAVE_CUDA: nvcc present and CUDA=1,
 * or CUDA=auto on a machine with a GPU or in the staff repository; the Makefile says why);
 * without it its slot stays NULL. The entry points that run something on a device
 * (contiguous copies, the optimizer, clip, scale, the profile) check it through
 * kn_device_check (kiln/storage.h: the same errors as the storage entry points) before
 * touching a backend; the queries kn_device_backend_get and kn_device_supports_op answer
 * NULL or false for a device without one.
 *
 * The IR (core/ir/, below this layer) runs the nodes whose operands are all on the host
 * itself; for a node with an operand on another device, and a strided tensor there, it
 * calls the two hooks this file registers before main (a constructor: a binary that links
 * this table has them), which dispatch to the device's backend. */
#include "kiln/device.h"

extern const kn_device_backend kn_device_cpu_backend;
#ifdef KN_HAVE_CUDA
extern const kn_device_backend kn_device_cuda_backend;
#endif

/* ORDER DEVICE_TYPE: one entry per kn_device_type. */
static const kn_device_backend *const kn_device_table[KN_DEVICE_TYPE_COUNT] = {
    &kn_device_cpu_backend,
#ifdef KN_HAVE_CUDA
    &kn_device_cuda_backend,
#else
    NULL,
#endif
};

const kn_device_backend *kn_device_backend_get(kn_device_type type) {
    if ((int)type < 0 || type >= KN_DEVICE_TYPE_COUNT) return NULL;
    return kn_device_table[type];
}

/* ---------------------------------------------------------------- compute */

/* kn_node_eval of a node with an operand on dev (not the host): the backend of dev runs it
 * (a host operand, such as a `full` scalar, is copied over by that backend). */
static kn_status device_node_eval(kn_device dev, const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    const kn_device_backend *be = kn_device_backend_get(dev.type);
    if (!be) return kn_error(KN_ERR_UNSUPPORTED, "kn_node_eval: %s: no %s backend in this build", kn_op_name(n->op),
                             kn_device_type_name(dev.type));
    if (!be->supports_op(be->ctx, n->op))
        return kn_error(KN_ERR_UNSUPPORTED, "kn_node_eval: %s: the %s backend has no kernel for it", kn_op_name(n->op),
                        be->name);
    return be->node_eval(be->ctx, dev.index, n, in, out);
}

__attribute__((constructor)) static void device_hooks_register(void) {
    static const kn_ir_device_hooks hooks = {.node_eval = device_node_eval, .contiguous = kn_device_contiguous};
    kn_ir_set_device_hooks(&hooks);
}

bool kn_device_supports_op(kn_device_type type, kn_op op) {
    const kn_device_backend *be = kn_device_backend_get(type);
    return be && (unsigned)op < KN_OP_COUNT && be->supports_op(be->ctx, op);
}

kn_status kn_device_contiguous(const char *fn, const kn_tensor *t, kn_tensor **out) {
    if (!fn) fn = "kn_device_contiguous";
    if (!t || !out || !t->storage) return kn_error(KN_ERR_ARG, "%s: NULL tensor or output", fn);
    KN_TRY(kn_device_check(fn, t->storage->device));
    const kn_device_backend *be = kn_device_table[t->storage->device.type];
    return be->contiguous(be->ctx, fn, t, out);
}

kn_status kn_device_optim_step_low(kn_device dev, kn_optim *o, float *param, const float *grad, float *state,
                                   double lr, kn_dtype low_dt, void *low) {
    KN_TRY(kn_device_check("kn_device_optim_step", dev));
    const kn_device_backend *be = kn_device_table[dev.type];
    return be->optim_step(be->ctx, dev.index, o, param, grad, state, lr, low_dt, low);
}

kn_status kn_device_optim_step(kn_device dev, kn_optim *o, float *param, const float *grad, float *state,
                               double lr) {
    return kn_device_optim_step_low(dev, o, param, grad, state, lr, KN_DT_F32, NULL);
}

kn_status kn_device_clip_grad_norm(kn_device dev, float *grad, int64_t n, double max_norm, double *norm) {
    if (!norm || (n > 0 && !grad)) return kn_error(KN_ERR_ARG, "kn_device_clip_grad_norm: NULL slab or norm");
    KN_TRY(kn_device_check("kn_device_clip_grad_norm", dev));
    const kn_device_backend *be = kn_device_table[dev.type];
    return be->clip_grad_norm(be->ctx, dev.index, grad, n, max_norm, norm);
}

kn_status kn_device_scale(kn_device dev, float *x, int64_t n, double s) {
    if (n < 0 || (n > 0 && !x)) return kn_error(KN_ERR_ARG, "kn_device_scale: NULL slab or n %lld < 0", (long long)n);
    KN_TRY(kn_device_check("kn_device_scale", dev));
    const kn_device_backend *be = kn_device_table[dev.type];
    return be->scale(be->ctx, dev.index, x, n, s);
}

kn_status kn_device_argmax_rows(kn_device dev, const float *x, int64_t rows, int64_t n, int32_t *out) {
    if (rows < 0 || n < 1 || (rows > 0 && (!x || !out)))
        return kn_error(KN_ERR_ARG, "kn_device_argmax_rows: NULL arrays or %lld rows of %lld", (long long)rows,
                        (long long)n);
    KN_TRY(kn_device_check("kn_device_argmax_rows", dev));
    const kn_device_backend *be = kn_device_table[dev.type];
    return be->argmax_rows(be->ctx, dev.index, x, rows, n, out);
}

kn_status kn_device_profile_start(kn_device dev) {
    KN_TRY(kn_device_check("kn_device_profile_start", dev));
    const kn_device_backend *be = kn_device_table[dev.type];
    return be->profile_start(be->ctx, dev.index);
}

kn_status kn_device_profile_report(kn_device dev, FILE *f, FILE *tsv, double step_ms, int top, double *ops_ms) {
    KN_TRY(kn_device_check("kn_device_profile_report", dev));
    const kn_device_backend *be = kn_device_table[dev.type];
    return be->profile_report(be->ctx, f, tsv, step_ms, top, ops_ms);
}
