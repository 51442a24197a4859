/* test_ir_device_hooks.c — the IR's way to the device backends (kn_ir_set_device_hooks,
 * kiln/ir.h): the IR sits below the runtime (core/mk/layers.py), so a node with an operand
 * off the host, and a strided tensor there, reach the backends only through the two hooks
 * core/runtime/device.c registers before main.
 *
 *   - in a binary linked with the runtime the hooks are there before any test runs;
 *   - kn_node_eval sends a node with a device operand to hooks.node_eval with that device
 *     (the first operand off the host), and computes a host-only node itself without them;
 *     kn_ir_contiguous (eager inputs, interpreter bindings, collectives) sends a device
 *     tensor to hooks.contiguous;
 *   - without hooks such a node or copy is KN_ERR_UNSUPPORTED naming the op and device.
 * The device tensors here are fakes (host bytes tagged cuda:1) that only the recording hooks
 * see, so the test runs the same with or without a GPU. */
#include <string.h>

#include "tensor_test_util.h"
#include "ir/ir_impl.h"

static int node_calls, contig_calls;
static kn_device node_dev;

static kn_status rec_node_eval(kn_device dev, const kn_node *n, const kn_tensor *const *in, kn_tensor **out) {
    (void)n; (void)in;
    node_calls++;
    node_dev = dev;
    return kn_tensor_scalar(out, KN_DT_F32, 7.0);
}

static kn_status rec_contiguous(const char *fn, const kn_tensor *t, kn_tensor **out) {
    (void)fn;
    contig_calls++;
    return kn_tensor_alias(out, t);
}

static kn_node unary(kn_op op) {
    kn_node n;
    memset(&n, 0, sizeof n);
    n.op = op;
    n.nin = 1;
    n.attrs = kn_attrs_default();
    n.type = (kn_type){KN_DT_F32, 2, {2, 3}};
    return n;
}

KN_TEST(ir_device_hooks, the_runtime_registers_them_before_main) {
    cr_assert(kn_ir_device.node_eval && kn_ir_device.contiguous,
              "core/runtime/device.c's constructor did not register the IR's device hooks");
}

KN_TEST(ir_device_hooks, device_nodes_and_copies_go_through_them) {
    const kn_ir_device_hooks saved = kn_ir_device;
    float bytes[6] = {0};
    kn_storage st = {.refcount = 1, .device = {KN_DEVICE_CUDA, 1}, .nbytes = sizeof bytes, .data = bytes, .owns_data = false};
    kn_tensor g = {.storage = &st, .dtype = KN_DT_F32, .ndim = 2, .shape = {2, 3}, .strides = {3, 1}, .offset = 0};
    kn_tensor *h, *o = NULL;
    KN_ASSERT_OK(kn_tensor_full(&h, KN_DT_F32, 2, (int64_t[]){2, 3}, 2.0));
    kn_ir_set_device_hooks(&(kn_ir_device_hooks){.node_eval = rec_node_eval, .contiguous = rec_contiguous});

    kn_node n = unary(KN_OP_NEG);
    const kn_tensor *in[2] = {&g, NULL};
    KN_ASSERT_OK(kn_node_eval(&n, in, &o));
    cr_assert_eq(node_calls, 1);
    cr_assert(node_dev.type == KN_DEVICE_CUDA && node_dev.index == 1, "the node went to %d:%d", (int)node_dev.type,
              node_dev.index);
    kn_tensor_free(o);
    o = NULL;
    /* the first operand off the host decides, a host operand before it does not */
    kn_node add = unary(KN_OP_ADD);
    add.nin = 2;
    const kn_tensor *in2[2] = {h, &g};
    KN_ASSERT_OK(kn_node_eval(&add, in2, &o));
    cr_assert(node_calls == 2 && node_dev.type == KN_DEVICE_CUDA && node_dev.index == 1);
    kn_tensor_free(o);
    o = NULL;
    /* a host-only node never asks the hooks: the CPU kernel computes it */
    in[0] = h;
    KN_ASSERT_OK(kn_node_eval(&n, in, &o));
    cr_assert_eq(node_calls, 2);
    cr_assert(o->storage->device.type == KN_DEVICE_CPU && ((const float *)kn_tensor_data(o))[5] == -2.0f);
    kn_tensor_free(o);
    o = NULL;
    /* a device tensor made contiguous goes to its backend; a host one does not */
    KN_ASSERT_OK(kn_ir_contiguous("test", &g, &o));
    cr_assert_eq(contig_calls, 1);
    kn_tensor_free(o);
    o = NULL;
    KN_ASSERT_OK(kn_ir_contiguous("test", h, &o));
    cr_assert_eq(contig_calls, 1);
    kn_tensor_free(o);
    o = NULL;

    /* no hooks (a binary without the runtime): a clear error, never a crash */
    kn_ir_set_device_hooks(NULL);
    in[0] = &g;
    KN_ASSERT_ERR(kn_node_eval(&n, in, &o), KN_ERR_UNSUPPORTED);
    cr_assert(strstr(kn_last_error(), "neg") && strstr(kn_last_error(), "no cuda backend"), "%s", kn_last_error());
    cr_assert_null(o);
    KN_ASSERT_ERR(kn_ir_contiguous("test_fn", &g, &o), KN_ERR_UNSUPPORTED);
    cr_assert(strstr(kn_last_error(), "test_fn") && strstr(kn_last_error(), "no cuda backend"), "%s", kn_last_error());
    cr_assert_null(o);
    cr_assert_eq(node_calls, 2);

    kn_ir_set_device_hooks(&saved);
    cr_assert(kn_ir_device.node_eval == saved.node_eval && kn_ir_device.contiguous == saved.contiguous);
    kn_tensor_free(h);
    cr_assert_eq(st.refcount, 1);
}
