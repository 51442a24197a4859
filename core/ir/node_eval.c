/* node_eval.c — kn_node_eval, which device runs a node, and the CPU's entry
 * (kn_cpu_node_eval) with its low-precision arithmetic.
 *
 * A node runs on the device of its first operand that is not on the host (a host operand,
 * such as a `full` scalar, is copied over by that device's backend): through the device
 * hooks the runtime registers (kn_ir_set_device_hooks, kiln/ir.h), since the backends live
 * above the IR (core/runtime/, core/mk/layers.py). With every operand on the host it runs
 * here, on kn_cpu_node_eval, which the CPU backend's node_eval (device_cpu.c) calls too:
 * it checks the operands are contiguous CPU tensors and calls the op's kernel of eval.c. A
 * node with an f16 or bf16 operand or result computes as a GPU would: widened to f32, the
 * f32 kernel, one rounding as the result is stored. */
#include <string.h>

#include "ir/ir_impl.h"
#include "kiln/scalar.h"

#define D(t) kn_tensor_data(t)
#define NUMEL(t) kn_tensor_numel(t)

static bool is_low_precision(kn_dtype dt) { return dt == KN_DT_F16 || dt == KN_DT_BF16; }

/* Kernels that move or convert elements without arithmetic on them take every dtype as
 * it is (views, copies, cast, full, eq, where: kn_dtype_load/store or bytes). */
static bool moves_elements(const kn_node *n) {
    kn_kernel_fn k = kn_op_impls[n->op].kernel;
    return k == kern_none || k == kern_full || k == kern_cast || k == kern_eq || k == kern_where || k == kern_reshape ||
           k == kern_permute || k == kern_broadcast_to || k == kern_slice || k == kern_slice_grad || k == kern_concat;
}

/* A node with an f16 or bf16 operand or result, on the CPU: the GPU's arithmetic. Each
 * low-precision operand is widened to f32 (exact), the node's f32 kernel computes (a
 * matmul accumulates in f32, as a tensor core does; reductions as in f32), and the result
 * is rounded to the node's dtype once, to nearest even, as it is stored. A value is thus
 * rounded exactly where a GPU kernel would store it: at every node here, at every store of
 * a fused kernel in generated code (core/codegen/render_c.c). */
static kn_status eval_low_precision(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    kn_node w = *n;
    const kn_tensor *win[KN_MAX_OPERANDS];
    kn_tensor *wide[KN_MAX_OPERANDS] = {0}, *r = NULL;
    kn_status st = KN_OK;
    if (is_low_precision(w.type.dtype)) w.type.dtype = KN_DT_F32;
    for (int i = 0; i < n->nin && st == KN_OK; i++) {
        win[i] = in[i];
        if (is_low_precision(in[i]->dtype)) { /* not kn_tensor_cast: the IR stays off lab 01's units */
            st = kn_tensor_empty(&wide[i], KN_DT_F32, in[i]->ndim, in[i]->shape);
            if (st == KN_OK) kn_dtype_convert(KN_DT_F32, D(wide[i]), in[i]->dtype, D(in[i]), NUMEL(in[i]));
            win[i] = wide[i];
        }
    }
    if (st == KN_OK) st = kn_op_impls[n->op].kernel(&w, win, &r);
    if (st == KN_OK) st = kn_eval_new_out(n, out);
    if (st == KN_OK) kn_dtype_convert(n->type.dtype, D(*out), r->dtype, D(r), NUMEL(r));
    kn_tensor_free(r);
    for (int i = 0; i < n->nin; i++) kn_tensor_free(wide[i]);
    return st;
}

/* The CPU backend's node_eval (device_cpu.c): operands are contiguous CPU tensors. */
kn_status kn_cpu_node_eval(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    bool low = is_low_precision(n->type.dtype);
    for (int i = 0; i < n->nin; i++) {
        if (!in[i] || in[i]->storage->device.type != KN_DEVICE_CPU || !kn_tensor_is_contiguous(in[i]))
            return kn_error(KN_ERR_ARG, "kn_node_eval: %s: operand %d is not a contiguous CPU tensor",
                            kn_op_name(n->op), i);
        low |= is_low_precision(in[i]->dtype);
    }
    if (low && !moves_elements(n)) return eval_low_precision(n, in, out);
    return kn_op_impls[n->op].kernel(n, in, out);
}

kn_ir_device_hooks kn_ir_device; /* ir_impl.h */

void kn_ir_set_device_hooks(const kn_ir_device_hooks *h) {
    if (h) kn_ir_device = *h;
    else memset(&kn_ir_device, 0, sizeof kn_ir_device);
}

kn_status kn_node_eval(const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    if (!n || !out) return kn_error(KN_ERR_ARG, "kn_node_eval: NULL argument");
    if ((unsigned)n->op >= KN_OP_COUNT) return kn_error(KN_ERR_ARG, "kn_node_eval: invalid op %d", (int)n->op);
    if (n->nin > 0 && !in) return kn_error(KN_ERR_ARG, "kn_node_eval: %s: NULL operands", kn_op_name(n->op));
    /* Device dispatch: the node runs on the device of its first operand that is not on
     * the host (a host operand, such as a `full` scalar, is copied over by that device's
     * backend); with every operand on the host, on the CPU kernels. */
    if (kn_op_impls[n->op].kernel == kern_none) return kern_none(n, in, out); /* bound, never computed */
    kn_device dev = KN_CPU;
    for (int i = 0; i < n->nin; i++)
        if (in[i] && in[i]->storage->device.type != KN_DEVICE_CPU) { dev = in[i]->storage->device; break; }
    if (dev.type == KN_DEVICE_CPU) return kn_cpu_node_eval(n, in, out);
    if (!kn_ir_device.node_eval)
        return kn_error(KN_ERR_UNSUPPORTED, "kn_node_eval: %s: no %s backend in this build", kn_op_name(n->op),
                        kn_device_type_name(dev.type));
    return kn_ir_device.node_eval(dev, n, in, out);
}
