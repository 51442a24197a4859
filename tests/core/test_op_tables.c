/* test_op_tables.c — every op of ops.def walked through every kernel table.
 *
 * An op routed to a kernel that serves several ops (kern_unary for neg, exp, ...; the
 * CUDA table's knc_unary likewise) must compute its own function, or say it cannot:
 *   - every table of the IR generated from ops.def has an entry for every op (shape rule,
 *     CPU kernel, cost; the backward column is autograd's table, whose entries are the
 *     rules' addresses: an empty one does not compile), and each backend built in answers
 *     supports_op;
 *   - each pointwise unary/binary op and each reduction computes, on the CPU, exactly the
 *     scalar function of its name (kiln/scalar.h), bit for bit in f32 and f64; a
 *     fall-through to another op's math (relu for a new unary op) fails here;
 *   - every op handed to every shared CPU kernel that does not compute it is
 *     KN_ERR_UNSUPPORTED naming the op and the backend, never a result.
 * The CUDA column is checked without a GPU: its table and op checks are host code. */
#include <string.h>

#include "test_ir_util.h"
#include "ir/ir_impl.h"
#include "kiln/device.h"
#include "kiln/scalar.h"

static kn_node mk_node(kn_op op, kn_dtype dt, int ndim, const int64_t *shape) {
    kn_node n;
    memset(&n, 0, sizeof n);
    n.op = op;
    n.nin = kn_op_get(op)->arity;
    n.attrs = kn_attrs_default();
    n.type.dtype = dt;
    n.type.ndim = ndim;
    for (int i = 0; i < ndim; i++) n.type.shape[i] = shape[i];
    return n;
}

KN_TEST(op_tables, every_op_has_every_column) {
    for (int op = 0; op < KN_OP_COUNT; op++) {
        const kn_op_impl *im = &kn_op_impls[op];
        const char *name = kn_op_name((kn_op)op);
        cr_assert(im->infer && im->kernel && im->cost, "%s: a column of ops.def is empty", name);
        cr_assert_eq(kn_op_from_name(name, strlen(name)), (kn_op)op, "%s", name);
        /* every backend built in answers for every op; the CPU computes every non-source */
        for (int d = 0; d < KN_DEVICE_TYPE_COUNT; d++) {
            const kn_device_backend *be = kn_device_backend_get((kn_device_type)d);
            if (!be) continue;
            bool s = be->supports_op(be->ctx, (kn_op)op);
            if (d == KN_DEVICE_CPU) cr_assert(s || im->kernel == kern_none, "%s: cpu backend refuses it", name);
        }
    }
}

KN_TEST(op_tables, a_gpu_backend_that_is_built_supports_every_computed_op) {
    const kn_device_backend *be = kn_device_backend_get(KN_DEVICE_CUDA);
    if (!be) { cr_log_info("op_tables: built without CUDA, no CUDA table to walk"); return; }
    for (int op = 0; op < KN_OP_COUNT; op++) {
        /* sources are bound; collectives run in the program's context, never a device kernel */
        kn_op_category cat = kn_op_get((kn_op)op)->category;
        bool source = cat == KN_CAT_SOURCE || cat == KN_CAT_COLLECTIVE;
        cr_assert_eq(be->supports_op(be->ctx, (kn_op)op), !source, "%s: cuda supports_op", kn_op_name((kn_op)op));
    }
}

/* Run a node on the CPU on one f32 or f64 operand set; the result. */
static kn_tensor *eval(const kn_node *n, kn_tensor **in) {
    kn_tensor *out = NULL;
    KN_ASSERT_OK(kn_node_eval(n, (const kn_tensor *const *)in, &out));
    return out;
}

static double at(const kn_tensor *t, int64_t i) { return kn_dtype_load(t->dtype, kn_tensor_data(t), i); }

KN_TEST(op_tables, each_pointwise_op_computes_the_function_of_its_name) {
    int64_t shape[1] = {37};
    int checked = 0;
    for (int op = 0; op < KN_OP_COUNT; op++) {
        kn_unary_op u;
        kn_binary_op b;
        bool un = kn_op_impls[op].kernel == kern_unary, bin = kn_op_impls[op].kernel == kern_binary;
        if (!un && !bin) continue;
        const char *name = kn_op_name((kn_op)op);
        cr_assert(!un || kn_op_unary((kn_op)op, &u), "%s uses kern_unary but names no kn_unary_op", name);
        cr_assert(!bin || kn_op_binary((kn_op)op, &b), "%s uses kern_binary but names no kn_binary_op", name);
        for (int k = 0; k < 2; k++) {
            kn_dtype dt = k ? KN_DT_F64 : KN_DT_F32;
            kn_tensor *in[2] = {irt_randn(dt, 1, shape, 7 + (uint64_t)op), irt_randn(dt, 1, shape, 100 + (uint64_t)op)};
            kn_dtype_store(dt, kn_tensor_data(in[0]), 3, NAN); /* NaN rules too (relu(NaN) = NaN) */
            kn_node n = mk_node((kn_op)op, dt, 1, shape);
            kn_tensor *y = eval(&n, in);
            for (int64_t i = 0; i < shape[0]; i++) {
                double x0 = at(in[0], i), x1 = at(in[1], i), want;
                if (dt == KN_DT_F32)
                    want = un ? kn_sc_unary_f32(u, (float)x0) : kn_sc_binary_f32(b, (float)x0, (float)x1);
                else
                    want = un ? kn_sc_unary_f64(u, x0) : kn_sc_binary_f64(b, x0, x1);
                double got = at(y, i);
                cr_assert(got == want || (isnan(got) && isnan(want)), "%s %s [%lld]: %.17g, want %.17g", name,
                          kn_dtype_name(dt), (long long)i, got, want);
            }
            kn_tensor_free(y);
            kn_tensor_free(in[0]);
            kn_tensor_free(in[1]);
            checked++;
        }
    }
    cr_assert_geq(checked, 2 * 12, "only %d pointwise op/dtype pairs found", checked);
}

/* unary_grad {fn=f} on the CPU: kiln/scalar.h's kn_sc_unary_grad_S(f, dy, x), bit for bit,
 * for every row of kiln/pointwise.def with a gradient column; a row without one, or no fn,
 * is refused by the attribute check. */
KN_TEST(op_tables, unary_grad_computes_each_rows_gradient_column) {
    int64_t shape[1] = {37};
    int checked = 0;
    for (int f = 0; f < KN_UNARY_COUNT; f++) {
        kn_node n = mk_node(KN_OP_UNARY_GRAD, KN_DT_F32, 1, shape);
        n.attrs.fn = f;
        char msg[256];
        if (!kn_sc_unary_has_grad((kn_unary_op)f)) {
            cr_assert_eq(kn_node_check_attrs(&n, msg, sizeof msg), KN_ERR_ARG, "%s has no gradient column",
                         kn_unary_op_name((kn_unary_op)f));
            continue;
        }
        KN_ASSERT_OK(kn_node_check_attrs(&n, msg, sizeof msg));
        for (int k = 0; k < 2; k++) {
            kn_dtype dt = k ? KN_DT_F64 : KN_DT_F32;
            kn_tensor *in[2] = {irt_randn(dt, 1, shape, 11 + (uint64_t)f), irt_randn(dt, 1, shape, 200 + (uint64_t)f)};
            n.type.dtype = dt;
            kn_tensor *y = eval(&n, in);
            for (int64_t i = 0; i < shape[0]; i++) {
                double d = at(in[0], i), x = at(in[1], i);
                double want = dt == KN_DT_F32 ? kn_sc_unary_grad_f32((kn_unary_op)f, (float)d, (float)x)
                                              : kn_sc_unary_grad_f64((kn_unary_op)f, d, x);
                cr_assert(at(y, i) == want, "unary_grad {fn=%s} %s [%lld]: %.17g, want %.17g",
                          kn_unary_op_name((kn_unary_op)f), kn_dtype_name(dt), (long long)i, at(y, i), want);
            }
            kn_tensor_free(y);
            kn_tensor_free(in[0]);
            kn_tensor_free(in[1]);
            checked++;
        }
    }
    cr_assert_geq(checked, 2 * 2, "only %d rows with a gradient column", checked / 2);
    kn_node n = mk_node(KN_OP_UNARY_GRAD, KN_DT_F32, 1, shape);
    char msg[256];
    cr_assert_eq(kn_node_check_attrs(&n, msg, sizeof msg), KN_ERR_ARG, "unary_grad without fn");
    cr_assert(strstr(msg, "needs fn"), "%s", msg);
}

KN_TEST(op_tables, each_reduction_computes_the_reduction_of_its_name) {
    int64_t shape[2] = {3, 5}, oshape[1] = {3};
    for (int op = 0; op < KN_OP_COUNT; op++) {
        if (kn_op_impls[op].kernel != kern_reduce) continue;
        kn_reduce_op r;
        cr_assert(kn_op_reduce((kn_op)op, &r), "%s uses kern_reduce but names no kn_reduce_op", kn_op_name((kn_op)op));
        kn_tensor *in[1] = {irt_randn(KN_DT_F64, 2, shape, 5)};
        kn_node n = mk_node((kn_op)op, KN_DT_F64, 1, oshape);
        n.attrs.naxes = 1;
        n.attrs.axes[0] = 1;
        kn_tensor *y = eval(&n, in);
        for (int64_t i = 0; i < 3; i++) {
            double acc = r == KN_REDUCE_MAX ? -INFINITY : 0;
            for (int64_t j = 0; j < 5; j++) {
                double v = at(in[0], i * 5 + j);
                acc = r == KN_REDUCE_MAX ? (v > acc ? v : acc) : acc + v;
            }
            if (r == KN_REDUCE_MEAN) acc /= 5;
            cr_assert_eq(at(y, i), acc, "%s row %lld", kn_op_name((kn_op)op), (long long)i);
        }
        kn_tensor_free(y);
        kn_tensor_free(in[0]);
    }
}

/* Every op through every shared CPU kernel: the kernel computes the ops it knows and
 * refuses the others by name. */
KN_TEST(op_tables, shared_cpu_kernels_refuse_ops_they_do_not_compute) {
    const kn_kernel_fn shared[] = {kern_unary, kern_binary, kern_reduce, kern_unary_grad, kern_softmax, kern_softmax_bwd};
    int64_t shape[2] = {2, 3};
    kn_tensor *a = irt_randn(KN_DT_F32, 2, shape, 1), *b = irt_randn(KN_DT_F32, 2, shape, 2);
    const kn_tensor *in[3] = {a, b, a};
    int refused = 0;
    for (size_t k = 0; k < sizeof shared / sizeof shared[0]; k++)
        for (int op = 0; op < KN_OP_COUNT; op++) {
            if (kn_op_impls[op].kernel == shared[k]) continue;
            kn_node n = mk_node((kn_op)op, KN_DT_F32, 2, shape);
            kn_tensor *out = NULL;
            kn_status st = shared[k](&n, in, &out);
            cr_assert_eq(st, KN_ERR_UNSUPPORTED, "%s through shared kernel %zu: status %d", kn_op_name((kn_op)op), k,
                         (int)st);
            cr_assert_null(out);
            cr_assert(strstr(kn_last_error(), kn_op_name((kn_op)op)) && strstr(kn_last_error(), "cpu"), "%s",
                      kn_last_error());
            refused++;
        }
    cr_assert_gt(refused, 100);
    kn_tensor_free(a);
    kn_tensor_free(b);
}

KN_TEST(op_tables, every_function_has_a_c_expression_for_renderers) {
    for (int u = 0; u < KN_UNARY_COUNT; u++) cr_assert_not_null(kn_sc_unary_expr((kn_unary_op)u), "unary %d", u);
    for (int b = 0; b < KN_BINARY_COUNT; b++) cr_assert_not_null(kn_sc_binary_expr((kn_binary_op)b), "binary %d", b);
    cr_assert_null(kn_sc_unary_expr(KN_UNARY_COUNT));
}
